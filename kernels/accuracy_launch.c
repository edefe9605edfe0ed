/* accuracy_launch.c: the launcher of the accuracy kernels (kernels.h,
 * accuracy.cu): one gs_acc_partial launch of at most GS_ACC_PARTIALS
 * blocks, then the one-block fold. */
#include <library_types.h>
#include <stdint.h>

#include "accuracy_kernels.h"
#include "kernels.h"
#include "module.h"

static CUresult launch(kernel_ctx *kc, CUstream stream, gs_kernel_id id, unsigned blocks, void *args) {
  CUfunction f;
  const char *why = NULL;
  CUresult r = kernels_function(kc, id, &f, &why);
  if (r != CUDA_SUCCESS) return r;
  const unsigned grid[3] = {blocks, 1, 1}, block[3] = {GS_ACC_THREADS, 1, 1};
  void *params[] = {args};
  return kernels_launch(kc, f, grid, block, stream, params);
}

CUresult kernel_accuracy(kernel_ctx *kc, CUstream stream, int type, const void *route, const void *native,
                         int64_t ld, int64_t stride, int64_t rows, int64_t cols, int64_t batch,
                         gs_acc_partial *partials, gs_acc_stats *out) {
  const int elem = elem_of(type);
  if (!kc || elem < 0 || !route || !native || !partials || !out || rows < 0 || cols < 0 || batch < 0 || ld < rows ||
      (batch > 1 && stride < 0))
    return CUDA_ERROR_INVALID_VALUE;
  int64_t total;
  if (__builtin_mul_overflow(rows, cols, &total) || __builtin_mul_overflow(total, batch, &total))
    return CUDA_ERROR_INVALID_VALUE;
  /* One block per 4096 elements, at most GS_ACC_PARTIALS; at least one, so
   * the fold always has a partial (an empty output gives zeros). */
  int64_t blocks = (total + 4095) / 4096;
  if (blocks < 1) blocks = 1;
  if (blocks > GS_ACC_PARTIALS) blocks = GS_ACC_PARTIALS;
  gs_acc_args a = {.route = route, .native = native, .ld = ld, .stride = batch > 1 ? stride : 0,
                   .rows = rows, .cols = cols, .batch = batch, .elem = elem, .partials = partials};
  CUresult r = launch(kc, stream, GS_K_gs_acc_partial_kernel, (unsigned)blocks, &a);
  if (r != CUDA_SUCCESS) return r;
  gs_acc_fold_args f = {.partials = partials, .n = (uint32_t)blocks, .out = out};
  return launch(kc, stream, GS_K_gs_acc_fold_kernel, 1, &f);
}
