// Package cu is the CUDA driver and NVRTC as kimimoe uses them, loaded
// with dlopen so that a binary built with cgo runs, without a GPU, on a
// machine that has neither: the entry points are resolved into one table
// per library (kimimoe/backend/cuda/internal/dl decides which file), and
// each Go function wraps one call, returning a failed result as an *Error.
//
// Environment: KIMIMOE_LIBCUDA and KIMIMOE_NVRTC name the libraries'
// paths; nothing else is read here.
package cu
