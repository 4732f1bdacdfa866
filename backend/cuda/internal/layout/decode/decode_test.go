package decode

import (
	"testing"

	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/moe"
)

// checkTiles checks tiles (payload p, scales s) of e experts x tiles x
// chunks against the kernel's reading rule, computed here, not from
// arrangeTiles: lane (g, t) reads tile row g's block q at bytes
// 32*lane + 4q of the tile (row g + 8's at 32*lane + 16 + 4q), the 4 bytes
// [16kb + 4t, +4) of block kb = 4c + q of the source row, whose scale is
// at [8*half + g][q]; blocks past the real k are zero. row(tb, half, g) is
// the source row (within its expert) of tile tb's row g + 8*half.
func checkTiles(t *testing.T, p, s, packed, scales []uint8, e, rows, k, tiles int, row func(tb, half, g int) int) {
	t.Helper()
	chunks := layout.PadTo(k) / layout.StageK
	if len(p) != e*tiles*chunks*Tile || len(s) != e*tiles*chunks*Scales {
		t.Fatalf("payload %d bytes, scales %d", len(p), len(s))
	}
	for ex := range e {
		for tb := range tiles {
			for c := range chunks {
				tile := (ex*tiles+tb)*chunks + c
				for lane := range 32 {
					g, tt := lane/4, lane%4
					for half := range 2 {
						r := ex*rows + row(tb, half, g)
						for q := range 4 {
							kb := 4*c + q
							gotS := s[tile*Scales+(8*half+g)*4+q]
							for b := range 4 {
								want, wantS := uint8(0), uint8(0)
								if kb < k/32 {
									want = packed[r*(k/2)+kb*16+4*tt+b]
									wantS = scales[r*(k/32)+kb]
								}
								got := p[tile*Tile+32*lane+16*half+4*q+b]
								if got != want || gotS != wantS {
									t.Fatalf("e%d tile %d chunk %d lane %d half %d q%d byte %d: %d/%d, want %d/%d", ex, tb, c, lane, half, q, b, got, gotS, want, wantS)
								}
							}
						}
					}
				}
			}
		}
	}
}

// FC1's tiles: tile fg holds feature group fg, its rows 0..7 the up rows
// 8fg.., rows 8..15 the gate rows N + 8fg.. ; K = 160 pads to 256, so the
// second chunk is half padding.
func TestDecodeTiles(t *testing.T) {
	const e, n, k = 2, 32, 160
	w := moe.NewWeights(e, n, k, true)
	for i := range w.W31 {
		w.W31[i] = uint8(i*7 + 1)
	}
	for i := range w.W31Scale {
		w.W31Scale[i] = uint8(i + 3)
	}
	p, s := W31(w)
	checkTiles(t, p, s, w.W31, w.W31Scale, e, 2*n, k, n/8, func(fg, half, g int) int { return half*n + 8*fg + g })
}

// FC2's tiles: tile tb holds output rows 16tb .. 16tb+15, lane (g, t) rows
// 16tb+g and 16tb+g+8, with N = 96 padded to 128.
func TestDecodeTilesFC2(t *testing.T) {
	const e, n, k = 2, 96, 64
	w := moe.NewWeights(e, n, k, true)
	for i := range w.W2 {
		w.W2[i] = uint8(i*13 + 5)
	}
	for i := range w.W2Scale {
		w.W2Scale[i] = uint8(i + 1)
	}
	p, s := W2(w)
	checkTiles(t, p, s, w.W2, w.W2Scale, e, k, n, k/16, func(tb, half, g int) int { return 16*tb + 8*half + g })
}
