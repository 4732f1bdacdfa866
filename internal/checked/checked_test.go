package checked

import (
	"math"
	"testing"
)

func TestMul(t *testing.T) {
	for _, c := range []struct {
		f    []int
		want int
		ok   bool
	}{
		{nil, 1, true},
		{[]int{32, 4, 1}, 128, true},
		{[]int{4294967296, 4294967296}, 0, false}, // wraps to 0 in int64: plan --ep --dp
		{[]int{7, 7905747460161236408}, 0, false}, // wraps to 8
		{[]int{3, 6148914691236517216}, 0, false}, // wraps to 32: --nodes --gpus-per-node
		{[]int{math.MaxInt, 1}, math.MaxInt, true},
		{[]int{math.MaxInt, 0}, 0, true},
		{[]int{-1, 2}, 0, false},
	} {
		got, ok := Mul(c.f...)
		if got != c.want || ok != c.ok {
			t.Errorf("Mul(%v) = %d, %v; want %d, %v", c.f, got, ok, c.want, c.ok)
		}
	}
}
