package check

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// DefaultDiagnoseRows bounds the rows each hypothesis re-runs: a case with
// more tokens is diagnosed on this many seeded sample rows.
const DefaultDiagnoseRows = 64

// Hypothesis is one known mistake's result against the candidate.
type Hypothesis struct {
	Name    string `json:"hypothesis"`
	What    string `json:"what"`
	NRMSE   Num    `json:"nrmse"`
	Cosine  Num    `json:"cosine"`
	Matches bool   `json:"matches"`
	Skipped string `json:"skipped,omitempty"`
}

// variant is one way a mistake can be made: the case as the kernel
// computed it, given as c or built by make when it is measured. Variants
// that rewrite weights are made one at a time into their scope's scratch
// buffers, so a hypothesis's variants never hold several copies of a
// layer's weights.
type variant struct {
	what string
	c    *validation.Case
	make func() *validation.Case
}

// lazy is a variant made when it is measured.
func lazy(what string, make func() *validation.Case) variant {
	return variant{what: what, make: make}
}

// instance is v's case, made now if v is lazy.
func (v variant) instance() *validation.Case {
	if v.make != nil {
		return v.make()
	}
	return v.c
}

// hypothesis builds the variants of a mistake for a case, or says why it
// does not apply. A variant need only be right on the rows of its scope.
type hypothesis struct {
	name, doc string
	build     func(c *validation.Case, s scope) ([]variant, string)
}

// scope is what a variant is measured on: the local experts that some
// measured row routes to. Variants that rewrite weights rewrite only these
// experts, so a screen on one row copies and decodes a few experts instead
// of the whole layer. Their other experts' bytes are left as they lie in
// scratch, a buffer per source matrix that each variant of the scope
// reuses: the scope's variants are made and measured one at a time.
type scope struct {
	experts []bool
	scratch map[*uint8][]uint8
}

// scopeOf is the scope of rows of c.
func scopeOf(c *validation.Case, rows []int) scope {
	w, in := c.Weights, &c.Input
	s := scope{experts: make([]bool, w.E), scratch: map[*uint8][]uint8{}}
	for _, t := range rows {
		for _, id := range in.TopKIDs[t*in.TopK : (t+1)*in.TopK] {
			if e, ok := c.Spec.EP.Local(int64(id), w.E); ok {
				s.experts[e] = true
			}
		}
	}
	return s
}

// everyExpert is the scope of all of c's experts.
func everyExpert(c *validation.Case) scope {
	s := scope{experts: make([]bool, c.Weights.E), scratch: map[*uint8][]uint8{}}
	for e := range s.experts {
		s.experts[e] = true
	}
	return s
}

// perExpert returns s's scratch buffer for src, holding src's E equal
// parts (one an expert) passed through f for the experts of s; the others'
// bytes are not to be read.
func (s scope) perExpert(src []uint8, f func(dst, src []uint8)) []uint8 {
	if len(src) == 0 {
		return src
	}
	dst, ok := s.scratch[&src[0]]
	if !ok {
		dst = make([]uint8, len(src))
		s.scratch[&src[0]] = dst
	}
	n := len(src) / len(s.experts)
	for e, in := range s.experts {
		if in {
			f(dst[e*n:(e+1)*n], src[e*n:(e+1)*n])
		}
	}
	return dst
}

// Hypotheses lists the mistakes Diagnose tries, in the order ties are
// broken, with the class of bug each stands for.
func Hypotheses() []struct{ Name, Doc string } {
	var out []struct{ Name, Doc string }
	for _, h := range hypotheses {
		out = append(out, struct{ Name, Doc string }{h.name, h.doc})
	}
	return out
}

