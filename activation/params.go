package activation

import "fmt"

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

// Validate checks the fields kind k reads (k.Params(), each by its Check):
// Situ's betas must be finite and positive, SwigluBias's alpha and beta
// finite, and the limits finite and positive. It also rejects an invalid
// kind.
func (p Params) Validate(k Kind) error {
	if !k.Valid() {
		return fmt.Errorf("activation: invalid kind %v", k)
	}
	for _, q := range k.Params() {
		if err := q.Check(k, q.Get(&p)); err != nil {
			return err
		}
	}
	return nil
}
