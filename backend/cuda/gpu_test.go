//go:build cgo

package cuda

import (
	"errors"
	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/layout"
	"math"
	"testing"
	"unsafe"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// Lifecycle on the device: a forward over more token counts than
// MaxWorkspaces keeps at most MaxWorkspaces workspaces; a second Close
// frees nothing twice; Forward after Close and after the backend's Close
// is ErrClosed, never a panic; Close after the backend's Close is nil.
func TestLayerLifecycle(t *testing.T) {
	b := openCUDAOrSkip(t)
	s := smallSpec("life")
	l, w := prepare(t, b, &s, nil)
	// Which path runs: wgmma-fp4 up to f4MaxMDefault tokens where it is
	// available, else decode up to decodeMaxM tokens and grouped above.
	small := "decode"
	if l.avail[PathFP4] {
		small = "wgmma-fp4"
	}
	if grouped := l.PathFor(decodeMaxM + 1); l.PathFor(1) != small || l.PathFor(decodeMaxM) != small || (grouped != "grouped" && grouped != "wgmma" && grouped != "wgmma-fp4") {
		t.Errorf("paths: M=1 %s, M=%d %s, M=%d %s", l.PathFor(1), decodeMaxM, l.PathFor(decodeMaxM), decodeMaxM+1, l.PathFor(decodeMaxM+1))
	}
	for m := 1; m <= MaxWorkspaces+4; m++ {
		s.M, s.Seed = m, uint64(m)
		c, err := validation.GenerateCase(&s, w)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, m*w.K)
		if err := l.ForwardGraph(out, &c.Input); err != nil {
			t.Fatalf("M=%d: %v", m, err)
		}
		if len(l.ws) > MaxWorkspaces {
			t.Fatalf("M=%d: %d workspaces kept, bound %d", m, len(l.ws), MaxWorkspaces)
		}
		// The profile names the steps of the path that ran.
		prof, err := l.Profile(m)
		if err != nil {
			t.Fatal(err)
		}
		_, decodeRan := prof["prologue"]
		if decodeRan != (l.PathFor(m) == "decode") {
			t.Errorf("M=%d: path %s, but the steps run were %v", m, l.PathFor(m), prof)
		}
	}
	c, _ := validation.GenerateCase(&s, w)
	out := make([]float32, s.M*w.K)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if l.mx.w31 != 0 || l.dec.w31 != 0 || l.f4.w31 != 0 || l.params != 0 || len(l.ws) != 0 || l.uploaded != [numPaths]bool{} {
		t.Fatal("Close left device pointers behind")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := l.Forward(out, &c.Input, nil); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Forward after Close: %v", err)
	}
	l2, err := b.Prepare(w, s.LayerSpec())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("backend Close: %v", err)
	}
	if err := l2.Forward(out, &c.Input, nil); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Forward after the backend's Close: %v", err)
	}
	if err := l2.Close(); err != nil {
		t.Fatalf("layer Close after the backend's: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second backend Close: %v", err)
	}
}

// The activation kernel's residency comes from the driver's occupancy
// (cu.FuncResidentCTAs): between 1 and the 8 CTAs of 256 threads an SM's
// 2048 threads allow, and the plan of a forward over its grid reports it.
func TestActResident(t *testing.T) {
	b := openCUDAOrSkip(t)
	if n := b.k.actResident; n < 1 || n > 2048/abiThreads {
		t.Fatalf("the activation kernel: %d CTAs an SM resident", n)
	}
	_, l, s, _, _ := kimiF4Layer(t) // skips off sm_90a
	if p := l.PlanFor(8192, s.TopK); p.FP4.ActCTAs != actCTAsSM || p.FP4.ActResident != b.k.actResident {
		t.Errorf("M=8192: %s", p)
	}
}

