package cuda

import (
	"errors"
	"kimimoe/validation"
	"testing"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/backend/backendtest"
	"kimimoe/backend/cuda/internal/layout/fp4"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// openOrSkip opens the GPU backend, or skips the test where there is none
// (CI, the development machine): no cgo, no driver, no device, no NVRTC.
func openOrSkip(t *testing.T) backend.Backend {
	t.Helper()
	b, err := backend.Open("cuda")
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoDevice) || errors.Is(err, ErrNoNVRTC) {
		t.Skipf("no GPU here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConformance runs the shared conformance suite on the GPU.
func TestConformance(t *testing.T) {
	b := openOrSkip(t)
	defer b.Close()
	backendtest.RunConformance(t, b)
}

// The shared suite again with the wgmma-fp4 path off (every layer tuned
// by WithTuning), so that on sm_90 the decode and mma.sync paths it takes
// from the small and mid token counts are checked too.
func TestConformanceWithoutFP4(t *testing.T) {
	b := openOrSkip(t)
	defer b.Close()
	backendtest.RunConformance(t, WithTuning(b, Tuning{FP4MaxM: -1}))
}

// What the GPU backend does not run fails at Prepare, naming the fallback;
// shapes it pads run.
func TestUnsupportedAtPrepare(t *testing.T) {
	b := openOrSkip(t)
	defer b.Close()
	s := validation.CaseSpec{Name: "u", M: 1, K: 128, N: 128, ELocal: 2, TopK: 1, Activation: activation.Relu2,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 1}
	c, err := validation.GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prepare(c.Weights, c.Spec); !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("relu2: %v, want ErrUnsupported", err)
	}
	s.Activation, s.Chain = activation.Situ, moe.ChainExact
	c, _ = validation.GenerateCase(&s, nil)
	if _, err := b.Prepare(c.Weights, c.Spec); !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("exact chain: %v, want ErrUnsupported", err)
	}
	// The bf16 chain runs on the wgmma paths only: at K = 160, N = 96 (the
	// wgmma-fp4 path runs them padded, the BF16 wgmma path needs multiples
	// of 128) a weight scale past the widening's window leaves it none.
	s.Chain, s.K, s.N = moe.ChainBF16, 160, 96
	c, _ = validation.GenerateCase(&s, nil)
	c.Weights.W2Scale[0] = fp4.MaxScale + 1
	if _, err := b.Prepare(c.Weights, c.Spec); !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("bf16 chain, K=160, N=96, a scale of 2^2: %v, want ErrUnsupported", err)
	}
	// K and N multiples of 32 but not of the 128-element stage (GPT-OSS's
	// 2880) run on the decode path, padded; they used to be refused.
	s.Chain, s.K, s.N = moe.ChainMXFP8, 96, 160
	c, _ = validation.GenerateCase(&s, nil)
	layer, err := b.Prepare(c.Weights, c.Spec)
	if err != nil {
		t.Fatalf("K=96 N=160: %v", err)
	}
	defer layer.Close()
	out := make([]float32, s.M*s.K)
	if err := layer.Forward(out, &c.Input, nil); err != nil {
		t.Fatal(err)
	}
	want, _ := c.OracleForward(nil)
	if m := validation.Compare(validation.Widen(out), want); m.Cosine < validation.MinCosine || m.NRMSE > validation.MaxNRMSE {
		t.Errorf("K=96 N=160 against the oracle: %v", m)
	}
}

// TestCompileBothBodies compiles the kernels with NVRTC for sm_90 (the
// portable body) and for sm_120a with the native block-scaled MMA body. It
// needs NVRTC only, no device: on the GPU machine it is the evidence that
// the sm_120a body compiles.
func TestCompileBothBodies(t *testing.T) {
	for _, c := range []struct {
		arch   string
		native bool
	}{{ArchSM90, false}, {ArchSM120a, false}, {ArchSM120a, true}} {
		cubin, err := CompileFor(c.arch, c.native)
		if errors.Is(err, ErrNoNVRTC) || errors.Is(err, ErrUnavailable) {
			t.Skipf("no NVRTC here: %v", err)
		}
		if err != nil {
			t.Fatalf("%s native=%v: %v", c.arch, c.native, err)
		}
		if len(cubin) < 1000 {
			t.Fatalf("%s native=%v: cubin of %d bytes", c.arch, c.native, len(cubin))
		}
		v, _ := NVRTCVersion()
		t.Logf("%s native=%v: %d-byte cubin (NVRTC %s)", c.arch, c.native, len(cubin), v)
	}
}
