package activation

import (
	"fmt"
	"slices"
	"strings"
)

// Kind is an activation type. Its values are FlashInfer 0.6.18's ABI.
type Kind int

// FlashInfer 0.6.18 ActivationType values.
const (
	Gelu        Kind = 0
	Relu        Kind = 1
	Silu        Kind = 2
	Swiglu      Kind = 3
	Geglu       Kind = 4
	SwigluBias  Kind = 5 // GPT-OSS SwiGLU, "swiglu_oai" on the command line
	Relu2       Kind = 6
	SwigluStep  Kind = 7
	GegluTanh   Kind = 8
	Identity    Kind = 9
	Situ        Kind = 10
	InvalidType Kind = 11
)

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
	for k := range InvalidType {
		ks = append(ks, k)
	}
	return ks
}

// Valid reports whether k is a kind kimimoe evaluates (not InvalidType).
func (k Kind) Valid() bool { return k >= Gelu && k < InvalidType }

// String returns the canonical command-line name.
func (k Kind) String() string {
	if n, ok := names[k]; ok {
		return n[0]
	}
	if k == InvalidType {
		return "invalid"
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
	return InvalidType, fmt.Errorf("activation: unknown kind %q (known: %s)", s, strings.Join(all, ", "))
}