// The kernels' E2M1 -> E4M3 widening, for all 65536 inputs of four codes,
// against package mxfp's decoders (which the reference vectors check):
// every byte must decode to its nibble's value, signed zeros included.
func TestWiden4Exhaustive(t *testing.T) {
	b := openCUDAOrSkip(t)
	out := runWordKernel(t, b, kTestWiden4, nil, 65536, func(p []devptr) *testWiden4Args { return &testWiden4Args{Out: p[0]} })
	for v, got := range out {
		for i := range 4 {
			code := uint8(v >> (4 * i) & 0xF)
			e4 := uint8(got >> (8 * i))
			want, have := mxfp.DecodeE2M1(code), mxfp.DecodeE4M3(e4)
			if math.Float32bits(want) != math.Float32bits(have) {
				t.Fatalf("widen4(%#04x) byte %d = %#02x (%v), want E2M1 %#x = %v", v, i, e4, have, code, want)
			}
		}
	}
}

// situ (the kernels' SiTU: polynomial and exponential tanh, one
// reciprocal) against activation.Eval in float64, beside the float32
// chain it replaced (tanhf, expf, IEEE divisions) on the same inputs and
// device: gate and up swept, each beside six fixed values of the other,
// over magnitudes from 2^-30 to 300 (past the tanh edges and, for the
// gate, the sigmoid's underflow) and every float near the edges, both
// signs, for Kimi-K3's betas, two others and the extremes checkSitu
// admits. Errors are in ulps of the float64 value's float32
// neighbourhood; values whose magnitude is below 2^-100 (where e^g
// underflows) are only required to be tiny. The bounds: at most 8 ulps
// anywhere (situ's roundings: the polynomial's ulp, expf's two, five
// products and the refined quotient's one), and a mean error at most
// 1.25 times the old chain's, so the requantization flips it causes stay
// as rare. A wrong coefficient, a lost sign, a branch edge off or a
// reciprocal left unrefined shows here; and the special values exactly.
func TestSitu(t *testing.T) {
	b := openCUDAOrSkip(t)
	var sweep []float32 // magnitudes: 1420 an octave, and the 64 floats either side of each beta's edge and of 1
	for v := float32(math.Ldexp(1, -30)); v < 300; v *= 1 + 1.0/2048 {
		sweep = append(sweep, v)
	}
	near := func(c float32) {
		for i, v, w := 0, c, c; i < 64; i++ {
			sweep, v, w = append(sweep, v, w), math.Nextafter32(v, 0), math.Nextafter32(w, 400)
		}
	}
	near(1)
	near(float32(situTanhReach * 4)) // the edge, in the sweep's units (scaled by beta / 4 and linear_beta / 25 below)
	near(float32(situTanhReach * 25))
	for i, n := 0, len(sweep); i < n; i++ {
		sweep = append(sweep, -sweep[i])
	}
	fixed := []float32{1, -3, 0.37, 7.5, -20, 60}
	betas := [][2]float64{{4, 25}, {2.5, 10}, {1, 1}, {situBetaMin, situBetaMax}, {situBetaMax, situBetaMin}}
	type stat struct {
		max, sum float64
		n        int
		worst    [2]float32
	}
	for _, bb := range betas {
		p := activation.DefaultParams()
		p.SituBeta, p.SituLinearBeta = bb[0], bb[1]
		var g, u []uint32
		add := func(gv, uv float32) { g, u = append(g, math.Float32bits(gv)), append(u, math.Float32bits(uv)) }
		for _, f := range fixed {
			for _, v := range sweep {
				add(v*float32(bb[0]/4), f) // the gate's sweep, scaled to its beta
				add(f, v*float32(bb[1]/25))
			}
		}
		inf, nan := float32(math.Inf(1)), float32(math.NaN())
		specials := [][2]float32{{0, 1}, {float32(math.Copysign(0, -1)), 1}, {1, 0}, {inf, inf}, {-inf, 2}, {-inf, -2}, {inf, -inf},
			{nan, 1}, {1, nan}, {math.MaxFloat32, -math.MaxFloat32}}
		for _, sp := range specials {
			add(sp[0], sp[1])
		}
		pk := packParams([]activation.Params{p})
		pw := make([]uint32, len(pk))
		for i, f := range pk {
			pw[i] = math.Float32bits(f)
		}
		var st [2]stat
		var outs [2][]uint32
		for legacy := range 2 {
			outs[legacy] = runWordKernel(t, b, kTestSitu, [][]uint32{g, u, pw}, len(g), func(d []devptr) *testSituArgs {
				return &testSituArgs{G: d[0], U: d[1], P: d[2], Out: d[3], N: i32(len(g)), Legacy: i32(legacy)}
			})
		}
		nsp := len(specials)
		for i := range len(g) - nsp {
			gv, uv := math.Float32frombits(g[i]), math.Float32frombits(u[i])
			ref := activation.Eval(activation.Situ, &p, float64(gv), float64(uv))
			for k := range 2 {
				got := float64(math.Float32frombits(outs[k][i]))
				if math.Abs(ref) < 0x1p-100 {
					if k == 0 && math.Abs(got) > 0x1p-99 {
						t.Errorf("betas %v: situ(%g, %g) = %g, want about %g", bb, gv, uv, got, ref)
					}
					continue
				}
				e := math.Abs(got-ref) / ulpOf(ref)
				if !(e <= st[k].max) { // NaN too
					st[k].max, st[k].worst = e, [2]float32{gv, uv}
				}
				st[k].sum += e
				st[k].n++
			}
		}
		mean := func(s stat) float64 { return s.sum / float64(s.n) }
		t.Logf("betas %v, %d values: situ max %.2f ulp (at %v) mean %.3f; the old chain max %.2f (at %v) mean %.3f",
			bb, st[0].n, st[0].max, st[0].worst, mean(st[0]), st[1].max, st[1].worst, mean(st[1]))
		if !(st[0].max <= 8) || !(mean(st[0]) <= 1.25*mean(st[1])) {
			t.Errorf("betas %v: situ max %.2f ulp (at %v), mean %.3f against the old chain's %.3f; want at most 8 and 1.25x",
				bb, st[0].max, st[0].worst, mean(st[0]), mean(st[1]))
		}
		for j, sp := range specials {
			got := math.Float32frombits(outs[0][len(g)-nsp+j])
			want := float32(activation.Eval(activation.Situ, &p, float64(sp[0]), float64(sp[1])))
			if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Errorf("betas %v: situ(%g, %g) = %g (%#08x), want %g (%#08x)", bb, sp[0], sp[1], got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
}

// mxfp8_value_bf16x2 (the MXFP8 values of two requantized activations or
// x elements, as BF16, through the hardware's E4M3 conversion) against
// the code and back, the functions the oracle's vectors test (mxfp8_bf16
// of e4m3_code): bitwise for every float32 bit pattern in each half at
// every one of the 256 scales, NaN, infinities, subnormals and both zeros
// included. A rounding off by one step, a sign lost, a saturation point
// moved or a BF16 rounded where it must be truncated (the scales below
// 2^-125) shows here.
func TestMXFP8ValueExhaustive(t *testing.T) {
	b := openCUDAOrSkip(t)
	err := b.locked(func() error {
		k, err := bind[testMxfp8ValueArgs](testModule(t, b), kTestMxfp8Val)
		if err != nil {
			return err
		}
		count, err := cu.MemAlloc(4)
		if err != nil {
			return err
		}
		defer cu.MemFree(count)
		first, err := cu.MemAlloc(8)
		if err != nil {
			return err
		}
		defer cu.MemFree(first)
		if err := cu.MemsetD32(count, 0, 1, b.stream); err != nil {
			return err
		}
		if err := cu.MemsetD32(first, 0xFFFFFFFF, 2, b.stream); err != nil {
			return err
		}
		for sc := 0; sc < 256; sc += 32 { // launches of 32 scales, each well under a second
			if err := k.launch([3]int{8 * b.sms, 1, 1}, b.stream, &testMxfp8ValueArgs{Count: count, First: first, Sc0: i32(sc), Sc1: i32(sc + 32)}); err != nil {
				return err
			}
		}
		var out [3]uint32
		if err := cu.MemcpyDtoH(u32bytes(out[:1]), count, b.stream); err != nil {
			return err
		}
		if err := cu.MemcpyDtoH(u32bytes(out[1:]), first, b.stream); err != nil {
			return err
		}
		if err := cu.StreamSync(b.stream); err != nil {
			return err
		}
		if out[0] != 0 {
			t.Errorf("mxfp8_value_bf16x2: %d of 2^40 (v, scale) pairs differ from mxfp8_bf16(e4m3_code) in v's half or ~v's; the first: v = %#08x at scale %#02x", out[0], out[1], out[2])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The timing's L2 flush (flushL2): every Tuning.Flush times a
// forward; the buffer is allocated by the first flushed timing, holds the
// zeros the read flush relies on (its sink is written only for a nonzero
// fold) and is freed by Close.
func TestTimingFlush(t *testing.T) {
	b := openCUDAOrSkip(t)
	s := smallSpec("timing")
	l, w := prepare(t, b, &s, nil)
	c, err := validation.GenerateCase(&s, w)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Upload(&c.Input); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Flush{FlushNone, FlushRead, FlushWrite} {
		setLayer(t, l, func(u *Tuning) { u.Flush = mode })
		if err := l.Upload(&c.Input); err != nil { // SetTuning freed the workspace
			t.Fatal(err)
		}
		ms, err := l.TimeForward(1, true)
		if err != nil || !(ms > 0) {
			t.Fatalf("flush %v: %v ms, %v", mode, ms, err)
		}
		if (b.flush != 0) != (mode != FlushNone) || (b.timing != nil) != (mode != FlushNone) {
			t.Fatalf("flush %v: flush buffer %#x, timing module %v after the first timings", mode, b.flush, b.timing)
		}
	}
	head := make([]uint32, 4096)
	err = b.locked(func() error {
		if err := cu.MemcpyDtoH(u32bytes(head), b.flush, b.stream); err != nil {
			return err
		}
		return cu.StreamSync(b.stream)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range head {
		if v != 0 {
			t.Fatalf("flush buffer word %d = %#x, want the zeros it was filled with", i, v)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b.flush != 0 {
		t.Fatal("Close left the flush buffer allocated")
	}
}

// openCUDAOrSkip is openOrSkip for tests that use the CUDA backend's own
// methods: the *Backend, closed when the test ends (Close is idempotent,
// so a test may also close it itself).
func openCUDAOrSkip(t *testing.T) *Backend {
	t.Helper()
	b := openOrSkip(t).(*Backend)
	t.Cleanup(func() { b.Close() })
	return b
}

func u32bytes(v []uint32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)) }

// runWordKernel runs the test kernel spec over 32-bit words on b: each of
// ins is copied to a buffer of its own, an output buffer of nOut words
// follows them, args makes the kernel's arguments from those buffers (ins'
// in order, then the output's), it runs one thread a word of ins[0] (of
// the output if there are no ins), and the output words come back.
func runWordKernel[A any](t *testing.T, b *Backend, spec kernelSpec, ins [][]uint32, nOut int, args func(p []devptr) *A) []uint32 {
	t.Helper()
	threads := nOut
	if len(ins) > 0 {
		threads = len(ins[0])
	}
	out := make([]uint32, nOut)
	err := b.locked(func() error {
		k, err := bind[A](testModule(t, b), spec)
		if err != nil {
			return err
		}
		p := make([]devptr, len(ins)+1)
		for i := range p {
			n := nOut
			if i < len(ins) {
				n = len(ins[i])
			}
			if p[i], err = cu.MemAlloc(4 * n); err != nil {
				return err
			}
			defer cu.MemFree(p[i])
			if i < len(ins) {
				if err := cu.MemcpyHtoD(p[i], u32bytes(ins[i]), b.stream); err != nil {
					return err
				}
			}
		}
		if err := k.launch([3]int{(threads + abiThreads - 1) / abiThreads, 1, 1}, b.stream, args(p)); err != nil {
			return err
		}
		if err := cu.MemcpyDtoH(u32bytes(out), p[len(ins)], b.stream); err != nil {
			return err
		}
		return cu.StreamSync(b.stream)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The wgmma path (sm_90a) against the mma.sync path on the same layer and
// inputs, at the Kimi shape and M = 32 .. 2048, and both against the
// oracle on sampled rows. Both multiply the same exact values; they sum
// them in float32 in different orders (the tensor cores over a whole row,
// mma.sync per 32-block and then across blocks), so they may differ by
// float32 rounding and the rare MXFP8 rounding flip it causes; the test
// logs how many values are bitwise equal.
func TestWGMMAPath(t *testing.T) {
	b, l, s, w, o := kimiSM90aLayer(t, "the wgmma path")
	wg := Tuning{WGMMAMinM: 1, FP4MaxM: -1} // the wgmma-fp4 path would take these M first
	for _, m := range []int{32, 128, 512, 2048} {
		if err := l.SetTuning(wg); err != nil {
			t.Fatal(err)
		}
		if l.PathFor(m) != "wgmma" {
			t.Fatalf("M=%d takes the %s path", m, l.PathFor(m))
		}
		in := kimiInput(t, s, w, m, uint64(7000+m))
		var outs [2][]float32
		for i, on := range []bool{true, false} {
			u := wg
			u.NoWGMMA = !on
			if err := l.SetTuning(u); err != nil {
				t.Fatal(err)
			}
			outs[i] = forwardOut(t, l, in, m)
		}
		comparePaths(t, o, in, w.K, [2]string{"wgmma", "mma.sync"}, outs)
	}

	// Off, the grouped forwards take the mma.sync GEMMs; a shape that is
	// not a multiple of 128 has no wgmma path to turn on.
	if err := l.SetTuning(Tuning{FP4MaxM: -1, NoWGMMA: true}); err != nil || l.PathFor(256) != "grouped" {
		t.Errorf("wgmma=off: %v, path %s", err, l.PathFor(256))
	}
	s.K, s.N, s.ELocal, s.TopK, s.LocalSlots, s.EP = 160, 96, 4, 2, 0, moe.EP{}
	l2, _ := prepare(t, b, s, nil)
	defer l2.Close()
	if err := l2.SetTuning(Tuning{WGMMAMinM: 1}); !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("wgmma-min-m=1 at K=160, N=96: %v", err)
	}
}

// prepare prepares w (generated for s if nil) on b for s's layer.
func prepare(t *testing.T, b *Backend, s *validation.CaseSpec, w *moe.Weights) (*Layer, *moe.Weights) {
	t.Helper()
	if w == nil {
		var err error
		if w, err = validation.GenerateWeights(s); err != nil {
			t.Fatal(err)
		}
	}
	layer, err := b.Prepare(w, s.LayerSpec())
	if err != nil {
		t.Fatal(err)
	}
	return layer.(*Layer), w
}

// kimiSM90aLayer opens the device, skipping the test unless it is sm_90a
// (what names the path that needs it), prepares the Kimi EP32 rank-7
// layer (SiTU, mxfp8 chain, rceil) and its oracle; both are closed when
// the test ends.
func kimiSM90aLayer(t *testing.T, what string) (*Backend, *Layer, *validation.CaseSpec, *moe.Weights, *moe.Oracle) {
	t.Helper()
	b := openCUDAOrSkip(t)
	if !b.arch.wgmma {
		t.Skipf("%s needs sm_90a; this device is %s", what, b.arch)
	}
	s := validation.KimiEP32Rank7(activation.Situ, moe.ChainMXFP8, mxfp.RecipeRCeil)
	l, w := prepare(t, b, &s, nil)
	t.Cleanup(func() { l.Close() }) // before the backend's (cleanups run last first)
	o, err := moe.NewOracle(w, s.LayerSpec())
	if err != nil {
		t.Fatal(err)
	}
	return b, l, &s, w, o
}

// kimiF4Layer is kimiSM90aLayer's layer for the wgmma-fp4 path's tests,
// with the decode path turned off, so that every M takes the path.
func kimiF4Layer(t *testing.T) (*Backend, *Layer, *validation.CaseSpec, *moe.Weights, *moe.Oracle) {
	t.Helper()
	b, l, s, w, o := kimiSM90aLayer(t, "the wgmma-fp4 path")
	if err := l.SetTuning(Tuning{DecodeMaxM: -1}); err != nil {
		t.Fatal(err)
	}
	return b, l, s, w, o
}

// kimiInput is a generated input of spec s (the layer's, weights w) at m
// tokens and the given seed; s keeps both.
func kimiInput(t *testing.T, s *validation.CaseSpec, w *moe.Weights, m int, seed uint64) *moe.Input {
	t.Helper()
	s.M, s.Seed = m, seed
	c, err := validation.GenerateCase(s, w)
	if err != nil {
		t.Fatal(err)
	}
	return &c.Input
}

// oracleMetrics compares each of outs (k columns a row) with the oracle
// on 16 rows of in, sampled with seed M (the oracle run once).
func oracleMetrics(t *testing.T, o *moe.Oracle, in *moe.Input, k int, outs ...[]float32) []validation.Metrics {
	t.Helper()
	rows := validation.SampleRows(in.M, 16, uint64(in.M))
	ref := make([]float64, len(rows)*k)
	if err := o.Forward(ref, in, rows); err != nil {
		t.Fatal(err)
	}
	mets := make([]validation.Metrics, len(outs))
	for i, out := range outs {
		got := make([]float64, 0, len(ref))
		for _, r := range rows {
			got = append(got, validation.Widen(out[r*k:(r+1)*k])...)
		}
		mets[i] = validation.Compare(got, ref)
	}
	return mets
}

// comparePaths checks two paths' outputs of one input (k columns a row)
// against the oracle on 16 sampled rows, and logs how many values the two
// share bitwise and their NRMSE against each other.
func comparePaths(t *testing.T, o *moe.Oracle, in *moe.Input, k int, names [2]string, outs [2][]float32) {
	t.Helper()
	m := in.M
	same := 0
	for i := range outs[0] {
		if math.Float32bits(outs[0][i]) == math.Float32bits(outs[1][i]) {
			same++
		}
	}
	for i, met := range oracleMetrics(t, o, in, k, outs[:]...) {
		if met.Cosine < validation.MinCosine || !(met.NRMSE <= validation.MaxNRMSE) {
			t.Errorf("M=%d %s against the oracle: %+v", m, names[i], met)
		}
	}
	vs := validation.Compare(validation.Widen(outs[0]), validation.Widen(outs[1]))
	t.Logf("M=%d: %s and %s bitwise equal in %d of %d values; NRMSE between them %.3g", m, names[0], names[1], same, len(outs[0]), vs.NRMSE)
}

// smallSpec is the small SiTU layer of the lifecycle tests: 4 experts of
// K = N = 128, top 2, one token.
func smallSpec(name string) validation.CaseSpec {
	return validation.CaseSpec{Name: name, M: 1, K: 128, N: 128, ELocal: 4, TopK: 2, Activation: activation.Situ,
		Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 1, WeightSeed: 1}
}

// requireSameBits fails at the first value whose bits differ between a
// and b (two forwards of one M=m input, named an and bn), or that is NaN:
// the outputs are NaN-filled, so a row neither forward wrote is a NaN.
func requireSameBits(t *testing.T, m int, an string, a []float32, bn string, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) || math.IsNaN(float64(a[i])) {
			t.Fatalf("M=%d: value %d is %g %s, %g %s", m, i, a[i], an, b[i], bn)
		}
	}
}

// setLayer changes l's Tuning with set, through SetTuning (as the
// command's --tune does), failing the test on an error.
func setLayer(t *testing.T, l *Layer, set func(u *Tuning)) {
	t.Helper()
	u := l.Tuning()
	set(&u)
	if err := l.SetTuning(u); err != nil {
		t.Fatal(err)
	}
}

// never maps a token count where 0 meant "never" onto Tuning's -1.
func never(m int) int {
	if m == 0 {
		return -1
	}
	return m
}

// requireLaunched shows that the m-token forward of in launches the
// kernel *k (a kernel, or a map of them by tile) at all: with *k its zero
// value (no function to launch), the forward fails.
func requireLaunched[K any](t *testing.T, l *Layer, in *moe.Input, m int, k *K, what string) {
	t.Helper()
	saved := *k
	var none K
	*k = none
	err := l.Forward(nanFilledOut(m*l.w.K), in, nil)
	*k = saved
	if err == nil {
		t.Fatalf("M=%d ran without %s", m, what)
	}
}

// forwardOut runs l's forward of in (m tokens) into a NaN-filled output,
// which it returns; an error fails the test.
func forwardOut(t *testing.T, l *Layer, in *moe.Input, m int) []float32 {
	t.Helper()
	out := nanFilledOut(m * l.w.K)
	if err := l.Forward(out, in, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

func nanFilledOut(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}

// testModules are the test module (testProgram), loaded once a backend.
var testModules = map[*Backend]cu.Module{}

// testModule loads the test module into b's context (called under b's
// lock); it is unloaded with the context at the end of the test binary.
func testModule(t *testing.T, b *Backend) cu.Module {
	t.Helper()
	if m, ok := testModules[b]; ok {
		return m
	}
	cubin, err := compileCached(testProgram(), "test.cu", b.arch.target, b.arch.options())
	if err != nil {
		t.Fatal(err)
	}
	m, err := cu.ModuleLoadData(cubin)
	if err != nil {
		t.Fatal(err)
	}
	testModules[b] = m
	return m
}

// An x of block scale 2^-127 whose codes BF16 cannot hold (every E4M3
// value times 2^-127 that is no multiple of 2^-133: the subnormals and
// the fine normals) leaves the BF16 paths (layout.XOutsideBF16): on the wgmma
// path, which M = 256 takes on this layer, its BF16 operand would drop
// those bits (2^-136 becomes 0), an error far past the bound. FC1's
// scales are raised by 2^110 so that GEMM1's values stay in float32's
// normal range. The pre-quantized x and the same values given as
// float32 (quantized on the device to the same codes and scales) must
// give the same bits and meet the oracle's bound.
func TestTinyXLeavesBF16Paths(t *testing.T) {
	b := openCUDAOrSkip(t)
	s := smallSpec("tiny-x")
	w, err := validation.GenerateWeights(&s)
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.W31Scale {
		w.W31Scale[i] += 110
	}
	l, _ := prepare(t, b, &s, w)
	defer l.Close()
	const m = 256
	if !l.PlanFor(m, s.TopK).Path.bf16Operands() {
		t.Skipf("M=%d takes the %s path here, not a BF16 one", m, l.PathFor(m))
	}
	in := kimiInput(t, &s, w, m, 5)
	var fine []uint8 // the codes BF16 cannot hold at scale 0, both signs
	for c := range 256 {
		if !layout.MXFP8HeldByBF16(uint8(c), 0) {
			fine = append(fine, uint8(c))
		}
	}
	xq := mxfp.NewMXFP8Matrix(m, w.K)
	x := make([]float32, m*w.K)
	for i := range xq.Codes {
		xq.Codes[i] = fine[(i*7+i/w.K)%len(fine)]
		x[i] = float32(math.Ldexp(float64(mxfp.DecodeE4M3(xq.Codes[i])), -127)) // exact: float32's subnormals reach 2^-149
	}
	if !layout.XOutsideBF16(&moe.Input{XQ: xq}, s.Recipe) || !layout.XOutsideBF16(&moe.Input{X: x}, s.Recipe) {
		t.Fatal("layout.XOutsideBF16 keeps the tiny x on the BF16 paths")
	}
	o, err := moe.NewOracle(w, s.LayerSpec())
	if err != nil {
		t.Fatal(err)
	}
	var outs [][]float32
	for _, form := range []string{"pre-quantized", "float32"} {
		tin := *in
		tin.X, tin.XQ = x, nil
		if form == "pre-quantized" {
			tin.X, tin.XQ = nil, xq
		}
		out := forwardOut(t, l, &tin, m)
		if met := oracleMetrics(t, o, &tin, w.K, out)[0]; met.Cosine < validation.MinCosine || !(met.NRMSE <= validation.MaxNRMSE) {
			t.Errorf("%s tiny x against the oracle: %+v", form, met)
		}
		outs = append(outs, out)
	}
	for i := range outs[0] {
		if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
			t.Fatalf("element %d: %g pre-quantized, %g from float32", i, outs[0][i], outs[1][i])
		}
	}
}
