package main

import (
	"errors"
	"fmt"
	"kimimoe/validation"
	"time"

	"kimimoe/backend"
)

func runRun(args []string) error {
	fs := newFlags("run", "--case IN.safetensors --out OUT.safetensors [--backend NAME]")
	in := fs.String("case", "", "input case file (safetensors; see README)")
	out := fs.String("out", "", "output file: tensor \"out\" [M, K] F32")
	name := fs.String("backend", backend.GoName, "backend")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *in == "" || *out == "" {
		fs.Usage()
		return errors.New("--case and --out are required")
	}
	c, err := validation.ReadCase(*in)
	if err != nil {
		return err
	}
	b, err := backend.Open(*name)
	if err != nil {
		return err
	}
	defer b.Close()
	w := c.Weights
	fmt.Printf("case %s: M=%d K=%d N=%d E_local=%d top-%d, %v, chain %v, recipe %v, ep %d/%d\n",
		*in, c.Input.M, w.K, w.N, w.E, c.Input.TopK, c.Spec.Activation, c.Spec.Chain, c.Spec.Recipe, c.Spec.EP.Rank, max(c.Spec.EP.Size, 1))
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
	if err := validation.WriteOutput(*out, dst, c.Input.M, w.K, md); err != nil {
		return err
	}
	fmt.Printf("prepare %.3fs, forward %.3fs; wrote %s (out [%d, %d] F32)\n", t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds(), *out, c.Input.M, w.K)
	return nil
}
