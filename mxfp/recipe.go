package mxfp

import (
	"fmt"
	"math"
	"math/big"
)

// Recipe chooses how a block's E8M0 scale follows from its amax. The zero
// value is not a recipe; functions given it panic.
type Recipe uint8

const (
	// RecipeFloor is OCP MX v1.0: X = floor(log2 amax) - emax.
	RecipeFloor Recipe = iota + 1
	// RecipeRCeil is NVIDIA's: the smallest X with amax / 2^X <= maxpos.
	RecipeRCeil
	// RecipeRound is a mistake seen in the wild, kept for check's diagnosis
	// and not for use: X = log2(amax / maxpos) rounded to the nearest
	// integer, which leaves amax / 2^X up to sqrt(2) x maxpos, so about
	// half of all blocks clip (MLX #4353). ParseRecipe does not accept it.
	RecipeRound
)

// String returns "floor", "rceil" or "round".
func (r Recipe) String() string {
	switch r {
	case RecipeFloor:
		return "floor"
	case RecipeRCeil:
		return "rceil"
	case RecipeRound:
		return "round"
	}
	return fmt.Sprintf("Recipe(%d)", uint8(r))
}

// ParseRecipe accepts "floor" and "rceil".
func ParseRecipe(s string) (Recipe, error) {
	switch s {
	case "floor":
		return RecipeFloor, nil
	case "rceil":
		return RecipeRCeil, nil
	}
	return 0, fmt.Errorf("mxfp: unknown recipe %q (want floor or rceil)", s)
}

func (r Recipe) check() {
	if r != RecipeFloor && r != RecipeRCeil && r != RecipeRound {
		panic(fmt.Sprintf("mxfp: invalid recipe %d", uint8(r)))
	}
}

// Element names an MX element format.
type Element uint8

const (
	ElemE4M3 Element = iota + 1 // MXFP8
	ElemE2M1                    // MXFP4
)

func (e Element) maxPos() float64 {
	if e == ElemE2M1 {
		return MaxE2M1
	}
	return MaxE4M3
}

// emax is the exponent of the largest power of two not above maxPos.
func (e Element) emax() int {
	if e == ElemE2M1 {
		return 2
	}
	return 8
}

// ScaleExponent returns the block scale exponent X (scale byte X + 127) for
// a block of element format e whose largest finite |v| is amax >= 0, under
// recipe r, clamped to [-127, 127]. amax = 0 gives -127; amax = +Inf gives
// 127 (the rceil rule for infinities; floor callers handle non-finite blocks
// before asking). It is exact: it works on the binary exponent and mantissa
// of amax, with no logarithm or reciprocal.
func ScaleExponent(amax float64, e Element, r Recipe) int {
	r.check()
	if amax == 0 {
		return -127
	}
	if math.IsInf(amax, 1) {
		return 127
	}
	frac, exp := math.Frexp(amax) // amax = frac * 2^exp, frac in [0.5, 1)
	var x int
	switch r {
	case RecipeFloor:
		x = exp - 1 - e.emax()
	case RecipeRound:
		// log2(amax / maxpos) = exp - me + log2(frac / mf), whose last term
		// lies in [log2(0.5 / mf), log2(1 / mf)), within (-1, 0.5) for E4M3
		// (mf 0.875) and E2M1 (0.75): it rounds to -1 where frac / mf <
		// 2^-0.5, that is frac^2 < mf^2 / 2, compared exactly.
		mf, me := math.Frexp(e.maxPos())
		x = exp - me
		if belowHalfSquare(frac, mf) {
			x--
		}
	default:
		mf, me := math.Frexp(e.maxPos())
		// amax / 2^X <= mf * 2^me  <=>  frac * 2^(exp-X) <= mf * 2^me.
		x = exp - me
		if frac > mf {
			x++
		}
	}
	return min(max(x, -127), 127)
}

// belowHalfSquare reports whether a^2 < b^2 / 2, exactly (both squares
// carry 106 significant bits at most, which 128-bit floats hold).
func belowHalfSquare(a, b float64) bool {
	x := new(big.Float).SetPrec(128).SetFloat64(a)
	y := new(big.Float).SetPrec(128).SetFloat64(b)
	x.Mul(x, x)
	y.Mul(y, y)
	y.Quo(y, big.NewFloat(2))
	return x.Cmp(y) < 0
}
