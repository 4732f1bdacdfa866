package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// source makes the weights the synthetic checkpoints hold: 4 experts,
// N=64, K=96, with biases.
func source(t testing.TB) *moe.Weights {
	t.Helper()
	s := validation.CaseSpec{Name: "ckpt", K: 96, N: 64, ELocal: 4, TopK: 2, Activation: activation.SwigluBias,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, WeightSeed: 9}
	w, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	w.W31Bias = make([]float32, w.E*2*w.N)
	w.W2Bias = make([]float32, w.E*w.K)
	for i := range w.W31Bias {
		w.W31Bias[i] = float32(i%13) - 6
	}
	for i := range w.W2Bias {
		w.W2Bias[i] = float32(i%5) / 2
	}
	return w
}

// want is the slice of w that EP rank ep and MoE-TP rank tpRank of tp
// should load, computed from w's own layout.
func want(w *moe.Weights, ep moe.EP, tp, tpRank int, dropB2 bool) *moe.Weights {
	ep = ep.Normalize()
	el := w.E / ep.Size
	nn := w.N / tp
	n0 := tpRank * nn
	out := moe.NewWeights(el, nn, w.K, true)
	if w.W31Bias != nil {
		out.W31Bias = make([]float32, el*2*nn)
	}
	if w.W2Bias != nil && !dropB2 {
		out.W2Bias = append([]float32{}, w.W2Bias[ep.Rank*el*w.K:(ep.Rank+1)*el*w.K]...)
	}
	k := w.K
	for i := range el {
		e := ep.Rank*el + i
		for half := range 2 {
			p, s := fc1Rows(w, e, half*w.N+n0, nn)
			dst := i*2*nn + half*nn
			copy(out.W31[dst*k/2:], p)
			copy(out.W31Scale[dst*k/32:], s)
			if out.W31Bias != nil {
				copy(out.W31Bias[dst:dst+nn], w.W31Bias[e*2*w.N+half*w.N+n0:])
			}
		}
		for r := range k {
			src := (e*k + r) * w.N
			dst := (i*k + r) * nn
			copy(out.W2[dst/2:(dst+nn)/2], w.W2[(src+n0)/2:(src+n0+nn)/2])
			copy(out.W2Scale[dst/32:(dst+nn)/32], w.W2Scale[(src+n0)/32:(src+n0+nn)/32])
		}
	}
	return out
}

func TestLoadKimiAndGPTOSS(t *testing.T) {
	w := source(t)
	kimiW := *w
	kimiW.W31Bias, kimiW.W2Bias = nil, nil // Kimi-K3 has no biases
	// GPT-OSS stores biases in bf16: what loads back is the bf16 value.
	for _, b := range [][]float32{w.W31Bias, w.W2Bias} {
		for i, v := range b {
			b[i] = mxfp.RoundBF16(v)
		}
	}
	for _, c := range []struct {
		name   string
		format Format
		ts     []*safetensors.Tensor
		src    *moe.Weights
		act    activation.Kind
	}{
		{"kimi", FormatKimi, kimiTensors(&kimiW, 3, "block_sparse_moe"), &kimiW, activation.Situ},
		{"gpt-oss", FormatGPTOSS, gptossTensors(w, 3), w, activation.SwigluBias},
	} {
		for _, nshard := range []int{0, 3} {
			dir := t.TempDir()
			must(t, writeShards(dir, c.ts, nshard))
			ck, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if f, err := ck.Detect(3); err != nil || f != c.format {
				t.Fatalf("%s: Detect = %v, %v", c.name, f, err)
			}
			for _, o := range []Options{
				{Layer: 3},
				{Layer: 3, EP: moe.EP{Size: 2, Rank: 1}},
				{Layer: 3, EP: moe.EP{Size: 4, Rank: 2}, MoETPSize: 2, MoETPRank: 1},
			} {
				l, err := ck.Load(o)
				if err != nil {
					t.Fatalf("%s %d shards %+v: %v", c.name, nshard, o, err)
				}
				tp := max(o.MoETPSize, 1)
				exp := want(c.src, o.EP, tp, o.MoETPRank, o.MoETPRank > 0)
				if d := cmp.Diff(exp, l.Weights); d != "" {
					t.Fatalf("%s %d shards %+v (-want +got):\n%s", c.name, nshard, o, d)
				}
				if l.Spec.Activation != c.act || l.NumExperts != 4 || l.Spec.EP != o.EP.Normalize() {
					t.Errorf("%s: spec %+v, %d experts", c.name, l.Spec, l.NumExperts)
				}
			}
			if _, err := ck.Load(Options{Layer: 3, EP: moe.EP{Size: 3}}); !errors.Is(err, moe.ErrParallel) {
				t.Errorf("%s: EP3 of 4 experts: %v", c.name, err)
			}
			if _, err := ck.Load(Options{Layer: 3, MoETPSize: 4}); !errors.Is(err, moe.ErrParallel) {
				t.Errorf("%s: N=64 over moe_tp 4 (16, not a multiple of 32): %v", c.name, err)
			}
			if _, err := ck.Load(Options{Layer: 4}); !errors.Is(err, ErrCheckpoint) {
				t.Errorf("%s: layer 4: %v", c.name, err)
			}
			ck.Close()
		}
	}
}

