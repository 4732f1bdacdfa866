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
	ncclOK   bool
)

// optionalLib is a library found among candidate names: $env if set (and
// only it), else the defaults in order.
type optionalLib struct {
	name     string // in messages: "NVRTC"
	env      string
	defaults func() []string
	load     func(path string) (why string)
	ok       *bool // guarded by libMu
	missing  error // the sentinel a failure wraps
}

var (
	nvrtcLib = optionalLib{name: "NVRTC", env: "KIMIMOE_NVRTC", load: dlLoadNVRTC, ok: &nvrtcOK, missing: ErrNoNVRTC,
		defaults: func() []string {
			c := []string{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"}
			if h := os.Getenv("CUDA_HOME"); h != "" {
				c = append(c, filepath.Join(h, "lib64", "libnvrtc.so"))
			}
			return c
		}}
	ncclLib = optionalLib{name: "NCCL", env: "KIMIMOE_LIBNCCL", load: dlLoadNCCL, ok: &ncclOK, missing: ErrNoNCCL,
		defaults: func() []string { return []string{"libnccl.so.2", "libnccl.so"} }}
)

func (l *optionalLib) candidates() []string {
	if p := os.Getenv(l.env); p != "" {
		return []string{p} // named explicitly: only this one
	}
	return l.defaults()
}

// open loads the library once per process: the first candidate that
// loads; else an error wrapping l.missing with every candidate's reason.
func (l *optionalLib) open() error {
	libMu.Lock()
	defer libMu.Unlock()
	if *l.ok {
		return nil
	}
	var tried []string
	for _, p := range l.candidates() {
		why := l.load(p)
		if why == "" {
			*l.ok = true
			return nil
		}
		tried = append(tried, p+": "+why)
	}
	hint := "set " + l.env + " to its path"
	if os.Getenv(l.env) != "" {
		hint = l.env + " names a library that is not a usable " + l.name
	}
	return fmt.Errorf("%w (%s; %s)", l.missing, strings.Join(tried, "; "), hint)
}

// loadNVRTC opens NVRTC once; it needs no driver or device.
func loadNVRTC() error { return nvrtcLib.open() }

// loadNCCL opens NCCL once per process.
func loadNCCL() error { return ncclLib.open() }

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
