package moe_test

import (
	"fmt"
	"math"
	"testing"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// Route two tokens with Kimi-K3's router (sigmoid scores, the correction
// bias used for selection only, weights renormalized), then see which
// slots EP32 rank 7 (global experts 196..223) runs.
func ExampleRouter_Route() {
	kimi := moe.KimiK3()
	logits := make([]float32, 2*kimi.NumExperts)
	for e := range kimi.NumExperts {
		logits[e] = float32(e%97) / 10                 // token 0
		logits[kimi.NumExperts+e] = -float32(e) / 1000 // token 1: expert 0 is best
	}
	bias := make([]float32, kimi.NumExperts)
	// Selection only: expert 200 is always chosen, at its own score
	// sigmoid(0.6) = 0.6457. Token 0's other 15 are the 9 experts with
	// e%97 = 96 (sigmoid 9.6) and the first 6 with e%97 = 95 (sigmoid 9.5),
	// so expert 200's renormalized weight is 0.6457 / 15.645 = 0.0413.
	bias[200] = 100
	router := kimi.Router(bias)
	ids := make([]int32, 2*kimi.TopK)
	weights := make([]float32, 2*kimi.TopK)
	if err := router.Route(ids, weights, logits); err != nil {
		panic(err)
	}
	fmt.Println("token 0 experts:", ids[:4], "...")
	fmt.Println("token 1 experts:", ids[kimi.TopK:kimi.TopK+4], "...")
	rank7 := moe.EP{Size: 32, Rank: 7}
	for k, id := range ids[:kimi.TopK] {
		if local, ok := rank7.Local(int64(id), 28); ok {
			fmt.Printf("token 0 slot %d: global expert %d is rank 7's local expert %d, weight %.4f\n", k, id, local, weights[k])
		}
	}
	// Output:
	// token 0 experts: [200 96 193 290] ...
	// token 1 experts: [200 0 1 2] ...
	// token 0 slot 0: global expert 200 is rank 7's local expert 4, weight 0.0413
}

// Convert a checkpoint's [gate; up] FC1 rows (SGLang's layout of Kimi's w1
// and w3) to the [up; gate] layout the kernels read; scale rows move with
// their rows.
func ExampleW31FromGateUp() {
	const n, k = 2, 32 // 2 gate rows, then 2 up rows, of 32 elements
	w13 := mxfp.NewMXFP4Matrix(2*n, k)
	for r := range 2 * n {
		row := make([]float32, k)
		row[0] = float32(r + 1) // mark each row by its first element
		packed, scales := w13.Row(r)
		mxfp.QuantizeMXFP4(packed, scales, row, mxfp.RecipeRCeil)
	}
	w31 := moe.W31FromGateUp(w13)
	out := make([]float32, 2*n*k)
	w31.Dequantize(out)
	for r := range 2 * n {
		fmt.Printf("w31 row %d starts %v\n", r, out[r*k])
	}
	// Output:
	// w31 row 0 starts 3
	// w31 row 1 starts 4
	// w31 row 2 starts 1
	// w31 row 3 starts 2
}

// Run the exact oracle on one token and one expert whose weights are all
// 0.5 (E2M1 code 1, scale 2^0), with SwiGLU: every GEMM1 output is
// 0.5 * (sum of x), and the output follows from the formula by hand.
func ExampleOracle_Forward() {
	const k, n = 32, 32
	w := moe.NewWeights(1, n, k, true)
	for i := range w.W31 {
		w.W31[i] = 0x11 // two E2M1 codes 1 (0.5)
	}
	for i := range w.W2 {
		w.W2[i] = 0x11
	}
	for _, s := range [][]uint8{w.W31Scale, w.W2Scale} {
		for i := range s {
			s[i] = 127 // 2^0
		}
	}
	spec := moe.LayerSpec{Activation: activation.Swiglu, Params: []activation.Params{activation.DefaultParams()},
		Chain: moe.ChainExact, Recipe: mxfp.RecipeRCeil}
	o, err := moe.NewOracle(w, spec)
	if err != nil {
		panic(err)
	}
	x := make([]float32, k)
	for i := range x {
		x[i] = 0.125 // exact in E4M3: sum of x = 4, every h = 0.5 * 4 = 2
	}
	in := moe.Input{M: 1, TopK: 1, X: x, TopKIDs: []int32{0}, TopKWeights: []float32{1}}
	out := make([]float64, k)
	if err := o.Forward(out, &in, nil); err != nil {
		panic(err)
	}
	// a = silu(2) * 2 = 4 sigmoid(2) for each of the 32 features, and
	// y = 0.5 * 32 * a = 64 sigmoid(2) = 56.371013.
	fmt.Printf("out[0] = %.6f\n", out[0])
	// Output:
	// out[0] = 56.371013
}

// FC biases: with FC1 weights all zero, h = b1 exactly; with FC2 weights
// all 0.5 (code 1, scale 2^0), each expert output row is 0.5 * (sum of the
// activation) + b2[row]. The expected value is computed here from the
// formula with activation.Eval (float64), not from the oracle.
func TestBiasesByHand(t *testing.T) {
	const k, n = 32, 32
	w := moe.NewWeights(2, n, k, true)
	for i := range w.W2 {
		w.W2[i] = 0x11
	}
	for _, sc := range [][]uint8{w.W31Scale, w.W2Scale} {
		for i := range sc {
			sc[i] = 127
		}
	}
	w.W31Bias = make([]float32, 2*2*n)
	w.W2Bias = make([]float32, 2*k)
	for i := range w.W31Bias {
		w.W31Bias[i] = float32(i%7) - 2.5
	}
	for i := range w.W2Bias {
		w.W2Bias[i] = float32(i) / 8
	}
	p := activation.DefaultParams()
	spec := moe.LayerSpec{Activation: activation.SwigluBias, Params: []activation.Params{p}, Chain: moe.ChainExact, Recipe: mxfp.RecipeRCeil}
	o, err := moe.NewOracle(w, spec)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(i) - 7
	}
	in := moe.Input{M: 1, TopK: 2, X: x, TopKIDs: []int32{1, 0}, TopKWeights: []float32{0.75, 0.25}}
	out := make([]float64, k)
	if err := o.Forward(out, &in, nil); err != nil {
		t.Fatal(err)
	}
	expert := func(e int) []float64 {
		sum := 0.0
		for f := range n { // [up; gate]: up row f, gate row n+f
			up, gate := float64(w.W31Bias[e*2*n+f]), float64(w.W31Bias[e*2*n+n+f])
			sum += activation.Eval(activation.SwigluBias, &p, gate, up)
		}
		y := make([]float64, k)
		for r := range k {
			y[r] = 0.5*sum + float64(w.W2Bias[e*k+r])
		}
		return y
	}
	y1, y0 := expert(1), expert(0)
	for r := range k {
		want := 0.75*y1[r] + 0.25*y0[r]
		if math.Abs(out[r]-want) > 1e-12*math.Abs(want) {
			t.Fatalf("out[%d] = %v, want %v", r, out[r], want)
		}
	}
	// Without the biases the output would be all zeros: the test sees them.
	if out[3] == 0 {
		t.Fatal("biases had no effect")
	}
}
