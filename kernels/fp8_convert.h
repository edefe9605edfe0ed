/* fp8_convert.h: fp32 <-> fp8 (OCP E4M3 "fn" and E5M2) by bit arithmetic,
 * for the fp8 kernels (device and host emulation) and host C (tests). The
 * shim's PTX targets sm_61, which has no fp8 conversion instruction
 * (cvt.rn.satfinite.e4m3x2 needs sm_89), and bit arithmetic gives the same
 * bits on every GPU and on the host whatever the float settings.
 *
 *   E4M3: bias 7, 3 mantissa bits, largest finite 448 (0x7E), no infinity,
 *         NaN 0x7F / 0xFF.
 *   E5M2: bias 15, 2 mantissa bits, largest finite 57344 (0x7B), IEEE
 *         infinity 0x7C and NaNs 0x7D-0x7F (the top byte of an fp16).
 *
 * Encoding rounds to nearest, ties to even, and saturates: anything past the
 * largest finite value, infinities included, becomes +-max, as
 * cvt.rn.satfinite does and as delayed scaling needs (a value above the
 * scaled range is clipped, not turned into inf/NaN that would poison the
 * GEMM). Subnormal results are kept; -0 keeps its sign. NaN stays NaN with
 * its sign: E4M3 0x7F, E5M2 0x7E (the quiet NaN ml_dtypes and cuda_fp8.hpp's
 * host path produce). Decoding is exact (every fp8 value is an fp32 normal,
 * zero, infinity or NaN). tests/fp8/make_golden.py holds the reference. */
#ifndef GEMMSHIM_FP8_CONVERT_H
#define GEMMSHIM_FP8_CONVERT_H

#include <stdint.h>

#include "convert.h"

#define GS_E4M3_MAX_CODE ((uint8_t)0x7E)
#define GS_E5M2_MAX_CODE ((uint8_t)0x7B)
#define GS_E4M3_NAN ((uint8_t)0x7F)
#define GS_E5M2_NAN ((uint8_t)0x7E)
/* The fp32 decoding of a NaN code: the canonical quiet NaN. */
#define GS_FP8_F32_NAN 0x7FFFFFFFu

/* fp32 with |x| bits `a` (finite, at most the format's max, at least its
 * smallest normal) to the fp8 magnitude: rebias the exponent from 127 to
 * `bias` and drop 23 - mbits mantissa bits, rounding to nearest even. A
 * carry out of the mantissa moves to the next binade, which is right; the
 * caller's saturation test keeps it from passing the largest finite code. */
GS_HD uint32_t gs_fp8_normal(uint32_t a, uint32_t bias, uint32_t mbits) {
  return gs_round_shift_rne(a - ((127u - bias) << 23), 23u - mbits);
}

/* fp32 with |x| bits `a` below the format's smallest normal: the result is
 * round(x / step) with step = 2^(1 - bias - mbits), the subnormal spacing.
 * x = man * 2^(exp - 150), so the shift is 151 - bias - mbits - exp. At
 * most half a step (a <= half_step_bits) rounds to zero, the tie to even;
 * that also covers fp32 subnormals. A round up to 2^mbits is exactly the
 * smallest normal's code. */
GS_HD uint32_t gs_fp8_subnormal(uint32_t a, uint32_t bias, uint32_t mbits,
                                uint32_t half_step_bits) {
  if (a <= half_step_bits) return 0;
  uint32_t exp = a >> 23;
  uint32_t man = (a & 0x7FFFFFu) | 0x800000u;
  return gs_round_shift_rne(man, 151u - bias - mbits - exp);
}

GS_HD uint8_t gs_f32_to_e4m3_sat(float f) {
  uint32_t u = gs_f32_bits(f);
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint8_t)(sign | GS_E4M3_NAN);
  /* 448 and above (inf too): every value past 448 rounds to 448 or to a
   * code that does not exist; saturation makes both 448. */
  if (a >= 0x43E00000u) return (uint8_t)(sign | GS_E4M3_MAX_CODE);
  if (a >= 0x3C800000u) return (uint8_t)(sign | gs_fp8_normal(a, 7, 3)); /* >= 2^-6 */
  return (uint8_t)(sign | gs_fp8_subnormal(a, 7, 3, 0x3A800000u)); /* 2^-10 */
}

GS_HD uint8_t gs_f32_to_e5m2_sat(float f) {
  uint32_t u = gs_f32_bits(f);
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint8_t)(sign | GS_E5M2_NAN);
  if (a >= 0x47600000u) return (uint8_t)(sign | GS_E5M2_MAX_CODE); /* >= 57344 */
  if (a >= 0x38800000u) return (uint8_t)(sign | gs_fp8_normal(a, 15, 2)); /* >= 2^-14 */
  return (uint8_t)(sign | gs_fp8_subnormal(a, 15, 2, 0x37000000u)); /* 2^-17 */
}

