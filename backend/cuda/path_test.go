//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// kimiShape is the plan input of the Kimi-K3 EP32 layer on an H200 with
// both wgmma paths' weights on the device.
func kimiShape(m int, t Tuning) planShape {
	return planShape{m: m, topk: 16, k: 3584, n: 3072, e: 28, wg: true, f4: true, wgRows: [2]int{128, 256}, tune: t}
}

// kimiShapeN is kimiShape at intermediate size n.
func kimiShapeN(m, n int, t Tuning) planShape {
	s := kimiShape(m, t)
	s.n = n
	return s
}

// gptOSS120BShape is GPT-OSS-120B's layer on one rank (K = N = 2880, 128
// experts, top-4) where kimiShape has Kimi's.
func gptOSS120BShape(m int, t Tuning) planShape {
	s := kimiShape(m, t)
	s.k, s.n, s.e, s.topk, s.allLocal = 2880, 2880, 128, 4, true
	return s
}

// Which path a token count takes, from the plan's inputs alone (no
// device): wgmma-fp4 first where it is available, up to its threshold;
// then decode (small M, or a shape only it runs); then wgmma from its
// threshold; else the mma.sync grouped GEMMs; an x BF16 does not hold
// takes the mma.sync GEMMs where a BF16 path was chosen.
func TestPathOrder(t *testing.T) {
	oss := func(m int) planShape { return planShape{m: m, topk: 4, k: 2880, n: 2880, e: 32} }
	for _, c := range []struct {
		name  string
		shape func(m int) planShape
		want  map[int]Path
	}{
		{"sm_90a, Kimi", func(m int) planShape { return kimiShape(m, Tuning{}) },
			map[int]Path{1: PathFP4, 24: PathFP4, 512: PathFP4, 513: PathFP4, 8192: PathFP4}},
		{"sm_90a, fp4 up to 512", func(m int) planShape { return kimiShape(m, Tuning{FP4MaxM: 512}) },
			map[int]Path{512: PathFP4, 513: PathWGMMA, 8192: PathWGMMA}},
		{"sm_90a, fp4 off", func(m int) planShape { return kimiShape(m, Tuning{FP4MaxM: -1}) },
			map[int]Path{1: PathDecode, 24: PathDecode, 25: PathGrouped, 191: PathGrouped, 192: PathWGMMA}},
		{"sm_90a, no fp4 (scales)", func(m int) planShape { s := kimiShape(m, Tuning{}); s.f4 = false; return s },
			map[int]Path{1: PathDecode, 128: PathGrouped, 512: PathWGMMA}},
		{"sm_90a, wgmma off", func(m int) planShape { return kimiShape(m, Tuning{FP4MaxM: -1, NoWGMMA: true}) },
			map[int]Path{512: PathGrouped}},
		{"sm_90a, decode never", func(m int) planShape { return kimiShape(m, Tuning{FP4MaxM: -1, DecodeMaxM: -1, WGMMAMinM: 1}) },
			map[int]Path{1: PathWGMMA}},
		{"sm_89", func(m int) planShape { s := kimiShape(m, Tuning{}); s.f4, s.wg = false, false; return s },
			map[int]Path{1: PathDecode, 25: PathGrouped, 8192: PathGrouped}},
		{"GPT-OSS 2880", oss, map[int]Path{1: PathDecode, 8192: PathDecode}},
		{"wide x", func(m int) planShape { s := kimiShape(m, Tuning{}); s.wide = true; return s },
			map[int]Path{1: PathGrouped, 8192: PathGrouped}},
		// GPT-OSS's 2880 on sm_90 (the padded wgmma-fp4 layout): a wide x
		// takes the decode GEMMs, which pad K and N; the grouped ones step
		// by whole 128-k chunks.
		{"GPT-OSS 2880, fp4", func(m int) planShape { s := oss(m); s.f4, s.wg = true, true; return s },
			map[int]Path{1: PathFP4, 8192: PathFP4}},
		{"GPT-OSS 2880, fp4, wide x", func(m int) planShape { s := oss(m); s.f4, s.wg, s.wide = true, true, true; return s },
			map[int]Path{1: PathDecode, 512: PathDecode, 8192: PathDecode}},
		// The bf16 chain runs only on the BF16 paths: at every M, whatever
		// x holds and whatever the decode and fp4 thresholds say.
		{"bf16 chain", func(m int) planShape { s := kimiShape(m, Tuning{}); s.bf16, s.wide = true, true; return s },
			map[int]Path{1: PathFP4, 24: PathFP4, 8192: PathFP4}},
		{"bf16 chain, fp4 off", func(m int) planShape { s := kimiShape(m, Tuning{FP4MaxM: -1}); s.bf16 = true; return s },
			map[int]Path{1: PathWGMMA, 25: PathWGMMA, 8192: PathWGMMA}},
		{"bf16 chain, no fp4 (scales)", func(m int) planShape { s := kimiShape(m, Tuning{}); s.bf16, s.f4 = true, false; return s },
			map[int]Path{1: PathWGMMA, 128: PathWGMMA}},
		{"bf16 chain, no wgmma weights", func(m int) planShape {
			s := kimiShape(m, Tuning{FP4MaxM: -1})
			s.bf16, s.wg = true, false
			return s
		}, map[int]Path{1: PathFP4, 8192: PathFP4}},
	} {
		for m, want := range c.want {
			if got := choosePlan(c.shape(m)); got.Path != want {
				t.Errorf("%s: M=%d takes %v, want %v", c.name, m, got.Path, want)
			}
		}
	}
}

