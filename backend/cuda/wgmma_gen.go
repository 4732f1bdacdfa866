package cuda

import (
	"fmt"
	"strings"
)

// The wgmma instructions the kernels issue, one specialization per shape,
// generated here rather than written out by hand: an instruction's
// accumulators are N/2 asm operands a thread, which C++ cannot spell from
// N, so each shape is its own asm statement (CUTLASS and DeepGEMM
// generate theirs alike). The kernels call them through wgmma_rs<N> and
// wgmma_bf16<N>; a shape missing here fails the compile.

// wgmmaRSShapes are the N of the register-A form (the wgmma-fp4 loops: a
// tile's tokens rounded up to 8, up to 64, and the 128- and 256-token
// tiles); wgmmaSSShapes those of the shared-memory form (the wgmma path's
// weight rows a tile, wgRows).
var (
	wgmmaRSShapes = []int{8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 256}
	wgmmaSSShapes = wgRows
)

// wgmmaOperands are "%first, ..., %(first+n-1)".
func wgmmaOperands(first, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("%%%d", first+i)
	}
	return strings.Join(parts, ", ")
}

// wgmmaShape is one specialization: d += A x B (64 x N x 16, BF16 in,
// float32 accumulators), A from registers (rs) or a descriptor.
func wgmmaShape(n int, rs bool) string {
	acc := n / 2
	outs := make([]string, acc)
	for i := range outs {
		outs[i] = fmt.Sprintf("\"+f\"(d[%d])", i)
	}
	var b strings.Builder
	name, params, ins, aOps := "WgmmaSS", "u64 da, u64 db", `"l"(da), "l"(db)`, ""
	tail := fmt.Sprintf("%%%d, %%%d, p, 1, 1, 0, 0;", acc, acc+1)
	if rs {
		name, params, ins = "WgmmaRS", "const u32 (&a)[4], u64 db", `"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)`
		aOps = "{" + wgmmaOperands(acc, 4) + "}, "
		tail = fmt.Sprintf("%%%d, p, 1, 1, 0;", acc+4)
	}
	fmt.Fprintf(&b, "template <> struct %s<%d> {\n", name, n)
	fmt.Fprintf(&b, "    __device__ __forceinline__ static void mma(float (&d)[%d], %s) {\n", acc, params)
	fmt.Fprintf(&b, "        asm volatile(\n            \"{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n\"\n")
	fmt.Fprintf(&b, "            \"wgmma.mma_async.sync.aligned.m64n%dk16.f32.bf16.bf16 \"\n", n)
	fmt.Fprintf(&b, "            \"{%s}, %s%s\\n}\\n\"\n", wgmmaOperands(0, acc), aOps, tail)
	fmt.Fprintf(&b, "            : %s\n            : %s);\n    }\n};\n", strings.Join(outs, ", "), ins)
	return b.String()
}

// wgmmaSource is the generated part of the program: every shape, for the
// sm_90a feature set only.
func wgmmaSource() string {
	var b strings.Builder
	b.WriteString("// Generated from backend/cuda/wgmma_gen.go: the wgmma shapes. Do not edit.\n")
	b.WriteString("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n")
	b.WriteString("template <int N> struct WgmmaRS;\ntemplate <int N> struct WgmmaSS;\n")
	for _, n := range wgmmaRSShapes {
		b.WriteString(wgmmaShape(n, true))
	}
	for _, n := range wgmmaSSShapes {
		b.WriteString(wgmmaShape(n, false))
	}
	b.WriteString("#endif\n")
	return b.String()
}
