// Package fp4 arranges the weights for the wgmma-fp4 path's kernels
// (backend/cuda/kernels/fp4_*.cu): MXFP4
// kept at 4 bits a weight in memory, widened to BF16 in registers and fed
// to wgmma as its register-sourced A operand, with the weights on the
// 64-row side and the tokens on the narrow side (8 to 128 wide).
//
// Layout, per expert, 64-row group and 64-k chunk: 2048 bytes of payload,
// thread tid of the warpgroup at bytes [16 tid, 16 tid + 16), four 32-bit
// words, word q for the chunk's k16 step q. Separately, the scales: one
// 4-byte word a quad (tid/4) a chunk, since the four threads of a quad hold
// the same two rows and the same two 32-k blocks (each scale stored once:
// 4.25 bits a weight in all), and the words of four consecutive chunks c
// (two 128-k steps) side by side, so one 16-byte load brings a quad two
// steps' scales: chunk c's word at byte ((c/4) 32 + tid/4) 16 + (c%4) 4 of
// the group, whose chunks are padded to a multiple of four (Chunks4).
// Stored a word a thread a chunk, the scales were 4x their size and one
// load a chunk. So a warp's loads are 512 bytes of
// payload and 128 of scales (every other step), each contiguous.
//
// Word q holds the wgmma A fragment's four registers j = 0..3, each two
// BF16 halves h (the PTX register-A map for BF16: thread tid = 32w + l,
// register j, half h hold row 16w + l/4 + 8(j&1), k 2(l%4) + h + 8(j>>1)
// of the 64 x 16 step). Each weight's E2M1 code (sign, e1 e0 m) sits in
// the word so that shifts and masks put its sign at bit 15 and its three
// magnitude bits at bits 8..6 of its BF16 half (bits 16h more; M =
// 0x81C081C0 selects those bits of both halves):
//
//	j=0: e1 e0 m at 8..6, sign 15              (q & M)
//	j=1: e1 e0 m at 2..0, sign 9               (q << 6 & M)
//	j=2: the j=0 field rotated right by 12     (q rotated left 12, & M)
//	j=3: e1 at 14, e0 5, m 4, sign 13          (q << 2 & 0x80C080C0 | q >> 6 & 0x01000100)
//
// Nine integer instructions a word. Why this placement: with shifts,
// rotations and three-input logic (one constant operand), a register's
// field costs a mask, plus a shift for each distinct shift it needs, plus
// a merge for each further part; an exhaustive search over every
// assignment of the 32 bits to the eight fields finds none under nine
// (no four shifts of M tile the word; TestF4PlacementMinimal), and the
// placement before this one took eleven (j=3 from three shifts).
//
// Those BF16 bits are the value E2M1 x 2^-126 exactly (code 1, 0.5, lands
// on the BF16 subnormal 2^-127; the others are normal), and one BF16
// multiply by 2^(s-1) makes it E2M1 x 2^(s-127), exactly, for every scale
// s from 0 to 128: 2^(s-1) is then a normal BF16 and the product is a
// BF16 value (the smallest, 2^-128, a subnormal). The scale byte stored
// is s + 126, the BF16 exponent field of 2^(s-1). Scales above 128 (a
// weight block of magnitude above 12) leave the layer without this path
// (Available); the other paths take it, exactly.
//
// Scale word of quad tid/4, chunk c: bytes [row r0 block 2c, r0 block
// 2c+1, r1 block 2c, r1 block 2c+1], r0 = 16w + l/4, r1 = r0 + 8.
package fp4

import (
	"fmt"
	"math/bits"

	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/internal/parallel"
	"kimimoe/moe"
)

const (
	// ChunkBytes is the payload of one 64-row group and 64-k chunk.
	ChunkBytes = 128 * 16
	// ChunkScales is its scale bytes: one word a quad (its four threads
	// share rows and blocks).
	ChunkScales = 32 * 4
)

// MaxScale is the largest E8M0 weight scale the widening takes exactly.
const MaxScale = 128

// Bits places one E2M1 code for register j, half h of a word.
func Bits(code uint8, j, h int) uint32 {
	mag, sign := uint32(code&7), uint32(code>>3)
	sh := uint(16 * h)
	switch j {
	case 0:
		return (mag<<6 | sign<<15) << sh
	case 1:
		return (mag | sign<<9) << sh
	case 2:
		return bits.RotateLeft32((mag<<6|sign<<15)<<sh, -12)
	}
	return ((mag>>2)<<14 | (mag>>1&1)<<5 | (mag&1)<<4 | sign<<13) << sh
}

// Element is the (row within the 64-row group, k within the 64-k chunk)
// of thread tid's word q, register j, half h.
func Element(tid, q, j, h int) (row, k int) {
	w, l := tid/32, tid%32
	return 16*w + l/4 + 8*(j&1), 16*q + 2*(l%4) + h + 8*(j>>1)
}

// Chunks4 is a group's chunk count for its scales: chunks padded to a
// multiple of four (zero words, never widened).
func Chunks4(chunks int) int { return (chunks + 3) &^ 3 }

// ScaleByte is byte i of the scale word of thread tid's quad, chunk c,
// within its group's scales.
func ScaleByte(tid, c, i int) int { return ((c/4)*32+tid/4)*16 + (c%4)*4 + i }

