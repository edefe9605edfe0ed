/* convert.h: bf16/fp16 <-> fp32 by bit arithmetic, for device code (cast.cu
 * under clang's CUDA mode), its host emulation (C++) and host C (launchers,
 * tests). No cuda_bf16.h / cuda_fp16.h: the build has no CUDA headers on the
 * device side, and bit arithmetic gives the same bits everywhere, whatever
 * the compiler's float settings (no flush-to-zero, no fast-math can touch it).
 *
 * Narrowing matches __float2bfloat16_rn / __float2half_rn (and PTX
 * cvt.rn.{bf16,f16}.f32) bit for bit: round to nearest, ties to even;
 * overflow to a signed infinity; subnormal results kept; every NaN becomes
 * the canonical quiet NaN 0x7FFF, which is what those produce, so a GEMM run
 * through the ffma route writes the same bits the native path would. */
#ifndef GEMMSHIM_CONVERT_H
#define GEMMSHIM_CONVERT_H

#include <stdint.h>

#if defined(__CUDA__)
#define GS_HD static inline __attribute__((host, device, always_inline))
#else
#define GS_HD static inline
#endif

#define GS_BF16_NAN ((uint16_t)0x7FFF)
#define GS_F16_NAN ((uint16_t)0x7FFF)

GS_HD uint32_t gs_f32_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
}

GS_HD float gs_f32_from_bits(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

/* bf16 is the top half of an fp32: widening is a shift, exact for every
 * value, NaN payloads and subnormals included. */
GS_HD float gs_bf16_to_f32(uint16_t h) { return gs_f32_from_bits((uint32_t)h << 16); }

/* fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every fp16 value,
 * subnormals included, is a normal or special fp32. */
GS_HD float gs_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return gs_f32_from_bits(sign | 0x7F800000u | (man << 13)); /* inf, NaN */
  if (exp != 0) return gs_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return gs_f32_from_bits(sign);
  /* Subnormal: value = man * 2^-24. Shift the leading 1 up to bit 10; each
   * shift lowers the exponent by one from that of 2^-14 (fp32 field 113). */
  int lz = __builtin_clz(man) - 21; /* man < 2^10: clz >= 22, lz >= 1 */
  man = (man << lz) & 0x3FFu;
  return gs_f32_from_bits(sign | ((uint32_t)(113 - lz) << 23) | (man << 13));
}

/* Round the fp32 bits to their top 16: add just under half an ulp, plus one
 * when the kept part is odd (ties to even). A carry out of the mantissa bumps
 * the exponent, which is also right for overflow: 0x7F7F8000 and above
 * become 0x7F80 (inf). */
GS_HD uint16_t gs_f32_to_bf16_rn(float f) {
  uint32_t u = gs_f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return GS_BF16_NAN;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Drop the low `shift` bits of m, rounding to nearest, ties to even. */
GS_HD uint32_t gs_round_shift_rne(uint32_t m, uint32_t shift) {
  uint32_t kept = m >> shift;
  uint32_t rest = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  return kept + (rest > half || (rest == half && (kept & 1u)));
}

GS_HD uint16_t gs_f32_to_f16_rn(float f) {
  uint32_t u = gs_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return GS_F16_NAN;
  /* 65520 = 65504 (max fp16) + half its ulp: the tie goes to the even
   * neighbour, which is the next binade, i.e. infinity. */
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);
  if (a >= 0x38800000u) /* >= 2^-14: normal fp16. Rebias 127 -> 15; a
                           mantissa carry into the exponent is right. */
    return (uint16_t)(sign | gs_round_shift_rne(a - 0x38000000u, 13));
  /* Below 2^-14 the fp16 step is 2^-24: the result is round(x * 2^24).
   * x <= 2^-25 (half a step; the tie rounds to even, 0) gives zero. */
  if (a <= 0x33000000u) return sign;
  uint32_t exp = a >> 23; /* 102..112 */
  uint32_t man = (a & 0x7FFFFFu) | 0x800000u;
  /* x * 2^24 = man * 2^(exp - 150 + 24): shift right by 126 - exp (14..24).
   * A round up to 0x400 is exactly the smallest normal fp16's encoding. */
  return (uint16_t)(sign | gs_round_shift_rne(man, 126u - exp));
}

#endif
