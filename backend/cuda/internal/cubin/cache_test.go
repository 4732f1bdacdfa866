package cubin

import (
	"os"
	"path/filepath"
	"testing"
)

// The disk cache needs no GPU: a stored entry comes back, a corrupted one
// is a miss and is removed, and keys change with every input.
func TestCubinCache(t *testing.T) {
	dir := t.TempDir()
	key := Key("src", "sm_90", []string{"-O3"}, "13.0")
	if Get(dir, key) != nil {
		t.Fatal("empty cache hit")
	}
	Put(dir, key, []byte("cubin bytes"))
	if got := Get(dir, key); string(got) != "cubin bytes" {
		t.Fatalf("cache returned %q", got)
	}
	path := filepath.Join(dir, key+".cubin")
	b, _ := os.ReadFile(path)
	b[len(b)-1] ^= 1
	os.WriteFile(path, b, 0o644)
	if Get(dir, key) != nil {
		t.Fatal("corrupt entry trusted")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("corrupt entry not removed")
	}
	for _, k := range []string{
		Key("src2", "sm_90", []string{"-O3"}, "13.0"),
		Key("src", "sm_120a", []string{"-O3"}, "13.0"),
		Key("src", "sm_90", []string{"-O2"}, "13.0"),
		Key("src", "sm_90", []string{"-O3"}, "12.9"),
	} {
		if k == key {
			t.Fatal("cache key ignores one of its inputs")
		}
	}
}