// Each loader error class, on a checkpoint broken one way at a time.
func TestLoaderErrors(t *testing.T) {
	w := source(t)
	w.W31Bias, w.W2Bias = nil, nil
	base := func() []*safetensors.Tensor { return kimiTensors(w, 0, "mlp") }
	drop := func(ts []*safetensors.Tensor, suffix string) []*safetensors.Tensor {
		var out []*safetensors.Tensor
		for _, x := range ts {
			if !strings.HasSuffix(x.Name, suffix) {
				out = append(out, x)
			}
		}
		return out
	}
	retype := func(ts []*safetensors.Tensor, suffix string) []*safetensors.Tensor {
		for i, x := range ts {
			if strings.HasSuffix(x.Name, suffix) {
				ts[i] = &safetensors.Tensor{Name: x.Name, DType: safetensors.I8, Shape: x.Shape, Data: x.Data}
			}
		}
		return ts
	}
	reshape := func(ts []*safetensors.Tensor, suffix string) []*safetensors.Tensor {
		for i, x := range ts {
			if strings.HasSuffix(x.Name, suffix) {
				ts[i] = &safetensors.Tensor{Name: x.Name, DType: x.DType, Shape: []int{x.Shape[0] / 2, x.Shape[1] * 2}, Data: x.Data}
			}
		}
		return ts
	}
	cases := []struct {
		name string
		ts   []*safetensors.Tensor
		want string
	}{
		{"missing tensor", drop(base(), "experts.2.w3.weight_scale"), `model.layers.0.mlp.experts.2.w3.weight_scale"`},
		{"missing expert", drop(base(), "experts.1.w1.weight_packed"), "no expert 1"},
		{"wrong dtype", retype(base(), "experts.1.w2.weight_packed"), "has dtype I8"},
		{"scale/payload disagree", reshape(base(), "experts.0.w3.weight_scale"), `model.layers.0.mlp.experts.0.w3.weight_scale" in model-0000`},
		{"ambiguous pattern", append(base(), kimiTensors(w, 0, "block_sparse_moe")...), "match 2 name patterns"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		must(t, writeShards(dir, c.ts, 2))
		ck, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ck.Load(Options{Layer: 0})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error mentioning %s", c.name, err, c.want)
		}
		ck.Close()
	}
	// A truncated shard and a shard the index names but that is missing.
	dir := t.TempDir()
	must(t, writeShards(dir, base(), 2))
	shard := filepath.Join(dir, "model-00002-of-00002.safetensors")
	st, _ := os.Stat(shard)
	os.Truncate(shard, st.Size()-10)
	ck, _ := Open(dir)
	if _, err := ck.Load(Options{Layer: 0}); !errors.Is(err, safetensors.ErrFormat) || !strings.Contains(err.Error(), "model-00002-of-00002") {
		t.Errorf("truncated shard: %v", err)
	}
	ck.Close()
	os.Remove(shard)
	ck, _ = Open(dir)
	if _, err := ck.Load(Options{Layer: 0}); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "model-00002-of-00002") {
		t.Errorf("missing shard: %v", err)
	}
	ck.Close()
	if _, err := Open(t.TempDir()); err == nil {
		t.Error("an empty directory opened as a checkpoint")
	}
}

