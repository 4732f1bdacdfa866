package safetensors

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Close while other goroutines read: every read either succeeds or says it
// came after Close, and the race detector sees no race (before, Close set
// the file and mapping to nil under the readers' feet).
func TestReaderCloseWhileReading(t *testing.T) {
	for _, mmap := range []bool{true, false} {
		useMmap = mmap
		path := filepath.Join(t.TempDir(), "r.safetensors")
		if err := WriteFile(path, []*Tensor{FromUint8("x", []int{1 << 16}, make([]byte, 1<<16))}, nil); err != nil {
			t.Fatal(err)
		}
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					if _, err := r.Tensor("x"); err != nil && !strings.Contains(err.Error(), "after Close") {
						t.Errorf("read: %v", err)
						return
					}
				}
			}()
		}
		r.Close()
		wg.Wait()
	}
	useMmap = true
}

// A tensor whose data is shorter than its shape is an error from every
// view, not a short slice (AsFloat32 returned an empty slice and nil).
func TestShortDataIsAnError(t *testing.T) {
	for _, tt := range []*Tensor{
		{Name: "f", DType: F32, Shape: []int{2, 2}, Data: make([]byte, 4)},
		{Name: "b", DType: BF16, Shape: []int{3}, Data: make([]byte, 4)},
		{Name: "i", DType: I64, Shape: []int{1}, Data: make([]byte, 4)},
	} {
		var err error
		switch tt.DType {
		case I64:
			_, err = tt.Int64s()
		default:
			_, err = tt.AsFloat32()
		}
		if !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", tt.Name, err)
		}
	}
}

// A constructor given a shape that disagrees with its values panics (a
// programmer error), naming the tensor.
func TestFromShapeMismatchPanics(t *testing.T) {
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), `tensor "x": shape [3] for 2 values`) {
			t.Errorf("recovered %v", p)
		}
	}()
	FromFloat32("x", []int{3}, []float32{1, 2})
}

// An empty output path and an empty tensor name get errors of their own.
func TestEmptyNames(t *testing.T) {
	if err := WriteFile("", nil, nil); err == nil || !strings.Contains(err.Error(), "empty path") {
		t.Errorf("WriteFile(\"\"): %v", err)
	}
	err := WriteFile(filepath.Join(t.TempDir(), "a.safetensors"), []*Tensor{FromUint8("", []int{1}, []byte{1})}, nil)
	if err == nil || !strings.Contains(err.Error(), "empty name") {
		t.Errorf("tensor named \"\": %v", err)
	}
}
