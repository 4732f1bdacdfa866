package moe_test

import (
	"bytes"
	"kimimoe/moe"
	"kimimoe/validation"
	"math/rand/v2"
	"testing"

	"kimimoe/activation"
	"kimimoe/mxfp"
)

func randMatrix(rng *rand.Rand, rows, cols int) *mxfp.MXFP4Matrix {
	m := mxfp.NewMXFP4Matrix(rows, cols)
	for i := range m.Packed {
		m.Packed[i] = uint8(rng.Uint32())
	}
	for i := range m.Scales {
		m.Scales[i] = uint8(120 + rng.IntN(6))
	}
	return m
}

func stack(a, b *mxfp.MXFP4Matrix) *mxfp.MXFP4Matrix {
	return &mxfp.MXFP4Matrix{Rows: a.Rows + b.Rows, Cols: a.Cols,
		Packed: append(append([]uint8{}, a.Packed...), b.Packed...),
		Scales: append(append([]uint8{}, a.Scales...), b.Scales...)}
}

func sameMatrix(a, b *mxfp.MXFP4Matrix) bool {
	return a.Rows == b.Rows && a.Cols == b.Cols && bytes.Equal(a.Packed, b.Packed) && bytes.Equal(a.Scales, b.Scales)
}

// The layouts of docs/CONTRACT.md "Weights and layouts": Kimi's w1 (gate) and w3
// (up) become [up; gate]; SGLang's contiguous [gate; up] swaps halves; GPT-OSS
// interleaved [g0, u0, g1, u1, ...] takes odd rows then even rows.
func TestFC1Layouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	n, k := 6, 64
	gate, up := randMatrix(rng, n, k), randMatrix(rng, n, k)
	want := stack(up, gate)
	if got := moe.W31FromKimi(gate, up); !sameMatrix(got, want) {
		t.Fatal("W31FromKimi is not [w3 (up); w1 (gate)]")
	}
	if got := moe.W31FromGateUp(stack(gate, up)); !sameMatrix(got, want) {
		t.Fatal("W31FromGateUp of [gate; up] is not [up; gate]")
	}
	inter := mxfp.NewMXFP4Matrix(2*n, k) // GPT-OSS: row 2i gate i, row 2i+1 up i
	for i := range n {
		for j, src := range []*mxfp.MXFP4Matrix{gate, up} {
			dp, ds := inter.Row(2*i + j)
			sp, ss := src.Row(i)
			copy(dp, sp)
			copy(ds, ss)
		}
	}
	if got := moe.W31FromInterleaved(inter); !sameMatrix(got, want) {
		t.Fatal("W31FromInterleaved is not [odd rows; even rows]")
	}
	// Scale rows move with their rows: row 0 of the result is up's row 0,
	// scales included.
	got := moe.W31FromGateUp(stack(gate, up))
	_, s0 := got.Row(0)
	_, u0 := up.Row(0)
	if !bytes.Equal(s0, u0) {
		t.Fatal("scales did not move with their row")
	}
}

// The SM120 work's bug: the GPT-OSS interleaved rule applied to Kimi's contiguous
// [gate; up] puts gate rows into the up half and vice versa, and the layer's
// output is then unrelated to the right one.
func TestInterleavedRuleScramblesKimiWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	n, k := 64, 128
	gate, up := randMatrix(rng, n, k), randMatrix(rng, n, k)
	right := moe.W31FromGateUp(stack(gate, up))
	wrong := moe.W31FromInterleaved(stack(gate, up))
	// wrong's up half is rows 1, 3, 5, ... of [gate; up]: gate rows.
	wp, _ := wrong.Row(0)
	gp, _ := gate.Row(1)
	if !bytes.Equal(wp, gp) {
		t.Fatal("expected the interleaved rule to put gate row 1 at up row 0")
	}
	s := validation.CaseSpec{Name: "scramble", M: 4, K: k, N: n, ELocal: 1, TopK: 1, Activation: activation.Situ,
		Chain: moe.ChainExact, Recipe: mxfp.RecipeRCeil, Seed: 3, WeightSeed: 3}
	outFor := func(w31 *mxfp.MXFP4Matrix) []float64 {
		c, err := validation.GenerateCase(&s, nil)
		if err != nil {
			t.Fatal(err)
		}
		copy(c.Weights.W31, w31.Packed)
		copy(c.Weights.W31Scale, w31.Scales)
		return oracleOut(t, c)
	}
	m := validation.Compare(outFor(wrong), outFor(right))
	t.Logf("interleaved rule on Kimi weights vs the right layout: %v", m)
	if m.Cosine > 0.5 {
		t.Fatalf("scrambled weights still give cosine %.3f; the test would not catch the SM120 work's bug", m.Cosine)
	}
}
