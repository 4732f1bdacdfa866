//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/layout/fp4"
	"kimimoe/backend/cuda/internal/layout/wgmma"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// The kernels' MXFP4 -> BF16 widening (f4_widen, with the multipliers
// from the scale word by f4_mults), for every scale it takes (0 ..
// fp4.MaxScale) and every code in every register and half of a word,
// against wgmma.BF16Table (E2M1 x 2^(s-127) as BF16, checked exhaustively
// against float64 by TestWGBF16TableExhaustive): bitwise, so signed zeros
// and the subnormals at scales 0 and 1 count. The two rows of a word get
// different scales and the other block's scale bytes are 0xFF, so a
// multiplier taken from the wrong row, block or half shows.
func TestF4WidenExhaustive(t *testing.T) {
	b := openCUDAOrSkip(t)
	// Word i of scale s: register j, half h holds code (i + 3j + 7h) % 16,
	// so over i = 0..15 every code meets every field. Row r0 (registers 0
	// and 2) has scale s, row r1 (1 and 3) r1Scale(s), in block i & 1 of the
	// scale word [r0 block 0, r0 block 1, r1 block 0, r1 block 1].
	r1Scale := func(s int) int { return (7*s + 61) % (fp4.MaxScale + 1) } // a permutation: gcd(7, 129) = 1
	var in, sc []uint32
	for s := range fp4.MaxScale + 1 {
		for i := range 16 {
			var word uint32
			for j := range 4 {
				for h := range 2 {
					word |= fp4.Bits(uint8((i+3*j+7*h)%16), j, h)
				}
			}
			bytes := [4]uint32{0xFF, 0xFF, 0xFF, 0xFF}
			bytes[i&1], bytes[2+i&1] = uint32(s+126), uint32(r1Scale(s)+126)
			in, sc = append(in, word), append(sc, bytes[0]|bytes[1]<<8|bytes[2]<<16|bytes[3]<<24)
		}
	}
	out := runWordKernel(t, b, kTestF4Widen, [][]uint32{in, sc}, 4*len(in), func(p []devptr) *testF4WidenArgs {
		return &testF4WidenArgs{In: p[0], Sc: p[1], Out: p[2], N: i32(len(in))}
	})
	for n := range in {
		s, i := n/16, n%16
		for j := range 4 {
			for h := range 2 {
				c := (i + 3*j + 7*h) % 16
				got := uint16(out[4*n+j] >> (16 * h))
				rs := s
				if j&1 == 1 {
					rs = r1Scale(s)
				}
				if want := wgmma.BF16Table[rs][c]; got != want {
					t.Fatalf("word %d: scale %d code %#x register %d half %d: BF16 %#04x (%g), want %#04x (%g)",
						n, rs, c, j, h, got, mxfp.Float32FromBF16(got), want, mxfp.Float32FromBF16(want))
				}
			}
		}
	}
}

