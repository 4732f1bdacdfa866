package moe_test

import (
	"kimimoe/internal/numpyref"
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
	for _, nc := range numpyref.NumpyCases(t, "../testdata/ref") {
		c, ref, rms := nc.Case, nc.Ref, nc.RMS
		out := oracleOut(t, c)
		worst := 0.0
		for i := range ref {
			worst = max(worst, math.Abs(out[i]-ref[i]))
		}
		t.Logf("%s: %v %v %v ep=%+v: max |diff| %.3g, output RMS %.3g", filepath.Base(nc.Path), c.Spec.Activation, c.Spec.Chain, c.Spec.Recipe, c.Spec.EP, worst, rms)
		if rms == 0 || worst > 1e-12*rms {
			t.Errorf("%s: oracle differs from numpy by %.3g (RMS %.3g)", nc.Path, worst, rms)
		}
	}
}
