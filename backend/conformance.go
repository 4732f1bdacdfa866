package backend

import (
	"errors"
	"slices"
	"testing"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// RunConformance is the one conformance suite every backend passes. It
// runs the smoke suite of the validation matrix for SiTU (rceil) and GPT-OSS
// SwiGLU (floor) on every chain the backend claims, checks that what it
// does not claim fails at Prepare with ErrUnsupported, and that bad inputs
// are errors wrapping moe.ErrInput. With testing.Short it runs only the
// mxfp8 chain.
func RunConformance(t *testing.T, b Backend) {
	caps := b.Capabilities()
	t.Logf("backend %q on %s", b.Name(), caps.Device)
	for _, chain := range moe.Chains() {
		for _, v := range []struct {
			act    activation.Kind
			recipe mxfp.Recipe
		}{{activation.Situ, mxfp.RecipeRCeil}, {activation.SwigluBias, mxfp.RecipeFloor}} {
			name := v.act.String() + "/" + chain.String() + "/" + v.recipe.String()
			supported := slices.Contains(caps.Chains, chain) && slices.Contains(caps.Activations, v.act) && slices.Contains(caps.Recipes, v.recipe)
			t.Run(name, func(t *testing.T) {
				if testing.Short() && chain != moe.ChainMXFP8 {
					t.Skip("short: mxfp8 chain only")
				}
				res, err := Validate(b, ValidateOptions{Suite: "smoke", Activation: v.act, Chain: chain, Recipe: v.recipe})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range res {
					switch {
					case !supported && r.Status != "UNSUPPORTED":
						t.Errorf("%s: backend does not claim %s but gave %s (%s)", r.Name, name, r.Status, r.Detail)
					case supported && !r.Passed():
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
			res, err := Validate(b, ValidateOptions{Suite: "smoke", Activation: act, Chain: caps.Chains[0],
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
	t.Run("bad_input", func(t *testing.T) { checkBadInput(t, b) })
}

func checkBadInput(t *testing.T, b Backend) {
	s := moe.CaseSpec{Name: "bad", M: 2, K: 128, N: 128, ELocal: 4, TopK: 2, Activation: activation.Situ,
		Chain: b.Capabilities().Chains[0], Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 1}
	c, err := moe.GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := b.Prepare(c.Weights, c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	out := make([]float32, 2*128)
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
	try("NaN routing weight", func(in *moe.Input) { in.TopKWeights[0] = float32(nanF()) })
	try("short x", func(in *moe.Input) { in.X = in.X[:10] })
	if err := layer.Forward(out[:5], &c.Input, nil); !errors.Is(err, moe.ErrInput) {
		t.Errorf("short dst: got %v, want moe.ErrInput", err)
	}
	spec := c.Spec
	spec.Activation = activation.Relu2 // not gated: FC1 rows do not match
	if _, err := b.Prepare(c.Weights, spec); err == nil {
		t.Error("Prepare accepted a non-gated activation for [up; gate] weights")
	}
}

func nanF() float64 { var z float64; return z / z }
