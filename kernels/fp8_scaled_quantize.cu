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
 *     (as does padding), a block holding Inf or NaN the NaN scale 0xFF
 *     (bq_mx_special). Elements are x / 2^e, encoded with saturation.
 *     GS_FP8_BQ_MX32_CEIL is the same layout with TransformerEngine's
 *     rounding (its MXFP8 documentation: float_to_e8m0(amax / max_norm),
 *     rounded up): e = ceil(log2(amax / fp8_max)), one more than the
 *     spec's when amax / 2^e would exceed fp8_max, so nothing saturates.
 * Each block's amax is local to the warp or thread block that quantizes
 * it: one pass over the source (a 128 x 128 tile is read twice; the second
 * read is expected to hit L2: 32 KiB of bf16 per tile, not measured).
 *
 * Five kernels a source type (fp8_kernels.h; fp8_scaled_launch.c picks):
 * the general one, a thread block of 128 threads per unit (a 1 x 128
 * segment for VEC128 and MX32, a 128 x 128 tile for BLK128), thread t at
 * k index c * 128 + t, grid-stride, any strides, and the only one that
 * counts a compared call's statistics (a non-NULL stats, fp8_stats.h's
 * helpers); and four fast ones for aligned layouts ("the fast paths"
 * below), persistent, 16-byte loads, the same bytes. */
#include "fp8_block.h"
#include "fp8_convert.h"
#include "fp8_kernels.h"
#include "fp8_stats.h"
#include "fp8_vec.h"

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

/* The E8M0 exponent of an MX block whose amax is Inf or NaN (amax bits
 * >= 0x7F800000), where floor(log2(amax)) means nothing. OCP MX spec
 * v1.0, 6.3, as its reference implementation (microsoft/microxcaling,
 * mx/mx_ops.py _quantize_mx) computes it: a shared exponent above the
 * E8M0 range is NaN, so a block holding Inf or NaN gets the NaN scale
 * 0xFF (128 here), and every element of a NaN-scaled block reads as
 * NaN whatever its code. MX32_CEIL follows TransformerEngine's
 * float_to_e8m0 (transformer_engine/common/utils.cuh): NaN -> 0xFF,
 * Inf -> 0xFE (127; also what cvt.rp.satfinite.ue8m0x2.f32 gives Inf). */
static __device__ __forceinline__ int bq_mx_special(uint32_t amax, int ceil_mode) {
  return amax == 0x7F800000u && ceil_mode ? 127 : 128;
}

/* The E8M0 exponent of an MX block from its amax (bits), for the general
 * and the fast paths: 128 is the NaN scale 0xFF. Clamped to the E8M0
 * range; TE's rounding (ceil_mode) takes one more where amax / 2^e, in
 * [2^emax, 2^(emax+1)), is above fp8_max. */
static __device__ __forceinline__ int bq_mx_exp(uint32_t amax, int fmt, int ceil_mode) {
  int e = -127;
  if (amax >= 0x7F800000u) return bq_mx_special(amax, ceil_mode);
  if (amax) e = bq_floor_log2(gs_f32_from_bits(amax)) - (fmt == GS_FP8_DEV_E4M3 ? 8 : 15);
  if (e < -127) e = -127;
  if (ceil_mode && amax && e < 127 && gs_f32_from_bits(amax) * bq_pow2(-e) > (fmt == GS_FP8_DEV_E4M3 ? 448.0f : 57344.0f))
    e++;
  return e;
}

/* The general path: one unit (a 1 x 128 segment, or a 128 x 128 tile) per
 * block iteration, thread t at k index c * 128 + t, scalar loads. It takes
 * what the fast paths below do not (sources or outputs not aligned for
 * vector accesses, neither stride 1) and every compared call (a non-NULL
 * stats: the counting lives here only). */
