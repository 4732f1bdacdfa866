package moe

import (
	"fmt"
	"math"
	"reflect"
	"sync"
	"unsafe"

	"kimimoe/activation"
	"kimimoe/internal/parallel"
	"kimimoe/mxfp"
)

// Oracle is the exact reference forward of one MoE layer on one EP rank.
// Each expert's weights are decoded once, when a forward first routes a
// token to it (E2M1 codes to int8 at twice their value); Forward may be
// called any number of times, from several goroutines.
//
// Exactness. Within one 32-block an E4M3 x E2M1 product is an integer times
// one power of two: with E4M3 values scaled by 2^9 and E2M1 values by 2, the
// block's dot product is an exact int32 (|sum| <= 32 * 448*2^9 * 12 < 2^27).
// Multiplying it by the two E8M0 scales is exact in float64, and the K/32
// block terms are summed in float64, in block order. So a GEMM result
// differs from the real dot product only by the float64 rounding of those
// sums (relative error below K/32 * 2^-53 of the sum of |terms|). On the
// exact chain GEMM2 multiplies float64 activations by exact weights, again
// in float64. The slots of a token are summed in slot order in float64.
//
// Biases. An FC1 bias is added to each GEMM1 result before the activation:
// in float64 on the exact and mxfp8 chains (h = GEMM1 + b1, one rounding);
// on the flashinfer chain as FlashInfer's (TensorRT-LLM's) activation
// kernel does, in float32 after the GEMM1 result is rounded to bf16:
// float32(bf16(GEMM1)) + float32(b1). An FC2 bias is added to each expert
// output before the routing weight multiplies it: y = GEMM2 + b2 in
// float64 on the exact and mxfp8 chains; on the flashinfer chain in the
// finalize, in float32, as below.
//
// The top-k sum. On the exact and mxfp8 chains out[t] = sum over slots in
// slot order of w_k * y_k in float64. On the flashinfer chain it rounds
// where FlashInfer's (TensorRT-LLM's) finalizeMoeRoutingKernel rounds:
// GEMM2's row for (t, k) is stored as bf16 from its float32 accumulator,
// r_k = bf16(float32(y_k)), and out[t] is the float32 sum in slot order,
// from 0, of float32(w_k) * (float32(r_k) + b2), each operation rounded to
// float32 (no fused multiply-add). float32(y_k) rounds the exact GEMM2
// value once; a float32 accumulator in another order may round
// differently, which moves r_k by at most one bf16 step, and rarely.
// Results do not depend on the number of goroutines.
type Oracle struct {
	spec      LayerSpec
	w         *Weights
	numGlobal int
	dec31     *decodeTable // FC1's; shared with the oracles Derive makes
	dec2      *decodeTable // FC2's; likewise
	memo      *Memo        // nil unless WithMemo
}

// Memo keeps expert outputs, one token through one local expert before
// its routing weight, computed by oracles of one layer's weights and spec:
// their later forwards on the same x reuse them whatever the routing. It
// holds K float64s a token and local expert it has seen, and nothing of
// the decoded weights.
type Memo struct {
	w    *Weights
	spec LayerSpec
	mu   sync.Mutex
	y    map[memoKey][]float64
}

// memoKey names a token's x by the slice it lies in: the memo takes x as
// unchanged between forwards.
type memoKey struct {
	x     *float32
	codes *uint8
	t, e  int
}

func keyOf(in *Input, t, e int) memoKey {
	k := memoKey{t: t, e: e}
	if in.XQ != nil {
		k.codes = &in.XQ.Codes[0]
	} else {
		k.x = &in.X[0]
	}
	return k
}

