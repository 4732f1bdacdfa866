// Command kimimoe validates, runs and measures the Kimi-K3 style MXFP8 x
// MXFP4 MoE layer on a backend (the pure-Go oracle "go", or "cuda").
//
//	kimimoe validate --suite smoke|real|large|all --backend NAME --activation KIND [--require-situ] [--json FILE]
//	kimimoe run --case IN.safetensors --out OUT.safetensors [--backend NAME]
//	kimimoe plan --model kimi-k3 --tp 32 --ep 4 --dp 1 --tokens 8192 [--json]
//	kimimoe bench --backend cuda [--m 1,128,512,2048,8192] [--rounds 20] [--json FILE]
//
// Every subcommand takes -h. Errors go to stderr and the exit status is
// non-zero on failure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"kimimoe/backend"
	_ "kimimoe/backend/cuda" // registers "cuda"; loads nothing until opened
)

type command struct {
	name, summary string
	run           func(args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"validate", "run the validation matrix on a backend against the oracle", runValidate},
		{"run", "run one case file and write its output", runRun},
		{"plan", "expert mapping and prefill communication of a deployment", runPlan},
		{"bench", "time a backend at the Kimi EP32 shape against the floor", runBench},
		{"chains", "how far the mxfp8 and flashinfer chains are from the exact chain (oracle)", runChains},
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kimimoe COMMAND [flags]; kimimoe COMMAND -h for its flags")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "backends: %v\n", backend.Names())
}

// errFailed marks a run that completed but whose result is a failure (its
// report is already printed).
var errFailed = errors.New("failed")

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			err := c.run(os.Args[2:])
			switch {
			case err == nil:
				return
			case errors.Is(err, flag.ErrHelp):
				return
			case errors.Is(err, errFailed):
				os.Exit(1)
			default:
				fmt.Fprintf(os.Stderr, "kimimoe %s: %v\n", c.name, err)
				os.Exit(1)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "kimimoe: unknown command %q\n", os.Args[1])
	usage()
	os.Exit(2)
}

// newFlags makes a FlagSet whose errors return (not exit) and whose usage
// names the subcommand.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("kimimoe "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kimimoe %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}
