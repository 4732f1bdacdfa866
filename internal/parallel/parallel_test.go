package parallel

import (
	"sync/atomic"
	"testing"
)

// Every job runs exactly once, for no jobs, one, and more than the CPUs.
func TestForRunsEachJobOnce(t *testing.T) {
	for _, n := range []int{0, 1, 7, 1000} {
		runs := make([]atomic.Int32, n)
		For(n, func(i int) { runs[i].Add(1) })
		for i := range runs {
			if c := runs[i].Load(); c != 1 {
				t.Fatalf("n=%d: job %d ran %d times", n, i, c)
			}
		}
	}
}