// The plan names the launches its forward runs, in order: the steps the
// layer builds from a plan (what Profile names) are the plan's Steps, for
// every path, tile and switch, so a plan printed by bench is what runs.
func TestPlanIsWhatRuns(t *testing.T) {
	tunings := []Tuning{{}, {FP4MaxM: -1}, {FP4MaxM: -1, NoWGMMA: true}, {NoPDL: true, NoTileReady: true},
		{FP4ActMaxM: -1}, {ActByTileMaxM: -1}, {RouteManyMaxM: -1}, {NoFP4Sync: true}, {FP4Tile: 256}, {FP4FitMaxM: -1}}
	for _, tu := range tunings {
		for _, m := range []int{1, 2, 8, 24, 25, 36, 48, 64, 89, 128, 192, 256, 512, 1024, 1025, 4096, 8192, 9000} {
			for _, wide := range []bool{false, true} {
				s := kimiShape(m, tu)
				s.wide = wide
				p := choosePlan(s)
				l := &Layer{b: &Backend{}, w: &moe.Weights{K: s.k, N: s.n, E: s.e}}
				ws := &workspace{m: m, topk: s.topk, wide: wide}
				ws.plans[0], ws.plans[1] = p, p
				var names []string
				for _, st := range l.steps(ws) {
					names = append(names, st.name)
				}
				if !slices.Equal(names, p.Steps) {
					t.Errorf("%s: runs %v", p, names)
				}
				if p.Path != PathDecode && (p.Tile == 0 || p.Tiles < (m*s.topk+p.Tile-1)/p.Tile) {
					t.Errorf("%s: tile %d, %d tile rows for %d entries", p, p.Tile, p.Tiles, m*s.topk)
				}
				if p.FP4.ActByTile && (!p.FP4.ActKernel || !p.FP4.TileReady) || p.FP4.Deep2 && p.FP4.Loop != LoopSync ||
					p.FP4.W3 && (!p.FP4.ActKernel || p.FP4.Loop != LoopWGMMA || p.Tile != f4W3Tile) ||
					p.FP4.W3Gemm2 && (p.FP4.Loop != LoopWGMMA || p.Tile != f4W3Tile) || p.FP4.Ring && !p.FP4.W3 && !p.FP4.W3Gemm2 ||
					p.FP4.W3Fit && !p.FP4.Ring {
					t.Errorf("%s: inconsistent switches", p)
				}
			}
		}
	}
	if got := choosePlan(kimiShape(256, Tuning{})).String(); !strings.Contains(got, "wgmma-fp4") || !strings.Contains(got, "route_x_many > gemm1_act > act_requant > gemm2 > finalize") {
		t.Errorf("M=256: %s", got)
	}
}

// Every token count gets an instance's tile, growing with M where the
// GEMMs run in two warpgroups; in three the 128-token tile also takes
// the band f4T128Band and starts at f4W3T128MinM, and nothing else moves.
func TestF4TileTokens(t *testing.T) {
	prev := 0
	for m := 1; m <= 16384; m++ {
		nt, nt3 := f4TileTokens(m, false), f4TileTokens(m, true)
		if !slices.Contains(f4Tiles, nt) || nt < prev {
			t.Fatalf("M=%d: tile %d (previous %d)", m, nt, prev)
		}
		prev = nt
		band := m >= f4T128Band[0] && m < f4T128Band[1] || m >= f4W3T128MinM
		if band && nt3 != 128 || !band && nt3 != nt {
			t.Fatalf("M=%d: tile %d in three warpgroups, %d in two", m, nt3, nt)
		}
	}
	if f4T128Band[1] >= f4W3T128MinM || f4W3T128MinM >= f4T128MinM || f4T128Band[0] <= 144 {
		t.Fatalf("bounds out of order: band %v, three warpgroups from %d, two from %d", f4T128Band, f4W3T128MinM, f4T128MinM)
	}
}

// Shared memory an SM on sm_90: 228 KB, 1 KB of it reserved a CTA (CUDA
// C++ Programming Guide, compute capability 9.0): what the tiles' CTAs an
// SM must fit in (TestF4SyncTiles, TestF4TileSmemFits).
const smemSM, reservedCTA = 228 << 10, 1 << 10

// Shared memory one CTA may have on sm_90 (the same table): 227 KB.
const smemCTA = 227 << 10

