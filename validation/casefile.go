package validation

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"kimimoe/moe"

	"kimimoe/activation"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
)

// ErrCaseFile is wrapped by every error about a malformed case file.
var ErrCaseFile = errors.New("moe: bad case file")

// Case is one MoE layer invocation: weights, spec and input, as stored in a
// case file (docs/CONTRACT.md "Case files"):
//
//	x            [M, K]      F32, BF16 or F16 (or x_q U8 [M, K] + x_scale U8 [M, K/32])
//	topk_ids     [M, topk]   I32 or I64    global ids, -1 masked
//	topk_weights [M, topk]   F32
//	w31          [E, R, K/2] U8            R = 2N ([up; gate]) gated, N otherwise
//	w31_scale    [E, R, K/32] U8
//	w2           [E, K, N/2] U8
//	w2_scale     [E, K, N/32] U8
//	w31_bias     [E, R]      F32 or BF16   optional, rows as w31
//	w2_bias      [E, K]      F32 or BF16   optional
//
// and __metadata__ strings: activation (required: situ, swiglu, swiglu_oai,
// ...), situ_beta, situ_linear_beta, swiglu_alpha, swiglu_beta,
// swiglu_limit (each a number, or a comma-separated list with one number per
// local expert; defaults: activation.DefaultParams), recipe (floor or rceil;
// default rceil), chain (exact, mxfp8 or flashinfer; default mxfp8),
// ep_size and ep_rank (default 1 and 0). Tensors with other names are kept
// in Extra.
type Case struct {
	Name    string
	Weights *moe.Weights
	Spec    moe.LayerSpec
	Input   moe.Input
	Extra   map[string]*safetensors.Tensor
}

// ReadCase reads and parses a case file into memory (safetensors.ReadFile:
// a file truncated or replaced while it is read is an error, not a crash).
// Every problem is an error wrapping ErrCaseFile (or safetensors.ErrFormat
// for the container, safetensors.ErrNotRegular for a directory or FIFO)
// that names the file and the tensor or key.
func ReadCase(path string) (*Case, error) {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		if errors.Is(err, safetensors.ErrFormat) {
			return nil, fmt.Errorf("%w: %w", ErrCaseFile, err)
		}
		return nil, err
	}
	c, err := caseFromFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Name = path
	return c, nil
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCaseFile}, a...)...)
}

func need(f *safetensors.File, name string, rank int, dtypes ...safetensors.DType) (*safetensors.Tensor, error) {
	t := f.Get(name)
	if t == nil {
		return nil, bad("missing tensor %q", name)
	}
	if len(t.Shape) != rank {
		return nil, bad("tensor %q has shape %v, want %d dimensions", name, t.Shape, rank)
	}
	for _, d := range dtypes {
		if t.DType == d {
			return t, nil
		}
	}
	return nil, bad("tensor %q has dtype %s, want %v", name, t.DType, dtypes)
}

func shapeIs(t *safetensors.Tensor, want ...int) error {
	for i := range want {
		if t.Shape[i] != want[i] {
			return bad("tensor %q has shape %v, want %v", t.Name, t.Shape, want)
		}
	}
	return nil
}