// The wgmma-fp4 path (sm_90a) against the mma.sync path on the same layer
// and inputs at the Kimi shape, from M = 1 (the decode path turned off)
// to 2048 (the path's default has no upper limit since the swizzled
// stages), through every token tile (8, 16, 32 at M=48, 64), both against
// the oracle on sampled rows; then the switches: off,
// the grouped forwards take the other paths, and a layer whose weight
// scales leave the exact widening's window has no wgmma-fp4 path.
func TestF4Path(t *testing.T) {
	b, l, s, w, o := kimiF4Layer(t)
	if !l.avail[PathFP4] {
		t.Fatalf("no wgmma-fp4 path at the Kimi shape: %s", l.f4.whyNot)
	}
	for _, m := range []int{1, 8, 32, 48, 128, 512, 2048} {
		in := kimiInput(t, s, w, m, uint64(9000+m))
		var outs [2][]float32
		for i, on := range []bool{true, false} {
			maxM := -1
			if on {
				maxM = 0
			}
			setLayer(t, l, func(u *Tuning) { u.FP4MaxM, u.NoWGMMA = maxM, true }) // keeps kimiF4Layer's decode-max-m=-1
			if want := map[bool]string{true: "wgmma-fp4", false: "grouped"}[on]; l.PathFor(m) != want {
				t.Fatalf("M=%d takes the %s path, want %s", m, l.PathFor(m), want)
			}
			outs[i] = forwardOut(t, l, in, m)
			prof, err := l.Profile(m)
			if err != nil {
				t.Fatal(err)
			}
			_, apart := prof["x_bf16"]
			_, fused := prof["route_x_bf16"] // the one-launch prologue, up to abiRouteCTAMax entries
			_, many := prof["route_x_many"]  // and above
			wantFused := on && m*s.TopK <= abiRouteCTAMax
			wantMany := on && !wantFused && m <= routeManyMaxMDefault
			if ran := apart || fused || many; ran != on || fused != wantFused || many != wantMany {
				t.Errorf("M=%d fp4=%v: the steps run were %v", m, on, prof)
			}
		}
		comparePaths(t, o, in, w.K, [2]string{"wgmma-fp4", "mma.sync"}, outs)
	}

	w.W31Scale[0] = fp4.MaxScale + 1
	l2, _ := prepare(t, b, s, w)
	defer l2.Close()
	if err := l2.SetTuning(Tuning{FP4MaxM: 1}); !errors.Is(err, backend.ErrUnsupported) || l2.PathFor(128) == "wgmma-fp4" {
		t.Errorf("a weight scale of 2^2: SetTuning(fp4-max-m=1) %v, path %s", err, l2.PathFor(128))
	}
}

// The small tiles (f4sTiles) run the barrier-free mma.sync loop; it and
// the wgmma loop it replaces both agree with the oracle at every M the
// small tiles take. The last part shows the test would notice if the
// forward did not launch the mma.sync loop's kernels at all.
func TestF4SyncLoop(t *testing.T) {
	b, l, s, w, o := kimiF4Layer(t)
	set := func(noSync, noPDL bool) { // the loop and the launch, as fp4-sync=off and pdl=off set them
		t.Helper()
		setLayer(t, l, func(u *Tuning) { u.NoFP4Sync, u.NoPDL = noSync, noPDL })
	}
	for _, m := range []int{1, 3, 8, 24, 32, f4SyncMaxM} {
		set(false, false)
		if l.PathFor(m) != "wgmma-fp4" || l.PlanFor(m, s.TopK).FP4.Loop != LoopSync {
			t.Fatalf("M=%d: path %s, tile %d, not the mma.sync loop", m, l.PathFor(m), f4TileTokens(m, true))
		}
		in := kimiInput(t, s, w, m, uint64(9100+m))
		var outs [2][]float32
		for i, noSync := range []bool{false, true} {
			set(noSync, false)
			outs[i] = forwardOut(t, l, in, m)
		}
		comparePaths(t, o, in, w.K, [2]string{"mma.sync loop", "wgmma loop"}, outs)
		// Programmatic dependent launch changes when kernels start, not
		// what they compute: without it, the same bits.
		set(false, true)
		plain := forwardOut(t, l, in, m)
		requireSameBits(t, m, "with programmatic dependent launch", outs[0], "without", plain)
	}

	set(false, false)
	requireLaunched(t, l, kimiInput(t, s, w, 1, 9199), 1, &b.k.f4sGemm1, "the mma.sync loop's GEMM1 kernel")
}

// TestF4FitN: the wgmma loop at N = the tile's tokens rounded up to a
// whole 8 (the _fit instances) gives the bits of the loop at the tile's
// full N (f4FitMaxM 0), at M whose tiles of 32 and 64 tokens are partly
// filled (M=40: ~11 tokens an expert; 128: ~37; 200: ~57, some experts
// past one tile). A dropped 8-token group would leave its tokens' rows as
// GEMM1's zeros, not the same bits; the last part shows the forward
// launches the fitted kernels at all.
func TestF4FitN(t *testing.T) {
	b, l, s, w, _ := kimiF4Layer(t)
	setFit := func(maxM int) {
		t.Helper()
		setLayer(t, l, func(u *Tuning) { u.FP4FitMaxM = never(maxM) })
	}
	for _, m := range []int{40, 128, 200} {
		in := kimiInput(t, s, w, m, uint64(9300+m))
		var outs [2][]float32
		for i, maxM := range []int{f4FitMaxMDefault, 0} {
			setFit(maxM)
			if tt := f4TileTokens(m, true); l.PathFor(m) != "wgmma-fp4" || (l.PlanFor(m, s.TopK).FP4.Loop == LoopFitted) != (maxM > 0) {
				t.Fatalf("M=%d: path %s, tile %d, fitted %v", m, l.PathFor(m), tt, (l.PlanFor(m, s.TopK).FP4.Loop == LoopFitted))
			}
			outs[i] = forwardOut(t, l, in, m)
		}
		requireSameBits(t, m, "at the fitted N", outs[0], "at the tile's N", outs[1])
		t.Logf("M=%d: %d values bitwise equal at the fitted and the full N", m, len(outs[0]))
	}

	setFit(f4FitMaxMDefault)
	requireLaunched(t, l, kimiInput(t, s, w, 128, 9399), 128, &b.k.f4FitGemm1, "the fitted GEMM1 kernel")
}

