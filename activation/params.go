package activation

import (
	"fmt"
	"math"
)

// Params holds the parameters of the parametrized kinds. A kind reads only
// its own fields. An MoE layer may hold one Params per expert.
type Params struct {
	SituBeta       float64 // Situ gate beta (Kimi-K3: 4)
	SituLinearBeta float64 // Situ up linear_beta (Kimi-K3: 25)
	SwigluAlpha    float64 // SwigluBias alpha (GPT-OSS: 1.702)
	SwigluBeta     float64 // SwigluBias beta added to up (GPT-OSS: 1)
	SwigluLimit    float64 // SwigluBias and SwigluStep clamp limit (7)
}

// DefaultParams returns Kimi-K3's SiTU (4, 25) and GPT-OSS's SwiGLU (1.702,
// 1, 7) parameters.
func DefaultParams() Params {
	return Params{SituBeta: 4, SituLinearBeta: 25, SwigluAlpha: 1.702, SwigluBeta: 1, SwigluLimit: 7}
}

// Validate checks the fields kind k reads: Situ's betas must be finite and
// positive, SwigluBias's alpha and beta finite, and the limits finite and
// positive. It also rejects an invalid kind.
func (p Params) Validate(k Kind) error {
	if !k.Valid() {
		return fmt.Errorf("activation: invalid kind %v", k)
	}
	pos := func(name string, v float64) error {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("activation: %v: %s = %v, want a finite positive number", k, name, v)
		}
		return nil
	}
	fin := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("activation: %v: %s = %v, want a finite number", k, name, v)
		}
		return nil
	}
	var errs []error
	switch k {
	case Situ:
		errs = append(errs, pos("situ_beta", p.SituBeta), pos("situ_linear_beta", p.SituLinearBeta))
	case SwigluBias:
		errs = append(errs, fin("swiglu_alpha", p.SwigluAlpha), fin("swiglu_beta", p.SwigluBeta), pos("swiglu_limit", p.SwigluLimit))
	case SwigluStep:
		errs = append(errs, pos("swiglu_limit", p.SwigluLimit))
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
