package main

import (
	"fmt"

	"kimimoe/checkpoint"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// ckptFlags are the flags of `run --checkpoint` and `case`: which layer of
// which checkpoint, which slice, which inputs.
type ckptFlags struct {
	dir, inputs, chain, recipe *string
	layer, epSize, epRank      *int
	tp, tpRank, topk           *int
}

func addCkptFlags(fs *flagSet) *ckptFlags {
	return &ckptFlags{
		dir:    fs.String("checkpoint", "", "checkpoint directory (model.safetensors or shards with model.safetensors.index.json)"),
		layer:  fs.Int("layer", -1, "the MoE layer to load"),
		epSize: fs.Int("ep-size", 1, "expert-parallel size"),
		epRank: fs.Int("ep-rank", 0, "expert-parallel rank"),
		tp:     fs.Int("moe-tp", 1, "MoE tensor-parallel size (an N/moe-tp slice of each expert)"),
		tpRank: fs.Int("moe-tp-rank", 0, "MoE tensor-parallel rank"),
		inputs: fs.String("inputs", "", "inputs: x (F32/BF16/F16) or x_q + x_scale; topk_ids + topk_weights, or router_logits [M, E] (+ correction_bias [E])"),
		topk:   fs.Int("topk", 0, "top-k when routing router_logits (default: the format's, Kimi-K3 16, GPT-OSS 4)"),
		chain:  fs.String("chain", "mxfp8", "precision chain: exact, mxfp8, flashinfer (check: default the case's)"),
		recipe: fs.String("recipe", "rceil", "MX scale recipe for x and the intermediate: floor, rceil"),
	}
}

// load builds the case: the layer's weights from the checkpoint, the
// format's activation, the inputs (routed with the format's router when
// they hold logits).
func (cf *ckptFlags) load() (*validation.Case, error) {
	if *cf.dir == "" || *cf.inputs == "" || *cf.layer < 0 {
		return nil, usagef("--checkpoint, --layer and --inputs are required")
	}
	chain, err := moe.ParseChain(*cf.chain)
	if err != nil {
		return nil, asUsage(err)
	}
	recipe, err := mxfp.ParseRecipe(*cf.recipe)
	if err != nil {
		return nil, asUsage(err)
	}
	ck, err := checkpoint.Open(*cf.dir)
	if err != nil {
		return nil, asUsage(err)
	}
	defer ck.Close()
	l, err := ck.Load(checkpoint.Options{Layer: *cf.layer, EP: moe.EP{Size: *cf.epSize, Rank: *cf.epRank}, MoETPSize: *cf.tp, MoETPRank: *cf.tpRank})
	if err != nil {
		return nil, asUsage(err)
	}
	l.Spec.Chain, l.Spec.Recipe = chain, recipe
	router := moe.Router{NumExperts: l.NumExperts, TopK: 16, Scoring: moe.ScoringSigmoid, Renormalize: true} // Kimi-K3
	if l.Format == checkpoint.FormatGPTOSS {
		// GPT-OSS: softmax over the top-k logits, which is softmax over all
		// of them renormalized over the chosen ones.
		router = moe.Router{NumExperts: l.NumExperts, TopK: 4, Scoring: moe.ScoringSoftmax, Renormalize: true}
	}
	if *cf.topk > 0 {
		router.TopK = *cf.topk
	}
	route := func(logits, bias []float32, m int) ([]int32, []float32, int, error) {
		if len(logits) != m*router.NumExperts {
			return nil, nil, 0, fmt.Errorf("router_logits has %d values for %d tokens; the checkpoint has %d experts", len(logits), m, router.NumExperts)
		}
		router.CorrectionBias = bias
		ids, wts := make([]int32, m*router.TopK), make([]float32, m*router.TopK)
		err := router.Route(ids, wts, logits)
		return ids, wts, router.TopK, err
	}
	f, err := safetensors.ReadFile(*cf.inputs)
	if err != nil {
		return nil, asUsage(fmt.Errorf("inputs: %w", err))
	}
	in, err := validation.ReadInput(f, l.Weights.K, route)
	if err != nil {
		return nil, asUsage(fmt.Errorf("inputs %s: %w", *cf.inputs, err))
	}
	numGlobal, err := l.Spec.EP.NumGlobal(l.Weights.E)
	if err != nil {
		return nil, asUsage(err)
	}
	if err := in.Validate(l.Weights.K, numGlobal); err != nil {
		return nil, asUsage(fmt.Errorf("inputs %s: %w", *cf.inputs, err))
	}
	return &validation.Case{Name: fmt.Sprintf("%s layer %d", *cf.dir, *cf.layer), Weights: l.Weights, Spec: l.Spec, Input: *in}, nil
}

// runCase writes a self-contained case file from a checkpoint layer and
// inputs: what `run` and `check` take.
func runCase(args []string) error {
	fs := newFlags("case", "--checkpoint DIR --layer L --inputs IN.safetensors --out CASE.safetensors [--ep-size S --ep-rank R] [--moe-tp T --moe-tp-rank r]")
	cf := addCkptFlags(fs)
	out := fs.String("out", "", "the case file to write")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required")
	}
	if _, err := safetensors.CheckOutput(*out, *cf.inputs); err != nil {
		return err
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	if err := validation.WriteCase(*out, c); err != nil {
		return err
	}
	w := c.Weights
	fmt.Printf("wrote %s: M=%d K=%d N=%d E_local=%d top-%d, %v, chain %v, recipe %v, ep %d/%d, biases %v\n",
		*out, c.Input.M, w.K, w.N, w.E, c.Input.TopK, c.Spec.Activation, c.Spec.Chain, c.Spec.Recipe, c.Spec.EP.Rank, c.Spec.EP.Size, w.HasBias())
	return nil
}
