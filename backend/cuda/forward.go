//go:build cgo

package cuda

import (
	"kimimoe/backend"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/moe"
)

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
	if err := cu.MemcpyDtoH(f32bytes(all), src, l.b.stream); err != nil {
		return err
	}
	if err := cu.StreamSync(l.b.stream); err != nil {
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
	return l.forward(dst, in, rows, l.enqueue)
}

// ForwardGraph implements backend.GraphLayer: the kernels of a forward with
// in.M tokens are captured into a CUDA graph on first use and replayed.
func (l *Layer) ForwardGraph(dst []float32, in *moe.Input) error {
	return l.forward(dst, in, nil, l.replay)
}

// forward checks dst, then, holding the device, uploads in, runs the
// kernels by launch (eager or the graph) and copies rows back.
func (l *Layer) forward(dst []float32, in *moe.Input, rows []int, launch func(*workspace) error) error {
	if err := l.checkDst(dst, in, rows); err != nil {
		return err
	}
	return l.b.locked(func() error {
		ws, err := l.upload(in)
		if err != nil {
			return err
		}
		if err := launch(ws); err != nil {
			return err
		}
		return l.download(dst, ws, rows)
	})
}

// replay launches the graph of ws's current input form, capturing it on
// first use.
func (l *Layer) replay(ws *workspace) error {
	s := l.b.stream
	f := ws.graphKey()
	if ws.graphX[f] == nil {
		if err := cu.StreamSync(s); err != nil { // uploads done before capture
			return err
		}
		if err := cu.StreamBeginCapture(s); err != nil {
			return err
		}
		err := l.enqueue(ws)
		g, cerr := cu.StreamEndCapture(s)
		if err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		x, err := cu.GraphInstantiate(g)
		if err != nil {
			cu.GraphDestroy(g)
			return err
		}
		ws.graph[f], ws.graphX[f] = g, x
	}
	return cu.GraphLaunch(ws.graphX[f], s)
}

// Upload copies in to the device for TimeForward (backend.Timer).
func (l *Layer) Upload(in *moe.Input) error {
	if err := in.Validate(l.w.K, l.numGlobal); err != nil {
		return err
	}
	return l.b.locked(func() error {
		if _, err := l.upload(in); err != nil {
			return err
		}
		return cu.StreamSync(l.b.stream)
	})
}
