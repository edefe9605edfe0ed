/* numerics.h: bit-exact conversions between fp32 and the narrow formats the
 * GEMM stand-ins read and write (bf16, fp16, fp8 E4M3/E5M2, tf32).
 *
 * Narrowing is round-to-nearest-even, as GPU stores and cvt.rn do; NaN stays
 * NaN (quietened, sign kept). fp8 follows the formats CUDA_R_8F_E4M3 and
 * CUDA_R_8F_E5M2 name: E4M3 has no infinity, 0x7F/0xFF are NaN and 448
 * is the largest finite value; E5M2 is IEEE-like (max 57344, inf, NaN). The
 * fp8 encoders saturate to the largest finite value like cvt.rn.satfinite
 * (infinities too); NaN encodes as 0x7F with the sign.
 *
 * Header-only: included by the stand-in libraries and by tests, which use it
 * to build operands and references. No libm.
 */
#ifndef STANDIN_NUMERICS_H
#define STANDIN_NUMERICS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t sn_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float sn_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- bf16: the top half of an fp32 ------------------------------------- */
static inline float sn_bf16_to_f32(uint16_t h) { return sn_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t sn_f32_to_bf16(float f) {
  uint32_t u = sn_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* ---- fp16 (IEEE binary16) ---------------------------------------------- */
static inline float sn_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    /* zero or subnormal: man * 2^-24, exact in fp32 */
    float f = (float)man * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  if (exp == 31) return sn_f32_from_bits(sign | 0x7f800000u | (man << 13));
  return sn_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t sn_f32_to_f16(float f) {
  uint32_t u = sn_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf */
  if (a >= 0x38800000u) {                                  /* normal: >= 2^-14 */
    uint32_t h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* carries into the exponent */
    return (uint16_t)(sign | h);
  }
  if (a < 0x33000000u) return sign; /* below 2^-25: zero (2^-25 itself ties to 0) */
  /* subnormal: count units of 2^-24 */
  uint32_t exp = a >> 23, man = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exp; /* 14..24 */
  uint32_t h = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

/* ---- tf32: fp32 with a 10-bit mantissa ---------------------------------- */
static inline float sn_round_tf32(float f) {
  uint32_t u = sn_f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f; /* inf, NaN */
  u += 0xfffu + ((u >> 13) & 1u);
  return sn_f32_from_bits(u & ~0x1fffu);
}

static inline float sn_round_bf16(float f) { return sn_bf16_to_f32(sn_f32_to_bf16(f)); }
static inline float sn_round_f16(float f) { return sn_f16_to_f32(sn_f32_to_f16(f)); }

/* ---- fp8 --------------------------------------------------------------- */
static inline float sn_e4m3_to_f32(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t exp = (v >> 3) & 0xfu, man = v & 7u;
  if (exp == 15 && man == 7) return sn_f32_from_bits(sign | 0x7fc00000u);
  if (exp == 0) {
    float f = (float)man * 0.001953125f; /* man * 2^-9 */
    return sign ? -f : f;
  }
  return sn_f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}

static inline float sn_e5m2_to_f32(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t exp = (v >> 2) & 0x1fu, man = v & 3u;
  if (exp == 31) return sn_f32_from_bits(sign | 0x7f800000u | (man ? 0x400000u : 0u));
  if (exp == 0) {
    float f = (float)man * 1.52587890625e-5f; /* man * 2^-16 */
    return sign ? -f : f;
  }
  return sn_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 21));
}

/* Round |f| to a format with `mbits` mantissa bits, exponent bias `bias`,
 * saturating at code `maxcode`; returns the code without sign. */
static inline uint8_t sn_f32_to_fp8_mag(float a, int mbits, int bias, uint8_t maxcode) {
  uint32_t u = sn_f32_bits(a);
  int e = (int)(u >> 23) - 127;           /* floor(log2 a) for normal fp32 */
  int emin = 1 - bias;                    /* smallest normal exponent */
  if (u == 0 || e < emin - mbits - 2) return 0; /* far below the smallest subnormal */
  if (e > 15) return maxcode;             /* far above any fp8 */
  int qexp = (e < emin ? emin : e) - mbits; /* the spacing of codes around a */
  /* a / 2^qexp, split into integer and fraction; exact in fp32 */
  float scaled = a * sn_f32_from_bits((uint32_t)(127 - qexp) << 23);
  uint32_t t = (uint32_t)scaled;
  float frac = scaled - (float)t;
  if (frac > 0.5f || (frac == 0.5f && (t & 1u))) t++;
  uint32_t code;
  if (e < emin) {
    code = t; /* subnormal; t == 2^mbits is the smallest normal, same encoding */
  } else {
    if (t == (2u << mbits)) t >>= 1, e++;  /* rounded up into the next binade */
    code = ((uint32_t)(e + bias) << mbits) | (t - (1u << mbits));
  }
  return code > maxcode ? maxcode : (uint8_t)code;
}

static inline uint8_t sn_f32_to_e4m3(float f) {
  uint32_t u = sn_f32_bits(f);
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
  return (uint8_t)(sign | sn_f32_to_fp8_mag(sn_f32_from_bits(u & 0x7fffffffu), 3, 7, 0x7eu));
}

static inline uint8_t sn_f32_to_e5m2(float f) {
  uint32_t u = sn_f32_bits(f);
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
  return (uint8_t)(sign | sn_f32_to_fp8_mag(sn_f32_from_bits(u & 0x7fffffffu), 2, 15, 0x7bu));
}

#endif
