package cuda

import (
	"kimimoe/backend/cuda/internal/layout"
	"math"
	"slices"
)

// The launch policy: every threshold that decides which kernels a forward
// runs, and choosePlan, which applies them once per (layer, M). The
// numbers are where the neighbouring choices measured even on the H200
// (docs/PERF.md); a Tuning overrides each one to measure it again.

// decodeMaxM is the largest token count on the decode path (for shapes
// the grouped path runs; K or N not a multiple of abiStageK always take
// it): up to there every SM streaming a slice of the weights beats tiles
// of tokens, which have too few tokens to share a weight load.
const decodeMaxM = 24

// wgMinM is the smallest token count whose grouped forward runs the wgmma
// GEMMs on BF16 weights. Below it the mma.sync GEMMs, which read the
// weights as MXFP4 (a quarter of the BF16 bytes), are faster while the
// weight bytes dominate; from here the wgmma's rate does.
const wgMinM = 192

// The wgmma-fp4 GEMMs, reading a quarter of the BF16 weight bytes and
// staging tokens as the wgmma GEMMs do, were the faster at every M
// measured, so they take every M where they are available (before the
// decode path).
const f4MaxMDefault = math.MaxInt32

// tileTokens is the mma.sync GEMMs' token tile: 64 (two CTAs an SM) up to
// 512 tokens, 128 (each weight load reused by twice the tokens) above.
func tileTokens(m int) int {
	if m <= 512 {
		return abiTileSmall
	}
	return abiTileLarge
}

// f4TileTokens is the wgmma-fp4 GEMMs' token tile (the wgmma's N) for m
// tokens: the smallest that holds about one expert's tokens at the most
// CTAs an SM (with the bench's routing an expert gets about 0.29 M
// tokens; 48 tokens run three CTAs an SM where 64's run two), and the
// 128-token tile where its GEMMs run in three warpgroups (w3: f4W3Fits)
// and its tiles beat the 64-token tile's (f4T128Band, f4W3T128MinM).
func f4TileTokens(m int, w3 bool) int {
	switch {
	case m <= 24:
		return 8
	case m <= f4SyncMaxM:
		return 16
	case m <= 88:
		return 32
	case m <= 144:
		return 48
	case m < f4T128Band[0]:
		return 64
	case w3 && m < f4T128Band[1]:
		return 128
	case w3 && m < f4W3T128MinM, !w3 && m < f4T128MinM:
		return 64
	}
	return 128
}

// f4T128MinM is the fewest tokens on the 128-token tile (one CTA an SM)
// where its GEMMs run in two warpgroups, where a weight's widening serves
// twice the 64-token tile's tokens: 256 tokens an expert at the bench's
// routing. From there the 128-token tile was as fast as the 64-token one
// on the Kimi bench (before the three-warpgroup kernels) and faster on
// GPT-OSS-120B's layer. The 256-token tile was slower than 128 at every M
// measured, so only a Tuning takes it.
const f4T128MinM = 896

// With both GEMMs in three warpgroups on the ring, each tile's wgmmas at
// its tokens (Plan.FP4.W3Fit), the 128-token tile and the 64-token one trade
// places as the tokens an expert gets fill whole tiles of either: the
// 128-token tile takes f4T128Band and from f4W3T128MinM up, the 64-token
// one below the band and between, each bound the midpoint between the M
// measured on either side (the sweep in docs/PERF.md, prefill).
var f4T128Band = [2]int{240, 480}

const f4W3T128MinM = 544

// w3FitMaxMDefault is the most tokens whose three-warpgroup ring GEMMs
// run each tile's wgmmas at its tokens rounded up to f4W3FitStep (the
// kernels with one loop per N, Plan.FP4.W3Fit).
const w3FitMaxMDefault = math.MaxInt32

// w3SparePctDefault is the most warpgroups in 100 that a three-warpgroup
// GEMM's grid may leave spare (f4W3Spare): Kimi's K = 3584 leaves one of
// 57, GPT-OSS's padded 2944 one of 93 in GEMM1 and two of 48 in GEMM2,
// and GPT-OSS-120B's forward is faster with both GEMMs so than with
// neither (docs/PERF.md has the A/B).
const w3SparePctDefault = 5

