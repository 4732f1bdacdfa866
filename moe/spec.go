package moe

import (
	"errors"
	"fmt"
	"math"

	"kimimoe/activation"
	"kimimoe/mxfp"
)

// ErrInput is wrapped by errors about a forward's inputs (shapes, ids out
// of range, NaN weights).
var ErrInput = errors.New("moe: bad input")

// Chain names a precision chain: what happens between the two GEMMs.
//
//	chain       GEMM1 result      activation             intermediate
//	exact       exact             float64                float64, not requantized
//	mxfp8       exact             float64                MXFP8 (the layer's recipe)
//	flashinfer  rounded to bf16   float32, rounded bf16  MXFP8 rceil
type Chain uint8

const (
	ChainExact Chain = iota + 1
	ChainMXFP8
	ChainFlashInfer
)

// Chains lists every chain.
func Chains() []Chain { return []Chain{ChainExact, ChainMXFP8, ChainFlashInfer} }

func (c Chain) String() string {
	switch c {
	case ChainExact:
		return "exact"
	case ChainMXFP8:
		return "mxfp8"
	case ChainFlashInfer:
		return "flashinfer"
	}
	return fmt.Sprintf("Chain(%d)", uint8(c))
}

// ParseChain accepts exact, mxfp8 and flashinfer.
func ParseChain(s string) (Chain, error) {
	for _, c := range Chains() {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("moe: unknown chain %q (want exact, mxfp8 or flashinfer)", s)
}

// LayerSpec is everything about a layer except its weights and inputs.
type LayerSpec struct {
	Activation activation.Kind
	// Params holds one entry shared by all experts, or one per local expert.
	Params []activation.Params
	Chain  Chain
	// Recipe quantizes x (and, on the mxfp8 chain, the intermediate).
	Recipe mxfp.Recipe
	EP     EP
}

// ParamsFor returns expert e's activation parameters.
func (s *LayerSpec) ParamsFor(e int) *activation.Params {
	if len(s.Params) == 1 {
		return &s.Params[0]
	}
	return &s.Params[e]
}

// Validate checks the spec against the weights it will run with.
func (s *LayerSpec) Validate(w *Weights) error {
	if err := w.Validate(); err != nil {
		return err
	}
	if !s.Activation.Valid() {
		return fmt.Errorf("moe: invalid activation %v", s.Activation)
	}
	if s.Activation.IsGated() != w.Gated {
		return fmt.Errorf("moe: activation %v (gated=%v) does not match FC1 weights with %d rows for N=%d", s.Activation, s.Activation.IsGated(), w.Rows(), w.N)
	}
	if len(s.Params) != 1 && len(s.Params) != w.E {
		return fmt.Errorf("moe: %d activation parameter sets for %d experts (want 1 or %d)", len(s.Params), w.E, w.E)
	}
	for e, p := range s.Params {
		if err := p.Validate(s.Activation); err != nil {
			return fmt.Errorf("moe: expert %d: %w", e, err)
		}
	}
	if s.Chain < ChainExact || s.Chain > ChainFlashInfer {
		return fmt.Errorf("moe: invalid chain %v", s.Chain)
	}
	if s.Recipe != mxfp.RecipeFloor && s.Recipe != mxfp.RecipeRCeil {
		return fmt.Errorf("moe: invalid recipe %v", s.Recipe)
	}
	return s.EP.Validate()
}

// Input is one forward's tokens and routing.
type Input struct {
	M, TopK int
	// X [M, K] is quantized to MXFP8 with the layer's recipe. Alternatively
	// XQ holds x already quantized (and X is nil).
	X  []float32
	XQ *mxfp.MXFP8Matrix
	// TopKIDs [M, TopK] global expert ids; -1 masks a slot.
	TopKIDs []int32
	// TopKWeights [M, TopK] finite.
	TopKWeights []float32
}

// Validate checks the input against K and the global expert count.
func (in *Input) Validate(k, numGlobal int) error {
	if in.M < 0 || in.TopK < 1 {
		return fmt.Errorf("%w: M = %d, top-k = %d", ErrInput, in.M, in.TopK)
	}
	switch {
	case in.X != nil && in.XQ != nil:
		return fmt.Errorf("%w: both x and x_q given", ErrInput)
	case in.X != nil && len(in.X) != in.M*k:
		return fmt.Errorf("%w: x has %d values, want [%d, %d]", ErrInput, len(in.X), in.M, k)
	case in.XQ != nil && (in.XQ.Rows != in.M || in.XQ.Cols != k || len(in.XQ.Codes) != in.M*k || len(in.XQ.Scales) != in.M*k/32):
		return fmt.Errorf("%w: x_q is [%d, %d], want [%d, %d]", ErrInput, in.XQ.Rows, in.XQ.Cols, in.M, k)
	case in.X == nil && in.XQ == nil && in.M > 0:
		return fmt.Errorf("%w: neither x nor x_q given", ErrInput)
	case len(in.TopKIDs) != in.M*in.TopK:
		return fmt.Errorf("%w: topk_ids has %d entries, want [%d, %d]", ErrInput, len(in.TopKIDs), in.M, in.TopK)
	case len(in.TopKWeights) != in.M*in.TopK:
		return fmt.Errorf("%w: topk_weights has %d entries, want [%d, %d]", ErrInput, len(in.TopKWeights), in.M, in.TopK)
	}
	for i, id := range in.TopKIDs {
		if id < -1 || int(id) >= numGlobal {
			return fmt.Errorf("%w: topk_ids[%d, %d] = %d is outside [-1, %d)", ErrInput, i/in.TopK, i%in.TopK, id, numGlobal)
		}
	}
	for i, w := range in.TopKWeights {
		if math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
			return fmt.Errorf("%w: topk_weights[%d, %d] = %v is not finite", ErrInput, i/in.TopK, i%in.TopK, w)
		}
	}
	return nil
}
