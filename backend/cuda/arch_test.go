package cuda

import (
	"slices"
	"strings"
	"testing"
)

// Each compute capability maps to the architecture whose instructions it
// has: sm_90 alone gets the wgmma paths, and anything before sm_89 (no FP8
// mma.sync) is refused with what the kernels need.
func TestArchFor(t *testing.T) {
	for _, c := range []struct {
		major, minor int
		target       string
		wgmma        bool
	}{{9, 0, ArchSM90a, true}, {8, 9, "sm_89", false}, {12, 0, ArchSM120a, false}, {12, 1, ArchSM120a, false}} {
		a, err := archFor(c.major, c.minor)
		if err != nil || a.target != c.target || a.wgmma != c.wgmma || a.nativeMX {
			t.Errorf("sm_%d%d: %+v, %v; want %s, wgmma %v", c.major, c.minor, a, err, c.target, c.wgmma)
		}
		if opts := a.options(); !slices.Contains(opts, "--gpu-architecture="+c.target) || !slices.Contains(opts, "--fmad=false") {
			t.Errorf("sm_%d%d: options %v", c.major, c.minor, opts)
		}
	}
	for _, cc := range [][2]int{{8, 0}, {8, 6}, {10, 0}, {7, 5}} {
		if a, err := archFor(cc[0], cc[1]); err == nil || !strings.Contains(err.Error(), "sm_89, sm_90 or sm_120") {
			t.Errorf("sm_%d%d: %+v, %v; want a refusal", cc[0], cc[1], a, err)
		}
	}
}
