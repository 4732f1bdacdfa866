package moe_test

import (
	"kimimoe/validation"
	"math"
	"path/filepath"
	"testing"
)

// TestOracleAgainstNumpy runs the oracle on the cases under
// ../testdata/ref/oracle_*.safetensors and compares with their
// out_ref_f64, computed by an independent numpy float64 implementation
// (scripts/gen_testdata.py; ml_dtypes decodes, dense float64 matmuls, its
// own MX quantization). Both compute the same real numbers up to float64
// rounding in different orders, so they must agree to 1e-12 relative to the
// output's RMS. An MXFP8 requantization landing on the other side of a
// rounding boundary would show as a difference near 1e-2; none does.
func TestOracleAgainstNumpy(t *testing.T) {
	paths, _ := filepath.Glob("../testdata/ref/oracle_*.safetensors")
	if len(paths) < 4 {
		t.Fatalf("found %d oracle reference cases, want 4", len(paths))
	}
	for _, p := range paths {
		c, err := validation.ReadCase(p)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := c.Extra["out_ref_f64"].Float64s()
		if err != nil {
			t.Fatal(err)
		}
		out := oracleOut(t, c)
		ss := 0.0
		for _, v := range ref {
			ss += v * v
		}
		rms := math.Sqrt(ss / float64(len(ref)))
		worst := 0.0
		for i := range ref {
			worst = max(worst, math.Abs(out[i]-ref[i]))
		}
		t.Logf("%s: %v %v %v ep=%+v: max |diff| %.3g, output RMS %.3g", filepath.Base(p), c.Spec.Activation, c.Spec.Chain, c.Spec.Recipe, c.Spec.EP, worst, rms)
		if rms == 0 || worst > 1e-12*rms {
			t.Errorf("%s: oracle differs from numpy by %.3g (RMS %.3g)", p, worst, rms)
		}
	}
}
