//go:build unix

package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Index files that are not regular files, or too large, are refused at
// once: /dev/zero ran out of memory, a FIFO blocked forever.
func TestIndexNotRegularOrHuge(t *testing.T) {
	dir := t.TempDir()
	idx := filepath.Join(dir, "model.safetensors.index.json")
	must(t, os.Symlink("/dev/zero", idx))
	if _, err := Open(dir); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("/dev/zero index: %v", err)
	}
	os.Remove(idx)
	must(t, syscall.Mkfifo(idx, 0o644))
	done := make(chan error, 1)
	go func() { _, err := Open(dir); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCheckpoint) {
			t.Errorf("FIFO index: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Open blocked on a FIFO index")
	}
	os.Remove(idx)
	f, _ := os.Create(idx)
	f.Truncate(MaxIndexBytes + 1)
	f.Close()
	if _, err := Open(dir); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "an index is at most") {
		t.Errorf("huge index: %v", err)
	}
}
