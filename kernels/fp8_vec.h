/* fp8_vec.h: the 16-byte-group helpers of the fp8 quantize fast paths
 * (fp8_scaled_quantize.cu's block-scaled ones, fp8_current_fast.h's
 * current-recipe ones): a source element type's group geometry, an
 * element's raw bits and |x| key (unsigned order = order of |x| widened to
 * fp32, NaNs above infinity), widening, the paired hardware conversion, a
 * division-free walk over units, and a 16-byte load that falls back to
 * element loads at the matrix's edge. Device code (and its host build). */
#ifndef GEMMSHIM_FP8_VEC_H
#define GEMMSHIM_FP8_VEC_H

#include "fp8_block.h"
#include "fp8_convert.h"
#include "fp8_kernels.h"

template <int E> struct fp8v_src {
  static constexpr int V = E == GS_ELEM_F32 ? 4 : 8; /* elements a 16-byte load */
  static constexpr int SZ = 16 / V;                  /* bytes an element */
  /* the largest non-NaN magnitude key (infinity) */
  static constexpr uint32_t INF = E == GS_ELEM_F32 ? 0x7F800000u : E == GS_ELEM_BF16 ? 0x7F80u : 0x7C00u;
};

/* Raw bits of element i of a 16-byte group. */
template <int E> static __device__ __forceinline__ uint32_t fp8v_raw(const gs_u32x4 &g, int i) {
  if constexpr (E == GS_ELEM_F32) return g.v[i];
  else return i % 2 ? g.v[i / 2] >> 16 : g.v[i / 2] & 0xFFFFu;
}
/* |x| as an unsigned key that orders as |x| widened to fp32 does (NaNs
 * above infinity). */
template <int E> static __device__ __forceinline__ uint32_t fp8v_key(uint32_t raw) {
  return raw & (E == GS_ELEM_F32 ? 0x7FFFFFFFu : 0x7FFFu);
}
/* The fp32 bits of a key: the general path's amax for the same maximum. */
template <int E> static __device__ __forceinline__ uint32_t fp8v_key_amax(uint32_t key) {
  if constexpr (E == GS_ELEM_BF16) return key << 16;
  else if constexpr (E == GS_ELEM_F16) return gs_f32_bits(gs_f16_to_f32((uint16_t)key));
  else return key;
}
/* Element widening as the general paths do it (NaNs kept). */
template <int E> static __device__ __forceinline__ float fp8v_widen_exact(uint32_t raw) {
  if constexpr (E == GS_ELEM_BF16) return gs_bf16_to_f32((uint16_t)raw);
  else if constexpr (E == GS_ELEM_F16) return gs_f16_to_f32((uint16_t)raw);
  else return gs_f32_from_bits(raw);
}
/* The same for a non-NaN element: fp16 by cvt.f32.f16 on the GPU (exact). */
template <int E> static __device__ __forceinline__ float fp8v_widen(uint32_t raw) {
#if !defined(GS_EMU)
  if constexpr (E == GS_ELEM_F16) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((uint16_t)raw));
    return f;
  }
#endif
  return fp8v_widen_exact<E>(raw);
}
/* cvt.rn.satfinite.<fmt>x2.f32 (hi in the upper byte); the host build runs
 * its model. Never given a NaN (fp8_convert.h: the ISA leaves its code). */
static __device__ __forceinline__ uint32_t fp8v_cvt_x2(float hi, float lo, int fmt) {
#if defined(GS_EMU)
  return gs_cvt_rn_satfinite_x2_model(hi, lo, fmt);
#else
  unsigned short d;
  if (fmt == GS_FP8_DEV_E4M3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
#endif
}
/* A walk over units p = major * n + minor, from p0 in steps of s, with no
 * division in the loop. */
struct fp8v_walk {
  int64_t major, minor, dmaj, dmin, n;
  __device__ __forceinline__ void init(int64_t p0, int64_t s, int64_t nn) {
    n = nn, major = p0 / nn, minor = p0 % nn, dmaj = s / nn, dmin = s % nn;
  }
  __device__ __forceinline__ void step() {
    minor += dmin, major += dmaj;
    if (minor >= n) minor -= n, major++;
  }
};

/* 16 bytes of source at p, or for a group cut by the matrix's edge its
 * first n elements (0 <= n < V) one by one, zeros after. */
template <int E> static __device__ __forceinline__ gs_u32x4 fp8v_ld(const void *p, int64_t n) {
  if (n >= fp8v_src<E>::V) return gs_ld16(p);
  gs_u32x4 g = {{0, 0, 0, 0}};
GS_FP8_UNROLL
  for (int i = 0; i < fp8v_src<E>::V; i++) {
    if (i >= n) break;
    if constexpr (E == GS_ELEM_F32) g.v[i] = ((const uint32_t *)p)[i];
    else g.v[i / 2] |= (uint32_t)((const uint16_t *)p)[i] << (16 * (i % 2));
  }
  return g;
}

#endif
