package cuda

import (
	"kimimoe/backend/cuda/internal/layout"
	"kimimoe/backend/cuda/internal/layout/decode"
	"kimimoe/backend/cuda/internal/layout/wgmma"
	"reflect"
)

// The wgmma path's geometry (its weights: layout/wgmma; kernels/wgmma.cu).
const (
	abiWGTokens = 128           // tokens per tile: two warpgroups of 64 (the wgmma's M)
	abiWGChunkK = layout.ChunkK // k per staged chunk: 128 bytes of BF16 a row
)

// wgRows are the instances' weight rows per tile (the wgmma's N), and
// wgStages their chunks staged at once: the 128-row instances run two
// CTAs an SM (two times 3 x 32 KB of stages), the 256-row ones one (4 x
// 48 KB).
var (
	wgRows   = wgmma.Rows
	wgStages = map[int]int{128: 3, 256: 4}
)

// abiSmemAlign is the boundary the wgmma path's kernels align their
// dynamic shared memory to (the 128-byte swizzle's 1024-byte pattern):
// they are given that many bytes more than their struct.
const abiSmemAlign = 1024

// wgSmem is the dynamic shared memory of the wgmma path's one-CTA
// kernels: sizeof(WgSmem<rows>) (the staged tokens and weights and the
// tile's source rows) and the alignment slack.
func wgSmem(rows int) int {
	return wgStages[rows]*(abiWGTokens*2*abiWGChunkK+wgmma.TileBytes(rows)) + 4*abiWGTokens + abiSmemAlign
}

// The decode kernels' CTAs: 4 warps (one 32-feature MXFP8 block in GEMM1,
// 64 output rows in GEMM2).
const (
	abiDecodeThreads = 128
	abiDecodeTile    = decode.Tile // bytes of one pre-arranged 16-row tile (layout/decode)
	abiDecodeScales  = decode.Scales
)

// The wgmma path (sm_90a; kernels/wgmma.cu): x as BF16,
// then the two GEMMs on BF16 operands (W arranged by layout/wgmma); GEMM1
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

// wgmmaProgram is the wgmma path's share of the kernel program: the
// generated wgmma shapes, and x and the intermediate as BF16, which the
// wgmma-fp4 path's files (after these) use too.
var wgmmaProgram = pathProgram{
	files:   []string{"wgmma_shapes", "wgmma.cu"},
	defines: []abiDefine{{"WG_TOKENS", abiWGTokens}, {"WG_CHUNK_K", abiWGChunkK}, {"SMEM_ALIGN", abiSmemAlign}},
	structs: []reflect.Type{kXBF16.args, kRouteXBF16.args, kWGGemm1[128].args, kWGGemm2[128].args},
	entries: append([]kernelSpec{kXBF16, kRouteXBF16, kRouteXMany}, mapSpecs(kWGGemm1, kWGGemm2)...),
}
