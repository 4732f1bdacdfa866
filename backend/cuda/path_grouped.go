//go:build cgo

package cuda

import (
	"errors"
	"kimimoe/backend/cuda/internal/cu"
)

// The grouped paths share a prologue (x prepared for the GEMMs, the
// entries routed into token tiles by expert) and the finalize; this file
// holds that and the mma.sync GEMMs, which read x as MXFP8 and the
// weights as given.

// readyCounts are the wgmma-fp4 GEMMs' per-tile counts the prologue
// zeroes: one a tile where GEMM2 waits for its tile's GEMM1 CTAs, two
// where the activation kernel runs by tile between them (actDone, the
// second half, counts its CTAs).
func (ws *workspace) readyCounts(p *Plan) (ready, actDone devptr, n int) {
	switch {
	case p.FP4.ActByTile:
		return ws.ready, ws.ready + devptr(4*p.Tiles), 2 * p.Tiles
	case p.FP4.TileReady:
		return ws.ready, 0, p.Tiles
	}
	return 0, 0, 0
}

// prologueSteps prepare x (quantized for the mma.sync GEMMs, BF16 for the
// wgmma ones) and route the entries, as p.Prologue says.
func (l *Layer) prologueSteps(ws *workspace, p *Plan) []step {
	w, b, s := l.w, l.b, l.b.stream
	m, entries := ws.m, ws.m*ws.topk
	recipe, form := recipeCode(l.spec.Recipe), ws.abiForm()
	ready, _, nReady := ws.readyCounts(p)
	nblocks := m * w.K / 32
	xCTAs4 := ((nblocks+3)/4*32 + abiThreads - 1) / abiThreads // x as BF16 four blocks a warp (kmoe_x_bf16, kmoe_route_x_many)
	kout := l.rowK(p.Path)                                     // x's row stride as BF16
	routeX := func() *routeXBF16Args {
		return &routeXBF16Args{X: ws.x, Codes: ws.xq, Scales: ws.xs, IDs: ws.ids, Out: ws.xbf, Pos: ws.pos, Perm: ws.perm,
			Offset: ws.offset, TileBase: ws.tileBase, Ready: ready, NBlocks: i32(nblocks), NEntries: i32(entries), Rank: i32(l.epRank),
			ELocal: i32(w.E), TT: i32(p.Tile), Recipe: recipe, Form: form, NReady: i32(nReady), Chain: chainCode(l.spec.Chain),
			K: i32(w.K), KOut: i32(kout)}
	}
	switch p.Prologue {
	case PrologueOneCTA:
		xCTAs := min((nblocks+abiThreads/32-1)/(abiThreads/32), 2*b.sms)
		return []step{{"route_x_bf16", func() error {
			return b.k.routeXBF16.launchWith([3]int{1 + xCTAs, 1, 1}, abiThreads, 4*(w.E+1), s, routeX())
		}}}
	case PrologueMany: // a CTA an expert, one for pos = -1, x four blocks a warp
		return []step{{"route_x_many", func() error {
			return b.k.routeXMany.launchWith([3]int{w.E + 1 + xCTAs4, 1, 1}, abiThreads, 4*w.E, s, routeX())
		}}}
	}
	xstep := step{"quantize_x", func() error {
		if ws.form != formFloat {
			return nil
		}
		return b.k.quantizeX.launch([3]int{(nblocks*32 + abiThreads - 1) / abiThreads, 1, 1}, s,
			&quantizeXArgs{X: ws.x, Codes: ws.xq, Scales: ws.xs, NBlocks: i32(nblocks), Recipe: recipe})
	}}
	if p.Prologue == PrologueBF16 {
		xstep = step{"x_bf16", func() error {
			return b.k.xBF16.launch([3]int{xCTAs4, 1, 1}, s,
				&xBF16Args{X: ws.x, Codes: ws.xq, Scales: ws.xs, Out: ws.xbf, NBlocks: i32(nblocks), Recipe: recipe, Form: form, Chain: chainCode(l.spec.Chain),
					K: i32(w.K), KOut: i32(kout)})
		}}
	}
	return []step{
		{"memset", func() error {
			if nReady > 0 {
				if err := b.memset32(ready, 0, nReady); err != nil {
					return err
				}
			}
			return b.memset32(ws.pos, 0xFFFFFFFF, entries)
		}},
		xstep,
		{"route_count", func() error {
			return b.k.routeCount.launch([3]int{w.E, 1, 1}, s,
				&routeCountArgs{IDs: ws.ids, Counts: ws.counts, NEntries: i32(entries), Rank: i32(l.epRank), ELocal: i32(w.E)})
		}},
		{"route_scatter", func() error {
			return b.k.routeScatter.launch([3]int{w.E, 1, 1}, s,
				&routeScatterArgs{IDs: ws.ids, Counts: ws.counts, Perm: ws.perm, Pos: ws.pos, Offset: ws.offset, TileBase: ws.tileBase,
					NEntries: i32(entries), Rank: i32(l.epRank), ELocal: i32(w.E), TT: i32(p.Tile)})
		}},
	}
}