// TestF4TileReady: GEMM2 waiting for its own tile's GEMM1 CTAs
// (tile_wait, from f4TileReadyMinM tokens) instead of the whole GEMM1 grid gives the same bits, with
// either prologue (one launch up to 1024 entries, four above: each zeroes
// the counts its own way). Each M runs input A, then input B, so a count
// left over from A would let B's GEMM2 read A's intermediate.
func TestF4TileReady(t *testing.T) {
	_, l, s, w, _ := kimiF4Layer(t)
	set := func(noReady bool) {
		t.Helper()
		setLayer(t, l, func(u *Tuning) { u.NoTileReady = noReady })
	}
	for _, m := range []int{2, 8, 33, 128, 200} {
		if l.PathFor(m) != "wgmma-fp4" {
			t.Fatalf("M=%d: path %s", m, l.PathFor(m))
		}
		in := [2]*moe.Input{kimiInput(t, s, w, m, uint64(9500+10*m)), kimiInput(t, s, w, m, uint64(9500+10*m+1))}
		var outs [2][]float32
		for i, noReady := range []bool{true, false} {
			set(noReady)
			forwardOut(t, l, in[0], m)
			outs[i] = forwardOut(t, l, in[1], m)
		}
		requireSameBits(t, m, "waiting for GEMM1's tile", outs[1], "waiting for all of GEMM1", outs[0])
		t.Logf("M=%d: %d values bitwise equal either way", m, len(outs[0]))
	}
	set(false)
}

// TestRouteXMany: the one-launch prologue above abiRouteCTAMax entries
// (kmoe_route_x_many: a CTA an expert, each counting every expert itself;
// one CTA for pos = -1; x as BF16 in the others) gives the bits of the four
// launches it replaces (the memset, kmoe_x_bf16, kmoe_route_count,
// kmoe_route_scatter) on the Kimi layer, whose EP filter leaves half the
// entries to other ranks: just past the one-CTA routing (M=65), on the
// 48-token tile with its ready counts (128), past the activation kernel
// by tile (300) and at 33 passes of a routing CTA's threads over the
// entries, each pass's rows following the one before (4200). Each
// forward follows one of another input, so a pos not rewritten (no
// memset now) or a count left over would show; and the profile shows
// which prologue ran.
func TestRouteXMany(t *testing.T) {
	_, l, s, w, _ := kimiF4Layer(t)
	set := func(maxM int) {
		t.Helper()
		setLayer(t, l, func(u *Tuning) { u.RouteManyMaxM = never(maxM) })
	}
	for _, m := range []int{65, 128, 300, 4200} {
		if l.PathFor(m) != "wgmma-fp4" || m*s.TopK <= abiRouteCTAMax {
			t.Fatalf("M=%d: path %s, %d entries", m, l.PathFor(m), m*s.TopK)
		}
		in := [2]*moe.Input{kimiInput(t, s, w, m, uint64(9700+10*m)), kimiInput(t, s, w, m, uint64(9700+10*m+1))}
		var outs [2][]float32
		for i, maxM := range []int{0, routeManyMaxMDefault} {
			set(maxM)
			forwardOut(t, l, in[0], m)
			outs[i] = forwardOut(t, l, in[1], m)
			prof, err := l.Profile(m)
			if err != nil {
				t.Fatal(err)
			}
			_, many := prof["route_x_many"]
			_, apart := prof["route_scatter"]
			if many != (maxM >= m) || apart == many {
				t.Errorf("M=%d, route-many-max-m=%d: the steps run were %v", m, maxM, prof)
			}
		}
		requireSameBits(t, m, "kmoe_route_x_many", outs[1], "the four launches", outs[0])
		t.Logf("M=%d: %d values bitwise equal either way", m, len(outs[0]))
	}
	set(routeManyMaxMDefault)
}

