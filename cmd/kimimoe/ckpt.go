package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"kimimoe/activation"
	"kimimoe/checkpoint"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// optFloat is a float flag with no default: unset prints nothing in -h.
type optFloat struct {
	v   float64
	set bool
}

func (o *optFloat) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatFloat(o.v, 'g', -1, 64)
}

func (o *optFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	o.v, o.set = v, true
	return nil
}

// optInt is an int flag with no default shown in -h.
type optInt struct {
	v   int
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.v)
}

func (o *optInt) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	o.v, o.set = v, true
	return nil
}

// ckptFlags are the flags of `run`, `case` and `check` that pick a
// checkpoint layer and its slice, or override what a case file says.
type ckptFlags struct {
	fs                         *flagSet
	dir, inputs, chain, recipe *string
	layer, epSize, epRank      *int
	tp, tpRank, topk           *int
	activation                 *string
	params                     map[string]*optFloat
	maxGiB                     float64 // the command's --max-memory-gib: bounds the layer Load reads
}

// checkpointOnly are the flags that only a checkpoint layer can use.
var checkpointOnly = []string{"layer", "moe-tp", "moe-tp-rank", "inputs", "topk"}

func addCkptFlags(fs *flagSet) *ckptFlags {
	cf := &ckptFlags{
		fs:         fs,
		dir:        fs.String("checkpoint", "", "checkpoint directory (model.safetensors or shards with model.safetensors.index.json)"),
		epSize:     fs.Int("ep-size", 1, "expert-parallel size (for a case file: overrides the case's)"),
		epRank:     fs.Int("ep-rank", 0, "expert-parallel rank (for a case file: overrides the case's)"),
		tp:         fs.Int("moe-tp", 1, "with --checkpoint: MoE tensor-parallel size (an N/moe-tp slice of each expert)"),
		tpRank:     fs.Int("moe-tp-rank", 0, "with --checkpoint: MoE tensor-parallel rank"),
		inputs:     fs.String("inputs", "", "with --checkpoint: x (F32/BF16/F16) or x_q + x_scale; topk_ids + topk_weights, or router_logits [M, E] (+ correction_bias [E])"),
		topk:       fs.Int("topk", 0, "with --checkpoint: top-k when routing router_logits (default: the format's, Kimi-K3 16, GPT-OSS 4)"),
		chain:      fs.String("chain", "", "precision chain: exact, mxfp8, flashinfer, bf16, marlin (default: the case's; mxfp8 for a checkpoint)"),
		recipe:     fs.String("recipe", "", "MX scale recipe for x and the intermediate: floor, rceil (default: the case's; rceil for a checkpoint)"),
		activation: fs.String("activation", "", "activation kind (default: the case's, or the checkpoint format's: Kimi-K3 situ, GPT-OSS swiglu_oai)"),
		params:     map[string]*optFloat{},
	}
	layer := &optInt{v: -1}
	fs.Var(layer, "layer", "with --checkpoint: the MoE layer `index` to load (required)")
	cf.layer = &layer.v
	for _, p := range activation.AllParams() {
		o := &optFloat{}
		fs.Var(o, p.Flag(), p.Doc+", a `number` (default: the case's or the format's)")
		cf.params[p.Flag()] = o
	}
	return cf
}