// The barrier-free loop's tiles are tiles of the path, and the ones M up
// to f4SyncMaxM takes (f4TileTokens); above it the wgmma loop runs, at each tile's
// N up to f4FitMaxM tokens (f4Fit), at the tile's above.
func TestF4SyncTiles(t *testing.T) {
	for nt, w := range f4sWinK {
		if w%128 != 0 || abiThreads%(w/8) != 0 {
			t.Errorf("tile %d: a %d-k token window is not whole steps, or its rows not whole passes of the CTA", nt, w)
		}
	}
	// Steps ahead come in pairs (F4Scales: one scale load a step pair).
	pairs := func(ah int) bool { return ah >= 2 && ah%2 == 0 }
	for nt, ah := range f4Ahead {
		if !pairs(ah) {
			t.Errorf("tile %d: %d steps ahead on the wgmma loop, not a positive even count", nt, ah)
		}
	}
	if !pairs(f4sDeep2.ahead) {
		t.Errorf("GEMM2's deep variant: %d steps ahead, not a positive even count", f4sDeep2.ahead)
	}
	for _, nt := range f4sTiles {
		if slices.Contains(f4FitTiles, nt) {
			t.Errorf("tile %d is both the mma.sync loop's and a fitted wgmma loop's", nt)
		}
		if !slices.Contains(f4Tiles, nt) || !pairs(f4sAhead[nt]) {
			t.Errorf("tile %d: not a wgmma-fp4 tile, or %d steps ahead (a positive even count)", nt, f4sAhead[nt])
		}
		if need := f4sBlocks[nt] * (f4sSmem(nt) + reservedCTA + 4<<10); need > smemSM { // 4 KB: the epilogue's static arrays, generously
			t.Errorf("tile %d: %d CTAs an SM need %d bytes of shared memory", nt, f4sBlocks[nt], need)
		}
	}
	for m := 1; m <= f4SyncMaxM; m++ {
		if p := choosePlan(kimiShape(m, Tuning{})); p.FP4.Loop != LoopSync {
			t.Errorf("M=%d (tile %d) is on the %v", m, p.Tile, p.FP4.Loop)
		}
	}
	for _, m := range []int{f4SyncMaxM + 1, 48, 64, 128, f4FitMaxMDefault, f4FitMaxMDefault + 1, 2048} {
		p := choosePlan(kimiShape(m, Tuning{}))
		if want := map[bool]Loop{true: LoopFitted, false: LoopWGMMA}[m <= f4FitMaxMDefault]; p.FP4.Loop != want {
			t.Errorf("M=%d (tile %d): %v, want %v", m, p.Tile, p.FP4.Loop, want)
		}
	}
	if p := choosePlan(kimiShape(8, Tuning{NoFP4Sync: true})); p.FP4.Loop == LoopSync {
		t.Error("fp4-sync=off left tile 8 on the mma.sync loop")
	}
}

// Each wgmma-fp4 instance's dynamic shared memory (f4Smem: its token
// stages) fits as many CTAs an SM as its __launch_bounds__ asks for: the
// 48-token tile runs three, so its stages (f4Stages) are bounded by that,
// not by one CTA's limit.
func TestF4TileSmemFits(t *testing.T) {
	inst := regexp.MustCompile(`__launch_bounds__\(KMOE_THREADS, (\d+)\) (kmoe_f4_(?:gemm1_act|gemm2)(?:_fit)?_t(\d+))\(`)
	seen := map[int]int{}
	for _, m := range inst.FindAllStringSubmatch(kernelSource, -1) {
		blocks, _ := strconv.Atoi(m[1])
		nt, _ := strconv.Atoi(m[3])
		seen[nt]++
		// GEMM1's static s_amax, 4 bytes a token and warp.
		if need := blocks * (f4Smem(nt) + 32*nt + reservedCTA); need > smemSM {
			t.Errorf("%s: %d CTAs an SM need %d bytes of shared memory, the SM has %d", m[2], blocks, need, smemSM)
		}
		if need := f4Smem(nt) + 32*nt + 1<<10; need > smemCTA { // 1 KB: the tile's and the barriers' other statics, generously
			t.Errorf("%s: a CTA needs %d bytes of shared memory, one CTA may have %d", m[2], need, smemCTA)
		}
	}
	for _, nt := range f4Tiles {
		want := 2 // GEMM1 and GEMM2, and their fitted instances where the tile has them
		if slices.Contains(f4FitTiles, nt) {
			want = 4
		}
		if seen[nt] != want {
			t.Errorf("tile %d: %d instances with launch bounds in the kernels, want %d", nt, seen[nt], want)
		}
	}
}

// The activation kernel's default range starts at the first M of the
// 48-token tiles, where it pays (on the 32-token tiles it costs more than
// it saves), and stops at 8192, above which GEMM1's epilogue spares the
// float32 up and gate workspace.
func TestF4ActKernelRange(t *testing.T) {
	first := 1
	for f4TileTokens(first, true) < 48 {
		first++
	}
	if f4ActMinMDefault != first {
		t.Errorf("the activation kernel starts at M=%d, the 48-token tiles at %d", f4ActMinMDefault, first)
	}
	for m, want := range map[int]bool{1: false, 32: false, 88: false, 89: true, 128: true, 2048: true, 8192: true, 8193: false} {
		if got := choosePlan(kimiShape(m, Tuning{})).FP4.ActKernel; got != want {
			t.Errorf("M=%d: activation kernel %v, want %v", m, got, want)
		}
	}
	if choosePlan(kimiShape(128, Tuning{FP4ActMinM: 1, FP4ActMaxM: -1})).FP4.ActKernel {
		t.Error("fp4-act-max-m=-1 left M=128 on the activation kernel")
	}
}