// f4W3Fits reports whether GEMM1 runs in three warpgroups on the
// 128-token tile at intermediate size n: its padded N / 32 row groups in
// 96-feature CTAs leave at most pct in 100 of their warpgroups spare.
func f4W3Fits(n, pct int) bool { return f4W3Spare(layout.PadTo(n)/32, pct) }

// f4W3Gemm2Fits is f4W3Fits for GEMM2 at hidden size k: padded K / 64
// row groups in 192-feature CTAs.
func f4W3Gemm2Fits(k, pct int) bool { return f4W3Spare(layout.PadTo(k)/64, pct) }

// f4SyncMaxM is the most tokens on the small tiles (f4sTiles), whose
// GEMMs run the barrier-free mma.sync loop.
const f4SyncMaxM = 36

// f4FitMaxMDefault is the most tokens on the fitted instances (wgmma at
// the tile's tokens rounded up to 8): they won at 512, lost at 1024.
const f4FitMaxMDefault = 512

// f4sDeepMaxM is the most tokens on GEMM2's deep 8-token variant: at M=1
// its grid fills under two CTAs an SM, and only deeper streams keep the
// memory busy; from M=2 the grid is large enough without it.
const f4sDeepMaxM = 1

// f4TileReadyMinM is the fewest tokens whose wgmma-fp4 GEMM2 waits for
// its own tile's GEMM1 CTAs (tile_wait) instead of the whole GEMM1 grid,
// so that it starts in GEMM1's last wave; at M=1 GEMM1 is one wave.
const f4TileReadyMinM = 2

// f4ActMinMDefault and f4ActMaxMDefault bound the token counts whose
// GEMM1 activation and requantization run as a kernel of their own
// (kmoe_act_requant): taking the activation's straight-line code out of
// GEMM1 pays from the 48-token tiles up and costs more below. Its input,
// GEMM1's float32 up and gate, takes 8 bytes an entry and feature (3.2 GB
// at M=8192, top-16, Kimi shape): the upper bound keeps it bounded.
// actCTAsSM bounds its grid, CTAs an SM (Plan.FP4.ActCTAs): 5, 10 and 15
// measured within noise of 8 at M = 1024 to 8192 (docs/PERF.md).
const (
	f4ActMinMDefault = 89
	f4ActMaxMDefault = 8192
	actCTAsSM        = 8
)

// actByTileMaxMDefault is the most tokens whose activation kernel runs by
// tile (a CTA a row of a routing tile, beside GEMM1's last tiles): it pays
// while a wave of tiles is short; with many tiles the waits cost more.
const actByTileMaxMDefault = 192

// routeManyMaxMDefault is the most tokens whose prologue, above
// abiRouteCTAMax entries, is the one launch of kmoe_route_x_many rather
// than four; three launch gaps fewer was faster up to 512 tokens and no
// slower above, so it takes every M up to this bound (above it, the four
// launches).
const routeManyMaxMDefault = 8192

// The wgmma-fp4 thresholds on M were measured on the Kimi EP32 rank-7
// bench, whose routing gives each of the 28 local experts kimiPerExpert
// tokens a token (8 of 16 slots local). What they stand for is tokens an
// expert, which fill the tiles; a layer whose slots are all local (one
// rank: GPT-OSS's 128 experts at top-4 get 1/32 of a token each) takes
// them at the M giving its experts as many tokens (f4EquivM).
const kimiPerExpert = 8.0 / 28

// f4EquivM is the token count at the Kimi bench that gives its experts as
// many tokens each as m tokens give this layer's: m itself for an
// expert-parallel layer (its local share is the router's to decide; the
// thresholds keep the bench's), m x topk / e / kimiPerExpert for one whose
// slots are all local.
func f4EquivM(s planShape) int {
	if !s.allLocal {
		return s.m
	}
	return max(1, int(math.Round(float64(s.m)*float64(s.topk)/float64(s.e)/kimiPerExpert)))
}

