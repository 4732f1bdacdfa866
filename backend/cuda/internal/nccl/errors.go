// Package nccl is NCCL as kimimoe's expert parallelism uses it, loaded
// with dlopen (kimimoe/backend/cuda/internal/dl) so that a binary runs
// where NCCL is absent until a group is opened. Each Go function wraps
// one NCCL call and returns a failed result as an *Error with the
// communicator's last message. KIMIMOE_LIBNCCL names the library's path.
package nccl

import (
	"errors"
	"fmt"
)

// ErrNoNCCL: libnccl.so.2 could not be loaded.
var ErrNoNCCL = errors.New("cuda: NCCL not found")

// Error is a failed NCCL call: its result code, NCCL's string for it,
// and the communicator's last error message when there is one.
type Error struct {
	Call   string
	Code   int
	Name   string
	Detail string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}
