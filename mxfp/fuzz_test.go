package mxfp

import (
	"encoding/binary"
	"math"
	"testing"
)

// nearestBrute returns the smallest distance from x to a finite value of the
// format, by scanning every code.
func nearestBrute(x float64, n int, dec func(uint8) float32) float64 {
	best := math.Inf(1)
	for c := range n {
		v := float64(dec(uint8(c)))
		if v == v {
			best = min(best, math.Abs(x-v))
		}
	}
	return best
}

func checkNearest(t *testing.T, name string, x float32, code uint8, maxv float64, n int, dec func(uint8) float32) {
	xf := float64(x)
	got := float64(dec(code))
	switch {
	case x != x:
		return // NaN rules are pinned in TestSaturationAndSpecials
	case math.Abs(xf) >= maxv:
		if got != math.Copysign(maxv, xf) {
			t.Fatalf("%s(%v) = %v, want saturation to %v", name, x, got, math.Copysign(maxv, xf))
		}
		return
	}
	d := math.Abs(xf - got)
	if best := nearestBrute(xf, n, dec); d != best {
		t.Fatalf("%s(%v) = %v at distance %g, but a value at distance %g exists", name, x, got, d, best)
	}
	if d != 0 && math.Abs(xf-float64(dec(code^1))) == d && code&1 == 1 {
		t.Fatalf("%s(%v): tie went to odd code %#x", name, x, code)
	}
}

// FuzzEncodeE4M3: decode(encode(x)) is the nearest representable value, ties
// to even, saturating.
func FuzzEncodeE4M3(f *testing.F) {
	for _, x := range []float32{0, 1, 448, 464, 465, 1.0 / 1024, 3.0 / 1024, -17.5, 1e-30} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float32) {
		c := EncodeE4M3(x)
		checkNearest(t, "EncodeE4M3", x, c, MaxE4M3, 256, DecodeE4M3)
		if EncodeE4M3Float64(float64(x)) != c {
			t.Fatalf("float32 and float64 encoders differ at %v", x)
		}
	})
}

func FuzzEncodeE2M1(f *testing.F) {
	for _, x := range []float32{0, 0.25, 0.75, 2.5, 5, 6, 7, -3.5} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float32) {
		c := EncodeE2M1(x)
		if c > 0xF {
			t.Fatalf("EncodeE2M1(%v) = %#x uses the high nibble", x, c)
		}
		checkNearest(t, "EncodeE2M1", x, c, MaxE2M1, 16, DecodeE2M1)
	})
}

// FuzzQuantizeMXFP8Block: each dequantized element is within half an element
// ulp (times the scale) of the input, or saturated (floor only, when the
// scaled element exceeds 448); rceil never saturates a finite block.
func FuzzQuantizeMXFP8Block(f *testing.F) {
	f.Add(make([]byte, 4*BlockSize), true)
	seed := make([]byte, 4*BlockSize)
	for i := range BlockSize {
		binary.LittleEndian.PutUint32(seed[4*i:], math.Float32bits(float32(i)*1.8-20))
	}
	f.Add(seed, false)
	f.Fuzz(func(t *testing.T, raw []byte, floor bool) {
		if len(raw) < 4*BlockSize {
			return
		}
		src := make([]float32, BlockSize)
		for i := range src {
			src[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			if src[i] != src[i] || math.IsInf(float64(src[i]), 0) {
				return // non-finite blocks are pinned in TestRecipeSpecialBlocks
			}
		}
		r := RecipeRCeil
		if floor {
			r = RecipeFloor
		}
		codes := make([]uint8, BlockSize)
		scales := make([]uint8, 1)
		QuantizeMXFP8(codes, scales, src, r)
		dq := make([]float64, BlockSize)
		DequantizeMXFP8Float64(dq, codes, scales)
		x := E8M0Exponent(scales[0])
		for i, v := range src {
			s := math.Ldexp(float64(v), -x) // the scaled element, exact
			if math.Abs(s) > MaxE4M3 {
				if r == RecipeRCeil && x < 127 {
					t.Fatalf("rceil saturated element %v (scaled %v) at X=%d", v, s, x)
				}
				if dq[i] != math.Copysign(MaxE4M3*math.Ldexp(1, x), s) {
					t.Fatalf("element %v: saturated to %v", v, dq[i])
				}
				continue
			}
			_, e := math.Frexp(math.Abs(s))
			ulp := math.Ldexp(1, max(e-1, -6)-3)
			if err := math.Abs(dq[i] - float64(v)); err > ulp/2*math.Ldexp(1, x) {
				t.Fatalf("element %v: error %g above half an ulp %g (X=%d)", v, err, ulp/2*math.Ldexp(1, x), x)
			}
		}
	})
}

func FuzzSwizzleRoundTrip(f *testing.F) {
	f.Add(uint8(1), uint8(1), []byte{7})
	f.Add(uint8(200), uint8(5), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, rows, cols uint8, fill []byte) {
		r, c := int(rows)+1, int(cols)%130+1
		src := make([]uint8, r*c)
		for i := range src {
			if len(fill) > 0 {
				src[i] = fill[i%len(fill)] + uint8(i)
			}
		}
		checkSwizzleRoundTrip(t, r, c, src)
	})
}
