/* cast_launch.c: the launchers of the cast kernels (kernels.h, cast.cu).
 *
 * Each checks its arguments before touching the driver (bad ones:
 * CUDA_ERROR_INVALID_VALUE; nothing to do: CUDA_SUCCESS, since an empty grid
 * is illegal), plans every operand's chunks (cast.h) and launches one kernel
 * of GS_CAST_KERNELS per source type on the caller's stream, so the ffma
 * route's A, B, C and bias, which share their type, are one launch.
 * Contiguous columns (ld == rows on both sides) are folded into one long
 * column, and contiguous batch members into one, so a column's ends (where
 * accesses go element by element) are few. */
#include <library_types.h>
#include <stdint.h>

#include "cast.h"
#include "kernels.h"
#include "module.h"

static const struct cast_kind {
  gs_kernel_id id;
  int src, dst;
} cast_kinds[] = {
#define GS_CAST_KIND(name, s, d) {GS_K_##name, s, d},
    GS_CAST_KERNELS(GS_CAST_KIND)
#undef GS_CAST_KIND
};

static int cast_kernel(int src, int dst, gs_kernel_id *id) {
  for (size_t i = 0; i < sizeof cast_kinds / sizeof cast_kinds[0]; i++)
    if (cast_kinds[i].src == src && cast_kinds[i].dst == dst) {
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
 * -1 when invalid. A strided side needs its batch offsets to fit in int64;
 * the destination's members must not overlap, or two threads would write
 * one element. A stride of 0 on the source is a broadcast. */
static int shape_check(const kernel_cast_operand *o) {
  if (o->rows < 0 || o->cols < 0 || o->batch < 0) return -1;
  if (o->ld_src < o->rows || o->ld_dst < o->rows) return -1;
  if (o->rows == 0 || o->cols == 0 || o->batch == 0) return 1;
  int64_t span_src = member_span(o->ld_src, o->rows, o->cols);
  int64_t span_dst = member_span(o->ld_dst, o->rows, o->cols);
  if (span_src < 0 || span_dst < 0) return -1;
  int64_t end;
  if (!o->src_array && o->batch > 1 &&
      (o->stride_src < 0 || __builtin_mul_overflow(o->stride_src, o->batch - 1, &end) ||
       __builtin_add_overflow(end, span_src, &end)))
    return -1;
  if (!o->dst_array && o->batch > 1 &&
      (o->stride_dst < span_dst || __builtin_mul_overflow(o->stride_dst, o->batch - 1, &end) ||
       __builtin_add_overflow(end, span_dst, &end)))
    return -1;
  return 0;
}

/* Elements must sit at multiples of their size, as cuBLAS requires. */
static int aligned(const void *p, size_t n) { return (uintptr_t)p % n == 0; }
static size_t elem_bytes(int e) { return e == GS_ELEM_F32 ? 4 : 2; }

/* Checks one operand: 0 to launch, 1 nothing to do, -1 invalid. */
static int operand_check(const kernel_cast_operand *o, int src, int dst) {
  int c = shape_check(o);
  if (c) return c;
  if (!o->src || !o->dst) return -1;
  if (!aligned(o->src, o->src_array ? sizeof(void *) : elem_bytes(src)) ||
      !aligned(o->dst, o->dst_array ? sizeof(void *) : elem_bytes(dst)))
    return -1;
  return 0;
}

gs_cast_div kernel_cast_div(uint64_t d) { return gs_cast_div_for(d); }

/* Operand o's part of the argument block: folded shape, chunks per column.
 * A column's chunks start at its source's 4-element boundaries when it can
 * go by vectors (cast.cu), so it needs ceil((rows + pre) / 8) of them, pre
 * being the source's offset mod 4. Where every column has the same pre
 * (strided sides whose ld and strides are multiples of 4) that is exact;
 * otherwise pre is taken as 3, at most one empty chunk a column. Returns
 * the chunk count, or -1 when it does not fit. */
static int64_t operand_plan(kernel_cast_operand o, int src, int dst, gs_cast_operand *p, gs_cast_out_c *oc) {
  /* The fold keeps every element's offset: r + c*ld = r + c*rows (C's
   * too, when a narrowing reads it). */
  if (o.cols > 1 && o.ld_src == o.rows && o.ld_dst == o.rows && (!oc || oc->ld_c == o.rows)) {
    o.rows *= o.cols;
    o.ld_src = o.ld_dst = o.rows;
    if (oc) oc->ld_c = o.rows;
    o.cols = 1;
  }
  if (!o.src_array && !o.dst_array && o.cols == 1 && o.batch > 1 && o.stride_src == o.rows &&
      o.stride_dst == o.rows && (!oc || (!oc->c_array && oc->stride_c == o.rows))) {
    o.rows *= o.batch;
    o.ld_src = o.ld_dst = o.rows;
    if (oc) oc->ld_c = oc->stride_c = o.rows;
    o.batch = 1;
  }
  const size_t ss = elem_bytes(src), ds = elem_bytes(dst);
  int64_t pre = GS_CAST_VEC - 1;
  const int uniform = !o.src_array && !o.dst_array && (o.cols == 1 || (o.ld_src % 4 == 0 && o.ld_dst % 4 == 0)) &&
                      (o.batch == 1 || (o.stride_src % 4 == 0 && o.stride_dst % 4 == 0)) &&
                      (!oc || (!oc->c_array && (o.cols == 1 || oc->ld_c % 4 == 0) &&
                               (o.batch == 1 || oc->stride_c % 4 == 0)));
  if (uniform) {
    int64_t s_off = (int64_t)((uintptr_t)o.src / ss % GS_CAST_VEC);
    int64_t d_off = (int64_t)((uintptr_t)o.dst / ds % GS_CAST_VEC);
    int64_t c_off = oc ? (int64_t)((uintptr_t)oc->c / ds % GS_CAST_VEC) : d_off;
    pre = s_off == d_off && s_off == c_off ? s_off : 0;
  }
  int64_t per_col = (o.rows + pre + GS_CAST_CHUNK - 1) / GS_CAST_CHUNK, chunks;
  if (__builtin_mul_overflow(per_col, o.cols, &chunks) || __builtin_mul_overflow(chunks, o.batch, &chunks))
    return -1;
  *p = (gs_cast_operand){.src = o.src,
                         .dst = o.dst,
                         .ld_src = o.ld_src,
                         .stride_src = o.src_array ? 0 : o.stride_src,
                         .ld_dst = o.ld_dst,
                         .stride_dst = o.dst_array ? 0 : o.stride_dst,
                         .rows = o.rows,
                         .per_col = kernel_cast_div((uint64_t)per_col),
                         .per_member = kernel_cast_div((uint64_t)o.cols),
                         .src_array = o.src_array != 0,
                         .dst_array = o.dst_array != 0};
  return chunks;
}

/* 2^31 - 1 blocks, the grid's x limit since compute capability 3.0. */
#define CAST_GRID_X_MAX 2147483647

CUresult kernel_cast_plan(const kernel_cast_operand *ops, int n, int src, int dst, gs_cast_args *a,
                          unsigned grid[3]) {
  if (n < 0 || n > GS_CAST_MAX_OPERANDS) return CUDA_ERROR_INVALID_VALUE;
  *a = (gs_cast_args){.chunks = 0};
  int used = 0;
  for (int i = 0; i < n; i++) {
    int c = operand_check(&ops[i], src, dst);
    if (c < 0) return CUDA_ERROR_INVALID_VALUE;
    if (c > 0) continue;
    int64_t chunks = operand_plan(ops[i], src, dst, &a->op[used], NULL);
    if (chunks < 0) return CUDA_ERROR_INVALID_VALUE;
    a->op[used].first = a->chunks;
    if (__builtin_add_overflow(a->chunks, chunks, &a->chunks)) return CUDA_ERROR_INVALID_VALUE;
    used++;
  }
  for (int i = used; i < GS_CAST_MAX_OPERANDS; i++) a->op[i].first = a->chunks;
  a->operands = used;
  int64_t blocks = (a->chunks + GS_CAST_THREADS - 1) / GS_CAST_THREADS;
  if (blocks > CAST_GRID_X_MAX) return CUDA_ERROR_INVALID_VALUE;
  grid[0] = (unsigned)blocks, grid[1] = grid[2] = 1;
  return CUDA_SUCCESS;
}

/* Operands of one kernel (src, dst elements): plan, then one launch. A
 * narrowing's C (one operand) is planned with it (oc's fold); a widening's
 * zero store goes with the launch. */
static CUresult cast_launch(kernel_ctx *kc, CUstream stream, int src, int dst, const kernel_cast_operand *ops,
                            int n, const gs_cast_out_c *oc) {
  gs_kernel_id id;
  if (!cast_kernel(src, dst, &id)) return CUDA_ERROR_INVALID_VALUE;
  gs_cast_args a;
  unsigned grid[3];
  CUresult r = kernel_cast_plan(ops, n, src, dst, &a, grid);
  if (r != CUDA_SUCCESS || a.chunks == 0) return r;
  if (oc && oc->c) {
    /* One operand: planned again with C, which may forbid a fold. */
    a.out_c = *oc;
    int64_t chunks = operand_plan(ops[0], src, dst, &a.op[0], &a.out_c);
    if (chunks < 0) return CUDA_ERROR_INVALID_VALUE;
    a.op[0].first = 0;
    a.chunks = chunks;
    for (int i = 1; i < GS_CAST_MAX_OPERANDS; i++) a.op[i].first = chunks;
    int64_t blocks = (chunks + GS_CAST_THREADS - 1) / GS_CAST_THREADS;
    if (blocks > CAST_GRID_X_MAX) return CUDA_ERROR_INVALID_VALUE;
    grid[0] = (unsigned)blocks;
  } else if (oc) {
    a.out_c.zero = oc->zero;
  }
  const unsigned block[3] = {GS_CAST_THREADS, 1, 1};
  CUfunction f;
  const char *why;
  r = kernels_function(kc, id, &f, &why);
  if (r != CUDA_SUCCESS) return r;
  void *params[] = {&a};
  return kernels_launch(kc, f, grid, block, stream, params);
}

CUresult kernel_widen_operands(kernel_ctx *kc, CUstream stream, const kernel_cast_operand *ops, int n) {
  return kernel_widen_operands_zero(kc, stream, ops, n, NULL);
}

CUresult kernel_widen_operands_zero(kernel_ctx *kc, CUstream stream, const kernel_cast_operand *ops, int n,
                                    float *zero) {
  if (n < 1 || n > GS_CAST_MAX_OPERANDS || !ops) return n == 0 && !zero ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (!aligned(zero, 4)) return CUDA_ERROR_INVALID_VALUE;
  /* Everything is checked before anything is launched. */
  for (int i = 0; i < n; i++) {
    int s = elem_of(ops[i].src_type);
    if (s < 0 || ops[i].dst_array || operand_check(&ops[i], s, GS_ELEM_F32) < 0) return CUDA_ERROR_INVALID_VALUE;
  }
  /* One launch per source type, operands in the caller's order. */
  static const int types[] = {GS_ELEM_BF16, GS_ELEM_F16, GS_ELEM_F32};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    kernel_cast_operand same[GS_CAST_MAX_OPERANDS];
    int k = 0;
    for (int i = 0; i < n; i++)
      if (elem_of(ops[i].src_type) == types[t]) same[k++] = ops[i];
    if (k == 0) continue;
    /* The zero goes with the first launch. */
    const gs_cast_out_c z = {.zero = zero};
    CUresult r = cast_launch(kc, stream, types[t], GS_ELEM_F32, same, k, zero ? &z : NULL);
    if (r != CUDA_SUCCESS) return r;
    zero = NULL;
  }
  return zero ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult kernel_widen(kernel_ctx *kc, CUstream stream, int src_type, const void *src, int64_t ld_src,
                      int64_t stride_src, float *dst, int64_t ld_dst, int64_t stride_dst,
                      int64_t rows, int64_t cols, int64_t batch) {
  int s = elem_of(src_type);
  if (s != GS_ELEM_BF16 && s != GS_ELEM_F16) return CUDA_ERROR_INVALID_VALUE;
  kernel_cast_operand o = {src_type, src, 0, ld_src, stride_src, dst, 0, ld_dst, stride_dst, rows, cols, batch};
  return kernel_widen_operands(kc, stream, &o, 1);
}

CUresult kernel_widen_ptrarray(kernel_ctx *kc, CUstream stream, int src_type,
                               const void *const *src_array, int64_t ld_src, float *dst,
                               int64_t ld_dst, int64_t stride_dst, int64_t rows, int64_t cols,
                               int64_t batch) {
  int s = elem_of(src_type);
  if (s != GS_ELEM_BF16 && s != GS_ELEM_F16) return CUDA_ERROR_INVALID_VALUE;
  kernel_cast_operand o = {src_type, src_array, 1, ld_src, 0, dst, 0, ld_dst, stride_dst, rows, cols, batch};
  return kernel_widen_operands(kc, stream, &o, 1);
}

/* C as narrow_c reads it: the destination's shape at C's address, ld and
 * stride; only read, so its members may overlap (a stride of 0 is one C
 * for every member). 0 when good, -1 when invalid. */
static int c_check(const kernel_cast_operand *o, const kernel_cast_c *cb) {
  if (!cb->c || cb->ld_c < o->rows || !aligned(cb->c, cb->c_array ? sizeof(void *) : 2)) return -1;
  int64_t span = member_span(cb->ld_c, o->rows, o->cols), end;
  if (span < 0) return -1;
  if (!cb->c_array && o->batch > 1 &&
      (cb->stride_c < 0 || __builtin_mul_overflow(cb->stride_c, o->batch - 1, &end) ||
       __builtin_add_overflow(end, span, &end)))
    return -1;
  return 0;
}

static CUresult narrow(kernel_ctx *kc, CUstream stream, int dst_type, const kernel_cast_operand *o,
                       const kernel_cast_c *cb) {
  int d = elem_of(dst_type);
  if (d != GS_ELEM_BF16 && d != GS_ELEM_F16) return CUDA_ERROR_INVALID_VALUE;
  int c = operand_check(o, GS_ELEM_F32, d);
  if (c < 0) return CUDA_ERROR_INVALID_VALUE;
  /* No C, or beta 0 on the host: C is not read, nor checked. */
  if (c > 0 || !cb || (!cb->beta_ptr && cb->beta == 0.0f)) return cast_launch(kc, stream, GS_ELEM_F32, d, o, 1, NULL);
  if (c_check(o, cb) < 0 || (cb->beta_ptr && !aligned(cb->beta_ptr, 4))) return CUDA_ERROR_INVALID_VALUE;
  const gs_cast_out_c oc = {.c = cb->c,
                            .beta_ptr = cb->beta_ptr,
                            .ld_c = cb->ld_c,
                            .stride_c = cb->c_array ? 0 : cb->stride_c,
                            .beta = cb->beta,
                            .c_array = cb->c_array != 0};
  return cast_launch(kc, stream, GS_ELEM_F32, d, o, 1, &oc);
}

CUresult kernel_narrow(kernel_ctx *kc, CUstream stream, int dst_type, const float *src,
                       int64_t ld_src, int64_t stride_src, void *dst, int64_t ld_dst,
                       int64_t stride_dst, int64_t rows, int64_t cols, int64_t batch) {
  kernel_cast_operand o = {CUDA_R_32F, src, 0, ld_src, stride_src, dst, 0, ld_dst, stride_dst, rows, cols, batch};
  return narrow(kc, stream, dst_type, &o, NULL);
}

CUresult kernel_narrow_c(kernel_ctx *kc, CUstream stream, int dst_type, const float *src, int64_t ld_src,
                         int64_t stride_src, void *dst, int dst_array, int64_t ld_dst, int64_t stride_dst,
                         int64_t rows, int64_t cols, int64_t batch, const kernel_cast_c *cb) {
  kernel_cast_operand o = {CUDA_R_32F, src, 0, ld_src, stride_src, dst, dst_array, ld_dst,
                           dst_array ? 0 : stride_dst, rows, cols, batch};
  return narrow(kc, stream, dst_type, &o, cb);
}

CUresult kernel_narrow_ptrarray(kernel_ctx *kc, CUstream stream, int dst_type, const float *src,
                                int64_t ld_src, int64_t stride_src, void *const *dst_array,
                                int64_t ld_dst, int64_t rows, int64_t cols, int64_t batch) {
  kernel_cast_operand o = {CUDA_R_32F, src, 0, ld_src, stride_src, (void *)dst_array, 1, ld_dst, 0, rows, cols, batch};
  return narrow(kc, stream, dst_type, &o, NULL);
}

CUresult kernel_widen_vector(kernel_ctx *kc, CUstream stream, int src_type, const void *src,
                             float *dst, int64_t n) {
  if (elem_of(src_type) < 0 || n < 0) return CUDA_ERROR_INVALID_VALUE;
  kernel_cast_operand o = {src_type, src, 0, n, 0, dst, 0, n, 0, n, 1, 1};
  return kernel_widen_operands(kc, stream, &o, 1);
}
