//go:build cgo

package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"kimimoe/backend"
	"kimimoe/backend/cuda/internal/nccl"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// A group of devices kept in host memory: each fake device runs its share
// of the layer on the pure-Go backend, and the collectives meet in a
// fakeWorld. The group's own code (planning a dispatch, the exchanges,
// the combine in device order, the watchdog) runs unchanged, so its token
// movement is tested with no GPU and at any device count.

// fakeWorld is the communicator that a group's fake devices share.
type fakeWorld struct {
	size    int
	mu      sync.Mutex
	cond    *sync.Cond
	round   int      // collectives completed
	arrived int      // ranks in the current collective
	slots   [][]byte // the current collective's contributions, by rank
	last    [][]byte // the last completed collective's
	aborted bool
	abortCh chan struct{}
	box     [][]chan []byte // box[from][to]: sends not yet received
}

func newFakeWorld(size int) *fakeWorld {
	w := &fakeWorld{size: size, slots: make([][]byte, size), abortCh: make(chan struct{}), box: make([][]chan []byte, size)}
	w.cond = sync.NewCond(&w.mu)
	for i := range w.box {
		w.box[i] = make([]chan []byte, size)
		for j := range w.box[i] {
			w.box[i][j] = make(chan []byte, 1024)
		}
	}
	return w
}

var errFakeAborted = errors.New("fake communicator aborted")

// exchange is every collective: rank contributes data and gets every
// rank's contribution once all have come (or an error once aborted).
func (w *fakeWorld) exchange(rank int, data []byte) ([][]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.aborted {
		return nil, errFakeAborted
	}
	if w.slots[rank] != nil {
		return nil, fmt.Errorf("fake: rank %d joined one collective twice", rank)
	}
	w.slots[rank] = data
	w.arrived++
	round := w.round
	if w.arrived == w.size {
		w.last, w.slots, w.arrived = w.slots, make([][]byte, w.size), 0
		w.round++
		w.cond.Broadcast()
		return w.last, nil
	}
	for w.round == round && !w.aborted {
		w.cond.Wait()
	}
	if w.round == round {
		return nil, errFakeAborted
	}
	return w.last, nil
}

func (w *fakeWorld) abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.aborted {
		w.aborted = true
		close(w.abortCh)
		w.cond.Broadcast()
	}
}

// fakeAlloc is one allocation of a fake device.
type fakeAlloc struct {
	base devptr
	data []byte
}

// fakeDevice is one device of a fake group: memory, a layer on the Go
// backend, and the collectives through its world.
type fakeDevice struct {
	rank    int
	world   *fakeWorld
	mu      sync.Mutex
	next    devptr
	allocs  []fakeAlloc // by base
	inGroup bool
	sends   []fakeMsg
	recvs   []fakeMsg
	// failAlloc, when set, is the error of every alloc (a device out of
	// memory before a collective).
	failAlloc error
}

type fakeMsg struct {
	p    devptr
	n    int
	peer int
}

var _ groupDevice = (*fakeDevice)(nil)

// newFakeGroup is a group of size fake devices in one process.
func newFakeGroup(size int, mode Mode, timeout time.Duration) (*Group, []*fakeDevice) {
	devs := newFakeDevices(size)
	return fakeGroupOf(size, mode, timeout, devs...), devs
}

// newFakeRanks is a group of size fake devices as OpenRank makes it: one
// Group a rank, each driving its one device, as one process a rank would.
func newFakeRanks(size int, mode Mode, timeout time.Duration) []*Group {
	var gs []*Group
	for _, d := range newFakeDevices(size) {
		gs = append(gs, fakeGroupOf(size, mode, timeout, d))
	}
	return gs
}

// newFakeDevices are size fake devices meeting in one world. Each
// device's addresses are its own, so a pointer of another device is
// caught.
func newFakeDevices(size int) []*fakeDevice {
	w := newFakeWorld(size)
	var devs []*fakeDevice
	for r := range size {
		devs = append(devs, &fakeDevice{rank: r, world: w, next: devptr(r+1) << 40})
	}
	return devs
}

// fakeGroupOf is a group of size devices of which this one drives devs.
func fakeGroupOf(size int, mode Mode, timeout time.Duration, devs ...*fakeDevice) *Group {
	g := &Group{opts: GroupOptions{Mode: mode, Timeout: timeout}.normalize(), size: size, layers: map[*GroupLayer]bool{}}
	for _, d := range devs {
		g.members = append(g.members, &member{dev: d, rank: d.rank})
	}
	return g
}

