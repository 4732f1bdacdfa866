package mxfp

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// block builds a 32-element block: amax at index 0, a few smaller values,
// zeros elsewhere.
func block(first float32, rest ...float32) []float32 {
	b := make([]float32, BlockSize)
	b[0] = first
	copy(b[1:], rest)
	return b
}

func quant8(src []float32, r Recipe) ([]uint8, uint8) {
	codes := make([]uint8, len(src))
	scales := make([]uint8, len(src)/BlockSize)
	QuantizeMXFP8(codes, scales, src, r)
	return codes, scales[0]
}

func quant4(src []float32, r Recipe) ([]uint8, uint8) {
	packed := make([]uint8, len(src)/2)
	scales := make([]uint8, len(src)/BlockSize)
	QuantizeMXFP4(packed, scales, src, r)
	codes := make([]uint8, len(src))
	UnpackFP4(codes, packed)
	return codes, scales[0]
}

// Expected scales: floor is OCP MX v1.0 section 6.3, X = floor(log2(amax)) -
// emax_elem (emax 8 for E4M3, 2 for E2M1); rceil is the smallest X with
// amax/2^X <= 448 (or 6), docs/CONTRACT.md "Block scales" (FlashInfer
// mxfp8_quantize, PTX cvt.rp.satfinite.ue8m0x2.f32). Each value was worked by
// hand from those definitions, as the comments show.
func TestRecipeScalesMXFP8(t *testing.T) {
	pow := func(k int) float32 { return float32(math.Ldexp(1, k)) }
	cases := []struct {
		name                 string
		blk                  []float32
		floorX, rceilX       int
		floorCode, rceilCode uint8 // code of element 0
	}{
		// 448*2^3 = 1.75*2^11: floor X = 11-8 = 3; rceil X = 3 (448*2^3/2^3 = 448).
		{"amax 448*2^3", block(448 * 8), 3, 3, 0x7E, 0x7E},
		// one float32 ulp above: floor still 3 (element 448.000015 saturates to
		// 448); rceil needs X = 4 (element 224.0000076 rounds to 224 = 0x76).
		{"amax just above 448*2^3", block(math.Nextafter32(448*8, 1e9)), 3, 4, 0x7E, 0x76},
		// 1.75*2^-2 = 0.4375: floor X = -2-8 = -10 (element 448); rceil: 0.4375/2^X <= 448 -> X = -10.
		{"amax 1.75*2^-2", block(1.75 * pow(-2)), -10, -10, 0x7E, 0x7E},
		// 1.8*2^5 = 57.6: floor X = 5-8 = -3, element 460.8 saturates to 448;
		// rceil X = -2 (57.6/2^-3 = 460.8 > 448), element 230.4 -> 224 (0x76).
		{"amax 1.8*2^5", block(1.8 * 32), -3, -2, 0x7E, 0x76},
		// 2^-120 (normal float32): floor X = -128 clamps to -127, element
		// 2^-120*2^127 = 128 = 0x70; rceil X = ceil(-120 - log2 448) = -128 -> -127.
		{"amax 2^-120 (clamp)", block(pow(-120)), -127, -127, 0x70, 0x70},
		// float32 subnormal 2^-140: X clamps to -127 both ways; 2^-13 < 2^-10 -> 0.
		{"subnormal amax 2^-140", block(pow(-140)), -127, -127, 0x00, 0x00},
		// 1.0 with a subnormal neighbour: floor X = -8, rceil X = -8 (2^8 = 256 <= 448).
		{"amax 1 with a tiny element", block(1, pow(-130)), -8, -8, 0x78, 0x78},
	}
	for _, c := range cases {
		for _, rc := range []struct {
			r    Recipe
			x    int
			code uint8
		}{{RecipeFloor, c.floorX, c.floorCode}, {RecipeRCeil, c.rceilX, c.rceilCode}} {
			codes, s := quant8(c.blk, rc.r)
			if int(s)-127 != rc.x {
				t.Errorf("%s, %v: scale exponent %d, want %d", c.name, rc.r, int(s)-127, rc.x)
			}
			if codes[0] != rc.code {
				t.Errorf("%s, %v: element code %#02x, want %#02x", c.name, rc.r, codes[0], rc.code)
			}
		}
	}
}

