package cuda

import (
	"embed"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"kimimoe/activation"
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

// kernelOrder is the product module's files in the order NVRTC compiles
// them as one program: each file uses only what the ones before it define.
// The generated wgmma shapes (wgmma_gen.go) come before the first GEMM
// that issues one.
var kernelOrder = []string{
	"common.cuh", "formats.cuh", "mma.cuh", "activation.cuh", "ptx.cuh",
	"quantize.cu", "routing.cu", "grouped.cu", "wgmma_shapes", "wgmma.cu",
	"fp4_widen.cuh", "fp4_wgmma.cu", "fp4_sync.cu", "fp4_gemm.cu",
	"decode.cu", "finalize.cu", "ep.cu",
}

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
	abiThreads       = 256 // threads per CTA of every kernel (8 warps)
	abiStageK        = 128 // k elements staged per step (KC); K and N must be multiples of it
	abiGemm1Features = 64  // intermediate features per GEMM1 CTA: grid.x = N / 64
	abiGemm2Rows     = 128 // output rows (features of K) per GEMM2 CTA: grid.x = K / 128
	abiTileSmall     = 64  // token tiles: TT instances
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

// Input forms of the decode prologue.
const (
	abiFormQuantized int32 = 0 // x given as MXFP8 codes and E8M0 scales
	abiFormFloat     int32 = 1 // x given as float32
)

// The decode path's kernels (see kernels/decode.cu).
type decodePrologueArgs struct {
	X       devptr `c:"const float*"`
	XQIn    devptr `c:"const u8*" cname:"xq_in"`
	XSIn    devptr `c:"const u8*" cname:"xs_in"`
	IDs     devptr `c:"const int*" cname:"ids"`
	XQ      devptr `c:"u8*"`
	XSF     devptr `c:"float*"`
	Pos     devptr `c:"int*"`
	Perm    devptr `c:"int*"`
	Offset  devptr `c:"int*"`
	Touched devptr `c:"int*"`
	M       int32
	K       int32
	KPad    int32
	TopK    int32
	Rank    int32
	ELocal  int32
	Recipe  int32
	Form    int32
}

type decodeGemm1Args struct {
	XQ      devptr `c:"const u8*"`
	XSF     devptr `c:"const float*"`
	W       devptr `c:"const u8*"`
	WS      devptr `c:"const u8*"`
	Perm    devptr `c:"const int*"`
	Offset  devptr `c:"const int*"`
	Touched devptr `c:"const int*"`
	Params  devptr `c:"const float*"`
	B1      devptr `c:"const float*" cname:"b1"` // the FC1 bias [E, 2N], or 0
	AQ      devptr `c:"u8*"`
	AQS     devptr `c:"u8*"`
	AQSF    devptr `c:"float*"`
	KPad    int32
	N       int32
	NPad    int32
	TopK    int32
	ELocal  int32
	Kind    int32
	NParams int32
	Chain   int32
	Recipe  int32
	ZeroRow int32 // row of xq/xsf that is all zeros (M)
}

type decodeGemm2Args struct {
	AQ      devptr `c:"const u8*"`
	AQSF    devptr `c:"const float*"`
	W       devptr `c:"const u8*"`
	WS      devptr `c:"const u8*"`
	Offset  devptr `c:"const int*"`
	Touched devptr `c:"const int*"`
	Y       devptr `c:"float*"`
	K       int32
	NPad    int32
	ELocal  int32
	ZeroRow int32 // row of aq/aqsf that is all zeros (M x top-k)
}

// The wgmma path's geometry (wg_layout.go, kernels/wgmma.cu).
const (
	abiWGTokens = 128 // tokens per tile: two warpgroups of 64 (the wgmma's M)
	abiWGChunkK = 64  // k per staged chunk: 128 bytes of BF16 a row
)

// wgRows are the instances' weight rows per tile (the wgmma's N), and
// wgStages their chunks staged at once: the 128-row instances run two
// CTAs an SM (two times 3 x 32 KB of stages), the 256-row ones one (4 x
// 48 KB).
var (
	wgRows   = []int{128, 256}
	wgStages = map[int]int{128: 3, 256: 4}
)

// wgTileBytes is one weight (tile, chunk) block of rows rows.
func wgTileBytes(rows int) int { return rows * 2 * abiWGChunkK }

// abiSmemAlign is the boundary the wgmma path's kernels align their
// dynamic shared memory to (the 128-byte swizzle's 1024-byte pattern):
// they are given that many bytes more than their struct.
const abiSmemAlign = 1024

// wgSmem is the dynamic shared memory of the wgmma path's one-CTA
// kernels: sizeof(WgSmem<rows>) (the staged tokens and weights and the
// tile's source rows) and the alignment slack.
func wgSmem(rows int) int {
	return wgStages[rows]*(abiWGTokens*2*abiWGChunkK+wgTileBytes(rows)) + 4*abiWGTokens + abiSmemAlign
}

// The decode kernels' CTAs: 4 warps (one 32-feature MXFP8 block in GEMM1,
// 64 output rows in GEMM2).
const (
	abiDecodeThreads = 128
	abiDecodeTile    = 16 * abiStageK / 2 // bytes of one pre-arranged 16-row tile
	abiDecodeScales  = 16 * abiStageK / 32
)

// The wgmma path (sm_90a; kernels/wgmma.cu): x as BF16,
// then the two GEMMs on BF16 operands (W arranged by wg_layout.go); GEMM1
// writes the requantized intermediate as BF16 (AQBF) for GEMM2.
type xBF16Args struct {
	X       devptr `c:"const float*"`
	Codes   devptr `c:"const u8*"`
	Scales  devptr `c:"const u8*"`
	Out     devptr `c:"u16*"`
	NBlocks int32
	Recipe  int32
	Form    int32
	Chain   int32 // bf16: a float x rounded to BF16, never MXFP8
	K       int32 // x's row length
	KOut    int32 // out's row stride (the wgmma-fp4 GEMMs' padded K), its padding left as it is
}

// routeXBF16Args: the BF16 paths' one-launch prologues: kmoe_route_x_bf16
// for at most abiRouteCTAMax entries (route in one CTA, x as BF16 in the
// others), kmoe_route_x_many above (a CTA an expert, each counting every
// expert itself; one for pos = -1; x in the others).
type routeXBF16Args struct {
	X        devptr `c:"const float*"`
	Codes    devptr `c:"const u8*"`
	Scales   devptr `c:"const u8*"`
	IDs      devptr `c:"const int*" cname:"ids"`
	Out      devptr `c:"u16*"`
	Pos      devptr `c:"int*"`
	Perm     devptr `c:"int*"`
	Offset   devptr `c:"int*"`
	TileBase devptr `c:"int*"`
	Ready    devptr `c:"int*"` // the wgmma-fp4 GEMMs' per-tile counts, zeroed here (n_ready of them)
	NBlocks  int32
	NEntries int32
	Rank     int32
	ELocal   int32
	TT       int32
	Recipe   int32
	Form     int32
	NReady   int32
	Chain    int32 // bf16: a float x rounded to BF16, never MXFP8
	K        int32 // x's row length
	KOut     int32 // out's row stride (the wgmma-fp4 GEMMs' padded K), its padding left as it is
	Pad      int32 `cname:"unused"`
}

// abiRouteCTAMax is the most entries (tokens x top-k) the one-CTA routing
// of kmoe_route_x_bf16 takes; above it the routing runs one CTA an expert
// (kmoe_route_x_many, or kmoe_route_count and kmoe_route_scatter past
// routeManyMaxMDefault). Its one warp scatters 32 entries a step, so 1024
// entries are 32 short steps.
const abiRouteCTAMax = 1024

type wgGemm1Args struct {
	XBF      devptr `c:"const u8*" cname:"xbf"`
	W        devptr `c:"const u8*"`
	Perm     devptr `c:"const int*"`
	Offset   devptr `c:"const int*"`
	TileBase devptr `c:"const int*"`
	Params   devptr `c:"const float*"`
	B1       devptr `c:"const float*" cname:"b1"` // the FC1 bias [E, 2N], or 0
	AQBF     devptr `c:"u8*" cname:"aqbf"`
	K        int32
	N        int32
	TopK     int32
	ELocal   int32
	Kind     int32
	NParams  int32
	Chain    int32
	Recipe   int32
}

type wgGemm2Args struct {
	AQBF     devptr `c:"const u8*" cname:"aqbf"`
	W        devptr `c:"const u8*"`
	Offset   devptr `c:"const int*"`
	TileBase devptr `c:"const int*"`
	Y        devptr `c:"float*"`
	N        int32
	K        int32
	ELocal   int32
	Pad      int32 `cname:"unused"`
}

// The wgmma-fp4 path (sm_90a; f4_layout.go, kernels/fp4_*.cu): MXFP4
// weights widened to BF16 in registers, x and the intermediate as BF16 as
// on the wgmma path.
const (
	f4ChunkBytes   = 128 * 16 // payload of one 64-row group and 64-k chunk
	f4ChunkScales  = 32 * 4   // its scale bytes: one word a quad (its four threads share rows and blocks)
	abiF4TileMax   = 256      // the largest token tile
	abiF4RowsGemm1 = 64       // intermediate features per GEMM1 CTA (two warpgroups of 32)
	abiF4RowsGemm2 = 128      // output rows per GEMM2 CTA (two warpgroups of 64)
)

// GEMM1 in three warpgroups (kmoe_f4_gemm1_w3_t128, Plan.W3): the
// 128-token tile's CTA of 384 threads, 96 intermediate features, so each
// scheduler has three warps where the two-warpgroup CTA has two to hide
// the widening's latencies, and each staged token step serves 192 weight
// rows instead of 128. 65,536 / 384 threads leave 168 registers a thread,
// so each holds f4W3Ahead steps of weights in flight, not f4Ahead[128]'s.
const (
	f4W3Tile     = 128
	f4W3Threads  = 384
	f4W3Features = f4W3Threads / 128 * 32 // intermediate features per CTA (96): a warpgroup's 64 rows are 32 features' up and gate
	f4W3Ahead    = 2
)

// f4W3Loop is the k loop of the three-warpgroup GEMMs (Plan.Ring and
// Plan.W3Fit pick it): a CTA barrier a step, the stage ring, or the ring
// at each tile's tokens; f4W3Suffix is what follows _w3 in the kernels'
// names (kmoe_f4_gemm1_w3r_t128).
type f4W3Loop int

const (
	f4W3Barrier f4W3Loop = iota
	f4W3Ring
	f4W3RingFit
)

var f4W3Suffix = [...]string{f4W3Barrier: "", f4W3Ring: "r", f4W3RingFit: "rf"}

// w3Specs names a three-warpgroup GEMM's entry points, by k loop.
func w3Specs[A any](prefix string) (s [len(f4W3Suffix)]kernelSpec) {
	for i, suf := range f4W3Suffix {
		s[i] = spec[A](prefix + suf + "_t128")
	}
	return s
}

// f4W3FitStep is the token step of the three-warpgroup ring GEMMs' fitted
// loops (kmoe_f4_*_w3rf_t128, Plan.W3Fit): a tile runs its wgmmas at its
// tokens rounded up to a multiple of it, eight loops of 16 to 128 in one
// kernel rather than sixteen of 8.
const f4W3FitStep = 16

// GEMM2 in three warpgroups (kmoe_f4_gemm2_w3_t128, Plan.W3Gemm2): the
// same CTA over 192 output features, three row groups of 64, grid
// ceil(K / 192); a last CTA with fewer row groups left repeats one on
// its spare warpgroups (f4W3Spare bounds that waste), and so does
// GEMM1's over 96 features, N / 32 row groups.
const f4W3Gemm2Rows = f4W3Threads / 128 * 64

// f4W3Spare reports whether a three-warpgroup grid over groups row
// groups, rounded up to whole CTAs of three, leaves at most pct in 100
// of its warpgroups spare.
func f4W3Spare(groups, pct int) bool {
	wgs := (groups + 2) / 3 * 3
	return 100*(wgs-groups) <= pct*wgs
}

// f4Tiles are the instances' tokens per tile (the wgmma's N).
var f4Tiles = []int{8, 16, 32, 48, 64, 128, 256}

// f4FitTiles are the tiles with instances whose wgmma loop runs at N = the
// tile's tokens rounded up to 8 (kmoe_f4_*_fit_t*, taken up to f4FitMaxM
// tokens): a partly filled tile then pays only for its tokens, while full
// tiles, past 512 tokens, ran slower in the kernel with one loop per N.
var f4FitTiles = []int{32, 48, 64}

// f4FitPipe is the fitted instance whose wgmma loop double-buffers its A
// registers (a chunk's wgmmas in flight while the next chunk is widened),
// and f4FitPipeAhead its steps of weights in flight: the 16 registers of
// the second buffer come from two steps fewer (f4Ahead's 4 at 64 tokens).
// Only the fitted 64-token instance: it keeps the tensor cores busy there,
// while the 32-token one and the full 64-token one ran slower with it.
const (
	f4FitPipe      = 64
	f4FitPipeAhead = 2
)

// f4PipeMinTokens is the smallest plain (not fitted) tile whose wgmma loop
// double-buffers its A registers as f4FitPipe's does (0: none), with
// f4Ahead's steps in flight: the 128- and 256-token tiles, one CTA an SM,
// whose two warpgroups left the tensor cores idle while each widened its
// next chunk; the second buffer lets one warpgroup's MMAs run while the
// other widens.
const f4PipeMinTokens = 128

// f4Stages are the token chunks staged at once per tile size: deeper for
// small tiles, whose stages are small and whose loop is latency-bound.
// past 4 the depth measured even, and the 256-token tile's 64 KB stages
// leave room for 3 at one CTA an SM.
var f4Stages = map[int]int{8: 8, 16: 6, 32: 5, 48: 4, 64: 4, 128: 5, 256: 3}

// f4Ahead are the 128-k steps of weights each thread has in flight in
// registers, per tile size, on the wgmma loop: 4 words a chunk, two chunks
// a step, and a 16-byte scale load a step pair (F4Scales: even counts
// only), so each step costs 10 registers: more steps pay only where the
// registers are there without losing CTAs an SM (the 64- and 128-token
// tiles); the 256-token tile's 128 accumulators leave room for 2.
var f4Ahead = map[int]int{8: 2, 16: 2, 32: 2, 48: 2, 64: 4, 128: 4, 256: 2}

// f4Smem is the wgmma loop's dynamic shared memory: sizeof(F4Smem<nt>)
// (the staged tokens, 128 k a stage, and the tile's source rows) and the
// alignment slack of its swizzled stages.
func f4Smem(nt int) int { return f4Stages[nt]*nt*2*2*abiWGChunkK + 4*nt + abiSmemAlign }

// The small tiles' barrier-free loop (kernels/fp4_sync.cu f4s_k_loop): mma.sync
// on the same layout, the tokens staged a window of f4sWinK[nt] k at a
// time: the 16-token tile's small window lets four CTAs share an SM,
// which outweighs its more frequent barriers; the 8-token tile's rows are
// small enough that the large window costs nothing.
var f4sWinK = map[int]int{8: 1024, 16: 256}

// f4sTiles are its instances' tokens per tile.
var f4sTiles = []int{8, 16}

// f4sAhead are the 128-k steps of weights in flight in registers, per
// tile, and f4sBlocks the CTAs an SM the registers are held to (80 at
// three, 64 at four): the 8-token tile streams best with more bytes in
// flight, the 16-token tile with more CTAs an SM (docs/PERF.md).
var (
	f4sAhead  = map[int]int{8: 4, 16: 2}
	f4sBlocks = map[int]int{8: 3, 16: 4}
)

// f4sDeep2 is GEMM2's 8-token variant for M <= f4sDeepMaxM, whose grid
// fills under two CTAs an SM (M=1: 224 CTAs): 8 steps in flight at 128
// registers, two CTAs an SM.
var f4sDeep2 = struct{ ahead, blocks int }{8, 2}

// maxTiles bounds the token tiles of tt tokens that entries routing
// entries can make over e experts, the rows of the grouped GEMMs' grids
// (a CTA row past the routing's last tile exits at once): the experts
// touched, T <= min(e, entries), make sum ceil(c / tt) <= floor((entries
// + T (tt - 1)) / tt) tiles, each ceil adding at most (tt - 1) / tt. No
// routing makes more, and one reaches it: T - 1 experts with one entry
// and the rest on the last (TestMaxTiles).
func maxTiles(entries, e, tt int) int { return (entries + min(e, entries)*(tt-1)) / tt }

// f4sSmem is sizeof(F4SyncSmem<nt>): two windows of the tile's token rows
// (16 bytes of padding a row) and its source rows.
func f4sSmem(nt int) int { return 2*nt*(2*f4sWinK[nt]+16) + 4*nt }

type f4Gemm1Args struct {
	XBF      devptr `c:"const u8*" cname:"xbf"`
	W        devptr `c:"const u8*"`
	WS       devptr `c:"const u8*"`
	Perm     devptr `c:"const int*"`
	Offset   devptr `c:"const int*"`
	TileBase devptr `c:"const int*"`
	Params   devptr `c:"const float*"`
	B1       devptr `c:"const float*" cname:"b1"` // the FC1 bias [E, 2N], or 0
	AQBF     devptr `c:"u8*" cname:"aqbf"`
	Ready    devptr `c:"int*"`              // per tile: GEMM1 CTAs done (tile_signal), or 0
	UG       devptr `c:"float*" cname:"ug"` // {up, gate} a routed row and feature for kmoe_act_requant, or 0: the epilogue in GEMM1
	K        int32  // padded (f4Dims), as N
	N        int32
	TopK     int32
	ELocal   int32
	Kind     int32
	NParams  int32
	Chain    int32
	Recipe   int32
	NB1      int32 `cname:"nb1"` // the layer's N: the FC1 bias's features (the padded ones have none)
	Pad      int32 `cname:"unused"`
}

// actRequantArgs: GEMM1's epilogue as a kernel of its own (kmoe_act_requant).
type actRequantArgs struct {
	UG       devptr `c:"const float*" cname:"ug"`
	Offset   devptr `c:"const int*"`
	Params   devptr `c:"const float*"`
	B1       devptr `c:"const float*" cname:"b1"` // the FC1 bias [E, 2N], or 0
	AQBF     devptr `c:"u8*" cname:"aqbf"`
	TileBase devptr `c:"const int*"` // by tile (Done set): the routing's tiles of TT rows
	Ready    devptr `c:"const int*"` // by tile: GEMM1's CTAs done with the tile; each CTA waits for ReadyTarget
	Done     devptr `c:"int*"`       // by tile, or 0: this kernel's CTAs done with the tile (TT of them), for GEMM2
	N        int32
	ELocal   int32
	Kind     int32
	NParams  int32
	Chain    int32
	Recipe   int32
	TT       int32
	// ReadyTarget is GEMM1's CTAs a tile (its grid's x: N / abiF4RowsGemm1),
	// given by the host that sizes that grid, as for GEMM2's wait.
	ReadyTarget int32
	NB1         int32 `cname:"nb1"` // the layer's N (N is padded): the FC1 bias's features
	Pad         int32 `cname:"unused"`
}

type f4Gemm2Args struct {
	AQBF        devptr `c:"const u8*" cname:"aqbf"`
	W           devptr `c:"const u8*"`
	WS          devptr `c:"const u8*"`
	Offset      devptr `c:"const int*"`
	TileBase    devptr `c:"const int*"`
	Y           devptr `c:"float*"`
	Ready       devptr `c:"const int*"` // per tile: GEMM1 CTAs done; each CTA waits for ReadyTarget (else 0: pdl_wait)
	N           int32
	K           int32
	ELocal      int32
	ReadyTarget int32
}

// testF4WidenArgs: the exhaustive test of the wgmma-fp4 widening.
type testF4WidenArgs struct {
	In  devptr `c:"const u32*"`
	Sc  devptr `c:"const u32*"`
	Out devptr `c:"u32*"`
	N   int32
	Pad int32 `cname:"unused"`
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

var kernelSpecs = func() []kernelSpec {
	all := []kernelSpec{kQuantizeX, kRouteCount, kRouteScatter, kGemm1Small, kGemm1Large, kGemm2Small, kGemm2Large, kFinalize,
		kDecPrologue, kXBF16, kRouteXBF16, kRouteXMany, kGatherRows, kAddRows, kF4SGemm2Deep, kActRequant}
	all = append(append(all, kF4W3Gemm1[:]...), kF4W3Gemm2[:]...)
	for _, m := range []map[int]kernelSpec{kDecGemm1, kDecGemm2, kWGGemm1, kWGGemm2, kF4Gemm1, kF4Gemm2, kF4FitGemm1, kF4FitGemm2, kF4SGemm1, kF4SGemm2} {
		for _, k := range m {
			all = append(all, k)
		}
	}
	return all
}()

// KernelProgram is the CUDA C++ source of the product module that the
// backend compiles with NVRTC: the ABI header generated from this
// package's argument structs, then kernels/ in kernelOrder. It needs no driver; scripts/kernelsrc prints it
// and scripts/kernel-syntax.sh checks it with a host compiler.
func KernelProgram() string { return abiHeader() + kernelSource }

// testOrder is the test module's files: the device functions the test
// kernels (kernels/test.cu) run alone, without the GEMMs, so that it
// compiles in seconds.
var testOrder = []string{"common.cuh", "formats.cuh", "mma.cuh", "activation.cuh", "ptx.cuh", "fp4_widen.cuh", "test.cu"}

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
