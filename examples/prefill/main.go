// Prefill runs a batch of tokens through a Kimi-K3 shaped MoE layer, one
// EP32 rank's 28 experts with synthetic MXFP4 weights, on the backend you
// pick, and checks a sample of the output rows against the exact oracle
// (tokens are independent, so a sample checks the batch):
//
//	go run ./examples/prefill -tokens 32                 # pure Go
//	go run ./examples/prefill -tokens 2048 -backend cuda # on an NVIDIA GPU
package main

import (
	"flag"
	"fmt"
	"log"
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
	tokens := flag.Int("tokens", 32, "tokens in the batch")
	check := flag.Int("check", 8, "rows compared with the oracle")
	flag.Parse()
	log.SetFlags(0)
	if *tokens < 1 || *tokens > 1<<16 {
		log.Fatalf("-tokens %d: want 1 to 65536", *tokens)
	}

	// A seeded batch at the Kimi EP32 rank-7 shape: random x, and routing
	// where 8 of each token's 16 experts live on this rank (the validation
	// suite's shape; a serving stack would route with moe.KimiK3().Router).
	spec := validation.KimiEP32Rank7(activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil)
	spec.Name, spec.M, spec.Seed = "prefill", *tokens, 1
	c, err := validation.GenerateCase(&spec, nil)
	if err != nil {
		log.Fatal(err)
	}

	b, err := backend.Open(*backendName)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	t0 := time.Now()
	layer, err := b.Prepare(c.Weights, c.Spec)
	if err != nil {
		log.Fatal(err)
	}
	defer layer.Close()
	t1 := time.Now()
	out := make([]float32, *tokens*c.Weights.K)
	if err := layer.Forward(out, &c.Input, nil); err != nil {
		log.Fatal(err)
	}
	t2 := time.Now()
	fmt.Printf("Kimi-K3 MoE, EP32 rank 7 (%d experts), %v, chain mxfp8, on %s (%s)\n",
		c.Weights.E, c.Spec.Activation, b.Name(), b.Capabilities().Device)
	fmt.Printf("%d tokens x top-%d: prepare %.2fs, forward %.3fs (host clock, including the copies)\n",
		*tokens, c.Input.TopK, t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds())

	rows := validation.SampleRows(*tokens, *check, 7)
	ref, err := c.OracleForward(rows)
	if err != nil {
		log.Fatal(err)
	}
	got := make([]float64, 0, len(ref))
	for _, r := range rows {
		got = append(got, validation.Widen(out[r*c.Weights.K:(r+1)*c.Weights.K])...)
	}
	m := validation.Compare(got, ref)
	fmt.Printf("%d rows against the oracle: %v\n", len(rows), m)
	if m.Cosine < validation.MinCosine || m.NRMSE > validation.MaxNRMSE {
		log.Fatal("the output differs from the oracle beyond the thresholds")
	}
}
