//go:build cgo

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// The library table is process-wide (dlopen handles are), reference-counted
// by acquire/release. Device state lives in each Backend.
var (
	libMu   sync.Mutex
	libRefs int
	nvrtcOK bool
)

func nvrtcCandidates() []string {
	var c []string
	if p := os.Getenv("KIMIMOE_NVRTC"); p != "" {
		c = append(c, p)
	}
	c = append(c, "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12")
	if h := os.Getenv("CUDA_HOME"); h != "" {
		c = append(c, filepath.Join(h, "lib64", "libnvrtc.so"))
	}
	return c
}

// loadNVRTC opens NVRTC once; it needs no driver or device.
func loadNVRTC() error {
	libMu.Lock()
	defer libMu.Unlock()
	if nvrtcOK {
		return nil
	}
	var tried []string
	for _, p := range nvrtcCandidates() {
		bad := dlLoadNVRTC(p)
		if bad == "" {
			nvrtcOK = true
			return nil
		}
		tried = append(tried, bad)
	}
	return fmt.Errorf("%w (tried %v; set KIMIMOE_NVRTC to its path)", ErrNoNVRTC, tried)
}

// acquire loads the driver and initializes CUDA, once per process; each
// successful call is paired with release.
func acquire() error {
	libMu.Lock()
	if libRefs > 0 {
		libRefs++
		libMu.Unlock()
		return nil
	}
	err := loadDriver()
	libMu.Unlock()
	if err != nil {
		return err
	}
	if err := loadNVRTC(); err != nil {
		libMu.Lock()
		dlUnloadCUDA()
		libMu.Unlock()
		return err
	}
	libMu.Lock()
	libRefs++
	libMu.Unlock()
	return nil
}

// loadDriver opens libcuda and runs cuInit; libMu is held.
func loadDriver() error {
	path := os.Getenv("KIMIMOE_LIBCUDA")
	if path == "" {
		path = "libcuda.so.1"
	}
	if bad := dlLoadCUDA(path); bad != "" {
		dlUnloadCUDA()
		return fmt.Errorf("%w: cannot load %s (set KIMIMOE_LIBCUDA to its path)", ErrNoDriver, bad)
	}
	if err := cuInit(); err != nil {
		dlUnloadCUDA()
		return fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	return nil
}

func release() {
	libMu.Lock()
	defer libMu.Unlock()
	if libRefs--; libRefs == 0 {
		dlUnloadCUDA()
	}
}
