// Package round holds the float roundings that both mxfp (the formats) and
// safetensors (dtype conversions) need: bfloat16 from float32 and float64,
// and float32 round-to-odd, the exact first step of a single rounding from
// float64 to a narrower format. mxfp documents and tests them.
package round

import "math"

// BF16FromFloat32 rounds x to bfloat16 bits, to nearest even; beyond the
// largest finite bf16, ±Inf; NaN becomes 0x7FC0 with the input's sign.
func BF16FromFloat32(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7FFFFFFF > 0x7F800000 {
		return uint16(u>>16)&0x8000 | 0x7FC0
	}
	u += 0x7FFF + (u>>16)&1
	return uint16(u >> 16)
}

// Float32FromBF16 widens bfloat16 bits to float32 (exact).
func Float32FromBF16(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32RoundToOdd rounds x to float32 toward zero and, if that was
// inexact, sets the last significand bit. See mxfp.Float32RoundToOdd.
func Float32RoundToOdd(x float64) float32 {
	f := float32(x)
	if float64(f) != x && x == x && !math.IsInf(float64(f), 0) {
		u := math.Float32bits(f)
		if math.Abs(float64(f)) > math.Abs(x) {
			u-- // f was rounded away from zero: truncate instead
		}
		f = math.Float32frombits(u | 1) // sticky: mark inexact
	}
	return f
}
