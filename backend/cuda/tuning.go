package cuda

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"kimimoe/backend"
	"kimimoe/moe"
)

// Tuning overrides the launch policy (policy.go) of a layer, to measure
// the alternatives the policy chose between; the zero value is the
// policy. It is the only override: the command maps its --tune flag onto
// it (ParseTuning) and a layer takes it with SetTuning. No setting
// changes a result bit: every path rounds alike (doc.go).
type Tuning struct {
	DecodeMaxM    int  // largest M on the decode path; 0: policy (decodeMaxM); -1: only where the shape needs it
	FP4MaxM       int  // largest M on the wgmma-fp4 GEMMs; 0: policy (every M); -1: never
	WGMMAMinM     int  // smallest M on the wgmma GEMMs (BF16 weights); 0: policy (wgMinM)
	NoWGMMA       bool // the mma.sync GEMMs where the policy picks the wgmma ones
	FP4Tile       int  // the wgmma-fp4 token tile, one of f4Tiles; 0: by M (f4TileTokens)
	FP4FitMaxM    int  // most tokens on the fitted-N instances; 0: policy; -1: never
	FP4ActMinM    int  // fewest tokens whose activation runs as a kernel of its own; 0: policy
	FP4ActMaxM    int  // most such tokens; 0: policy; -1: never
	ActByTileMaxM int  // most tokens whose activation kernel runs by tile; 0: policy; -1: never
	ActCTAsSM     int  // the activation kernel's grid over the rows, CTAs an SM; 0: policy (actCTAsSM)
	RouteManyMaxM int  // most tokens on the one-launch kmoe_route_x_many prologue; 0: policy; -1: never
	NoFP4Sync     bool // the small tiles on the wgmma loop, not the barrier-free mma.sync loop
	NoPDL         bool // no programmatic dependent launch on the wgmma-fp4 path
	NoTileReady   bool // GEMM2 waits for all of GEMM1, not its own tile's CTAs
	NoW3          bool // GEMM1 in two warpgroups where the policy picks three
	NoW3Gemm2     bool // GEMM2 so
	NoRing        bool // the three-warpgroup GEMMs meet at a CTA barrier each k step, not on their stages' mbarriers
	W3FitMaxM     int  // most tokens whose ring GEMMs run at the tile's tokens (Plan.FP4.W3Fit); 0: policy; -1: never
	W3SpareMax    int  // most warpgroups in 100 a three-warpgroup GEMM's grid leaves spare; 0: policy (w3SparePctDefault); -1: none
	Flush         Flush
}

// Flush is how a timed forward's L2 flush is done (TimeForward).
type Flush int

const (
	FlushRead  Flush = iota // a 256 MB read before each timed forward (the default)
	FlushWrite              // a 256 MB rewrite, triton.testing.do_bench's flush
	FlushNone               // none: the events around the launch on an idle device
)

// String says what the mode does before a timed forward's start event.
func (f Flush) String() string {
	switch f {
	case FlushWrite:
		return "L2 flushed by a 256 MB rewrite before each (--tune flush=write)"
	case FlushNone:
		return "no L2 flush, the events around the launch on an idle device (--tune flush=none)"
	}
	return "L2 flushed by a 256 MB read before each"
}

// tuningKey is one of ParseTuning's keys and the field it sets.
type tuningKey struct {
	key, help string
	field     func(t *Tuning) any // *int or *bool (set by "off") or *Flush
}

// tuningKeys are ParseTuning's keys, in String's order.
var tuningKeys = []tuningKey{
	{"decode-max-m", "largest M on the decode path (-1: only where the shape needs it)", func(t *Tuning) any { return &t.DecodeMaxM }},
	{"fp4-max-m", "largest M on the wgmma-fp4 GEMMs (-1: never)", func(t *Tuning) any { return &t.FP4MaxM }},
	{"wgmma-min-m", "smallest M on the wgmma GEMMs", func(t *Tuning) any { return &t.WGMMAMinM }},
	{"wgmma", "off: the mma.sync GEMMs instead of wgmma", func(t *Tuning) any { return &t.NoWGMMA }},
	{"fp4-tile", "the wgmma-fp4 token tile, forced", func(t *Tuning) any { return &t.FP4Tile }},
	{"fp4-fit-max-m", "most M on the fitted-N instances (-1: never)", func(t *Tuning) any { return &t.FP4FitMaxM }},
	{"fp4-act-min-m", "fewest M with the activation as a kernel of its own", func(t *Tuning) any { return &t.FP4ActMinM }},
	{"fp4-act-max-m", "most such M (-1: never)", func(t *Tuning) any { return &t.FP4ActMaxM }},
	{"act-by-tile-max-m", "most M whose activation kernel runs by tile (-1: never)", func(t *Tuning) any { return &t.ActByTileMaxM }},
	{"act-ctas-sm", "the activation kernel's CTAs an SM, over the rows", func(t *Tuning) any { return &t.ActCTAsSM }},
	{"route-many-max-m", "most M on the one-launch routing prologue (-1: never)", func(t *Tuning) any { return &t.RouteManyMaxM }},
	{"fp4-sync", "off: the small tiles on the wgmma loop", func(t *Tuning) any { return &t.NoFP4Sync }},
	{"pdl", "off: no programmatic dependent launch", func(t *Tuning) any { return &t.NoPDL }},
	{"tile-ready", "off: GEMM2 waits for all of GEMM1", func(t *Tuning) any { return &t.NoTileReady }},
	{"gemm1-w3", "off: GEMM1 in two warpgroups, not three", func(t *Tuning) any { return &t.NoW3 }},
	{"gemm2-w3", "off: GEMM2 in two warpgroups, not three", func(t *Tuning) any { return &t.NoW3Gemm2 }},
	{"w3-ring", "off: the three-warpgroup GEMMs meet at a barrier each k step", func(t *Tuning) any { return &t.NoRing }},
	{"w3-fit-max-m", "most M whose ring GEMMs run at the tile's tokens (-1: never)", func(t *Tuning) any { return &t.W3FitMaxM }},
	{"w3-spare-max", "most warpgroups in 100 a three-warpgroup GEMM leaves spare (-1: none)", func(t *Tuning) any { return &t.W3SpareMax }},
	{"flush", "the timing's L2 flush: read, write or none", func(t *Tuning) any { return &t.Flush }},
}