func caseFromFile(f *safetensors.File) (*Case, error) {
	c := &Case{Extra: map[string]*safetensors.Tensor{}}
	md := f.Metadata
	actName, ok := md["activation"]
	if !ok {
		return nil, bad("__metadata__ has no \"activation\" key")
	}
	kind, err := activation.ParseKind(actName)
	if err != nil {
		return nil, bad("__metadata__ activation: %v", err)
	}

	w31, err := need(f, "w31", 3, safetensors.U8)
	if err != nil {
		return nil, err
	}
	e, r, k := w31.Shape[0], w31.Shape[1], w31.Shape[2]*2
	w2, err := need(f, "w2", 3, safetensors.U8)
	if err != nil {
		return nil, err
	}
	if err := shapeIs(w2, e, k); err != nil {
		return nil, err
	}
	n := w2.Shape[2] * 2
	if e < 1 || n < 32 || k < 32 || n%32 != 0 || k%32 != 0 {
		return nil, bad("w31 %v and w2 %v give E=%d N=%d K=%d; need N and K positive multiples of 32", w31.Shape, w2.Shape, e, n, k)
	}
	wantR := n
	if kind.IsGated() {
		wantR = 2 * n
	}
	if r != wantR {
		return nil, bad("tensor \"w31\" has %d rows per expert; activation %v with N=%d (from w2) needs %d", r, kind, n, wantR)
	}
	w31s, err := need(f, "w31_scale", 3, safetensors.U8)
	if err != nil {
		return nil, err
	}
	if err := shapeIs(w31s, e, r, k/32); err != nil {
		return nil, err
	}
	w2s, err := need(f, "w2_scale", 3, safetensors.U8)
	if err != nil {
		return nil, err
	}
	if err := shapeIs(w2s, e, k, n/32); err != nil {
		return nil, err
	}
	c.Weights = &moe.Weights{E: e, N: n, K: k, Gated: kind.IsGated(), W31: w31.Data, W31Scale: w31s.Data, W2: w2.Data, W2Scale: w2s.Data}
	for _, b := range []struct {
		name string
		dst  *[]float32
		cols int
	}{{"w31_bias", &c.Weights.W31Bias, r}, {"w2_bias", &c.Weights.W2Bias, k}} {
		if f.Get(b.name) == nil {
			continue
		}
		t, err := need(f, b.name, 2, safetensors.F32, safetensors.BF16)
		if err != nil {
			return nil, err
		}
		if err := shapeIs(t, e, b.cols); err != nil {
			return nil, err
		}
		*b.dst, _ = t.AsFloat32()
	}
	if err := c.Weights.Validate(); err != nil {
		return nil, bad("%v", err)
	}

	spec := moe.LayerSpec{Activation: kind, Recipe: mxfp.RecipeRCeil, Chain: moe.ChainMXFP8}
	if s, ok := md["recipe"]; ok {
		if spec.Recipe, err = mxfp.ParseRecipe(s); err != nil {
			return nil, bad("__metadata__ recipe: %v", err)
		}
	}
	if s, ok := md["chain"]; ok {
		if spec.Chain, err = moe.ParseChain(s); err != nil {
			return nil, bad("__metadata__ chain: %v", err)
		}
	}
	spec.EP.Size, spec.EP.Rank = 1, 0
	for key, dst := range map[string]*int{"ep_size": &spec.EP.Size, "ep_rank": &spec.EP.Rank} {
		if s, ok := md[key]; ok {
			if *dst, err = strconv.Atoi(s); err != nil {
				return nil, bad("__metadata__ %s = %q is not an integer", key, s)
			}
		}
	}
	if spec.EP.Size < 1 {
		return nil, bad("__metadata__ ep_size = %d: want at least 1 (one rank, no expert parallelism)", spec.EP.Size)
	}
	if spec.EP.Rank < 0 || spec.EP.Rank >= spec.EP.Size {
		return nil, bad("__metadata__ ep_rank = %d: want 0 <= ep_rank < ep_size = %d", spec.EP.Rank, spec.EP.Size)
	}
	numGlobal, err := spec.EP.NumGlobal(e)
	if err != nil {
		return nil, bad("__metadata__ ep_size = %d with %d local experts (tensor \"w31\"): %v", spec.EP.Size, e, err)
	}
	if spec.Params, err = paramsFromMetadata(md, kind, e); err != nil {
		return nil, err
	}
	c.Spec = spec

	in, err := ReadInput(f, k, nil)
	if err != nil {
		return nil, err
	}
	if err := routingAgrees(f, in, nil); err != nil {
		return nil, err
	}
	c.Input = *in
	if err := c.Input.Validate(k, numGlobal); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCaseFile, err)
	}
	known := map[string]bool{"x": true, "x_q": true, "x_scale": true, "topk_ids": true, "topk_weights": true,
		"w31": true, "w31_scale": true, "w2": true, "w2_scale": true, "w31_bias": true, "w2_bias": true}
	for _, t := range f.Tensors {
		if !known[t.Name] {
			c.Extra[t.Name] = t
		}
	}
	return c, nil
}

