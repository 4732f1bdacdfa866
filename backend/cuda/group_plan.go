package cuda

import (
	"errors"
	"fmt"
	"strings"

	"kimimoe/moe"
	"kimimoe/plan"
)

// Mode is how an expert-parallel group moves tokens between devices.
type Mode int

const (
	// ModeReplicated: every device gets all M tokens with their top-k ids
	// and weights, runs its own experts (the others' slots are filtered
	// out), and the partial outputs are summed by an NCCL all-reduce.
	// SGLang's default for expert parallelism.
	ModeReplicated Mode = iota + 1
	// ModeDispatch: each token's x (quantized to MXFP8 on its home device)
	// is sent only to the devices that own one of its experts, computed
	// there, and each device's partial sum sent back to the home device,
	// which adds them in device order (DeepEP-style dispatch/combine, with
	// NCCL send/receive).
	ModeDispatch
)

// ErrGroup is wrapped by errors about an expert-parallel group's setup:
// devices, ranks, the NCCL unique id.
var ErrGroup = errors.New("cuda: expert-parallel group")

// ErrTimeout is wrapped when a collective or the communicator's setup did
// not finish in GroupOptions.Timeout (a peer died or never started); the
// communicator has then been aborted.
var ErrTimeout = errors.New("cuda: NCCL timed out")

func (m Mode) String() string {
	switch m {
	case ModeReplicated:
		return "replicated"
	case ModeDispatch:
		return "dispatch"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode reads "replicated" or "dispatch".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "replicated":
		return ModeReplicated, nil
	case "dispatch":
		return ModeDispatch, nil
	}
	return 0, fmt.Errorf("%w: mode %q: want replicated or dispatch", ErrGroup, s)
}

// homeRows are the tokens [lo, hi) whose home is rank of size in a
// dispatch: contiguous shards of ceil(m/size) tokens (the last ones may
// be shorter or empty).
func homeRows(m, size, rank int) (lo, hi int) {
	h := (m + size - 1) / size
	lo = min(rank*h, m)
	return lo, min(lo+h, m)
}

// dispatchPlan is one home rank's side of a dispatch: send[d] lists, in
// increasing order, the home-relative indices of the tokens with at least
// one slot on device d (a token goes to a device once, however many of its
// slots are there; -1 slots go nowhere).
type dispatchPlan struct {
	lo, hi int
	send   [][]int32
}

// planDispatch computes rank's plan for the M x topk ids, where device d
// owns the global experts of eps[d] with eLocal experts each.
func planDispatch(ids []int32, topk int, eps []moe.EP, eLocal, rank int) dispatchPlan {
	m := len(ids) / topk
	p := dispatchPlan{send: make([][]int32, len(eps))}
	p.lo, p.hi = homeRows(m, len(eps), rank)
	for t := p.lo; t < p.hi; t++ {
		for d, ep := range eps {
			for _, id := range ids[t*topk : (t+1)*topk] {
				if _, ok := ep.Local(int64(id), eLocal); ok {
					p.send[d] = append(p.send[d], int32(t-p.lo))
					break
				}
			}
		}
	}
	return p
}

// counts returns len(send[d]) for each d.
func (p *dispatchPlan) counts() []int32 {
	c := make([]int32, len(p.send))
	for d, s := range p.send {
		c[d] = int32(len(s))
	}
	return c
}

// dispatchBytes are the bytes rank r sends to other devices in one
// forward, given the token counts sent[r][d] of every rank: its tokens out
// and the partial outputs of the tokens it received back, at
// plan.DispatchTokenBytes each.
func dispatchBytes(sent [][]int32, r, k, topk int) int64 {
	out, back := plan.DispatchTokenBytes(k, topk)
	var b int64
	for d := range sent {
		if d == r {
			continue
		}
		b += int64(sent[r][d])*out + int64(sent[d][r])*back
	}
	return b
}
