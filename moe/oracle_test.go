package moe

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"kimimoe/activation"
	"kimimoe/mxfp"
)

// patterned fills w's codes with every byte value in turn and its scales
// with exponents near 1, so that each expert's outputs differ.
func patterned(w *Weights) *Weights {
	for i := range w.W31 {
		w.W31[i] = uint8(i * 7)
	}
	for i := range w.W2 {
		w.W2[i] = uint8(i * 13)
	}
	for _, sc := range [][]uint8{w.W31Scale, w.W2Scale} {
		for i := range sc {
			sc[i] = uint8(124 + i%3)
		}
	}
	return w
}

// Derive shares each matrix's decode table when its codes are the same
// slice (only scales, biases, the spec or the other matrix differ), decodes
// it again when its codes differ, and computes what a fresh oracle
// computes either way.
func TestDeriveSharesDecodeTables(t *testing.T) {
	w := patterned(NewWeights(2, 32, 64, true))
	spec := LayerSpec{Activation: activation.Situ, Params: []activation.Params{activation.DefaultParams()}, Chain: ChainMXFP8, Recipe: mxfp.RecipeRCeil}
	base, err := NewOracle(w, spec)
	if err != nil {
		t.Fatal(err)
	}
	in := &Input{M: 2, TopK: 1, X: make([]float32, 2*64), TopKIDs: []int32{0, 1}, TopKWeights: []float32{1, 0.5}}
	for i := range in.X {
		in.X[i] = float32(i%9) - 4
	}
	scaled := *w
	scaled.W2Scale = append([]uint8(nil), w.W2Scale...)
	scaled.W2Scale[0]++
	other := spec
	other.Chain = ChainExact
	recoded := *w
	recoded.W31 = append([]uint8(nil), w.W31...)
	recoded.W31[0] ^= 0x11
	recoded2 := *w
	recoded2.W2 = append([]uint8(nil), w.W2...)
	recoded2.W2[0] ^= 0x11
	for _, c := range []struct {
		name              string
		w                 *Weights
		spec              LayerSpec
		shared31, shared2 bool
	}{{"scales", &scaled, spec, true, true}, {"chain", w, other, true, true}, {"fc1 codes", &recoded, spec, false, true}, {"fc2 codes", &recoded2, spec, true, false}} {
		d, err := base.Derive(c.w, c.spec)
		if err != nil {
			t.Fatal(err)
		}
		if shared31, shared2 := d.dec31 == base.dec31, d.dec2 == base.dec2; shared31 != c.shared31 || shared2 != c.shared2 {
			t.Errorf("%s: FC1, FC2 tables shared %v, %v; want %v, %v", c.name, shared31, shared2, c.shared31, c.shared2)
		}
		fresh, _ := NewOracle(c.w, c.spec)
		got, want := make([]float64, 2*64), make([]float64, 2*64)
		if err := d.Forward(got, in, nil); err != nil {
			t.Fatal(err)
		}
		fresh.Forward(want, in, nil)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: out[%d] = %v, a fresh oracle gives %v", c.name, i, got[i], want[i])
			}
		}
	}
}

// An expert's weights are decoded when a forward first routes a token to
// it, and only then: a variant of a large layer checked on a few rows
// decodes the few experts they use, with the values a whole decode gives.
func TestOracleDecodesExpertsOnUse(t *testing.T) {
	w := NewWeights(3, 32, 64, true)
	for i := range w.W31 {
		w.W31[i] = uint8(i * 11)
	}
	for i := range w.W2 {
		w.W2[i] = uint8(i * 5)
	}
	spec := LayerSpec{Activation: activation.Situ, Params: []activation.Params{activation.DefaultParams()}, Chain: ChainExact, Recipe: mxfp.RecipeRCeil}
	o, err := NewOracle(w, spec)
	if err != nil {
		t.Fatal(err)
	}
	in := &Input{M: 1, TopK: 1, X: make([]float32, 64), TopKIDs: []int32{1}, TopKWeights: []float32{1}}
	if err := o.Forward(make([]float64, 64), in, nil); err != nil {
		t.Fatal(err)
	}
	for e := range 3 {
		if decoded := o.dec31.dec[e] != nil; decoded != (e == 1) {
			t.Errorf("expert %d decoded: %v after a forward routed to expert 1 only", e, decoded)
		}
	}
	w31, w2 := o.dec31.expert(1), o.dec2.expert(1)
	for i, b := range w.W31[len(w.W31)/3 : 2*len(w.W31)/3] {
		if w31[2*i] != int8(2*mxfp.DecodeE2M1(b&0xF)) || w31[2*i+1] != int8(2*mxfp.DecodeE2M1(b>>4)) {
			t.Fatalf("expert 1 FC1 byte %d (%#x) decoded to %d, %d", i, b, w31[2*i], w31[2*i+1])
		}
	}
	for i, b := range w.W2[len(w.W2)/3 : 2*len(w.W2)/3] {
		if w2[2*i] != int8(2*mxfp.DecodeE2M1(b&0xF)) || w2[2*i+1] != int8(2*mxfp.DecodeE2M1(b>>4)) {
			t.Fatalf("expert 1 FC2 byte %d (%#x) decoded to %d, %d", i, b, w2[2*i], w2[2*i+1])
		}
	}
}

