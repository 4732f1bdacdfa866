package activation

import (
	"fmt"
	"math"
)

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func gelu(x float64) float64 { return x / 2 * math.Erfc(-x/math.Sqrt2) }

// geluTanhK is sqrt(2/pi).
const geluTanhK = 0.7978845608028654

func geluTanh(x float64) float64 {
	return x * sigmoid(2*geluTanhK*(x+float64(0.044715*x*x*x)))
}

func clamp(x, lo, hi float64) float64 { return math.Min(math.Max(x, lo), hi) }

// Eval returns the activation of kind k in float64. For gated kinds it is
// act(gate, up); otherwise act(gate), and up is ignored.
func Eval(k Kind, p *Params, gate, up float64) float64 {
	g := gate
	switch k {
	case Gelu:
		return gelu(g)
	case Relu:
		return math.Max(g, 0)
	case Silu:
		return g * sigmoid(g)
	case Relu2:
		r := math.Max(g, 0)
		return r * r
	case Identity:
		return g
	case Swiglu:
		return g * sigmoid(g) * up
	case Geglu:
		return gelu(g) * up
	case GegluTanh:
		return geluTanh(g) * up
	case SwigluBias:
		g = math.Min(g, p.SwigluLimit)
		u := clamp(up, -p.SwigluLimit, p.SwigluLimit)
		return g * sigmoid(p.SwigluAlpha*g) * (u + p.SwigluBeta)
	case SwigluStep:
		return math.Min(g*sigmoid(g), p.SwigluLimit) * clamp(up, -p.SwigluLimit, p.SwigluLimit)
	case Situ:
		return p.SituBeta * math.Tanh(g/p.SituBeta) * sigmoid(g) * (p.SituLinearBeta * math.Tanh(up/p.SituLinearBeta))
	}
	panic(fmt.Sprintf("activation: Eval of invalid kind %v", k))
}

// float32 versions of the primitives: the math package's float64 result
// rounded once to float32 (a correctly rounded or nearly so libm, as CUDA's
// non-fast-math expf/tanhf/erfcf are to within 2 ulps).
func exp32(x float32) float32  { return float32(math.Exp(float64(x))) }
func tanh32(x float32) float32 { return float32(math.Tanh(float64(x))) }
func erfc32(x float32) float32 { return float32(math.Erfc(float64(x))) }

func sigmoid32(x float32) float32 { return 1 / (1 + exp32(-x)) }

func min32(a, b float32) float32 { return float32(math.Min(float64(a), float64(b))) }
func max32(a, b float32) float32 { return float32(math.Max(float64(a), float64(b))) }

// Eval32 returns the activation of kind k with every intermediate rounded to
// float32, in the operation order of Eval.
func Eval32(k Kind, p *Params, gate, up float32) float32 {
	g := gate
	switch k {
	case Gelu:
		return g / 2 * erfc32(-g/math.Sqrt2)
	case Relu:
		return max32(g, 0)
	case Silu:
		return g * sigmoid32(g)
	case Relu2:
		r := max32(g, 0)
		return r * r
	case Identity:
		return g
	case Swiglu:
		return g * sigmoid32(g) * up
	case Geglu:
		return g / 2 * erfc32(-g/math.Sqrt2) * up
	case GegluTanh:
		return g * sigmoid32(2*geluTanhK*(g+float32(0.044715*g*g*g))) * up
	case SwigluBias:
		lim := float32(p.SwigluLimit)
		g = min32(g, lim)
		u := min32(max32(up, -lim), lim)
		return g * sigmoid32(float32(p.SwigluAlpha)*g) * (u + float32(p.SwigluBeta))
	case SwigluStep:
		lim := float32(p.SwigluLimit)
		return min32(g*sigmoid32(g), lim) * min32(max32(up, -lim), lim)
	case Situ:
		b, lb := float32(p.SituBeta), float32(p.SituLinearBeta)
		return b * tanh32(g/b) * sigmoid32(g) * (lb * tanh32(up/lb))
	}
	panic(fmt.Sprintf("activation: Eval32 of invalid kind %v", k))
}

// Apply evaluates kind k over one FC1 output row h and writes dst. For a
// gated kind h has 2*len(dst) values laid out [up; gate]; otherwise
// len(dst). It panics on other lengths.
func Apply(dst []float64, k Kind, p *Params, h []float64) {
	n := len(dst)
	if k.IsGated() {
		if len(h) != 2*n {
			panic(fmt.Sprintf("activation: Apply %v: FC1 row of %d for %d outputs, want %d ([up; gate])", k, len(h), n, 2*n))
		}
		up, gate := h[:n], h[n:]
		for i := range dst {
			dst[i] = Eval(k, p, gate[i], up[i])
		}
		return
	}
	if len(h) != n {
		panic(fmt.Sprintf("activation: Apply %v: FC1 row of %d for %d outputs", k, len(h), n))
	}
	for i := range dst {
		dst[i] = Eval(k, p, h[i], 0)
	}
}
