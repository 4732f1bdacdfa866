//go:build cgo

package cuda

import (
	"errors"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/backend/cuda/internal/layout/decode"
)

// decodePath streams the weights in tiles (internal/layout/decode), tokens on
// the MMA's narrow side.
type decodePath struct{}

func (decodePath) steps(l *Layer, ws *workspace, p *Plan) []step { return l.decodeSteps(ws, p) }

// available: every device and shape runs this path.
func (decodePath) available(*Layer) string { return "" }

func (decodePath) weights(l *Layer) []*devptr { return l.dec.ptrs() }

// bind binds the decode prologue and GEMMs.
func (decodePath) bind(m cu.Module, k *kernels) error {
	var e1, e2, e3 error
	k.decPrologue, e1 = bind[decodePrologueArgs](m, kDecPrologue)
	k.decGemm1, e2 = bindAll[decodeGemm1Args](m, kDecGemm1, nil)
	k.decGemm2, e3 = bindAll[decodeGemm2Args](m, kDecGemm2, nil)
	return errors.Join(e1, e2, e3)
}

// buffers: x padded, its float scales, the touched experts and the
// intermediate's float scales, each with one more row (zeros).
func (decodePath) buffers(l *Layer, ws *workspace, _ *Plan) []wsBuf {
	w, m, entries := l.w, ws.m, ws.m*ws.topk
	kp, np := layout.PadTo(w.K), layout.PadTo(w.N)
	return []wsBuf{{&ws.xqd, (m + 1) * kp}, {&ws.xsf, 4 * (m + 1) * kp / 32}, {&ws.touched, 4 * (w.E + 1)}, {&ws.aqsf, 4 * (entries + 1) * np / 32}}
}

// upload copies the weights re-laid in the decode tiles.
func (decodePath) upload(l *Layer) error {
	d31, d31s := decode.W31(l.w)
	d2, d2s := decode.W2(l.w)
	return l.uploadAll(upload{&l.dec.w31, d31}, upload{&l.dec.w31s, d31s}, upload{&l.dec.w2, d2}, upload{&l.dec.w2s, d2s})
}

// decodeSteps are the decode path: prologue (quantize or copy x, route),
// GEMM1 with the activation, GEMM2, finalize.
func (l *Layer) decodeSteps(ws *workspace, p *Plan) []step {
	w, b, s := l.w, l.b, l.b.stream
	m, topk, entries := ws.m, ws.topk, ws.m*ws.topk
	kp, np := layout.PadTo(w.K), layout.PadTo(w.N)
	maxExperts := min(w.E, entries)
	form := ws.abiForm()
	quantCTAs := min((m*kp/32+7)/8, 2*b.sms) // two CTAs an SM quantize x
	ns := p.Decode.Subtiles                  // token subtiles a pass: an expert has at most m tokens
	return []step{
		{"prologue", func() error {
			return b.k.decPrologue.launchWith([3]int{1 + quantCTAs, 1, 1}, abiThreads, 4*(w.E+1), s,
				&decodePrologueArgs{X: ws.x, XQIn: ws.xq, XSIn: ws.xs, IDs: ws.ids, XQ: ws.xqd, XSF: ws.xsf, Pos: ws.pos,
					Perm: ws.perm, Offset: ws.offset, Touched: ws.touched, M: i32(m), K: i32(w.K), KPad: i32(kp),
					TopK: i32(topk), Rank: i32(l.epRank), ELocal: i32(w.E), Recipe: recipeCode(l.spec.Recipe), Form: form})
		}},
		{"gemm1_act", func() error {
			return b.k.decGemm1[ns].launchWith([3]int{w.N / 32, maxExperts, 1}, abiDecodeThreads, 0, s,
				&decodeGemm1Args{XQ: ws.xqd, XSF: ws.xsf, W: l.dec.w31, WS: l.dec.w31s, Perm: ws.perm, Offset: ws.offset, Touched: ws.touched,
					Params: l.params, B1: l.b1, AQ: ws.aq, AQS: ws.aqs, AQSF: ws.aqsf, KPad: i32(kp), N: i32(w.N), NPad: i32(np),
					TopK: i32(topk), ELocal: i32(w.E), Kind: activationCode(l.spec.Activation), NParams: i32(len(l.spec.Params)),
					Chain: chainCode(l.spec.Chain), Recipe: recipeCode(l.spec.Recipe), ZeroRow: i32(m)})
		}},
		{"gemm2", func() error {
			return b.k.decGemm2[ns].launchWith([3]int{(w.K/16 + 3) / 4, maxExperts, 1}, abiDecodeThreads, 0, s,
				&decodeGemm2Args{AQ: ws.aq, AQSF: ws.aqsf, W: l.dec.w2, WS: l.dec.w2s, Offset: ws.offset, Touched: ws.touched, Y: ws.y,
					K: i32(w.K), NPad: i32(np), ELocal: i32(w.E), ZeroRow: i32(entries)})
		}},
		l.finalizeStep(ws, false),
	}
}
