package plan

import (
	"fmt"
	"math"

	"kimimoe/moe"
)

// EPLayer is one MoE layer whose experts are spread over Devices GPUs by
// expert parallelism (kimimoe's backend/cuda Group): each device holds
// Experts/Devices contiguous experts, every token has TopK slots over all
// Experts, and the layer's output is float32 [Tokens, Hidden].
type EPLayer struct {
	Devices, Tokens, Hidden, TopK, Experts int
}

// Validate checks the sizes: positive, experts dividing over the devices,
// top-k at most the expert count, Hidden a multiple of 32.
func (l EPLayer) Validate() error {
	if l.Devices < 1 || l.Tokens < 0 || l.Hidden < 32 || l.Hidden%32 != 0 || l.TopK < 1 || l.Experts < l.TopK {
		return fmt.Errorf("%w: EP layer %+v: want devices >= 1, tokens >= 0, hidden a positive multiple of 32, 1 <= top-k <= experts", moe.ErrParallel, l)
	}
	if l.Experts%l.Devices != 0 {
		return fmt.Errorf("%w: %d experts do not divide over %d devices", moe.ErrParallel, l.Experts, l.Devices)
	}
	return nil
}

// ReplicatedBytes is what each device sends in replicated mode: every
// device has all tokens, computes a float32 partial output [Tokens,
// Hidden], and a ring all-reduce sums them, sending 2(D-1)/D of it per
// device (reduce-scatter, then all-gather).
func (l EPLayer) ReplicatedBytes() float64 {
	d := float64(l.Devices)
	return 2 * (d - 1) / d * float64(l.Tokens) * float64(l.Hidden) * 4
}

// ReachProbability is the chance that a token with TopK distinct experts
// drawn uniformly from Experts has at least one on a given device (which
// holds Experts/Devices of them): 1 - C(E - E/D, k) / C(E, k).
func (l EPLayer) ReachProbability() float64 {
	e, k := l.Experts, l.TopK
	miss := e - e/l.Devices
	if k > miss {
		return 1
	}
	// log(C(miss, k) / C(e, k)) as a sum of log1p terms, and 1 - exp as
	// -expm1: differences of Lgamma lost every digit at 10^18 experts.
	s, own := 0.0, float64(e-miss)
	for i := range k {
		s += math.Log1p(-own / float64(e-i))
	}
	return -math.Expm1(s)
}

// DispatchBytes is what each device sends in dispatch mode, expected under
// uniform routing with the tokens spread evenly over their home devices:
// to each of the D-1 other devices, its home tokens that reach it (x as
// MXFP8: Hidden codes and Hidden/32 scales, plus top-k ids and weights,
// 4 bytes each), and back, the float32 partial outputs of the tokens it
// received.
func (l EPLayer) DispatchBytes() float64 {
	d := float64(l.Devices)
	reached := float64(l.Tokens) / d * l.ReachProbability() * (d - 1)
	out, back := DispatchTokenBytes(l.Hidden, l.TopK)
	return reached * float64(out+back)
}

// DispatchTokenBytes is what one token costs a dispatch to one other
// device: out, x as MXFP8 (hidden codes, hidden/32 scales) with its top-k
// ids and weights (4 bytes each); back, its float32 partial output.
func DispatchTokenBytes(hidden, topk int) (out, back int64) {
	return int64(hidden + hidden/32 + 8*topk), int64(4 * hidden)
}

// Seconds is the time to move bytes at a device's send bandwidth bw
// (bytes/s; for the all-reduce, NCCL's bus bandwidth measured on the same
// link): bytes / bw, no latency term.
func Seconds(bytes, bw float64) float64 { return bytes / bw }