// GEMM1 runs in three warpgroups exactly where the 128-token tile's plain
// loop stores up and gate for the activation kernel and N's row groups of
// 32 features fill its 96-feature CTAs but for at most
// w3SparePctDefault spare warpgroups in 100; each switch off takes it
// away. GPT-OSS-120B's padded N (2944, 92 row groups in 31 CTAs, one
// spare of 93) is admitted, and N = 2816 (88 in 30, two of 90) at
// w3-spare-max=2 is not.
func TestF4W3Range(t *testing.T) {
	for m, want := range map[int]bool{f4T128Band[0] - 1: false, f4T128Band[0]: true, f4T128Band[1] - 1: true, 512: false,
		f4W3T128MinM - 1: false, f4W3T128MinM: true, 2048: true, 8192: true, 8193: false} {
		if p := choosePlan(kimiShape(m, Tuning{})); p.FP4.W3 != want || p.FP4.W3 && (p.Tile != 128 || !p.FP4.ActKernel) {
			t.Errorf("M=%d: %s; want three warpgroups %v", m, p, want)
		}
	}
	for _, tu := range []Tuning{{NoW3: true}, {FP4Tile: 256}, {FP4Tile: 64}, {FP4ActMaxM: -1}} {
		if p := choosePlan(kimiShape(2048, tu)); p.FP4.W3 {
			t.Errorf("%+v: %s", tu, p)
		}
	}
	// Forced (scripts/gpu-check.sh validates the matrix so), it reaches
	// the small M whose activation kernel runs by tile.
	if p := choosePlan(kimiShape(8, Tuning{FP4Tile: 128, FP4ActMinM: 1})); !p.FP4.W3 || !p.FP4.ActByTile {
		t.Errorf("M=8, fp4-tile=128, fp4-act-min-m=1: %s", p)
	}
	// N = 2816, 22 x 128 (padded as it is): 88 row groups, two of 90 warpgroups spare.
	if p := choosePlan(kimiShapeN(2048, 2816, Tuning{W3SpareMax: 2})); p.FP4.W3 || p.Tile != 128 {
		t.Errorf("N=2816: %s", p)
	}
	if p := choosePlan(kimiShapeN(2048, 2816, Tuning{W3SpareMax: 3})); !p.FP4.W3 {
		t.Errorf("N=2816, w3-spare-max=3: %s", p)
	}
	if p := choosePlan(kimiShapeN(2048, 3072, Tuning{W3SpareMax: -1})); !p.FP4.W3 {
		t.Errorf("N=3072 (none spare), w3-spare-max=-1: %s", p)
	}
	oss := gptOSS120BShape(8192, Tuning{})
	if p := choosePlan(oss); !p.FP4.W3 || p.Tile != 128 || !p.FP4.W3Gemm2 {
		t.Errorf("GPT-OSS-120B M=8192: %s", p)
	}
	oss.tune.W3SpareMax = -1
	if p := choosePlan(oss); p.FP4.W3 || p.Tile != 128 {
		t.Errorf("GPT-OSS-120B M=8192, w3-spare-max=-1: %s", p)
	}
	// And it takes the three-warpgroup band: M = 3000 gives its experts the
	// tokens M = 328 gives Kimi's (f4EquivM).
	oss.m, oss.tune = 3000, Tuning{}
	if p := choosePlan(oss); p.Tile != 128 || !p.FP4.W3 || f4EquivM(oss) != 328 {
		t.Errorf("GPT-OSS-120B M=3000 (as M=%d): %s", f4EquivM(oss), p)
	}
	oss.tune.W3SpareMax = -1
	if p := choosePlan(oss); p.Tile != 64 {
		t.Errorf("GPT-OSS-120B M=3000, w3-spare-max=-1: %s", p)
	}
}

