package backend

import (
	"fmt"
	"runtime"

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
		Device:            fmt.Sprintf("CPU, %d goroutines", runtime.GOMAXPROCS(0)),
	}
}

func (b goBackend) Prepare(w *moe.Weights, spec moe.LayerSpec) (Layer, error) {
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

type goLayer struct {
	o *moe.Oracle
	k int
}

func (l *goLayer) Forward(dst []float32, in *moe.Input, rows []int) error {
	n := in.M
	if rows != nil {
		n = len(rows)
	}
	if len(dst) != n*l.k {
		return fmt.Errorf("%w: dst has %d values, want [%d, %d]", moe.ErrInput, len(dst), n, l.k)
	}
	out := make([]float64, n*l.k)
	if err := l.o.Forward(out, in, rows); err != nil {
		return err
	}
	for i, v := range out {
		dst[i] = float32(v)
	}
	return nil
}

func (l *goLayer) Close() error { l.o = nil; return nil }
