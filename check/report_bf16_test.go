package check

import (
	"strings"
	"testing"

	"kimimoe/moe"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// A bf16-chain case whose float x holds values BF16 does not says so in
// the report's notes (the chain rounds them), and one whose x is BF16
// already does not.
func TestCompareNotesBF16RoundedX(t *testing.T) {
	c := testCase(t, moe.ChainBF16, 1, 0, false)
	note := func(c *validation.Case) bool {
		r, err := Compare(c, candidate(t, c), safetensors.F32, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Pass {
			t.Fatalf("the oracle's own output fails: %+v", r)
		}
		return strings.Contains(strings.Join(r.Notes, "\n"), "not BF16 values")
	}
	if c.Input.X == nil {
		t.Skip("the first smoke case gives x quantized")
	}
	if !note(c) {
		t.Error("a float32 x with non-BF16 values: no note")
	}
	for i, v := range c.Input.X {
		c.Input.X[i] = float32(int(v*64)) / 64 // a few bits: BF16 values
	}
	if note(c) {
		t.Error("a BF16 x: a note all the same")
	}
}
