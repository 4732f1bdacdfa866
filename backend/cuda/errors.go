package cuda

import (
	"errors"

	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/nccl"
)

// Typed errors. They exist whether or not the package was built with cgo.
var (
	// ErrUnavailable: built without cgo, so no GPU support at all.
	ErrUnavailable = errors.New("cuda: built without cgo; GPU backend unavailable")
	// ErrNoDriver: libcuda.so.1 could not be loaded or initialized.
	ErrNoDriver = cu.ErrNoDriver
	// ErrNoDevice: the driver loaded but reports no usable device.
	ErrNoDevice = errors.New("cuda: no CUDA device")
	// ErrNoNVRTC: NVRTC could not be loaded.
	ErrNoNVRTC = cu.ErrNoNVRTC
	// ErrCompile: NVRTC rejected the kernels; see *CompileError.
	ErrCompile = cu.ErrCompile
	// ErrNoNCCL: libnccl.so.2 could not be loaded.
	ErrNoNCCL = nccl.ErrNoNCCL
)

// Error is a failed CUDA driver call.
type Error = cu.Error

// CompileError is an NVRTC failure with its log.
type CompileError = cu.CompileError

// NCCLError is a failed NCCL call: its result code, NCCL's string for
// it, and the communicator's last error message when there is one.
type NCCLError = nccl.Error
