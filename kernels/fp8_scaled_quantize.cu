/* fp8_scaled_quantize.cu: one GEMM operand to fp8 with per-block scales in
 * the layouts cuBLASLt's block-scaling modes read (cuBLAS docs, "Narrow
 * precision data types usage"; cublasLt.h cublasLtMatmulMatrixScale_t):
 *
 *   GS_FP8_BQ_VEC128  1 x 128 along k, fp32 dequantization scale per
 *                     segment, at r + kb * outer (VEC128_32F)
 *   GS_FP8_BQ_BLK128  128 x 128 tiles, fp32, at kb + rb * roundup(KB, 4)
 *                     with KB = ceil(K/128), padding zero (BLK128x128_32F)
 *   GS_FP8_BQ_MX32    1 x 32 along k, E8M0 per block in 128 x 4 tiles of
 *                     512 bytes (VEC32_UE8M0), padding rows/blocks zero
 *
 * The data goes out k-contiguous (dst[r * k_pad + q]), zeros from k to
 * k_pad. Scales:
 *   - VEC128/BLK128 follow TransformerEngine's Float8BlockScaling
 *     (transformer_engine/common/recipe/__init__.py: power-of-two scales
 *     unless NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1; amax_epsilon 0): the
 *     quantization scale is fp8_max / amax rounded down to a power of two
 *     (1 when amax is 0; FLT_MAX's power of two when it overflows), the
 *     stored scale its reciprocal, exact;
 *   - MX32 follows the OCP Microscaling Formats spec v1.0, 6.3: shared
 *     exponent floor(log2(amax)) - emax_elem (8 for E4M3, 15 for E5M2),
 *     clamped to the E8M0 range [-127, 127]; a zero block gets the code 0
 *     (as does padding). Elements are x / 2^e, encoded with saturation.
 *     GS_FP8_BQ_MX32_CEIL is the same layout with TransformerEngine's
 *     rounding (its MXFP8 documentation: float_to_e8m0(amax / max_norm),
 *     rounded up): e = ceil(log2(amax / fp8_max)), one more than the
 *     spec's when amax / 2^e would exceed fp8_max, so nothing saturates.
 * Each block's amax is local to the thread block that quantizes it: one
 * pass over the source (a 128 x 128 tile is read twice; the second read
 * is expected to hit L2: 32 KiB of bf16 per tile, not measured).
 *
 * One thread block of 128 threads per unit (a 1 x 128 segment for VEC128
 * and MX32, a 128 x 128 tile for BLK128), grid-stride over units; thread
 * t owns k index c * 128 + t. A compared call's statistics (a non-NULL
 * stats) are counted per scale block by fp8_stats.h's helpers. */
#include "fp8_block.h"
#include "fp8_convert.h"
#include "fp8_kernels.h"
#include "fp8_stats.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

template <int E> static __device__ __forceinline__ float bq_load(const void *src, int64_t i) {
  if constexpr (E == GS_ELEM_BF16) return gs_bf16_to_f32(((const uint16_t *)src)[i]);
  else if constexpr (E == GS_ELEM_F16) return gs_f16_to_f32(((const uint16_t *)src)[i]);
  else return ((const float *)src)[i];
}

/* 2^n as fp32 for n in [-127, 127] (2^-127 is the subnormal 0x00400000). */
static __device__ __forceinline__ float bq_pow2(int n) {
  return n >= -126 ? gs_f32_from_bits((uint32_t)(n + 127) << 23) : gs_f32_from_bits(0x00400000u);
}

/* floor(log2(x)) for finite x > 0, subnormals included. */
static __device__ __forceinline__ int bq_floor_log2(float x) {
  uint32_t u = gs_f32_bits(x);
  int e = (int)(u >> 23);
  if (e) return e - 127;
  if (!(u & 0x7FFFFFu)) return -150; /* 0: never asked (callers pass x > 0); no endless loop */
  int lz = 0;
  for (uint32_t m = u & 0x7FFFFFu; !(m & 0x400000u); m <<= 1) lz++;
  return -127 - lz;
}

