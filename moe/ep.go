package moe

import (
	"errors"
	"fmt"
)

// ErrParallel is wrapped by errors about parallel sizes that do not fit.
var ErrParallel = errors.New("moe: bad parallel configuration")

// EP is one rank's view of expert parallelism: rank Rank of Size owns the
// global experts [Rank*ELocal, (Rank+1)*ELocal). The zero value means no
// expert parallelism (one rank).
type EP struct {
	Size, Rank int
}

// Normalize returns ep with Size 0 read as one rank, Size 1 (the rank is
// kept, so EP{Size: 0, Rank: 3} stays invalid).
func (ep EP) Normalize() EP {
	if ep.Size == 0 {
		ep.Size = 1
	}
	return ep
}

// NumGlobal is the global expert count Size * eLocal, an error wrapping
// ErrParallel if it reaches MaxGlobalExperts (ids are int32) or overflows.
func (ep EP) NumGlobal(eLocal int) (int, error) {
	ep = ep.Normalize()
	if err := ep.Validate(); err != nil {
		return 0, err
	}
	if eLocal < 1 || ep.Size > MaxGlobalExperts/eLocal {
		return 0, fmt.Errorf("%w: ep_size %d x %d local experts is not a valid global expert count (at most %d)", ErrParallel, ep.Size, eLocal, MaxGlobalExperts)
	}
	return ep.Size * eLocal, nil
}

// Validate checks 0 <= Rank < Size.
func (ep EP) Validate() error {
	ep = ep.Normalize()
	if ep.Size < 1 || ep.Rank < 0 || ep.Rank >= ep.Size {
		return fmt.Errorf("%w: ep_rank %d of ep_size %d", ErrParallel, ep.Rank, ep.Size)
	}
	return nil
}

// Local maps a global expert id to this rank's local id. It reports false
// for -1 (a masked slot), for experts owned by other ranks and for every
// id of an invalid EP (a rank outside [0, Size)), without ever using the
// id as an index (in torch, a -1 index into a mapping table returns its
// last entry: the SM120 work's warning).
func (ep EP) Local(global int64, eLocal int) (int, bool) {
	ep = ep.Normalize()
	if global < 0 || ep.Size < 1 || ep.Rank < 0 || ep.Rank >= ep.Size {
		return 0, false
	}
	lo := int64(ep.Rank) * int64(eLocal)
	if global < lo || global >= lo+int64(eLocal) {
		return 0, false
	}
	return int(global - lo), true
}

// LocalRange returns the global ids [lo, hi) this rank owns.
func (ep EP) LocalRange(eLocal int) (lo, hi int) {
	ep = ep.Normalize()
	return ep.Rank * eLocal, (ep.Rank + 1) * eLocal
}

// LocalExperts is SGLang's num_local_experts = num_experts / ep_size, an
// error if ep_size does not divide the expert count.
func LocalExperts(numExperts, epSize int) (int, error) {
	if epSize < 1 || numExperts < 1 || numExperts%epSize != 0 {
		return 0, fmt.Errorf("%w: %d experts do not divide over ep_size %d", ErrParallel, numExperts, epSize)
	}
	return numExperts / epSize, nil
}

// MoETPSize is SGLang's moe_tp_size = tp_size / moe_ep_size / moe_dp_size,
// an error unless ep*dp divides tp.
func MoETPSize(tp, ep, dp int) (int, error) {
	if tp < 1 || ep < 1 || dp < 1 || ep > tp/dp || tp%(ep*dp) != 0 { // ep > tp/dp: ep*dp > tp, which may overflow
		return 0, fmt.Errorf("%w: tp_size %d is not divisible by ep_size %d * dp_size %d", ErrParallel, tp, ep, dp)
	}
	return tp / ep / dp, nil
}
