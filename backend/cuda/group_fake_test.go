//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/backend/backendtest"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// The conformance suite on fake groups of two and four devices, in each
// mode: the group's token movement against the oracle with no GPU. At
// four, the cases whose local experts do not divide over the devices must
// be refused, as the group's capabilities say.
func TestFakeGroupConformance(t *testing.T) {
	for _, d := range []int{2, 4} {
		for _, mode := range []Mode{ModeReplicated, ModeDispatch} {
			t.Run(fmt.Sprintf("%d_%v", d, mode), func(t *testing.T) {
				g, _ := newFakeGroup(d, mode, 10*time.Second)
				defer g.Close()
				backendtest.RunConformance(t, g)
			})
		}
	}
}

// The group's output is, bit for bit, each device's partial output (the
// Go backend on its share, moe.SplitDevices) summed in device order, in
// both modes and at 2, 3, 4, 8 and 24 devices (24: one expert each): with
// M below the device count (empty home shards) and not a multiple of it,
// masked slots and slots of another EP rank, x as float32 and
// pre-quantized, all rows and a subset. The sum is also the whole layer's
// oracle output within the two-GPU test's bounds
// (TestGroupMatchesOneDevice).
func TestFakeGroupIsDeviceSum(t *testing.T) {
	gb, err := backend.Open(backend.GoName)
	if err != nil {
		t.Fatal(err)
	}
	base := validation.CaseSpec{K: 128, N: 64, ELocal: 24, TopK: 6, EP: moe.EP{Rank: 1, Size: 2}, LocalSlots: 4,
		Activation: activation.Situ, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, WeightSeed: 3}
	w, err := validation.GenerateWeights(&base)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []int{2, 3, 4, 8, 24} {
		ws, specs, err := moe.SplitDevices(w, base.LayerSpec(), d)
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []Mode{ModeReplicated, ModeDispatch} {
			g, _ := newFakeGroup(d, mode, 10*time.Second)
			gl, err := g.PrepareMode(w, base.LayerSpec(), mode)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []int{1, d - 1, d + 1, 37} {
				for _, routing := range []validation.Routing{validation.RoutingUniform, validation.RoutingMasked} {
					s := base
					s.M, s.Routing, s.Seed = m, routing, uint64(100*d+m)
					c, err := validation.GenerateCase(&s, w)
					if err != nil {
						t.Fatal(err)
					}
					xq := mxfp.NewMXFP8Matrix(m, w.K)
					xq.Quantize(c.Input.X, s.Recipe)
					quantized := c.Input
					quantized.X, quantized.XQ = nil, xq
					for _, in := range []*moe.Input{&c.Input, &quantized} {
						name := fmt.Sprintf("%d devices %v M=%d %v float x %v", d, mode, m, routing, in.X != nil)
						want := make([]float32, m*w.K)
						for dev := range d {
							l, err := gb.Prepare(ws[dev], specs[dev])
							if err != nil {
								t.Fatal(err)
							}
							part := make([]float32, m*w.K)
							if err := l.Forward(part, in, nil); err != nil {
								t.Fatal(err)
							}
							for i, v := range part {
								if dev == 0 {
									want[i] = v
								} else {
									want[i] += v
								}
							}
						}
						got := make([]float32, m*w.K)
						if err := gl.Forward(got, in, nil); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						if i := firstDiff(got, want); i >= 0 {
							t.Errorf("%s: value %d (row %d) is %g, the device sum %g", name, i, i/w.K, got[i], want[i])
						}
						rows := []int{m - 1, 0}
						sub := make([]float32, len(rows)*w.K)
						if err := gl.Forward(sub, in, rows); err != nil {
							t.Fatalf("%s: rows: %v", name, err)
						}
						if i := firstDiff(sub, append(append([]float32{}, want[(m-1)*w.K:]...), want[:w.K]...)); i >= 0 {
							t.Errorf("%s: rows %v: value %d differs", name, rows, i)
						}
						whole := forwardOn(t, gb, &validation.Case{Weights: w, Spec: base.LayerSpec(), Input: *in})
						if r := validation.Compare(validation.Widen(got), validation.Widen(whole)); r.Cosine < 0.999999 || !(r.NRMSE <= 1e-6) {
							t.Errorf("%s: against the whole layer %+v", name, r)
						}
					}
				}
			}
			if err := g.Close(); err != nil {
				t.Error(err)
			}
		}
	}
}