/* Max over the `width` threads (32 or 128) of t's group; amax as bits
 * (non-negative floats order as unsigned; NaN's bits win). */
static __device__ __forceinline__ uint32_t bq_group_max(uint32_t *s, unsigned t, unsigned width, uint32_t v) {
  s[t] = v;
  __syncthreads();
  for (unsigned h = width / 2; h; h /= 2) {
    if (t % width < h && s[t + h] > s[t]) s[t] = s[t + h];
    __syncthreads();
  }
  uint32_t r = s[t - t % width];
  __syncthreads();
  return r;
}

/* Of the `width` k indices from `start`, those below k: a scale block's
 * elements inside the matrix, for its statistics (fp8_stats.h). */
static __device__ __forceinline__ int64_t bq_inside(int64_t k, int64_t start, int64_t width) {
  return k - start < 0 ? 0 : k - start < width ? k - start : width;
}

static __device__ __forceinline__ uint8_t bq_encode(float x, int fmt) {
  return fmt == GS_FP8_DEV_E4M3 ? gs_f32_to_e4m3_sat(x) : gs_f32_to_e5m2_sat(x);
}

/* TE's power-of-two scale: fp8_max / amax rounded down to 2^n. */
static __device__ __forceinline__ float bq_pow2_scale(uint32_t amax_bits, int fmt) {
  float amax = gs_f32_from_bits(amax_bits);
  /* 0, inf or NaN: scale 1, as TE's compute_scale_from_amax leaves a
   * non-finite amax (and floor_log2 is never asked of 0) */
  if (amax_bits == 0 || amax_bits >= 0x7F800000u) return 1.0f;
  float s = (fmt == GS_FP8_DEV_E4M3 ? 448.0f : 57344.0f) / amax;
  if (gs_f32_bits(s) >= 0x7F800000u) s = 3.40282347e38f;
  return bq_pow2(bq_floor_log2(s));
}

