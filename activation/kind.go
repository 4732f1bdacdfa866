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

// The kinds. Their values are kimimoe's own (the kernels' activation codes
// too); FlashInferABI maps them to FlashInfer's at the interop edge.
const (
	Gelu       Kind = iota + 1
	Relu            // ReLU
	Silu            // SiLU
	Swiglu          // SwiGLU
	Geglu           // GeGLU
	SwigluBias      // GPT-OSS SwiGLU, "swiglu_oai" on the command line
	Relu2           // squared ReLU
	SwigluStep      // SwiGLU with a clamp
	GegluTanh       // GeGLU, tanh form
	Identity        // identity
	Situ            // SiTU
)

// InvalidType names FlashInfer's InvalidType (its ABI value 11). It is not
// a kind kimimoe evaluates: Valid reports false and every function given it
// fails.
const InvalidType Kind = -1

// FlashInferABI is the kind's value in FlashInfer 0.6.18's ActivationType
// (flashinfer/tllm_enums.py with PR #4460): Gelu 0, Relu 1, Silu 2, Swiglu
// 3, Geglu 4, SwigluBias 5, Relu2 6, SwigluStep 7, GegluTanh 8, Identity 9,
// Situ 10, InvalidType 11; -1 for a kind FlashInfer lacks, the zero Kind
// and anything else invalid.
func (k Kind) FlashInferABI() int {
	if k == InvalidType {
		return flashInferInvalid
	}
	if r := k.info(); r != nil {
		return r.FlashInfer
	}
	return -1
}

// KindFromFlashInferABI returns the kind with FlashInfer ABI value v, or an
// error for a value no kind has (InvalidType's 11 included).
func KindFromFlashInferABI(v int) (Kind, error) {
	for _, r := range table {
		if r.FlashInfer == v && v >= 0 {
			return r.Kind, nil
		}
	}
	return 0, fmt.Errorf("activation: %d is not a FlashInfer 0.6.18 activation value kimimoe has", v)
}

// Kinds lists every valid kind in Kind order.
func Kinds() []Kind {
	ks := make([]Kind, len(table))
	for i, r := range table {
		ks[i] = r.Kind
	}
	return ks
}

// Valid reports whether k is a kind kimimoe evaluates (neither the zero value nor InvalidType).
func (k Kind) Valid() bool { return k.info() != nil }

// String returns the canonical command-line name.
func (k Kind) String() string {
	if r := k.info(); r != nil {
		return r.Names[0]
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
	r := k.info()
	return r != nil && r.Gated
}

// ParseKind accepts the canonical names and aliases (case-insensitive).
func ParseKind(s string) (Kind, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	for _, r := range table {
		if slices.Contains(r.Names, l) {
			return r.Kind, nil
		}
	}
	var all []string
	for _, r := range table {
		all = append(all, r.Names[0])
	}
	return 0, fmt.Errorf("activation: unknown kind %q (known: %s)", s, strings.Join(all, ", "))
}
