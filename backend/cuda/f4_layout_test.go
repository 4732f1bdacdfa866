package cuda

import (
	"math"
	"math/bits"
	"slices"
	"strings"
	"testing"

	"kimimoe/activation"
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
			f := f4Bits(0xF, j, h)
			if all&f != 0 {
				t.Fatalf("register %d half %d overlaps another field: %#08x", j, h, f)
			}
			all |= f
			for c := range uint8(16) {
				bits := uint16(f4Unpack(f4Bits(c, j, h), j) >> (16 * h))
				got := float64(bf16Float(bits))
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
	w.W31Scale[5], w.W2Scale[7], w.W31Scale[9], w.W2Scale[11] = 0, 1, f4MaxScale, f4MaxScale
	if why := f4Available(w); why != "" {
		t.Fatal(why)
	}
	kp, np := f4Dims(w)
	for _, m := range []struct {
		name         string
		arrange      func(*moe.Weights) ([]uint8, []uint8)
		fc           func(int) *mxfp.MXFP4Matrix
		rows, k      int // arranged (padded)
		srcRows, src int // the source's rows and k
		rowOf        func(gi, r int) int
	}{
		{"fc1", f4W31, w.FC1, 2 * np, kp, 2 * w.N, w.K, f4Row31(w.N)},
		{"fc2", f4W2, w.FC2, kp, np, w.K, w.N, f4Row2(w.K)},
	} {
		payload, sc := m.arrange(w)
		groups, chunks := m.rows/64, m.k/abiWGChunkK
		if len(payload) != w.E*groups*chunks*f4ChunkBytes || len(sc) != w.E*groups*f4Chunks4(chunks)*f4ChunkScales {
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
							o := blk*f4ChunkBytes + 16*tid + 4*q
							word := uint32(payload[o]) | uint32(payload[o+1])<<8 | uint32(payload[o+2])<<16 | uint32(payload[o+3])<<24
							for j := range 4 {
								// Registers 0 and 2 are row r0's, 1 and 3 row r1's; steps 0-1 block 0, 2-3 block 1.
								sb := sc[(e*groups+gi)*f4Chunks4(chunks)*f4ChunkScales+f4ScaleByte(tid, c, 2*(j&1)+q/2)]
								for h := range 2 {
									r, kk := f4Element(tid, q, j, h)
									src, kk := m.rowOf(gi, r), c*abiWGChunkK+kk
									bits := uint16(f4Unpack(word, j) >> (16 * h))
									got := float64(bf16Float(bits)) * math.Ldexp(1, int(sb)-127)
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
	w.W2Scale[len(w.W2Scale)-1] = f4MaxScale + 1
	if why := f4Available(w); !strings.Contains(why, "w2 scale of expert 1 row 255 block 3 is 2^2") {
		t.Errorf("a scale of 2^2: %q", why)
	}
	s.K, s.N = 160, 96 // padded, not refused
	w2, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	if why := f4Available(w2); why != "" {
		t.Errorf("K=160, N=96: %q", why)
	}
}

// Which inputs leave the BF16 GEMMs for the mma.sync ones: an infinity
// under rceil (saturated to 448 x 2^127), pre-quantized block scales of
// 2^120 and up (448 x 2^120 is past BF16's largest, (2 - 2^-7) x 2^127;
// 2^119 is not), never NaN; and at the bottom a nonzero float32 block
// whose largest magnitude is under 2^-116 (its scale is 2^-125 or below)
// or a pre-quantized code that BF16 cannot hold (finer than 2^-133).
func TestXOutsideBF16(t *testing.T) {
	inf, nan := float32(math.Inf(-1)), float32(math.NaN())
	below := math.Float32frombits(math.Float32bits(0x1p-116) - 1)
	block := func(vs ...float32) []float32 { return append(vs, make([]float32, 32-len(vs))...) }
	codes := func(cs ...uint8) []uint8 { return append(cs, make([]uint8, 32-len(cs))...) }
	for _, c := range []struct {
		name   string
		x      []float32
		scales []uint8
		codes  []uint8
		r      mxfp.Recipe
		want   bool
	}{
		{"finite rceil", block(1, -2, math.MaxFloat32), nil, nil, mxfp.RecipeRCeil, false},
		{"-inf rceil", block(1, inf), nil, nil, mxfp.RecipeRCeil, true},
		{"-inf floor", block(1, inf), nil, nil, mxfp.RecipeFloor, false},
		{"nan rceil", block(nan), nil, nil, mxfp.RecipeRCeil, false},
		{"zero block", block(), nil, nil, mxfp.RecipeRCeil, false},
		{"block of 2^-116", block(0x1p-116, 1e-40), nil, nil, mxfp.RecipeRCeil, false},
		{"block under 2^-116, rceil", block(below), nil, nil, mxfp.RecipeRCeil, true},
		{"block under 2^-116, floor", block(-below), nil, nil, mxfp.RecipeFloor, true},
		{"subnormal block", block(1e-45), nil, nil, mxfp.RecipeFloor, true},
		{"tiny second block", append(block(1), block(1e-36)...), nil, nil, mxfp.RecipeRCeil, true},
		{"scale 2^119", nil, []uint8{127, 246}, codes(0x7E), mxfp.RecipeRCeil, false},
		{"scale 2^120", nil, []uint8{127, 247}, codes(0x7E), mxfp.RecipeRCeil, true},
		{"scale 2^127", nil, []uint8{254}, codes(0x7E), mxfp.RecipeFloor, true},
		{"NaN scale", nil, []uint8{0xFF}, codes(0x01), mxfp.RecipeRCeil, false},
		{"scale 2^-127, zeros", nil, []uint8{0}, codes(), mxfp.RecipeRCeil, false},
		{"scale 2^-127, 1.125", nil, []uint8{0}, codes(0x39), mxfp.RecipeRCeil, false},   // 72 x 2^-133
		{"scale 2^-127, 9 x 2^-9", nil, []uint8{0}, codes(0x09), mxfp.RecipeRCeil, true}, // 9 x 2^-136
		{"scale 2^-125, 2^-9", nil, []uint8{2}, codes(0x01), mxfp.RecipeRCeil, true},     // 2^-134
		{"scale 2^-124, 2^-9", nil, []uint8{3}, codes(0x81), mxfp.RecipeRCeil, false},    // -2^-133
		{"scale 2^-127, second block", nil, []uint8{127, 0}, codes(0x7E, 0, 0, 0x01), mxfp.RecipeRCeil, false},
	} {
		in := &moe.Input{X: c.x}
		if c.x == nil {
			cs := c.codes
			for len(cs) < 32*len(c.scales) {
				cs = append(cs, codes()...)
			}
			in.XQ = &mxfp.MXFP8Matrix{Scales: c.scales, Codes: cs}
		}
		if got := xOutsideBF16(in, c.r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// The bottom threshold is the oracle's scale rule: a block of largest
	// magnitude 2^-116 gets scale 2^-124 under floor (rceil's is never
	// lower), one just under it 2^-125.
	for _, rc := range []mxfp.Recipe{mxfp.RecipeFloor, mxfp.RecipeRCeil} {
		if x := mxfp.ScaleExponent(0x1p-116, mxfp.ElemE4M3, rc); x != -124 {
			t.Errorf("%v: the scale of a block of 2^-116 is 2^%d, want 2^-124", rc, x)
		}
	}
	if x := mxfp.ScaleExponent(float64(below), mxfp.ElemE4M3, mxfp.RecipeFloor); x != -125 {
		t.Errorf("floor: the scale of a block just under 2^-116 is 2^%d, want 2^-125", x)
	}
	// The boundary, in float64: the largest E4M3 value times 2^(s-127) is a
	// finite BF16 for s = 246 and not for 247.
	bf16Max := (2 - math.Ldexp(1, -7)) * math.Ldexp(1, 127)
	if 448*math.Ldexp(1, 246-127) > bf16Max || 448*math.Ldexp(1, 247-127) <= bf16Max {
		t.Error("the scale boundary is not 247")
	}
}

// A float32 x that xOutsideBF16 leaves on the BF16 paths quantizes (by
// the oracle's mxfp.QuantizeMXFP8, both recipes) to codes that BF16
// holds: random blocks of one magnitude each, from 2^-150 to 2^-100, so
// that the blocks around the 2^-116 threshold are many. Without the
// bottom end of the check, the blocks under 2^-116 fail here.
func TestXOutsideBF16Sound(t *testing.T) {
	r := uint64(7)
	next := func() uint64 { r = r*6364136223846793005 + 1442695040888963407; return r >> 11 }
	checked := 0
	for range 20000 {
		x := make([]float32, 32)
		e := -150 + int(next()%51)
		for i := range x {
			x[i] = float32(math.Ldexp(float64(next()%(1<<24))/(1<<24), e))
			if next()%2 == 0 {
				x[i] = -x[i]
			}
		}
		for _, rc := range []mxfp.Recipe{mxfp.RecipeRCeil, mxfp.RecipeFloor} {
			if xOutsideBF16(&moe.Input{X: x}, rc) {
				continue
			}
			codes, scales := make([]uint8, 32), make([]uint8, 1)
			mxfp.QuantizeMXFP8(codes, scales, x, rc)
			for _, c := range codes {
				if !mxfp8HeldByBF16(c, scales[0]) {
					t.Fatalf("%v block of 2^%d: code %#02x at scale %d is not a BF16 value, yet the BF16 paths would take it", rc, e, c, scales[0])
				}
			}
			checked++
		}
	}
	if checked < 10000 {
		t.Fatalf("only %d blocks left on the BF16 paths", checked)
	}
}

// mxfp8HeldByBF16 against BF16 itself, for every code at every scale up
// to 246: the value code x 2^(s-127), exact in float32 (whose subnormals
// reach 2^-149), is a BF16 value exactly when its float32 bits end in 16
// zero bits, BF16 being float32's upper half.
func TestMXFP8HeldByBF16(t *testing.T) {
	held := 0
	for s := range 247 {
		for c := range 256 {
			v := mxfp.DecodeE4M3(uint8(c))
			want := true
			if v == v {
				f := float32(math.Ldexp(float64(v), s-127))
				want = math.Float32bits(f)&0xFFFF == 0
			}
			if got := mxfp8HeldByBF16(uint8(c), uint8(s)); got != want {
				t.Fatalf("mxfp8HeldByBF16(%#02x, %d) = %v, want %v", c, s, got, want)
			}
			if want {
				held++
			}
		}
	}
	// Not held, counted by hand: a value is held when E4M3(c) x 2^(s+6) is
	// an integer, E4M3(c) being m x 2^-9 (subnormal, m = 1..7) or
	// (8 + m) x 2^(e-10). Scale 0: the 7 subnormals, exponent 1's 7
	// nonzero m, exponent 2's 6 m not multiples of 4, exponent 3's 4 odd
	// m; scale 1: 6 subnormals (m not a multiple of 4), 6 at exponent 1, 4
	// at exponent 2; scale 2: 4 odd subnormals, 4 odd m at exponent 1.
	// Each twice, for the sign.
	if notHeld := 247*256 - held; notHeld != 2*((7+7+6+4)+(6+6+4)+(4+4)) {
		t.Errorf("%d (code, scale) pairs not held by BF16, want 96", notHeld)
	}
}

// f4PlacementCost is the integer instructions that widening a word costs
// under a placement (place(code, j, h): the bits of register j, half h's
// field that code sets, as f4Bits) in the model f4_layout.go states: a
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
// allows in that model: the layout's placement (f4Bits) costs nine, the
// previous one (three shifts for register 3) eleven, and an exhaustive
// search over every assignment of the 32 bits of a word to the eight
// fields (registers interchangeable) finds none at eight.
func TestF4PlacementMinimal(t *testing.T) {
	mField := [8]int{6, 7, 8, 15, 22, 23, 24, 31} // a register's output bits: magnitude 6..8, sign 15, both halves
	if c := f4PlacementCost(f4Bits); c != 9 {
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
