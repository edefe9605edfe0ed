/* fp8_scaled_launch.c: the launcher of the block-scaled quantize kernels
 * (fp8.h's fp8_scaled_quantize; fp8_scaled_quantize.cu). It checks the
 * arguments before touching the driver (CUDA_ERROR_INVALID_VALUE), covers
 * the units with at most GRID_MAX blocks of GS_FP8_BQ_THREADS (the kernel
 * strides over the rest) and launches on the caller's stream without
 * synchronising. The kernels' file is sm_90 PTX, loaded only on devices of
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

static const gs_kernel_id ids[] = {[GS_ELEM_BF16] = GS_K_gs_fp8_bq_bf16, [GS_ELEM_F16] = GS_K_gs_fp8_bq_f16,
                                   [GS_ELEM_F32] = GS_K_gs_fp8_bq_f32};

const char *fp8_scaled_ready(kernel_ctx *kc, int src_type) {
  int e = elem_of(src_type);
  if (e < 0) return "the block-scaled quantize kernels take bf16, fp16 or fp32";
  if (!kc || !kc->ctx) return "no context for the block-scaled quantize kernels";
  CUfunction f;
  const char *why = NULL;
  return kernels_function(kc, ids[e], &f, &why) == CUDA_SUCCESS ? NULL
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
  const int64_t chunks = bq_cdiv(a->k_pad, 128);
  const int64_t rows = a->mode == GS_FP8_BQ_BLK128 ? bq_cdiv(a->outer, 128)
                       : a->mode >= GS_FP8_BQ_MX32 ? bq_cdiv(a->outer, 128) * 128
                                                   : a->outer;
  CUfunction f;
  const char *why = NULL;
  CUresult r = kernels_function(kc, ids[e], &f, &why);
  if (r != CUDA_SUCCESS) return r;
  const unsigned grid[3] = {(unsigned)min64(rows * chunks, GRID_MAX), 1, 1};
  const unsigned block[3] = {GS_FP8_BQ_THREADS, 1, 1};
  gs_fp8_bq_args args = *a;
  void *params[] = {&args};
  return kernels_launch(kc, f, grid, block, stream, params);
}
