package moe

import (
	"math"
	"sync"
	"unsafe"

	"kimimoe/mxfp"
)

// The oracle's integer arithmetic: E2M1 codes decoded per expert, MXFP8
// rows as integers, and the exact 32-block dot products.

// decodeTable holds one weight matrix's E2M1 codes (FC1's or FC2's)
// decoded to int8 at twice their value, per expert, each decoded on first
// use.
type decodeTable struct {
	packed []uint8 // all experts' codes, per bytes an expert
	per    int
	once   []sync.Once
	dec    [][]int8 // per expert; nil until decoded
}

func newDecodeTable(packed []uint8, experts int) *decodeTable {
	return &decodeTable{packed: packed, per: len(packed) / experts, once: make([]sync.Once, experts), dec: make([][]int8, experts)}
}

// expert returns expert e's decoded codes, decoding them once.
func (d *decodeTable) expert(e int) []int8 {
	d.once[e].Do(func() {
		d.dec[e] = make([]int8, 2*d.per)
		decodeFP4(d.dec[e], d.packed[e*d.per:(e+1)*d.per])
	})
	return d.dec[e]
}

// derive returns d when packed holds d's codes (the same slice), else a
// new table.
func (d *decodeTable) derive(packed []uint8, experts int) *decodeTable {
	if len(d.dec) == experts && sameSlice(packed, d.packed) {
		return d
	}
	return newDecodeTable(packed, experts)
}

// e2m1Pair[b] is packed byte b's two E2M1 codes at twice their value,
// low nibble first, as the two int8s that one uint16 store writes in this
// machine's byte order.
var e2m1Pair = func() (t [256]uint16) {
	for b := range 256 {
		p := [2]int8{int8(2 * mxfp.DecodeE2M1(uint8(b&0xF))), int8(2 * mxfp.DecodeE2M1(uint8(b>>4)))}
		t[b] = *(*uint16)(unsafe.Pointer(&p))
	}
	return
}()

// decodeFP4 writes the 2*len(packed) codes of packed to dst at twice their
// value, element 2j from byte j's low nibble. One table load and one
// two-byte store a byte run about 2.5x faster than a nibble at a time.
func decodeFP4(dst []int8, packed []uint8) {
	if len(packed) == 0 {
		return
	}
	d := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[:2*len(packed)][0])), len(packed))
	for j, b := range packed {
		d[j] = e2m1Pair[b]
	}
}

// e4m3Times512[c] is 512 * the value of E4M3 code c (0 for NaN codes, which
// are flagged separately).
var e4m3Times512 = func() (t [256]int32) {
	for c := range 256 {
		if v := mxfp.DecodeE4M3(uint8(c)); v == v {
			t[c] = int32(v * 512)
		}
	}
	return
}()

// pow2 scale multipliers: scaleX[s] = 2^(s-127) / 512 for activations,
// scaleW[s] = 2^(s-127) / 2 for weights; NaN for the NaN byte 0xFF.
var scaleX, scaleW = func() (x, w [256]float64) {
	for s := range 256 {
		if s == 0xFF {
			x[s], w[s] = math.NaN(), math.NaN()
			continue
		}
		x[s], w[s] = math.Ldexp(1, s-127-9), math.Ldexp(1, s-127-1)
	}
	return
}()

// qrow is an MXFP8 row decoded for the integer dot product.
type qrow struct {
	v     []int32   // [n] E4M3 value * 512
	scale []float64 // [n/32] block multiplier 2^(X-9), NaN for a NaN block
}

func newQRow(n int) qrow { return qrow{v: make([]int32, n), scale: make([]float64, n/32)} }

func (q qrow) set(codes, scales []uint8) {
	for i, c := range codes {
		q.v[i] = e4m3Times512[c]
	}
	for b, s := range scales {
		m := scaleX[s]
		for _, c := range codes[b*32 : b*32+32] {
			if c&0x7F == 0x7F {
				m = math.NaN() // a NaN element makes its block's products NaN
			}
		}
		q.scale[b] = m
	}
}

// dot32 is the exact int32 dot product of one 32-block. It is written out
// in full: the Go compiler does not unroll loops, and the unrolled sum
// runs about 1.5x faster; integer sums are exact in any order.
func dot32(w *[32]int8, x *[32]int32) int32 {
	return int32(w[0])*x[0] + int32(w[1])*x[1] + int32(w[2])*x[2] + int32(w[3])*x[3] +
		int32(w[4])*x[4] + int32(w[5])*x[5] + int32(w[6])*x[6] + int32(w[7])*x[7] +
		int32(w[8])*x[8] + int32(w[9])*x[9] + int32(w[10])*x[10] + int32(w[11])*x[11] +
		int32(w[12])*x[12] + int32(w[13])*x[13] + int32(w[14])*x[14] + int32(w[15])*x[15] +
		int32(w[16])*x[16] + int32(w[17])*x[17] + int32(w[18])*x[18] + int32(w[19])*x[19] +
		int32(w[20])*x[20] + int32(w[21])*x[21] + int32(w[22])*x[22] + int32(w[23])*x[23] +
		int32(w[24])*x[24] + int32(w[25])*x[25] + int32(w[26])*x[26] + int32(w[27])*x[27] +
		int32(w[28])*x[28] + int32(w[29])*x[29] + int32(w[30])*x[30] + int32(w[31])*x[31]
}

