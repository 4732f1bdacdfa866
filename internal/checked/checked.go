// Package checked multiplies sizes without silent overflow: a product of
// user-given sizes (parallel degrees, token counts, shapes) that does not
// fit an int is an input error, not a wrapped-around value.
package checked

import "math/bits"

// Mul returns the product of non-negative factors and whether it fits in
// an int (false for a negative factor too).
func Mul(factors ...int) (int, bool) {
	p := uint64(1)
	for _, f := range factors {
		if f < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(p, uint64(f))
		if hi != 0 || lo > uint64(maxInt) {
			return 0, false
		}
		p = lo
	}
	return int(p), true
}

const maxInt = int(^uint(0) >> 1)
