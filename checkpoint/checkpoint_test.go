package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// writeShards writes tensors round-robin into nshard shards with an index
// (nshard 0: one model.safetensors, no index).
func writeShards(t testing.TB, dir string, ts []*safetensors.Tensor, nshard int) {
	t.Helper()
	if nshard == 0 {
		if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
			t.Fatal(err)
		}
		return
	}
	shards := make([][]*safetensors.Tensor, nshard)
	wm := map[string]string{}
	for i, x := range ts {
		shards[i%nshard] = append(shards[i%nshard], x)
		wm[x.Name] = fmt.Sprintf("model-%05d-of-%05d.safetensors", i%nshard+1, nshard)
	}
	for i, sh := range shards {
		if err := safetensors.WriteFile(filepath.Join(dir, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, nshard)), sh, nil); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": wm})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rows returns rows [r0, r0+n) of expert e's FC1 (packed and scales).
func fc1Rows(w *moe.Weights, e, r0, n int) ([]uint8, []uint8) {
	R, k := w.Rows(), w.K
	return w.W31[(e*R+r0)*k/2 : (e*R+r0+n)*k/2], w.W31Scale[(e*R+r0)*k/32 : (e*R+r0+n)*k/32]
}

// kimiTensors lays w out as Kimi-K3 stores it: per expert w1 (gate), w3
// (up) and w2, under a model-specific middle of the name.
func kimiTensors(w *moe.Weights, layer int, middle string) []*safetensors.Tensor {
	var ts []*safetensors.Tensor
	n, k := w.N, w.K
	for e := range w.E {
		p := fmt.Sprintf("language_model.model.layers.%d.%s.experts.%d.", layer, middle, e)
		upP, upS := fc1Rows(w, e, 0, n)
		gP, gS := fc1Rows(w, e, n, n)
		ts = append(ts,
			safetensors.FromUint8(p+"w1.weight_packed", []int{n, k / 2}, gP),
			safetensors.FromUint8(p+"w1.weight_scale", []int{n, k / 32}, gS),
			safetensors.FromUint8(p+"w3.weight_packed", []int{n, k / 2}, upP),
			safetensors.FromUint8(p+"w3.weight_scale", []int{n, k / 32}, upS),
			safetensors.FromUint8(p+"w2.weight_packed", []int{k, n / 2}, w.W2[e*k*n/2:(e+1)*k*n/2]),
			safetensors.FromUint8(p+"w2.weight_scale", []int{k, n / 32}, w.W2Scale[e*k*n/32:(e+1)*k*n/32]))
	}
	ts = append(ts, safetensors.FromUint8("language_model.model.embed_tokens.weight", []int{4}, []uint8{1, 2, 3, 4}))
	return ts
}

// gptossTensors lays w out as GPT-OSS stores it: stacked, gate and up rows
// interleaved (gate even), blocks of 16 bytes.
func gptossTensors(w *moe.Weights, layer int) []*safetensors.Tensor {
	E, n, k := w.E, w.N, w.K
	gu := make([]uint8, E*2*n*k/2)
	guS := make([]uint8, E*2*n*k/32)
	guB := make([]float32, E*2*n)
	for e := range E {
		for j := range n {
			for _, pair := range [][2]int{{2 * j, n + j}, {2*j + 1, j}} { // even: gate (w31 row n+j), odd: up (row j)
				dst, src := e*2*n+pair[0], e*2*n+pair[1]
				copy(gu[dst*k/2:(dst+1)*k/2], w.W31[src*k/2:(src+1)*k/2])
				copy(guS[dst*k/32:(dst+1)*k/32], w.W31Scale[src*k/32:(src+1)*k/32])
				guB[dst] = w.W31Bias[src]
			}
		}
	}
	p := fmt.Sprintf("model.layers.%d.mlp.experts.", layer)
	bias, _ := safetensors.FromFloat32As(p+"gate_up_proj_bias", safetensors.BF16, []int{E, 2 * n}, guB)
	dbias, _ := safetensors.FromFloat32As(p+"down_proj_bias", safetensors.BF16, []int{E, k}, w.W2Bias)
	return []*safetensors.Tensor{
		safetensors.FromUint8(p+"gate_up_proj_blocks", []int{E, 2 * n, k / 32, 16}, gu),
		safetensors.FromUint8(p+"gate_up_proj_scales", []int{E, 2 * n, k / 32}, guS),
		bias,
		safetensors.FromUint8(p+"down_proj_blocks", []int{E, k, n / 32, 16}, w.W2),
		safetensors.FromUint8(p+"down_proj_scales", []int{E, k, n / 32}, w.W2Scale),
		dbias,
		safetensors.FromUint8(p+"router.weight", []int{2}, []uint8{0, 0}),
	}
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
			writeShards(t, dir, c.ts, nshard)
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
		writeShards(t, dir, c.ts, 2)
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
	writeShards(t, dir, base(), 2)
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
	writeShards(t, dir, gptossTensors(w, 0), 1)
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
	writeShards(f, dir, kimiTensors(w, 0, "mlp"), 2)
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
