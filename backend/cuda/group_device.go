//go:build cgo

package cuda

import (
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/nccl"

	"kimimoe/backend"
	"kimimoe/moe"
)

// groupDevice is one device of a group as the group's code uses it: its
// layer, memory and copies, the three small kernels of a dispatch, the
// collectives and its stream. The group never calls the driver or NCCL
// itself, so that its token movement can be tested against devices kept
// in host memory (group_fakedev_test.go). Every call but close is made with
// locked's lock held; the stream's work is ordered, and sync waits for it.
type groupDevice interface {
	prepare(w *moe.Weights, spec moe.LayerSpec) (rankLayer, error)
	capabilities() backend.Capabilities
	ordinal() int
	locked(f func() error) error
	close() error

	alloc(n int) (devptr, error)
	free(p devptr) error
	htod(dst devptr, src []byte) error
	dtoh(dst []byte, src devptr) error
	dtod(dst, src devptr, n int) error
	memset32(dst devptr, v uint32, n int) error
	sync() error
	query() (done bool, err error)

	// quantizeX quantizes nb 32-blocks of float32 x to MXFP8 codes and
	// scales with the recipe's code (kmoe_quantize_x).
	quantizeX(a *quantizeXArgs) error
	// gatherRows copies rows rows (kmoe_gather_rows).
	gatherRows(rows int, a *gatherRowsArgs) error
	// addRows adds rows rows into their home rows (kmoe_add_rows).
	addRows(rows int, a *addRowsArgs) error

	allReduceSum(buf devptr, n int) error
	allGather(src, dst devptr, n, dtype int) error
	// groupStart and groupEnd bracket sends and receives that complete
	// together (ncclGroupStart / ncclGroupEnd).
	groupStart() error
	groupEnd() error
	send(src devptr, n, peer int) error
	recv(dst devptr, n, peer int) error
	asyncError() error
	abort()
	destroy() error

	// timed runs f between two events on the stream, after flushing L2 as
	// flush says, waits with wait, and returns the milliseconds between
	// the events.
	timed(flush Flush, f, wait func() error) (float64, error)
	copyBandwidth(n, iters int) (float64, error)
}

// nvDevice is a group's device through the driver and NCCL.
type nvDevice struct {
	b    *Backend
	comm nccl.Comm
}

var _ groupDevice = (*nvDevice)(nil)

func (d *nvDevice) prepare(w *moe.Weights, spec moe.LayerSpec) (rankLayer, error) {
	l, err := d.b.Prepare(w, spec)
	if err != nil {
		return nil, err
	}
	return l.(rankLayer), nil
}

func (d *nvDevice) capabilities() backend.Capabilities { return d.b.Capabilities() }
func (d *nvDevice) ordinal() int                       { return d.b.dev }
func (d *nvDevice) locked(f func() error) error        { return d.b.locked(f) }
func (d *nvDevice) close() error                       { return d.b.Close() }

func (d *nvDevice) alloc(n int) (devptr, error)       { return cu.MemAlloc(n) }
func (d *nvDevice) free(p devptr) error               { return cu.MemFree(p) }
func (d *nvDevice) htod(dst devptr, src []byte) error { return cu.MemcpyHtoD(dst, src, d.b.stream) }
func (d *nvDevice) dtoh(dst []byte, src devptr) error { return cu.MemcpyDtoH(dst, src, d.b.stream) }
func (d *nvDevice) dtod(dst, src devptr, n int) error { return cu.MemcpyDtoD(dst, src, n, d.b.stream) }
func (d *nvDevice) memset32(dst devptr, v uint32, n int) error {
	return cu.MemsetD32(dst, v, n, d.b.stream)
}
func (d *nvDevice) sync() error                   { return cu.StreamSync(d.b.stream) }
func (d *nvDevice) query() (done bool, err error) { return cu.StreamQuery(d.b.stream) }

func (d *nvDevice) quantizeX(a *quantizeXArgs) error {
	return d.b.k.quantizeX.launch([3]int{(int(a.NBlocks)*32 + abiThreads - 1) / abiThreads, 1, 1}, d.b.stream, a)
}

func (d *nvDevice) gatherRows(rows int, a *gatherRowsArgs) error {
	return d.b.k.gatherRows.launch([3]int{rows, 1, 1}, d.b.stream, a)
}

func (d *nvDevice) addRows(rows int, a *addRowsArgs) error {
	return d.b.k.addRows.launch([3]int{rows, (int(a.Width) + abiThreads - 1) / abiThreads, 1}, d.b.stream, a)
}

func (d *nvDevice) allReduceSum(buf devptr, n int) error {
	return nccl.AllReduceSum(buf, buf, n, d.comm, d.b.stream)
}

func (d *nvDevice) allGather(src, dst devptr, n, dtype int) error {
	return nccl.AllGather(src, dst, n, dtype, d.comm, d.b.stream)
}

func (d *nvDevice) groupStart() error { return nccl.GroupStart() }
func (d *nvDevice) groupEnd() error   { return nccl.GroupEnd() }
func (d *nvDevice) send(src devptr, n, peer int) error {
	return nccl.Send(src, n, nccl.Uint8, peer, d.comm, d.b.stream)
}
func (d *nvDevice) recv(dst devptr, n, peer int) error {
	return nccl.Recv(dst, n, nccl.Uint8, peer, d.comm, d.b.stream)
}
func (d *nvDevice) asyncError() error { return nccl.AsyncError(d.comm) }
func (d *nvDevice) abort()            { nccl.CommAbort(d.comm) }

func (d *nvDevice) destroy() error {
	if d.comm == nil {
		return nil
	}
	return d.b.locked(func() error { return nccl.CommDestroy(d.comm) })
}

func (d *nvDevice) timed(flush Flush, f, wait func() error) (float64, error) {
	if err := d.b.flushL2(flush); err != nil {
		return 0, err
	}
	return timeOn(d.b.stream, f, wait)
}

func (d *nvDevice) copyBandwidth(n, iters int) (float64, error) { return d.b.CopyBandwidth(n, iters) }
