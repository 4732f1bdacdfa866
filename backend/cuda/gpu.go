//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
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

// chunkK is KC in kernels/moe.cu, the k elements staged per step (K and N
// must be multiples of it).
const chunkK = 128

// tileTokens picks the GEMMs' token tile (TT) for a forward of m tokens:
// 64 (two CTAs per SM) up to 512 tokens, 128 (each weight load reused by
// twice the tokens) above. Measured on the H200 (docs/PERF.md): TT=64 was
// faster at M <= 128 and even at 512, TT=128 faster at 2048 and 8192.
func tileTokens(m int) int {
	if m <= 512 {
		return 64
	}
	return 128
}

// Backend drives one GPU: its primary context, one stream, the compiled
// module.
type Backend struct {
	mu      sync.Mutex
	dev     int
	name    string
	arch    string
	sms     int
	ctx     cuContext
	stream  cuStream
	module  cuModule
	fn      map[string]cuFunction
	closed  bool
	release func()
}

// Open opens device ordinal 0 (or $KIMIMOE_DEVICE). Set
// KIMIMOE_NATIVE_MX=1 on an sm_120 device to use the native block-scaled
// MMA body (compiled, never run by kimimoe's authors).
func Open() (*Backend, error) {
	if err := acquire(); err != nil {
		return nil, err
	}
	b, err := open()
	if err != nil {
		release()
		return nil, err
	}
	return b, nil
}

