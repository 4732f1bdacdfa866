package checkpoint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"kimimoe/moe"
	"kimimoe/safetensors"
)

// Write stores w (a gated layer: [up; gate] FC1) as a checkpoint of layer
// in dir, in format f, over shards files with a model.safetensors.index.json
// (shards 0: one model.safetensors). Kimi-K3's layout has no biases (w's
// are not written); GPT-OSS's stores them in BF16. It is the inverse of
// Load, for tests and for making small checkpoints to try tools on.
func Write(dir string, f Format, w *moe.Weights, layer, shards int) error {
	switch {
	case w == nil:
		return fmt.Errorf("checkpoint: Write: weights are nil")
	case shards < 0:
		return fmt.Errorf("checkpoint: Write: %d shards; want 0 (one model.safetensors) or more", shards)
	case layer < 0:
		return fmt.Errorf("checkpoint: Write: layer %d; want 0 or more", layer)
	}
	if err := w.Validate(); err != nil {
		return fmt.Errorf("checkpoint: Write: %w", err)
	}
	if !w.Gated {
		return fmt.Errorf("checkpoint: Write needs gated weights ([up; gate] FC1)")
	}
	var ts []*safetensors.Tensor
	switch f {
	case FormatKimi:
		ts = kimiTensors(w, layer, "mlp")
	case FormatGPTOSS:
		if w.W31Bias == nil || w.W2Bias == nil {
			return fmt.Errorf("checkpoint: the GPT-OSS layout needs both biases")
		}
		ts = gptossTensors(w, layer)
	default:
		return fmt.Errorf("checkpoint: unknown format %q", f)
	}
	return writeShards(dir, ts, shards)
}

// writeShards writes tensors round-robin into nshard shards with an index
// (nshard 0: one model.safetensors, no index).
func writeShards(dir string, ts []*safetensors.Tensor, nshard int) error {
	if nshard == 0 {
		return safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil)
	}
	shards := make([][]*safetensors.Tensor, nshard)
	wm := map[string]string{}
	for i, x := range ts {
		shards[i%nshard] = append(shards[i%nshard], x)
		wm[x.Name] = fmt.Sprintf("model-%05d-of-%05d.safetensors", i%nshard+1, nshard)
	}
	for i, sh := range shards {
		if err := safetensors.WriteFile(filepath.Join(dir, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, nshard)), sh, nil); err != nil {
			return err
		}
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": wm})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data, 0o644)
}

// rows returns rows [r0, r0+n) of expert e's FC1 (packed and scales).
func fc1Rows(w *moe.Weights, e, r0, n int) ([]uint8, []uint8) {
	R, k := w.Rows(), w.K
	return w.W31[(e*R+r0)*k/2 : (e*R+r0+n)*k/2], w.W31Scale[(e*R+r0)*k/32 : (e*R+r0+n)*k/32]
}

// kimiTensors lays w out as Kimi-K3 stores it: per expert w1 (gate), w3
// (up) and w2, under a model-specific middle of the name.
func kimiTensors(w *moe.Weights, layer int, middle string) []*safetensors.Tensor {
	var ts []*safetensors.Tensor
	n, k := w.N, w.K
	for e := range w.E {
		p := fmt.Sprintf("language_model.model.layers.%d.%s.experts.%d.", layer, middle, e)
		upP, upS := fc1Rows(w, e, 0, n)
		gP, gS := fc1Rows(w, e, n, n)
		ts = append(ts,
			safetensors.FromUint8(p+"w1.weight_packed", []int{n, k / 2}, gP),
			safetensors.FromUint8(p+"w1.weight_scale", []int{n, k / 32}, gS),
			safetensors.FromUint8(p+"w3.weight_packed", []int{n, k / 2}, upP),
			safetensors.FromUint8(p+"w3.weight_scale", []int{n, k / 32}, upS),
			safetensors.FromUint8(p+"w2.weight_packed", []int{k, n / 2}, w.W2[e*k*n/2:(e+1)*k*n/2]),
			safetensors.FromUint8(p+"w2.weight_scale", []int{k, n / 32}, w.W2Scale[e*k*n/32:(e+1)*k*n/32]))
	}
	ts = append(ts, safetensors.FromUint8("language_model.model.embed_tokens.weight", []int{4}, []uint8{1, 2, 3, 4}))
	return ts
}

// gptossTensors lays w out as GPT-OSS stores it: stacked, gate and up rows
// interleaved (gate even), blocks of 16 bytes.
func gptossTensors(w *moe.Weights, layer int) []*safetensors.Tensor {
	E, n, k := w.E, w.N, w.K
	gu := make([]uint8, E*2*n*k/2)
	guS := make([]uint8, E*2*n*k/32)
	guB := make([]float32, E*2*n)
	for e := range E {
		for j := range n {
			for _, pair := range [][2]int{{2 * j, n + j}, {2*j + 1, j}} { // even: gate (w31 row n+j), odd: up (row j)
				dst, src := e*2*n+pair[0], e*2*n+pair[1]
				copy(gu[dst*k/2:(dst+1)*k/2], w.W31[src*k/2:(src+1)*k/2])
				copy(guS[dst*k/32:(dst+1)*k/32], w.W31Scale[src*k/32:(src+1)*k/32])
				guB[dst] = w.W31Bias[src]
			}
		}
	}
	p := fmt.Sprintf("model.layers.%d.mlp.experts.", layer)
	bias, _ := safetensors.FromFloat32As(p+"gate_up_proj_bias", safetensors.BF16, []int{E, 2 * n}, guB)
	dbias, _ := safetensors.FromFloat32As(p+"down_proj_bias", safetensors.BF16, []int{E, k}, w.W2Bias)
	return []*safetensors.Tensor{
		safetensors.FromUint8(p+"gate_up_proj_blocks", []int{E, 2 * n, k / 32, 16}, gu),
		safetensors.FromUint8(p+"gate_up_proj_scales", []int{E, 2 * n, k / 32}, guS),
		bias,
		safetensors.FromUint8(p+"down_proj_blocks", []int{E, k, n / 32, 16}, w.W2),
		safetensors.FromUint8(p+"down_proj_scales", []int{E, k, n / 32}, w.W2Scale),
		dbias,
		safetensors.FromUint8(p+"router.weight", []int{2}, []uint8{0, 0}),
	}
}
