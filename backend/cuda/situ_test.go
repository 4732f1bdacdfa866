package cuda

import (
	"errors"
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
)

// The polynomial part of the kernels' SiTU tanh: situTanhC within 2.8e-9
// relative of math.Tanh on (0, situTanhReach], the coefficients what
// fitTanh makes (so their source is this file), and situ_poly's float32
// evaluation (emulated: each fma rounded once from float64, exact for
// these operands' products) within one ulp of beta tanh(x / beta) for
// Kimi-K3's betas and the extremes checkSitu admits. A coefficient
// mistyped, a power of beta off by one or a reach past the fit's shows.
func TestSituTanhFit(t *testing.T) {
	var worst float64
	for z := 1e-4; z <= situTanhReach; z += 1e-6 {
		worst = math.Max(worst, math.Abs(tanhPoly(situTanhC, z)-math.Tanh(z))/math.Tanh(z))
	}
	if worst > 2.8e-9 {
		t.Errorf("the fit is %.3g relative from tanh, want at most 2.8e-9", worst)
	}
	refit := fitTanh()
	for i := range refit {
		if d := math.Abs(refit[i] - situTanhC[i]); d > 1e-6*math.Abs(situTanhC[i]) {
			t.Errorf("c_%d = %.17g, the fit gives %.17g", i, situTanhC[i], refit[i])
		}
	}
	fma32 := func(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }
	for _, beta := range []float64{4, 25, 1, 2.5, situBetaMin, situBetaMax} {
		c := situTanh(beta)
		var q [5]float32
		for i := range q {
			q[i] = float32(c.q[i])
		}
		var maxUlp float64
		for z := 1e-6; z <= situTanhReach; z *= 1 + 1.0/8192 {
			x := float32(z * beta)
			s := x * x
			r := fma32(fma32(fma32(fma32(q[4], s, q[3]), s, q[2]), s, q[1]), s, q[0])
			got := fma32(x*s, r, x)
			ref := beta * math.Tanh(float64(x)/beta)
			maxUlp = math.Max(maxUlp, math.Abs(float64(got)-ref)/ulpOf(ref))
		}
		if maxUlp > 1 {
			t.Errorf("beta %g: the float32 polynomial is %.2f ulps from beta tanh(x / beta), want at most 1", beta, maxUlp)
		}
		if e := float32(c.edge); e != float32(situTanhReach*beta) || float32(c.ex) != float32(-2*math.Log2E/beta) {
			t.Errorf("beta %g: edge %g, ex %g", beta, c.edge, c.ex)
		}
	}
}

func tanhPoly(c [5]float64, z float64) float64 {
	s := z * z
	return z + z*s*(c[0]+s*(c[1]+s*(c[2]+s*(c[3]+s*c[4]))))
}

// fitTanh is the minimax fit of tanh's relative error by Lawson's
// iteration: weighted least squares over 4000 points of (0, reach],
// denser at the ends, each weight then scaled by its point's error.
func fitTanh() [5]float64 {
	const n = 4000
	zs, lam := make([]float64, n), make([]float64, n)
	for j := range zs {
		zs[j] = 1e-3 + (situTanhReach-1e-3)*(1-math.Cos(math.Pi*float64(j)/(n-1)))/2
		lam[j] = 1
	}
	// (tanh z - z) / z^3, by its series where the difference cancels.
	target := func(z float64) float64 {
		s := z * z
		if z < 0.02 {
			return -1.0/3 + s*(2.0/15+s*(-17.0/315+s*(62.0/2835-s*1382.0/155925)))
		}
		return (math.Tanh(z) - z) / (z * s)
	}
	var c [5]float64
	for range 200 {
		a, rhs := mat.NewDense(n, 5, nil), mat.NewVecDense(n, nil)
		for j, z := range zs {
			s := z * z
			w := z * s / math.Tanh(z) * math.Sqrt(lam[j])
			for i, p := 0, 1.0; i < 5; i, p = i+1, p*s {
				a.Set(j, i, w*p)
			}
			rhs.SetVec(j, w*target(z))
		}
		var x mat.VecDense
		if err := x.SolveVec(a, rhs); err != nil {
			panic(err)
		}
		for i := range c {
			c[i] = x.AtVec(i)
		}
		var tot float64
		for j, z := range zs {
			lam[j] *= math.Abs(tanhPoly(c, z)-math.Tanh(z)) / math.Tanh(z)
			tot += lam[j]
		}
		for j := range lam {
			lam[j] /= tot
		}
	}
	return c
}

// checkSitu takes the betas whose constants stay normal floats and refuses
// the others (and NaN) with ErrUnsupported naming the parameter.
func TestCheckSitu(t *testing.T) {
	spec := func(b, lb float64) moe.LayerSpec {
		p := activation.DefaultParams()
		p.SituBeta, p.SituLinearBeta = b, lb
		return moe.LayerSpec{Activation: activation.Situ, Params: []activation.Params{activation.DefaultParams(), p}}
	}
	for _, ok := range [][2]float64{{4, 25}, {situBetaMin, situBetaMax}, {1, 1}} {
		if err := checkSitu(spec(ok[0], ok[1])); err != nil {
			t.Errorf("betas %v: %v", ok, err)
		}
	}
	for _, bad := range [][2]float64{{situBetaMin / 2, 25}, {4, situBetaMax * 2}, {math.NaN(), 25}, {4, math.Inf(1)}} {
		err := checkSitu(spec(bad[0], bad[1]))
		if !errors.Is(err, backend.ErrUnsupported) {
			t.Errorf("betas %v: %v, want ErrUnsupported", bad, err)
		} else {
			t.Log(err)
		}
	}
	s := spec(1e-9, 1e9)
	s.Activation = activation.Swiglu
	if err := checkSitu(s); err != nil {
		t.Errorf("swiglu with unused SiTU betas: %v", err)
	}
}

// ulpOf is the spacing of float32 values at |v|'s binade (the smallest
// subnormal's below the normal range).
func ulpOf(v float64) float64 {
	_, e := math.Frexp(math.Abs(v)) // |v| in [2^(e-1), 2^e)
	return math.Ldexp(1, max(e-1, -126)-23)
}
