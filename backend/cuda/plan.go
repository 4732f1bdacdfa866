package cuda

import (
	"fmt"
	"strings"
)

// Path is the family of kernels a forward runs.
type Path int

const (
	PathDecode  Path = iota // weights streamed, tokens on the MMA's narrow side
	PathGrouped             // token tiles on the mma.sync grouped GEMMs, MXFP4 weights as given
	PathWGMMA               // token tiles on the warpgroup MMA, weights stored as BF16
	PathFP4                 // the same with the MXFP4 weights widened to BF16 in registers
	numPaths
)

func (p Path) String() string {
	return [...]string{"decode", "grouped", "wgmma", "wgmma-fp4"}[p]
}

// bf16Operands reports whether the path's GEMMs take x and the
// intermediate as BF16 (the two wgmma paths), so x's values must be BF16 values.
func (p Path) bf16Operands() bool { return p == PathWGMMA || p == PathFP4 }

// Loop is the wgmma-fp4 GEMMs' k-loop.
type Loop int

const (
	LoopWGMMA  Loop = iota // wgmma at the tile's N
	LoopFitted             // wgmma at the tile's tokens rounded up to 8
	LoopSync               // the small tiles' barrier-free mma.sync loop
)

func (l Loop) String() string {
	return [...]string{"wgmma loop", "fitted wgmma loop", "mma.sync loop"}[l]
}

// Prologue is how a grouped forward prepares x and routes the entries.
type Prologue int

const (
	PrologueQuantize Prologue = iota // memset, quantize_x (float x only), route_count, route_scatter
	PrologueBF16                     // memset, x_bf16, route_count, route_scatter
	PrologueOneCTA                   // route_x_bf16: one launch, one routing CTA (up to abiRouteCTAMax entries)
	PrologueMany                     // route_x_many: one launch, a routing CTA an expert
)

func (p Prologue) steps() []string {
	switch p {
	case PrologueBF16:
		return []string{"memset", "x_bf16", "route_count", "route_scatter"}
	case PrologueOneCTA:
		return []string{"route_x_bf16"}
	case PrologueMany:
		return []string{"route_x_many"}
	}
	return []string{"memset", "quantize_x", "route_count", "route_scatter"}
}

// Plan is the launch plan of one forward: chosen once per (layer, M, x's
// range) by choosePlan from the shape, the device and the layer's Tuning,
// and executed as it is (steps.go); nothing re-decides it.
type Plan struct {
	M, TopK  int
	Path     Path
	Wide     bool     // x has values BF16 does not hold: the mma.sync GEMMs where the shape picks a BF16 path
	Tile     int      // tokens a tile (0 on decode)
	Tiles    int      // the grouped GEMMs' grid rows: the most tiles any routing makes
	Prologue Prologue // grouped paths
	Steps    []string // the launches, in order (Profile's names)
	// One part a path, set where the plan takes that path.
	Decode DecodePlan
	WGMMA  WGMMAPlan
	FP4    FP4Plan
}

// DecodePlan is the decode path's part of a Plan.
type DecodePlan struct {
	Subtiles int // 8-token subtiles a pass
}

// WGMMAPlan is the wgmma path's part of a Plan.
type WGMMAPlan struct {
	Rows [2]int // GEMM1's and GEMM2's weight rows a tile
}

// FP4Plan is the wgmma-fp4 path's part of a Plan.
type FP4Plan struct {
	Loop        Loop // the k-loop
	Deep2       bool // GEMM2's deep 8-token variant
	PDL         bool // programmatic dependent launch
	ActKernel   bool // the activation as a kernel of its own
	ActByTile   bool // ... by tile, beside GEMM1's last tiles
	ActCTAs     int  // ... over the grid: its grid's CTAs an SM (at most)
	ActResident int  // ... and how many an SM holds at once (0: not known)
	W3          bool // GEMM1 in three warpgroups (kmoe_f4_gemm1_w3_t128), the activation kernel after it
	W3Gemm2     bool // GEMM2 in three warpgroups (kmoe_f4_gemm2_w3_t128)
	Ring        bool // the three-warpgroup GEMMs' stages on mbarriers, no CTA barrier a step (the _w3r_ kernels)
	W3Fit       bool // ... their wgmmas at the tile's tokens rounded up to f4W3FitStep (the _w3rf_ kernels)
	TileReady   bool // GEMM2 waits for its tile's producers, not all of them
}

// w3Loop is the k loop the plan's three-warpgroup GEMMs run.
func (p FP4Plan) w3Loop() f4W3Loop {
	switch {
	case p.W3Fit:
		return f4W3RingFit
	case p.Ring:
		return f4W3Ring
	}
	return f4W3Barrier
}

// String describes the plan in one line, as kimimoe bench prints it.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "M=%d %s", p.M, p.Path)
	if p.Wide {
		b.WriteString(" (x outside BF16)")
	}
	switch p.Path {
	case PathDecode:
		fmt.Fprintf(&b, ", %d subtile(s)", p.Decode.Subtiles)
	case PathWGMMA:
		fmt.Fprintf(&b, ", tile %d, rows %d/%d", p.Tile, p.WGMMA.Rows[0], p.WGMMA.Rows[1])
	case PathGrouped:
		fmt.Fprintf(&b, ", tile %d", p.Tile)
	case PathFP4:
		fmt.Fprintf(&b, ", tile %d, %s", p.Tile, p.FP4.Loop)
		for _, f := range []struct {
			on   bool
			what string
		}{{p.FP4.Deep2, "deep GEMM2"}, {p.FP4.PDL, "PDL"}, {p.FP4.TileReady, "tile-ready"}, {p.FP4.ActByTile, "activation by tile"}, {p.FP4.W3, "GEMM1 in three warpgroups"}, {p.FP4.W3Gemm2, "GEMM2 in three warpgroups"}, {p.FP4.Ring, "stage ring"}, {p.FP4.W3Fit, "fitted to the tile"}} {
			if f.on {
				b.WriteString(", " + f.what)
			}
		}
	}
	if p.FP4.ActCTAs > 0 {
		fmt.Fprintf(&b, ", activation kernel %d CTAs an SM", p.FP4.ActCTAs)
		if p.FP4.ActResident > 0 {
			fmt.Fprintf(&b, " (%d resident)", p.FP4.ActResident)
		}
	}
	if p.Tiles > 0 {
		fmt.Fprintf(&b, ", %d tile rows", p.Tiles)
	}
	b.WriteString(": " + strings.Join(p.Steps, " > "))
	return b.String()
}
