package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

func runValidate(args []string) error {
	fs := newFlags("validate", "[flags]")
	suite := fs.String("suite", "smoke", "suite: "+strings.Join(validation.Suites, ", "))
	name := fs.String("backend", backend.GoName, "backend")
	actName := fs.String("activation", "situ", "activation kind (see below)")
	chainName := fs.String("chain", "mxfp8", "precision chain: exact, mxfp8, flashinfer")
	recipeName := fs.String("recipe", "rceil", "MX scale recipe: floor, rceil")
	requireSitu := fs.Bool("require-situ", false, "fail if the backend cannot run SiTU")
	jsonPath := fs.String("json", "", "also write the results as JSON to this file (- for stdout; the table then goes to stderr)")
	runs := fs.Int("runs", 3, "forward runs per case (bitwise determinism check)")
	gf := addGroupFlags(fs, "replicated, dispatch", "replicated")
	if err := parse(fs, args); err != nil {
		return err
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
	if *runs < 1 || *runs > 100 {
		return usagef("--runs %d: want 1 to 100", *runs)
	}
	var out io.Writer = os.Stdout
	if *jsonPath == "-" {
		out = os.Stderr
	}
	var b backend.Backend
	if group {
		b, err = openGroupBackend(gf)
	} else {
		b, err = backend.Open(*name)
	}
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(out, "backend %s (%s); suite %s; activation %v; chain %v; recipe %v\n", b.Name(), b.Capabilities().Device, *suite, act, chain, recipe)
	fmt.Fprintf(out, "%-24s %-38s %-11s %-10s %-9s %-9s %s\n", "case", "shape", "status", "cosine", "nrmse", "maxabs", "time")
	p := newProgress()
	start := time.Now()
	passed := 0
	res, err := backend.Validate(b, backend.ValidateOptions{
		Suite: *suite, Activation: act, Chain: chain, Recipe: recipe, RequireSitu: *requireSitu, Runs: *runs,
		Progress: func(done, total int, c string) { p.update("case %d/%d %s", done+1, total, c) },
		OnResult: func(r backend.Result) {
			p.clear()
			printResult(out, r)
			if r.Passed() {
				passed++
			}
		},
	})
	p.done()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "validate: %d of %d cases passed in %.1fs\n", passed, len(res), time.Since(start).Seconds())
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

func printResult(w io.Writer, r backend.Result) {
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
