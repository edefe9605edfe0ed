/* cast_launch.c: the launchers of the cast kernels (kernels.h, cast.cu).
 *
 * Each checks its arguments before touching the driver (bad ones:
 * CUDA_ERROR_INVALID_VALUE; nothing to do: CUDA_SUCCESS, since an empty grid
 * is illegal), simplifies the shape, and launches one kernel of
 * GS_CAST_KERNELS on the caller's stream. Contiguous columns (ld == rows on
 * both sides) are folded into one long column, and contiguous batch members
 * into one, so small matrices still fill warps and the vector path sees one
 * alignment. */
#include <library_types.h>
#include <stdint.h>

#include "../shim/resolve.h"
#include "cast.h"
#include "kernels.h"
#include "module.h"


static const struct cast_kind {
  gs_kernel_id id;
  int src, dst, layout;
} cast_kinds[] = {
#define GS_CAST_KIND(name, s, d, layout) {GS_K_##name, s, d, layout},
    GS_CAST_KERNELS(GS_CAST_KIND)
#undef GS_CAST_KIND
};

static int cast_kernel(int src, int dst, int layout, gs_kernel_id *id) {
  for (size_t i = 0; i < sizeof cast_kinds / sizeof cast_kinds[0]; i++)
    if (cast_kinds[i].src == src && cast_kinds[i].dst == dst && cast_kinds[i].layout == layout) {
      *id = cast_kinds[i].id;
      return 1;
    }
  return 0;
}


/* The extent one batch member spans, ld*(cols-1) + rows, in elements; -1
 * when it does not fit in int64 (no real allocation is that large). */
static int64_t member_span(int64_t ld, int64_t rows, int64_t cols) {
  int64_t span;
  if (__builtin_mul_overflow(ld, cols - 1, &span) || __builtin_add_overflow(span, rows, &span))
    return -1;
  return span;
}

/* Check a cast's shape. Returns 0 to launch, 1 when there is nothing to do,
 * -1 when invalid. A strided side (stride >= 0) needs its batch offsets to
 * fit in int64; the destination's members must not overlap, or two threads
 * would write one element. A stride of 0 on the source is a broadcast. */
static int shape_check(const gs_cast_args *a, int src_strided, int dst_strided) {
  if (a->rows < 0 || a->cols < 0 || a->batch < 0) return -1;
  if (a->ld_src < a->rows || a->ld_dst < a->rows) return -1;
  if (a->rows == 0 || a->cols == 0 || a->batch == 0) return 1;
  int64_t span_src = member_span(a->ld_src, a->rows, a->cols);
  int64_t span_dst = member_span(a->ld_dst, a->rows, a->cols);
  if (span_src < 0 || span_dst < 0) return -1;
  int64_t end;
  if (src_strided && a->batch > 1 &&
      (a->stride_src < 0 || __builtin_mul_overflow(a->stride_src, a->batch - 1, &end) ||
       __builtin_add_overflow(end, span_src, &end)))
    return -1;
  if (dst_strided && a->batch > 1 &&
      (a->stride_dst < span_dst || __builtin_mul_overflow(a->stride_dst, a->batch - 1, &end) ||
       __builtin_add_overflow(end, span_dst, &end)))
    return -1;
  return 0;
}

static CUresult cast_launch(CUcontext ctx, CUstream stream, int src, int dst, int layout,
                            gs_cast_args a) {
  gs_kernel_id id;
  if (!cast_kernel(src, dst, layout, &id)) return CUDA_ERROR_INVALID_VALUE;
  /* The fold keeps every element's offset: r + c*ld = r + c*rows. */
  if (a.cols > 1 && a.ld_src == a.rows && a.ld_dst == a.rows) {
    a.rows *= a.cols;
    a.ld_src = a.ld_dst = a.rows;
    a.cols = 1;
  }
  if (layout == GS_BATCH_STRIDED && a.cols == 1 && a.batch > 1 && a.stride_src == a.rows &&
      a.stride_dst == a.rows) {
    a.rows *= a.batch;
    a.ld_src = a.ld_dst = a.rows;
    a.batch = 1;
  }
  int64_t groups = (a.rows + GS_CAST_VEC - 1) / GS_CAST_VEC;
  unsigned grid[3] = {
      (unsigned)min64((groups + GS_CAST_BLOCK_X - 1) / GS_CAST_BLOCK_X, GRID_MAX),
      (unsigned)min64((a.cols + GS_CAST_BLOCK_Y - 1) / GS_CAST_BLOCK_Y, GRID_MAX),
      (unsigned)min64(a.batch, GRID_MAX)};
  unsigned block[3] = {GS_CAST_BLOCK_X, GS_CAST_BLOCK_Y, 1};

  if (resolve_driver()) return CUDA_ERROR_NOT_INITIALIZED;
  CUfunction f;
  const char *why;
  CUresult r = kernels_function(ctx, id, &f, &why);
  if (r != CUDA_SUCCESS) return r;
  void *params[] = {&a};
  return kernels_launch(ctx, f, grid, block, stream, params);
}

