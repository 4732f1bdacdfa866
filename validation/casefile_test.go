package validation

import (
	"encoding/binary"
	"errors"
	"flag"
	"kimimoe/moe"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kimimoe/activation"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

func smallCase(t testing.TB, act activation.Kind, chain moe.Chain, recipe mxfp.Recipe, seed uint64) *Case {
	t.Helper()
	s := CaseSpec{Name: "small", M: 3, K: 64, N: 32, ELocal: 4, TopK: 2, Routing: RoutingMasked, Activation: act,
		Chain: chain, Recipe: recipe, Seed: seed, WeightSeed: seed}
	c, err := GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCaseFileRoundTrip(t *testing.T) {
	c := smallCase(t, activation.SwigluBias, moe.ChainFlashInfer, mxfp.RecipeFloor, 1)
	c.Spec.Params = []activation.Params{activation.DefaultParams(), activation.DefaultParams(), activation.DefaultParams(), activation.DefaultParams()}
	c.Spec.Params[2].SwigluLimit = 5.5 // per-expert parameters survive
	c.Weights.W31Bias = make([]float32, c.Weights.E*c.Weights.Rows())
	c.Weights.W2Bias = make([]float32, c.Weights.E*c.Weights.K)
	for i := range c.Weights.W31Bias {
		c.Weights.W31Bias[i] = float32(i%5) / 4 // biases survive too
	}
	path := filepath.Join(t.TempDir(), "case.safetensors")
	if err := WriteCase(path, c); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCase(path)
	if err != nil {
		t.Fatal(err)
	}
	// The whole spec, inputs and weights come back as written (EP's zero
	// value is written as ep_size 1).
	want := c.Spec
	want.EP = want.EP.Normalize()
	if d := cmp.Diff(want, back.Spec); d != "" {
		t.Fatalf("spec changed (-written +read):\n%s", d)
	}
	if d := cmp.Diff(c.Input, back.Input); d != "" {
		t.Fatalf("input changed (-written +read):\n%s", d)
	}
	if d := cmp.Diff(c.Weights, back.Weights); d != "" {
		t.Fatalf("weights changed (-written +read):\n%s", d)
	}
	if !Compare(oracleOut(t, c), oracleOut(t, back)).Bitwise {
		t.Fatal("the case read back gives a different output")
	}
}

// rawFile builds a case file by hand so each test can break one thing.
func rawFile(t testing.TB, mutate func(ts map[string]*safetensors.Tensor, md map[string]string)) []byte {
	t.Helper()
	c := smallCase(t, activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil, 2)
	list, md := c.Tensors()
	ts := map[string]*safetensors.Tensor{}
	var order []string
	for _, x := range list {
		ts[x.Name] = x
		order = append(order, x.Name)
	}
	mutate(ts, md)
	var out []*safetensors.Tensor
	for _, n := range order {
		if ts[n] != nil {
			out = append(out, ts[n])
		}
	}
	var buf strings.Builder
	if err := safetensors.Write(&buf, out, md); err != nil {
		t.Fatal(err)
	}
	return []byte(buf.String())
}

func TestBadCaseFiles(t *testing.T) {
	good := rawFile(t, func(map[string]*safetensors.Tensor, map[string]string) {})
	hlen := binary.LittleEndian.Uint64(good)
	lying := append([]byte{}, good...)
	hdr := strings.Replace(string(lying[8:8+hlen]), `"data_offsets":[0,`, `"data_offsets":[4,`, 1)
	copy(lying[8:], hdr)
	cases := []struct {
		name, wantInErr string
		data            []byte
	}{
		{"truncated data", "truncated", good[:len(good)-100]},
		{"truncated header", "header length", good[:20]},
		{"empty", "empty", nil},
		{"header lies about offsets", `tensor "x"`, lying},
		{"missing tensor", `"topk_ids"`, rawFile(t, func(ts map[string]*safetensors.Tensor, _ map[string]string) { delete(ts, "topk_ids") })},
		{"wrong dtype", `"w31"`, rawFile(t, func(ts map[string]*safetensors.Tensor, _ map[string]string) {
			ts["w31"] = &safetensors.Tensor{Name: "w31", DType: safetensors.I8, Shape: ts["w31"].Shape, Data: ts["w31"].Data}
		})},
		{"wrong shape", `"w2_scale"`, rawFile(t, func(ts map[string]*safetensors.Tensor, _ map[string]string) {
			ts["w2_scale"].Shape = []int{4, 32, 2}
			ts["w2_scale"].Data = ts["w2_scale"].Data[:256]
		})},
		{"unknown activation", "activation", rawFile(t, func(_ map[string]*safetensors.Tensor, md map[string]string) { md["activation"] = "swish" })},
		{"no activation", "activation", rawFile(t, func(_ map[string]*safetensors.Tensor, md map[string]string) { delete(md, "activation") })},
		{"bad chain", "chain", rawFile(t, func(_ map[string]*safetensors.Tensor, md map[string]string) { md["chain"] = "fp16" })},
		{"bad ep", "ep_size", rawFile(t, func(_ map[string]*safetensors.Tensor, md map[string]string) { md["ep_rank"] = "3"; md["ep_size"] = "2" })},
		{"bad param list", "situ_beta", rawFile(t, func(_ map[string]*safetensors.Tensor, md map[string]string) { md["situ_beta"] = "4,4" })},
		{"id out of range", "topk_ids", rawFile(t, func(ts map[string]*safetensors.Tensor, _ map[string]string) {
			binary.LittleEndian.PutUint32(ts["topk_ids"].Data, 99)
		})},
		{"gate/up rows vs activation", `"w31"`, rawFile(t, func(_ map[string]*safetensors.Tensor, md map[string]string) { md["activation"] = "relu2" })},
	}
	dir := t.TempDir()
	for _, c := range cases {
		path := filepath.Join(dir, strings.NewReplacer(" ", "_", "/", "_").Replace(c.name))
		if err := os.WriteFile(path, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadCase(path)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !errors.Is(err, ErrCaseFile) && !errors.Is(err, safetensors.ErrFormat) {
			t.Errorf("%s: error %v wraps neither ErrCaseFile nor safetensors.ErrFormat", c.name, err)
		}
		if !strings.Contains(err.Error(), c.wantInErr) {
			t.Errorf("%s: error %q does not mention %q", c.name, err, c.wantInErr)
		}
	}
	if _, err := ReadCase(filepath.Join(dir, "does-not-exist")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// Golden files: small cases with the oracle's float64 output "out_f64" and
// the float32 "out" of `kimimoe run`. Any change to the oracle's numbers
// shows here. Regenerate with: go test ./validation -run Golden -update
func TestGolden(t *testing.T) {
	golden := []struct {
		name   string
		act    activation.Kind
		chain  moe.Chain
		recipe mxfp.Recipe
	}{
		{"situ_mxfp8_rceil", activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil},
		{"situ_flashinfer_rceil", activation.Situ, moe.ChainFlashInfer, mxfp.RecipeRCeil},
		{"swiglu_oai_exact_floor", activation.SwigluBias, moe.ChainExact, mxfp.RecipeFloor},
	}
	for i, g := range golden {
		path := filepath.Join("..", "testdata", "golden", g.name+".safetensors")
		if *update {
			c := smallCase(t, g.act, g.chain, g.recipe, uint64(10+i))
			out := oracleOut(t, c)
			out32 := make([]float32, len(out))
			for j, v := range out {
				out32[j] = float32(v)
			}
			if err := WriteCase(path, c, safetensors.FromFloat64("out_f64", []int{c.Input.M, c.Weights.K}, out),
				safetensors.FromFloat32("out", []int{c.Input.M, c.Weights.K}, out32)); err != nil {
				t.Fatal(err)
			}
		}
		c, err := ReadCase(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.Extra["out_f64"].Float64s()
		if err != nil {
			t.Fatal(err)
		}
		if m := Compare(oracleOut(t, c), want); !m.Bitwise {
			t.Errorf("%s: oracle output changed: %v", g.name, m)
		}
		nonzero := 0
		for _, v := range want {
			if v != 0 && !math.IsNaN(v) {
				nonzero++
			}
		}
		if nonzero < len(want)/2 {
			t.Errorf("%s: golden output is mostly zero (%d of %d nonzero): a weak test", g.name, nonzero, len(want))
		}
	}
}

// The zero CaseSpec is caught at the first call, with the field named
// (before, GenerateCase(&CaseSpec{}) returned no error and failed later).
func TestZeroCaseSpec(t *testing.T) {
	_, err := GenerateCase(&CaseSpec{}, nil)
	if err == nil || !strings.Contains(err.Error(), "CaseSpec.K") {
		t.Fatalf("GenerateCase(&CaseSpec{}): %v, want an error naming CaseSpec.K", err)
	}
	s := CaseSpec{Name: "no-activation", M: 1, K: 64, N: 32, ELocal: 2, TopK: 1, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil}
	if _, err := GenerateCase(&s, nil); err == nil || !strings.Contains(err.Error(), "CaseSpec.Activation") {
		t.Fatalf("spec without an activation: %v, want an error naming CaseSpec.Activation", err)
	}
	var spec moe.LayerSpec
	w := moe.NewWeights(1, 32, 32, true)
	if err := spec.Validate(w); err == nil || !strings.Contains(err.Error(), "LayerSpec.Activation") {
		t.Fatalf("zero LayerSpec: %v, want an error naming LayerSpec.Activation", err)
	}
}

// The interop golden cases, made on the GPU machine by
// python/interop_e2e.py (docs/INTEROP.md): a GPT-OSS-layout layer with
// biases read from a checkpoint by `kimimoe case`, and a serving stack's
// [gate; up] FC1 with swizzled scales written by the python/ helper (kimimoe.dump_case),
// each with the output of an independent float64 torch computation
// ("out_ref_f64", the weights dequantized by transformers' MXFP4 code for
// GPT-OSS). The oracle (exact chain) must agree to 1e-12 of the output's
// RMS: both compute the same real numbers in float64, in other orders.
func TestInteropGolden(t *testing.T) {
	for _, name := range []string{"golden_gptoss_biases", "golden_kimi_gate_up_swizzled"} {
		c, err := ReadCase(filepath.Join("..", "testdata", "golden", name+".safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		ref, err := c.Extra["out_ref_f64"].Float64s()
		if err != nil {
			t.Fatal(err)
		}
		got := oracleOut(t, c)
		ss, worst := 0.0, 0.0
		for i, r := range ref {
			ss += r * r
			worst = max(worst, math.Abs(got[i]-r))
		}
		rms := math.Sqrt(ss / float64(len(ref)))
		t.Logf("%s: %v, chain %v, biases %v: max |diff| %.3g, RMS %.3g", name, c.Spec.Activation, c.Spec.Chain, c.Weights.HasBias(), worst, rms)
		if rms == 0 || worst > 1e-12*rms {
			t.Errorf("%s: oracle differs from the torch float64 reference by %.3g (RMS %.3g)", name, worst, rms)
		}
	}
}

// A case holding router_logits beside topk_ids that pick other experts is
// an input error naming the first token that disagrees; when they agree the
// case reads (before, topk_ids won silently).
func TestCaseRoutingMustAgree(t *testing.T) {
	s := CaseSpec{Name: "r", M: 3, K: 64, N: 32, ELocal: 4, TopK: 2, Activation: activation.Situ, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 2}
	c, err := GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, 3*4)
	for tok := range 3 { // make each token's own topk_ids the two largest logits
		for _, id := range c.Input.TopKIDs[tok*2 : tok*2+2] {
			logits[tok*4+int(id)] = 5
		}
	}
	path := filepath.Join(t.TempDir(), "c.safetensors")
	lt := safetensors.FromFloat32("router_logits", []int{3, 4}, logits)
	if err := WriteCase(path, c, lt); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCase(path); err != nil {
		t.Fatalf("agreeing router_logits refused: %v", err)
	}
	other := int32(0)
	for slices.Contains(c.Input.TopKIDs[2:4], other) {
		other++
	}
	logits[1*4+int(c.Input.TopKIDs[2])] = -5
	logits[1*4+int(other)] = 9
	if err := WriteCase(path, c, safetensors.FromFloat32("router_logits", []int{3, 4}, logits)); err != nil {
		t.Fatal(err)
	}
	_, err = ReadCase(path)
	if !errors.Is(err, ErrCaseFile) || !strings.Contains(err.Error(), "disagree from token 1") {
		t.Fatalf("disagreeing router_logits: %v", err)
	}
	// A masked slot does not hide the other slot's disagreement (every
	// token with a -1 was skipped).
	c.Input.TopKIDs[1*2+1] = -1
	if err := WriteCase(path, c, safetensors.FromFloat32("router_logits", []int{3, 4}, logits)); err != nil {
		t.Fatal(err)
	}
	_, err = ReadCase(path)
	if !errors.Is(err, ErrCaseFile) || !strings.Contains(err.Error(), "disagree from token 1") {
		t.Fatalf("a masked token's disagreeing slot: %v", err)
	}
}

// WriteCase refuses what ReadCase would reject, without panicking (nil and
// empty cases panicked; an invalid activation was written as "Kind(99)").
func TestWriteCaseRefusesInvalid(t *testing.T) {
	s := CaseSpec{Name: "w", M: 2, K: 64, N: 32, ELocal: 4, TopK: 2, Activation: activation.Situ, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 2}
	good, err := GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	kind99 := *good
	kind99.Spec.Activation = 99
	threeSets := *good
	threeSets.Spec.Params = make([]activation.Params, 3)
	for i := range threeSets.Spec.Params {
		threeSets.Spec.Params[i] = activation.DefaultParams()
	}
	path := filepath.Join(t.TempDir(), "c.safetensors")
	for name, c := range map[string]*Case{"nil": nil, "empty": {}, "activation 99": &kind99, "3 parameter sets for 4 experts": &threeSets} {
		if err := WriteCase(path, c); !errors.Is(err, ErrCaseFile) {
			t.Errorf("%s: %v, want ErrCaseFile", name, err)
		}
	}
	if err := WriteCase(path, good, nil); !errors.Is(err, ErrCaseFile) {
		t.Errorf("nil extra: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused case left a file: %v", err)
	}
	if rows := SampleRows(-3, 5, 1); len(rows) != 0 {
		t.Errorf("SampleRows(-3, 5, 1) = %v", rows)
	}
}

// Absurd sizes are errors before any allocation (round 3's R3-16, R3-17:
// M = 2^40 and ep_size 2^31-1 died out of memory; a huge K overflowed to
// empty weights with a nil error).
func TestGenerateRefusesAbsurdSizes(t *testing.T) {
	base := CaseSpec{Name: "big", M: 2, K: 64, N: 32, ELocal: 4, TopK: 2, Activation: activation.Situ, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 2}
	for _, edit := range []func(s *CaseSpec){
		func(s *CaseSpec) { s.M = 1 << 40 },
		func(s *CaseSpec) { s.EP = moe.EP{Size: 1<<31 - 1, Rank: 0}; s.ELocal = 1 },
		func(s *CaseSpec) { s.K = 1 << 40 },
		func(s *CaseSpec) { s.N, s.K, s.ELocal = 1<<20, 1<<20, 64 },
	} {
		s := base
		edit(&s)
		if _, err := GenerateWeights(&s); err == nil {
			t.Errorf("GenerateWeights(%+v): no error", s)
		}
		if _, err := GenerateCase(&s, nil); err == nil {
			t.Errorf("GenerateCase(%+v): no error", s)
		}
	}
}
