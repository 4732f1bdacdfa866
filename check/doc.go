// Package check compares a serving stack's MoE output with the oracle and,
// when they disagree, says which known mistake reproduces the candidate.
//
// Compare runs the oracle (package moe) on a case and measures a candidate
// output against it: cosine and NRMSE (the pass thresholds, by default the
// validation matrix's: cosine >= 0.99999, NRMSE <= 1e-3), the largest
// absolute error and where, the five worst rows, the count of elements
// outside atol + rtol*|ref| as torch.testing.assert_close counts them, and
// every non-finite mismatch with its position. A candidate stored as bf16
// or f16 is compared with the oracle rounded once to that dtype (nearest
// even), so the rounding of the output alone never fails a correct kernel.
// An overflow is judged the same way on every dtype: a candidate element
// that is infinite where the oracle's value, rounded to the candidate's
// dtype, is the same infinity matches; any other non-finite disagreement
// is a mismatch.
//
// A failing report also lists Observations, facts that need no
// hypothesis: zero rows, rows moved from elsewhere in the output, errors
// only in non-finite values, in some experts or in some column blocks, or
// a small error even over every row and block (lower-precision
// arithmetic, not a wrong index).
//
// Diagnose re-runs the oracle with each known mistake applied (Hypotheses
// lists them, with the bug reports each stands for) on at most MaxRows
// sampled rows and ranks them by NRMSE against the candidate. Each variant
// is screened on the few sampled rows furthest from the oracle, and the
// best hypotheses are measured again on every sampled row. A hypothesis
// "matches" when it passes the same thresholds the verdict uses. Because
// the oracle is exact, a kernel that makes exactly one of these mistakes
// and is otherwise correct is matched by that hypothesis at the NRMSE of
// its own float32 rounding, far below the threshold, while the unmodified
// case fails; two hypotheses only tie when they give the same output.
//
// A failing report keeps the oracle's expert outputs on its sampled rows
// (K float64s a routed token and local expert: 14 MB at the Kimi-K3
// shape) for Diagnose, whose routing hypotheses reuse them; Diagnose
// drops them.
//
// Nothing here changes the case or the candidate: each hypothesis works on
// copies of what it alters.
package check