// ReadInput reads a forward's inputs from f for layer width k: "x" [M, K]
// (F32, BF16 or F16) or "x_q" [M, K] U8 with "x_scale" [M, K/32] U8; and
// "topk_ids" [M, topk] (I32 or I64) with "topk_weights" [M, topk] F32, or,
// when those are absent and route is not nil, "router_logits" [M, E_global]
// (F32, BF16 or F16) with an optional "correction_bias" [E_global], given
// to route. When both topk_ids and router_logits are given (and route is
// not nil), the logits are routed too and must pick the same experts. It
// checks shapes and dtypes (errors wrap ErrCaseFile and name the tensor);
// Input.Validate checks the values.
func ReadInput(f *safetensors.File, k int, route Router) (*moe.Input, error) {
	in := &moe.Input{}
	var m int
	switch ids, logits := f.Get("topk_ids"), f.Get("router_logits"); {
	case ids != nil:
		ids, err := need(f, "topk_ids", 2, safetensors.I32, safetensors.I64)
		if err != nil {
			return nil, err
		}
		var topk int
		m, topk = ids.Shape[0], ids.Shape[1]
		idv, _ := ids.Int64s()
		in.M, in.TopK, in.TopKIDs = m, topk, make([]int32, len(idv))
		for i, v := range idv {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, bad("topk_ids[%d, %d] = %d does not fit int32", i/topk, i%topk, v)
			}
			in.TopKIDs[i] = int32(v)
		}
		wts, err := need(f, "topk_weights", 2, safetensors.F32)
		if err != nil {
			return nil, err
		}
		if err := shapeIs(wts, m, topk); err != nil {
			return nil, err
		}
		in.TopKWeights, _ = wts.Float32s()
		if logits != nil && route != nil {
			if err := routingAgrees(f, in, route); err != nil {
				return nil, err
			}
		}
	case logits != nil && route != nil:
		lt, err := need(f, "router_logits", 2, safetensors.F32, safetensors.BF16, safetensors.F16)
		if err != nil {
			return nil, err
		}
		m = lt.Shape[0]
		lv, _ := lt.AsFloat32()
		var bias []float32
		if b := f.Get("correction_bias"); b != nil {
			if b, err = need(f, "correction_bias", 1, safetensors.F32, safetensors.BF16, safetensors.F16); err != nil {
				return nil, err
			}
			if b.Shape[0] != lt.Shape[1] {
				return nil, bad("tensor \"correction_bias\" has shape %v; router_logits %v has %d experts", b.Shape, lt.Shape, lt.Shape[1])
			}
			bias, _ = b.AsFloat32()
		}
		if in.TopKIDs, in.TopKWeights, in.TopK, err = route(lv, bias, m); err != nil {
			return nil, bad("routing \"router_logits\": %v", err)
		}
		in.M = m
	case route != nil:
		return nil, bad("missing tensor \"topk_ids\" (with \"topk_weights\"), or \"router_logits\" to route")
	default:
		return nil, bad("missing tensor \"topk_ids\" (with \"topk_weights\")")
	}
	switch x, xq := f.Get("x"), f.Get("x_q"); {
	case x != nil && xq != nil:
		return nil, bad("both \"x\" and \"x_q\" are present")
	case x != nil:
		x, err := need(f, "x", 2, safetensors.F32, safetensors.BF16, safetensors.F16)
		if err != nil {
			return nil, err
		}
		if err := shapeIs(x, m, k); err != nil {
			return nil, err
		}
		in.X, _ = x.AsFloat32() // exact widening
	case xq != nil:
		xq, err := need(f, "x_q", 2, safetensors.U8)
		if err != nil {
			return nil, err
		}
		if err := shapeIs(xq, m, k); err != nil {
			return nil, err
		}
		xs, err := need(f, "x_scale", 2, safetensors.U8)
		if err != nil {
			return nil, err
		}
		if err := shapeIs(xs, m, k/32); err != nil {
			return nil, err
		}
		in.XQ = &mxfp.MXFP8Matrix{Rows: m, Cols: k, Codes: xq.Data, Scales: xs.Data}
	default:
		return nil, bad("missing tensor \"x\" (or \"x_q\" and \"x_scale\")")
	}
	return in, nil
}

