package check

import (
	"fmt"
	"math"
	"slices"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// The hypotheses of Diagnose's first list: layout, chain, activation,
// routing and bias mistakes (wild.go holds those seen in 2026).

// clone copies c's headers: the weights, spec and input structs are new,
// their slices shared until a hypothesis replaces one.
func clone(c *validation.Case) *validation.Case {
	d := *c
	w := *c.Weights
	d.Weights = &w
	d.Spec.Params = slices.Clone(c.Spec.Params)
	return &d
}

// permuteFC1 returns c with FC1's rows of the experts of s permuted: new
// row i is old row from(i) (codes, scales and bias).
func permuteFC1(c *validation.Case, s scope, from func(i int) int) *validation.Case {
	d := clone(c)
	w := d.Weights
	r := w.Rows()
	perm := func(dst, src []uint8) {
		width := len(src) / r
		for i := range r {
			copy(dst[i*width:(i+1)*width], src[from(i)*width:])
		}
	}
	w.W31, w.W31Scale = s.perExpert(w.W31, perm), s.perExpert(w.W31Scale, perm)
	if b := w.W31Bias; b != nil {
		w.W31Bias = make([]float32, len(b))
		for e := range w.E {
			for i := range r {
				w.W31Bias[e*r+i] = b[e*r+from(i)]
			}
		}
	}
	return d
}

func gateUpSwapped(c *validation.Case, s scope) ([]variant, string) {
	if !c.Weights.Gated {
		return nil, fmt.Sprintf("activation %v is not gated", c.Spec.Activation)
	}
	n := c.Weights.N
	return []variant{lazy("FC1 halves swapped: [gate; up] given where [up; gate] is expected",
		func() *validation.Case { return permuteFC1(c, s, func(i int) int { return (i + n) % (2 * n) }) })}, ""
}

func gateUpInterleaved(c *validation.Case, s scope) ([]variant, string) {
	if !c.Weights.Gated {
		return nil, fmt.Sprintf("activation %v is not gated", c.Spec.Activation)
	}
	n := c.Weights.N
	asInterleaved := func(i int) int { // the kernel read the halves as [g0, u0, g1, u1, ...]
		if i < n {
			return 2*i + 1
		}
		return 2 * (i - n)
	}
	asHalves := func(j int) int { // the kernel read interleaved rows as [up; gate]
		if j%2 == 0 {
			return n + j/2
		}
		return j / 2
	}
	return []variant{
		lazy("FC1 rows [up; gate] read as interleaved [g0, u0, g1, u1, ...]", func() *validation.Case { return permuteFC1(c, s, asInterleaved) }),
		lazy("FC1 rows interleaved [g0, u0, ...] read as halves [up; gate]", func() *validation.Case { return permuteFC1(c, s, asHalves) }),
	}, ""
}

func recipe(r mxfp.Recipe) func(c *validation.Case, s scope) ([]variant, string) {
	return func(c *validation.Case, _ scope) ([]variant, string) {
		if c.Spec.Recipe == r {
			return nil, fmt.Sprintf("the case's recipe is %v", r)
		}
		if c.Spec.Chain.BF16X() {
			return nil, fmt.Sprintf("the %v chain quantizes nothing with the recipe", c.Spec.Chain)
		}
		if c.Input.XQ != nil && c.Spec.Chain != moe.ChainMXFP8 {
			return nil, fmt.Sprintf("x is given quantized and the %v chain's intermediate does not use the recipe", c.Spec.Chain)
		}
		d := clone(c)
		d.Spec.Recipe = r
		return []variant{{what: fmt.Sprintf("MXFP8 quantization with the %v recipe instead of %v", r, c.Spec.Recipe), c: d}}, ""
	}
}

func chain(ch moe.Chain) func(c *validation.Case, s scope) ([]variant, string) {
	return func(c *validation.Case, _ scope) ([]variant, string) {
		if c.Spec.Chain == ch {
			return nil, fmt.Sprintf("the case's chain is %v", ch)
		}
		d := clone(c)
		d.Spec.Chain = ch
		return []variant{{what: fmt.Sprintf("the %v chain instead of %v", ch, c.Spec.Chain), c: d}}, ""
	}
}

// noClamp stands for a missing clamp: finite (Params.Validate wants it) and
// above any activation input.
const noClamp = 1e30

func activationParams(c *validation.Case, s scope) ([]variant, string) {
	def := activation.DefaultParams()
	type edit struct {
		what string
		f    func(p *activation.Params)
	}
	var edits []edit
	switch c.Spec.Activation {
	case activation.Situ:
		edits = []edit{{"SiTU's betas swapped (situ_beta and situ_linear_beta exchanged)", func(p *activation.Params) {
			p.SituBeta, p.SituLinearBeta = p.SituLinearBeta, p.SituBeta
		}}}
		if c.Spec.Params[0].SituBeta != def.SituBeta || c.Spec.Params[0].SituLinearBeta != def.SituLinearBeta {
			edits = append(edits, edit{"SiTU's Kimi-K3 defaults (4, 25) instead of the case's", func(p *activation.Params) {
				p.SituBeta, p.SituLinearBeta = def.SituBeta, def.SituLinearBeta
			}})
		}
	case activation.SwigluBias:
		edits = []edit{
			{"swiglu_oai without its clamp (swiglu_limit ignored)", func(p *activation.Params) { p.SwigluLimit = noClamp }},
			{"swiglu_oai with alpha 1 (plain SiLU's) instead of the case's", func(p *activation.Params) { p.SwigluAlpha = 1 }},
			{"swiglu_oai without the +beta on up", func(p *activation.Params) { p.SwigluBeta = 0 }},
			{"swiglu_oai at GPT-OSS's defaults (1.702, 1, 7)", func(p *activation.Params) {
				p.SwigluAlpha, p.SwigluBeta, p.SwigluLimit = def.SwigluAlpha, def.SwigluBeta, def.SwigluLimit
			}},
		}
	case activation.SwigluStep:
		edits = []edit{{"swiglu_step without its clamp", func(p *activation.Params) { p.SwigluLimit = noClamp }}}
	default:
		return nil, fmt.Sprintf("activation %v has no parameters", c.Spec.Activation)
	}
	var vs []variant
	for _, e := range edits {
		d := clone(c)
		for i := range d.Spec.Params {
			e.f(&d.Spec.Params[i])
		}
		if slices.Equal(d.Spec.Params, c.Spec.Params) {
			continue
		}
		vs = append(vs, variant{what: e.what, c: d})
	}
	if vs == nil {
		return nil, "no parameter change differs from the case's"
	}
	return vs, ""
}

func activationKind(c *validation.Case, s scope) ([]variant, string) {
	var vs []variant
	for _, k := range activation.Kinds() {
		if k == c.Spec.Activation || k.IsGated() != c.Weights.Gated {
			continue
		}
		d := clone(c)
		d.Spec.Activation = k
		d.Spec.Params = []activation.Params{activation.DefaultParams()}
		vs = append(vs, variant{what: fmt.Sprintf("%v (default parameters) run instead of %v", k, c.Spec.Activation), c: d})
	}
	if vs == nil {
		return nil, "no other activation of the same gating"
	}
	return vs, ""
}

// routerScores returns sigmoid(router_logits) [M, E_global] and the
// correction bias (nil if absent) from the case's extra tensors.
func routerScores(c *validation.Case) (scores []float64, bias []float32, why string) {
	lt := c.Extra["router_logits"]
	if lt == nil {
		return nil, nil, "the case has no router_logits"
	}
	numGlobal, err := c.Spec.EP.NumGlobal(c.Weights.E)
	if err != nil || len(lt.Shape) != 2 || lt.Shape[0] != c.Input.M || lt.Shape[1] != numGlobal {
		return nil, nil, fmt.Sprintf("router_logits has shape %v, not [M, E_global]", lt.Shape)
	}
	lv, err := lt.AsFloat32()
	if err != nil {
		return nil, nil, err.Error()
	}
	scores = make([]float64, len(lv))
	for i, v := range lv {
		scores[i] = 1 / (1 + math.Exp(-float64(v)))
	}
	if b := c.Extra["correction_bias"]; b != nil {
		if bias, err = b.AsFloat32(); err != nil || len(bias) != numGlobal {
			return nil, nil, "correction_bias is not [E_global] floats"
		}
	}
	return scores, bias, ""
}

// withWeights returns c with top-k weights w(t, slot, id), renormalized
// per token when renorm is set (over the slots that are not -1).
func withWeights(c *validation.Case, renorm bool, w func(t, slot int, id int32) float64) *validation.Case {
	d := clone(c)
	in := &d.Input
	tk := in.TopK
	in.TopKWeights = make([]float32, len(c.Input.TopKWeights))
	for t := range in.M {
		sum := 0.0
		vals := make([]float64, tk)
		for s := range tk {
			if id := in.TopKIDs[t*tk+s]; id >= 0 {
				vals[s] = w(t, s, id)
				sum += vals[s]
			}
		}
		for s := range tk {
			v := vals[s]
			if renorm && sum != 0 {
				v /= sum
			}
			in.TopKWeights[t*tk+s] = float32(v)
		}
	}
	return d
}

// renormalized reports whether every token's weights sum to 1 (within
// float32 rounding of the sum).
func renormalized(in *moe.Input) bool {
	for t := range in.M {
		sum := 0.0
		for s := range in.TopK {
			if in.TopKIDs[t*in.TopK+s] >= 0 {
				sum += float64(in.TopKWeights[t*in.TopK+s])
			}
		}
		if math.Abs(sum-1) > 1e-5 {
			return false
		}
	}
	return true
}

func routingUnnormalized(c *validation.Case, s scope) ([]variant, string) {
	given := func(t, s int, _ int32) float64 { return float64(c.Input.TopKWeights[t*c.Input.TopK+s]) }
	norm := renormalized(&c.Input)
	var vs []variant
	if !norm {
		vs = append(vs, variant{what: "top-k weights renormalized to sum 1 where the case's do not", c: withWeights(c, true, given)})
	}
	scores, _, why := routerScores(c)
	if scores != nil {
		ng := len(scores) / max(c.Input.M, 1)
		sc := func(t, _ int, id int32) float64 { return scores[t*ng+int(id)] }
		if norm {
			vs = append(vs, variant{what: "top-k weights left as the sigmoid scores, not renormalized", c: withWeights(c, false, sc)})
		} else {
			vs = append(vs, variant{what: "top-k weights renormalized sigmoid scores where the case's are not", c: withWeights(c, true, sc)})
		}
	}
	if vs == nil {
		return nil, fmt.Sprintf("the weights sum to 1 per token and %s to recover the unnormalized scores", why)
	}
	return vs, ""
}

func correctionBiasInWeights(c *validation.Case, s scope) ([]variant, string) {
	scores, bias, why := routerScores(c)
	if scores == nil {
		return nil, why
	}
	if bias == nil {
		return nil, "the case has no correction_bias"
	}
	ng := len(bias)
	biased := func(t, _ int, id int32) float64 { return scores[t*ng+int(id)] + float64(bias[id]) }
	return []variant{{what: "routing weights from sigmoid + correction bias (the selection scores)", c: withWeights(c, renormalized(&c.Input), biased)}}, ""
}

func fc1BiasMissing(c *validation.Case, s scope) ([]variant, string) {
	if c.Weights.W31Bias == nil {
		return nil, "the case has no w31_bias"
	}
	d := clone(c)
	d.Weights.W31Bias = nil
	return []variant{{what: "no FC1 bias", c: d}}, ""
}

func fc2BiasMissing(c *validation.Case, s scope) ([]variant, string) {
	if c.Weights.W2Bias == nil {
		return nil, "the case has no w2_bias"
	}
	d := clone(c)
	d.Weights.W2Bias = nil
	return []variant{{what: "no FC2 bias", c: d}}, ""
}

func scalesSwizzled(c *validation.Case, s scope) ([]variant, string) {
	w := c.Weights
	readAsSwizzled := func(rows, cols int) func(dst, lin []uint8) {
		return func(dst, lin []uint8) {
			for m := range rows {
				for k := range cols {
					if o := mxfp.Swizzled128x4Offset(m, k, cols); o < len(lin) {
						dst[m*cols+k] = lin[o]
					} // past the buffer: a kernel reads what lies there; 0 stands for it
				}
			}
		}
	}
	readAsLinear := func(rows, cols int) func(dst, lin []uint8) {
		return func(dst, lin []uint8) {
			swz := make([]uint8, mxfp.Swizzled128x4Len(rows, cols))
			mxfp.SwizzleScales128x4(swz, lin, rows, cols)
			copy(dst, swz)
		}
	}
	var vs []variant
	for _, dir := range []struct {
		what string
		f    func(rows, cols int) func(dst, lin []uint8)
	}{{"linear %s read as 128x4 swizzled", readAsSwizzled}, {"128x4 swizzled %s read as linear", readAsLinear}} {
		for _, which := range []string{"w31_scale", "w2_scale", "w31_scale and w2_scale"} {
			vs = append(vs, lazy(fmt.Sprintf(dir.what, which), func() *validation.Case {
				d := clone(c)
				if which != "w2_scale" {
					d.Weights.W31Scale = s.perExpert(w.W31Scale, dir.f(w.Rows(), w.K/32))
				}
				if which != "w31_scale" {
					d.Weights.W2Scale = s.perExpert(w.W2Scale, dir.f(w.K, w.N/32))
				}
				return d
			}))
		}
	}
	return vs, ""
}

func epGlobalIDs(c *validation.Case, s scope) ([]variant, string) {
	ep := c.Spec.EP.Normalize()
	if ep.Size == 1 {
		return nil, "the case has no expert parallelism (ep_size 1)"
	}
	if ep.Rank == 0 {
		return nil, "on EP rank 0 local and global ids coincide"
	}
	e := int32(c.Weights.E)
	lo := int32(ep.Rank) * e
	remap := func(what string, f func(id int32) int32) variant {
		d := clone(c)
		d.Input.TopKIDs = make([]int32, len(c.Input.TopKIDs))
		for i, id := range c.Input.TopKIDs {
			d.Input.TopKIDs[i] = -1
			if id >= 0 {
				d.Input.TopKIDs[i] = f(id)
			}
		}
		return variant{what: what, c: d}
	}
	return []variant{
		remap("global ids filtered as local ids (expert g taken as local expert g)", func(id int32) int32 {
			if id < e {
				return id + lo
			}
			return -1
		}),
		remap("local ids (id - rank*E_local) given where global ids are expected", func(id int32) int32 {
			if id-lo < 0 {
				return -1
			}
			return id - lo
		}),
	}, ""
}