func TestRecipeScalesMXFP4(t *testing.T) {
	cases := []struct {
		name                 string
		amax                 float32
		floorX, rceilX       int
		floorCode, rceilCode uint8
	}{
		// 6*2^4 = 1.5*2^6: floor X = 6-2 = 4, element 6; rceil X = 4.
		{"amax 6*2^4", 96, 4, 4, 0x7, 0x7},
		// 7 = 1.75*2^2: floor X = 0, element 7 saturates to 6; rceil X = 1
		// (7/2 = 3.5 <= 6), element 3.5 ties between 3 (0x5) and 4 (0x6): even 0x6.
		{"amax 7", 7, 0, 1, 0x7, 0x6},
		// 4: floor X = 2-2 = 0, element 4 (0x6); rceil X = 0 (4 <= 6).
		{"amax 4", 4, 0, 0, 0x6, 0x6},
		// 6.5: floor X = 0 (saturates to 6); rceil X = 1, element 3.25 -> 3 (0x5).
		{"amax 6.5", 6.5, 0, 1, 0x7, 0x5},
	}
	for _, c := range cases {
		for _, rc := range []struct {
			r    Recipe
			x    int
			code uint8
		}{{RecipeFloor, c.floorX, c.floorCode}, {RecipeRCeil, c.rceilX, c.rceilCode}} {
			codes, s := quant4(block(c.amax), rc.r)
			if int(s)-127 != rc.x || codes[0] != rc.code {
				t.Errorf("%s, %v: X=%d code=%#x, want X=%d code=%#x", c.name, rc.r, int(s)-127, codes[0], rc.x, rc.code)
			}
		}
	}
}

// Non-finite and zero blocks, docs/CONTRACT.md "Block scales": floor -> 0xFF and
// NaN elements; rceil -> NaN skipped in amax and encoded +448, Inf saturates
// the scale to 0xFE and itself to 448; all-zero -> scale 0x00, zero codes.
func TestRecipeSpecialBlocks(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))

	codes, s := quant8(block(0), RecipeFloor)
	if s != 0x00 || codes[0] != 0 || codes[31] != 0 {
		t.Errorf("all-zero block floor: scale %#x codes %#x", s, codes[0])
	}
	codes, s = quant8(block(negZero, negZero), RecipeRCeil)
	if s != 0x00 || codes[0] != 0x80 || codes[2] != 0x00 {
		t.Errorf("signed zeros rceil: scale %#x codes %#x %#x, want 0x00, 0x80, 0x00", s, codes[0], codes[2])
	}

	for _, bad := range []float32{nan, inf, -inf} {
		codes, s = quant8(block(1, bad), RecipeFloor)
		if s != 0xFF {
			t.Errorf("floor block with %v: scale %#x, want 0xFF", bad, s)
		}
		for i, c := range codes {
			if c != E4M3NaN {
				t.Fatalf("floor block with %v: code[%d] = %#x, want NaN 0x7F", bad, i, c)
			}
		}
		c4, s4 := quant4(block(1, bad), RecipeFloor)
		if s4 != 0xFF || c4[0] != 0x7 || c4[5] != 0x7 {
			t.Errorf("MXFP4 floor block with %v: scale %#x codes %#x, want 0xFF and +6", bad, s4, c4[0])
		}
	}

	// rceil, NaN skipped: amax 1 -> X = -8 (1*2^8 = 256 <= 448 < 512); 1 -> 256 = 0x78.
	codes, s = quant8(block(1, nan, -nan), RecipeRCeil)
	if s != 127-8 || codes[0] != 0x78 || codes[1] != 0x7E || codes[2] != 0x7E {
		t.Errorf("rceil with NaN: scale %#x codes %#x %#x %#x, want 0x77 0x78 0x7E 0x7E", s, codes[0], codes[1], codes[2])
	}
	// rceil, Inf: scale 0xFE; ±Inf -> ±448; 1*2^-127 -> 0.
	codes, s = quant8(block(1, inf, -inf), RecipeRCeil)
	if s != 0xFE || codes[0] != 0x00 || codes[1] != 0x7E || codes[2] != 0xFE {
		t.Errorf("rceil with Inf: scale %#x codes %#x %#x %#x, want 0xFE 0x00 0x7E 0xFE", s, codes[0], codes[1], codes[2])
	}
	// all-NaN rceil block: amax over no finite values is 0 -> scale 0x00; NaN -> +448.
	all := make([]float32, BlockSize)
	for i := range all {
		all[i] = nan
	}
	codes, s = quant8(all, RecipeRCeil)
	if s != 0x00 || codes[7] != 0x7E {
		t.Errorf("all-NaN rceil: scale %#x code %#x, want 0x00 0x7E", s, codes[7])
	}
	c4, s4 := quant4(block(1, nan, inf), RecipeRCeil)
	if s4 != 0xFE || c4[1] != 0x7 || c4[2] != 0x7 {
		t.Errorf("MXFP4 rceil NaN/Inf: scale %#x codes %#x %#x", s4, c4[1], c4[2])
	}
	// float64 upper clamp: amax 2^200 -> X = 192 clamps to 127 under floor;
	// elements 2^73 saturate.
	c64 := make([]uint8, BlockSize)
	s64 := make([]uint8, 1)
	src := make([]float64, BlockSize)
	src[0] = math.Ldexp(1, 200)
	QuantizeMXFP8Float64(c64, s64, src, RecipeFloor)
	if s64[0] != 0xFE || c64[0] != 0x7E {
		t.Errorf("float64 2^200 floor: scale %#x code %#x, want 0xFE 0x7E", s64[0], c64[0])
	}
}

