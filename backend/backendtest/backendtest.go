// Package backendtest is the conformance suite every backend passes, for
// use in tests (the pattern of net/http/httptest): a backend's test calls
// RunConformance(t, b). It lives apart from package backend so that
// programs importing backend do not link package testing.
package backendtest

import (
	"errors"
	"math"
	"slices"
	"testing"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// RunConformance runs the one conformance suite on b:
//
//   - the smoke suite of the validation matrix (validation.Run) for SiTU
//     (rceil) and GPT-OSS SwiGLU (floor) on every chain, compared with the
//     oracle on the same chain; what b does not claim must fail at Prepare
//     with backend.ErrUnsupported;
//   - every claimed activation with per-expert parameters, x given
//     pre-quantized where claimed;
//   - one prepared layer fed float x and pre-quantized x in turn, eagerly
//     and (for a backend.GraphLayer) through its graph: each call's output
//     must match the oracle for that call's input, so a graph recorded for
//     one input form cannot replay on the other's stale buffers;
//   - bad inputs are errors wrapping moe.ErrInput.
//
// With testing.Short it runs only the mxfp8 chain of the first part.
func RunConformance(t *testing.T, b backend.Backend) {
	caps := b.Capabilities()
	t.Logf("backend %q on %s", b.Name(), caps.Device)
	for _, chain := range moe.Chains() {
		for _, v := range []struct {
			act    activation.Kind
			recipe mxfp.Recipe
		}{{activation.Situ, mxfp.RecipeRCeil}, {activation.SwigluBias, mxfp.RecipeFloor}} {
			name := v.act.String() + "/" + chain.String() + "/" + v.recipe.String()
			t.Run(name, func(t *testing.T) {
				if testing.Short() && chain != moe.ChainMXFP8 {
					t.Skip("short: mxfp8 chain only")
				}
				res, err := validation.Run(b, validation.RunOptions{Suite: "smoke", Activation: v.act, Chain: chain, Recipe: v.recipe})
				if err != nil {
					t.Fatal(err)
				}
				specs, err := validation.ValidationMatrix("smoke", v.act, chain, v.recipe)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range res {
					i := slices.IndexFunc(specs, func(s validation.CaseSpec) bool { return s.Name == r.Name })
					if i < 0 {
						t.Fatalf("%s: no such case in the smoke suite", r.Name)
					}
					// What the capabilities refuse (chain, activation,
					// recipe, biases, expert count) must be refused.
					why := caps.Check(specs[i].LayerSpec(), capsWeights(&specs[i]), b.Name(), backend.GoName)
					switch {
					case why != nil && r.Status != validation.StatusUnsupported:
						t.Errorf("%s: backend's capabilities refuse it (%v) but it gave %s (%s)", r.Name, why, r.Status, r.Detail)
					case why == nil && !r.Passed():
						t.Errorf("%s [%s]: %s %s: %v", r.Name, r.Shape, r.Status, r.Detail, r.Metrics)
					}
				}
			})
		}
	}
	// Every claimed activation, with per-expert parameters, and (where
	// claimed) x given pre-quantized, on two small cases.
	only := []string{"m8_uniform", "kimi_ep32_rank7_small"}
	for _, act := range caps.Activations {
		t.Run("activation_"+act.String(), func(t *testing.T) {
			res, err := validation.Run(b, validation.RunOptions{Suite: "smoke", Activation: act, Chain: caps.Chains[0],
				Recipe: caps.Recipes[0], Only: only, PerExpertParams: true, PreQuantized: caps.PreQuantizedInput})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != len(only) {
				t.Fatalf("%d results for %d cases", len(res), len(only))
			}
			for _, r := range res {
				if !r.Passed() {
					t.Errorf("%s [%s]: %s %s: %v", r.Name, r.Shape, r.Status, r.Detail, r.Metrics)
				}
			}
		})
	}
	if caps.PreQuantizedInput {
		t.Run("mixed_input_forms", func(t *testing.T) { checkMixedInputForms(t, b) })
	}
	if slices.Contains(caps.Activations, activation.Swiglu) && slices.Contains(caps.Chains, moe.ChainFlashInfer) {
		t.Run("nan_beside_finite", func(t *testing.T) { checkNaNBesideFinite(t, b) })
	}
	t.Run("bad_input", func(t *testing.T) { checkBadInput(t, b) })
}

// checkNaNBesideFinite: an intermediate block holding a NaN beside finite
// values, whose amax skips the NaN alone (rceil, mxfp's rule and the
// oracle's). Feature nanFeature's gate row of every expert is one weight,
// -6 x 2^127 at k = 0, and every token's x[0] is 1, so its gate, -1.0e39,
// is -Inf once the flashinfer chain rounds GEMM1 to BF16 (the oracle's
// and every kernel's), and SwiGLU gives NaN there (-Inf x sigmoid(-Inf) =
// -Inf x 0). (The mxfp8 chain's oracle keeps GEMM1 in float64, where that
// gate is finite and SwiGLU gives 0: no NaN to compare.) Feature
// nanFeature + 1, in the same group of eight features, has its up row
// scaled by 2^4, so it holds the block's amax for every token. A kernel
// that let the NaN hide its neighbours (the CUDA GEMM1 epilogue before
// 2026-12-01 dropped the NaN's whole group of eight from the amax)
// quantizes that block with too small a scale, and feature nanFeature + 1
// saturates at 448 x scale.
func checkNaNBesideFinite(t *testing.T, b backend.Backend) {
	const nanFeature = 5
	s := validation.CaseSpec{Name: "nan_beside_finite", M: 8, K: 256, N: 128, ELocal: 4, TopK: 2, Activation: activation.Swiglu,
		Chain: moe.ChainFlashInfer, Recipe: mxfp.RecipeRCeil, Seed: 7, WeightSeed: 7}
	c, err := validation.GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := c.Weights
	for e := range w.E {
		gate := e*2*w.N + w.N + nanFeature
		codes := w.W31[gate*w.K/2 : (gate+1)*w.K/2]
		clear(codes)
		codes[0] = 0x0F                // element 0 in the low nibble: E2M1 -6
		w.W31Scale[gate*w.K/32] = 0xFE // 2^127
		up := e*2*w.N + nanFeature + 1
		for i := up * w.K / 32; i < (up+1)*w.K/32; i++ {
			w.W31Scale[i] += 4
		}
	}
	for tok := range c.Input.M {
		c.Input.X[tok*w.K] = 1
	}
	want, err := c.OracleForward(nil)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := b.Prepare(w, c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	got := nanFilled(c.Input.M * w.K)
	if err := layer.Forward(got, &c.Input, nil); err != nil {
		t.Fatal(err)
	}
	m := validation.Compare(validation.Widen(got), want)
	if m.Cosine < validation.MinCosine || !(m.NRMSE <= validation.MaxNRMSE) || m.NonFiniteMismatch > 0 {
		t.Errorf("a NaN beside finite values in an intermediate block (rceil): %v", m)
	}
}

// smallCase generates a small SiTU case on the backend's first chain.
func smallCase(t *testing.T, b backend.Backend, seed uint64) *validation.Case {
	t.Helper()
	s := validation.CaseSpec{Name: "conformance", M: 4, K: 128, N: 128, ELocal: 4, TopK: 2, Activation: activation.Situ,
		Chain: b.Capabilities().Chains[0], Recipe: mxfp.RecipeRCeil, Seed: seed, WeightSeed: 1}
	c, err := validation.GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkMixedInputForms feeds one prepared layer, in turn, float x, then a
// different x pre-quantized, then float x again (and the reverse), eagerly
// and through the graph; every output is compared with the oracle for that
// call's own input. A backend that decided the input form once (at graph
// capture) would replay the first form's buffers and fail here.
func checkMixedInputForms(t *testing.T, b backend.Backend) {
	c1, c2 := smallCase(t, b, 1), smallCase(t, b, 2) // same weights, different x and routing
	layer, err := b.Prepare(c1.Weights, c1.Spec)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	k := c1.Weights.K
	quantized := func(in moe.Input) moe.Input {
		xq := mxfp.NewMXFP8Matrix(in.M, k)
		xq.Quantize(in.X, c1.Spec.Recipe)
		in.X, in.XQ = nil, xq
		return in
	}
	type call struct {
		name string
		c    *validation.Case
		in   moe.Input
	}
	calls := []call{
		{"x float (case 1)", c1, c1.Input},
		{"x quantized (case 2)", c2, quantized(c2.Input)},
		{"x float (case 1) again", c1, c1.Input},
		{"x quantized (case 1)", c1, quantized(c1.Input)},
		{"x float (case 2)", c2, c2.Input},
	}
	gl, hasGraph := layer.(backend.GraphLayer)
	for _, mode := range []string{"eager", "graph"} {
		if mode == "graph" && !hasGraph {
			continue
		}
		for _, cl := range calls {
			want, err := cl.c.OracleForward(nil)
			if err != nil {
				t.Fatal(err)
			}
			got := nanFilled(cl.in.M * k)
			if mode == "graph" {
				err = gl.ForwardGraph(got, &cl.in)
			} else {
				err = layer.Forward(got, &cl.in, nil)
			}
			if err != nil {
				t.Fatalf("%s %s: %v", mode, cl.name, err)
			}
			m := validation.Compare(validation.Widen(got), want)
			if m.Cosine < validation.MinCosine || !(m.NRMSE <= validation.MaxNRMSE) || m.NonFiniteMismatch > 0 {
				t.Errorf("%s %s: output does not match this call's input: %v", mode, cl.name, m)
			}
		}
	}
}

func nanFilled(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}

func checkBadInput(t *testing.T, b backend.Backend) {
	c := smallCase(t, b, 1)
	c.Input.M, c.Input.X = 2, c.Input.X[:2*c.Weights.K]
	c.Input.TopKIDs, c.Input.TopKWeights = c.Input.TopKIDs[:2*c.Input.TopK], c.Input.TopKWeights[:2*c.Input.TopK]
	layer, err := b.Prepare(c.Weights, c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	out := make([]float32, 2*c.Weights.K)
	try := func(what string, mutate func(in *moe.Input)) {
		in := c.Input
		in.TopKIDs = slices.Clone(in.TopKIDs)
		in.TopKWeights = slices.Clone(in.TopKWeights)
		mutate(&in)
		if err := layer.Forward(out, &in, nil); !errors.Is(err, moe.ErrInput) {
			t.Errorf("%s: got %v, want an error wrapping moe.ErrInput", what, err)
		}
	}
	try("expert id out of range", func(in *moe.Input) { in.TopKIDs[1] = 4 })
	try("expert id below -1", func(in *moe.Input) { in.TopKIDs[0] = -2 })
	try("NaN routing weight", func(in *moe.Input) { in.TopKWeights[0] = float32(math.NaN()) })
	try("short x", func(in *moe.Input) { in.X = in.X[:10] })
	try("negative M", func(in *moe.Input) { in.M = -1 })
	if err := layer.Forward(out[:5], &c.Input, nil); !errors.Is(err, moe.ErrInput) {
		t.Errorf("short dst: got %v, want moe.ErrInput", err)
	}
	if err := layer.Forward(out, nil, nil); !errors.Is(err, moe.ErrInput) {
		t.Errorf("nil input: got %v, want moe.ErrInput", err)
	}
	spec := c.Spec
	spec.Activation = activation.Relu2 // not gated: FC1 rows do not match
	if _, err := b.Prepare(c.Weights, spec); err == nil {
		t.Error("Prepare accepted a non-gated activation for [up; gate] weights")
	}
	if _, err := b.Prepare(nil, c.Spec); err == nil {
		t.Error("Prepare accepted nil weights")
	}
	// A closed layer refuses to run.
	l2, err := b.Prepare(c.Weights, c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l2.Forward(out, &c.Input, nil); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Forward after Close: %v, want backend.ErrClosed", err)
	}
	if err := l2.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
}

// capsWeights are the parts of s's weights that Capabilities.Check reads:
// the local expert count and whether there are biases.
func capsWeights(s *validation.CaseSpec) *moe.Weights {
	w := &moe.Weights{E: s.ELocal, N: s.N, K: s.K, Gated: s.Activation.IsGated()}
	if s.Biases {
		w.W31Bias = []float32{0}
	}
	return w
}