func open() (*Backend, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n, err := cuDeviceCount()
	if err != nil || n == 0 {
		return nil, fmt.Errorf("%w (%d devices: %v)", ErrNoDevice, n, err)
	}
	ord := 0
	if s := os.Getenv("KIMIMOE_DEVICE"); s != "" {
		fmt.Sscan(s, &ord)
	}
	dev, err := cuDeviceGet(ord)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	b := &Backend{dev: dev, fn: map[string]cuFunction{}, release: release}
	b.name, _ = cuDeviceName(dev)
	major, _ := cuDeviceAttribute(dev, attrCCMajor)
	minor, _ := cuDeviceAttribute(dev, attrCCMinor)
	b.sms, _ = cuDeviceAttribute(dev, attrSMCount)
	native := false
	switch cc := major*10 + minor; {
	case cc == 89 || cc == 90:
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
		for _, k := range kernelNames {
			var f cuFunction
			if f, err = cuModuleGetFunction(b.module, k); err != nil {
				break
			}
			b.fn[k] = f
		}
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
		return nil, errors.New("cuda: backend is closed")
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

// Close releases the stream, module and context.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cuCtxSetCurrent(b.ctx)
	cuStreamDestroy(b.stream)
	cuModuleUnload(b.module)
	cuPrimaryCtxRelease(b.dev)
	b.closed = true
	b.release()
	return nil
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
	if err := b.Capabilities().Check(spec, w, "cuda", backend.GoName); err != nil {
		return nil, err
	}
	if err := spec.Validate(w); err != nil {
		return nil, err
	}
	if w.K%chunkK != 0 || w.N%chunkK != 0 {
		return nil, fmt.Errorf("%w: backend \"cuda\" needs K and N multiples of %d, have K=%d N=%d; use the %q backend",
			backend.ErrUnsupported, chunkK, w.K, w.N, backend.GoName)
	}
	l := &Layer{b: b, w: w, spec: spec, ws: map[int]*workspace{}}
	if err := b.locked(func() error { return l.uploadWeights() }); err != nil {
		return nil, err
	}
	return l, nil
}

// uploadWeights copies the weights and activation parameters to the device.
func (l *Layer) uploadWeights() error {
	b, w, spec := l.b, l.w, l.spec
	var err error
	ep := spec.EP
	if ep.Size == 0 {
		ep.Size = 1
	}
	l.epSize, l.epRank = ep.Size, ep.Rank
	params := make([]float32, 0, 5*len(spec.Params))
	for _, p := range spec.Params {
		params = append(params, float32(p.SituBeta), float32(p.SituLinearBeta), float32(p.SwigluAlpha), float32(p.SwigluBeta), float32(p.SwigluLimit))
	}
	for _, up := range []struct {
		dst  *devptr
		data []byte
	}{
		{&l.w31, w.W31}, {&l.w31s, w.W31Scale}, {&l.w2, w.W2}, {&l.w2s, w.W2Scale}, {&l.params, f32bytes(params)},
	} {
		if *up.dst, err = cuMemAlloc(len(up.data)); err != nil {
			l.free()
			return err
		}
		if err = cuMemcpyHtoD(*up.dst, up.data, b.stream); err != nil {
			l.free()
			return err
		}
	}
	if err := cuStreamSync(b.stream); err != nil {
		l.free()
		return err
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

// Layer is a prepared layer on the device.
type Layer struct {
	b              *Backend
	w              *moe.Weights
	spec           moe.LayerSpec
	epSize, epRank int
	w31, w31s      devptr
	w2, w2s        devptr
	params         devptr
	ws             map[int]*workspace // per token count
}

// workspace holds the device buffers of forwards with M tokens, and the
// graph captured for them.
type workspace struct {
	m, topk                  int
	x, xq, xs                devptr
	ids, wts, pos, perm      devptr
	counts, offset, tileBase devptr
	aq, aqs, y, out          devptr
	hasX                     bool
	graph                    cuGraph
	graphX                   cuGraphX
	bufs                     []devptr
}

func (l *Layer) free() {
	for _, p := range []devptr{l.w31, l.w31s, l.w2, l.w2s, l.params} {
		if p != 0 {
			cuMemFree(p)
		}
	}
	for _, ws := range l.ws {
		ws.free()
	}
	l.ws = nil
}

func (ws *workspace) free() {
	if ws.graphX != nil {
		cuGraphExecDestroy(ws.graphX)
		cuGraphDestroy(ws.graph)
	}
	for _, p := range ws.bufs {
		cuMemFree(p)
	}
}

func (l *Layer) workspace(m, topk int) (*workspace, error) {
	if ws := l.ws[m]; ws != nil && ws.topk == topk {
		return ws, nil
	} else if ws != nil {
		ws.free()
		delete(l.ws, m)
	}
	w := l.w
	ws := &workspace{m: m, topk: topk}
	entries := m * topk
	for _, a := range []struct {
		p *devptr
		n int
	}{
		{&ws.x, 4 * m * w.K}, {&ws.xq, m * w.K}, {&ws.xs, m * w.K / 32},
		{&ws.ids, 4 * entries}, {&ws.wts, 4 * entries}, {&ws.pos, 4 * entries}, {&ws.perm, 4 * entries},
		{&ws.counts, 4 * w.E}, {&ws.offset, 4 * (w.E + 1)}, {&ws.tileBase, 4 * (w.E + 1)},
		{&ws.aq, entries * w.N}, {&ws.aqs, entries * w.N / 32}, {&ws.y, 4 * entries * w.K}, {&ws.out, 4 * m * w.K},
	} {
		p, err := cuMemAlloc(a.n)
		if err != nil {
			ws.free()
			return nil, err
		}
		*a.p = p
		ws.bufs = append(ws.bufs, p)
	}
	l.ws[m] = ws
	return ws, nil
}

// upload validates in and copies it to the workspace for in.M.
func (l *Layer) upload(in *moe.Input) (*workspace, error) {
	if err := in.Validate(l.w.K, l.w.E*l.epSize); err != nil {
		return nil, err
	}
	ws, err := l.workspace(in.M, in.TopK)
	if err != nil {
		return nil, err
	}
	s := l.b.stream
	ws.hasX = in.X != nil
	if ws.hasX {
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

func ptr(p devptr) uint64 { return uint64(p) }
func arg(v int) uint64    { return uint64(uint32(int32(v))) }

// stepNames names enqueue's steps, for Profile.
var stepNames = []string{"memset", "quantize_x", "route_count", "route_scatter", "gemm1_act", "gemm2", "finalize"}

// enqueue issues the whole forward for ws on the stream.
func (l *Layer) enqueue(ws *workspace) error { return l.enqueueProfiled(ws, nil) }

// enqueueProfiled is enqueue; with events (len(stepNames)+1 of them) it
// records one before the first step and one after each.
func (l *Layer) enqueueProfiled(ws *workspace, events []cuEvent) error {
	w, b, s := l.w, l.b, l.b.stream
	m, topk, entries := ws.m, ws.topk, ws.m*ws.topk
	if m == 0 {
		return nil
	}
	recipe := 0
	if l.spec.Recipe == mxfp.RecipeRCeil {
		recipe = 1
	}
	chainFI := 0
	if l.spec.Chain == moe.ChainFlashInfer {
		chainFI = 1
	}
	tt := tileTokens(m)
	maxTiles := (entries+tt-1)/tt + w.E
	gemm1, gemm2 := b.fn[fmt.Sprintf("kmoe_gemm1_act_t%d", tt)], b.fn[fmt.Sprintf("kmoe_gemm2_t%d", tt)]
	steps := []func() error{
		func() error { return cuMemsetD32(ws.pos, 0xFFFFFFFF, entries, s) },
		func() error {
			if !ws.hasX {
				return nil
			}
			nblocks := m * w.K / 32
			return cuLaunch(b.fn["kmoe_quantize_x"], [3]int{(nblocks*32 + 255) / 256, 1, 1}, 256, 0, s,
				[]uint64{ptr(ws.x), ptr(ws.xq), ptr(ws.xs), arg(nblocks), arg(recipe)})
		},
		func() error {
			return cuLaunch(b.fn["kmoe_route_count"], [3]int{w.E, 1, 1}, 256, 0, s,
				[]uint64{ptr(ws.ids), arg(entries), arg(l.epRank), arg(w.E), ptr(ws.counts)})
		},
		func() error {
			return cuLaunch(b.fn["kmoe_route_scatter"], [3]int{w.E, 1, 1}, 256, 0, s,
				[]uint64{ptr(ws.ids), arg(entries), arg(l.epRank), arg(w.E), ptr(ws.counts), arg(tt),
					ptr(ws.perm), ptr(ws.pos), ptr(ws.offset), ptr(ws.tileBase)})
		},
		func() error {
			return cuLaunch(gemm1, [3]int{w.N / 64, maxTiles, 1}, 256, 0, s,
				[]uint64{ptr(ws.xq), ptr(ws.xs), arg(w.K), arg(topk), ptr(l.w31), ptr(l.w31s), arg(w.N), arg(w.E),
					ptr(ws.perm), ptr(ws.offset), ptr(ws.tileBase), arg(int(l.spec.Activation)), ptr(l.params),
					arg(len(l.spec.Params)), arg(chainFI), arg(recipe), ptr(ws.aq), ptr(ws.aqs)})
		},
		func() error {
			return cuLaunch(gemm2, [3]int{w.K / 128, maxTiles, 1}, 256, 0, s,
				[]uint64{ptr(ws.aq), ptr(ws.aqs), arg(w.N), ptr(l.w2), ptr(l.w2s), arg(w.K), arg(w.E),
					ptr(ws.offset), ptr(ws.tileBase), ptr(ws.y)})
		},
		func() error {
			return cuLaunch(b.fn["kmoe_finalize"], [3]int{m, (w.K + 255) / 256, 1}, 256, 0, s,
				[]uint64{ptr(ws.y), ptr(ws.pos), ptr(ws.wts), arg(topk), arg(w.K), ptr(ws.out)})
		},
	}
	if events != nil {
		if err := cuEventRecord(events[0], s); err != nil {
			return err
		}
	}
	for k, step := range steps {
		if err := step(); err != nil {
			return err
		}
		if events != nil {
			if err := cuEventRecord(events[k+1], s); err != nil {
				return err
			}
		}
	}
	return nil
}

// Profile runs the uploaded m-token forward eagerly with an event between
// kernels and returns each step's device time in milliseconds, by name.
func (l *Layer) Profile(m int) (out map[string]float64, err error) {
	err = l.b.locked(func() error {
		ws := l.ws[m]
		if ws == nil {
			return fmt.Errorf("cuda: Profile(%d): no uploaded input of %d tokens", m, m)
		}
		events := make([]cuEvent, len(stepNames)+1)
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
		for k, name := range stepNames {
			var err error
			if out[name], err = cuEventElapsed(events[k], events[k+1]); err != nil {
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
	k := l.w.K
	all := dst
	if rows != nil {
		all = make([]float32, ws.m*k)
	}
	if err := cuMemcpyDtoH(f32bytes(all), ws.out, l.b.stream); err != nil {
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
	n := in.M
	if rows != nil {
		n = len(rows)
		for _, r := range rows {
			if r < 0 || r >= in.M {
				return fmt.Errorf("%w: row %d outside [0, %d)", moe.ErrInput, r, in.M)
			}
		}
	}
	if len(dst) != n*l.w.K {
		return fmt.Errorf("%w: dst has %d values, want [%d, %d]", moe.ErrInput, len(dst), n, l.w.K)
	}
	return nil
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

func (l *Layer) replay(ws *workspace) error {
	s := l.b.stream
	if ws.graphX == nil {
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
		ws.graph, ws.graphX = g, x
	}
	return cuGraphLaunch(ws.graphX, s)
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
		if ws == nil {
			return fmt.Errorf("cuda: TimeForward(%d): no uploaded input of %d tokens", m, m)
		}
		if graph && ws.graphX == nil { // capture outside the timed region
			if err := l.replay(ws); err != nil {
				return err
			}
		}
		run := func() error { return l.enqueue(ws) }
		if graph {
			run = func() error { return cuGraphLaunch(ws.graphX, l.b.stream) }
		}
		ms, err = timeOn(l.b.stream, run)
		return err
	})
	return ms, err
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

// Close frees the layer's device memory.
func (l *Layer) Close() error {
	// An error means the backend is closed: its context, and so the
	// layer's memory, are gone already.
	l.b.locked(func() error { l.free(); return nil })
	return nil
}
