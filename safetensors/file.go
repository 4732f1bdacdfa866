package safetensors

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"

	"kimimoe/internal/regular"
)

// useMmap selects memory mapping where the platform has it; tests turn it
// off to exercise the ReadAt path.
var useMmap = true

// ErrNotRegular is wrapped by Open and the output checks for a path that
// names a directory, FIFO, device or socket (it is regular.ErrNotRegular,
// so one errors.Is serves every reader of the module).
var ErrNotRegular = regular.ErrNotRegular

// Reader is a safetensors file opened with Open: its header parsed and
// checked, its tensors read on demand. A Reader is safe for concurrent use.
type Reader struct {
	Header
	path  string
	mu    sync.RWMutex // reads hold it shared, Close exclusively
	f     *os.File
	data  []byte       // the whole file, memory-mapped (nil: read with ReadAt)
	unmap func() error // releases data
}

// Open opens and checks the file at path without reading its tensors. A
// path that is not a regular file is an error wrapping ErrNotRegular,
// found without blocking (a FIFO with no writer does not hang).
func Open(path string) (*Reader, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r := &Reader{path: path, f: f}
	if useMmap {
		r.data, r.unmap = mapFile(f, st.Size())
	}
	var prefix []byte
	if r.data != nil {
		prefix = r.data
	} else {
		var n [8]byte
		if _, err := f.ReadAt(n[:], 0); err != nil && st.Size() >= 8 {
			r.Close()
			return nil, fmt.Errorf("safetensors: %s: %w", path, err)
		}
		prefix = n[:min(8, int(st.Size()))]
		if hlen, err := headerLength(prefix, st.Size()); err == nil {
			prefix = make([]byte, 8+hlen)
			if _, err := f.ReadAt(prefix, 0); err != nil {
				r.Close()
				return nil, fmt.Errorf("safetensors: %s: %w", path, err)
			}
		}
	}
	h, err := r.safely(func() (*Header, error) { return ParseHeader(prefix, st.Size()) })
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.Header = *h
	return r, nil
}

// openRegular opens path for reading if it is a regular file.
func openRegular(path string) (*os.File, error) {
	if _, err := regular.Stat(path); err != nil { // follows symlinks; does not open (a FIFO would block)
		return nil, err
	}
	f, err := openNoBlock(path)
	if err != nil {
		return nil, err
	}
	// The path may have been replaced between Stat and open.
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%w: %s is a %s", ErrNotRegular, path, regular.Kind(st.Mode()))
		}
		return nil, err
	}
	return f, nil
}

// safely runs f with memory faults turned into an error: a mapped file
// that shrinks under us (truncated by another process) makes reads of the
// lost pages fault, which would otherwise kill the process with SIGBUS.
func (r *Reader) safely(f func() (*Header, error)) (h *Header, err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if p := recover(); p != nil {
			h, err = nil, fmt.Errorf("safetensors: %s changed while it was read (truncated?): %v", r.path, p)
		}
	}()
	return f()
}

// Tensor reads the named tensor into memory of its own (it does not alias
// the file). A missing name returns (nil, nil).
func (r *Reader) Tensor(name string) (*Tensor, error) {
	e := r.Find(name)
	if e == nil {
		return nil, nil
	}
	return r.read(e)
}

func (r *Reader) read(e *Entry) (*Tensor, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.f == nil {
		return nil, fmt.Errorf("safetensors: %s: read after Close", r.path)
	}
	t := &Tensor{Name: e.Name, DType: e.DType, Shape: append([]int{}, e.Shape...), Data: make([]byte, e.Hi-e.Lo)}
	lo := r.DataOffset + e.Lo
	if r.data == nil {
		if _, err := r.f.ReadAt(t.Data, lo); err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("the file ends before tensor %q's %d bytes (truncated while it was read?)", e.Name, len(t.Data))
			}
			return nil, fmt.Errorf("safetensors: %s: %w", r.path, err)
		}
		return t, nil
	}
	_, err := r.safely(func() (*Header, error) {
		copy(t.Data, r.data[lo:lo+int64(len(t.Data))])
		return nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w (reading tensor %q)", err, e.Name)
	}
	return t, nil
}

