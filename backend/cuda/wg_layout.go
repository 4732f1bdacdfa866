package cuda

import (
	"math"
	"slices"

	"kimimoe/internal/parallel"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// The wgmma path's weights (kernels/wgmma.cu), arranged at
// prepare time as BF16: every MXFP4 weight E2M1 x 2^(s-127) is a BF16
// value (E2M1's 2-bit significands fit BF16's 8, and BF16 has float32's
// exponent range, its subnormals reaching 2^-133 below E2M1 x 2^-127's
// smallest, 2^-128), so the conversion is exact; so is the token
// operand's (E4M3's 4-bit significands times a power of two), and a BF16
// product is exact in float32. The tensor cores then sum whole rows in
// float32 with no per-block scale left to apply. The only weights this
// does not hold are those past float32's range (6 x 2^127 with scale 254),
// which overflow to infinity as on the mma.sync path.
//
// FP8 wgmma with the scales folded into E4M3 operands was tried first and
// is not exact: the tensor cores' FP8 block sums lose low bits (docs/PERF.md).
//
// Layout: per expert, tile and k-chunk (abiWGChunkK k, 128 bytes a row),
// wgTileBytes(rows) bytes in the wgmma operand's 128-byte swizzled
// K-major form (PTX's swizzle mode "128B"): row r's 128 bytes at 128 r,
// its 16-byte piece j (elements 8j .. 8j+7) in slot j XOR (r mod 8), so a
// CTA copies a chunk as one contiguous block and the tensor cores read a
// piece of eight consecutive rows from eight different bank groups.
// Element k of a row is bytes 2k, 2k+1 (little endian). The geometry
// constants are in abi.go; the kernels' sw_off is this function.

// wgOffset is the byte of row r, chunk byte b in a (tile, chunk) block.
func wgOffset(r, b int) int { return 128*r + ((b/16)^(r%8))*16 + b%16 }

// wgBF16Table[s][c] is the BF16 bits of E2M1 code c times 2^(s-127) (NaN
// for s = 0xFF).
var wgBF16Table = func() (t [256][16]uint16) {
	for s := range 256 {
		for c := range 16 {
			v := float64(mxfp.DecodeE2M1(uint8(c))) * float64(mxfp.DecodeE8M0(uint8(s)))
			t[s][c] = mxfp.BF16FromFloat32(float32(v))
		}
	}
	return
}()

// wgArrange arranges one matrix set for the wgmma path: e experts of rows
// rows of k elements each (packed [e][rows][k/2], scales [e][rows][k/32];
// k a multiple of abiWGChunkK), as e x tiles x (k / abiWGChunkK) blocks,
// where tile row r (0 .. bn-1) of tile tb is source row rowOf(tb, r) of
// its expert.
func wgArrange(packed, scales []uint8, e, rows, k, bn, tiles int, rowOf func(tb, r int) int) []uint8 {
	chunks, tb := k/abiWGChunkK, wgTileBytes(bn)
	payload := make([]uint8, e*tiles*chunks*tb)
	rowBytes, kbs := k/2, k/32
	parallel.For(e*tiles, func(job int) {
		ex, t := job/tiles, job%tiles
		for r := range bn {
			src := ex*rows + rowOf(t, r)
			row := packed[src*rowBytes : (src+1)*rowBytes]
			for j, two := range row {
				kk := 2 * j
				tab := &wgBF16Table[scales[src*kbs+kk/32]]
				blk := payload[(job*chunks+kk/abiWGChunkK)*tb:]
				o := wgOffset(r, 2*(kk%abiWGChunkK)) // kk even: both elements in one 16-byte piece
				lo, hi := tab[two&0xF], tab[two>>4]
				blk[o], blk[o+1], blk[o+2], blk[o+3] = uint8(lo), uint8(lo>>8), uint8(hi), uint8(hi>>8)
			}
		}
	})
	return payload
}

// wgW31 arranges FC1 for the wgmma GEMM1 with bn-row tiles: tile tb holds
// intermediate features [h tb, h tb + h), h = bn/2: rows 0..h-1 their up
// rows, h..bn-1 their gate rows (w31 is [up; gate]).
func wgW31(w *moe.Weights, bn int) []uint8 {
	h := bn / 2
	return wgArrange(w.W31, w.W31Scale, w.E, 2*w.N, w.K, bn, w.N/h, func(tb, r int) int {
		if r < h {
			return h*tb + r
		}
		return w.N + h*tb + r - h
	})
}

// wgW2 arranges FC2 for the wgmma GEMM2 with bn-row tiles: tile tb is
// output rows [bn tb, bn tb + bn).
func wgW2(w *moe.Weights, bn int) []uint8 {
	return wgArrange(w.W2, w.W2Scale, w.E, w.K, w.N, bn, w.K/bn, func(tb, r int) int { return bn*tb + r })
}

// wgTileRows picks GEMM2's weight rows per tile for w (0: no wgmma path):
// 256 where K is a multiple of 256 (a quarter less operand traffic per
// multiply-add of 128; measured in docs/PERF.md), else 128; K and N must
// be multiples of abiStageK (whole 64-k chunks, 64-feature FC1 tiles).
// GEMM1 runs 128-row tiles at every shape (wgmmaPath.upload).
func wgTileRows(w *moe.Weights) int {
	switch {
	case w.K%abiStageK != 0 || w.N%abiStageK != 0:
		return 0
	case w.K%256 == 0:
		return 256
	}
	return 128
}

// xOutsideBF16 reports whether in's x has MXFP8 values that BF16 does
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
// (mxfp8HeldByBF16); a float32 block gets s <= 2 only if its largest
// magnitude is under 2^-116 (either recipe: s = e - 8 + 127 or e - 7 +
// 127 for its exponent e), and such a nonzero block counts.
func xOutsideBF16(in *moe.Input, r mxfp.Recipe) bool {
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
				if !mxfp8HeldByBF16(c, s) {
					return true
				}
			}
		}
	}
	return false
}

// floatBlocksOutsideBF16 is xOutsideBF16 for the 32-blocks of float32 x:
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

// mxfp8HeldByBF16 reports whether the E4M3 code c times 2^(s-127) is a
// BF16 value or NaN, for s below 247: whether it is a multiple of BF16's
// smallest step, 2^-133 (E4M3 values are multiples of 2^-9, so from s = 3
// every one is).
func mxfp8HeldByBF16(c, s uint8) bool {
	v := float64(mxfp.DecodeE4M3(c))
	if v != v {
		return true
	}
	w := math.Ldexp(v, int(s)+6) // v x 2^(s-127) / 2^-133
	return w == math.Trunc(w)
}
