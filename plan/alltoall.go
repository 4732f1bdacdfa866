package plan

import (
	"fmt"

	"kimimoe/moe"
)

// AllToAll is one MoE layer under expert parallelism as SGLang's DeepEP
// deployments run it: EP ranks, each holding NumExperts/EP experts and
// TokensPerRank tokens of its own (attention data-parallel); a token is
// dispatched once to every other rank that owns one of its top-k experts
// (DeepEP de-duplicates per destination rank), and the experts' outputs
// are combined back to it the same way.
type AllToAll struct {
	EP            int
	TokensPerRank int
	Hidden        int // the MoE input and output width
	TopK          int
	NumExperts    int
	DispatchBytes float64 // bytes per dispatched element: FP8 with a float32 scale per 128 (DeepEP's) is 1 + 4/128
	CombineBytes  float64 // bytes per combined element: BF16 is 2
}

// DispatchFP8 and CombineBF16 are DeepEP's element sizes: FP8 codes with
// one float32 scale per 128 elements for the dispatch, BF16 for the
// combine.
const (
	DispatchFP8 = 1 + 4.0/128
	CombineBF16 = 2.0
)

// Validate checks the sizes.
func (a AllToAll) Validate() error {
	if a.EP < 1 || a.TokensPerRank < 0 || a.Hidden < 1 || a.TopK < 1 || a.NumExperts < a.TopK || !(a.DispatchBytes > 0) || !(a.CombineBytes > 0) {
		return fmt.Errorf("%w: all-to-all %+v: want ep >= 1, tokens >= 0, hidden >= 1, 1 <= top-k <= experts, positive element sizes", moe.ErrParallel, a)
	}
	if a.NumExperts%a.EP != 0 {
		return fmt.Errorf("%w: %d experts do not divide over %d EP ranks", moe.ErrParallel, a.NumExperts, a.EP)
	}
	return nil
}

// RemoteRanks is the expected number of other ranks a token is sent to
// under uniform routing: (EP - 1) times the chance that a given rank owns
// at least one of its top-k distinct experts (EPLayer.ReachProbability).
func (a AllToAll) RemoteRanks() float64 {
	l := EPLayer{Devices: a.EP, TopK: a.TopK, Experts: a.NumExperts}
	return float64(a.EP-1) * l.ReachProbability()
}

// RemoteSlots is the expected number of a token's slots whose expert is on
// another rank: what a dispatch without de-duplication sends.
func (a AllToAll) RemoteSlots() float64 {
	return float64(a.TopK) * float64(a.EP-1) / float64(a.EP)
}

// DispatchRankBytes and CombineRankBytes are what each rank sends per
// layer: its tokens times the ranks each reaches times Hidden elements.
func (a AllToAll) DispatchRankBytes() float64 {
	return float64(a.TokensPerRank) * a.RemoteRanks() * float64(a.Hidden) * a.DispatchBytes
}

func (a AllToAll) CombineRankBytes() float64 {
	return float64(a.TokensPerRank) * a.RemoteRanks() * float64(a.Hidden) * a.CombineBytes
}

// Link is a rank's network path: Bandwidth bytes/s each way, and a fixed
// Latency seconds per collective (launch and synchronization).
type Link struct {
	Bandwidth, Latency float64
}

// Seconds is one dispatch or combine of bytes over l: latency plus bytes
// at the bandwidth.
func (l Link) Seconds(bytes float64) float64 { return l.Latency + bytes/l.Bandwidth }

// ExpertWeightBytes is one rank's routed expert weights in MXFP4 (E2M1
// codes, half a byte an element, and one E8M0 scale byte per 32): its
// NumExperts/EP experts of 3 N K elements (FC1's [up; gate] and FC2). In
// float64, like the model's other byte counts, so no shape overflows it.
func ExpertWeightBytes(m moe.Model, ep int) float64 {
	if ep < 1 {
		panic(fmt.Sprintf("plan: ExpertWeightBytes with ep = %d, want at least 1", ep))
	}
	per := 3 * float64(m.N) * float64(m.K)
	return float64(m.NumExperts/ep) * per * (0.5 + 1.0/32)
}
