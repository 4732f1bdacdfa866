//go:build unix

package cuda

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An id file that is a FIFO is an error at once (reading it blocked well
// past the timeout).
func TestIDFileFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skip(err)
	}
	start := time.Now()
	_, err := ReadUniqueIDFile(path, 3*time.Second)
	if !errors.Is(err, ErrGroup) || !strings.Contains(err.Error(), "not a regular file") || time.Since(start) > time.Second {
		t.Errorf("%v after %v", err, time.Since(start))
	}
}