// GEMM2 runs in three warpgroups wherever the 128-token tile's plain loop
// runs, the activation kernel or not, unless more than w3SparePctDefault
// warpgroups in 100 would be spare: f4W3Gemm2Fits admits Kimi's K = 3584
// (56 row groups of 64 in 19 CTAs, one spare warpgroup of 57) and 3072
// (none spare) and GPT-OSS-120B's padded 2944 (46 in 16: two of 48),
// which a bound of 2 in 100 refuses (K is padded to a multiple of 128
// first: 64 and 128 are two row groups in three warpgroups).
func TestF4W3Gemm2Range(t *testing.T) {
	for _, c := range []struct {
		k, pct int
		want   bool
	}{{3584, 2, true}, {3584, 1, false}, {3072, 2, true}, {3072, 0, true}, {2944, 2, false}, {2944, 5, true},
		{384, 2, true}, {128, 2, false}, {128, 34, true}, {64, 2, false}} {
		if got := f4W3Gemm2Fits(c.k, c.pct); got != c.want {
			t.Errorf("f4W3Gemm2Fits(%d, %d) = %v, want %v", c.k, c.pct, got, c.want)
		}
	}
	for m, want := range map[int]bool{f4T128Band[0] - 1: false, f4T128Band[0]: true, 512: false, f4W3T128MinM - 1: false,
		f4W3T128MinM: true, 8192: true, 8193: true} {
		if p := choosePlan(kimiShape(m, Tuning{})); p.FP4.W3Gemm2 != want || p.FP4.W3Gemm2 && p.Tile != 128 {
			t.Errorf("M=%d: %s; want GEMM2 in three warpgroups %v", m, p, want)
		}
	}
	for _, tu := range []Tuning{{NoW3Gemm2: true}, {FP4Tile: 256}, {FP4Tile: 64}} {
		if p := choosePlan(kimiShape(2048, tu)); p.FP4.W3Gemm2 {
			t.Errorf("%+v: %s", tu, p)
		}
	}
	// Independent of GEMM1's: its switch off, or no activation kernel, leaves GEMM2's on.
	for _, tu := range []Tuning{{NoW3: true}, {FP4ActMaxM: -1}} {
		if p := choosePlan(kimiShape(2048, tu)); !p.FP4.W3Gemm2 || p.FP4.W3 {
			t.Errorf("%+v: %s", tu, p)
		}
	}
	oss := gptOSS120BShape(8192, Tuning{})
	if p := choosePlan(oss); !p.FP4.W3Gemm2 || p.Tile != 128 {
		t.Errorf("GPT-OSS-120B M=8192: %s", p)
	}
	oss.tune.W3SpareMax = 2
	if p := choosePlan(oss); p.FP4.W3Gemm2 || !p.FP4.W3 || p.Tile != 128 {
		t.Errorf("GPT-OSS-120B M=8192, w3-spare-max=2: %s", p)
	}
}

// TestF4Ring: the stage ring (Plan.FP4.Ring) goes with the three-warpgroup
// GEMMs, either of them, since only their k loop has it (f4_tile_mma's
// static_assert), and --tune w3-ring=off takes it away alone.
func TestF4Ring(t *testing.T) {
	for _, c := range []struct {
		m    int
		tu   Tuning
		want bool
	}{{8192, Tuning{}, true}, {2048, Tuning{NoW3: true}, true}, {2048, Tuning{NoW3Gemm2: true}, true},
		{2048, Tuning{NoW3: true, NoW3Gemm2: true}, false}, {224, Tuning{}, false}, {8192, Tuning{FP4Tile: 64}, false}} {
		p := choosePlan(kimiShape(c.m, c.tu))
		if p.FP4.Ring != c.want {
			t.Errorf("M=%d %+v: %s; want the ring %v", c.m, c.tu, p, c.want)
		}
		c.tu.NoRing = true
		if q := choosePlan(kimiShape(c.m, c.tu)); q.FP4.Ring || q.FP4.W3 != p.FP4.W3 || q.FP4.W3Gemm2 != p.FP4.W3Gemm2 {
			t.Errorf("M=%d %+v: %s", c.m, c.tu, q)
		}
	}
	if tu, err := ParseTuning("w3-ring=off"); err != nil || !tu.NoRing {
		t.Errorf("w3-ring=off: %+v, %v", tu, err)
	}
}

// The fitted ring kernels (Plan.FP4.W3Fit) follow the ring up to
// w3FitMaxMDefault tokens and w3-fit-max-m: never without the ring (they
// are its kernels), never where the tuning says -1 or a bound below M.
func TestF4W3FitPlan(t *testing.T) {
	for _, c := range []struct {
		m    int
		tu   Tuning
		want bool
	}{{8192, Tuning{}, 8192 <= w3FitMaxMDefault}, {2048, Tuning{}, 2048 <= w3FitMaxMDefault}, {512, Tuning{FP4Tile: 128}, true},
		{2048, Tuning{NoRing: true}, false}, {2048, Tuning{W3FitMaxM: -1}, false}, {2048, Tuning{W3FitMaxM: 1024}, false},
		{1024, Tuning{W3FitMaxM: 1024}, true}, {224, Tuning{}, false}, {8192, Tuning{FP4Tile: 64}, false}} {
		if p := choosePlan(kimiShape(c.m, c.tu)); p.FP4.W3Fit != c.want {
			t.Errorf("M=%d %+v: %s; want fitted %v", c.m, c.tu, p, c.want)
		}
	}
	if tu, err := ParseTuning("w3-fit-max-m=-1"); err != nil || tu.W3FitMaxM != -1 {
		t.Errorf("w3-fit-max-m=-1: %+v, %v", tu, err)
	}
	// The kernels the forward launches for each k loop.
	for tu, want := range map[Tuning][2]string{{}: {"kmoe_f4_gemm1_w3rf_t128", "kmoe_f4_gemm2_w3rf_t128"},
		{W3FitMaxM: -1}: {"kmoe_f4_gemm1_w3r_t128", "kmoe_f4_gemm2_w3r_t128"},
		{NoRing: true}:  {"kmoe_f4_gemm1_w3_t128", "kmoe_f4_gemm2_w3_t128"}} {
		loop := choosePlan(kimiShape(2048, tu)).FP4.w3Loop()
		if got := [2]string{kF4W3Gemm1[loop].name, kF4W3Gemm2[loop].name}; got != want {
			t.Errorf("%+v: %v, want %v", tu, got, want)
		}
	}
}

