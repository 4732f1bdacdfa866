package validation

import (
	"fmt"
	"math"
)

// Metrics compares an output with a reference of the same length.
//
//	Cosine   sum(g*r) / (|g| |r|) over elements where both are finite (1 if both are all zero)
//	NRMSE    |g - r| / |r|, the RMS error over the reference's RMS (the seed's "NRMSE")
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

// Compare computes the metrics of got against ref. It panics if the lengths
// differ.
func Compare(got, ref []float64) Metrics {
	if len(got) != len(ref) {
		panic(fmt.Sprintf("moe: Compare: %d values against %d", len(got), len(ref)))
	}
	m := Metrics{N: len(ref), Bitwise: true}
	var dot, gg, rr, dd, sumAbs float64
	finite := 0
	for i, g := range got {
		r := ref[i]
		if math.Float64bits(g) != math.Float64bits(r) {
			m.Bitwise = false
		}
		gf, rf := !math.IsNaN(g) && !math.IsInf(g, 0), !math.IsNaN(r) && !math.IsInf(r, 0)
		if !gf || !rf {
			same := !gf && !rf && (math.IsNaN(g) && math.IsNaN(r) || g == r)
			if !same {
				m.NonFiniteMismatch++
			}
			continue
		}
		finite++
		d := g - r
		dot += float64(g * r) // float64(): the same sums on every GOARCH (no FMA)
		gg += float64(g * g)
		rr += float64(r * r)
		dd += float64(d * d)
		sumAbs += math.Abs(d)
		m.MaxAbs = math.Max(m.MaxAbs, math.Abs(d))
	}
	switch {
	case gg == 0 && rr == 0:
		m.Cosine = 1
	case gg == 0 || rr == 0:
		m.Cosine = 0
	default:
		m.Cosine = dot / math.Sqrt(gg) / math.Sqrt(rr)
	}
	switch {
	case rr > 0:
		m.NRMSE = math.Sqrt(dd / rr)
	case dd > 0:
		m.NRMSE = math.Inf(1)
	}
	if finite > 0 {
		m.MeanAbs = sumAbs / float64(finite)
	}
	return m
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
// of the first element that is not, or -1.
func AllClose(got, ref []float64, rtol, atol float64) (bool, int) {
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