// planShape is what a plan is chosen from: the forward's shape, what the
// layer has on the device, and the tuning.
type planShape struct {
	m, topk, k, n, e int
	allLocal         bool   // one rank: every slot's expert is local
	wg, f4           bool   // the wgmma and wgmma-fp4 weights are on the device
	wgRows           [2]int // the wgmma GEMMs' weight rows a tile
	wide             bool   // x has MXFP8 values BF16 does not hold (layout.XOutsideBF16)
	bf16             bool   // the bf16 chain: x and the intermediate as BF16, which only the two wgmma paths run
	actResident      int    // the activation kernel's CTAs an SM holds at once (the driver's occupancy); 0: unknown
	tune             Tuning
}

// or is v where set (non-zero), else def; -1 maps to never (below every M).
func or(v, def int) int {
	switch v {
	case 0:
		return def
	case -1:
		return 0
	}
	return v
}

// choosePlan is the launch policy: it decides every launch of the forward.
func choosePlan(s planShape) Plan {
	t := s.tune
	p := Plan{M: s.m, TopK: s.topk}
	entries := s.m * s.topk
	decodeMax := decodeMaxM
	if t.DecodeMaxM != 0 {
		decodeMax = t.DecodeMaxM // -1: never where the shape allows the grouped path
	}
	switch {
	case s.bf16 && s.f4 && (s.m <= or(t.FP4MaxM, f4MaxMDefault) || !s.wg):
		p.Path = PathFP4 // the bf16 chain at every M, whatever DecodeMaxM says
	case s.bf16:
		p.Path = PathWGMMA // Prepare refuses the chain without either wgmma path
	case s.f4 && s.m <= or(t.FP4MaxM, f4MaxMDefault):
		p.Path = PathFP4
	case s.m <= decodeMax || s.k%abiStageK != 0 || s.n%abiStageK != 0:
		p.Path = PathDecode
	case s.wg && !t.NoWGMMA && s.m >= or(t.WGMMAMinM, wgMinM):
		p.Path = PathWGMMA
	default:
		p.Path = PathGrouped
	}
	if s.wide && !s.bf16 && p.Path.bf16Operands() {
		p.Path, p.Wide = PathGrouped, true
		if s.k%abiStageK != 0 || s.n%abiStageK != 0 {
			p.Path = PathDecode // the grouped GEMMs' whole 128-k steps; decode pads
		}
	}
	switch p.Path {
	case PathDecode:
		p.Decode.Subtiles = 4
		if s.m <= 8 {
			p.Decode.Subtiles = 1
		} else if s.m <= 16 {
			p.Decode.Subtiles = 2
		}
		p.Steps = []string{"prologue", "gemm1_act", "gemm2", "finalize"}
		return p
	case PathGrouped:
		p.Tile = tileTokens(s.m)
	case PathWGMMA:
		p.Tile, p.WGMMA.Rows = abiWGTokens, s.wgRows
	case PathFP4:
		em := f4EquivM(s) // the tile-sized thresholds, by tokens an expert
		spare := or(t.W3SpareMax, w3SparePctDefault)
		p.Tile = f4TileTokens(em, f4W3Fits(s.n, spare))
		if t.FP4Tile != 0 {
			p.Tile = t.FP4Tile
		}
		p.FP4.Loop = LoopWGMMA
		if em <= or(t.FP4FitMaxM, f4FitMaxMDefault) && slices.Contains(f4FitTiles, p.Tile) {
			p.FP4.Loop = LoopFitted
		}
		if !t.NoFP4Sync && slices.Contains(f4sTiles, p.Tile) && f4sAddressable(p.Tile, s.m*layout.PadTo(s.k), entries*layout.PadTo(s.n)) { // the padded rows (fp4.Dims)
			p.FP4.Loop = LoopSync
			p.FP4.Deep2 = p.Tile == 8 && s.m <= f4sDeepMaxM
		}
		p.FP4.PDL = !t.NoPDL
		p.FP4.ActKernel = em >= or(t.FP4ActMinM, f4ActMinMDefault) && s.m <= or(t.FP4ActMaxM, f4ActMaxMDefault) // the upper bound is memory: M
		p.FP4.TileReady = s.m >= f4TileReadyMinM && !t.NoTileReady
		p.FP4.ActByTile = p.FP4.ActKernel && p.FP4.TileReady && em <= or(t.ActByTileMaxM, actByTileMaxMDefault)
		if p.FP4.ActKernel && !p.FP4.ActByTile {
			p.FP4.TileReady = false // GEMM2 waits for all of the activation kernel
			p.FP4.ActCTAs, p.FP4.ActResident = or(t.ActCTAsSM, actCTAsSM), s.actResident
		}
		// GEMM1 in three warpgroups: the 128-token tile's plain loop, its
		// up and gate for the activation kernel, few of its warpgroups spare.
		p.FP4.W3 = p.FP4.ActKernel && p.FP4.Loop == LoopWGMMA && p.Tile == f4W3Tile && f4W3Fits(s.n, spare) && !t.NoW3
		// GEMM2 so too where few of its warpgroups would idle.
		p.FP4.W3Gemm2 = p.FP4.Loop == LoopWGMMA && p.Tile == f4W3Tile && f4W3Gemm2Fits(s.k, spare) && !t.NoW3Gemm2
		// Their stages on mbarriers, so a warpgroup waits for its stage, not every other warpgroup.
		p.FP4.Ring = (p.FP4.W3 || p.FP4.W3Gemm2) && !t.NoRing
		// ... at the tile's tokens, so a part-filled tile pays the MMAs of its tokens only.
		p.FP4.W3Fit = p.FP4.Ring && em <= or(t.W3FitMaxM, w3FitMaxMDefault)
	}
	p.Tiles = maxTiles(entries, s.e, p.Tile)
	bf16 := p.Path.bf16Operands()
	switch {
	case bf16 && entries <= abiRouteCTAMax:
		p.Prologue = PrologueOneCTA
	case bf16 && s.m <= or(t.RouteManyMaxM, routeManyMaxMDefault):
		p.Prologue = PrologueMany
	case bf16:
		p.Prologue = PrologueBF16
	default:
		p.Prologue = PrologueQuantize
	}
	p.Steps = append(p.Prologue.steps(), "gemm1_act")
	if p.FP4.ActKernel {
		p.Steps = append(p.Steps, "act_requant")
	}
	p.Steps = append(p.Steps, "gemm2", "finalize")
	return p
}