template <int E> static __device__ void bq_body(const gs_fp8_bq_args &a) {
  __shared__ uint32_t s_red[GS_FP8_BQ_THREADS];
  const unsigned t = threadIdx.x;
  const int64_t chunks = (a.k_pad + 127) / 128;
  if (a.mode == GS_FP8_BQ_BLK128) {
    const int64_t tiles_r = (a.outer + 127) / 128, ld = (chunks + 3) / 4 * 4;
    for (int64_t u = blockIdx.x; u < tiles_r * chunks; u += gridDim.x) {
      const int64_t rb = u / chunks, c = u % chunks, q = c * 128 + t;
      const int64_t r_end = rb * 128 + 128 < a.outer ? rb * 128 + 128 : a.outer;
      uint32_t amax = 0;
      if (q < a.k)
        for (int64_t r = rb * 128; r < r_end; r++) {
          uint32_t b = gs_f32_bits(bq_load<E>(a.src, r * a.stride_r + q * a.stride_q)) & 0x7FFFFFFFu;
          if (b > amax) amax = b;
        }
      amax = bq_group_max(s_red, t, 128, amax);
      const float scale = bq_pow2_scale(amax, a.fmt);
      gs_fp8_counts n = {0, 0};
      if (q < a.k_pad)
        for (int64_t r = rb * 128; r < r_end; r++) {
          float x = q < a.k ? bq_load<E>(a.src, r * a.stride_r + q * a.stride_q) : 0.0f;
          const uint8_t code = bq_encode(x * scale, a.fmt);
          a.dst[r * a.k_pad + q] = code;
          if (a.stats) gs_fp8_count_scaled(x, x * scale, code, a.fmt, n);
        }
      gs_fp8_block_stats(a.stats, s_red, t, 128, n, (uint32_t)((r_end - rb * 128) * bq_inside(a.k, c * 128, 128)),
                         (uint64_t)u, amax, scale);
      float *sc = (float *)a.scales;
      if (t == 0) sc[c + rb * ld] = 1.0f / scale;
      if (t > 0 && c == chunks - 1 && (int64_t)t < ld - chunks + 1) sc[c + t + rb * ld] = 0.0f;
    }
    return;
  }
  const int mx = a.mode == GS_FP8_BQ_MX32 || a.mode == GS_FP8_BQ_MX32_CEIL;
  const int64_t rows = mx ? (a.outer + 127) / 128 * 128 : a.outer;
  /* MX32: k-blocks padded to a multiple of 4 = whole 128-element chunks */
  const int64_t kblocks = (a.k_pad + 31) / 32;
  for (int64_t u = blockIdx.x; u < rows * chunks; u += gridDim.x) {
    const int64_t r = u / chunks, c = u % chunks, q = c * 128 + t;
    const int live = r < a.outer && q < a.k;
    float x = live ? bq_load<E>(a.src, r * a.stride_r + q * a.stride_q) : 0.0f;
    uint32_t amax = bq_group_max(s_red, t, mx ? 32 : 128, gs_f32_bits(x) & 0x7FFFFFFFu);
    gs_fp8_counts n = {0, 0};
    if (!mx) {
      const float scale = bq_pow2_scale(amax, a.fmt);
      const uint8_t code = bq_encode(x * scale, a.fmt);
      if (q < a.k_pad) a.dst[r * a.k_pad + q] = code;
      if (a.stats && live) gs_fp8_count_scaled(x, x * scale, code, a.fmt, n);
      gs_fp8_block_stats(a.stats, s_red, t, 128, n, (uint32_t)bq_inside(a.k, c * 128, 128), (uint64_t)u, amax, scale);
      if (t == 0) ((float *)a.scales)[r + c * a.outer] = 1.0f / scale;
      continue;
    }
    const int64_t kb = c * 4 + t / 32;
    int e = -127;
    if (amax > 0x7F800000u) e = 128; /* NaN in the block: the scale is NaN (0xFF) */
    else if (amax) e = bq_floor_log2(gs_f32_from_bits(amax)) - (a.fmt == GS_FP8_DEV_E4M3 ? 8 : 15);
    if (e < -127) e = -127;
    /* amax / 2^e is in [2^emax, 2^(emax+1)): above fp8_max, round up */
    if (a.mode == GS_FP8_BQ_MX32_CEIL && amax && e < 127 &&
        gs_f32_from_bits(amax) * bq_pow2(-e) > (a.fmt == GS_FP8_DEV_E4M3 ? 448.0f : 57344.0f))
      e++;
    const float scale = e == 128 ? 1.0f : bq_pow2(-e);
    const float xs = e == 128 ? x : x * scale; /* a NaN block's x as it is (its sign kept) */
    const uint8_t code = bq_encode(xs, a.fmt);
    if (r < a.outer && q < a.k_pad) a.dst[r * a.k_pad + q] = code;
    if (a.stats && live) gs_fp8_count_scaled(x, xs, code, a.fmt, n);
    gs_fp8_block_stats(a.stats, s_red, t, 32, n, (uint32_t)(r < a.outer ? bq_inside(a.k, kb * 32, 32) : 0),
                       (uint64_t)(r * kblocks + kb), amax, scale);
    if (t % 32 == 0) {
      const int64_t tiles_k = (kblocks + 3) / 4;
      const int64_t off = ((r / 128) * tiles_k + kb / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + kb % 4;
      const int real = r < a.outer && kb < kblocks;
      ((uint8_t *)a.scales)[off] = real ? (uint8_t)(e + 127) : 0;
    }
  }
}

#define GS_FP8_BQ_DEFINE(name, E, MODE)                                        \
  extern "C" __global__ void __launch_bounds__(GS_FP8_BQ_THREADS) name(gs_fp8_bq_args args) { \
    bq_body<E>(args);                                                          \
  }
GS_FP8_SCALED_QUANTIZE_KERNELS(GS_FP8_BQ_DEFINE)

#if defined(GS_EMU)
#define GS_FP8_BQ_ENTRY(name, E, MODE) GS_FP8_EMU_ENTRY(name)
GS_FP8_SCALED_QUANTIZE_KERNELS(GS_FP8_BQ_ENTRY)
#endif
