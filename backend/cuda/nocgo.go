//go:build !cgo

package cuda

import "kimimoe/backend"

func openBackend() (backend.Backend, error) { return nil, ErrUnavailable }
