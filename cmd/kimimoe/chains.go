package main

import (
	"fmt"
	"kimimoe/validation"
	"strconv"
	"strings"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// runChains compares the precision chains with each other on the oracle, at
// the Kimi EP32 rank-7 shape: how far the flashinfer (and mxfp8) chain's
// output is from the exact chain's, for the same inputs and weights.
func runChains(args []string) error {
	fs := newFlags("chains", "[--m 1,128] [--activation situ] [--recipe rceil]")
	msFlag := fs.String("m", "1,128", "token counts")
	actName := fs.String("activation", "situ", "activation kind")
	recipeName := fs.String("recipe", "rceil", "recipe for x (and the mxfp8 chain's intermediate)")
	if err := parse(fs, args); err != nil {
		return err
	}
	act, err := activation.ParseKind(*actName)
	if err != nil {
		return err
	}
	recipe, err := mxfp.ParseRecipe(*recipeName)
	if err != nil {
		return err
	}
	kimi := moe.KimiK3()
	base := validation.KimiEP32Rank7(act, moe.ChainExact, recipe) // the chain is set per oracle below
	w, err := validation.GenerateWeights(&base)
	if err != nil {
		return err
	}
	oracles := map[moe.Chain]*moe.Oracle{}
	for _, c := range moe.Chains() {
		s := base
		s.Chain = c
		if oracles[c], err = moe.NewOracle(w, s.LayerSpec()); err != nil {
			return err
		}
	}
	fmt.Printf("oracle chains against the exact chain: Kimi EP32 rank 7 (K=%d N=%d, 28 local experts, 8 of 16 slots local), %v, x recipe %v\n",
		kimi.K, kimi.N, act, recipe)
	fmt.Printf("%6s %-11s %-10s %-9s %s\n", "M", "chain", "cosine", "nrmse", "maxabs")
	p := newProgress()
	defer p.done()
	for _, f := range strings.Split(*msFlag, ",") {
		m, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || m < 1 {
			return fmt.Errorf("--m: bad token count %q", f)
		}
		s := base
		s.Name, s.M, s.Seed = "chains", m, uint64(1000+m)
		c, err := validation.GenerateCase(&s, w)
		if err != nil {
			return err
		}
		outs := map[moe.Chain][]float64{}
		for _, ch := range moe.Chains() {
			p.update("M=%d chain %v", m, ch)
			outs[ch] = make([]float64, m*kimi.K)
			if err := oracles[ch].Forward(outs[ch], &c.Input, nil); err != nil {
				return err
			}
		}
		for _, ch := range []moe.Chain{moe.ChainMXFP8, moe.ChainFlashInfer} {
			r := validation.Compare(outs[ch], outs[moe.ChainExact])
			p.done()
			fmt.Printf("%6d %-11v %-10.6f %-9.4g %.4g\n", m, ch, r.Cosine, r.NRMSE, r.MaxAbs)
		}
	}
	return nil
}
