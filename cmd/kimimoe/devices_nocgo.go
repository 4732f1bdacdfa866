//go:build !cgo

package main

import (
	"kimimoe/backend"
	"kimimoe/backend/cuda"
)

func openGroupBackend(gf *groupFlags) (backend.Backend, error) { return nil, cuda.ErrUnavailable }

func runBenchDevices(gf *groupFlags, o benchOptions) error { return cuda.ErrUnavailable }
