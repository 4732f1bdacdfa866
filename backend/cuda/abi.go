package cuda

import (
	_ "embed"
	"fmt"
	"reflect"
	"strings"
	"unicode"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// The kernel ABI: everything Go and kernels/moe.cu must agree on, defined
// once, here. abiHeader turns it into C (macros, one argument struct per
// kernel with static_asserts on every field offset and the size) that is
// prepended to the embedded source before NVRTC compiles it, so a field
// reordered or retyped here changes the kernel's struct with it, and a
// kernel that disagrees with the layout does not compile. Each kernel takes
// its arguments as one struct, passed by value; launch binds a kernel to
// its argument type at compile time (kernel[A]).

//go:embed kernels/moe.cu
var kernelSource string

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
var abiParams = []struct {
	name  string
	value func(*activation.Params) float64
}{
	{"SITU_BETA", func(p *activation.Params) float64 { return p.SituBeta }},
	{"SITU_LINEAR_BETA", func(p *activation.Params) float64 { return p.SituLinearBeta }},
	{"SWIGLU_ALPHA", func(p *activation.Params) float64 { return p.SwigluAlpha }},
	{"SWIGLU_BETA", func(p *activation.Params) float64 { return p.SwigluBeta }},
	{"SWIGLU_LIMIT", func(p *activation.Params) float64 { return p.SwigluLimit }},
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
)

func recipeCode(r mxfp.Recipe) int32 {
	if r == mxfp.RecipeFloor {
		return abiRecipeFloor
	}
	return abiRecipeRCeil
}

func chainCode(c moe.Chain) int32 {
	if c == moe.ChainFlashInfer {
		return abiChainFlashInfer
	}
	return abiChainMXFP8
}

// activationCode is the kernel's code for k: FlashInfer's ABI value.
func activationCode(k activation.Kind) int32 { return int32(k.FlashInferABI()) }

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
	Y       devptr `c:"const float*"`
	Pos     devptr `c:"const int*"`
	Wts     devptr `c:"const float*"`
	Out     devptr `c:"float*"`
	TopK    int32
	K       int32
	ChainFI int32 // 1: the flashinfer chain's bf16 rows and float32 sum
	Pad     int32 `cname:"unused"`
}

// Input forms of the decode prologue.
const (
	abiFormQuantized int32 = 0 // x given as MXFP8 codes and E8M0 scales
	abiFormFloat     int32 = 1 // x given as float32
)

// The decode path's kernels (see kernels/moe.cu "the decode path").
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

// The wgmma path's geometry (wg_layout.go, kernels/moe.cu "the wgmma path").
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

// The wgmma path (sm_90a; kernels/moe.cu "the wgmma path"): x as BF16,
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
	Pad     int32 `cname:"unused"`
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
}

// abiRouteCTAMax is the most entries (tokens x top-k) the one-CTA routing
// of kmoe_route_x_bf16 takes; above it the routing runs one CTA an expert
// (kmoe_route_x_many, or kmoe_route_count and kmoe_route_scatter past
// routeManyMaxMDefault). Its one warp scatters 32 entries a step, so 1024
// entries are 32 short steps.
const abiRouteCTAMax = 1024

// routeManyMaxMDefault is the most tokens whose prologue, above
// abiRouteCTAMax entries, is the one launch of kmoe_route_x_many rather
// than four (the memset, kmoe_x_bf16, kmoe_route_count,
// kmoe_route_scatter); KIMIMOE_ROUTE_MANY_MAX_M moves it (0: never).
// Three launch gaps fewer made it faster up to 512 tokens and no slower
// above, so it takes every M (docs/PERF.md).
const routeManyMaxMDefault = 8192

