package check

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// ErrCandidate is wrapped by errors about the candidate output (its dtype
// or length).
var ErrCandidate = errors.New("check: bad candidate")

// ErrCase is wrapped by errors about the case itself (absent, without
// weights).
var ErrCase = errors.New("check: bad case")

// Default thresholds. MinCosine and MaxNRMSE decide the verdict (the
// validation matrix's); RTol and ATol only count elements, as
// torch.testing.assert_close does with its bfloat16 defaults.
const (
	DefaultMinCosine = 0.99999
	DefaultMaxNRMSE  = 1e-3
	DefaultRTol      = 1.6e-2
	DefaultATol      = 1e-5
	// MaxNonFinitePositions bounds the positions a report lists; all are
	// counted.
	MaxNonFinitePositions = 100000
)

// Options set the thresholds; the zero value of a field means its default.
type Options struct {
	MinCosine, MaxNRMSE float64
	RTol, ATol          float64
	// ATolSet and RTolSet make a zero ATol or RTol mean zero.
	ATolSet, RTolSet bool
	// MaxRows bounds the rows Diagnose re-runs per hypothesis (default
	// DefaultDiagnoseRows).
	MaxRows int
	// Progress, if set, is told each step of the work as it starts (the
	// oracle's run, each hypothesis), for a status line on long checks.
	Progress func(step string)
}

func (o Options) progress(format string, a ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, a...))
	}
}

// ErrOptions is wrapped by errors about Options (a NaN, infinite or
// negative threshold).
var ErrOptions = errors.New("check: bad options")

