//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/nccl"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"kimimoe/backend"
	"kimimoe/moe"
)

// GroupOptions configures an expert-parallel group.
type GroupOptions struct {
	Mode Mode // default ModeReplicated
	// Timeout bounds the communicator's setup and every wait for a
	// collective; past it the communicator is aborted and the call returns
	// an error wrapping ErrTimeout (default 2 minutes).
	Timeout time.Duration
	// Flush is the timing's L2 flush before each timed forward.
	Flush Flush
}

func (o GroupOptions) normalize() GroupOptions {
	if o.Mode == 0 {
		o.Mode = ModeReplicated
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	return o
}

// Group is one MoE layer's expert parallelism over several GPUs through
// NCCL. It implements backend.Backend: Prepare takes one EP rank's layer
// and spreads its experts over the group's devices (moe.SplitDevices),
// Forward runs all of them and returns the whole layer's output. A Group
// made by OpenGroup drives every device from this process (one goroutine
// per device); one made by OpenRank drives one device of a group whose
// other ranks are other processes, which must make the same calls with
// the same inputs in the same order (collectives).
type Group struct {
	mu      sync.Mutex
	opts    GroupOptions
	size    int       // devices in the group, over all processes
	members []*member // the devices this process drives, by rank
	nccl    int       // NCCL version code
	layers  map[*GroupLayer]bool
	closed  bool
}

// member is one device of the group driven by this process.
type member struct {
	dev     groupDevice
	rank    int
	aborted atomic.Bool // set once; may be set from another goroutine than the one holding the lock
}

// NewUniqueID makes the id of a new group (rank 0 does this, then hands it
// to every rank: WriteUniqueIDFile, or an environment variable).
func NewUniqueID() (UniqueID, error) {
	if err := nccl.Load(); err != nil {
		return UniqueID{}, err
	}
	id, err := nccl.GetUniqueID()
	return UniqueID(id), err
}

// NCCLVersion is the loaded NCCL's version, as "2.28.3".
func NCCLVersion() (string, error) {
	if err := nccl.Load(); err != nil {
		return "", err
	}
	v, err := nccl.Version()
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100), err
}

// newGroup checks the driver, NCCL and this process's device ordinals
// and makes a group of size ranks with no members yet.
func newGroup(devices []int, size int, opts GroupOptions) (*Group, error) {
	if err := cu.Acquire(); err != nil {
		return nil, err
	}
	if err := nccl.Load(); err != nil {
		return nil, err
	}
	n, err := deviceCount()
	if err != nil {
		return nil, err
	}
	if err := checkDevices(devices, n); err != nil {
		return nil, err
	}
	g := &Group{opts: opts.normalize(), size: size, layers: map[*GroupLayer]bool{}}
	if g.nccl, err = nccl.Version(); err != nil {
		return nil, err
	}
	return g, nil
}

// OpenGroup opens an expert-parallel group over devices (ordinals), all
// driven by this process: one Backend per device and one NCCL
// communicator each (ncclCommInitAll). Keep NCCL_NVLS_ENABLE=0 where
// NVLink multicast must stay off; kimimoe never asks for it.
func OpenGroup(devices []int, opts GroupOptions) (*Group, error) {
	g, err := newGroup(devices, len(devices), opts)
	if err != nil {
		return nil, err
	}
	for r, d := range devices {
		b, err := open(d)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("device %d: %w", d, err), g.closeMembers())
		}
		g.members = append(g.members, &member{dev: &nvDevice{b: b}, rank: r})
	}
	comms, err := nccl.CommInitAll(devices)
	if err != nil {
		return nil, errors.Join(err, g.closeMembers())
	}
	for r, c := range comms {
		g.members[r].dev.(*nvDevice).comm = c
	}
	return g, nil
}

