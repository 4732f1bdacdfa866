package cuda

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"kimimoe/backend"
)

// deviceOrdinal parses $KIMIMOE_DEVICE ("" means 0) against n devices.
func deviceOrdinal(env string, n int) (int, error) {
	if env == "" {
		return 0, nil
	}
	ord, err := strconv.Atoi(strings.TrimSpace(env))
	if err != nil || ord < 0 || ord >= n {
		return 0, fmt.Errorf("%w: KIMIMOE_DEVICE=%q is not a device ordinal from 0 to %d", ErrNoDevice, env, n-1)
	}
	return ord, nil
}

// flushMode is how a timed forward's L2 flush is done (Backend.flushL2),
// from $KIMIMOE_BENCH_FLUSH.
type flushMode int

const (
	flushRead  flushMode = iota // "" or "read": kmoe_l2_flush reads 256 MB (the default)
	flushWrite                  // "write": a 256 MB rewrite, triton.testing.do_bench's flush
	flushNone                   // "0": none (events around the launch on an idle device)
)

// String says what the mode does before a timed forward's start event.
func (m flushMode) String() string {
	switch m {
	case flushWrite:
		return "L2 flushed by a 256 MB rewrite before each (KIMIMOE_BENCH_FLUSH=write)"
	case flushNone:
		return "no L2 flush, the events around the launch on an idle device (KIMIMOE_BENCH_FLUSH=0)"
	}
	return "L2 flushed by a 256 MB read before each"
}

// parseFlushMode parses $KIMIMOE_BENCH_FLUSH.
func parseFlushMode(env string) (flushMode, error) {
	switch strings.TrimSpace(env) {
	case "", "read":
		return flushRead, nil
	case "write":
		return flushWrite, nil
	case "0":
		return flushNone, nil
	}
	return flushRead, fmt.Errorf("%w: KIMIMOE_BENCH_FLUSH=%q is not read, write or 0", backend.ErrUnsupported, env)
}

// timingFlushMode is the flush $KIMIMOE_BENCH_FLUSH picks, read at each
// call (a test or a bench run may change it between timings).
func timingFlushMode() (flushMode, error) { return parseFlushMode(os.Getenv("KIMIMOE_BENCH_FLUSH")) }
