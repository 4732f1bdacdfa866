// Decode runs single tokens through a Kimi-K3 shaped MoE layer, one EP32
// rank's 28 experts with synthetic MXFP4 weights, on the backend you pick,
// and checks each output against the exact oracle:
//
//	go run ./examples/decode                 # pure Go
//	go run ./examples/decode -backend cuda   # on an NVIDIA GPU (CUDA graphs)
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"time"

	"kimimoe/activation"
	"kimimoe/backend"
	_ "kimimoe/backend/cuda" // registers the "cuda" backend; loads nothing until opened
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

func main() {
	backendName := flag.String("backend", "go", fmt.Sprintf("backend %v", backend.Names()))
	steps := flag.Int("steps", 3, "decode steps, one token each")
	flag.Parse()
	log.SetFlags(0)

	// The layer: Kimi-K3's MoE on EP32 rank 7 (global experts 196..223),
	// with seeded random weights standing in for a checkpoint's.
	kimi := moe.KimiK3()
	rank := moe.EP{Size: 32, Rank: 7}
	eLocal, err := moe.LocalExperts(kimi.NumExperts, rank.Size)
	if err != nil {
		log.Fatal(err)
	}
	weights, err := validation.GenerateWeights(&validation.CaseSpec{Name: "decode", K: kimi.K, N: kimi.N, ELocal: eLocal,
		TopK: kimi.TopK, EP: rank, Activation: kimi.Activation, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, WeightSeed: 3584})
	if err != nil {
		log.Fatal(err)
	}
	spec := moe.LayerSpec{Activation: kimi.Activation, Params: []activation.Params{kimi.Params},
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, EP: rank}

	b, err := backend.Open(*backendName)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	t0 := time.Now()
	layer, err := b.Prepare(weights, spec)
	if err != nil {
		log.Fatal(err)
	}
	defer layer.Close()
	oracle, err := moe.NewOracle(weights, spec)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("Kimi-K3 MoE, EP32 rank 7 (%d experts), %v, chain mxfp8, on %s (%s); prepared in %.2fs\n",
		eLocal, kimi.Activation, b.Name(), b.Capabilities().Device, time.Since(t0).Seconds())

	// Each step: one token's hidden state and router logits (random here;
	// the model's gate in practice), routed over all 896 experts.
	rng := rand.New(rand.NewPCG(1, 2))
	bias := make([]float32, kimi.NumExperts)
	for i := range bias {
		bias[i] = float32(0.1 * rng.NormFloat64())
	}
	router := kimi.Router(bias)
	out := make([]float32, kimi.K)
	ref := make([]float64, kimi.K)
	for step := range *steps {
		in := moe.Input{M: 1, TopK: kimi.TopK, X: make([]float32, kimi.K),
			TopKIDs: make([]int32, kimi.TopK), TopKWeights: make([]float32, kimi.TopK)}
		for i := range in.X {
			in.X[i] = float32(rng.NormFloat64())
		}
		logits := make([]float32, kimi.NumExperts)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		if err := router.Route(in.TopKIDs, in.TopKWeights, logits); err != nil {
			log.Fatal(err)
		}
		local := 0
		for _, id := range in.TopKIDs {
			if _, ok := rank.Local(int64(id), eLocal); ok {
				local++
			}
		}
		t := time.Now()
		if g, ok := layer.(backend.GraphLayer); ok {
			err = g.ForwardGraph(out, &in) // captured on the first step, replayed after
		} else {
			err = layer.Forward(out, &in, nil)
		}
		if err != nil {
			log.Fatal(err)
		}
		elapsed := time.Since(t)
		if err := oracle.Forward(ref, &in, nil); err != nil {
			log.Fatal(err)
		}
		m := validation.Compare(validation.Widen(out), ref)
		fmt.Printf("step %d: %2d of %d slots local, forward %8.3f ms (host clock), vs oracle: %v\n",
			step, local, kimi.TopK, float64(elapsed.Microseconds())/1e3, m)
		if m.Cosine < validation.MinCosine || m.NRMSE > validation.MaxNRMSE {
			log.Fatalf("step %d: output differs from the oracle beyond the thresholds", step)
		}
	}
}