// WithMemo returns an oracle for o's weights and spec (sharing o's
// decoded experts) that reads and fills m: it reuses an expert output m
// holds in any later forward on the same x (the same slice, unchanged),
// whatever its routing (ids, weights, rows). A nil m, or one made for
// other weights (any other slice) or another spec, is replaced by a new
// Memo. Oracles Derive makes from it share the memo when their weights
// and spec are o's, and keep none otherwise. The outputs are the same
// bits as without a memo.
func (o *Oracle) WithMemo(m *Memo) *Oracle {
	d := *o
	if m == nil || !sameWeights(m.w, o.w) || !reflect.DeepEqual(m.spec, o.spec) {
		m = &Memo{w: o.w, spec: o.spec, y: map[memoKey][]float64{}}
	}
	d.memo = m
	return &d
}

// Memo returns the memo WithMemo gave o, or nil.
func (o *Oracle) Memo() *Memo { return o.memo }

// decodeTable holds one weight matrix's E2M1 codes (FC1's or FC2's)
// decoded to int8 at twice their value, per expert, each decoded on first
// use.
type decodeTable struct {
	packed []uint8 // all experts' codes, per bytes an expert
	per    int
	once   []sync.Once
	dec    [][]int8 // per expert; nil until decoded
}

func newDecodeTable(packed []uint8, experts int) *decodeTable {
	return &decodeTable{packed: packed, per: len(packed) / experts, once: make([]sync.Once, experts), dec: make([][]int8, experts)}
}

// expert returns expert e's decoded codes, decoding them once.
func (d *decodeTable) expert(e int) []int8 {
	d.once[e].Do(func() {
		d.dec[e] = make([]int8, 2*d.per)
		decodeFP4(d.dec[e], d.packed[e*d.per:(e+1)*d.per])
	})
	return d.dec[e]
}

// derive returns d when packed holds d's codes (the same slice), else a
// new table.
func (d *decodeTable) derive(packed []uint8, experts int) *decodeTable {
	if len(d.dec) == experts && sameSlice(packed, d.packed) {
		return d
	}
	return newDecodeTable(packed, experts)
}

// NewOracle validates spec against w and prepares the decode tables. It
// keeps w (not copied); w must not change afterwards. Memory: one byte per
// weight element of each expert a forward has used (Kimi-K3, all 28 local
// experts: 925 MB).
func NewOracle(w *Weights, spec LayerSpec) (*Oracle, error) {
	if err := spec.Validate(w); err != nil {
		return nil, err
	}
	numGlobal, err := spec.EP.NumGlobal(w.E)
	if err != nil {
		return nil, err
	}
	return &Oracle{spec: spec, w: w, numGlobal: numGlobal, dec31: newDecodeTable(w.W31, w.E), dec2: newDecodeTable(w.W2, w.E)}, nil
}

// Derive returns an oracle for w and spec. Where w holds o's FC1 or FC2
// codes (the same slice, and the same shape) it shares o's decode table of
// that matrix instead of decoding again, so trying many specs, scales or
// one matrix's variants on one layer decodes each expert's other matrix
// once.
func (o *Oracle) Derive(w *Weights, spec LayerSpec) (*Oracle, error) {
	if w == nil || w.E != o.w.E || w.N != o.w.N || w.K != o.w.K || w.Gated != o.w.Gated {
		return NewOracle(w, spec)
	}
	if err := spec.Validate(w); err != nil {
		return nil, err
	}
	numGlobal, err := spec.EP.NumGlobal(w.E)
	if err != nil {
		return nil, err
	}
	d := &Oracle{spec: spec, w: w, numGlobal: numGlobal, dec31: o.dec31.derive(w.W31, w.E), dec2: o.dec2.derive(w.W2, w.E)}
	if o.memo != nil && sameWeights(w, o.w) && reflect.DeepEqual(spec, o.spec) {
		d.memo = o.memo
	}
	return d, nil
}

// sameWeights reports whether a and b hold the same slices of one layer.
func sameWeights(a, b *Weights) bool {
	same32 := func(a, b []float32) bool { return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) }
	return a.E == b.E && a.N == b.N && a.K == b.K && a.Gated == b.Gated &&
		sameSlice(a.W31, b.W31) && sameSlice(a.W31Scale, b.W31Scale) && sameSlice(a.W2, b.W2) && sameSlice(a.W2Scale, b.W2Scale) &&
		same32(a.W31Bias, b.W31Bias) && same32(a.W2Bias, b.W2Bias)
}

