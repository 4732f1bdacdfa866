// Package testref loads the reference vectors under testdata/ref for tests:
// a safetensors file read whole, and typed tensors that fail the test when
// missing or of the wrong dtype.
package testref

import (
	"os"
	"testing"

	"kimimoe/safetensors"
)

// File is a loaded reference file.
type File struct {
	t testing.TB
	f *safetensors.File
}

// Load reads and parses path, failing the test on error.
func Load(t testing.TB, path string) *File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return &File{t, f}
}

func (r *File) get(name string) *safetensors.Tensor {
	r.t.Helper()
	tt := r.f.Get(name)
	if tt == nil {
		r.t.Fatalf("reference tensor %q missing", name)
	}
	return tt
}

func must[T any](t testing.TB, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// F32 returns the named F32 tensor.
func (r *File) F32(name string) []float32 {
	r.t.Helper()
	v, err := r.get(name).Float32s()
	return must(r.t, v, err)
}

// F64 returns the named F64 tensor.
func (r *File) F64(name string) []float64 {
	r.t.Helper()
	v, err := r.get(name).Float64s()
	return must(r.t, v, err)
}

// U8 returns the named U8 tensor.
func (r *File) U8(name string) []uint8 {
	r.t.Helper()
	v, err := r.get(name).Uint8s()
	return must(r.t, v, err)
}

// U16 returns the named U16 tensor.
func (r *File) U16(name string) []uint16 {
	r.t.Helper()
	v, err := r.get(name).Uint16s()
	return must(r.t, v, err)
}
