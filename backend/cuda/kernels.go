//go:build cgo

package cuda

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

func compileOptions(arch string, nativeMX bool) []string {
	opts := []string{"--gpu-architecture=" + arch, "-std=c++17", "--fmad=false", "-default-device"}
	if nativeMX {
		opts = append(opts, "-DKMOE_NATIVE_MX")
	}
	if os.Getenv("KIMIMOE_NVRTC_VERBOSE") == "1" { // ptxas's resource and performance notes, printed at compile time
		opts = append(opts, ptxasVerbose)
	}
	// Kernel variants for measurements: NAME=VALUE words, each a -D
	// option (the cache key includes them).
	for _, d := range strings.Fields(os.Getenv("KIMIMOE_NVRTC_DEFINES")) {
		opts = append(opts, "-D"+d)
	}
	return opts
}

// CompileFor compiles the embedded kernels with NVRTC for arch (e.g.
// "sm_90", "sm_120a") and returns the cubin, using the disk cache. With
// nativeMX the block-scaled MMA uses the native kind::mxf8f6f4.block_scale
// body (sm_120a only). It needs NVRTC but no driver or device.
func CompileFor(arch string, nativeMX bool) ([]byte, error) {
	if err := loadNVRTC(); err != nil {
		return nil, err
	}
	major, minor, err := nvrtcVersion()
	if err != nil {
		return nil, err
	}
	ver := fmt.Sprintf("%d.%d", major, minor)
	opts := compileOptions(arch, nativeMX)
	dir := cacheDir()
	src := KernelProgram()
	key := cacheKey(src, arch, cacheKeyOptions(opts), ver)
	// A verbose run compiles even where the cache holds the cubin: the
	// notes it asks for come from the compile.
	if !slices.Contains(opts, ptxasVerbose) {
		if cubin := cacheGet(dir, key); cubin != nil {
			return cubin, nil
		}
	}
	cubin, err := nvrtcCompile(src, "moe.cu", arch, opts)
	if err != nil {
		return nil, err
	}
	cachePut(dir, key, cubin)
	return cubin, nil
}

// NVRTCVersion reports the loaded NVRTC's version.
func NVRTCVersion() (string, error) {
	if err := loadNVRTC(); err != nil {
		return "", err
	}
	a, b, err := nvrtcVersion()
	return fmt.Sprintf("%d.%d", a, b), err
}
