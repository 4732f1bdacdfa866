package mxfp

import (
	"math"

	"kimimoe/internal/round"
)

// Largest finite values of the element formats.
const (
	MaxE4M3 = 448.0
	MaxE2M1 = 6.0
)

// Element codes that the encoders produce for special inputs.
const (
	E4M3NaN    = 0x7F // positive NaN code
	E4M3MaxPos = 0x7E // +448
	E2M1MaxPos = 0x07 // +6
	E8M0NaN    = 0xFF
)

// minifloat describes a small binary float format with a sign bit, normal
// numbers 1.m * 2^e for e >= emin, and subnormals m * 2^(emin-mbits).
type minifloat struct {
	mbits   uint   // mantissa bits
	bias    int    // exponent bias; emin = 1 - bias
	signBit uint8  // code bit of the sign
	maxCode uint8  // code of the largest finite positive value
	max64   uint64 // float64 bits of that value
}

var (
	e4m3 = minifloat{mbits: 3, bias: 7, signBit: 0x80, maxCode: E4M3MaxPos,
		max64: math.Float64bits(MaxE4M3)}
	e2m1 = minifloat{mbits: 1, bias: 1, signBit: 0x08, maxCode: E2M1MaxPos,
		max64: math.Float64bits(MaxE2M1)}
)

// e4m3Abs32 encodes |x|, given as float32 bits with the sign cleared and not
// NaN, rounding to nearest even and saturating at 448. It is the hot path of
// MXFP8 quantization, so it works on the bits:
//   - normal range: adding 0x7FFFF plus the LSB that survives (bit 20) rounds
//     the 23-bit mantissa to 3 bits, ties to even, and a carry steps the
//     exponent as it should; u>>20 is then (biased exponent << 3 | mantissa),
//     and rebiasing from 127 to 7 subtracts 120<<3.
//   - subnormal range (below 2^-6): adding 2^14 moves x into [2^14, 2^15),
//     where the float32 ulp is 2^-9, the E4M3 subnormal quantum; the float32
//     addition rounds to nearest even and the low bits count the quanta.
func e4m3Abs32(u uint32) uint8 {
	// Branches here are well predicted: in an MX block the subnormal range
	// starts 2^-15 below amax, where few elements fall (e2m1Abs32 differs).
	switch {
	case u >= 0x43E00000: // 448
		return E4M3MaxPos
	case u < 0x3C800000: // 2^-6
		return uint8(math.Float32bits(math.Float32frombits(u)+0x1p14) - 0x46800000)
	}
	return uint8((u+0x7FFFF+(u>>20)&1)>>20 - 120<<3)
}

// e2m1Abs32 is e4m3Abs32 for E2M1: saturate at 6, subnormal quantum 0.5
// below 1 (add 2^22), 1 mantissa bit (shift 22), rebias 127 -> 1.
//
// Here a third of a typical block is subnormal (below amax/6), so branches
// would be mispredicted often: both candidates are computed and one is
// selected with masks. u < 2^31, so int32(u)-k is negative exactly when
// u < k, and >>31 turns that into an all-ones mask.
func e2m1Abs32(u uint32) uint8 {
	sub := math.Float32bits(math.Float32frombits(u)+0x1p22) - 0x4A800000
	nrm := (u+0x1FFFFF+(u>>22)&1)>>22 - 126<<1
	isSub := uint32((int32(u) - 0x3F800000) >> 31)   // u < 1
	inRange := uint32((int32(u) - 0x40C00000) >> 31) // u < 6
	c := sub&isSub | nrm&^isSub
	return uint8(c&inRange | E2M1MaxPos&^inRange)
}

// absCode64 encodes |x|, given as float64 bits with the sign cleared and not
// NaN, rounding to nearest even and saturating at the largest finite value.
// It is the general form of e4m3Abs32 and e2m1Abs32, used for float64 input.
func (f *minifloat) absCode64(u uint64) uint8 {
	if u >= f.max64 {
		return f.maxCode
	}
	exp := int(u>>52) - 1023
	emin := 1 - f.bias
	if exp < emin {
		n := math.RoundToEven(math.Float64frombits(u) * math.Ldexp(1, int(f.mbits)-emin))
		return uint8(n)
	}
	shift := 52 - f.mbits
	m := u & (1<<52 - 1)
	code := uint64(exp+f.bias)<<f.mbits | m>>shift
	rem, half := m&(1<<shift-1), uint64(1)<<(shift-1)
	if rem > half || rem == half && code&1 == 1 {
		code++
	}
	return uint8(code)
}

func encode32(x float32, abs func(uint32) uint8, signBit, nanCode uint8) uint8 {
	u := math.Float32bits(x)
	a := u & 0x7FFFFFFF
	if a > 0x7F800000 {
		return nanCode
	}
	c := abs(a)
	if u>>31 != 0 {
		c |= signBit
	}
	return c
}

