package cuda

import (
	"fmt"
	"math"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
)

// situTanhC are the coefficients c_i of tanh(z) ~ z + z s (c_0 + c_1 s +
// ... + c_4 s^4), s = z^2, on |z| <= situTanhReach: a minimax fit of the
// relative error (Lawson's iteratively reweighted least squares over
// 4000 points, refitted by TestSituTanhFit), which stays within 2.8e-9
// of tanh, under a tenth of a float32 ulp.
var situTanhC = [5]float64{
	-0.33333298001998674, 0.13331924122471886, -0.05378382983598108, 0.0207959699242546, -0.005895155785527555,
}

// situTanhReach is the fit's reach in z = x / beta: past it the kernels
// take tanh from exp(-2|z|), which is then at most exp(-1.2), so its
// error reaches tanh damped.
const situTanhReach = 0.6

// situBetaMin and situBetaMax bound the SiTU betas the kernels take: the
// coefficients c_i / beta^(2i+2) stay finite and above float32's
// subnormals (c_4 / beta^10 at beta = 2^12 is 4.4e-39, the last
// coefficient's few lost bits weigh under 1e-4 of the result) and the
// reach a normal float.
const (
	situBetaMin = 1.0 / 4096
	situBetaMax = 4096
)

// situConsts are one beta's constants for the kernels' SiTU (situ_tanh
// in activation.cuh): beta tanh(x / beta) = x + x s Q(s) with s = x^2 and
// Q's coefficients q_i = c_i / beta^(2i+2) for |x| <= edge, and
// exp(-2|x| / beta) = 2^(|x| ex) past it. Computed in float64 and rounded
// to float32 once by packParams.
type situConsts struct {
	q        [5]float64
	edge, ex float64
}

func situTanh(beta float64) situConsts {
	var c situConsts
	for i := range c.q {
		c.q[i] = situTanhC[i] / math.Pow(beta, float64(2*i+2))
	}
	c.edge = situTanhReach * beta
	c.ex = -2 * math.Log2E / beta
	return c
}

// checkSitu refuses SiTU betas outside [situBetaMin, situBetaMax] (their
// constants leave float32's normal range), naming the backend that takes
// them.
func checkSitu(spec moe.LayerSpec) error {
	if spec.Activation != activation.Situ {
		return nil
	}
	for e, p := range spec.Params {
		for _, b := range []struct {
			name string
			v    float64
		}{{"situ_beta", p.SituBeta}, {"situ_linear_beta", p.SituLinearBeta}} {
			if !(b.v >= situBetaMin && b.v <= situBetaMax) {
				return fmt.Errorf("%w: backend \"cuda\" takes SiTU betas in [2^-12, 2^12], params[%d] has %s = %g; use the %q backend",
					backend.ErrUnsupported, e, b.name, b.v, backend.GoName)
			}
		}
	}
	return nil
}
