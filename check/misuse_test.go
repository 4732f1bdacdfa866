package check

import (
	"errors"
	"math"
	"testing"

	"kimimoe/moe"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// Misuse of the exported calls is an error or a note, never a panic
// (round 3's R3-15).
func TestMisuseIsAnError(t *testing.T) {
	if _, err := Compare(nil, nil, safetensors.F32, Options{}); !errors.Is(err, ErrCase) {
		t.Errorf("Compare(nil): %v", err)
	}
	if _, err := Compare(&validation.Case{}, nil, safetensors.F32, Options{}); !errors.Is(err, ErrCase) {
		t.Errorf("Compare(empty case): %v", err)
	}
	c := testCase(t, moe.ChainMXFP8, 1, 0, false)
	r := &Report{}
	Diagnose(c, r)
	if r.DiagnosisNote == "" || r.Diagnosis != nil {
		t.Errorf("Diagnose with a foreign report: note %q, %d hypotheses", r.DiagnosisNote, len(r.Diagnosis))
	}
	Diagnose(nil, nil)
	Diagnose(nil, r)
}

// A NaN threshold counted nothing and passed everything (R3-18).
func TestOptionsMustBeNumbers(t *testing.T) {
	c := testCase(t, moe.ChainMXFP8, 1, 0, false)
	cand := candidate(t, c)
	for _, o := range []Options{{RTol: math.NaN()}, {ATol: math.Inf(1)}, {MaxNRMSE: -1}, {MinCosine: 2}, {MaxRows: -3}} {
		if _, err := Compare(c, cand, safetensors.F32, o); !errors.Is(err, ErrOptions) {
			t.Errorf("Compare with %+v: %v", o, err)
		}
	}
}
