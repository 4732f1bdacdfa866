package moe

import (
	"fmt"

	"kimimoe/activation"
)

// Model is the shape of a model's MoE layer: what one forward needs. The
// whole model's shapes (hidden width, layer kinds) live in package plan.
type Model struct {
	Name       string
	K          int // MoE input width (Kimi-K3: the routed latent, 3584)
	N          int // expert intermediate width
	NumExperts int // routed experts (global)
	TopK       int
	Activation activation.Kind
	Params     activation.Params
	// The router's settings (see Router): scoring function and whether the
	// chosen weights are renormalized.
	Scoring     Scoring
	Renormalize bool
}

// Router returns the model's router over all its experts, with the given
// correction bias (nil for none).
func (m Model) Router(correctionBias []float32) Router {
	return Router{NumExperts: m.NumExperts, TopK: m.TopK, Scoring: m.Scoring, CorrectionBias: correctionBias, Renormalize: m.Renormalize}
}

// KimiK3 returns Kimi-K3's MoE layer, as read from its config.json: routed
// latent K = 3584 (the MoE input; the residual width is 7168), expert
// intermediate N = 3072, 896 routed experts, top-16, SiTU with beta 4 and
// linear_beta 25, a sigmoid router with a correction bias for selection and
// renormalized weights (docs/CONTRACT.md "Kimi-K3").
func KimiK3() Model {
	p := activation.DefaultParams()
	p.SituBeta, p.SituLinearBeta = 4, 25
	return Model{Name: "kimi-k3", K: 3584, N: 3072, NumExperts: 896, TopK: 16, Activation: activation.Situ, Params: p,
		Scoring: ScoringSigmoid, Renormalize: true}
}

// Validate checks the shapes: positive, K and N multiples of 32 (MX
// blocks), top-k at most the expert count, a valid activation.
func (m Model) Validate() error {
	switch {
	case m.K <= 0 || m.K%32 != 0:
		return fmt.Errorf("moe: model %s: K = %d must be a positive multiple of 32", m.Name, m.K)
	case m.N <= 0 || m.N%32 != 0:
		return fmt.Errorf("moe: model %s: N = %d must be a positive multiple of 32", m.Name, m.N)
	case m.NumExperts <= 0 || m.TopK <= 0 || m.TopK > m.NumExperts:
		return fmt.Errorf("moe: model %s: top-k %d of %d experts", m.Name, m.TopK, m.NumExperts)
	}
	return m.Params.Validate(m.Activation)
}

// GPTOSS120B returns GPT-OSS-120B's MoE layer, as read from its
// config.json: hidden and expert intermediate widths 2880 (multiples of
// 32, not of 128), 128 experts, top-4, the clamped SwiGLU (SwigluBias:
// alpha 1.702, beta 1, limit 7) with FC1 and FC2 biases, and a softmax
// over the chosen experts' logits (the softmax over all, renormalized).
func GPTOSS120B() Model {
	return Model{Name: "gpt-oss-120b", K: 2880, N: 2880, NumExperts: 128, TopK: 4, Activation: activation.SwigluBias,
		Params: activation.DefaultParams(), Scoring: ScoringSoftmax, Renormalize: true}
}

// GPTOSS20B returns GPT-OSS-20B's MoE layer: GPT-OSS-120B's with 32
// experts.
func GPTOSS20B() Model {
	m := GPTOSS120B()
	m.Name, m.NumExperts = "gpt-oss-20b", 32
	return m
}
