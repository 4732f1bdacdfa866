package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

func runValidate(args []string) error {
	fs := newFlags("validate", "[flags]")
	suite := fs.String("suite", "smoke", "suite: "+strings.Join(validation.Suites, ", "))
	name := fs.String("backend", backend.GoName, "backend")
	tune := addTuneFlag(fs)
	actName := fs.String("activation", "situ", "activation kind (see below)")
	chainName := fs.String("chain", "mxfp8", "precision chain: exact, mxfp8, flashinfer, bf16, marlin")
	recipeName := fs.String("recipe", "rceil", "MX scale recipe: floor, rceil")
	requireSitu := fs.Bool("require-situ", false, "fail if the backend cannot run SiTU")
	jsonPath := fs.String("json", "", "also write the results as JSON to this file (- for stdout; the table then goes to stderr)")
	runs := fs.Int("runs", 3, "forward runs per case (bitwise determinism check)")
	writeCases := fs.String("write-cases", "", "instead of validating: write each case of the suite as DIR/NAME.safetensors with its oracle output DIR/NAME.out.safetensors (what check --dir reads)")
	gf := addGroupFlags(fs, "replicated, dispatch", "replicated")
	maxMem := fs.Float64("max-memory-gib", 16, "refuse a suite whose largest case is estimated to need more memory than this")
	if err := parse(fs, args); err != nil {
		return err
	}
	if !(*maxMem > 0) {
		return usagef("--max-memory-gib %v: want a positive number", *maxMem)
	}
	group, err := gf.check(*name)
	if err != nil {
		return err
	}
	act, err := activation.ParseKind(*actName)
	if err != nil {
		return asUsage(err)
	}
	chain, err := moe.ParseChain(*chainName)
	if err != nil {
		return asUsage(err)
	}
	recipe, err := mxfp.ParseRecipe(*recipeName)
	if err != nil {
		return asUsage(err)
	}
	if !validSuite(*suite) {
		return usagef("unknown suite %q (want %s)", *suite, strings.Join(validation.Suites, ", "))
	}
	if *suite == "gpt-oss" { // the models' own activation (validation.GPTOSS)
		if fs.set("activation") && act != activation.SwigluBias {
			return usagef("--suite gpt-oss runs GPT-OSS's own activation, swiglu_oai: drop --activation %s", act)
		}
		act = activation.SwigluBias
	}
	if *runs < 1 || *runs > 100 {
		return usagef("--runs %d: want 1 to 100", *runs)
	}
	specs, err := validation.ValidationMatrix(*suite, act, chain, recipe)
	if err != nil {
		return asUsage(err)
	}
	need, disk := suiteBytes(specs)
	if err := checkMemory(fmt.Sprintf("--suite %s (its largest case)", *suite), need, *maxMem); err != nil {
		return err
	}
	if *writeCases != "" {
		if err := refuseTune(*name, *tune, "with --write-cases (the go oracle writes the cases)"); err != nil {
			return err
		}
		if *jsonPath != "" {
			return usagef("--write-cases writes cases, not a validation report: drop --json")
		}
		fmt.Printf("writing %d cases of --suite %s to %s: about %s\n", len(specs), *suite, *writeCases, byteSize(disk))
		return writeSuiteCases(*writeCases, *suite, specs)
	}
	if err := checkJSONOutput(*jsonPath); err != nil {
		return err
	}
	var out io.Writer = os.Stdout
	if *jsonPath == "-" {
		out = os.Stderr
	}
	var b backend.Backend
	if group {
		if err = refuseTune(*name, *tune, "with several devices (--devices, RANK and WORLD_SIZE)"); err == nil {
			b, err = openGroupBackend(gf)
		}
	} else {
		b, _, err = openTuned(*name, *tune)
	}
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(out, "backend %s (%s); suite %s; activation %v; chain %v; recipe %v\n", b.Name(), b.Capabilities().Device, *suite, act, chain, recipe)
	fmt.Fprintf(out, "%-24s %-38s %-11s %-10s %-9s %-9s %s\n", "case", "shape", "status", "cosine", "nrmse", "maxabs", "time")
	p := newProgress()
	start := time.Now()
	res, err := validation.Run(b, validation.RunOptions{
		Suite: *suite, Activation: act, Chain: chain, Recipe: recipe, RequireSitu: *requireSitu, Runs: *runs,
		Progress: func(done, total int, c string) { p.update("case %d/%d %s", done+1, total, c) },
		OnResult: func(r validation.Result) {
			p.clear()
			printResult(out, r)
		},
	})
	p.done()
	if err != nil {
		return err
	}
	summary, passed := validateSummary(res, b.Name(), time.Since(start))
	fmt.Fprintln(out, summary)
	if *jsonPath != "" {
		doc := map[string]any{"backend": b.Name(), "device": b.Capabilities().Device, "suite": *suite,
			"activation": act.String(), "chain": chain.String(), "recipe": recipe.String(),
			"date": time.Now().UTC().Format(time.RFC3339), "results": res}
		if group {
			doc["devices"], doc["mode"] = gf.devices, gf.mode
			if gf.perRank {
				doc["rank"] = gf.rank
			}
		}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		if err := writeJSON(*jsonPath, append(data, '\n')); err != nil {
			return err
		}
	}
	if passed != len(res) {
		return errFailed
	}
	return nil
}