var hypotheses = []hypothesis{
	{"gate_up_swapped", "FC1's two halves in the other order: [gate; up] given where [up; gate] is expected (vLLM's tests swap [w1; w3] for FlashInfer)", gateUpSwapped},
	{"gate_up_interleaved", "FC1's rows interleaved [g0, u0, g1, u1, ...] (triton_kernels' and GPT-OSS's layout) taken as halves, or halves taken as interleaved", gateUpInterleaved},
	{"recipe_floor", "x (and the mxfp8 chain's intermediate) quantized with the floor recipe (OCP MX v1.0) instead of rceil", recipe(mxfp.RecipeFloor)},
	{"recipe_rceil", "x (and the mxfp8 chain's intermediate) quantized with the rceil recipe instead of floor", recipe(mxfp.RecipeRCeil)},
	{"recipe_round", "x (and the mxfp8 chain's intermediate) quantized with the block exponent rounded to nearest, log2(amax / maxpos), so about half the blocks clip (MLX #4353)", recipe(mxfp.RecipeRound)},
	{"chain_exact", "the exact chain: no requantization of the intermediate", chain(moe.ChainExact)},
	{"chain_mxfp8", "the mxfp8 chain: float64 intermediate requantized to MXFP8 with the layer's recipe", chain(moe.ChainMXFP8)},
	{"chain_flashinfer", "the flashinfer chain: bf16 GEMM1 result and activation, MXFP8 rceil, bf16 GEMM2 rows summed in float32", chain(moe.ChainFlashInfer)},
	{"chain_bf16", "the bf16 chain (W4A16): x as BF16, float32 GEMMs, bf16 intermediate, bf16 weighted rows summed in float32", chain(moe.ChainBF16)},
	{"chain_marlin", "the marlin chain (W4A16 unfused): x as BF16, BF16 GEMM outputs and biases, BF16 routing weights, bf16 rows summed in float32", chain(moe.ChainMarlin)},
	{"activation_params", "the activation's parameters wrong: swapped, left at another model's defaults, or a clamp missing", activationParams},
	{"activation_kind", "another activation run in its place (FlashInfer #4597: the SM90 path ran the wrong activation for SiTU)", activationKind},
	{"routing_weights_unnormalized", "top-k weights not renormalized to sum 1, or renormalized when they should not be", routingUnnormalized},
	{"correction_bias_in_weights", "routing weights taken from the biased scores (sigmoid + correction bias) instead of the unbiased ones", correctionBiasInWeights},
	{"fc1_bias_missing", "the FC1 bias (w31_bias) not added", fc1BiasMissing},
	{"fc2_bias_missing", "the FC2 bias (w2_bias) not added", fc2BiasMissing},
	{"scales_swizzled", "weight scales in FlashInfer's 128x4 swizzled layout read as linear, or linear scales read as swizzled (FlashInfer #3841)", scalesSwizzled},
	{"ep_global_ids", "expert-parallel filtering on local ids where global ids were given, or on global ids where local ids were given", epGlobalIDs},
	{"marlin_scales_unpermuted", "E8M0 scales handed to Marlin in the checkpoint's order, not in the order its prepare step (marlin_permute_scales, then pairs [0, 2, 1, 3]) makes: each 64 output features read one another's scales", marlinScalesUnpermuted},
	{"gate_up_block_interleaved", "FC1's gate and up rows interleaved in blocks of 8, 16, 32 or 64 rows taken as halves, or the reverse (FlashInfer #4874)", gateUpBlockInterleaved},
	{"fp4_nibbles_swapped", "the two E2M1 codes of each weight byte in the other order (triton #5197, ROCm CK #1889)", fp4NibblesSwapped},
	{"scale_exponent_off", "E8M0 weight scales off by one exponent, or by E2M1's emax of 2 (vLLM #43557, #53110)", scaleExponentOff},
	{"routing_weights_not_applied", "the top-k weights never multiplied in: each slot's row added with weight 1", routingWeightsNotApplied},
	{"topk_truncated", "only the first j of the top-k slots summed", topKTruncated},
	{"ep_mask_wrapped", "a -1 (masked) slot taken as the last local expert, as Python's index -1 does (vLLM #46408, #48371)", epMaskWrapped},
	{"x_rounded_to_bf16", "x rounded to BF16 before its MXFP8 quantization, so the block amax and the codes come from BF16 values (torchao #4725, MLX #4353)", xRoundedToBF16},
	{"situ_up_unsaturated", "SiTU's up branch left linear, its linear_beta saturation dropped (transformers #48890)", situUpUnsaturated},
}

// screenRows is how many rows every variant is first measured on: the
// sampled rows where the candidate is furthest from the oracle, which any
// hypothesis that explains the failure must explain.
const screenRows = 4

// screenKeep is how many hypotheses, best first after the screen's first
// stage (one row), go on to its screenRows rows.
const screenKeep = 10

// refineHypotheses is how many hypotheses, best first after the screen,
// are measured again on every sampled row.
const refineHypotheses = 4

