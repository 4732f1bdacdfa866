//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"reflect"

	"kimimoe/backend/cuda/internal/cu"
)

// kernel is an entry point bound to its ABI argument type.
type kernel[A any] struct{ fn cu.Function }

// dryRun, where a test sets it, takes each launch (and each memset32) in
// place of the device, so that a plan's launches can be checked without a
// GPU.
var dryRun func(l dryLaunch) error

// dryLaunch is one launch as dryRun sees it: its configuration and its
// argument struct (*memset32Args for a memset32, with no grid).
type dryLaunch struct {
	grid        [3]int
	block, smem int
	pdl         bool
	args        any
}

func (k kernel[A]) launch(grid [3]int, s cu.Stream, args *A) error {
	return k.launchWith(grid, abiThreads, 0, s, args)
}

func (k kernel[A]) launchWith(grid [3]int, block, smem int, s cu.Stream, args *A) error {
	if dryRun != nil {
		return dryRun(dryLaunch{grid, block, smem, false, args})
	}
	return cu.Launch(k.fn, grid, block, smem, s, args)
}

// launchPDL is launchWith with programmatic dependent launch: for kernels
// that execute pdl_wait (kernels/ptx.cuh) before reading what the kernel
// ahead of them in the stream writes.
func (k kernel[A]) launchPDL(grid [3]int, block, smem int, s cu.Stream, args *A) error {
	if dryRun != nil {
		return dryRun(dryLaunch{grid, block, smem, true, args})
	}
	return cu.LaunchPDL(k.fn, grid, block, smem, s, args)
}

// memset32Args are a memset32's, as dryRun sees them.
type memset32Args struct {
	Dst   devptr
	Value uint32
	N     int
}

// memset32 sets n 32-bit words at dst to v on the stream.
func (b *Backend) memset32(dst devptr, v uint32, n int) error {
	if dryRun != nil {
		return dryRun(dryLaunch{args: &memset32Args{dst, v, n}})
	}
	return cu.MemsetD32(dst, v, n, b.stream)
}

// launchMaybePDL is launchPDL where pdl, else launchWith.
func (k kernel[A]) launchMaybePDL(pdl bool, grid [3]int, block, smem int, s cu.Stream, args *A) error {
	if pdl {
		return k.launchPDL(grid, block, smem, s, args)
	}
	return k.launchWith(grid, block, smem, s, args)
}

// bind looks up spec in m as a kernel taking A; A must be spec's type.
func bind[A any](m cu.Module, spec kernelSpec) (kernel[A], error) {
	if reflect.TypeFor[A]() != spec.args {
		panic(fmt.Sprintf("cuda: %s takes %v, bound as %v", spec.name, spec.args, reflect.TypeFor[A]()))
	}
	f, err := moduleFunction(m, spec.name)
	return kernel[A]{f}, err
}

// The driver calls the loader makes, which a test replaces to check the
// loader without a module.
var (
	moduleFunction = cu.ModuleGetFunction
	setMaxSmem     = cu.FuncSetMaxDynamicSmem
	residentCTAs   = cu.FuncResidentCTAs
)

// bindAll binds the instances of one kernel (specs, by their template
// value) and, with smem, lets each use smem(value) bytes of dynamic shared
// memory.
func bindAll[A any](m cu.Module, specs map[int]kernelSpec, smem func(int) int) (map[int]kernel[A], error) {
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
func bindSmem[A any](m cu.Module, spec kernelSpec, smem int) (kernel[A], error) {
	k, err := bind[A](m, spec)
	if err == nil {
		err = setMaxSmem(k.fn, smem)
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
	f4sGemm2Deep kernel[f4Gemm2Args]                  // its GEMM2 at 8 tokens for small grids (f4sDeep2)
	actRequant   kernel[actRequantArgs]               // GEMM1's epilogue on its own (Plan.FP4.ActKernel)
	actResident  int                                  // actRequant's CTAs an SM holds at once (Plan.FP4.ActCTAs)
	f4W3Gemm1    [len(f4W3Suffix)]kernel[f4Gemm1Args] // GEMM1 in three warpgroups (Plan.FP4.W3), by k loop (f4W3Loop)
	f4W3Gemm2    [len(f4W3Suffix)]kernel[f4Gemm2Args] // GEMM2 in three warpgroups (Plan.FP4.W3Gemm2), by k loop
}

// loadKernels binds the shared entry points, then each path's (path.bind).
func loadKernels(m cu.Module) (*kernels, error) {
	k := &kernels{}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	k.quantizeX, err = bind[quantizeXArgs](m, kQuantizeX)
	add(err)
	k.routeCount, err = bind[routeCountArgs](m, kRouteCount)
	add(err)
	k.routeScatter, err = bind[routeScatterArgs](m, kRouteScatter)
	add(err)
	k.finalize, err = bind[finalizeArgs](m, kFinalize)
	add(err)
	k.gatherRows, err = bind[gatherRowsArgs](m, kGatherRows)
	add(err)
	k.addRows, err = bind[addRowsArgs](m, kAddRows)
	add(err)
	for p := range paths {
		add(paths[p].bind(m, k))
	}
	return k, errors.Join(errs...)
}
