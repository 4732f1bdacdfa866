package mxfp

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestBF16FromFloat64SingleRounding compares with math/big rounding the
// float64 straight to 8 significant bits, nearest even, over random values in
// bf16's normal range and around every tie, where rounding through float32
// first would go wrong.
func TestBF16FromFloat64SingleRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ref := func(x float64) uint16 {
		r, _ := new(big.Float).SetPrec(8).SetMode(big.ToNearestEven).SetFloat64(x).Float64()
		return uint16(math.Float32bits(float32(r)) >> 16) // r has 8 bits: exact in float32 and bf16
	}
	n := 200000
	if testing.Short() {
		n = 20000
	}
	for i := range n {
		var x float64
		if i%2 == 0 {
			x = math.Ldexp(rng.Float64()+0.5, rng.IntN(240)-120)
		} else {
			// a bf16 tie plus or minus a float64 offset far below float32 precision
			b := (0x80 + rng.Uint32N(0x7F00-0x80)) << 16 // normal bf16 values only: big.Float has no subnormals
			mid := float64(math.Float32frombits(b | 0x8000))
			x = mid + mid*math.Ldexp(float64(rng.IntN(5)-2), -40)
		}
		if rng.IntN(2) == 0 {
			x = -x
		}
		if got, want := BF16FromFloat64(x), ref(x); got != want {
			t.Fatalf("BF16FromFloat64(%v) = %#04x, want %#04x", x, got, want)
		}
	}
	// Every float32 input agrees with the float32 rounding.
	for _, x := range []float32{0, 1, 1e-40, math.MaxFloat32, -3.3e38} {
		if BF16FromFloat64(float64(x)) != BF16FromFloat32(x) {
			t.Errorf("BF16FromFloat64(%v) differs from BF16FromFloat32", x)
		}
	}
	if BF16FromFloat64(1e300) != 0x7F80 || BF16FromFloat64(-1e300) != 0xFF80 {
		t.Error("overflow must give ±Inf")
	}
	if v := BF16FromFloat64(math.NaN()); v&0x7FFF != 0x7FC0 {
		t.Errorf("NaN gives %#04x", v)
	}
}
