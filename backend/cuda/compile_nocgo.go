//go:build !cgo

package cuda

// Arch names an NVRTC target.
const (
	ArchSM90   = "sm_90"
	ArchSM120a = "sm_120a"
)

// CompileFor reports ErrUnavailable without cgo.
func CompileFor(arch string, nativeMX bool) ([]byte, error) { return nil, ErrUnavailable }

// NVRTCVersion reports ErrUnavailable without cgo.
func NVRTCVersion() (string, error) { return "", ErrUnavailable }