// The mma.sync loop's 8-token tile finds each token row's 16-byte pieces
// by a 32-bit count of 16-byte units from the buffer's start (F4sPieces in
// kernels/fp4_sync.cu): f4sAddressable admits a buffer exactly when its last
// piece's count fits in 32 bits, so the largest it admits ends at count
// 2^32 - 1 and the smallest it refuses would wrap to 0. The 16-token tile,
// which addresses rows in 64 bits, is admitted at any size.
func TestF4sAddressable(t *testing.T) {
	lastPiece := func(elems int) uint64 { return (2*uint64(elems) - 1) / 16 } // BF16 elements
	const most = 1<<35 - 1                                                    // BF16 elements, 2^36 - 2 bytes
	if !f4sAddressable(8, most) || lastPiece(most) != 1<<32-1 {
		t.Errorf("a buffer of %d elements: admitted %v, its last piece %d", most, f4sAddressable(8, most), lastPiece(most))
	}
	if f4sAddressable(8, 1<<35) {
		t.Errorf("a buffer of 2^35 elements (64 GiB, last piece at 2^32) admitted")
	}
	if f4sAddressable(8, 8192*3584, 1<<35) || !f4sAddressable(8, 8192*3584, 8192*16*3072) {
		t.Error("f4sAddressable does not check every buffer it is given")
	}
	if !f4sAddressable(16, 1<<35) {
		t.Error("the 16-token tile refused for a buffer its 64-bit addressing reaches")
	}
}

// The wgmma-fp4 tile thresholds follow tokens an expert: a one-rank layer
// whose experts get as many tokens a token as the Kimi EP32 rank-7 bench's
// (8 local slots over 28 experts) takes the bench's plan at every M;
// GPT-OSS-120B's 128 experts at top-4 (1/32 of a token each) take the
// small tiles far above the bench's M for them.
func TestPlanByTokensPerExpert(t *testing.T) {
	for _, m := range []int{1, 2, 8, 16, 24, 32, 48, 64, 89, 128, 192, 256, 512, 1024, 2048, 8192} {
		ep := choosePlan(kimiShape(m, Tuning{}))
		one := kimiShape(m, Tuning{})
		one.topk, one.allLocal = 8, true
		got := choosePlan(one)
		type kernels struct { // the choices by tokens an expert (tile rows and the prologue go by entries)
			path                                      Path
			tile                                      int
			loop                                      Loop
			deep2, act, actByTile, tileReady, pdlFlag bool
		}
		of := func(p Plan) kernels {
			return kernels{p.Path, p.Tile, p.FP4.Loop, p.FP4.Deep2, p.FP4.ActKernel, p.FP4.ActByTile, p.FP4.TileReady, p.FP4.PDL}
		}
		if of(got) != of(ep) {
			t.Errorf("M=%d: one rank at the bench's tokens an expert plans\n%s\nthe bench plans\n%s", m, got, ep)
		}
	}
	oss := func(m int) Plan {
		return choosePlan(planShape{m: m, topk: 4, k: 2880, n: 2880, e: 128, f4: true, allLocal: true, bf16: true})
	}
	for _, c := range []struct{ m, tile int }{{1, 8}, {256, 16}, {512, 32}, {1024, 48}, {2048, 64}, {8192, 128}} {
		if p := oss(c.m); p.Tile != c.tile {
			t.Errorf("GPT-OSS-120B M=%d: tile %d, want %d (%s)", c.m, p.Tile, c.tile, p)
		}
	}
	if p := oss(256); p.FP4.Loop != LoopSync || p.FP4.ActKernel {
		t.Errorf("GPT-OSS-120B M=256 (8 tokens an expert): want the 16-token mma.sync loop without the activation kernel, got %s", p)
	}
}