// dot32 and dot32x2 give each row's dot product exactly (an int64 loop
// here), at the extremes of the bound (every product at +-12 x 448 x 2^9,
// all one sign or mixed) and at random.
func TestDot32x2(t *testing.T) {
	const xMax = 448 * 512
	var w [32]int8
	var x0, x1 [32]int32
	var packed [32]int64
	check := func(what string) {
		t.Helper()
		for i := range packed {
			packed[i] = int64(x0[i]) + int64(x1[i])<<32
		}
		var want0, want1 int64
		for i := range 32 {
			want0 += int64(w[i]) * int64(x0[i])
			want1 += int64(w[i]) * int64(x1[i])
		}
		d0, d1 := dot32x2(&w, &packed)
		if int64(d0) != want0 || int64(d1) != want1 || int64(dot32(&w, &x0)) != want0 || int64(dot32(&w, &x1)) != want1 {
			t.Fatalf("%s: dot32x2 = %d, %d; dot32 = %d, %d; want %d, %d", what, d0, d1, dot32(&w, &x0), dot32(&w, &x1), want0, want1)
		}
	}
	for _, signs := range [][3]int32{{1, 1, 1}, {1, -1, 1}, {-1, 1, -1}, {-1, -1, 1}, {1, 1, -1}} {
		for i := range 32 {
			w[i] = int8(12 * signs[0])
			x0[i], x1[i] = xMax*signs[1], xMax*signs[2]
		}
		check("extreme")
	}
	seed := uint32(1)
	next := func() int32 { seed = seed*1664525 + 1013904223; return int32(seed >> 8) }
	for range 100000 {
		for i := range 32 {
			w[i] = int8(next()%25 - 12)
			x0[i], x1[i] = next()%(2*xMax+1)-xMax, next()%(2*xMax+1)-xMax
		}
		check("random")
	}
}

// decodeFP4 decodes every byte value, both nibbles, to twice mxfp's value.
func TestDecodeFP4EveryByte(t *testing.T) {
	packed := make([]uint8, 256)
	for b := range packed {
		packed[b] = uint8(b)
	}
	dst := make([]int8, 2*len(packed)+1)
	dst[len(dst)-1] = 99
	decodeFP4(dst, packed)
	for b := range packed {
		lo, hi := int8(2*mxfp.DecodeE2M1(uint8(b&0xF))), int8(2*mxfp.DecodeE2M1(uint8(b>>4)))
		if dst[2*b] != lo || dst[2*b+1] != hi {
			t.Fatalf("byte %#02x decoded to %d, %d; want %d, %d", b, dst[2*b], dst[2*b+1], lo, hi)
		}
	}
	if dst[len(dst)-1] != 99 {
		t.Error("decodeFP4 wrote past 2*len(packed)")
	}
}

