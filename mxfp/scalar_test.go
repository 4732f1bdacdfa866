package mxfp

import (
	"math"
	"testing"
)

// positiveFinite lists (code, value) of the finite non-negative values of a
// format in increasing order, from its decode table (itself checked against
// ml_dtypes and torch in refvectors_test.go).
func positiveFinite(n int, dec func(uint8) float32) (codes []uint8, vals []float64) {
	for c := range n / 2 {
		v := dec(uint8(c))
		if v != v {
			continue
		}
		codes, vals = append(codes, uint8(c)), append(vals, float64(v))
	}
	return
}

// TestRoundingTiesAtEveryMidpoint checks round-to-nearest-even at the
// midpoint between each pair of adjacent representable values, and that one
// float32 ulp either side goes to the nearer value. Expected codes come from
// the rule itself: the tie goes to the even code (even mantissa LSB).
func TestRoundingTiesAtEveryMidpoint(t *testing.T) {
	type format struct {
		name  string
		enc32 func(float32) uint8
		enc64 func(float64) uint8
		codes []uint8
		vals  []float64
		sign  uint8
	}
	c8, v8 := positiveFinite(256, DecodeE4M3)
	c4, v4 := positiveFinite(16, DecodeE2M1)
	for _, f := range []format{
		{"E4M3", EncodeE4M3, EncodeE4M3Float64, c8, v8, 0x80},
		{"E2M1", EncodeE2M1, EncodeE2M1Float64, c4, v4, 0x08},
	} {
		for i := 0; i+1 < len(f.vals); i++ {
			lo, hi := f.vals[i], f.vals[i+1]
			mid := (lo + hi) / 2 // exact: both have few significant bits
			even := f.codes[i]
			if even&1 == 1 {
				even = f.codes[i+1]
			}
			for _, s := range []float64{1, -1} {
				sb := uint8(0)
				if s < 0 {
					sb = f.sign
				}
				m32 := float32(s * mid)
				if got := f.enc32(m32); got != even|sb {
					t.Errorf("%s: tie %v -> %#x, want even code %#x", f.name, s*mid, got, even|sb)
				}
				if got := f.enc64(s * mid); got != even|sb {
					t.Errorf("%s float64: tie %v -> %#x, want %#x", f.name, s*mid, got, even|sb)
				}
				below := math.Nextafter32(m32, 0)
				above := math.Nextafter32(m32, float32(s*math.Inf(1)))
				if got := f.enc32(below); got != f.codes[i]|sb {
					t.Errorf("%s: %v (1 ulp inside the tie) -> %#x, want %#x", f.name, below, got, f.codes[i]|sb)
				}
				if got := f.enc32(above); got != f.codes[i+1]|sb {
					t.Errorf("%s: %v (1 ulp outside the tie) -> %#x, want %#x", f.name, above, got, f.codes[i+1]|sb)
				}
				b64, a64 := math.Nextafter(s*mid, 0), math.Nextafter(s*mid, s*math.Inf(1))
				if f.enc64(b64) != f.codes[i]|sb || f.enc64(a64) != f.codes[i+1]|sb {
					t.Errorf("%s float64: 1 ulp around tie %v misrounded", f.name, s*mid)
				}
			}
			// Every representable value encodes to its own code.
			if got := f.enc32(float32(hi)); got != f.codes[i+1] {
				t.Errorf("%s: %v -> %#x, want its code %#x", f.name, hi, got, f.codes[i+1])
			}
		}
	}
}