// dotRow is one GEMM output: sum over blocks of dot32 * both scales.
func dotRow(w []int8, wScales []uint8, x qrow) float64 {
	acc := 0.0
	for b, s := range wScales {
		d := dot32((*[32]int8)(w[b*32:]), (*[32]int32)(x.v[b*32:]))
		acc += float64(float64(d) * scaleW[s] * x.scale[b]) // float64(): no fused multiply-add (arm64)
	}
	return acc
}

// packPairs lays rows out two at a time: element i of pair q is
// rows[2q].v[i] + rows[2q+1].v[i] * 2^32, so that one 64-bit multiply-add
// serves both (dotRows). An odd last row is left to dotRow.
func packPairs(rows []qrow) [][]int64 {
	packed := make([][]int64, len(rows)/2)
	for q := range packed {
		x0, x1 := rows[2*q].v, rows[2*q+1].v
		packed[q] = make([]int64, len(x0))
		for i := range x0 {
			packed[q][i] = int64(x0[i]) + int64(x1[i])<<32
		}
	}
	return packed
}

// dotRows writes dst[p] = dotRow(w, wScales, rows[p]) for every p, two rows
// at a time through packed (packPairs(rows)): the same sums in the same
// order.
func dotRows(dst []float64, w []int8, wScales []uint8, rows []qrow, packed [][]int64) {
	for q, x := range packed {
		dst[2*q], dst[2*q+1] = dotRow2(w, wScales, x, rows[2*q].scale, rows[2*q+1].scale)
	}
	if last := len(rows) - 1; len(rows)%2 == 1 {
		dst[last] = dotRow(w, wScales, rows[last])
	}
}

// dot32x2 is dot32 of one weight block with two packed x rows. The two
// int32 sums ride in one int64, S = L + H * 2^32, exactly: |L| and |H| stay
// below 2^27 (dot32's bound), so L is S's low 32 bits read as signed and
// H is (S - L) / 2^32.
func dot32x2(w *[32]int8, x *[32]int64) (int32, int32) {
	s := int64(w[0])*x[0] + int64(w[1])*x[1] + int64(w[2])*x[2] + int64(w[3])*x[3] +
		int64(w[4])*x[4] + int64(w[5])*x[5] + int64(w[6])*x[6] + int64(w[7])*x[7] +
		int64(w[8])*x[8] + int64(w[9])*x[9] + int64(w[10])*x[10] + int64(w[11])*x[11] +
		int64(w[12])*x[12] + int64(w[13])*x[13] + int64(w[14])*x[14] + int64(w[15])*x[15] +
		int64(w[16])*x[16] + int64(w[17])*x[17] + int64(w[18])*x[18] + int64(w[19])*x[19] +
		int64(w[20])*x[20] + int64(w[21])*x[21] + int64(w[22])*x[22] + int64(w[23])*x[23] +
		int64(w[24])*x[24] + int64(w[25])*x[25] + int64(w[26])*x[26] + int64(w[27])*x[27] +
		int64(w[28])*x[28] + int64(w[29])*x[29] + int64(w[30])*x[30] + int64(w[31])*x[31]
	lo := int32(s)
	return lo, int32((s - int64(lo)) >> 32)
}

// dotRow2 is dotRow for the two x rows packed in x (packPairs), whose block
// multipliers are sc0 and sc1: the same sums in the same order.
func dotRow2(w []int8, wScales []uint8, x []int64, sc0, sc1 []float64) (float64, float64) {
	acc0, acc1 := 0.0, 0.0
	for b, s := range wScales {
		d0, d1 := dot32x2((*[32]int8)(w[b*32:]), (*[32]int64)(x[b*32:]))
		acc0 += float64(float64(d0) * scaleW[s] * sc0[b]) // float64(): no fused multiply-add (arm64)
		acc1 += float64(float64(d1) * scaleW[s] * sc1[b])
	}
	return acc0, acc1
}

// dotRowFloat is dotRow for a float64 activation row (exact chain GEMM2).
func dotRowFloat(w []int8, wScales []uint8, a []float64) float64 {
	acc := 0.0
	for b, s := range wScales {
		blk := 0.0
		for i, v := range w[b*32 : b*32+32] {
			blk += float64(float64(v) * a[b*32+i])
		}
		acc += float64(blk * scaleW[s])
	}
	return acc
}
