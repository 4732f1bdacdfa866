//go:build cgo

package cuda

import (
	"errors"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/layout/fp4"
)

// fp4Path is the wgmma-fp4 GEMMs: MXFP4 weights widened to BF16 in
// registers (sm_90; internal/layout/fp4).
type fp4Path struct{}

func (fp4Path) steps(l *Layer, ws *workspace, p *Plan) []step {
	g1, g2 := l.f4Steps(ws, p)
	return l.tiledSteps(ws, p, g1, g2)
}

// f4Steps are the wgmma-fp4 GEMMs (internal/layout/fp4): GEMM1 (with the
// activation in its epilogue, or as kmoe_act_requant after it), then
// GEMM2, on p.FP4.Loop's instances of p.Tile tokens. With p.FP4.TileReady GEMM2's
// CTAs wait for their own tile's producers (tile_wait) rather than for
// the whole grid ahead; with p.FP4.PDL each launch may start before the one
// ahead of it ends and waits where it reads (pdl_wait).
func (l *Layer) f4Steps(ws *workspace, p *Plan) (gemm1, gemm2 []step) {
	w, b, s := l.w, l.b, l.b.stream
	recipe, tt, entries := recipeCode(l.spec.Recipe), p.Tile, ws.m*ws.topk
	ready, actDone, _ := ws.readyCounts(p)
	kp, np := l.f4.k, l.f4.n         // the padded shape (fp4.Dims)
	gemm1CTAs := np / abiF4RowsGemm1 // GEMM1's CTAs a tile: what a wait on its counts waits for
	if p.FP4.W3 {
		gemm1CTAs = (np + f4W3Features - 1) / f4W3Features // a last CTA's spare warpgroups store nothing
	}
	ready2, readyTarget2 := ready, gemm1CTAs // what GEMM2 waits for
	if p.FP4.ActByTile {
		ready2, readyTarget2 = actDone, tt // a CTA a row of the tile
	}
	kernels := func() (g1 kernel[f4Gemm1Args], g2 kernel[f4Gemm2Args], smem int) {
		k := b.k
		switch p.FP4.Loop {
		case LoopSync:
			g1, g2, smem = k.f4sGemm1[tt], k.f4sGemm2[tt], f4sSmem(tt)
			if p.FP4.Deep2 {
				g2 = k.f4sGemm2Deep
			}
		case LoopFitted:
			g1, g2, smem = k.f4FitGemm1[tt], k.f4FitGemm2[tt], f4Smem(tt)
		default:
			g1, g2, smem = k.f4Gemm1[tt], k.f4Gemm2[tt], f4Smem(tt)
		}
		return g1, g2, smem
	}
	gemm1 = []step{{"gemm1_act", func() error {
		g1, _, smem := kernels()
		threads := abiThreads
		if p.FP4.W3 {
			g1, threads = b.k.f4W3Gemm1[p.FP4.w3Loop()], f4W3Threads
		}
		return g1.launchMaybePDL(p.FP4.PDL, [3]int{gemm1CTAs, p.Tiles, 1}, threads, smem, s,
			&f4Gemm1Args{XBF: ws.xbf, W: l.f4.w31, WS: l.f4.w31s, Perm: ws.perm, Offset: ws.offset, TileBase: ws.tileBase,
				Params: l.params, B1: l.b1, AQBF: ws.aqbf, Ready: ready, UG: ws.ug, K: i32(kp), N: i32(np), TopK: i32(ws.topk), ELocal: i32(w.E), NB1: i32(w.N),
				Kind: activationCode(l.spec.Activation), NParams: i32(len(l.spec.Params)), Chain: chainCode(l.spec.Chain), Recipe: recipe})
	}}}
	if p.FP4.ActKernel {
		gemm1 = append(gemm1, step{"act_requant", func() error {
			warps := (entries*np/32 + 3) / 4 // the routed rows' blocks (an upper bound), four a warp at a time
			grid := [3]int{min((warps+abiThreads/32-1)/(abiThreads/32), p.FP4.ActCTAs*b.sms), 1, 1}
			if p.FP4.ActByTile {
				grid = [3]int{tt, p.Tiles, 1} // a CTA a row of a tile
			}
			return b.k.actRequant.launchMaybePDL(p.FP4.PDL, grid, abiThreads, 0, s,
				&actRequantArgs{UG: ws.ug, Offset: ws.offset, Params: l.params, B1: l.b1, AQBF: ws.aqbf, TileBase: ws.tileBase, Ready: ready,
					Done: actDone, N: i32(np), NB1: i32(w.N), ELocal: i32(w.E), Kind: activationCode(l.spec.Activation),
					NParams: i32(len(l.spec.Params)), Chain: chainCode(l.spec.Chain), Recipe: recipe, TT: i32(tt),
					ReadyTarget: i32(gemm1CTAs)})
		}})
	}
	gemm2 = []step{{"gemm2", func() error {
		_, g2, smem := kernels()
		ctas, threads := kp/abiF4RowsGemm2, abiThreads
		if p.FP4.W3Gemm2 {
			g2, ctas, threads = b.k.f4W3Gemm2[p.FP4.w3Loop()], (kp+f4W3Gemm2Rows-1)/f4W3Gemm2Rows, f4W3Threads
		}
		return g2.launchMaybePDL(p.FP4.PDL, [3]int{ctas, p.Tiles, 1}, threads, smem, s,
			&f4Gemm2Args{AQBF: ws.aqbf, W: l.f4.w2, WS: l.f4.w2s, Offset: ws.offset, TileBase: ws.tileBase, Y: ws.y,
				Ready: ready2, N: i32(np), K: i32(kp), ELocal: i32(w.E), ReadyTarget: i32(readyTarget2)})
	}}}
	return gemm1, gemm2
}

