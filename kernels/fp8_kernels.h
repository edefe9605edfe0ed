/* fp8_kernels.h: what the fp8 kernels (fp8_quantize.cu, fp8_gemm.cu,
 * fp8_gemm_mma.cu) and
 * their launchers (fp8_launch.c) share: the ring as device code sees it, the
 * one argument block each kernel takes, the launch shapes and the list of
 * kernels. The list is the only place a kernel is named. C and C++ (device
 * and host builds). */
#ifndef GEMMSHIM_FP8_KERNELS_H
#define GEMMSHIM_FP8_KERNELS_H

#include <stdint.h>

#include "cast.h" /* GS_ELEM_F32 / GS_ELEM_BF16 / GS_ELEM_F16 */

/* fp8.h's gs_fp8_ring, which device code cannot include (it includes
 * cuda.h); fp8_launch.c asserts that the two layouts agree field by field.
 * amax_slot holds non-negative floats as bits, so unsigned max is float max
 * (and a NaN, whose bits are above inf's, wins: the fold then keeps the
 * scale). */
#define GS_FP8_DEV_AMAX_SLOTS 32
typedef struct gs_fp8_ring_dev {
  float scale[2][4]; /* [parity][0]; 16 bytes apart: cuBLASLt took a scale pointer at
                        * 16 bytes, refused one at 4 (docs/gpu-results.md) */
  uint32_t amax_slot[GS_FP8_DEV_AMAX_SLOTS];
  uint32_t blocks_done;
  uint32_t pos;
  uint32_t history;
  uint32_t fmt;
  float margin_pow2;
  float last_amax;
  float hist[];
} gs_fp8_ring_dev;

/* fp8.h's GS_FP8_E4M3 / GS_FP8_E5M2, for device code. */
#define GS_FP8_DEV_E4M3 0
#define GS_FP8_DEV_E5M2 1

/* Quantize (and amax) kernels: 64 x 64 tiles of the source as stored, one
 * block of 256 threads per tile at a time, each block taking every
 * grid-th tile (see fp8_quantize.cu). A launch has at most
 * GS_FP8_Q_BLOCKS_PER_SM blocks per SM of its device (kernel_ctx.sms, the
 * driver's CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), shared by its
 * operands in proportion to their tiles: one wave where 3 fit an SM
 * (__launch_bounds__(256, 3); docs/perf-static.md has the kernels' blocks
 * per SM). Where the count is unknown, GS_FP8_Q_GRID: 3 blocks on each of
 * the 132 SMs of an H100/H200 SXM (NVIDIA's H100 whitepaper). The
 * grid-stride loop covers any count. */
#define GS_FP8_Q_TILE 64
#define GS_FP8_Q_THREADS 256
#define GS_FP8_Q_BLOCKS_PER_SM 3
#define GS_FP8_Q_GRID (GS_FP8_Q_BLOCKS_PER_SM * 132)

/* One operand of a quantize launch. Sizes and strides are in elements,
 * validated by the launcher. */
typedef struct gs_fp8_q_operand {
  const void *src;       /* column-major rows x cols, ld, batch stride */
  uint8_t *dst;          /* TN layout (fp8.h); NULL for the amax kernels */
  gs_fp8_ring_dev *ring; /* its own ring: each operand folds its own amax */
  int64_t rows, cols, ld, stride, batch;
  int64_t tiles_r, tiles_c; /* ceil(rows / 64), ceil(cols / 64) */
  int64_t dst_ld;        /* dst's k stride, >= k (cols when transposing, else rows);
                            k..dst_ld-1 are written as zeros */
  int32_t transpose;     /* dst[r*dst_ld + c] (1) or dst[c*dst_ld + r] (0) */
  int32_t vec_in;        /* src 16-byte aligned, ld and stride too */
  int32_t vec_out;       /* dst and dst_ld 8-byte aligned */
  int32_t blocks;        /* the operand's blocks: op[0] takes the grid's first */
  /* Current-recipe kernels only (GS_FP8_MODE_AMAX_PART, _QUANTIZE_CUR):
   * block b of the amax pass stores its max |x| bits in partial[b], every
   * block of the quantize pass reduces partial[0..blocks) to the step it
   * uses, and its block 0 stores that step in ring->scale[0][0], the one
   * field of the ring they touch. fmt: GS_FP8_DEV_E4M3 / E5M2 (the ring
   * kernels read ring->fmt). */
  uint32_t *partial;
  int32_t fmt, unused;
} gs_fp8_q_operand;