// validate refuses thresholds no comparison can use: a NaN one counts
// nothing and passes everything.
func (o Options) validate() error {
	for _, v := range []struct {
		name string
		x    float64
	}{{"MinCosine", o.MinCosine}, {"MaxNRMSE", o.MaxNRMSE}, {"RTol", o.RTol}, {"ATol", o.ATol}} {
		if math.IsNaN(v.x) || math.IsInf(v.x, 0) || v.x < 0 && v.name != "MinCosine" {
			return fmt.Errorf("%w: %s = %v, want a finite value >= 0", ErrOptions, v.name, v.x)
		}
	}
	if o.MinCosine > 1 || o.MinCosine < -1 {
		return fmt.Errorf("%w: MinCosine = %v, want one in [-1, 1]", ErrOptions, o.MinCosine)
	}
	if o.MaxRows < 0 {
		return fmt.Errorf("%w: MaxRows = %d is negative", ErrOptions, o.MaxRows)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.MinCosine == 0 {
		o.MinCosine = DefaultMinCosine
	}
	if o.MaxNRMSE == 0 {
		o.MaxNRMSE = DefaultMaxNRMSE
	}
	if o.RTol == 0 && !o.RTolSet {
		o.RTol = DefaultRTol
	}
	if o.ATol == 0 && !o.ATolSet {
		o.ATol = DefaultATol
	}
	if o.MaxRows <= 0 {
		o.MaxRows = DefaultDiagnoseRows
	}
	return o
}

// Num is a float64 that JSON writes as null when it is not finite (the
// report's NullReasons says why).
type Num float64

// MarshalJSON writes a finite value as a number and any other as null.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// Pos is an element's [row, column].
type Pos [2]int

// Checked is what a report compared: the case's layer and routing.
type Checked struct {
	M, K, N, ELocal int
	TopK            int     `json:"top_k"`
	Activation      string  `json:"activation"`
	Params          string  `json:"params,omitempty"`
	Recipe          string  `json:"recipe"`
	Chain           string  `json:"chain"`
	EPRank          int     `json:"ep_rank"`
	EPSize          int     `json:"ep_size"`
	Slots           int     `json:"slots"`
	LocalSlots      int     `json:"local_slots"`
	Biases          string  `json:"biases"`
	X               string  `json:"x"`
	Zero            int     `json:"rows_without_local_slot"`
	Scale           float64 `json:"ref_rms"`
}

// Row is one output row's error.
type Row struct {
	Row    int `json:"row"`
	NRMSE  Num `json:"nrmse"`
	MaxAbs Num `json:"max_abs"`
}

// Report is the outcome of Compare (and Diagnose).
type Report struct {
	Case      string   `json:"case"`
	Candidate string   `json:"candidate"`
	Tensor    string   `json:"tensor"`
	DType     string   `json:"dtype"`
	Checked   Checked  `json:"checked"`
	Notes     []string `json:"notes,omitempty"`

	N        int `json:"n"`
	Cosine   Num `json:"cosine"`
	NRMSE    Num `json:"nrmse"`
	MaxAbs   Num `json:"max_abs"`
	MeanAbs  Num `json:"mean_abs"`
	MaxAbsAt Pos `json:"max_abs_at"`

	RTol          float64 `json:"rtol"`
	ATol          float64 `json:"atol"`
	Mismatched    int     `json:"mismatched"`
	MismatchFrac  Num     `json:"mismatched_fraction"`
	FirstMismatch *Pos    `json:"first_mismatch"`
	WorstMismatch *Pos    `json:"worst_mismatch"` // largest |g - r| / (atol + rtol*|r|)

	NonFinite          int   `json:"nonfinite_mismatches"`
	NonFinitePositions []Pos `json:"nonfinite_positions"`

	WorstRows []Row `json:"worst_rows"`

	MinCosine float64  `json:"min_cosine"`
	MaxNRMSE  float64  `json:"max_nrmse"`
	Pass      bool     `json:"pass"`
	Why       []string `json:"why,omitempty"`

	// Observations are what the failure shows without a hypothesis
	// (observe.go): zero rows, moved rows, errors only in non-finite
	// values, in some experts or in some column blocks, or small and even.
	Observations []string `json:"observations,omitempty"`

	Diagnosis     []Hypothesis `json:"diagnosis,omitempty"`
	DiagnosisRows []int        `json:"diagnosis_rows,omitempty"`
	DiagnosisNote string       `json:"diagnosis_note,omitempty"`

	NullReasons map[string]string `json:"null_reasons,omitempty"`

	opts   Options
	got    []float64 // the candidate widened
	dt     safetensors.DType
	rowBad []bool // per row: outside the thresholds (measure)
	// sampled are the rows Diagnose re-runs and sampledRef the oracle's
	// output on them, kept from Compare's run so the diagnosis does not
	// repeat it.
	sampled    []int
	sampledRef []float64
	// memo holds the expert outputs of Compare's oracle on the sampled
	// rows, kept for Diagnose when the check fails: the routing
	// hypotheses reuse them. Diagnose drops it.
	memo *moe.Memo
}

// oracleRef is the oracle's output on every row of c. The sampled rows
// run through a memo, returned for Diagnose; the others do not, so the
// memo stays at most the sample's size (K float64s a routed token and
// local expert).
func oracleRef(c *validation.Case, sampled []int) ([]float64, *moe.Memo, error) {
	o, err := moe.NewOracle(c.Weights, c.Spec)
	if err != nil {
		return nil, nil, err
	}
	memo := o.WithMemo(nil)
	m, k := c.Input.M, c.Weights.K
	in := make([]bool, m)
	for _, t := range sampled {
		in[t] = true
	}
	var rest []int
	for t := range m {
		if !in[t] {
			rest = append(rest, t)
		}
	}
	a, b := make([]float64, len(sampled)*k), make([]float64, len(rest)*k)
	if err := memo.Forward(a, &c.Input, sampled); err != nil {
		return nil, nil, err
	}
	if len(rest) > 0 {
		if err := o.Forward(b, &c.Input, rest); err != nil {
			return nil, nil, err
		}
	}
	ref := make([]float64, m*k)
	for i, t := range sampled {
		copy(ref[t*k:(t+1)*k], a[i*k:])
	}
	for i, t := range rest {
		copy(ref[t*k:(t+1)*k], b[i*k:])
	}
	return ref, memo.Memo(), nil
}

// RoundRef rounds the oracle's float64 output once to the candidate's
// dtype (F32, BF16 or F16), in place.
func RoundRef(ref []float64, d safetensors.DType) {
	for i, v := range ref {
		ref[i] = safetensors.RoundFloat64(v, d)
	}
}

// Compare runs the oracle on c and compares the candidate output got [M, K]
// (decoded from a tensor of dtype d: F32, BF16 or F16) with it.
func Compare(c *validation.Case, got []float32, d safetensors.DType, opts Options) (*Report, error) {
	if c == nil || c.Weights == nil {
		return nil, fmt.Errorf("%w: no case (or a case without weights) to compare with", ErrCase)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if d != safetensors.F32 && d != safetensors.BF16 && d != safetensors.F16 {
		return nil, fmt.Errorf("%w: dtype %s, want F32, BF16 or F16", ErrCandidate, d)
	}
	m, k := c.Input.M, c.Weights.K
	if len(got) != m*k {
		return nil, fmt.Errorf("%w: %d values, the case's output is [%d, %d]", ErrCandidate, len(got), m, k)
	}
	opts.progress("the oracle on %d rows of [%d, %d]", m, m, k)
	opts = opts.withDefaults()
	sampled := validation.SampleRows(m, opts.MaxRows, 1)
	ref, memo, err := oracleRef(c, sampled)
	if err != nil {
		return nil, err
	}
	RoundRef(ref, d)
	r := &Report{DType: string(d), Checked: describe(c), N: len(ref), MinCosine: opts.MinCosine, MaxNRMSE: opts.MaxNRMSE,
		RTol: opts.RTol, ATol: opts.ATol, opts: opts, got: validation.Widen(got), dt: d}
	r.Notes = append(r.Notes, fmt.Sprintf("the oracle's output was rounded once to %s (nearest even) before comparing", d))
	if n := notBF16(c); n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("the %v chain takes x as BF16: %d of the case's %d x values are not BF16 values and were rounded to nearest even", c.Spec.Chain, n, m*k))
	}
	r.measure(ref, m, k)
	r.observe(c, ref, m, k)
	r.sampled = sampled
	if !r.Pass {
		r.memo = memo
	}
	r.sampledRef = make([]float64, 0, len(r.sampled)*k)
	for _, t := range r.sampled {
		r.sampledRef = append(r.sampledRef, ref[t*k:(t+1)*k]...)
	}
	r.Checked.Scale = rms(ref)
	return r, nil
}

