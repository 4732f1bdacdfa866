package check

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// testCase builds a small seeded case: K=128, N=64 (so FC1's 128 rows and
// 4 scale columns fill one 128x4 swizzle tile), 4 local experts of ep
// (size, rank), top-3 routed by a sigmoid router with a correction bias
// from router_logits kept in the case, optional biases.
func testCase(t *testing.T, chain moe.Chain, epSize, epRank int, biases bool) *validation.Case {
	t.Helper()
	s := validation.CaseSpec{Name: "diag", M: 12, K: 128, N: 64, ELocal: 4, TopK: 3, EP: moe.EP{Size: epSize, Rank: epRank},
		Activation: activation.Situ, Chain: chain, Recipe: mxfp.RecipeRCeil, Seed: 7, WeightSeed: 11}
	c, err := validation.GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	w := c.Weights
	if biases {
		w.W31Bias = make([]float32, w.E*w.Rows())
		w.W2Bias = make([]float32, w.E*w.K)
		for i := range w.W31Bias {
			w.W31Bias[i] = float32(rng.NormFloat64())
		}
		for i := range w.W2Bias {
			w.W2Bias[i] = float32(rng.NormFloat64() * 0.3)
		}
	}
	ng := w.E * epSize
	logits, bias := make([]float32, s.M*ng), make([]float32, ng)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	for i := range bias {
		bias[i] = float32(rng.Float64())
	}
	r := moe.Router{NumExperts: ng, TopK: s.TopK, Scoring: moe.ScoringSigmoid, CorrectionBias: bias, Renormalize: true}
	if err := r.Route(c.Input.TopKIDs, c.Input.TopKWeights, logits); err != nil {
		t.Fatal(err)
	}
	c.Extra = map[string]*safetensors.Tensor{
		"router_logits":   safetensors.FromFloat32("router_logits", []int{s.M, ng}, logits),
		"correction_bias": safetensors.FromFloat32("correction_bias", []int{ng}, bias),
	}
	return c
}

// candidate is the oracle's output for c, as a float32 kernel would write it.
func candidate(t testing.TB, c *validation.Case) []float32 {
	t.Helper()
	ref, err := c.OracleForward(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(ref))
	for i, v := range ref {
		out[i] = float32(v)
	}
	return out
}

func copyCase(c *validation.Case) *validation.Case {
	d := *c
	w := *c.Weights
	d.Weights = &w
	return &d
}

// sigmoidWeights sets c's weights from the router logits, biased or not,
// renormalized or not; written apart from diagnose.go's withWeights.
func sigmoidWeights(c *validation.Case, biased, renorm bool) {
	lv, _ := c.Extra["router_logits"].Float32s()
	bv, _ := c.Extra["correction_bias"].Float32s()
	ng := len(bv)
	in := &c.Input
	wts := make([]float32, len(in.TopKWeights))
	for tok := range in.M {
		sum := 0.0
		for s := range in.TopK {
			id := in.TopKIDs[tok*in.TopK+s]
			v := 1 / (1 + math.Exp(-float64(lv[tok*ng+int(id)])))
			if biased {
				v += float64(bv[id])
			}
			wts[tok*in.TopK+s] = float32(v)
			sum += v
		}
		if renorm {
			for s := range in.TopK {
				wts[tok*in.TopK+s] = float32(float64(wts[tok*in.TopK+s]) / sum)
			}
		}
	}
	in.TopKWeights = wts
}