// Special cases, from OCP MX v1.0 (docs/CONTRACT.md "Number formats") and the PTX ISA's
// cvt.rn.satfinite rules for e4m3x2 / e2m1x2.
func TestSaturationAndSpecials(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	cases := []struct {
		name string
		got  uint8
		want uint8
	}{
		{"E4M3(448)", EncodeE4M3(448), 0x7E},
		{"E4M3(464) tie to even 448", EncodeE4M3(464), 0x7E},
		{"E4M3(465) saturates", EncodeE4M3(465), 0x7E},
		{"E4M3(1e30)", EncodeE4M3(1e30), 0x7E},
		{"E4M3(+Inf)", EncodeE4M3(inf), 0x7E},
		{"E4M3(-Inf)", EncodeE4M3(-inf), 0xFE},
		{"E4M3(NaN)", EncodeE4M3(nan), 0x7F},
		{"E4M3(-NaN)", EncodeE4M3(float32(math.Copysign(math.NaN(), -1))), 0x7F},
		{"E4M3(-0)", EncodeE4M3(float32(math.Copysign(0, -1))), 0x80},
		{"E4M3(2^-9) smallest subnormal", EncodeE4M3(1.0 / 512), 0x01},
		{"E4M3(2^-10) ties to 0", EncodeE4M3(1.0 / 1024), 0x00},
		{"E4M3(3*2^-10) ties to even 2^-8", EncodeE4M3(3.0 / 1024), 0x02},
		{"E4M3(float32 min subnormal)", EncodeE4M3(math.SmallestNonzeroFloat32), 0x00},
		{"E2M1(6)", EncodeE2M1(6), 0x7},
		{"E2M1(5) ties to even 4", EncodeE2M1(5), 0x6},
		{"E2M1(7) saturates", EncodeE2M1(7), 0x7},
		{"E2M1(-Inf)", EncodeE2M1(-inf), 0xF},
		{"E2M1(NaN) is +6", EncodeE2M1(nan), 0x7},
		{"E2M1(0.25) ties to 0", EncodeE2M1(0.25), 0x0},
		{"E2M1(0.75) ties to even 1", EncodeE2M1(0.75), 0x2},
		{"E2M1(-0)", EncodeE2M1(float32(math.Copysign(0, -1))), 0x8},
		{"E4M3 float64(2^-1074)", EncodeE4M3Float64(math.SmallestNonzeroFloat64), 0x00},
		{"E4M3 float64(1e300)", EncodeE4M3Float64(1e300), 0x7E},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %#02x, want %#02x", c.name, c.got, c.want)
		}
	}
}

func TestE8M0DecodeExhaustive(t *testing.T) {
	for b := range 256 {
		got := DecodeE8M0(uint8(b))
		if b == 0xFF {
			if got == got {
				t.Errorf("DecodeE8M0(0xFF) = %v, want NaN", got)
			}
			continue
		}
		// 2^(b-127) by definition (OCP MX v1.0, E8M0): exact in float32, whose
		// subnormals reach 2^-149.
		if want := float32(math.Ldexp(1, b-127)); got != want || got == 0 {
			t.Errorf("DecodeE8M0(%#02x) = %v, want 2^%d", b, got, b-127)
		}
		if E8M0Exponent(uint8(b)) != b-127 {
			t.Errorf("E8M0Exponent(%#02x) = %d", b, E8M0Exponent(uint8(b)))
		}
	}
}

// TestBF16AllPatterns: every bf16 pattern widens to float32 and rounds back
// to itself (NaNs to the canonical quiet NaN with the same sign).
func TestBF16AllPatterns(t *testing.T) {
	for i := range 65536 {
		b := uint16(i)
		x := Float32FromBF16(b)
		if math.Float32bits(x) != uint32(b)<<16 {
			t.Fatalf("Float32FromBF16(%#04x) = %#08x", b, math.Float32bits(x))
		}
		got := BF16FromFloat32(x)
		want := b
		if x != x {
			want = b&0x8000 | 0x7FC0
		}
		if got != want {
			t.Errorf("BF16FromFloat32(Float32FromBF16(%#04x)) = %#04x, want %#04x", b, got, want)
		}
		// The midpoint to the next pattern ties to the even one.
		if x == x && !math.IsInf(float64(x), 0) && b&0x7FFF < 0x7F7F {
			mid := math.Float32frombits(uint32(b)<<16 | 0x8000)
			even := b
			if b&1 == 1 {
				even = b + 1
			}
			if got := BF16FromFloat32(mid); got != even {
				t.Errorf("BF16 tie above %#04x -> %#04x, want %#04x", b, got, even)
			}
		}
	}
	if got := BF16FromFloat32(math.MaxFloat32); got != 0x7F80 {
		t.Errorf("BF16FromFloat32(MaxFloat32) = %#04x, want +Inf 0x7F80 (round to nearest, no saturation)", got)
	}
}