// sameSlice reports whether a and b are the same slice of one array.
func sameSlice(a, b []uint8) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// Spec returns the layer spec.
func (o *Oracle) Spec() LayerSpec { return o.spec }

// NumGlobal is the global expert count: local experts times ep_size.
func (o *Oracle) NumGlobal() int { return o.numGlobal }

// Weights returns the weights.
func (o *Oracle) Weights() *Weights { return o.w }

// e2m1Pair[b] is packed byte b's two E2M1 codes at twice their value,
// low nibble first, as the two int8s that one uint16 store writes in this
// machine's byte order.
var e2m1Pair = func() (t [256]uint16) {
	for b := range 256 {
		p := [2]int8{int8(2 * mxfp.DecodeE2M1(uint8(b&0xF))), int8(2 * mxfp.DecodeE2M1(uint8(b>>4)))}
		t[b] = *(*uint16)(unsafe.Pointer(&p))
	}
	return
}()

// decodeFP4 writes the 2*len(packed) codes of packed to dst at twice their
// value, element 2j from byte j's low nibble. One table load and one
// two-byte store a byte run about 2.5x faster than a nibble at a time.
func decodeFP4(dst []int8, packed []uint8) {
	if len(packed) == 0 {
		return
	}
	d := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[:2*len(packed)][0])), len(packed))
	for j, b := range packed {
		d[j] = e2m1Pair[b]
	}
}

// e4m3Times512[c] is 512 * the value of E4M3 code c (0 for NaN codes, which
// are flagged separately).
var e4m3Times512 = func() (t [256]int32) {
	for c := range 256 {
		if v := mxfp.DecodeE4M3(uint8(c)); v == v {
			t[c] = int32(v * 512)
		}
	}
	return
}()

// pow2 scale multipliers: scaleX[s] = 2^(s-127) / 512 for activations,
// scaleW[s] = 2^(s-127) / 2 for weights; NaN for the NaN byte 0xFF.
var scaleX, scaleW = func() (x, w [256]float64) {
	for s := range 256 {
		if s == 0xFF {
			x[s], w[s] = math.NaN(), math.NaN()
			continue
		}
		x[s], w[s] = math.Ldexp(1, s-127-9), math.Ldexp(1, s-127-1)
	}
	return
}()

// qrow is an MXFP8 row decoded for the integer dot product.
type qrow struct {
	v     []int32   // [n] E4M3 value * 512
	scale []float64 // [n/32] block multiplier 2^(X-9), NaN for a NaN block
}

func newQRow(n int) qrow { return qrow{v: make([]int32, n), scale: make([]float64, n/32)} }

func (q qrow) set(codes, scales []uint8) {
	for i, c := range codes {
		q.v[i] = e4m3Times512[c]
	}
	for b, s := range scales {
		m := scaleX[s]
		for _, c := range codes[b*32 : b*32+32] {
			if c&0x7F == 0x7F {
				m = math.NaN() // a NaN element makes its block's products NaN
			}
		}
		q.scale[b] = m
	}
}

// dot32 is the exact int32 dot product of one 32-block. It is written out
// in full: the Go compiler does not unroll loops, and the unrolled sum
// runs about 1.5x faster; integer sums are exact in any order.
func dot32(w *[32]int8, x *[32]int32) int32 {
	return int32(w[0])*x[0] + int32(w[1])*x[1] + int32(w[2])*x[2] + int32(w[3])*x[3] +
		int32(w[4])*x[4] + int32(w[5])*x[5] + int32(w[6])*x[6] + int32(w[7])*x[7] +
		int32(w[8])*x[8] + int32(w[9])*x[9] + int32(w[10])*x[10] + int32(w[11])*x[11] +
		int32(w[12])*x[12] + int32(w[13])*x[13] + int32(w[14])*x[14] + int32(w[15])*x[15] +
		int32(w[16])*x[16] + int32(w[17])*x[17] + int32(w[18])*x[18] + int32(w[19])*x[19] +
		int32(w[20])*x[20] + int32(w[21])*x[21] + int32(w[22])*x[22] + int32(w[23])*x[23] +
		int32(w[24])*x[24] + int32(w[25])*x[25] + int32(w[26])*x[26] + int32(w[27])*x[27] +
		int32(w[28])*x[28] + int32(w[29])*x[29] + int32(w[30])*x[30] + int32(w[31])*x[31]
}