// A group of one process a rank (OpenRank's: one Group a rank, each
// driving its device), every rank calling Forward with the same input
// from its own goroutine, gives every rank the output the one-process
// group gives, bit for bit, in both modes.
func TestFakeRanks(t *testing.T) {
	const d = 4
	s := validation.CaseSpec{M: 9, K: 128, N: 64, ELocal: 8, TopK: 3, EP: moe.EP{Rank: 1, Size: 2}, LocalSlots: 2, Routing: validation.RoutingMasked,
		Activation: activation.Situ, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 1}
	c, err := validation.GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{ModeReplicated, ModeDispatch} {
		one, _ := newFakeGroup(d, mode, 10*time.Second)
		want := forwardOn(t, one, c)
		one.Close()
		ranks := newFakeRanks(d, mode, 10*time.Second)
		outs, errs := make([][]float32, d), make([]error, d)
		var wg sync.WaitGroup
		for r, g := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				gl, err := g.PrepareMode(c.Weights, c.Spec, mode)
				if err == nil {
					outs[r] = make([]float32, s.M*s.K)
					err = gl.Forward(outs[r], &c.Input, nil)
				}
				errs[r] = errors.Join(err, g.Close())
			}()
		}
		wg.Wait()
		for r := range d {
			if errs[r] != nil {
				t.Fatalf("%v rank %d: %v", mode, r, errs[r])
			}
			if i := firstDiff(outs[r], want); i >= 0 {
				t.Errorf("%v rank %d: value %d is %g, the one-process group's %g", mode, r, i, outs[r][i], want[i])
			}
		}
	}
}

// firstDiff is the index of the first value whose bits differ, or -1.
func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// A failure on one device is an error on every device, never a hang: a
// collective that one device never joins times out and aborts the
// communicators, after which the group refuses work; a device out of
// memory before a dispatch's count exchange does the same; errors name
// the rank.
func TestFakeGroupFailures(t *testing.T) {
	g, _ := newFakeGroup(2, ModeReplicated, 300*time.Millisecond)
	checkCollectiveWithoutPeer(t, g, 10*time.Second)
	if err := g.Close(); err != nil {
		t.Errorf("closing an aborted group: %v", err)
	}

	s := validation.CaseSpec{M: 5, K: 128, N: 64, ELocal: 4, TopK: 2, Activation: activation.Situ,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 1}
	c, err := validation.GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, devs := newFakeGroup(2, ModeDispatch, 300*time.Millisecond)
	gl, err := g.Prepare(c.Weights, c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	oom := errors.New("out of memory")
	devs[1].failAlloc = oom
	out := make([]float32, s.M*s.K)
	if err := gl.Forward(out, &c.Input, nil); !errors.Is(err, oom) || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("device 1 out of memory: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// checkCollectiveWithoutPeer checks g's watchdog: a collective that rank 1
// never joins (it fails before it) leaves rank 0 blocked until the group
// aborts its communicators, within limit, and the group then refuses
// work.
func checkCollectiveWithoutPeer(t *testing.T, g *Group, limit time.Duration) {
	t.Helper()
	start := time.Now()
	err := g.each(func(mb *member) error {
		if mb.rank == 1 {
			return errors.New("device 1 failed first")
		}
		buf, err := mb.dev.alloc(4096)
		if err != nil {
			return err
		}
		if err := mb.dev.allReduceSum(buf, 1024); err != nil {
			return err
		}
		return g.wait(mb)
	})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "aborted") || !strings.Contains(err.Error(), "device 1 failed first") || time.Since(start) > limit {
		t.Errorf("collective without its peer: %v after %v", err, time.Since(start))
	}
	if err := g.each(func(*member) error { return nil }); !errors.Is(err, ErrTimeout) {
		t.Errorf("a call after the abort: %v", err)
	}
}