// available needs an sm_90 device and weight scales in the exact
// widening's window (f4Available); it fixes the padded K and N.
func (fp4Path) available(l *Layer) string {
	w := l.w
	if !l.b.arch.wgmma {
		l.f4.whyNot = "the device is " + l.b.arch.target
	} else if l.f4.whyNot = fp4.Available(w); l.f4.whyNot == "" {
		l.f4.k, l.f4.n = fp4.Dims(w)
	}
	return l.f4.whyNot
}

func (fp4Path) weights(l *Layer) []*devptr { return l.f4.ptrs() }

// bind binds the wgmma-fp4 GEMMs of every loop and tile, the activation
// kernel (and how many of its CTAs an SM holds), and the three-warpgroup
// GEMMs.
func (fp4Path) bind(m cu.Module, k *kernels) error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	k.f4Gemm1, err = bindAll[f4Gemm1Args](m, kF4Gemm1, f4Smem)
	add(err)
	k.f4Gemm2, err = bindAll[f4Gemm2Args](m, kF4Gemm2, f4Smem)
	add(err)
	k.f4FitGemm1, err = bindAll[f4Gemm1Args](m, kF4FitGemm1, f4Smem)
	add(err)
	k.f4FitGemm2, err = bindAll[f4Gemm2Args](m, kF4FitGemm2, f4Smem)
	add(err)
	k.f4sGemm1, err = bindAll[f4Gemm1Args](m, kF4SGemm1, f4sSmem)
	add(err)
	k.f4sGemm2, err = bindAll[f4Gemm2Args](m, kF4SGemm2, f4sSmem)
	add(err)
	k.f4sGemm2Deep, err = bindSmem[f4Gemm2Args](m, kF4SGemm2Deep, f4sSmem(8))
	add(err)
	k.actRequant, err = bind[actRequantArgs](m, kActRequant)
	add(err)
	if err == nil {
		k.actResident, err = residentCTAs(k.actRequant.fn, abiThreads, 0)
		add(err)
	}
	for i := range f4W3Suffix {
		k.f4W3Gemm1[i], err = bindSmem[f4Gemm1Args](m, kF4W3Gemm1[i], f4Smem(f4W3Tile))
		add(err)
		k.f4W3Gemm2[i], err = bindSmem[f4Gemm2Args](m, kF4W3Gemm2[i], f4Smem(f4W3Tile))
		add(err)
	}
	return errors.Join(errs...)
}

// buffers: x and the intermediate as BF16, the per-tile counts (at most
// one tile an entry and one partial tile an expert, two counts a tile
// where the activation runs by tile), and GEMM1's float32 up and gate
// where the activation is a kernel of its own.
func (fp4Path) buffers(l *Layer, ws *workspace, p *Plan) []wsBuf {
	entries := ws.m * ws.topk
	bufs := append(l.bf16Buffers(ws), wsBuf{&ws.ready, 4 * 2 * (entries + l.w.E)})
	if p.FP4.ActKernel {
		bufs = append(bufs, wsBuf{&ws.ug, 8 * entries * max(l.w.N, l.f4.n)})
	}
	return bufs
}

// upload arranges and uploads the weights for the wgmma-fp4 GEMMs.
func (fp4Path) upload(l *Layer) error {
	w := l.w
	p31, s31 := fp4.W31(w)
	p2, s2 := fp4.W2(w)
	return l.uploadAll(upload{&l.f4.w31, p31}, upload{&l.f4.w31s, s31}, upload{&l.f4.w2, p2}, upload{&l.f4.w2s, s2})
}