// A memo serves forwards that differ only in routing (ids, weights, rows)
// with the bits a fresh oracle computes, on every chain; an oracle derived
// with other weights or another spec keeps no memo.
func TestOracleMemo(t *testing.T) {
	const e, n, k, m, topk = 4, 32, 64, 3, 2
	w := patterned(NewWeights(e, n, k, true))
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(i%11) - 5
	}
	routings := []*Input{
		{M: m, TopK: topk, X: x, TopKIDs: []int32{0, 1, 2, 3, 1, 0}, TopKWeights: []float32{0.5, 0.5, 0.25, 0.75, 1, 0}},
		{M: m, TopK: topk, X: x, TopKIDs: []int32{1, 0, 3, 2, 0, 1}, TopKWeights: []float32{1, 1, 1, 1, 1, 1}},
		{M: m, TopK: topk, X: x, TopKIDs: []int32{2, -1, 1, 3, 3, 2}, TopKWeights: []float32{0.125, 0, 2, 0.5, 0.5, 0.5}},
	}
	for _, ch := range []Chain{ChainExact, ChainMXFP8, ChainFlashInfer, ChainBF16, ChainMarlin} {
		spec := LayerSpec{Activation: activation.Situ, Params: []activation.Params{activation.DefaultParams()}, Chain: ch, Recipe: mxfp.RecipeRCeil}
		base, err := NewOracle(w, spec)
		if err != nil {
			t.Fatal(err)
		}
		memo := base.WithMemo(nil)
		for r, in := range routings {
			for _, rows := range [][]int{nil, {2}, {1, 0}} {
				d, err := memo.Derive(w, spec)
				if err != nil {
					t.Fatal(err)
				}
				if d.memo != memo.memo {
					t.Fatalf("%v: an oracle derived with the same weights and spec does not share the memo", ch)
				}
				fresh, _ := NewOracle(w, spec)
				nr := m
				if rows != nil {
					nr = len(rows)
				}
				got, want := make([]float64, nr*k), make([]float64, nr*k)
				if err := d.Forward(got, in, rows); err != nil {
					t.Fatal(err)
				}
				fresh.Forward(want, in, rows)
				for i := range got {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("%v, routing %d, rows %v: out[%d] = %v through the memo, %v fresh", ch, r, rows, i, got[i], want[i])
					}
				}
			}
		}
		routed := map[[2]int]bool{}
		for _, in := range routings {
			for i, id := range in.TopKIDs {
				if id >= 0 {
					routed[[2]int{i / topk, int(id)}] = true
				}
			}
		}
		if len(memo.memo.y) != len(routed) {
			t.Errorf("%v: the memo holds %d expert outputs, want one a token and expert routed to (%d)", ch, len(memo.memo.y), len(routed))
		}
		other := spec
		other.Recipe = mxfp.RecipeFloor
		scaled := *w
		scaled.W2Scale = append([]uint8(nil), w.W2Scale...)
		for _, c := range []struct {
			w    *Weights
			spec LayerSpec
		}{{w, other}, {&scaled, spec}} {
			if d, _ := memo.Derive(c.w, c.spec); d.memo != nil {
				t.Errorf("%v: an oracle derived with other weights or spec shares the memo", ch)
			}
			if o, _ := NewOracle(c.w, c.spec); o.WithMemo(memo.Memo()).Memo() == memo.Memo() {
				t.Errorf("%v: WithMemo took a memo of other weights or another spec", ch)
			}
		}
		if again := base.WithMemo(memo.Memo()); again.Memo() != memo.Memo() {
			t.Errorf("%v: WithMemo replaced a memo of the same weights and spec", ch)
		}
	}
}

// Oracles sharing one memo may run forwards at once (go test -race checks
// the memo's locking); each gets the bits of a fresh oracle.
func TestOracleMemoConcurrent(t *testing.T) {
	const e, n, k, m, topk = 4, 32, 64, 6, 2
	w := patterned(NewWeights(e, n, k, true))
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(i%13) - 6
	}
	spec := LayerSpec{Activation: activation.Situ, Params: []activation.Params{activation.DefaultParams()}, Chain: ChainMXFP8, Recipe: mxfp.RecipeRCeil}
	base, err := NewOracle(w, spec)
	if err != nil {
		t.Fatal(err)
	}
	memo := base.WithMemo(nil).Memo()
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]int32, m*topk)
			for i := range ids {
				ids[i] = int32((i + g) % e)
			}
			in := &Input{M: m, TopK: topk, X: x, TopKIDs: ids, TopKWeights: make([]float32, m*topk)}
			for i := range in.TopKWeights {
				in.TopKWeights[i] = float32(1+g%3) / 4
			}
			got, want := make([]float64, m*k), make([]float64, m*k)
			if err := base.WithMemo(memo).Forward(got, in, nil); err != nil {
				errs <- err.Error()
				return
			}
			fresh, _ := NewOracle(w, spec)
			fresh.Forward(want, in, nil)
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					errs <- fmt.Sprintf("goroutine %d: out[%d] = %v through the memo, %v fresh", g, i, got[i], want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
