package moe

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"kimimoe/activation"
	"kimimoe/mxfp"
)

// ErrInput is wrapped by errors about a forward's inputs (shapes, ids out
// of range, NaN weights).
var ErrInput = errors.New("moe: bad input")

// Chain names a precision chain: what happens between the two GEMMs.
//
//	chain       GEMM1 result        activation             intermediate                GEMM2 rows, top-k sum
//	exact       exact               float64                float64, not requantized    exact, float64
//	mxfp8       exact               float64                MXFP8 (the layer's recipe)  exact, float64
//	flashinfer  rounded to bf16     float32, rounded bf16  MXFP8 rceil                 bf16 rows, float32 sum
//	bf16        rounded to float32  float32, rounded bf16  bf16 (x bf16, never MXFP8)  float32, w*y as bf16 rows, float32 sum
//	marlin      rounded to bf16     float32, rounded bf16  bf16 (x bf16, never MXFP8)  bf16, bf16(w)*y as bf16 rows, float32 sum
//
// docs/CONTRACT.md says which kernels round where each chain rounds.
type Chain uint8

const (
	ChainExact Chain = iota + 1
	ChainMXFP8
	ChainFlashInfer
	ChainBF16   // W4A16 with the activation fused on float32 (triton_kernels)
	ChainMarlin // W4A16 with BF16 GEMM outputs and bias, BF16 routing weights (Marlin)
)

// Chains lists every chain.
func Chains() []Chain {
	return []Chain{ChainExact, ChainMXFP8, ChainFlashInfer, ChainBF16, ChainMarlin}
}

// BF16X reports whether the chain takes x as BF16 (W4A16), never MXFP8.
func (c Chain) BF16X() bool { return c == ChainBF16 || c == ChainMarlin }

func (c Chain) String() string {
	switch c {
	case ChainExact:
		return "exact"
	case ChainMXFP8:
		return "mxfp8"
	case ChainFlashInfer:
		return "flashinfer"
	case ChainBF16:
		return "bf16"
	case ChainMarlin:
		return "marlin"
	}
	return fmt.Sprintf("Chain(%d)", uint8(c))
}

