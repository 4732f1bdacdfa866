package mxfp

import "fmt"

// MXFP8Matrix is a [Rows, Cols] MXFP8 matrix: E4M3 codes row-major and
// E8M0 scales [Rows, Cols/32] in the linear layout.
type MXFP8Matrix struct {
	Rows, Cols int
	Codes      []uint8 // Rows*Cols
	Scales     []uint8 // Rows*Cols/32
}

// MXFP4Matrix is a [Rows, Cols] MXFP4 matrix: packed E2M1 codes row-major
// (Cols/2 bytes a row, element 2j in the low nibble) and E8M0 scales
// [Rows, Cols/32].
type MXFP4Matrix struct {
	Rows, Cols int
	Packed     []uint8 // Rows*Cols/2
	Scales     []uint8 // Rows*Cols/32
}

func checkDims(op string, rows, cols int) {
	if rows < 0 || cols < 0 || cols%BlockSize != 0 {
		panic(fmt.Sprintf("mxfp: %s: bad shape [%d, %d] (cols must be a multiple of %d)", op, rows, cols, BlockSize))
	}
}

// NewMXFP8Matrix allocates a zeroed [rows, cols] matrix.
func NewMXFP8Matrix(rows, cols int) *MXFP8Matrix {
	checkDims("NewMXFP8Matrix", rows, cols)
	return &MXFP8Matrix{Rows: rows, Cols: cols, Codes: make([]uint8, rows*cols), Scales: make([]uint8, rows*cols/BlockSize)}
}

// NewMXFP4Matrix allocates a zeroed [rows, cols] matrix.
func NewMXFP4Matrix(rows, cols int) *MXFP4Matrix {
	checkDims("NewMXFP4Matrix", rows, cols)
	return &MXFP4Matrix{Rows: rows, Cols: cols, Packed: make([]uint8, rows*cols/2), Scales: make([]uint8, rows*cols/BlockSize)}
}

func checkSrc(op string, n, rows, cols int) {
	if n != rows*cols {
		panic(fmt.Sprintf("mxfp: %s: %d elements for a [%d, %d] matrix", op, n, rows, cols))
	}
}

// Row returns views of row i's codes and scales.
func (m *MXFP8Matrix) Row(i int) (codes, scales []uint8) {
	sc := m.Cols / BlockSize
	return m.Codes[i*m.Cols : (i+1)*m.Cols], m.Scales[i*sc : (i+1)*sc]
}

// Quantize fills m from row-major src (Rows*Cols values) under recipe r.
func (m *MXFP8Matrix) Quantize(src []float32, r Recipe) {
	checkSrc("MXFP8Matrix.Quantize", len(src), m.Rows, m.Cols)
	for i := range m.Rows {
		c, s := m.Row(i)
		QuantizeMXFP8(c, s, src[i*m.Cols:(i+1)*m.Cols], r)
	}
}

// Dequantize writes m's values, row-major, into dst (float32; see
// DequantizeMXFP8).
func (m *MXFP8Matrix) Dequantize(dst []float32) {
	checkSrc("MXFP8Matrix.Dequantize", len(dst), m.Rows, m.Cols)
	for i := range m.Rows {
		c, s := m.Row(i)
		DequantizeMXFP8(dst[i*m.Cols:(i+1)*m.Cols], c, s)
	}
}

// Row returns views of row i's packed codes and scales.
func (m *MXFP4Matrix) Row(i int) (packed, scales []uint8) {
	sc, pc := m.Cols/BlockSize, m.Cols/2
	return m.Packed[i*pc : (i+1)*pc], m.Scales[i*sc : (i+1)*sc]
}

// Quantize fills m from row-major src (Rows*Cols values) under recipe r.
func (m *MXFP4Matrix) Quantize(src []float32, r Recipe) {
	checkSrc("MXFP4Matrix.Quantize", len(src), m.Rows, m.Cols)
	for i := range m.Rows {
		p, s := m.Row(i)
		QuantizeMXFP4(p, s, src[i*m.Cols:(i+1)*m.Cols], r)
	}
}

// Dequantize writes m's values, row-major, into dst.
func (m *MXFP4Matrix) Dequantize(dst []float32) {
	checkSrc("MXFP4Matrix.Dequantize", len(dst), m.Rows, m.Cols)
	for i := range m.Rows {
		p, s := m.Row(i)
		DequantizeMXFP4(dst[i*m.Cols:(i+1)*m.Cols], p, s)
	}
}
