package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"kimimoe/check"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// checkFlags are check's own flags beside the case and override flags.
type checkFlags struct {
	cand, tensor, jsonPath, dir *string
	minCos, maxNRMSE            *float64
	rtol, atol                  *float64
	diagnose                    *bool
	diagRows                    *int
	maxMem                      *float64
}

func (f *checkFlags) options() check.Options {
	o := check.Options{MinCosine: *f.minCos, MaxNRMSE: *f.maxNRMSE, RTol: *f.rtol, ATol: *f.atol, MaxRows: *f.diagRows}
	o.RTolSet, o.ATolSet = true, true
	return o
}

// runCheck compares a foreign kernel's output with the oracle on a case.
func runCheck(args []string) error {
	fs := newFlags("check", "--case CASE.safetensors | --checkpoint DIR --layer L --inputs IN.safetensors; --candidate OUT.safetensors | --dir DIR [--json FILE|-]")
	casePath := fs.String("case", "", "the case file (inputs, weights, metadata); its chain, recipe, activation and EP are used unless a flag overrides them")
	cf := addCkptFlags(fs)
	f := &checkFlags{
		cand:     fs.String("candidate", "", "safetensors file holding the candidate output [M, K] (F32, BF16 or F16)"),
		dir:      fs.String("dir", "", "check every NAME.safetensors case in this folder against its NAME.out.safetensors"),
		tensor:   fs.String("tensor", "out", "name of the candidate tensor"),
		minCos:   fs.Float64("min-cosine", check.DefaultMinCosine, "pass threshold: cosine at least this"),
		maxNRMSE: fs.Float64("max-nrmse", check.DefaultMaxNRMSE, "pass threshold: NRMSE at most this"),
		rtol:     fs.Float64("rtol", check.DefaultRTol, "elements outside atol + rtol*|ref| are counted (torch.testing's bfloat16 default); the verdict is cosine and NRMSE"),
		atol:     fs.Float64("atol", check.DefaultATol, "see --rtol"),
		diagnose: fs.Bool("diagnose", false, "diagnose a passing candidate too (a failing one always is)"),
		diagRows: fs.Int("diagnose-rows", check.DefaultDiagnoseRows, "rows each hypothesis re-runs (sampled when M is larger)"),
		jsonPath: fs.String("json", "", "also write the report as JSON to this file (- for stdout; the text then goes to stderr)"),
		maxMem:   fs.Float64("max-memory-gib", 16, "refuse a case estimated to need more memory than this"),
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case !(*f.minCos >= -1 && *f.minCos <= 1) || !(*f.maxNRMSE >= 0):
		return usagef("--min-cosine must be in [-1, 1] and --max-nrmse at least 0")
	case !(*f.rtol >= 0) || !(*f.atol >= 0):
		return usagef("--rtol and --atol must be at least 0")
	case *f.diagRows < 1:
		return usagef("--diagnose-rows %d: want at least 1", *f.diagRows)
	case !(*f.maxMem > 0):
		return usagef("--max-memory-gib %v: want a positive number", *f.maxMem)
	}
	cf.maxGiB = *f.maxMem
	if *f.dir != "" {
		if *casePath != "" || *cf.dir != "" || *f.cand != "" {
			return usagef("--dir checks a folder of pairs: it takes none of --case, --checkpoint, --candidate")
		}
		return checkDir(fs, cf, f)
	}
	if (*casePath == "") == (*cf.dir == "") || *f.cand == "" {
		return usagef("--candidate and one of --case or --checkpoint are required (or --dir)")
	}
	if err := checkJSONOutput(*f.jsonPath, append(inputsOf(*casePath, *f.cand, *cf.inputs), checkpointFiles(*cf.dir)...)...); err != nil {
		return err
	}
	var out io.Writer = os.Stdout
	if *f.jsonPath == "-" {
		out = os.Stderr
	}
	c, notes, err := cf.loadAny(*casePath)
	if err != nil {
		return err
	}
	if *casePath == "" {
		*casePath = c.Name
	}
	r, err := checkOne(fs, c, notes, *casePath, *f.cand, f, true)
	if err != nil {
		return err
	}
	printCheck(out, r)
	if *f.jsonPath != "" {
		data, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if err := writeJSON(*f.jsonPath, append(data, '\n')); err != nil {
			return err
		}
	}
	if !r.Pass {
		return errFailed
	}
	return nil
}

// checkReport is check.Report with the date of the check.
type checkReport struct {
	*check.Report
	Date string `json:"date"`
}

