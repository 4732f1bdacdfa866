// Package cubin is the disk cache of compiled kernel modules: a cubin is
// stored under the hash of everything that determines it (source, arch,
// NVRTC version, options) with a checksum of its bytes, written
// atomically, and a corrupt entry is a miss. KIMIMOE_CACHE names the
// folder ("" turns the cache off).
package cubin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
)

// Dir is where compiled kernels are kept: $KIMIMOE_CACHE, else the user
// cache directory's kimimoe/cubin. "" disables the cache.
func Dir() string {
	if d, ok := os.LookupEnv("KIMIMOE_CACHE"); ok {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "kimimoe", "cubin")
}

// Key hashes everything that determines a cubin.
func Key(src, arch string, opts []string, nvrtc string) string {
	h := sha256.New()
	for _, part := range append([]string{src, arch, nvrtc}, opts...) {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Get returns a cached cubin if its stored hash matches its content; a
// missing, short or corrupt entry is a miss (and a corrupt one is removed).
func Get(dir, key string) []byte {
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

// Put stores cubin with its hash, atomically; failures only cost a
// recompile next time, so they are ignored.
func Put(dir, key string, cubin []byte) {
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
