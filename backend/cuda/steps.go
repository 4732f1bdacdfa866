//go:build cgo

package cuda

import (
	"fmt"

	"kimimoe/backend/cuda/internal/cu"
)

// step is one stage of a forward, named for Profile.
type step struct {
	name string
	run  func() error
}

// enqueue issues the whole forward for ws on the stream.
func (l *Layer) enqueue(ws *workspace) error { return l.enqueueProfiled(ws, nil) }

// enqueueProfiled is enqueue; with events (one more than the steps) it
// records one before the first step and one after each.
func (l *Layer) enqueueProfiled(ws *workspace, events []cu.Event) error {
	if ws.m == 0 {
		return nil
	}
	steps := l.steps(ws)
	s := l.b.stream
	if events != nil {
		if err := cu.EventRecord(events[0], s); err != nil {
			return err
		}
	}
	for k, st := range steps {
		if err := st.run(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		if events != nil {
			if err := cu.EventRecord(events[k+1], s); err != nil {
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

// path is one way of running a forward's GEMMs: the weights it keeps on
// the device and its launches. Each path's file holds its type; paths
// lists them, so adding a path is a type and a row there.
type path interface {
	// available says why the device or the shape rule the path out ("" where
	// they allow it), and fixes the path's layout (tile rows, padded sizes).
	available(l *Layer) string
	// upload arranges and copies the path's weights; the layer calls it
	// for the available paths that some forward's plan takes (syncWeights).
	upload(l *Layer) error
	// weights are the layer's device pointers to the path's weights.
	weights(l *Layer) []*devptr
	// buffers are the workspace buffers the path's steps read beyond
	// those every path reads (Layer.buffers), for ws's plan p.
	buffers(l *Layer, ws *workspace, p *Plan) []wsBuf
	// bind binds the path's entry points (programs[p].entries) into k.
	bind(m cu.Module, k *kernels) error
	// steps are the launches of ws's plan p, in order, from the prologue
	// to the finalize.
	steps(l *Layer, ws *workspace, p *Plan) []step
}

// paths are the paths by Path, in the order their weights are uploaded.
var paths = [numPaths]path{PathGrouped: groupedPath{}, PathDecode: decodePath{}, PathWGMMA: wgmmaPath{}, PathFP4: fp4Path{}}

// steps are the launches of ws's plan, in its order.
func (l *Layer) steps(ws *workspace) []step {
	p := ws.plan()
	return paths[p.Path].steps(l, ws, p)
}

// tiledSteps are the steps of a path on token tiles: the prologue, its
// GEMMs and the finalize.
func (l *Layer) tiledSteps(ws *workspace, p *Plan, gemm1, gemm2 []step) []step {
	steps := append(l.prologueSteps(ws, p), gemm1...)
	return append(append(steps, gemm2...), l.finalizeStep(ws, p.Path == PathFP4 && p.FP4.PDL))
}

// finalizeStep sums each token's slots into the output (pdl: launched
// with programmatic dependence on the GEMM2 ahead of it, which triggers
// it).
func (l *Layer) finalizeStep(ws *workspace, pdl bool) step {
	w, s := l.w, l.b.stream
	yld := l.rowK(ws.plan().Path) // GEMM2's rows
	return step{"finalize", func() error {
		return l.b.k.finalize.launchMaybePDL(pdl, [3]int{ws.m, (w.K + abiFinalizeCols - 1) / abiFinalizeCols, 1}, abiThreads, 0, s,
			&finalizeArgs{Y: ws.y, Pos: ws.pos, Wts: ws.wts, IDs: ws.ids, B2: l.b2, Out: ws.out, TopK: i32(ws.topk), K: i32(w.K),
				Chain: chainCode(l.spec.Chain), Rank: i32(l.epRank), ELocal: i32(w.E), YLd: i32(yld)})
	}}
}
