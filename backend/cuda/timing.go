//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"kimimoe/backend/cuda/internal/cu"
)

// CopyBandwidth times device-to-device copies of n bytes (median of iters)
// and returns bytes read plus written per second.
func (b *Backend) CopyBandwidth(n int, iters int) (bw float64, err error) {
	err = b.locked(func() error {
		src, err := cu.MemAlloc(n)
		if err != nil {
			return err
		}
		defer cu.MemFree(src)
		dst, err := cu.MemAlloc(n)
		if err != nil {
			return err
		}
		defer cu.MemFree(dst)
		if err := cu.MemsetD32(src, 0x3f800000, n/4, b.stream); err != nil {
			return err
		}
		var ms []float64
		for k := 0; k < iters+2; k++ {
			t, err := timeOn(b.stream, func() error { return cu.MemcpyDtoD(dst, src, n, b.stream) }, nil)
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

// Profile runs the uploaded m-token forward eagerly with an event between
// kernels and returns each step's device time in milliseconds, by name.
func (l *Layer) Profile(m int) (out map[string]float64, err error) {
	err = l.b.locked(func() error {
		ws := l.ws[m]
		if ws == nil || l.closed {
			return fmt.Errorf("cuda: Profile(%d): no uploaded input of %d tokens", m, m)
		}
		steps := l.steps(ws)
		events := make([]cu.Event, len(steps)+1)
		for k := range events {
			var err error
			if events[k], err = cu.EventCreate(); err != nil {
				return err
			}
			defer cu.EventDestroy(events[k])
		}
		if err := l.enqueueProfiled(ws, events); err != nil {
			return err
		}
		if err := cu.EventSync(events[len(events)-1]); err != nil {
			return err
		}
		out = map[string]float64{}
		for k, st := range steps {
			var err error
			if out[st.name], err = cu.EventElapsed(events[k], events[k+1]); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
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
			run = func() error { return cu.GraphLaunch(ws.graphX[ws.graphKey()], l.b.stream) }
		}
		if err := l.b.flushL2(l.tune.Flush); err != nil {
			return err
		}
		ms, err = timeOn(l.b.stream, run, nil)
		return err
	})
	return ms, err
}

// TimingMethod says how TimeForward times (the layer's Tuning.Flush),
// for kimimoe bench's output and JSON.
func (l *Layer) TimingMethod() (string, error) { return l.Tuning().Flush.String(), nil }

// timingFlushBytes is what flushL2 reads: five times the H200's 50 MB L2,
// and triton.testing.do_bench's 256 MB (the peer's timing).
const timingFlushBytes = 256 << 20

// flushL2 enqueues, on the backend's stream, a read of a buffer larger
// than the L2 cache (kmoe_l2_flush) before a timed forward's first event.
// The forward then starts with a cold L2 (no weights left from the
// previous one), and the device is busy for the read while the host
// launches the forward, so the events time the forward's kernels, not the
// host's launch latency, which a forward inside a model's graph does not
// pay. A read, not triton.testing.do_bench's rewrite, because a rewrite
// leaves L2 full of dirty lines whose write-back the forward then pays
// (FlushWrite times with it, FlushNone with no flush). Called under b.mu
// with the context current.
func (b *Backend) flushL2(mode Flush) error {
	if mode == FlushNone {
		return nil
	}
	if b.flush == 0 {
		p, err := cu.MemAlloc(timingFlushBytes)
		if err != nil {
			return fmt.Errorf("cuda: the timing's L2 flush buffer (%d MB): %w", timingFlushBytes>>20, err)
		}
		b.flush = p
		if err := cu.MemsetD32(p, 0, timingFlushBytes/4, b.stream); err != nil {
			return err
		}
	}
	if mode == FlushWrite {
		return cu.MemsetD32(b.flush, 0, timingFlushBytes/4, b.stream)
	}
	if b.timing == nil {
		cubin, err := compileCached(timingProgram(), "flush.cu", b.arch.target, b.arch.options())
		if err != nil {
			return err
		}
		m, err := cu.ModuleLoadData(cubin)
		if err != nil {
			return err
		}
		if b.flushK, err = bind[l2FlushArgs](m, kL2Flush); err != nil {
			cu.ModuleUnload(m)
			return err
		}
		b.timing = m
	}
	// Zeros read: the kernel's sink (the buffer's first word) is never written.
	return b.flushK.launch([3]int{4 * b.sms, 1, 1}, b.stream,
		&l2FlushArgs{Src: b.flush, Sink: b.flush, N: timingFlushBytes / 16})
}

// timeOn runs f between two events on s and returns the elapsed device
// milliseconds, once wait has returned (nil: once the second event has
// happened).
func timeOn(s cu.Stream, f, wait func() error) (float64, error) {
	e0, err := cu.EventCreate()
	if err != nil {
		return 0, err
	}
	defer cu.EventDestroy(e0)
	e1, err := cu.EventCreate()
	if err != nil {
		return 0, err
	}
	defer cu.EventDestroy(e1)
	if err := cu.EventRecord(e0, s); err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	if err := cu.EventRecord(e1, s); err != nil {
		return 0, err
	}
	if wait == nil {
		wait = func() error { return cu.EventSync(e1) }
	}
	if err := wait(); err != nil {
		return 0, err
	}
	ms, err := cu.EventElapsed(e0, e1)
	if err == nil && math.IsNaN(ms) {
		err = errors.New("cuda: event time is NaN")
	}
	return ms, err
}