// Diagnose re-runs the oracle under each hypothesis on at most
// opts.MaxRows rows of the case (seeded samples; the report lists them) and
// fills r.Diagnosis, sorted by NRMSE against the candidate, skipped
// hypotheses last. Every variant is screened on the sampled row with the
// largest error; the best screenKeep hypotheses go on to the screenRows
// rows with the largest error, each with its best variant of that row
// (and the variants tied with it); the best refineHypotheses of those are
// measured on all sampled rows (stopping at one that reproduces the
// candidate exactly). The others report what they measured last.
// When the candidate is the oracle times one factor, uniform_scale says
// which.
func Diagnose(c *validation.Case, r *Report) {
	if r == nil {
		return
	}
	if c == nil || c.Weights == nil || r.got == nil || len(r.got) != c.Input.M*c.Weights.K || len(r.sampledRef) != len(r.sampled)*c.Weights.K {
		r.DiagnosisNote = "no diagnosis: the report is not Compare's for this case"
		return
	}
	m, k := c.Input.M, c.Weights.K
	rows, ref := r.sampled, r.sampledRef
	if len(rows) < m {
		r.DiagnosisNote = fmt.Sprintf("diagnosed on %d of %d rows (seeded sample; --diagnose-rows raises it)", len(rows), m)
		r.DiagnosisRows = rows
	}
	r.Diagnosis = nil
	// Variants with the same codes share base's decoded experts, and
	// those with the same weights and spec its memo, which starts with
	// Compare's expert outputs of the sampled rows (WithMemo ignores a
	// memo of another case).
	o, err := moe.NewOracle(c.Weights, c.Spec)
	if err != nil {
		r.DiagnosisNote = fmt.Sprintf("no diagnosis: %v", err)
		return
	}
	base := o.WithMemo(r.memo)
	r.memo = nil
	ev := &evaluator{r: r, base: base, k: k}
	screen := worstRows(r.got, ref, rows, k, screenRows)
	// Variants copy the weights they change: each hypothesis's are built
	// when it is measured and dropped after, and built again for the
	// refinement, so at most one hypothesis's copies are alive at a time.
	type pending struct {
		res   Hypothesis
		build func(c *validation.Case, s scope) ([]variant, string)
		best  []int // the variants tied best on the rows last measured
	}
	var ps []pending
	for _, h := range hypotheses {
		ps = append(ps, pending{res: Hypothesis{Name: h.name, What: h.doc}, build: h.build})
	}
	if s, ok := scaleFit(r.got, ref, rows, k); ok {
		ps = append(ps, pending{res: Hypothesis{Name: "uniform_scale", What: "the output a constant times the oracle's"},
			build: func(c *validation.Case, _ scope) ([]variant, string) { return []variant{uniformScale(c, s)}, "" }})
	}
	// The screen's first stage takes the one worst row, the second the
	// screenRows worst for the best screenKeep hypotheses of the first.
	first := worstRows(r.got, ref, rows, k, 1)
	for i := range ps {
		vs, skip := ps[i].build(c, scopeOf(c, first))
		if ps[i].res.Skipped = skip; skip == "" {
			r.opts.progress("diagnosis: hypothesis %d/%d %s on %d row", i+1, len(ps), ps[i].res.Name, len(first))
			ps[i].res, ps[i].best = ev.measure(ps[i].res, vs, first)
		}
	}
	order := make([]int, len(ps))
	ranked := func() {
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmpRank(ps[a].res, ps[b].res) })
	}
	kept := 0
	if len(screen) > len(first) {
		ranked()
		for _, i := range order[:min(screenKeep, len(order))] {
			if p := &ps[i]; p.res.Skipped == "" && !math.IsNaN(float64(p.res.NRMSE)) {
				r.opts.progress("diagnosis: %s on %d rows", p.res.Name, len(screen))
				vs, _ := p.build(c, scopeOf(c, screen))
				tied := make([]variant, len(p.best))
				for j, b := range p.best {
					tied[j] = vs[b]
				}
				var best []int
				p.res, best = ev.measure(p.res, tied, screen)
				for j, b := range best {
					best[j] = p.best[b]
				}
				p.best = best
				kept++
			}
		}
	}
	if len(screen) < len(rows) {
		ranked()
		refined := 0
		for _, i := range order[:min(refineHypotheses, len(order))] {
			if p := &ps[i]; p.res.Skipped == "" && !math.IsNaN(float64(p.res.NRMSE)) {
				r.opts.progress("diagnosis: %s on all %d sampled rows", p.res.Name, len(rows))
				vs, _ := p.build(c, scopeOf(c, rows))
				p.res, _ = ev.measure(p.res, vs[p.best[0]:p.best[0]+1], rows)
				refined++
				// A hypothesis that reproduces the candidate exactly on every
				// sampled row ranks first whatever the others measure.
				if p.res.Matches && p.res.NRMSE == 0 {
					break
				}
			}
		}
		r.DiagnosisNote = strings.TrimPrefix(r.DiagnosisNote+fmt.Sprintf(
			"; every hypothesis screened on the sampled row furthest from the oracle, the best %d (with their best variants there) on the %d furthest, the best %d measured on all %d",
			kept, len(screen), refined, len(rows)), "; ")
	}
	for _, p := range ps {
		r.Diagnosis = append(r.Diagnosis, p.res)
	}
	slices.SortStableFunc(r.Diagnosis, cmpRank)
}

// evaluator runs variants of one case against the candidate.
type evaluator struct {
	r    *Report
	base *moe.Oracle
	k    int
}

