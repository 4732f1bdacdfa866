package check

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"kimimoe/moe"
	"kimimoe/safetensors"
)

// A candidate no mistake explains gets no closest hypothesis.
func TestDiagnoseNamesNothingForNoise(t *testing.T) {
	c := testCase(t, moe.ChainMXFP8, 1, 0, false)
	cand := candidate(t, c)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range cand {
		cand[i] = float32(rng.NormFloat64())
	}
	r, err := Compare(c, cand, safetensors.F32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	Diagnose(c, r)
	if b, cl := r.Best(), r.Closest(); b != nil || cl != nil {
		t.Fatalf("noise explained: best %+v, closest %+v", b, cl)
	}
}

// Observations name the rows, values, experts and blocks of a failure.
func TestObservations(t *testing.T) {
	c := testCase(t, moe.ChainMXFP8, 1, 0, false)
	m, k := c.Input.M, c.Weights.K
	for _, tc := range []struct {
		name, want string
		edit       func(cand []float32)
	}{
		{"zero rows", "1 rows are all zero", func(cand []float32) { clear(cand[(m-1)*k:]) }},
		{"shifted", "shifted by +1", func(cand []float32) {
			copy(cand, append([]float32(nil), cand[k:]...)) // row t holds row t+1; the last stays
		}},
		{"one NaN", "only non-finite values differ", func(cand []float32) { cand[5] = float32(math.NaN()) }},
		{"alternating blocks", "every other block", func(cand []float32) {
			for i := range cand {
				if (i%k)/16%2 == 1 {
					cand[i] = -cand[i]
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cand := candidate(t, c)
			tc.edit(cand)
			r, err := Compare(c, cand, safetensors.F32, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(r.Observations, "\n"), tc.want) {
				t.Fatalf("observations %q lack %q", r.Observations, tc.want)
			}
		})
	}
	// One expert's FC2 codes corrupted: the failing rows are its rows.
	d := copyCase(c)
	w := d.Weights
	per := len(w.W2) / w.E
	d.Weights.W2 = append([]uint8(nil), c.Weights.W2...)
	for i := 2 * per; i < 3*per; i++ {
		d.Weights.W2[i] ^= 0x88
	}
	r, err := Compare(c, candidate(t, d), safetensors.F32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o := strings.Join(r.Observations, "\n"); !strings.Contains(o, "the error follows the expert") || !strings.Contains(o, "2") {
		t.Fatalf("observations %q do not name expert 2", r.Observations)
	}
	// Relative noise of NRMSE 2e-3 on every value is small and even; on
	// half the rows it is not even, and ten times larger it is not small.
	noisy := func(eps float64, rows int) []string {
		cand := candidate(t, c)
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range cand[:rows*k] {
			cand[i] *= float32(1 + eps*rng.NormFloat64())
		}
		r, err := Compare(c, cand, safetensors.F32, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Pass {
			t.Fatalf("noise %g on %d rows passes", eps, rows)
		}
		return r.Observations
	}
	if o := strings.Join(noisy(2e-3, m), "\n"); !strings.Contains(o, "small and even") {
		t.Errorf("even noise: observations %q", o)
	}
	if o := strings.Join(noisy(4e-3, m/2), "\n"); strings.Contains(o, "small and even") {
		t.Errorf("noise on half the rows: observations %q", o)
	}
	if o := strings.Join(noisy(2e-2, m), "\n"); strings.Contains(o, "small and even") {
		t.Errorf("large noise: observations %q", o)
	}
	// A passing candidate has none.
	if r, _ := Compare(c, candidate(t, c), safetensors.F32, Options{}); len(r.Observations) != 0 {
		t.Fatalf("a passing candidate has observations %q", r.Observations)
	}
}
