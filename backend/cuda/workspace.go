//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"slices"

	"kimimoe/backend"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/moe"
)

// MaxWorkspaces bounds the per-token-count workspaces (device buffers and
// graphs) a layer keeps; the least recently used is freed beyond it. A
// serving loop uses a handful of batch sizes (and kimimoe bench at most
// this many); a sweep over more M stays bounded at this many.
const MaxWorkspaces = 16

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
	xqd, xsf, touched, aqsf  devptr      // the decode path's padded x, float scales, touched experts, float aq scales
	xbf, aqbf                devptr      // the wgmma path's BF16 x and intermediate (0 without it)
	ready                    devptr      // the wgmma-fp4 GEMMs' per-tile counts (tile_signal), entries + E of them
	ug                       devptr      // GEMM1's float32 up and gate for kmoe_act_requant (0 where no plan runs the activation kernel)
	plans                    [2]Plan     // the launch plans, by wide
	form                     int         // of the input uploaded last
	wide                     bool        // its MXFP8 values are not all BF16 values (layout.XOutsideBF16)
	graph                    [4]cu.Graph // by graphKey
	graphX                   [4]cu.GraphExec
	bufs                     []devptr
	lastUse                  uint64
}

// plan is the launch plan of the input uploaded last.
func (ws *workspace) plan() *Plan {
	if ws.wide {
		return &ws.plans[1]
	}
	return &ws.plans[0]
}

// graphKey picks the graph for the input uploaded last: one per input
// form, and per whether its x takes the BF16 GEMMs (wide).
func (ws *workspace) graphKey() int {
	if ws.wide {
		return ws.form + 2
	}
	return ws.form
}

func (ws *workspace) free() error {
	var errs []error
	for f := range ws.graphX {
		if ws.graphX[f] != nil {
			errs = append(errs, cu.GraphExecDestroy(ws.graphX[f]), cu.GraphDestroy(ws.graph[f]))
			ws.graphX[f], ws.graph[f] = nil, nil
		}
	}
	for _, p := range ws.bufs {
		errs = append(errs, cu.MemFree(p))
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
	ws := &workspace{m: m, topk: topk, lastUse: l.uses, plans: [2]Plan{l.plan(m, topk, false), l.plan(m, topk, true)}}
	for _, p := range ws.plans {
		if p.Tiles > maxGridRows {
			return nil, fmt.Errorf("%w: backend \"cuda\" runs at most %d token tiles a GEMM (a launch grid's rows); M = %d of top-%d takes %d on the %s path: split the batch",
				backend.ErrUnsupported, maxGridRows, m, topk, p.Tiles, p.Path)
		}
	}
	kp, np := layout.PadTo(w.K), layout.PadTo(w.N)
	entries := m * topk
	for _, a := range l.buffers(ws) {
		p, err := cu.MemAlloc(a.n)
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
	err := cu.MemsetD32(ws.aq, 0, (entries+1)*np/4, s)
	if err == nil && ws.aqsf != 0 {
		err = cu.MemsetD32(ws.aqsf, 0x3f800000, entries*np/32, s)
		if err == nil {
			err = cu.MemsetD32(ws.aqsf+uint64(4*entries*np/32), 0, np/32, s)
		}
		if err == nil {
			err = cu.MemsetD32(ws.xqd+uint64(m*kp), 0, kp/4, s)
		}
		if err == nil {
			err = cu.MemsetD32(ws.xsf+uint64(4*m*kp/32), 0, kp/32, s)
		}
	}
	if err == nil && ws.xbf != 0 && l.f4.k > w.K { // x's padding columns for the wgmma-fp4 GEMMs: zeros, never written
		err = cu.MemsetD32(ws.xbf, 0, m*l.f4.k/2, s)
	}
	if err != nil {
		return nil, errors.Join(err, ws.free())
	}
	l.ws[m] = ws
	return ws, nil
}

// maxGridRows is the most rows (y) a launch grid may have, which bounds
// the tiled GEMMs' token tiles (their grid's rows).
const maxGridRows = 65535

// wsBuf is one workspace buffer: where its pointer goes, and its bytes.
type wsBuf struct {
	p *devptr
	n int
}

// buffers are the buffers of ws (its m, topk and plans set): those every
// plan reads, then those of the paths its plans take (path.buffers), each
// once.
func (l *Layer) buffers(ws *workspace) []wsBuf {
	w, m, entries := l.w, ws.m, ws.m*ws.topk
	np := layout.PadTo(w.N)
	bufs := []wsBuf{
		{&ws.x, 4 * m * w.K}, {&ws.xq, m * w.K}, {&ws.xs, m * w.K / 32},
		{&ws.ids, 4 * entries}, {&ws.wts, 4 * entries}, {&ws.pos, 4 * entries}, {&ws.perm, 4 * entries},
		{&ws.counts, 4 * w.E}, {&ws.offset, 4 * (w.E + 1)}, {&ws.tileBase, 4 * (w.E + 1)},
		// The intermediate with one more row, zeros (the decode path's).
		{&ws.aq, (entries + 1) * np}, {&ws.aqs, entries * np / 32}, {&ws.y, 4 * entries * max(w.K, l.f4.k)}, {&ws.out, 4 * m * w.K},
	}
	for i := range ws.plans {
		p := &ws.plans[i]
		for _, b := range paths[p.Path].buffers(l, ws, p) {
			if !slices.ContainsFunc(bufs, func(o wsBuf) bool { return o.p == b.p }) {
				bufs = append(bufs, b)
			}
		}
	}
	return bufs
}

// bf16Buffers are the BF16 paths' x and intermediate, at the padded shape
// where it is larger.
func (l *Layer) bf16Buffers(ws *workspace) []wsBuf {
	w, m, entries := l.w, ws.m, ws.m*ws.topk
	return []wsBuf{{&ws.xbf, 2 * m * max(w.K, l.f4.k)}, {&ws.aqbf, 2 * entries * max(w.N, l.f4.n)}}
}

// upload copies in, which the caller has validated (checkDst, Upload or
// the group's check), to the workspace for in.M, recording its input form.
func (l *Layer) upload(in *moe.Input) (*workspace, error) {
	if l.closed {
		return nil, fmt.Errorf("%w: the layer is closed", backend.ErrClosed)
	}
	ws, err := l.workspace(in.M, in.TopK)
	if err != nil {
		return nil, err
	}
	s := l.b.stream
	// Only the BF16 paths need to know whether BF16 holds x's values.
	bf16 := ws.plans[0].Path.bf16Operands()
	// On the bf16 chain x is BF16 by the contract, infinities included.
	ws.form, ws.wide = formQuantized, bf16 && l.spec.Chain != moe.ChainBF16 && layout.XOutsideBF16(in, l.spec.Recipe)
	if in.X != nil {
		ws.form = formFloat
		err = cu.MemcpyHtoD(ws.x, f32bytes(in.X), s)
	} else {
		if err = cu.MemcpyHtoD(ws.xq, in.XQ.Codes, s); err == nil {
			err = cu.MemcpyHtoD(ws.xs, in.XQ.Scales, s)
		}
	}
	if err == nil {
		err = cu.MemcpyHtoD(ws.ids, i32bytes(in.TopKIDs), s)
	}
	if err == nil {
		err = cu.MemcpyHtoD(ws.wts, f32bytes(in.TopKWeights), s)
	}
	return ws, err
}
