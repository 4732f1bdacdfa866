package validation

import (
	"math"
	"strings"
	"testing"
)

// Expected values worked by hand from the definitions in metrics.go.
func TestCompare(t *testing.T) {
	ref := []float64{3, 4, 0}
	got := []float64{3, 4, 0}
	if m := Compare(got, ref); !m.Bitwise || m.Cosine != 1 || m.NRMSE != 0 || m.MaxAbs != 0 {
		t.Errorf("identical: %v", m)
	}
	// got = ref + (0, 0, 1): |d| = 1, |ref| = 5 -> NRMSE 0.2; cos = 25/(5*sqrt 26).
	got = []float64{3, 4, 1}
	m := Compare(got, ref)
	if m.NRMSE != 0.2 || math.Abs(m.Cosine-25/(5*math.Sqrt(26))) > 1e-15 || m.MaxAbs != 1 || math.Abs(m.MeanAbs-1.0/3) > 1e-15 || m.Bitwise {
		t.Errorf("one off: %v", m)
	}
	nan := math.NaN()
	m = Compare([]float64{nan, 1, math.Inf(1)}, []float64{nan, 1, math.Inf(-1)})
	if m.NonFiniteMismatch != 1 {
		t.Errorf("NaN matches NaN, +Inf does not match -Inf: %v", m)
	}
	if ok, i := AllClose([]float64{1, 2.1}, []float64{1, 2}, 0.01, 0.05); ok || i != 1 {
		t.Errorf("AllClose: %v %d", ok, i)
	}
	if ok, _ := AllClose([]float64{1, 2.06}, []float64{1, 2}, 0.01, 0.05); !ok {
		t.Error("AllClose within atol + rtol|r| = 0.07 rejected")
	}
}

// A length mismatch panics in both Compare and AllClose (before, AllClose
// with a shorter got returned ok and a longer one panicked with an index
// error; Compare panicked).
func TestLengthMismatchPanics(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"Compare short", func() { Compare([]float64{1}, []float64{1, 2}) }},
		{"Compare long", func() { Compare([]float64{1, 2, 3}, []float64{1, 2}) }},
		{"AllClose short", func() { AllClose([]float64{1}, []float64{1, 2}, 0, 0) }},
		{"AllClose long", func() { AllClose([]float64{1, 2, 3}, []float64{1, 2}, 0, 0) }},
	} {
		func() {
			defer func() {
				if p, ok := recover().(string); !ok || !strings.HasPrefix(p, "validation: ") {
					t.Errorf("%s: recovered %v, want a \"validation:\" panic", c.name, p)
				}
			}()
			c.f()
		}()
	}
}

// Huge values: the norms do not overflow (a plain sum of squares would).
func TestCompareHugeValues(t *testing.T) {
	ref := []float64{1e200, -1e200}
	got := []float64{1e200, -1e200}
	if m := Compare(got, ref); math.Abs(m.Cosine-1) > 1e-15 || m.NRMSE != 0 {
		t.Errorf("huge equal values: %v", m)
	}
}