type wgGemm1Args struct {
	XBF      devptr `c:"const u8*" cname:"xbf"`
	W        devptr `c:"const u8*"`
	Perm     devptr `c:"const int*"`
	Offset   devptr `c:"const int*"`
	TileBase devptr `c:"const int*"`
	Params   devptr `c:"const float*"`
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

// The wgmma-fp4 path (sm_90a; f4_layout.go, kernels/moe.cu "the
// wgmma-fp4 path"): MXFP4 weights widened to BF16 in registers, x and the
// intermediate as BF16 as on the wgmma path.
const (
	f4ChunkBytes   = 128 * 16 // payload of one 64-row group and 64-k chunk
	f4ChunkScales  = 32 * 4   // its scale bytes: one word a quad (its four threads share rows and blocks)
	abiF4TileMax   = 256      // the largest token tile
	abiF4RowsGemm1 = 64       // intermediate features per GEMM1 CTA (two warpgroups of 32)
	abiF4RowsGemm2 = 128      // output rows per GEMM2 CTA (two warpgroups of 64)
)

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

// f4FitMaxMDefault is the most tokens the fitted instances take (between
// the measured 512, where they win, and 1024, where they lose).
const f4FitMaxMDefault = 512

// f4ActMinMDefault and f4ActMaxMDefault bound the token counts whose GEMM1
// epilogue runs as a kernel of its own (kmoe_act_requant): taking the
// activation's straight-line code out of GEMM1 pays from the 48-token
// tiles up, and costs more than it saves on the smaller ones.
// Its grid: at most actCTAsSM CTAs an SM, each warp going over the routed
// rows' 32-feature blocks four at a time. Its input, GEMM1's up and gate
// in float32, takes 8 bytes a routing entry and feature, allocated for
// every entry (3.2 GB at M=8192 with top-16 on the Kimi shape, half of it
// read with 8 slots local): the upper bound keeps that workspace bounded,
// GEMM1's epilogue taking larger M.
const (
	f4ActMinMDefault = 89
	f4ActMaxMDefault = 8192
	actCTAsSM        = 8
)

// actByTileMaxMDefault is the most tokens whose activation kernel runs by
// tile (actByTile: a CTA a row of a routing tile, each waiting for its
// tile's GEMM1 CTAs and counted for GEMM2's CTAs of that tile) rather
// than over the grid after all of GEMM1: it then runs beside GEMM1's last
// tiles, which pays while a wave of tiles is short; with many tiles each
// CTA's wait and count cost more than the overlap gives.
const actByTileMaxMDefault = 192

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

// The small tiles' barrier-free loop (kernels/moe.cu f4s_k_loop): mma.sync
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
// registers, two CTAs an SM: with so few CTAs only deeper streams keep
// the memory busy, and from M=2 the grid is large enough without it.
var f4sDeep2 = struct{ ahead, blocks int }{8, 2}

const f4sDeepMaxM = 1

// maxTiles bounds the token tiles of tt tokens that entries routing
// entries can make over e experts, the rows of the grouped GEMMs' grids
// (a CTA row past the routing's last tile exits at once): the experts
// touched, T <= min(e, entries), make sum ceil(c / tt) <= floor((entries
// + T (tt - 1)) / tt) tiles, each ceil adding at most (tt - 1) / tt. No
// routing makes more, and one reaches it: T - 1 experts with one entry
// and the rest on the last (TestMaxTiles).
func maxTiles(entries, e, tt int) int { return (entries + min(e, entries)*(tt-1)) / tt }

// f4TileReadyMinM is the fewest tokens whose wgmma-fp4 GEMM2 waits for
// its own tile's GEMM1 CTAs (tile_wait in kernels/moe.cu) instead of for
// the whole GEMM1 grid, so that GEMM2 starts in GEMM1's last wave; at
// M=1 GEMM1 is one wave, there is nothing to overlap, and the counts
// would only add a fence and an atomic.
const f4TileReadyMinM = 2

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
	AQBF     devptr `c:"u8*" cname:"aqbf"`
	Ready    devptr `c:"int*"`              // per tile: GEMM1 CTAs done (tile_signal), or 0
	UG       devptr `c:"float*" cname:"ug"` // {up, gate} a routed row and feature for kmoe_act_requant, or 0: the epilogue in GEMM1
	K        int32
	N        int32
	TopK     int32
	ELocal   int32
	Kind     int32
	NParams  int32
	Chain    int32
	Recipe   int32
}

// actRequantArgs: GEMM1's epilogue as a kernel of its own (kmoe_act_requant).
type actRequantArgs struct {
	UG       devptr `c:"const float*" cname:"ug"`
	Offset   devptr `c:"const int*"`
	Params   devptr `c:"const float*"`
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

// testDivParamArgs: the test of div_param (SiTU's division by its
// parameters), float32 bits in and out.
type testDivParamArgs struct {
	X   devptr `c:"const u32*"`
	B   devptr `c:"const u32*"`
	Out devptr `c:"u32*"`
	N   int32
	Pad int32 `cname:"unused"`
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

// The entry points, in kernels/moe.cu.
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
	kF4Gemm2      = instances[f4Gemm2Args]("kmoe_f4_gemm2_t", f4Tiles)
	kF4FitGemm1   = instances[f4Gemm1Args]("kmoe_f4_gemm1_act_fit_t", f4FitTiles)
	kF4FitGemm2   = instances[f4Gemm2Args]("kmoe_f4_gemm2_fit_t", f4FitTiles)
	kF4SGemm1     = instances[f4Gemm1Args]("kmoe_f4s_gemm1_act_t", f4sTiles)
	kF4SGemm2     = instances[f4Gemm2Args]("kmoe_f4s_gemm2_t", f4sTiles)
	kF4SGemm2Deep = spec[f4Gemm2Args]("kmoe_f4s_gemm2_t8_deep")
	kTestF4Widen  = spec[testF4WidenArgs]("kmoe_test_f4_widen")
	kL2Flush      = spec[l2FlushArgs]("kmoe_l2_flush")
	kActRequant   = spec[actRequantArgs]("kmoe_act_requant")
	kTestDivParam = spec[testDivParamArgs]("kmoe_test_div_param")
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
		kDecPrologue, kTestWiden4, kXBF16, kRouteXBF16, kRouteXMany, kGatherRows, kAddRows, kTestF4Widen, kF4SGemm2Deep, kL2Flush, kTestDivParam, kActRequant}
	for _, m := range []map[int]kernelSpec{kDecGemm1, kDecGemm2, kWGGemm1, kWGGemm2, kF4Gemm1, kF4Gemm2, kF4FitGemm1, kF4FitGemm2, kF4SGemm1, kF4SGemm2} {
		for _, k := range m {
			all = append(all, k)
		}
	}
	return all
}()

