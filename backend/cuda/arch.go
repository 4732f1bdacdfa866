package cuda

import "fmt"

// archSpec is one GPU architecture the backend runs on: the NVRTC target
// the kernels are compiled for, its compile options, and which paths its
// instructions allow. Supporting a new architecture is adding a row to
// archs (and, for a path only it has, the path's flag here).
type archSpec struct {
	target   string // NVRTC's --gpu-architecture
	nativeMX bool   // the block-scaled MMA's native kind::mxf8f6f4 body (sm_120a)
	wgmma    bool   // Hopper's warpgroup MMAs: the wgmma and wgmma-fp4 paths
	covers   func(cc int) bool
}

// archs are the architectures, each with the compute capabilities
// (10*major + minor) it covers. The block-scaled FP8 mma.sync the grouped
// and decode paths issue needs sm_89 or later; sm_120a runs the emulated
// body until its native one has run on a device.
var archs = []archSpec{
	{target: ArchSM90a, wgmma: true, covers: func(cc int) bool { return cc == 90 }},
	{target: "sm_89", covers: func(cc int) bool { return cc == 89 }},
	{target: ArchSM120a, covers: func(cc int) bool { return cc >= 120 && cc < 130 }},
}

// archFor is the architecture of compute capability major.minor, or an
// error naming what the kernels need.
func archFor(major, minor int) (archSpec, error) {
	for _, a := range archs {
		if a.covers(10*major + minor) {
			return a, nil
		}
	}
	return archSpec{}, fmt.Errorf("sm_%d%d: the kernels need sm_89, sm_90 or sm_120 (FP8 mma.sync)", major, minor)
}

func (a archSpec) String() string { return a.target }

// compile is the product module's cubin for a.
func (a archSpec) compile() ([]byte, error) { return CompileFor(a.target, a.nativeMX) }

// options are NVRTC's options for a.
func (a archSpec) options() []string { return compileOptions(a.target, a.nativeMX) }

// compileOptions are NVRTC's options for the kernels on arch. --fmad=false
// keeps every multiply and add rounded where the contract rounds.
func compileOptions(arch string, nativeMX bool) []string {
	opts := []string{"--gpu-architecture=" + arch, "-std=c++17", "--fmad=false", "-default-device"}
	if nativeMX {
		opts = append(opts, "-DKMOE_NATIVE_MX")
	}
	return opts
}
