package moe

import "testing"

// oracleOut runs the oracle on all of c's rows, failing the test on error.
func oracleOut(t *testing.T, c *Case) []float64 {
	t.Helper()
	o, err := NewOracle(c.Weights, c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, c.Input.M*c.Weights.K)
	if err := o.Forward(out, &c.Input, nil); err != nil {
		t.Fatal(err)
	}
	return out
}
