package validation

import (
	"encoding/binary"
	"fmt"
	"kimimoe/moe"
	"math"
	"math/rand/v2"
	"slices"

	"kimimoe/activation"
	"kimimoe/mxfp"
)

// Routing selects how GenerateCase routes tokens.
type Routing uint8

const (
	RoutingUniform     Routing = iota // each token picks top-k distinct experts uniformly
	RoutingSkewed                     // Zipf-like: a few experts get most tokens
	RoutingEmptyExpert                // uniform, but one local expert gets no token
	RoutingMasked                     // uniform, then some slots set to -1
)

func (r Routing) String() string {
	return [...]string{"uniform", "skewed", "empty", "masked"}[r]
}

// CaseSpec describes a synthetic, seeded case.
type CaseSpec struct {
	Name         string
	M, K, N      int
	ELocal, TopK int
	EP           moe.EP
	Routing      Routing
	LocalSlots   int // > 0: exactly this many of each token's slots hit local experts (the rest other ranks')
	NonFinite    bool
	Biases       bool // FC1 and FC2 biases (GPT-OSS's), drawn with the weights
	Activation   activation.Kind
	Params       []activation.Params // nil: defaults
	Chain        moe.Chain
	Recipe       mxfp.Recipe
	Seed         uint64 // input and routing
	WeightSeed   uint64 // weights (cases sharing it and the shape share weights)
	SampleRows   int    // > 0: check only this many seeded rows against the oracle
}

// Shape formats the case's shape.
func (s *CaseSpec) Shape() string {
	ep := s.EP.Normalize()
	return fmt.Sprintf("M=%d K=%d N=%d E=%d top%d ep%d/%d", s.M, s.K, s.N, s.ELocal, s.TopK, ep.Rank, ep.Size)
}

// LayerSpec returns the spec the case runs with.
func (s *CaseSpec) LayerSpec() moe.LayerSpec {
	ps := s.Params
	if ps == nil {
		ps = []activation.Params{activation.DefaultParams()}
	}
	return moe.LayerSpec{Activation: s.Activation, Params: ps, Chain: s.Chain, Recipe: s.Recipe, EP: s.EP.Normalize()}
}

// Validate checks the spec; the zero CaseSpec is invalid, and the error
// names the first field that is wrong.
func (s *CaseSpec) Validate() error {
	bad := func(field string, format string, a ...any) error {
		return fmt.Errorf("validation: case %q: CaseSpec.%s %s", s.Name, field, fmt.Sprintf(format, a...))
	}
	switch {
	case s.M < 0:
		return bad("M", "= %d is negative", s.M)
	case s.K < 32 || s.K%32 != 0:
		return bad("K", "= %d, want a positive multiple of 32", s.K)
	case s.N < 32 || s.N%32 != 0:
		return bad("N", "= %d, want a positive multiple of 32", s.N)
	case s.ELocal < 1:
		return bad("ELocal", "= %d, want at least 1 local expert", s.ELocal)
	case s.TopK < 1:
		return bad("TopK", "= %d, want at least 1", s.TopK)
	case !s.Activation.Valid():
		return bad("Activation", "is %v, want a valid activation.Kind", s.Activation)
	case s.Chain < moe.ChainExact || s.Chain > moe.ChainMarlin:
		return bad("Chain", "is %v, want exact, mxfp8, flashinfer, bf16 or marlin", s.Chain)
	case s.Recipe != mxfp.RecipeFloor && s.Recipe != mxfp.RecipeRCeil:
		return bad("Recipe", "is %v, want floor or rceil", s.Recipe)
	case s.LocalSlots < 0:
		return bad("LocalSlots", "= %d is negative", s.LocalSlots)
	}
	global, err := s.EP.NumGlobal(s.ELocal)
	if err != nil {
		return fmt.Errorf("validation: case %q: CaseSpec.EP: %w", s.Name, err)
	}
	if s.TopK > global || s.LocalSlots > s.TopK || s.LocalSlots > s.ELocal || s.TopK-s.LocalSlots > global-s.ELocal && s.LocalSlots > 0 {
		return fmt.Errorf("validation: case %q: top-%d with %d local slots does not fit %d local of %d experts", s.Name, s.TopK, s.LocalSlots, s.ELocal, global)
	}
	if s.M > 0 && (s.M > math.MaxInt/s.K/4 || s.M > math.MaxInt/s.TopK) {
		return bad("M", "= %d overflows the case's sizes", s.M)
	}
	// Bounds far past any real layer, so that a mistyped size is an error
	// before an allocation instead of an out-of-memory death (or an
	// overflowed size and empty weights).
	switch {
	case s.M > MaxCaseTokens:
		return bad("M", "= %d, at most %d tokens", s.M, MaxCaseTokens)
	case global > MaxCaseExperts:
		return fmt.Errorf("validation: case %q: %d global experts, at most %d", s.Name, global, MaxCaseExperts)
	case float64(s.ELocal)*3*float64(s.N)*float64(s.K)*(0.5+1.0/32) > MaxCaseWeightBytes:
		return fmt.Errorf("validation: case %q: %d experts of K = %d, N = %d hold more than %d bytes of weights", s.Name, s.ELocal, s.K, s.N, int64(MaxCaseWeightBytes))
	}
	return nil
}