// pathsUsed names exactly the paths some forward's plan takes: on each
// shape and tuning, every M up to 10000 and a few far beyond, x wide or
// not, takes a path it names, and each path it names is taken. A Kimi
// layer on sm_90a keeps only the wgmma-fp4 and grouped weights on the
// device (the grouped for x BF16 does not hold).
func TestPathsUsed(t *testing.T) {
	oss := func(t Tuning) planShape { return planShape{topk: 4, k: 2880, n: 2880, e: 32, tune: t} }
	shapes := map[string]func(Tuning) planShape{
		"kimi":            func(t Tuning) planShape { return kimiShape(1, t) },
		"kimi, no fp4":    func(t Tuning) planShape { s := kimiShape(1, t); s.f4 = false; return s },
		"kimi, sm_89":     func(t Tuning) planShape { s := kimiShape(1, t); s.f4, s.wg = false, false; return s },
		"kimi, bf16":      func(t Tuning) planShape { s := kimiShape(1, t); s.bf16 = true; return s },
		"gpt-oss":         oss,
		"gpt-oss, wgmma":  func(t Tuning) planShape { s := oss(t); s.f4, s.wg = true, true; return s },
		"kimi, n 2048":    func(t Tuning) planShape { return kimiShapeN(1, 2048, t) },
		"gpt-oss-120b":    func(t Tuning) planShape { return gptOSS120BShape(1, t) },
		"kimi, bf16 only": func(t Tuning) planShape { s := kimiShape(1, t); s.bf16, s.f4 = true, false; return s },
	}
	tunings := []Tuning{{}, {FP4MaxM: -1}, {FP4MaxM: 512}, {FP4MaxM: -1, NoWGMMA: true}, {DecodeMaxM: -1},
		{DecodeMaxM: 100, WGMMAMinM: 1}, {FP4MaxM: -1, WGMMAMinM: 4096}, {FP4MaxM: 1, DecodeMaxM: 2}}
	for name, shape := range shapes {
		for _, tu := range tunings {
			s := shape(tu)
			used := pathsUsed(s)
			var taken [numPaths]bool
			ms := []int{1 << 16, 1 << 24, math.MaxInt32}
			for m := 1; m <= 10000; m++ {
				ms = append(ms, m)
			}
			for _, m := range ms {
				for _, wide := range []bool{false, true} {
					s.m, s.wide = m, wide
					p := choosePlan(s).Path
					if !used[p] {
						t.Fatalf("%s, %+v: M=%d (wide %v) takes %v, which pathsUsed %v lacks", name, tu, m, wide, p, used)
					}
					taken[p] = true
				}
			}
			if taken != used {
				t.Errorf("%s, %+v: pathsUsed %v, but the plans take %v", name, tu, used, taken)
			}
		}
	}
	want := [numPaths]bool{PathGrouped: true, PathFP4: true}
	if got := pathsUsed(kimiShape(1, Tuning{})); got != want {
		t.Errorf("Kimi on sm_90a keeps %v on the device, want %v", got, want)
	}
}