template <int E> static __device__ void bq_generic(const gs_fp8_bq_args &a) {
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
    const int e = bq_mx_exp(amax, a.fmt, a.mode == GS_FP8_BQ_MX32_CEIL);
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


/* ---- the fast paths ---------------------------------------------------------
 * For a source whose rows (k-contiguous: stride_q 1) or columns (stride_r
 * 1) start on 16 bytes, and an output whose rows start on 8: every load is
 * 16 bytes (BQ_V elements: 8 of bf16/fp16, 4 of fp32), every data store 8
 * bytes of codes (4 for fp32 k-contiguous), block maxima go through warp
 * shuffles (no shared memory but a 4-word exchange per 128 x 128 tile),
 * and the grid is persistent: each warp walks its units with the next
 * unit's loads issued before the current one's maxima and encode. The
 * results are the general path's, bit for bit: the same maxima (taken on
 * the raw bits, which order as the widened fp32 magnitudes do), the same
 * scales from bq_pow2_scale / the E8M0 rule, and the same codes (cvt
 * .rn.satfinite equals gs_f32_to_fp8_sat away from NaN, fp8_convert.h; a
 * group holding a NaN is encoded by the general path's expression). */
/* perf-report's SASS count (kernels.mk, fp8_scaled_quantize_count*.ptx):
 * the fast paths as NaN-free E4M3 data in one mode runs them, the other
 * modes', format's and the NaN branches compiled out (GS_FP8_BQ_COUNT is
 * the mode). Never loaded. */
#if defined(GS_FP8_BQ_COUNT)
#define BQ_MODE(a) GS_FP8_BQ_COUNT
#define BQ_FMT(a) GS_FP8_DEV_E4M3
#define BQ_HAS_NAN(key, inf) 0
#else
#define BQ_MODE(a) ((a).mode)
#define BQ_FMT(a) ((a).fmt)
#define BQ_HAS_NAN(key, inf) ((key) > (inf))
#endif

/* Codes of n (2..8) elements raw(i), byte i = element i: x * scale, or
 * for a group whose key is a NaN's the general path's own expression
 * (keep: an MX block holding a NaN encodes x itself). */
template <int E, int N, typename F>
static __device__ __forceinline__ uint64_t bq_encode_n(F raw, uint32_t key, float scale, int fmt, int keep) {
  uint64_t codes = 0;
  (void)key;
  if (BQ_HAS_NAN(key, fp8v_src<E>::INF)) {
GS_FP8_UNROLL
    for (int i = 0; i < N; i++) {
      const float x = fp8v_widen_exact<E>(raw(i));
      codes |= (uint64_t)bq_encode(keep ? x : x * scale, fmt) << (8 * i);
    }
    return codes;
  }
GS_FP8_UNROLL
  for (int p = 0; p < N / 2; p++)
    codes |= (uint64_t)fp8v_cvt_x2(fp8v_widen<E>(raw(2 * p + 1)) * scale, fp8v_widen<E>(raw(2 * p)) * scale, fmt)
             << (16 * p);
  return codes;
}

/* Maximum over the lanes of an aligned group of 2^n lanes (masks 1..m). */
static __device__ __forceinline__ uint32_t bq_lanes_max(uint32_t v, unsigned m) {
  for (unsigned h = 1; h <= m; h *= 2) {
    const uint32_t o = gs_fp8_shfl_xor(v, h);
    v = o > v ? o : v;
  }
  return v;
}

/* 1 x 128 segments (VEC128) and 32-element blocks (MX32), k-contiguous
 * source. A warp unit is U x 32 x V consecutive k indices of one row: lane
 * l's group j starts at q = cu * SPAN + (j * 32 + l) * V, so a segment is
 * 128 / V lanes and an MX block 32 / V. Rows run to a multiple of 128 for
 * MX (the padding rows' scales are zeros). */
#define BQ_U 4
template <int E> static __device__ __forceinline__ void bq_k_rows(const gs_fp8_bq_args &a) {
  constexpr int V = fp8v_src<E>::V, SZ = fp8v_src<E>::SZ, SPAN = BQ_U * 32 * V;
  const unsigned l = threadIdx.x % 32, w = threadIdx.x / 32;
  const int mode = BQ_MODE(a), fmt = BQ_FMT(a);
  const int mx = mode >= GS_FP8_BQ_MX32, ceil_mode = mode == GS_FP8_BQ_MX32_CEIL;
  const int64_t rows = mx ? (a.outer + 127) / 128 * 128 : a.outer, upr = (a.k_pad + SPAN - 1) / SPAN;
  const int64_t units = (rows * upr + 3) / 4; /* a block's unit: its 4 warps' units */
  const int64_t kblocks = (a.k_pad + 31) / 32, tiles_k = (a.k_pad + 127) / 128;
  const char *src = (const char *)a.src;
  fp8v_walk at;
  at.init((int64_t)blockIdx.x * 4 + w, (int64_t)gridDim.x * 4, upr);
  gs_u32x4 cur[BQ_U], nxt[BQ_U];
  auto load = [&](const fp8v_walk &p, gs_u32x4 *g) __attribute__((always_inline)) {
GS_FP8_UNROLL
    for (int j = 0; j < BQ_U; j++) {
      const int64_t q = p.minor * SPAN + (j * 32 + l) * V;
      g[j] = gs_u32x4{{0, 0, 0, 0}};
      if (p.major < a.outer && q < a.k) g[j] = fp8v_ld<E>(src + (p.major * a.stride_r + q) * SZ, a.k - q);
    }
  };
  load(at, cur);
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    fp8v_walk next = at;
    next.step();
    load(next, nxt); /* in flight while this unit is reduced and encoded */
    const int64_t r = at.major;
GS_FP8_UNROLL
    for (int j = 0; j < BQ_U; j++) {
      const int64_t q = at.minor * SPAN + (j * 32 + l) * V;
      uint32_t key = 0;
GS_FP8_UNROLL
      for (int i = 0; i < V; i++) {
        const uint32_t kk = fp8v_key<E>(fp8v_raw<E>(cur[j], i));
        key = kk > key ? kk : key;
      }
      const uint32_t blk = bq_lanes_max(key, (mx ? 32 : 128) / V / 2);
      const uint32_t amax = fp8v_key_amax<E>(blk);
      const int live = r < rows && q < a.k_pad;
      int e = 0;
      float scale;
      if (!mx) scale = bq_pow2_scale(amax, fmt);
      else e = bq_mx_exp(amax, fmt, ceil_mode), scale = e == 128 ? 1.0f : bq_pow2(-e);
      const gs_u32x4 g = cur[j];
      const uint64_t codes = bq_encode_n<E, V>([&](int i) __attribute__((always_inline)) { return fp8v_raw<E>(g, i); }, key, scale, fmt, e == 128);
      if (live && r < a.outer) {
        if constexpr (V == 8) gs_st8(a.dst + r * a.k_pad + q, codes);
        else *(uint32_t *)(a.dst + r * a.k_pad + q) = (uint32_t)codes;
      }
      if (!mx) {
        if (live && q % 128 == 0) ((float *)a.scales)[r + q / 128 * a.outer] = 1.0f / scale;
        continue;
      }
      /* the segment's four E8M0 bytes, one word of the 128 x 4 tile */
      const int64_t kb = q / 32;
      const uint32_t code = r < a.outer && kb < kblocks ? (uint32_t)(e + 127) & 0xFFu : 0u;
      uint32_t word = code;
GS_FP8_UNROLL
      for (int b = 1; b < 4; b++) word |= gs_fp8_shfl_idx(code, l + b * (32 / V)) << (8 * b);
      if (live && q % 128 == 0) {
        const int64_t off = ((r / 128) * tiles_k + q / 128) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4;
        *(uint32_t *)((uint8_t *)a.scales + off) = word;
      }
    }
GS_FP8_UNROLL
    for (int j = 0; j < BQ_U; j++) cur[j] = nxt[j];
    at = next;
  }
}

