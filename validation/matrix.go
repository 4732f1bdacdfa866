package validation

import (
	"fmt"
	"kimimoe/moe"

	"kimimoe/activation"
	"kimimoe/mxfp"
)

// KimiEP32Rank7 is the Kimi-K3 shape one EP32 rank sees, the shape of the
// real and large suites, kimimoe bench and kimimoe chains: K=3584, N=3072,
// rank 7 of 32 with 28 local experts, top-16 with exactly 8 slots local,
// weights from seed 3584. Callers set Name, M and Seed.
func KimiEP32Rank7(act activation.Kind, chain moe.Chain, recipe mxfp.Recipe) CaseSpec {
	kimi := moe.KimiK3()
	return CaseSpec{K: kimi.K, N: kimi.N, ELocal: 28, TopK: kimi.TopK, EP: moe.EP{Size: 32, Rank: 7}, LocalSlots: 8,
		Activation: act, Chain: chain, Recipe: recipe, WeightSeed: 3584}
}

// GPTOSS is the shape of a GPT-OSS model's whole MoE layer on one rank
// (moe.GPTOSS120B, moe.GPTOSS20B): every expert local, top-4, its clamped
// SwiGLU with FC biases, weights from seed 2880 (plus the expert count).
// Callers set Name, M and Seed.
func GPTOSS(m moe.Model, chain moe.Chain, recipe mxfp.Recipe) CaseSpec {
	return CaseSpec{K: m.K, N: m.N, ELocal: m.NumExperts, TopK: m.TopK, Activation: m.Activation, Biases: true,
		Params: []activation.Params{m.Params}, Chain: chain, Recipe: recipe, WeightSeed: 2880 + uint64(m.NumExperts)}
}

// Suites names the validation suites.
var Suites = []string{"smoke", "real", "large", "all", "gpt-oss"}

// ValidationMatrix returns the cases of a suite (docs/CONTRACT.md "The
// validation matrix", from the SM120 work's test matrix) for one activation, chain and
// recipe:
//
//	smoke  M = 1, 2, 8, 32 with uniform, skewed, empty-expert and masked
//	       routing; EP2 global ids; Kimi EP32 rank 7 (E_local 28, top-16, 8
//	       slots local) at a small K and N; non-finite inputs; K = 160,
//	       N = 96 (multiples of 32, not of 128, as GPT-OSS's 2880) at M = 8
//	       and 64; 70 local experts (top-6, M = 48); FC biases at M = 2,
//	       32 (masked) and K = 160, N = 96. Small shapes.
//	real   Kimi-K3 shape K=3584, N=3072, E_local=28, top-16, EP32 rank 7
//	       with 8 of 16 slots local: decode M=1 and prefill M=128; with
//	       FC biases at M=8.
//	large  the real shape at M = 512, 2048, 8192, and with FC biases at
//	       1024; the oracle checks 32 seeded rows of each.
//	all    smoke + real + large.
//	gpt-oss  GPT-OSS-120B's and GPT-OSS-20B's layers (GPTOSS: K = N =
//	       2880, 128 and 32 experts, top-4) at M = 1, 32 and 512 (32
//	       seeded rows), with their own activation (swiglu_oai, act is
//	       not used) and FC biases. Not part of all: 1.6 GB of weights,
//	       about 10 GB of memory and 40 s on the go backend.
func ValidationMatrix(suite string, act activation.Kind, chain moe.Chain, recipe mxfp.Recipe) ([]CaseSpec, error) {
	base := CaseSpec{Activation: act, Chain: chain, Recipe: recipe, K: 256, N: 128, ELocal: 8, TopK: 4, WeightSeed: 1}
	var smoke []CaseSpec
	add := func(s CaseSpec) {
		s.Seed = uint64(len(smoke) + 100)
		smoke = append(smoke, s)
	}
	for _, m := range []int{1, 2, 8, 32} {
		for _, r := range []Routing{RoutingUniform, RoutingSkewed, RoutingEmptyExpert, RoutingMasked} {
			s := base
			s.Name, s.M, s.Routing = fmt.Sprintf("m%d_%v", m, r), m, r
			add(s)
		}
	}
	s := base
	s.Name, s.M, s.EP = "ep2_rank1_global_ids", 8, moe.EP{Size: 2, Rank: 1}
	add(s)
	s = base
	s.Name, s.M, s.ELocal, s.TopK, s.EP, s.LocalSlots, s.WeightSeed = "kimi_ep32_rank7_small", 8, 28, 16, moe.EP{Size: 32, Rank: 7}, 8, 2
	add(s)
	s = base
	s.Name, s.M, s.NonFinite = "nonfinite_inputs", 6, true
	add(s)
	// K and N multiples of 32 but not of 128, as GPT-OSS's 2880: at a
	// decode and at a larger M.
	for _, m := range []int{8, 64} {
		s = base
		s.Name, s.M, s.K, s.N, s.WeightSeed = fmt.Sprintf("k160_n96_m%d", m), m, 160, 96, 3
		add(s)
	}
	// More local experts than a warp has lanes (70: three rounds of the
	// GPU's tile search), a few tokens each.
	s = base
	s.Name, s.M, s.ELocal, s.TopK, s.WeightSeed = "many_local_experts_e70", 48, 70, 6, 4
	add(s)
	// FC biases (GPT-OSS's): at a decode M, with masked slots, and at a
	// shape that is not a multiple of 128.
	s = base
	s.Name, s.M, s.Biases, s.WeightSeed = "biases_m2", 2, true, 5
	add(s)
	s = base
	s.Name, s.M, s.Routing, s.Biases, s.WeightSeed = "biases_m32_masked", 32, RoutingMasked, true, 5
	add(s)
	s = base
	s.Name, s.M, s.K, s.N, s.Biases, s.WeightSeed = "biases_k160_n96_m16", 16, 160, 96, true, 6
	add(s)

	real := func(name string, m, sample int) CaseSpec {
		s := KimiEP32Rank7(act, chain, recipe)
		s.Name, s.M, s.Seed, s.SampleRows = name, m, uint64(1000+m), sample
		return s
	}
	withBiases := func(s CaseSpec) CaseSpec {
		s.Name, s.Biases, s.WeightSeed = s.Name+"_biases", true, s.WeightSeed+1
		return s
	}
	realCases := []CaseSpec{real("kimi_decode_m1", 1, 0), real("kimi_prefill_m128", 128, 0), withBiases(real("kimi_m8", 8, 0))}
	large := []CaseSpec{real("kimi_m512", 512, 32), real("kimi_m2048", 2048, 32), real("kimi_m8192", 8192, 32),
		withBiases(real("kimi_m1024", 1024, 32))}
	switch suite {
	case "smoke":
		return smoke, nil
	case "real":
		return realCases, nil
	case "large":
		return large, nil
	case "all":
		return append(append(smoke, realCases...), large...), nil
	case "gpt-oss":
		var cases []CaseSpec
		for _, model := range []moe.Model{moe.GPTOSS120B(), moe.GPTOSS20B()} {
			for _, m := range []int{1, 32, 512} {
				s := GPTOSS(model, chain, recipe)
				s.Name, s.M, s.Seed = fmt.Sprintf("%s_m%d", model.Name, m), m, uint64(2880+m)
				if m == 512 {
					s.SampleRows = 32
				}
				cases = append(cases, s)
			}
		}
		return cases, nil
	}
	return nil, fmt.Errorf("moe: unknown suite %q (want smoke, real, large, all or gpt-oss)", suite)
}
