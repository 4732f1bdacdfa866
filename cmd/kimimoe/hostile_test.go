package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kimimoe/safetensors"
)

// expect runs a command line and checks its exit status and that stderr
// (or, for status 0, stdout) mentions want.
func expect(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	got, out, errOut := runCmd(t, args...)
	text := errOut
	if code == 0 {
		text = out
	}
	if got != code || !strings.Contains(text, want) {
		t.Errorf("%v: exit %d (want %d)\nstdout %.300q\nstderr %.300q\nwant %q", args, got, code, out, errOut, want)
	}
}

// sameBytes checks that a file is unchanged.
func sameBytes(t *testing.T, path string, before []byte) {
	t.Helper()
	after, err := os.ReadFile(path)
	if err != nil || string(after) != string(before) {
		t.Errorf("%s changed (%v)", path, err)
	}
}

// No output replaces a checkpoint file, a case or a candidate (B3, B4), a
// FIFO never blocks (B5), and a refused plot leaves its file as it was
// (B17).
func TestOutputsNeverDestroyInputs(t *testing.T) {
	dir, ck, inputs := smallCheckpoint(t)
	shard := filepath.Join(ck, "model-00001-of-00002.safetensors")
	index := filepath.Join(ck, "model.safetensors.index.json")
	shardBytes, _ := os.ReadFile(shard)
	indexBytes, _ := os.ReadFile(index)
	for _, target := range []string{shard, index} {
		expect(t, 2, "is the input file", "case", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", target)
		expect(t, 2, "is the input file", "run", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", target)
	}
	sameBytes(t, shard, shardBytes)
	sameBytes(t, index, indexBytes)

	caseFile := filepath.Join(dir, "case.safetensors")
	expect(t, 0, "wrote", "case", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", caseFile)
	cand := filepath.Join(dir, "out.safetensors")
	expect(t, 0, "wrote", "run", "--case", caseFile, "--out", cand)
	caseBytes, _ := os.ReadFile(caseFile)
	candBytes, _ := os.ReadFile(cand)
	expect(t, 2, "is the input file", "check", "--case", caseFile, "--candidate", cand, "--json", cand)
	expect(t, 2, "is not a JSON file", "validate", "--json", caseFile)
	link := filepath.Join(dir, "link.json")
	os.Symlink(caseFile, link)
	expect(t, 2, "is the input file", "check", "--case", caseFile, "--candidate", cand, "--json", link)
	sameBytes(t, caseFile, caseBytes)
	sameBytes(t, cand, candBytes)

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		expect(t, 2, "FIFO", "validate", "--json", fifo)
		expect(t, 2, "not a regular file", "plot", "--bench", fifo, "--out", filepath.Join(dir, "p.svg"))
		expect(t, 2, "not a regular file", "compare", "--bench", fifo, "--peers", fifo)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a FIFO blocked the command")
	}
	expect(t, 2, "not a regular file", "plot", "--bench", "/dev/zero", "--out", filepath.Join(dir, "p.svg"))

	bench := filepath.Join(dir, "bench.json")
	os.WriteFile(bench, []byte(`{"backend": "cuda", "device": "GPU", "date": "2026-12-02T00:00:00Z", "rows": [{"m": 1, "median_ms": 0.05, "floor_ms": 0.02}]}`), 0o644)
	benchBytes, _ := os.ReadFile(bench)
	expect(t, 2, "want a .svg, .png or .pdf name", "plot", "--bench", bench, "--out", bench)
	svgNamed := filepath.Join(dir, "bench.svg") // a JSON named .svg: still the input
	os.WriteFile(svgNamed, benchBytes, 0o644)
	expect(t, 2, "is the input file", "plot", "--bench", svgNamed, "--out", svgNamed)
	sameBytes(t, svgNamed, benchBytes)
	old := filepath.Join(dir, "old.svg")
	os.WriteFile(old, []byte("<svg>keep</svg>"), 0o644)
	expect(t, 2, "want a .svg, .png or .pdf name", "plot", "--bench", bench, "--out", filepath.Join(dir, "p.txt"))
	os.WriteFile(filepath.Join(dir, "neg.json"), []byte(`{"rows": [{"m": 0, "median_ms": 0.05, "floor_ms": 0.02}]}`), 0o644)
	expect(t, 2, "M = 0", "plot", "--bench", filepath.Join(dir, "neg.json"), "--out", old)
	sameBytes(t, bench, benchBytes)
	sameBytes(t, old, []byte("<svg>keep</svg>"))
	expect(t, 0, "", "plot", "--bench", bench, "--out", old) // one row: a plot, not a panic
	if data, _ := os.ReadFile(old); !strings.Contains(string(data), "<svg") || strings.Contains(string(data), "keep") {
		t.Errorf("one-row plot: %.80q", data)
	}
}

// plot and compare refuse rows a log plot or a ratio cannot take (B18, the
// log-scale panic), two rows of one M (B19: compare paired them with one
// peer row) and sizes no bench writes (B25).
func TestPlotAndCompareRefuseNonsense(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string { return writeFile(t, dir, name, text) }
	out := filepath.Join(dir, "p.svg")
	peers := write("peers.json", `{"date_utc": "2026-12-02T00:01:00Z", "device": "GPU", "rows": [{"M": 1, "triton_graph_ms": 0.2}]}`)
	for _, c := range []struct{ json, want string }{
		{`{"rows": [{"m": 1, "median_ms": 0, "floor_ms": 0.02}]}`, "want positive finite times"},
		{`{"rows": [{"m": 1, "median_ms": 0.05, "floor_ms": -1}]}`, "want positive finite times"},
		{`{"rows": [{"m": 4611686018427387904, "median_ms": 0.05, "floor_ms": 0.02}]}`, "M = 4611686018427387904"},
		{`{"device": "` + strings.Repeat("x", 1000) + `", "rows": [{"m": 1, "median_ms": 0.05, "floor_ms": 0.02}]}`, "a label of 1000 bytes"},
		{`{"date": "2026-12-02T00:00:00Z", "rows": [{"m": 1, "median_ms": 0.05, "floor_ms": 0.02}, {"m": 1, "median_ms": 0.06, "floor_ms": 0.02}]}`, "two rows of M = 1"},
	} {
		b := write("b.json", c.json)
		expect(t, 2, c.want, "plot", "--bench", b, "--out", out)
		expect(t, 2, c.want, "compare", "--bench", b, "--peers", peers)
	}
	b := write("ok.json", `{"date": "2026-12-02T00:00:00Z", "rows": [{"m": 1, "median_ms": 0.05, "floor_ms": 0.02}]}`)
	dup := write("dup.json", `{"date_utc": "2026-12-02T00:01:00Z", "rows": [{"M": 1, "triton_graph_ms": 0.2}, {"M": 1, "triton_graph_ms": 0.3}]}`)
	expect(t, 2, "two rows of M = 1", "compare", "--bench", b, "--peers", dup)
}

// Slice and routing flags out of range are refused naming the flag, before
// any allocation (B12 a huge --topk panicked in makeslice; B22, B23 bad
// values became defaults; B26 parameters of another activation were taken).
func TestCheckpointFlagsRefuseNonsense(t *testing.T) {
	dir, ck, inputs := smallCheckpoint(t)
	out := filepath.Join(dir, "c.safetensors")
	base := []string{"case", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", out}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--topk", "1000000000000"}, "--topk 1000000000000: the checkpoint's layer has 8 experts"},
		{[]string{"--topk", "-3"}, "--topk -3: want at least 1"},
		{[]string{"--ep-size", "0"}, "--ep-size 0: want at least 1"},
		{[]string{"--moe-tp", "0"}, "--moe-tp 0: want at least 1"},
		{[]string{"--moe-tp", "-2"}, "--moe-tp -2: want at least 1"},
		{[]string{"--situ-beta", "4"}, "--situ-beta: activation swiglu_oai has no such parameter"},
		{[]string{"--swiglu-limit", "-1"}, "swiglu_limit = -1"},
	} {
		expect(t, 2, c.want, append(base, c.args...)...)
	}
	expect(t, 2, "--layer -5: want a layer index of 0 or more", "case", "--checkpoint", ck, "--layer", "-5", "--inputs", inputs, "--out", out)
	for _, cmd := range []string{"run", "check"} {
		args := []string{cmd, "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--topk", "1000000000000"}
		if cmd == "run" {
			args = append(args, "--out", out)
		} else {
			args = append(args, "--candidate", inputs)
		}
		expect(t, 2, "the checkpoint's layer has 8 experts", args...)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused case left a file")
	}
}

