//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/backend/cuda/internal/nccl"

	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// GroupLayer is a layer prepared on a Group: each device of the group
// holds its share of the experts. Forward is collective: in a group of
// several processes every rank calls it with the same input.
type GroupLayer struct {
	g         *Group
	w         *moe.Weights // the EP rank's, as given to Prepare
	mode      Mode
	numGlobal int
	eps       []moe.EP // each device's expert range
	eEach     int
	parts     []*memberLayer // one per device this process drives
	closed    bool
}

// memberLayer is one device's share.
type memberLayer struct {
	mb *member
	l  rankLayer
	ds map[int]*dispatchState // by token count (dispatch mode)
}

// rankLayer is what a GroupLayer asks of each device's layer (*Layer): an
// upload, workspaces and their launches, the output's download. The group
// never reads a layer's fields.
type rankLayer interface {
	upload(in *moe.Input) (*workspace, error)
	workspace(m, topk int) (*workspace, error)
	workspaceFor(m int) *workspace // the workspace of m tokens, or nil
	enqueue(ws *workspace) error
	downloadFrom(dst []float32, src devptr, m int, rows []int) error
	recipe() mxfp.Recipe
	isClosed() bool
	Close() error
}

var _ rankLayer = (*Layer)(nil)

// dispatchState holds one device's buffers and counts of a dispatch of M
// tokens: its home rows, what it sends where, what comes back.
type dispatchState struct {
	m, topk int
	plan    dispatchPlan
	sendOff []int // rows sent to device d: [sendOff[d], sendOff[d+1]) of the send buffers
	recvOff []int // rows received from device d: [recvOff[d], recvOff[d+1]) of the layer's workspace
	hPad    int   // home rows per device, padded: ceil(M / D)
	form    int
	wide    bool      // x has MXFP8 values BF16 does not hold (layout.XOutsideBF16)
	sent    [][]int32 // sent[a][b]: tokens device a sends to device b (every device's counts)

	homeX, homeXQ, homeXS, homeIDs, homeWts devptr
	idx                                     devptr // the send lists, concatenated in device order
	sendXQ, sendXS, sendIDs, sendWts        devptr
	back                                    devptr // partial outputs of the sent rows, returned
	out                                     devptr // the home rows' outputs [hPad, K]
	full                                    devptr // every device's home rows, gathered [D * hPad, K]
	bufs                                    []devptr
}

func (ds *dispatchState) free(dev groupDevice) error {
	var errs []error
	for _, p := range ds.bufs {
		errs = append(errs, dev.free(p))
	}
	ds.bufs = nil
	return errors.Join(errs...)
}

// Prepare implements backend.Backend with the group's mode.
func (g *Group) Prepare(w *moe.Weights, spec moe.LayerSpec) (backend.Layer, error) {
	gl, err := g.PrepareMode(w, spec, g.opts.Mode)
	if err != nil {
		return nil, err // not a nil *GroupLayer in a non-nil interface
	}
	return gl, nil
}

// PrepareMode spreads one EP rank's layer (w, spec) over the group's
// devices (moe.SplitDevices: device i holds local experts [i*E/D,
// (i+1)*E/D)) and prepares each device's share, moving tokens by mode.
func (g *Group) PrepareMode(w *moe.Weights, spec moe.LayerSpec, mode Mode) (*GroupLayer, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("%w: the expert-parallel group is closed", backend.ErrClosed)
	}
	if mode != ModeReplicated && mode != ModeDispatch {
		return nil, fmt.Errorf("%w: %v", ErrGroup, mode)
	}
	if w == nil {
		return nil, fmt.Errorf("%w: Prepare: weights are nil", moe.ErrInput)
	}
	if err := g.Capabilities().Check(spec, w, "cuda", backend.GoName); err != nil {
		return nil, err
	}
	if mode == ModeDispatch && spec.Chain == moe.ChainBF16 {
		// Dispatch sends x as MXFP8, which the bf16 chain never makes.
		return nil, fmt.Errorf("%w: the bf16 chain runs in the replicated mode only; dispatch sends x as MXFP8", backend.ErrUnsupported)
	}
	ws, specs, err := moe.SplitDevices(w, spec, g.size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrUnsupported, err)
	}
	numGlobal, err := spec.EP.NumGlobal(w.E)
	if err != nil {
		return nil, err
	}
	gl := &GroupLayer{g: g, w: w, mode: mode, numGlobal: numGlobal, eEach: w.E / g.size}
	for _, s := range specs {
		gl.eps = append(gl.eps, s.EP)
	}
	for _, mb := range g.members {
		l, err := mb.dev.prepare(ws[mb.rank], specs[mb.rank])
		if err != nil {
			return nil, errors.Join(fmt.Errorf("rank %d: %w", mb.rank, err), gl.close())
		}
		gl.parts = append(gl.parts, &memberLayer{mb: mb, l: l, ds: map[int]*dispatchState{}})
	}
	g.layers[gl] = true
	return gl, nil
}

