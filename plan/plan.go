package plan

import (
	"fmt"

	"kimimoe/internal/checked"

	"kimimoe/moe"
)

// Deployment is how a model is spread over GPUs for prefill.
type Deployment struct {
	TP          int `json:"tp"`
	EP          int `json:"ep"`
	DP          int `json:"dp"`
	PP          int `json:"pp"`
	Nodes       int `json:"nodes"`         // 0: not checked
	GPUsPerNode int `json:"gpus_per_node"` // 0: not checked
	Tokens      int `json:"tokens"`        // tokens per prefill step (chunk)
	DTypeBytes  int `json:"dtype_bytes"`   // bytes per element of the reduced activations (bf16: 2)
}

// ExpertMapping is the result of mapping experts to ranks.
type ExpertMapping struct {
	MoETPSize        int      `json:"moe_tp_size"`
	LocalExperts     int      `json:"local_experts"`
	IntermediateEach int      `json:"intermediate_each"` // N / moe_tp_size: each rank's slice of an expert's intermediate
	Ranges           [][2]int `json:"ranges"`            // Ranges[r] = [lo, hi) global experts of EP rank r
}

// Collective is one kind of collective of a prefill step.
type Collective struct {
	Name         string  `json:"name"`
	Op           string  `json:"op"`            // all-reduce
	Count        int     `json:"count"`         // per step per rank (this stage)
	Width        int     `json:"width"`         // elements per token
	MessageBytes int64   `json:"message_bytes"` // tokens * width * dtype bytes
	StepBytes    int64   `json:"step_bytes"`    // Count * MessageBytes
	Share        float64 `json:"share"`
}

// RingAlternative is one way to feed MLA from the TP-partial hidden.
type RingAlternative struct {
	Name      string  `json:"name"`
	Formula   string  `json:"formula"`
	Units     int     `json:"units"`      // elements per token moved per rank (ring factor ignored)
	Change    float64 `json:"change"`     // relative to the plain hidden all-reduce
	RankBytes int64   `json:"rank_bytes"` // per rank per collective point: Units * tokens * dtype * (n-1)/n
}

// Plan is the full result.
type Plan struct {
	Model        string            `json:"model"`
	Deployment   Deployment        `json:"deployment"`
	Mapping      ExpertMapping     `json:"mapping"`
	Stages       []StagePlan       `json:"stages"`
	Alternatives []RingAlternative `json:"alternatives"`
}

// StagePlan is one pipeline stage's collectives.
type StagePlan struct {
	Stage       int          `json:"stage"`
	Layers      [2]int       `json:"layers"` // [first, last) layer
	Collectives []Collective `json:"collectives"`
	Total       Collective   `json:"total"` // sums
}

// Validate checks the deployment's sizes.
func (d Deployment) Validate() error {
	if d.TP < 1 || d.EP < 1 || d.DP < 1 || d.PP < 1 {
		return fmt.Errorf("%w: tp %d, ep %d, dp %d, pp %d must be positive", moe.ErrParallel, d.TP, d.EP, d.DP, d.PP)
	}
	if d.Tokens < 1 || d.DTypeBytes < 1 {
		return fmt.Errorf("%w: tokens %d and dtype bytes %d must be positive", moe.ErrParallel, d.Tokens, d.DTypeBytes)
	}
	gpus, ok := checked.Mul(d.TP, d.PP)
	if !ok {
		return fmt.Errorf("%w: tp %d x pp %d GPUs overflows", moe.ErrParallel, d.TP, d.PP)
	}
	if _, ok := checked.Mul(d.EP, d.DP); !ok {
		return fmt.Errorf("%w: ep %d x dp %d overflows", moe.ErrParallel, d.EP, d.DP)
	}
	if d.Nodes < 0 || d.GPUsPerNode < 0 {
		return fmt.Errorf("%w: nodes %d and GPUs per node %d must not be negative", moe.ErrParallel, d.Nodes, d.GPUsPerNode)
	}
	if d.Nodes > 0 || d.GPUsPerNode > 0 {
		have, ok := checked.Mul(d.Nodes, d.GPUsPerNode)
		if !ok {
			return fmt.Errorf("%w: %d nodes x %d GPUs per node overflows", moe.ErrParallel, d.Nodes, d.GPUsPerNode)
		}
		if have != gpus {
			return fmt.Errorf("%w: %d nodes x %d GPUs = %d GPUs, but tp %d x pp %d needs %d", moe.ErrParallel,
				d.Nodes, d.GPUsPerNode, have, d.TP, d.PP, gpus)
		}
	}
	return nil
}