// dotRow is one GEMM output: sum over blocks of dot32 * both scales.
func dotRow(w []int8, wScales []uint8, x qrow) float64 {
	acc := 0.0
	for b, s := range wScales {
		d := dot32((*[32]int8)(w[b*32:]), (*[32]int32)(x.v[b*32:]))
		acc += float64(float64(d) * scaleW[s] * x.scale[b]) // float64(): no fused multiply-add (arm64)
	}
	return acc
}

// packPairs lays rows out two at a time: element i of pair q is
// rows[2q].v[i] + rows[2q+1].v[i] * 2^32, so that one 64-bit multiply-add
// serves both (dotRows). An odd last row is left to dotRow.
func packPairs(rows []qrow) [][]int64 {
	packed := make([][]int64, len(rows)/2)
	for q := range packed {
		x0, x1 := rows[2*q].v, rows[2*q+1].v
		packed[q] = make([]int64, len(x0))
		for i := range x0 {
			packed[q][i] = int64(x0[i]) + int64(x1[i])<<32
		}
	}
	return packed
}

// dotRows writes dst[p] = dotRow(w, wScales, rows[p]) for every p, two rows
// at a time through packed (packPairs(rows)): the same sums in the same
// order.
func dotRows(dst []float64, w []int8, wScales []uint8, rows []qrow, packed [][]int64) {
	for q, x := range packed {
		dst[2*q], dst[2*q+1] = dotRow2(w, wScales, x, rows[2*q].scale, rows[2*q+1].scale)
	}
	if last := len(rows) - 1; len(rows)%2 == 1 {
		dst[last] = dotRow(w, wScales, rows[last])
	}
}

// dot32x2 is dot32 of one weight block with two packed x rows. The two
// int32 sums ride in one int64, S = L + H * 2^32, exactly: |L| and |H| stay
// below 2^27 (dot32's bound), so L is S's low 32 bits read as signed and
// H is (S - L) / 2^32.
func dot32x2(w *[32]int8, x *[32]int64) (int32, int32) {
	s := int64(w[0])*x[0] + int64(w[1])*x[1] + int64(w[2])*x[2] + int64(w[3])*x[3] +
		int64(w[4])*x[4] + int64(w[5])*x[5] + int64(w[6])*x[6] + int64(w[7])*x[7] +
		int64(w[8])*x[8] + int64(w[9])*x[9] + int64(w[10])*x[10] + int64(w[11])*x[11] +
		int64(w[12])*x[12] + int64(w[13])*x[13] + int64(w[14])*x[14] + int64(w[15])*x[15] +
		int64(w[16])*x[16] + int64(w[17])*x[17] + int64(w[18])*x[18] + int64(w[19])*x[19] +
		int64(w[20])*x[20] + int64(w[21])*x[21] + int64(w[22])*x[22] + int64(w[23])*x[23] +
		int64(w[24])*x[24] + int64(w[25])*x[25] + int64(w[26])*x[26] + int64(w[27])*x[27] +
		int64(w[28])*x[28] + int64(w[29])*x[29] + int64(w[30])*x[30] + int64(w[31])*x[31]
	lo := int32(s)
	return lo, int32((s - int64(lo)) >> 32)
}

