//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"unsafe"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// CUdevice_attribute values used here.
const (
	attrSMCount = 16
	attrCCMajor = 75
	attrCCMinor = 76
)

// MaxWorkspaces bounds the per-token-count workspaces (device buffers and
// graphs) a layer keeps; the least recently used is freed beyond it. A
// serving loop uses a handful of batch sizes (and kimimoe bench at most
// this many); a sweep over more M stays bounded at this many.
const MaxWorkspaces = 16

// tileTokens picks the GEMMs' token tile (TT) for a forward of m tokens:
// 64 (two CTAs per SM) up to 512 tokens, 128 (each weight load reused by
// twice the tokens) above, where the reuse outweighs the lost occupancy.
func tileTokens(m int) int {
	if m <= 512 {
		return abiTileSmall
	}
	return abiTileLarge
}

// decodeMaxM is the largest token count that takes the decode path (for
// shapes the grouped path runs; K or N not a multiple of abiStageK always
// take it): up to there every SM streaming a slice of the weights beats
// tiles of tokens, which have too few tokens to share a weight load.
const decodeMaxM = 24

// useDecode reports whether a forward of m tokens takes the decode path.
func (l *Layer) useDecode(m int) bool {
	return m <= l.decodeMaxM || l.w.K%abiStageK != 0 || l.w.N%abiStageK != 0
}

// SetDecodeMaxM sets the largest token count that takes the decode path
// (default 24; -1: never where the shape allows the grouped path) and frees
// the layer's workspaces. It exists to measure the crossover (kimimoe bench
// --decode-max-m).
func (l *Layer) SetDecodeMaxM(m int) error {
	return l.reconfigure(func() error { l.decodeMaxM = m; return nil })
}

// PathFor names the kernels a forward of m tokens runs: "decode" (weights
// streamed, tokens on the MMA's narrow side), "wgmma-fp4" (the grouped
// GEMMs on Hopper's warpgroup MMA with the MXFP4 weights widened to BF16
// in registers), "wgmma" (the same with the weights stored as BF16) or
// "grouped" (token tiles of the mma.sync grouped GEMMs). An input whose x
// passes BF16's range (xPastBF16) runs "grouped" where this says one of
// the two wgmma paths.
func (l *Layer) PathFor(m int) string {
	switch {
	case l.useF4(m):
		return "wgmma-fp4"
	case l.useDecode(m):
		return "decode"
	case l.useWG(m):
		return "wgmma"
	}
	return "grouped"
}

// f4MaxMDefault is the largest token count on the wgmma-fp4 GEMMs, which
// take every smaller one where they are available (before the decode
// path); above it the wgmma GEMMs on BF16 weights take over. Since both
// paths stage their token operands in the 128-byte swizzled form, the
// wgmma-fp4 GEMMs, reading a quarter of the weight bytes, are the faster
// at every M measured, so there is no limit by default; the wgmma path
// runs where the wgmma-fp4 one is not available (weight scales past its
// exact range).
const f4MaxMDefault = math.MaxInt32

// useF4 reports whether a grouped forward of m tokens runs the wgmma-fp4
// GEMMs: on sm_90a, for the shapes and scales f4Available allows, up to
// f4MaxM tokens (SetFP4MaxM).
func (l *Layer) useF4(m int) bool { return l.f4W31 != 0 && m <= l.f4MaxM }

// f4SyncLoop reports whether the wgmma-fp4 GEMMs of token tile tt run the
// barrier-free mma.sync loop (f4sTiles) rather than the wgmma loop.
func (l *Layer) f4SyncLoop(tt int) bool { return !l.f4NoSync && slices.Contains(f4sTiles, tt) }

// f4sAddressable reports whether the mma.sync loop's tile tt can address
// the token rows of both GEMMs, x [m, K] and the intermediate [entries, N]
// as BF16 (elements each). The 8-token tile finds a row's 16-byte pieces
// by a 32-bit count of 16-byte units (F4sPieces and f4s_keep_pieces in
// kernels/moe.cu), so each buffer must be under 64 GiB; past that (about
// 700,000 tokens at the Kimi shape, reached only with the tile forced) it
// runs the wgmma loop, with the same bits. The 16-token tile addresses
// rows in 64 bits.
func f4sAddressable(tt int, elems ...int) bool {
	if tt != 8 {
		return true
	}
	for _, n := range elems {
		if 2*uint64(n) >= 1<<36 {
			return false
		}
	}
	return true
}

// f4Fit reports whether m tokens in token tile tt run the wgmma loop at
// each tile's N (f4FitTiles, up to f4FitMaxM tokens) rather than at tt.
// The fitted tiles are not the mma.sync loop's (TestF4SyncTiles).
func (l *Layer) f4Fit(m, tt int) bool { return m <= l.f4FitMaxM && slices.Contains(f4FitTiles, tt) }

// f4ActKernel says whether the m-token forward on the wgmma-fp4 path runs
// GEMM1's activation and requantization as a kernel of its own
// (kmoe_act_requant) rather than in GEMM1's epilogue.
func (l *Layer) f4ActKernel(m int) bool { return m >= l.f4ActMinM && m <= l.f4ActMaxM }

// actByTile: the activation kernel of m tokens runs by tile (kmoe.cu
// act_requant_tile), beside GEMM1's last tiles, and GEMM2 waits for its
// own tile's rows of it, not for all of it.
func (l *Layer) actByTile(m int) bool {
	return m >= f4TileReadyMinM && m <= l.actByTileMaxM && !l.noTileReady
}

// f4TileTokens is the wgmma-fp4 GEMMs' token tile (the wgmma's N) for m
// tokens: the tokens an expert gets grow with m, and each tile is the
// smallest that holds about one expert's tokens at the most CTAs an SM
// (with the bench's routing an expert gets about 0.29 M tokens; 48 tokens
// run three CTAs an SM where 64's run two). The boundaries are where the
// neighbouring tiles measured even (docs/PERF.md; KIMIMOE_FP4_TOKENS
// forces one).
func f4TileTokens(m int) int {
	switch {
	case m <= 24:
		return 8
	case m <= f4SyncMaxM:
		return 16
	case m <= 88:
		return 32
	case m <= 144:
		return 48
	case m < f4T128MinM:
		return 64
	}
	return 128
}

// f4T128MinM is the fewest tokens on the 128-token tile (one CTA an SM, A
// double-buffered: f4PipeMinTokens), where the widening of a weight
// serves twice the tokens of the 64-token tile's: the two tiles measured
// even at 1024 tokens. The 256-token tile (KIMIMOE_FP4_TOKENS=256 only)
// was slower than 128 at every M measured, so the default never takes it.
const f4T128MinM = 1025

// f4SyncMaxM is the most tokens on the small tiles (f4sTiles), whose
// GEMMs run the barrier-free mma.sync loop (f4TileTokens).
const f4SyncMaxM = 36

// SetFP4MaxM sets the largest token count on the wgmma-fp4 GEMMs (0: none)
// and frees the layer's workspaces; setting it above 0 where the path is
// not available is an error wrapping backend.ErrUnsupported. It exists to
// measure the crossovers (kimimoe bench --fp4-max-m).
func (l *Layer) SetFP4MaxM(m int) error {
	return l.reconfigure(func() error {
		if m > 0 && l.f4W31 == 0 {
			return fmt.Errorf("%w: the wgmma-fp4 path needs an sm_90 device, K and N multiples of 128 and weight scales up to 2^%d (%s)",
				backend.ErrUnsupported, f4MaxScale-127, l.f4WhyNot)
		}
		l.f4MaxM = m
		return nil
	})
}

// reconfigure applies a change of path settings under the lock and frees
// the layer's workspaces and their graphs, which were made for the old
// settings.
func (l *Layer) reconfigure(set func() error) error {
	return l.b.locked(func() error {
		if l.closed {
			return fmt.Errorf("%w: the layer is closed", backend.ErrClosed)
		}
		if err := set(); err != nil {
			return err
		}
		var errs []error
		for k, ws := range l.ws {
			errs = append(errs, ws.free())
			delete(l.ws, k)
		}
		return errors.Join(errs...)
	})
}

