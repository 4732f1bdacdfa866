// Package checkpoint loads one MoE layer's expert weights from a
// Hugging Face style checkpoint directory into moe.Weights: one
// model.safetensors, or shards listed in model.safetensors.index.json
// ("weight_map": tensor name -> shard file). Only the tensors of the layer
// and experts asked for are read, through package safetensors' reader
// (memory-mapped where it can, with faults turned into errors).
//
// # Layouts
//
// Kimi-K3 (compressed-tensors MXFP4, per expert): for expert e of layer L,
// tensors named "<prefix>.layers.<L>.<middle>.experts.<e>.<w>.weight_packed"
// (U8 [rows, cols/2]) and ".weight_scale" (U8 [rows, cols/32]) with w1
// (gate) and w3 (up) of [N, K] and w2 of [K, N]. The middle of the name is
// not assumed: the loader finds it, and more than one candidate is an error
// that lists them. W31 is [up; gate] = [w3; w1].
//
// GPT-OSS (stacked, per layer): "<prefix>.layers.<L>.mlp.experts." +
// "gate_up_proj_blocks" U8 [E, 2N, K/32, 16], "gate_up_proj_scales" U8
// [E, 2N, K/32], "gate_up_proj_bias" [E, 2N] (BF16 or F32),
// "down_proj_blocks" U8 [E, K, N/32, 16], "down_proj_scales" U8
// [E, K, N/32], "down_proj_bias" [E, K]; gate and up rows interleaved (gate
// even, up odd, as transformers' GptOssExperts splits them), so W31 takes
// the odd rows then the even ones, biases likewise. Activation: GPT-OSS
// SwiGLU (alpha 1.702, limit 7, +1 on up).
//
// # Parallel slices
//
// EP size and rank select the rank's contiguous experts (global ids stay
// global: the spec's EP says which rank it is). A MoE-TP size and rank
// select an N/moe_tp slice of every expert: rows of w1 and w3 (and of the
// gate/up bias), columns of w2 and its scales; N/moe_tp must be a multiple
// of 32. The FC2 bias is added once per output, so only MoE-TP rank 0
// keeps it (the ranks' partial outputs are summed).
//
// # Errors
//
// A missing tensor, a wrong dtype or shape, a payload and scale that
// disagree, a truncated shard: each is an error wrapping ErrCheckpoint
// (or safetensors.ErrFormat) that names the tensor and the file.
package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"kimimoe/activation"
	"kimimoe/internal/regular"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
)

// ErrCheckpoint is wrapped by every error about a checkpoint's content.
var ErrCheckpoint = errors.New("checkpoint: bad checkpoint")

// Format is a checkpoint's expert layout.
type Format string

const (
	FormatKimi   Format = "kimi"    // per-expert w1/w3/w2 weight_packed + weight_scale
	FormatGPTOSS Format = "gpt-oss" // stacked gate_up_proj/down_proj blocks, scales, biases
)

// Checkpoint is an opened checkpoint directory. Close it when done. Its
// methods may be called from several goroutines; after Close they return
// ErrClosed.
type Checkpoint struct {
	Dir   string
	where map[string]string // tensor name -> shard file name
	names []string          // sorted

	mu      sync.Mutex // guards readers and closed
	readers map[string]*safetensors.Reader
	closed  bool
}

// ErrClosed is returned by a Checkpoint's methods after Close.
var ErrClosed = errors.New("checkpoint: closed")

// MaxIndexBytes bounds the index file read (the largest real index, a
// trillion-parameter model's, is tens of MB).
const MaxIndexBytes = 256 << 20

// DefaultMaxBytes is Options.MaxBytes's default: what Load may allocate
// for one layer's slice.
const DefaultMaxBytes = 16 << 30

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCheckpoint}, a...)...)
}

