package safetensors

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Mapped is a safetensors file opened with Open: parsed, its tensor data
// aliasing a read-only memory mapping that Close releases.
type Mapped struct {
	*File
	data []byte
}

// Open memory-maps and parses the file at path. Tensor data is read-only
// and valid until Close.
func Open(path string) (*Mapped, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("%w: %s is empty", ErrFormat, path)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("safetensors: mmap %s: %w", path, err)
	}
	pf, err := Parse(data)
	if err != nil {
		unix.Munmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Mapped{File: pf, data: data}, nil
}

// Close unmaps the file; its tensors' data must not be used afterwards.
func (m *Mapped) Close() error {
	if m.data == nil {
		return nil
	}
	err := unix.Munmap(m.data)
	m.data = nil
	return err
}

// WriteFile writes tensors and metadata to path atomically: to a temporary
// file in the same directory, synced, then renamed, so a failure never
// leaves a half-written file at path.
func WriteFile(path string, tensors []*Tensor, metadata map[string]string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o644); err != nil { // CreateTemp makes 0600; outputs are ordinary files
		return err
	}
	if err = Write(tmp, tensors, metadata); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