// notBF16 counts the float x values of a bf16-chain case that BF16 does
// not hold (0 on the other chains and for an MXFP8 x).
func notBF16(c *validation.Case) int {
	if !c.Spec.Chain.BF16X() {
		return 0
	}
	n := 0
	for _, v := range c.Input.X {
		if mxfp.RoundBF16(v) != v && v == v {
			n++
		}
	}
	return n
}

func rms(v []float64) float64 {
	s, n := 0.0, 0
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			s += x * x
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return math.Sqrt(s / float64(n))
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// measure fills the metrics, the element counts, the rows and the verdict.
func (r *Report) measure(ref []float64, m, k int) {
	got := r.got
	met := validation.Compare(got, ref)
	r.Cosine, r.NRMSE, r.MaxAbs, r.MeanAbs = Num(met.Cosine), Num(met.NRMSE), Num(met.MaxAbs), Num(met.MeanAbs)
	r.MaxAbsAt = Pos{-1, -1}
	worstAbs, worstRatio := -1.0, -1.0
	for i, g := range got {
		rv := ref[i]
		gF, rF := finite(g), finite(rv)
		at := Pos{i / k, i % k}
		if !gF || !rF {
			if !(math.IsNaN(g) && math.IsNaN(rv) || !gF && !rF && g == rv) {
				r.NonFinite++
				r.Mismatched++
				if r.FirstMismatch == nil {
					p := at
					r.FirstMismatch = &p
				}
				if len(r.NonFinitePositions) < MaxNonFinitePositions {
					r.NonFinitePositions = append(r.NonFinitePositions, at)
				}
			}
			continue
		}
		d := math.Abs(g - rv)
		if d > worstAbs {
			worstAbs, r.MaxAbsAt = d, at
		}
		tol := r.ATol + r.RTol*math.Abs(rv)
		if d > tol {
			r.Mismatched++
			if r.FirstMismatch == nil {
				p := at
				r.FirstMismatch = &p
			}
			if ratio := d / tol; ratio > worstRatio {
				worstRatio = ratio
				p := at
				r.WorstMismatch = &p
			}
		}
	}
	if r.NonFinitePositions == nil {
		r.NonFinitePositions = []Pos{}
	}
	if len(got) > 0 {
		r.MismatchFrac = Num(float64(r.Mismatched) / float64(len(got)))
	}
	rows := make([]Row, 0, m)
	zeroRows := 0
	r.rowBad = make([]bool, m)
	for i := range m {
		rm := validation.Compare(got[i*k:(i+1)*k], ref[i*k:(i+1)*k])
		rows = append(rows, Row{Row: i, NRMSE: Num(rm.NRMSE), MaxAbs: Num(rm.MaxAbs)})
		r.rowBad[i] = !(rm.NRMSE <= r.MaxNRMSE) || rm.NonFiniteMismatch > 0
		if math.IsInf(rm.NRMSE, 1) {
			zeroRows++
		}
	}
	slices.SortStableFunc(rows, func(a, b Row) int {
		an, bn := float64(a.NRMSE), float64(b.NRMSE)
		switch {
		case math.IsNaN(an) && !math.IsNaN(bn), an > bn:
			return -1
		case math.IsNaN(bn) && !math.IsNaN(an), an < bn:
			return 1
		}
		return 0
	})
	r.WorstRows = rows[:min(5, len(rows))]
	if zeroRows > 0 {
		r.nullReason("worst_rows.nrmse", fmt.Sprintf("%d rows have an all-zero oracle row (no local slot) and a nonzero candidate row: NRMSE is infinite there, written as null", zeroRows))
	}
	if !finite(float64(r.NRMSE)) {
		r.nullReason("nrmse", fmt.Sprintf("%v: the oracle's output is all zero and the candidate's is not", float64(r.NRMSE)))
	}
	r.verdict()
}

func (r *Report) nullReason(key, why string) {
	if r.NullReasons == nil {
		r.NullReasons = map[string]string{}
	}
	r.NullReasons[key] = why
}

func (r *Report) verdict() {
	r.Why = nil
	if !(float64(r.Cosine) >= r.MinCosine) {
		r.Why = append(r.Why, fmt.Sprintf("cosine %.7f < %g", float64(r.Cosine), r.MinCosine))
	}
	if !(float64(r.NRMSE) <= r.MaxNRMSE) {
		r.Why = append(r.Why, fmt.Sprintf("NRMSE %.3g > %g", float64(r.NRMSE), r.MaxNRMSE))
	}
	if r.NonFinite > 0 {
		r.Why = append(r.Why, fmt.Sprintf("%d non-finite mismatches", r.NonFinite))
	}
	r.Pass = len(r.Why) == 0
}

// describe states what a case checks.
func describe(c *validation.Case) Checked {
	w, in, s := c.Weights, &c.Input, &c.Spec
	ep := s.EP.Normalize()
	ch := Checked{M: in.M, K: w.K, N: w.N, ELocal: w.E, TopK: in.TopK, Activation: s.Activation.String(),
		Params: paramString(s.Activation, s.Params), Recipe: s.Recipe.String(), Chain: s.Chain.String(),
		EPRank: ep.Rank, EPSize: ep.Size, Slots: len(in.TopKIDs), X: "x (float, quantized by the recipe)"}
	switch {
	case in.XQ != nil:
		ch.X = "x_q + x_scale (given quantized)"
	case s.Chain.BF16X() && notBF16(c) == 0:
		ch.X = "x (BF16 values, taken as given)"
	case s.Chain.BF16X():
		ch.X = "x (float, rounded to BF16, nearest even)"
	}
	for t := range in.M {
		local := 0
		for _, id := range in.TopKIDs[t*in.TopK : (t+1)*in.TopK] {
			if _, ok := s.EP.Local(int64(id), w.E); ok {
				local++
			}
		}
		ch.LocalSlots += local
		if local == 0 {
			ch.Zero++
		}
	}
	var b []string
	if w.W31Bias != nil {
		b = append(b, "w31_bias")
	}
	if w.W2Bias != nil {
		b = append(b, "w2_bias")
	}
	ch.Biases = "none"
	if b != nil {
		ch.Biases = strings.Join(b, ", ")
	}
	return ch
}

// paramString names the parameters kind reads (one set, or "per expert").
func paramString(k activation.Kind, ps []activation.Params) string {
	if len(ps) == 0 {
		return ""
	}
	one := func(p activation.Params) string {
		var parts []string
		for _, q := range k.Params() {
			parts = append(parts, fmt.Sprintf("%s %g", q.Name, q.Get(&p)))
		}
		return strings.Join(parts, ", ")
	}
	s := one(ps[0])
	if s != "" && len(ps) > 1 {
		s = fmt.Sprintf("per expert (%d sets; expert 0: %s)", len(ps), s)
	}
	return s
}
