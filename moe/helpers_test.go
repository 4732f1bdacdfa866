package moe_test

import (
	"testing"

	"kimimoe/validation"
)

// oracleOut runs the oracle on all of c's rows, failing the test on error.
func oracleOut(t *testing.T, c *validation.Case) []float64 {
	t.Helper()
	out, err := c.OracleForward(nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