/* The same for a source with stride_r 1 (k-strided: the caller's matrix
 * not transposed). A warp unit is 2V rows x 128 k: lane l holds the 8 k
 * indices c * 128 + (l % 16) * 8 + j (its 8 loads, j = 0..7) of the V rows
 * r0 + (l / 16) * V + i, so each row's 8 codes leave as one 8-byte store,
 * a segment's maximum is over the 16 lanes of a half-warp and an MX
 * block's over 4. Units run down the rows, chunk by chunk. */
template <int E> static __device__ __forceinline__ void bq_s_rows(const gs_fp8_bq_args &a) {
  constexpr int V = fp8v_src<E>::V, SZ = fp8v_src<E>::SZ, RW = 2 * V;
  const unsigned l = threadIdx.x % 32, w = threadIdx.x / 32, ql = l % 16;
  const int mode = BQ_MODE(a), fmt = BQ_FMT(a);
  const int mx = mode >= GS_FP8_BQ_MX32, ceil_mode = mode == GS_FP8_BQ_MX32_CEIL;
  const int64_t rows = mx ? (a.outer + 127) / 128 * 128 : a.outer, chunks = (a.k_pad + 127) / 128;
  const int64_t rtiles = (rows + RW - 1) / RW, units = (rtiles * chunks + 3) / 4;
  const int64_t kblocks = (a.k_pad + 31) / 32;
  const char *src = (const char *)a.src;
  fp8v_walk at; /* major: chunk, minor: row tile */
  at.init((int64_t)blockIdx.x * 4 + w, (int64_t)gridDim.x * 4, rtiles);
  gs_u32x4 cur[8];
  auto load = [&](const fp8v_walk &p, gs_u32x4 *g) __attribute__((always_inline)) {
    const int64_t q0 = p.major * 128 + ql * 8, r0 = p.minor * RW + (l / 16) * V;
GS_FP8_UNROLL
    for (int j = 0; j < 8; j++) {
      g[j] = gs_u32x4{{0, 0, 0, 0}};
      if (p.major < chunks && r0 < a.outer && q0 + j < a.k)
        g[j] = fp8v_ld<E>(src + ((q0 + j) * a.stride_q + r0) * SZ, a.outer - r0);
    }
  };
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x, at.step()) {
    load(at, cur);
    const int64_t c = at.major, q0 = c * 128 + ql * 8, r0 = at.minor * RW + (l / 16) * V;
GS_FP8_UNROLL
    for (int i = 0; i < V; i++) {
      const int64_t r = r0 + i;
      uint32_t key = 0;
GS_FP8_UNROLL
      for (int j = 0; j < 8; j++) {
        const uint32_t kk = fp8v_key<E>(fp8v_raw<E>(cur[j], i));
        key = kk > key ? kk : key;
      }
      const uint32_t amax = fp8v_key_amax<E>(bq_lanes_max(key, mx ? 2 : 8));
      int e = 0;
      float scale;
      if (!mx) scale = bq_pow2_scale(amax, fmt);
      else e = bq_mx_exp(amax, fmt, ceil_mode), scale = e == 128 ? 1.0f : bq_pow2(-e);
      const uint64_t codes =
          bq_encode_n<E, 8>([&](int j) __attribute__((always_inline)) { return fp8v_raw<E>(cur[j], i); }, key, scale, fmt, e == 128);
      const int live = c < chunks && r < rows;
      if (live && r < a.outer && q0 < a.k_pad) gs_st8(a.dst + r * a.k_pad + q0, codes);
      if (!mx) {
        if (live && ql == 0) ((float *)a.scales)[r + c * a.outer] = 1.0f / scale;
        continue;
      }
      const int64_t kb = q0 / 32;
      const uint32_t code = r < a.outer && kb < kblocks ? (uint32_t)(e + 127) & 0xFFu : 0u;
      uint32_t word = code;
GS_FP8_UNROLL
      for (int b = 1; b < 4; b++) word |= gs_fp8_shfl_idx(code, l + 4 * b) << (8 * b);
      if (live && ql == 0) {
        const int64_t off = ((r / 128) * chunks + c) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4;
        *(uint32_t *)((uint8_t *)a.scales + off) = word;
      }
    }
  }
}

