// Package decode arranges the weights for the decode path's kernels
// (backend/cuda/kernels/decode.cu) at prepare time, in tiles of 16 rows
// by layout.StageK k: per tile, Tile bytes of packed FP4 where lane (g,
// t) (lane = 4g + t) finds at [32*lane, 32*lane + 16) the 4 bytes of tile
// row g for each of the 4 32-blocks (block q at 16q + 4t of the row's
// block bytes: the MMA's permuted k), and at [32*lane + 16, 32*lane + 32)
// the same for tile row g + 8; then Scales bytes of scales, [16 tile
// rows][4 blocks]. k beyond the real K (padding to layout.StageK) is zero
// payload, scale 0.
package decode

import (
	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/moe"
)

const (
	// Tile is the bytes of packed FP4 of one tile.
	Tile = 16 * layout.StageK / 2
	// Scales is the scale bytes of one tile.
	Scales = 16 * layout.StageK / 32
)

// arrangeTiles writes the tiles of one matrix set: e experts of rows rows
// of k elements each (packed [e][rows][k/2], scales [e][rows][k/32]), as
// e x tiles x chunks tiles, where tile tb's row r16 (0..15) is source row
// rowOf(tb, r16) of its expert.
func arrangeTiles(packed, scales []uint8, e, rows, k, tiles int, rowOf func(tb, r16 int) int) (payload, scale []uint8) {
	kp := layout.PadTo(k)
	chunks := kp / layout.StageK
	payload = make([]uint8, e*tiles*chunks*Tile)
	scale = make([]uint8, e*tiles*chunks*Scales)
	rowBytes, rowScales := k/2, k/32
	for ex := range e {
		for tb := range tiles {
			for c := range chunks {
				tile := (ex*tiles+tb)*chunks + c
				dst := payload[tile*Tile : (tile+1)*Tile]
				dstS := scale[tile*Scales : (tile+1)*Scales]
				for r16 := range 16 {
					src := ex*rows + rowOf(tb, r16)
					row := packed[src*rowBytes : (src+1)*rowBytes]
					rs := scales[src*rowScales : (src+1)*rowScales]
					g, half := r16%8, r16/8
					for q := range 4 {
						kb := c*4 + q
						if kb >= rowScales {
							continue // padding: zeros
						}
						dstS[r16*4+q] = rs[kb]
						for t := range 4 {
							lane := 4*g + t
							copy(dst[32*lane+16*half+4*q:32*lane+16*half+4*q+4], row[kb*16+4*t:kb*16+4*t+4])
						}
					}
				}
			}
		}
	}
	return payload, scale
}

// W31 arranges FC1 for the decode GEMM1: tile tb is feature group
// tb (8 features): rows 0..7 the up rows 8tb.., rows 8..15 the gate rows
// N + 8tb.. (w31 is [up; gate]).
func W31(w *moe.Weights) (payload, scale []uint8) {
	return arrangeTiles(w.W31, w.W31Scale, w.E, 2*w.N, w.K, w.N/8, func(tb, r16 int) int {
		if r16 < 8 {
			return 8*tb + r16
		}
		return w.N + 8*tb + r16 - 8
	})
}

// W2 arranges FC2 for the decode GEMM2: tile tb is output rows
// 16tb .. 16tb + 15.
func W2(w *moe.Weights) (payload, scale []uint8) {
	return arrangeTiles(w.W2, w.W2Scale, w.E, w.K, w.N, w.K/16, func(tb, r16 int) int { return 16*tb + r16 })
}
