//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"kimimoe/backend"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/layout/fp4"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// Layer is a prepared layer on the device. Its methods may be called from
// several goroutines: every device call holds the backend's lock.
type Layer struct {
	b         *Backend
	w         *moe.Weights
	spec      moe.LayerSpec
	numGlobal int
	epRank    int
	params    devptr // the activation's parameters (packParams)
	b1, b2    devptr // the FC biases as float32 (w.W31Bias, w.W2Bias), or 0
	mx        mxWeights
	dec       decodeWeights
	wg        wgWeights
	f4        f4Weights
	avail     [numPaths]bool // the paths the device and the shape allow
	uploaded  [numPaths]bool // the paths whose weights are on the device
	tune      Tuning
	ws        map[int]*workspace // per token count, at most MaxWorkspaces
	uses      uint64             // forwards so far, for the LRU order
	closed    bool
}

// mxWeights are FC1 and FC2 as given (MXFP4 codes and E8M0 scales), which
// the mma.sync grouped GEMMs read.
type mxWeights struct{ w31, w31s, w2, w2s devptr }

// decodeWeights are FC1 and FC2 in the decode path's tiles (internal/layout/decode).
type decodeWeights struct{ w31, w31s, w2, w2s devptr }

// wgWeights are FC1 and FC2 as BF16 in the wgmma operand's swizzled form
// (internal/layout/wgmma), 0 while not uploaded; whyNot says why the path is not
// available, where it is not.
type wgWeights struct {
	w31, w2 devptr
	rows    [2]int // weight rows a tile, GEMM1 and GEMM2
	whyNot  string
}

// f4Weights are FC1 and FC2 for the wgmma-fp4 GEMMs (internal/layout/fp4), 0
// while not uploaded; whyNot says why the path is not available, where it
// is not.
type f4Weights struct {
	w31, w31s, w2, w2s devptr
	k, n               int // the GEMMs' K and N, padded (fp4.Dims)
	whyNot             string
}

func (wg *wgWeights) ptrs() []*devptr    { return []*devptr{&wg.w31, &wg.w2} }
func (f4 *f4Weights) ptrs() []*devptr    { return []*devptr{&f4.w31, &f4.w31s, &f4.w2, &f4.w2s} }
func (mx *mxWeights) ptrs() []*devptr    { return []*devptr{&mx.w31, &mx.w31s, &mx.w2, &mx.w2s} }
func (d *decodeWeights) ptrs() []*devptr { return []*devptr{&d.w31, &d.w31s, &d.w2, &d.w2s} }

