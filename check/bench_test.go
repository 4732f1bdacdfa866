package check

import (
	"testing"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// BenchmarkCheckKimiM128 times check at the Kimi-K3 rank's shape: the real
// suite's prefill case (M = 128, K = 3584, N = 3072, 28 local experts,
// top-16 with 8 slots local), 64 sampled rows, with the candidate
//
//	pass   the oracle's output;
//	known  a known mistake (routing weights not applied): the first
//	       refined hypothesis reproduces it and refinement stops;
//	none   half the rows doubled, which no hypothesis explains: every
//	       refinement runs.
//
// Its setup runs the oracle on every row three times (about a minute on
// two cores). Run: go test ./check -run '^$' -bench KimiM128 -benchtime 1x
func BenchmarkCheckKimiM128(b *testing.B) {
	specs, err := validation.ValidationMatrix("real", activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil)
	if err != nil {
		b.Fatal(err)
	}
	var spec *validation.CaseSpec
	for i := range specs {
		if specs[i].M == 128 {
			spec = &specs[i]
		}
	}
	if spec == nil {
		b.Fatal("the real suite has no M = 128 case")
	}
	c, err := validation.GenerateCase(spec, nil)
	if err != nil {
		b.Fatal(err)
	}
	good := candidate(b, c)
	unweighted := copyCase(c)
	unweighted.Input.TopKWeights = make([]float32, len(c.Input.TopKWeights))
	for i := range unweighted.Input.TopKWeights {
		unweighted.Input.TopKWeights[i] = 1
	}
	known := candidate(b, unweighted)
	none := append([]float32(nil), good...)
	for i := range none {
		if (i/c.Weights.K)%2 == 0 {
			none[i] *= 2
		}
	}
	for _, cand := range []struct {
		name string
		got  []float32
		pass bool
	}{{"pass", good, true}, {"known", known, false}, {"none", none, false}} {
		b.Run(cand.name, func(b *testing.B) {
			for range b.N {
				r, err := Compare(c, cand.got, safetensors.F32, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if r.Pass != cand.pass {
					b.Fatalf("pass %v, want %v", r.Pass, cand.pass)
				}
				if !r.Pass {
					Diagnose(c, r)
					if best := r.Best(); (best != nil) != (cand.name == "known") {
						b.Fatalf("diagnosis: %+v", r.Diagnosis[0])
					}
				}
			}
		})
	}
}