// checkOne reads the candidate, compares it and diagnoses a failure (or
// every candidate when --diagnose is set and diagnose is true).
func checkOne(fs *flagSet, c *validation.Case, notes []string, casePath, candPath string, f *checkFlags, diagnose bool) (*checkReport, error) {
	candFile, err := safetensors.ReadFile(candPath)
	if err != nil {
		return nil, asUsage(fmt.Errorf("candidate: %w", err))
	}
	ct := candFile.Get(*f.tensor)
	if ct == nil {
		var names []string
		for _, t := range candFile.Tensors {
			names = append(names, fmt.Sprintf("%q", t.Name))
		}
		return nil, usagef("candidate %s has no tensor %q (it has %s; --tensor picks one)", candPath, *f.tensor, strings.Join(names, ", "))
	}
	m, k := c.Input.M, c.Weights.K
	if len(ct.Shape) != 2 || ct.Shape[0] != m || ct.Shape[1] != k {
		return nil, usagef("candidate tensor %q has shape %v; the case's output is [%d, %d]", *f.tensor, ct.Shape, m, k)
	}
	got, err := ct.AsFloat32()
	if err != nil {
		return nil, asUsage(fmt.Errorf("candidate %s: %w", candPath, err))
	}
	w := c.Weights
	need := oracleBytes(w.E, w.N, w.K, w.Gated, m, localSlots(c))
	if diagnose {
		// A hypothesis that changes the codes holds one scratch copy of
		// the weights and its own decoded experts beside the case's, and
		// the collector lets dropped ones linger before it reclaims them
		// (measured: 2.6 GB peak for a 1.4 GB oracle at the Kimi shape).
		need += oracleBytes(w.E, w.N, w.K, w.Gated, 0, 0) * 2
	}
	if err := checkMemory(fmt.Sprintf("case %s", casePath), need, *f.maxMem); err != nil {
		return nil, err
	}
	opts := f.options()
	p := newProgress() // a status line on a terminal: a check at a real shape takes a while
	defer p.done()
	opts.Progress = func(step string) { p.update("%s: %s", casePath, step) }
	rep, err := check.Compare(c, got, ct.DType, opts)
	if err != nil {
		return nil, asUsage(err)
	}
	rep.Case, rep.Candidate, rep.Tensor = casePath, candPath, *f.tensor
	rep.Notes = append(notes, rep.Notes...)
	if diagnose && (!rep.Pass || *f.diagnose) {
		check.Diagnose(c, rep)
	}
	return &checkReport{Report: rep, Date: time.Now().UTC().Format(time.RFC3339)}, nil
}

// localSlots counts the case's (token, slot) pairs on local experts.
func localSlots(c *validation.Case) int {
	n := 0
	for _, id := range c.Input.TopKIDs {
		if _, ok := c.Spec.EP.Local(int64(id), c.Weights.E); ok {
			n++
		}
	}
	return n
}

func pos(p *check.Pos) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("[%d, %d]", p[0], p[1])
}

func printCheck(w io.Writer, r *checkReport) {
	ch := r.Checked
	fmt.Fprintf(w, "check %s (tensor %q, %s [%d, %d]) against the oracle on case %s\n", r.Candidate, r.Tensor, r.DType, r.N/max(ch.K, 1), ch.K, r.Case)
	params := ""
	if ch.Params != "" {
		params = " (" + ch.Params + ")"
	}
	fmt.Fprintf(w, "checked: %s%s, chain %s, recipe %s, %s; M=%d K=%d N=%d, %d local experts, top-%d, ep rank %d of %d: %d of %d slots on local experts, %d rows with none; biases %s\n",
		ch.Activation, params, ch.Chain, ch.Recipe, ch.X, ch.M, ch.K, ch.N, ch.ELocal, ch.TopK, ch.EPRank, ch.EPSize, ch.LocalSlots, ch.Slots, ch.Zero, ch.Biases)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "cosine %.7f  nrmse %.3g  max abs %.3g at [%d, %d]  mean abs %.3g\n",
		float64(r.Cosine), float64(r.NRMSE), float64(r.MaxAbs), r.MaxAbsAt[0], r.MaxAbsAt[1], float64(r.MeanAbs))
	fmt.Fprintf(w, "elements outside atol %g + rtol %g * |ref|: %d of %d (%.3g%%); first at %s, worst at %s\n",
		r.ATol, r.RTol, r.Mismatched, r.N, 100*float64(r.MismatchFrac), pos(r.FirstMismatch), pos(r.WorstMismatch))
	if r.NonFinite > 0 {
		var at []string
		for _, p := range r.NonFinitePositions[:min(10, len(r.NonFinitePositions))] {
			at = append(at, fmt.Sprintf("[%d, %d]", p[0], p[1]))
		}
		more := ""
		if r.NonFinite > 10 {
			more = fmt.Sprintf(" and %d more (all in --json)", r.NonFinite-10)
		}
		fmt.Fprintf(w, "non-finite mismatches: %d, at %s%s\n", r.NonFinite, strings.Join(at, " "), more)
	}
	fmt.Fprintf(w, "worst rows:")
	for _, row := range r.WorstRows {
		fmt.Fprintf(w, "  %d (nrmse %.3g, max abs %.3g)", row.Row, float64(row.NRMSE), float64(row.MaxAbs))
	}
	fmt.Fprintln(w)
	if r.Pass {
		fmt.Fprintf(w, "PASS (cosine >= %g, NRMSE <= %g, the same non-finite positions)\n", r.MinCosine, r.MaxNRMSE)
	} else {
		fmt.Fprintf(w, "FAIL: %s\n", strings.Join(r.Why, "; "))
	}
	for _, o := range r.Observations {
		fmt.Fprintf(w, "observed: %s\n", o)
	}
	if r.Diagnosis == nil {
		return
	}
	if r.DiagnosisNote != "" {
		fmt.Fprintf(w, "diagnosis: %s\n", r.DiagnosisNote)
	}
	if b := r.Best(); b != nil {
		fmt.Fprintf(w, "most likely: %s, %s: nrmse %.3g, cosine %.7f under that hypothesis\n", b.Name, b.What, float64(b.NRMSE), float64(b.Cosine))
	} else if d := r.Closest(); d != nil {
		fmt.Fprintf(w, "no known mistake reproduces the candidate; closest: %s (%s), nrmse %.3g under it against %.3g as given\n", d.Name, d.What, float64(d.NRMSE), float64(r.NRMSE))
	} else {
		fmt.Fprintf(w, "no known mistake reproduces the candidate, nor comes close (each leaves more than a tenth of its NRMSE)\n")
	}
	fmt.Fprintf(w, "hypotheses (best first):\n")
	for _, h := range r.Diagnosis {
		switch {
		case h.Skipped != "":
			fmt.Fprintf(w, "  %-29s skipped: %s\n", h.Name, h.Skipped)
		default:
			mark := ""
			if h.Matches {
				mark = "  MATCHES"
			}
			fmt.Fprintf(w, "  %-29s nrmse %-9.3g cosine %-10.7f %s%s\n", h.Name, float64(h.NRMSE), float64(h.Cosine), h.What, mark)
		}
	}
}

