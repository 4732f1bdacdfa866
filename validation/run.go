package validation

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// Thresholds a backend's output must meet against the oracle on the same
// chain. A GPU accumulates each GEMM in float32 in its own order: that
// alone is ~1e-7 relative, but on the quantized chains it can move an
// intermediate across an MXFP8 rounding boundary, which changes that one
// element by an E4M3 step (up to 2^-4 relative); such flips are rare and
// leave NRMSE far below 1e-3 (see docs/VALIDATION.md).
const (
	MinCosine = 0.99999
	MaxNRMSE  = 1e-3
)

// RunOptions configures Run.
type RunOptions struct {
	Suite       string // smoke, real, large, all
	Activation  activation.Kind
	Chain       moe.Chain
	Recipe      mxfp.Recipe
	RequireSitu bool // fail at once if the backend cannot run SiTU
	Runs        int  // forward runs per case for the determinism check (default 3)
	// Only, if set, restricts the suite to the named cases.
	Only []string
	// PerExpertParams gives every local expert its own activation
	// parameters (scaled copies of the defaults) instead of one shared set.
	PerExpertParams bool
	// PreQuantized passes x to the backend as MXFP8 (quantized on the host
	// with the case's recipe) instead of float32; the oracle still gets
	// float32 x, so this also checks that the two input paths agree.
	PreQuantized bool
	// Progress, if set, is called before each case.
	Progress func(done, total int, name string)
	// OnResult, if set, is called with each case's result as it finishes.
	OnResult func(Result)
}

// Case statuses.
const (
	StatusPass        = "PASS"
	StatusFail        = "FAIL"
	StatusUnsupported = "UNSUPPORTED" // Prepare refused it with backend.ErrUnsupported
	StatusError       = "ERROR"
)

// Result is one case's outcome.
type Result struct {
	Name          string  `json:"name"`
	Shape         string  `json:"shape"`
	Status        string  `json:"status"` // PASS, FAIL, UNSUPPORTED, ERROR
	Metrics       Metrics `json:"metrics"`
	RowsChecked   int     `json:"rows_checked"`
	Deterministic bool    `json:"deterministic"`
	GraphChecked  bool    `json:"graph_checked"`
	GraphEqual    bool    `json:"graph_equal"`
	Seconds       float64 `json:"seconds"`
	Detail        string  `json:"detail,omitempty"`
}

// Passed reports whether the result is a pass.
func (r *Result) Passed() bool { return r.Status == StatusPass }

// weightKey identifies a weight set and the layer prepared from it (cases
// of one run differ in nothing else that Prepare sees but the EP rank).
type weightKey struct {
	seed    uint64
	k, n, e int
	gated   bool
	biases  bool
	ep      moe.EP
}

// Validate runs a suite of the validation matrix on b and compares each
// case with the oracle. It returns an error only for a bad request (unknown
// suite, SiTU required but missing); case failures are in the results.
func Run(b backend.Backend, opts RunOptions) ([]Result, error) {
	caps := b.Capabilities()
	if opts.RequireSitu && !slices.Contains(caps.Activations, activation.Situ) {
		return nil, fmt.Errorf("%w: backend %q cannot run SiTU (--require-situ); use the %q backend", backend.ErrUnsupported, b.Name(), backend.GoName)
	}
	specs, err := ValidationMatrix(opts.Suite, opts.Activation, opts.Chain, opts.Recipe)
	if err != nil {
		return nil, err
	}
	if opts.Runs < 1 {
		opts.Runs = 3
	}
	if opts.Only != nil {
		var keep []CaseSpec
		for _, s := range specs {
			if slices.Contains(opts.Only, s.Name) {
				keep = append(keep, s)
			}
		}
		specs = keep
	}
	weights := map[weightKey]*moe.Weights{}
	layers := map[weightKey]backend.Layer{}
	oracles := map[weightKey]*moe.Oracle{}
	defer func() {
		for _, l := range layers {
			l.Close()
		}
	}()
	var results []Result
	for i := range specs {
		s := &specs[i]
		if opts.Progress != nil {
			opts.Progress(i, len(specs), s.Name)
		}
		start := time.Now()
		r := Result{Name: s.Name, Shape: s.Shape()}
		key := weightKey{s.WeightSeed, s.K, s.N, s.ELocal, s.Activation.IsGated(), s.Biases, s.LayerSpec().EP}
		if opts.PerExpertParams {
			s.Params = perExpertParams(s.ELocal)
		}
		w := weights[key]
		var err error
		if w == nil {
			w, err = GenerateWeights(s)
			weights[key] = w
		}
		var c *Case
		if err == nil {
			c, err = GenerateCase(s, w)
		}
		if err == nil {
			err = runCase(&r, b, c, s, key, layers, oracles, opts)
		}
		if err != nil {
			r.Status, r.Detail = StatusError, err.Error()
			if errors.Is(err, backend.ErrUnsupported) {
				r.Status = StatusUnsupported
			}
		}
		r.Seconds = time.Since(start).Seconds()
		results = append(results, r)
		if opts.OnResult != nil {
			opts.OnResult(r)
		}
	}
	if opts.Progress != nil {
		opts.Progress(len(specs), len(specs), "")
	}
	return results, nil
}

