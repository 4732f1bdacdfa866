package wgmma

import (
	"math"
	"testing"

	"kimimoe/activation"
	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// Every E2M1 value times every E8M0 scale is a BF16 value: the table's
// BF16, read back, is the float64 product, for all 16 x 255 finite pairs
// (the products past float32's range, 6 x 2^127 and 4 x 2^127 and such,
// are infinities in BF16 as in float32); scale 0xFF is NaN.
func TestWGBF16TableExhaustive(t *testing.T) {
	for s := range 256 {
		for c := range 16 {
			want := float64(mxfp.DecodeE2M1(uint8(c))) * math.Ldexp(1, s-127)
			got := float64(mxfp.Float32FromBF16(BF16Table[s][c]))
			switch {
			case s == 0xFF:
				if !math.IsNaN(got) {
					t.Fatalf("scale 0xFF code %d: %v, want NaN", c, got)
				}
			case want > math.MaxFloat32 || want < -math.MaxFloat32:
				if !math.IsInf(got, int(math.Copysign(1, want))) {
					t.Fatalf("scale %d code %d: %v, want an infinity for %v", s, c, got, want)
				}
			case got != want || math.Signbit(got) != math.Signbit(want):
				t.Fatalf("scale %d code %d: BF16 %v, want %v", s, c, got, want)
			}
		}
	}
}

// The arranged weights, read back through the layout (Offset), are
// every weight's value E2M1 x 2^(s-127), for FC1 (up and gate rows of a
// feature tile) and FC2.
func TestWGArrangeReadsBack(t *testing.T) {
	s := validation.CaseSpec{Name: "wg", M: 1, K: 256, N: 128, ELocal: 3, TopK: 2, Activation: activation.Situ,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 9}
	w, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	w.W31Scale[5], w.W2Scale[7] = 0, 1 // the smallest scales: BF16 subnormals
	for _, bn := range Rows {
		for _, m := range []struct {
			name     string
			arrange  func(*moe.Weights, int) []uint8
			fc       func(int) *mxfp.MXFP4Matrix
			tiles, k int
			rowOf    func(tb, r int) int
		}{
			{"fc1", W31, w.FC1, w.N / (bn / 2), w.K, func(tb, r int) int {
				if r < bn/2 {
					return bn/2*tb + r
				}
				return w.N + bn/2*tb + r - bn/2
			}},
			{"fc2", W2, w.FC2, w.K / bn, w.N, func(tb, r int) int { return bn*tb + r }},
		} {
			payload := m.arrange(w, bn)
			chunks := m.k / layout.ChunkK
			if len(payload) != w.E*m.tiles*chunks*TileBytes(bn) {
				t.Fatalf("%s: %d bytes", m.name, len(payload))
			}
			for e := range w.E {
				mat := m.fc(e)
				vals := make([]float64, mat.Rows*mat.Cols)
				mxfp.DequantizeMXFP4Float64(vals, mat.Packed, mat.Scales)
				for tb := range m.tiles {
					for r := range bn {
						src := m.rowOf(tb, r)
						for k := range m.k {
							blk := payload[((e*m.tiles+tb)*chunks+k/layout.ChunkK)*TileBytes(bn):]
							o := Offset(r, 2*(k%layout.ChunkK))
							got := float64(mxfp.Float32FromBF16(uint16(blk[o]) | uint16(blk[o+1])<<8))
							if want := vals[src*m.k+k]; got != want {
								t.Fatalf("%s (%d-row tiles) expert %d tile %d row %d k %d: %v, want %v", m.name, bn, e, tb, r, k, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// The layout keeps each row's 128 bytes together with its 16-byte pieces
// permuted by the row's place in its 8-row group (PTX's 128B swizzle:
// address bits 4..6 XOR bits 7..9), and is a bijection on a (tile,
// chunk) block.
func TestWGOffsetBijective(t *testing.T) {
	seen := make([]bool, TileBytes(256))
	for r := range 256 {
		for b := range 2 * layout.ChunkK {
			o := Offset(r, b)
			if seen[o] {
				t.Fatalf("row %d byte %d lands on %d twice", r, b, o)
			}
			seen[o] = true
			if o/128 != r || o%16 != b%16 || (o>>4)&7 != (b/16)^((o>>7)&7) {
				t.Fatalf("row %d byte %d at %d: not the 128-byte swizzle", r, b, o)
			}
		}
	}
}