func (d *fakeDevice) prepare(w *moe.Weights, spec moe.LayerSpec) (rankLayer, error) {
	gb, err := backend.Open(backend.GoName)
	if err != nil {
		return nil, err
	}
	l, err := gb.Prepare(w, spec)
	if err != nil {
		return nil, err
	}
	return &fakeLayer{d: d, l: l, k: w.K, rec: spec.Recipe, ws: map[int]*workspace{}}, nil
}

func (d *fakeDevice) capabilities() backend.Capabilities {
	return deviceCapabilities(fmt.Sprintf("fake device %d", d.rank))
}

func (d *fakeDevice) ordinal() int { return d.rank }

func (d *fakeDevice) locked(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return f()
}

func (d *fakeDevice) close() error { return nil }

func (d *fakeDevice) alloc(n int) (devptr, error) {
	if d.failAlloc != nil {
		return 0, d.failAlloc
	}
	if n < 0 {
		return 0, fmt.Errorf("fake: alloc of %d bytes", n)
	}
	p := d.next
	// A gap after each allocation, so a read past its end is caught.
	d.next += devptr((n+255)/256*256 + 256)
	d.allocs = append(d.allocs, fakeAlloc{base: p, data: make([]byte, n)})
	return p, nil
}

func (d *fakeDevice) free(p devptr) error {
	for i, a := range d.allocs {
		if a.base == p {
			d.allocs = append(d.allocs[:i], d.allocs[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("fake device %d: free of %#x, which is not an allocation", d.rank, p)
}

func (d *fakeDevice) freeEach(ps []devptr) error {
	var errs []error
	for _, p := range ps {
		errs = append(errs, d.free(p))
	}
	return errors.Join(errs...)
}

// at is the n bytes at p, which must lie inside one live allocation.
func (d *fakeDevice) at(p devptr, n int) ([]byte, error) {
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base > p }) - 1
	if n < 0 || i < 0 || int(p-d.allocs[i].base)+n > len(d.allocs[i].data) {
		return nil, fmt.Errorf("fake device %d: %d bytes at %#x are outside every allocation", d.rank, n, p)
	}
	off := int(p - d.allocs[i].base)
	return d.allocs[i].data[off : off+n], nil
}

func (d *fakeDevice) htod(dst devptr, src []byte) error {
	b, err := d.at(dst, len(src))
	if err == nil {
		copy(b, src)
	}
	return err
}

func (d *fakeDevice) dtoh(dst []byte, src devptr) error {
	b, err := d.at(src, len(dst))
	if err == nil {
		copy(dst, b)
	}
	return err
}

func (d *fakeDevice) dtod(dst, src devptr, n int) error {
	s, err := d.at(src, n)
	if err != nil {
		return err
	}
	t, err := d.at(dst, n)
	if err == nil {
		copy(t, s)
	}
	return err
}

func (d *fakeDevice) memset32(dst devptr, v uint32, n int) error {
	b, err := d.at(dst, 4*n)
	for i := 0; err == nil && i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return err
}

// The fake's stream runs each call to its end before returning.
func (d *fakeDevice) sync() error                   { return nil }
func (d *fakeDevice) query() (done bool, err error) { return true, nil }

// quantizeX is kmoe_quantize_x: each 32-block of x quantized by the
// recipe (mxfp.QuantizeMXFP8, which the kernel matches bitwise).
func (d *fakeDevice) quantizeX(a *quantizeXArgs) error {
	n := int(a.NBlocks) * 32
	x, err := d.at(a.X, 4*n)
	if err != nil {
		return err
	}
	codes, err := d.at(a.Codes, n)
	if err != nil {
		return err
	}
	scales, err := d.at(a.Scales, n/32)
	if err != nil {
		return err
	}
	r := mxfp.RecipeRCeil
	if a.Recipe == abiRecipeFloor {
		r = mxfp.RecipeFloor
	}
	xf := make([]float32, n)
	copy(f32bytes(xf), x)
	mxfp.QuantizeMXFP8(codes, scales, xf, r)
	return nil
}

func (d *fakeDevice) gatherRows(rows int, a *gatherRowsArgs) error {
	w := int(a.Width)
	idx, err := d.at(a.Idx, 4*rows)
	if err != nil {
		return err
	}
	for i := range rows {
		src, err := d.at(a.Src+devptr(int(int32(binary.LittleEndian.Uint32(idx[4*i:])))*w), w)
		if err != nil {
			return err
		}
		if err := d.htod(a.Dst+devptr(i*w), src); err != nil {
			return err
		}
	}
	return nil
}

func (d *fakeDevice) addRows(rows int, a *addRowsArgs) error {
	w := int(a.Width)
	idx, err := d.at(a.Idx, 4*rows)
	if err != nil {
		return err
	}
	for i := range rows {
		src, err := d.at(a.Src+devptr(4*i*w), 4*w)
		if err != nil {
			return err
		}
		dst, err := d.at(a.Dst+devptr(4*int(int32(binary.LittleEndian.Uint32(idx[4*i:])))*w), 4*w)
		if err != nil {
			return err
		}
		for j := range w {
			s := math.Float32frombits(binary.LittleEndian.Uint32(src[4*j:]))
			v := math.Float32frombits(binary.LittleEndian.Uint32(dst[4*j:]))
			binary.LittleEndian.PutUint32(dst[4*j:], math.Float32bits(v+s))
		}
	}
	return nil
}

// allReduceSum sums in rank order.
func (d *fakeDevice) allReduceSum(buf devptr, n int) error {
	b, err := d.at(buf, 4*n)
	if err != nil {
		return err
	}
	all, err := d.world.exchange(d.rank, append([]byte(nil), b...))
	if err != nil {
		return err
	}
	for i := range n {
		var s float32
		for r, c := range all {
			if len(c) != 4*n {
				return fmt.Errorf("fake: all-reduce of %d values met rank %d's %d bytes", n, r, len(c))
			}
			v := math.Float32frombits(binary.LittleEndian.Uint32(c[4*i:]))
			if r == 0 {
				s = v
			} else {
				s += v
			}
		}
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(s))
	}
	return nil
}

func (d *fakeDevice) allGather(src, dst devptr, n, dtype int) error {
	size := map[int]int{nccl.Uint8: 1, nccl.Int32: 4, nccl.Float32: 4}[dtype]
	b, err := d.at(src, n*size)
	if err != nil {
		return err
	}
	all, err := d.world.exchange(d.rank, append([]byte(nil), b...))
	if err != nil {
		return err
	}
	var cat []byte
	for r, c := range all {
		if len(c) != n*size {
			return fmt.Errorf("fake: all-gather of %d bytes met rank %d's %d", n*size, r, len(c))
		}
		cat = append(cat, c...)
	}
	return d.htod(dst, cat)
}

func (d *fakeDevice) groupStart() error {
	if d.inGroup {
		return errors.New("fake: nested group")
	}
	d.inGroup = true
	return nil
}

// groupEnd posts the group's sends, then takes its receives in the order
// they were asked for: each peer's messages arrive in the order it sent
// them, and a receive of another size than its send is an error (NCCL
// would hang or corrupt).
func (d *fakeDevice) groupEnd() error {
	if !d.inGroup {
		return errors.New("fake: group end without a start")
	}
	d.inGroup = false
	sends, recvs := d.sends, d.recvs
	d.sends, d.recvs = nil, nil
	for _, s := range sends {
		b, err := d.at(s.p, s.n)
		if err != nil {
			return err
		}
		d.world.box[d.rank][s.peer] <- append([]byte(nil), b...)
	}
	for _, r := range recvs {
		var msg []byte
		select {
		case msg = <-d.world.box[r.peer][d.rank]:
		case <-d.world.abortCh:
			return errFakeAborted
		}
		if len(msg) != r.n {
			return fmt.Errorf("fake: device %d receives %d bytes from %d, which sent %d", d.rank, r.n, r.peer, len(msg))
		}
		if err := d.htod(r.p, msg); err != nil {
			return err
		}
	}
	return nil
}

func (d *fakeDevice) send(src devptr, n, peer int) error {
	if !d.inGroup {
		return errors.New("fake: send outside a group")
	}
	d.sends = append(d.sends, fakeMsg{src, n, peer})
	return nil
}

func (d *fakeDevice) recv(dst devptr, n, peer int) error {
	if !d.inGroup {
		return errors.New("fake: receive outside a group")
	}
	d.recvs = append(d.recvs, fakeMsg{dst, n, peer})
	return nil
}

func (d *fakeDevice) asyncError() error { return nil }
func (d *fakeDevice) abort()            { d.world.abort() }
func (d *fakeDevice) destroy() error    { return nil }

func (d *fakeDevice) timed(_ Flush, f, wait func() error) (float64, error) {
	start := time.Now()
	if err := f(); err != nil {
		return 0, err
	}
	if err := wait(); err != nil {
		return 0, err
	}
	return float64(time.Since(start)) / 1e6, nil
}

func (d *fakeDevice) copyBandwidth(int, int) (float64, error) {
	return 0, fmt.Errorf("%w: a fake device has no bandwidth", backend.ErrUnsupported)
}

// fakeLayer is a device's share of the layer on the pure-Go backend, its
// workspaces in the device's memory.
type fakeLayer struct {
	d      *fakeDevice
	l      backend.Layer
	k      int
	rec    mxfp.Recipe
	ws     map[int]*workspace
	closed bool
}

var _ rankLayer = (*fakeLayer)(nil)

func (l *fakeLayer) upload(in *moe.Input) (*workspace, error) {
	if l.closed {
		return nil, fmt.Errorf("%w: the layer is closed", backend.ErrClosed)
	}
	ws, err := l.workspace(in.M, in.TopK)
	if err != nil {
		return nil, err
	}
	copies := []hostCopy{{ws.ids, i32bytes(in.TopKIDs)}, {ws.wts, f32bytes(in.TopKWeights)}}
	ws.form = formQuantized
	if in.X != nil {
		ws.form = formFloat
		copies = append(copies, hostCopy{ws.x, f32bytes(in.X)})
	} else {
		copies = append(copies, hostCopy{ws.xq, in.XQ.Codes}, hostCopy{ws.xs, in.XQ.Scales})
	}
	for _, c := range copies {
		if err := l.d.htod(c.dst, c.data); err != nil {
			return nil, err
		}
	}
	return ws, nil
}

func (l *fakeLayer) workspace(m, topk int) (*workspace, error) {
	if ws := l.ws[m]; ws != nil && ws.topk == topk {
		return ws, nil
	} else if ws != nil {
		if err := l.d.freeEach(ws.bufs); err != nil {
			return nil, err
		}
	}
	ws := &workspace{m: m, topk: topk}
	k := l.k
	for _, b := range []struct {
		p *devptr
		n int
	}{{&ws.x, 4 * m * k}, {&ws.xq, m * k}, {&ws.xs, m * k / 32}, {&ws.ids, 4 * m * topk}, {&ws.wts, 4 * m * topk}, {&ws.out, 4 * m * k}} {
		p, err := l.d.alloc(b.n)
		if err != nil {
			return nil, errors.Join(err, l.d.freeEach(ws.bufs))
		}
		*b.p = p
		ws.bufs = append(ws.bufs, p)
	}
	l.ws[m] = ws
	return ws, nil
}

func (l *fakeLayer) workspaceFor(m int) *workspace { return l.ws[m] }

// enqueue runs the Go backend on the workspace's input.
func (l *fakeLayer) enqueue(ws *workspace) error {
	m, k, topk := ws.m, l.k, ws.topk
	if m == 0 {
		return nil
	}
	in := &moe.Input{M: m, TopK: topk, TopKIDs: make([]int32, m*topk), TopKWeights: make([]float32, m*topk)}
	if err := l.d.dtoh(i32bytes(in.TopKIDs), ws.ids); err != nil {
		return err
	}
	if err := l.d.dtoh(f32bytes(in.TopKWeights), ws.wts); err != nil {
		return err
	}
	if ws.form == formFloat {
		in.X = make([]float32, m*k)
		if err := l.d.dtoh(f32bytes(in.X), ws.x); err != nil {
			return err
		}
	} else {
		in.XQ = mxfp.NewMXFP8Matrix(m, k)
		if err := l.d.dtoh(in.XQ.Codes, ws.xq); err != nil {
			return err
		}
		if err := l.d.dtoh(in.XQ.Scales, ws.xs); err != nil {
			return err
		}
	}
	out := make([]float32, m*k)
	if err := l.l.Forward(out, in, nil); err != nil {
		return err
	}
	return l.d.htod(ws.out, f32bytes(out))
}

func (l *fakeLayer) downloadFrom(dst []float32, src devptr, m int, rows []int) error {
	all := make([]float32, m*l.k)
	if err := l.d.dtoh(f32bytes(all), src); err != nil {
		return err
	}
	if rows == nil {
		copy(dst, all)
		return nil
	}
	for j, r := range rows {
		copy(dst[j*l.k:(j+1)*l.k], all[r*l.k:(r+1)*l.k])
	}
	return nil
}

func (l *fakeLayer) recipe() mxfp.Recipe { return l.rec }
func (l *fakeLayer) isClosed() bool      { return l.closed }

func (l *fakeLayer) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	for _, ws := range l.ws {
		errs = append(errs, l.d.freeEach(ws.bufs))
	}
	l.ws = nil
	return errors.Join(append(errs, l.l.Close())...)
}
