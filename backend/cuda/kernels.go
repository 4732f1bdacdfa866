//go:build cgo

package cuda

import (
	_ "embed"
	"fmt"
)

//go:embed kernels/moe.cu
var kernelSource string

// Arch names an NVRTC target.
const (
	ArchSM90   = "sm_90"
	ArchSM120a = "sm_120a"
)

// kernelNames are the entry points in kernels/moe.cu.
var kernelNames = []string{"kmoe_quantize_x", "kmoe_route_count", "kmoe_route_scatter",
	"kmoe_gemm1_act_t64", "kmoe_gemm1_act_t128", "kmoe_gemm2_t64", "kmoe_gemm2_t128", "kmoe_finalize"}

func compileOptions(arch string, nativeMX bool) []string {
	opts := []string{"--gpu-architecture=" + arch, "-std=c++17", "--fmad=false", "-default-device"}
	if nativeMX {
		opts = append(opts, "-DKMOE_NATIVE_MX")
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
	key := cacheKey(kernelSource, arch, opts, ver)
	if cubin := cacheGet(dir, key); cubin != nil {
		return cubin, nil
	}
	cubin, err := nvrtcCompile(kernelSource, "moe.cu", arch, opts)
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