/* 128 x 128 tiles (BLK128), either layout: a block per tile, warp w on its
 * rows w * 32 .. w * 32 + 31, in the lane arrangement of bq_k_rows (a row
 * per 128 / V lanes) or bq_s_rows (2V rows x 128 per 8 loads). The
 * maximum needs the whole tile before anything is encoded: the first
 * pass keeps 8 loads in flight a thread, the block's maximum goes
 * through 4 words of shared memory, and the second pass reads the tile
 * again (32-64 KiB a tile, expected from L2: not measured). */
template <int E, int KC> static __device__ __forceinline__ void bq_tiles(const gs_fp8_bq_args &a) {
  constexpr int V = fp8v_src<E>::V, SZ = fp8v_src<E>::SZ;
  /* loads a thread per tile: k-contiguous 32 rows x 128 / (32 V) each;
   * strided 32 / (2V) pieces of 8 */
  constexpr int NL = KC ? 32 * 128 / (32 * V) : 32 / (2 * V) * 8;
  __shared__ uint32_t s_max[GS_FP8_BQ_THREADS / 32];
  const unsigned t = threadIdx.x, l = t % 32, w = t / 32;
  const int64_t chunks = (a.k_pad + 127) / 128, tiles_r = (a.outer + 127) / 128, ld = (chunks + 3) / 4 * 4;
  const char *src = (const char *)a.src;
  fp8v_walk at; /* major: row tile, minor: chunk */
  at.init(blockIdx.x, gridDim.x, chunks);
  /* load n of the thread in tile (rb, c): its row r and k index q from
   * the thread's first (r0, q0); the group runs along k (k-contiguous) or
   * along r (strided) */
  constexpr int DR = KC ? 32 * V / 128 : 2 * V; /* rows between loads (pieces) */
  int64_t r0 = 0, q0 = 0;
  const char *base = src;
  auto where = [&](int n, int64_t &r, int64_t &q) __attribute__((always_inline)) {
    r = r0 + (KC ? n : n / 8) * DR;
    q = q0 + (KC ? 0 : n % 8);
  };
  auto load = [&](int n) __attribute__((always_inline)) {
    int64_t r, q;
    where(n, r, q);
    gs_u32x4 g = {{0, 0, 0, 0}};
    if (r < a.outer && q < a.k) {
      if (KC) g = fp8v_ld<E>(base + (int64_t)n * DR * a.stride_r * SZ, a.k - q);
      else g = fp8v_ld<E>(base + ((n % 8) * a.stride_q + (n / 8) * DR) * SZ, a.outer - r);
    }
    return g;
  };
  for (int64_t u = blockIdx.x; u < tiles_r * chunks; u += gridDim.x, at.step()) {
    r0 = at.major * 128 + w * 32 + (KC ? l / (128 / V) : (l / 16) * V);
    q0 = at.minor * 128 + (KC ? (l % (128 / V)) * V : (l % 16) * 8);
    base = src + (KC ? r0 * a.stride_r + q0 : q0 * a.stride_q + r0) * SZ;
    uint32_t key = 0;
GS_FP8_NO_UNROLL
    for (int p = 0; p < NL / 8; p++) {
      gs_u32x4 g[8];
GS_FP8_UNROLL
      for (int j = 0; j < 8; j++) g[j] = load(p * 8 + j); /* 8 in flight */
GS_FP8_UNROLL
      for (int j = 0; j < 8; j++)
GS_FP8_UNROLL
        for (int i = 0; i < V; i++) {
          const uint32_t kk = fp8v_key<E>(fp8v_raw<E>(g[j], i));
          key = kk > key ? kk : key;
        }
    }
    key = bq_lanes_max(key, 16);
    if (l == 0) s_max[w] = key;
    __syncthreads();
    uint32_t amax = 0;
GS_FP8_UNROLL
    for (int i = 0; i < GS_FP8_BQ_THREADS / 32; i++) amax = s_max[i] > amax ? s_max[i] : amax;
    __syncthreads(); /* s_max is the next tile's */
    amax = fp8v_key_amax<E>(amax);
    const float scale = bq_pow2_scale(amax, a.fmt);
    if (KC) {
GS_FP8_UNROLL_8
      for (int n = 0; n < NL; n++) {
        int64_t r, q;
        where(n, r, q);
        const gs_u32x4 g = load(n);
        uint32_t gk = 0;
GS_FP8_UNROLL
        for (int i = 0; i < V; i++) {
          const uint32_t kk = fp8v_key<E>(fp8v_raw<E>(g, i));
          gk = kk > gk ? kk : gk;
        }
        const uint64_t codes = bq_encode_n<E, V>([&](int i) __attribute__((always_inline)) { return fp8v_raw<E>(g, i); }, gk, scale, a.fmt, 0);
        if (r < a.outer && q < a.k_pad) {
          if constexpr (V == 8) gs_st8(a.dst + r * a.k_pad + q, codes);
          else *(uint32_t *)(a.dst + r * a.k_pad + q) = (uint32_t)codes;
        }
      }
    } else {
GS_FP8_NO_UNROLL
      for (int p = 0; p < NL / 8; p++) {
        gs_u32x4 g[8];
GS_FP8_UNROLL
        for (int j = 0; j < 8; j++) g[j] = load(p * 8 + j);
        int64_t pr, pq;
        where(p * 8, pr, pq);
GS_FP8_UNROLL
        for (int i = 0; i < V; i++) {
          uint32_t gk = 0;
GS_FP8_UNROLL
          for (int j = 0; j < 8; j++) {
            const uint32_t kk = fp8v_key<E>(fp8v_raw<E>(g[j], i));
            gk = kk > gk ? kk : gk;
          }
          const uint64_t codes = bq_encode_n<E, 8>([&](int j) __attribute__((always_inline)) { return fp8v_raw<E>(g[j], i); }, gk, scale, a.fmt, 0);
          if (pr + i < a.outer && pq < a.k_pad) gs_st8(a.dst + (pr + i) * a.k_pad + pq, codes);
        }
      }
    }
    const int64_t c = at.minor, rb = at.major;
    float *sc = (float *)a.scales;
    if (t == 0) sc[c + rb * ld] = 1.0f / scale;
    if (t > 0 && c == chunks - 1 && (int64_t)t < ld - chunks + 1) sc[c + t + rb * ld] = 0.0f;
  }
}

