// Prefill runs a batch of tokens through a Kimi-K3 shaped MoE layer (one
// EP32 rank's 28 experts, synthetic weights) on the pure-Go backend:
//
//	go run ./examples/prefill [-tokens 32] [-backend go]
package main

import (
	"flag"
	"fmt"
	"os"

	"kimimoe/examples/internal/kimilayer"
)

func main() {
	tokens := flag.Int("tokens", 32, "tokens in the batch")
	name := flag.String("backend", "go", "backend to run on (go, cuda)")
	flag.Parse()
	if err := kimilayer.Run(*tokens, *name); err != nil {
		fmt.Fprintln(os.Stderr, "prefill:", err)
		os.Exit(1)
	}
}
