package mxfp

import (
	"fmt"
	"math"
)

// BlockSize is the number of elements sharing one E8M0 scale.
const BlockSize = 32

func checkRow(op string, n, payload, scales, perByte int) {
	if n%BlockSize != 0 {
		panic(fmt.Sprintf("mxfp: %s: row length %d is not a multiple of %d", op, n, BlockSize))
	}
	if payload != n/perByte {
		panic(fmt.Sprintf("mxfp: %s: payload length %d, want %d for %d elements", op, payload, n/perByte, n))
	}
	if scales != n/BlockSize {
		panic(fmt.Sprintf("mxfp: %s: scales length %d, want %d for %d elements", op, scales, n/BlockSize, n))
	}
}

// blockStats32 returns the float32 bits of amax over the non-NaN elements of
// blk (0x7F800000 if any is infinite) and whether a NaN was seen.
func blockStats32(blk []float32) (amax uint32, nan bool) {
	for _, v := range blk {
		a := math.Float32bits(v) & 0x7FFFFFFF
		if a > 0x7F800000 {
			nan = true
		} else if a > amax {
			amax = a
		}
	}
	return
}

func blockStats64(blk []float64) (amax uint64, nan bool) {
	for _, v := range blk {
		a := math.Float64bits(v) &^ (1 << 63)
		if a > 0x7FF0000000000000 {
			nan = true
		} else if a > amax {
			amax = a
		}
	}
	return
}

// blockScale decides one block: its scale byte, and whether it is a NaN
// block (floor with a non-finite element).
func blockScale(amax float64, nan bool, e Element, r Recipe) (scale uint8, nanBlock bool) {
	if r == RecipeFloor && (nan || math.IsInf(amax, 0)) {
		return E8M0NaN, true
	}
	return uint8(ScaleExponent(amax, e, r) + 127), false
}

// blockInverse decides a float32 block's scale and returns it with the
// factor 2^-X. Multiplying by the factor is exact for every result >= 2^-126;
// smaller results are far below half the smallest subnormal element and round
// to 0 either way. nanBlock reports a floor block with a non-finite element.
func blockInverse(blk *[BlockSize]float32, e Element, r Recipe) (scale uint8, inv float32, nanBlock bool) {
	amaxBits, nan := blockStats32(blk[:])
	scale, nanBlock = blockScale(float64(math.Float32frombits(amaxBits)), nan, e, r)
	return scale, inverseScale[scale], nanBlock
}

// inverseScale[s] is 2^(127-s) as float32 (2^-127 for 0xFE is subnormal, so
// it cannot be built from the exponent field alone).
var inverseScale = func() (t [256]float32) {
	for s := range 255 {
		t[s] = float32(math.Ldexp(1, 127-s))
	}
	return
}()

// quantizeBlockE4M3 writes one MXFP8 block and returns its scale.
func quantizeBlockE4M3(codes *[BlockSize]uint8, blk *[BlockSize]float32, r Recipe) uint8 {
	scale, inv, nanBlock := blockInverse(blk, ElemE4M3, r)
	if nanBlock {
		*codes = [BlockSize]uint8{}
		for i := range codes {
			codes[i] = E4M3NaN
		}
		return scale
	}
	for i, v := range blk {
		u := math.Float32bits(v * inv)
		a := u & 0x7FFFFFFF
		c := uint8(E4M3MaxPos) // rceil: NaN encodes as +448
		if a <= 0x7F800000 {
			c = e4m3Abs32(a) | uint8(u>>24)&0x80
		}
		codes[i] = c
	}
	return scale
}

// quantizeBlockE2M1 writes one MXFP4 block, packed, and returns its scale.
func quantizeBlockE2M1(packed *[BlockSize / 2]uint8, blk *[BlockSize]float32, r Recipe) uint8 {
	scale, inv, nanBlock := blockInverse(blk, ElemE2M1, r)
	if nanBlock {
		for i := range packed {
			packed[i] = E2M1MaxPos | E2M1MaxPos<<4
		}
		return scale
	}
	var codes [BlockSize]uint8
	for i, v := range blk {
		u := math.Float32bits(v * inv)
		a := u & 0x7FFFFFFF
		c := uint8(E2M1MaxPos) // rceil: NaN encodes as +6
		if a <= 0x7F800000 {
			c = e2m1Abs32(a) | uint8(u>>28)&0x08
		}
		codes[i] = c
	}
	for j := range packed {
		packed[j] = codes[2*j] | codes[2*j+1]<<4
	}
	return scale
}

func quantizeBlock64(codes []uint8, blk []float64, f *minifloat, e Element, r Recipe) uint8 {
	amaxBits, nan := blockStats64(blk)
	scale, nanBlock := blockScale(math.Float64frombits(amaxBits), nan, e, r)
	if nanBlock {
		nanCode := uint8(E4M3NaN)
		if e == ElemE2M1 {
			nanCode = E2M1MaxPos
		}
		for i := range blk {
			codes[i] = nanCode
		}
		return scale
	}
	inv := math.Ldexp(1, 127-int(scale)) // exact in float64 for every input
	codes = codes[:len(blk)]
	for i, v := range blk {
		u := math.Float64bits(v * inv)
		a := u &^ (1 << 63)
		var c uint8
		if a > 0x7FF0000000000000 {
			c = f.maxCode
		} else {
			c = f.absCode64(a)
			if u>>63 != 0 {
				c |= f.signBit
			}
		}
		codes[i] = c
	}
	return scale
}