// Infinite router logits are an error naming the logits and the token
// (B13: it said "topk_weights ... NaN", a tensor the user never gave).
func TestInfiniteRouterLogits(t *testing.T) {
	dir, ck, _ := smallCheckpoint(t)
	x := make([]float32, 2*96)
	logits := make([]float32, 2*8)
	logits[8+3] = float32(math.Inf(1))
	in := filepath.Join(dir, "inf.safetensors")
	safetensors.WriteFile(in, []*safetensors.Tensor{safetensors.FromFloat32("x", []int{2, 96}, x), safetensors.FromFloat32("router_logits", []int{2, 8}, logits)}, nil)
	expect(t, 2, "router_logits[1, 3] = +Inf is not finite (token 1)", "case", "--checkpoint", ck, "--layer", "2", "--inputs", in, "--out", filepath.Join(dir, "c.safetensors"))
}

// A huge --devices is refused at once (B14: it panicked, and 1e9 first
// allocated 7.8 GB); launcher variables do not stop a Go-backend run
// (B24), and with the GPU backend the message names the variables read.
func TestDevicesAndLauncherEnv(t *testing.T) {
	for _, k := range []string{"KIMIMOE_RANK", "KIMIMOE_WORLD_SIZE", "RANK", "WORLD_SIZE", "NCCL_COMM_ID"} {
		t.Setenv(k, "")
	}
	expect(t, 2, "--devices 1000000000: want 1 to 64", "validate", "--backend", "cuda", "--devices", "1000000000")
	expect(t, 2, "--devices 1000000000: want 1 to 64", "bench", "--devices", "1000000000")
	t.Setenv("RANK", "0")
	t.Setenv("WORLD_SIZE", "1")
	expect(t, 0, fmt.Sprintf("validate: %d of %d cases passed", smokeCases, smokeCases), "validate", "--suite", "smoke")
	t.Setenv("WORLD_SIZE", "2")
	expect(t, 0, fmt.Sprintf("validate: %d of %d cases passed", smokeCases, smokeCases), "validate", "--suite", "smoke")
	expect(t, 2, "from RANK/WORLD_SIZE) needs --nccl-id-file", "validate", "--backend", "cuda")
}

