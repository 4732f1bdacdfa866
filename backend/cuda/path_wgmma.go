//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/layout/wgmma"
)

// wgmmaPath is the wgmma GEMMs on BF16 weights (sm_90; internal/layout/wgmma).
type wgmmaPath struct{}

func (wgmmaPath) steps(l *Layer, ws *workspace, p *Plan) []step {
	g1, g2 := l.wgSteps(ws, p)
	return l.tiledSteps(ws, p, g1, g2)
}

// wgSteps are the wgmma GEMMs on BF16 weights (internal/layout/wgmma): GEMM1 with
// the activation in its epilogue, then GEMM2, at p.WGMMA.Rows weight rows a
// tile.
func (l *Layer) wgSteps(ws *workspace, p *Plan) (gemm1, gemm2 []step) {
	w, b, s := l.w, l.b, l.b.stream
	recipe := recipeCode(l.spec.Recipe)
	bn1, bn2 := p.WGMMA.Rows[0], p.WGMMA.Rows[1]
	gemm1 = []step{{"gemm1_act", func() error {
		return b.k.wgGemm1[bn1].launchWith([3]int{w.N / (bn1 / 2), p.Tiles, 1}, abiThreads, wgSmem(bn1), s,
			&wgGemm1Args{XBF: ws.xbf, W: l.wg.w31, Perm: ws.perm, Offset: ws.offset, TileBase: ws.tileBase,
				Params: l.params, B1: l.b1, AQBF: ws.aqbf, K: i32(w.K), N: i32(w.N), TopK: i32(ws.topk), ELocal: i32(w.E),
				Kind: activationCode(l.spec.Activation), NParams: i32(len(l.spec.Params)), Chain: chainCode(l.spec.Chain), Recipe: recipe})
	}}}
	gemm2 = []step{{"gemm2", func() error {
		return b.k.wgGemm2[bn2].launchWith([3]int{w.K / bn2, p.Tiles, 1}, abiThreads, wgSmem(bn2), s,
			&wgGemm2Args{AQBF: ws.aqbf, W: l.wg.w2, Offset: ws.offset, TileBase: ws.tileBase, Y: ws.y,
				N: i32(w.N), K: i32(w.K), ELocal: i32(w.E)})
	}}}
	return gemm1, gemm2
}

// available needs an sm_90 device and K and N the wgmma tiles divide; it
// fixes the tile rows.
func (wgmmaPath) available(l *Layer) string {
	w := l.w
	switch {
	case !l.b.arch.wgmma:
		l.wg.whyNot = "the device is " + l.b.arch.target
	case wgmma.TileRows(w) == 0:
		l.wg.whyNot = fmt.Sprintf("K=%d, N=%d", w.K, w.N)
	default:
		// GEMM1 at 128 rows a tile (two CTAs an SM: one's activation
		// epilogue runs beside the other's MMAs), GEMM2 at wgmma.TileRows'.
		l.wg.whyNot, l.wg.rows = "", [2]int{128, wgmma.TileRows(w)}
	}
	return l.wg.whyNot
}

func (wgmmaPath) weights(l *Layer) []*devptr { return l.wg.ptrs() }

// bind binds x's BF16 prologues (the wgmma-fp4 path's too) and the
// wgmma GEMMs.
func (wgmmaPath) bind(m cu.Module, k *kernels) error {
	var errs [5]error
	k.xBF16, errs[0] = bind[xBF16Args](m, kXBF16)
	k.routeXBF16, errs[1] = bind[routeXBF16Args](m, kRouteXBF16)
	k.routeXMany, errs[2] = bind[routeXBF16Args](m, kRouteXMany)
	k.wgGemm1, errs[3] = bindAll[wgGemm1Args](m, kWGGemm1, wgSmem)
	k.wgGemm2, errs[4] = bindAll[wgGemm2Args](m, kWGGemm2, wgSmem)
	return errors.Join(errs[:]...)
}

// buffers: x and the intermediate as BF16.
func (wgmmaPath) buffers(l *Layer, ws *workspace, _ *Plan) []wsBuf { return l.bf16Buffers(ws) }

// upload arranges and uploads the weights as BF16 wgmma operands.
func (wgmmaPath) upload(l *Layer) error {
	w := l.w
	return l.uploadAll(upload{&l.wg.w31, wgmma.W31(w, l.wg.rows[0])}, upload{&l.wg.w2, wgmma.W2(w, l.wg.rows[1])})
}