// dotRow2 is dotRow for the two x rows packed in x (packPairs), whose block
// multipliers are sc0 and sc1: the same sums in the same order.
func dotRow2(w []int8, wScales []uint8, x []int64, sc0, sc1 []float64) (float64, float64) {
	acc0, acc1 := 0.0, 0.0
	for b, s := range wScales {
		d0, d1 := dot32x2((*[32]int8)(w[b*32:]), (*[32]int64)(x[b*32:]))
		acc0 += float64(float64(d0) * scaleW[s] * sc0[b]) // float64(): no fused multiply-add (arm64)
		acc1 += float64(float64(d1) * scaleW[s] * sc1[b])
	}
	return acc0, acc1
}

// dotRowFloat is dotRow for a float64 activation row (exact chain GEMM2).
func dotRowFloat(w []int8, wScales []uint8, a []float64) float64 {
	acc := 0.0
	for b, s := range wScales {
		blk := 0.0
		for i, v := range w[b*32 : b*32+32] {
			blk += float64(float64(v) * a[b*32+i])
		}
		acc += float64(blk * scaleW[s])
	}
	return acc
}

// pair is one (token, slot) routed to a local expert.
type pair struct{ tok, slot int }

// Forward computes out [len(rows), K] (rows nil: all M tokens, out [M, K])
// for the given tokens only: tokens are independent, so a sample of rows of
// a large M can be checked. It returns an error wrapping ErrInput for bad
// input; nothing is written to out then.
func (o *Oracle) Forward(out []float64, in *Input, rows []int) error {
	w := o.w
	if err := in.Validate(w.K, o.numGlobal); err != nil {
		return err
	}
	if rows == nil {
		rows = make([]int, in.M)
		for i := range rows {
			rows[i] = i
		}
	}
	for _, r := range rows {
		if r < 0 || r >= in.M {
			return fmt.Errorf("%w: row %d outside [0, %d)", ErrInput, r, in.M)
		}
	}
	if len(out) != len(rows)*w.K {
		return fmt.Errorf("%w: out has %d values, want [%d, %d]", ErrInput, len(out), len(rows), w.K)
	}

	// The bf16 chain takes x as BF16 (an MXFP8 x decoded first); the others
	// quantize (or decode) it to MXFP8.
	var xs []qrow
	var xb [][]float64
	if o.spec.Chain.BF16X() {
		xb = make([][]float64, len(rows))
		parallel.For(len(rows), func(i int) { xb[i] = bf16Row(in, rows[i], w.K) })
	} else {
		xs = make([]qrow, len(rows))
	}
	parallel.For(len(xs), func(i int) {
		xs[i] = newQRow(w.K)
		t := rows[i]
		if in.XQ != nil {
			c, s := in.XQ.Row(t)
			xs[i].set(c, s)
			return
		}
		codes := make([]uint8, w.K)
		scales := make([]uint8, w.K/32)
		mxfp.QuantizeMXFP8(codes, scales, in.X[t*w.K:(t+1)*w.K], o.spec.Recipe)
		xs[i].set(codes, scales)
	})

	// y[i][k] is expert output of row i, slot k (nil if the slot is not
	// local). Group the (row, slot) pairs the memo lacks by local expert.
	y := make([][][]float64, len(rows))
	for i := range y {
		y[i] = make([][]float64, in.TopK)
	}
	byExpert := make([][]pair, w.E)
	if o.memo != nil {
		o.memo.mu.Lock()
	}
	for i, t := range rows {
		for k := range in.TopK {
			if e, ok := o.spec.EP.Local(int64(in.TopKIDs[t*in.TopK+k]), w.E); ok {
				if o.memo != nil {
					if y[i][k] = o.memo.y[keyOf(in, t, e)]; y[i][k] != nil {
						continue
					}
				}
				byExpert[e] = append(byExpert[e], pair{i, k})
			}
		}
	}
	if o.memo != nil {
		o.memo.mu.Unlock()
	}
	type task struct {
		e     int
		pairs []pair
	}
	var tasks []task
	const chunk = 16 // pairs sharing one pass over the weight rows
	for e, ps := range byExpert {
		for lo := 0; lo < len(ps); lo += chunk {
			tasks = append(tasks, task{e, ps[lo:min(lo+chunk, len(ps))]})
			for _, p := range ps[lo:min(lo+chunk, len(ps))] {
				y[p.tok][p.slot] = make([]float64, w.K)
			}
		}
	}
	parallel.For(len(tasks), func(i int) {
		tk := tasks[i]
		if xb != nil {
			o.expertForwardBF16(tk.e, tk.pairs, xb, y)
			return
		}
		o.expertForward(tk.e, tk.pairs, xs, y)
	})
	if o.memo != nil {
		o.memo.mu.Lock()
		for e, ps := range byExpert {
			for _, p := range ps {
				o.memo.y[keyOf(in, rows[p.tok], e)] = y[p.tok][p.slot]
			}
		}
		o.memo.mu.Unlock()
	}

	// Sum slots in slot order.
	switch o.spec.Chain {
	case ChainFlashInfer:
		o.finalizeFlashInfer(out, in, rows, y)
		return nil
	case ChainBF16, ChainMarlin:
		o.finalizeBF16(out, in, rows, y)
		return nil
	}
	for i, t := range rows {
		dst := out[i*w.K : (i+1)*w.K]
		clear(dst)
		for k := range in.TopK {
			if y[i][k] == nil {
				continue
			}
			wt := float64(in.TopKWeights[t*in.TopK+k])
			for j, v := range y[i][k] {
				dst[j] += float64(wt * v)
			}
		}
	}
	return nil
}