/* Elements must sit at multiples of their size, as cuBLAS requires. */
static int aligned(const void *p, size_t n) { return (uintptr_t)p % n == 0; }

CUresult kernel_widen(CUcontext ctx, CUstream stream, int src_type, const void *src, int64_t ld_src,
                      int64_t stride_src, float *dst, int64_t ld_dst, int64_t stride_dst,
                      int64_t rows, int64_t cols, int64_t batch) {
  int s = elem_of(src_type);
  if (s != GS_ELEM_BF16 && s != GS_ELEM_F16) return CUDA_ERROR_INVALID_VALUE;
  gs_cast_args a = {src, dst, ld_src, stride_src, ld_dst, stride_dst, rows, cols, batch};
  int c = shape_check(&a, 1, 1);
  if (c) return c > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (!src || !dst || !aligned(src, 2) || !aligned(dst, 4)) return CUDA_ERROR_INVALID_VALUE;
  return cast_launch(ctx, stream, s, GS_ELEM_F32, GS_BATCH_STRIDED, a);
}

CUresult kernel_widen_ptrarray(CUcontext ctx, CUstream stream, int src_type,
                               const void *const *src_array, int64_t ld_src, float *dst,
                               int64_t ld_dst, int64_t stride_dst, int64_t rows, int64_t cols,
                               int64_t batch) {
  int s = elem_of(src_type);
  if (s != GS_ELEM_BF16 && s != GS_ELEM_F16) return CUDA_ERROR_INVALID_VALUE;
  gs_cast_args a = {src_array, dst, ld_src, 0, ld_dst, stride_dst, rows, cols, batch};
  int c = shape_check(&a, 0, 1);
  if (c) return c > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (!src_array || !dst || !aligned(src_array, sizeof(void *)) || !aligned(dst, 4))
    return CUDA_ERROR_INVALID_VALUE;
  return cast_launch(ctx, stream, s, GS_ELEM_F32, GS_BATCH_SRC_ARRAY, a);
}

CUresult kernel_narrow(CUcontext ctx, CUstream stream, int dst_type, const float *src,
                       int64_t ld_src, int64_t stride_src, void *dst, int64_t ld_dst,
                       int64_t stride_dst, int64_t rows, int64_t cols, int64_t batch) {
  int d = elem_of(dst_type);
  if (d != GS_ELEM_BF16 && d != GS_ELEM_F16) return CUDA_ERROR_INVALID_VALUE;
  gs_cast_args a = {src, dst, ld_src, stride_src, ld_dst, stride_dst, rows, cols, batch};
  int c = shape_check(&a, 1, 1);
  if (c) return c > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (!src || !dst || !aligned(src, 4) || !aligned(dst, 2)) return CUDA_ERROR_INVALID_VALUE;
  return cast_launch(ctx, stream, GS_ELEM_F32, d, GS_BATCH_STRIDED, a);
}

CUresult kernel_narrow_ptrarray(CUcontext ctx, CUstream stream, int dst_type, const float *src,
                                int64_t ld_src, int64_t stride_src, void *const *dst_array,
                                int64_t ld_dst, int64_t rows, int64_t cols, int64_t batch) {
  int d = elem_of(dst_type);
  if (d != GS_ELEM_BF16 && d != GS_ELEM_F16) return CUDA_ERROR_INVALID_VALUE;
  gs_cast_args a = {src, (void *)dst_array, ld_src, stride_src, ld_dst, 0, rows, cols, batch};
  int c = shape_check(&a, 1, 0);
  if (c) return c > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (!src || !dst_array || !aligned(src, 4) || !aligned(dst_array, sizeof(void *)))
    return CUDA_ERROR_INVALID_VALUE;
  return cast_launch(ctx, stream, GS_ELEM_F32, d, GS_BATCH_DST_ARRAY, a);
}

CUresult kernel_widen_vector(CUcontext ctx, CUstream stream, int src_type, const void *src,
                             float *dst, int64_t n) {
  int s = elem_of(src_type);
  if (s < 0) return CUDA_ERROR_INVALID_VALUE;
  if (n < 0) return CUDA_ERROR_INVALID_VALUE;
  if (n == 0) return CUDA_SUCCESS;
  if (!src || !dst || !aligned(src, s == GS_ELEM_F32 ? 4 : 2) || !aligned(dst, 4))
    return CUDA_ERROR_INVALID_VALUE;
  gs_cast_args a = {src, dst, n, 0, n, 0, n, 1, 1};
  return cast_launch(ctx, stream, s, GS_ELEM_F32, GS_BATCH_STRIDED, a);
}
