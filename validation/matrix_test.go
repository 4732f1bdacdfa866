package validation_test

import (
	"strings"
	"testing"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// The gpt-oss suite is GPT-OSS's two layers as their config.json gives
// them (K = N = 2880, 128 and 32 experts, top-4), on their own activation
// with biases whatever activation the caller names, each case valid.
func TestGPTOSSSuite(t *testing.T) {
	cases, err := validation.ValidationMatrix("gpt-oss", activation.Situ, moe.ChainBF16, mxfp.RecipeRCeil)
	if err != nil || len(cases) != 6 {
		t.Fatalf("%d cases, %v", len(cases), err)
	}
	for _, s := range cases {
		want := 128
		if strings.HasPrefix(s.Name, "gpt-oss-20b") {
			want = 32
		}
		if s.K != 2880 || s.N != 2880 || s.ELocal != want || s.TopK != 4 || !s.Biases || s.Activation != activation.SwigluBias ||
			s.Chain != moe.ChainBF16 || s.Params[0].SwigluLimit != 7 || s.Params[0].SwigluAlpha != 1.702 {
			t.Errorf("%s: %+v", s.Name, s)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if (s.M == 512) != (s.SampleRows == 32) {
			t.Errorf("%s: M=%d samples %d rows", s.Name, s.M, s.SampleRows)
		}
	}
	all, _ := validation.ValidationMatrix("all", activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil)
	for _, s := range all {
		if s.K == 2880 {
			t.Errorf("all holds %s: the GPT-OSS layers stay out of it", s.Name)
		}
	}
}
