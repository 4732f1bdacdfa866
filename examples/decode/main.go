// Decode runs one token through a Kimi-K3 shaped MoE layer (one EP32
// rank's 28 experts, synthetic weights) on the pure-Go backend:
//
//	go run ./examples/decode [-backend go]
package main

import (
	"flag"
	"fmt"
	"os"

	"kimimoe/examples/internal/kimilayer"
)

func main() {
	name := flag.String("backend", "go", "backend to run on (go, cuda)")
	flag.Parse()
	if err := kimilayer.Run(1, *name); err != nil {
		fmt.Fprintln(os.Stderr, "decode:", err)
		os.Exit(1)
	}
}