// TestF4ActKernel: GEMM1's activation and requantization as a kernel of
// their own (kmoe_act_requant, Plan.FP4.ActKernel) give the bits of GEMM1's
// fused epilogue: on the Kimi layer (SiTU's compile-time instance, mxfp8
// chain) at M on the mma.sync loop (1), the fitted loop (33, 128) and the
// plain one (600); and on a layer with the flashinfer chain and
// parameters that differ by expert (the run-time kind's instance and the
// kernel's search for a row's expert, which the oracle checks too: a row
// given another expert's parameters would miss it); the kernel both by
// tile and over the grid. The last part shows the forward launches the
// kernel at all.
func TestF4ActKernel(t *testing.T) {
	b, l, s, w, _ := kimiSM90aLayer(t, "the wgmma-fp4 path")
	set := func(l *Layer, on, byTile bool) {
		t.Helper()
		setLayer(t, l, func(u *Tuning) {
			u.DecodeMaxM, u.FP4ActMinM, u.FP4ActMaxM, u.ActByTileMaxM = -1, 1, -1, -1
			if on {
				u.FP4ActMaxM = 1 << 20
			}
			if byTile {
				u.ActByTileMaxM = 1 << 20
			}
		})
	}
	// GEMM1's epilogue, the kernel by tile (from f4TileReadyMinM tokens),
	// the kernel over the grid after all of GEMM1.
	fusedAndKernel := func(l *Layer, in *moe.Input, m int) [2][]float32 {
		t.Helper()
		var outs [3][]float32
		for i, mode := range []struct{ on, byTile bool }{{false, false}, {true, true}, {true, false}} {
			set(l, mode.on, mode.byTile)
			if l.PathFor(m) != "wgmma-fp4" || l.PlanFor(m, s.TopK).FP4.ActKernel != mode.on || l.PlanFor(m, s.TopK).FP4.ActByTile != (mode.byTile && m >= f4TileReadyMinM) {
				t.Fatalf("M=%d: path %s, activation kernel %v, by tile %v", m, l.PathFor(m), l.PlanFor(m, s.TopK).FP4.ActKernel, l.PlanFor(m, s.TopK).FP4.ActByTile)
			}
			outs[i] = forwardOut(t, l, in, m)
		}
		requireSameBits(t, m, "with the activation kernel by tile", outs[1], "with GEMM1's epilogue", outs[0])
		requireSameBits(t, m, "with the activation kernel over the grid", outs[2], "with GEMM1's epilogue", outs[0])
		return [2][]float32{outs[0], outs[1]}
	}
	for _, m := range []int{1, 33, 128, 600} {
		fusedAndKernel(l, kimiInput(t, s, w, m, uint64(9700+m)), m)
		t.Logf("M=%d (Kimi layer): bitwise equal either way", m)
	}

	s2 := validation.KimiEP32Rank7(activation.Situ, moe.ChainFlashInfer, mxfp.RecipeRCeil)
	for e := 0; e < s2.ELocal; e++ {
		p := activation.DefaultParams()
		p.SituBeta, p.SituLinearBeta = float64(2+e%3), float64(10+e)
		s2.Params = append(s2.Params, p)
	}
	l2, w2 := prepare(t, b, &s2, nil)
	defer l2.Close()
	o2, err := moe.NewOracle(w2, s2.LayerSpec())
	if err != nil {
		t.Fatal(err)
	}
	in := kimiInput(t, &s2, w2, 128, 9799)
	comparePaths(t, o2, in, w2.K, [2]string{"GEMM1's epilogue", "the activation kernel"}, fusedAndKernel(l2, in, 128))

	set(l, true, true)
	requireLaunched(t, l, kimiInput(t, s, w, 128, 9798), 128, &b.k.actRequant, "the activation kernel")
	set(l, false, false)
}