// Every plan's launches read only buffers its workspace has, and have a
// configuration an sm_90 device takes (grid, block, shared memory; PDL
// only where the plan has it), for every path, tile and switch, on sm_90
// and on sm_89 (no wgmma paths): each plan's steps run dry (no device) twice, once
// with the buffers a workspace had when every path's were made at once
// (the rule before each path named its own, written out below) and
// once with those Layer.buffers names for its plans; every pointer
// argument set in the first run is set in the second. A path whose
// buffers leave out one its steps read fails here rather than faulting on
// a GPU.
func TestPlanLaunchesDry(t *testing.T) {
	defer func() { dryRun = nil }()
	var launches []any
	var bad []string // launches no device would take, or the plan does not say
	planPDL := false
	dryRun = func(l dryLaunch) error {
		launches = append(launches, l.args)
		if l.pdl && !planPDL {
			bad = append(bad, fmt.Sprintf("%T with programmatic dependent launch, which the plan does not have", l.args))
		}
		if _, memset := l.args.(*memset32Args); !memset {
			g := l.grid
			if g[0] < 1 || g[0] > math.MaxInt32 || g[1] < 1 || g[1] > maxGridRows || g[2] < 1 || g[2] > 65535 ||
				l.block < 1 || l.block > 1024 || l.smem < 0 || l.smem > smemCTA {
				bad = append(bad, fmt.Sprintf("%T: grid %v, block %d, %d bytes of shared memory", l.args, g, l.block, l.smem))
			}
		}
		return nil
	}
	ptrType := reflect.TypeFor[devptr]()
	// set gives every devptr field of ws a distinct nonzero value where
	// keep says so, and 0 elsewhere.
	set := func(ws *workspace, keep func(p *devptr) bool) {
		v := reflect.ValueOf(ws).Elem()
		for i := range v.NumField() {
			if f := v.Field(i); f.Type() == ptrType {
				p := (*devptr)(unsafe.Pointer(f.UnsafeAddr())) // the fields are unexported
				*p = 0
				if keep(p) {
					*p = devptr(0x1000 * (i + 1))
				}
			}
		}
	}
	run := func(l *Layer, ws *workspace) [][]string {
		launches, planPDL = nil, ws.plan().FP4.PDL
		for _, st := range l.steps(ws) {
			if err := st.run(); err != nil {
				t.Fatal(err)
			}
		}
		var set [][]string // per launch, its pointer arguments that are set
		for _, a := range launches {
			v := reflect.ValueOf(a).Elem()
			var names []string
			for i := range v.NumField() {
				if v.Field(i).Type() == ptrType && v.Field(i).Uint() != 0 {
					names = append(names, v.Type().Name()+"."+v.Type().Field(i).Name)
				}
			}
			set = append(set, names)
		}
		return set
	}
	type shape struct {
		name    string
		k, n, e int
		topk    int
		chain   moe.Chain
		arch    archSpec
	}
	checked := map[Path]int{}
	arch := func(target string) archSpec {
		return archs[slices.IndexFunc(archs, func(a archSpec) bool { return a.target == target })]
	}
	sm90, sm89 := arch(ArchSM90a), arch("sm_89")
	for _, s := range []shape{{"kimi", 3584, 3072, 28, 16, moe.ChainMXFP8, sm90}, {"gpt-oss 2880", 2880, 2880, 32, 4, moe.ChainMXFP8, sm90},
		{"k160", 160, 96, 8, 4, moe.ChainMXFP8, sm90}, {"kimi bf16", 3584, 3072, 28, 16, moe.ChainBF16, sm90},
		{"kimi sm_89", 3584, 3072, 28, 16, moe.ChainFlashInfer, sm89}, {"gpt-oss sm_89", 2880, 2880, 32, 4, moe.ChainMXFP8, sm89}} {
		l := &Layer{b: &Backend{k: &kernels{}, sms: 132, arch: s.arch}, w: &moe.Weights{K: s.k, N: s.n, E: s.e},
			spec: moe.LayerSpec{Activation: activation.Situ, Chain: s.chain, Recipe: mxfp.RecipeRCeil}, params: 1, b1: 2, b2: 3}
		for p := range paths {
			l.avail[p] = paths[p].available(l) == ""
			for i, w := range paths[p].weights(l) {
				*w = devptr(0x100 + 16*int(p) + i)
			}
		}
		for _, tu := range []Tuning{{}, {FP4MaxM: -1}, {FP4MaxM: -1, NoWGMMA: true}, {FP4ActMaxM: -1}, {ActByTileMaxM: -1},
			{RouteManyMaxM: -1}, {NoFP4Sync: true}, {FP4Tile: 256}, {FP4MaxM: -1, DecodeMaxM: -1, WGMMAMinM: 1}, {NoPDL: true, NoTileReady: true}} {
			l.tune = tu
			for _, m := range []int{1, 8, 24, 25, 64, 89, 192, 512, 1025, 8192} {
				ws := &workspace{m: m, topk: s.topk, plans: [2]Plan{l.plan(m, s.topk, false), l.plan(m, s.topk, true)}}
				ours := map[*devptr]bool{}
				for _, b := range l.buffers(ws) {
					ours[b.p] = true
				}
				for _, wide := range []bool{false, true} {
					for _, form := range []int{formQuantized, formFloat} {
						ws.wide, ws.form = wide, form
						set(ws, func(p *devptr) bool {
							switch p {
							case &ws.xbf, &ws.aqbf:
								return l.avail[PathWGMMA] || l.avail[PathFP4]
							case &ws.ready:
								return l.avail[PathFP4]
							case &ws.ug:
								return ws.plans[0].FP4.ActKernel
							}
							return true
						})
						all := run(l, ws)
						set(ws, func(p *devptr) bool { return ours[p] })
						got := run(l, ws)
						for i := range all {
							for _, name := range all[i] {
								if !slices.Contains(got[i], name) {
									t.Errorf("%s %+v M=%d wide=%v: %s: launch %d reads %s, which the workspace lacks",
										s.name, tu, m, wide, ws.plan(), i, name)
								}
							}
						}
						for _, b := range bad {
							t.Errorf("%s %+v M=%d: %s: launches %s", s.name, tu, m, ws.plan(), b)
						}
						bad = nil
						checked[ws.plan().Path]++
					}
				}
			}
		}
	}
	for p := range paths {
		if checked[Path(p)] == 0 {
			t.Errorf("no plan took %v", Path(p))
		}
	}
}

// A batch whose GEMMs would need more token tiles than a launch grid has
// rows is refused with a clear error before anything is allocated (it was
// a driver error at the first GEMM's launch): a K = N = 256 layer of
// top-8 at M = 2^20 needs 65,543 tiles and an 18 GB workspace, which an
// H200 holds.
func TestWorkspaceRefusesTooManyTiles(t *testing.T) {
	l := &Layer{b: &Backend{k: &kernels{}, sms: 132, arch: archs[0]}, w: &moe.Weights{K: 256, N: 256, E: 8},
		spec: moe.LayerSpec{Activation: activation.Situ, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil}, ws: map[int]*workspace{}}
	for p := range paths {
		l.avail[p] = paths[p].available(l) == ""
	}
	for _, tu := range []Tuning{{}, {FP4MaxM: -1}} {
		l.tune = tu
		_, err := l.workspace(1<<20, 8)
		if !errors.Is(err, backend.ErrUnsupported) || !strings.Contains(err.Error(), "M = 1048576 of top-8 takes 65543") ||
			!strings.Contains(err.Error(), "split the batch") {
			t.Errorf("%v: M = 2^20: %v", tu, err)
		}
		if len(l.ws) != 0 {
			t.Errorf("%v: a refused workspace was kept", tu)
		}
	}
}
