package moe

import (
	"errors"
	"math"
	"strings"
	"testing"

	"kimimoe/mxfp"
)

func sig(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// Routing rules of docs/CONTRACT.md "Routing and expert parallelism" (SGLang's
// select_experts for Kimi-K3 / DeepSeek-V3: sigmoid, biased selection,
// unbiased weights, renormalize). Expected ids are worked by hand below;
// expected weights follow the formula sigmoid(l) / sum of chosen.
func TestRouteSigmoidWithBias(t *testing.T) {
	// 6 experts. Unbiased ranking: 0 (2.0) > 1 (1.0) > 2 (0.5) > ...
	// The bias lifts expert 5 (logit -1, sigmoid 0.269) by 0.8 to 1.069,
	// above expert 0's 0.881: selection is 5 then 0.
	logits := []float32{2.0, 1.0, 0.5, 0, -0.5, -1}
	r := Router{NumExperts: 6, TopK: 2, CorrectionBias: []float32{0, 0, 0, 0, 0, 0.8}, Renormalize: true}
	ids := make([]int32, 2)
	wts := make([]float32, 2)
	if err := r.Route(ids, wts, logits); err != nil {
		t.Fatal(err)
	}
	if ids[0] != 5 || ids[1] != 0 {
		t.Fatalf("ids = %v, want [5 0]", ids)
	}
	s5, s0 := sig(-1), sig(2)
	if want := float32(s5 / (s5 + s0)); wts[0] != want {
		t.Errorf("weight of expert 5 = %v, want the unbiased %v", wts[0], want)
	}
	// Routed scaling factor multiplies after renormalization.
	r.RoutedScalingFactor = 2.5
	r.Route(ids, wts, logits)
	if want := float32(2.5 * s0 / (s5 + s0)); math.Abs(float64(wts[1]-want)) > 1e-7 {
		t.Errorf("scaled weight = %v, want %v", wts[1], want)
	}
	// Without renormalize the weights are the raw sigmoid scores.
	r = Router{NumExperts: 6, TopK: 2}
	r.Route(ids, wts, logits)
	if ids[0] != 0 || ids[1] != 1 || wts[0] != float32(s0) {
		t.Errorf("plain top-2: ids %v weights %v", ids, wts)
	}
}

func TestRouteTiesPickSmallerIndex(t *testing.T) {
	r := Router{NumExperts: 5, TopK: 3}
	ids := make([]int32, 3)
	wts := make([]float32, 3)
	r.Route(ids, wts, []float32{1, 3, 1, 3, 1})
	if ids[0] != 1 || ids[1] != 3 || ids[2] != 0 {
		t.Fatalf("ids = %v, want [1 3 0] (ties to the smaller index)", ids)
	}
}

// Grouped selection: 8 experts in 4 groups of 2; group score = sum of its
// top 2 biased scores; keep the top 2 groups.
func TestRouteGrouped(t *testing.T) {
	// group 0: {3, -3}, group 1: {1, 1}, group 2: {2, 0.5}, group 3: {-2, -2}
	// sums of sigmoids: g0 0.953+0.047 = 1.0, g1 0.731*2 = 1.462, g2
	// 0.881+0.622 = 1.503, g3 0.238. Top 2 groups: 2 and 1, so expert 0
	// (the best single score) is excluded; top 3 of {2, 3, 4, 5}: 4 (2.0),
	// then 2 and 3 tie at 1.0 -> 2, then... top-3 = [4, 2, 3].
	logits := []float32{3, -3, 1, 1, 2, 0.5, -2, -2}
	r := Router{NumExperts: 8, TopK: 3, NumGroups: 4, TopKGroup: 2}
	ids := make([]int32, 3)
	wts := make([]float32, 3)
	if err := r.Route(ids, wts, logits); err != nil {
		t.Fatal(err)
	}
	if ids[0] != 4 || ids[1] != 2 || ids[2] != 3 {
		t.Fatalf("ids = %v, want [4 2 3]", ids)
	}
}

func TestRouteSoftmax(t *testing.T) {
	r := Router{NumExperts: 3, TopK: 1, Scoring: ScoringSoftmax}
	ids := make([]int32, 1)
	wts := make([]float32, 1)
	r.Route(ids, wts, []float32{0, math.Float32frombits(0x3f317218), 0}) // ln 2
	// softmax: e^ln2 / (1 + 2 + 1) = 0.5
	if ids[0] != 1 || math.Abs(float64(wts[0])-0.5) > 1e-7 {
		t.Fatalf("softmax top-1: %v %v, want expert 1 weight 0.5", ids, wts)
	}
}

func TestRouteErrors(t *testing.T) {
	ids := make([]int32, 2)
	wts := make([]float32, 2)
	bad := []Router{
		{NumExperts: 4, TopK: 5},
		{NumExperts: 4, TopK: 2, CorrectionBias: []float32{1}},
		{NumExperts: 6, TopK: 2, NumGroups: 4, TopKGroup: 1},
		{NumExperts: 8, TopK: 3, NumGroups: 4, TopKGroup: 1},
	}
	for i, r := range bad {
		if err := r.Route(ids, wts, make([]float32, r.NumExperts)); err == nil {
			t.Errorf("router %d: no error", i)
		}
	}
	r := Router{NumExperts: 4, TopK: 2}
	if err := r.Route(ids, wts, []float32{0, float32(math.NaN()), 0, 0}); err == nil {
		t.Error("NaN logit accepted")
	}
	// Infinite logits name the logits and the token (softmax turned +Inf
	// into NaN weights, reported as topk_weights, which the user never gave).
	for _, sc := range []Scoring{ScoringSigmoid, ScoringSoftmax} {
		r := Router{NumExperts: 4, TopK: 2, Scoring: sc, Renormalize: true}
		ids2, wts2 := make([]int32, 4), make([]float32, 4)
		err := r.Route(ids2, wts2, []float32{0, 1, 0, 0, 0, float32(math.Inf(1)), 0, 0})
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "router_logits[1, 1] = +Inf is not finite (token 1)") {
			t.Errorf("scoring %d, +Inf logit: %v", sc, err)
		}
	}
	r = Router{NumExperts: 4, TopK: 2, RoutedScalingFactor: math.NaN()}
	if err := r.Route(ids, wts, make([]float32, 4)); err == nil {
		t.Error("a NaN routed_scaling_factor accepted")
	}
}