// Bounds of a generated case: 16M tokens, 2^20 global experts, 64 GiB of
// weights.
const (
	MaxCaseTokens      = 1 << 24
	MaxCaseExperts     = 1 << 20
	MaxCaseWeightBytes = float64(1 << 36)
)

// GenerateWeights makes random MXFP4 weights for spec: uniform random E2M1
// codes; E8M0 scales spread over three binades around a level chosen so that
// GEMM1 outputs have an RMS near 3 (where SiTU's gate is neither linear nor
// saturated) and expert outputs near 1, for x ~ N(0, 1).
// It returns an error for an invalid spec.
func GenerateWeights(s *CaseSpec) (*moe.Weights, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	w := moe.NewWeights(s.ELocal, s.N, s.K, s.Activation.IsGated())
	src := rand.NewChaCha8(seedBytes(s.WeightSeed, 0x77))
	src.Read(w.W31)
	src.Read(w.W2)
	// RMS of a uniform random E2M1 value: sqrt(mean of the 8 squares) = 2.93.
	const e2m1RMS = 2.926
	s1 := int(math.Round(math.Log2(3 / (e2m1RMS * math.Sqrt(float64(s.K))))))
	s2 := int(math.Round(math.Log2(1 / (4 * e2m1RMS * math.Sqrt(float64(s.N))))))
	fillScales(src, w.W31Scale, s1)
	fillScales(src, w.W2Scale, s2)
	if s.Biases {
		// N(0, 1) for FC1 (a third of GEMM1's RMS) and N(0, 1/4) for FC2
		// (a quarter of an expert's output): large enough that a bias
		// added twice, dropped or added to the wrong half fails the case.
		rng := rand.New(rand.NewPCG(s.WeightSeed, 0x62696173))
		w.W31Bias = make([]float32, w.E*w.Rows())
		w.W2Bias = make([]float32, w.E*w.K)
		for i := range w.W31Bias {
			w.W31Bias[i] = float32(rng.NormFloat64())
		}
		for i := range w.W2Bias {
			w.W2Bias[i] = float32(0.25 * rng.NormFloat64())
		}
	}
	return w, nil
}

func fillScales(src *rand.ChaCha8, dst []uint8, level int) {
	src.Read(dst)
	for i, b := range dst {
		dst[i] = uint8(level + 127 + int(b)%3 - 1)
	}
}

func seedBytes(seed uint64, salt byte) (b [32]byte) {
	binary.LittleEndian.PutUint64(b[:], seed)
	b[31] = salt
	return
}