// checkDir checks every NAME.safetensors / NAME.out.safetensors pair of a
// folder: one line each, exit 1 if any fails or cannot be read.
func checkDir(fs *flagSet, cf *ckptFlags, f *checkFlags) error {
	st, err := os.Stat(*f.dir)
	if err != nil {
		return usagef("--dir: %v", err)
	}
	if !st.IsDir() {
		return usagef("--dir %s is not a directory", *f.dir)
	}
	if err := checkJSONOutput(*f.jsonPath); err != nil {
		return err
	}
	if err := cf.checkNames(); err != nil {
		return err
	}
	ents, err := os.ReadDir(*f.dir)
	if err != nil {
		return usagef("--dir: %v", err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".safetensors") && !strings.HasSuffix(n, ".out.safetensors") {
			names = append(names, strings.TrimSuffix(n, ".safetensors"))
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return usagef("--dir %s holds no NAME.safetensors case", *f.dir)
	}
	var out io.Writer = os.Stdout
	if *f.jsonPath == "-" {
		out = os.Stderr
	}
	failed := 0
	var reports []any
	p := newProgress()
	for i, name := range names {
		p.update("case %d/%d %s", i+1, len(names), name)
		casePath := filepath.Join(*f.dir, name+".safetensors")
		candPath := filepath.Join(*f.dir, name+".out.safetensors")
		line, rep := "", (*checkReport)(nil)
		c, notes, err := cf.loadAny(casePath)
		if err == nil {
			if _, serr := os.Stat(candPath); serr != nil {
				err = fmt.Errorf("no candidate %s", filepath.Base(candPath))
			} else {
				rep, err = checkOne(fs, c, notes, casePath, candPath, f, true)
			}
		}
		switch {
		case err != nil:
			failed++
			line = fmt.Sprintf("%-28s ERROR  %v", name, err)
			reports = append(reports, map[string]string{"case": casePath, "error": err.Error()})
		default:
			status := "PASS"
			if !rep.Pass {
				status, failed = "FAIL", failed+1
			}
			line = fmt.Sprintf("%-28s %-6s cosine %.7f  nrmse %.3g  mismatched %d of %d", name, status, float64(rep.Cosine), float64(rep.NRMSE), rep.Mismatched, rep.N)
			if b := rep.Best(); !rep.Pass && b != nil {
				line += "  most likely: " + b.Name
			}
			reports = append(reports, rep)
		}
		p.clear()
		fmt.Fprintln(out, line)
	}
	p.done()
	fmt.Fprintf(out, "check: %d of %d cases passed\n", len(names)-failed, len(names))
	if *f.jsonPath != "" {
		data, err := json.MarshalIndent(map[string]any{"dir": *f.dir, "passed": len(names) - failed, "total": len(names), "reports": reports}, "", "  ")
		if err != nil {
			return err
		}
		if err := writeJSON(*f.jsonPath, append(data, '\n')); err != nil {
			return err
		}
	}
	if failed > 0 {
		return errFailed
	}
	return nil
}
