package moe

import (
	"fmt"

	"kimimoe/mxfp"
)

// FC1 layouts. kimimoe's (and FlashInfer's) FC1 weight is w31 = [up; gate]:
// rows 0..N-1 are up (w3), rows N..2N-1 gate (w1). Checkpoints store it in
// other ways; these functions convert, moving each row's scales with it.

// permuteRows returns dst with dst row i = src row from(i).
func permuteRows(src *mxfp.MXFP4Matrix, from func(int) int) *mxfp.MXFP4Matrix {
	dst := mxfp.NewMXFP4Matrix(src.Rows, src.Cols)
	for i := range dst.Rows {
		dp, ds := dst.Row(i)
		sp, ss := src.Row(from(i))
		copy(dp, sp)
		copy(ds, ss)
	}
	return dst
}

func checkEvenRows(op string, m *mxfp.MXFP4Matrix) {
	if m.Rows%2 != 0 {
		panic(fmt.Sprintf("moe: %s: %d rows is odd; gate and up need 2N rows", op, m.Rows))
	}
}

// W31FromKimi builds [up; gate] from a Kimi checkpoint's separate w1 (gate)
// and w3 (up) expert weights, each [N, K].
func W31FromKimi(w1Gate, w3Up *mxfp.MXFP4Matrix) *mxfp.MXFP4Matrix {
	if w1Gate.Rows != w3Up.Rows || w1Gate.Cols != w3Up.Cols {
		panic(fmt.Sprintf("moe: W31FromKimi: w1 [%d, %d] and w3 [%d, %d] differ", w1Gate.Rows, w1Gate.Cols, w3Up.Rows, w3Up.Cols))
	}
	n := w1Gate.Rows
	dst := mxfp.NewMXFP4Matrix(2*n, w1Gate.Cols)
	for i := range 2 * n {
		src, r := w3Up, i
		if i >= n {
			src, r = w1Gate, i-n
		}
		dp, ds := dst.Row(i)
		sp, ss := src.Row(r)
		copy(dp, sp)
		copy(ds, ss)
	}
	return dst
}

// W31FromGateUp converts contiguous [gate; up] (how SGLang loads Kimi's w1
// and w3 into w13) to [up; gate] by swapping the two halves.
func W31FromGateUp(w13 *mxfp.MXFP4Matrix) *mxfp.MXFP4Matrix {
	checkEvenRows("W31FromGateUp", w13)
	n := w13.Rows / 2
	return permuteRows(w13, func(i int) int { return (i + n) % (2 * n) })
}

// W31FromInterleaved converts GPT-OSS's interleaved rows [g0, u0, g1, u1,
// ...] to [up; gate]: the odd rows (up) then the even rows (gate). Applied
// to Kimi's contiguous [gate; up] it scrambles gate and up: the SM120 work's bug.
func W31FromInterleaved(w *mxfp.MXFP4Matrix) *mxfp.MXFP4Matrix {
	checkEvenRows("W31FromInterleaved", w)
	n := w.Rows / 2
	return permuteRows(w, func(i int) int {
		if i < n {
			return 2*i + 1
		}
		return 2 * (i - n)
	})
}
