package plan

import (
	"fmt"

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

// Models lists the presets by name.
func Models() map[string]Model {
	return map[string]Model{"kimi-k3": KimiK3()}
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