// arrange arranges one matrix set: e experts of srcRows rows of srcK
// elements (packed [e][srcRows][srcK/2], scales [e][srcRows][srcK/32]) as
// e x rows/64 x k/64 blocks (rows a multiple of 64, k of 128, at least the
// source's), group row r of group gi being source row rowOf(gi, r) of its
// expert, or -1 for a padding row. Padding rows and the k past srcK are
// zero weights (scale 2^0), which add nothing to any sum: the kernels run
// the padded shape exactly. It returns the payload and the scale bytes.
func arrange(packed, scales []uint8, e, srcRows, srcK, rows, k int, rowOf func(gi, r int) int) (payload, sc []uint8) {
	groups, chunks := rows/64, k/layout.ChunkK
	payload = make([]uint8, e*groups*chunks*ChunkBytes)
	chunks4 := Chunks4(chunks)
	sc = make([]uint8, e*groups*chunks4*ChunkScales)
	rowBytes, kbs := srcK/2, srcK/32
	parallel.For(e*groups, func(job int) { // job = expert * groups + group
		ex, gi := job/groups, job%groups
		sgrp := sc[job*chunks4*ChunkScales:]
		for c := range chunks {
			blk := payload[(job*chunks+c)*ChunkBytes:]
			for tid := range 128 {
				for q := range 4 {
					var word uint32
					for j := range 4 {
						for h := range 2 {
							r, kk := Element(tid, q, j, h)
							kk += c * layout.ChunkK
							sr := rowOf(gi, r)
							if sr < 0 || kk >= srcK {
								continue // a zero weight: code 0
							}
							two := packed[(ex*srcRows+sr)*rowBytes+kk/2]
							word |= Bits((two>>(4*(kk%2)))&0xF, j, h)
						}
					}
					o := 16*tid + 4*q
					blk[o], blk[o+1], blk[o+2], blk[o+3] = uint8(word), uint8(word>>8), uint8(word>>16), uint8(word>>24)
				}
			}
			for tid := 0; tid < 128; tid += 4 { // a word a quad: its threads share rows and blocks
				for i := range 4 {
					r, _ := Element(tid, 0, i>>1, 0)
					sr, blk := rowOf(gi, r), 2*c+(i&1)
					sb := uint8(127) // padding: 2^0
					if sr >= 0 && blk < kbs {
						sb = scales[(ex*srcRows+sr)*kbs+blk]
					}
					sgrp[ScaleByte(tid, c, i)] = sb + 126
				}
			}
		}
	})
	return payload, sc
}

// Row31 is FC1's row (of n up and n gate rows) for GEMM1's 64-row group
// gi, row r: group gi holds intermediate features [32 gi, 32 gi + 32),
// warp w (rows 16w..16w+15) eight of them, its rows 0..7 their up rows and
// 8..15 their gate rows, so each thread's two accumulator rows are the up
// and gate of one feature; -1 for a feature past n (padding).
func Row31(n int) func(gi, r int) int {
	return func(gi, r int) int {
		f := 32*gi + 8*(r/16) + r%8
		switch {
		case f >= n:
			return -1
		case r%16 < 8:
			return f
		}
		return n + f
	}
}

// Dims are the wgmma-fp4 GEMMs' K and N: the layer's, padded to the
// kernels' 128-k steps (GEMM2's 128-row CTAs) with zero weights.
func Dims(w *moe.Weights) (k, n int) { return layout.PadTo(w.K), layout.PadTo(w.N) }

// Available says why w cannot take the wgmma-fp4 path ("" if it can):
// every weight scale at most MaxScale. (K and N that are not multiples
// of 128 run padded: Dims.)
func Available(w *moe.Weights) string {
	for _, m := range []struct {
		name string
		s    []uint8
		rows int
		kbs  int
	}{{"w31", w.W31Scale, 2 * w.N, w.K / 32}, {"w2", w.W2Scale, w.K, w.N / 32}} {
		for i, s := range m.s {
			if s > MaxScale {
				per := m.rows * m.kbs
				return fmt.Sprintf("%s scale of expert %d row %d block %d is 2^%d, above the exact widening's 2^%d",
					m.name, i/per, i%per/m.kbs, i%m.kbs, int(s)-127, MaxScale-127)
			}
		}
	}
	return ""
}

// W31 and W2 arrange FC1 and FC2 for the wgmma-fp4 GEMMs, at the
// padded shape Dims (GEMM1's features past N and both GEMMs' k past K
// and N are zero weights).
func W31(w *moe.Weights) (payload, sc []uint8) {
	kp, np := Dims(w)
	return arrange(w.W31, w.W31Scale, w.E, 2*w.N, w.K, 2*np, kp, Row31(w.N))
}

func W2(w *moe.Weights) (payload, sc []uint8) {
	kp, np := Dims(w)
	return arrange(w.W2, w.W2Scale, w.E, w.K, w.N, kp, np, Row2(w.K))
}

// Row2 is FC2's row (of k) for GEMM2's group gi, row r; -1 past k.
func Row2(k int) func(gi, r int) int {
	return func(gi, r int) int {
		if r := 64*gi + r; r < k {
			return r
		}
		return -1
	}
}