// finalizeFlashInfer is FlashInfer's (TensorRT-LLM's) unfused finalize:
// GEMM2 writes each (token, slot) row as bf16 from its float32
// accumulator, and the finalize sums, in float32 and in slot order from 0,
// float32(w) * (float32(row) + b2). y holds the exact GEMM2 results
// without the bias. Every float32() conversion rounds, so nothing fuses.
func (o *Oracle) finalizeFlashInfer(out []float64, in *Input, rows []int, y [][][]float64) {
	w := o.w
	acc := make([]float32, w.K)
	for i, t := range rows {
		clear(acc)
		for k := range in.TopK {
			if y[i][k] == nil {
				continue
			}
			var b2 []float32
			if w.W2Bias != nil {
				e, _ := o.spec.EP.Local(int64(in.TopKIDs[t*in.TopK+k]), w.E)
				b2 = w.W2Bias[e*w.K : (e+1)*w.K]
			}
			wt := in.TopKWeights[t*in.TopK+k]
			for j, v := range y[i][k] {
				r := mxfp.RoundBF16(float32(v))
				if b2 != nil {
					r = float32(r + b2[j])
				}
				acc[j] = float32(acc[j] + float32(wt*r))
			}
		}
		for j, v := range acc {
			out[i*w.K+j] = float64(v)
		}
	}
}

// expertWeights are one expert's decoded weights, scales and biases (nil
// where the layer has none).
type expertWeights struct {
	w31, w2 []int8
	s31, s2 []uint8
	b1, b2  []float32
}

// expert slices expert e's weights out of the layer's.
func (o *Oracle) expert(e int) expertWeights {
	w := o.w
	r, n, k := w.Rows(), w.N, w.K
	w31, w2 := o.dec31.expert(e), o.dec2.expert(e)
	x := expertWeights{w31: w31, s31: w.W31Scale[e*r*k/32 : (e+1)*r*k/32], w2: w2, s2: w.W2Scale[e*k*n/32 : (e+1)*k*n/32]}
	if w.W31Bias != nil {
		x.b1 = w.W31Bias[e*r : (e+1)*r]
	}
	if w.W2Bias != nil {
		x.b2 = w.W2Bias[e*k : (e+1)*k]
	}
	return x
}

