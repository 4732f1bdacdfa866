package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
)

// cacheDir is where compiled kernels are kept: $KIMIMOE_CACHE, else the
// user cache directory's kimimoe/cubin. "" disables the cache.
func cacheDir() string {
	if d, ok := os.LookupEnv("KIMIMOE_CACHE"); ok {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "kimimoe", "cubin")
}

// ptxasVerbose is the option KIMIMOE_NVRTC_VERBOSE=1 adds. ptxas's -v
// (--verbose) prints code generation statistics (registers, spills,
// serialized wgmma) and asks for no other code, so the cubin cache's key
// leaves it out (cacheKeyOptions): a verbose compile fills the entry that
// later runs without the variable read. Keyed by it, a verbose compile's
// entry served verbose runs alone, and the next plain run compiled the
// module again (a compile takes minutes). The two cubins are not byte for
// byte the same but their machine code is: a verbose and a plain compile
// give files of one size whose SASS is identical line for line, some ELF
// sections starting 4 bytes later in the verbose one.
const ptxasVerbose = "--ptxas-options=-v"

// cacheKeyOptions are the compile options that key a cubin: all but
// ptxasVerbose.
func cacheKeyOptions(opts []string) []string {
	return slices.DeleteFunc(slices.Clone(opts), func(o string) bool { return o == ptxasVerbose })
}

// cacheKey hashes everything that determines a cubin.
func cacheKey(src, arch string, opts []string, nvrtc string) string {
	h := sha256.New()
	for _, part := range append([]string{src, arch, nvrtc}, opts...) {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// cacheGet returns a cached cubin if its stored hash matches its content; a
// missing, short or corrupt entry is a miss (and a corrupt one is removed).
func cacheGet(dir, key string) []byte {
	if dir == "" {
		return nil
	}
	path := filepath.Join(dir, key+".cubin")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	if len(b) < sha256.Size {
		os.Remove(path)
		return nil
	}
	sum, body := b[:sha256.Size], b[sha256.Size:]
	if h := sha256.Sum256(body); !bytes.Equal(h[:], sum) {
		os.Remove(path)
		return nil
	}
	return body
}

// cachePut stores cubin with its hash, atomically; failures only cost a
// recompile next time, so they are ignored.
func cachePut(dir, key string, cubin []byte) {
	if dir == "" || os.MkdirAll(dir, 0o755) != nil {
		return
	}
	h := sha256.Sum256(cubin)
	tmp, err := os.CreateTemp(dir, ".tmp-"+key)
	if err != nil {
		return
	}
	_, err = tmp.Write(append(h[:], cubin...))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return
	}
	os.Rename(tmp.Name(), filepath.Join(dir, key+".cubin"))
}
