// Package kimilayer builds the synthetic Kimi-K3 MoE layer the examples run:
// one EP32 rank's 28 experts with random MXFP4 weights, and a router over
// all 896 experts. Both examples share it so they stay short.
package kimilayer

import (
	"fmt"
	"kimimoe/validation"
	"math"
	"math/rand/v2"
	"time"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// Rank is the EP32 rank the examples play (DESIGN.md's validation shape).
var Rank = moe.EP{Size: 32, Rank: 7}

// Run routes m random tokens with Kimi-K3's router, runs the layer for rank
// Rank on the named backend, and prints a summary.
func Run(m int, backendName string) error {
	kimi := moe.KimiK3()
	eLocal, err := moe.LocalExperts(kimi.NumExperts, Rank.Size)
	if err != nil {
		return err
	}
	// Synthetic weights for this rank's experts (seeded random MXFP4).
	spec := validation.CaseSpec{Name: "example", K: kimi.K, N: kimi.N, ELocal: eLocal, TopK: kimi.TopK,
		Activation: kimi.Activation, WeightSeed: 3584}
	weights, err := validation.GenerateWeights(&spec)
	if err != nil {
		return err
	}

	// Tokens and router logits (random here; a model's gate in practice).
	rng := rand.New(rand.NewPCG(uint64(m), 7))
	x := make([]float32, m*kimi.K)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	logits := make([]float32, m*kimi.NumExperts)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	bias := make([]float32, kimi.NumExperts)
	for i := range bias {
		bias[i] = float32(0.1 * rng.NormFloat64())
	}
	router := moe.Router{NumExperts: kimi.NumExperts, TopK: kimi.TopK, CorrectionBias: bias, Renormalize: true}
	in := moe.Input{M: m, TopK: kimi.TopK, X: x, TopKIDs: make([]int32, m*kimi.TopK), TopKWeights: make([]float32, m*kimi.TopK)}
	if err := router.Route(in.TopKIDs, in.TopKWeights, logits); err != nil {
		return err
	}
	local, first := 0, -1
	for i, id := range in.TopKIDs {
		if _, ok := Rank.Local(int64(id), eLocal); ok {
			local++
			if first < 0 {
				first = i / kimi.TopK
			}
		}
	}

	b, err := backend.Open(backendName)
	if err != nil {
		return err
	}
	defer b.Close()
	t0 := time.Now()
	layer, err := b.Prepare(weights, moe.LayerSpec{Activation: kimi.Activation, Params: []activation.Params{kimi.Params},
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, EP: Rank})
	if err != nil {
		return err
	}
	defer layer.Close()
	t1 := time.Now()
	out := make([]float32, m*kimi.K)
	if err := layer.Forward(out, &in, nil); err != nil {
		return err
	}
	t2 := time.Now()

	ss := 0.0
	for _, v := range out {
		ss += float64(v) * float64(v)
	}
	fmt.Printf("Kimi-K3 MoE layer, rank %d of EP%d (%d local experts), %v, chain mxfp8, recipe rceil, backend %s\n",
		Rank.Rank, Rank.Size, eLocal, kimi.Activation, b.Name())
	fmt.Printf("tokens %d, top-%d: %d of %d routed slots are local to this rank\n", m, kimi.TopK, local, m*kimi.TopK)
	fmt.Printf("prepare %.2fs, forward %.3fs\n", t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds())
	fmt.Printf("output [%d, %d], this rank's partial sum (tokens with no local slot get zeros): RMS %.4g\n", m, kimi.K, math.Sqrt(ss/float64(len(out))))
	if first >= 0 {
		fmt.Printf("token %d, the first with a local slot: out[:4] = %.4g\n", first, out[first*kimi.K:first*kimi.K+4])
	}
	return nil
}
