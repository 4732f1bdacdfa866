//go:build !cgo

package cuda

// CompileFor reports ErrUnavailable without cgo.
func CompileFor(arch string, nativeMX bool) ([]byte, error) { return nil, ErrUnavailable }

// NVRTCVersion reports ErrUnavailable without cgo.
func NVRTCVersion() (string, error) { return "", ErrUnavailable }