// TuningHelp lists ParseTuning's keys, one a line.
func TuningHelp() string {
	var b strings.Builder
	for _, k := range tuningKeys {
		fmt.Fprintf(&b, "  %-18s %s\n", k.key, k.help)
	}
	return b.String()
}

// ParseTuning reads "key=value,key=value" (TuningHelp lists the keys; ""
// is the zero Tuning). A bad key or value is an error wrapping
// backend.ErrUnsupported that names it.
func ParseTuning(s string) (Tuning, error) {
	var t Tuning
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		key, val, ok := strings.Cut(kv, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		i := slices.IndexFunc(tuningKeys, func(k tuningKey) bool { return k.key == key })
		if !ok || i < 0 {
			return Tuning{}, fmt.Errorf("%w: --tune %q: not key=value with a key of:\n%s", backend.ErrUnsupported, kv, TuningHelp())
		}
		if seen[key] {
			return Tuning{}, fmt.Errorf("%w: --tune: %s given twice", backend.ErrUnsupported, key)
		}
		seen[key] = true
		bad := func() (Tuning, error) {
			return Tuning{}, fmt.Errorf("%w: --tune %s=%q: %s", backend.ErrUnsupported, key, val, tuningKeys[i].help)
		}
		switch p := tuningKeys[i].field(&t).(type) {
		case *int:
			n, err := strconv.Atoi(val)
			if err != nil || n < -1 || n == 0 || n > tuningMax(key) {
				return bad()
			}
			*p = n
		case *bool:
			if val != "off" && val != "on" {
				return bad()
			}
			*p = val == "off"
		case *Flush:
			f, ok := map[string]Flush{"read": FlushRead, "write": FlushWrite, "none": FlushNone}[val]
			if !ok {
				return bad()
			}
			*p = f
		}
	}
	return t, t.check()
}

// tuningMax is the largest value key takes: a percentage for
// w3-spare-max, the 32 CTAs an SM can hold for act-ctas-sm, and for the
// token counts a bound past any M, so that no product overflows.
func tuningMax(key string) int {
	switch key {
	case "w3-spare-max":
		return 100
	case "act-ctas-sm":
		return 32
	}
	return 1 << 30
}

// check refuses values no policy could take.
func (t Tuning) check() error {
	if t.FP4Tile != 0 && !slices.Contains(f4Tiles, t.FP4Tile) {
		return fmt.Errorf("%w: the wgmma-fp4 tile %d is not one of %v", backend.ErrUnsupported, t.FP4Tile, f4Tiles)
	}
	if t.WGMMAMinM < 0 || t.FP4ActMinM < 0 || t.FP4Tile < 0 || t.ActCTAsSM < 0 {
		return fmt.Errorf("%w: a smallest M, a tile or CTAs an SM of -1", backend.ErrUnsupported)
	}
	return nil
}

// String is t as ParseTuning reads it, only the fields set ("" for the
// policy).
func (t Tuning) String() string {
	var parts []string
	for _, k := range tuningKeys {
		switch p := k.field(&t).(type) {
		case *int:
			if *p != 0 {
				parts = append(parts, fmt.Sprintf("%s=%d", k.key, *p))
			}
		case *bool:
			if *p {
				parts = append(parts, k.key+"=off")
			}
		case *Flush:
			if *p != FlushRead {
				parts = append(parts, k.key+"="+[]string{"read", "write", "none"}[*p])
			}
		}
	}
	return strings.Join(parts, ",")
}

// WithTuning is b with t given to every layer it prepares (SetTuning): how
// a whole suite runs under one Tuning. A layer without SetTuning (another
// backend's) is an error wrapping backend.ErrUnsupported, unless t is the
// zero Tuning.
func WithTuning(b backend.Backend, t Tuning) backend.Backend { return tuned{b, t} }

type tuned struct {
	backend.Backend
	t Tuning
}

func (b tuned) Prepare(w *moe.Weights, spec moe.LayerSpec) (backend.Layer, error) {
	l, err := b.Backend.Prepare(w, spec)
	if err != nil || b.t == (Tuning{}) {
		return l, err
	}
	tl, ok := l.(interface{ SetTuning(Tuning) error })
	if !ok {
		return nil, errors.Join(fmt.Errorf("%w: --tune: backend %q has no launch tuning", backend.ErrUnsupported, b.Name()), l.Close())
	}
	if err := tl.SetTuning(b.t); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}