// FuzzPlotCompareInputs feeds bench and peer JSON from the fuzzer's bytes
// through what plot and compare do with them: reading, the row checks,
// drawing an SVG and pairing the rows. Nothing may panic; a file that
// passes the checks must draw.
func FuzzPlotCompareInputs(f *testing.F) {
	f.Add([]byte(`{"backend": "cuda", "device": "GPU", "date": "2026-12-02T00:00:00Z", "rows": [{"m": 1, "median_ms": 0.05, "floor_ms": 0.02}, {"m": 8, "median_ms": 0.1, "floor_ms": 0.08}]}`),
		[]byte(`{"date_utc": "2026-12-02T00:01:00Z", "device": "GPU", "rows": [{"M": 1, "triton_graph_ms": 0.2}, {"M": 8, "triton_graph_ms": 0}]}`))
	f.Add([]byte(`{"rows": [{"m": 1, "median_ms": 1e-300, "floor_ms": 1e300}]}`), []byte(`{"rows": []}`))
	f.Fuzz(func(t *testing.T, benchJSON, peerJSON []byte) {
		dir := t.TempDir()
		bp, pp := filepath.Join(dir, "b.json"), filepath.Join(dir, "p.json")
		os.WriteFile(bp, benchJSON, 0o644)
		os.WriteFile(pp, peerJSON, 0o644)
		var doc benchDoc
		var peers peerDoc
		if readJSON(bp, &doc) != nil || doc.check(bp) != nil {
			return
		}
		var pd []*peerDoc
		if readJSON(pp, &peers) == nil && peers.check(pp) == nil {
			pd = []*peerDoc{&peers, &peers}
			compareRows(&doc, pd)
		}
		if _, err := drawPlot("svg", &doc, pd); err != nil {
			t.Fatalf("a checked bench JSON does not draw: %v", err)
		}
	})
}

