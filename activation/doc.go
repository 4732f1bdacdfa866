// Package activation defines the MoE activation functions kimimoe supports:
// the kind enum with FlashInfer 0.6.18's ABI values, their parameters
// (which may differ per expert), and exact evaluation.
//
// # Kinds and ABI values
//
// Kind.FlashInferABI gives FlashInfer 0.6.18's ActivationType value (with
// PR #4460); those values moved between FlashInfer versions, and the first
// bug of the SM120 MoE work this project grew from was Python's Situ=10
// meeting a C++ enum where 10 was InvalidType. The values:
//
//	Gelu=0 Relu=1 Silu=2 Swiglu=3 Geglu=4 SwigluBias=5 Relu2=6
//	SwigluStep=7 GegluTanh=8 Identity=9 Situ=10 InvalidType=11
//
// Kind's own values are not these: its zero value is no kind at all, so a
// forgotten activation fails at the first call (Valid, Params.Validate,
// Eval) instead of silently meaning Gelu.
//
// Gated kinds read two inputs per output, gate and up; FC1 then produces 2N
// rows per expert laid out [up; gate] (rows 0..N-1 up, N..2N-1 gate). The
// gated kinds are Swiglu, Geglu, SwigluBias, SwigluStep, GegluTanh and Situ.
// The others map one FC1 output to one activation output.
//
// # Formulas (g = gate, u = up, sigmoid(x) = 1/(1+e^-x))
//
//	Gelu        x/2 * erfc(-x/sqrt 2)            (erf form)
//	Relu        max(x, 0)
//	Silu        x * sigmoid(x)
//	Relu2       max(x, 0)^2
//	Identity    x
//	Swiglu      silu(g) * u
//	Geglu       gelu(g) * u                       (erf form)
//	GegluTanh   g * sigmoid(2*sqrt(2/pi)*(g + 0.044715 g^3)) * u
//	            (the tanh approximation, 0.5*(1+tanh z) written as sigmoid 2z)
//	SwigluBias  GPT-OSS: g' = min(g, limit), u' = clamp(u, -limit, limit),
//	            g' * sigmoid(alpha*g') * (u' + beta); alpha 1.702, beta 1, limit 7
//	SwigluStep  min(silu(g), limit) * clamp(u, -limit, limit); limit 7
//	            (Step-3.5's clamped SwiGLU; uses SwigluLimit)
//	Situ        beta*tanh(g/beta)*sigmoid(g) * linear_beta*tanh(u/linear_beta);
//	            Kimi-K3: beta 4, linear_beta 25, so |Situ| < 100
//
// # Precision
//
// Eval computes the formula in float64 with the math package's functions:
// within a few float64 ulps of the real value (the tests hold it to 1e-13
// relative against 50-digit mpmath values). It is what the oracle's exact
// and mxfp8 chains use. Eval32 evaluates the same formula with every
// intermediate rounded to float32, the way a CUDA kernel computing in
// float32 does; it is what the flashinfer chain uses, and GPU kernels are
// expected to match it to a few float32 ulps, not bitwise.
//
// # Errors
//
// ParseKind and Params.Validate return errors; an unknown kind or
// InvalidType is an error, never a silent Identity. Eval on an invalid kind
// panics (a programmer error: validate first).
package activation
