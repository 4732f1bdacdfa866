// Package regular reads and writes the files kimimoe's commands and
// loaders take, refusing anything that is not a regular file before it is
// opened (a FIFO would block, a device never end), bounding what is read,
// and replacing a file only atomically.
package regular

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrNotRegular is wrapped by the errors about a path that names a
// directory, FIFO, device or socket.
var ErrNotRegular = errors.New("not a regular file")

// Kind names a file mode's kind for messages ("directory", "FIFO", ...).
func Kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeSymlink != 0:
		return "symbolic link"
	}
	return "non-regular file"
}

// Stat returns path's file info (symbolic links followed) if it is a
// regular file, else an error wrapping ErrNotRegular that says what it is.
func Stat(path string) (os.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotRegular, path, Kind(st.Mode()))
	}
	return st, nil
}

// ReadFile reads a regular file of at most max bytes; what names such a
// file in the error about a larger one ("an index").
func ReadFile(path string, max int64, what string) ([]byte, error) {
	st, err := Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s is %d bytes; %s is at most %d", path, st.Size(), what, max)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(data)) > max {
		err = fmt.Errorf("%s grew past %d bytes while it was read", path, max)
	}
	return data, err
}

// WriteAtomic replaces target (a regular file or nothing; resolve links
// first) with what write puts into a temporary file of the same
// directory, synced, mode 0644, then renamed: a failure leaves target as
// it was and no temporary file behind.
func WriteAtomic(target string, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(target), ".kimimoe-*.tmp")
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
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}