// f4sAddressable reports whether the mma.sync loop's tile tt can address
// the token rows of both GEMMs, x [m, K] and the intermediate [entries, N]
// as BF16 (elements each). The 8-token tile finds a row's 16-byte pieces
// by a 32-bit count of 16-byte units (F4sPieces in the kernels), so each
// buffer must be under 64 GiB; past that (about 700,000 tokens at the
// Kimi shape, reached only with the tile forced) it runs the wgmma loop,
// with the same bits. The 16-token tile addresses rows in 64 bits.
func f4sAddressable(tt int, elems ...int) bool {
	if tt != 8 {
		return true
	}
	for _, n := range elems {
		if 2*uint64(n) >= 1<<36 {
			return false
		}
	}
	return true
}

// pathsUsed are the paths some forward's plan takes on shape s (its m and
// wide aside): a plan changes path only where M crosses a threshold, so
// looking on both sides of each, with x that BF16 holds and x that it
// does not, finds every one.
func pathsUsed(s planShape) (used [numPaths]bool) {
	t := s.tune
	decodeMax := decodeMaxM
	if t.DecodeMaxM != 0 {
		decodeMax = t.DecodeMaxM
	}
	ms := []int{1, math.MaxInt32}
	for _, th := range []int{decodeMax, or(t.FP4MaxM, f4MaxMDefault), or(t.WGMMAMinM, wgMinM)} {
		for _, m := range []int{th - 1, th, th + 1} {
			if m >= 1 && m <= math.MaxInt32 {
				ms = append(ms, m)
			}
		}
	}
	for _, m := range ms {
		for _, wide := range []bool{false, true} {
			s.m, s.wide = m, wide
			used[choosePlan(s).Path] = true
		}
	}
	return used
}