// wgMinM is the smallest token count whose grouped forward runs the
// wgmma GEMMs. Below it the mma.sync GEMMs, which read the weights as
// MXFP4 (a quarter of the BF16 bytes), are faster while the weight bytes
// dominate; from here the wgmma's rate does.
const wgMinM = 192

// useWG reports whether a grouped forward of m tokens runs the wgmma
// GEMMs: on sm_90a, for K and N multiples of 128, from wgMinM tokens
// (SetWGMinM), unless turned off (SetWGMMA).
func (l *Layer) useWG(m int) bool { return l.wgW31 != 0 && !l.wgOff && m >= l.wgMinM }

// SetWGMinM sets the smallest token count on the wgmma GEMMs (default
// wgMinM; 1: every grouped forward) and frees the layer's workspaces. It
// exists to measure the crossover (kimimoe bench --wgmma-min-m).
func (l *Layer) SetWGMinM(m int) error {
	return l.reconfigure(func() error { l.wgMinM = m; return nil })
}

// SetWGMMA turns the wgmma GEMMs of the grouped path on (the default where
// the device and weights allow them) or off (the mma.sync GEMMs, to compare
// the two), and frees the layer's workspaces and their graphs. Turning it
// on where it is not available is an error wrapping backend.ErrUnsupported.
func (l *Layer) SetWGMMA(on bool) error {
	return l.reconfigure(func() error {
		if on && l.wgW31 == 0 {
			return fmt.Errorf("%w: the wgmma path needs an sm_90 device and K and N multiples of %d (%s)",
				backend.ErrUnsupported, abiStageK, l.wgWhyNot)
		}
		l.wgOff = !on
		return nil
	})
}

// kernel is an entry point bound to its ABI argument type.
type kernel[A any] struct{ fn cuFunction }

func (k kernel[A]) launch(grid [3]int, s cuStream, args *A) error {
	return cuLaunch(k.fn, grid, abiThreads, 0, s, args)
}

func (k kernel[A]) launchWith(grid [3]int, block, smem int, s cuStream, args *A) error {
	return cuLaunch(k.fn, grid, block, smem, s, args)
}

// launchPDL is launchWith with programmatic dependent launch: for kernels
// that execute pdl_wait (kernels/moe.cu) before reading what the kernel
// ahead of them in the stream writes.
func (k kernel[A]) launchPDL(grid [3]int, block, smem int, s cuStream, args *A) error {
	return cuLaunchPDL(k.fn, grid, block, smem, s, args)
}

// bind looks up spec in m as a kernel taking A; A must be spec's type.
func bind[A any](m cuModule, spec kernelSpec) (kernel[A], error) {
	if reflect.TypeFor[A]() != spec.args {
		panic(fmt.Sprintf("cuda: %s takes %v, bound as %v", spec.name, spec.args, reflect.TypeFor[A]()))
	}
	f, err := cuModuleGetFunction(m, spec.name)
	return kernel[A]{f}, err
}

// bindAll binds the instances of one kernel (specs, by their template
// value) and, with smem, lets each use smem(value) bytes of dynamic shared
// memory.
func bindAll[A any](m cuModule, specs map[int]kernelSpec, smem func(int) int) (map[int]kernel[A], error) {
	out := map[int]kernel[A]{}
	var errs []error
	for v, spec := range specs {
		var k kernel[A]
		var err error
		if smem != nil {
			k, err = bindSmem[A](m, spec, smem(v))
		} else {
			k, err = bind[A](m, spec)
		}
		errs = append(errs, err)
		out[v] = k
	}
	return out, errors.Join(errs...)
}

// bindSmem binds spec and lets it use smem bytes of dynamic shared memory.
func bindSmem[A any](m cuModule, spec kernelSpec, smem int) (kernel[A], error) {
	k, err := bind[A](m, spec)
	if err == nil {
		err = cuFuncSetMaxDynamicSmem(k.fn, smem)
	}
	return k, err
}

// kernels are the module's entry points, typed.
type kernels struct {
	quantizeX    kernel[quantizeXArgs]
	routeCount   kernel[routeCountArgs]
	routeScatter kernel[routeScatterArgs]
	gemm1        map[int]kernel[gemm1Args] // by token tile
	gemm2        map[int]kernel[gemm2Args]
	finalize     kernel[finalizeArgs]
	decPrologue  kernel[decodePrologueArgs]
	decGemm1     map[int]kernel[decodeGemm1Args] // by token subtiles
	decGemm2     map[int]kernel[decodeGemm2Args]
	gatherRows   kernel[gatherRowsArgs]
	addRows      kernel[addRowsArgs]
	xBF16        kernel[xBF16Args]
	routeXBF16   kernel[routeXBF16Args]
	routeXMany   kernel[routeXBF16Args]
	wgGemm1      map[int]kernel[wgGemm1Args] // by weight rows per tile
	wgGemm2      map[int]kernel[wgGemm2Args]
	f4Gemm1      map[int]kernel[f4Gemm1Args] // by token tile
	f4Gemm2      map[int]kernel[f4Gemm2Args]
	f4FitGemm1   map[int]kernel[f4Gemm1Args] // the wgmma loop at the tile's N, by token tile (f4FitTiles)
	f4FitGemm2   map[int]kernel[f4Gemm2Args]
	f4sGemm1     map[int]kernel[f4Gemm1Args] // the small tiles' barrier-free loop, by token tile
	f4sGemm2     map[int]kernel[f4Gemm2Args]
	f4sGemm2Deep kernel[f4Gemm2Args]    // its GEMM2 at 8 tokens for small grids (f4sDeep2)
	actRequant   kernel[actRequantArgs] // GEMM1's epilogue on its own (f4ActKernel)
	l2Flush      kernel[l2FlushArgs]
}

func loadKernels(m cuModule) (*kernels, error) {
	k := &kernels{gemm1: map[int]kernel[gemm1Args]{}, gemm2: map[int]kernel[gemm2Args]{}}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	k.quantizeX, err = bind[quantizeXArgs](m, kQuantizeX)
	add(err)
	k.routeCount, err = bind[routeCountArgs](m, kRouteCount)
	add(err)
	k.routeScatter, err = bind[routeScatterArgs](m, kRouteScatter)
	add(err)
	for tt, specs := range map[int][2]kernelSpec{abiTileSmall: {kGemm1Small, kGemm2Small}, abiTileLarge: {kGemm1Large, kGemm2Large}} {
		g1, err := bind[gemm1Args](m, specs[0])
		add(err)
		g2, err := bind[gemm2Args](m, specs[1])
		add(err)
		k.gemm1[tt], k.gemm2[tt] = g1, g2
	}
	k.finalize, err = bind[finalizeArgs](m, kFinalize)
	add(err)
	k.decPrologue, err = bind[decodePrologueArgs](m, kDecPrologue)
	add(err)
	k.decGemm1, err = bindAll[decodeGemm1Args](m, kDecGemm1, nil)
	add(err)
	k.decGemm2, err = bindAll[decodeGemm2Args](m, kDecGemm2, nil)
	add(err)
	k.gatherRows, err = bind[gatherRowsArgs](m, kGatherRows)
	add(err)
	k.addRows, err = bind[addRowsArgs](m, kAddRows)
	add(err)
	k.xBF16, err = bind[xBF16Args](m, kXBF16)
	add(err)
	k.routeXBF16, err = bind[routeXBF16Args](m, kRouteXBF16)
	add(err)
	k.routeXMany, err = bind[routeXBF16Args](m, kRouteXMany)
	add(err)
	k.wgGemm1, err = bindAll[wgGemm1Args](m, kWGGemm1, wgSmem)
	add(err)
	k.wgGemm2, err = bindAll[wgGemm2Args](m, kWGGemm2, wgSmem)
	add(err)
	k.f4Gemm1, err = bindAll[f4Gemm1Args](m, kF4Gemm1, f4Smem)
	add(err)
	k.f4Gemm2, err = bindAll[f4Gemm2Args](m, kF4Gemm2, f4Smem)
	add(err)
	k.f4FitGemm1, err = bindAll[f4Gemm1Args](m, kF4FitGemm1, f4Smem)
	add(err)
	k.f4FitGemm2, err = bindAll[f4Gemm2Args](m, kF4FitGemm2, f4Smem)
	add(err)
	k.f4sGemm1, err = bindAll[f4Gemm1Args](m, kF4SGemm1, f4sSmem)
	add(err)
	k.f4sGemm2, err = bindAll[f4Gemm2Args](m, kF4SGemm2, f4sSmem)
	add(err)
	k.f4sGemm2Deep, err = bindSmem[f4Gemm2Args](m, kF4SGemm2Deep, f4sSmem(8))
	add(err)
	k.actRequant, err = bind[actRequantArgs](m, kActRequant)
	add(err)
	k.l2Flush, err = bind[l2FlushArgs](m, kL2Flush)
	add(err)
	return k, errors.Join(errs...)
}

