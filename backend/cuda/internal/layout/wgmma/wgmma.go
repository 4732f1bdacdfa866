// Package wgmma arranges the weights for the wgmma path's kernels
// (backend/cuda/kernels/wgmma.cu) at prepare time, as BF16: every MXFP4 weight E2M1 x 2^(s-127) is a BF16
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
// Layout: per expert, tile and k-chunk (layout.ChunkK k, 128 bytes a row),
// TileBytes(rows) bytes in the wgmma operand's 128-byte swizzled
// K-major form (PTX's swizzle mode "128B"): row r's 128 bytes at 128 r,
// its 16-byte piece j (elements 8j .. 8j+7) in slot j XOR (r mod 8), so a
// CTA copies a chunk as one contiguous block and the tensor cores read a
// piece of eight consecutive rows from eight different bank groups.
// Element k of a row is bytes 2k, 2k+1 (little endian). The kernels'
// sw_off is Offset.
package wgmma

import (
	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/internal/parallel"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// Offset is the byte of row r, chunk byte b in a (tile, chunk) block.
func Offset(r, b int) int { return 128*r + ((b/16)^(r%8))*16 + b%16 }

// BF16Table[s][c] is the BF16 bits of E2M1 code c times 2^(s-127) (NaN
// for s = 0xFF).
var BF16Table = func() (t [256][16]uint16) {
	for s := range 256 {
		for c := range 16 {
			v := float64(mxfp.DecodeE2M1(uint8(c))) * float64(mxfp.DecodeE8M0(uint8(s)))
			t[s][c] = mxfp.BF16FromFloat32(float32(v))
		}
	}
	return
}()

// arrange arranges one matrix set for the wgmma path: e experts of rows
// rows of k elements each (packed [e][rows][k/2], scales [e][rows][k/32];
// k a multiple of layout.ChunkK), as e x tiles x (k / layout.ChunkK) blocks,
// where tile row r (0 .. bn-1) of tile tb is source row rowOf(tb, r) of
// its expert.
func arrange(packed, scales []uint8, e, rows, k, bn, tiles int, rowOf func(tb, r int) int) []uint8 {
	chunks, tb := k/layout.ChunkK, TileBytes(bn)
	payload := make([]uint8, e*tiles*chunks*tb)
	rowBytes, kbs := k/2, k/32
	parallel.For(e*tiles, func(job int) {
		ex, t := job/tiles, job%tiles
		for r := range bn {
			src := ex*rows + rowOf(t, r)
			row := packed[src*rowBytes : (src+1)*rowBytes]
			for j, two := range row {
				kk := 2 * j
				tab := &BF16Table[scales[src*kbs+kk/32]]
				blk := payload[(job*chunks+kk/layout.ChunkK)*tb:]
				o := Offset(r, 2*(kk%layout.ChunkK)) // kk even: both elements in one 16-byte piece
				lo, hi := tab[two&0xF], tab[two>>4]
				blk[o], blk[o+1], blk[o+2], blk[o+3] = uint8(lo), uint8(lo>>8), uint8(hi), uint8(hi>>8)
			}
		}
	})
	return payload
}

// W31 arranges FC1 for the wgmma GEMM1 with bn-row tiles: tile tb holds
// intermediate features [h tb, h tb + h), h = bn/2: rows 0..h-1 their up
// rows, h..bn-1 their gate rows (w31 is [up; gate]).
func W31(w *moe.Weights, bn int) []uint8 {
	h := bn / 2
	return arrange(w.W31, w.W31Scale, w.E, 2*w.N, w.K, bn, w.N/h, func(tb, r int) int {
		if r < h {
			return h*tb + r
		}
		return w.N + h*tb + r - h
	})
}

// W2 arranges FC2 for the wgmma GEMM2 with bn-row tiles: tile tb is
// output rows [bn tb, bn tb + bn).
func W2(w *moe.Weights, bn int) []uint8 {
	return arrange(w.W2, w.W2Scale, w.E, w.K, w.N, bn, w.K/bn, func(tb, r int) int { return bn*tb + r })
}

// Rows are the weight rows a tile may have (the wgmma's N): TileRows'
// choices.
var Rows = []int{128, 256}

// TileBytes is the bytes of one (tile, chunk) block of rows weight rows.
func TileBytes(rows int) int { return rows * 2 * layout.ChunkK }

// TileRows picks GEMM2's weight rows per tile for w (0: no wgmma path):
// 256 where K is a multiple of 256 (a quarter less operand traffic per
// multiply-add of 128; measured in docs/PERF.md), else 128; K and N must
// be multiples of layout.StageK (whole 64-k chunks, 64-feature FC1 tiles).
// GEMM1 runs 128-row tiles at every shape (wgmmaPath.upload).
func TileRows(w *moe.Weights) int {
	switch {
	case w.K%layout.StageK != 0 || w.N%layout.StageK != 0:
		return 0
	case w.K%256 == 0:
		return 256
	}
	return 128
}
