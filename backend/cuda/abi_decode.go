package cuda

import "reflect"

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

// decodeProgram is the decode path's share of the kernel program.
var decodeProgram = pathProgram{
	files:   []string{"decode.cu"},
	defines: []abiDefine{{"DECODE_THREADS", abiDecodeThreads}},
	structs: []reflect.Type{kDecPrologue.args, kDecGemm1[1].args, kDecGemm2[1].args},
	entries: append([]kernelSpec{kDecPrologue}, mapSpecs(kDecGemm1, kDecGemm2)...),
}
