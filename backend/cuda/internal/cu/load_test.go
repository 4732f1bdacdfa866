//go:build cgo

package cu

import (
	"errors"
	"strings"
	"testing"
)

// A library that is not the one asked for is reported as such, with the
// missing symbol named; libm stands in for "another library". Skipped
// where the real library is already loaded in this process (loading
// happens once).
func TestWrongLibraryReportsMissingSymbol(t *testing.T) {
	loadedDriver, loadedNVRTC := Loaded()
	if !loadedDriver {
		t.Setenv("KIMIMOE_LIBCUDA", "libm.so.6")
		err := LoadDriver()
		if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "missing symbol cuInit") || !strings.Contains(err.Error(), "CUDA driver library") {
			t.Errorf("libm as the driver: %v", err)
		}
		t.Setenv("KIMIMOE_LIBCUDA", "/no/such/libcuda.so")
		if err := LoadDriver(); !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "/no/such/libcuda.so") {
			t.Errorf("missing driver file: %v", err)
		}
	}
	if !loadedNVRTC {
		t.Setenv("KIMIMOE_NVRTC", "libm.so.6")
		err := LoadNVRTC()
		if !errors.Is(err, ErrNoNVRTC) || !strings.Contains(err.Error(), "missing symbol nvrtcVersion") {
			t.Errorf("libm as NVRTC: %v", err)
		}
	}
}
