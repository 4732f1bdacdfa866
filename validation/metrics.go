package validation

import (
	"encoding/json"
	"fmt"
	"math"

	"gonum.org/v1/gonum/floats"
)

// Metrics compares an output with a reference of the same length.
//
//	Cosine   sum(g*r) / (|g| |r|) over elements where both are finite (1 if both are all zero)
//	NRMSE    |g - r| / |r|, the RMS error over the reference's RMS (the SM120 work's "NRMSE")
//	MaxAbs   max |g - r|;  MeanAbs  mean |g - r|   (finite pairs)
//	NonFiniteMismatch  elements where exactly one side is non-finite, or both
//	         are but differ (NaN vs Inf, or infinities of opposite sign)
//	Bitwise  every element has the same bits (after widening float32 to float64)
type Metrics struct {
	N                 int
	Cosine, NRMSE     float64
	MaxAbs, MeanAbs   float64
	NonFiniteMismatch int
	Bitwise           bool
}

// Compare computes the metrics of got against ref. Lengths must match: a
// mismatch is a programmer error and panics (so do AllClose's), with a
// "validation:" message. Sums over the finite pairs are gonum's (floats):
// norms are computed with scaling, so huge values do not overflow.
func Compare(got, ref []float64) Metrics {
	mustSameLength("Compare", got, ref)
	m := Metrics{N: len(ref), Bitwise: true}
	gf := make([]float64, 0, len(got))
	rf := make([]float64, 0, len(ref))
	for i, g := range got {
		r := ref[i]
		if math.Float64bits(g) != math.Float64bits(r) {
			m.Bitwise = false
		}
		gFinite, rFinite := !math.IsNaN(g) && !math.IsInf(g, 0), !math.IsNaN(r) && !math.IsInf(r, 0)
		if !gFinite || !rFinite {
			same := !gFinite && !rFinite && (math.IsNaN(g) && math.IsNaN(r) || g == r)
			if !same {
				m.NonFiniteMismatch++
			}
			continue
		}
		gf, rf = append(gf, g), append(rf, r)
	}
	if len(gf) == 0 {
		m.Cosine = 1
		return m
	}
	gn, rn := floats.Norm(gf, 2), floats.Norm(rf, 2)
	switch {
	case gn == 0 && rn == 0:
		m.Cosine = 1
	case gn == 0 || rn == 0:
		m.Cosine = 0
	default:
		m.Cosine = floats.Dot(gf, rf) / gn / rn
		if math.IsInf(m.Cosine, 0) || math.IsNaN(m.Cosine) { // the dot product overflowed: use unit vectors
			gu, ru := make([]float64, len(gf)), make([]float64, len(rf))
			floats.ScaleTo(gu, 1/gn, gf)
			floats.ScaleTo(ru, 1/rn, rf)
			m.Cosine = floats.Dot(gu, ru)
		}
	}
	dist := floats.Distance(gf, rf, 2)
	switch {
	case rn > 0:
		m.NRMSE = dist / rn
	case dist > 0:
		m.NRMSE = math.Inf(1)
	}
	m.MaxAbs = floats.Distance(gf, rf, math.Inf(1))
	m.MeanAbs = floats.Distance(gf, rf, 1) / float64(len(gf))
	return m
}

func mustSameLength(fn string, got, ref []float64) {
	if len(got) != len(ref) {
		panic(fmt.Sprintf("validation: %s: got has %d values, ref %d", fn, len(got), len(ref)))
	}
}

// Widen converts float32 values to float64.
func Widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// AllClose reports whether |g - r| <= atol + rtol*|r| for every element
// (NaN only matching NaN, infinities only the same infinity), and the index
// of the first element that is not, or -1. It panics if the lengths
// differ, as Compare does.
func AllClose(got, ref []float64, rtol, atol float64) (bool, int) {
	mustSameLength("AllClose", got, ref)
	for i, g := range got {
		r := ref[i]
		switch {
		case math.IsNaN(g) || math.IsNaN(r):
			if !(math.IsNaN(g) && math.IsNaN(r)) {
				return false, i
			}
		case math.IsInf(g, 0) || math.IsInf(r, 0):
			if g != r {
				return false, i
			}
		case math.Abs(g-r) > atol+float64(rtol*math.Abs(r)):
			return false, i
		}
	}
	return true, -1
}

// String formats the metrics on one line.
func (m Metrics) String() string {
	s := fmt.Sprintf("cos %.7f nrmse %.3g maxabs %.3g meanabs %.3g", m.Cosine, m.NRMSE, m.MaxAbs, m.MeanAbs)
	if m.NonFiniteMismatch > 0 {
		s += fmt.Sprintf(" nonfinite-mismatch %d", m.NonFiniteMismatch)
	}
	if m.Bitwise {
		s += " bitwise"
	}
	return s
}

// MarshalJSON writes the metrics with snake_case keys; a non-finite value
// (NRMSE against an all-zero reference) is written as the string "+Inf",
// "-Inf" or "NaN", since JSON has no such numbers.
func (m Metrics) MarshalJSON() ([]byte, error) {
	num := func(v float64) any {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return fmt.Sprint(v)
		}
		return v
	}
	return json.Marshal(map[string]any{
		"n": m.N, "cosine": num(m.Cosine), "nrmse": num(m.NRMSE), "max_abs": num(m.MaxAbs),
		"mean_abs": num(m.MeanAbs), "nonfinite_mismatch": m.NonFiniteMismatch, "bitwise": m.Bitwise,
	})
}