// Rows reads rows [first, first+count) along the first dimension of the
// named tensor (e.g. some experts of a stacked [E, ...] tensor), and only
// those bytes. A missing name returns (nil, nil).
func (r *Reader) Rows(name string, first, count int) (*Tensor, error) {
	e := r.Find(name)
	if e == nil {
		return nil, nil
	}
	if len(e.Shape) == 0 || first < 0 || count < 0 || first > e.Shape[0]-count {
		return nil, fmt.Errorf("safetensors: %s: rows [%d, %d) of tensor %q with shape %v", r.path, first, first+count, name, e.Shape)
	}
	rowBytes := int64(0)
	if e.Shape[0] > 0 {
		rowBytes = (e.Hi - e.Lo) / int64(e.Shape[0])
	}
	sub := *e
	sub.Shape = append([]int{count}, e.Shape[1:]...)
	sub.Lo = e.Lo + int64(first)*rowBytes
	sub.Hi = sub.Lo + int64(count)*rowBytes
	return r.read(&sub)
}

// ReadAll reads every tensor into memory.
func (r *Reader) ReadAll() (*File, error) {
	f := &File{Metadata: r.Metadata, Tensors: make([]*Tensor, len(r.Entries))}
	for i := range r.Entries {
		t, err := r.read(&r.Entries[i])
		if err != nil {
			return nil, err
		}
		f.Tensors[i] = t
	}
	return f, nil
}

// Close releases the file, after any read in progress. Tensors already
// read stay valid; a read after Close is an error.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	if r.unmap != nil {
		err = r.unmap()
		r.unmap, r.data = nil, nil
	}
	if r.f != nil {
		err = errors.Join(err, r.f.Close())
		r.f = nil
	}
	return err
}

// ReadFile opens path, checks it and reads every tensor into memory.
func ReadFile(path string) (*File, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.ReadAll()
}

// maxNameBytes is the longest file name most file systems take (NAME_MAX).
const maxNameBytes = 255

// CheckOutput checks, before any work is done, that WriteFile can write
// path: it must name a regular file or nothing (a symbolic link is
// followed to its target); it must not be the same file as any of inputs;
// its directory must exist and take a new file; its name must fit the
// file system. It returns the path WriteFile will replace (the link's
// target for a symbolic link).
func CheckOutput(path string, inputs ...string) (string, error) {
	if base := filepath.Base(path); len(base) > maxNameBytes {
		return "", fmt.Errorf("safetensors: output name %.40q... is %d bytes, longer than the %d a file name may have", base, len(base), maxNameBytes)
	}
	target, err := outputTarget(path)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(target); err == nil {
		for _, in := range inputs {
			if ist, err := os.Stat(in); err == nil && os.SameFile(st, ist) {
				return "", fmt.Errorf("safetensors: output %s is the input file %s; writing it would destroy the input", path, in)
			}
		}
	}
	dir := filepath.Dir(target)
	probe, err := os.CreateTemp(dir, ".kimimoe-*.tmp")
	if err != nil {
		return "", fmt.Errorf("safetensors: cannot create the output in %s: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return target, nil
}

// outputTarget resolves path to the file that will be replaced: path
// itself, or for a symbolic link its target. An existing non-regular file
// is an error wrapping ErrNotRegular.
func outputTarget(path string) (string, error) {
	target := path
	if lst, err := os.Lstat(path); err == nil && lst.Mode()&os.ModeSymlink != 0 {
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return "", fmt.Errorf("safetensors: output %s is a symbolic link that does not resolve: %w", path, err)
		}
	}
	st, err := os.Stat(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return target, nil
	case err != nil:
		return "", err
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("%w: output %s is a %s; kimimoe writes only regular files", ErrNotRegular, path, regular.Kind(st.Mode()))
	}
	return target, nil
}

// WriteFile writes tensors and metadata to path atomically: to a temporary
// file in the same directory, synced, then renamed, so a failure never
// leaves a half-written file at path. A symbolic link at path is followed
// and its target replaced (the link stays); an existing path that is not a
// regular file is refused (ErrNotRegular).
func WriteFile(path string, tensors []*Tensor, metadata map[string]string) (err error) {
	if path == "" {
		return fmt.Errorf("safetensors: WriteFile: empty path")
	}
	target, err := outputTarget(path)
	if err != nil {
		return err
	}
	return regular.WriteAtomic(target, func(w io.Writer) error { return Write(w, tensors, metadata) })
}