/* The fast kernels take the layout their name says (fp8_kernels.h; the
 * launcher checks it) and ignore stats; the general one takes anything.
 * The general one has no minimum residency (0: none), so ptxas keeps it
 * at the 32 registers it picks unasked; a minimum of 1 gives it 48. */
template <int E, int PATH> static __device__ __forceinline__ void bq_entry(const gs_fp8_bq_args &a) {
  if constexpr (PATH == GS_FP8_BQ_GENERAL) bq_generic<E>(a);
  else if constexpr (PATH == GS_FP8_BQ_K) bq_k_rows<E>(a);
  else if constexpr (PATH == GS_FP8_BQ_S) bq_s_rows<E>(a);
  else bq_tiles<E, PATH == GS_FP8_BQ_KT>(a);
}

#define GS_FP8_BQ_DEFINE(name, E, PATH)                                        \
  extern "C" __global__ void __launch_bounds__(GS_FP8_BQ_THREADS,             \
                                               PATH == GS_FP8_BQ_GENERAL ? 0 : GS_FP8_BQ_BLOCKS_PER_SM) \
      name(gs_fp8_bq_args args) {                                              \
    bq_entry<E, PATH>(args);                                                   \
  }
GS_FP8_SCALED_QUANTIZE_KERNELS(GS_FP8_BQ_DEFINE)

#if defined(GS_EMU)
#define GS_FP8_BQ_ENTRY(name, E, PATH) GS_FP8_EMU_ENTRY(name)
GS_FP8_SCALED_QUANTIZE_KERNELS(GS_FP8_BQ_ENTRY)
#endif
