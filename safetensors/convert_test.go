package safetensors

import (
	"math"
	"testing"

	"github.com/x448/float16"
)

// RoundFloat64 to F16 rounds once: at every midpoint between two adjacent
// finite binary16 values (all 63486 of them, positive and negative), the
// midpoint goes to the even neighbour and the float64 values just above and
// just below it go up and down. Rounding through float32 first would send
// midpoint + 2^-60-ish to float32's midpoint and then to the even side:
// this test catches that double rounding.
func TestRoundFloat64F16Exhaustive(t *testing.T) {
	checked := 0
	for b := range 0x7C00 - 1 { // positive finite, b and b+1
		for _, sign := range []uint16{0, 0x8000} {
			lo := float64(float16.Frombits(uint16(b) | sign).Float32())
			hi := float64(float16.Frombits(uint16(b+1) | sign).Float32())
			mid := (lo + hi) / 2 // exact in float64
			even := lo
			if (b+1)%2 == 0 {
				even = hi
			}
			if got := RoundFloat64(mid, F16); got != even {
				t.Fatalf("midpoint %v of %#04x and %#04x: %v, want %v", mid, b|int(sign), (b+1)|int(sign), got, even)
			}
			above, below := math.Nextafter(mid, math.Inf(1)), math.Nextafter(mid, math.Inf(-1))
			wantAbove, wantBelow := hi, lo
			if sign != 0 { // for negatives "above" is toward zero: lo
				wantAbove, wantBelow = lo, hi
			}
			if got := RoundFloat64(above, F16); got != wantAbove {
				t.Fatalf("just above the midpoint %v: %v, want %v", mid, got, wantAbove)
			}
			if got := RoundFloat64(below, F16); got != wantBelow {
				t.Fatalf("just below the midpoint %v: %v, want %v", mid, got, wantBelow)
			}
			checked++
		}
	}
	// Overflow: from the midpoint between 65504 and 65536 up, infinity.
	if got := RoundFloat64(65520, F16); !math.IsInf(got, 1) {
		t.Errorf("65520 -> %v, want +Inf", got)
	}
	if got := RoundFloat64(65519.99, F16); got != 65504 {
		t.Errorf("65519.99 -> %v, want 65504", got)
	}
	if got := RoundFloat64(math.NaN(), F16); !math.IsNaN(got) {
		t.Errorf("NaN -> %v", got)
	}
	t.Logf("%d midpoints checked", checked)
}

// The dtype round trip: F32, BF16 and F16 tensors written from float32
// read back as the values each format holds.
func TestFloat32AsRoundTrip(t *testing.T) {
	v := []float32{1, -2.5, 3.14159, 65504, 1e-7, float32(math.Inf(-1))}
	for _, d := range []DType{F32, BF16, F16} {
		tt, err := FromFloat32As("x", d, []int{len(v)}, v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tt.AsFloat32()
		if err != nil {
			t.Fatal(err)
		}
		for i := range v {
			if want := float32(RoundFloat64(float64(v[i]), d)); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Errorf("%s: %v -> %v, want %v", d, v[i], got[i], want)
			}
		}
	}
	if _, err := FromFloat32As("x", I32, []int{1}, []float32{1}); err == nil {
		t.Error("FromFloat32As accepted I32")
	}
}
