package main

import (
	"fmt"
	"kimimoe/validation"

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
	maxMem := fs.Float64("max-memory-gib", 16, "refuse work estimated to need more memory than this")
	if err := parse(fs, args); err != nil {
		return err
	}
	act, err := activation.ParseKind(*actName)
	if err != nil {
		return asUsage(err)
	}
	recipe, err := mxfp.ParseRecipe(*recipeName)
	if err != nil {
		return asUsage(err)
	}
	ms, err := parseTokenCounts(*msFlag)
	if err != nil {
		return err
	}
	kimi0 := moe.KimiK3()
	for _, m := range ms { // three oracles (one per chain), 8 local slots per token
		need := 3 * oracleBytes(28, kimi0.N, kimi0.K, true, m, 8*m)
		if err := checkMemory(fmt.Sprintf("--m %d (three oracles at the Kimi EP32 shape)", m), need, *maxMem); err != nil {
			return err
		}
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
	p := stepProgress()
	defer p.done()
	for _, m := range ms {
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
		for _, ch := range []moe.Chain{moe.ChainMXFP8, moe.ChainFlashInfer, moe.ChainBF16} {
			r := validation.Compare(outs[ch], outs[moe.ChainExact])
			p.done()
			fmt.Printf("%6d %-11v %-10.6f %-9.4g %.4g\n", m, ch, r.Cosine, r.NRMSE, r.MaxAbs)
		}
	}
	return nil
}