/* Per-block amax slots of one operand in the current recipe: at most
 * this many blocks (GS_FP8_Q_BLOCKS_PER_SM per SM: 341 SMs) per operand. */
#define GS_FP8_CUR_SLOTS 1024

/* Passed by value as the kernel's only parameter: a GEMM's A and B (or one
 * operand), quantized in one launch. Every field is 8 bytes or one of a pair
 * of 4-byte fields, so C (gcc, x86-64) and CUDA C++ (clang, nvptx64) lay it
 * out alike. */
typedef struct gs_fp8_quantize_args {
  gs_fp8_q_operand op[2];
  int32_t parity;        /* quantize with scale[parity] */
  int32_t operands;      /* 1 or 2 */
  struct gs_fp8_op_stats *stats[2]; /* op[i]'s counters (fp8_stats.h), NULL: not counted */
} gs_fp8_quantize_args;

/* GEMM: 64 x 64 output tiles, k in steps of 32, 256 threads each owning a
 * 4 x 4 micro-tile (see fp8_gemm.cu). */
#define GS_FP8_G_BM 64
#define GS_FP8_G_BN 64
#define GS_FP8_G_BK 32
#define GS_FP8_G_THREADS 256

/* Epilogue flags (fp8_launch.c maps cuBLASLt's epilogues onto them). */
#define GS_FP8_EPI_BIAS 1
#define GS_FP8_EPI_RELU 2
#define GS_FP8_EPI_GELU 4

typedef struct gs_fp8_gemm_args {
  const uint8_t *a8;       /* op(A) as k x m, k contiguous; members k*m apart */
  const uint8_t *b8;       /* op(B) as k x n, k contiguous; members k*n apart */
  const float *scale_a, *scale_b; /* device scalars */
  const float *alpha_ptr, *beta_ptr; /* device scalars, or NULL: use alpha/beta */
  const void *c;
  void *d;
  const void *bias;        /* m elements of bias_type, or NULL */
  int64_t m, n, k, batch;
  int64_t ldc, stride_c, ldd, stride_d;
  int64_t tiles_m, tiles_n;
  float alpha, beta;       /* host pointer mode's values */
  int32_t fmt_a, fmt_b;    /* GS_FP8_E4M3 / GS_FP8_E5M2 */
  int32_t c_type, d_type;  /* GS_ELEM_* */
  int32_t bias_type, epilogue; /* GS_ELEM_*, GS_FP8_EPI_* flags */
  int32_t vec_k, unused;   /* A8/B8 16-byte aligned and k % 16 == 0 */
} gs_fp8_gemm_args;

/* X(name, source element, mode). The quantize list is defined by
 * fp8_quantize.cu, the GEMM list by fp8_gemm.cu; the launcher looks up
 * every kernel of GS_FP8_KERNELS in the module.
 *
 * Ring kernels (the delayed recipe, fp8_sites.c): QUANTIZE quantizes with
 * ring->scale[parity] and folds its amax into the ring (atomics and a
 * last-block counter), counting fp8_stats.h's statistics where given
 * counters (a branch uniform over the launch); AMAX_INIT measures and
 * publishes scale[parity]. Current-recipe kernels (write-only,
 * docs/graphs.md): AMAX_PART stores each block's amax in its own slot;
 * QUANTIZE_CUR reduces the slots and quantizes, with no counting code,
 * or, marked GS_FP8_MODE_STATS (`_stats`, compared calls), counting.
 * Why the ring kernels have no such split: docs/fp8.md, "fp8_quantize.cu:
 * tiles and the fold". */
