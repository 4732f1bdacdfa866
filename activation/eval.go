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
	r := k.info()
	if r == nil {
		panic(fmt.Sprintf("activation: Eval of invalid kind %v", k))
	}
	return r.eval(p, gate, up)
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
	r := k.info()
	if r == nil {
		panic(fmt.Sprintf("activation: Eval32 of invalid kind %v", k))
	}
	return r.eval32(p, gate, up)
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