GS_HD float gs_e4m3_to_f32(uint8_t c) {
  uint32_t sign = (uint32_t)(c & 0x80u) << 24;
  uint32_t exp = (c >> 3) & 0xFu;
  uint32_t man = c & 0x7u;
  if ((c & 0x7Fu) == 0x7Fu) return gs_f32_from_bits(GS_FP8_F32_NAN);
  if (exp != 0) return gs_f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
  if (man == 0) return gs_f32_from_bits(sign);
  /* Subnormal man * 2^-9: move the leading 1 up to bit 3; each shift
   * lowers the exponent from that of 2^-6 (fp32 field 121) by one. */
  uint32_t lz = (uint32_t)__builtin_clz(man) - 28u; /* man < 8: lz in 1..3 */
  man = (man << lz) & 0x7u;
  return gs_f32_from_bits(sign | ((121u - lz) << 23) | (man << 20));
}

/* E5M2 is the top byte of an fp16, inf and NaN included. */
GS_HD float gs_e5m2_to_f32(uint8_t c) {
  if ((c & 0x7Fu) > 0x7Cu) return gs_f32_from_bits(GS_FP8_F32_NAN);
  return gs_f16_to_f32((uint16_t)((uint16_t)c << 8));
}

/* fmt: GS_FP8_E4M3 (0) or GS_FP8_E5M2 (1), as in fp8.h. */
GS_HD uint8_t gs_f32_to_fp8_sat(float f, int fmt) {
  return fmt ? gs_f32_to_e5m2_sat(f) : gs_f32_to_e4m3_sat(f);
}

GS_HD float gs_fp8_to_f32(uint8_t c, int fmt) { return fmt ? gs_e5m2_to_f32(c) : gs_e4m3_to_f32(c); }

/* The CPU model of sm_89's `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b`
 * (PTX ISA 8.1+ on sm_89, 7.8+ on sm_90; section "Data Movement and Conversion Instructions: cvt"):
 * a and b are each converted to the format, a into the upper 8 bits of the
 * 16-bit d, b into the lower; .rn rounds to nearest, ties to even (fp8
 * subnormals kept); .satfinite: "if the input value is NaN, then the result
 * is NaN in the specified destination format. If the absolute value of input
 * (ignoring sign) is greater than MAX_NORM of the specified destination
 * format, then the result is sign-preserved MAX_NORM". Past MAX_NORM,
 * infinities included, that is gs_f32_to_fp8_sat's saturation; below it,
 * its rounding. The ISA does not say which NaN code; the model gives
 * 0x7F, the canonical one, for either format and sign (gs_f32_to_fp8_sat
 * keeps the sign and gives 0x7E for E5M2): code that must not depend on the
 * hardware's choice keeps NaNs away from the instruction (fp8_quantize.cu),
 * and a test that ran such code through this model would see the
 * difference. */
GS_HD uint8_t gs_cvt_satfinite_model(float x, int fmt) {
  if ((gs_f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u) return 0x7F;
  return gs_f32_to_fp8_sat(x, fmt);
}
GS_HD uint16_t gs_cvt_rn_satfinite_x2_model(float a, float b, int fmt) {
  return (uint16_t)(((uint16_t)gs_cvt_satfinite_model(a, fmt) << 8) | gs_cvt_satfinite_model(b, fmt));
}

/* x / s from r = 1/s (correctly rounded) by one Markstein correction:
 * q0 = x*r, e = q0*s - x (exact, fused), q = q0 - e*r, each step rounded to
 * nearest. Equal to the correctly rounded x / s (Markstein's theorem; the
 * same steps as the GPU's own div.rn fast path) where nothing underflows or
 * overflows: with s in [2^-60, 2^60] and |x / s| < 2^64 (the range the
 * fp8 kernels use it in, fp8_quantize.cu) the bits equal the division's
 * for |x| >= 2^-100, and below that (quotients under 2^-40) the fp8 codes
 * do, checked against the division in test_fp8_convert. The residual is taken as q0*s - x, not x - q0*s, so
 * that x = -0 gives -0 (-0 - (+0 * r) is -0; +0 + -0 would be +0). */
GS_HD float gs_div_by_rcp(float x, float s, float r) {
  float q0 = x * r;
  float e = __builtin_fmaf(q0, s, -x);
  return __builtin_fmaf(-e, r, q0);
}

#endif
