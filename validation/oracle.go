package validation

import "kimimoe/moe"

// OracleForward runs the exact oracle (package moe) on the case and returns
// out [len(rows), K] in float64 (rows nil: all M rows).
func (c *Case) OracleForward(rows []int) ([]float64, error) {
	o, err := moe.NewOracle(c.Weights, c.Spec)
	if err != nil {
		return nil, err
	}
	n := c.Input.M
	if rows != nil {
		n = len(rows)
	}
	out := make([]float64, n*c.Weights.K)
	if err := o.Forward(out, &c.Input, rows); err != nil {
		return nil, err
	}
	return out, nil
}
