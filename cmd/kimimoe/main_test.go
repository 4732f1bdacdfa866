package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"kimimoe/activation"
	"kimimoe/checkpoint"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
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
	if !strings.Contains(out, fmt.Sprintf("validate: %d of %d cases passed", smokeCases, smokeCases)) {
		t.Fatalf("unexpected summary:\n%s", out)
	}
}

// The unbounded activations on the non-finite inputs: rceil saturates an
// infinite x to 448 x 2^127 and the output passes float32's range, where
// the go backend writes infinities; compared with the oracle's float64
// values the case failed on the go backend itself ("991 non-finite
// mismatches"), compared with them rounded to float32 it passes.
func TestValidateUnboundedActivations(t *testing.T) {
	for _, act := range []string{"swiglu", "geglu", "geglu_tanh"} {
		out, err := capture(t, func() error { return runValidate([]string{"--suite", "smoke", "--activation", act}) })
		if err != nil || !strings.Contains(out, fmt.Sprintf("validate: %d of %d cases passed", smokeCases, smokeCases)) {
			t.Errorf("validate --activation %s: %v\n%s", act, err, out)
		}
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
	if err != nil || !strings.Contains(out, `"moe_tp_size": 8`) {
		t.Errorf("plan --json: %v\n%s", err, out)
	}
}

// Exit statuses and error printing: usage errors exit 2 and are printed
// once; -h prints help on stdout and exits 0; a failed run exits 1.
func TestExitStatusAndErrorsPrintedOnce(t *testing.T) {
	golden := filepath.Join("..", "..", "testdata", "golden", "situ_mxfp8_rceil.safetensors")
	for _, c := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"validate", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"validate", "--suite", "huge"}, 2, `unknown suite "huge"`},
		{[]string{"chains", "--m", "99999999"}, 2, "not a token count"},
		{[]string{"chains", "--m", "1,0"}, 2, "not a token count"},
		{[]string{"plan", "--ep", "4294967296", "--dp", "4294967296"}, 2, "overflows"},
		{[]string{"run", "--case", golden, "--out", golden}, 2, "is the input file"},
		{[]string{"run", "--case", golden}, 2, "--out and one of --case or --checkpoint are required"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{}, 2, "usage:"},
	} {
		var stdout, stderr strings.Builder
		var code int
		out, _ := capture(t, func() error { code = dispatch(c.args, &stdout, &stderr); return nil })
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, c.code, stderr.String())
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, stderr.String(), c.want)
		}
		if n := strings.Count(stderr.String(), "\n"); c.code != 0 && len(c.args) > 0 && c.args[0] != "nope" && n != 1 {
			t.Errorf("%v: error printed %d times: %q", c.args, n, stderr.String())
		}
		if strings.Contains(out, "usage:") {
			t.Errorf("%v: usage printed on stdout for an error", c.args)
		}
	}
	// The golden case file is untouched by the refused run.
	if _, err := os.Stat(golden); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	var code int
	out, _ := capture(t, func() error { code = dispatch([]string{"validate", "-h"}, &stdout, &stderr); return nil })
	if code != 0 || !strings.Contains(out, "usage: kimimoe validate") || !strings.Contains(out, "swiglu_oai") || stderr.Len() != 0 {
		t.Errorf("validate -h: exit %d, stdout %q, stderr %q", code, out, stderr.String())
	}
}

