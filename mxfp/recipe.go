package mxfp

import (
	"fmt"
	"math"
)

// Recipe chooses how a block's E8M0 scale follows from its amax. The zero
// value is not a recipe; functions given it panic.
type Recipe uint8

const (
	// RecipeFloor is OCP MX v1.0: X = floor(log2 amax) - emax.
	RecipeFloor Recipe = iota + 1
	// RecipeRCeil is NVIDIA's: the smallest X with amax / 2^X <= maxpos.
	RecipeRCeil
)

// String returns "floor" or "rceil".
func (r Recipe) String() string {
	switch r {
	case RecipeFloor:
		return "floor"
	case RecipeRCeil:
		return "rceil"
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
	if r != RecipeFloor && r != RecipeRCeil {
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
	if r == RecipeFloor {
		x = exp - 1 - e.emax()
	} else {
		mf, me := math.Frexp(e.maxPos())
		// amax / 2^X <= mf * 2^me  <=>  frac * 2^(exp-X) <= mf * 2^me.
		x = exp - me
		if frac > mf {
			x++
		}
	}
	return min(max(x, -127), 127)
}