// ParseChain accepts exact, mxfp8, flashinfer, bf16 and marlin.
func ParseChain(s string) (Chain, error) {
	for _, c := range Chains() {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("moe: unknown chain %q (want exact, mxfp8, flashinfer, bf16 or marlin)", s)
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

// Validate checks the spec against the weights it will run with. The zero
// LayerSpec is invalid: the error names the first field that is not set.
func (s *LayerSpec) Validate(w *Weights) error {
	if w == nil {
		return fmt.Errorf("%w: weights are nil", ErrInput)
	}
	if err := w.Validate(); err != nil {
		return err
	}
	if !s.Activation.Valid() {
		return fmt.Errorf("moe: LayerSpec.Activation is %v: not a valid kind (set one of activation.Kinds)", s.Activation)
	}
	if s.Activation.IsGated() != w.Gated {
		return fmt.Errorf("moe: activation %v (gated=%v) does not match FC1 weights with %d rows for N=%d", s.Activation, s.Activation.IsGated(), w.Rows(), w.N)
	}
	if len(s.Params) != 1 && len(s.Params) != w.E {
		return fmt.Errorf("moe: LayerSpec.Params has %d activation parameter sets for %d experts (want 1 or %d)", len(s.Params), w.E, w.E)
	}
	for e, p := range s.Params {
		if err := p.Validate(s.Activation); err != nil {
			return fmt.Errorf("moe: expert %d: %w", e, err)
		}
	}
	if s.Chain < ChainExact || s.Chain > ChainMarlin {
		return fmt.Errorf("moe: LayerSpec.Chain is %v: not a valid chain (exact, mxfp8, flashinfer, bf16 or marlin)", s.Chain)
	}
	// RecipeRound is valid for the oracle, which check's diagnosis runs
	// under it; no backend lists it, and no case file can name it.
	if s.Recipe != mxfp.RecipeFloor && s.Recipe != mxfp.RecipeRCeil && s.Recipe != mxfp.RecipeRound {
		return fmt.Errorf("moe: LayerSpec.Recipe is %v: not a valid recipe (floor or rceil)", s.Recipe)
	}
	_, err := s.EP.NumGlobal(w.E)
	return err
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

// MaxGlobalExperts bounds the global expert count: ids are int32.
const MaxGlobalExperts = 1 << 31

// Validate checks the input against K and the global expert count: M >= 0,
// 1 <= top-k <= numGlobal, x or x_q (not both) of [M, K], ids in
// [-1, numGlobal) with no expert twice in one token's slots (-1 may
// repeat), finite routing weights. Errors wrap ErrInput and name the
// tensor; a nil input is an error too.
func (in *Input) Validate(k, numGlobal int) error {
	if in == nil {
		return fmt.Errorf("%w: input is nil", ErrInput)
	}
	if in.M < 0 {
		return fmt.Errorf("%w: M = %d is negative", ErrInput, in.M)
	}
	if k <= 0 {
		return fmt.Errorf("%w: K = %d, want a positive layer width", ErrInput, k)
	}
	if in.TopK < 1 || in.TopK > numGlobal {
		return fmt.Errorf("%w: top-k = %d, want 1 <= top-k <= %d (the global expert count)", ErrInput, in.TopK, numGlobal)
	}
	if in.M > 0 && (in.M > math.MaxInt/in.TopK || in.M > math.MaxInt/k) {
		return fmt.Errorf("%w: M = %d tokens of top-%d and K = %d overflow the element count", ErrInput, in.M, in.TopK, k)
	}
	switch {
	case in.X != nil && in.XQ != nil:
		return fmt.Errorf("%w: both x and x_q given", ErrInput)
	case in.X != nil && len(in.X) != in.M*k:
		return fmt.Errorf("%w: x has %d values, want [%d, %d] = %d", ErrInput, len(in.X), in.M, k, in.M*k)
	case in.XQ != nil && (in.XQ.Rows != in.M || in.XQ.Cols != k):
		return fmt.Errorf("%w: x_q is [%d, %d], want [%d, %d]", ErrInput, in.XQ.Rows, in.XQ.Cols, in.M, k)
	case in.XQ != nil && len(in.XQ.Codes) != in.M*k:
		return fmt.Errorf("%w: x_q codes hold %d bytes, want [%d, %d] = %d", ErrInput, len(in.XQ.Codes), in.M, k, in.M*k)
	case in.XQ != nil && len(in.XQ.Scales) != in.M*k/32:
		return fmt.Errorf("%w: x_scale holds %d bytes, want [%d, %d] = %d", ErrInput, len(in.XQ.Scales), in.M, k/32, in.M*k/32)
	case in.X == nil && in.XQ == nil && in.M > 0:
		return fmt.Errorf("%w: neither x nor x_q given", ErrInput)
	case len(in.TopKIDs) != in.M*in.TopK:
		return fmt.Errorf("%w: topk_ids has %d entries, want [%d, %d]", ErrInput, len(in.TopKIDs), in.M, in.TopK)
	case len(in.TopKWeights) != in.M*in.TopK:
		return fmt.Errorf("%w: topk_weights has %d entries, want [%d, %d]", ErrInput, len(in.TopKWeights), in.M, in.TopK)
	}
	for i, id := range in.TopKIDs {
		if id < -1 || int(id) >= numGlobal {
			return fmt.Errorf("%w: topk_ids[%d, %d] = %d is outside [-1, %d) (-1 masks a slot; %d global experts)", ErrInput, i/in.TopK, i%in.TopK, id, numGlobal, numGlobal)
		}
	}
	if t, k1, k2, ok := duplicateSlot(in.TopKIDs, in.TopK); ok {
		return fmt.Errorf("%w: token %d routes to expert %d twice (topk_ids[%d, %d] and [%d, %d]); top-k selection never repeats an expert",
			ErrInput, t, in.TopKIDs[t*in.TopK+k1], t, k1, t, k2)
	}
	for i, w := range in.TopKWeights {
		if math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
			return fmt.Errorf("%w: topk_weights[%d, %d] = %v is not finite", ErrInput, i/in.TopK, i%in.TopK, w)
		}
	}
	return nil
}

// duplicateSlot finds a token with one expert id (not -1) in two slots.
func duplicateSlot(ids []int32, topk int) (tok, k1, k2 int, found bool) {
	var sorted []int64 // id<<32 | slot, for large top-k
	for t := 0; t*topk < len(ids); t++ {
		row := ids[t*topk : (t+1)*topk]
		if topk <= 32 {
			for a := range row {
				for b := a + 1; b < len(row); b++ {
					if row[a] >= 0 && row[a] == row[b] {
						return t, a, b, true
					}
				}
			}
			continue
		}
		sorted = sorted[:0]
		for k, id := range row {
			if id >= 0 {
				sorted = append(sorted, int64(id)<<32|int64(k))
			}
		}
		slices.Sort(sorted)
		for i := 1; i < len(sorted); i++ {
			if sorted[i]>>32 == sorted[i-1]>>32 {
				return t, int(sorted[i-1] & 0xFFFFFFFF), int(sorted[i] & 0xFFFFFFFF), true
			}
		}
	}
	return 0, 0, 0, false
}
