//go:build cgo

package cu

import (
	"os"
	"path/filepath"

	"kimimoe/backend/cuda/internal/dl"
)

var (
	driverLib = dl.Library{Name: "CUDA driver", Env: "KIMIMOE_LIBCUDA", Load: loadCUDA, Init: Init, Missing: ErrNoDriver,
		Defaults: func() []string { return []string{"libcuda.so.1"} }}
	nvrtcLib = dl.Library{Name: "NVRTC", Env: "KIMIMOE_NVRTC", Load: loadNVRTC, Missing: ErrNoNVRTC,
		Defaults: func() []string {
			c := []string{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"}
			if h := os.Getenv("CUDA_HOME"); h != "" {
				c = append(c, filepath.Join(h, "lib64", "libnvrtc.so"))
			}
			return c
		}}
)

// LoadDriver opens libcuda ($KIMIMOE_LIBCUDA, else libcuda.so.1) and runs
// cuInit, once per process.
func LoadDriver() error { return driverLib.Open() }

// LoadNVRTC opens NVRTC ($KIMIMOE_NVRTC, else the usual names), once per
// process; it needs no driver or device.
func LoadNVRTC() error { return nvrtcLib.Open() }

// Loaded reports which of the two libraries this process has loaded.
func Loaded() (driver, nvrtc bool) { return driverLib.Loaded(), nvrtcLib.Loaded() }

// Acquire loads what a device needs: the driver and NVRTC.
func Acquire() error {
	if err := LoadDriver(); err != nil {
		return err
	}
	return LoadNVRTC()
}
