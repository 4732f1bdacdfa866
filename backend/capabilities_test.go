package backend_test

import (
	"errors"
	"strings"
	"testing"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// Capabilities.Check refuses, each with ErrUnsupported and the name of
// what is refused: an activation, chain or recipe not listed, biases
// where there are none, and a local expert count that is not a multiple
// of ExpertMultiple (also moe.ErrParallel).
func TestCapabilitiesCheck(t *testing.T) {
	c := backend.Capabilities{Activations: []activation.Kind{activation.Situ}, Chains: []moe.Chain{moe.ChainMXFP8},
		Recipes: []mxfp.Recipe{mxfp.RecipeRCeil}, ExpertMultiple: 4}
	spec := moe.LayerSpec{Activation: activation.Situ, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil}
	if err := c.Check(spec, &moe.Weights{E: 8}, "b", "go"); err != nil {
		t.Errorf("8 experts over 4: %v", err)
	}
	biased := &moe.Weights{E: 8, W31Bias: []float32{0}}
	for _, tc := range []struct {
		name string
		spec moe.LayerSpec
		w    *moe.Weights
		want string
	}{
		{"activation", moe.LayerSpec{Activation: activation.Swiglu, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil}, nil, "activation swiglu"},
		{"chain", moe.LayerSpec{Activation: activation.Situ, Chain: moe.ChainBF16, Recipe: mxfp.RecipeRCeil}, nil, "chain bf16"},
		{"recipe", moe.LayerSpec{Activation: activation.Situ, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeFloor}, nil, "recipe floor"},
		{"biases", spec, biased, "FC biases"},
		{"experts", spec, &moe.Weights{E: 6}, "6 local experts do not divide over 4 devices"},
	} {
		err := c.Check(tc.spec, tc.w, "b", "go")
		if !errors.Is(err, backend.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.name == "experts" && !errors.Is(err, moe.ErrParallel) {
			t.Errorf("experts: %v does not wrap moe.ErrParallel", err)
		}
	}
}