// Prepare implements backend.Backend: it checks the request and copies the
// activation parameters and the weights to the device, in the form of
// every path the device and shape allow and some forward's plan takes.
// The layer runs the launch policy; a Tuning (SetTuning) overrides it.
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
	if err := checkSitu(spec); err != nil {
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
	l := &Layer{b: b, w: w, spec: spec, numGlobal: numGlobal, ws: map[int]*workspace{}}
	err = b.locked(func() error {
		if err := l.uploadWeights(); err != nil {
			return err
		}
		if spec.Chain == moe.ChainBF16 && !l.avail[PathFP4] && !l.avail[PathWGMMA] {
			return errors.Join(fmt.Errorf("%w: backend \"cuda\" runs the bf16 chain on its two wgmma paths only, which need an sm_90 device and weight scales up to 2^%d (%s; %s); use the %q backend",
				backend.ErrUnsupported, fp4.MaxScale-127, l.f4.whyNot, l.wg.whyNot, backend.GoName), l.free())
		}
		b.layers[l] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// SetTuning replaces the layer's Tuning (the zero Tuning: the launch
// policy) and frees its workspaces and graphs, made for the old plans; it
// uploads the weights of the paths the new plans take and frees those no
// plan takes any more. A Tuning that forces a path the layer cannot have
// (fp4-max-m where the device or the weight scales rule the wgmma-fp4
// path out) is an error wrapping backend.ErrUnsupported that says why.
func (l *Layer) SetTuning(t Tuning) error {
	if err := t.check(); err != nil {
		return err
	}
	return l.b.locked(func() error {
		if l.closed {
			return fmt.Errorf("%w: the layer is closed", backend.ErrClosed)
		}
		if t.FP4MaxM > 0 && !l.avail[PathFP4] {
			return fmt.Errorf("%w: the wgmma-fp4 path needs an sm_90 device and weight scales up to 2^%d (%s)",
				backend.ErrUnsupported, fp4.MaxScale-127, l.f4.whyNot)
		}
		if t.WGMMAMinM > 0 && !l.avail[PathWGMMA] {
			return fmt.Errorf("%w: the wgmma path needs an sm_90 device and K and N multiples of %d (%s)",
				backend.ErrUnsupported, abiStageK, l.wg.whyNot)
		}
		var errs []error
		for k, ws := range l.ws {
			errs = append(errs, ws.free())
			delete(l.ws, k)
		}
		old := l.tune
		l.tune = t
		if err := l.syncWeights(); err != nil {
			l.tune = old // the old plans' weights are all still there
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

// workspaceFor is the workspace of m tokens, or nil (rankLayer).
func (l *Layer) workspaceFor(m int) *workspace { return l.ws[m] }

// recipe is the recipe x is quantized with (rankLayer).
func (l *Layer) recipe() mxfp.Recipe { return l.spec.Recipe }

// isClosed reports whether Close has freed the layer (rankLayer).
func (l *Layer) isClosed() bool { return l.closed }

// Tuning is the layer's current Tuning.
func (l *Layer) Tuning() Tuning {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.tune
}

// rowK is the row length of x's BF16 copy and of GEMM2's rows on path p:
// the wgmma-fp4 GEMMs' padded K on their path (fp4.Dims), else K.
func (l *Layer) rowK(p Path) int {
	if p == PathFP4 {
		return l.f4.k
	}
	return l.w.K
}

// shape is the plan input of an m-token forward of top-k whose x has
// MXFP8 values BF16 does not hold (wide) or not.
func (l *Layer) shape(m, topk int, wide bool) planShape {
	return planShape{m: m, topk: topk, k: l.w.K, n: l.w.N, e: l.w.E, allLocal: l.spec.EP.Normalize().Size == 1,
		wg: l.avail[PathWGMMA], f4: l.avail[PathFP4], wgRows: l.wg.rows, wide: wide, bf16: l.spec.Chain == moe.ChainBF16, actResident: l.b.k.actResident, tune: l.tune}
}

// plan is the launch plan of an m-token forward of top-k, x wide or not.
func (l *Layer) plan(m, topk int, wide bool) Plan { return choosePlan(l.shape(m, topk, wide)) }

// PlanFor is the launch plan of a forward of m tokens of top-k whose x
// BF16 holds: what kimimoe bench prints.
func (l *Layer) PlanFor(m, topk int) Plan {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.plan(m, topk, false)
}

// PathFor names the kernels a forward of m tokens runs (Plan.Path, which
// does not depend on top-k): an input whose x BF16 does not hold
// (layout.XOutsideBF16) runs "grouped" ("decode" where K or N is not a multiple
// of 128) where this says one of the two wgmma paths.
func (l *Layer) PathFor(m int) string { return l.PlanFor(m, 1).Path.String() }

// uploadWeights copies the activation parameters, the biases and the
// weights of the paths the plans take to the device: all or none.
func (l *Layer) uploadWeights() error {
	w, spec := l.w, l.spec
	l.epRank = spec.EP.Normalize().Rank
	ups := []upload{{&l.params, f32bytes(packParams(spec.Params))}}
	// A bias the weights lack stays 0, which the kernels read as none.
	if w.W31Bias != nil {
		ups = append(ups, upload{&l.b1, f32bytes(w.W31Bias)})
	}
	if w.W2Bias != nil {
		ups = append(ups, upload{&l.b2, f32bytes(w.W2Bias)})
	}
	for p := range paths {
		l.avail[p] = paths[p].available(l) == ""
	}
	err := l.uploadAll(ups...)
	if err == nil {
		err = l.syncWeights()
	}
	if err != nil {
		return errors.Join(err, l.free())
	}
	return nil
}

// syncWeights uploads the weights of every available path that some
// forward's plan takes under the layer's tuning and frees the others'.
// Only Prepare and SetTuning call it, with no workspace (and so no graph)
// left to point at freed weights. On an upload error nothing is freed.
func (l *Layer) syncWeights() error {
	used := pathsUsed(l.shape(1, 1, false))
	for p := range paths {
		if used[p] && l.avail[p] && !l.uploaded[p] {
			if err := paths[p].upload(l); err != nil { // uploadAll has waited for each copy
				return err
			}
			l.uploaded[p] = true
		}
	}
	var errs []error
	for p := range paths {
		if !used[p] && l.uploaded[p] {
			errs = append(errs, freeAll(paths[p].weights(l)))
			l.uploaded[p] = false
		}
	}
	return errors.Join(errs...)
}

// freeAll frees the device buffers ptrs point at (0: none) and zeroes them.
func freeAll(ptrs []*devptr) error {
	var errs []error
	for _, p := range ptrs {
		if *p != 0 {
			errs = append(errs, cu.MemFree(*p))
			*p = 0
		}
	}
	return errors.Join(errs...)
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
		p, err := cu.MemAlloc(len(up.data))
		if err == nil {
			ptrs[i] = p
			err = cu.MemcpyHtoD(p, up.data, l.b.stream)
		}
		if err == nil {
			err = cu.StreamSync(l.b.stream) // data must outlive the copy
		}
		if err != nil {
			for _, p := range ptrs {
				if p != 0 {
					cu.MemFree(p)
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

// free releases the layer's device memory and zeroes its pointers, so a
// second call frees nothing twice.
func (l *Layer) free() error {
	ptrs := []*devptr{&l.params, &l.b1, &l.b2}
	for p := range paths {
		ptrs = append(ptrs, paths[p].weights(l)...)
		l.uploaded[p] = false
	}
	errs := []error{freeAll(ptrs)}
	for m, ws := range l.ws {
		errs = append(errs, ws.free())
		delete(l.ws, m)
	}
	l.closed = true
	return errors.Join(errs...)
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
