package activation

import (
	"fmt"
	"slices"
	"strings"
)

// Kind is an activation type. The zero value is not a kind: Valid reports
// false and every function given it fails, so a forgotten activation is
// caught at the first call. Kind values are kimimoe's own; FlashInfer's
// integer ABI is FlashInferABI.
type Kind int

// The kinds, in FlashInfer 0.6.18's ABI order.
const (
	Gelu        Kind = iota + 1
	Relu             // ReLU
	Silu             // SiLU
	Swiglu           // SwiGLU
	Geglu            // GeGLU
	SwigluBias       // GPT-OSS SwiGLU, "swiglu_oai" on the command line
	Relu2            // squared ReLU
	SwigluStep       // SwiGLU with a clamp
	GegluTanh        // GeGLU, tanh form
	Identity         // identity
	Situ             // SiTU
	InvalidType      // FlashInfer's InvalidType; not a kind kimimoe evaluates
)

// FlashInferABI is the kind's value in FlashInfer 0.6.18's ActivationType
// (flashinfer/tllm_enums.py with PR #4460): Gelu 0, Relu 1, Silu 2, Swiglu
// 3, Geglu 4, SwigluBias 5, Relu2 6, SwigluStep 7, GegluTanh 8, Identity 9,
// Situ 10, InvalidType 11; -1 for the zero Kind and anything else invalid.
// The GPU kernels' activation codes are these values too.
func (k Kind) FlashInferABI() int {
	if k < Gelu || k > InvalidType {
		return -1
	}
	return int(k - Gelu)
}

// KindFromFlashInferABI returns the kind with FlashInfer ABI value v, or an
// error for a value outside [0, 10].
func KindFromFlashInferABI(v int) (Kind, error) {
	k := Kind(v) + Gelu
	if !k.Valid() {
		return 0, fmt.Errorf("activation: %d is not a FlashInfer 0.6.18 activation value (0..10)", v)
	}
	return k, nil
}

// names holds each kind's canonical name first, then accepted aliases.
var names = map[Kind][]string{
	Gelu:       {"gelu"},
	Relu:       {"relu"},
	Silu:       {"silu"},
	Swiglu:     {"swiglu"},
	Geglu:      {"geglu"},
	SwigluBias: {"swiglu_oai", "swiglubias", "swiglu_bias", "gptoss_swiglu"},
	Relu2:      {"relu2"},
	SwigluStep: {"swiglu_step", "swiglustep"},
	GegluTanh:  {"geglu_tanh"},
	Identity:   {"identity"},
	Situ:       {"situ"},
}

// Kinds lists every valid kind in ABI order.
func Kinds() []Kind {
	ks := make([]Kind, 0, len(names))
	for k := Gelu; k < InvalidType; k++ {
		ks = append(ks, k)
	}
	return ks
}

// Valid reports whether k is a kind kimimoe evaluates (neither the zero value nor InvalidType).
func (k Kind) Valid() bool { return k >= Gelu && k < InvalidType }

// String returns the canonical command-line name.
func (k Kind) String() string {
	if n, ok := names[k]; ok {
		return n[0]
	}
	if k == InvalidType {
		return "invalid"
	}
	if k == 0 {
		return "unset"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// IsGated reports whether k reads a gate and an up input (FlashInfer's
// isGatedActivation).
func (k Kind) IsGated() bool {
	switch k {
	case Swiglu, Geglu, SwigluBias, SwigluStep, GegluTanh, Situ:
		return true
	}
	return false
}

// ParseKind accepts the canonical names and aliases (case-insensitive).
func ParseKind(s string) (Kind, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	for _, k := range Kinds() {
		if slices.Contains(names[k], l) {
			return k, nil
		}
	}
	var all []string
	for _, k := range Kinds() {
		all = append(all, k.String())
	}
	return 0, fmt.Errorf("activation: unknown kind %q (known: %s)", s, strings.Join(all, ", "))
}
