package backend_test

import (
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"

	"kimimoe/backend"
	"kimimoe/backend/backendtest"
	"kimimoe/internal/testutil/numpyref"
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
	b, _ := backend.Open(backend.GoName)
	for _, nc := range numpyref.NumpyCases(t, "../testdata/ref") {
		layer, err := b.Prepare(nc.Case.Weights, nc.Case.Spec)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(nc.Ref))
		for i := range got {
			got[i] = float32(math.NaN())
		}
		if err := layer.Forward(got, &nc.Case.Input, nil); err != nil {
			t.Fatal(err)
		}
		for i, r := range nc.Ref {
			tol := 0.5*ulp32(r) + 1e-12*nc.RMS
			if d := math.Abs(float64(got[i]) - r); !(d <= tol) {
				t.Errorf("%s: element %d: go backend %v, numpy %v (|diff| %.3g > %.3g)", filepath.Base(nc.Path), i, got[i], r, d, tol)
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

// Forward and Close may run concurrently: each Forward either completes or
// returns ErrClosed (before, Close set the oracle to nil under a running
// Forward: a data race and a nil dereference). Run with -race.
func TestGoLayerCloseDuringForward(t *testing.T) {
	b, _ := backend.Open(backend.GoName)
	s := validation.CaseSpec{Name: "race", M: 4, K: 64, N: 32, ELocal: 2, TopK: 1, Activation: activation.Situ,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 1}
	c, err := validation.GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := b.Prepare(c.Weights, c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]float32, s.M*s.K)
			for range 20 {
				if err := layer.Forward(out, &c.Input, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	if err := layer.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, backend.ErrClosed) {
			t.Errorf("Forward during Close: %v, want nil or ErrClosed", err)
		}
	}
}