// TestF4LargeTiles: the 128- and 256-token tiles (one CTA an SM, A
// double-buffered: f4_pipe) give the bits of the 64-token tile, the
// 128-token one at the fewest tokens the default gives it on this layer
// (f4T128Band, both GEMMs in three warpgroups) and where it stays
// (f4W3T128MinM),
// the 256-token one (--tune fp4-tile=256 only) at M=4133, its last
// tiles part-filled; both agree with the oracle, with GEMM1's activation
// kernel and with its fused epilogue (which runs past f4ActMaxMDefault
// tokens). The tokens of a tile sum the same
// products in the same k order whatever the tile, so a token staged into
// the wrong row, a piece of the 256-token tile's compact staging
// (F4Pieces::COMPACT) at the wrong address or a wgmma reading a buffer
// the widening is still writing would show as other bits. The last part
// shows the forward launches the 256-token GEMM2 at all.
func TestF4LargeTiles(t *testing.T) {
	b, l, s, w, o := kimiF4Layer(t)
	set := func(tokens, actMaxM int) {
		t.Helper()
		setLayer(t, l, func(u *Tuning) { u.FP4Tile, u.FP4ActMaxM = tokens, never(actMaxM) })
	}
	lo := f4T128Band[0]
	if !f4W3Fits(w.N, w3SparePctDefault) || f4TileTokens(lo, true) != 128 || f4TileTokens(lo-1, true) != 64 {
		t.Fatalf("N=%d: M=%d: tile %d, M=%d: tile %d", w.N, lo, f4TileTokens(lo, true), lo-1, f4TileTokens(lo-1, true))
	}
	for _, c := range []struct{ m, tile, forced int }{{lo, 128, 0}, {f4W3T128MinM, 128, 0}, {4133, 256, 256}} {
		m := c.m
		if l.PathFor(m) != "wgmma-fp4" || (l.PlanFor(m, s.TopK).FP4.Loop == LoopFitted) {
			t.Fatalf("M=%d: path %s, fitted %v", m, l.PathFor(m), (l.PlanFor(m, s.TopK).FP4.Loop == LoopFitted))
		}
		in := kimiInput(t, s, w, m, uint64(9900+m))
		var outs [2][]float32
		for i, tokens := range []int{c.forced, 64} {
			set(tokens, f4ActMaxMDefault)
			outs[i] = forwardOut(t, l, in, m)
		}
		requireSameBits(t, m, fmt.Sprintf("on the %d-token tile", c.tile), outs[0], "on the 64-token tile", outs[1])
		set(c.forced, 0)
		fused := forwardOut(t, l, in, m)
		requireSameBits(t, m, "with GEMM1's epilogue", fused, "with the activation kernel", outs[0])
		comparePaths(t, o, in, w.K, [2]string{fmt.Sprintf("the %d-token tile", c.tile), "the 64-token tile"}, outs)
	}
	set(256, f4ActMaxMDefault)
	m := 4133
	in := kimiInput(t, s, w, m, 9999)
	saved := b.k.f4Gemm2[256]
	b.k.f4Gemm2[256] = kernel[f4Gemm2Args]{}
	err := l.Forward(nanFilledOut(m*w.K), in, nil)
	b.k.f4Gemm2[256] = saved
	set(0, f4ActMaxMDefault)
	if err == nil {
		t.Fatalf("M=%d ran without the 256-token GEMM2", m)
	}
}

