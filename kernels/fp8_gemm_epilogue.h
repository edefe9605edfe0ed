/* fp8_gemm_epilogue.h: what the shim's two fp8 GEMM kernels (fp8_gemm.cu,
 * FFMA; fp8_gemm_mma.cu, tensor cores) share, so that both compute the same
 * epilogue with the same fp32 operations: element loads and stores in
 * bf16/fp16/fp32, cuBLASLt's tanh GELU, the fetch of 16 fp8 codes of one
 * operand row with zeros past the edges, and the store of one output element
 * (alpha * scales, beta * C, bias, relu, gelu). Device code, and host code in
 * the emulated build (GS_EMU). */
#ifndef GEMMSHIM_FP8_GEMM_EPILOGUE_H
#define GEMMSHIM_FP8_GEMM_EPILOGUE_H

#include "fp8_block.h"
#include "fp8_convert.h"
#include "fp8_kernels.h"

/* Multiply-adds are explicit __builtin_fmaf; nothing else may be fused, so
 * the host build computes the same bits as the GPU. */
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

static __device__ __forceinline__ float fp8_load_elem(const void *p, int64_t i, int type) {
  if (type == GS_ELEM_BF16) return gs_bf16_to_f32(((const uint16_t *)p)[i]);
  if (type == GS_ELEM_F16) return gs_f16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

static __device__ __forceinline__ void fp8_store_elem(void *p, int64_t i, int type, float v) {
  if (type == GS_ELEM_BF16) ((uint16_t *)p)[i] = gs_f32_to_bf16_rn(v);
  else if (type == GS_ELEM_F16) ((uint16_t *)p)[i] = gs_f32_to_f16_rn(v);
  else ((float *)p)[i] = v;
}

/* exp(x) for |x| <= 80 from basic operations (the build has no libdevice):
 * x = n ln2 + r, |r| <= ln2/2 with ln2 split in two (Cody-Waite), degree-6
 * Taylor polynomial (truncation below 2e-7 relative), times 2^n built in
 * the exponent field. Same bits on GPU and host. */
static __device__ __forceinline__ float fp8_expf(float x) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float t = __builtin_fmaf(x, 1.44269504088896341f, magic);
  float n = t - magic;
  float r = __builtin_fmaf(-n, 0.693145751953125f, x);     /* ln2 high part, exact product */
  r = __builtin_fmaf(-n, 1.42860682030941723e-6f, r);       /* ln2 low part */
  float p = 1.0f / 720.0f;
  p = __builtin_fmaf(p, r, 1.0f / 120.0f);
  p = __builtin_fmaf(p, r, 1.0f / 24.0f);
  p = __builtin_fmaf(p, r, 1.0f / 6.0f);
  p = __builtin_fmaf(p, r, 0.5f);
  p = __builtin_fmaf(p, r, 1.0f);
  p = __builtin_fmaf(p, r, 1.0f);
  return p * gs_f32_from_bits((uint32_t)((int)n + 127) << 23);
}

/* tanh(u) = 1 - 2 / (exp(2u) + 1) for u >= 0, odd. Past u = 9 the result
 * rounds to 1 in fp32. Absolute error about 1e-7 near 0, where GELU
 * multiplies it by 0.5x. */
static __device__ __forceinline__ float fp8_tanhf(float u) {
  float a = u < 0.0f ? -u : u;
  if (a > 9.0f) a = 9.0f;
  float t = 1.0f - 2.0f / (fp8_expf(2.0f * a) + 1.0f);
  return u < 0.0f ? -t : t;
}

/* cuBLASLt's GELU: 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3))). */
static __device__ __forceinline__ float fp8_gelu(float x) {
  if (!(x == x)) return x;
  float x3 = x * x * x;
  float u = 0.7978845608f * (x + 0.044715f * x3);
  return 0.5f * x * (1.0f + fp8_tanhf(u));
}

/* 16 codes of one row of A8 or B8 from k index p, packed four to a word;
 * zeros (the code of +0 in both formats) past k and past the matrix. */
static __device__ __forceinline__ gs_u32x4 fp8_fetch(const uint8_t *row_base, int in_range, int64_t p,
                                                     int64_t k, int vec) {
  gs_u32x4 w = {{0, 0, 0, 0}};
  if (in_range && p < k) {
    if (vec && p + 16 <= k) {
      w = gs_ld16(row_base + p);
    } else {
GS_FP8_UNROLL
      for (int q = 0; q < 16; q++)
        if (p + q < k) w.v[q / 4] |= (uint32_t)row_base[p + q] << (8 * (q % 4));
    }
  }
  return w;
}

/* D(i, j) of batch member b from the accumulated product acc: the epilogue
 * in a fixed order (scale, beta * C, bias, relu, gelu), written in D's type.
 * The caller has checked that (i, j) is inside D. */
static __device__ __forceinline__ void fp8_epilogue_store(const gs_fp8_gemm_args &a, int64_t b, int64_t i,
                                                          int64_t j, float acc, float scale, float beta) {
  float v = acc * scale;
  if (beta != 0.0f) v = __builtin_fmaf(beta, fp8_load_elem(a.c, b * a.stride_c + j * a.ldc + i, a.c_type), v);
  if (a.epilogue & GS_FP8_EPI_BIAS) v = v + fp8_load_elem(a.bias, i, a.bias_type);
  if ((a.epilogue & GS_FP8_EPI_RELU) && v < 0.0f) v = 0.0f;
  if (a.epilogue & GS_FP8_EPI_GELU) v = fp8_gelu(v);
  fp8_store_elem(a.d, b * a.stride_d + j * a.ldd + i, a.d_type, v);
}

#endif