// QuantizeMXFP8 quantizes one row src to E4M3 codes (len(src)) and E8M0
// scales (len(src)/32) under recipe r. See the package doc for the rules.
func QuantizeMXFP8(codes, scales []uint8, src []float32, r Recipe) {
	r.check()
	checkRow("QuantizeMXFP8", len(src), len(codes), len(scales), 1)
	for b := range scales {
		lo := b * BlockSize
		scales[b] = quantizeBlockE4M3((*[BlockSize]uint8)(codes[lo:]), (*[BlockSize]float32)(src[lo:]), r)
	}
}

// QuantizeMXFP8Float64 is QuantizeMXFP8 for a float64 row; each element is
// rounded once, straight from float64.
func QuantizeMXFP8Float64(codes, scales []uint8, src []float64, r Recipe) {
	r.check()
	checkRow("QuantizeMXFP8Float64", len(src), len(codes), len(scales), 1)
	for b := range scales {
		lo := b * BlockSize
		scales[b] = quantizeBlock64(codes[lo:lo+BlockSize], src[lo:lo+BlockSize], &e4m3, ElemE4M3, r)
	}
}

// QuantizeMXFP4 quantizes one row src to packed E2M1 codes (len(src)/2
// bytes, element 2j in the low nibble) and E8M0 scales under recipe r.
func QuantizeMXFP4(packed, scales []uint8, src []float32, r Recipe) {
	r.check()
	checkRow("QuantizeMXFP4", len(src), len(packed), len(scales), 2)
	for b := range scales {
		lo := b * BlockSize
		scales[b] = quantizeBlockE2M1((*[BlockSize / 2]uint8)(packed[lo/2:]), (*[BlockSize]float32)(src[lo:]), r)
	}
}

// QuantizeMXFP4Float64 is QuantizeMXFP4 for a float64 row.
func QuantizeMXFP4Float64(packed, scales []uint8, src []float64, r Recipe) {
	r.check()
	checkRow("QuantizeMXFP4Float64", len(src), len(packed), len(scales), 2)
	var codes [BlockSize]uint8
	for b := range scales {
		lo := b * BlockSize
		scales[b] = quantizeBlock64(codes[:], src[lo:lo+BlockSize], &e2m1, ElemE2M1, r)
		PackFP4(packed[lo/2:lo/2+BlockSize/2], codes[:])
	}
}

// PackFP4 packs 4-bit codes (low nibbles of codes) two per byte: codes[2j]
// in the low nibble of dst[j], codes[2j+1] in the high nibble.
func PackFP4(dst, codes []uint8) {
	if len(codes) != 2*len(dst) {
		panic(fmt.Sprintf("mxfp: PackFP4: %d codes into %d bytes", len(codes), len(dst)))
	}
	for j := range dst {
		dst[j] = codes[2*j]&0xF | codes[2*j+1]<<4
	}
}

// UnpackFP4 is the inverse of PackFP4.
func UnpackFP4(codes, src []uint8) {
	if len(codes) != 2*len(src) {
		panic(fmt.Sprintf("mxfp: UnpackFP4: %d bytes into %d codes", len(src), len(codes)))
	}
	for j, b := range src {
		codes[2*j], codes[2*j+1] = b&0xF, b>>4
	}
}

func scaleFloat64(s uint8) float64 {
	if s == E8M0NaN {
		return math.NaN()
	}
	return math.Ldexp(1, int(s)-127)
}

// DequantizeMXFP8Float64 writes the exact values of an MXFP8 row.
func DequantizeMXFP8Float64(dst []float64, codes, scales []uint8) {
	checkRow("DequantizeMXFP8Float64", len(dst), len(codes), len(scales), 1)
	for i, c := range codes {
		dst[i] = float64(e4m3Values[c]) * scaleFloat64(scales[i/BlockSize])
	}
}

// DequantizeMXFP8 writes an MXFP8 row as float32: exact, or ±Inf where the
// value overflows float32; NaN for NaN codes and 0xFF scales.
func DequantizeMXFP8(dst []float32, codes, scales []uint8) {
	checkRow("DequantizeMXFP8", len(dst), len(codes), len(scales), 1)
	for i, c := range codes {
		dst[i] = float32(float64(e4m3Values[c]) * scaleFloat64(scales[i/BlockSize]))
	}
}

// DequantizeMXFP4Float64 writes the exact values of a packed MXFP4 row.
func DequantizeMXFP4Float64(dst []float64, packed, scales []uint8) {
	checkRow("DequantizeMXFP4Float64", len(dst), len(packed), len(scales), 2)
	for j, b := range packed {
		s := scaleFloat64(scales[2*j/BlockSize])
		dst[2*j] = float64(e2m1Values[b&0xF]) * s
		dst[2*j+1] = float64(e2m1Values[b>>4]) * s
	}
}

// DequantizeMXFP4 writes a packed MXFP4 row as float32 (exact, or ±Inf on
// overflow, NaN for a 0xFF scale).
func DequantizeMXFP4(dst []float32, packed, scales []uint8) {
	checkRow("DequantizeMXFP4", len(dst), len(packed), len(scales), 2)
	for j, b := range packed {
		s := scaleFloat64(scales[2*j/BlockSize])
		dst[2*j] = float32(float64(e2m1Values[b&0xF]) * s)
		dst[2*j+1] = float32(float64(e2m1Values[b>>4]) * s)
	}
}
