package moe

import (
	"fmt"
	"math"
)

// Scoring turns router logits into scores.
type Scoring uint8

const (
	ScoringSigmoid Scoring = iota // Kimi-K3, DeepSeek-V3: s = sigmoid(logit)
	ScoringSoftmax                // s = softmax(logits) over all experts
)

// Router configures top-k routing. See Route.
type Router struct {
	NumExperts int
	TopK       int
	Scoring    Scoring
	// CorrectionBias [NumExperts], optional: added to the scores for
	// selection only; the weights use the unbiased scores.
	CorrectionBias []float32
	// NumGroups > 1 enables grouped selection: experts split into NumGroups
	// equal groups, a group's score is the sum of its top 2 biased scores,
	// and only experts of the TopKGroup best groups may be chosen.
	NumGroups, TopKGroup int
	// Renormalize divides the chosen weights by their sum.
	Renormalize bool
	// RoutedScalingFactor, when nonzero, multiplies the weights (after
	// renormalization). SGLang's default applies the factor to the MoE
	// output instead: leave it 0 and scale the output to match that.
	RoutedScalingFactor float64
}

// Validate checks the configuration.
func (r *Router) Validate() error {
	switch {
	case r.NumExperts < 1 || r.TopK < 1 || r.TopK > r.NumExperts:
		return fmt.Errorf("moe: router: top-k %d of %d experts", r.TopK, r.NumExperts)
	case r.CorrectionBias != nil && len(r.CorrectionBias) != r.NumExperts:
		return fmt.Errorf("moe: router: correction_bias has %d entries for %d experts", len(r.CorrectionBias), r.NumExperts)
	case r.NumGroups > 1 && (r.NumExperts%r.NumGroups != 0 || r.TopKGroup < 1 || r.TopKGroup > r.NumGroups):
		return fmt.Errorf("moe: router: %d experts in %d groups, top %d groups", r.NumExperts, r.NumGroups, r.TopKGroup)
	case r.NumGroups > 1 && r.TopK > r.TopKGroup*(r.NumExperts/r.NumGroups):
		return fmt.Errorf("moe: router: top-k %d exceeds the %d experts of %d groups", r.TopK, r.TopKGroup*(r.NumExperts/r.NumGroups), r.TopKGroup)
	case r.Scoring != ScoringSigmoid && r.Scoring != ScoringSoftmax:
		return fmt.Errorf("moe: router: unknown scoring %d", r.Scoring)
	case !(math.Abs(r.RoutedScalingFactor) <= math.MaxFloat32):
		// Weights are at most 1 before the factor and float32 after it.
		return fmt.Errorf("moe: router: routed_scaling_factor %v is not a finite float32 (weights would overflow)", r.RoutedScalingFactor)
	}
	for i, b := range r.CorrectionBias {
		if math.IsNaN(float64(b)) || math.IsInf(float64(b), 0) {
			return fmt.Errorf("moe: router: correction_bias[%d] = %v", i, b)
		}
	}
	return nil
}

// Route picks top-k experts for each of M tokens from logits [M, NumExperts]
// and writes ids [M, TopK] (global expert ids, in descending order of biased
// score) and weights [M, TopK]. Scores are computed in float64; ties pick
// the smaller expert (or group) index, as FlashInfer's routing kernels do.
// A NaN or infinite logit is an error (wrapping ErrInput) naming the
// token and expert.
func (r *Router) Route(ids []int32, weights []float32, logits []float32) error {
	if err := r.Validate(); err != nil {
		return err
	}
	e := r.NumExperts
	if len(logits)%e != 0 {
		return fmt.Errorf("moe: Route: %d logits is not a multiple of %d experts", len(logits), e)
	}
	m := len(logits) / e
	if len(ids) != m*r.TopK || len(weights) != m*r.TopK {
		return fmt.Errorf("moe: Route: ids %d and weights %d, want %d (M=%d x top-k %d)", len(ids), len(weights), m*r.TopK, m, r.TopK)
	}
	scores := make([]float64, e)
	biased := make([]float64, e)
	allowed := make([]bool, e)
	for t := range m {
		row := logits[t*e : (t+1)*e]
		for i, l := range row {
			if l != l || math.IsInf(float64(l), 0) {
				return fmt.Errorf("%w: router_logits[%d, %d] = %v is not finite (token %d)", ErrInput, t, i, l, t)
			}
		}
		r.score(scores, row)
		for i := range scores {
			biased[i] = scores[i]
			if r.CorrectionBias != nil {
				biased[i] += float64(r.CorrectionBias[i])
			}
			allowed[i] = true
		}
		if r.NumGroups > 1 {
			r.maskGroups(allowed, biased)
		}
		sum := 0.0
		tid, tw := ids[t*r.TopK:(t+1)*r.TopK], weights[t*r.TopK:(t+1)*r.TopK]
		for k := range r.TopK {
			best := -1
			for i := range e {
				if allowed[i] && (best < 0 || biased[i] > biased[best]) {
					best = i // strict >: the first (smallest) index wins ties
				}
			}
			allowed[best] = false
			tid[k] = int32(best)
			sum += scores[best]
		}
		for k := range r.TopK {
			w := scores[tid[k]]
			if r.Renormalize && sum > 0 {
				w /= sum
			}
			if r.RoutedScalingFactor != 0 {
				w *= r.RoutedScalingFactor
			}
			tw[k] = float32(w)
		}
	}
	return nil
}

func (r *Router) score(dst []float64, logits []float32) {
	if r.Scoring == ScoringSigmoid {
		for i, l := range logits {
			dst[i] = 1 / (1 + math.Exp(-float64(l)))
		}
		return
	}
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	sum := 0.0
	for i, l := range logits {
		dst[i] = math.Exp(float64(l) - mx)
		sum += dst[i]
	}
	for i := range dst {
		dst[i] /= sum
	}
}

// maskGroups keeps only the experts of the TopKGroup groups with the largest
// sum of their top 2 biased scores (ties: smaller group index).
func (r *Router) maskGroups(allowed []bool, biased []float64) {
	size := r.NumExperts / r.NumGroups
	gs := make([]float64, r.NumGroups)
	for g := range gs {
		a, b := math.Inf(-1), math.Inf(-1)
		for _, v := range biased[g*size : (g+1)*size] {
			if v > a {
				a, b = v, a
			} else if v > b {
				b = v
			}
		}
		if size == 1 {
			b = 0
		}
		gs[g] = a + b
	}
	keep := make([]bool, r.NumGroups)
	for range r.TopKGroup {
		best := -1
		for g := range gs {
			if !keep[g] && (best < 0 || gs[g] > gs[best]) {
				best = g
			}
		}
		keep[best] = true
	}
	for i := range allowed {
		allowed[i] = keep[i/size]
	}
}