// given reports whether flag name was set on the command line.
func (cf *ckptFlags) given(name string) bool {
	set := false
	cf.fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// checkInts refuses slice flags out of range, whichever source they apply to.
func (cf *ckptFlags) checkInts() error {
	switch {
	case cf.given("ep-size") && *cf.epSize < 1:
		return usagef("--ep-size %d: want at least 1", *cf.epSize)
	case cf.given("ep-rank") && (*cf.epRank < 0 || cf.given("ep-size") && *cf.epRank >= *cf.epSize):
		return usagef("--ep-rank %d: want 0 <= rank < --ep-size %d", *cf.epRank, *cf.epSize)
	case cf.given("moe-tp") && *cf.tp < 1:
		return usagef("--moe-tp %d: want at least 1", *cf.tp)
	case cf.given("moe-tp-rank") && (*cf.tpRank < 0 || *cf.tpRank >= max(*cf.tp, 1)):
		return usagef("--moe-tp-rank %d: want 0 <= rank < --moe-tp %d", *cf.tpRank, *cf.tp)
	case cf.given("layer") && *cf.layer < 0:
		return usagef("--layer %d: want a layer index of 0 or more", *cf.layer)
	case cf.given("topk") && *cf.topk < 1:
		return usagef("--topk %d: want at least 1", *cf.topk)
	}
	return nil
}

// apply sets the spec fields the flags name onto spec (the case's or the
// checkpoint's) and returns one note per field: where its value came from.
// source names what the spec came from ("the case", "the checkpoint").
// checkNames parses --chain, --recipe and --activation alone: a folder's
// check refuses a misspelt one before any case, as a usage error.
func (cf *ckptFlags) checkNames() error {
	if *cf.chain != "" {
		if _, err := moe.ParseChain(*cf.chain); err != nil {
			return asUsage(err)
		}
	}
	if *cf.recipe != "" {
		if _, err := mxfp.ParseRecipe(*cf.recipe); err != nil {
			return asUsage(err)
		}
	}
	if *cf.activation != "" {
		if _, err := activation.ParseKind(*cf.activation); err != nil {
			return asUsage(err)
		}
	}
	return nil
}

func (cf *ckptFlags) apply(spec *moe.LayerSpec, source string, eLocal int) ([]string, error) {
	var notes []string
	if *cf.chain != "" {
		ch, err := moe.ParseChain(*cf.chain)
		if err != nil {
			return nil, asUsage(err)
		}
		if ch != spec.Chain {
			notes = append(notes, fmt.Sprintf("chain %v (from --chain; %s says %v)", ch, source, spec.Chain))
		}
		spec.Chain = ch
	}
	if *cf.recipe != "" {
		r, err := mxfp.ParseRecipe(*cf.recipe)
		if err != nil {
			return nil, asUsage(err)
		}
		if r != spec.Recipe {
			notes = append(notes, fmt.Sprintf("recipe %v (from --recipe; %s says %v)", r, source, spec.Recipe))
		}
		spec.Recipe = r
	}
	if *cf.activation != "" {
		k, err := activation.ParseKind(*cf.activation)
		if err != nil {
			return nil, asUsage(err)
		}
		if k.IsGated() != spec.Activation.IsGated() {
			return nil, usagef("--activation %v: %s's FC1 is for a %s activation (%v)", k, source, gatedWord(spec.Activation.IsGated()), spec.Activation)
		}
		if k != spec.Activation {
			notes = append(notes, fmt.Sprintf("activation %v (from --activation; %s says %v)", k, source, spec.Activation))
			spec.Params = []activation.Params{activation.DefaultParams()}
		}
		spec.Activation = k
	}
	params := slices.Clone(spec.Params)
	for _, pf := range activation.AllParams() {
		o := cf.params[pf.Flag()]
		if !o.set {
			continue
		}
		if !spec.Activation.Reads(pf.Name) {
			return nil, usagef("--%s: activation %v has no such parameter", pf.Flag(), spec.Activation)
		}
		old := pf.Get(&params[0])
		for i := range params {
			pf.Set(&params[i], o.v)
		}
		notes = append(notes, fmt.Sprintf("%s %g (from --%s; %s says %g)", pf.Name, o.v, pf.Flag(), source, old))
	}
	for i := range params {
		if err := params[i].Validate(spec.Activation); err != nil {
			return nil, asUsage(err)
		}
	}
	spec.Params = params
	if cf.given("ep-size") || cf.given("ep-rank") {
		old := spec.EP.Normalize()
		ep := moe.EP{Size: old.Size, Rank: old.Rank}
		if cf.given("ep-size") {
			ep.Size = *cf.epSize
		}
		if cf.given("ep-rank") {
			ep.Rank = *cf.epRank
		}
		if err := ep.Validate(); err != nil {
			return nil, asUsage(err)
		}
		if _, err := ep.NumGlobal(eLocal); err != nil {
			return nil, asUsage(err)
		}
		if ep != old {
			notes = append(notes, fmt.Sprintf("ep rank %d of %d (from --ep-size/--ep-rank; %s says %d of %d)", ep.Rank, ep.Size, source, old.Rank, old.Size))
		}
		spec.EP = ep
	}
	return notes, nil
}

func gatedWord(g bool) string {
	if g {
		return "gated"
	}
	return "non-gated"
}

// forCase applies the override flags to a case read from a file and
// refuses the flags that only a checkpoint can use.
func (cf *ckptFlags) forCase(c *validation.Case) ([]string, error) {
	for _, name := range checkpointOnly {
		if cf.given(name) {
			return nil, usagef("--%s applies to --checkpoint, not to --case", name)
		}
	}
	if err := cf.checkInts(); err != nil {
		return nil, err
	}
	notes, err := cf.apply(&c.Spec, "the case", c.Weights.E)
	if err != nil {
		return nil, err
	}
	numGlobal, err := c.Spec.EP.NumGlobal(c.Weights.E)
	if err != nil {
		return nil, asUsage(err)
	}
	if err := c.Input.Validate(c.Weights.K, numGlobal); err != nil {
		return nil, asUsage(fmt.Errorf("case %s with the overrides: %w", c.Name, err))
	}
	return notes, nil
}

// load builds the case: the layer's weights from the checkpoint, the
// format's activation, the inputs (routed with the format's router when
// they hold logits). The notes say what the flags changed.
func (cf *ckptFlags) load() (*validation.Case, []string, error) {
	if *cf.dir == "" || *cf.inputs == "" || !cf.given("layer") {
		return nil, nil, usagef("--checkpoint, --layer and --inputs are required")
	}
	if err := cf.checkInts(); err != nil {
		return nil, nil, err
	}
	ck, err := checkpoint.Open(*cf.dir)
	if err != nil {
		return nil, nil, asUsage(err)
	}
	defer ck.Close()
	opts := checkpoint.Options{Layer: *cf.layer, EP: moe.EP{Size: *cf.epSize, Rank: *cf.epRank}, MoETPSize: *cf.tp, MoETPRank: *cf.tpRank}
	if cf.maxGiB > 0 {
		opts.MaxBytes = int64(cf.maxGiB * (1 << 30))
	}
	l, err := ck.Load(opts)
	if err != nil {
		return nil, nil, asUsage(err)
	}
	l.Spec.Chain, l.Spec.Recipe = moe.ChainMXFP8, mxfp.RecipeRCeil
	saveEP := l.Spec.EP
	notes, err := cf.apply(&l.Spec, "the checkpoint", l.Weights.E)
	if err != nil {
		return nil, nil, err
	}
	l.Spec.EP = saveEP // Load applied --ep-size/--ep-rank already
	notes = slices.DeleteFunc(notes, func(s string) bool { return strings.HasPrefix(s, "ep rank") })
	router := moe.Router{NumExperts: l.NumExperts, TopK: 16, Scoring: moe.ScoringSigmoid, Renormalize: true} // Kimi-K3
	if l.Format == checkpoint.FormatGPTOSS {
		// GPT-OSS: softmax over the top-k logits, which is softmax over all
		// of them renormalized over the chosen ones.
		router = moe.Router{NumExperts: l.NumExperts, TopK: 4, Scoring: moe.ScoringSoftmax, Renormalize: true}
	}
	if *cf.topk > 0 {
		if *cf.topk > l.NumExperts {
			return nil, nil, usagef("--topk %d: the checkpoint's layer has %d experts", *cf.topk, l.NumExperts)
		}
		router.TopK = *cf.topk
	}
	router.TopK = min(router.TopK, l.NumExperts)
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
		return nil, nil, asUsage(fmt.Errorf("inputs: %w", err))
	}
	in, err := validation.ReadInput(f, l.Weights.K, route)
	if err != nil {
		return nil, nil, asUsage(fmt.Errorf("inputs %s: %w", *cf.inputs, err))
	}
	numGlobal, err := l.Spec.EP.NumGlobal(l.Weights.E)
	if err != nil {
		return nil, nil, asUsage(err)
	}
	if err := in.Validate(l.Weights.K, numGlobal); err != nil {
		return nil, nil, asUsage(fmt.Errorf("inputs %s: %w", *cf.inputs, err))
	}
	c := &validation.Case{Name: fmt.Sprintf("%s layer %d", *cf.dir, *cf.layer), Weights: l.Weights, Spec: l.Spec, Input: *in,
		Extra: map[string]*safetensors.Tensor{}}
	for _, name := range []string{"router_logits", "correction_bias"} {
		if t := f.Get(name); t != nil {
			c.Extra[name] = t
		}
	}
	return c, notes, nil
}