// --max-memory-gib bounds what case, run and check --checkpoint load,
// checked from the headers before reading (case had no limit at all).
func TestCheckpointMemoryLimit(t *testing.T) {
	dir, ck, inputs := smallCheckpoint(t)
	out := filepath.Join(dir, "c.safetensors")
	expect(t, 2, "over the limit of", "case", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", out, "--max-memory-gib", "0.00001")
	expect(t, 2, "over the limit of", "run", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", out, "--max-memory-gib", "0.00001")
	expect(t, 0, "wrote", "case", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", out)
}

// bench and plot refuse an output that is the second of several --peers
// files (the list was checked as one path).
func TestOutputIsOneOfSeveralPeers(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.svg")
	os.WriteFile(a, []byte(`{"rows": []}`), 0o644)
	os.WriteFile(b, []byte(`<svg/>`), 0o644)
	expect(t, 2, "is the input file", "plot", "--bench", a, "--peers", a+","+b, "--out", b)
	expect(t, 2, "is the input file", "bench", "--peers", a+","+b, "--plot", b)
}

// Round 3's data-loss breaks: a check's --json naming a checkpoint's
// index or config (R3-1); a case whose header length reads as "{ " taken
// for JSON, and a JSON file whose ninth byte is '{' taken for safetensors
// (R3-2); --write-cases writing through a link in its folder (R3-14).
func TestRound3OutputsNeverDestroyInputs(t *testing.T) {
	dir, ck, inputs := smallCheckpoint(t)
	index := filepath.Join(ck, "model.safetensors.index.json")
	indexBytes, _ := os.ReadFile(index)
	cand := filepath.Join(dir, "cand.safetensors")
	expect(t, 0, "wrote", "run", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", cand)
	expect(t, 2, "is the input file", "check", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--candidate", cand, "--json", index)
	sameBytes(t, index, indexBytes)

	// A safetensors file whose 8-byte header length starts "{ ".
	st := filepath.Join(dir, "brace.safetensors")
	hdr := []byte(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`)
	hdr = append(hdr, make([]byte, 0x207b-len(hdr))...)
	for i := len(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`); i < len(hdr); i++ {
		hdr[i] = ' '
	}
	data := append([]byte{'{', ' ', 0, 0, 0, 0, 0, 0}, hdr...)
	data = append(data, 7)
	os.WriteFile(st, data, 0o644)
	expect(t, 2, "is not a JSON file", "validate", "--suite", "smoke", "--json", st)
	sameBytes(t, st, data)

	// A JSON file whose ninth byte is '{'.
	js := filepath.Join(dir, "nine.json")
	jsBytes := []byte(`{"a": [1,{"b": 2}]}`)
	os.WriteFile(js, jsBytes, 0o644)
	expect(t, 2, "is not a safetensors file", "run", "--checkpoint", ck, "--layer", "2", "--inputs", inputs, "--out", js)
	sameBytes(t, js, jsBytes)

	// A link inside the --write-cases folder.
	cases := filepath.Join(dir, "cases")
	os.MkdirAll(cases, 0o755)
	victim := filepath.Join(dir, "victim.safetensors")
	os.WriteFile(victim, data, 0o644)
	os.Symlink(victim, filepath.Join(cases, "m1_uniform.safetensors"))
	expect(t, 2, "symbolic link", "validate", "--suite", "smoke", "--write-cases", cases)
	sameBytes(t, victim, data)
}

// --tune is parsed, and refused rather than dropped, where it cannot apply
// (R3-5), and its values are bounded (R3-6).
func TestTuneNeverSilentlyDropped(t *testing.T) {
	dir := t.TempDir()
	expect(t, 2, "not applied with --write-cases", "validate", "--suite", "smoke", "--write-cases", dir, "--backend", "cuda", "--tune", "pdl=off")
	expect(t, 2, "act-ctas-sm", "validate", "--suite", "smoke", "--write-cases", dir, "--backend", "cuda", "--tune", "act-ctas-sm=4611686018427387904")
	expect(t, 2, "not applied with several devices", "validate", "--suite", "smoke", "--backend", "cuda", "--devices", "2", "--tune", "pdl=off")
	expect(t, 2, "not applied with --devices", "bench", "--backend", "cuda", "--devices", "2", "--tune", "pdl=off")
}

// Help and --version say what is true: case has no --case flag, the
// --devices help names a section the README has, and a build without a
// commit says how to get one.
func TestHelpTellsTheTruth(t *testing.T) {
	_, o1, e1 := runCmd(t, "case", "-h")
	caseHelp := o1 + e1
	if strings.Contains(caseHelp, "with --case") {
		t.Errorf("case -h mentions a --case flag:\n%s", caseHelp)
	}
	_, o2, e2 := runCmd(t, "validate", "-h")
	valHelp := o2 + e2
	readme, _ := os.ReadFile("../../README.md")
	if i := strings.Index(valHelp, `README's "`); i < 0 {
		t.Errorf("validate -h names no README section:\n%s", valHelp)
	} else if sec := strings.SplitN(valHelp[i+len(`README's "`):], `"`, 2)[0]; !strings.Contains(string(readme), "## "+sec) {
		t.Errorf("validate -h points at README section %q, which does not exist", sec)
	}
	if v := versionString(); strings.Contains(v, "unknown") && !strings.Contains(v, "-buildvcs=true") {
		t.Errorf("--version: %q says no way to get the commit", v)
	}
}

// plot and compare refuse an unbounded shape label (R3-3), a time no
// forward takes (R3-20: 1e308 ms drew an axis) and one peer file given
// twice.
func TestPlotRefusesRound3Nonsense(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string { return writeFile(t, dir, name, text) }
	long := write("long.json", `{"backend": "cuda", "device": "GPU", "date": "2026-12-02T00:00:00Z", "shape": "`+strings.Repeat("x", 1<<20)+`", "rows": [{"m": 1, "median_ms": 0.05, "floor_ms": 0.02}]}`)
	expect(t, 2, "a label of", "plot", "--bench", long, "--out", filepath.Join(dir, "p.svg"))
	huge := write("huge.json", `{"backend": "cuda", "device": "GPU", "date": "2026-12-02T00:00:00Z", "rows": [{"m": 1, "median_ms": 1e308, "floor_ms": 0.02}]}`)
	expect(t, 2, "positive finite times", "plot", "--bench", huge, "--out", filepath.Join(dir, "p.svg"))
	bench := write("bench.json", `{"backend": "cuda", "device": "GPU", "date": "2026-12-02T00:00:00Z", "rows": [{"m": 1, "median_ms": 0.05, "floor_ms": 0.02}]}`)
	peer := write("peer.json", `{"peer": "p", "date": "2026-12-02T00:01:00Z", "device": "GPU", "rows": [{"m": 1, "graph_ms": 0.1}]}`)
	expect(t, 2, "twice", "compare", "--bench", bench, "--peers", peer+","+peer)
}

// plan refuses another mode's flags and a NaN (round 3's R3-8).
func TestPlanRefusesOtherModesFlags(t *testing.T) {
	expect(t, 2, "--a2a only", "plan", "--latency-us", "5")
	expect(t, 2, "--ep-layer-devices only", "plan", "--a2a", "--ep-layer-experts", "8")
	expect(t, 2, "finite", "plan", "--a2a", "--latency-us", "NaN")
	expect(t, 2, "finite", "plan", "--ep-layer-devices", "2", "--link-gbps", "NaN")
}

// A misspelt override is a usage error (2) for a folder too, not each
// case failing (1) (round 3's R3-19).
func TestCheckDirBadFlagIsUsage(t *testing.T) {
	dir := t.TempDir()
	expect(t, 0, "wrote", "validate", "--suite", "smoke", "--write-cases", dir)
	expect(t, 2, "unknown chain", "check", "--dir", dir, "--chain", "bogus")
	expect(t, 2, "bogus", "check", "--dir", dir, "--activation", "bogus")
}

// The plot's title names the chain, on two lines short enough to fit.
func TestPlotTitleNamesTheChain(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "b.json")
	os.WriteFile(bench, []byte(`{"backend": "cuda", "device": "NVIDIA H200, sm_90a, 132 SMs", "date": "2026-12-04T00:00:00Z", "shape": "GPT-OSS-120B (whole layer)", "chain": "bf16",
		"rows": [{"m": 1, "median_ms": 0.05, "floor_ms": 0.02}, {"m": 8192, "median_ms": 3.9, "floor_ms": 1.2}]}`), 0o644)
	out := filepath.Join(dir, "p.svg")
	expect(t, 0, "", "plot", "--bench", bench, "--out", out)
	svg, _ := os.ReadFile(out)
	for _, want := range []string{"bf16 chain", "GPT-OSS-120B (whole layer)"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("the plot's title lacks %q", want)
		}
	}
}

// writeFile writes text to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// validate bounds its memory and says how much --write-cases will write
// (round 3's R3-13).
func TestValidateMemoryAndDiskEstimates(t *testing.T) {
	expect(t, 2, "--max-memory-gib limit", "validate", "--suite", "gpt-oss", "--max-memory-gib", "1")
	expect(t, 2, "want a positive number", "validate", "--suite", "smoke", "--max-memory-gib", "NaN")
	_, out, _ := runCmd(t, "validate", "--suite", "smoke", "--write-cases", t.TempDir())
	if !strings.Contains(out, "writing 25 cases of --suite smoke") || !strings.Contains(out, "MiB") {
		t.Errorf("--write-cases gave no estimate: %.300q", out)
	}
}

// A --json write that fails after the work is an output error (exit 2),
// not a failed check (round 3's R3-19: a pass whose write failed exited 1).
func TestJSONWriteFailureIsAnOutputError(t *testing.T) {
	err := writeJSON(filepath.Join(t.TempDir(), "gone", "r.json"), []byte("{}"))
	var ue usageError
	if !errors.As(err, &ue) {
		t.Fatalf("writeJSON into a missing folder: %v (%T), want a usage error (exit 2)", err, err)
	}
}
