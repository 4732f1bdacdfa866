package check

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"kimimoe/validation"
)

// Observations are facts about a failing candidate that need no
// hypothesis: rows left zero, rows that are other rows of the oracle's
// output, failures confined to non-finite values, to some experts or to
// some column blocks, or an error small and even over all of them. Each
// names the rows, experts or blocks.

// obsBlock is the column block the error map uses: the width of the
// narrowest tile a kernel writes (sonic-moe #63 and aiter #4398 corrupted
// alternating 16-column groups).
const obsBlock = 16

// observe fills r.Observations from the candidate and the oracle's output
// ref [M, K] (rounded to the candidate's dtype), after measure.
func (r *Report) observe(c *validation.Case, ref []float64, m, k int) {
	var obs []string
	rowBad := r.rowBad
	nBad := 0
	for _, b := range rowBad {
		if b {
			nBad++
		}
	}
	if nBad == 0 && r.NonFinite == 0 {
		return
	}
	if o := zeroRows(r.got, ref, m, k); o != "" {
		obs = append(obs, o)
	}
	if o := movedRows(r.got, ref, rowBad, m, k, r.MaxNRMSE); o != "" {
		obs = append(obs, o)
	}
	if r.NonFinite > 0 && r.Mismatched == r.NonFinite {
		obs = append(obs, fmt.Sprintf("only non-finite values differ: %d of them; every finite value is within atol + rtol*|ref|", r.NonFinite))
	}
	if o := expertMap(c, rowBad, nBad); o != "" {
		obs = append(obs, o)
	}
	blocks := blockMetrics(r.got, ref, m, k)
	if o := blockMap(blocks, r.MaxNRMSE); o != "" {
		obs = append(obs, o)
	}
	if r.NonFinite == 0 {
		if o := evenError(r.got, ref, m, k, blocks, float64(r.Cosine), float64(r.NRMSE)); o != "" {
			obs = append(obs, o)
		}
	}
	r.Observations = obs
}

// listInts names up to 10 values and the count of the rest.
func listInts(v []int) string {
	var s []string
	for _, x := range v[:min(10, len(v))] {
		s = append(s, fmt.Sprint(x))
	}
	if len(v) > 10 {
		s = append(s, fmt.Sprintf("and %d more", len(v)-10))
	}
	return strings.Join(s, ", ")
}

func zeroRows(got, ref []float64, m, k int) string {
	var rows []int
	for t := range m {
		zero, refZero := true, true
		for j := range k {
			zero = zero && got[t*k+j] == 0
			refZero = refZero && ref[t*k+j] == 0
		}
		if zero && !refZero {
			rows = append(rows, t)
		}
	}
	if rows == nil {
		return ""
	}
	return fmt.Sprintf("%d rows are all zero where the oracle's are not (unwritten?): %s", len(rows), listInts(rows))
}

// movedRows finds failing candidate rows that hold another row of the
// oracle's output: bitwise anywhere, or within the thresholds a few rows
// away (a shift).
func movedRows(got, ref []float64, bad []bool, m, k int, maxNRMSE float64) string {
	key := func(v []float64) string {
		var b strings.Builder
		for _, x := range v {
			fmt.Fprintf(&b, "%x,", math.Float64bits(x))
		}
		return b.String()
	}
	at := map[string]int{}
	for t := range m {
		if _, ok := at[key(ref[t*k:(t+1)*k])]; !ok {
			at[key(ref[t*k:(t+1)*k])] = t
		}
	}
	var pairs [][2]int
	for t := range m {
		if !bad[t] {
			continue
		}
		row := got[t*k : (t+1)*k]
		if u, ok := at[key(row)]; ok && u != t {
			pairs = append(pairs, [2]int{t, u})
			continue
		}
		for _, d := range []int{1, -1, 2, -2} {
			u := t + d
			if u < 0 || u >= m {
				continue
			}
			if rm := validation.Compare(row, ref[u*k:(u+1)*k]); rm.NRMSE <= maxNRMSE && rm.NonFiniteMismatch == 0 {
				pairs = append(pairs, [2]int{t, u})
				break
			}
		}
	}
	if pairs == nil {
		return ""
	}
	shift := pairs[0][1] - pairs[0][0]
	var rows []int
	for _, p := range pairs {
		if p[1]-p[0] != shift {
			shift = 0
		}
		rows = append(rows, p[0])
	}
	if shift != 0 {
		return fmt.Sprintf("%d rows are the oracle's rows shifted by %+d (candidate row t holds the oracle's row t%+d): rows %s", len(pairs), shift, shift, listInts(rows))
	}
	var s []string
	for _, p := range pairs[:min(10, len(pairs))] {
		s = append(s, fmt.Sprintf("%d<-%d", p[0], p[1]))
	}
	return fmt.Sprintf("%d rows hold other rows of the oracle's output (candidate<-oracle): %s", len(pairs), strings.Join(s, " "))
}

