//go:build cgo

package cuda

import (
	"slices"
	"testing"
)

// KIMIMOE_NVRTC_DEFINES turns into -D options, and so into a different
// cache key: a kernel variant compiled for a measurement never comes back
// from the cache as the default module, or the other way round.
func TestCompileOptionsDefines(t *testing.T) {
	t.Setenv("KIMIMOE_NVRTC_DEFINES", "")
	plain := compileOptions(ArchSM90a, false)
	t.Setenv("KIMIMOE_NVRTC_DEFINES", " WGC_MULTICAST=0  X=1 ")
	opts := compileOptions(ArchSM90a, false)
	for _, want := range []string{"-DWGC_MULTICAST=0", "-DX=1"} {
		if !slices.Contains(opts, want) {
			t.Errorf("options %q lack %s", opts, want)
		}
	}
	if len(opts) != len(plain)+2 {
		t.Errorf("options %q: want the plain ones %q and two defines", opts, plain)
	}
	if cacheKey("src", ArchSM90a, opts, "13.0") == cacheKey("src", ArchSM90a, plain, "13.0") {
		t.Error("a variant's cache key is the default module's")
	}
}
