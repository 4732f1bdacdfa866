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

// KIMIMOE_NVRTC_VERBOSE adds ptxas's -v, which changes what ptxas prints
// and not the cubin, so a verbose compile and a plain one share a cache
// entry (cacheKeyOptions), while a define still makes its own.
func TestCompileOptionsVerboseSharesCacheKey(t *testing.T) {
	t.Setenv("KIMIMOE_NVRTC_DEFINES", "")
	t.Setenv("KIMIMOE_NVRTC_VERBOSE", "")
	plain := compileOptions(ArchSM90a, false)
	t.Setenv("KIMIMOE_NVRTC_VERBOSE", "1")
	verbose := compileOptions(ArchSM90a, false)
	if !slices.Contains(verbose, ptxasVerbose) || slices.Contains(plain, ptxasVerbose) {
		t.Fatalf("options %q (verbose) and %q (plain): -v only in the first expected", verbose, plain)
	}
	key := func(opts []string) string { return cacheKey("src", ArchSM90a, cacheKeyOptions(opts), "13.0") }
	if key(verbose) != key(plain) {
		t.Error("a verbose compile keys its cubin apart from the plain compile's")
	}
	if cacheKey("src", ArchSM90a, verbose, "13.0") == cacheKey("src", ArchSM90a, plain, "13.0") {
		t.Error("the raw options key alike: this test no longer shows what cacheKeyOptions removes")
	}
	t.Setenv("KIMIMOE_NVRTC_DEFINES", "X=1")
	if key(compileOptions(ArchSM90a, false)) == key(plain) {
		t.Error("cacheKeyOptions dropped a define")
	}
}
