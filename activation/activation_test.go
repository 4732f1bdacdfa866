package activation

import (
	"math"
	"testing"

	"kimimoe/internal/testutil/testref"
)

// ABI values and the gated set, read from FlashInfer 0.6.18
// (flashinfer/tllm_enums.py with PR #4460) and its C++ isGatedActivation
// (docs/CONTRACT.md "Activations").
func TestABIValuesAndGatedTable(t *testing.T) {
	want := []struct {
		k     Kind
		value int
		name  string
		gated bool
	}{
		{Gelu, 0, "gelu", false}, {Relu, 1, "relu", false}, {Silu, 2, "silu", false},
		{Swiglu, 3, "swiglu", true}, {Geglu, 4, "geglu", true}, {SwigluBias, 5, "swiglu_oai", true},
		{Relu2, 6, "relu2", false}, {SwigluStep, 7, "swiglu_step", true}, {GegluTanh, 8, "geglu_tanh", true},
		{Identity, 9, "identity", false}, {Situ, 10, "situ", true},
	}
	if len(Kinds()) != len(want) {
		t.Fatalf("Kinds() has %d entries, want %d", len(Kinds()), len(want))
	}
	for _, w := range want {
		if w.k.FlashInferABI() != w.value || w.k.String() != w.name || w.k.IsGated() != w.gated || !w.k.Valid() {
			t.Errorf("%v: value %d name %q gated %v, want %d %q %v", w.k, w.k.FlashInferABI(), w.k.String(), w.k.IsGated(), w.value, w.name, w.gated)
		}
		k, err := ParseKind(w.name)
		if err != nil || k != w.k {
			t.Errorf("ParseKind(%q) = %v, %v", w.name, k, err)
		}
		if k, err := KindFromFlashInferABI(w.value); err != nil || k != w.k {
			t.Errorf("KindFromFlashInferABI(%d) = %v, %v", w.value, k, err)
		}
	}
	if InvalidType.FlashInferABI() != 11 || InvalidType.Valid() {
		t.Error("InvalidType must be 11 and not valid")
	}
	if _, err := KindFromFlashInferABI(11); err == nil {
		t.Error("KindFromFlashInferABI(11) (InvalidType) must fail")
	}
	// The zero value is no kind: a forgotten activation is caught.
	var zero Kind
	if zero.Valid() || zero.FlashInferABI() != -1 || zero.String() != "unset" {
		t.Errorf("zero Kind: valid %v, ABI %d, %q", zero.Valid(), zero.FlashInferABI(), zero)
	}
	if err := DefaultParams().Validate(zero); err == nil {
		t.Error("Validate(zero Kind) must fail")
	}
	for _, bad := range []string{"", "invalid", "swish", "situ2"} {
		if k, err := ParseKind(bad); err == nil {
			t.Errorf("ParseKind(%q) = %v, want an error", bad, k)
		}
	}
	if k, err := ParseKind("SwiGLU_OAI"); err != nil || k != SwigluBias {
		t.Errorf("ParseKind is case-insensitive: got %v, %v", k, err)
	}
	if err := DefaultParams().Validate(InvalidType); err == nil {
		t.Error("Validate(InvalidType) must fail")
	}
	defer func() {
		if recover() == nil {
			t.Error("Eval(InvalidType) must panic, not act as Identity")
		}
	}()
	p := DefaultParams()
	Eval(InvalidType, &p, 1, 1)
}

func loadActivations(t *testing.T) *testref.File {
	return testref.Load(t, "../testdata/ref/activations.safetensors")
}

// The reference values are mpmath at 50 digits (scripts/gen_testdata.py,
// testdata/ref/README.md), with the parameters in the file's metadata:
// default, and "_p2" = SiTU (2, 10), GPT-OSS (alpha 1, beta 0.5, limit 5),
// SwigluStep limit 5.
func TestEvalAgainstMpmath(t *testing.T) {
	f := loadActivations(t)
	gate, up := f.F64("gate"), f.F64("up")
	p2 := Params{SituBeta: 2, SituLinearBeta: 10, SwigluAlpha: 1, SwigluBeta: 0.5, SwigluLimit: 5}
	for _, k := range Kinds() {
		for _, v := range []struct {
			suffix string
			p      Params
		}{{"", DefaultParams()}, {"_p2", p2}} {
			ref := f.F64("ref_" + k.String() + v.suffix)
			worst := 0.0
			for i := range ref {
				got := Eval(k, &v.p, gate[i], up[i])
				// 1e-13 relative: a few hundred float64 ulps, for formulas of a
				// few library calls whose arguments are themselves rounded. The
				// absolute floor 1e-60 covers the far GELU tail (x < -16), where
				// the condition number (about x^2) amplifies the rounding of
				// x/sqrt2 and outputs go subnormal; such values are 60 binades
				// below the smallest E8M0 scale and cannot reach an MX block.
				err := math.Abs(got - ref[i])
				if err > 1e-13*math.Abs(ref[i])+1e-60 {
					t.Errorf("%v%s(gate=%v, up=%v) = %v, mpmath %v (rel err %.2g)", k, v.suffix, gate[i], up[i], got, ref[i], err/math.Abs(ref[i]))
				}
				if math.Abs(ref[i]) > 1e-60 {
					worst = max(worst, err/math.Abs(ref[i]))
				}
			}
			t.Logf("%v%s: worst relative error %.3g over %d points", k, v.suffix, worst, len(ref))
		}
	}
}

