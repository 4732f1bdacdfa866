// Package numpyref loads the oracle reference cases under testdata/ref for
// tests (it imports validation, so it lives apart from testref, which the
// packages below validation use).
package numpyref

import (
	"math"
	"path/filepath"
	"testing"

	"kimimoe/validation"
)

// NumpyCase is one of the oracle reference cases under testdata/ref: a
// case file with the output "out_ref_f64" of an independent numpy float64
// implementation (scripts/gen_testdata.py).
type NumpyCase struct {
	Path string
	Case *validation.Case
	Ref  []float64
	RMS  float64 // of Ref
}

// NumpyCases loads the oracle reference cases from dir (testdata/ref),
// failing the test if fewer than the 4 made are there.
func NumpyCases(t testing.TB, dir string) []NumpyCase {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "oracle_*.safetensors"))
	if len(paths) < 4 {
		t.Fatalf("found %d oracle reference cases in %s, want 4", len(paths), dir)
	}
	var out []NumpyCase
	for _, p := range paths {
		c, err := validation.ReadCase(p)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := c.Extra["out_ref_f64"].Float64s()
		if err != nil {
			t.Fatal(err)
		}
		ss := 0.0
		for _, v := range ref {
			ss += v * v
		}
		out = append(out, NumpyCase{Path: p, Case: c, Ref: ref, RMS: math.Sqrt(ss / float64(len(ref)))})
	}
	return out
}
