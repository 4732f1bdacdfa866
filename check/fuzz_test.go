package check

import (
	"math"
	"testing"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// Compare and Diagnose on small layers of any shape the case format
// takes, with the candidate the oracle's output or that output broken in
// one of several ways: never a panic; the oracle's own output passes;
// every hypothesis is reported (measured or skipped).
func FuzzDiagnose(f *testing.F) {
	f.Add(uint64(1), uint8(2), uint8(1), uint8(1), uint8(3), uint8(2), uint8(0), uint8(0), uint8(1))
	f.Add(uint64(7), uint8(1), uint8(2), uint8(4), uint8(1), uint8(1), uint8(1), uint8(3), uint8(2))
	f.Add(uint64(9), uint8(3), uint8(3), uint8(2), uint8(6), uint8(3), uint8(2), uint8(5), uint8(0))
	f.Fuzz(func(t *testing.T, seed uint64, e, n32, k32, m, topk, ep, broken, chain uint8) {
		chains := []moe.Chain{moe.ChainMXFP8, moe.ChainFlashInfer, moe.ChainBF16, moe.ChainMarlin, moe.ChainExact}
		s := validation.CaseSpec{Name: "fuzz", M: 1 + int(m)%6, K: 32 * (1 + int(k32)%4), N: 32 * (1 + int(n32)%3),
			ELocal: 1 + int(e)%4, EP: moe.EP{Size: 1 + int(ep)%3, Rank: int(ep) % 2 % (1 + int(ep)%3)},
			Activation: activation.Situ, Chain: chains[int(chain)%len(chains)], Recipe: mxfp.RecipeRCeil, Seed: seed, WeightSeed: seed + 1}
		s.TopK = 1 + int(topk)%min(4, s.ELocal*s.EP.Size)
		c, err := validation.GenerateCase(&s, nil)
		if err != nil {
			t.Skip(err)
		}
		ref, err := c.OracleForward(nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(ref))
		for i, v := range ref {
			got[i] = float32(v)
		}
		k := c.Weights.K
		switch broken % 6 {
		case 1: // one row doubled
			for j := range k {
				got[j] *= 2
			}
		case 2: // the last row unwritten
			clear(got[len(got)-k:])
		case 3: // a NaN
			got[len(got)/2] = float32(math.NaN())
		case 4: // rows swapped
			if s.M > 1 {
				for j := range k {
					got[j], got[k+j] = got[k+j], got[j]
				}
			}
		case 5: // everything scaled
			for i := range got {
				got[i] *= 3
			}
		}
		r, err := Compare(c, got, safetensors.F32, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if broken%6 == 0 && !r.Pass {
			t.Fatalf("the oracle's own output fails: %v", r.Why)
		}
		if r.Pass {
			return
		}
		Diagnose(c, r)
		if len(r.Diagnosis) < len(hypotheses) {
			t.Fatalf("%d hypotheses reported, want at least %d (%s)", len(r.Diagnosis), len(hypotheses), r.DiagnosisNote)
		}
	})
}