// groupedPath is the mma.sync grouped GEMMs on the weights as given.
type groupedPath struct{}

func (groupedPath) steps(l *Layer, ws *workspace, p *Plan) []step {
	g1, g2 := l.mxSteps(ws, p)
	return l.tiledSteps(ws, p, g1, g2)
}

// available: every device runs this path (and a plan takes it only
// where K and N are multiples of 128).
func (groupedPath) available(*Layer) string { return "" }

func (groupedPath) weights(l *Layer) []*devptr { return l.mx.ptrs() }

// bind binds the grouped GEMMs at both token tiles.
func (groupedPath) bind(m cu.Module, k *kernels) error {
	k.gemm1, k.gemm2 = map[int]kernel[gemm1Args]{}, map[int]kernel[gemm2Args]{}
	var errs []error
	for tt, specs := range map[int][2]kernelSpec{abiTileSmall: {kGemm1Small, kGemm2Small}, abiTileLarge: {kGemm1Large, kGemm2Large}} {
		g1, err := bind[gemm1Args](m, specs[0])
		errs = append(errs, err)
		g2, err := bind[gemm2Args](m, specs[1])
		errs = append(errs, err)
		k.gemm1[tt], k.gemm2[tt] = g1, g2
	}
	return errors.Join(errs...)
}

// buffers: none beyond every path's (x as MXFP8, the intermediate).
func (groupedPath) buffers(*Layer, *workspace, *Plan) []wsBuf { return nil }

// upload copies the weights as given.
func (groupedPath) upload(l *Layer) error {
	w := l.w
	return l.uploadAll(upload{&l.mx.w31, w.W31}, upload{&l.mx.w31s, w.W31Scale}, upload{&l.mx.w2, w.W2}, upload{&l.mx.w2s, w.W2Scale})
}

// mxSteps are the mma.sync grouped GEMMs: GEMM1 with the activation and
// requantization in its epilogue, then GEMM2.
func (l *Layer) mxSteps(ws *workspace, p *Plan) (gemm1, gemm2 []step) {
	w, b, s := l.w, l.b, l.b.stream
	recipe, tt := recipeCode(l.spec.Recipe), p.Tile
	gemm1 = []step{{"gemm1_act", func() error {
		return b.k.gemm1[tt].launch([3]int{w.N / abiGemm1Features, p.Tiles, 1}, s,
			&gemm1Args{XQ: ws.xq, XS: ws.xs, W31: l.mx.w31, W31S: l.mx.w31s, Perm: ws.perm, Offset: ws.offset, TileBase: ws.tileBase,
				Params: l.params, B1: l.b1, AQ: ws.aq, AQS: ws.aqs, K: i32(w.K), N: i32(w.N), TopK: i32(ws.topk), ELocal: i32(w.E),
				Kind: activationCode(l.spec.Activation), NParams: i32(len(l.spec.Params)), Chain: chainCode(l.spec.Chain), Recipe: recipe})
	}}}
	gemm2 = []step{{"gemm2", func() error {
		return b.k.gemm2[tt].launch([3]int{w.K / abiGemm2Rows, p.Tiles, 1}, s,
			&gemm2Args{AQ: ws.aq, AQS: ws.aqs, W2: l.mx.w2, W2S: l.mx.w2s, Offset: ws.offset, TileBase: ws.tileBase, Y: ws.y,
				N: i32(w.N), K: i32(w.K), ELocal: i32(w.E)})
	}}}
	return gemm1, gemm2
}