// cName is a struct's C name: quantizeXArgs -> QuantizeXArgs.
func cName(t reflect.Type) string {
	n := []rune(t.Name())
	n[0] = unicode.ToUpper(n[0])
	return string(n)
}

// snake maps a Go field name to C: NEntries -> n_entries, W31S -> w31s.
func snake(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

func cField(f reflect.StructField) string {
	if n := f.Tag.Get("cname"); n != "" {
		return n
	}
	return snake(f.Name)
}

// cStruct renders t as a C struct with a static_assert on its size, taken
// from Go's layout.
func cStruct(t reflect.Type) string {
	var b strings.Builder
	name := cName(t)
	fmt.Fprintf(&b, "struct %s {\n", name)
	var next uintptr
	ints := false
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Offset != next {
			panic("cuda: ABI struct " + t.Name() + " has padding before " + f.Name)
		}
		next = f.Offset + f.Type.Size()
		if f.Type.Kind() == reflect.Uint64 && ints {
			panic("cuda: ABI struct " + t.Name() + ": pointer " + f.Name + " after an int32 field")
		}
		ints = ints || f.Type.Kind() == reflect.Int32
		var ct string
		switch f.Type.Kind() {
		case reflect.Uint64:
			ct = f.Tag.Get("c")
			if !strings.HasSuffix(ct, "*") {
				panic("cuda: ABI field " + t.Name() + "." + f.Name + " is a devptr without a c:\"T*\" tag")
			}
		case reflect.Int32:
			ct = "int"
		default:
			panic("cuda: ABI field " + t.Name() + "." + f.Name + " has unsupported type " + f.Type.String())
		}
		fmt.Fprintf(&b, "    %s %s;\n", ct, cField(f))
	}
	b.WriteString("};\n")
	fmt.Fprintf(&b, "static_assert(sizeof(%s) == %d, \"%s: Go and CUDA disagree on the size\");\n", name, t.Size(), name)
	return b.String()
}

