// Package mxfp implements the OCP Microscaling (MX) number formats that
// kimimoe's MoE layer uses: E4M3 and E2M1 elements, E8M0 block scales, BF16,
// MX block quantization of rows, FP4 packing, and the FlashInfer 128x4
// swizzled scale layout. It is pure Go and depends only on the standard
// library.
//
// # Scalars
//
// E4M3 (the "fn" variant): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
// infinities; NaN is S.1111.111 (0x7F, 0xFF); largest finite 448 (0x7E);
// smallest subnormal 2^-9. EncodeE4M3 rounds to nearest, ties to even, and
// saturates: finite or infinite |x| beyond 448 gives ±448 (as PTX
// cvt.rn.satfinite.e4m3x2.f32). NaN encodes as 0x7F. -0 encodes as 0x80.
// Note that torch and ml_dtypes casts do not saturate: they give NaN from
// 464 upwards (464 itself is the tie between 448 and 480 and rounds to 448).
//
// E2M1: 1 sign, 2 exponent (bias 1), 1 mantissa bit; values ±{0, 0.5, 1,
// 1.5, 2, 3, 4, 6}; no NaN or infinity. EncodeE2M1 rounds to nearest even and
// saturates to ±6; NaN encodes as +6 (0x7), the PTX .satfinite rule.
// ml_dtypes 0.6.0 gives a signed zero for NaN instead (+0 for a positive NaN,
// -0 for a negative one); kimimoe follows the hardware.
// Codes live in the low nibble of a byte.
//
// E8M0: byte b is 2^(b-127); 0x00 is 2^-127, 0xFE is 2^127, 0xFF is NaN.
// There is no zero and no sign.
//
// BF16: the top half of a float32. BF16FromFloat32 rounds to nearest even;
// values beyond the largest finite bf16 round to ±Inf (no saturation, as
// torch and ml_dtypes); NaN becomes the quiet NaN 0x7FC0 with its sign kept
// (ml_dtypes' rule).
//
// # MX blocks
//
// A row is split into blocks of BlockSize (32) consecutive elements. Each
// block has one E8M0 scale 2^X; its elements are stored as v / 2^X rounded
// to nearest even with saturation. Division by a power of two is exact, so
// the only rounding is the final one to the element format. X depends on the
// recipe and on amax, the largest |v| over the finite elements:
//
//	floor (OCP MX v1.0, torchao default): X = floor(log2 amax) - emax, where
//	  emax is 8 for E4M3 and 2 for E2M1; elements above the element's largest
//	  value saturate.
//	rceil (NVIDIA cvt.rp, cuDNN, FlashInfer mxfp8_quantize/mxfp4_quantize): the
//	  smallest X with amax / 2^X <= maxpos (448 or 6), i.e.
//	  ceil(log2(amax / maxpos)), computed exactly here. FlashInfer computes
//	  amax * rcp.approx(448) instead; the two can differ only when amax is
//	  within an ulp of maxpos * 2^k.
//
// Both clamp X to [-127, 127]. A block whose amax is 0 has scale 0x00; its
// codes are the element encodings of its (signed) zeros.
//
// Non-finite inputs. Under floor (OCP) a NaN or infinity anywhere in the block
// makes the block NaN: scale 0xFF, and every element, being v / NaN, is NaN
// and encodes by the scalar rule (E4M3 0x7F, E2M1 +6). Under rceil, as
// FlashInfer does it, NaN is skipped when taking amax and each NaN element
// encodes as +maxpos (0x7E or 0x7); an infinity makes amax infinite, the
// scale saturates to 0xFE (X = 127) and the infinity itself to ±maxpos. An
// rceil block therefore never has a 0xFF scale or a NaN code.
//
// Dequantization multiplies the decoded element by the decoded scale. In
// float64 this is exact. In float32 it is exact unless it overflows (for
// example 448 * 2^127), in which case it is ±Inf; a 0xFF scale gives NaN.
//
// # Packing and layouts
//
// FP4 packs two codes a byte: element 2j in the low nibble, 2j+1 in the high
// nibble (torch float4_e2m1fn_x2, torchao, FlashInfer). An MX matrix [R, C]
// stores its payload row-major and its scales as [R, C/32] (the linear
// layout). FlashInfer's swizzled layout pads rows to a multiple of 128 and
// scale columns to a multiple of 4, and puts scale (m, k) at
//
//	(m/128)*(nK*512) + (k/4)*512 + (m%32)*16 + ((m%128)/32)*4 + k%4
//
// with nK the padded scale columns / 4; padding bytes are 0.
//
// # Errors
//
// Lengths that do not fit (a row not a multiple of 32, a destination of the
// wrong length) are programmer errors and panic with a message starting
// "mxfp:", as gonum does. Bad names (ParseRecipe) return errors.
package mxfp