// Mode is how the layer moves tokens.
func (gl *GroupLayer) Mode() Mode { return gl.mode }

func (gl *GroupLayer) part(mb *member) *memberLayer {
	for _, p := range gl.parts {
		if p.mb == mb {
			return p
		}
	}
	panic("cuda: device not in the layer's group")
}

// Forward implements backend.Layer: every device runs its experts on the
// tokens it gets, the partial outputs are summed (all-reduce, or the
// dispatch's combine and then an all-gather of the home rows), and the
// requested rows are copied back.
func (gl *GroupLayer) Forward(dst []float32, in *moe.Input, rows []int) error {
	if err := backend.CheckForward(dst, in, rows, gl.w.K, gl.numGlobal); err != nil {
		return err
	}
	if in.M == 0 {
		return nil
	}
	if err := gl.upload(in); err != nil {
		return err
	}
	if err := gl.g.each(func(mb *member) error {
		if err := gl.part(mb).enqueue(gl, in.M, stepsForward); err != nil {
			return err
		}
		return gl.g.wait(mb)
	}); err != nil {
		return err
	}
	p := gl.parts[0]
	return p.mb.dev.locked(func() error {
		var src devptr
		if gl.mode == ModeDispatch {
			src = p.ds[in.M].full
		} else {
			src = p.l.workspaceFor(in.M).out
		}
		return p.l.downloadFrom(dst, src, in.M, rows)
	})
}

// Upload copies in to every device this process drives (backend.Timer);
// in dispatch mode it also exchanges the send counts.
func (gl *GroupLayer) Upload(in *moe.Input) error {
	if err := backend.CheckForward(nil, in, []int{}, gl.w.K, gl.numGlobal); err != nil {
		return err
	}
	return gl.upload(in)
}

func (gl *GroupLayer) upload(in *moe.Input) error {
	if gl.closed {
		return fmt.Errorf("%w: the layer is closed", backend.ErrClosed)
	}
	return gl.g.each(func(mb *member) error {
		p := gl.part(mb)
		if gl.mode == ModeReplicated {
			_, err := p.l.upload(in)
			if err == nil {
				err = mb.dev.sync()
			}
			return err
		}
		return p.uploadDispatch(gl, in)
	})
}

// TimeForward implements backend.Timer: the uploaded m-token forward on
// every device, from the first kernel to the summed output (in dispatch
// mode: to the home rows' outputs, without the final all-gather that
// Forward adds), the longest over the devices, in milliseconds. There are
// no graphs: graph must be false.
func (gl *GroupLayer) TimeForward(m int, graph bool) (float64, error) {
	if graph {
		return 0, fmt.Errorf("%w: an expert-parallel group launches its collectives eagerly (no CUDA graphs)", backend.ErrUnsupported)
	}
	return gl.time(m, stepsLayer)
}

// TimeComm times only the communication of the uploaded m-token forward
// (the all-reduce, or the dispatch and combine exchanges), longest over
// the devices, in milliseconds.
func (gl *GroupLayer) TimeComm(m int) (float64, error) { return gl.time(m, stepsComm) }