// The oracle on a loaded GPT-OSS layer equals the oracle on the source
// weights it was written from: the layout conversion loses nothing.
func TestLoadedLayerRuns(t *testing.T) {
	w := source(t)
	for _, b := range [][]float32{w.W31Bias, w.W2Bias} {
		for i, v := range b {
			b[i] = mxfp.RoundBF16(v)
		}
	}
	dir := t.TempDir()
	must(t, Write(dir, FormatGPTOSS, w, 0, 1))
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	l, err := ck.Load(Options{Layer: 0})
	if err != nil {
		t.Fatal(err)
	}
	s := validation.CaseSpec{Name: "run", M: 5, K: w.K, N: w.N, ELocal: w.E, TopK: 2, Activation: activation.SwigluBias,
		Params: l.Spec.Params, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 4, WeightSeed: 9}
	c, err := validation.GenerateCase(&s, w)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := c.OracleForward(nil)
	c.Weights = l.Weights
	got, err := c.OracleForward(nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := validation.Compare(got, ref); !m.Bitwise {
		t.Fatalf("loaded layer differs from its source: %v", m)
	}
}

// FuzzIndex feeds index files (over a valid two-shard Kimi checkpoint)
// through Open, Detect and Load: nothing may panic; every failure is an
// error.
func FuzzIndex(f *testing.F) {
	w := source(f)
	w.W31Bias, w.W2Bias = nil, nil
	dir := f.TempDir()
	must(f, Write(dir, FormatKimi, w, 0, 2))
	good, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"weight_map": {"a": "../etc/passwd"}}`))
	f.Add([]byte(`{"weight_map": {"model.layers.0.mlp.experts.0.w1.weight_packed": "model-00001-of-00002.safetensors"}}`))
	f.Fuzz(func(t *testing.T, index []byte) {
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644); err != nil {
			t.Fatal(err)
		}
		ck, err := Open(dir)
		if err != nil {
			return
		}
		defer ck.Close()
		for _, layer := range []int{0, 1} {
			if _, err := ck.Load(Options{Layer: layer}); err == nil && layer == 1 {
				t.Fatal("loaded a layer the shards do not hold")
			}
		}
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The Kimi-K3 checkpoint layout against an independent reference: the
// golden case made on the GPU machine from a serving stack's [gate; up]
// tensors (python/interop_e2e.py, with a float64 torch output), written
// back as a Kimi-K3 checkpoint (w1 gate, w3 up, w2 per expert) and loaded:
// the oracle on the loaded layer reproduces the torch output.
func TestKimiLayoutAgainstTorchGolden(t *testing.T) {
	c, err := validation.ReadCase(filepath.Join("..", "testdata", "golden", "golden_kimi_gate_up_swizzled.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := c.Extra["out_ref_f64"].Float64s()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	must(t, Write(dir, FormatKimi, c.Weights, 5, 2))
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	l, err := ck.Load(Options{Layer: 5})
	if err != nil {
		t.Fatal(err)
	}
	c.Weights = l.Weights
	got, err := c.OracleForward(nil)
	if err != nil {
		t.Fatal(err)
	}
	ss, worst := 0.0, 0.0
	for i, r := range ref {
		ss += r * r
		worst = max(worst, math.Abs(got[i]-r))
	}
	if rms := math.Sqrt(ss / float64(len(ref))); worst > 1e-12*rms {
		t.Fatalf("loaded Kimi layout differs from the torch reference by %.3g (RMS %.3g)", worst, rms)
	}
}

// A rank reads only its own experts: with experts 0 and 1 in a shard that
// is then deleted, EP rank 1 of 2 (experts 2 and 3) still loads, in both
// layouts' worth of sharding (Kimi's per-expert tensors here).
func TestRankReadsOnlyItsExperts(t *testing.T) {
	w := source(t)
	w.W31Bias, w.W2Bias = nil, nil
	ts := kimiTensors(w, 0, "mlp")
	dir := t.TempDir()
	var a, b []*safetensors.Tensor
	wm := map[string]string{}
	for _, x := range ts {
		if strings.Contains(x.Name, ".experts.0.") || strings.Contains(x.Name, ".experts.1.") {
			a = append(a, x)
			wm[x.Name] = "a.safetensors"
		} else {
			b = append(b, x)
			wm[x.Name] = "b.safetensors"
		}
	}
	must(t, safetensors.WriteFile(filepath.Join(dir, "a.safetensors"), a, nil))
	must(t, safetensors.WriteFile(filepath.Join(dir, "b.safetensors"), b, nil))
	idx, _ := json.Marshal(map[string]any{"weight_map": wm})
	must(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644))
	must(t, os.Remove(filepath.Join(dir, "a.safetensors")))
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	l, err := ck.Load(Options{Layer: 0, EP: moe.EP{Size: 2, Rank: 1}})
	if err != nil {
		t.Fatalf("rank 1 needed a shard of rank 0's experts: %v", err)
	}
	if d := cmp.Diff(want(w, moe.EP{Size: 2, Rank: 1}, 1, 0, false), l.Weights); d != "" {
		t.Fatalf("rank 1's experts (-want +got):\n%s", d)
	}
	if _, err := ck.Load(Options{Layer: 0, EP: moe.EP{Size: 2, Rank: 0}}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rank 0 without its shard: %v", err)
	}
}

// An index naming experts past those it holds is refused by name before
// the weights are allocated (round 3's R3-12: 10^6 experts allocated 6.1
// GB before expert 4 was found missing). Here 5000 named experts would
// allocate about 49 MB.
func TestMissingExpertBeforeAllocation(t *testing.T) {
	w := source(t)
	w.W31Bias, w.W2Bias = nil, nil
	ts := kimiTensors(w, 0, "mlp")
	for e := 4; e < 5000; e++ { // experts 4.. named by their w1 codes alone
		ts = append(ts, &safetensors.Tensor{Name: fmt.Sprintf("language_model.model.layers.0.mlp.experts.%d.w1.weight_packed", e),
			DType: safetensors.U8, Shape: []int{1, 1}, Data: []byte{0}})
	}
	dir := t.TempDir()
	must(t, writeShards(dir, ts, 1))
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = ck.Load(Options{Layer: 0})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), `experts.4.w1.weight_scale"`) {
		t.Fatalf("an index naming 5000 experts, 4 of them whole: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("Load allocated %d MB before refusing", got>>20)
	}
}
