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

// steps are the launches of ws's plan, in its order.
func (l *Layer) steps(ws *workspace) []step {
	p := ws.plan()
	if p.Path == PathDecode {
		return l.decodeSteps(ws, p)
	}
	var g1, g2 []step
	switch p.Path {
	case PathFP4:
		g1, g2 = l.f4Steps(ws, p)
	case PathWGMMA:
		g1, g2 = l.wgSteps(ws, p)
	default:
		g1, g2 = l.mxSteps(ws, p)
	}
	steps := append(l.prologueSteps(ws, p), g1...)
	return append(append(steps, g2...), l.finalizeStep(ws, p.Path == PathFP4 && p.PDL))
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
