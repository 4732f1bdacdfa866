package fp4

import (
	"math"
	"math/bits"
	"slices"
	"strings"
	"testing"

	"kimimoe/activation"
	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// f4Unpack is the layout's documented decoding of word q's register j
// (kernels/fp4_widen.cuh f4_widen without the multiply): the BF16 pair of
// E2M1 x 2^-126 values.
func f4Unpack(q uint32, j int) uint32 {
	switch j {
	case 0:
		return q & 0x81C081C0
	case 1:
		return q << 6 & 0x81C081C0
	case 2:
		return bits.RotateLeft32(q, 12) & 0x81C081C0
	}
	return q<<2&0x80C080C0 | q>>6&0x01000100
}

// The placement: the eight (register, half) fields of a word are disjoint
// and fill it, and each decodes to E2M1 x 2^-126 exactly, for all 16
// codes (the sign of zero kept).
func TestF4BitsPlacement(t *testing.T) {
	var all uint32
	for j := range 4 {
		for h := range 2 {
			f := Bits(0xF, j, h)
			if all&f != 0 {
				t.Fatalf("register %d half %d overlaps another field: %#08x", j, h, f)
			}
			all |= f
			for c := range uint8(16) {
				bits := uint16(f4Unpack(Bits(c, j, h), j) >> (16 * h))
				got := float64(mxfp.Float32FromBF16(bits))
				want := float64(mxfp.DecodeE2M1(c)) * math.Ldexp(1, -126)
				if got != want || math.Signbit(got) != math.Signbit(want) {
					t.Fatalf("register %d half %d code %#x: %g (bits %#04x), want %g", j, h, c, got, bits, want)
				}
			}
		}
	}
	if all != 0xFFFFFFFF {
		t.Fatalf("fields cover %#08x, want every bit", all)
	}
}

// The arranged weights, decoded as the kernel does (f4Unpack, times
// 2^(stored byte - 127) = 2^(s-1)), are every weight's value E2M1 x
// 2^(s-127) from package mxfp's dequantization, for FC1 (up and gate rows
// of 32-feature groups) and FC2, at scales from 0 to 128.
func TestF4ArrangeReadsBack(t *testing.T) {
	for _, shape := range [][2]int{{256, 128}, {160, 96}} { // the second padded to 256 and 128 (GPT-OSS's 2880 alike)
		testF4ArrangeReadsBack(t, shape[0], shape[1])
	}
}

func testF4ArrangeReadsBack(t *testing.T, k, n int) {
	s := validation.CaseSpec{Name: "f4", M: 1, K: k, N: n, ELocal: 3, TopK: 2, Activation: activation.Situ,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 9}
	w, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	w.W31Scale[5], w.W2Scale[7], w.W31Scale[9], w.W2Scale[11] = 0, 1, MaxScale, MaxScale
	if why := Available(w); why != "" {
		t.Fatal(why)
	}
	kp, np := Dims(w)
	for _, m := range []struct {
		name         string
		arrange      func(*moe.Weights) ([]uint8, []uint8)
		fc           func(int) *mxfp.MXFP4Matrix
		rows, k      int // arranged (padded)
		srcRows, src int // the source's rows and k
		rowOf        func(gi, r int) int
	}{
		{"fc1", W31, w.FC1, 2 * np, kp, 2 * w.N, w.K, Row31(w.N)},
		{"fc2", W2, w.FC2, kp, np, w.K, w.N, Row2(w.K)},
	} {
		payload, sc := m.arrange(w)
		groups, chunks := m.rows/64, m.k/layout.ChunkK
		if len(payload) != w.E*groups*chunks*ChunkBytes || len(sc) != w.E*groups*Chunks4(chunks)*ChunkScales {
			t.Fatalf("%s: %d payload and %d scale bytes", m.name, len(payload), len(sc))
		}
		seen := make([]bool, w.E*m.srcRows*m.src)
		for e := range w.E {
			mat := m.fc(e)
			vals := make([]float64, mat.Rows*mat.Cols)
			mxfp.DequantizeMXFP4Float64(vals, mat.Packed, mat.Scales)
			for gi := range groups {
				for c := range chunks {
					blk := (e*groups+gi)*chunks + c
					for tid := range 128 {
						for q := range 4 {
							o := blk*ChunkBytes + 16*tid + 4*q
							word := uint32(payload[o]) | uint32(payload[o+1])<<8 | uint32(payload[o+2])<<16 | uint32(payload[o+3])<<24
							for j := range 4 {
								// Registers 0 and 2 are row r0's, 1 and 3 row r1's; steps 0-1 block 0, 2-3 block 1.
								sb := sc[(e*groups+gi)*Chunks4(chunks)*ChunkScales+ScaleByte(tid, c, 2*(j&1)+q/2)]
								for h := range 2 {
									r, kk := Element(tid, q, j, h)
									src, kk := m.rowOf(gi, r), c*layout.ChunkK+kk
									bits := uint16(f4Unpack(word, j) >> (16 * h))
									got := float64(mxfp.Float32FromBF16(bits)) * math.Ldexp(1, int(sb)-127)
									want := 0.0 // padding
									if src >= 0 && kk < m.src {
										want = vals[src*m.src+kk]
										seen[(e*m.srcRows+src)*m.src+kk] = true
									}
									if got != want || math.Signbit(got) != math.Signbit(want) {
										t.Fatalf("K=%d N=%d %s expert %d group %d chunk %d thread %d step %d register %d half %d (row %d, k %d): %g, want %g",
											k, n, m.name, e, gi, c, tid, q, j, h, src, kk, got, want)
									}
								}
							}
						}
					}
				}
			}
		}
		for i, ok := range seen {
			if !ok {
				t.Fatalf("K=%d N=%d %s: weight %d is not in the layout", k, n, m.name, i)
			}
		}
	}
}

// Shapes and scales the widening cannot take leave the layer without the
// path, saying which tensor and where.
func TestF4Available(t *testing.T) {
	s := validation.CaseSpec{Name: "f4", M: 1, K: 256, N: 128, ELocal: 2, TopK: 1, Activation: activation.Situ,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 3}
	w, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	w.W2Scale[len(w.W2Scale)-1] = MaxScale + 1
	if why := Available(w); !strings.Contains(why, "w2 scale of expert 1 row 255 block 3 is 2^2") {
		t.Errorf("a scale of 2^2: %q", why)
	}
	s.K, s.N = 160, 96 // padded, not refused
	w2, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	if why := Available(w2); why != "" {
		t.Errorf("K=160, N=96: %q", why)
	}
}

// f4PlacementCost is the integer instructions that widening a word costs
// under a placement (place(code, j, h): the bits of register j, half h's
// field that code sets, as Bits) in the model the package doc states: a
// register is the OR of parts, a part being the word rotated (or shifted)
// by one amount and masked; a part costs its mask or merge (one
// three-input logic instruction, one constant operand), plus one shift or
// rotation unless the amount is 0.
func f4PlacementCost(place func(code uint8, j, h int) uint32) int {
	parts := map[[2]int]bool{} // (register, rotation)
	for j := range 4 {
		for h := range 2 {
			for bit, o := range []int{6, 7, 8, 15} { // code bit: 0..2 magnitude (m, e0, e1), 3 sign
				src := bits.TrailingZeros32(place(uint8(1)<<bit, j, h))
				parts[[2]int{j, (o + 16*h - src + 32) % 32}] = true
			}
		}
	}
	cost := 0
	for jr := range parts {
		cost += 1 + min(jr[1], 1)
	}
	return cost
}

// The widening's nine instructions a word are the fewest any placement
// allows in that model: the layout's placement (Bits) costs nine, the
// previous one (three shifts for register 3) eleven, and an exhaustive
// search over every assignment of the 32 bits of a word to the eight
// fields (registers interchangeable) finds none at eight.
func TestF4PlacementMinimal(t *testing.T) {
	mField := [8]int{6, 7, 8, 15, 22, 23, 24, 31} // a register's output bits: magnitude 6..8, sign 15, both halves
	if c := f4PlacementCost(Bits); c != 9 {
		t.Errorf("the layout's placement costs %d instructions a word, want 9", c)
	}
	old := func(code uint8, j, h int) uint32 { // the placement before this one
		mag, sign := uint32(code&7), uint32(code>>3)
		f := [4]uint32{mag<<6 | sign<<15, mag<<3 | sign<<12, mag | sign<<9, (mag>>1)<<13 | (mag&1)<<10 | sign<<11}[j]
		return f << (16 * h)
	}
	if c := f4PlacementCost(old); c != 11 {
		t.Errorf("the previous placement costs %d, want 11", c)
	}

	// Depth-first over source bits 0..31, each to a free output bit of a
	// register, pruned once the parts so far cost more than the limit. At
	// nine it finds a placement (so the search is not vacuous), at eight
	// none.
	exists := func(limit int) bool {
		var used [4][8]bool
		parts := map[[2]int]int{}
		cost := 0
		found := false
		var dfs func(p int)
		dfs = func(p int) {
			if found || cost > limit {
				return
			}
			if p == 32 {
				found = true
				return
			}
			for j := range 4 {
				if j > 0 && !slices.Contains(used[j-1][:], true) {
					break // registers are interchangeable: use them in order
				}
				for i, o := range mField {
					if used[j][i] {
						continue
					}
					key := [2]int{j, (o - p + 32) % 32}
					if parts[key] == 0 {
						cost += 1 + min(key[1], 1)
					}
					parts[key]++
					used[j][i] = true
					dfs(p + 1)
					used[j][i] = false
					if parts[key]--; parts[key] == 0 {
						delete(parts, key)
						cost -= 1 + min(key[1], 1)
					}
				}
			}
		}
		dfs(0)
		return found
	}
	if !exists(9) {
		t.Error("the search finds no placement at nine instructions, the layout's cost")
	}
	if exists(8) {
		t.Error("a placement costing 8 or fewer instructions a word exists")
	}
}