// perExpertParams gives expert e the defaults scaled by 1 + e/8, so that no
// two experts share parameters.
func perExpertParams(e int) []activation.Params {
	ps := make([]activation.Params, e)
	for i := range ps {
		f := 1 + float64(float64(i)/8) // no fused multiply-add: the same factors on every machine
		p := activation.DefaultParams()
		for _, q := range activation.AllParams() {
			q.Set(&p, q.Get(&p)*f)
		}
		ps[i] = p
	}
	return ps
}

// quantizedInput returns in with x replaced by its MXFP8 quantization.
func quantizedInput(in moe.Input, k int, r mxfp.Recipe) moe.Input {
	xq := mxfp.NewMXFP8Matrix(in.M, k)
	xq.Quantize(in.X, r)
	in.X, in.XQ = nil, xq
	return in
}

func runCase(r *Result, b backend.Backend, c *Case, s *CaseSpec, key weightKey,
	layers map[weightKey]backend.Layer, oracles map[weightKey]*moe.Oracle, opts RunOptions) error {
	runs := opts.Runs
	layer := layers[key]
	if layer == nil {
		var err error
		if layer, err = b.Prepare(c.Weights, c.Spec); err != nil {
			return err
		}
		layers[key] = layer
	}
	o := oracles[key]
	if o == nil {
		var err error
		if o, err = moe.NewOracle(c.Weights, c.Spec); err != nil {
			return err
		}
		oracles[key] = o
	}
	rows := SampleRows(s.M, s.SampleRows, s.Seed)
	r.RowsChecked = len(rows)
	var argRows []int
	if s.SampleRows > 0 {
		argRows = rows
	}
	k := c.Weights.K
	in := c.Input
	if opts.PreQuantized {
		in = quantizedInput(in, k, c.Spec.Recipe)
	}
	outs := make([][]float32, runs)
	for i := range outs {
		outs[i] = make([]float32, len(rows)*k)
		for j := range outs[i] {
			outs[i][j] = float32(math.NaN()) // poison: every element must be written
		}
		if err := layer.Forward(outs[i], &in, argRows); err != nil {
			return fmt.Errorf("forward: %w", err)
		}
	}
	r.Deterministic = true
	for i := 1; i < runs; i++ {
		if !bitwiseEqual(outs[0], outs[i]) {
			r.Deterministic = false
		}
	}
	ref := make([]float64, len(rows)*k)
	if err := o.Forward(ref, &c.Input, rows); err != nil {
		return fmt.Errorf("oracle: %w", err)
	}
	// Every backend writes float32: the reference is the oracle's output
	// rounded once to it (as check rounds to the candidate's dtype), so a
	// value past float32's range is the infinity a correct kernel writes.
	for i, v := range ref {
		ref[i] = float64(float32(v))
	}
	r.Metrics = Compare(Widen(outs[0]), ref)

	if gl, ok := layer.(backend.GraphLayer); ok && s.SampleRows == 0 {
		r.GraphChecked, r.GraphEqual = true, true
		for range 2 {
			g := make([]float32, s.M*k)
			if err := gl.ForwardGraph(g, &in); err != nil {
				return fmt.Errorf("graph: %w", err)
			}
			if !bitwiseEqual(g, outs[0]) {
				r.GraphEqual = false
			}
		}
	}

	m := r.Metrics
	var why []string
	if m.Cosine < MinCosine {
		why = append(why, fmt.Sprintf("cosine %.7f < %g", m.Cosine, MinCosine))
	}
	if !(m.NRMSE <= MaxNRMSE) {
		why = append(why, fmt.Sprintf("NRMSE %.3g > %g", m.NRMSE, MaxNRMSE))
	}
	if m.NonFiniteMismatch > 0 {
		why = append(why, fmt.Sprintf("%d non-finite mismatches", m.NonFiniteMismatch))
	}
	if !r.Deterministic {
		why = append(why, fmt.Sprintf("%d runs not bitwise equal", runs))
	}
	if r.GraphChecked && !r.GraphEqual {
		why = append(why, "graph replay differs from eager")
	}
	r.Status = StatusPass
	if len(why) > 0 {
		r.Status = StatusFail
		r.Detail = fmt.Sprint(why)
	}
	return nil
}

func bitwiseEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