func (gl *GroupLayer) time(m int, which steps) (float64, error) {
	for _, p := range gl.parts {
		if (gl.mode == ModeReplicated && p.l.workspaceFor(m) == nil) || (gl.mode == ModeDispatch && p.ds[m] == nil) {
			return 0, fmt.Errorf("cuda: no uploaded input of %d tokens", m)
		}
	}
	return gl.g.timeEach(func(mb *member) error { return gl.part(mb).enqueue(gl, m, which) })
}

// CommBytes is the most bytes one device sends in the uploaded m-token
// forward: the ring all-reduce's 2(D-1)/D x M x K x 4, or the dispatch's
// MXFP8 rows, ids and weights out and float32 partial outputs back.
func (gl *GroupLayer) CommBytes(m int) (int64, error) {
	d := int64(gl.g.size)
	if gl.mode == ModeReplicated {
		return 2 * (d - 1) * int64(m) * int64(gl.w.K) * 4 / d, nil
	}
	ds := gl.parts[0].ds[m]
	if ds == nil {
		return 0, fmt.Errorf("cuda: no uploaded input of %d tokens", m)
	}
	var most int64
	for r := range ds.sent {
		most = max(most, dispatchBytes(ds.sent, r, gl.w.K, ds.topk))
	}
	return most, nil
}

// Close frees every device's share. A second Close returns nil.
func (gl *GroupLayer) Close() error {
	gl.g.mu.Lock()
	defer gl.g.mu.Unlock()
	if gl.closed || gl.g.closed {
		return nil
	}
	delete(gl.g.layers, gl)
	return gl.close()
}

func (gl *GroupLayer) close() error {
	gl.closed = true
	var errs []error
	for _, p := range gl.parts {
		errs = append(errs, p.mb.dev.locked(func() error {
			var errs []error
			for _, ds := range p.ds {
				errs = append(errs, ds.free(p.mb.dev))
			}
			return errors.Join(errs...)
		}))
		errs = append(errs, p.l.Close())
	}
	return errors.Join(errs...)
}

// steps selects what enqueue issues.
type steps int

const (
	stepsForward steps = iota // everything, up to the whole output on every device
	stepsLayer                // the layer: up to the summed output (home rows in dispatch mode)
	stepsComm                 // the communication alone
)

// enqueue issues the m-token forward's steps on the device's stream.
func (p *memberLayer) enqueue(gl *GroupLayer, m int, which steps) error {
	l, dev := p.l, p.mb.dev
	if gl.mode == ModeReplicated {
		ws := l.workspaceFor(m)
		if which != stepsComm {
			if err := l.enqueue(ws); err != nil {
				return err
			}
		}
		return dev.allReduceSum(ws.out, m*gl.w.K)
	}
	ds := p.ds[m]
	k, topk := gl.w.K, ds.topk
	nd := len(ds.sendOff) - 1
	total, mRecv := ds.sendOff[nd], ds.recvOff[nd]
	home := ds.plan.hi - ds.plan.lo
	var lws *workspace
	if mRecv > 0 {
		var err error
		if lws, err = l.workspace(mRecv, topk); err != nil {
			return err
		}
		lws.form, lws.wide = formQuantized, ds.wide
	}
	compute := which != stepsComm
	if compute && ds.form == formFloat && home > 0 {
		nb := home * k / 32
		if err := dev.quantizeX(&quantizeXArgs{X: ds.homeX, Codes: ds.homeXQ, Scales: ds.homeXS, NBlocks: i32(nb), Recipe: recipeCode(l.recipe())}); err != nil {
			return err
		}
	}
	if compute && total > 0 {
		for _, g := range []struct {
			src, dst devptr
			width    int
		}{{ds.homeXQ, ds.sendXQ, k}, {ds.homeXS, ds.sendXS, k / 32}, {ds.homeIDs, ds.sendIDs, 4 * topk}, {ds.homeWts, ds.sendWts, 4 * topk}} {
			if err := dev.gatherRows(total, &gatherRowsArgs{Src: g.src, Dst: g.dst, Idx: ds.idx, Width: i32(g.width)}); err != nil {
				return err
			}
		}
	}
	// Dispatch: the rows each device needs, into the layer's workspace.
	var into []rowBuf
	if lws != nil {
		into = []rowBuf{{ds.sendXQ, lws.xq, k}, {ds.sendXS, lws.xs, k / 32}, {ds.sendIDs, lws.ids, 4 * topk}, {ds.sendWts, lws.wts, 4 * topk}}
	} else {
		into = []rowBuf{{ds.sendXQ, 0, k}, {ds.sendXS, 0, k / 32}, {ds.sendIDs, 0, 4 * topk}, {ds.sendWts, 0, 4 * topk}}
	}
	if err := p.sendrecv(ds.sendOff, ds.recvOff, into); err != nil {
		return err
	}
	if compute && lws != nil {
		if err := l.enqueue(lws); err != nil {
			return err
		}
	}
	// Combine: each device's partial outputs go back to their home.
	var outRows devptr
	if lws != nil {
		outRows = lws.out
	}
	if err := p.sendrecv(ds.recvOff, ds.sendOff, []rowBuf{{outRows, ds.back, 4 * k}}); err != nil {
		return err
	}
	if !compute {
		return nil
	}
	if err := dev.memset32(ds.out, 0, ds.hPad*k); err != nil {
		return err
	}
	for d := range nd { // in device order: the order of the sums
		n := ds.sendOff[d+1] - ds.sendOff[d]
		if n == 0 {
			continue
		}
		if err := dev.addRows(n, &addRowsArgs{
			Dst: ds.out, Src: ds.back + uint64(4*ds.sendOff[d]*k), Idx: ds.idx + uint64(4*ds.sendOff[d]), Width: i32(k)}); err != nil {
			return err
		}
	}
	if which == stepsForward {
		return dev.allGather(ds.out, ds.full, ds.hPad*k, nccl.Float32)
	}
	return nil
}