// Each hypothesis is ranked first, and matches, for a candidate made with
// its mistake, while the case as given fails that candidate.
func TestDiagnoseRanksTheMistakeFirst(t *testing.T) {
	type mistake struct {
		name           string
		chain          moe.Chain
		epSize, epRank int
		make           func(c *validation.Case) *validation.Case
	}
	mistakes := []mistake{
		{"gate_up_swapped", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			w := d.Weights
			n, kb, ks := w.N, w.K/2, w.K/32
			w.W31, w.W31Scale = make([]uint8, len(c.Weights.W31)), make([]uint8, len(c.Weights.W31Scale))
			w.W31Bias = make([]float32, len(c.Weights.W31Bias))
			for e := range w.E {
				for i := range 2 * n {
					j := (i + n) % (2 * n)
					copy(w.W31[(e*2*n+i)*kb:(e*2*n+i+1)*kb], c.Weights.W31[(e*2*n+j)*kb:])
					copy(w.W31Scale[(e*2*n+i)*ks:(e*2*n+i+1)*ks], c.Weights.W31Scale[(e*2*n+j)*ks:])
					w.W31Bias[e*2*n+i] = c.Weights.W31Bias[e*2*n+j]
				}
			}
			return d
		}},
		{"gate_up_interleaved", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			w := d.Weights
			w.W31, w.W31Scale, w.W31Bias = nil, nil, nil
			n := w.N
			for e := range w.E {
				m := moe.W31FromInterleaved(c.Weights.FC1(e)) // the halves read as interleaved rows
				w.W31, w.W31Scale = append(w.W31, m.Packed...), append(w.W31Scale, m.Scales...)
				b := c.Weights.W31Bias[e*2*n : (e+1)*2*n]
				for i := range n {
					w.W31Bias = append(w.W31Bias, b[2*i+1])
				}
				for i := range n {
					w.W31Bias = append(w.W31Bias, b[2*i])
				}
			}
			return d
		}},
		{"recipe_floor", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Spec.Recipe = mxfp.RecipeFloor
			return d
		}},
		{"chain_exact", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Spec.Chain = moe.ChainExact
			return d
		}},
		{"chain_mxfp8", moe.ChainFlashInfer, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Spec.Chain = moe.ChainMXFP8
			return d
		}},
		{"chain_flashinfer", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Spec.Chain = moe.ChainFlashInfer
			return d
		}},
		{"chain_bf16", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Spec.Chain = moe.ChainBF16
			return d
		}},
		{"activation_params", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Spec.Params = []activation.Params{activation.DefaultParams()}
			d.Spec.Params[0].SituBeta, d.Spec.Params[0].SituLinearBeta = 25, 4
			return d
		}},
		{"activation_kind", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Spec.Activation = activation.Swiglu
			return d
		}},
		{"routing_weights_unnormalized", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			sigmoidWeights(d, false, false)
			return d
		}},
		{"correction_bias_in_weights", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			sigmoidWeights(d, true, true)
			return d
		}},
		{"fc1_bias_missing", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Weights.W31Bias = nil
			return d
		}},
		{"fc2_bias_missing", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Weights.W2Bias = nil
			return d
		}},
		{"scales_swizzled", moe.ChainMXFP8, 1, 0, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			w := d.Weights
			r, cols := w.Rows(), w.K/32 // 128 x 4: the swizzle is a permutation
			w.W31Scale = nil
			for e := range w.E {
				swz := make([]uint8, mxfp.Swizzled128x4Len(r, cols))
				mxfp.SwizzleScales128x4(swz, c.Weights.W31Scale[e*r*cols:(e+1)*r*cols], r, cols)
				w.W31Scale = append(w.W31Scale, swz...)
			}
			return d
		}},
		{"ep_global_ids", moe.ChainMXFP8, 2, 1, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			e := int32(c.Weights.E)
			d.Input.TopKIDs = make([]int32, len(c.Input.TopKIDs))
			for i, id := range c.Input.TopKIDs {
				d.Input.TopKIDs[i] = -1
				if id >= 0 && id < e { // a kernel that filters on 0 <= id < E_local
					d.Input.TopKIDs[i] = id + e
				}
			}
			return d
		}},
		{"recipe_rceil", moe.ChainMXFP8, 1, 0, nil}, // the case is floor; see below
	}
	// The layout and bias mistakes again on the bf16 chain, as a W4A16
	// kernel (triton_kernels, Marlin) would make them.
	for _, m := range mistakes {
		switch m.name {
		case "gate_up_swapped", "gate_up_interleaved", "fc1_bias_missing", "fc2_bias_missing":
			m.chain = moe.ChainBF16
			mistakes = append(mistakes, m)
		}
	}
	for _, m := range mistakes {
		t.Run(m.name+"/"+m.chain.String(), func(t *testing.T) {
			c := testCase(t, m.chain, m.epSize, m.epRank, true)
			var cand []float32
			if m.name == "recipe_rceil" {
				cand = candidate(t, c) // made with rceil
				c.Spec.Recipe = mxfp.RecipeFloor
			} else {
				cand = candidate(t, m.make(c))
			}
			r, err := Compare(c, cand, safetensors.F32, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Pass {
				t.Fatalf("the case as given passes the %s candidate (nrmse %.3g): the mistake is invisible here", m.name, float64(r.NRMSE))
			}
			Diagnose(c, r)
			top := r.Diagnosis[0]
			if top.Name != m.name || !top.Matches {
				var lines []string
				for _, h := range r.Diagnosis[:4] {
					lines = append(lines, h.Name+" "+h.What)
				}
				t.Fatalf("ranked first: %s (nrmse %.3g, matches %v); want %s\n%s", top.Name, float64(top.NRMSE), top.Matches, m.name, strings.Join(lines, "\n"))
			}
			if b := r.Best(); b == nil || b.Name != m.name {
				t.Fatalf("Best() = %v", b)
			}
		})
	}
}