// --json - writes the JSON document alone to stdout.
func TestPlanAndValidateJSONToStdout(t *testing.T) {
	out, err := capture(t, func() error {
		return runValidate([]string{"--suite", "smoke", "--json", "-"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []struct {
			Name    string         `json:"name"`
			Status  string         `json:"status"`
			Metrics map[string]any `json:"metrics"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%.300s", err, out)
	}
	if len(doc.Results) != smokeCases || doc.Results[0].Status != "PASS" || doc.Results[0].Metrics["cosine"] == nil {
		t.Errorf("unexpected JSON: %+v", doc.Results[:1])
	}
}

// check: a candidate equal to the oracle's output passes (F32, and BF16 /
// F16 candidates against the oracle rounded to their dtype); one off by 1%
// fails with exit 1; a missing tensor or a wrong shape is exit 2.
func TestCheckCommand(t *testing.T) {
	golden := filepath.Join("..", "..", "testdata", "golden", "situ_mxfp8_rceil.safetensors")
	f, err := safetensors.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	out := f.Get("out")
	want, _ := out.Float32s()
	dir := t.TempDir()
	write := func(name string, d safetensors.DType, v []float32, shape []int) string {
		p := filepath.Join(dir, name)
		tt, err := safetensors.FromFloat32As("out", d, shape, v)
		if err != nil {
			t.Fatal(err)
		}
		if err := safetensors.WriteFile(p, []*safetensors.Tensor{tt}, nil); err != nil {
			t.Fatal(err)
		}
		return p
	}
	off := make([]float32, len(want))
	for i, v := range want {
		off[i] = v * 1.01
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"f32 equal", []string{"--candidate", write("f32.st", safetensors.F32, want, out.Shape)}, 0, "PASS"},
		{"bf16", []string{"--candidate", write("bf16.st", safetensors.BF16, want, out.Shape)}, 0, "rounded once to BF16"},
		{"f16", []string{"--candidate", write("f16.st", safetensors.F16, want, out.Shape)}, 0, "rounded once to F16"},
		{"off by 1%", []string{"--candidate", write("off.st", safetensors.F32, off, out.Shape)}, 1, "FAIL: NRMSE"},
		// --chain overrides the case's: the mxfp8 output is ~2% off the exact chain.
		{"other chain", []string{"--candidate", write("f32c.st", safetensors.F32, want, out.Shape), "--chain", "exact"}, 1, "chain exact"},
		{"wrong tensor", []string{"--candidate", write("f32b.st", safetensors.F32, want, out.Shape), "--tensor", "y"}, 2, `has no tensor "y"`},
		{"wrong shape", []string{"--candidate", write("shape.st", safetensors.F32, want, []int{out.Shape[1], out.Shape[0]})}, 2, "shape"},
		{"missing candidate", []string{"--candidate", filepath.Join(dir, "nope")}, 2, "no such file"},
	} {
		var stdout, stderr strings.Builder
		var code int
		got, _ := capture(t, func() error {
			code = dispatch(append([]string{"check", "--case", golden}, c.args...), &stdout, &stderr)
			return nil
		})
		if code != c.code || !strings.Contains(got+stderr.String(), c.want) {
			t.Errorf("%s: exit %d (want %d), output %q %q lacks %q", c.name, code, c.code, got, stderr.String(), c.want)
		}
	}
}

// run --out-dtype writes the output in the asked dtype, rounded from the
// float32 result.
func TestRunOutDType(t *testing.T) {
	in := filepath.Join("..", "..", "testdata", "golden", "situ_mxfp8_rceil.safetensors")
	outPath := filepath.Join(t.TempDir(), "out.safetensors")
	if _, err := capture(t, func() error { return runRun([]string{"--case", in, "--out", outPath, "--out-dtype", "bf16"}) }); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(outPath)
	if err != nil || f.Get("out").DType != safetensors.BF16 {
		t.Fatalf("%v %+v", err, f)
	}
	if err := runRun([]string{"--case", in, "--out", outPath, "--out-dtype", "fp8"}); err == nil {
		t.Error("--out-dtype fp8 accepted")
	}
}

// From a checkpoint to a verdict: a GPT-OSS-layout checkpoint (with
// biases) and an inputs file holding x and router logits; `case` writes a
// case file, `run` on it and `run --checkpoint` give the same output, and
// `check` passes it (and fails a perturbed copy).
func TestCheckpointToVerdict(t *testing.T) {
	dir, ck, inputs := smallCheckpoint(t)
	caseFile, out1, out2 := filepath.Join(dir, "case.safetensors"), filepath.Join(dir, "out1.safetensors"), filepath.Join(dir, "out2.safetensors")
	for _, args := range [][]string{
		{"case", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", caseFile},
		{"run", "--case", caseFile, "--out", out1},
		{"run", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", out2},
		{"check", "--case", caseFile, "--candidate", out1},
		{"check", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--candidate", out1},
	} {
		var so, se strings.Builder
		var code int
		got, _ := capture(t, func() error { code = dispatch(args, &so, &se); return nil })
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, got, se.String())
		}
	}
	a, _ := safetensors.ReadFile(out1)
	b, _ := safetensors.ReadFile(out2)
	if !bytes.Equal(a.Get("out").Data, b.Get("out").Data) {
		t.Error("run --checkpoint and run --case on its case file differ")
	}
	c, err := validation.ReadCase(caseFile)
	if err != nil || c.Weights.W31Bias == nil || c.Input.TopK != 4 || c.Spec.Activation != activation.SwigluBias {
		t.Fatalf("case file: %v %+v", err, c)
	}
	// Parameter overrides reach the case; a bad one is a usage error.
	var so, se strings.Builder
	c2 := filepath.Join(dir, "case2.safetensors")
	if code := dispatch([]string{"case", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--swiglu-limit", "5", "--out", c2}, &so, &se); code != 0 {
		t.Fatalf("case with --swiglu-limit: exit %d %s", code, se.String())
	}
	if cc, err := validation.ReadCase(c2); err != nil || cc.Spec.Params[0].SwigluLimit != 5 || cc.Spec.Params[0].SwigluAlpha != 1.702 {
		t.Errorf("--swiglu-limit 5: %v %+v", err, cc.Spec.Params)
	}
	if code := dispatch([]string{"case", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--activation", "relu2", "--out", c2}, &so, &se); code != 2 {
		t.Errorf("a non-gated activation for a gated checkpoint: exit %d", code)
	}
	if code := dispatch([]string{"case", "--checkpoint", ck, "--layer", "7", "--inputs", inputs, "--out", filepath.Join(dir, "c2")}, &so, &se); code != 2 || !strings.Contains(se.String(), "no experts of layer 7") {
		t.Errorf("missing layer: exit %d, %s", code, se.String())
	}
}

// plot draws a bench JSON and two peers' JSONs to an SVG; a bench file
// with no rows is a usage error.
func TestPlotCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "bench.svg")
	bench, peers, tk := filepath.Join(dir, "bench.json"), filepath.Join(dir, "peer.json"), filepath.Join(dir, "tk.json")
	os.WriteFile(bench, []byte(`{"backend": "cuda", "device": "GPU", "date": "2026-12-02T00:00:00Z", "rows": [
		{"m": 1, "median_ms": 0.05, "floor_ms": 0.03}, {"m": 128, "median_ms": 0.23, "floor_ms": 0.12}]}`), 0o644)
	os.WriteFile(peers, []byte(`{"peer": "Triton MX MoE", "rows": [{"M": 1, "triton_graph_ms": 0.2}, {"M": 128, "triton_graph_ms": 0.7}]}`), 0o644)
	os.WriteFile(tk, []byte(`{"peer": "triton_kernels", "rows": [{"m": 1, "graph_ms": 0.13}, {"m": 128, "graph_ms": 0.37}]}`), 0o644)
	if err := runPlot([]string{"--bench", bench, "--peers", peers + "," + tk, "--out", out}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil || !bytes.Contains(data, []byte("<svg")) || !bytes.Contains(data, []byte("Triton MX MoE")) || !bytes.Contains(data, []byte("triton_kernels")) {
		t.Fatalf("plot: %v, %d bytes", err, len(data))
	}
	empty := filepath.Join(t.TempDir(), "empty.json")
	os.WriteFile(empty, []byte(`{"rows": []}`), 0o644)
	if err := runPlot([]string{"--bench", empty, "--out", out}); err == nil {
		t.Error("a bench JSON without rows was plotted")
	}
	// A peer of another layer (triton_kernels at GPT-OSS-120B's K = N =
	// 2880) beside the Kimi bench is refused, as compare refuses it, and
	// nothing is written.
	tkOSS := filepath.Join(dir, "tk_oss.json")
	os.WriteFile(tkOSS, []byte(`{"peer": "triton_kernels", "workload": {"K_hidden": 2880, "N_intermediate": 2880},
		"rows": [{"m": 1, "graph_ms": 0.08}]}`), 0o644)
	other := filepath.Join(dir, "other.svg")
	var ue usageError
	if err := runPlot([]string{"--bench", bench, "--peers", tkOSS, "--out", other}); !errors.As(err, &ue) || !strings.Contains(err.Error(), "K=2880 N=2880") {
		t.Errorf("a Kimi bench plotted beside a GPT-OSS peer: %v, want a usage error naming the peer's shape", err)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("the refused plot left a file: %v", err)
	}
	// bench --plot checks its peers against its layer before anything
	// runs (here before the go backend says it cannot bench); a peer of
	// its own layer passes.
	expect(t, 2, "ran K=2880 N=2880", "bench", "--backend", "go", "--m", "1", "--plot", other, "--peers", tkOSS)
	expect(t, 1, "cannot measure device bandwidth", "bench", "--backend", "go", "--shape", "gpt-oss-120b", "--m", "1", "--plot", other, "--peers", tkOSS)
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("the refused bench left a plot: %v", err)
	}
}

// smallCheckpoint writes a GPT-OSS checkpoint of layer 2 (8 experts, K=96,
// N=64, with biases) over two shards and an inputs file of 5 tokens with
// router logits; it returns the folder, the checkpoint and the inputs.
func smallCheckpoint(t *testing.T) (dir, ck, inputs string) {
	t.Helper()
	s := validation.CaseSpec{Name: "e2e", K: 96, N: 64, ELocal: 8, TopK: 4, Activation: activation.SwigluBias,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, WeightSeed: 5}
	w, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	w.W31Bias, w.W2Bias = make([]float32, w.E*2*w.N), make([]float32, w.E*w.K)
	for i := range w.W31Bias {
		w.W31Bias[i] = float32(i%9-4) / 4
	}
	dir = t.TempDir()
	ck = filepath.Join(dir, "ckpt")
	os.Mkdir(ck, 0o755)
	if err := checkpoint.Write(ck, checkpoint.FormatGPTOSS, w, 2, 2); err != nil {
		t.Fatal(err)
	}
	const m = 5
	x, logits := make([]float32, m*w.K), make([]float32, m*w.E)
	for i := range x {
		x[i] = float32(i%17) - 8
	}
	for i := range logits {
		logits[i] = float32((i*7)%11) / 3
	}
	xt, _ := safetensors.FromFloat32As("x", safetensors.BF16, []int{m, w.K}, x)
	inputs = filepath.Join(dir, "inputs.safetensors")
	if err := safetensors.WriteFile(inputs, []*safetensors.Tensor{xt, safetensors.FromFloat32("router_logits", []int{m, w.E}, logits)}, nil); err != nil {
		t.Fatal(err)
	}
	return dir, ck, inputs
}

// The several-GPU flags are checked before anything is opened: each bad
// combination is a usage error naming the flag or variable.
func TestDevicesFlags(t *testing.T) {
	for _, k := range []string{"KIMIMOE_RANK", "KIMIMOE_WORLD_SIZE", "RANK", "WORLD_SIZE", "NCCL_COMM_ID"} {
		t.Setenv(k, "")
	}
	for _, c := range []struct {
		cmd  func([]string) error
		args []string
		env  map[string]string
		want string
	}{
		{runValidate, []string{"--devices", "2"}, nil, "--devices 2 needs --backend cuda"},
		{runValidate, []string{"--devices", "0", "--backend", "cuda"}, nil, "--devices 0: want 1 to 64"},
		{runValidate, []string{"--backend", "cuda"}, map[string]string{"RANK": "1", "WORLD_SIZE": "2"}, "needs --nccl-id-file FILE or NCCL_COMM_ID"},
		{runValidate, []string{"--backend", "cuda", "--devices", "4", "--nccl-id-file", "x"}, map[string]string{"RANK": "1", "WORLD_SIZE": "2"}, "--devices 4, but the launcher's world size (RANK/WORLD_SIZE) is 2"},
		{runValidate, []string{"--backend", "cuda"}, map[string]string{"RANK": "2", "WORLD_SIZE": "2"}, "want 0 <= rank < world size"},
		{runValidate, []string{"--devices", "2", "--backend", "cuda", "--nccl-timeout", "0s"}, nil, "--nccl-timeout 0s"},
		{runBench, []string{"--devices", "2", "--nccl-id-file", "x"}, map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, "runs all devices from one process"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		_, err := capture(t, func() error { return c.cmd(c.args) })
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: %v, want a usage error with %q", c.args, c.env, err, c.want)
		}
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
}

// plan --ep-layer-devices: two GPUs all-reduce the [M, K] float32 output,
// each sending M*K*4 bytes (8192 x 3584 x 4 = 112.00 MiB); experts that do
// not divide over the GPUs are a usage error.
func TestPlanEPLayer(t *testing.T) {
	out, err := capture(t, func() error {
		return runPlan([]string{"--ep-layer-devices", "2", "--tokens", "8192", "--link-gbps", "100"})
	})
	if err != nil || !strings.Contains(out, "replicated (all-reduce)                  112.00 MiB sent per GPU    1.1744 ms at 100 GB/s") {
		t.Fatalf("%v\n%s", err, out)
	}
	_, err = capture(t, func() error { return runPlan([]string{"--ep-layer-devices", "3"}) })
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "56 experts do not divide over 3 devices") {
		t.Errorf("3 devices: %v", err)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{5, 5, 1, 9, 5}, 5}} {
		in := append([]float64(nil), c.v...)
		if got := median(c.v); got != c.want {
			t.Errorf("median(%v) = %v, want %v", in, got, c.want)
		}
		if !slices.Equal(c.v, in) {
			t.Errorf("median reordered its input: %v", c.v)
		}
	}
}

// --tune is a usage error for a bad value and for a backend with no
// launch policy, before anything is opened.
func TestTuneFlag(t *testing.T) {
	for _, c := range []struct {
		cmd  func([]string) error
		args []string
	}{{runValidate, []string{"--tune", "fp4-max-m=0", "--backend", "cuda"}}, {runValidate, []string{"--tune", "pdl=off"}},
		{runBench, []string{"--tune", "nonsense=1", "--backend", "cuda"}}, {runBench, []string{"--tune", "pdl=off", "--backend", "go"}}} {
		args := c.args
		_, err := capture(t, func() error { return c.cmd(args) })
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "tune") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// bench --k and --n take positive multiples of 32 (or 0, Kimi's), and
// not with --devices: each bad value is a usage error naming its flag.
func TestBenchShapeFlags(t *testing.T) {
	for _, args := range [][]string{{"--k", "100"}, {"--n", "-32"}, {"--k", "256", "--devices", "2"}} {
		var ue usageError
		if _, err := capture(t, func() error { return runBench(args) }); !errors.As(err, &ue) || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("bench %v: %v, want a usage error naming %s", args, err, args[0])
		}
	}
}

// compare pairs bench and peer rows by M (a peer row without a time and
// an M only one file has are left out), computes x floor and peer /
// kimimoe from the files' numbers, and refuses files measured too far
// apart to be one call (unless --any-time), a bench at another shape
// than the peer's, or files with no M in common.
func TestCompareCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bench := write("bench.json", `{"backend": "cuda", "device": "GPU", "date": "2026-11-30T23:24:28Z", "rows": [
		{"m": 1, "median_ms": 0.05, "floor_ms": 0.025, "path": "wgmma-fp4"},
		{"m": 8, "median_ms": 0.2, "floor_ms": 0.1, "path": "wgmma-fp4"},
		{"m": 128, "median_ms": 0.5, "floor_ms": 0.125, "path": "wgmma-fp4"}]}`)
	peers := write("peers.json", `{"date_utc": "2026-11-30T23:26:00Z", "device": "GPU", "rows": [
		{"M": 1, "triton_graph_ms": 0.2}, {"M": 8, "triton_graph_ms": 0}, {"M": 128, "triton_graph_ms": 0.75},
		{"M": 512, "triton_graph_ms": 1.5}]}`)
	out, err := capture(t, func() error { return runCompare([]string{"--bench", bench, "--peers", peers, "--markdown"}) })
	if err != nil {
		t.Fatal(err)
	}
	// M=1: 0.05 / 0.025 = 2.00 x floor, 0.2 / 0.05 = 4.00; M=128: 4.00 and
	// 0.75 / 0.5 = 1.50; M=8 has no peer time, M=512 no bench row.
	for _, want := range []string{"| 1 | wgmma-fp4 | 0.0500 | 0.0250 | 2.00 | 0.200 | 4.00 |", "| 128 | wgmma-fp4 | 0.5000 | 0.1250 | 4.00 | 0.750 | 1.50 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("compare printed\n%s\nwithout the row %q", out, want)
		}
	}
	if strings.Contains(out, "| 8 |") || strings.Contains(out, "| 512 |") {
		t.Errorf("compare printed an M that is not in both files:\n%s", out)
	}
	if !strings.Contains(out, "(2026-11-30T23:24:28Z); timing: not recorded in its file") || !strings.Contains(out, "(2026-11-30T23:26:00Z); timing: not recorded in its file") {
		t.Errorf("compare printed no line saying that neither file records its timing:\n%s", out)
	}
	// Both methods as the files record them (the peer's up to its notes).
	timed := write("timed.json", `{"backend": "cuda", "device": "GPU", "date": "2026-11-30T23:24:28Z", "timing": "CUDA events, read flush",
		"rows": [{"m": 1, "median_ms": 0.05, "floor_ms": 0.025}]}`)
	timedPeers := write("timed_peers.json", `{"date_utc": "2026-11-30T23:26:00Z", "device": "GPU", "timing": "do_bench median; notes",
		"rows": [{"M": 1, "triton_graph_ms": 0.2}]}`)
	out, err = capture(t, func() error { return runCompare([]string{"--bench", timed, "--peers", timedPeers}) })
	if err != nil || !strings.Contains(out, "timing: CUDA events, read flush\n") || !strings.Contains(out, "timing: do_bench median\n") {
		t.Errorf("compare of files that record their timing printed (%v)\n%s", err, out)
	}
	// Two peers, the second in triton_kernels' script's form (date, m,
	// graph_ms, peer): a column pair each; an M only one peer has shows
	// the other's as "-".
	tk := write("tk.json", `{"peer": "triton_kernels", "date": "2026-11-30T23:28:00+00:00", "device": "GPU",
		"timing": {"graph_ms": "CUDA graph replays; notes"}, "rows": [{"m": 1, "graph_ms": 0.1}, {"m": 8, "graph_ms": 0.25}]}`)
	out, err = capture(t, func() error {
		return runCompare([]string{"--bench", bench, "--peers", peers + "," + tk, "--markdown"})
	})
	// The best peer at each M is named beside its ratio.
	for _, want := range []string{"| triton_kernels ms (graph) | triton_kernels / kimimoe | best peer | best / kimimoe |",
		"| 1 | wgmma-fp4 | 0.0500 | 0.0250 | 2.00 | 0.200 | 4.00 | 0.100 | 2.00 | triton_kernels | 2.00 |",
		"| 8 | wgmma-fp4 | 0.2000 | 0.1000 | 2.00 | - | - | 0.250 | 1.25 | triton_kernels | 1.25 |",
		"| 128 | wgmma-fp4 | 0.5000 | 0.1250 | 4.00 | 0.750 | 1.50 | - | - | Triton peer | 1.50 |",
		"timing: CUDA graph replays\n"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("two peers (%v): no %q in\n%s", err, want, out)
		}
	}
	apart := write("apart.json", `{"date_utc": "2026-11-30T21:00:00Z", "device": "GPU", "rows": [{"M": 1, "triton_graph_ms": 0.2}]}`)
	var ue usageError
	if _, err := capture(t, func() error { return runCompare([]string{"--bench", bench, "--peers", apart}) }); !errors.As(err, &ue) || !strings.Contains(err.Error(), "apart") {
		t.Errorf("files measured 2h24m apart: %v, want a usage error saying so", err)
	}
	if _, err := capture(t, func() error { return runCompare([]string{"--bench", bench, "--peers", apart, "--any-time"}) }); err != nil {
		t.Errorf("--any-time: %v", err)
	}
	small := write("small.json", `{"backend": "cuda", "device": "GPU", "date": "2026-11-30T23:24:28Z", "k": 256, "n": 256, "rows": [
		{"m": 1, "median_ms": 0.02, "floor_ms": 0.001, "path": "wgmma-fp4"}]}`)
	if _, err := capture(t, func() error { return runCompare([]string{"--bench", small, "--peers", peers}) }); !errors.As(err, &ue) || !strings.Contains(err.Error(), "K=256") {
		t.Errorf("a bench at K=N=256 against the Kimi-shape peer: %v, want a usage error naming the shape", err)
	}
	// A peer that records its layer (triton_kernels' script at a GPT-OSS
	// shape) pairs with a bench of that shape, and only with one.
	oss := write("oss.json", `{"backend": "cuda", "device": "GPU", "date": "2026-11-30T23:24:28Z", "k": 2880, "n": 2880, "rows": [
		{"m": 1, "median_ms": 0.04, "floor_ms": 0.01, "path": "wgmma-fp4"}]}`)
	tkOSS := write("tk_oss.json", `{"peer": "triton_kernels", "date": "2026-11-30T23:28:00+00:00", "device": "GPU",
		"workload": {"E_local": 128, "K_hidden": 2880, "N_intermediate": 2880}, "rows": [{"m": 1, "graph_ms": 0.08}]}`)
	out, err = capture(t, func() error { return runCompare([]string{"--bench", oss, "--peers", tkOSS, "--markdown"}) })
	if err != nil || !strings.Contains(out, "| 1 | wgmma-fp4 | 0.0400 | 0.0100 | 4.00 | 0.080 | 2.00 |") {
		t.Errorf("a GPT-OSS bench against its peer (%v):\n%s", err, out)
	}
	if _, err := capture(t, func() error { return runCompare([]string{"--bench", bench, "--peers", tkOSS}) }); !errors.As(err, &ue) || !strings.Contains(err.Error(), "K=2880 N=2880") {
		t.Errorf("a Kimi bench against a GPT-OSS peer: %v, want a usage error naming the peer's shape", err)
	}
	none := write("none.json", `{"date_utc": "2026-11-30T23:26:00Z", "device": "GPU", "rows": [{"M": 2, "triton_graph_ms": 0.2}]}`)
	if _, err := capture(t, func() error { return runCompare([]string{"--bench", bench, "--peers", none}) }); !errors.As(err, &ue) {
		t.Errorf("no M in common: %v, want a usage error", err)
	}
}

// smokeCases is the smoke suite's number of cases, which the summaries
// count.
var smokeCases = func() int {
	smoke, err := validation.ValidationMatrix("smoke", activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil)
	if err != nil {
		panic(err)
	}
	return len(smoke)
}()

// bench --shape names one of three layers; anything else, or a GPT-OSS
// shape with --devices, is a usage error before any device is opened.
func TestBenchShapeFlag(t *testing.T) {
	for _, args := range [][]string{{"--shape", "gpt-oss"}, {"--shape", "gpt-oss-120b", "--devices", "2"}} {
		if err := runBench(args); !errors.As(err, new(usageError)) {
			t.Errorf("bench %v: %v, want a usage error", args, err)
		}
	}
	for _, c := range []struct {
		name    string
		e, topk int
		biases  bool
	}{{"kimi", 28, 16, false}, {"gpt-oss-120b", 128, 4, true}, {"gpt-oss-20b", 32, 4, true}} {
		l, err := benchShape(c.name, moe.ChainBF16)
		if err != nil || strings.Contains(l.title, "oss") || l.spec.ELocal != c.e || l.spec.TopK != c.topk || l.spec.Biases != c.biases || l.spec.Chain != moe.ChainBF16 {
			t.Errorf("--shape %s: %+v, %v", c.name, l.spec, err)
		}
	}
}

// plan --a2a models each preset's all-to-all; a bad --dispatch or an EP
// that does not divide the experts is a usage error.
func TestPlanAllToAll(t *testing.T) {
	for _, m := range []string{"kimi-k3", "gpt-oss-120b", "deepseek-v3"} {
		out, err := capture(t, func() error {
			return runPlan([]string{"--a2a", "--model", m, "--ep", "8", "--tokens", "4096", "--link-gbps", "50", "--latency-us", "10"})
		})
		if err != nil || !strings.Contains(out, "other ranks (de-duplicated per rank") || !strings.Contains(out, "comm per step") {
			t.Errorf("plan --a2a --model %s: %v\n%s", m, err, out)
		}
	}
	// A custom shape: 64 experts, top-2 over 2 ranks, 1 layer: a token reaches
	// the other rank unless both experts are home, 1 - C(32,2)/C(64,2) =
	// 1 - 496/2016 of the time.
	out, err := capture(t, func() error {
		return runPlan([]string{"--a2a", "--experts", "64", "--topk", "2", "--moe-input", "1024", "--intermediate", "512", "--moe-layers", "1", "--ep", "2"})
	})
	if want := fmt.Sprintf("a token goes to %.2f other ranks", 1-496.0/2016); err != nil || !strings.Contains(out, want) || !strings.Contains(out, "custom (kimi-k3 with flags): MoE input 1024, 64 experts, top-2, 1 MoE layers") {
		t.Errorf("custom shape: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--a2a", "--dispatch", "int4"}, {"--a2a", "--ep", "5"}, {"--a2a", "--latency-us", "-1"}, {"--a2a", "--experts", "-4"}, {"--a2a", "--topk", "900"}} {
		if _, err := capture(t, func() error { return runPlan(args) }); !errors.As(err, new(usageError)) {
			t.Errorf("plan %v: %v, want a usage error", args, err)
		}
	}
}

// The summary counts unsupported cases apart from failures.
func TestValidateSummary(t *testing.T) {
	res := []validation.Result{{Status: validation.StatusPass}, {Status: validation.StatusUnsupported}, {Status: validation.StatusFail}}
	if got, n := validateSummary(res, "cuda", 1500*time.Millisecond); got != "validate: 1 of 3 cases passed, 1 unsupported by backend cuda (the go backend runs them) in 1.5s" || n != 1 {
		t.Errorf("%q, %d passed", got, n)
	}
	if got, n := validateSummary(res[:1], "go", 0); got != "validate: 1 of 1 cases passed in 0.0s" || n != 1 {
		t.Errorf("%q, %d passed", got, n)
	}
}

// profileLine lists the kernels in name order and gives each GEMM the rate
// at which it read its touched experts' weights: 4 experts of 3 MB of FC1
// in 0.024 ms is 500 GB/s; the other steps get no rate.
func TestProfileLine(t *testing.T) {
	steps := map[string]float64{"gemm2": 0.012, "finalize": 0.003, "gemm1_act": 0.024, "prologue": 0.002}
	got := profileLine(1, steps, 4, 3_000_000, 1_500_000)
	want := "  M=1     finalize 0.0030 gemm1_act 0.0240 (500 GB/s) gemm2 0.0120 (500 GB/s) prologue 0.0020"
	if got != want {
		t.Errorf("profileLine:\n got %q\nwant %q", got, want)
	}
}
