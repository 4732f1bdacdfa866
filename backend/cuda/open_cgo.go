//go:build cgo

package cuda

import "kimimoe/backend"

func openBackend() (backend.Backend, error) {
	b, err := Open()
	if err != nil {
		return nil, err
	}
	return b, nil
}