// Router is what ReadInput routes router_logits with: ids and weights
// [m, topk] from logits [m, E] and an optional correction bias [E].
type Router func(logits, bias []float32, m int) (ids []int32, weights []float32, topk int, err error)

// routingAgrees checks, when f holds router_logits beside topk_ids, that
// routing the logits picks the same set of experts for every token: a
// disagreement is an error naming the first token (dumps that hold both
// would otherwise be checked against whichever the reader preferred).
// route nil picks, as for a case file, the top-k of sigmoid(logit) + the
// correction bias: without a bias that is the top-k of the logits, which a
// softmax router picks too.
func routingAgrees(f *safetensors.File, in *moe.Input, route Router) error {
	lt := f.Get("router_logits")
	if lt == nil || in.TopKIDs == nil {
		return nil
	}
	if len(lt.Shape) != 2 || lt.Shape[0] != in.M {
		return bad("tensor \"router_logits\" has shape %v; topk_ids has %d tokens", lt.Shape, in.M)
	}
	lv, err := lt.AsFloat32()
	if err != nil {
		return bad("%v", err)
	}
	var bias []float32
	if b := f.Get("correction_bias"); b != nil {
		if bias, err = b.AsFloat32(); err != nil || len(bias) != lt.Shape[1] {
			return bad("tensor \"correction_bias\" has shape %v; router_logits %v has %d experts", b.Shape, lt.Shape, lt.Shape[1])
		}
	}
	var ids []int32
	var topk int
	if route != nil {
		if ids, _, topk, err = route(lv, bias, in.M); err != nil {
			return bad("routing \"router_logits\": %v", err)
		}
	} else { // a case file: the top-k of sigmoid(logit) + bias at the case's own top-k
		r := moe.Router{NumExperts: lt.Shape[1], TopK: in.TopK, Scoring: moe.ScoringSigmoid, CorrectionBias: bias}
		topk = in.TopK
		ids = make([]int32, in.M*topk)
		if err := r.Route(ids, make([]float32, len(ids)), lv); err != nil {
			return bad("routing \"router_logits\": %v", err)
		}
	}
	if topk != in.TopK {
		return bad("topk_ids has top-%d, routing \"router_logits\" picks top-%d", in.TopK, topk)
	}
	for t := range in.M {
		a := slices.Clone(in.TopKIDs[t*topk : (t+1)*topk])
		b := slices.Clone(ids[t*topk : (t+1)*topk])
		slices.Sort(a)
		slices.Sort(b)
		agree := slices.Equal(a, b)
		if slices.Contains(a, -1) { // masked slots: every unmasked id must be one the logits pick
			agree = true
			for _, id := range a {
				agree = agree && (id == -1 || slices.Contains(b, id))
			}
		}
		if !agree {
			return bad("topk_ids and router_logits disagree from token %d on: topk_ids picks %v, routing the logits picks %v", t, in.TopKIDs[t*topk:(t+1)*topk], ids[t*topk:(t+1)*topk])
		}
	}
	return nil
}

func paramsFromMetadata(md map[string]string, kind activation.Kind, e int) ([]activation.Params, error) {
	n := 1
	lists := map[string][]float64{}
	for _, pk := range activation.AllParams() {
		s, ok := md[pk.Name]
		if !ok {
			continue
		}
		var vals []float64
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil {
				return nil, bad("__metadata__ %s = %q is not a number or list of numbers", pk.Name, s)
			}
			vals = append(vals, v)
		}
		if len(vals) != 1 && len(vals) != e {
			return nil, bad("__metadata__ %s has %d values; want 1 or one per expert (%d)", pk.Name, len(vals), e)
		}
		n = max(n, len(vals))
		lists[pk.Name] = vals
	}
	ps := make([]activation.Params, n)
	for i := range ps {
		ps[i] = activation.DefaultParams()
		for _, pk := range activation.AllParams() {
			if v := lists[pk.Name]; v != nil {
				pk.Set(&ps[i], v[min(i, len(v)-1)])
			}
		}
		if err := ps[i].Validate(kind); err != nil {
			return nil, bad("__metadata__ parameters of expert %d: %v", i, err)
		}
	}
	return ps, nil
}