// OpenRank opens rank of an expert-parallel group of size processes (one
// device each) on device ordinal dev: ncclCommInitRank with the group's
// id. Every rank must call it within opts.Timeout of the others.
func OpenRank(id UniqueID, rank, size, dev int, opts GroupOptions) (*Group, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrGroup, rank, size)
	}
	g, err := newGroup([]int{dev}, size, opts)
	if err != nil {
		return nil, err
	}
	b, err := open(dev)
	if err != nil {
		return nil, err
	}
	nv := &nvDevice{b: b}
	mb := &member{dev: nv, rank: rank}
	g.members = []*member{mb}
	// ncclCommInitRank blocks until every rank has joined: run it where a
	// rank that never comes cannot hang the caller.
	type result struct {
		c   nccl.Comm
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // the init's thread stays blocked if the timeout passes
		if err := cu.CtxSetCurrent(b.ctx); err != nil {
			done <- result{nil, err}
			return
		}
		c, err := nccl.CommInitRank([128]byte(id), size, rank)
		done <- result{c, err}
		runtime.UnlockOSThread()
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, errors.Join(r.err, g.closeMembers())
		}
		nv.comm = r.c
	case <-time.After(g.opts.Timeout):
		return nil, fmt.Errorf("%w: rank %d of %d: the other ranks did not join within %v", ErrTimeout, rank, size, g.opts.Timeout)
	}
	return g, nil
}

// Size is the number of devices in the group (all processes).
func (g *Group) Size() int { return g.size }

// Ranks are the ranks this process drives.
func (g *Group) Ranks() []int {
	var r []int
	for _, mb := range g.members {
		r = append(r, mb.rank)
	}
	return r
}

// Mode is the group's token movement.
func (g *Group) Mode() Mode { return g.opts.Mode }

// Name implements backend.Backend.
func (g *Group) Name() string { return "cuda" }

// Capabilities implements backend.Backend: the one-device backend's, with
// no CUDA graphs (collectives are launched eagerly), local expert counts
// that are multiples of the group's size, and in dispatch mode without
// the bf16 chain (dispatch sends x as MXFP8).
func (g *Group) Capabilities() backend.Capabilities {
	c := g.members[0].dev.capabilities()
	c.Graphs, c.ExpertMultiple = false, g.size
	if g.opts.Mode == ModeDispatch {
		c.Chains = slices.DeleteFunc(c.Chains, func(ch moe.Chain) bool { return ch == moe.ChainBF16 })
	}
	var devs []string
	for _, mb := range g.members {
		devs = append(devs, fmt.Sprint(mb.dev.ordinal()))
	}
	c.Device = fmt.Sprintf("%d-device EP group (%s mode, NCCL %d.%d.%d; this process drives device(s) %s: %s)", g.size, g.opts.Mode,
		g.nccl/10000, g.nccl/100%100, g.nccl%100, strings.Join(devs, ","), c.Device)
	return c
}

// each runs f for every member at once, one goroutine each with the
// member's lock held and context current, and joins the errors. With
// several devices in this process an NCCL call blocks on the host until
// every device's thread has made it, so a member that fails before its
// collective would leave the others blocked: past the timeout each
// aborts every communicator and returns ErrTimeout, joined with the
// errors of the members that did return (the likely cause).
func (g *Group) each(f func(mb *member) error) error {
	ok, err := g.concurrently(func(mb *member) error {
		return mb.dev.locked(func() error {
			if mb.aborted.Load() {
				return fmt.Errorf("%w: rank %d's communicator was aborted after an earlier failure", ErrTimeout, mb.rank)
			}
			if err := f(mb); err != nil {
				return fmt.Errorf("rank %d: %w", mb.rank, err)
			}
			return nil
		})
	})
	if ok {
		return err
	}
	for _, mb := range g.members {
		mb.abort()
	}
	return errors.Join(fmt.Errorf("%w: the devices of this process did not all finish within %v (one failed before a collective?); communicators aborted", ErrTimeout, g.opts.Timeout), err)
}

// concurrently runs f for every member, each on its own goroutine: ok
// and their errors joined once all have returned, or not ok and the
// errors of those that returned once the group's timeout passes first
// (the others left running).
func (g *Group) concurrently(f func(mb *member) error) (ok bool, err error) {
	type result struct {
		i   int
		err error
	}
	done := make(chan result, len(g.members))
	for i, mb := range g.members {
		go func() { done <- result{i, f(mb)} }()
	}
	errs := make([]error, len(g.members))
	timeout := time.After(g.opts.Timeout)
	for range g.members {
		select {
		case r := <-done:
			errs[r.i] = r.err
		case <-timeout:
			return false, errors.Join(errs...)
		}
	}
	return true, errors.Join(errs...)
}

