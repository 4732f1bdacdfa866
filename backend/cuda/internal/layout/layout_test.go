package layout

import (
	"kimimoe/moe"
	"kimimoe/mxfp"
	"math"
	"testing"
)

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
		if got := XOutsideBF16(in, c.r); got != c.want {
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

// A float32 x that XOutsideBF16 leaves on the BF16 paths quantizes (by
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
			if XOutsideBF16(&moe.Input{X: x}, rc) {
				continue
			}
			codes, scales := make([]uint8, 32), make([]uint8, 1)
			mxfp.QuantizeMXFP8(codes, scales, x, rc)
			for _, c := range codes {
				if !MXFP8HeldByBF16(c, scales[0]) {
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

// MXFP8HeldByBF16 against BF16 itself, for every code at every scale up
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
			if got := MXFP8HeldByBF16(uint8(c), uint8(s)); got != want {
				t.Fatalf("MXFP8HeldByBF16(%#02x, %d) = %v, want %v", c, s, got, want)
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