func validSuite(s string) bool {
	for _, v := range validation.Suites {
		if v == s {
			return true
		}
	}
	return false
}

func printResult(w io.Writer, r validation.Result) {
	m := r.Metrics
	fmt.Fprintf(w, "%-24s %-38s %-11s %-10.7f %-9.3g %-9.3g %.2fs", r.Name, r.Shape, r.Status, m.Cosine, m.NRMSE, m.MaxAbs, r.Seconds)
	if r.RowsChecked > 0 && strings.HasPrefix(r.Name, "kimi_m") {
		fmt.Fprintf(w, " (%d rows checked)", r.RowsChecked)
	}
	if r.GraphChecked {
		fmt.Fprintf(w, " graph=%v", r.GraphEqual)
	}
	if r.Detail != "" {
		fmt.Fprintf(w, "  %s", r.Detail)
	}
	fmt.Fprintln(w)
}

// writeSuiteCases writes the suite's cases and their oracle outputs into
// dir (created if absent), checking every path before writing the first.
func writeSuiteCases(dir, suite string, specs []validation.CaseSpec) error {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return usagef("--write-cases %s is not a directory", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usagef("--write-cases: %v", err)
	}
	for _, s := range specs {
		for _, name := range []string{s.Name + ".safetensors", s.Name + ".out.safetensors"} {
			// A link in the folder points outside what --write-cases names:
			// writing through it would replace a file the user never named.
			if st, err := os.Lstat(filepath.Join(dir, name)); err == nil && st.Mode()&os.ModeSymlink != 0 {
				return usagef("--write-cases %s: %s is a symbolic link; refusing to write through it", dir, name)
			}
			if err := checkOutput("write-cases", filepath.Join(dir, name), kindSafetensors); err != nil {
				return err
			}
		}
	}
	p := newProgress()
	defer p.done()
	weights := map[[5]uint64]*moe.Weights{}
	for i := range specs {
		s := &specs[i]
		p.update("case %d/%d %s", i+1, len(specs), s.Name)
		key := [5]uint64{s.WeightSeed, uint64(s.K), uint64(s.N), uint64(s.ELocal), uint64(s.Activation)}
		w := weights[key]
		if w == nil {
			var err error
			if w, err = validation.GenerateWeights(s); err != nil {
				return err
			}
			weights[key] = w
		}
		c, err := validation.GenerateCase(s, w)
		if err != nil {
			return err
		}
		ref, err := c.OracleForward(nil)
		if err != nil {
			return err
		}
		out := make([]float32, len(ref))
		for j, v := range ref {
			out[j] = float32(v)
		}
		casePath := filepath.Join(dir, s.Name+".safetensors")
		if err := validation.WriteCase(casePath, c); err != nil {
			return err
		}
		md := map[string]string{"backend": "oracle", "case": s.Name, "chain": c.Spec.Chain.String(), "recipe": c.Spec.Recipe.String()}
		if err := safetensors.WriteFile(filepath.Join(dir, s.Name+".out.safetensors"),
			[]*safetensors.Tensor{safetensors.FromFloat32("out", []int{c.Input.M, c.Weights.K}, out)}, md); err != nil {
			return err
		}
		p.clear()
		fmt.Printf("wrote %s (+ .out): %s\n", casePath, s.Shape())
	}
	fmt.Printf("validate: wrote %d cases of suite %s to %s (kimimoe check --dir %s checks them)\n", len(specs), suite, dir, dir)
	return nil
}

// validateSummary is validate's last line: the cases passed, and apart
// those the backend refused as unsupported, which are not failures of its
// arithmetic; and the count passed, which sets the exit status.
func validateSummary(res []validation.Result, name string, took time.Duration) (string, int) {
	passed, unsupported := 0, 0
	for _, r := range res {
		switch {
		case r.Passed():
			passed++
		case r.Status == validation.StatusUnsupported:
			unsupported++
		}
	}
	note := ""
	if unsupported > 0 {
		note = fmt.Sprintf(", %d unsupported by backend %s (the go backend runs them)", unsupported, name)
	}
	return fmt.Sprintf("validate: %d of %d cases passed%s in %.1fs", passed, len(res), note, took.Seconds()), passed
}

// suiteBytes estimates a suite's largest case in memory (twice the oracle's
// decoded weights and the forward's rows: validate runs one case at a
// time) and the bytes --write-cases writes (each case's weights, inputs
// and output, twice for the oracle's output file).
func suiteBytes(specs []validation.CaseSpec) (mem, disk float64) {
	for _, s := range specs {
		gated := s.Activation.IsGated()
		// Twice the live bytes: the collector lets the heap double (the
		// gpt-oss suite's 4.6 GiB estimate peaked near 10 GB).
		mem = max(mem, 2*oracleBytes(s.ELocal, s.N, s.K, gated, s.M, s.M*s.TopK))
		rows := float64(s.N)
		if gated {
			rows *= 2
		}
		weights := float64(s.ELocal) * (rows + float64(s.N)) * float64(s.K) * (0.5 + 1.0/32)
		io := float64(s.M) * (float64(s.K)*4*2 + float64(s.TopK)*8)
		disk += weights + io
	}
	return mem, disk
}
