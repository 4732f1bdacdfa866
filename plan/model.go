package plan

import (
	"fmt"

	"kimimoe/activation"
	"kimimoe/moe"
)

// Model is a whole MoE transformer's shapes: its MoE layer (package moe)
// and what the communication model needs besides (residual and latent
// widths, layer kinds).
type Model struct {
	moe.Model
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

// KimiK3 returns Kimi-K3's shapes, as read from its config.json: the MoE
// layer of moe.KimiK3, hidden 7168, 93 layers with first_k_dense_replace 1
// (so 92 MoE layers), 24 MLA and 69 KDA layers, MLA latent 1536 + 512 + 64,
// shared expert width 7168 (docs/CONTRACT.md "Kimi-K3").
func KimiK3() Model {
	return Model{
		Model:  moe.KimiK3(),
		Hidden: 7168, NumLayers: 93, FirstKDenseReplace: 1, SharedExpertWidth: 7168,
		QLoraRank: 1536, KVLoraRank: 512, QKRopeHeadDim: 64,
		MLALayers: 24, KDALayers: 69,
	}
}

// GPTOSS120B returns GPT-OSS-120B's shapes, as read from its
// config.json: the MoE layer of moe.GPTOSS120B (hidden 2880 is also the
// MoE input), 36 layers, every one MoE, no MLA and no shared expert.
func GPTOSS120B() Model {
	return Model{Model: moe.GPTOSS120B(), Hidden: 2880, NumLayers: 36}
}

// DeepSeekV3 returns DeepSeek-V3's shapes, as read from its config.json:
// hidden 7168 (the MoE input), moe_intermediate_size 2048, 256 routed
// experts, top-8, SwiGLU, a sigmoid router with renormalized weights, 61
// layers with first_k_dense_replace 3, MLA latent 1536 + 512 + 64 on
// every layer, one shared expert reduced at the hidden width.
func DeepSeekV3() Model {
	return Model{
		Model: moe.Model{Name: "deepseek-v3", K: 7168, N: 2048, NumExperts: 256, TopK: 8, Activation: activation.Swiglu,
			Params: activation.DefaultParams(), Scoring: moe.ScoringSigmoid, Renormalize: true},
		Hidden: 7168, NumLayers: 61, FirstKDenseReplace: 3, SharedExpertWidth: 7168,
		QLoraRank: 1536, KVLoraRank: 512, QKRopeHeadDim: 64, MLALayers: 61,
	}
}

// Models lists the presets by name.
func Models() map[string]Model {
	return map[string]Model{"kimi-k3": KimiK3(), "gpt-oss-120b": GPTOSS120B(), "deepseek-v3": DeepSeekV3()}
}

// MoELayers is the number of layers that run the MoE.
func (m Model) MoELayers() int { return m.NumLayers - m.FirstKDenseReplace }

// MLALatent is the MLA QKV latent width q_lora + kv_lora + rope.
func (m Model) MLALatent() int { return m.QLoraRank + m.KVLoraRank + m.QKRopeHeadDim }

// Validate checks the MoE layer's shapes and that the layer kinds add up.
func (m Model) Validate() error {
	if err := m.Model.Validate(); err != nil {
		return err
	}
	if m.MLALayers+m.KDALayers != 0 && m.MLALayers+m.KDALayers != m.NumLayers {
		return fmt.Errorf("plan: model %s: %d MLA + %d KDA layers != %d layers", m.Name, m.MLALayers, m.KDALayers, m.NumLayers)
	}
	return nil
}