// Open reads dir's index (or its single model.safetensors header) without
// reading any tensor.
func Open(dir string) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir, where: map[string]string{}, readers: map[string]*safetensors.Reader{}}
	idx := filepath.Join(dir, "model.safetensors.index.json")
	data, err := readIndex(idx)
	switch {
	case err == nil:
		wm, err := parseWeightMap(data)
		if err != nil {
			return nil, bad("%s: not a safetensors index: %v", idx, err)
		}
		if len(wm) == 0 {
			return nil, bad("%s: empty weight_map", idx)
		}
		for _, e := range wm {
			if e.shard == "" || filepath.Base(e.shard) != e.shard {
				return nil, bad("%s: tensor %q maps to %q, not a file in the checkpoint directory", idx, e.name, e.shard)
			}
			c.where[e.name] = e.shard
		}
	case errors.Is(err, os.ErrNotExist):
		r, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: no model.safetensors.index.json and %w", dir, err)
		}
		c.readers["model.safetensors"] = r
		for _, e := range r.Entries {
			c.where[e.Name] = "model.safetensors"
		}
	default:
		return nil, err
	}
	for n := range c.where {
		c.names = append(c.names, n)
	}
	sort.Strings(c.names)
	return c, nil
}

// readIndex reads an index file: a regular file (never a FIFO or a
// device, which could block or never end) of at most MaxIndexBytes.
func readIndex(path string) ([]byte, error) {
	data, err := regular.ReadFile(path, MaxIndexBytes, "an index")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, bad("%v", err)
	}
	return data, err
}

type mapEntry struct{ name, shard string }

// parseWeightMap decodes an index's "weight_map" keeping duplicate keys
// visible (encoding/json keeps the last silently): a duplicate is an error.
func parseWeightMap(data []byte) ([]mapEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("want a JSON object")
	}
	var out []mapEntry
	found := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		if key != "weight_map" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, err
			}
			continue
		}
		if found {
			return nil, fmt.Errorf("two \"weight_map\" keys")
		}
		found = true
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return nil, fmt.Errorf("weight_map is not an object")
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			name, _ := kt.(string)
			var shard string
			if err := dec.Decode(&shard); err != nil {
				return nil, fmt.Errorf("weight_map[%q]: %v", name, err)
			}
			if seen[name] {
				return nil, fmt.Errorf("weight_map names tensor %q twice", name)
			}
			seen[name] = true
			out = append(out, mapEntry{name, shard})
		}
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
	}
	if !found {
		return nil, fmt.Errorf("no \"weight_map\" key")
	}
	return out, nil
}

// Close closes the shards opened so far; the checkpoint cannot be used
// afterwards.
func (c *Checkpoint) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, r := range c.readers {
		errs = append(errs, r.Close())
	}
	c.readers, c.closed = nil, true
	return errors.Join(errs...)
}

