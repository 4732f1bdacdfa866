//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// CUdevice_attribute values used here.
const (
	attrSMCount = 16
	attrCCMajor = 75
	attrCCMinor = 76
)

// Backend drives one GPU: its primary context, one stream, the compiled
// module.
type Backend struct {
	mu     sync.Mutex
	dev    int
	name   string
	arch   archSpec
	sms    int
	ctx    cu.Context
	stream cu.Stream
	module cu.Module
	k      *kernels
	layers map[*Layer]bool // open layers, closed with the backend
	flush  devptr          // timingFlushBytes read (flushL2) before each timed forward, allocated on first use
	timing cu.Module       // the timing module (kernels/flush.cu), loaded on first use
	flushK kernel[l2FlushArgs]
	closed bool
}

// Open opens device ordinal 0 (or $KIMIMOE_DEVICE).
func Open() (*Backend, error) {
	if err := cu.Acquire(); err != nil {
		return nil, err
	}
	n, err := deviceCount()
	if err != nil {
		return nil, err
	}
	ord, err := deviceOrdinal(os.Getenv("KIMIMOE_DEVICE"), n)
	if err != nil {
		return nil, err
	}
	return open(ord)
}

// OpenDevice opens device ordinal ord, ignoring $KIMIMOE_DEVICE.
func OpenDevice(ord int) (*Backend, error) {
	if err := cu.Acquire(); err != nil {
		return nil, err
	}
	n, err := deviceCount()
	if err != nil {
		return nil, err
	}
	if ord < 0 || ord >= n {
		return nil, fmt.Errorf("%w: device %d: this machine has %d device(s)", ErrNoDevice, ord, n)
	}
	return open(ord)
}

// deviceCount is the number of devices; none is ErrNoDevice.
func deviceCount() (int, error) {
	n, err := cu.DeviceCount()
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w (%d devices: %v)", ErrNoDevice, n, err)
	}
	return n, nil
}

func open(ord int) (*Backend, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := cu.DeviceGet(ord)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	b := &Backend{dev: dev, layers: map[*Layer]bool{}}
	b.name, _ = cu.DeviceName(dev)
	// A failed read would pass as "sm_00" or zero SMs: report it instead.
	var major, minor int
	for _, a := range []struct {
		name string
		attr int
		dst  *int
	}{{"compute capability major", attrCCMajor, &major}, {"compute capability minor", attrCCMinor, &minor}, {"multiprocessor count", attrSMCount, &b.sms}} {
		v, err := cu.DeviceAttribute(dev, a.attr)
		if err != nil {
			return nil, fmt.Errorf("cuda: reading device %d's %s: %w", ord, a.name, err)
		}
		*a.dst = v
	}
	if b.arch, err = archFor(major, minor); err != nil {
		return nil, fmt.Errorf("%w: %s is %v; use the %q backend", backend.ErrUnsupported, b.name, err, backend.GoName)
	}
	if b.ctx, err = cu.PrimaryCtxRetain(dev); err != nil {
		return nil, err
	}
	if err := cu.CtxSetCurrent(b.ctx); err != nil {
		cu.PrimaryCtxRelease(dev)
		return nil, err
	}
	cubin, err := b.arch.compile()
	if err == nil {
		b.module, err = cu.ModuleLoadData(cubin)
	}
	if err == nil {
		b.k, err = loadKernels(b.module)
	}
	if err == nil {
		b.stream, err = cu.StreamCreate()
	}
	if err != nil {
		if b.module != nil {
			cu.ModuleUnload(b.module)
		}
		cu.PrimaryCtxRelease(dev)
		return nil, err
	}
	return b, nil
}

// enter pins the goroutine's thread and makes this device's context
// current; the returned func undoes the pin.
func (b *Backend) enter() (func(), error) {
	runtime.LockOSThread()
	if b.closed {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("%w: the cuda backend is closed", backend.ErrClosed)
	}
	if err := cu.CtxSetCurrent(b.ctx); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}

// locked runs f with the backend's lock held and its context current on
// this thread: every device call goes through it.
func (b *Backend) locked(f func() error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	leave, err := b.enter()
	if err != nil {
		return err
	}
	defer leave()
	return f()
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "cuda" }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return deviceCapabilities(fmt.Sprintf("%s, %s, %d SMs", b.name, b.arch, b.sms))
}

// deviceCapabilities are what one device's layer runs, on the named device.
func deviceCapabilities(device string) backend.Capabilities {
	return backend.Capabilities{
		Activations:       gatedKinds(), // the kernels' activation handles every gated kind (TestKernelsUseOnlyABIMacros)
		Chains:            []moe.Chain{moe.ChainMXFP8, moe.ChainFlashInfer, moe.ChainBF16},
		Biases:            true,
		Recipes:           []mxfp.Recipe{mxfp.RecipeFloor, mxfp.RecipeRCeil},
		PreQuantizedInput: true,
		Graphs:            true,
		Device:            device,
	}
}

// Close frees the memory of every layer still open, then releases the
// stream, module and context, and returns every error it met. A second
// Close returns nil.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	errs := []error{cu.CtxSetCurrent(b.ctx)}
	for l := range b.layers {
		errs = append(errs, l.free())
	}
	b.layers = nil
	if b.flush != 0 {
		errs = append(errs, cu.MemFree(b.flush))
		b.flush = 0
	}
	if b.timing != nil {
		errs = append(errs, cu.ModuleUnload(b.timing))
		b.timing = nil
	}
	errs = append(errs, cu.StreamDestroy(b.stream), cu.ModuleUnload(b.module), cu.PrimaryCtxRelease(b.dev))
	b.closed = true
	return errors.Join(errs...)
}

// gatedKinds are the activation table's gated kinds: the ones the GEMM1
// epilogue evaluates.
func gatedKinds() []activation.Kind {
	var ks []activation.Kind
	for _, k := range activation.Kinds() {
		if k.IsGated() {
			ks = append(ks, k)
		}
	}
	return ks
}
