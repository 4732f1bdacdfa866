//go:build unix

package safetensors

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// mapFile maps the whole file read-only (nil for an empty file).
func mapFile(f *os.File, size int64) ([]byte, func() error) {
	if size == 0 || int64(int(size)) != size {
		return nil, nil // empty, or too large to map here: ReadAt
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil // mapping is an optimization; ReadAt works everywhere
	}
	return data, func() error { return unix.Munmap(data) }
}

// openNoBlock opens path read-only without blocking on a FIFO.
func openNoBlock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return f, nil
}
