//go:build cgo

package cuda

import (
	"errors"
	"testing"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// Lifecycle on the device: a forward over more token counts than
// maxWorkspaces keeps at most maxWorkspaces workspaces; a second Close
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
	for m := 1; m <= maxWorkspaces+4; m++ {
		s.M, s.Seed = m, uint64(m)
		c, err := validation.GenerateCase(&s, w)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, m*w.K)
		if err := l.ForwardGraph(out, &c.Input); err != nil {
			t.Fatalf("M=%d: %v", m, err)
		}
		if len(l.ws) > maxWorkspaces {
			t.Fatalf("M=%d: %d workspaces kept, bound %d", m, len(l.ws), maxWorkspaces)
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
