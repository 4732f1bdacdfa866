package main

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kimimoe/safetensors"
)

// capture runs f with stdout redirected and returns what it printed.
func capture(t *testing.T, f func() error) (string, error) {
	t.Helper()
	r, w, _ := os.Pipe()
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	err := f()
	w.Close()
	os.Stdout = old
	return <-done, err
}

func TestValidateSmoke(t *testing.T) {
	out, err := capture(t, func() error { return runValidate([]string{"--suite", "smoke", "--require-situ"}) })
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "validate: 19 of 19 cases passed") {
		t.Fatalf("unexpected summary:\n%s", out)
	}
}

func TestValidateRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--suite", "huge"}, {"--activation", "swish"}, {"--chain", "fp16"}, {"--backend", "nope"}, {"extra"}} {
		if _, err := capture(t, func() error { return runValidate(args) }); err == nil || errors.Is(err, errFailed) {
			t.Errorf("validate %v: %v, want a usage error", args, err)
		}
	}
}

// run on a golden case reproduces its stored float32 output bitwise.
func TestRunGoldenCase(t *testing.T) {
	in := filepath.Join("..", "..", "testdata", "golden", "situ_mxfp8_rceil.safetensors")
	outPath := filepath.Join(t.TempDir(), "out.safetensors")
	if _, err := capture(t, func() error { return runRun([]string{"--case", in, "--out", outPath}) }); err != nil {
		t.Fatal(err)
	}
	read := func(path, name string) []float32 {
		f, err := safetensors.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		v, err := f.Get(name).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	got, want := read(outPath, "out"), read(in, "out")
	if len(got) != len(want) {
		t.Fatalf("out has %d values, golden %d", len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("out[%d] = %v, golden %v", i, got[i], want[i])
		}
	}
	if _, err := capture(t, func() error { return runRun([]string{"--case", in}) }); err == nil {
		t.Error("run without --out accepted")
	}
	if _, err := capture(t, func() error { return runRun([]string{"--case", "missing.safetensors", "--out", outPath}) }); err == nil {
		t.Error("run on a missing file accepted")
	}
}

func TestPlanCommand(t *testing.T) {
	out, err := capture(t, func() error {
		return runPlan([]string{"--model", "kimi-k3", "--tp", "32", "--ep", "4", "--dp", "1", "--tokens", "8192"})
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"moe_tp_size = tp/ep/dp = 32/4/1 = 8", "10.39 GiB", "15.09 GiB", "-35.3%", "+14.7%"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	if _, err := capture(t, func() error { return runPlan([]string{"--ep", "5"}) }); err == nil {
		t.Error("EP5 of 896 experts accepted")
	}
	out, err = capture(t, func() error { return runPlan([]string{"--json"}) })
	if err != nil || !strings.Contains(out, `"MoETPSize": 8`) {
		t.Errorf("plan --json: %v\n%s", err, out)
	}
}