func TestParseRecipe(t *testing.T) {
	for _, r := range []Recipe{RecipeFloor, RecipeRCeil} {
		got, err := ParseRecipe(r.String())
		if err != nil || got != r {
			t.Errorf("ParseRecipe(%q) = %v, %v", r.String(), got, err)
		}
	}
	if _, err := ParseRecipe("ceil"); err == nil {
		t.Error("ParseRecipe(\"ceil\") accepted an unknown recipe")
	}
}

func TestPanicsOnBadLengths(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil {
				t.Errorf("%s did not panic", name)
			} else if s, ok := r.(string); !ok || len(s) < 5 || s[:5] != "mxfp:" {
				t.Errorf("%s panicked with %v, want a \"mxfp:\" message", name, r)
			}
		}()
		f()
	}
	mustPanic("row of 31", func() { QuantizeMXFP8(make([]uint8, 31), make([]uint8, 1), make([]float32, 31), RecipeRCeil) })
	mustPanic("short codes", func() { QuantizeMXFP8(make([]uint8, 31), make([]uint8, 1), make([]float32, 32), RecipeRCeil) })
	mustPanic("short scales", func() { QuantizeMXFP4(make([]uint8, 32), make([]uint8, 1), make([]float32, 64), RecipeRCeil) })
	mustPanic("zero recipe", func() { QuantizeMXFP8(make([]uint8, 32), make([]uint8, 1), make([]float32, 32), 0) })
	mustPanic("matrix cols", func() { NewMXFP4Matrix(2, 48) })
	mustPanic("swizzle len", func() { SwizzleScales128x4(make([]uint8, 10), make([]uint8, 4), 2, 2) })
}

