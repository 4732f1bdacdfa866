package check

import (
	"fmt"
	"math"
	"slices"

	"kimimoe/activation"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// The hypotheses of this file stand for mistakes serving stacks made in
// 2026 (docs/INTEROP.md lists them with their bug reports): data-layout
// slips in the weights' bytes, routing slips, and SiTU's up branch.

// swapNibbles writes src with the two E2M1 codes of every byte exchanged.
func swapNibbles(dst, src []uint8) {
	for i, b := range src {
		dst[i] = b<<4 | b>>4
	}
}

func fp4NibblesSwapped(c *validation.Case, s scope) ([]variant, string) {
	var vs []variant
	for _, which := range []string{"w31", "w2", "w31 and w2"} {
		vs = append(vs, lazy(fmt.Sprintf("the two E2M1 codes of each byte of %s swapped (element 2j read from the high nibble)", which), func() *validation.Case {
			d := clone(c)
			if which != "w2" {
				d.Weights.W31 = s.perExpert(c.Weights.W31, swapNibbles)
			}
			if which != "w31" {
				d.Weights.W2 = s.perExpert(c.Weights.W2, swapNibbles)
			}
			return d
		}))
	}
	return vs, ""
}

// shiftScales returns a writer of the E8M0 bytes moved by delta, held in
// the finite range 0..254 (255 is NaN).
func shiftScales(delta int) func(dst, src []uint8) {
	return func(dst, src []uint8) {
		for i, b := range src {
			v := int(b)
			if v != 255 {
				v = min(max(v+delta, 0), 254)
			}
			dst[i] = uint8(v)
		}
	}
}

func scaleExponentOff(c *validation.Case, s scope) ([]variant, string) {
	var vs []variant
	// 1: an off-by-one bias (127 against 128); 2: E2M1's emax folded in twice or not at all.
	for _, delta := range []int{1, -1, 2, -2} {
		for _, which := range []string{"w31_scale", "w2_scale", "w31_scale and w2_scale"} {
			why := "an off-by-one exponent bias"
			if delta == 2 || delta == -2 {
				why = "E2M1's emax (2) applied twice or dropped"
			}
			vs = append(vs, lazy(fmt.Sprintf("the E8M0 exponents of %s off by %+d (%s)", which, delta, why), func() *validation.Case {
				d := clone(c)
				if which != "w2_scale" {
					d.Weights.W31Scale = s.perExpert(c.Weights.W31Scale, shiftScales(delta))
				}
				if which != "w31_scale" {
					d.Weights.W2Scale = s.perExpert(c.Weights.W2Scale, shiftScales(delta))
				}
				return d
			}))
		}
	}
	return vs, ""
}

func routingWeightsNotApplied(c *validation.Case, s scope) ([]variant, string) {
	one := func(int, int, int32) float64 { return 1 }
	return []variant{{what: "the routing weights not applied (every slot's row added with weight 1)", c: withWeights(c, false, one)}}, ""
}

func topKTruncated(c *validation.Case, s scope) ([]variant, string) {
	tk := c.Input.TopK
	if tk < 2 {
		return nil, "top-k is 1"
	}
	var vs []variant
	for j := 1; j < tk; j++ {
		d := clone(c)
		d.Input.TopKIDs = make([]int32, len(c.Input.TopKIDs))
		for i, id := range c.Input.TopKIDs {
			if i%tk >= j {
				id = -1
			}
			d.Input.TopKIDs[i] = id
		}
		vs = append(vs, variant{what: fmt.Sprintf("only the first %d of the %d slots summed", j, tk), c: d})
	}
	return vs, ""
}

func epMaskWrapped(c *validation.Case, s scope) ([]variant, string) {
	has := false
	for _, id := range c.Input.TopKIDs {
		has = has || id < 0
	}
	if !has {
		return nil, "the case has no -1 slot"
	}
	ep := c.Spec.EP.Normalize()
	last := int32(ep.Rank*c.Weights.E + c.Weights.E - 1) // the last local expert, as a global id
	d := clone(c)
	in, tk := &d.Input, c.Input.TopK
	in.TopKIDs = slices.Clone(c.Input.TopKIDs)
	in.TopKWeights = slices.Clone(c.Input.TopKWeights)
	for t := range in.M {
		ids, wts := in.TopKIDs[t*tk:(t+1)*tk], in.TopKWeights[t*tk:(t+1)*tk]
		have := slices.Index(ids, last)
		for s, id := range ids {
			switch {
			case id >= 0:
			case have >= 0: // the expert already serves the token: its row counted again
				wts[have] += wts[s]
				wts[s] = 0
			default:
				ids[s], have = last, s
			}
		}
	}
	return []variant{{what: "a -1 (masked) slot wrapped to the last local expert, as an index of -1 does in Python", c: d}}, ""
}

// blockOf gives, for FC1 rows interleaved in blocks of kb rows (gate kb,
// up kb, gate kb, ...), the [up; gate] row that block-layout row j holds.
func blockOf(n, kb int) func(j int) int {
	return func(j int) int {
		b, r := j/(2*kb), j%(2*kb)
		if r < kb {
			return n + b*kb + r // a gate row
		}
		return b*kb + r - kb // an up row
	}
}

// halvesOf is blockOf's inverse: the block-layout row that [up; gate] row i is.
func halvesOf(n, kb int) func(i int) int {
	return func(i int) int {
		if i < n {
			return i/kb*2*kb + kb + i%kb
		}
		g := i - n
		return g/kb*2*kb + g%kb
	}
}

func gateUpBlockInterleaved(c *validation.Case, s scope) ([]variant, string) {
	if !c.Weights.Gated {
		return nil, fmt.Sprintf("activation %v is not gated", c.Spec.Activation)
	}
	n := c.Weights.N
	var vs []variant
	for _, kb := range []int{8, 16, 32, 64} {
		if n%kb != 0 {
			continue
		}
		vs = append(vs,
			lazy(fmt.Sprintf("FC1 rows [up; gate] read as interleaved in blocks of %d (gate %d, up %d, ...)", kb, kb, kb), func() *validation.Case { return permuteFC1(c, s, halvesOf(n, kb)) }),
			lazy(fmt.Sprintf("FC1 rows interleaved in blocks of %d read as halves [up; gate]", kb), func() *validation.Case { return permuteFC1(c, s, blockOf(n, kb)) }))
	}
	if vs == nil {
		return nil, fmt.Sprintf("N = %d is a multiple of no block size 8, 16, 32, 64", n)
	}
	return vs, ""
}

// marlinScaleOrder is where Marlin wants each output feature's E8M0 scale
// within a block of 64 features: position p of its prepared scales holds
// feature marlinScaleOrder[p]. vLLM's prepare_moe_mxfp4_layer_for_marlin
// permutes the [K/32, N] scales in groups of 64 columns
// (marlin_permute_scales below a group of K: [i + 8j for i, j < 8]) and
// then each 4 columns as [0, 2, 1, 3] for its BF16 dequantization.
var marlinScaleOrder = func() (o [64]int) {
	var perm [64]int
	for i := range 8 {
		for j := range 8 {
			perm[8*i+j] = i + 8*j
		}
	}
	pair := [4]int{0, 2, 1, 3}
	for p := range o {
		o[p] = perm[p/4*4+pair[p%4]]
	}
	return o
}()

// marlinScalesUnpermuted is Marlin given the scales in the checkpoint's
// order: it reads feature n's scale from the position where its prepared
// order would hold it, which holds feature marlinScaleOrder^-1(n)'s.
func marlinScalesUnpermuted(c *validation.Case, s scope) ([]variant, string) {
	w := c.Weights
	var inv [64]int
	for p, f := range marlinScaleOrder {
		inv[f] = p
	}
	unpermuted := func(rows, cols int) func(dst, src []uint8) {
		return func(dst, src []uint8) {
			for r := range rows {
				from := r/64*64 + inv[r%64]
				copy(dst[r*cols:(r+1)*cols], src[from*cols:(from+1)*cols])
			}
		}
	}
	var vs []variant
	for _, which := range []string{"w31_scale", "w2_scale", "w31_scale and w2_scale"} {
		if which != "w2_scale" && w.Rows()%64 != 0 || which != "w31_scale" && w.K%64 != 0 {
			continue
		}
		vs = append(vs, lazy(fmt.Sprintf("%s given to Marlin in the checkpoint's order, not permuted as marlin_permute_scales wants", which), func() *validation.Case {
			d := clone(c)
			if which != "w2_scale" {
				d.Weights.W31Scale = s.perExpert(w.W31Scale, unpermuted(w.Rows(), w.K/32))
			}
			if which != "w31_scale" {
				d.Weights.W2Scale = s.perExpert(w.W2Scale, unpermuted(w.K, w.N/32))
			}
			return d
		}))
	}
	if vs == nil {
		return nil, fmt.Sprintf("neither FC1's %d rows nor FC2's %d are a multiple of Marlin's 64-feature scale groups", w.Rows(), w.K)
	}
	return vs, ""
}

// situUpUnsaturated is SiTU with its up branch linear: linear_beta taken
// as infinite, so linear_beta*tanh(u/linear_beta) is u (transformers
// #48890 dropped the saturation).
func situUpUnsaturated(c *validation.Case, s scope) ([]variant, string) {
	if c.Spec.Activation != activation.Situ {
		return nil, fmt.Sprintf("activation %v is not situ", c.Spec.Activation)
	}
	d := clone(c)
	for i := range d.Spec.Params {
		d.Spec.Params[i].SituLinearBeta = noClamp
	}
	return []variant{{what: "SiTU's up branch left linear (u instead of linear_beta*tanh(u/linear_beta))", c: d}}, ""
}

// uniformScale is the variant the candidate is closest to when it is the
// oracle times one factor: every routing weight scaled by s (the output
// is linear in them), stated with s.
func uniformScale(c *validation.Case, s float64) variant {
	w := func(t, slot int, _ int32) float64 { return s * float64(c.Input.TopKWeights[t*c.Input.TopK+slot]) }
	d := withWeights(c, false, w)
	return variant{what: fmt.Sprintf("the output scaled by %.6g (a routed scaling factor applied twice or missed?)", s), c: d}
}

// xRoundedToBF16 stands for an MXFP8 quantization of x that works on x
// rounded to BF16 first (its amax and its codes), where the contract
// quantizes the float32 x given.
func xRoundedToBF16(c *validation.Case, s scope) ([]variant, string) {
	if c.Input.X == nil {
		return nil, "x is given quantized"
	}
	if c.Spec.Chain.BF16X() {
		return nil, fmt.Sprintf("the %v chain takes x as BF16", c.Spec.Chain)
	}
	x := make([]float32, len(c.Input.X))
	same := true
	for i, v := range c.Input.X {
		x[i] = mxfp.RoundBF16(v)
		same = same && math.Float32bits(x[i]) == math.Float32bits(v)
	}
	if same {
		return nil, "x's values are all BF16 values"
	}
	d := clone(c)
	d.Input.X = x
	return []variant{{what: "x rounded to BF16 before its MXFP8 quantization (the block amax and codes taken from BF16 values)", c: d}}, ""
}
