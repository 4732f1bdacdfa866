package cuda

import (
	"embed"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"kimimoe/activation"
	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// The kernel ABI: everything Go and the kernels must agree on, defined
// once, here. abiHeader turns it into C (macros, one argument struct per
// kernel with static_asserts on every field offset and the size) that is
// prepended to the embedded source before NVRTC compiles it, so a field
// reordered or retyped here changes the kernel's struct with it, and a
// kernel that disagrees with the layout does not compile. Each kernel takes
// its arguments as one struct, passed by value; launch binds a kernel to
// its argument type at compile time (kernel[A]).

//go:embed kernels/*.cu kernels/*.cuh
var kernelFiles embed.FS

// pathProgram is a path's share of the kernel program and its module:
// its kernels/ files, its #defines and argument structs in the ABI
// header, and its entry points. The paths' shares are programs, by Path;
// the path types (path_*.go) bind the entry points (path.bind).
type pathProgram struct {
	files   []string
	defines []abiDefine
	structs []reflect.Type
	entries []kernelSpec
}

// abiDefine is one #define KMOE_<name> of the ABI header.
type abiDefine struct {
	name string
	v    int
}

// programs are the paths' shares of the kernel program, by Path: their
// files compile in Path order, after the shared ones and before
// sharedTail.
var programs = [numPaths]pathProgram{PathDecode: decodeProgram, PathGrouped: groupedProgram, PathWGMMA: wgmmaProgram, PathFP4: fp4Program}

// What every path shares: the headers and the prologue's kernels compiled
// before the paths' files, the finalize and expert parallelism's kernels
// after them, their defines, structs (with the test and timing modules')
// and entry points.
var (
	sharedHead = []string{"common.cuh", "formats.cuh", "mma.cuh", "activation.cuh", "ptx.cuh", "epilogue.cuh", "quantize.cu", "routing.cu"}
	sharedTail = []string{"finalize.cu", "ep.cu"}
	shared     = pathProgram{
		defines: []abiDefine{{"THREADS", abiThreads}, {"STAGE_K", abiStageK}, {"FINALIZE_COLS", abiFinalizeCols}, {"PARAM_STRIDE", abiParamStride},
			{"RECIPE_FLOOR", int(abiRecipeFloor)}, {"RECIPE_RCEIL", int(abiRecipeRCeil)},
			{"CHAIN_MXFP8", int(abiChainMXFP8)}, {"CHAIN_FLASHINFER", int(abiChainFlashInfer)}, {"CHAIN_BF16", int(abiChainBF16)},
			{"FORM_QUANTIZED", int(abiFormQuantized)}, {"FORM_FLOAT", int(abiFormFloat)}},
		structs: []reflect.Type{kQuantizeX.args, kRouteCount.args, kRouteScatter.args, kFinalize.args, kGatherRows.args, kAddRows.args,
			kTestWiden4.args, kTestF4Widen.args, kL2Flush.args, kTestSitu.args, kTestMxfp8Val.args},
		entries: []kernelSpec{kQuantizeX, kRouteCount, kRouteScatter, kFinalize, kGatherRows, kAddRows},
	}
)

// groupedProgram is the mma.sync grouped GEMMs' share.
var groupedProgram = pathProgram{
	files: []string{"grouped.cu"},
	defines: []abiDefine{{"GEMM1_FEATURES", abiGemm1Features}, {"GEMM2_ROWS", abiGemm2Rows},
		{"TILE_SMALL", abiTileSmall}, {"TILE_LARGE", abiTileLarge}},
	structs: []reflect.Type{kGemm1Small.args, kGemm2Small.args},
	entries: []kernelSpec{kGemm1Small, kGemm1Large, kGemm2Small, kGemm2Large},
}

// kernelOrder is the product module's files in the order NVRTC compiles
// them as one program: each file uses only what the ones before it
// define. The generated wgmma shapes (wgmma_gen.go) come before the first
// GEMM that issues one.
var kernelOrder = func() []string {
	order := slices.Clone(sharedHead)
	for _, p := range programs {
		order = append(order, p.files...)
	}
	return append(order, sharedTail...)
}()

// kernelText is one of kernels/ with a #line directive, so that NVRTC's
// messages name the file and line.
func kernelText(name string) string {
	if name == "wgmma_shapes" {
		return "#line 1 \"wgmma_shapes (generated)\"\n" + wgmmaSource()
	}
	b, err := kernelFiles.ReadFile("kernels/" + name)
	if err != nil {
		panic("cuda: kernels/" + name + " is not embedded")
	}
	return "#line 1 \"" + name + "\"\n" + string(b)
}

// kernelSource is the product module's kernels, without the ABI header.
var kernelSource = func() string {
	var b strings.Builder
	for _, n := range kernelOrder {
		b.WriteString(kernelText(n))
	}
	return b.String()
}()

// Arch names an NVRTC target.
const (
	ArchSM90   = "sm_90"
	ArchSM90a  = "sm_90a" // sm_90 with the wgmma instructions: what an H100/H200 gets
	ArchSM120a = "sm_120a"
)

// devptr is a device address.
type devptr = uint64

// Block geometry shared by the host's grid arithmetic and the kernels'
// static_asserts.
const (
	abiThreads       = 256           // threads per CTA of every kernel (8 warps)
	abiStageK        = layout.StageK // k elements staged per step (KC); K and N must be multiples of it
	abiGemm1Features = 64            // intermediate features per GEMM1 CTA: grid.x = N / 64
	abiGemm2Rows     = 128           // output rows (features of K) per GEMM2 CTA: grid.x = K / 128
	abiTileSmall     = 64            // token tiles: TT instances
	abiTileLarge     = 128
	abiFinalizeCols  = 1024 // output columns per finalize CTA: four a thread
)

// Activation parameters are packed per expert as abiParamStride float32s
// in this order (the kernel indexes them with the KMOE_PARAM_* macros).
type abiParam struct {
	name  string
	value func(*activation.Params) float64
}

var abiParams = slices.Concat(tableParams(), situParams("B", func(p *activation.Params) float64 { return p.SituBeta }),
	situParams("LB", func(p *activation.Params) float64 { return p.SituLinearBeta }))

// tableParams are the activation table's parameters, each under its
// upper-case name (KMOE_PARAM_SITU_BETA, ...).
func tableParams() []abiParam {
	var ps []abiParam
	for _, q := range activation.AllParams() {
		ps = append(ps, abiParam{strings.ToUpper(q.Name), q.Get})
	}
	return ps
}

// situParams are one SiTU beta's derived constants (situTanh), SITU_tag_Q0
// .. Q4, _EDGE and _EX, so that the kernels read them instead of dividing
// by the beta.
func situParams(tag string, beta func(*activation.Params) float64) []abiParam {
	var ps []abiParam
	for i := range len(situConsts{}.q) {
		ps = append(ps, abiParam{fmt.Sprintf("SITU_%s_Q%d", tag, i), func(p *activation.Params) float64 { return situTanh(beta(p)).q[i] }})
	}
	return append(ps, abiParam{"SITU_" + tag + "_EDGE", func(p *activation.Params) float64 { return situTanh(beta(p)).edge }},
		abiParam{"SITU_" + tag + "_EX", func(p *activation.Params) float64 { return situTanh(beta(p)).ex }})
}

var abiParamStride = len(abiParams)

// packParams lays out ps for the kernel: abiParamStride float32s each.
func packParams(ps []activation.Params) []float32 {
	out := make([]float32, 0, abiParamStride*len(ps))
	for i := range ps {
		for _, f := range abiParams {
			out = append(out, float32(f.value(&ps[i])))
		}
	}
	return out
}

// Recipe and chain codes.
const (
	abiRecipeFloor     int32 = 0
	abiRecipeRCeil     int32 = 1
	abiChainMXFP8      int32 = 0
	abiChainFlashInfer int32 = 1
	abiChainBF16       int32 = 2
)

func recipeCode(r mxfp.Recipe) int32 {
	if r == mxfp.RecipeFloor {
		return abiRecipeFloor
	}
	return abiRecipeRCeil
}

func chainCode(c moe.Chain) int32 {
	switch c {
	case moe.ChainFlashInfer:
		return abiChainFlashInfer
	case moe.ChainBF16:
		return abiChainBF16
	}
	return abiChainMXFP8
}

// activationCode is the kernel's code for k: the Kind's own value (the
// kernels name it by KMOE_ACT_*; FlashInfer's numbers stay at the interop
// edge).
func activationCode(k activation.Kind) int32 { return int32(k) }

// Kernel argument structs. Field types map to C as: devptr to the pointer
// type in the field's `c` tag, int32 to int. Field names map to snake_case
// (or the `cname` tag). Pointers come first, then the int32s, so that
// neither Go nor C pads between fields and equal sizes (asserted in C)
// mean equal layouts; cStruct refuses any other order.

type quantizeXArgs struct {
	X       devptr `c:"const float*"`
	Codes   devptr `c:"u8*"`
	Scales  devptr `c:"u8*"`
	NBlocks int32
	Recipe  int32
}

type routeCountArgs struct {
	IDs      devptr `c:"const int*" cname:"ids"`
	Counts   devptr `c:"int*"`
	NEntries int32
	Rank     int32
	ELocal   int32
}

type routeScatterArgs struct {
	IDs      devptr `c:"const int*" cname:"ids"`
	Counts   devptr `c:"const int*"`
	Perm     devptr `c:"int*"`
	Pos      devptr `c:"int*"`
	Offset   devptr `c:"int*"`
	TileBase devptr `c:"int*"`
	NEntries int32
	Rank     int32
	ELocal   int32
	TT       int32
}

type gemm1Args struct {
	XQ       devptr `c:"const u8*"`
	XS       devptr `c:"const u8*"`
	W31      devptr `c:"const u8*"`
	W31S     devptr `c:"const u8*"`
	Perm     devptr `c:"const int*"`
	Offset   devptr `c:"const int*"`
	TileBase devptr `c:"const int*"`
	Params   devptr `c:"const float*"`
	B1       devptr `c:"const float*" cname:"b1"` // the FC1 bias [E, 2N], or 0
	AQ       devptr `c:"u8*"`
	AQS      devptr `c:"u8*"`
	K        int32
	N        int32
	TopK     int32
	ELocal   int32
	Kind     int32
	NParams  int32
	Chain    int32
	Recipe   int32
}

type gemm2Args struct {
	AQ       devptr `c:"const u8*"`
	AQS      devptr `c:"const u8*"`
	W2       devptr `c:"const u8*"`
	W2S      devptr `c:"const u8*"`
	Offset   devptr `c:"const int*"`
	TileBase devptr `c:"const int*"`
	Y        devptr `c:"float*"`
	N        int32
	K        int32
	ELocal   int32
}

type finalizeArgs struct {
	Y      devptr `c:"const float*"`
	Pos    devptr `c:"const int*"`
	Wts    devptr `c:"const float*"`
	IDs    devptr `c:"const int*" cname:"ids"`  // the slots' experts, for the FC2 bias
	B2     devptr `c:"const float*" cname:"b2"` // the FC2 bias [E, K], or 0
	Out    devptr `c:"float*"`
	TopK   int32
	K      int32
	Chain  int32 // the rounding of each slot's row and of the sum
	Rank   int32
	ELocal int32
	YLd    int32 // y's row stride: K, or the wgmma-fp4 GEMMs' padded K
}

// Expert parallelism across devices (group.go): gather the rows a device
// sends, and add the partial outputs that come back into the home rows.
type gatherRowsArgs struct {
	Src   devptr `c:"const u8*"`
	Dst   devptr `c:"u8*"`
	Idx   devptr `c:"const int*"`
	Width int32  // bytes per row
	Pad   int32  `cname:"unused"`
}

type addRowsArgs struct {
	Dst   devptr `c:"float*"`
	Src   devptr `c:"const float*"`
	Idx   devptr `c:"const int*"`
	Width int32  // float32 values per row
	Pad   int32  `cname:"unused"`
}

// testWiden4Args: the exhaustive test of the E2M1 -> E4M3 widening.
type testWiden4Args struct {
	Out devptr `c:"u32*"`
}

// testSituArgs: the test of situ, float32 bits in and out; Legacy
// selects the float32 chain it replaced.
type testSituArgs struct {
	G      devptr `c:"const u32*"`
	U      devptr `c:"const u32*"`
	P      devptr `c:"const float*"`
	Out    devptr `c:"u32*"`
	N      int32
	Legacy int32
}

// testMxfp8ValueArgs: the exhaustive test of mxfp8_value_bf16x2 over the
// scales [Sc0, Sc1).
type testMxfp8ValueArgs struct {
	Count devptr `c:"u32*"`
	First devptr `c:"unsigned long long*"`
	Sc0   int32
	Sc1   int32
}

// l2FlushArgs: the timing's L2 flush (Backend.flushL2), a read of N
// 16-byte words.
type l2FlushArgs struct {
	Src  devptr `c:"const uint4*"`
	Sink devptr `c:"u32*"`
	N    int32
	Pad  int32 `cname:"unused"`
}

// kernelSpec names one entry point and its argument struct.
type kernelSpec struct {
	name string
	args reflect.Type
}

func spec[A any](name string) kernelSpec { return kernelSpec{name, reflect.TypeFor[A]()} }

// The entry points: the product module's (kernelSpecs), the test
// module's (kTest*) and the timing module's (kL2Flush).
var (
	kQuantizeX    = spec[quantizeXArgs]("kmoe_quantize_x")
	kRouteCount   = spec[routeCountArgs]("kmoe_route_count")
	kRouteScatter = spec[routeScatterArgs]("kmoe_route_scatter")
	kGemm1Small   = spec[gemm1Args]("kmoe_gemm1_act_t64")
	kGemm1Large   = spec[gemm1Args]("kmoe_gemm1_act_t128")
	kGemm2Small   = spec[gemm2Args]("kmoe_gemm2_t64")
	kGemm2Large   = spec[gemm2Args]("kmoe_gemm2_t128")
	kFinalize     = spec[finalizeArgs]("kmoe_finalize")
	kDecPrologue  = spec[decodePrologueArgs]("kmoe_decode_prologue")
	kTestWiden4   = spec[testWiden4Args]("kmoe_test_widen4")
	kXBF16        = spec[xBF16Args]("kmoe_x_bf16")
	kRouteXBF16   = spec[routeXBF16Args]("kmoe_route_x_bf16")
	kRouteXMany   = spec[routeXBF16Args]("kmoe_route_x_many")
	kWGGemm1      = instances[wgGemm1Args]("kmoe_wg_gemm1_act_n", wgRows)
	kWGGemm2      = instances[wgGemm2Args]("kmoe_wg_gemm2_n", wgRows)
	kGatherRows   = spec[gatherRowsArgs]("kmoe_gather_rows")
	kAddRows      = spec[addRowsArgs]("kmoe_add_rows")
	kF4Gemm1      = instances[f4Gemm1Args]("kmoe_f4_gemm1_act_t", f4Tiles)
	kF4W3Gemm1    = w3Specs[f4Gemm1Args]("kmoe_f4_gemm1_w3")
	kF4W3Gemm2    = w3Specs[f4Gemm2Args]("kmoe_f4_gemm2_w3")
	kF4Gemm2      = instances[f4Gemm2Args]("kmoe_f4_gemm2_t", f4Tiles)
	kF4FitGemm1   = instances[f4Gemm1Args]("kmoe_f4_gemm1_act_fit_t", f4FitTiles)
	kF4FitGemm2   = instances[f4Gemm2Args]("kmoe_f4_gemm2_fit_t", f4FitTiles)
	kF4SGemm1     = instances[f4Gemm1Args]("kmoe_f4s_gemm1_act_t", f4sTiles)
	kF4SGemm2     = instances[f4Gemm2Args]("kmoe_f4s_gemm2_t", f4sTiles)
	kF4SGemm2Deep = spec[f4Gemm2Args]("kmoe_f4s_gemm2_t8_deep")
	kTestF4Widen  = spec[testF4WidenArgs]("kmoe_test_f4_widen")
	kL2Flush      = spec[l2FlushArgs]("kmoe_l2_flush")
	kActRequant   = spec[actRequantArgs]("kmoe_act_requant")
	kTestSitu     = spec[testSituArgs]("kmoe_test_situ")
	kTestMxfp8Val = spec[testMxfp8ValueArgs]("kmoe_test_mxfp8_value")
	kDecGemm1     = instances[decodeGemm1Args]("kmoe_decode_gemm1_n", decodeSubtiles)
	kDecGemm2     = instances[decodeGemm2Args]("kmoe_decode_gemm2_n", decodeSubtiles)
)

// instances names a templated kernel's entry points, prefix + value, by
// value.
func instances[A any](prefix string, values []int) map[int]kernelSpec {
	m := map[int]kernelSpec{}
	for _, v := range values {
		m[v] = spec[A](fmt.Sprintf("%s%d", prefix, v))
	}
	return m
}

// decodeSubtiles are the instances of the decode GEMMs: token subtiles of
// 8 per pass.
var decodeSubtiles = []int{1, 2, 4}

// kernelSpecs are the product module's entry points: the shared ones and
// every path's.
var kernelSpecs = func() []kernelSpec {
	all := slices.Clone(shared.entries)
	for _, p := range programs {
		all = append(all, p.entries...)
	}
	return all
}()

// mapSpecs are a templated kernel's instances.
func mapSpecs(ms ...map[int]kernelSpec) []kernelSpec {
	var all []kernelSpec
	for _, m := range ms {
		for _, k := range m {
			all = append(all, k)
		}
	}
	return all
}

// KernelProgram is the CUDA C++ source of the product module that the
// backend compiles with NVRTC: the ABI header generated from this
// package's argument structs, then kernels/ in kernelOrder. It needs no driver; scripts/kernelsrc prints it
// and scripts/kernel-syntax.sh checks it with a host compiler.
func KernelProgram() string { return abiHeader() + kernelSource }

// testOrder is the test module's files: the device functions the test
// kernels (kernels/test.cu) run alone, without the GEMMs, so that it
// compiles in seconds.
var testOrder = []string{"common.cuh", "formats.cuh", "mma.cuh", "activation.cuh", "ptx.cuh", "epilogue.cuh", "fp4_widen.cuh", "test.cu"}

// testProgram is the test module's source.
func testProgram() string {
	var b strings.Builder
	b.WriteString(abiHeader())
	for _, n := range testOrder {
		b.WriteString(kernelText(n))
	}
	return b.String()
}

// timingProgram is the timing module: the L2 flush (kernels/flush.cu).
func timingProgram() string { return abiHeader() + kernelText("flush.cu") }