// A correct candidate passes on every chain, bf16-rounded too, and the
// diagnosis of a pass ranks no hypothesis as better than what it is.
func TestCorrectCandidatePassesEveryChain(t *testing.T) {
	for _, ch := range moe.Chains() {
		c := testCase(t, ch, 2, 1, true)
		cand := candidate(t, c)
		for _, d := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
			got := cand
			if d == safetensors.BF16 {
				got = make([]float32, len(cand))
				for i, v := range cand {
					got[i] = mxfp.RoundBF16(v)
				}
			}
			r, err := Compare(c, got, d, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Pass || r.Mismatched != 0 {
				t.Errorf("%v %s: a correct candidate fails: %v, %d mismatched", ch, d, r.Why, r.Mismatched)
			}
		}
	}
}

// Hypotheses that cannot apply are skipped with a reason, and listed last.
func TestDiagnoseSkips(t *testing.T) {
	c := testCase(t, moe.ChainMXFP8, 1, 0, false)
	delete(c.Extra, "router_logits")
	r, err := Compare(c, candidate(t, c), safetensors.F32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	Diagnose(c, r)
	skipped := map[string]string{}
	seenSkip := false
	for _, h := range r.Diagnosis {
		if h.Skipped != "" {
			skipped[h.Name] = h.Skipped
			seenSkip = true
		} else if seenSkip {
			t.Errorf("%s computed after a skipped hypothesis", h.Name)
		}
	}
	for _, name := range []string{"fc1_bias_missing", "fc2_bias_missing", "ep_global_ids", "recipe_rceil", "chain_mxfp8", "correction_bias_in_weights", "routing_weights_unnormalized"} {
		if skipped[name] == "" {
			t.Errorf("%s not skipped", name)
		}
	}
	if len(r.Diagnosis) != len(Hypotheses()) {
		t.Errorf("%d results for %d hypotheses", len(r.Diagnosis), len(Hypotheses()))
	}
}

// An EP case whose candidate is wrong on a row with no local slot: NRMSE
// there is +Inf, and the report still encodes (null plus a reason).
func TestReportJSONWithInfiniteRowError(t *testing.T) {
	c := testCase(t, moe.ChainMXFP8, 8, 3, false) // 4 of 32 experts local: some tokens have none
	cand := candidate(t, c)
	zeroRow := -1
	for tok := range c.Input.M {
		local := false
		for _, id := range c.Input.TopKIDs[tok*3 : tok*3+3] {
			if _, ok := c.Spec.EP.Local(int64(id), c.Weights.E); ok {
				local = true
			}
		}
		if !local {
			zeroRow = tok
			break
		}
	}
	if zeroRow < 0 {
		t.Fatal("the seeded case has no token without a local slot")
	}
	cand[zeroRow*c.Weights.K] = 1
	r, err := Compare(c, cand, safetensors.F32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("the report does not encode: %v", err)
	}
	if !strings.Contains(string(data), `"nrmse":null`) || r.NullReasons["worst_rows.nrmse"] == "" {
		t.Errorf("no null with a reason in %s", data)
	}
}

// An F32 candidate whose float32 result overflows where the oracle's
// float64 value is finite passes, as the same output in BF16 or F16 does:
// one rule for every dtype, the oracle rounded once to the candidate's
// dtype (before, the F32 candidate failed with non-finite mismatches).
func TestOverflowSameRuleEveryDType(t *testing.T) {
	c := testCase(t, moe.ChainExact, 1, 0, false)
	for i := range c.Weights.W2Scale {
		c.Weights.W2Scale[i] = 0xFE // 2^127: outputs far past float32's range
	}
	ref, err := c.OracleForward(nil)
	if err != nil {
		t.Fatal(err)
	}
	cand, inf := make([]float32, len(ref)), 0
	for i, v := range ref {
		cand[i] = float32(v)
		if math.IsInf(float64(cand[i]), 0) && !math.IsInf(v, 0) {
			inf++
		}
	}
	if inf == 0 {
		t.Fatal("no element overflows float32: the test shows nothing")
	}
	r, err := Compare(c, cand, safetensors.F32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Pass || r.NonFinite != 0 {
		t.Errorf("F32 candidate with %d overflows: pass %v, %d non-finite mismatches (%v)", inf, r.Pass, r.NonFinite, r.Why)
	}
}
