package moe_test

import (
	"errors"
	"math"
	"testing"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/validation"
)

// splitCase is the smoke matrix's Kimi EP32 rank-7 case (28 local experts,
// top-16, 8 slots local) with per-expert activation parameters, so that a
// split that mixes up experts or their parameters changes the output.
func splitCase(t *testing.T) *validation.Case {
	t.Helper()
	s := validation.CaseSpec{Name: "split", M: 8, K: 256, N: 128, ELocal: 28, TopK: 16, EP: moe.EP{Size: 32, Rank: 7}, LocalSlots: 8,
		Activation: activation.Situ, Chain: moe.ChainMXFP8, Recipe: mxfp.RecipeRCeil, Seed: 5, WeightSeed: 2}
	for e := range s.ELocal {
		p := activation.DefaultParams()
		p.SituBeta *= 1 + float64(e)/8
		s.Params = append(s.Params, p)
	}
	c, err := validation.GenerateCase(&s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sumOfDevices runs the oracle on each device's share and sums the partial
// outputs in device order.
func sumOfDevices(t *testing.T, c *validation.Case, ws []*moe.Weights, specs []moe.LayerSpec) []float64 {
	t.Helper()
	sum := make([]float64, c.Input.M*c.Weights.K)
	for i := range ws {
		part, err := (&validation.Case{Weights: ws[i], Spec: specs[i], Input: c.Input}).OracleForward(nil)
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range part {
			sum[j] += v
		}
	}
	return sum
}

// The devices' partial outputs sum to the one-device output: the oracle
// (float64, slots in slot order) on each share, summed, against the oracle
// on the whole rank. Only the order of additions differs, so the two agree
// to float64 rounding (relative 1e-12 of the output's largest value is far
// above that and far below any routing or parameter mix-up, which changes
// whole expert outputs).
func TestSplitDevicesSumsToLayer(t *testing.T) {
	c := splitCase(t)
	whole := oracleOut(t, c)
	scale := 0.0
	for _, v := range whole {
		scale = math.Max(scale, math.Abs(v))
	}
	for _, d := range []int{1, 2, 4, 7, 28} {
		ws, specs, err := moe.SplitDevices(c.Weights, c.Spec, d)
		if err != nil {
			t.Fatalf("d=%d: %v", d, err)
		}
		for i, s := range specs {
			if want := (moe.EP{Size: 32 * d, Rank: 7*d + i}); s.EP != want || ws[i].E != 28/d {
				t.Fatalf("d=%d device %d: EP %+v with %d experts, want %+v with %d", d, i, s.EP, ws[i].E, want, 28/d)
			}
		}
		sum := sumOfDevices(t, c, ws, specs)
		for j := range sum {
			if math.Abs(sum[j]-whole[j]) > 1e-12*scale {
				t.Fatalf("d=%d: element %d: devices sum to %v, the layer gives %v", d, j, sum[j], whole[j])
			}
		}
	}
}

// The test above catches a split that keeps the rank's EP mapping on every
// device (each device would then read its experts as the rank's first E/d)
// and one that gives every device the first experts' parameters.
func TestSplitDevicesCatchesWrongMapping(t *testing.T) {
	c := splitCase(t)
	whole := oracleOut(t, c)
	ws, specs, err := moe.SplitDevices(c.Weights, c.Spec, 2)
	if err != nil {
		t.Fatal(err)
	}
	far := func(sum []float64) bool {
		for j := range sum {
			if math.Abs(sum[j]-whole[j]) > 1e-3*math.Abs(whole[j])+1e-9 {
				return true
			}
		}
		return false
	}
	wrongEP := append([]moe.LayerSpec(nil), specs...)
	for i := range wrongEP {
		wrongEP[i].EP = moe.EP{Size: 64, Rank: 14} // both devices think they are the first half
	}
	if !far(sumOfDevices(t, c, ws, wrongEP)) {
		t.Error("a split with every device on the first half's mapping went unnoticed")
	}
	wrongParams := append([]moe.LayerSpec(nil), specs...)
	wrongParams[1].Params = specs[0].Params
	if !far(sumOfDevices(t, c, ws, wrongParams)) {
		t.Error("a split giving device 1 device 0's activation parameters went unnoticed")
	}
}

func TestSplitDevicesErrors(t *testing.T) {
	c := splitCase(t)
	for _, d := range []int{0, -1, 3, 29} {
		if _, _, err := moe.SplitDevices(c.Weights, c.Spec, d); !errors.Is(err, moe.ErrParallel) {
			t.Errorf("d=%d: err %v, want ErrParallel", d, err)
		}
	}
	_, _, err := moe.SplitDevices(c.Weights, c.Spec, 3)
	if err == nil || err.Error() != "moe: bad parallel configuration: 28 local experts do not divide over 3 devices" {
		t.Errorf("d=3: %v", err)
	}
	spec := c.Spec
	spec.EP = moe.EP{Size: 1 << 30, Rank: 0}
	if _, _, err := moe.SplitDevices(c.Weights, spec, 2); err == nil {
		t.Error("an ep_size that overflows when split was accepted")
	}
}

func TestExpertsView(t *testing.T) {
	c := splitCase(t)
	w := c.Weights
	v := w.Experts(3, 5)
	if v.E != 2 || v.Validate() != nil {
		t.Fatalf("view: E=%d, %v", v.E, v.Validate())
	}
	for e := range 2 {
		a, b := v.FC1(e), w.FC1(3+e)
		if &a.Packed[0] != &b.Packed[0] || &v.FC2(e).Scales[0] != &w.FC2(3 + e).Scales[0] {
			t.Fatalf("expert %d of the view is not expert %d of w", e, 3+e)
		}
	}
	for _, r := range [][2]int{{-1, 2}, {2, 2}, {0, 29}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Experts(%d, %d) did not panic", r[0], r[1])
				}
			}()
			w.Experts(r[0], r[1])
		}()
	}
}
