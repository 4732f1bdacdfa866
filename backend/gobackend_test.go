package backend_test

import (
	"math"
	"path/filepath"
	"testing"

	"kimimoe/backend"
	"kimimoe/backend/backendtest"
	"kimimoe/validation"
)

// The conformance suite on the "go" backend compares the oracle with
// itself (rounded to float32), so its metrics cannot fail by construction.
// What it guards here is everything around the numbers: the harness
// (poisoned outputs, determinism, statuses, row sampling), errors for bad
// input, Close semantics and the input forms. The numbers themselves are
// checked independently by TestGoBackendAgainstNumpy below.
func TestGoBackendConformance(t *testing.T) {
	b, err := backend.Open(backend.GoName)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	backendtest.RunConformance(t, b)
}

// TestGoBackendAgainstNumpy runs the "go" backend, through the Backend and
// Layer interfaces, on the reference cases under ../testdata/ref made by an
// independent numpy float64 implementation (scripts/gen_testdata.py;
// ml_dtypes decodes, dense float64 matmuls, its own MX quantization) and
// compares with their out_ref_f64. The backend rounds the float64 oracle
// once to float32, so each element must be within half a float32 ulp of the
// reference plus the two float64 orders' difference (1e-12 of the RMS).
func TestGoBackendAgainstNumpy(t *testing.T) {
	paths, _ := filepath.Glob("../testdata/ref/oracle_*.safetensors")
	if len(paths) < 4 {
		t.Fatalf("found %d reference cases, want 4", len(paths))
	}
	b, _ := backend.Open(backend.GoName)
	for _, p := range paths {
		c, err := validation.ReadCase(p)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := c.Extra["out_ref_f64"].Float64s()
		if err != nil {
			t.Fatal(err)
		}
		layer, err := b.Prepare(c.Weights, c.Spec)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(ref))
		for i := range got {
			got[i] = float32(math.NaN())
		}
		if err := layer.Forward(got, &c.Input, nil); err != nil {
			t.Fatal(err)
		}
		ss := 0.0
		for _, v := range ref {
			ss += v * v
		}
		rms := math.Sqrt(ss / float64(len(ref)))
		for i, r := range ref {
			tol := 0.5*ulp32(r) + 1e-12*rms
			if d := math.Abs(float64(got[i]) - r); !(d <= tol) {
				t.Errorf("%s: element %d: go backend %v, numpy %v (|diff| %.3g > %.3g)", filepath.Base(p), i, got[i], r, d, tol)
				break
			}
		}
		layer.Close()
	}
}

// ulp32 is the spacing of float32 values at |x|.
func ulp32(x float64) float64 {
	f := float32(math.Abs(x))
	return float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
}
