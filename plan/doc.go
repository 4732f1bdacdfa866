// Package plan models how an MoE model is laid out over GPUs and what one
// prefill step costs in tensor-parallel communication, from the model's
// shapes alone. It reproduces, from first principles, the figures of the
// Kimi-K3 prefill communication study (docs/CONTRACT.md "Sources"): which collectives one
// step issues, their message sizes and shares, and the per-rank ring
// traffic of the TP reduce-scatter alternatives.
//
// # Expert mapping
//
// SGLang: moe_tp_size = tp / ep / dp and num_local_experts = experts / ep;
// EP rank r owns the contiguous global experts [r*E_local, (r+1)*E_local),
// and with moe_tp_size > 1 each of the moe_tp ranks sharing those experts
// holds an N/moe_tp slice of every expert's intermediate (partial sums
// reduced across them). Sizes that do not divide are errors.
//
// # Collectives of one prefill step (TP, no MoE all-to-all)
//
// Per pipeline stage, each rank issues:
//   - a hidden all-reduce of [tokens, hidden] after the embedding, after
//     every attention o_proj, and after every dense MLP layer;
//   - one MoE tail all-reduce per MoE layer of [tokens, routed latent +
//     shared expert width] (the routed experts' and shared expert's partial
//     outputs, reduced together).
//
// Message bytes are tokens * width * dtype bytes; a step's input bytes are
// their sum.
//
// # Ring traffic of the TP reduce-scatter alternatives
//
// Per token, in units of elements, ignoring the (n-1)/n ring factor as the
// seed does: a ring all-reduce of the hidden moves 2H; the DeepSeek-style
// reduce-scatter of the hidden plus an all-gather of the MLA latent L moves
// H + L; Kimi-K3, whose MLA output gate and KDA layers need the full hidden,
// must keep the hidden all-reduce and add the latent all-gather: 2H + L.
// Bytes per rank for a deployment multiply by tokens, dtype bytes and
// (n-1)/n.
//
// # The all-to-all model (AllToAll)
//
// As SGLang's DeepEP deployments run the MoE: each of EP ranks holds
// E/EP experts and its own tokens; a token is dispatched once to every
// other rank that owns one of its top-k experts and combined back from
// it. Under uniform routing of top-k distinct experts a given rank owns
// none of a token's with probability C(E - E/EP, k) / C(E, k), so a token
// reaches (EP - 1)(1 - that) other ranks (checked against an exhaustive
// enumeration). A rank sends tokens x that x hidden elements each way:
// FP8 with a float32 scale per 128 elements out (1.03125 bytes, DeepEP's
// dispatch), BF16 back. The time adds a fixed latency per dispatch and
// combine to the bytes over the link's bandwidth, with no overlap.
package plan
