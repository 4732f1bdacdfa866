package moe

import (
	"fmt"

	"kimimoe/activation"
)

// Model describes an MoE transformer's shapes: what the MoE layer needs
// (K, N, experts, top-k, activation) and what the communication model in
// package plan needs (hidden and latent widths, layer kinds).
type Model struct {
	Name string

	// MoE layer.
	K          int // MoE input width (Kimi-K3: the routed latent, 3584)
	N          int // expert intermediate width
	NumExperts int // routed experts (global)
	TopK       int
	Activation activation.Kind
	Params     activation.Params

	// Whole model.
	Hidden             int // residual width
	NumLayers          int
	FirstKDenseReplace int // the first layers use a dense MLP, not MoE
	SharedExpertWidth  int // width of the shared expert's output reduction (0: none)
	QLoraRank          int // MLA q latent
	KVLoraRank         int // MLA kv latent
	QKRopeHeadDim      int // MLA rope part
	MLALayers          int // attention layers of MLA kind
	KDALayers          int // attention layers of KDA kind (Kimi delta attention)
}

// KimiK3 returns Kimi-K3's shapes, as read from its config.json in the
// seed (seeds/000 "真实 checkpoint 契约", seeds/003): hidden 7168, routed
// latent 3584, expert intermediate 3072, 896 experts, top-k 16, SiTU(4, 25),
// 93 layers with first_k_dense_replace 1 (so 92 MoE layers), 24 MLA and 69
// KDA layers, MLA latent 1536 + 512 + 64, shared expert width 7168.
func KimiK3() Model {
	p := activation.DefaultParams()
	p.SituBeta, p.SituLinearBeta = 4, 25
	return Model{
		Name: "kimi-k3",
		K:    3584, N: 3072, NumExperts: 896, TopK: 16,
		Activation: activation.Situ, Params: p,
		Hidden: 7168, NumLayers: 93, FirstKDenseReplace: 1, SharedExpertWidth: 7168,
		QLoraRank: 1536, KVLoraRank: 512, QKRopeHeadDim: 64,
		MLALayers: 24, KDALayers: 69,
	}
}

// Models lists the presets by name.
func Models() map[string]Model {
	return map[string]Model{"kimi-k3": KimiK3()}
}

// MoELayers is the number of layers that run the MoE.
func (m Model) MoELayers() int { return m.NumLayers - m.FirstKDenseReplace }

// MLALatent is the MLA QKV latent width q_lora + kv_lora + rope.
func (m Model) MLALatent() int { return m.QLoraRank + m.KVLoraRank + m.QKRopeHeadDim }

// Validate checks the MoE-layer shapes: positive, K and N multiples of 32
// (MX blocks), top-k at most the expert count, a valid activation.
func (m Model) Validate() error {
	switch {
	case m.K <= 0 || m.K%32 != 0:
		return fmt.Errorf("moe: model %s: K = %d must be a positive multiple of 32", m.Name, m.K)
	case m.N <= 0 || m.N%32 != 0:
		return fmt.Errorf("moe: model %s: N = %d must be a positive multiple of 32", m.Name, m.N)
	case m.NumExperts <= 0 || m.TopK <= 0 || m.TopK > m.NumExperts:
		return fmt.Errorf("moe: model %s: top-k %d of %d experts", m.Name, m.TopK, m.NumExperts)
	case m.MLALayers+m.KDALayers != 0 && m.MLALayers+m.KDALayers != m.NumLayers:
		return fmt.Errorf("moe: model %s: %d MLA + %d KDA layers != %d layers", m.Name, m.MLALayers, m.KDALayers, m.NumLayers)
	}
	return m.Params.Validate(m.Activation)
}
