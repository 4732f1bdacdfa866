package main

import (
	"fmt"
	"math"

	"kimimoe/activation"

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
	activation                 *string
	params                     map[string]*float64 // overrides; NaN: the format's
}

func addCkptFlags(fs *flagSet) *ckptFlags {
	return &ckptFlags{
		dir:        fs.String("checkpoint", "", "checkpoint directory (model.safetensors or shards with model.safetensors.index.json)"),
		layer:      fs.Int("layer", -1, "the MoE layer to load"),
		epSize:     fs.Int("ep-size", 1, "expert-parallel size"),
		epRank:     fs.Int("ep-rank", 0, "expert-parallel rank"),
		tp:         fs.Int("moe-tp", 1, "MoE tensor-parallel size (an N/moe-tp slice of each expert)"),
		tpRank:     fs.Int("moe-tp-rank", 0, "MoE tensor-parallel rank"),
		inputs:     fs.String("inputs", "", "inputs: x (F32/BF16/F16) or x_q + x_scale; topk_ids + topk_weights, or router_logits [M, E] (+ correction_bias [E])"),
		topk:       fs.Int("topk", 0, "top-k when routing router_logits (default: the format's, Kimi-K3 16, GPT-OSS 4)"),
		chain:      fs.String("chain", "mxfp8", "precision chain: exact, mxfp8, flashinfer (check: default the case's)"),
		recipe:     fs.String("recipe", "rceil", "MX scale recipe for x and the intermediate: floor, rceil"),
		activation: fs.String("activation", "", "activation kind (default: the format's, Kimi-K3 situ, GPT-OSS swiglu_oai)"),
		params: map[string]*float64{
			"situ-beta":        fs.Float64("situ-beta", math.NaN(), "SiTU beta (default: the format's)"),
			"situ-linear-beta": fs.Float64("situ-linear-beta", math.NaN(), "SiTU linear beta (default: the format's)"),
			"swiglu-alpha":     fs.Float64("swiglu-alpha", math.NaN(), "GPT-OSS SwiGLU alpha (default: the format's)"),
			"swiglu-beta":      fs.Float64("swiglu-beta", math.NaN(), "GPT-OSS SwiGLU beta, added to up (default: the format's)"),
			"swiglu-limit":     fs.Float64("swiglu-limit", math.NaN(), "SwiGLU clamp limit (default: the format's)"),
		},
	}
}

// override applies --activation and the parameter flags to spec.
func (cf *ckptFlags) override(spec *moe.LayerSpec) error {
	if *cf.activation != "" {
		k, err := activation.ParseKind(*cf.activation)
		if err != nil {
			return asUsage(err)
		}
		if k.IsGated() != spec.Activation.IsGated() {
			return usagef("--activation %v: the checkpoint's FC1 is gated=%v", k, spec.Activation.IsGated())
		}
		spec.Activation = k
	}
	p := spec.Params[0]
	for name, field := range map[string]*float64{"situ-beta": &p.SituBeta, "situ-linear-beta": &p.SituLinearBeta,
		"swiglu-alpha": &p.SwigluAlpha, "swiglu-beta": &p.SwigluBeta, "swiglu-limit": &p.SwigluLimit} {
		if v := *cf.params[name]; !math.IsNaN(v) {
			*field = v
		}
	}
	if err := p.Validate(spec.Activation); err != nil {
		return asUsage(err)
	}
	spec.Params = []activation.Params{p}
	return nil
}

// load builds the case: the layer's weights from the checkpoint, the
// format's activation, the inputs (routed with the format's router when
// they hold logits).
func (cf *ckptFlags) load() (*validation.Case, error) {
	if *cf.dir == "" || *cf.inputs == "" || *cf.layer < 0 {
		return nil, usagef("--checkpoint, --layer and --inputs are required")
	}
	chain := moe.ChainMXFP8
	if *cf.chain != "" {
		var err error
		if chain, err = moe.ParseChain(*cf.chain); err != nil {
			return nil, asUsage(err)
		}
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
	if err := cf.override(&l.Spec); err != nil {
		return nil, err
	}
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
