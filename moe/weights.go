package moe

import (
	"fmt"
	"math"

	"kimimoe/mxfp"
)

// Weights holds one rank's local experts in MXFP4, in the layout of the case
// files and of FlashInfer's kernels:
//
//	W31      [E, R, K/2]   R = 2N rows [up; gate] for a gated activation, N otherwise
//	W31Scale [E, R, K/32]
//	W2       [E, K, N/2]
//	W2Scale  [E, K, N/32]
//
//	W31Bias  [E, R]        optional FC1 bias, rows in W31's order ([up; gate])
//	W2Bias   [E, K]        optional FC2 bias
//
// Packed FP4 has element 2j in the low nibble. Scales are E8M0, linear
// layout. The biases (GPT-OSS has them; Kimi-K3 does not) are added to the
// exact GEMM results: see Oracle for the rule of each chain.
type Weights struct {
	E, N, K  int
	Gated    bool
	W31      []uint8
	W31Scale []uint8
	W2       []uint8
	W2Scale  []uint8
	W31Bias  []float32 // nil: none
	W2Bias   []float32 // nil: none
}

// HasBias reports whether either FC has a bias.
func (w *Weights) HasBias() bool { return w.W31Bias != nil || w.W2Bias != nil }

// NewWeights allocates zeroed weights for e experts.
func NewWeights(e, n, k int, gated bool) *Weights {
	w := &Weights{E: e, N: n, K: k, Gated: gated}
	r := w.Rows()
	w.W31 = make([]uint8, e*r*k/2)
	w.W31Scale = make([]uint8, e*r*k/32)
	w.W2 = make([]uint8, e*k*n/2)
	w.W2Scale = make([]uint8, e*k*n/32)
	return w
}

// Rows is the FC1 row count per expert: 2N if gated, else N.
func (w *Weights) Rows() int {
	if w.Gated {
		return 2 * w.N
	}
	return w.N
}

// Validate checks the shapes and that every buffer has its exact length.
func (w *Weights) Validate() error {
	if w.E < 1 || w.N < 32 || w.K < 32 || w.N%32 != 0 || w.K%32 != 0 {
		return fmt.Errorf("moe: weights: E=%d N=%d K=%d: need E >= 1 and N, K positive multiples of 32", w.E, w.N, w.K)
	}
	r := w.Rows()
	if w.E > math.MaxInt/(2*w.N)/w.K {
		return fmt.Errorf("moe: weights: E=%d N=%d K=%d overflow the element count", w.E, w.N, w.K)
	}
	for _, b := range []struct {
		name string
		have int
		want int
	}{
		{"w31", len(w.W31), w.E * r * w.K / 2},
		{"w31_scale", len(w.W31Scale), w.E * r * w.K / 32},
		{"w2", len(w.W2), w.E * w.K * w.N / 2},
		{"w2_scale", len(w.W2Scale), w.E * w.K * w.N / 32},
	} {
		if b.have != b.want {
			return fmt.Errorf("moe: weights: %s has %d bytes, want %d for E=%d N=%d K=%d gated=%v", b.name, b.have, b.want, w.E, w.N, w.K, w.Gated)
		}
	}
	for _, b := range []struct {
		name string
		v    []float32
		want int
	}{{"w31_bias", w.W31Bias, w.E * r}, {"w2_bias", w.W2Bias, w.E * w.K}} {
		if b.v == nil {
			continue
		}
		if len(b.v) != b.want {
			return fmt.Errorf("moe: weights: %s has %d values, want %d ([E, %d])", b.name, len(b.v), b.want, b.want/w.E)
		}
		for i, v := range b.v {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("moe: weights: %s[%d, %d] = %v is not finite", b.name, i/(b.want/w.E), i%(b.want/w.E), v)
			}
		}
	}
	return nil
}

// FC1 returns expert e's W31 as a matrix view [R, K].
func (w *Weights) FC1(e int) *mxfp.MXFP4Matrix {
	w.mustExpert("FC1", e)
	r := w.Rows()
	p, s := r*w.K/2, r*w.K/32
	return &mxfp.MXFP4Matrix{Rows: r, Cols: w.K, Packed: w.W31[e*p : (e+1)*p], Scales: w.W31Scale[e*s : (e+1)*s]}
}

// FC2 returns expert e's W2 as a matrix view [K, N].
func (w *Weights) FC2(e int) *mxfp.MXFP4Matrix {
	w.mustExpert("FC2", e)
	p, s := w.K*w.N/2, w.K*w.N/32
	return &mxfp.MXFP4Matrix{Rows: w.K, Cols: w.N, Packed: w.W2[e*p : (e+1)*p], Scales: w.W2Scale[e*s : (e+1)*s]}
}

// mustExpert panics, naming the call, when e is not a local expert or the
// weights do not hold E experts (a programmer error: Validate first).
func (w *Weights) mustExpert(call string, e int) {
	if e < 0 || e >= w.E {
		panic(fmt.Sprintf("moe: Weights.%s(%d): expert outside [0, %d)", call, e, w.E))
	}
	if len(w.W31) < w.E*w.Rows()*w.K/2 || len(w.W2) < w.E*w.K*w.N/2 || len(w.W31Scale) < w.E*w.Rows()*w.K/32 || len(w.W2Scale) < w.E*w.K*w.N/32 {
		panic(fmt.Sprintf("moe: Weights.%s(%d): the weights hold fewer than E=%d experts (Validate them first)", call, e, w.E))
	}
}
