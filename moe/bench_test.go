package moe_test

import (
	"kimimoe/moe"
	"kimimoe/validation"
	"testing"
	"time"

	"kimimoe/activation"
	"kimimoe/mxfp"
)

// Kimi EP32 rank-7 local shape: E_local 28, K 3584, N 3072, top-16 with 8
// slots local (the speed targets: decode M=1 <= 250 ms, prefill
// M=128 <= 20 s, preparing 28 experts <= 10 s, on the 2-core machine).
func kimiBenchCase(b *testing.B, m int) (*moe.Oracle, *validation.Case) {
	b.Helper()
	s := validation.KimiEP32Rank7(activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil)
	s.Name, s.M, s.Seed = "bench", m, 1
	c, err := validation.GenerateCase(&s, nil)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	o, err := moe.NewOracle(c.Weights, c.Spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("prepare 28 experts: %.2fs", time.Since(t0).Seconds())
	return o, c
}

func benchForward(b *testing.B, m int) {
	o, c := kimiBenchCase(b, m)
	out := make([]float64, m*c.Weights.K)
	b.ResetTimer()
	for b.Loop() {
		if err := o.Forward(out, &c.Input, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKimiDecodeM1(b *testing.B)    { benchForward(b, 1) }
func BenchmarkKimiPrefillM128(b *testing.B) { benchForward(b, 128) }