// expertMap names the local experts whose rows all fail when every
// failing row routes to one of them and some rows pass: the error follows
// those experts (a tile or tactic that only some experts' shapes take).
func expertMap(c *validation.Case, bad []bool, nBad int) string {
	in, m, e := &c.Input, c.Input.M, c.Weights.E
	if nBad == 0 || nBad == m {
		return ""
	}
	uses := make([][]int, m)
	allBad := make([]bool, e)
	for x := range allBad {
		allBad[x] = true
	}
	for t := range m {
		for _, id := range in.TopKIDs[t*in.TopK : (t+1)*in.TopK] {
			if x, ok := c.Spec.EP.Local(int64(id), e); ok {
				uses[t] = append(uses[t], x)
				allBad[x] = allBad[x] && bad[t]
			}
		}
	}
	for t := range m {
		if bad[t] && !slices.ContainsFunc(uses[t], func(x int) bool { return allBad[x] }) {
			return ""
		}
	}
	var es []int
	for x := range e {
		if allBad[x] && slices.ContainsFunc(uses, func(u []int) bool { return slices.Contains(u, x) }) {
			es = append(es, x)
		}
	}
	return fmt.Sprintf("%d of %d rows fail, each routed to local expert %s, every row of which fails: the error follows the expert", nBad, m, listInts(es))
}

// blockMetrics compares each 16-column block of the candidate, over all
// rows, with the oracle's.
func blockMetrics(got, ref []float64, m, k int) []validation.Metrics {
	blocks := make([]validation.Metrics, k/obsBlock)
	for b := range blocks {
		var g, f []float64
		for t := range m {
			g = append(g, got[t*k+b*obsBlock:t*k+(b+1)*obsBlock]...)
			f = append(f, ref[t*k+b*obsBlock:t*k+(b+1)*obsBlock]...)
		}
		blocks[b] = validation.Compare(g, f)
	}
	return blocks
}

// blockMap names the 16-column blocks (blockMetrics) whose NRMSE fails,
// when others pass.
func blockMap(blocks []validation.Metrics, maxNRMSE float64) string {
	nb := len(blocks)
	if nb < 2 {
		return ""
	}
	var bad []int
	for b, rm := range blocks {
		if !(rm.NRMSE <= maxNRMSE) || rm.NonFiniteMismatch > 0 {
			bad = append(bad, b)
		}
	}
	if bad == nil || len(bad) == nb {
		return ""
	}
	alt := len(bad) == nb/2
	for i, b := range bad {
		alt = alt && b == bad[0]+2*i
	}
	what := ""
	if alt {
		what = ", every other block"
	}
	var cols []string
	for _, b := range bad[:min(10, len(bad))] {
		cols = append(cols, fmt.Sprintf("[%d,%d)", b*obsBlock, (b+1)*obsBlock))
	}
	if len(bad) > 10 {
		cols = append(cols, fmt.Sprintf("and %d more", len(bad)-10))
	}
	return fmt.Sprintf("the error is confined to %d of %d column blocks of %d%s: %s", len(bad), nb, obsBlock, what, strings.Join(cols, " "))
}

// evenSpread is how far from the whole's NRMSE, either way, a row's or a
// block's may be for evenError: sampling alone moves a 16-value block's
// NRMSE by about a third.
const evenSpread = 4

// evenError says so when the error is small (cosine at least 0.9999) and
// even: every row's NRMSE (rows the oracle leaves nonzero; a zero one
// must be zero) and every column block's (blocks) within a factor evenSpread of
// the whole's. A wrong index, layout or scale moves some rows, experts
// or blocks and not others, or far more than that; sums kept in a lower
// precision, or an intermediate rounded where the chain does not round,
// spread a small error over all of them.
func evenError(got, ref []float64, m, k int, blocks []validation.Metrics, cosine, nrmse float64) string {
	if !(cosine >= 0.9999) || !(nrmse > 0) || m*max(1, k/obsBlock) < 4 {
		return ""
	}
	lo, hi := math.Inf(1), 0.0
	note := func(e float64) { lo, hi = min(lo, e), max(hi, e) }
	for t := range m {
		g, f := got[t*k:(t+1)*k], ref[t*k:(t+1)*k]
		if slices.ContainsFunc(f, func(v float64) bool { return v != 0 }) {
			note(validation.Compare(g, f).NRMSE)
		} else if slices.ContainsFunc(g, func(v float64) bool { return v != 0 }) {
			return ""
		}
	}
	for _, rm := range blocks {
		note(rm.NRMSE)
	}
	if !(hi <= evenSpread*nrmse && lo >= nrmse/evenSpread) {
		return ""
	}
	return fmt.Sprintf("the error is small and even: cosine %.7f, every row's and every %d-column block's NRMSE between %.2g and %.2g (the whole's %.3g): "+
		"the mark of arithmetic less precise than the chain's (sums in a lower precision, such as FP8 tensor-core accumulation, "+
		"or an intermediate rounded where the chain does not round) rather than of a wrong index, layout or scale",
		cosine, obsBlock, lo, hi, nrmse)
}
