package activation

import (
	"fmt"
	"math"
	"strings"
)

// Param is one activation parameter: a float64 field of Params that some
// kinds read. Every list of parameters in kimimoe (case-file metadata,
// command-line flags, the report, the kernels' packed parameters, the
// Python helper) iterates AllParams.
type Param struct {
	Name     string // snake_case: the case file's metadata key and Python's keyword, e.g. "situ_beta"
	Doc      string // what it is, for help texts
	Positive bool   // it must be finite and > 0; otherwise only finite

	field func(*Params) *float64
}

// Flag is the parameter's command-line flag name (Name with '-' for '_').
func (q Param) Flag() string { return strings.ReplaceAll(q.Name, "_", "-") }

// Get returns the parameter's value in p.
func (q Param) Get(p *Params) float64 { return *q.field(p) }

// Set stores v as the parameter's value in p.
func (q Param) Set(p *Params, v float64) { *q.field(p) = v }

// Check returns an error naming the kind and parameter when v is not a
// value the parameter admits.
func (q Param) Check(k Kind, v float64) error {
	if q.Positive && !(v > 0 && !math.IsInf(v, 0)) {
		return fmt.Errorf("activation: %v: %s = %v, want a finite positive number", k, q.Name, v)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("activation: %v: %s = %v, want a finite number", k, q.Name, v)
	}
	return nil
}

// params are the parameters, in the kernels' packing order.
var params = []Param{
	{Name: "situ_beta", Doc: "SiTU beta", Positive: true, field: func(p *Params) *float64 { return &p.SituBeta }},
	{Name: "situ_linear_beta", Doc: "SiTU linear beta", Positive: true, field: func(p *Params) *float64 { return &p.SituLinearBeta }},
	{Name: "swiglu_alpha", Doc: "GPT-OSS SwiGLU alpha", field: func(p *Params) *float64 { return &p.SwigluAlpha }},
	{Name: "swiglu_beta", Doc: "GPT-OSS SwiGLU beta, added to up", field: func(p *Params) *float64 { return &p.SwigluBeta }},
	{Name: "swiglu_limit", Doc: "SwiGLU clamp limit", Positive: true, field: func(p *Params) *float64 { return &p.SwigluLimit }},
}

// AllParams lists every parameter, in the kernels' packing order.
func AllParams() []Param { return append([]Param(nil), params...) }

// ParamByName returns the parameter with snake_case name s.
func ParamByName(s string) (Param, bool) {
	for _, q := range params {
		if q.Name == s {
			return q, true
		}
	}
	return Param{}, false
}

// Info is one kind's row of the table: everything about a kind except its
// kernel formula. Adding a kind is adding a row (with its formulas) here and
// a case to the kernels' activation.
type Info struct {
	Kind       Kind
	Names      []string // the canonical command-line name first, then aliases
	Gated      bool     // it reads gate and up (FlashInfer's isGatedActivation)
	Params     []string // the parameters it reads, by Name
	FlashInfer int      // FlashInfer 0.6.18's ActivationType value, or -1 where FlashInfer has the kind not

	eval   func(p *Params, g, u float64) float64
	eval32 func(p *Params, g, u float32) float32
}