// K and N that are multiples of 32 but not of 128 (a small shape, and
// GPT-OSS-20B's 2880 with 8 of its experts) take the wgmma-fp4 path,
// padded with zero weights, at every M class and on both of its chains,
// with GPT-OSS's activation and biases: against the oracle on sampled
// rows, and a second forward of the same input bitwise equal (the
// padding of x's BF16 rows, zeroed once, is never written). Without the
// padding (fp4.Dims) these layers had no wgmma-fp4 path and the bf16 chain
// was refused.
func TestF4Padded(t *testing.T) {
	b := openCUDAOrSkip(t)
	if !b.arch.wgmma {
		t.Skipf("the wgmma-fp4 path needs sm_90a; this device is %s", b.arch)
	}
	oss := moe.GPTOSS20B()
	for _, shape := range [][2]int{{160, 96}, {oss.K, oss.N}} {
		for _, chain := range []moe.Chain{moe.ChainMXFP8, moe.ChainBF16} {
			s := validation.GPTOSS(oss, chain, mxfp.RecipeRCeil)
			s.K, s.N, s.ELocal, s.Name = shape[0], shape[1], 8, "padded"
			l, w := prepare(t, b, &s, nil)
			o, err := moe.NewOracle(w, s.LayerSpec())
			if err != nil {
				t.Fatal(err)
			}
			if l.f4.k%128 != 0 || l.f4.n%128 != 0 || l.f4.k < w.K || l.f4.n < w.N {
				t.Fatalf("K=%d N=%d padded to %d, %d", w.K, w.N, l.f4.k, l.f4.n)
			}
			for _, m := range []int{1, 8, 64, 300} {
				if l.PathFor(m) != "wgmma-fp4" {
					t.Fatalf("K=%d N=%d %v M=%d takes the %s path", w.K, w.N, chain, m, l.PathFor(m))
				}
				in := kimiInput(t, &s, w, m, uint64(4400+m))
				out := forwardOut(t, l, in, m)
				again := forwardOut(t, l, in, m)
				for i := range out {
					if math.Float32bits(out[i]) != math.Float32bits(again[i]) {
						t.Fatalf("K=%d N=%d %v M=%d: a second forward differs at %d: %g, then %g", w.K, w.N, chain, m, i, out[i], again[i])
					}
				}
				if met := oracleMetrics(t, o, in, w.K, out)[0]; met.Cosine < validation.MinCosine || !(met.NRMSE <= validation.MaxNRMSE) {
					t.Errorf("K=%d N=%d %v M=%d against the oracle: %+v", w.K, w.N, chain, m, met)
				}
			}
			l.Close()
		}
	}
}

// TestF4W3: GEMM1 and GEMM2 in three warpgroups (Plan.FP4.W3, 96 features
// a GEMM1 CTA; Plan.FP4.W3Gemm2, 192 output features a GEMM2 CTA), each with
// its stages on the CTA barrier or on mbarriers (Plan.FP4.Ring), give the
// bits of the two-warpgroup grids, each switch on its own and together,
// at the fewest tokens of the 128-token tile and at M=1500 (part-filled
// last tiles): each warpgroup runs the same k loop on the same 64 weight
// rows, so a warpgroup given another's rows, a token piece staged by the
// wrong one of the 384 threads, a stage refilled while a warpgroup still
// reads it or read before every thread's copies landed, or a spare GEMM2
// warpgroup (K = 3584 is 56 row groups, one short of 19 CTAs of three)
// that stores would show as other bits. A ring phase miscounted (the
// full barriers' parity off by one) never completes the forward: the
// test fails at its timeout.
// All agree with the oracle; the forward launches each kernel; and ptxas
// kept them out of local memory (a spill would cost more than the third
// warpgroup gains).
func TestF4W3(t *testing.T) {
	b, l, s, w, o := kimiF4Layer(t)
	// way: three warpgroups off on GEMM1, on GEMM2, the ring off.
	set := func(way [3]bool) {
		t.Helper()
		setLayer(t, l, func(u *Tuning) { u.NoW3, u.NoW3Gemm2, u.NoRing, u.W3FitMaxM = way[0], way[1], way[2], -1 }) // TestF4W3Fit's
	}
	if w.K/64%3 == 0 {
		t.Fatalf("K = %d: no spare GEMM2 warpgroup to check", w.K)
	}
	ways := [][3]bool{{true, true, false}, {false, true, true}, {true, false, true}, {false, false, true},
		{false, true, false}, {true, false, false}, {false, false, false}}
	for _, m := range []int{f4T128Band[0], 1500} {
		in := kimiInput(t, s, w, m, uint64(9700+m))
		outs := make([][]float32, len(ways))
		for i, off := range ways {
			set(off)
			p := l.PlanFor(m, s.TopK)
			ring := (p.FP4.W3 || p.FP4.W3Gemm2) && !off[2]
			if p.FP4.W3 == off[0] || p.FP4.W3Gemm2 == off[1] || p.FP4.Ring != ring || p.Tile != 128 || !p.FP4.ActKernel {
				t.Fatalf("M=%d, off %v: plan %s", m, off, p)
			}
			outs[i] = forwardOut(t, l, in, m)
		}
		for i := 1; i < len(ways); i++ {
			requireSameBits(t, m, fmt.Sprintf("three warpgroups on GEMM1 %v, GEMM2 %v, ring %v", !ways[i][0], !ways[i][1], !ways[i][2]),
				outs[i], "on neither", outs[0])
		}
		comparePaths(t, o, in, w.K, [2]string{"both GEMMs in three warpgroups on the ring", "in two"}, [2][]float32{outs[6], outs[0]})
	}
	in := kimiInput(t, s, w, f4W3T128MinM, 9701)
	set([3]bool{false, false, true})
	requireLaunched(t, l, in, f4W3T128MinM, &b.k.f4W3Gemm1[f4W3Barrier], "GEMM1 in three warpgroups")
	requireLaunched(t, l, in, f4W3T128MinM, &b.k.f4W3Gemm2[f4W3Barrier], "GEMM2 in three warpgroups")
	set([3]bool{false, false, false})
	requireLaunched(t, l, in, f4W3T128MinM, &b.k.f4W3Gemm1[f4W3Ring], "GEMM1 in three warpgroups on the ring")
	requireLaunched(t, l, in, f4W3T128MinM, &b.k.f4W3Gemm2[f4W3Ring], "GEMM2 in three warpgroups on the ring")
	requireNoLocal(t, b, f4W3Barrier, f4W3Ring)
}

