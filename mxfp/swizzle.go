package mxfp

import "fmt"

// Swizzled128x4Len is the byte length of the swizzled layout for a linear
// [rows, scaleCols] scale matrix: rows padded to 128, columns to 4.
func Swizzled128x4Len(rows, scaleCols int) int {
	return roundUp(rows, 128) * roundUp(scaleCols, 4)
}

// Swizzled128x4Offset is where scale (m, k) of a matrix with scaleCols scale
// columns lives in the swizzled layout.
func Swizzled128x4Offset(m, k, scaleCols int) int {
	nK := roundUp(scaleCols, 4) / 4
	return (m/128)*(nK*512) + (k/4)*512 + (m%32)*16 + ((m%128)/32)*4 + k%4
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func checkSwizzle(op string, linear, swizzled, rows, scaleCols int) {
	if rows < 0 || scaleCols < 0 || linear != rows*scaleCols || swizzled != Swizzled128x4Len(rows, scaleCols) {
		panic(fmt.Sprintf("mxfp: %s: [%d, %d] scales need %d linear and %d swizzled bytes, have %d and %d",
			op, rows, scaleCols, rows*scaleCols, Swizzled128x4Len(rows, scaleCols), linear, swizzled))
	}
}

// SwizzleScales128x4 converts linear [rows, scaleCols] scales to
// FlashInfer's 128x4 swizzled layout. Padding bytes are written as 0.
func SwizzleScales128x4(dst, src []uint8, rows, scaleCols int) {
	checkSwizzle("SwizzleScales128x4", len(src), len(dst), rows, scaleCols)
	clear(dst)
	for m := range rows {
		for k := range scaleCols {
			dst[Swizzled128x4Offset(m, k, scaleCols)] = src[m*scaleCols+k]
		}
	}
}

// UnswizzleScales128x4 is the inverse of SwizzleScales128x4; padding is
// dropped.
func UnswizzleScales128x4(dst, src []uint8, rows, scaleCols int) {
	checkSwizzle("UnswizzleScales128x4", len(dst), len(src), rows, scaleCols)
	for m := range rows {
		for k := range scaleCols {
			dst[m*scaleCols+k] = src[Swizzled128x4Offset(m, k, scaleCols)]
		}
	}
}