// GenerateCase builds the case for spec, with weights w (from
// GenerateWeights for the same shape; nil to generate them).
func GenerateCase(s *CaseSpec, w *moe.Weights) (*Case, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if w == nil {
		var err error
		if w, err = GenerateWeights(s); err != nil {
			return nil, err
		}
	} else if w.E != s.ELocal || w.N != s.N || w.K != s.K || w.Gated != s.Activation.IsGated() {
		return nil, fmt.Errorf("validation: case %q: weights are E=%d N=%d K=%d gated=%v, the spec wants E=%d N=%d K=%d gated=%v",
			s.Name, w.E, w.N, w.K, w.Gated, s.ELocal, s.N, s.K, s.Activation.IsGated())
	}
	ep := s.EP.Normalize()
	global := s.ELocal * ep.Size
	rng := rand.New(rand.NewPCG(s.Seed, 0x6b696d69))
	in := moe.Input{M: s.M, TopK: s.TopK, X: make([]float32, s.M*s.K), TopKIDs: make([]int32, s.M*s.TopK), TopKWeights: make([]float32, s.M*s.TopK)}
	for i := range in.X {
		in.X[i] = float32(rng.NormFloat64())
	}
	if s.NonFinite {
		specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
		for t := range s.M {
			in.X[t*s.K+(t*37)%s.K] = specials[t%3]
		}
	}
	lo, _ := ep.LocalRange(s.ELocal)
	empty := int32(lo + s.ELocal/2)
	zipf := make([]float64, global)
	for i := range zipf {
		zipf[i] = 1 / math.Pow(float64(i+1), 1.5)
	}
	for t := range s.M {
		ids := in.TopKIDs[t*s.TopK : (t+1)*s.TopK]
		taken := map[int32]bool{}
		pick := func(ok func(int32) bool) int32 {
			for {
				var id int32
				if s.Routing == RoutingSkewed {
					id = int32(weightedPick(rng, zipf))
				} else {
					id = int32(rng.IntN(global))
				}
				if !taken[id] && ok(id) {
					taken[id] = true
					return id
				}
			}
		}
		isLocal := func(id int32) bool { _, ok := ep.Local(int64(id), s.ELocal); return ok }
		for k := range ids {
			switch {
			case s.LocalSlots > 0 && k < s.LocalSlots:
				ids[k] = pick(isLocal)
			case s.LocalSlots > 0:
				ids[k] = pick(func(id int32) bool { return !isLocal(id) })
			case s.Routing == RoutingEmptyExpert:
				ids[k] = pick(func(id int32) bool { return id != empty })
			default:
				ids[k] = pick(func(int32) bool { return true })
			}
		}
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		if s.Routing == RoutingMasked && (t%2 == 0 || t == s.M-1) {
			ids[(t/2)%s.TopK] = -1
		}
		wt := in.TopKWeights[t*s.TopK : (t+1)*s.TopK]
		sum := float32(0)
		for k := range wt {
			wt[k] = 0.05 + float32(0.95*rng.Float32())
			sum += wt[k]
		}
		for k := range wt {
			wt[k] /= sum
		}
	}
	return &Case{Name: s.Name, Weights: w, Spec: s.LayerSpec(), Input: in}, nil
}

func weightedPick(rng *rand.Rand, p []float64) int {
	total := 0.0
	for _, v := range p {
		total += v
	}
	x := rng.Float64() * total
	for i, v := range p {
		if x < v {
			return i
		}
		x -= v
	}
	return len(p) - 1
}

// SampleRows returns n distinct rows of [0, m) chosen with seed, sorted;
// all rows if n <= 0 or n >= m, none if m <= 0.
func SampleRows(m, n int, seed uint64) []int {
	if m <= 0 {
		return []int{}
	}
	rows := make([]int, m)
	for i := range rows {
		rows[i] = i
	}
	if n <= 0 || n >= m {
		return rows
	}
	rng := rand.New(rand.NewPCG(seed, 0x726f7773))
	rng.Shuffle(m, func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	rows = rows[:n]
	slices.Sort(rows)
	return rows
}
