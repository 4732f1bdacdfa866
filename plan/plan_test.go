package plan

import (
	"github.com/google/go-cmp/cmp"

	"errors"
	"math"
	"testing"

	"kimimoe/moe"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// The prefill study's deployment (docs/CONTRACT.md "Kimi-K3"; plan's doc):
// Kimi-K3, TP32 / EP4 / DP1, 4 nodes of 8 GPUs, 8K chunk, bf16.
func seedDeployment() Deployment {
	return Deployment{TP: 32, EP: 4, DP: 1, PP: 1, Nodes: 4, GPUsPerNode: 8, Tokens: 8192, DTypeBytes: 2}
}

func TestSeedCollectives(t *testing.T) {
	p, err := Make(KimiK3(), seedDeployment())
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stages[0]
	hidden, tail := st.Collectives[0], st.Collectives[1]
	// The prefill study's attribution table: 95 hidden all-reduces (embedding +
	// 93 o_proj + the first dense MLP) of [8192, 7168] = 112 MiB, 10.39 GiB,
	// 40.8%; 92 MoE tail reductions of 8192 x (3584 + 7168) = 168 MiB,
	// 15.09 GiB, 59.2%; 187 in all, 25.48 GiB.
	if hidden.Count != 95 || tail.Count != 92 || st.Total.Count != 187 {
		t.Errorf("counts %d + %d = %d, seed: 95 + 92 = 187", hidden.Count, tail.Count, st.Total.Count)
	}
	if hidden.MessageBytes != 112*mib || tail.MessageBytes != 168*mib {
		t.Errorf("messages %d and %d bytes, seed: 112 and 168 MiB", hidden.MessageBytes, tail.MessageBytes)
	}
	round2 := func(x float64) float64 { return math.Round(x*100) / 100 }
	if g := round2(float64(hidden.StepBytes) / gib); g != 10.39 {
		t.Errorf("hidden bytes per step %.4f GiB, seed 10.39", float64(hidden.StepBytes)/gib)
	}
	if g := round2(float64(tail.StepBytes) / gib); g != 15.09 {
		t.Errorf("MoE tail bytes per step %.4f GiB, seed 15.09", float64(tail.StepBytes)/gib)
	}
	if g := round2(float64(st.Total.StepBytes) / gib); g != 25.48 {
		t.Errorf("total %.4f GiB, seed 25.48", float64(st.Total.StepBytes)/gib)
	}
	if math.Round(hidden.Share*1000) != 408 || math.Round(tail.Share*1000) != 592 {
		t.Errorf("shares %.4f / %.4f, seed 40.8%% / 59.2%%", hidden.Share, tail.Share)
	}
}

// The prefill study's traffic estimate: 2H = 14336, H + L = 9280 (-35.3%), 2H + L = 16448
// (+14.7%) with H = 7168, L = 1536 + 512 + 64 = 2112.
func TestSeedRingUnits(t *testing.T) {
	p, err := Make(KimiK3(), seedDeployment())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		units  int
		change float64
	}{{14336, 0}, {9280, -35.3}, {16448, 14.7}}
	for i, w := range want {
		a := p.Alternatives[i]
		if a.Units != w.units || math.Round(a.Change*1000)/10 != w.change {
			t.Errorf("%s: %d units, %+.1f%%; seed %d, %+.1f%%", a.Name, a.Units, a.Change*100, w.units, w.change)
		}
	}
}

// The SM120 work's expert mapping: TP32/EP32/DP1 -> moe_tp_size 1, 28
// local experts; TP32/EP4/DP1 -> moe_tp_size 8, 224 local
// experts, each with an N/8 = 384 slice.
func TestSeedExpertMapping(t *testing.T) {
	k := KimiK3()
	em, err := MapExperts(k, Deployment{TP: 32, EP: 32, DP: 1})
	if err != nil || em.MoETPSize != 1 || em.LocalExperts != 28 || em.Ranges[7] != [2]int{196, 224} {
		t.Errorf("TP32/EP32: %+v %v", em.MoETPSize, err)
	}
	em, err = MapExperts(k, Deployment{TP: 32, EP: 4, DP: 1})
	want := ExpertMapping{MoETPSize: 8, LocalExperts: 224, IntermediateEach: 384,
		Ranges: [][2]int{{0, 224}, {224, 448}, {448, 672}, {672, 896}}}
	if d := cmp.Diff(want, em); err != nil || d != "" {
		t.Errorf("TP32/EP4 (-want +got): %v\n%s", err, d)
	}
}

func TestBadDeployments(t *testing.T) {
	k := KimiK3()
	bad := []Deployment{
		{TP: 32, EP: 3, DP: 1, PP: 1, Tokens: 1, DTypeBytes: 2},                           // tp 32 not divisible by ep 3
		{TP: 30, EP: 5, DP: 1, PP: 1, Tokens: 1, DTypeBytes: 2},                           // 896 experts not divisible by ep 5
		{TP: 32, EP: 4, DP: 1, PP: 1, Tokens: 1, DTypeBytes: 2, Nodes: 3, GPUsPerNode: 8}, // 24 GPUs for tp 32
		{TP: 32, EP: 4, DP: 1, PP: 0, Tokens: 1, DTypeBytes: 2},                           // pp 0
		// Overflows that used to panic or pass (ep*dp wrapped to 0 or 8,
		// nodes*gpus to 32, byte counts printed as -0 MiB):
		{TP: 32, EP: 4294967296, DP: 4294967296, PP: 1, Tokens: 1, DTypeBytes: 2},
		{TP: 32, EP: 7, DP: 7905747460161236408, PP: 1, Tokens: 1, DTypeBytes: 2},
		{TP: 32, EP: 4, DP: 1, PP: 1, Tokens: 1, DTypeBytes: 2, Nodes: 3, GPUsPerNode: 6148914691236517216},
		{TP: 32, EP: 4, DP: 1, PP: 1, Tokens: math.MaxInt64, DTypeBytes: 2},
	}
	for i, d := range bad {
		if _, err := Make(k, d); !errors.Is(err, moe.ErrParallel) {
			t.Errorf("deployment %d %+v: %v, want ErrParallel", i, d, err)
		}
	}
	if _, err := Make(k, Deployment{TP: 7 * 32, EP: 1, DP: 1, PP: 1, Tokens: 1, DTypeBytes: 2}); !errors.Is(err, moe.ErrParallel) {
		t.Errorf("N 3072 over moe_tp 224 must not divide: %v", err)
	}
}

func TestPipelineStagesSplitTheLayers(t *testing.T) {
	d := seedDeployment()
	d.TP, d.PP, d.EP = 16, 2, 4
	p, err := Make(KimiK3(), d)
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.Stages[0].Total.Count, p.Stages[1].Total.Count
	if a+b != 187 || p.Stages[0].Layers != [2]int{0, 47} {
		t.Errorf("PP2 stages: %d + %d collectives, stage 0 layers %v", a, b, p.Stages[0].Layers)
	}
}