// Expert parallelism (SGLang: moe_tp_size = tp/ep/dp, local experts = E/ep;
// seed 000 "TP/EP expert mapping": TP32/EP32 -> 1 and 28; EP4 -> 224).
func TestExpertParallel(t *testing.T) {
	if n, err := LocalExperts(896, 32); n != 28 || err != nil {
		t.Errorf("LocalExperts(896, 32) = %d, %v", n, err)
	}
	if n, err := LocalExperts(896, 4); n != 224 || err != nil {
		t.Errorf("LocalExperts(896, 4) = %d, %v", n, err)
	}
	if n, err := MoETPSize(32, 32, 1); n != 1 || err != nil {
		t.Errorf("MoETPSize(32, 32, 1) = %d, %v", n, err)
	}
	if n, err := MoETPSize(32, 4, 1); n != 8 || err != nil {
		t.Errorf("MoETPSize(32, 4, 1) = %d, %v", n, err)
	}
	if _, err := LocalExperts(896, 5); !errors.Is(err, ErrParallel) {
		t.Errorf("896 experts over EP5: %v", err)
	}
	if _, err := MoETPSize(32, 3, 1); !errors.Is(err, ErrParallel) {
		t.Errorf("TP32 over EP3: %v", err)
	}
	ep := EP{Size: 32, Rank: 7}
	for _, c := range []struct {
		global int64
		local  int
		ok     bool
	}{{-1, 0, false}, {195, 0, false}, {196, 0, true}, {223, 27, true}, {224, 0, false}, {895, 0, false}} {
		l, ok := ep.Local(c.global, 28)
		if ok != c.ok || ok && l != c.local {
			t.Errorf("EP32 rank 7: Local(%d) = %d, %v; want %d, %v", c.global, l, ok, c.local, c.ok)
		}
	}
	if lo, hi := ep.LocalRange(28); lo != 196 || hi != 224 {
		t.Errorf("LocalRange = [%d, %d)", lo, hi)
	}
	if (EP{Size: 2, Rank: 2}).Validate() == nil {
		t.Error("rank 2 of 2 accepted")
	}
}

// Input errors say what is wrong in the user's terms: a negative M is
// reported as such (it used to surface as "dst has 2048 values, want
// [-1, 256]"), short x_q scales as the scales (it said "x_q is [8, 256],
// want [8, 256]"), and a nil input as nil.
func TestInputErrorMessages(t *testing.T) {
	xq := mxfp.NewMXFP8Matrix(8, 256)
	for _, c := range []struct {
		in   *Input
		want string
	}{
		{&Input{M: -1, TopK: 1}, "M = -1 is negative"},
		{&Input{M: 8, TopK: 1, XQ: &mxfp.MXFP8Matrix{Rows: 8, Cols: 256, Codes: xq.Codes, Scales: xq.Scales[:10]}}, "x_scale holds 10 bytes"},
		{nil, "input is nil"},
		{&Input{M: 1, TopK: 5, X: make([]float32, 256), TopKIDs: make([]int32, 5), TopKWeights: make([]float32, 5)}, "top-k = 5"},
	} {
		err := c.in.Validate(256, 4)
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInput mentioning %q", c.in, err, c.want)
		}
	}
}

// K = 0 is an input error, not an integer divide by zero; EP{Size: 0} keeps
// its rank, so a rank without a size is invalid (it loaded every expert).
func TestDegenerateSpecs(t *testing.T) {
	in := &Input{M: 2, TopK: 1, X: nil, TopKIDs: []int32{0, 0}, TopKWeights: []float32{1, 1}}
	if err := in.Validate(0, 4); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "K = 0") {
		t.Errorf("K = 0: %v", err)
	}
	if err := (EP{Size: 0, Rank: 3}).Validate(); !errors.Is(err, ErrParallel) {
		t.Errorf("EP{Size: 0, Rank: 3}: %v", err)
	}
	if err := (EP{}).Validate(); err != nil {
		t.Errorf("the zero EP: %v", err)
	}
}
