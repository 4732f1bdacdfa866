package backend

import (
	"fmt"
	"runtime"
	"sync"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// GoName is the registered name of the pure-Go backend.
const GoName = "go"

func init() { Register(GoName, func() (Backend, error) { return goBackend{}, nil }) }

// goBackend runs the exact oracle of package moe on the CPU.
type goBackend struct{}

func (goBackend) Name() string { return GoName }

func (goBackend) Capabilities() Capabilities {
	return Capabilities{
		Activations:       activation.Kinds(),
		Chains:            moe.Chains(),
		Recipes:           []mxfp.Recipe{mxfp.RecipeFloor, mxfp.RecipeRCeil},
		PreQuantizedInput: true,
		Biases:            true,
		Device:            fmt.Sprintf("CPU, %d goroutines", runtime.GOMAXPROCS(0)),
	}
}

func (b goBackend) Prepare(w *moe.Weights, spec moe.LayerSpec) (Layer, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: Prepare: weights are nil", moe.ErrInput)
	}
	if err := b.Capabilities().Check(spec, w, GoName, GoName); err != nil {
		return nil, err
	}
	o, err := moe.NewOracle(w, spec)
	if err != nil {
		return nil, err
	}
	return &goLayer{o: o, k: w.K}, nil
}

func (goBackend) Close() error { return nil }

// goLayer is safe for concurrent use: forwards share the oracle (read-only)
// under a read lock, and Close waits for running forwards.
type goLayer struct {
	mu sync.RWMutex
	o  *moe.Oracle // nil once closed
	k  int
}

func (l *goLayer) Forward(dst []float32, in *moe.Input, rows []int) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.o == nil {
		return fmt.Errorf("%w: Forward on a closed layer", ErrClosed)
	}
	if err := CheckForward(dst, in, rows, l.k, l.o.NumGlobal()); err != nil {
		return err
	}
	out := make([]float64, len(dst))
	if err := l.o.Forward(out, in, rows); err != nil {
		return err
	}
	for i, v := range out {
		dst[i] = float32(v)
	}
	return nil
}

func (l *goLayer) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.o = nil
	return nil
}