// expertForward runs GEMM1, the activation and GEMM2 of expert e for pairs,
// writing y[tok][slot].
func (o *Oracle) expertForward(e int, pairs []pair, xs []qrow, y [][][]float64) {
	w := o.w
	r, n, k := w.Rows(), w.N, w.K
	h := make([][]float64, len(pairs))
	for p := range pairs {
		h[p] = make([]float64, r)
	}
	ex := o.expert(e)
	b1, b2, w31, s31, w2, s2 := ex.b1, ex.b2, ex.w31, ex.s31, ex.w2, ex.s2
	// Tokens two at a time share each weight row's multiplies (dotRows).
	xr := make([]qrow, len(pairs))
	for p, pr := range pairs {
		xr[p] = xs[pr.tok]
	}
	packed := packPairs(xr)
	col := make([]float64, len(pairs))
	for row := range r {
		dotRows(col, w31[row*k:(row+1)*k], s31[row*k/32:(row+1)*k/32], xr, packed)
		for p, v := range col {
			if b1 != nil && o.spec.Chain != ChainFlashInfer {
				v += float64(b1[row])
			}
			h[p][row] = v
		}
	}

	params := o.spec.ParamsFor(e)
	kind := o.spec.Activation
	quantized := o.spec.Chain != ChainExact
	// The activation of every pair first (requantized on the quantized
	// chains), so that GEMM2 can take them two at a time.
	as := make([][]float64, len(pairs))
	aqs := make([]qrow, len(pairs))
	codes := make([]uint8, n)
	scales := make([]uint8, n/32)
	a := make([]float64, n)
	a32 := make([]float32, n)
	for p := range pairs {
		switch o.spec.Chain {
		case ChainExact:
			as[p] = make([]float64, n)
			activation.Apply(as[p], kind, params, h[p])
			continue
		case ChainMXFP8:
			activation.Apply(a, kind, params, h[p])
			mxfp.QuantizeMXFP8Float64(codes, scales, a, o.spec.Recipe)
		case ChainFlashInfer:
			flashInferActivation(a32, kind, params, h[p], b1)
			mxfp.QuantizeMXFP8(codes, scales, a32, mxfp.RecipeRCeil)
		}
		aqs[p] = newQRow(n)
		aqs[p].set(codes, scales)
	}
	var packed2 [][]int64
	if quantized {
		packed2 = packPairs(aqs)
	}
	for row := range k {
		wr, sr := w2[row*n:(row+1)*n], s2[row*n/32:(row+1)*n/32]
		if quantized {
			dotRows(col, wr, sr, aqs, packed2)
		} else {
			for p := range pairs {
				col[p] = dotRowFloat(wr, sr, as[p])
			}
		}
		for p, pr := range pairs {
			v := col[p]
			if b2 != nil && o.spec.Chain != ChainFlashInfer { // flashinfer: in the finalize
				v += float64(b2[row])
			}
			y[pr.tok][pr.slot][row] = v
		}
	}
}

// flashInferActivation is the flashinfer chain's middle: the GEMM1 result
// rounded once to bf16 (plus the FC1 bias in float32, if any), the
// activation in float32, its result rounded to bf16.
func flashInferActivation(dst []float32, kind activation.Kind, p *activation.Params, h []float64, bias []float32) {
	n := len(dst)
	bf := func(i int) float32 {
		v := mxfp.Float32FromBF16(mxfp.BF16FromFloat64(h[i]))
		if bias != nil {
			v += bias[i] // float32 add, as FlashInfer's activation kernel
		}
		return v
	}
	for i := range dst {
		var v float32
		if kind.IsGated() {
			v = activation.Eval32(kind, p, bf(n+i), bf(i))
		} else {
			v = activation.Eval32(kind, p, bf(i), 0)
		}
		dst[i] = mxfp.RoundBF16(v)
	}
}

// bf16Row is x's row t as the bf16 chain takes it: float32 x rounded to
// BF16 (to nearest, ties to even; a BF16 or F16 x in a case file is
// already one), an MXFP8 x decoded exactly and then rounded the same way.
func bf16Row(in *Input, t, k int) []float64 {
	row := make([]float64, k)
	if in.XQ != nil {
		c, sc := in.XQ.Row(t)
		for i, code := range c {
			v := float64(mxfp.DecodeE4M3(code)) * float64(mxfp.DecodeE8M0(sc[i/32]))
			row[i] = float64(mxfp.RoundBF16(float32(v)))
		}
		return row
	}
	for i, v := range in.X[t*k : (t+1)*k] {
		row[i] = float64(mxfp.RoundBF16(v))
	}
	return row
}

