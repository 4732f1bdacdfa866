package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// checkReport is what check prints and writes as JSON.
type checkReport struct {
	Case        string             `json:"case"`
	Candidate   string             `json:"candidate"`
	Tensor      string             `json:"tensor"`
	DType       string             `json:"dtype"`
	Chain       string             `json:"chain"`
	M           int                `json:"m"`
	K           int                `json:"k"`
	Metrics     validation.Metrics `json:"metrics"`
	MaxAbsAt    [2]int             `json:"max_abs_at"` // row, column
	WorstRows   []rowError         `json:"worst_rows"`
	MinCosine   float64            `json:"min_cosine"`
	MaxNRMSE    float64            `json:"max_nrmse"`
	Pass        bool               `json:"pass"`
	Why         []string           `json:"why,omitempty"`
	RoundedNote string             `json:"rounded_note,omitempty"`
	Date        string             `json:"date"`
}

type rowError struct {
	Row    int     `json:"row"`
	NRMSE  float64 `json:"nrmse"`
	MaxAbs float64 `json:"max_abs"`
}

// runCheck compares a foreign kernel's output with the oracle on a case.
func runCheck(args []string) error {
	fs := newFlags("check", "--case CASE.safetensors | --checkpoint DIR --layer L --inputs IN.safetensors; --candidate OUT.safetensors [--tensor out] [--min-cosine C --max-nrmse E] [--json FILE|-]")
	casePath := fs.String("case", "", "the case file (inputs, weights, metadata)")
	cf := addCkptFlags(fs)
	candPath := fs.String("candidate", "", "safetensors file holding the candidate output [M, K] (F32, BF16 or F16)")
	tensor := fs.String("tensor", "out", "name of the candidate tensor")
	minCos := fs.Float64("min-cosine", backend.MinCosine, "pass threshold: cosine at least this")
	maxNRMSE := fs.Float64("max-nrmse", backend.MaxNRMSE, "pass threshold: NRMSE at most this")
	jsonPath := fs.String("json", "", "also write the report as JSON to this file (- for stdout; the text then goes to stderr)")
	maxMem := fs.Float64("max-memory-gib", 16, "refuse a case estimated to need more memory than this")
	if err := parse(fs, args); err != nil {
		return err
	}
	if (*casePath == "") == (*cf.dir == "") || *candPath == "" {
		return usagef("--candidate and one of --case or --checkpoint are required")
	}
	if !(*minCos >= -1 && *minCos <= 1) || !(*maxNRMSE >= 0) {
		return usagef("--min-cosine must be in [-1, 1] and --max-nrmse at least 0")
	}
	var out io.Writer = os.Stdout
	if *jsonPath == "-" {
		out = os.Stderr
	}
	// Input problems (missing, malformed or mismatched files) are usage
	// errors here: exit 2, as for a bad flag.
	var c *validation.Case
	var err error
	fromCase := *casePath != ""
	if fromCase {
		if c, err = validation.ReadCase(*casePath); err != nil {
			return asUsage(err)
		}
	} else {
		if c, err = cf.load(); err != nil { // applies --chain itself
			return err
		}
		*casePath = c.Name
	}
	if fromCase && *cf.chain != "" { // --chain overrides the case file's
		if c.Spec.Chain, err = moe.ParseChain(*cf.chain); err != nil {
			return asUsage(err)
		}
	}
	candFile, err := safetensors.ReadFile(*candPath)
	if err != nil {
		return asUsage(fmt.Errorf("candidate: %w", err))
	}
	ct := candFile.Get(*tensor)
	if ct == nil {
		var names []string
		for _, t := range candFile.Tensors {
			names = append(names, t.Name)
		}
		return usagef("candidate %s has no tensor %q (it has %v; --tensor picks one)", *candPath, *tensor, names)
	}
	m, k := c.Input.M, c.Weights.K
	if len(ct.Shape) != 2 || ct.Shape[0] != m || ct.Shape[1] != k {
		return usagef("candidate tensor %q has shape %v; the case's output is [%d, %d]", *tensor, ct.Shape, m, k)
	}
	got32, err := ct.AsFloat32()
	if err != nil {
		return asUsage(fmt.Errorf("candidate: %w", err))
	}
	pairs := 0
	for _, id := range c.Input.TopKIDs {
		if _, ok := c.Spec.EP.Local(int64(id), c.Weights.E); ok {
			pairs++
		}
	}
	w := c.Weights
	if err := checkMemory(fmt.Sprintf("case %s", *casePath), oracleBytes(w.E, w.N, w.K, w.Gated, m, pairs), *maxMem); err != nil {
		return err
	}

	ref, err := c.OracleForward(nil)
	if err != nil {
		return asUsage(err)
	}
	r := checkReport{Case: *casePath, Candidate: *candPath, Tensor: *tensor, DType: string(ct.DType), Chain: c.Spec.Chain.String(),
		M: m, K: k, MinCosine: *minCos, MaxNRMSE: *maxNRMSE, Date: time.Now().UTC().Format(time.RFC3339)}
	if ct.DType != safetensors.F32 {
		// A correct kernel that writes bf16 or f16 differs from the float64
		// oracle by that rounding alone (~1e-3 NRMSE for bf16): compare
		// with the oracle rounded once to the candidate's dtype.
		for i, v := range ref {
			ref[i] = safetensors.RoundFloat64(v, ct.DType)
		}
		r.RoundedNote = fmt.Sprintf("the oracle's output was rounded to %s (nearest even, once) before comparing", ct.DType)
	}
	got := validation.Widen(got32)
	r.Metrics = validation.Compare(got, ref)
	r.MaxAbsAt, r.WorstRows = locateErrors(got, ref, m, k)
	if r.Metrics.Cosine < *minCos {
		r.Why = append(r.Why, fmt.Sprintf("cosine %.7f < %g", r.Metrics.Cosine, *minCos))
	}
	if !(r.Metrics.NRMSE <= *maxNRMSE) {
		r.Why = append(r.Why, fmt.Sprintf("NRMSE %.3g > %g", r.Metrics.NRMSE, *maxNRMSE))
	}
	if r.Metrics.NonFiniteMismatch > 0 {
		r.Why = append(r.Why, fmt.Sprintf("%d non-finite mismatches", r.Metrics.NonFiniteMismatch))
	}
	r.Pass = len(r.Why) == 0
	printCheck(out, &r)
	if *jsonPath != "" {
		data, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if err := writeJSON(*jsonPath, append(data, '\n')); err != nil {
			return err
		}
	}
	if !r.Pass {
		return errFailed
	}
	return nil
}

