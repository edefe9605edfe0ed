/* fp8_scaled_launch.c: the launcher of the block-scaled quantize kernels
 * (fp8.h's fp8_scaled_quantize; fp8_scaled_quantize.cu). It checks the
 * arguments before touching the driver (CUDA_ERROR_INVALID_VALUE), covers
 * the units with at most GRID_MAX blocks of GS_FP8_BQ_THREADS (the kernel
 * strides over the rest; the fast kernels with one wave of
 * GS_FP8_BQ_BLOCKS_PER_SM blocks a SM) and launches on the caller's stream
 * without synchronising. It picks the kernel: a fast one where the layout
 * allows it and no statistics are counted (fp8_kernels.h), else the
 * general one. The kernels' file is sm_90 PTX, loaded only on devices of
 * capability 9.0 and up: elsewhere kernels_function answers
 * CUDA_ERROR_NOT_SUPPORTED with its reason. */
#include <cuda.h>
#include <library_types.h>
#include <stdint.h>

#include "fp8.h"
#include "fp8_kernels.h"
#include "module.h"

/* Sizes the kernel indexes in int64 without overflow: outer and k_pad up
 * to 2^31 each. */
#define BQ_DIM_MAX ((int64_t)1 << 31)

static int64_t bq_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* By path (fp8_kernels.h's GS_FP8_BQ_GENERAL..ST), then source element. */
static const gs_kernel_id ids[5][3] = {
    [GS_FP8_BQ_GENERAL] = {[GS_ELEM_BF16] = GS_K_gs_fp8_bq_bf16, [GS_ELEM_F16] = GS_K_gs_fp8_bq_f16,
                           [GS_ELEM_F32] = GS_K_gs_fp8_bq_f32},
    [GS_FP8_BQ_K] = {[GS_ELEM_BF16] = GS_K_gs_fp8_bq_k_bf16, [GS_ELEM_F16] = GS_K_gs_fp8_bq_k_f16,
                     [GS_ELEM_F32] = GS_K_gs_fp8_bq_k_f32},
    [GS_FP8_BQ_S] = {[GS_ELEM_BF16] = GS_K_gs_fp8_bq_s_bf16, [GS_ELEM_F16] = GS_K_gs_fp8_bq_s_f16,
                     [GS_ELEM_F32] = GS_K_gs_fp8_bq_s_f32},
    [GS_FP8_BQ_KT] = {[GS_ELEM_BF16] = GS_K_gs_fp8_bq_kt_bf16, [GS_ELEM_F16] = GS_K_gs_fp8_bq_kt_f16,
                      [GS_ELEM_F32] = GS_K_gs_fp8_bq_kt_f32},
    [GS_FP8_BQ_ST] = {[GS_ELEM_BF16] = GS_K_gs_fp8_bq_st_bf16, [GS_ELEM_F16] = GS_K_gs_fp8_bq_st_f16,
                      [GS_ELEM_F32] = GS_K_gs_fp8_bq_st_f32},
};

/* The kernel for a (fp8_kernels.h's conditions for the fast ones), and
 * how many units of its work there are: general 1 x 128 segments or
 * 128 x 128 tiles; _k_ four warps' runs of 4 x 32 16-byte groups of a
 * row; _s_ four warps' 2V-row x 128 pieces; _kt_/_st_ tiles. */
static int bq_path(const gs_fp8_bq_args *a, int e, int64_t *units) {
  const int64_t v = e == GS_ELEM_F32 ? 4 : 8, sz = 16 / v, chunks = bq_cdiv(a->k_pad, 128);
  const int mx = a->mode >= GS_FP8_BQ_MX32, blk = a->mode == GS_FP8_BQ_BLK128;
  const int64_t rows = mx ? bq_cdiv(a->outer, 128) * 128 : a->outer, tiles = bq_cdiv(a->outer, 128) * chunks;
  const int out_ok = !a->stats && (uintptr_t)a->src % 16 == 0 && (uintptr_t)a->dst % 8 == 0 &&
                     (uintptr_t)a->scales % 4 == 0 && a->k_pad % 8 == 0;
  if (out_ok && a->stride_q == 1 && a->stride_r * sz % 16 == 0) {
    *units = blk ? tiles : bq_cdiv(rows * bq_cdiv(a->k_pad, 4 * 32 * v), 4);
    return blk ? GS_FP8_BQ_KT : GS_FP8_BQ_K;
  }
  if (out_ok && a->stride_r == 1 && a->stride_q * sz % 16 == 0) {
    *units = blk ? tiles : bq_cdiv(bq_cdiv(rows, 2 * v) * chunks, 4);
    return blk ? GS_FP8_BQ_ST : GS_FP8_BQ_S;
  }
  *units = blk ? tiles : rows * chunks;
  return GS_FP8_BQ_GENERAL;
}

const char *fp8_scaled_ready(kernel_ctx *kc, int src_type) {
  int e = elem_of(src_type);
  if (e < 0) return "the block-scaled quantize kernels take bf16, fp16 or fp32";
  if (!kc || !kc->ctx) return "no context for the block-scaled quantize kernels";
  CUfunction f;
  const char *why = NULL;
  return kernels_function(kc, ids[GS_FP8_BQ_GENERAL][e], &f, &why) == CUDA_SUCCESS ? NULL
         : why                                                  ? why
                                                                : "the block-scaled quantize kernels did not load";
}

CUresult fp8_scaled_quantize(kernel_ctx *kc, CUstream stream, int src_type, const struct gs_fp8_bq_args *a) {
  int e = elem_of(src_type);
  if (e < 0 || !a || !a->src || !a->dst || !a->scales || a->outer < 1 || a->k < 1 || a->k_pad < a->k ||
      a->outer > BQ_DIM_MAX || a->k_pad > BQ_DIM_MAX || a->stride_r < 0 || a->stride_q < 0 ||
      a->mode < GS_FP8_BQ_VEC128 || a->mode > GS_FP8_BQ_MX32_CEIL ||
      (a->fmt != GS_FP8_DEV_E4M3 && a->fmt != GS_FP8_DEV_E5M2))
    return CUDA_ERROR_INVALID_VALUE;
  if (!kc || !kc->ctx) return CUDA_ERROR_INVALID_CONTEXT;
  int64_t units;
  const int path = bq_path(a, e, &units);
  CUfunction f;
  const char *why = NULL;
  CUresult r = kernels_function(kc, ids[path][e], &f, &why);
  if (r != CUDA_SUCCESS) return r;
  /* The fast kernels are persistent: one wave of GS_FP8_BQ_BLOCKS_PER_SM
   * blocks a SM (their __launch_bounds__) where the SM count is known. */
  const int64_t wave = path != GS_FP8_BQ_GENERAL && kc->sms > 0 ? (int64_t)kc->sms * GS_FP8_BQ_BLOCKS_PER_SM : GRID_MAX;
  const unsigned grid[3] = {(unsigned)min64(min64(units, wave), GRID_MAX), 1, 1};
  const unsigned block[3] = {GS_FP8_BQ_THREADS, 1, 1};
  gs_fp8_bq_args args = *a;
  void *params[] = {&args};
  return kernels_launch(kc, f, grid, block, stream, params);
}
