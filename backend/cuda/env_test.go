package cuda

import (
	"errors"
	"testing"

	"kimimoe/backend"
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

// KIMIMOE_BENCH_FLUSH: the three timing methods, and an error naming the
// variable for anything else (a typo must not time silently the default
// way).
func TestParseFlushMode(t *testing.T) {
	for _, c := range []struct {
		env  string
		want flushMode
		ok   bool
	}{{"", flushRead, true}, {"read", flushRead, true}, {" write ", flushWrite, true}, {"0", flushNone, true},
		{"1", flushRead, false}, {"none", flushRead, false}, {"rewrite", flushRead, false}} {
		got, err := parseFlushMode(c.env)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseFlushMode(%q) = %v, %v", c.env, got, err)
		}
		if err != nil && !errors.Is(err, backend.ErrUnsupported) {
			t.Errorf("parseFlushMode(%q): %v does not wrap backend.ErrUnsupported", c.env, err)
		}
	}
	// Each mode names itself in bench's output differently.
	seen := map[string]bool{}
	for _, m := range []flushMode{flushRead, flushWrite, flushNone} {
		if seen[m.String()] {
			t.Errorf("flush mode %d's description %q is another mode's", m, m)
		}
		seen[m.String()] = true
	}
}