// locateErrors finds the largest finite absolute error's position and the
// five rows with the largest NRMSE.
func locateErrors(got, ref []float64, m, k int) ([2]int, []rowError) {
	at, worst := [2]int{-1, -1}, -1.0
	rows := make([]rowError, 0, m)
	for i := range m {
		g, rr := got[i*k:(i+1)*k], ref[i*k:(i+1)*k]
		met := validation.Compare(g, rr)
		rows = append(rows, rowError{Row: i, NRMSE: met.NRMSE, MaxAbs: met.MaxAbs})
		for j := range g {
			if d := math.Abs(g[j] - rr[j]); d > worst && !math.IsNaN(d) && !math.IsInf(d, 0) {
				worst, at = d, [2]int{i, j}
			}
		}
	}
	slices.SortStableFunc(rows, func(a, b rowError) int {
		switch {
		case a.NRMSE > b.NRMSE || math.IsNaN(b.NRMSE) && !math.IsNaN(a.NRMSE):
			return -1
		case a.NRMSE < b.NRMSE:
			return 1
		}
		return 0
	})
	return at, rows[:min(5, len(rows))]
}

func printCheck(w io.Writer, r *checkReport) {
	fmt.Fprintf(w, "check %s (tensor %q, %s [%d, %d]) against the oracle on case %s, chain %s\n", r.Candidate, r.Tensor, r.DType, r.M, r.K, r.Case, r.Chain)
	if r.RoundedNote != "" {
		fmt.Fprintf(w, "note: %s\n", r.RoundedNote)
	}
	m := r.Metrics
	fmt.Fprintf(w, "cosine %.7f  nrmse %.3g  max abs %.3g at [%d, %d]  mean abs %.3g  non-finite mismatches %d\n",
		m.Cosine, m.NRMSE, m.MaxAbs, r.MaxAbsAt[0], r.MaxAbsAt[1], m.MeanAbs, m.NonFiniteMismatch)
	fmt.Fprintf(w, "worst rows:")
	for _, row := range r.WorstRows {
		fmt.Fprintf(w, "  %d (nrmse %.3g, max abs %.3g)", row.Row, row.NRMSE, row.MaxAbs)
	}
	fmt.Fprintln(w)
	if r.Pass {
		fmt.Fprintf(w, "PASS (cosine >= %g, NRMSE <= %g, the same non-finite positions)\n", r.MinCosine, r.MaxNRMSE)
	} else {
		fmt.Fprintf(w, "FAIL: %v\n", r.Why)
	}
}
