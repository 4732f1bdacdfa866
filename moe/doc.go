// Package moe is the exact reference for the Kimi-K3 style fused MoE layer:
// MXFP8 activations times MXFP4 weights with a gated activation between the
// two grouped GEMMs. It owns the layer's shape and router preset (Model,
// KimiK3), the FC1 weight layouts, routing, expert parallelism and the
// oracle forward. Test cases, metrics and case files are package
// validation's; whole-model shapes are package plan's. The contract, with
// the source of each fact, is docs/CONTRACT.md.
//
// # Shapes and layouts
//
// One EP rank holds E local experts (Weights): W31 [E, R, K/2] packed E2M1
// with scales [E, R, K/32], R = 2N rows laid out [up; gate] for a gated
// activation (N otherwise), and W2 [E, K, N/2] with scales [E, K, N/32]. K
// and N are multiples of 32. W31FromKimi, W31FromGateUp and
// W31FromInterleaved convert checkpoint layouts, moving scale rows with
// their rows.
//
// # Routing and expert parallelism
//
// Router.Route computes sigmoid (or softmax) scores in float64, selects by
// score + correction bias (optionally grouped), weights by the unbiased
// scores, renormalizes if asked, and breaks ties toward the smaller index.
// EP.Local maps a global id to a local one and rejects -1 and other ranks'
// ids without indexing anything with them. LocalExperts and MoETPSize are
// SGLang's relations; sizes that do not divide are errors wrapping
// ErrParallel.
//
// # The forward (Oracle)
//
// For each token t and slot k whose expert is local: h = W31[e] . MXFP8(x[t]),
// a = act(gate = h[N:], up = h[:N]), requantized per the Chain, y = W2[e] . a,
// and out[t] = sum over slots in slot order of topk_weights[t, k] * y. See
// Oracle for what "exact" guarantees. Tokens are independent, so Forward can
// compute a chosen subset of rows. Oracles of one layer share work: Derive
// shares the decoded weights of each matrix whose codes are the same, and
// a Memo (WithMemo) keeps expert outputs for forwards that differ only in
// routing; neither changes a bit of the output.
//
// # Errors
//
// Bad inputs (shapes, ids outside [-1, E_global), an expert twice in one
// token's slots, top-k above E_global, non-finite routing weights, a nil
// input) are errors wrapping ErrInput that name the tensor; parallel sizes
// that do not fit (including an E_global of 2^31 or more, or one that
// overflows) wrap ErrParallel. The zero LayerSpec is invalid and the error
// names the field. Programmer errors in the layout helpers (an odd row
// count) panic with a "moe:" message. NaN and infinity
// in x are data, handled by the recipe's rules (see package mxfp).
package moe