#define GS_FP8_MODE_QUANTIZE 0
#define GS_FP8_MODE_AMAX_INIT 1
#define GS_FP8_MODE_GEMM 2
#define GS_FP8_MODE_AMAX_PART 3
#define GS_FP8_MODE_QUANTIZE_CUR 4
#define GS_FP8_MODE_STATS 8
/* One kernel for each source element: pre_bf16post, pre_f16post, pre_f32post. */
#define GS_FP8_Q3(X, pre, post, mode)                                          \
  X(pre##_bf16##post, GS_ELEM_BF16, mode)                                      \
  X(pre##_f16##post, GS_ELEM_F16, mode)                                        \
  X(pre##_f32##post, GS_ELEM_F32, mode)
/* gs_fp8_quantize_bf16, gs_fp8_amax_init_bf16, gs_fp8_quantize_cur_bf16,
 * gs_fp8_quantize_cur_bf16_stats, gs_fp8_amax_part_bf16, and the same for
 * f16 and f32. */
#define GS_FP8_QUANTIZE_KERNELS(X)                                             \
  GS_FP8_Q3(X, gs_fp8_quantize, , GS_FP8_MODE_QUANTIZE)                        \
  GS_FP8_Q3(X, gs_fp8_amax_init, , GS_FP8_MODE_AMAX_INIT)                      \
  GS_FP8_Q3(X, gs_fp8_quantize_cur, , GS_FP8_MODE_QUANTIZE_CUR)                \
  GS_FP8_Q3(X, gs_fp8_quantize_cur, _stats, GS_FP8_MODE_QUANTIZE_CUR | GS_FP8_MODE_STATS) \
  GS_FP8_Q3(X, gs_fp8_amax_part, , GS_FP8_MODE_AMAX_PART)
/* The same quantize kernels for sm_89+ (fp8_quantize_sm89.cu: the
 * hardware fp8 conversion), their own module, loaded only there:
 * gs_fp8_quantize_bf16_sm89, gs_fp8_quantize_cur_bf16_sm89,
 * gs_fp8_quantize_cur_bf16_sm89_stats, and the same for f16 and f32. */
#define GS_FP8_QUANTIZE_SM89_KERNELS(X)                                        \
  GS_FP8_Q3(X, gs_fp8_quantize, _sm89, GS_FP8_MODE_QUANTIZE)                   \
  GS_FP8_Q3(X, gs_fp8_quantize_cur, _sm89, GS_FP8_MODE_QUANTIZE_CUR)           \
  GS_FP8_Q3(X, gs_fp8_quantize_cur, _sm89_stats, GS_FP8_MODE_QUANTIZE_CUR | GS_FP8_MODE_STATS)
/* The current recipe's fast kernels (fp8_current_fast.h), in the same
 * module: the same arguments, grid and results as gs_fp8_amax_part_* and
 * gs_fp8_quantize_cur_*_sm89, for operands with vec_in set (and vec_out,
 * quantizing) and rows and columns below 2^31 (fp8_launch.c checks); no
 * statistics. amax_part_v serves any transpose, quantize_cur_v both
 * (k-contiguous and k-strided, per operand): gs_fp8_amax_part_v_bf16_sm89,
 * gs_fp8_quantize_cur_v_bf16_sm89, and the same for f16 and f32. */
#define GS_FP8_CUR_AMAX_V 0
#define GS_FP8_CUR_QUANTIZE_V 1
#define GS_FP8_CUR_FAST_KERNELS(X)                                             \
  GS_FP8_Q3(X, gs_fp8_amax_part_v, _sm89, GS_FP8_CUR_AMAX_V)                   \
  GS_FP8_Q3(X, gs_fp8_quantize_cur_v, _sm89, GS_FP8_CUR_QUANTIZE_V)
/* Everything fp8_quantize_sm89.cu defines (module.h). */
#define GS_FP8_QUANTIZE_SM89_MODULE(X) GS_FP8_QUANTIZE_SM89_KERNELS(X) GS_FP8_CUR_FAST_KERNELS(X)
#define GS_FP8_GEMM_KERNELS(X) X(gs_fp8_gemm, GS_ELEM_F32, GS_FP8_MODE_GEMM)
#define GS_FP8_KERNELS(X) GS_FP8_QUANTIZE_KERNELS(X) GS_FP8_GEMM_KERNELS(X)
/* The tensor-core GEMM (fp8_gemm_mma.cu, sm_89 PTX): the same arguments and
 * launch shape as gs_fp8_gemm, its own module. */
#define GS_FP8_GEMM_MMA_KERNELS(X) X(gs_fp8_gemm_mma, GS_ELEM_F32, GS_FP8_MODE_GEMM)

/* Block-scaled quantize (fp8_scaled_quantize.cu): an operand as outer x k
 * (element (r, q) at src[r * stride_r + q * stride_q]) to fp8, k-contiguous
 * with k_pad columns (zeros past k), and its scale tensor in the layout of
 * cuBLASLt's VEC128_32F, BLK128x128_32F or VEC32_UE8M0 mode. */
#define GS_FP8_BQ_VEC128 0
#define GS_FP8_BQ_BLK128 1
#define GS_FP8_BQ_MX32 2
/* MX32 with TransformerEngine's scale rounding (fp8_scaled_quantize.cu) */
#define GS_FP8_BQ_MX32_CEIL 3
#define GS_FP8_BQ_THREADS 128
typedef struct gs_fp8_bq_args {
  const void *src;
  uint8_t *dst;
  void *scales;
  int64_t outer, k, k_pad, stride_r, stride_q;
  int32_t mode, fmt;     /* GS_FP8_BQ_*, GS_FP8_DEV_E4M3 / E5M2 */
  struct gs_fp8_op_stats *stats; /* counters of a compared call (fp8_stats.h), NULL: none */
} gs_fp8_bq_args;
/* Five kernels a source type, the same results (fp8_scaled_quantize.cu):
 * the general one (gs_fp8_bq_<type>) takes any strides and counts a
 * compared call's statistics; the fast ones need stats NULL, src 16-byte
 * aligned, dst 8, scales 4, k_pad a multiple of 8, and either stride_q 1
 * with stride_r a whole number of 16-byte groups (_k_, _kt_: k-contiguous)
 * or stride_r 1 with stride_q so (_s_, _st_: k-strided); _k_ and _s_ take
 * VEC128 and MX32, _kt_ and _st_ BLK128. fp8_scaled_launch.c picks. */
#define GS_FP8_BQ_GENERAL 0
#define GS_FP8_BQ_K 1  /* k-contiguous, 1 x 128 / 1 x 32 */
#define GS_FP8_BQ_S 2  /* k-strided, 1 x 128 / 1 x 32 */
#define GS_FP8_BQ_KT 3 /* k-contiguous, 128 x 128 */
#define GS_FP8_BQ_ST 4 /* k-strided, 128 x 128 */
/* The fast kernels' residency (__launch_bounds__ minimum blocks a SM): the
 * launcher's persistent grid is this many blocks a SM. */
#define GS_FP8_BQ_BLOCKS_PER_SM 6
#define GS_FP8_SCALED_QUANTIZE_KERNELS(X)                                      \
  X(gs_fp8_bq_bf16, GS_ELEM_BF16, GS_FP8_BQ_GENERAL)                           \
  X(gs_fp8_bq_f16, GS_ELEM_F16, GS_FP8_BQ_GENERAL)                             \
  X(gs_fp8_bq_f32, GS_ELEM_F32, GS_FP8_BQ_GENERAL)                             \
  X(gs_fp8_bq_k_bf16, GS_ELEM_BF16, GS_FP8_BQ_K)                               \
  X(gs_fp8_bq_k_f16, GS_ELEM_F16, GS_FP8_BQ_K)                                 \
  X(gs_fp8_bq_k_f32, GS_ELEM_F32, GS_FP8_BQ_K)                                 \
  X(gs_fp8_bq_s_bf16, GS_ELEM_BF16, GS_FP8_BQ_S)                               \
  X(gs_fp8_bq_s_f16, GS_ELEM_F16, GS_FP8_BQ_S)                                 \
  X(gs_fp8_bq_s_f32, GS_ELEM_F32, GS_FP8_BQ_S)                                 \
  X(gs_fp8_bq_kt_bf16, GS_ELEM_BF16, GS_FP8_BQ_KT)                             \
  X(gs_fp8_bq_kt_f16, GS_ELEM_F16, GS_FP8_BQ_KT)                               \
  X(gs_fp8_bq_kt_f32, GS_ELEM_F32, GS_FP8_BQ_KT)                               \
  X(gs_fp8_bq_st_bf16, GS_ELEM_BF16, GS_FP8_BQ_ST)                             \
  X(gs_fp8_bq_st_f16, GS_ELEM_F16, GS_FP8_BQ_ST)                               \
  X(gs_fp8_bq_st_f32, GS_ELEM_F32, GS_FP8_BQ_ST)

/* The layouts must not depend on the compiler: checked in every build
 * (gcc for the launchers, clang for the device, g++ for the host kernels). */
#if defined(__cplusplus)
static_assert(sizeof(gs_fp8_quantize_args) == 264, "gs_fp8_quantize_args has padding");
static_assert(sizeof(gs_fp8_gemm_args) == 192, "gs_fp8_gemm_args has padding");
static_assert(sizeof(gs_fp8_bq_args) == 80, "gs_fp8_bq_args has padding");
#else
_Static_assert(sizeof(gs_fp8_quantize_args) == 264, "gs_fp8_quantize_args has padding");
_Static_assert(sizeof(gs_fp8_gemm_args) == 192, "gs_fp8_gemm_args has padding");
_Static_assert(sizeof(gs_fp8_bq_args) == 80, "gs_fp8_bq_args has padding");
#endif

#endif