func (f *minifloat) encode64(x float64, nanCode uint8) uint8 {
	u := math.Float64bits(x)
	a := u &^ (1 << 63)
	if a > 0x7FF0000000000000 {
		return nanCode
	}
	c := f.absCode64(a)
	if u>>63 != 0 {
		c |= f.signBit
	}
	return c
}

// EncodeE4M3 converts x to E4M3, rounding to nearest even and saturating to
// ±448 (infinities included). NaN gives 0x7F; -0 gives 0x80.
func EncodeE4M3(x float32) uint8 { return encode32(x, e4m3Abs32, 0x80, E4M3NaN) }

// EncodeE4M3Float64 is EncodeE4M3 for a float64, rounded once (no double
// rounding through float32).
func EncodeE4M3Float64(x float64) uint8 { return e4m3.encode64(x, E4M3NaN) }

// EncodeE2M1 converts x to an E2M1 code in the low nibble, rounding to nearest
// even and saturating to ±6 (infinities included). NaN gives +6 (0x7), the PTX
// .satfinite rule; -0 gives 0x8.
func EncodeE2M1(x float32) uint8 { return encode32(x, e2m1Abs32, 0x08, E2M1MaxPos) }

// EncodeE2M1Float64 is EncodeE2M1 for a float64, rounded once.
func EncodeE2M1Float64(x float64) uint8 { return e2m1.encode64(x, E2M1MaxPos) }

var (
	e4m3Values = func() (t [256]float32) {
		for c := range 256 {
			e, m := (c>>3)&0xF, c&7
			var v float64
			switch {
			case e == 0xF && m == 7:
				v = math.NaN()
			case e == 0:
				v = math.Ldexp(float64(m), -9)
			default:
				v = math.Ldexp(1+float64(float64(m)/8), e-7)
			}
			if c&0x80 != 0 {
				v = -v
			}
			t[c] = float32(v)
		}
		return
	}()
	e2m1Values = func() (t [16]float32) {
		for c := range 16 {
			e, m := (c>>1)&3, c&1
			v := math.Ldexp(float64(m), -1)
			if e != 0 {
				v = math.Ldexp(1+float64(float64(m)/2), e-1)
			}
			if c&8 != 0 {
				v = -v
			}
			t[c] = float32(v)
		}
		return
	}()
)

// DecodeE4M3 returns the value of E4M3 code b (exact). 0x7F and 0xFF are NaN.
func DecodeE4M3(b uint8) float32 { return e4m3Values[b] }

// DecodeE2M1 returns the value of the E2M1 code in the low nibble of c
// (exact); the high nibble is ignored.
func DecodeE2M1(c uint8) float32 { return e2m1Values[c&0xF] }

// DecodeE8M0 returns 2^(b-127) (exact; 0x00 is the float32 subnormal
// 2^-127), or NaN for 0xFF.
func DecodeE8M0(b uint8) float32 {
	if b == E8M0NaN {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(b)-127))
}

// E8M0Exponent returns X for scale byte b = X + 127. It is meaningless for
// the NaN byte 0xFF, which callers must check first.
func E8M0Exponent(b uint8) int { return int(b) - 127 }

// BF16FromFloat32 rounds x to bfloat16 bits, to nearest even. Values beyond
// the largest finite bf16 become ±Inf. NaN becomes the canonical quiet NaN
// 0x7FC0 with the input's sign (as ml_dtypes does; torch's CPU cast gave
// 0xFFFF for every NaN in our vectors, see testdata/ref/README.md).
func BF16FromFloat32(x float32) uint16 { return round.BF16FromFloat32(x) }

// Float32FromBF16 widens bfloat16 bits to float32 (exact).
func Float32FromBF16(b uint16) float32 { return round.Float32FromBF16(b) }

// RoundBF16 rounds x to the nearest bfloat16 value and returns it as float32.
func RoundBF16(x float32) float32 { return Float32FromBF16(BF16FromFloat32(x)) }

// BF16FromFloat64 rounds x to bfloat16 bits once, to nearest even (no double
// rounding through float32). Overflow, NaN and signed zeros follow
// BF16FromFloat32. It rounds x to float32 by round-to-odd first: with 16
// spare bits that intermediate keeps every tie and sticky bit bf16 needs.
func BF16FromFloat64(x float64) uint16 { return BF16FromFloat32(Float32RoundToOdd(x)) }

// Float32RoundToOdd rounds x to float32 toward zero and, if that was
// inexact, sets the last significand bit ("round to odd"). Rounding the
// result to any format with at least 2 fewer significand bits (BF16, F16)
// gives the same value as rounding x directly: the odd bit keeps the
// sticky information a second rounding needs. NaN stays NaN. Note that the
// result can exceed float32's range only where x does (then it is ±Inf,
// which every narrower format also overflows to).
func Float32RoundToOdd(x float64) float32 { return round.Float32RoundToOdd(x) }