// TestF4W3Spare: where N / 32 is not a multiple of three (GPT-OSS-20B's
// 2880, padded to 2944: 92 row groups in 31 CTAs of GEMM1), the last
// three-warpgroup GEMM1 CTA's spare warpgroup stages its share and
// stores nothing, and so do GEMM2's two (K = 2944 is 46 row groups of 64
// in 16 CTAs): on both chains, at M = 300 and
// 1500 on the forced 128-token tile, GEMM1 in three warpgroups and both
// GEMMs so give the bits of the two-warpgroup grids, agree with the
// oracle, and the forward launches both kernels. A spare warpgroup that
// stored would write 32 features past the padded N into the next token's
// row (and read the next expert's weights), so other bits.
func TestF4W3Spare(t *testing.T) {
	b := openCUDAOrSkip(t)
	if !b.arch.wgmma {
		t.Skipf("the wgmma-fp4 path needs sm_90a; this device is %s", b.arch)
	}
	oss := moe.GPTOSS20B()
	for _, chain := range []moe.Chain{moe.ChainMXFP8, moe.ChainBF16} {
		s := validation.GPTOSS(oss, chain, mxfp.RecipeRCeil)
		s.ELocal, s.Name = 8, "spare"
		l, w := prepare(t, b, &s, nil)
		o, err := moe.NewOracle(w, s.LayerSpec())
		if err != nil {
			t.Fatal(err)
		}
		if l.f4.n/32%3 == 0 || l.f4.k/64%3 == 0 {
			t.Fatalf("padded K=%d N=%d: no spare warpgroup to check", l.f4.k, l.f4.n)
		}
		// ways: the two-warpgroup grids, GEMM1 in three (the policy's
		// spare bound), both GEMMs in three.
		ways := []Tuning{{NoW3: true, NoW3Gemm2: true}, {NoW3Gemm2: true}, {}}
		for _, m := range []int{300, 1500} {
			in := kimiInput(t, &s, w, m, uint64(9600+m))
			outs := make([][]float32, len(ways))
			for i, way := range ways {
				setLayer(t, l, func(u *Tuning) {
					*u = way
					u.FP4Tile, u.FP4ActMinM = f4W3Tile, 1
				})
				p := l.PlanFor(m, s.TopK)
				if p.FP4.W3 != (i > 0) || p.FP4.W3Gemm2 != (i == 2) || p.Tile != f4W3Tile || !p.FP4.ActKernel {
					t.Fatalf("%v M=%d, %+v: plan %s", chain, m, way, p)
				}
				outs[i] = forwardOut(t, l, in, m)
			}
			requireSameBits(t, m, fmt.Sprintf("%v, GEMM1 in three warpgroups", chain), outs[1], "in two", outs[0])
			requireSameBits(t, m, fmt.Sprintf("%v, both GEMMs in three warpgroups", chain), outs[2], "in two", outs[0])
			if met := oracleMetrics(t, o, in, w.K, outs[2])[0]; met.Cosine < validation.MinCosine || !(met.NRMSE <= validation.MaxNRMSE) {
				t.Errorf("%v M=%d against the oracle: %+v", chain, m, met)
			}
		}
		in := kimiInput(t, &s, w, 1500, 9601)
		requireLaunched(t, l, in, 1500, &b.k.f4W3Gemm1[f4W3RingFit], "GEMM1 in three warpgroups, one spare")
		requireLaunched(t, l, in, 1500, &b.k.f4W3Gemm2[f4W3RingFit], "GEMM2 in three warpgroups, two spare")
		l.Close()
	}
}

