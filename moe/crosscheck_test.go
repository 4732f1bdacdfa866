package moe_test

import (
	"math"
	"path/filepath"
	"testing"

	"kimimoe/internal/testutil/numpyref"
	"kimimoe/moe"
	"kimimoe/validation"
)

// TestOracleAgainstNumpy runs the oracle on the cases under
// ../testdata/ref/oracle_*.safetensors and compares with their
// out_ref_f64, computed by an independent numpy float64 implementation
// (scripts/gen_testdata.py; ml_dtypes decodes, dense float64 matmuls, its
// own MX quantization). Both compute the same real numbers up to float64
// rounding in different orders, so they must agree to 1e-12 relative to the
// output's RMS. An MXFP8 requantization landing on the other side of a
// rounding boundary would show as a difference near 1e-2; none does.
func TestOracleAgainstNumpy(t *testing.T) {
	for _, nc := range numpyref.NumpyCases(t, "../testdata/ref") {
		c, ref, rms := nc.Case, nc.Ref, nc.RMS
		out := oracleOut(t, c)
		worst := 0.0
		for i := range ref {
			worst = max(worst, math.Abs(out[i]-ref[i]))
		}
		t.Logf("%s: %v %v %v ep=%+v: max |diff| %.3g, output RMS %.3g", filepath.Base(nc.Path), c.Spec.Activation, c.Spec.Chain, c.Spec.Recipe, c.Spec.EP, worst, rms)
		if rms == 0 || worst > 1e-12*rms {
			t.Errorf("%s: oracle differs from numpy by %.3g (RMS %.3g)", nc.Path, worst, rms)
		}
	}
}

// TestFlashInferChainAgainstNumpy runs the oracle's flashinfer chain on the
// cases under ../testdata/ref/flashinfer_*.safetensors (SiTU with both
// biases, -1 slots, EP2) and compares with their out_ref_f32: an
// independent numpy emulation of FlashInfer's rounding points (bf16 GEMM1
// result, float32 bias add and SiTU, bf16 activation, MXFP8 rceil, the
// float32 GEMM2 row stored as bf16, the finalize's float32 sum of
// float32(w) * (row + b2) in slot order; scripts/gen_testdata.py
// flashinfer, run on the GPU machine). Every float32 operation is rounded
// in the same order on both sides, so they agree bitwise; the float64
// top-k sum the oracle used before differs by NRMSE ~1e-3.
func TestFlashInferChainAgainstNumpy(t *testing.T) {
	bitwiseAgainstRef(t, "flashinfer", moe.ChainFlashInfer)
}

// bitwiseAgainstRef runs the oracle on the cases ../testdata/ref/NAME_*
// (at least two, on chain) and requires every element to equal their
// out_ref_f32.
func bitwiseAgainstRef(t *testing.T, name string, chain moe.Chain) {
	t.Helper()
	paths, _ := filepath.Glob("../testdata/ref/" + name + "_*.safetensors")
	if len(paths) < 2 {
		t.Fatalf("found %d %s reference cases, want 2", len(paths), name)
	}
	for _, p := range paths {
		c, err := validation.ReadCase(p)
		if err != nil {
			t.Fatal(err)
		}
		if c.Spec.Chain != chain {
			t.Fatalf("%s: chain %v, want %v", p, c.Spec.Chain, chain)
		}
		ref, err := c.Extra["out_ref_f32"].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		out := oracleOut(t, c)
		diff := 0
		for i := range ref {
			if float32(out[i]) != ref[i] {
				diff++
			}
		}
		if diff > 0 {
			t.Errorf("%s: %d of %d elements differ from its out_ref_f32", filepath.Base(p), diff, len(ref))
		}
	}
}

// TestBF16ChainAgainstNumpy runs the oracle's bf16 chain (W4A16) on the
// cases under ../testdata/ref/bf16_*.safetensors (SiTU with both biases
// and a -1 slot; EP2 without biases) and compares with their out_ref_f32:
// an independent numpy emulation of the chain's rounding points (BF16 x,
// float64 GEMM results rounded to float32, float32 bias adds and SiTU, the
// BF16 intermediate, each slot's float32 w * y stored as BF16, the float32
// sum in slot order; scripts/gen_testdata.py bf16, run on the GPU
// machine). Both sides sum each GEMM row in float64 before the one
// float32 rounding, in different orders, so they agree bitwise unless a
// float64 sum lands within its last bits of a float32 rounding boundary.
func TestBF16ChainAgainstNumpy(t *testing.T) { bitwiseAgainstRef(t, "bf16", moe.ChainBF16) }

// TestBF16ChainAgainstTorch runs the oracle's bf16 chain on the cases under
// ../testdata/ref/bf16_torch_*.safetensors and compares with their
// out_ref_f32: the chain computed by torch alone (its own E2M1 decode,
// float64 matmuls rounded once to float32, the activations' float32
// operations in the contract's order with torch's float64 tanh and exp,
// torch's BF16 casts; scripts/gen_testdata.py bf16_torch, run on the GPU
// machine), on x drawn N(0, 1) as BF16 with both biases, -1 slots, EP2
// rank 1 (SiTU) and K = 160, N = 96 (GPT-OSS's clamped SwiGLU). Every
// element agrees.
func TestBF16ChainAgainstTorch(t *testing.T) { bitwiseAgainstRef(t, "bf16_torch", moe.ChainBF16) }
