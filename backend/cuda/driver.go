//go:build cgo

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// The library tables are process-wide (dlopen handles are). Each library
// is loaded at most once and never unloaded: there is no reference count
// to get wrong, and a compile on one goroutine cannot race a Close on
// another. Device state lives in each Backend.
var (
	libMu    sync.Mutex
	driverOK bool // libcuda loaded and cuInit succeeded
	nvrtcOK  bool
)

func nvrtcCandidates() []string {
	var c []string
	if p := os.Getenv("KIMIMOE_NVRTC"); p != "" {
		return []string{p} // named explicitly: only this one
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
		why := dlLoadNVRTC(p)
		if why == "" {
			nvrtcOK = true
			return nil
		}
		tried = append(tried, p+": "+why)
	}
	hint := "set KIMIMOE_NVRTC to its path"
	if os.Getenv("KIMIMOE_NVRTC") != "" {
		hint = "KIMIMOE_NVRTC names a library that is not a usable NVRTC"
	}
	return fmt.Errorf("%w (%s; %s)", ErrNoNVRTC, strings.Join(tried, "; "), hint)
}

// loadDriver opens libcuda and runs cuInit, once per process.
func loadDriver() error {
	libMu.Lock()
	defer libMu.Unlock()
	if driverOK {
		return nil
	}
	path := os.Getenv("KIMIMOE_LIBCUDA")
	if path == "" {
		path = "libcuda.so.1"
	}
	if why := dlLoadCUDA(path); why != "" {
		hint := "set KIMIMOE_LIBCUDA to its path"
		if strings.HasPrefix(why, "missing symbol") {
			hint = "is it the CUDA driver library?"
		}
		return fmt.Errorf("%w: %s: %s (%s)", ErrNoDriver, path, why, hint)
	}
	if err := cuInit(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoDriver, path, err)
	}
	driverOK = true
	return nil
}

// acquire loads what a Backend needs: the driver and NVRTC.
func acquire() error {
	if err := loadDriver(); err != nil {
		return err
	}
	return loadNVRTC()
}
