//go:build cgo

package cuda

import (
	"fmt"

	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/cubin"
)

// CompileFor compiles the embedded kernels with NVRTC for arch (e.g.
// "sm_90", "sm_120a") and returns the cubin, using the disk cache. With
// nativeMX the block-scaled MMA uses the native kind::mxf8f6f4.block_scale
// body (sm_120a only). It needs NVRTC but no driver or device.
func CompileFor(arch string, nativeMX bool) ([]byte, error) {
	return compileCached(KernelProgram(), "kimimoe.cu", arch, compileOptions(arch, nativeMX))
}

// compileCached compiles src for arch with opts, through the disk cache.
func compileCached(src, name, arch string, opts []string) ([]byte, error) {
	if err := cu.LoadNVRTC(); err != nil {
		return nil, err
	}
	major, minor, err := cu.NVRTCVersion()
	if err != nil {
		return nil, err
	}
	ver := fmt.Sprintf("%d.%d", major, minor)
	dir := cubin.Dir()
	key := cubin.Key(src, arch, opts, ver)
	if c := cubin.Get(dir, key); c != nil {
		return c, nil
	}
	c, _, err := cu.Compile(src, name, arch, opts)
	if err != nil {
		return nil, err
	}
	cubin.Put(dir, key, c)
	return c, nil
}

// NVRTCVersion reports the loaded NVRTC's version.
func NVRTCVersion() (string, error) {
	if err := cu.LoadNVRTC(); err != nil {
		return "", err
	}
	a, b, err := cu.NVRTCVersion()
	return fmt.Sprintf("%d.%d", a, b), err
}