// abiHeader is the C text prepended to kernels/moe.cu.
func abiHeader() string {
	var b strings.Builder
	b.WriteString("// Generated from backend/cuda/abi.go: the kernel ABI. Do not edit.\n")
	b.WriteString("typedef unsigned char u8;\ntypedef unsigned short u16;\ntypedef unsigned int u32;\n")
	for _, d := range []struct {
		name string
		v    int
	}{
		{"THREADS", abiThreads}, {"STAGE_K", abiStageK}, {"GEMM1_FEATURES", abiGemm1Features},
		{"GEMM2_ROWS", abiGemm2Rows}, {"TILE_SMALL", abiTileSmall}, {"TILE_LARGE", abiTileLarge},
		{"FINALIZE_COLS", abiFinalizeCols}, {"PARAM_STRIDE", abiParamStride},
		{"RECIPE_FLOOR", int(abiRecipeFloor)}, {"RECIPE_RCEIL", int(abiRecipeRCeil)},
		{"CHAIN_MXFP8", int(abiChainMXFP8)}, {"CHAIN_FLASHINFER", int(abiChainFlashInfer)},
		{"FORM_QUANTIZED", int(abiFormQuantized)}, {"FORM_FLOAT", int(abiFormFloat)},
		{"DECODE_THREADS", abiDecodeThreads},
		{"WG_TOKENS", abiWGTokens}, {"WG_CHUNK_K", abiWGChunkK}, {"WG_STAGES_128", wgStages[128]}, {"WG_STAGES_256", wgStages[256]},
		{"WG_SMEM_128", wgSmem(128)}, {"WG_SMEM_256", wgSmem(256)},
		{"SMEM_ALIGN", abiSmemAlign},
		{"F4_STAGES_T8", f4Stages[8]}, {"F4_STAGES_T16", f4Stages[16]}, {"F4_STAGES_T32", f4Stages[32]},
		{"F4_STAGES_T48", f4Stages[48]}, {"F4_STAGES_T64", f4Stages[64]}, {"F4_STAGES_T128", f4Stages[128]}, {"F4_STAGES_T256", f4Stages[256]},
		{"F4_SMEM_T8", f4Smem(8)}, {"F4_SMEM_T128", f4Smem(128)}, {"F4_SMEM_T256", f4Smem(256)},
		{"F4_AHEAD_T8", f4Ahead[8]}, {"F4_AHEAD_T16", f4Ahead[16]}, {"F4_AHEAD_T32", f4Ahead[32]},
		{"F4_AHEAD_T48", f4Ahead[48]}, {"F4_AHEAD_T64", f4Ahead[64]}, {"F4_AHEAD_T128", f4Ahead[128]}, {"F4_AHEAD_T256", f4Ahead[256]},
		{"F4S_WIN_K_T8", f4sWinK[8]}, {"F4S_WIN_K_T16", f4sWinK[16]}, {"F4S_AHEAD_T8", f4sAhead[8]}, {"F4S_AHEAD_T16", f4sAhead[16]},
		{"F4S_BLOCKS_T8", f4sBlocks[8]}, {"F4S_BLOCKS_T16", f4sBlocks[16]},
		{"F4S_DEEP2_AHEAD", f4sDeep2.ahead}, {"F4S_DEEP2_BLOCKS", f4sDeep2.blocks},
		{"F4S_SMEM_T8", f4sSmem(8)}, {"F4S_SMEM_T16", f4sSmem(16)},
		{"F4_CHUNK_BYTES", f4ChunkBytes}, {"F4_CHUNK_SCALES", f4ChunkScales}, {"F4_TILE_MAX", abiF4TileMax},
		{"F4_FIT_TILE_MAX", f4FitTiles[len(f4FitTiles)-1]}, {"F4_FIT_PIPE", f4FitPipe}, {"F4_FIT_PIPE_AHEAD", f4FitPipeAhead}, {"F4_PIPE_MIN_T", f4PipeMinTokens},
	} {
		if abiTunable(d.name) {
			fmt.Fprintf(&b, "#ifndef KMOE_%s\n#define KMOE_%s %d\n#endif\n", d.name, d.name, d.v)
			continue
		}
		fmt.Fprintf(&b, "#define KMOE_%s %d\n", d.name, d.v)
	}
	for i, p := range abiParams {
		fmt.Fprintf(&b, "#define KMOE_PARAM_%s %d\n", p.name, i)
	}
	for _, k := range activation.Kinds() {
		fmt.Fprintf(&b, "#define KMOE_ACT_%s %d\n", strings.ToUpper(k.String()), activationCode(k))
	}
	for _, t := range []reflect.Type{kQuantizeX.args, kRouteCount.args, kRouteScatter.args, kGemm1Small.args, kGemm2Small.args, kFinalize.args,
		kDecPrologue.args, kDecGemm1[1].args, kDecGemm2[1].args, kTestWiden4.args, kXBF16.args, kRouteXBF16.args, kWGGemm1[128].args, kWGGemm2[128].args, kGatherRows.args, kAddRows.args,
		kF4Gemm1[8].args, kF4Gemm2[8].args, kTestF4Widen.args, kL2Flush.args, kTestDivParam.args, kActRequant.args} {
		b.WriteString(cStruct(t))
	}
	b.WriteString("// End of the generated ABI.\n")
	return b.String()
}

// abiTunable reports whether the kernel macro KMOE_<name> may be set by a
// -D option (KIMIMOE_NVRTC_DEFINES) instead of its value here: the steps
// in flight and the CTAs an SM that only the kernels read (launch bounds,
// register arrays), so that one binary can measure their variants. Shared
// memory sizes, tile shapes and the other values the host also computes
// are not: the header's #define of one of those comes after the option,
// so the host's value stands (the kernels' static_asserts check the
// sizes against the host's).
func abiTunable(name string) bool {
	for _, p := range []string{"F4_AHEAD_T", "F4S_AHEAD_T", "F4S_BLOCKS_T", "F4S_DEEP2_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return name == "F4_FIT_PIPE" || name == "F4_FIT_PIPE_AHEAD" || name == "F4_PIPE_MIN_T"
}

// KernelProgram is the CUDA C++ source the backend compiles with NVRTC:
// the ABI header generated from this package's argument structs, then the
// embedded kernels/moe.cu. It needs no driver; scripts/kernelsrc prints it
// and scripts/kernel-syntax.sh checks it with a host compiler.
func KernelProgram() string { return abiHeader() + "#line 1 \"moe.cu\"\n" + kernelSource }