// rowBuf is a pair of buffers whose rows (width bytes) an exchange moves.
type rowBuf struct {
	src, dst devptr
	width    int
}

// sendrecv exchanges rows in one NCCL group: rows [so[d], so[d+1]) of
// every src go to device d, and rows [ro[d], ro[d+1]) of every dst come
// from device d. The device's own rows are copied on the stream.
func (p *memberLayer) sendrecv(so, ro []int, bufs []rowBuf) error {
	mb := p.mb
	if err := mb.dev.groupStart(); err != nil {
		return err
	}
	var errs []error
	for d := range len(so) - 1 {
		ns, nr := so[d+1]-so[d], ro[d+1]-ro[d]
		for _, b := range bufs {
			src, dst := b.src+uint64(so[d]*b.width), b.dst+uint64(ro[d]*b.width)
			switch {
			case d == mb.rank && ns > 0:
				errs = append(errs, mb.dev.dtod(dst, src, ns*b.width))
			case d != mb.rank:
				if ns > 0 {
					errs = append(errs, mb.dev.send(src, ns*b.width, d))
				}
				if nr > 0 {
					errs = append(errs, mb.dev.recv(dst, nr*b.width, d))
				}
			}
		}
	}
	errs = append(errs, mb.dev.groupEnd())
	return errors.Join(errs...)
}