// Tensors returns the case's tensors and metadata for writing.
func (c *Case) Tensors() ([]*safetensors.Tensor, map[string]string) {
	in, w := &c.Input, c.Weights
	var ts []*safetensors.Tensor
	if in.XQ != nil {
		ts = append(ts, safetensors.FromUint8("x_q", []int{in.M, w.K}, in.XQ.Codes),
			safetensors.FromUint8("x_scale", []int{in.M, w.K / 32}, in.XQ.Scales))
	} else {
		ts = append(ts, safetensors.FromFloat32("x", []int{in.M, w.K}, in.X))
	}
	ts = append(ts,
		safetensors.FromInt32("topk_ids", []int{in.M, in.TopK}, in.TopKIDs),
		safetensors.FromFloat32("topk_weights", []int{in.M, in.TopK}, in.TopKWeights),
		safetensors.FromUint8("w31", []int{w.E, w.Rows(), w.K / 2}, w.W31),
		safetensors.FromUint8("w31_scale", []int{w.E, w.Rows(), w.K / 32}, w.W31Scale),
		safetensors.FromUint8("w2", []int{w.E, w.K, w.N / 2}, w.W2),
		safetensors.FromUint8("w2_scale", []int{w.E, w.K, w.N / 32}, w.W2Scale))
	if w.W31Bias != nil {
		ts = append(ts, safetensors.FromFloat32("w31_bias", []int{w.E, w.Rows()}, w.W31Bias))
	}
	if w.W2Bias != nil {
		ts = append(ts, safetensors.FromFloat32("w2_bias", []int{w.E, w.K}, w.W2Bias))
	}
	md := map[string]string{
		"activation": c.Spec.Activation.String(),
		"recipe":     c.Spec.Recipe.String(),
		"chain":      c.Spec.Chain.String(),
		"ep_size":    strconv.Itoa(c.Spec.EP.Normalize().Size),
		"ep_rank":    strconv.Itoa(c.Spec.EP.Rank),
	}
	for _, pk := range activation.AllParams() {
		var vals []string
		for i := range c.Spec.Params {
			vals = append(vals, strconv.FormatFloat(pk.Get(&c.Spec.Params[i]), 'g', -1, 64))
		}
		md[pk.Name] = strings.Join(vals, ",")
	}
	return ts, md
}

// WriteCase writes c (and extra tensors, e.g. an expected "out") to path,
// atomically. It refuses, wrapping ErrCaseFile, a case that ReadCase would
// reject: no weights, an invalid spec or input, a nil or reserved extra.
func WriteCase(path string, c *Case, extra ...*safetensors.Tensor) error {
	if err := c.valid(); err != nil {
		return err
	}
	ts, md := c.Tensors()
	names := map[string]bool{}
	for _, t := range ts {
		names[t.Name] = true
	}
	for i, t := range extra {
		switch {
		case t == nil:
			return bad("WriteCase: extra tensor %d is nil", i)
		case names[t.Name]:
			return bad("WriteCase: extra tensor %q is one of the case's own", t.Name)
		}
		names[t.Name] = true
	}
	return safetensors.WriteFile(path, append(ts, extra...), md)
}

// valid checks what a case file must hold.
func (c *Case) valid() error {
	if c == nil || c.Weights == nil {
		return bad("WriteCase: the case has no weights")
	}
	if err := c.Spec.Validate(c.Weights); err != nil {
		return bad("WriteCase: %v", err)
	}
	numGlobal, err := c.Spec.EP.NumGlobal(c.Weights.E)
	if err != nil {
		return bad("WriteCase: %v", err)
	}
	if err := c.Input.Validate(c.Weights.K, numGlobal); err != nil {
		return bad("WriteCase: %v", err)
	}
	return nil
}