// Eval32 follows Eval to float32 accuracy. Inputs are rounded to float32
// first and Eval is evaluated on the same float32 inputs. The bound is
// 2^-19 relative (about 16 float32 ulps: a handful of roundings, each of
// which the formula can amplify a little) plus 2^-24 absolute: in the far
// tails (gelu(-9) ~ 1e-19) an intermediate's float32 rounding is amplified
// by the function's condition number, and such values sit many binades
// below anything an MXFP8 block around them can hold.
func TestEval32TracksEval(t *testing.T) {
	f := loadActivations(t)
	gate, up := f.F64("gate"), f.F64("up")
	p := DefaultParams()
	for _, k := range Kinds() {
		worst := 0.0
		for i := range gate {
			g32, u32 := float32(gate[i]), float32(up[i])
			want := Eval(k, &p, float64(g32), float64(u32))
			got := float64(Eval32(k, &p, g32, u32))
			err := math.Abs(got - want)
			if err > 0x1p-19*math.Abs(want)+0x1p-24 {
				t.Errorf("%v: Eval32(%v, %v) = %v, Eval %v", k, g32, u32, got, want)
			}
			if math.Abs(want) > 1e-3 {
				worst = max(worst, err/math.Abs(want))
			}
		}
		t.Logf("%v: Eval32 worst relative error %.3g (outputs above 1e-3)", k, worst)
	}
}

// Limits: SiTU tends to ±beta*linear_beta (4*25 = 100) as gate -> +inf and
// up -> ±inf, and to 0 as gate -> -inf (sigmoid -> 0). GPT-OSS SwiGLU clamps
// gate above at limit and up to [-limit, limit]: values past the clamp
// points equal the values at them.
func TestLimitsAndClampPoints(t *testing.T) {
	p := DefaultParams()
	if got := Eval(Situ, &p, 1000, 1000); got != 100 {
		t.Errorf("SiTU(+inf, +inf) = %v, want 100", got)
	}
	if got := Eval(Situ, &p, 1000, -1000); got != -100 {
		t.Errorf("SiTU(+inf, -inf) = %v, want -100", got)
	}
	if got := Eval(Situ, &p, -1000, 1000); got != 0 {
		t.Errorf("SiTU(-inf, u) = %v, want 0", got)
	}
	for _, g := range []float64{-3, 0.5, 50} {
		for _, u := range []float64{-100, -7.5, 3, 9} {
			clampG := math.Min(g, 7)
			clampU := math.Min(math.Max(u, -7), 7)
			if Eval(SwigluBias, &p, g, u) != Eval(SwigluBias, &p, clampG, clampU) {
				t.Errorf("SwigluBias(%v, %v) differs from its value at the clamp points", g, u)
			}
		}
	}
	// Gate is clamped from above only: below -limit it is not clamped.
	if Eval(SwigluBias, &p, -9, 1) == Eval(SwigluBias, &p, -7, 1) {
		t.Error("SwigluBias must not clamp gate from below")
	}
	// SwigluStep: silu(g) clamps at limit: silu(100) = 100 -> 7; up clamps.
	if got := Eval(SwigluStep, &p, 100, 100); got != 49 {
		t.Errorf("SwigluStep(100, 100) = %v, want 7*7", got)
	}
}

func TestApplyLayout(t *testing.T) {
	p := DefaultParams()
	h := []float64{1, 2, -3, 4} // [up; gate] with N = 2: up = {1, 2}, gate = {-3, 4}
	dst := make([]float64, 2)
	Apply(dst, Situ, &p, h)
	if dst[0] != Eval(Situ, &p, -3, 1) || dst[1] != Eval(Situ, &p, 4, 2) {
		t.Errorf("Apply read the wrong halves: %v", dst)
	}
	Apply(dst, Relu2, &p, h[:2])
	if dst[0] != 1 || dst[1] != 4 {
		t.Errorf("Apply relu2 = %v", dst)
	}
}

func TestValidate(t *testing.T) {
	good := DefaultParams()
	for _, k := range Kinds() {
		if err := good.Validate(k); err != nil {
			t.Errorf("default params for %v: %v", k, err)
		}
	}
	bad := good
	bad.SituBeta = 0
	if bad.Validate(Situ) == nil {
		t.Error("situ_beta 0 accepted")
	}
	bad = good
	bad.SwigluLimit = math.Inf(1)
	if bad.Validate(SwigluBias) == nil || bad.Validate(SwigluStep) == nil {
		t.Error("infinite limit accepted")
	}
	if bad.Validate(Situ) != nil {
		t.Error("Situ must not read SwigluLimit")
	}
}
