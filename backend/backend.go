package backend

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// ErrUnsupported is wrapped by Prepare errors for requests a backend cannot
// run. The message names the fallback backend.
var ErrUnsupported = errors.New("backend: unsupported request")

// ErrUnknown is wrapped by Open for a name nobody registered.
var ErrUnknown = errors.New("backend: unknown backend")

// ErrClosed is wrapped by calls on a closed layer or backend.
var ErrClosed = errors.New("backend: closed")

// CheckForward checks a Forward call's arguments for a layer with K-wide
// outputs and numGlobal global experts: the input (moe.Input.Validate),
// rows inside [0, M), and dst of [len(rows), K] (rows nil: [M, K]). Errors
// wrap moe.ErrInput. Backends call it before any work.
func CheckForward(dst []float32, in *moe.Input, rows []int, k, numGlobal int) error {
	if err := in.Validate(k, numGlobal); err != nil {
		return err
	}
	n := in.M
	if rows != nil {
		n = len(rows)
		for _, r := range rows {
			if r < 0 || r >= in.M {
				return fmt.Errorf("%w: row %d outside [0, %d)", moe.ErrInput, r, in.M)
			}
		}
	}
	if len(dst) != n*k {
		return fmt.Errorf("%w: dst has %d values, want [%d, %d] = %d", moe.ErrInput, len(dst), n, k, n*k)
	}
	return nil
}

// Capabilities says what a backend can run.
type Capabilities struct {
	Activations []activation.Kind
	Chains      []moe.Chain
	Recipes     []mxfp.Recipe
	// PreQuantizedInput: accepts Input.XQ.
	PreQuantizedInput bool
	// Biases: runs weights with FC1/FC2 biases (moe.Weights.W31Bias, W2Bias).
	Biases bool
	// MaxTokens bounds M (0: no bound).
	MaxTokens int
	// ExpertMultiple, above 1, is what the local expert count must be a
	// multiple of: an expert-parallel group's device count, over which it
	// spreads the experts evenly.
	ExpertMultiple int
	// Graphs: layers implement GraphLayer.
	Graphs bool
	// Device describes where it runs ("CPU, 2 goroutines", a GPU name).
	Device string
}

// Check returns an ErrUnsupported error if spec or w asks for something
// outside c; fallback names the backend to use instead.
func (c Capabilities) Check(spec moe.LayerSpec, w *moe.Weights, backend, fallback string) error {
	unsupported := func(what string) error {
		return fmt.Errorf("%w: backend %q cannot run %s; use the %q backend instead", ErrUnsupported, backend, what, fallback)
	}
	if !slices.Contains(c.Activations, spec.Activation) {
		return unsupported("activation " + spec.Activation.String())
	}
	if !slices.Contains(c.Chains, spec.Chain) {
		return unsupported("chain " + spec.Chain.String())
	}
	if !slices.Contains(c.Recipes, spec.Recipe) {
		return unsupported("recipe " + spec.Recipe.String())
	}
	if w != nil && w.HasBias() && !c.Biases {
		return unsupported("FC biases (w31_bias, w2_bias)")
	}
	if w != nil && c.ExpertMultiple > 1 && w.E%c.ExpertMultiple != 0 {
		return fmt.Errorf("%w: %w: backend %q spreads the experts evenly, and %d local experts do not divide over %d devices; use the %q backend instead",
			ErrUnsupported, moe.ErrParallel, backend, w.E, c.ExpertMultiple, fallback)
	}
	return nil
}

// Backend runs MoE layers.
type Backend interface {
	Name() string
	Capabilities() Capabilities
	// Prepare checks spec against the capabilities and w, and readies the
	// layer (weights decoded or copied to a device). w must not change
	// while the layer is in use.
	Prepare(w *moe.Weights, spec moe.LayerSpec) (Layer, error)
	Close() error
}

// Layer is a prepared MoE layer.
type Layer interface {
	// Forward runs the layer on in and writes the output rows listed in rows
	// (nil: all M) to dst [len(rows), K]. A backend may compute only those
	// rows, since tokens are independent. Bad arguments are errors wrapping
	// moe.ErrInput, found before any work; after Close it returns an error
	// wrapping ErrClosed. Forward and Close may be called concurrently.
	Forward(dst []float32, in *moe.Input, rows []int) error
	// Close releases the layer. A second Close returns nil.
	Close() error
}

// GraphLayer is a Layer that can capture its forward for a fixed input
// shape (CUDA Graphs) and replay it.
type GraphLayer interface {
	Layer
	// ForwardGraph runs in through a graph captured for in's token count
	// (capturing it on first use) and writes all M rows to dst.
	ForwardGraph(dst []float32, in *moe.Input) error
}

// Timer is implemented by layers that can time their forward on a device
// (kimimoe bench).
type Timer interface {
	// Upload copies in to device buffers kept for in.M tokens.
	Upload(in *moe.Input) error
	// TimeForward runs the forward of the uploaded input of m tokens (as a
	// graph replay if graph) and returns its device time in milliseconds,
	// measured with device events around the kernels only. A device
	// backend starts each timed forward with a cold cache and the device
	// busy while the host launches it (as triton.testing.do_bench does),
	// so the time is the kernels', not the host's launch latency.
	TimeForward(m int, graph bool) (float64, error)
}

// BandwidthMeter is implemented by backends that can measure their
// device's copy bandwidth.
type BandwidthMeter interface {
	// CopyBandwidth times device-to-device copies of n bytes (median of
	// iters) and returns bytes read plus written per second.
	CopyBandwidth(n int, iters int) (float64, error)
}

var (
	mu       sync.Mutex
	registry = map[string]func() (Backend, error){}
)

// Register makes a backend available to Open. It panics on a duplicate
// name (a programmer error at init).
func Register(name string, open func() (Backend, error)) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic("backend: Register called twice for " + name)
	}
	registry[name] = open
}

// Names lists the registered backends.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	var ns []string
	for n := range registry {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// Open opens the named backend. Opening may fail for environmental reasons
// (no GPU driver); the error says why.
func Open(name string) (Backend, error) {
	mu.Lock()
	open, ok := registry[name]
	mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (registered: %v)", ErrUnknown, name, Names())
	}
	return open()
}
