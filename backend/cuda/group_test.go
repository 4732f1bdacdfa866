//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"kimimoe/backend/cuda/internal/nccl"
	"math"
	"strings"
	"testing"
	"time"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/backend/backendtest"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// openGroupOrSkip opens a group over devices 0 and 1, or skips where
// there are no two GPUs or no NCCL.
func openGroupOrSkip(t *testing.T, mode Mode) *Group {
	t.Helper()
	g, err := OpenGroup([]int{0, 1}, GroupOptions{Mode: mode, Timeout: 60 * time.Second})
	for _, skip := range []error{ErrUnavailable, ErrNoDriver, ErrNoDevice, ErrNoNVRTC, ErrNoNCCL, ErrGroup} {
		if errors.Is(err, skip) {
			t.Skipf("no two GPUs with NCCL here: %v", err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The conformance suite on two GPUs in each mode: every chain, activation
// and input form of the smoke matrix against the oracle, bitwise
// determinism over three runs, bad inputs.
func TestGroupConformance(t *testing.T) {
	for _, mode := range []Mode{ModeReplicated, ModeDispatch} {
		t.Run(mode.String(), func(t *testing.T) {
			g := openGroupOrSkip(t, mode)
			defer g.Close()
			backendtest.RunConformance(t, g)
		})
	}
}

// The layer spread over two GPUs against the same layer on one: each
// device sums its own slots in slot order and the two partial sums are
// added, where one device sums all slots in one pass, so the outputs may
// differ by float32 reassociation (relative 2^-24 per addition), and on
// the quantized chains by the rare MXFP8 rounding flip that a different
// GEMM path (dispatch runs fewer tokens per device) can cause. The bounds
// are the issue's: cosine >= 0.999999, NRMSE <= 1e-6. The two modes agree
// bitwise where their partial outputs do (both add a + b).
func TestGroupMatchesOneDevice(t *testing.T) {
	one := openCUDAOrSkip(t)
	groups := map[Mode]*Group{}
	for _, mode := range []Mode{ModeReplicated, ModeDispatch} {
		groups[mode] = openGroupOrSkip(t, mode)
		defer groups[mode].Close()
	}
	specs, err := validation.ValidationMatrix("smoke", activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil)
	if err != nil {
		t.Fatal(err)
	}
	real := validation.KimiEP32Rank7(activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil)
	for _, m := range []int{1, 24, 128, 512} {
		s := real
		s.Name, s.M, s.Seed = fmt.Sprintf("kimi_m%d", m), m, uint64(m)
		specs = append(specs, s)
	}
	weights := map[uint64]*moe.Weights{}
	for _, s := range specs {
		w := weights[s.WeightSeed<<32|uint64(s.K)]
		if w == nil {
			if w, err = validation.GenerateWeights(&s); err != nil {
				t.Fatal(err)
			}
			weights[s.WeightSeed<<32|uint64(s.K)] = w
		}
		c, err := validation.GenerateCase(&s, w)
		if err != nil {
			t.Fatal(err)
		}
		want := forwardOn(t, one, c)
		outs := map[Mode][]float32{}
		for mode, g := range groups {
			outs[mode] = forwardOn(t, g, c)
			m := validation.Compare(validation.Widen(outs[mode]), validation.Widen(want))
			if m.Cosine < 0.999999 || !(m.NRMSE <= 1e-6) || m.NonFiniteMismatch > 0 {
				t.Errorf("%s %v: against one device %+v", s.Name, mode, m)
			}
		}
		same := 0
		for i := range want {
			if math.Float32bits(outs[ModeReplicated][i]) == math.Float32bits(outs[ModeDispatch][i]) {
				same++
			}
		}
		t.Logf("%s: replicated and dispatch bitwise equal in %d of %d values", s.Name, same, len(want))
	}
}

// forwardOn prepares c's layer on b and runs it once (NaN-prefilled dst).
func forwardOn(t *testing.T, b backend.Backend, c *validation.Case) []float32 {
	t.Helper()
	l, err := b.Prepare(c.Weights, c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := make([]float32, c.Input.M*c.Weights.K)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	if err := l.Forward(out, &c.Input, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// Errors of the group: experts that do not divide over the devices, a
// device the machine does not have, a rank whose peers never join, and a
// collective one rank never joins (the watchdog aborts it: a timeout,
// not a hang).
func TestGroupErrors(t *testing.T) {
	g := openGroupOrSkip(t, ModeReplicated)
	defer g.Close()
	s := validation.CaseSpec{Name: "odd", M: 2, K: 128, N: 128, ELocal: 3, TopK: 2, Activation: activation.Situ,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 1}
	w, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Prepare(w, s.LayerSpec()); !errors.Is(err, backend.ErrUnsupported) || !errors.Is(err, moe.ErrParallel) ||
		!strings.Contains(err.Error(), "3 local experts do not divide over 2 devices") {
		t.Errorf("3 experts over 2 devices: %v", err)
	}
	n, _ := deviceCount()
	if _, err := OpenGroup([]int{0, n}, GroupOptions{}); !errors.Is(err, ErrGroup) {
		t.Errorf("device %d of %d: %v", n, n, err)
	}

	// A collective that device 1 never joins: the watchdog aborts it.
	g.opts.Timeout = 2 * time.Second
	checkCollectiveWithoutPeer(t, g, 20*time.Second)

	// A rank whose peer never starts.
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = OpenRank(id, 0, 2, 0, GroupOptions{Timeout: 2 * time.Second})
	if !errors.Is(err, ErrTimeout) || time.Since(start) > 20*time.Second {
		t.Errorf("OpenRank without its peer: %v after %v", err, time.Since(start))
	}
}

// NCCL is loaded at an explicit call; a library that is not NCCL is
// reported with the missing symbol. Skipped once NCCL is loaded.
func TestWrongNCCLReportsMissingSymbol(t *testing.T) {
	if nccl.Loaded() {
		t.Skip("NCCL already loaded in this process")
	}
	t.Setenv("KIMIMOE_LIBNCCL", "libm.so.6")
	if _, err := NewUniqueID(); !errors.Is(err, ErrNoNCCL) || !strings.Contains(err.Error(), "missing symbol ncclGetVersion") {
		t.Errorf("libm as NCCL: %v", err)
	}
	t.Setenv("KIMIMOE_LIBNCCL", "/no/such/libnccl.so.2")
	if _, err := NCCLVersion(); !errors.Is(err, ErrNoNCCL) || !strings.Contains(err.Error(), "/no/such/libnccl.so.2") {
		t.Errorf("missing file: %v", err)
	}
}
