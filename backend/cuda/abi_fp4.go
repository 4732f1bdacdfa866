package cuda

import (
	"kimimoe/backend/cuda/internal/layout/fp4"
	"reflect"
)

// The wgmma-fp4 path (sm_90a; its weights: layout/fp4; kernels/fp4_*.cu): MXFP4
// weights widened to BF16 in registers, x and the intermediate as BF16 as
// on the wgmma path.
const (
	f4ChunkBytes   = fp4.ChunkBytes  // payload of one 64-row group and 64-k chunk
	f4ChunkScales  = fp4.ChunkScales // its scale bytes: one word a quad
	abiF4TileMax   = 256             // the largest token tile
	abiF4RowsGemm1 = 64              // intermediate features per GEMM1 CTA (two warpgroups of 32)
	abiF4RowsGemm2 = 128             // output rows per GEMM2 CTA (two warpgroups of 64)
)

// GEMM1 in three warpgroups (kmoe_f4_gemm1_w3_t128, Plan.FP4.W3): the
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

// f4W3Loop is the k loop of the three-warpgroup GEMMs (Plan.FP4.Ring and
// Plan.FP4.W3Fit pick it): a CTA barrier a step, the stage ring, or the ring
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
// loops (kmoe_f4_*_w3rf_t128, Plan.FP4.W3Fit): a tile runs its wgmmas at its
// tokens rounded up to a multiple of it, eight loops of 16 to 128 in one
// kernel rather than sixteen of 8.
const f4W3FitStep = 16

// GEMM2 in three warpgroups (kmoe_f4_gemm2_w3_t128, Plan.FP4.W3Gemm2): the
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
	K        int32  // padded (fp4.Dims), as N
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

// fp4Program is the wgmma-fp4 path's share of the kernel program.
var fp4Program = pathProgram{
	files: []string{"fp4_widen.cuh", "fp4_wgmma.cu", "fp4_sync.cu", "fp4_gemm.cu"},
	defines: []abiDefine{{"F4S_DEEP2_AHEAD", f4sDeep2.ahead}, {"F4S_DEEP2_BLOCKS", f4sDeep2.blocks},
		{"F4_CHUNK_BYTES", f4ChunkBytes}, {"F4_CHUNK_SCALES", f4ChunkScales}, {"F4_TILE_MAX", abiF4TileMax},
		{"F4_FIT_TILE_MAX", f4FitTiles[len(f4FitTiles)-1]}, {"F4_FIT_PIPE", f4FitPipe}, {"F4_FIT_PIPE_AHEAD", f4FitPipeAhead}, {"F4_PIPE_MIN_T", f4PipeMinTokens},
		{"F4_W3_THREADS", f4W3Threads}, {"F4_W3_FEATURES", f4W3Features}, {"F4_W3_AHEAD", f4W3Ahead}, {"F4_W3_FIT_STEP", f4W3FitStep}},
	structs: []reflect.Type{kF4Gemm1[8].args, kF4Gemm2[8].args, kActRequant.args},
	entries: append(append(append([]kernelSpec{kF4SGemm2Deep, kActRequant}, kF4W3Gemm1[:]...), kF4W3Gemm2[:]...),
		mapSpecs(kF4Gemm1, kF4Gemm2, kF4FitGemm1, kF4FitGemm2, kF4SGemm1, kF4SGemm2)...),
}
