package moe

import (
	"fmt"

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
	if o.memo.madeFor(w, spec) {
		d.memo = o.memo
	}
	return d, nil
}

// sameWeights reports whether a and b hold the same slices of one layer.
func sameWeights(a, b *Weights) bool {
	return a.E == b.E && a.N == b.N && a.K == b.K && a.Gated == b.Gated &&
		sameSlice(a.W31, b.W31) && sameSlice(a.W31Scale, b.W31Scale) && sameSlice(a.W2, b.W2) && sameSlice(a.W2Scale, b.W2Scale) &&
		sameSlice(a.W31Bias, b.W31Bias) && sameSlice(a.W2Bias, b.W2Bias)
}

// sameSlice reports whether a and b are the same slice of one array.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// Spec returns the layer spec.
func (o *Oracle) Spec() LayerSpec { return o.spec }

// NumGlobal is the global expert count: local experts times ep_size.
func (o *Oracle) NumGlobal() int { return o.numGlobal }

// Weights returns the weights.
func (o *Oracle) Weights() *Weights { return o.w }

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