func TestDequantize(t *testing.T) {
	// Code 0x7E (448) with scale 0xFE (2^127) overflows float32: +Inf, but
	// exact in float64.
	codes := make([]uint8, BlockSize)
	codes[0], codes[1] = 0x7E, 0x01
	d32 := make([]float32, BlockSize)
	d64 := make([]float64, BlockSize)
	DequantizeMXFP8(d32, codes, []uint8{0xFE})
	DequantizeMXFP8Float64(d64, codes, []uint8{0xFE})
	if !math.IsInf(float64(d32[0]), 1) || d64[0] != 448*math.Ldexp(1, 127) || d64[1] != math.Ldexp(1, 127-9) {
		t.Errorf("dequant at scale 2^127: %v %v %v", d32[0], d64[0], d64[1])
	}
	DequantizeMXFP8(d32, codes, []uint8{0x00})
	if d32[1] != float32(math.Ldexp(1, -136)) {
		t.Errorf("2^-9 * 2^-127 = %v, want 2^-136 (exact float32 subnormal)", d32[1])
	}
	DequantizeMXFP8(d32, codes, []uint8{0xFF})
	if d32[1] == d32[1] {
		t.Error("scale 0xFF must dequantize to NaN")
	}
	// MXFP4 round trip of a matrix.
	m := NewMXFP4Matrix(2, 64)
	src := make([]float32, 128)
	for i := range src {
		src[i] = float32(i%13) - 6
	}
	m.Quantize(src, RecipeFloor)
	out := make([]float32, 128)
	m.Dequantize(out)
	for i := range src { // values -6..6 at scale 2^0: all but 5 and -5 exact; ±5 tie to ±4
		want := src[i]
		if want == 5 || want == -5 {
			want = want * 4 / 5
		}
		if out[i] != want {
			t.Fatalf("MXFP4 round trip [%d]: %v -> %v, want %v", i, src[i], out[i], want)
		}
	}
	m8 := NewMXFP8Matrix(2, 64)
	m8.Quantize(src, RecipeRCeil)
	m8.Dequantize(out)
	for i := range src {
		if out[i] != src[i] {
			t.Fatalf("MXFP8 round trip [%d]: %v -> %v", i, src[i], out[i])
		}
	}
}

// RecipeRound's exponent is log2(amax / maxpos) rounded to nearest, here
// from math.Log2 away from the half-way points (which are irrational, so
// no float amax sits on one), and exactly at the float neighbours of
// amax = maxpos x 2^(n - 1/2); its blocks saturate where they clip, and
// about half of uniform random blocks do (MLX #4353 saw 46.7%).
func TestRecipeRound(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, e := range []Element{ElemE4M3, ElemE2M1} {
		for range 200000 {
			amax := math.Ldexp(0.5+rng.Float64()/2, rng.IntN(200)-100)
			l := math.Log2(amax / e.maxPos())
			if math.Abs(l-math.Floor(l)-0.5) < 1e-9 {
				continue
			}
			if got, want := ScaleExponent(amax, e, RecipeRound), int(math.Round(l)); got != want {
				t.Fatalf("element %d, amax %v: X = %d, want %d", e, amax, got, want)
			}
		}
		for n := -20; n <= 20; n++ {
			mid := e.maxPos() * math.Pow(2, float64(n)-0.5) // not exact: its neighbours straddle the true point
			lo, hi := math.Nextafter(mid, 0), math.Nextafter(mid, math.Inf(1))
			for _, a := range []float64{lo, hi} {
				want := n // above the point
				if new(big.Float).SetPrec(256).Mul(big.NewFloat(a), big.NewFloat(a)).Cmp(
					new(big.Float).SetPrec(256).Quo(new(big.Float).SetPrec(256).Mul(big.NewFloat(e.maxPos()*math.Pow(2, float64(n))), big.NewFloat(e.maxPos()*math.Pow(2, float64(n)))), big.NewFloat(2))) < 0 {
					want = n - 1
				}
				if got := ScaleExponent(a, e, RecipeRound); got != want {
					t.Errorf("element %d, amax %v beside maxpos x 2^(%d - 1/2): X = %d, want %d", e, a, n, got, want)
				}
			}
		}
	}
	var blk [BlockSize]float32
	clipped := 0
	const blocks = 4000
	for b := range blocks {
		for i := range blk {
			blk[i] = float32(rng.NormFloat64())
		}
		var packed [BlockSize / 2]uint8
		scale := quantizeBlockE2M1(&packed, &blk, RecipeRound)
		clip := false
		for i, v := range blk {
			if math.Abs(float64(v))*math.Ldexp(1, 127-int(scale)) > MaxE2M1 {
				clip = true
				if c := packed[i/2] >> (4 * (i % 2)) & 0x7; c != E2M1MaxPos {
					t.Fatalf("block %d element %d (%v at scale %d) encodes %#x, want the saturated %#x", b, i, v, scale, c, E2M1MaxPos)
				}
			}
		}
		if clip {
			clipped++
		}
	}
	if f := float64(clipped) / blocks; f < 0.35 || f > 0.65 {
		t.Errorf("%.3f of the blocks clip under RecipeRound, want about half", f)
	}
	if _, err := ParseRecipe("round"); err == nil {
		t.Error(`ParseRecipe("round") must fail: the recipe is for diagnosis only`)
	}
}
