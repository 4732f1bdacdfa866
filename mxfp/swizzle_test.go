package mxfp

import "testing"

// Offsets worked by hand from FlashInfer's 128x4 layout formula
// (FlashInfer's layout; docs/CONTRACT.md "Scale layouts"): offset = mTile*(nK*512) + kTile*512 +
// (m%32)*16 + ((m%128)/32)*4 + k%4.
func TestSwizzled128x4Offsets(t *testing.T) {
	cases := []struct{ m, k, scaleCols, want int }{
		{0, 0, 4, 0},
		{0, 3, 4, 3},
		{1, 0, 4, 16},
		{32, 0, 4, 4},
		{33, 2, 4, 16 + 4 + 2},
		{127, 3, 4, 31*16 + 3*4 + 3},
		{128, 0, 4, 512},                       // second row tile, nK = 1
		{0, 4, 8, 512},                         // second k tile
		{130, 5, 112, 28*512 + 512 + 2*16 + 1}, // Kimi K=3584: 112 scale columns, nK = 28
		{5, 2, 3, 5*16 + 2},                    // 3 columns pad to 4
	}
	for _, c := range cases {
		if got := Swizzled128x4Offset(c.m, c.k, c.scaleCols); got != c.want {
			t.Errorf("offset(m=%d, k=%d, cols=%d) = %d, want %d", c.m, c.k, c.scaleCols, got, c.want)
		}
	}
	if got := Swizzled128x4Len(1, 3); got != 128*4 {
		t.Errorf("Swizzled128x4Len(1, 3) = %d, want 512", got)
	}
	if got := Swizzled128x4Len(3072, 112); got != 3072*112 {
		t.Errorf("Swizzled128x4Len(3072, 112) = %d, want %d (no padding)", got, 3072*112)
	}
}

func checkSwizzleRoundTrip(t *testing.T, rows, cols int, src []uint8) {
	t.Helper()
	sw := make([]uint8, Swizzled128x4Len(rows, cols))
	for i := range sw {
		sw[i] = 0xAA // poison: padding must come back 0
	}
	SwizzleScales128x4(sw, src, rows, cols)
	seen := make([]bool, len(sw))
	for m := range rows {
		for k := range cols {
			seen[Swizzled128x4Offset(m, k, cols)] = true
		}
	}
	for i, b := range sw {
		if !seen[i] && b != 0 {
			t.Fatalf("[%d,%d]: padding byte %d = %#x, want 0", rows, cols, i, b)
		}
	}
	back := make([]uint8, rows*cols)
	UnswizzleScales128x4(back, sw, rows, cols)
	for i := range src {
		if back[i] != src[i] {
			t.Fatalf("[%d,%d]: round trip lost byte %d", rows, cols, i)
		}
	}
}

func TestSwizzleRoundTrip(t *testing.T) {
	for _, sh := range [][2]int{{1, 1}, {127, 3}, {128, 4}, {129, 5}, {300, 112}} {
		src := make([]uint8, sh[0]*sh[1])
		for i := range src {
			src[i] = uint8(i*7 + 1)
		}
		checkSwizzleRoundTrip(t, sh[0], sh[1], src)
	}
}
