//go:build cgo

package cuda

import (
	"errors"
	"math"
	"testing"
	"unsafe"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// Lifecycle on the device: a forward over more token counts than
// MaxWorkspaces keeps at most MaxWorkspaces workspaces; a second Close
// frees nothing twice; Forward after Close and after the backend's Close
// is ErrClosed, never a panic; Close after the backend's Close is nil.
func TestLayerLifecycle(t *testing.T) {
	bk := openOrSkip(t)
	b := bk.(*Backend)
	defer b.Close()
	s := validation.CaseSpec{Name: "life", M: 1, K: 128, N: 128, ELocal: 4, TopK: 2, Activation: activation.Situ,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 1}
	w, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := b.Prepare(w, s.LayerSpec())
	if err != nil {
		t.Fatal(err)
	}
	l := layer.(*Layer)
	// Which path runs: decode up to decodeMaxM tokens, grouped above.
	if l.PathFor(1) != "decode" || l.PathFor(decodeMaxM) != "decode" || l.PathFor(decodeMaxM+1) != "grouped" {
		t.Errorf("paths: M=1 %s, M=%d %s, M=%d %s", l.PathFor(1), decodeMaxM, l.PathFor(decodeMaxM), decodeMaxM+1, l.PathFor(decodeMaxM+1))
	}
	for m := 1; m <= MaxWorkspaces+4; m++ {
		s.M, s.Seed = m, uint64(m)
		c, err := validation.GenerateCase(&s, w)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, m*w.K)
		if err := l.ForwardGraph(out, &c.Input); err != nil {
			t.Fatalf("M=%d: %v", m, err)
		}
		if len(l.ws) > MaxWorkspaces {
			t.Fatalf("M=%d: %d workspaces kept, bound %d", m, len(l.ws), MaxWorkspaces)
		}
		// The profile names the steps of the path that ran.
		prof, err := l.Profile(m)
		if err != nil {
			t.Fatal(err)
		}
		_, decodeRan := prof["prologue"]
		if decodeRan != (l.PathFor(m) == "decode") {
			t.Errorf("M=%d: path %s, but the steps run were %v", m, l.PathFor(m), prof)
		}
	}
	c, _ := validation.GenerateCase(&s, w)
	out := make([]float32, s.M*w.K)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if l.w31 != 0 || len(l.ws) != 0 {
		t.Fatal("Close left device pointers behind")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := l.Forward(out, &c.Input, nil); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Forward after Close: %v", err)
	}
	l2, err := b.Prepare(w, s.LayerSpec())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("backend Close: %v", err)
	}
	if err := l2.Forward(out, &c.Input, nil); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Forward after the backend's Close: %v", err)
	}
	if err := l2.Close(); err != nil {
		t.Fatalf("layer Close after the backend's: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second backend Close: %v", err)
	}
}

// The kernels' E2M1 -> E4M3 widening, for all 65536 inputs of four codes,
// against package mxfp's decoders (which the reference vectors check):
// every byte must decode to its nibble's value, signed zeros included.
func TestWiden4Exhaustive(t *testing.T) {
	bk := openOrSkip(t)
	b := bk.(*Backend)
	defer b.Close()
	out := make([]uint32, 65536)
	err := b.locked(func() error {
		k, err := bind[testWiden4Args](b.module, kTestWiden4)
		if err != nil {
			return err
		}
		buf, err := cuMemAlloc(4 * len(out))
		if err != nil {
			return err
		}
		defer cuMemFree(buf)
		if err := k.launch([3]int{65536 / abiThreads, 1, 1}, b.stream, &testWiden4Args{Out: buf}); err != nil {
			return err
		}
		if err := cuMemcpyDtoH(u32bytes(out), buf, b.stream); err != nil {
			return err
		}
		return cuStreamSync(b.stream)
	})
	if err != nil {
		t.Fatal(err)
	}
	for v, got := range out {
		for i := range 4 {
			code := uint8(v >> (4 * i) & 0xF)
			e4 := uint8(got >> (8 * i))
			want, have := mxfp.DecodeE2M1(code), mxfp.DecodeE4M3(e4)
			if math.Float32bits(want) != math.Float32bits(have) {
				t.Fatalf("widen4(%#04x) byte %d = %#02x (%v), want E2M1 %#x = %v", v, i, e4, have, code, want)
			}
		}
	}
}

func u32bytes(v []uint32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)) }
