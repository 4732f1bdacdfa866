package cuda

import (
	"errors"
	"testing"
)

// A malformed KIMIMOE_DEVICE is an error (it used to select device 0).
func TestDeviceOrdinal(t *testing.T) {
	for _, c := range []struct {
		env  string
		n    int
		want int
		ok   bool
	}{{"", 2, 0, true}, {"1", 2, 1, true}, {" 0 ", 1, 0, true}, {"2", 2, 0, false}, {"-1", 2, 0, false}, {"gpu1", 2, 0, false}, {"1x", 2, 0, false}} {
		got, err := deviceOrdinal(c.env, c.n)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("deviceOrdinal(%q, %d) = %d, %v", c.env, c.n, got, err)
		}
		if err != nil && !errors.Is(err, ErrNoDevice) {
			t.Errorf("deviceOrdinal(%q): %v does not wrap ErrNoDevice", c.env, err)
		}
	}
}
