// ------------------------------------------------------ the block MMA --

// One 32-deep block of D[16x8] += (A * 2^sa_row) (B * 2^sb_col), A = 16
// weight rows, B = 8 token columns. rs0/rs1: the scales of rows g and g+8
// as floats; cs0/cs1: of columns 2t and 2t+1 (sm_90 body). sa_lane/sb_lane:
// the scale bytes in the native body's lane convention.
//
// sm_90 promotion: (d * rs) * cs is exact (power-of-two scalings of a
// float32 MMA result, unless it falls below float32's normal range), so the
// fused multiply-add rounds once, as a multiply and an add would. The asm is not volatile: it has no side
// effects, and the compiler may overlap MMAs with earlier promotions.
__device__ __forceinline__ void mx_mma(float acc[4], const u32 a[4], const u32 b[2], float rs0, float rs1,
                                       float cs0, float cs1, u32 sa_lane, u32 sb_lane) {
#if defined(KMOE_NATIVE_MX)
    // Native: lane 4r supplies row r's scale, lane 4r+1 row r+8's
    // (thread-id-a 0); lane 4n supplies column n's (thread-id-b 0).
    asm("mma.sync.aligned.kind::mxf8f6f4.block_scale.scale_vec::1X.m16n8k32.row.col.f32.e4m3.e4m3.f32.ue8m0 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, {%10}, {%11,%12}, {%13}, {%14,%15};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "r"(sa_lane), "h"((u16)0), "h"((u16)0), "r"(sb_lane), "h"((u16)0), "h"((u16)0));
#else
    float d0, d1, d2, d3;
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
    acc[0] = __fmaf_rn(__fmul_rn(d0, rs0), cs0, acc[0]);
    acc[1] = __fmaf_rn(__fmul_rn(d1, rs0), cs1, acc[1]);
    acc[2] = __fmaf_rn(__fmul_rn(d2, rs1), cs0, acc[2]);
    acc[3] = __fmaf_rn(__fmul_rn(d3, rs1), cs1, acc[3]);
#endif
}