// MapExperts computes the expert mapping of m under d.
func MapExperts(m Model, d Deployment) (ExpertMapping, error) {
	tp, err := moe.MoETPSize(d.TP, d.EP, d.DP)
	if err != nil {
		return ExpertMapping{}, err
	}
	local, err := moe.LocalExperts(m.NumExperts, d.EP)
	if err != nil {
		return ExpertMapping{}, err
	}
	if m.N%tp != 0 {
		return ExpertMapping{}, fmt.Errorf("%w: intermediate %d does not divide over moe_tp_size %d", moe.ErrParallel, m.N, tp)
	}
	em := ExpertMapping{MoETPSize: tp, LocalExperts: local, IntermediateEach: m.N / tp}
	for r := range d.EP {
		lo, hi := moe.EP{Size: d.EP, Rank: r}.LocalRange(local)
		em.Ranges = append(em.Ranges, [2]int{lo, hi})
	}
	return em, nil
}

// Make computes the plan of model m under deployment d.
func Make(m Model, d Deployment) (*Plan, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	em, err := MapExperts(m, d)
	if err != nil {
		return nil, err
	}
	// Every byte count below is at most tokens x dtype x (the widest
	// message) x (collectives per step) x tp: refuse what would overflow.
	widest := 2*m.Hidden + m.MLALatent() + m.K + m.SharedExpertWidth
	if _, ok := checked.Mul(d.Tokens, d.DTypeBytes, widest, m.NumLayers+2, d.TP); !ok {
		return nil, fmt.Errorf("%w: %d tokens of %d-byte elements overflow the byte counts of %s", moe.ErrParallel, d.Tokens, d.DTypeBytes, m.Name)
	}
	if m.NumLayers < d.PP {
		return nil, fmt.Errorf("%w: %d layers over pp %d", moe.ErrParallel, m.NumLayers, d.PP)
	}
	p := &Plan{Model: m.Name, Deployment: d, Mapping: em}
	per := (m.NumLayers + d.PP - 1) / d.PP
	for s := range d.PP {
		lo, hi := s*per, min((s+1)*per, m.NumLayers)
		p.Stages = append(p.Stages, stagePlan(m, d, s, lo, hi))
	}
	p.Alternatives = alternatives(m, d)
	return p, nil
}

func stagePlan(m Model, d Deployment, stage, lo, hi int) StagePlan {
	dense := max(0, min(hi, m.FirstKDenseReplace)-lo)
	moeLayers := (hi - lo) - dense
	hidden := (hi - lo) + dense // one o_proj per layer, one MLP per dense layer
	hiddenName := "attention o_proj + dense MLP"
	if stage == 0 {
		hidden++ // the embedding
		hiddenName = "embedding + attention o_proj + dense MLP"
	}
	mk := func(name string, count, width int) Collective {
		msg := int64(d.Tokens) * int64(width) * int64(d.DTypeBytes)
		return Collective{Name: name, Op: "all-reduce", Count: count, Width: width, MessageBytes: msg, StepBytes: int64(count) * msg}
	}
	cs := []Collective{
		mk(hiddenName, hidden, m.Hidden),
		mk("MoE routed latent + shared expert", moeLayers, m.K+m.SharedExpertWidth),
	}
	total := Collective{Name: "total", Op: "all-reduce"}
	for _, c := range cs {
		total.Count += c.Count
		total.StepBytes += c.StepBytes
	}
	for i := range cs {
		if total.StepBytes > 0 {
			cs[i].Share = float64(cs[i].StepBytes) / float64(total.StepBytes)
		}
	}
	total.Share = 1
	return StagePlan{Stage: stage, Layers: [2]int{lo, hi}, Collectives: cs, Total: total}
}

func alternatives(m Model, d Deployment) []RingAlternative {
	h, l := m.Hidden, m.MLALatent()
	alts := []RingAlternative{
		{Name: "hidden all-reduce (today)", Formula: "2H", Units: 2 * h},
		{Name: "DeepSeek: hidden reduce-scatter + latent all-gather", Formula: "H + L", Units: h + l},
		{Name: "Kimi-K3: keep full hidden for gate/KDA + latent all-gather", Formula: "2H + L", Units: 2*h + l},
	}
	n := d.TP
	for i := range alts {
		alts[i].Change = float64(alts[i].Units)/float64(alts[0].Units) - 1
		alts[i].RankBytes = int64(alts[i].Units) * int64(d.Tokens) * int64(d.DTypeBytes) * int64(n-1) / int64(n)
	}
	return alts
}