// loadAny reads the case from --case (path) or from the checkpoint flags,
// with the overrides applied; the notes say what they changed.
func (cf *ckptFlags) loadAny(path string) (*validation.Case, []string, error) {
	if path == "" {
		return cf.load()
	}
	c, err := validation.ReadCase(path)
	if err != nil {
		return nil, nil, asUsage(err)
	}
	notes, err := cf.forCase(c)
	return c, notes, err
}

// runCase writes a self-contained case file from a checkpoint layer and
// inputs: what `run` and `check` take.
func runCase(args []string) error {
	fs := newFlags("case", "--checkpoint DIR --layer L --inputs IN.safetensors --out CASE.safetensors [--ep-size S --ep-rank R] [--moe-tp T --moe-tp-rank r]")
	cf := addCkptFlags(fs)
	out := fs.String("out", "", "the case file to write")
	maxMem := fs.Float64("max-memory-gib", 16, "refuse a layer estimated to need more memory than this")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required")
	}
	if !(*maxMem > 0) {
		return usagef("--max-memory-gib %v: want a positive number", *maxMem)
	}
	cf.maxGiB = *maxMem
	if err := checkOutput("out", *out, kindSafetensors, append(inputsOf(*cf.inputs), checkpointFiles(*cf.dir)...)...); err != nil {
		return err
	}
	c, notes, err := cf.load()
	if err != nil {
		return err
	}
	if err := validation.WriteCase(*out, c, extraTensors(c)...); err != nil {
		return err
	}
	w := c.Weights
	for _, n := range notes {
		fmt.Printf("note: %s\n", n)
	}
	fmt.Printf("wrote %s: M=%d K=%d N=%d E_local=%d top-%d, %v, chain %v, recipe %v, ep %d/%d, biases %v\n",
		*out, c.Input.M, w.K, w.N, w.E, c.Input.TopK, c.Spec.Activation, c.Spec.Chain, c.Spec.Recipe, c.Spec.EP.Rank, c.Spec.EP.Normalize().Size, w.HasBias())
	return nil
}

// extraTensors are the case's extra tensors in name order (router_logits
// and correction_bias travel with the case, for the diagnosis).
func extraTensors(c *validation.Case) []*safetensors.Tensor {
	var names []string
	for n := range c.Extra {
		names = append(names, n)
	}
	slices.Sort(names)
	var ts []*safetensors.Tensor
	for _, n := range names {
		ts = append(ts, c.Extra[n])
	}
	return ts
}
