package cuda

import (
	"testing"

	"kimimoe/moe"
)

// The decode tiles hold every weight byte once, where the kernel's lane
// arithmetic looks for it, and zeros in the padding. The expected position
// of each byte is computed here from the kernel's reading rule, not from
// arrangeTiles: lane (g, t) reads row g's block q at bytes 32*lane + 4q of
// the tile, the 4 bytes [16q' + 4t, +4) of block kb = 4c + q of the row.
func TestDecodeTiles(t *testing.T) {
	const e, n, k = 2, 32, 160 // k pads to 256: two chunks, the second half padding
	w := moe.NewWeights(e, n, k, true)
	for i := range w.W31 {
		w.W31[i] = uint8(i*7 + 1)
	}
	for i := range w.W31Scale {
		w.W31Scale[i] = uint8(i + 3)
	}
	p, s := decodeW31(w)
	chunks := padTo(k) / abiStageK
	if len(p) != e*(n/8)*chunks*abiDecodeTile {
		t.Fatalf("payload %d bytes", len(p))
	}
	for ex := range e {
		for fg := range n / 8 {
			for c := range chunks {
				tile := (ex*(n/8)+fg)*chunks + c
				for lane := range 32 {
					g, tt := lane/4, lane%4
					for half, row := range []int{8*fg + g, n + 8*fg + g} { // up row, gate row
						for q := range 4 {
							kb := 4*c + q
							got := p[tile*abiDecodeTile+32*lane+16*half+4*q : tile*abiDecodeTile+32*lane+16*half+4*q+4]
							gotS := s[tile*abiDecodeScales+(8*half+g)*4+q]
							for b := range 4 {
								want, wantS := uint8(0), uint8(0)
								if kb < k/32 {
									src := (ex*2*n+row)*(k/2) + kb*16 + 4*tt + b
									want = w.W31[src]
									wantS = w.W31Scale[(ex*2*n+row)*(k/32)+kb]
								}
								if got[b] != want || gotS != wantS {
									t.Fatalf("e%d fg%d c%d lane %d half %d q%d byte %d: %d/%d, want %d/%d", ex, fg, c, lane, half, q, b, got[b], gotS, want, wantS)
								}
							}
						}
					}
				}
			}
		}
	}
}

// FC2's tiles: tile tb holds output rows 16tb .. 16tb+15, lane (g, t) rows
// 16tb+g and 16tb+g+8, with N padded to 128.
func TestDecodeTilesFC2(t *testing.T) {
	const e, n, k = 2, 96, 64 // N pads to 128
	w := moe.NewWeights(e, n, k, true)
	for i := range w.W2 {
		w.W2[i] = uint8(i*13 + 5)
	}
	for i := range w.W2Scale {
		w.W2Scale[i] = uint8(i + 1)
	}
	p, s := decodeW2(w)
	chunks := padTo(n) / abiStageK
	for ex := range e {
		for tb := range k / 16 {
			for c := range chunks {
				tile := (ex*(k/16)+tb)*chunks + c
				for lane := range 32 {
					g, tt := lane/4, lane%4
					for half, row := range []int{16*tb + g, 16*tb + g + 8} {
						for q := range 4 {
							kb := 4*c + q
							for b := range 4 {
								want, wantS := uint8(0), uint8(0)
								if kb < n/32 {
									want = w.W2[(ex*k+row)*(n/2)+kb*16+4*tt+b]
									wantS = w.W2Scale[(ex*k+row)*(n/32)+kb]
								}
								got := p[tile*abiDecodeTile+32*lane+16*half+4*q+b]
								gotS := s[tile*abiDecodeScales+(8*half+g)*4+q]
								if got != want || gotS != wantS {
									t.Fatalf("e%d tb%d c%d lane %d half %d q%d byte %d: %d/%d, want %d/%d", ex, tb, c, lane, half, q, b, got, gotS, want, wantS)
								}
							}
						}
					}
				}
			}
		}
	}
}
