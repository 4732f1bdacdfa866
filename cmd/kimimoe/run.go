package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"kimimoe/backend"
	"kimimoe/safetensors"
)

func runRun(args []string) error {
	fs := newFlags("run", "--case IN.safetensors --out OUT.safetensors [--backend NAME] | --checkpoint DIR --layer L --inputs IN.safetensors --out OUT.safetensors")
	in := fs.String("case", "", "input case file (safetensors; see README)")
	cf := addCkptFlags(fs)
	out := fs.String("out", "", "output file: tensor \"out\" [M, K] F32 (a regular file or a new name; not the case file)")
	name := fs.String("backend", backend.GoName, "backend")
	tune := addTuneFlag(fs)
	maxMem := fs.Float64("max-memory-gib", 16, "refuse a case estimated to need more memory than this")
	outDType := fs.String("out-dtype", "f32", "dtype of \"out\": f32, bf16 or f16 (rounded to nearest even from the backend's float32)")
	if err := parse(fs, args); err != nil {
		return err
	}
	dtypes := map[string]safetensors.DType{"f32": safetensors.F32, "bf16": safetensors.BF16, "f16": safetensors.F16}
	dtype, ok := dtypes[*outDType]
	if !ok {
		return usagef("--out-dtype %q: want f32, bf16 or f16", *outDType)
	}
	if (*in == "") == (*cf.dir == "") || *out == "" {
		return usagef("--out and one of --case or --checkpoint are required")
	}
	// Everything about the output is checked before the work: it is not
	// an input, not a device or FIFO, and its directory takes a file.
	if !(*maxMem > 0) {
		return usagef("--max-memory-gib %v: want a positive number", *maxMem)
	}
	cf.maxGiB = *maxMem
	if err := checkOutput("out", *out, kindSafetensors, append(inputsOf(*in, *cf.inputs), checkpointFiles(*cf.dir)...)...); err != nil {
		return err
	}
	if !slices.Contains(backend.Names(), *name) {
		return usagef("unknown backend %q (have %s)", *name, strings.Join(backend.Names(), ", "))
	}
	c, notes, err := cf.loadAny(*in)
	if err != nil {
		return err
	}
	if *in == "" {
		*in = c.Name
	}
	for _, n := range notes {
		fmt.Printf("note: %s\n", n)
	}
	w := c.Weights
	pairs := localSlots(c)
	need := oracleBytes(w.E, w.N, w.K, w.Gated, c.Input.M, pairs)
	if err := checkMemory(fmt.Sprintf("case %s (M=%d, %d local slots, %d experts)", *in, c.Input.M, pairs, w.E), need, *maxMem); err != nil {
		return err
	}
	b, _, err := openTuned(*name, *tune)
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Printf("case %s: M=%d K=%d N=%d E_local=%d top-%d, %v, chain %v, recipe %v, ep %d/%d\n",
		*in, c.Input.M, w.K, w.N, w.E, c.Input.TopK, c.Spec.Activation, c.Spec.Chain, c.Spec.Recipe, c.Spec.EP.Rank, c.Spec.EP.Normalize().Size)
	p := newProgress()
	p.update("preparing %d experts on %s", w.E, *name)
	t0 := time.Now()
	layer, err := b.Prepare(w, c.Spec)
	if err != nil {
		p.done()
		return err
	}
	defer layer.Close()
	t1 := time.Now()
	p.update("forward of %d tokens on %s", c.Input.M, *name)
	dst := make([]float32, c.Input.M*w.K)
	err = layer.Forward(dst, &c.Input, nil)
	p.done()
	if err != nil {
		return err
	}
	t2 := time.Now()
	md := map[string]string{"backend": *name, "case": *in, "chain": c.Spec.Chain.String(), "recipe": c.Spec.Recipe.String()}
	ot, err := safetensors.FromFloat32As("out", dtype, []int{c.Input.M, w.K}, dst)
	if err != nil {
		return err
	}
	if err := safetensors.WriteFile(*out, []*safetensors.Tensor{ot}, md); err != nil {
		return err
	}
	fmt.Printf("prepare %.3fs, forward %.3fs; wrote %s (out [%d, %d] %s)\n", t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds(), *out, c.Input.M, w.K, dtype)
	return nil
}
