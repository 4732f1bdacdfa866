package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kimimoe/safetensors"
)

// run runs the command line and returns its exit status, stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	var code int
	out, _ := capture(t, func() error { code = dispatch(args, &stdout, &stderr); return nil })
	return code, out + stdout.String(), stderr.String()
}

// writeSmokeCases writes the smoke suite of a chain with --write-cases.
func writeSmokeCases(t *testing.T, chain string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), chain)
	if code, out, errOut := runCmd(t, "validate", "--write-cases", dir, "--suite", "smoke", "--chain", chain); code != 0 {
		t.Fatalf("validate --write-cases: exit %d\n%s%s", code, out, errOut)
	}
	return dir
}

// A correct candidate passes on each chain without flags: check reads the
// chain from the case (before, --chain's default mxfp8 overrode it and the
// flashinfer and exact cases failed).
func TestCheckUsesTheCaseChain(t *testing.T) {
	for _, chain := range []string{"exact", "mxfp8", "flashinfer"} {
		dir := writeSmokeCases(t, chain)
		code, out, errOut := runCmd(t, "check", "--dir", dir)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("check: %d of %d cases passed", smokeCases, smokeCases)) {
			t.Errorf("check --dir on the %s chain's cases: exit %d\n%s%s", chain, code, out, errOut)
		}
		one := filepath.Join(dir, "m8_uniform")
		code, out, _ = runCmd(t, "check", "--case", one+".safetensors", "--candidate", one+".out.safetensors")
		if code != 0 || !strings.Contains(out, "chain "+chain+",") || strings.Contains(out, "from --chain") {
			t.Errorf("check on a %s case: exit %d\n%s", chain, code, out)
		}
	}
}

// A flag overrides the case visibly, and the override is applied.
func TestCheckOverrideIsVisible(t *testing.T) {
	dir := writeSmokeCases(t, "mxfp8")
	one := filepath.Join(dir, "m8_uniform")
	code, out, _ := runCmd(t, "check", "--case", one+".safetensors", "--candidate", one+".out.safetensors", "--chain", "flashinfer")
	if code != 1 || !strings.Contains(out, "note: chain flashinfer (from --chain; the case says mxfp8)") ||
		!strings.Contains(out, "most likely: chain_mxfp8") {
		t.Errorf("check --chain flashinfer on an mxfp8 candidate: exit %d\n%s", code, out)
	}
}

// run --case applies an override as check does, refuses the flags that
// only a checkpoint can use, and refuses invalid values (before, all were
// ignored silently).
func TestRunCaseOverrides(t *testing.T) {
	dir := writeSmokeCases(t, "mxfp8")
	in := filepath.Join(dir, "m8_uniform.safetensors")
	outA, outB := filepath.Join(t.TempDir(), "a.safetensors"), filepath.Join(t.TempDir(), "b.safetensors")
	if code, out, e := runCmd(t, "run", "--case", in, "--out", outA); code != 0 {
		t.Fatalf("run: %d %s %s", code, out, e)
	}
	code, out, e := runCmd(t, "run", "--case", in, "--out", outB, "--chain", "exact")
	if code != 0 || !strings.Contains(out, "note: chain exact (from --chain; the case says mxfp8)") {
		t.Fatalf("run --chain exact: %d %s %s", code, out, e)
	}
	a, _ := safetensors.ReadFile(outA)
	b, _ := safetensors.ReadFile(outB)
	if string(a.Get("out").Data) == string(b.Get("out").Data) {
		t.Error("run --chain exact wrote the mxfp8 chain's output")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--topk", "4"}, "--topk applies to --checkpoint"},
		{[]string{"--layer", "3"}, "--layer applies to --checkpoint"},
		{[]string{"--situ-beta", "-1"}, "situ_beta = -1"},
		{[]string{"--swiglu-limit", "5"}, "--swiglu-limit: activation situ has no such parameter"},
		{[]string{"--ep-rank", "3"}, "ep_rank 3 of ep_size 1"},
		{[]string{"--ep-size", "0"}, "--ep-size 0: want at least 1"},
		{[]string{"--chain", "fp16"}, `unknown chain "fp16"`},
	} {
		code, _, e := runCmd(t, append([]string{"run", "--case", in, "--out", outB}, c.args...)...)
		if code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("run %v: exit %d, stderr %q; want 2 and %q", c.args, code, e, c.want)
		}
	}
}

// check --dir reports a failing pair and exits 1; its JSON encodes.
func TestCheckDirFailure(t *testing.T) {
	dir := writeSmokeCases(t, "mxfp8")
	bad := filepath.Join(dir, "m2_uniform.out.safetensors")
	f, _ := safetensors.ReadFile(bad)
	v, _ := f.Get("out").Float32s()
	for i := range v {
		v[i] *= 1.01
	}
	if err := safetensors.WriteFile(bad, []*safetensors.Tensor{safetensors.FromFloat32("out", f.Get("out").Shape, v)}, nil); err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	code, out, _ := runCmd(t, "check", "--dir", dir, "--json", js)
	if code != 1 || !strings.Contains(out, "m2_uniform                   FAIL") || !strings.Contains(out, fmt.Sprintf("check: %d of %d cases passed", smokeCases-1, smokeCases)) {
		t.Errorf("exit %d\n%s", code, out)
	}
	data, err := os.ReadFile(js)
	var doc map[string]any
	if err != nil || json.Unmarshal(data, &doc) != nil || doc["passed"] != float64(smokeCases-1) {
		t.Errorf("json: %v %.200s", err, data)
	}
}
