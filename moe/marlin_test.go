package moe

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"kimimoe/activation"
	"kimimoe/mxfp"
)

// The marlin chain, written out for one expert and one token from
// Marlin's epilogue (docs/CONTRACT.md): every GEMM output stored as BF16,
// the BF16 bias added with one more rounding, the activation on those
// BF16 values, and the row multiplied by the BF16 routing weight. The
// oracle must give these bits, and the bf16 chain must not (the two
// chains differ where the test says they do).
func TestMarlinChainRoundsWhereMarlinDoes(t *testing.T) {
	const k, n = 64, 32
	rng := rand.New(rand.NewPCG(9, 4))
	w := NewWeights(1, n, k, true)
	for i := range w.W31 {
		w.W31[i] = uint8(rng.IntN(256))
	}
	for i := range w.W2 {
		w.W2[i] = uint8(rng.IntN(256))
	}
	for i := range w.W31Scale {
		w.W31Scale[i] = uint8(123 + rng.IntN(4))
	}
	for i := range w.W2Scale {
		w.W2Scale[i] = uint8(122 + rng.IntN(4))
	}
	w.W31Bias, w.W2Bias = make([]float32, 2*n), make([]float32, k)
	for i := range w.W31Bias {
		w.W31Bias[i] = float32(rng.NormFloat64()) // not BF16 values: Marlin holds them as BF16
	}
	for i := range w.W2Bias {
		w.W2Bias[i] = float32(rng.NormFloat64() * 0.3)
	}
	x := make([]float32, k)
	for i := range x {
		x[i] = mxfp.RoundBF16(float32(rng.NormFloat64()))
	}
	const wt = float32(0.3) // not a BF16 value
	in := &Input{M: 1, TopK: 1, X: x, TopKIDs: []int32{0}, TopKWeights: []float32{wt}}
	p := activation.DefaultParams()

	dec := func(codes, scales []uint8, row, cols int) []float64 {
		v := make([]float64, cols)
		for j := range cols {
			b := codes[(row*cols+j)/2]
			if j%2 == 1 {
				b >>= 4
			}
			v[j] = float64(mxfp.DecodeE2M1(b&0xF)) * math.Ldexp(1, int(scales[(row*cols+j)/32])-127)
		}
		return v
	}
	bf := func(v float64) float32 { return mxfp.RoundBF16(float32(v)) }
	h := make([]float32, 2*n)
	for r := range 2 * n {
		s := 0.0
		for j, v := range dec(w.W31, w.W31Scale, r, k) {
			s += v * float64(x[j])
		}
		h[r] = mxfp.RoundBF16(bf(s) + mxfp.RoundBF16(w.W31Bias[r]))
	}
	a := make([]float64, n)
	for i := range n {
		a[i] = float64(mxfp.RoundBF16(activation.Eval32(activation.Situ, &p, h[n+i], h[i])))
	}
	want := make([]float64, k)
	for r := range k {
		s := 0.0
		for j, v := range dec(w.W2, w.W2Scale, r, n) {
			s += v * a[j]
		}
		row := mxfp.RoundBF16(bf(s) + mxfp.RoundBF16(w.W2Bias[r]))
		want[r] = float64(mxfp.RoundBF16(row * mxfp.RoundBF16(wt)))
	}

	spec := LayerSpec{Activation: activation.Situ, Params: []activation.Params{p}, Chain: ChainMarlin, Recipe: mxfp.RecipeRCeil}
	for _, chain := range []Chain{ChainMarlin, ChainBF16} {
		spec.Chain = chain
		o, err := NewOracle(w, spec)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float64, k)
		if err := o.Forward(got, in, nil); err != nil {
			t.Fatal(err)
		}
		diff := 0
		for i := range got {
			if got[i] != want[i] {
				diff++
			}
		}
		switch {
		case chain == ChainMarlin && diff != 0:
			t.Errorf("marlin chain: %d of %d values differ from Marlin's rounding", diff, k)
		case chain == ChainBF16 && diff == 0:
			t.Errorf("bf16 chain gives Marlin's bits: the test cannot tell the chains apart")
		}
	}
}

// An expert outside the layer panics with the call and the range named,
// not a slice error deep inside (a programmer error, as gonum's are).
func TestFC1OutOfRangeNamesTheCall(t *testing.T) {
	w := NewWeights(1, 32, 32, true)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Weights.FC1(5)") {
			t.Errorf("FC1(5) recovered %v", r)
		}
	}()
	w.FC1(5)
}

// An invalid EP owns no expert (it mapped ids before), and a routed
// scaling factor past float32 is refused (it made +Inf weights).
func TestInvalidEPAndScaling(t *testing.T) {
	for _, ep := range []EP{{Size: 2, Rank: 2}, {Size: 2, Rank: -1}, {Size: -3, Rank: 0}} {
		if _, ok := ep.Local(1, 4); ok {
			t.Errorf("%+v maps id 1", ep)
		}
	}
	r := Router{NumExperts: 4, TopK: 2, Scoring: ScoringSigmoid, RoutedScalingFactor: 1e300}
	if err := r.Validate(); err == nil {
		t.Error("routed_scaling_factor 1e300 accepted")
	}
}