// table holds the kinds in Kind order. FlashInfer's values are from
// flashinfer/tllm_enums.py (0.6.18, with PR #4460).
var table = []Info{
	{Kind: Gelu, Names: []string{"gelu"}, FlashInfer: 0,
		eval:   func(_ *Params, g, _ float64) float64 { return gelu(g) },
		eval32: func(_ *Params, g, _ float32) float32 { return g / 2 * erfc32(-g/math.Sqrt2) }},
	{Kind: Relu, Names: []string{"relu"}, FlashInfer: 1,
		eval:   func(_ *Params, g, _ float64) float64 { return math.Max(g, 0) },
		eval32: func(_ *Params, g, _ float32) float32 { return max32(g, 0) }},
	{Kind: Silu, Names: []string{"silu"}, FlashInfer: 2,
		eval:   func(_ *Params, g, _ float64) float64 { return g * sigmoid(g) },
		eval32: func(_ *Params, g, _ float32) float32 { return g * sigmoid32(g) }},
	{Kind: Swiglu, Names: []string{"swiglu"}, Gated: true, FlashInfer: 3,
		eval:   func(_ *Params, g, u float64) float64 { return g * sigmoid(g) * u },
		eval32: func(_ *Params, g, u float32) float32 { return g * sigmoid32(g) * u }},
	{Kind: Geglu, Names: []string{"geglu"}, Gated: true, FlashInfer: 4,
		eval:   func(_ *Params, g, u float64) float64 { return gelu(g) * u },
		eval32: func(_ *Params, g, u float32) float32 { return g / 2 * erfc32(-g/math.Sqrt2) * u }},
	{Kind: SwigluBias, Names: []string{"swiglu_oai", "swiglubias", "swiglu_bias", "gptoss_swiglu"}, Gated: true,
		Params: []string{"swiglu_alpha", "swiglu_beta", "swiglu_limit"}, FlashInfer: 5,
		eval: func(p *Params, g, u float64) float64 {
			g = math.Min(g, p.SwigluLimit)
			u = clamp(u, -p.SwigluLimit, p.SwigluLimit)
			return g * sigmoid(p.SwigluAlpha*g) * (u + p.SwigluBeta)
		},
		eval32: func(p *Params, g, u float32) float32 {
			lim := float32(p.SwigluLimit)
			g = min32(g, lim)
			u = min32(max32(u, -lim), lim)
			return g * sigmoid32(float32(p.SwigluAlpha)*g) * (u + float32(p.SwigluBeta))
		}},
	{Kind: Relu2, Names: []string{"relu2"}, FlashInfer: 6,
		eval:   func(_ *Params, g, _ float64) float64 { r := math.Max(g, 0); return r * r },
		eval32: func(_ *Params, g, _ float32) float32 { r := max32(g, 0); return r * r }},
	{Kind: SwigluStep, Names: []string{"swiglu_step", "swiglustep"}, Gated: true, Params: []string{"swiglu_limit"}, FlashInfer: 7,
		eval: func(p *Params, g, u float64) float64 {
			return math.Min(g*sigmoid(g), p.SwigluLimit) * clamp(u, -p.SwigluLimit, p.SwigluLimit)
		},
		eval32: func(p *Params, g, u float32) float32 {
			lim := float32(p.SwigluLimit)
			return min32(g*sigmoid32(g), lim) * min32(max32(u, -lim), lim)
		}},
	{Kind: GegluTanh, Names: []string{"geglu_tanh"}, Gated: true, FlashInfer: 8,
		eval: func(_ *Params, g, u float64) float64 { return geluTanh(g) * u },
		eval32: func(_ *Params, g, u float32) float32 {
			return g * sigmoid32(2*geluTanhK*(g+float32(0.044715*g*g*g))) * u
		}},
	{Kind: Identity, Names: []string{"identity"}, FlashInfer: 9,
		eval:   func(_ *Params, g, _ float64) float64 { return g },
		eval32: func(_ *Params, g, _ float32) float32 { return g }},
	{Kind: Situ, Names: []string{"situ"}, Gated: true, Params: []string{"situ_beta", "situ_linear_beta"}, FlashInfer: 10,
		eval: func(p *Params, g, u float64) float64 {
			return p.SituBeta * math.Tanh(g/p.SituBeta) * sigmoid(g) * (p.SituLinearBeta * math.Tanh(u/p.SituLinearBeta))
		},
		eval32: func(p *Params, g, u float32) float32 {
			b, lb := float32(p.SituBeta), float32(p.SituLinearBeta)
			return b * tanh32(g/b) * sigmoid32(g) * (lb * tanh32(u/lb))
		}},
}

// flashInferInvalid is FlashInfer 0.6.18's InvalidType value.
const flashInferInvalid = 11

// info returns k's row, or nil for a value that is no kind.
func (k Kind) info() *Info {
	if k < Gelu || int(k-Gelu) >= len(table) {
		return nil
	}
	return &table[k-Gelu]
}

// Table returns every kind's row, in Kind order.
func Table() []Info {
	out := make([]Info, len(table))
	for i, r := range table {
		r.Names = append([]string(nil), r.Names...)
		r.Params = append([]string(nil), r.Params...)
		out[i] = r
	}
	return out
}

// Params returns the parameters k reads (none for an invalid kind).
func (k Kind) Params() []Param {
	r := k.info()
	if r == nil {
		return nil
	}
	out := make([]Param, 0, len(r.Params))
	for _, n := range r.Params {
		q, ok := ParamByName(n)
		if !ok {
			panic(fmt.Sprintf("activation: %v reads the unknown parameter %q", k, n))
		}
		out = append(out, q)
	}
	return out
}

// Reads reports whether k reads the parameter named name.
func (k Kind) Reads(name string) bool {
	for _, q := range k.Params() {
		if q.Name == name {
			return true
		}
	}
	return false
}
