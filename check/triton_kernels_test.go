package check

import (
	"testing"

	"kimimoe/safetensors"
	"kimimoe/validation"
)

// A real kernel's output: OpenAI's triton_kernels matmul_ogs (v3.6.0, as
// vLLM runs GPT-OSS on Hopper: BF16 x, MXFP4 weights, FC biases, the
// clamped SwiGLU, routing weights and top-k reduction in the kernel) on a
// small GPT-OSS-style layer (8 experts, top-4, K = N = 512), made on an
// H200 by python/examples/check_triton_kernels.py (testdata/ref/README.md).
// Against the oracle's bf16 chain it passes; the case written with FC1's
// halves swapped, or with triton_kernels' interleaved rows declared as
// halves, fails, and the diagnosis names that mistake first.
func TestTritonKernelsOutput(t *testing.T) {
	c, err := validation.ReadCase("../testdata/ref/tk_matmul_ogs_oai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile("../testdata/ref/tk_matmul_ogs_oai.out.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	ct := f.Get("out")
	got, err := ct.AsFloat32()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Compare(c, got, ct.DType, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Pass || ct.DType != safetensors.BF16 {
		t.Fatalf("triton_kernels' output (%s) against the bf16 chain: %v, NRMSE %g, cosine %g", ct.DType, r.Why, r.NRMSE, r.Cosine)
	}
	t.Logf("triton_kernels against the oracle: NRMSE %.3g, cosine %.9f", r.NRMSE, r.Cosine)

	n := c.Weights.N
	for _, m := range []struct {
		name string
		from func(i int) int // the wrong case's FC1 row i is the right case's row from(i)
	}{
		{"gate_up_swapped", func(i int) int { return (i + n) % (2 * n) }},
		{"gate_up_interleaved", func(j int) int { // the interleaved rows [g0, u0, g1, u1, ...] stored as [up; gate]
			if j%2 == 0 {
				return n + j/2
			}
			return j / 2
		}},
	} {
		wrong := permuteFC1(c, everyExpert(c), m.from)
		r, err := Compare(wrong, got, ct.DType, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Pass {
			t.Fatalf("%s: the wrong case passes (NRMSE %g)", m.name, r.NRMSE)
		}
		Diagnose(wrong, r)
		if best := r.Best(); best == nil || r.Diagnosis[0].Name != m.name || best.Name != m.name {
			t.Errorf("%s: the diagnosis names %s first (%+v)", m.name, r.Diagnosis[0].Name, r.Diagnosis[0])
		} else {
			t.Logf("%s: NRMSE %.3g; diagnosed %s (NRMSE %.3g): %s", m.name, r.NRMSE, best.Name, best.NRMSE, best.What)
		}
	}
}