// reader opens (once) the shard holding name.
func (c *Checkpoint) reader(name string) (*safetensors.Reader, string, error) {
	shard, ok := c.where[name]
	if !ok {
		return nil, "", bad("%s: missing tensor %q", c.Dir, name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, shard, ErrClosed
	}
	if r := c.readers[shard]; r != nil {
		if r.Find(name) == nil { // the index maps name to a shard opened for another tensor
			return nil, shard, bad("shard %s does not hold tensor %q that the index maps to it", shard, name)
		}
		return r, shard, nil
	}
	r, err := safetensors.Open(filepath.Join(c.Dir, shard))
	if err != nil {
		return nil, shard, fmt.Errorf("checkpoint: shard %s (holding %q): %w", shard, name, err)
	}
	if r.Find(name) == nil {
		r.Close()
		return nil, shard, bad("shard %s does not hold tensor %q that the index maps to it", shard, name)
	}
	c.readers[shard] = r
	return r, shard, nil
}

// tensor reads rows [first, first+count) (count < 0: all) of name and
// checks its dtype and the shape of what was read.
func (c *Checkpoint) tensor(name string, first, count int, want []int, dtypes ...safetensors.DType) (*safetensors.Tensor, error) {
	r, shard, err := c.reader(name)
	if err != nil {
		return nil, err
	}
	e := r.Find(name)
	if !containsDType(dtypes, e.DType) {
		return nil, bad("tensor %q in %s has dtype %s, want %v", name, shard, e.DType, dtypes)
	}
	var t *safetensors.Tensor
	if count < 0 {
		t, err = r.Tensor(name)
	} else {
		t, err = r.Rows(name, first, count)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: tensor %q in %s: %w", name, shard, err)
	}
	if len(t.Shape) != len(want) {
		return nil, bad("tensor %q in %s has shape %v, want %v", name, shard, e.Shape, want)
	}
	for i, w := range want {
		if w >= 0 && t.Shape[i] != w {
			return nil, bad("tensor %q in %s has shape %v, want %v (-1: any)", name, shard, e.Shape, want)
		}
	}
	return t, nil
}

func containsDType(ds []safetensors.DType, d safetensors.DType) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

// Options select what to load.
type Options struct {
	Layer int
	// EP: the rank's contiguous slice of the experts (zero value: all).
	EP moe.EP
	// MoETPSize and MoETPRank select an N/MoETPSize slice (0: all).
	MoETPSize, MoETPRank int
	// MaxBytes bounds what Load allocates for the slice, checked from the
	// headers before any tensor is read (0: DefaultMaxBytes; negative: no
	// bound).
	MaxBytes int64
}

// check validates the options themselves.
func (o Options) check() error {
	switch {
	case o.Layer < 0:
		return fmt.Errorf("%w: layer %d: want 0 or more", moe.ErrParallel, o.Layer)
	case o.MoETPSize < 0:
		return fmt.Errorf("%w: moe_tp size %d: want at least 1 (0: no MoE tensor parallelism)", moe.ErrParallel, o.MoETPSize)
	}
	return o.EP.Validate()
}

// budget refuses a load of need bytes over the options' bound.
func (o Options) budget(need int64, what string) error {
	limit := o.MaxBytes
	if limit == 0 {
		limit = DefaultMaxBytes
	}
	if limit > 0 && need > limit {
		return fmt.Errorf("%w: %s needs %.3g GiB, over the limit of %.3g GiB (Options.MaxBytes; --max-memory-gib in the command)",
			ErrTooLarge, what, float64(need)/(1<<30), float64(limit)/(1<<30))
	}
	return nil
}

// ErrTooLarge is wrapped by Load's refusals of a slice over Options.MaxBytes.
var ErrTooLarge = errors.New("checkpoint: layer too large")

// Layer is what Load returns: the rank's weights and the layer's spec
// (activation and parameters from the format's preset; chain and recipe
// left for the caller, default mxfp8 and rceil).
type Layer struct {
	Format     Format
	Weights    *moe.Weights
	Spec       moe.LayerSpec
	NumExperts int // global
}

var (
	kimiRe   = regexp.MustCompile(`^(.*\.layers\.(\d+)\..*\.experts\.)(\d+)\.w1\.weight_packed$`)
	gptossRe = regexp.MustCompile(`^(.*\.layers\.(\d+)\.mlp\.experts\.)gate_up_proj_blocks$`)
)

// Detect names the layout of layer's experts from the tensor names.
func (c *Checkpoint) Detect(layer int) (Format, error) {
	L := strconv.Itoa(layer)
	for _, n := range c.names {
		if m := kimiRe.FindStringSubmatch(n); m != nil && m[2] == L {
			return FormatKimi, nil
		}
		if m := gptossRe.FindStringSubmatch(n); m != nil && m[2] == L {
			return FormatGPTOSS, nil
		}
	}
	return "", bad("%s: no experts of layer %d (looked for *.layers.%d.*.experts.<e>.w1.weight_packed and *.layers.%d.mlp.experts.gate_up_proj_blocks)", c.Dir, layer, layer, layer)
}

// Load reads one layer's experts in the detected layout. A layer that
// holds both layouts is an error naming both.
func (c *Checkpoint) Load(opts Options) (*Layer, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	f, err := c.Detect(opts.Layer)
	if err != nil {
		return nil, err
	}
	if both := c.bothFormats(opts.Layer); both != "" {
		return nil, bad("%s: layer %d holds both a Kimi-K3 and a GPT-OSS expert set (%s); want one", c.Dir, opts.Layer, both)
	}
	if f == FormatKimi {
		return c.loadKimi(opts)
	}
	return c.loadGPTOSS(opts)
}

// has reports whether the checkpoint names tensor name (c.names is sorted).
func (c *Checkpoint) has(name string) bool {
	i := sort.SearchStrings(c.names, name)
	return i < len(c.names) && c.names[i] == name
}

// bothFormats names one tensor of each layout when layer has both.
func (c *Checkpoint) bothFormats(layer int) string {
	L := strconv.Itoa(layer)
	var kimi, oss string
	for _, n := range c.names {
		if m := kimiRe.FindStringSubmatch(n); m != nil && m[2] == L && kimi == "" {
			kimi = n
		}
		if m := gptossRe.FindStringSubmatch(n); m != nil && m[2] == L && oss == "" {
			oss = n
		}
	}
	if kimi != "" && oss != "" {
		return kimi + " and " + oss
	}
	return ""
}

// weightBytes is what moe.NewWeights allocates for e experts.
func weightBytes(e, n, k int, biases bool) int64 {
	rows := int64(2 * n)
	b := int64(e) * (rows*int64(k)/2 + rows*int64(k)/32 + int64(k)*int64(n)/2 + int64(k)*int64(n)/32)
	if biases {
		b += int64(e) * (rows + int64(k)) * 4
	}
	return b
}

// slices computes the rank's expert range and N slice.
func slices(opts Options, numExperts, n int) (first, count, nFirst, nCount int, err error) {
	ep := opts.EP.Normalize()
	count, err = moe.LocalExperts(numExperts, ep.Size)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if err := ep.Validate(); err != nil {
		return 0, 0, 0, 0, err
	}
	first = ep.Rank * count
	tp := max(opts.MoETPSize, 1)
	if opts.MoETPRank < 0 || opts.MoETPRank >= tp {
		return 0, 0, 0, 0, fmt.Errorf("%w: moe_tp rank %d of %d", moe.ErrParallel, opts.MoETPRank, tp)
	}
	if n%tp != 0 || (n/tp)%32 != 0 {
		return 0, 0, 0, 0, fmt.Errorf("%w: intermediate N=%d over moe_tp %d is not a multiple of 32", moe.ErrParallel, n, tp)
	}
	nCount = n / tp
	return first, count, opts.MoETPRank * nCount, nCount, nil
}

// sliceCols copies columns [c0, c0+cn) of a [rows, cols] byte matrix.
func sliceCols(src []uint8, rows, cols, c0, cn int) []uint8 {
	if c0 == 0 && cn == cols {
		return src
	}
	out := make([]uint8, rows*cn)
	for r := range rows {
		copy(out[r*cn:(r+1)*cn], src[r*cols+c0:r*cols+c0+cn])
	}
	return out
}

func (c *Checkpoint) loadKimi(opts Options) (*Layer, error) {
	L := strconv.Itoa(opts.Layer)
	prefixes := map[string]map[int]bool{}
	for _, n := range c.names {
		if m := kimiRe.FindStringSubmatch(n); m != nil && m[2] == L {
			e, _ := strconv.Atoi(m[3])
			if prefixes[m[1]] == nil {
				prefixes[m[1]] = map[int]bool{}
			}
			prefixes[m[1]][e] = true
		}
	}
	if len(prefixes) != 1 {
		var cands []string
		for p := range prefixes {
			cands = append(cands, p+"<e>.w1.weight_packed")
		}
		sort.Strings(cands)
		return nil, bad("%s: layer %d's experts match %d name patterns, want 1: %s", c.Dir, opts.Layer, len(cands), strings.Join(cands, ", "))
	}
	var prefix string
	var ids map[int]bool
	for p, e := range prefixes {
		prefix, ids = p, e
	}
	numExperts := len(ids)
	for e := range numExperts {
		if !ids[e] {
			return nil, bad("%s: layer %d has %d experts but no expert %d (%s%d.w1.weight_packed)", c.Dir, opts.Layer, numExperts, e, prefix, e)
		}
	}
	// The rank's experts first, then the shapes from the first one's header
	// entry (no data read), so that a rank touches only its own experts.
	ep := opts.EP.Normalize()
	count, err := moe.LocalExperts(numExperts, ep.Size)
	if err != nil {
		return nil, err
	}
	if err := ep.Validate(); err != nil {
		return nil, err
	}
	name0 := prefix + strconv.Itoa(ep.Rank*count) + ".w1.weight_packed"
	r0, shard0, err := c.reader(name0)
	if err != nil {
		return nil, err
	}
	e0 := r0.Find(name0)
	if len(e0.Shape) != 2 {
		return nil, bad("tensor %q in %s has shape %v, want [N, K/2]", name0, shard0, e0.Shape)
	}
	n, k := e0.Shape[0], 2*e0.Shape[1]
	if n%32 != 0 || k%32 != 0 || n == 0 || k == 0 {
		return nil, bad("tensor %q in %s has shape %v: N=%d and K=%d must be positive multiples of 32", name0, shard0, e0.Shape, n, k)
	}
	first, count, n0, nn, err := slices(opts, numExperts, n)
	if err != nil {
		return nil, err
	}
	// The slice and one expert's full tensors read at a time.
	if err := opts.budget(weightBytes(count, nn, k, false)+weightBytes(1, n, k, false), fmt.Sprintf("layer %d's %d experts (N=%d, K=%d)", opts.Layer, count, nn, k)); err != nil {
		return nil, err
	}
	// Every expert's tensors are named before any is allocated: a missing
	// one is an error at once, not after gigabytes for the others.
	for i := range count {
		for _, wk := range []string{"w1", "w2", "w3"} {
			for _, part := range []string{"packed", "scale"} {
				if name := prefix + strconv.Itoa(first+i) + "." + wk + ".weight_" + part; !c.has(name) {
					return nil, bad("%s: missing tensor %q", c.Dir, name)
				}
			}
		}
	}
	w := moe.NewWeights(count, nn, k, true)
	rows := 2 * nn
	for i := range count {
		e := first + i
		name := func(wk, part string) string { return prefix + strconv.Itoa(e) + "." + wk + ".weight_" + part }
		get := func(wk, part string, shape []int) ([]uint8, error) {
			t, err := c.tensor(name(wk, part), 0, -1, shape, safetensors.U8)
			if err != nil {
				return nil, err
			}
			return t.Data, nil
		}
		// [up; gate] = [w3; w1], rows n0 .. n0+nn of each.
		for half, wk := range []string{"w3", "w1"} {
			p, err := get(wk, "packed", []int{n, k / 2})
			if err != nil {
				return nil, err
			}
			sc, err := get(wk, "scale", []int{n, k / 32})
			if err != nil {
				return nil, err
			}
			dst := (i*rows + half*nn) * k / 2
			copy(w.W31[dst:dst+nn*k/2], p[n0*k/2:(n0+nn)*k/2])
			dstS := (i*rows + half*nn) * k / 32
			copy(w.W31Scale[dstS:dstS+nn*k/32], sc[n0*k/32:(n0+nn)*k/32])
		}
		p, err := get("w2", "packed", []int{k, n / 2})
		if err != nil {
			return nil, err
		}
		sc, err := get("w2", "scale", []int{k, n / 32})
		if err != nil {
			return nil, err
		}
		copy(w.W2[i*k*nn/2:(i+1)*k*nn/2], sliceCols(p, k, n/2, n0/2, nn/2))
		copy(w.W2Scale[i*k*nn/32:(i+1)*k*nn/32], sliceCols(sc, k, n/32, n0/32, nn/32))
	}
	kimi := moe.KimiK3()
	spec := moe.LayerSpec{Activation: activation.Situ, Params: []activation.Params{kimi.Params}, Chain: moe.ChainMXFP8,
		Recipe: defaultRecipe, EP: opts.EP.Normalize()}
	return &Layer{Format: FormatKimi, Weights: w, Spec: spec, NumExperts: numExperts}, nil
}

func (c *Checkpoint) loadGPTOSS(opts Options) (*Layer, error) {
	L := strconv.Itoa(opts.Layer)
	var prefix string
	for _, n := range c.names {
		if m := gptossRe.FindStringSubmatch(n); m != nil && m[2] == L {
			if prefix != "" && prefix != m[1] {
				return nil, bad("%s: layer %d's experts match two name patterns: %s and %s", c.Dir, opts.Layer, prefix, m[1])
			}
			prefix = m[1]
		}
	}
	gu := prefix + "gate_up_proj_blocks"
	r, shard, err := c.reader(gu)
	if err != nil {
		return nil, err
	}
	e := r.Find(gu)
	if len(e.Shape) != 4 || e.Shape[3] != 16 || e.Shape[1]%2 != 0 {
		return nil, bad("tensor %q in %s has shape %v, want [E, 2N, K/32, 16]", gu, shard, e.Shape)
	}
	numExperts, n, k := e.Shape[0], e.Shape[1]/2, e.Shape[2]*32
	if numExperts == 0 {
		return nil, bad("tensor %q in %s has shape %v: the stacked tensors hold no experts", gu, shard, e.Shape)
	}
	if n%32 != 0 || n == 0 || k == 0 {
		return nil, bad("tensor %q in %s has shape %v: N=%d and K=%d must be positive multiples of 32", gu, shard, e.Shape, n, k)
	}
	first, count, n0, nn, err := slices(opts, numExperts, n)
	if err != nil {
		return nil, err
	}
	// What the reads hold (the rank's full-N rows) plus the slice built.
	if err := opts.budget(weightBytes(count, n, k, true)+weightBytes(count, nn, k, true), fmt.Sprintf("layer %d's %d experts (N=%d, K=%d)", opts.Layer, count, nn, k)); err != nil {
		return nil, err
	}
	f32 := []safetensors.DType{safetensors.BF16, safetensors.F32}
	guB, err := c.tensor(gu, first, count, []int{count, 2 * n, k / 32, 16}, safetensors.U8)
	if err != nil {
		return nil, err
	}
	guS, err := c.tensor(prefix+"gate_up_proj_scales", first, count, []int{count, 2 * n, k / 32}, safetensors.U8)
	if err != nil {
		return nil, err
	}
	guBias, err := c.tensor(prefix+"gate_up_proj_bias", first, count, []int{count, 2 * n}, f32...)
	if err != nil {
		return nil, err
	}
	dB, err := c.tensor(prefix+"down_proj_blocks", first, count, []int{count, k, n / 32, 16}, safetensors.U8)
	if err != nil {
		return nil, err
	}
	dS, err := c.tensor(prefix+"down_proj_scales", first, count, []int{count, k, n / 32}, safetensors.U8)
	if err != nil {
		return nil, err
	}
	dBias, err := c.tensor(prefix+"down_proj_bias", first, count, []int{count, k}, f32...)
	if err != nil {
		return nil, err
	}
	b1, _ := guBias.AsFloat32()
	b2, _ := dBias.AsFloat32()
	w := moe.NewWeights(count, nn, k, true)
	w.W31Bias = make([]float32, count*2*nn)
	w.W2Bias = b2
	for i := range count {
		// Interleaved [g0, u0, g1, u1, ...]: W31 row j (up) is source row
		// 2(n0+j)+1, row nn+j (gate) is 2(n0+j).
		for j := range nn {
			for half, src := range []int{2*(n0+j) + 1, 2 * (n0 + j)} {
				dst := i*2*nn + half*nn + j
				s := i*2*n + src
				copy(w.W31[dst*k/2:(dst+1)*k/2], guB.Data[s*k/2:(s+1)*k/2])
				copy(w.W31Scale[dst*k/32:(dst+1)*k/32], guS.Data[s*k/32:(s+1)*k/32])
				w.W31Bias[dst] = b1[s]
			}
		}
		copy(w.W2[i*k*nn/2:(i+1)*k*nn/2], sliceCols(dB.Data[i*k*n/2:(i+1)*k*n/2], k, n/2, n0/2, nn/2))
		copy(w.W2Scale[i*k*nn/32:(i+1)*k*nn/32], sliceCols(dS.Data[i*k*n/32:(i+1)*k*n/32], k, n/32, n0/32, nn/32))
	}
	if opts.MoETPSize > 1 && opts.MoETPRank > 0 {
		// The FC2 bias is added once per output: only MoE-TP rank 0 keeps
		// it, so that summing the ranks' partial outputs adds it once.
		w.W2Bias = nil
	}
	p := activation.DefaultParams()
	p.SwigluAlpha, p.SwigluBeta, p.SwigluLimit = 1.702, 1, 7
	spec := moe.LayerSpec{Activation: activation.SwigluBias, Params: []activation.Params{p}, Chain: moe.ChainMXFP8,
		Recipe: defaultRecipe, EP: opts.EP.Normalize()}
	return &Layer{Format: FormatGPTOSS, Weights: w, Spec: spec, NumExperts: numExperts}, nil
}

// defaultRecipe is the spec's recipe until the caller sets one: rceil, as
// FlashInfer quantizes.
const defaultRecipe = mxfp.RecipeRCeil