// uploadDispatch plans this device's dispatch of in, exchanges the send
// counts with every device (an all-gather), and copies the home rows to
// new buffers.
func (p *memberLayer) uploadDispatch(gl *GroupLayer, in *moe.Input) error {
	mb, k, topk := p.mb, gl.w.K, in.TopK
	dev := mb.dev
	dn := gl.g.size
	if in.M == 0 {
		return nil
	}
	if p.l.isClosed() {
		return fmt.Errorf("%w: the layer is closed", backend.ErrClosed)
	}
	if old := p.ds[in.M]; old != nil {
		delete(p.ds, in.M)
		if err := old.free(dev); err != nil {
			return err
		}
	}
	ds := &dispatchState{m: in.M, topk: topk, plan: planDispatch(in.TopKIDs, topk, gl.eps, gl.eEach, mb.rank), form: formQuantized}
	if in.X != nil {
		ds.form = formFloat
	}
	ds.wide = layout.XOutsideBF16(in, p.l.recipe())
	alloc := func(n int) (devptr, error) {
		ptr, err := dev.alloc(n) // (cuMemAlloc makes 0 bytes a real buffer)
		if err == nil {
			ds.bufs = append(ds.bufs, ptr)
		}
		return ptr, err
	}
	fail := func(err error) error { return errors.Join(err, ds.free(dev)) }
	// The counts: every device's row of sent, all-gathered.
	cnt, err := alloc(4 * (dn + dn*dn))
	if err != nil {
		return fail(err)
	}
	if err := dev.htod(cnt, i32bytes(ds.plan.counts())); err != nil {
		return fail(err)
	}
	if err := dev.allGather(cnt, cnt+uint64(4*dn), dn, nccl.Int32); err != nil {
		return fail(err)
	}
	if err := gl.g.wait(mb); err != nil {
		return fail(err)
	}
	all := make([]int32, dn*dn)
	if err := dev.dtoh(i32bytes(all), cnt+uint64(4*dn)); err != nil {
		return fail(err)
	}
	if err := dev.sync(); err != nil {
		return fail(err)
	}
	ds.sent = make([][]int32, dn)
	ds.sendOff, ds.recvOff = make([]int, dn+1), make([]int, dn+1)
	for d := range dn {
		ds.sent[d] = all[d*dn : (d+1)*dn]
		ds.recvOff[d+1] = ds.recvOff[d] + int(all[d*dn+mb.rank])
		ds.sendOff[d+1] = ds.sendOff[d] + len(ds.plan.send[d])
	}
	for d, c := range ds.plan.counts() { // what the device said it sends is what arrived
		if all[mb.rank*dn+d] != c {
			return fail(fmt.Errorf("cuda: dispatch counts exchange: device %d's count for %d arrived as %d, sent %d", mb.rank, d, all[mb.rank*dn+d], c))
		}
	}
	total := ds.sendOff[dn]
	home := ds.plan.hi - ds.plan.lo
	ds.hPad = (in.M + dn - 1) / dn
	var idx []int32
	for _, l := range ds.plan.send {
		idx = append(idx, l...)
	}
	for _, a := range []struct {
		p *devptr
		n int
	}{
		{&ds.homeX, 4 * home * k}, {&ds.homeXQ, home * k}, {&ds.homeXS, home * k / 32}, {&ds.homeIDs, 4 * home * topk}, {&ds.homeWts, 4 * home * topk},
		{&ds.idx, 4 * total}, {&ds.sendXQ, total * k}, {&ds.sendXS, total * k / 32}, {&ds.sendIDs, 4 * total * topk}, {&ds.sendWts, 4 * total * topk},
		{&ds.back, 4 * total * k}, {&ds.out, 4 * ds.hPad * k}, {&ds.full, 4 * dn * ds.hPad * k},
	} {
		if *a.p, err = alloc(a.n); err != nil {
			return fail(err)
		}
	}
	lo, hi := ds.plan.lo, ds.plan.hi
	copies := []hostCopy{{ds.homeIDs, i32bytes(in.TopKIDs[lo*topk : hi*topk])}, {ds.homeWts, f32bytes(in.TopKWeights[lo*topk : hi*topk])}, {ds.idx, i32bytes(idx)}}
	if in.X != nil {
		copies = append(copies, hostCopy{ds.homeX, f32bytes(in.X[lo*k : hi*k])})
	} else {
		copies = append(copies, hostCopy{ds.homeXQ, in.XQ.Codes[lo*k : hi*k]}, hostCopy{ds.homeXS, in.XQ.Scales[lo*k/32 : hi*k/32]})
	}
	for _, c := range copies {
		if len(c.data) == 0 {
			continue
		}
		if err := dev.htod(c.dst, c.data); err != nil {
			return fail(err)
		}
	}
	if err := dev.sync(); err != nil {
		return fail(err)
	}
	p.ds[in.M] = ds
	return nil
}

// hostCopy is one host-to-device copy of an upload.
type hostCopy struct {
	dst  devptr
	data []byte
}
