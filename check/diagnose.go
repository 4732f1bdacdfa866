package check

import (
	"fmt"
	"math"
	"slices"
	"strings"

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
