// Command kimimoe validates, runs and measures the Kimi-K3 style MXFP8 x
// MXFP4 MoE layer on a backend (the pure-Go oracle "go", or "cuda").
//
//	kimimoe validate --suite smoke|real|large|all --backend NAME --activation KIND [--require-situ] [--json FILE|-]
//	kimimoe run --case IN.safetensors --out OUT.safetensors [--backend NAME] [--out-dtype DTYPE]
//	kimimoe run --checkpoint DIR --layer L --inputs IN.safetensors --out OUT.safetensors [--ep-size S --ep-rank R] [--moe-tp T --moe-tp-rank r]
//	kimimoe case --checkpoint DIR --layer L --inputs IN.safetensors --out CASE.safetensors [same slice flags]
//	kimimoe check --case CASE.safetensors --candidate OUT.safetensors [--tensor out] [--chain C] [--json FILE|-]
//	kimimoe plan --model kimi-k3 --tp 32 --ep 4 --dp 1 --tokens 8192 [--json]
//	kimimoe bench --backend cuda [--m 1,128,512,2048,8192] [--rounds 20] [--json FILE|-]
//	kimimoe chains [--m 1,128]
//	kimimoe plot --bench bench.json [--peers peer_triton.json] --out FILE.svg
//
// run's DTYPE is the output's element type, float32 by default, or
// bfloat16 or float16 rounded to nearest even (run -h names them).
// Every subcommand takes -h, which prints its flags on stdout. Exit status:
// 0 success (a pass), 1 a failure (a case or check failed, a device error),
// 2 a usage or input error (a bad flag or value; a missing, malformed or
// unwritable file). Errors are printed once, on stderr.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"kimimoe/activation"
	"kimimoe/backend"
	_ "kimimoe/backend/cuda" // registers "cuda"; loads nothing until opened
	"kimimoe/check"
	"kimimoe/checkpoint"
	"kimimoe/moe"
	"kimimoe/safetensors"
	"kimimoe/validation"
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
		{"check", "compare a kernel's output with the oracle on a case file", runCheck},
		{"case", "write a case file from a checkpoint layer and inputs", runCase},
		{"plan", "expert mapping and prefill communication of a deployment", runPlan},
		{"bench", "time a backend at the Kimi EP32 shape against the floor", runBench},
		{"chains", "how far the mxfp8 and flashinfer chains are from the exact chain (oracle)", runChains},
		{"plot", "draw a bench JSON (and a peer's) as latency against M", runPlot},
		{"compare", "a bench JSON beside the peer's of the same call: per M, peer / kimimoe", runCompare},
	}
}

// versionString is the module version and the commit it was built from
// (as the go command records them), or "(devel)" and "unknown".
func versionString() string {
	version, commit, dirty := "(devel)", "unknown", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				commit = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = " (modified)"
			}
		}
	}
	if commit == "unknown" {
		// go run and -buildvcs=false record no commit; say how to get one.
		commit += " (build with go build -buildvcs=true in a git checkout to record it)"
	}
	return fmt.Sprintf("kimimoe %s, commit %s%s", version, commit, dirty)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kimimoe COMMAND [flags]; kimimoe COMMAND -h for its flags; kimimoe --version")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "backends: %s\n", strings.Join(backend.Names(), ", "))
	fmt.Fprintf(w, "activations: %s\n", activationNames())
}

func activationNames() string {
	var names []string
	for _, k := range activation.Kinds() {
		names = append(names, k.String())
	}
	return strings.Join(names, ", ")
}

// isInputError reports whether err is about the input rather than the
// work: a missing, malformed or unwritable file, a bad tensor or an
// impossible layout. Those exit 2, as a bad flag does.
func isInputError(err error) bool {
	for _, target := range []error{validation.ErrCaseFile, safetensors.ErrFormat, safetensors.ErrNotRegular,
		checkpoint.ErrCheckpoint, moe.ErrInput, moe.ErrParallel, check.ErrCandidate, backend.ErrUnknown,
		os.ErrNotExist, os.ErrPermission} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// errFailed marks a run that completed but whose result is a failure (its
// report is already printed).
var errFailed = errors.New("failed")

// usageError is a bad flag, value or argument: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// asUsage marks err (a parse error of a flag value) as a usage error.
func asUsage(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

func main() { os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr)) }

// dispatch runs one command and returns the exit status.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" || args[0] == "version" {
		fmt.Fprintln(stdout, versionString())
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:])
		var ue usageError
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errFailed):
			return 1
		case errors.As(err, &ue) || isInputError(err):
			fmt.Fprintf(stderr, "kimimoe %s: %v (kimimoe %s -h for help)\n", c.name, err, c.name)
			return 2
		default:
			fmt.Fprintf(stderr, "kimimoe %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "kimimoe: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// flagSet is a FlagSet that prints nothing itself: -h prints the usage on
// stdout (and parse returns flag.ErrHelp), and a bad flag comes back as a
// usage error that dispatch prints once.
type flagSet struct {
	*flag.FlagSet
	help func()
}

func newFlags(name, synopsis string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("kimimoe "+name, flag.ContinueOnError)}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // the flag package calls it on errors too
	fs.help = func() {
		fmt.Fprintf(os.Stdout, "usage: kimimoe %s %s\n", name, synopsis)
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		fmt.Fprintf(os.Stdout, "activation kinds: %s\n", activationNames())
	}
	return fs
}

// set reports whether the flag name was given on the command line.
func (fs *flagSet) set(name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func parse(fs *flagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.help()
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	return nil
}

// writeJSON writes data to path atomically, or to stdout for "-"; the
// path was checked with checkJSONOutput before the work. A failed write is
// an output error (exit 2), never mistaken for a failed check (exit 1).
func writeJSON(path string, data []byte) error {
	if err := writeOutput(path, data); err != nil {
		return asUsage(fmt.Errorf("--json %s: %w", path, err))
	}
	return nil
}