// TestF4W3Fit: the three-warpgroup ring GEMMs at each tile's tokens
// rounded up to f4W3FitStep (Plan.FP4.W3Fit, the _w3rf_ kernels) give the
// bits of the same kernels at the tile's 128: a column past the tile's
// tokens holds a zero row's products, which no token reads, so a tile
// given too few columns (its last tokens' products never computed), a
// token row staged past the loop's N, or a loop picked for another tile
// would show as other bits. The 128-token tile is forced from M=40
// (about 11 tokens an expert: the 16-token loop) through M=256 (73: the
// 64- to 112-token loops) to M=1500 (three full tiles an expert and a
// part-filled one: 128 and 16 to 80), so most of the eight loops run.
// Both agree with the oracle, the forward launches both fitted kernels,
// and ptxas kept them out of local memory.
func TestF4W3Fit(t *testing.T) {
	b, l, s, w, o := kimiF4Layer(t)
	for _, m := range []int{40, 256, 1500} {
		in := kimiInput(t, s, w, m, uint64(9800+m))
		var outs [2][]float32
		for i, fit := range []int{-1, 0} {
			setLayer(t, l, func(u *Tuning) { u.FP4Tile, u.FP4ActMinM, u.W3FitMaxM = f4W3Tile, 1, fit })
			p := l.PlanFor(m, s.TopK)
			if !p.FP4.W3 || !p.FP4.W3Gemm2 || !p.FP4.Ring || p.FP4.W3Fit != (fit == 0) {
				t.Fatalf("M=%d, w3-fit-max-m=%d: plan %s", m, fit, p)
			}
			outs[i] = forwardOut(t, l, in, m)
		}
		requireSameBits(t, m, "fitted to the tile", outs[1], "at 128 tokens", outs[0])
		comparePaths(t, o, in, w.K, [2]string{"at 128 tokens", "fitted to the tile"}, outs)
	}
	in := kimiInput(t, s, w, 256, 9801)
	requireLaunched(t, l, in, 256, &b.k.f4W3Gemm1[f4W3RingFit], "GEMM1 fitted to the tile")
	requireLaunched(t, l, in, 256, &b.k.f4W3Gemm2[f4W3RingFit], "GEMM2 fitted to the tile")
	requireNoLocal(t, b, f4W3RingFit)
}

// requireNoLocal fails t where ptxas gave a three-warpgroup GEMM of one
// of the loops local memory (a spill would cost more than the third
// warpgroup gains).
func requireNoLocal(t *testing.T, b *Backend, loops ...f4W3Loop) {
	t.Helper()
	for _, i := range loops {
		for _, k := range []struct {
			spec kernelSpec
			fn   cu.Function
		}{{kF4W3Gemm1[i], b.k.f4W3Gemm1[i].fn}, {kF4W3Gemm2[i], b.k.f4W3Gemm2[i].fn}} {
			if n, err := cu.FuncLocalBytes(k.fn); err != nil || n != 0 {
				t.Errorf("%s: %d bytes of local memory a thread (%v)", k.spec.name, n, err)
			}
		}
	}
}