// wait waits for the member's stream like a watchdog: it polls, checks
// NCCL's asynchronous error, and aborts the communicator past the timeout
// (a peer that died leaves its partners' collectives waiting forever).
func (g *Group) wait(mb *member) error {
	deadline := time.Now().Add(g.opts.Timeout)
	for spin := 0; ; spin++ {
		done, err := mb.dev.query()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if err := mb.dev.asyncError(); err != nil {
			mb.abort()
			return err
		}
		if time.Now().After(deadline) {
			mb.abort()
			return fmt.Errorf("%w: rank %d: a collective did not finish within %v (did a peer rank die?); communicator aborted", ErrTimeout, mb.rank, g.opts.Timeout)
		}
		if spin > 200 {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

func (mb *member) abort() {
	if mb.aborted.CompareAndSwap(false, true) {
		mb.dev.abort()
	}
}

// LinkBandwidth times an all-reduce of n bytes of float32 over the group
// (median of iters) and returns NCCL's bus bandwidth: 2(D-1)/D x n bytes
// per second, the bytes each device sends per second.
func (g *Group) LinkBandwidth(n, iters int) (float64, error) {
	count := n / 4
	bufs := make([]devptr, len(g.members))
	defer g.each(func(mb *member) error { return mb.dev.free(bufs[g.index(mb)]) })
	err := g.each(func(mb *member) error {
		p, err := mb.dev.alloc(4 * count)
		if err == nil {
			bufs[g.index(mb)] = p
			err = mb.dev.memset32(p, 0x3f800000, count)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	var ms []float64
	for k := range iters + 2 {
		t, err := g.timeEach(func(mb *member) error {
			return mb.dev.allReduceSum(bufs[g.index(mb)], count)
		})
		if err != nil {
			return 0, err
		}
		if k >= 2 {
			ms = append(ms, t)
		}
	}
	sort.Float64s(ms)
	d := float64(g.size)
	return 2 * (d - 1) / d * float64(4*count) / (ms[len(ms)/2] / 1e3), nil
}

func (g *Group) index(mb *member) int {
	for i, m := range g.members {
		if m == mb {
			return i
		}
	}
	panic("cuda: member not in its group")
}

// timeEach runs f on every member between two events on its stream and
// returns the longest elapsed time, in milliseconds.
func (g *Group) timeEach(f func(mb *member) error) (float64, error) {
	times := make([]float64, len(g.members))
	err := g.each(func(mb *member) error {
		t, err := mb.dev.timed(g.opts.Flush, func() error { return f(mb) }, func() error { return g.wait(mb) })
		times[g.index(mb)] = t
		return err
	})
	if err != nil {
		return 0, err
	}
	longest := 0.0
	for _, t := range times {
		longest = max(longest, t)
	}
	return longest, nil
}

// CopyBandwidth implements backend.BandwidthMeter on the first device.
func (g *Group) CopyBandwidth(n, iters int) (float64, error) {
	return g.members[0].dev.copyBandwidth(n, iters)
}

// Close closes the group's layers, destroys the communicators (all at
// once: destroying is collective within a process) and closes the
// devices, returning every error.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var errs []error
	for gl := range g.layers {
		errs = append(errs, gl.close())
	}
	g.layers = nil
	return errors.Join(append(errs, g.closeMembers())...)
}

// closeMembers destroys the communicators (concurrently: destroying is
// collective within a process) and closes the backends, within the
// timeout: a device whose thread is still blocked in an aborted
// collective holds its lock, and is left to the process's exit.
func (g *Group) closeMembers() error {
	ok, err := g.concurrently(func(mb *member) error {
		var err error
		if !mb.aborted.Load() {
			err = mb.dev.destroy()
		}
		return errors.Join(err, mb.dev.close())
	})
	if !ok {
		return errors.Join(fmt.Errorf("%w: closing the group's devices", ErrTimeout), err)
	}
	return err
}
