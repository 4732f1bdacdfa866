package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Each malformed file the format forbids gets its own error; before the
// strict header parser, the first five of these were accepted (last key
// won; junk and holes ignored) and a 1.5 M-tensor header took gigabytes.
func TestStrictFormat(t *testing.T) {
	u8 := func(name string, lo, hi int) string {
		return `"` + name + `":{"dtype":"U8","shape":[` + itoa(hi-lo) + `],"data_offsets":[` + itoa(lo) + `,` + itoa(hi) + `]}`
	}
	cases := []struct {
		name, header string
		data         int
		want         string
	}{
		{"duplicate tensor", `{` + u8("x", 0, 2) + `,` + u8("x", 2, 4) + `}`, 4, `key "x" appears twice`},
		{"duplicate metadata", `{"__metadata__":{"chain":"mxfp8"},` + u8("x", 0, 2) + `,"__metadata__":{"chain":"exact"}}`, 2, `key "__metadata__" appears twice`},
		{"duplicate metadata key", `{"__metadata__":{"chain":"mxfp8","chain":"exact"},` + u8("x", 0, 2) + `}`, 2, `__metadata__ key "chain" appears twice`},
		{"junk after header", `{` + u8("x", 0, 2) + `}xx`, 2, "other than space padding"},
		{"second object", `{` + u8("x", 0, 2) + `} {}`, 2, "other than space padding"},
		{"hole", `{` + u8("x", 0, 2) + `,` + u8("y", 3, 4) + `}`, 4, "a hole"},
		{"trailing data", `{` + u8("x", 0, 2) + `}`, 5, "3 data bytes after the last tensor"},
		{"leading space", ` {` + u8("x", 0, 2) + `}`, 2, "does not start with '{'"},
	}
	for _, c := range cases {
		_, err := Parse(encode(t, c.header, make([]byte, c.data)))
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrFormat mentioning %q", c.name, err, c.want)
		}
	}
	// Space padding after the object is the format's own alignment: fine.
	if _, err := Parse(encode(t, `{`+u8("x", 0, 2)+`}    `, make([]byte, 2))); err != nil {
		t.Errorf("space padding: %v", err)
	}
	// Too many tensors: refused once the count passes the limit, cheaply.
	var h strings.Builder
	h.WriteString("{")
	for i := range MaxTensors + 1 {
		if i > 0 {
			h.WriteString(",")
		}
		h.WriteString(`"t` + itoa(i) + `":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}`)
	}
	h.WriteString("}")
	if _, err := Parse(encode(t, h.String(), nil)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%d tensors: %v", MaxTensors+1, err)
	}
	// A header over the cap says so (it used to be called a truncated file).
	over := make([]byte, 16)
	binary.LittleEndian.PutUint64(over, MaxHeaderBytes+1)
	if _, err := Parse(over); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("header over the cap: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func writeSample(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "sample.safetensors")
	ts := []*Tensor{FromUint8("a", []int{4096}, make([]byte, 4096)), FromUint8("b", []int{1 << 20}, bytes.Repeat([]byte{7}, 1<<20))}
	if err := WriteFile(path, ts, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	return path
}

// Both read paths (mapping and ReadAt) read the same tensors, and a file
// truncated after Open is an error naming it, not SIGBUS (before, scales
// aliased a shared mapping and a truncation killed the process).
func TestReaderTruncatedWhileOpen(t *testing.T) {
	for _, mapped := range []bool{true, false} {
		useMmap = mapped
		path := writeSample(t, t.TempDir())
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.Tensor("b")
		if err != nil || len(b.Data) != 1<<20 || b.Data[5] != 7 {
			t.Fatalf("mapped=%v: read b: %v", mapped, err)
		}
		if missing, err := r.Tensor("nope"); missing != nil || err != nil {
			t.Fatalf("missing tensor: %v %v", missing, err)
		}
		if err := os.Truncate(path, 200); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Tensor("b"); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("mapped=%v: read after truncation: %v, want an error naming the file", mapped, err)
		}
		r.Close()
	}
	useMmap = true
}

// Non-regular inputs are refused at open, without blocking on a FIFO.
func TestOpenNonRegular(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
	if runtime.GOOS == "windows" {
		return
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no mkfifo:", err)
	}
	if _, err := Open(fifo); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "FIFO") {
		t.Errorf("FIFO: %v", err)
	}
}

// The output checks: the input itself, a directory, a FIFO, a symbolic
// link (followed, not replaced), a missing directory, a name too long.
func TestOutputChecks(t *testing.T) {
	dir := t.TempDir()
	in := writeSample(t, dir)
	if _, err := CheckOutput(in, in); err == nil || !strings.Contains(err.Error(), "input") {
		t.Errorf("output = input: %v", err)
	}
	if _, err := CheckOutput(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("output a directory: %v", err)
	}
	if err := WriteFile(dir, nil, nil); !errors.Is(err, ErrNotRegular) {
		t.Errorf("WriteFile over a directory: %v", err)
	}
	if _, err := CheckOutput(filepath.Join(dir, "no", "such", "dir", "out")); err == nil {
		t.Error("output in a missing directory accepted")
	}
	long := filepath.Join(dir, strings.Repeat("x", 256))
	if _, err := CheckOutput(long); err == nil || !strings.Contains(err.Error(), "longer") {
		t.Errorf("256-byte name: %v", err)
	}
	// A 250-byte name is fine: the temporary name does not grow with it.
	ok := filepath.Join(dir, strings.Repeat("y", 250))
	if err := WriteFile(ok, []*Tensor{FromUint8("a", []int{1}, []byte{1})}, nil); err != nil {
		t.Errorf("250-byte name: %v", err)
	}
	if runtime.GOOS == "windows" {
		return
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err == nil {
		if _, err := CheckOutput(fifo); !errors.Is(err, ErrNotRegular) {
			t.Errorf("output a FIFO: %v", err)
		}
	}
	target := filepath.Join(dir, "target.safetensors")
	link := filepath.Join(dir, "link.safetensors")
	os.WriteFile(target, []byte("old"), 0o644)
	if err := os.Symlink(target, link); err != nil {
		t.Skip("no symlinks:", err)
	}
	if err := WriteFile(link, []*Tensor{FromUint8("a", []int{1}, []byte{1})}, nil); err != nil {
		t.Fatal(err)
	}
	if lst, err := os.Lstat(link); err != nil || lst.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symbolic link was replaced: %v", err)
	}
	if f, err := ReadFile(target); err != nil || f.Get("a") == nil {
		t.Errorf("the link's target was not written: %v", err)
	}
	if _, err := CheckOutput(link, target); err == nil {
		t.Error("a link to the input accepted as output")
	}
}
