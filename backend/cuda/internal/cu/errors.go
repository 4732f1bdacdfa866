package cu

import (
	"errors"
	"fmt"
)

// Typed errors; they exist whether or not the package is built with cgo.
var (
	// ErrNoDriver: libcuda.so.1 could not be loaded or initialized.
	ErrNoDriver = errors.New("cuda: no CUDA driver")
	// ErrNoNVRTC: NVRTC could not be loaded.
	ErrNoNVRTC = errors.New("cuda: NVRTC not found")
	// ErrCompile: NVRTC rejected the kernels; see *CompileError.
	ErrCompile = errors.New("cuda: kernel compilation failed")
)

// Error is a failed CUDA driver call.
type Error struct {
	Call string
	Code int
	Name string
}

func (e *Error) Error() string { return fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, e.Code) }

// CompileError is an NVRTC failure with its log.
type CompileError struct {
	Arch string
	Log  string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("cuda: NVRTC compile for %s failed:\n%s", e.Arch, e.Log)
}

func (e *CompileError) Unwrap() error { return ErrCompile }