// expertForwardBF16 is the bf16 chain (W4A16) of expert e for pairs: each
// GEMM's exact products summed in float64 and rounded once to float32
// (the tensor cores' accumulator), the FC1 bias added in float32, the
// activation in float32 rounded to BF16 (the intermediate these kernels
// store), GEMM2 likewise plus the FC2 bias in float32; y[tok][slot] holds
// that float32 row. On the marlin chain each GEMM output is rounded to
// BF16 and its bias added in BF16 (gemmOut), so the activation reads BF16.
func (o *Oracle) expertForwardBF16(e int, pairs []pair, xb [][]float64, y [][][]float64) {
	w := o.w
	r, n, k := w.Rows(), w.N, w.K
	ex := o.expert(e)
	b1, b2, w31, s31, w2, s2 := ex.b1, ex.b2, ex.w31, ex.s31, ex.w2, ex.s2
	params := o.spec.ParamsFor(e)
	kind := o.spec.Activation
	marlin := o.spec.Chain == ChainMarlin
	h := make([]float32, r)
	a := make([]float64, n)
	for _, pr := range pairs {
		x := xb[pr.tok]
		for row := range r {
			h[row] = gemmOut(dotRowFloat(w31[row*k:(row+1)*k], s31[row*k/32:(row+1)*k/32], x), b1, row, marlin)
		}
		for i := range n {
			var v float32
			if kind.IsGated() {
				v = activation.Eval32(kind, params, h[n+i], h[i])
			} else {
				v = activation.Eval32(kind, params, h[i], 0)
			}
			a[i] = float64(mxfp.RoundBF16(v))
		}
		out := y[pr.tok][pr.slot]
		for row := range k {
			out[row] = float64(gemmOut(dotRowFloat(w2[row*n:(row+1)*n], s2[row*n/32:(row+1)*n/32], a), b2, row, marlin))
		}
	}
}

// gemmOut is one W4A16 GEMM output element from its exact sum: on the bf16
// chain the float32 accumulator plus the bias in float32; on the marlin
// chain the accumulator stored as BF16, then the BF16 bias added in BF16
// (Marlin's epilogue: a bf16 conversion, then __hadd2).
func gemmOut(sum float64, bias []float32, row int, marlin bool) float32 {
	if !marlin {
		v := float32(sum)
		if bias != nil {
			v = float32(v + bias[row])
		}
		return v
	}
	v := mxfp.RoundBF16(float32(sum))
	if bias != nil {
		v = mxfp.RoundBF16(v + mxfp.RoundBF16(bias[row]))
	}
	return v
}

// finalizeBF16 is the W4A16 chains' top-k sum: each slot's row stored as
// BF16 after the product with its routing weight (one BF16 row per
// (token, slot), as triton_kernels' and Marlin's kernels write before the
// reduction), summed in float32 in slot order from 0. The bf16 chain
// multiplies in float32; the marlin chain multiplies the BF16 row by the
// weight rounded to BF16 (Marlin's __hmul2 in its epilogue).
func (o *Oracle) finalizeBF16(out []float64, in *Input, rows []int, y [][][]float64) {
	k := o.w.K
	acc := make([]float32, k)
	marlin := o.spec.Chain == ChainMarlin
	for i, t := range rows {
		clear(acc)
		for s := range in.TopK {
			if y[i][s] == nil {
				continue
			}
			wt := in.TopKWeights[t*in.TopK+s]
			if marlin {
				wt = mxfp.RoundBF16(wt)
			}
			for j, v := range y[i][s] {
				acc[j] = float32(acc[j] + mxfp.RoundBF16(float32(wt*float32(v))))
			}
		}
		for j, v := range acc {
			out[i*k+j] = float64(v)
		}
	}
}