// forward is variant c's oracle output on rows, rounded to the candidate's dtype.
func (ev *evaluator) forward(c *validation.Case, rows []int) ([]float64, error) {
	ref := make([]float64, len(rows)*ev.k)
	o, err := ev.base.Derive(c.Weights, c.Spec)
	if err == nil {
		err = o.Forward(ref, &c.Input, rows)
	}
	if err != nil {
		return nil, err
	}
	RoundRef(ref, ev.r.dt)
	return ref, nil
}

// measure scores each variant on rows and keeps the first best in res; it
// returns res and the indices of the variants that score as well as it.
func (ev *evaluator) measure(res Hypothesis, vs []variant, rows []int) (Hypothesis, []int) {
	k := ev.k
	got := make([]float64, 0, len(rows)*k)
	for _, t := range rows {
		got = append(got, ev.r.got[t*k:(t+1)*k]...)
	}
	res.NRMSE, res.Cosine, res.Matches = Num(math.NaN()), Num(math.NaN()), false
	best, have := math.Inf(1), false
	var errs []string
	var tied []int
	for i, v := range vs {
		ref, err := ev.forward(v.instance(), rows)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", v.what, err))
			continue
		}
		met := validation.Compare(got, ref)
		score := met.NRMSE
		if met.NonFiniteMismatch > 0 || math.IsNaN(score) {
			score = math.Inf(1)
		}
		switch {
		case !have || score < best:
			best, have, tied = score, true, []int{i}
			res.NRMSE, res.Cosine, res.What = Num(met.NRMSE), Num(met.Cosine), v.what
			res.Matches = met.Cosine >= ev.r.MinCosine && met.NRMSE <= ev.r.MaxNRMSE && met.NonFiniteMismatch == 0
		case score == best:
			tied = append(tied, i)
		}
	}
	if len(errs) == len(vs) && len(vs) > 0 {
		res.Skipped = fmt.Sprintf("could not be applied: %s", errs[0])
	}
	return res, tied
}

// worstRows returns the n rows of rows (ref holds their oracle output)
// with the largest squared error of the candidate, in increasing order.
func worstRows(got, ref []float64, rows []int, k, n int) []int {
	if len(rows) <= n {
		return rows
	}
	type rowErr struct {
		row int
		err float64
	}
	es := make([]rowErr, len(rows))
	for i, t := range rows {
		e := 0.0
		for j := range k {
			d := got[t*k+j] - ref[i*k+j]
			if !finite(d) {
				d = math.MaxFloat64 / float64(k)
			}
			e += d * d
		}
		es[i] = rowErr{t, e}
	}
	slices.SortStableFunc(es, func(a, b rowErr) int { return cmpFloat(b.err, a.err) })
	out := make([]int, n)
	for i := range out {
		out[i] = es[i].row
	}
	slices.Sort(out)
	return out
}

// scaleFit is the least-squares factor s with candidate ~ s * oracle over
// rows, when it is finite, nonzero and not 1.
func scaleFit(got, ref []float64, rows []int, k int) (float64, bool) {
	gr, rr := 0.0, 0.0
	for i, t := range rows {
		for j := range k {
			g, f := got[t*k+j], ref[i*k+j]
			if finite(g) && finite(f) {
				gr += g * f
				rr += f * f
			}
		}
	}
	s := gr / rr
	return s, finite(s) && s != 0 && math.Abs(s-1) > 1e-6
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpRank(a, b Hypothesis) int { return cmpFloat(rank(a), rank(b)) }

// rank orders hypotheses: computed ones by NRMSE (NaN after every number),
// skipped ones last.
func rank(h Hypothesis) float64 {
	switch {
	case h.Skipped != "":
		return math.MaxFloat64
	case math.IsNaN(float64(h.NRMSE)):
		return math.MaxFloat64 / 2
	}
	return float64(h.NRMSE)
}

// closeEnough is how much of the candidate's NRMSE a hypothesis that does
// not match must remove to be named as the closest: a tenth or less left.
const closeEnough = 0.1

// Closest returns the best hypothesis when none matches but it leaves at
// most closeEnough of the candidate's NRMSE, or nil: a mistake that
// explains little of the failure is not worth a reader's search.
func (r *Report) Closest() *Hypothesis {
	if r.Best() != nil || len(r.Diagnosis) == 0 {
		return nil
	}
	d := &r.Diagnosis[0]
	if d.Skipped != "" || !(float64(d.NRMSE) <= closeEnough*float64(r.NRMSE)) {
		return nil
	}
	return d
}

// Best returns the first matching hypothesis, or nil.
func (r *Report) Best() *Hypothesis {
	for i := range r.Diagnosis {
		if r.Diagnosis[i].Matches {
			return &r.Diagnosis[i]
		}
	}
	return nil
}

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
