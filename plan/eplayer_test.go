package plan

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ReachProbability against a count: draw top-k without replacement many
// times and count the tokens with a slot on device 0 (the first E/D).
func TestReachProbabilityBySampling(t *testing.T) {
	for _, l := range []EPLayer{{Devices: 2, Experts: 8, TopK: 2}, {Devices: 4, Experts: 56, TopK: 16}, {Devices: 8, Experts: 64, TopK: 4}, {Devices: 2, Experts: 56, TopK: 16}} {
		r := rand.New(rand.NewPCG(1, 2))
		const n = 200000
		hit := 0
		for range n {
			perm := r.Perm(l.Experts)[:l.TopK]
			for _, e := range perm {
				if e < l.Experts/l.Devices {
					hit++
					break
				}
			}
		}
		got, want := float64(hit)/n, l.ReachProbability()
		if math.Abs(got-want) > 5*math.Sqrt(want*(1-want)/n)+1e-12 {
			t.Errorf("%+v: sampled %.5f, formula %.5f", l, got, want)
		}
	}
}

func TestEPLayerBytes(t *testing.T) {
	// Two devices, all-reduce of [M, K] float32: each sends M*K*4 (half in
	// the reduce-scatter, half in the all-gather).
	l := EPLayer{Devices: 2, Tokens: 10, Hidden: 64, TopK: 2, Experts: 4}
	if got := l.ReplicatedBytes(); got != 10*64*4 {
		t.Errorf("replicated: %v", got)
	}
	// One device sends nothing.
	l1 := EPLayer{Devices: 1, Tokens: 10, Hidden: 64, TopK: 2, Experts: 4}
	if l1.ReplicatedBytes() != 0 || l1.DispatchBytes() != 0 {
		t.Errorf("one device: %v %v", l1.ReplicatedBytes(), l1.DispatchBytes())
	}
	// Top-k larger than the other devices' experts: every token reaches
	// every device; 5 tokens go out (66+16 bytes each) and 5 come back
	// (256 bytes each).
	l3 := EPLayer{Devices: 2, Tokens: 10, Hidden: 64, TopK: 3, Experts: 4}
	if l3.ReachProbability() != 1 || l3.DispatchBytes() != 5*(64+2+24)+5*256 {
		t.Errorf("top-3 of 4: reach %v, bytes %v", l3.ReachProbability(), l3.DispatchBytes())
	}
	if (EPLayer{Devices: 3, Tokens: 1, Hidden: 64, TopK: 2, Experts: 4}).Validate() == nil {
		t.Error("4 experts over 3 devices accepted")
	}
}