// Backend drives one GPU: its primary context, one stream, the compiled
// module.
type Backend struct {
	mu     sync.Mutex
	dev    int
	name   string
	arch   string
	sms    int
	ctx    cuContext
	stream cuStream
	module cuModule
	k      *kernels
	layers map[*Layer]bool // open layers, closed with the backend
	flush  devptr          // timingFlushBytes read (flushL2) before each timed forward, allocated on first use
	closed bool
}

// Open opens device ordinal 0 (or $KIMIMOE_DEVICE). Set
// KIMIMOE_NATIVE_MX=1 on an sm_120 device to use the native block-scaled
// MMA body (compiled, never run by kimimoe's authors).
func Open() (*Backend, error) {
	if err := acquire(); err != nil {
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
	if err := acquire(); err != nil {
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
	n, err := cuDeviceCount()
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w (%d devices: %v)", ErrNoDevice, n, err)
	}
	return n, nil
}

func open(ord int) (*Backend, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := cuDeviceGet(ord)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	b := &Backend{dev: dev, layers: map[*Layer]bool{}}
	b.name, _ = cuDeviceName(dev)
	// A failed read would pass as "sm_00" or zero SMs: report it instead.
	var major, minor int
	for _, a := range []struct {
		name string
		attr int
		dst  *int
	}{{"compute capability major", attrCCMajor, &major}, {"compute capability minor", attrCCMinor, &minor}, {"multiprocessor count", attrSMCount, &b.sms}} {
		v, err := cuDeviceAttribute(dev, a.attr)
		if err != nil {
			return nil, fmt.Errorf("cuda: reading device %d's %s: %w", ord, a.name, err)
		}
		*a.dst = v
	}
	native := false
	switch cc := major*10 + minor; {
	case cc == 90:
		b.arch = ArchSM90a // the wgmma path's instructions; the code runs on sm_90 only
	case cc == 89:
		b.arch = fmt.Sprintf("sm_%d", cc)
	case cc >= 120 && cc < 130:
		b.arch = ArchSM120a
		native = os.Getenv("KIMIMOE_NATIVE_MX") == "1"
	default:
		return nil, fmt.Errorf("%w: %s is sm_%d%d; the kernels need sm_89, sm_90 or sm_120 (FP8 mma.sync); use the %q backend",
			backend.ErrUnsupported, b.name, major, minor, backend.GoName)
	}
	if b.ctx, err = cuPrimaryCtxRetain(dev); err != nil {
		return nil, err
	}
	if err := cuCtxSetCurrent(b.ctx); err != nil {
		cuPrimaryCtxRelease(dev)
		return nil, err
	}
	cubin, err := CompileFor(b.arch, native)
	if err == nil {
		b.module, err = cuModuleLoadData(cubin)
	}
	if err == nil {
		b.k, err = loadKernels(b.module)
	}
	if err == nil {
		b.stream, err = cuStreamCreate()
	}
	if err != nil {
		if b.module != nil {
			cuModuleUnload(b.module)
		}
		cuPrimaryCtxRelease(dev)
		return nil, err
	}
	if native {
		b.name += " (native MX MMA)"
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
	if err := cuCtxSetCurrent(b.ctx); err != nil {
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
	return backend.Capabilities{
		Activations:       []activation.Kind{activation.Swiglu, activation.Geglu, activation.SwigluBias, activation.SwigluStep, activation.GegluTanh, activation.Situ},
		Chains:            []moe.Chain{moe.ChainMXFP8, moe.ChainFlashInfer},
		Recipes:           []mxfp.Recipe{mxfp.RecipeFloor, mxfp.RecipeRCeil},
		PreQuantizedInput: true,
		Graphs:            true,
		Device:            fmt.Sprintf("%s, %s, %d SMs", b.name, b.arch, b.sms),
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
	errs := []error{cuCtxSetCurrent(b.ctx)}
	for l := range b.layers {
		errs = append(errs, l.free())
	}
	b.layers = nil
	if b.flush != 0 {
		errs = append(errs, cuMemFree(b.flush))
		b.flush = 0
	}
	errs = append(errs, cuStreamDestroy(b.stream), cuModuleUnload(b.module), cuPrimaryCtxRelease(b.dev))
	b.closed = true
	return errors.Join(errs...)
}

// CopyBandwidth times device-to-device copies of n bytes (median of iters)
// and returns bytes read plus written per second.
func (b *Backend) CopyBandwidth(n int, iters int) (bw float64, err error) {
	err = b.locked(func() error {
		src, err := cuMemAlloc(n)
		if err != nil {
			return err
		}
		defer cuMemFree(src)
		dst, err := cuMemAlloc(n)
		if err != nil {
			return err
		}
		defer cuMemFree(dst)
		if err := cuMemsetD32(src, 0x3f800000, n/4, b.stream); err != nil {
			return err
		}
		var ms []float64
		for k := 0; k < iters+2; k++ {
			t, err := timeOn(b.stream, func() error { return cuMemcpyDtoD(dst, src, n, b.stream) })
			if err != nil {
				return err
			}
			if k >= 2 { // warm-up
				ms = append(ms, t)
			}
		}
		sort.Float64s(ms)
		bw = 2 * float64(n) / (ms[len(ms)/2] / 1e3)
		return nil
	})
	return bw, err
}

// Prepare implements backend.Backend: it checks the request and copies the
// weights and activation parameters to the device.
func (b *Backend) Prepare(w *moe.Weights, spec moe.LayerSpec) (backend.Layer, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: Prepare: weights are nil", moe.ErrInput)
	}
	if err := b.Capabilities().Check(spec, w, "cuda", backend.GoName); err != nil {
		return nil, err
	}
	if err := spec.Validate(w); err != nil {
		return nil, err
	}
	numGlobal, err := spec.EP.NumGlobal(w.E)
	if err != nil {
		return nil, err
	}
	// The decode prologue counts experts in shared memory (4 bytes each, in
	// the 48 KB a kernel gets without opting in to more).
	if 4*(w.E+1) > 48<<10 {
		return nil, fmt.Errorf("%w: backend \"cuda\" runs at most %d local experts, have %d; use the %q backend",
			backend.ErrUnsupported, 48<<10/4-1, w.E, backend.GoName)
	}
	l := &Layer{b: b, w: w, spec: spec, numGlobal: numGlobal, decodeMaxM: decodeMaxM, wgMinM: wgMinM, f4MaxM: f4MaxMDefault,
		ws: map[int]*workspace{}, f4FitMaxM: f4FitMaxMDefault, f4ActMinM: f4ActMinMDefault, f4ActMaxM: f4ActMaxMDefault,
		actByTileMaxM: actByTileMaxMDefault, routeManyMaxM: routeManyMaxMDefault}
	// Path settings from the environment, to run a whole suite or bench on
	// one path (the Set* methods do the same per layer).
	for _, e := range []struct {
		name string
		min  int
		dst  *int
	}{
		{"KIMIMOE_DECODE_MAX_M", -1, &l.decodeMaxM}, // -1: never
		{"KIMIMOE_FP4_MAX_M", 0, &l.f4MaxM},         // 0: never
		{"KIMIMOE_WGMMA_MIN_M", 1, &l.wgMinM},
		{"KIMIMOE_FP4_TOKENS", 0, &l.f4Tokens},             // to measure the tiles
		{"KIMIMOE_FP4_FIT_MAX_M", 0, &l.f4FitMaxM},         // 0: every tile at its full N
		{"KIMIMOE_FP4_ACT_MIN_M", 1, &l.f4ActMinM},         // the activation kernel's token counts (f4ActKernel)
		{"KIMIMOE_FP4_ACT_MAX_M", 0, &l.f4ActMaxM},         // 0: never
		{"KIMIMOE_ACT_BY_TILE_MAX_M", 0, &l.actByTileMaxM}, // 0: never (actByTile)
		{"KIMIMOE_ROUTE_MANY_MAX_M", 0, &l.routeManyMaxM},  // 0: never (kmoe_route_x_many)
	} {
		if v := os.Getenv(e.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < e.min {
				return nil, fmt.Errorf("%w: %s=%q is not a token count from %d", backend.ErrUnsupported, e.name, v, e.min)
			}
			*e.dst = n
		}
	}
	if l.f4Tokens != 0 && !slices.Contains(f4Tiles, l.f4Tokens) {
		return nil, fmt.Errorf("%w: KIMIMOE_FP4_TOKENS=%d is not one of the tiles %v", backend.ErrUnsupported, l.f4Tokens, f4Tiles)
	}
	l.f4NoSync = os.Getenv("KIMIMOE_FP4_SYNC") == "0" // to measure the small tiles' two loops
	l.noPDL = os.Getenv("KIMIMOE_PDL") == "0"         // to measure programmatic dependent launch
	l.noTileReady = os.Getenv("KIMIMOE_TILE_READY") == "0"
	err = b.locked(func() error {
		if err := l.uploadWeights(); err != nil {
			return err
		}
		b.layers[l] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// uploadWeights copies the weights and activation parameters to the device.
func (l *Layer) uploadWeights() error {
	w, spec := l.w, l.spec
	l.epRank = spec.EP.Normalize().Rank
	params := packParams(spec.Params)
	d31, d31s := decodeW31(w)
	d2, d2s := decodeW2(w)
	err := l.uploadAll(upload{&l.w31, w.W31}, upload{&l.w31s, w.W31Scale}, upload{&l.w2, w.W2}, upload{&l.w2s, w.W2Scale},
		upload{&l.params, f32bytes(params)}, upload{&l.d31, d31}, upload{&l.d31s, d31s}, upload{&l.d2, d2}, upload{&l.d2s, d2s})
	if err != nil {
		return errors.Join(err, l.free())
	}
	if err := l.uploadWG(); err != nil {
		return errors.Join(err, l.free())
	}
	if err := l.uploadF4(); err != nil { // uploadAll has waited for each copy
		return errors.Join(err, l.free())
	}
	return nil
}

// uploadWG arranges and uploads the weights for the wgmma path where it
// is available, else records why not.
func (l *Layer) uploadWG() error {
	w := l.w
	switch {
	case l.b.arch != ArchSM90a:
		l.wgWhyNot = "the device is " + l.b.arch
		return nil
	case wgTileRows(w) == 0:
		l.wgWhyNot = fmt.Sprintf("K=%d, N=%d", w.K, w.N)
		return nil
	}
	// GEMM1 at 128 rows a tile (two CTAs an SM: one's activation epilogue
	// runs beside the other's MMAs), GEMM2 at wgTileRows' (docs/PERF.md).
	l.wgRows1, l.wgRows2 = 128, wgTileRows(w)
	if v := os.Getenv("KIMIMOE_WGMMA_ROWS"); v != "" && l.wgRows2 == 256 { // to measure the tile sizes: "R1,R2"
		switch v {
		case "128,128":
			l.wgRows2 = 128
		case "256,256":
			l.wgRows1 = 256
		case "256,128":
			l.wgRows1, l.wgRows2 = 256, 128
		}
	}
	return l.uploadAll(upload{&l.wgW31, wgW31(w, l.wgRows1)}, upload{&l.wgW2, wgW2(w, l.wgRows2)})
}

// uploadF4 arranges and uploads the weights for the wgmma-fp4 path where
// it is available, else records why not.
func (l *Layer) uploadF4() error {
	w := l.w
	if l.b.arch != ArchSM90a {
		l.f4WhyNot = "the device is " + l.b.arch
		return nil
	}
	if l.f4WhyNot = f4Available(w); l.f4WhyNot != "" {
		return nil
	}
	p31, s31 := f4W31(w)
	p2, s2 := f4W2(w)
	return l.uploadAll(upload{&l.f4W31, p31}, upload{&l.f4W31S, s31}, upload{&l.f4W2, p2}, upload{&l.f4W2S, s2})
}

// upload is a host buffer and the layer field that gets its device copy.
type upload struct {
	dst  *devptr
	data []byte
}

// uploadAll copies each upload's data to a new device buffer and sets its
// dst: all or none (on an error the buffers made are freed and no dst is
// set).
func (l *Layer) uploadAll(ups ...upload) error {
	ptrs := make([]devptr, len(ups))
	for i, up := range ups {
		p, err := cuMemAlloc(len(up.data))
		if err == nil {
			ptrs[i] = p
			err = cuMemcpyHtoD(p, up.data, l.b.stream)
		}
		if err == nil {
			err = cuStreamSync(l.b.stream) // data must outlive the copy
		}
		if err != nil {
			for _, p := range ptrs {
				if p != 0 {
					cuMemFree(p)
				}
			}
			return err
		}
	}
	for i, up := range ups {
		*up.dst = ptrs[i]
	}
	return nil
}

func f32bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

func i32bytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// Layer is a prepared layer on the device. Its methods may be called from
// several goroutines: every device call holds the backend's lock.
type Layer struct {
	b             *Backend
	w             *moe.Weights
	spec          moe.LayerSpec
	numGlobal     int
	epRank        int
	decodeMaxM    int
	w31, w31s     devptr
	w2, w2s       devptr
	params        devptr
	d31, d31s     devptr // FC1 and FC2 in the decode path's tiles
	d2, d2s       devptr
	wgW31         devptr // FC1 and FC2 as BF16 for the wgmma path (0: not available)
	wgW2          devptr
	wgOff         bool   // the wgmma path turned off (SetWGMMA)
	wgRows1       int    // weight rows per wgmma tile, GEMM1
	wgRows2       int    // and GEMM2
	wgMinM        int    // smallest M on the wgmma GEMMs
	wgWhyNot      string // why it is not available
	f4W31         devptr // FC1 and FC2 for the wgmma-fp4 path (0: not available)
	f4W31S        devptr
	f4W2          devptr
	f4W2S         devptr
	f4MaxM        int // largest M on the wgmma-fp4 GEMMs
	f4Tokens      int // the wgmma-fp4 token tile forced by KIMIMOE_FP4_TOKENS (0: by M)
	f4FitMaxM     int // most tokens on the fitted-N instances (f4Fit)
	f4ActMinM     int // token counts whose GEMM1 epilogue runs as a kernel of its own (f4ActKernel)
	f4ActMaxM     int
	actByTileMaxM int                // the most tokens whose activation kernel runs by tile (actByTile)
	routeManyMaxM int                // the most tokens whose prologue is kmoe_route_x_many above abiRouteCTAMax entries
	f4NoSync      bool               // KIMIMOE_FP4_SYNC=0: the small tiles on the wgmma loop too
	noPDL         bool               // KIMIMOE_PDL=0: no programmatic dependent launch on the wgmma-fp4 path
	noTileReady   bool               // KIMIMOE_TILE_READY=0: GEMM2 waits for all of GEMM1 (pdl_wait), not its tile
	f4WhyNot      string             // why it is not available
	ws            map[int]*workspace // per token count, at most MaxWorkspaces
	uses          uint64             // forwards so far, for the LRU order
	closed        bool
}

// Input forms, which decide whether the forward quantizes x: a graph is
// captured per form.
const (
	formQuantized = iota // x given as MXFP8 (Input.XQ)
	formFloat            // x given as float32, quantized on the device
)

// workspace holds the device buffers of forwards with M tokens, and the
// graphs captured for them (one per input form).
type workspace struct {
	m, topk                  int
	x, xq, xs                devptr
	ids, wts, pos, perm      devptr
	counts, offset, tileBase devptr
	aq, aqs, y, out          devptr
	xqd, xsf, touched, aqsf  devptr     // the decode path's padded x, float scales, touched experts, float aq scales
	xbf, aqbf                devptr     // the wgmma path's BF16 x and intermediate (0 without it)
	ready                    devptr     // the wgmma-fp4 GEMMs' per-tile counts (tile_signal), entries + E of them
	ug                       devptr     // GEMM1's float32 up and gate for kmoe_act_requant (0 where f4ActKernel is off)
	decode                   bool       // which path this token count takes
	form                     int        // of the input uploaded last
	wide                     bool       // its MXFP8 values pass BF16's range (xPastBF16)
	graph                    [4]cuGraph // by graphKey
	graphX                   [4]cuGraphX
	bufs                     []devptr
	lastUse                  uint64
}

// graphKey picks the graph for the input uploaded last: one per input
// form, and per whether its x takes the BF16 GEMMs (wide).
func (ws *workspace) graphKey() int {
	if ws.wide {
		return ws.form + 2
	}
	return ws.form
}

// free releases the layer's device memory and zeroes its pointers, so a
// second call frees nothing twice.
func (l *Layer) free() error {
	var errs []error
	for _, p := range []*devptr{&l.w31, &l.w31s, &l.w2, &l.w2s, &l.params, &l.d31, &l.d31s, &l.d2, &l.d2s, &l.wgW31, &l.wgW2, &l.f4W31, &l.f4W31S, &l.f4W2, &l.f4W2S} {
		if *p != 0 {
			errs = append(errs, cuMemFree(*p))
			*p = 0
		}
	}
	for m, ws := range l.ws {
		errs = append(errs, ws.free())
		delete(l.ws, m)
	}
	l.closed = true
	return errors.Join(errs...)
}

func (ws *workspace) free() error {
	var errs []error
	for f := range ws.graphX {
		if ws.graphX[f] != nil {
			errs = append(errs, cuGraphExecDestroy(ws.graphX[f]), cuGraphDestroy(ws.graph[f]))
			ws.graphX[f], ws.graph[f] = nil, nil
		}
	}
	for _, p := range ws.bufs {
		errs = append(errs, cuMemFree(p))
	}
	ws.bufs = nil
	return errors.Join(errs...)
}

// workspace returns the buffers for m tokens of top-k, making them (and
// evicting the least recently used beyond MaxWorkspaces) if needed.
func (l *Layer) workspace(m, topk int) (*workspace, error) {
	l.uses++
	if ws := l.ws[m]; ws != nil && ws.topk == topk {
		ws.lastUse = l.uses
		return ws, nil
	} else if ws != nil {
		delete(l.ws, m)
		if err := ws.free(); err != nil {
			return nil, err
		}
	}
	for len(l.ws) >= MaxWorkspaces {
		oldest := -1
		for m, ws := range l.ws {
			if oldest < 0 || ws.lastUse < l.ws[oldest].lastUse {
				oldest = m
			}
		}
		ws := l.ws[oldest]
		delete(l.ws, oldest)
		if err := ws.free(); err != nil {
			return nil, err
		}
	}
	w := l.w
	ws := &workspace{m: m, topk: topk, lastUse: l.uses, decode: l.PathFor(m) == "decode"}
	kp, np := padTo(w.K), padTo(w.N)
	entries := m * topk
	type buf struct {
		p *devptr
		n int
	}
	bufs := []buf{
		{&ws.x, 4 * m * w.K}, {&ws.xq, m * w.K}, {&ws.xs, m * w.K / 32},
		{&ws.ids, 4 * entries}, {&ws.wts, 4 * entries}, {&ws.pos, 4 * entries}, {&ws.perm, 4 * entries},
		{&ws.counts, 4 * w.E}, {&ws.offset, 4 * (w.E + 1)}, {&ws.tileBase, 4 * (w.E + 1)},
		{&ws.aq, (entries + 1) * np}, {&ws.aqs, entries * np / 32}, {&ws.y, 4 * entries * w.K}, {&ws.out, 4 * m * w.K},
		// The decode path's buffers, each with one more row, all zeros.
		{&ws.xqd, (m + 1) * kp}, {&ws.xsf, 4 * (m + 1) * kp / 32}, {&ws.touched, 4 * (w.E + 1)}, {&ws.aqsf, 4 * (entries + 1) * np / 32},
	}
	if l.wgW31 != 0 || l.f4W31 != 0 { // the BF16 paths' x and intermediate
		bufs = append(bufs, buf{&ws.xbf, 2 * m * w.K}, buf{&ws.aqbf, 2 * entries * w.N})
	}
	if l.f4W31 != 0 { // at most one tile an entry, and one partial tile an expert
		bufs = append(bufs, buf{&ws.ready, 4 * 2 * (entries + w.E)}) // two counts a tile at most (actByTile)
	}
	if l.f4W31 != 0 && l.f4ActKernel(m) {
		bufs = append(bufs, buf{&ws.ug, 8 * entries * w.N})
	}
	for _, a := range bufs {
		p, err := cuMemAlloc(a.n)
		if err != nil {
			return nil, errors.Join(err, ws.free())
		}
		*a.p = p
		ws.bufs = append(ws.bufs, p)
	}
	// The decode path's padding columns of the intermediate stay zero codes
	// with scale 1.0 (GEMM1 writes only the real features); its zero rows
	// (x: row m, intermediate: row entries) are zero codes with scale 0.
	s := l.b.stream
	err := cuMemsetD32(ws.aq, 0, (entries+1)*np/4, s)
	if err == nil {
		err = cuMemsetD32(ws.aqsf, 0x3f800000, entries*np/32, s)
	}
	if err == nil {
		err = cuMemsetD32(ws.aqsf+uint64(4*entries*np/32), 0, np/32, s)
	}
	if err == nil {
		err = cuMemsetD32(ws.xqd+uint64(m*kp), 0, kp/4, s)
	}
	if err == nil {
		err = cuMemsetD32(ws.xsf+uint64(4*m*kp/32), 0, kp/32, s)
	}
	if err != nil {
		return nil, errors.Join(err, ws.free())
	}
	l.ws[m] = ws
	return ws, nil
}

// upload validates in and copies it to the workspace for in.M, recording
// its input form.
func (l *Layer) upload(in *moe.Input) (*workspace, error) {
	if l.closed {
		return nil, fmt.Errorf("%w: the layer is closed", backend.ErrClosed)
	}
	if err := in.Validate(l.w.K, l.numGlobal); err != nil {
		return nil, err
	}
	ws, err := l.workspace(in.M, in.TopK)
	if err != nil {
		return nil, err
	}
	s := l.b.stream
	// Only the BF16 paths need to know whether x passes BF16's range.
	path := l.PathFor(in.M)
	ws.form, ws.wide = formQuantized, (path == "wgmma" || path == "wgmma-fp4") && xPastBF16(in, l.spec.Recipe)
	if in.X != nil {
		ws.form = formFloat
		err = cuMemcpyHtoD(ws.x, f32bytes(in.X), s)
	} else {
		if err = cuMemcpyHtoD(ws.xq, in.XQ.Codes, s); err == nil {
			err = cuMemcpyHtoD(ws.xs, in.XQ.Scales, s)
		}
	}
	if err == nil {
		err = cuMemcpyHtoD(ws.ids, i32bytes(in.TopKIDs), s)
	}
	if err == nil {
		err = cuMemcpyHtoD(ws.wts, f32bytes(in.TopKWeights), s)
	}
	return ws, err
}

// step is one stage of a forward, named for Profile.
type step struct {
	name string
	run  func() error
}

// enqueue issues the whole forward for ws on the stream.
func (l *Layer) enqueue(ws *workspace) error { return l.enqueueProfiled(ws, nil) }

// enqueueProfiled is enqueue; with events (one more than the steps) it
// records one before the first step and one after each.
func (l *Layer) enqueueProfiled(ws *workspace, events []cuEvent) error {
	if ws.m == 0 {
		return nil
	}
	steps := l.groupedSteps(ws)
	if ws.decode {
		steps = l.decodeSteps(ws)
	}
	s := l.b.stream
	if events != nil {
		if err := cuEventRecord(events[0], s); err != nil {
			return err
		}
	}
	for k, st := range steps {
		if err := st.run(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		if events != nil {
			if err := cuEventRecord(events[k+1], s); err != nil {
				return err
			}
		}
	}
	return nil
}

func i32(v int) int32 { return int32(v) }

// abiForm is the kernels' code for the form of x uploaded into ws.
func (ws *workspace) abiForm() int32 {
	if ws.form == formFloat {
		return abiFormFloat
	}
	return abiFormQuantized
}

// decodeSteps are the decode path: prologue (quantize or copy x, route),
// GEMM1 with the activation, GEMM2, finalize.
func (l *Layer) decodeSteps(ws *workspace) []step {
	w, k, s := l.w, l.b.k, l.b.stream
	m, topk, entries := ws.m, ws.topk, ws.m*ws.topk
	kp, np := padTo(w.K), padTo(w.N)
	maxExperts := min(w.E, entries)
	form := ws.abiForm()
	quantCTAs := min((m*kp/32+7)/8, 264)
	// Token subtiles per pass: an expert has at most m tokens.
	ns := 4
	if m <= 8 {
		ns = 1
	} else if m <= 16 {
		ns = 2
	}
	return []step{
		{"prologue", func() error {
			return k.decPrologue.launchWith([3]int{1 + quantCTAs, 1, 1}, abiThreads, 4*(w.E+1), s,
				&decodePrologueArgs{X: ws.x, XQIn: ws.xq, XSIn: ws.xs, IDs: ws.ids, XQ: ws.xqd, XSF: ws.xsf, Pos: ws.pos,
					Perm: ws.perm, Offset: ws.offset, Touched: ws.touched, M: i32(m), K: i32(w.K), KPad: i32(kp),
					TopK: i32(topk), Rank: i32(l.epRank), ELocal: i32(w.E), Recipe: recipeCode(l.spec.Recipe), Form: form})
		}},
		{"gemm1_act", func() error {
			return k.decGemm1[ns].launchWith([3]int{w.N / 32, maxExperts, 1}, abiDecodeThreads, 0, s,
				&decodeGemm1Args{XQ: ws.xqd, XSF: ws.xsf, W: l.d31, WS: l.d31s, Perm: ws.perm, Offset: ws.offset, Touched: ws.touched,
					Params: l.params, AQ: ws.aq, AQS: ws.aqs, AQSF: ws.aqsf, KPad: i32(kp), N: i32(w.N), NPad: i32(np),
					TopK: i32(topk), ELocal: i32(w.E), Kind: activationCode(l.spec.Activation), NParams: i32(len(l.spec.Params)),
					Chain: chainCode(l.spec.Chain), Recipe: recipeCode(l.spec.Recipe), ZeroRow: i32(m)})
		}},
		{"gemm2", func() error {
			return k.decGemm2[ns].launchWith([3]int{(w.K/16 + 3) / 4, maxExperts, 1}, abiDecodeThreads, 0, s,
				&decodeGemm2Args{AQ: ws.aq, AQSF: ws.aqsf, W: l.d2, WS: l.d2s, Offset: ws.offset, Touched: ws.touched, Y: ws.y,
					K: i32(w.K), NPad: i32(np), ELocal: i32(w.E), ZeroRow: i32(entries)})
		}},
		{"finalize", func() error {
			return k.finalize.launch([3]int{m, (w.K + abiFinalizeCols - 1) / abiFinalizeCols, 1}, s,
				&finalizeArgs{Y: ws.y, Pos: ws.pos, Wts: ws.wts, Out: ws.out, TopK: i32(topk), K: i32(w.K), ChainFI: chainFI(l.spec.Chain)})
		}},
	}
}

// groupedSteps are the grouped path: quantize x, route (count, scatter),
// grouped GEMM1 with the activation, grouped GEMM2, finalize.
func (l *Layer) groupedSteps(ws *workspace) []step {
	w, k, s := l.w, l.b.k, l.b.stream
	m, topk, entries := ws.m, ws.topk, ws.m*ws.topk
	recipe, form := recipeCode(l.spec.Recipe), ws.abiForm()
	tt := tileTokens(m)
	path := l.PathFor(m)
	if ws.wide { // x past BF16's range: the mma.sync GEMMs (xPastBF16)
		path = "grouped"
	}
	wg, f4 := path == "wgmma", path == "wgmma-fp4"
	switch {
	case wg:
		tt = abiWGTokens
	case f4:
		tt = f4TileTokens(m)
		if l.f4Tokens != 0 {
			tt = l.f4Tokens
		}
	}
	tiles := maxTiles(entries, w.E, tt) // grid rows: the most tiles any routing makes
	// GEMM2 waits for its tile's GEMM1 CTAs (tile_wait), not the whole
	// grid, from f4TileReadyMinM tokens.
	var ready devptr
	nReady := 0 // counts, one a tile, that the prologue zeroes
	// With the activation kernel (ws.ug, allocated exactly where
	// f4ActKernel(m), set in GEMM1's arguments) GEMM2 waits for all of it.
	actKernel := f4 && l.f4ActKernel(m)
	if f4 && m >= f4TileReadyMinM && !l.noTileReady && !actKernel {
		ready, nReady = ws.ready, tiles
	}
	// With it, by tile (actByTile): GEMM1 counts its CTAs in ready[tile],
	// the activation kernel's CTAs wait for their tile there and count
	// themselves in actDone[tile], GEMM2's CTAs wait for that (tt a tile).
	var actDone devptr
	gemm1CTAs := w.N / abiF4RowsGemm1        // GEMM1's CTAs a tile: what a wait on its counts waits for
	ready2, readyTarget2 := ready, gemm1CTAs // what GEMM2 waits for
	if actKernel && l.actByTile(m) {
		actDone = ws.ready + devptr(4*tiles)
		ready, nReady, ready2, readyTarget2 = ws.ready, 2*tiles, actDone, tt
	}
	var gemm1, gemm2 func() error
	switch {
	case f4:
		g1, g2, smem := k.f4Gemm1[tt], k.f4Gemm2[tt], f4Smem(tt)
		if l.f4Fit(m, tt) {
			g1, g2 = k.f4FitGemm1[tt], k.f4FitGemm2[tt]
		}
		if l.f4SyncLoop(tt) && f4sAddressable(tt, m*w.K, entries*w.N) {
			g1, g2, smem = k.f4sGemm1[tt], k.f4sGemm2[tt], f4sSmem(tt)
			if tt == 8 && m <= f4sDeepMaxM {
				g2 = k.f4sGemm2Deep
			}
		}
		launch1, launch2 := g1.launchPDL, g2.launchPDL // the GEMMs wait for what they read (pdl_wait)
		if l.noPDL {
			launch1, launch2 = g1.launchWith, g2.launchWith
		}
		gemm1 = func() error {
			return launch1([3]int{gemm1CTAs, tiles, 1}, abiThreads, smem, s,
				&f4Gemm1Args{XBF: ws.xbf, W: l.f4W31, WS: l.f4W31S, Perm: ws.perm, Offset: ws.offset, TileBase: ws.tileBase,
					Params: l.params, AQBF: ws.aqbf, Ready: ready, UG: ws.ug, K: i32(w.K), N: i32(w.N), TopK: i32(topk), ELocal: i32(w.E),
					Kind: activationCode(l.spec.Activation), NParams: i32(len(l.spec.Params)), Chain: chainCode(l.spec.Chain), Recipe: recipe})
		}
		gemm2 = func() error {
			return launch2([3]int{w.K / abiF4RowsGemm2, tiles, 1}, abiThreads, smem, s,
				&f4Gemm2Args{AQBF: ws.aqbf, W: l.f4W2, WS: l.f4W2S, Offset: ws.offset, TileBase: ws.tileBase, Y: ws.y,
					Ready: ready2, N: i32(w.N), K: i32(w.K), ELocal: i32(w.E), ReadyTarget: i32(readyTarget2)})
		}
	case wg:
		bn1, bn2 := l.wgRows1, l.wgRows2
		gemm1 = func() error {
			return k.wgGemm1[bn1].launchWith([3]int{w.N / (bn1 / 2), tiles, 1}, abiThreads, wgSmem(bn1), s,
				&wgGemm1Args{XBF: ws.xbf, W: l.wgW31, Perm: ws.perm, Offset: ws.offset, TileBase: ws.tileBase,
					Params: l.params, AQBF: ws.aqbf, K: i32(w.K), N: i32(w.N), TopK: i32(topk), ELocal: i32(w.E),
					Kind: activationCode(l.spec.Activation), NParams: i32(len(l.spec.Params)), Chain: chainCode(l.spec.Chain), Recipe: recipe})
		}
		gemm2 = func() error {
			return k.wgGemm2[bn2].launchWith([3]int{w.K / bn2, tiles, 1}, abiThreads, wgSmem(bn2), s,
				&wgGemm2Args{AQBF: ws.aqbf, W: l.wgW2, Offset: ws.offset, TileBase: ws.tileBase, Y: ws.y,
					N: i32(w.N), K: i32(w.K), ELocal: i32(w.E)})
		}
	default: // the mma.sync GEMMs
		gemm1 = func() error {
			return k.gemm1[tt].launch([3]int{w.N / abiGemm1Features, tiles, 1}, s,
				&gemm1Args{XQ: ws.xq, XS: ws.xs, W31: l.w31, W31S: l.w31s, Perm: ws.perm, Offset: ws.offset, TileBase: ws.tileBase,
					Params: l.params, AQ: ws.aq, AQS: ws.aqs, K: i32(w.K), N: i32(w.N), TopK: i32(topk), ELocal: i32(w.E),
					Kind: activationCode(l.spec.Activation), NParams: i32(len(l.spec.Params)), Chain: chainCode(l.spec.Chain), Recipe: recipe})
		}
		gemm2 = func() error {
			return k.gemm2[tt].launch([3]int{w.K / abiGemm2Rows, tiles, 1}, s,
				&gemm2Args{AQ: ws.aq, AQS: ws.aqs, W2: l.w2, W2S: l.w2s, Offset: ws.offset, TileBase: ws.tileBase, Y: ws.y,
					N: i32(w.N), K: i32(w.K), ELocal: i32(w.E)})
		}
	}
	nblocks := m * w.K / 32
	xCTAs4 := ((nblocks+3)/4*32 + abiThreads - 1) / abiThreads // x as BF16 four blocks a warp (kmoe_x_bf16, kmoe_route_x_many)
	xstep := step{"quantize_x", func() error {
		if ws.form != formFloat {
			return nil
		}
		return k.quantizeX.launch([3]int{(nblocks*32 + abiThreads - 1) / abiThreads, 1, 1}, s,
			&quantizeXArgs{X: ws.x, Codes: ws.xq, Scales: ws.xs, NBlocks: i32(nblocks), Recipe: recipe})
	}}
	if wg || f4 { // the BF16 GEMMs read x as BF16
		xstep = step{"x_bf16", func() error {
			return k.xBF16.launch([3]int{xCTAs4, 1, 1}, s,
				&xBF16Args{X: ws.x, Codes: ws.xq, Scales: ws.xs, Out: ws.xbf, NBlocks: i32(nblocks), Recipe: recipe, Form: form})
		}}
	}
	launchFin := k.finalize.launchWith
	if f4 && !l.noPDL { // after the wgmma-fp4 GEMM2, which triggers it
		launchFin = k.finalize.launchPDL
	}
	finalize := step{"finalize", func() error {
		return launchFin([3]int{m, (w.K + abiFinalizeCols - 1) / abiFinalizeCols, 1}, abiThreads, 0, s,
			&finalizeArgs{Y: ws.y, Pos: ws.pos, Wts: ws.wts, Out: ws.out, TopK: i32(topk), K: i32(w.K), ChainFI: chainFI(l.spec.Chain)})
	}}
	prologue := []step{
		{"memset", func() error {
			if nReady > 0 {
				if err := cuMemsetD32(ready, 0, nReady, s); err != nil {
					return err
				}
			}
			return cuMemsetD32(ws.pos, 0xFFFFFFFF, entries, s)
		}},
		xstep,
		{"route_count", func() error {
			return k.routeCount.launch([3]int{w.E, 1, 1}, s,
				&routeCountArgs{IDs: ws.ids, Counts: ws.counts, NEntries: i32(entries), Rank: i32(l.epRank), ELocal: i32(w.E)})
		}},
		{"route_scatter", func() error {
			return k.routeScatter.launch([3]int{w.E, 1, 1}, s,
				&routeScatterArgs{IDs: ws.ids, Counts: ws.counts, Perm: ws.perm, Pos: ws.pos, Offset: ws.offset, TileBase: ws.tileBase,
					NEntries: i32(entries), Rank: i32(l.epRank), ELocal: i32(w.E), TT: i32(tt)})
		}},
	}
	routeX := &routeXBF16Args{X: ws.x, Codes: ws.xq, Scales: ws.xs, IDs: ws.ids, Out: ws.xbf, Pos: ws.pos, Perm: ws.perm,
		Offset: ws.offset, TileBase: ws.tileBase, Ready: ready, NBlocks: i32(nblocks), NEntries: i32(entries), Rank: i32(l.epRank),
		ELocal: i32(w.E), TT: i32(tt), Recipe: recipe, Form: form, NReady: i32(nReady)}
	switch {
	case (wg || f4) && entries <= abiRouteCTAMax: // one launch instead
		xCTAs := min((nblocks+abiThreads/32-1)/(abiThreads/32), 2*l.b.sms)
		prologue = []step{{"route_x_bf16", func() error {
			return k.routeXBF16.launchWith([3]int{1 + xCTAs, 1, 1}, abiThreads, 4*(w.E+1), s, routeX)
		}}}
	case (wg || f4) && m <= l.routeManyMaxM: // one launch: a CTA an expert, one for pos = -1, x four blocks a warp
		prologue = []step{{"route_x_many", func() error {
			return k.routeXMany.launchWith([3]int{w.E + 1 + xCTAs4, 1, 1}, abiThreads, 4*w.E, s, routeX)
		}}}
	}
	steps := append(prologue, step{"gemm1_act", gemm1})
	if actKernel {
		launch := k.actRequant.launchPDL // after GEMM1, which triggers it; GEMM2 waits for it
		if l.noPDL {
			launch = k.actRequant.launchWith
		}
		steps = append(steps, step{"act_requant", func() error {
			warps := (entries*w.N/32 + 3) / 4 // the routed rows' blocks (an upper bound), four a warp at a time
			grid := [3]int{min((warps+abiThreads/32-1)/(abiThreads/32), actCTAsSM*l.b.sms), 1, 1}
			if actDone != 0 {
				grid = [3]int{tt, tiles, 1} // a CTA a row of a tile
			}
			return launch(grid, abiThreads, 0, s,
				&actRequantArgs{UG: ws.ug, Offset: ws.offset, Params: l.params, AQBF: ws.aqbf, TileBase: ws.tileBase, Ready: ready,
					Done: actDone, N: i32(w.N), ELocal: i32(w.E), Kind: activationCode(l.spec.Activation),
					NParams: i32(len(l.spec.Params)), Chain: chainCode(l.spec.Chain), Recipe: recipe, TT: i32(tt),
					ReadyTarget: i32(gemm1CTAs)})
		}})
	}
	return append(steps, step{"gemm2", gemm2}, finalize)
}

// Profile runs the uploaded m-token forward eagerly with an event between
// kernels and returns each step's device time in milliseconds, by name.
func (l *Layer) Profile(m int) (out map[string]float64, err error) {
	err = l.b.locked(func() error {
		ws := l.ws[m]
		if ws == nil || l.closed {
			return fmt.Errorf("cuda: Profile(%d): no uploaded input of %d tokens", m, m)
		}
		steps := l.groupedSteps(ws)
		if ws.decode {
			steps = l.decodeSteps(ws)
		}
		events := make([]cuEvent, len(steps)+1)
		for k := range events {
			var err error
			if events[k], err = cuEventCreate(); err != nil {
				return err
			}
			defer cuEventDestroy(events[k])
		}
		if err := l.enqueueProfiled(ws, events); err != nil {
			return err
		}
		if err := cuEventSync(events[len(events)-1]); err != nil {
			return err
		}
		out = map[string]float64{}
		for k, st := range steps {
			var err error
			if out[st.name], err = cuEventElapsed(events[k], events[k+1]); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// download copies the requested rows of the output into dst: straight into
// dst for all rows, through one result-sized buffer for a subset.
func (l *Layer) download(dst []float32, ws *workspace, rows []int) error {
	return l.downloadFrom(dst, ws.out, ws.m, rows)
}

// downloadFrom copies the requested rows of the [m, K] float32 output at
// src into dst.
func (l *Layer) downloadFrom(dst []float32, src devptr, m int, rows []int) error {
	k := l.w.K
	all := dst
	if rows != nil {
		all = make([]float32, m*k)
	}
	if err := cuMemcpyDtoH(f32bytes(all), src, l.b.stream); err != nil {
		return err
	}
	if err := cuStreamSync(l.b.stream); err != nil {
		return err
	}
	if rows == nil {
		return nil
	}
	for j, r := range rows {
		copy(dst[j*k:(j+1)*k], all[r*k:(r+1)*k])
	}
	return nil
}

func (l *Layer) checkDst(dst []float32, in *moe.Input, rows []int) error {
	return backend.CheckForward(dst, in, rows, l.w.K, l.numGlobal)
}

// Forward implements backend.Layer: the whole layer runs for all M tokens on
// the device; the requested rows are copied back.
func (l *Layer) Forward(dst []float32, in *moe.Input, rows []int) error {
	if err := l.checkDst(dst, in, rows); err != nil {
		return err
	}
	return l.b.locked(func() error {
		ws, err := l.upload(in)
		if err != nil {
			return err
		}
		if err := l.enqueue(ws); err != nil {
			return err
		}
		return l.download(dst, ws, rows)
	})
}

// ForwardGraph implements backend.GraphLayer: the kernels of a forward with
// in.M tokens are captured into a CUDA graph on first use and replayed.
func (l *Layer) ForwardGraph(dst []float32, in *moe.Input) error {
	if err := l.checkDst(dst, in, nil); err != nil {
		return err
	}
	return l.b.locked(func() error {
		ws, err := l.upload(in)
		if err != nil {
			return err
		}
		if err := l.replay(ws); err != nil {
			return err
		}
		return l.download(dst, ws, nil)
	})
}

// replay launches the graph of ws's current input form, capturing it on
// first use.
func (l *Layer) replay(ws *workspace) error {
	s := l.b.stream
	f := ws.graphKey()
	if ws.graphX[f] == nil {
		if err := cuStreamSync(s); err != nil { // uploads done before capture
			return err
		}
		if err := cuStreamBeginCapture(s); err != nil {
			return err
		}
		err := l.enqueue(ws)
		g, cerr := cuStreamEndCapture(s)
		if err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		x, err := cuGraphInstantiate(g)
		if err != nil {
			cuGraphDestroy(g)
			return err
		}
		ws.graph[f], ws.graphX[f] = g, x
	}
	return cuGraphLaunch(ws.graphX[f], s)
}

// Upload copies in to the device for TimeForward (backend.Timer).
func (l *Layer) Upload(in *moe.Input) error {
	return l.b.locked(func() error {
		if _, err := l.upload(in); err != nil {
			return err
		}
		return cuStreamSync(l.b.stream)
	})
}

// TimeForward runs the forward of the uploaded m-token input (as a graph
// replay if graph) between two CUDA events and returns the elapsed device
// time in milliseconds (backend.Timer).
func (l *Layer) TimeForward(m int, graph bool) (ms float64, err error) {
	err = l.b.locked(func() error {
		ws := l.ws[m]
		if ws == nil || l.closed {
			return fmt.Errorf("cuda: TimeForward(%d): no uploaded input of %d tokens", m, m)
		}
		if graph && ws.graphX[ws.graphKey()] == nil { // capture outside the timed region
			if err := l.replay(ws); err != nil {
				return err
			}
		}
		run := func() error { return l.enqueue(ws) }
		if graph {
			run = func() error { return cuGraphLaunch(ws.graphX[ws.graphKey()], l.b.stream) }
		}
		if err := l.b.flushL2(); err != nil {
			return err
		}
		ms, err = timeOn(l.b.stream, run)
		return err
	})
	return ms, err
}

// TimingMethod says how TimeForward times (the flush KIMIMOE_BENCH_FLUSH
// picks), for kimimoe bench's output and JSON; an error for a bad value.
func (l *Layer) TimingMethod() (string, error) {
	mode, err := timingFlushMode()
	return mode.String(), err
}

// timingFlushBytes is what flushL2 reads: five times the H200's 50 MB L2,
// and triton.testing.do_bench's 256 MB (the peer's timing).
const timingFlushBytes = 256 << 20

// flushL2 enqueues, on the backend's stream, a read of a buffer larger
// than the L2 cache (kmoe_l2_flush), before a timed forward's first
// event. The forward then starts with a cold L2 (no weights left from the
// previous one), and the device is busy for the ~0.07 ms of the read
// while the host launches the forward, so the events time the forward's
// kernels, not the host's launch latency, which a forward inside a
// model's graph does not pay. A read, not triton.testing.do_bench's
// rewrite (the peer's timing: peer_moe.py, cache.zero_() before each
// start event), because a rewrite leaves L2 full of dirty lines whose
// write-back the forward then pays (docs/PERF.md, how it is timed).
// KIMIMOE_BENCH_FLUSH=write times with the rewrite and =0 with no flush
// (events around the launch on an idle device), to measure the
// differences (parseFlushMode). Called under
// b.mu with the context current.
func (b *Backend) flushL2() error {
	mode, err := timingFlushMode()
	if err != nil || mode == flushNone {
		return err
	}
	if b.flush == 0 {
		p, err := cuMemAlloc(timingFlushBytes)
		if err != nil {
			return fmt.Errorf("cuda: the timing's L2 flush buffer (%d MB): %w", timingFlushBytes>>20, err)
		}
		b.flush = p
		if err := cuMemsetD32(p, 0, timingFlushBytes/4, b.stream); err != nil {
			return err
		}
	}
	if mode == flushWrite {
		return cuMemsetD32(b.flush, 0, timingFlushBytes/4, b.stream)
	}
	// Zeros read: the kernel's sink (the buffer's first word) is never written.
	return b.k.l2Flush.launch([3]int{4 * b.sms, 1, 1}, b.stream,
		&l2FlushArgs{Src: b.flush, Sink: b.flush, N: timingFlushBytes / 16})
}

// timeOn runs f between two events on s and returns the elapsed device
// milliseconds.
func timeOn(s cuStream, f func() error) (float64, error) {
	e0, err := cuEventCreate()
	if err != nil {
		return 0, err
	}
	defer cuEventDestroy(e0)
	e1, err := cuEventCreate()
	if err != nil {
		return 0, err
	}
	defer cuEventDestroy(e1)
	if err := cuEventRecord(e0, s); err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	if err := cuEventRecord(e1, s); err != nil {
		return 0, err
	}
	if err := cuEventSync(e1); err != nil {
		return 0, err
	}
	ms, err := cuEventElapsed(e0, e1)
	if err == nil && math.IsNaN(ms) {
		err = errors.New("cuda: event time is NaN")
	}
	return ms, err
}

// Close frees the layer's device memory and returns any error of doing
// so. A second Close, or a Close after the backend's (which freed the
// layer already), returns nil.
func (l *Layer) Close() error {
	l.b.mu.Lock()
	closed := l.closed || l.b.closed
	l.b.mu.Unlock()
	if closed {
		return nil
	}
	return l.b.locked(func() error {
		if l.closed {
			return nil
		}
		delete(l.b.layers, l)
		return l.free()
	})
}

// chainFI is finalizeArgs.ChainFI for chain c.
func chainFI(c moe.Chain) int32 {
	if c == moe.ChainFlashInfer {
		return 1
	}
	return 0
}
