// Package layout holds what the GPU paths' weight forms share: the
// kernels' k step and chunk, the padding to them, and whether BF16 holds
// an input's MXFP8 values. Each path's weights are arranged by a package
// below it (decode, fp4, wgmma), a pure function of moe.Weights that its
// kernels (backend/cuda/kernels) read; the kernel ABI header takes these
// constants from here.
package layout

import (
	"math"
	"slices"

	"kimimoe/internal/parallel"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

const (
	// StageK is the k elements the kernels stage per step; the decode
	// and grouped paths pad K and N to a multiple of it.
	StageK = 128
	// ChunkK is the wgmma paths' k per staged chunk: 128 bytes of BF16 a
	// row.
	ChunkK = 64
)

// PadTo rounds n up to a multiple of StageK.
func PadTo(n int) int { return (n + StageK - 1) / StageK * StageK }

// XOutsideBF16 reports whether in's x has MXFP8 values that BF16 does
// not hold, which the BF16 GEMMs (the wgmma and wgmma-fp4 paths) would
// change; such a forward runs the mma.sync GEMMs, which keep each code
// and its scale apart. At the top, values of 2^128 and up would become
// infinities, making a product with a zero weight NaN where the exact
// product is 0: an E4M3 value (at most 448 < 2^9) times 2^(s-127)
// reaches 2^128 only for block scales s of 247 and up (255 is NaN, which
// no GEMM changes); from float32 x, only an infinity does that (rceil
// saturates it to 448 x 2^127; floor makes its block NaN). At the bottom,
// BF16's smallest step is 2^-133 and E4M3's is 2^-9 of the block scale,
// so blocks of scale 2^-125 and below (s <= 2) may hold values BF16 would
// truncate: pre-quantized blocks are checked code by code
// (MXFP8HeldByBF16); a float32 block gets s <= 2 only if its largest
// magnitude is under 2^-116 (either recipe: s = e - 8 + 127 or e - 7 +
// 127 for its exponent e), and such a nonzero block counts.
func XOutsideBF16(in *moe.Input, r mxfp.Recipe) bool {
	if in.X != nil {
		// Chunks of whole blocks on all CPUs: the check reads all of x at
		// every upload.
		const chunk = 1 << 16
		jobs := (len(in.X) + chunk - 1) / chunk
		out := make([]bool, jobs)
		parallel.For(jobs, func(j int) { out[j] = floatBlocksOutsideBF16(in.X[j*chunk:min(len(in.X), (j+1)*chunk)], r) })
		return slices.Contains(out, true)
	}
	for i, s := range in.XQ.Scales {
		if s >= 247 && s != 0xFF {
			return true
		}
		if s <= 2 {
			for _, c := range in.XQ.Codes[32*i : 32*i+32] {
				if !MXFP8HeldByBF16(c, s) {
					return true
				}
			}
		}
	}
	return false
}

// floatBlocksOutsideBF16 is XOutsideBF16 for the 32-blocks of float32 x:
// an infinity under rceil, or a nonzero largest magnitude under 2^-116.
func floatBlocksOutsideBF16(x []float32, r mxfp.Recipe) bool {
	const tiny = (127 - 116) << 23 // the bits of 2^-116
	for b := 0; b+32 <= len(x); b += 32 {
		var amax uint32 // the largest magnitude's bits, NaN left out
		for _, v := range x[b : b+32] {
			u := math.Float32bits(v) & 0x7FFFFFFF
			if u > 0x7F800000 {
				u = 0
			}
			amax = max(amax, u)
		}
		if amax == 0x7F800000 && r == mxfp.RecipeRCeil || amax != 0 && amax < tiny {
			return true
		}
	}
	return false
}

// MXFP8HeldByBF16 reports whether the E4M3 code c times 2^(s-127) is a
// BF16 value or NaN, for s below 247: whether it is a multiple of BF16's
// smallest step, 2^-133 (E4M3 values are multiples of 2^-9, so from s = 3
// every one is).
func MXFP8HeldByBF16(c, s uint8) bool {
	v := float64(mxfp.DecodeE4M3(c))
	if v != v {
		return true
	}
	w := math.Ldexp(v, int(s)+6) // v x 2^(s-127) / 2^-133
	return w == math.Trunc(w)
}
