/* fp16_launch.c: the launchers of the fp16 route's kernels (fp16.h,
 * fp16.cu). Each checks everything before touching the driver, plans the
 * kernels' groups (fp16_kernels.h) and launches on the caller's stream in
 * the caller's context; nothing here knows the call that asked, its
 * options or its route: the route passes what a launch needs.
 *
 * A matrix's groups take vector accesses where every column starts at a
 * multiple of 4 elements: a strided source whose pointer, leading
 * dimension and batch stride allow it (a pointer array's members are not
 * known on the host, so they go element by element), the dense fp16
 * copies whose row count is a multiple of 4, and the transient product
 * likewise. */
#include <cublasLt.h>
#include <library_types.h>
#include <stdint.h>
#include <string.h>

#include "../shim/base/sys.h"
#include "fp16.h"
#include "module.h"

/* The output kernel's grid at most (it loops past it). */
#define FP16_OUT_BLOCKS (1u << 20)

static int aligned(const void *p, size_t n) { return (uintptr_t)p % n == 0; }
static int64_t max1(int64_t v) { return v > 1 ? v : 1; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The extent of one member, ld*(cols-1) + rows elements; -1 when it does
 * not fit int64 (no allocation is that large). */
static int64_t member_span(int64_t ld, int64_t rows, int64_t cols) {
  int64_t span;
  if (__builtin_mul_overflow(ld, cols - 1, &span) || __builtin_add_overflow(span, rows, &span)) return -1;
  return span;
}

/* A strided batch's offsets fit int64; written members must not overlap
 * (two threads would write one element), read ones may (stride 0 is one
 * matrix for every member). */
static int batch_fits(int64_t stride, int64_t batch, int64_t span, int written) {
  int64_t end;
  if (batch <= 1) return 1;
  if (stride < 0 || (written && stride < span)) return 0;
  return !__builtin_mul_overflow(stride, batch - 1, &end) && !__builtin_add_overflow(end, span, &end);
}

/* rows x cols x batch in groups of GS_FP16_VEC rows; 0 when it does not
 * fit int64. */
static int span_plan(int64_t rows, int64_t cols, int64_t batch, int64_t first, gs_fp16_span *s) {
  memset(s, 0, sizeof *s);
  const int64_t per_col = ceil_div(rows, GS_FP16_VEC);
  int64_t groups;
  if (__builtin_mul_overflow(per_col, cols, &groups) || __builtin_mul_overflow(groups, batch, &groups)) return 0;
  s->rows = rows;
  s->first = first;
  s->groups = groups;
  s->per_col = gs_cast_div_for((uint64_t)max1(per_col));
  s->per_member = gs_cast_div_for((uint64_t)max1(cols));
  return 1;
}

/* A matrix as the kernels take it; 0 when its shape is invalid. */
static int matrix_plan(const void *ptr, int array, int64_t ld, int64_t stride, int64_t rows, int64_t cols,
                       int64_t batch, size_t elem, int written, gs_fp16_matrix *m) {
  memset(m, 0, sizeof *m);
  if (!ptr || ld < max1(rows)) return 0;
  if (!aligned(ptr, array ? sizeof(void *) : elem)) return 0;
  if (!array) {
    const int64_t span = member_span(ld, rows, cols);
    if (span < 0 || !batch_fits(stride, batch, span, written)) return 0;
  }
  m->ptr = ptr;
  m->ld = ld;
  m->stride = array || batch <= 1 ? 0 : stride;
  m->array = array != 0;
  m->vec = !array && aligned(ptr, elem * GS_FP16_VEC) && ld % GS_FP16_VEC == 0 &&
           (batch <= 1 || stride % GS_FP16_VEC == 0);
  return 1;
}

/* The operand's lines as the kernels take them (fp16_kernels.h). */
static void lines_plan(const fp16_operand *o, const gs_fp16_matrix *src, gs_fp16_lines *L) {
  memset(L, 0, sizeof *L);
  L->src = *src;
  L->by_row = o->by_row != 0;
  L->line_step = o->by_row ? 1 : o->ld;
  L->elem_step = o->by_row ? o->ld : 1;
  L->lines = o->by_row ? o->rows : o->cols;
  L->length = o->by_row ? o->cols : o->rows;
  L->members = o->batch;
  L->info = o->info;
}

static CUresult operand_plan(const fp16_operand *o, int64_t first, gs_fp16_operand *p, gs_fp16_lines *L) {
  memset(p, 0, sizeof *p);
  if (!o || o->rows < 0 || o->cols < 0 || o->batch < 0) return CUDA_ERROR_INVALID_VALUE;
  if (!matrix_plan(o->src, o->src_array, o->ld, o->stride, o->rows, o->cols, o->batch, 2, 0, &p->src) ||
      !span_plan(o->rows, o->cols, o->batch, first, &p->span) || !o->dst || !aligned(o->dst, 2) || !o->info ||
      !aligned(o->info, 4))
    return CUDA_ERROR_INVALID_VALUE;
  int64_t words;
  if (__builtin_mul_overflow(o->by_row ? o->rows : o->cols, o->batch, &words)) return CUDA_ERROR_INVALID_VALUE;
  p->dst = o->dst;
  p->dst_vec = aligned(o->dst, 2 * GS_FP16_VEC) && o->rows % GS_FP16_VEC == 0;
  lines_plan(o, &p->src, L);
  return CUDA_SUCCESS;
}

static unsigned blocks_for(int64_t groups, int64_t cap) {
  const int64_t b = ceil_div(groups, GS_FP16_THREADS);
  return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

static int scalars_ok(const void *alpha, const void *beta, int device_scalars) {
  if (!alpha || !beta) return 0;
  return !device_scalars || (aligned(alpha, 4) && aligned(beta, 4));
}

/* The amax kernel's grid at most (it loops past it). */
#define FP16_AMAX_BLOCKS (1u << 16)

CUresult fp16_plan_scale(const fp16_operand *a, const fp16_operand *b, gs_fp16_record *record,
                         gs_fp16_amax_args *amax, unsigned amax_grid[3], gs_fp16_cast_args *cast,
                         unsigned cast_grid[3]) {
  memset(amax, 0, sizeof *amax);
  memset(cast, 0, sizeof *cast);
  if (!record || !aligned(record, 4)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = operand_plan(a, 0, &cast->op[0], &cast->line[0]);
  if (r == CUDA_SUCCESS) r = operand_plan(b, cast->op[0].span.groups, &cast->op[1], &cast->line[1]);
  if (r != CUDA_SUCCESS) return r;
  /* Every dot product takes k values from each: lines as long. */
  if (cast->line[0].length != cast->line[1].length) return CUDA_ERROR_INVALID_VALUE;
  int64_t groups, total;
  if (__builtin_add_overflow(cast->op[0].span.groups, cast->op[1].span.groups, &groups) ||
      __builtin_add_overflow(cast->line[0].lines * cast->line[0].members,
                             cast->line[1].lines * cast->line[1].members, &total))
    return CUDA_ERROR_INVALID_VALUE;
  amax->line[0] = cast->line[0];
  amax->line[1] = cast->line[1];
  amax->total = total;
  amax_grid[0] = blocks_for(total, FP16_AMAX_BLOCKS);
  amax_grid[1] = amax_grid[2] = 1;
  cast->record = record;
  cast->groups = groups;
  cast_grid[0] = blocks_for(groups, GS_FP16_CAST_BLOCKS);
  cast_grid[1] = cast_grid[2] = 1;
  return CUDA_SUCCESS;
}

/* cuBLASLt's epilogues as the output kernel's flags; -1 for others. */
static int epilogue_flags(int epilogue) {
  switch (epilogue) {
    case -1: case CUBLASLT_EPILOGUE_DEFAULT: return 0;
    case CUBLASLT_EPILOGUE_RELU: return GS_FP16_EPI_RELU;
    case CUBLASLT_EPILOGUE_BIAS: return GS_FP16_EPI_BIAS;
    case CUBLASLT_EPILOGUE_RELU_BIAS: return GS_FP16_EPI_BIAS | GS_FP16_EPI_RELU;
    case CUBLASLT_EPILOGUE_GELU: return GS_FP16_EPI_GELU;
    case CUBLASLT_EPILOGUE_GELU_BIAS: return GS_FP16_EPI_BIAS | GS_FP16_EPI_GELU;
    default: return -1;
  }
}

static int out_elem(int type) { return type == CUDA_R_16BF || type == CUDA_R_32F ? elem_of(type) : -1; }

CUresult fp16_plan_output(const fp16_output *o, gs_fp16_out_args *out, unsigned grid[3]) {
  memset(out, 0, sizeof *out);
  if (!o || o->m < 0 || o->n < 0 || o->batch < 0) return CUDA_ERROR_INVALID_VALUE;
  const int flags = epilogue_flags(o->epilogue);
  if (flags < 0) return CUDA_ERROR_NOT_SUPPORTED;
  const int d_elem = out_elem(o->d_type), c_elem = out_elem(o->c_type);
  if (d_elem < 0 || c_elem < 0 || !o->t || !aligned(o->t, 4) || !scalars_ok(o->alpha, o->beta, o->device_scalars))
    return CUDA_ERROR_INVALID_VALUE;
  /* The operands' lines: the rows of op(A) are D's rows, the columns of
   * op(B) its columns, and every member has its own or shares one. */
  gs_fp16_operand pa, pb;
  if (operand_plan(o->a, 0, &pa, &out->line[0]) != CUDA_SUCCESS ||
      operand_plan(o->b, 0, &pb, &out->line[1]) != CUDA_SUCCESS || out->line[0].lines != o->m ||
      out->line[1].lines != o->n || out->line[0].length != out->line[1].length ||
      (o->a->batch != 1 && o->a->batch != o->batch) || (o->b->batch != 1 && o->b->batch != o->batch))
    return CUDA_ERROR_INVALID_VALUE;
  while (out->k_log2 < 62 && ((int64_t)1 << out->k_log2) < out->line[0].length) out->k_log2++;
  if (!span_plan(o->m, o->n, o->batch, 0, &out->span)) return CUDA_ERROR_INVALID_VALUE;
  const size_t dsz = d_elem == GS_ELEM_F32 ? 4 : 2, csz = c_elem == GS_ELEM_F32 ? 4 : 2;
  if (!matrix_plan(o->d, o->d_array, o->ldd, o->stride_d, o->m, o->n, o->batch, dsz, 1, &out->d))
    return CUDA_ERROR_INVALID_VALUE;
  /* Host pointer mode: beta is known, and C is read only where it is not
   * 0; in device mode the kernel decides, and C must be valid. */
  float beta = 1.0f;
  if (!o->device_scalars) memcpy(&beta, o->beta, sizeof beta);
  out->read_c = beta != 0.0f;
  if (out->read_c &&
      !matrix_plan(o->c, o->c_array, o->ldc, o->stride_c, o->m, o->n, o->batch, csz, 0, &out->c))
    return CUDA_ERROR_INVALID_VALUE;
  if (flags & GS_FP16_EPI_BIAS) {
    out->bias_elem = out_elem(o->bias_type);
    if (out->bias_elem < 0 || !o->bias || o->bias_stride < 0 ||
        !aligned(o->bias, out->bias_elem == GS_ELEM_F32 ? 4 : 2))
      return CUDA_ERROR_INVALID_VALUE;
    out->bias = o->bias;
    out->bias_stride = o->batch > 1 ? o->bias_stride : 0;
  }
  out->t = o->t;
  if (o->device_scalars) {
    out->alpha_ptr = (const float *)o->alpha;
    out->beta_ptr = (const float *)o->beta;
  } else {
    memcpy(&out->alpha, o->alpha, sizeof out->alpha);
    out->beta = beta;
  }
  out->c_elem = c_elem;
  out->d_elem = d_elem;
  out->epilogue = flags;
  out->t_vec = aligned(o->t, 4 * GS_FP16_VEC) && o->m % GS_FP16_VEC == 0;
  grid[0] = blocks_for(out->span.groups, FP16_OUT_BLOCKS);
  grid[1] = grid[2] = 1;
  return CUDA_SUCCESS;
}

/* ---- launches ------------------------------------------------------------------- */
static CUresult launch(const fp16_launch *l, gs_kernel_id id, const unsigned grid[3], void *args) {
  if (!gs_sys.cuLaunchKernel) return CUDA_ERROR_NOT_INITIALIZED;
  CUfunction f;
  const char *why = NULL;
  CUresult r = kernels_function(l->kc, id, &f, &why);
  if (r != CUDA_SUCCESS) return r;
  const unsigned block[3] = {GS_FP16_THREADS, 1, 1};
  void *params[] = {args};
  return kernels_launch(l->kc, f, grid, block, l->stream, params);
}

/* The kernels are built for sm_70 (module.h): older devices do not load them. */
static CUresult launch_check(const fp16_launch *l) {
  if (!l || !l->kc || !l->kc->ctx) return CUDA_ERROR_INVALID_VALUE;
  return l->sm >= 70 ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

const char *fp16_kernels_ready(const fp16_launch *l) {
  if (launch_check(l) != CUDA_SUCCESS) return "no fp16 tensor cores (sm_70 or newer)";
  CUfunction f;
  const char *why = NULL;
  if (kernels_function(l->kc, GS_K_gs_fp16_amax, &f, &why) != CUDA_SUCCESS)
    return why ? why : "the fp16 kernels could not be found";
  return NULL;
}

CUresult fp16_scale_operands(const fp16_launch *l, const fp16_operand *a, const fp16_operand *b,
                             gs_fp16_record *record) {
  CUresult r = launch_check(l);
  if (r != CUDA_SUCCESS) return r;
  gs_fp16_amax_args amax;
  gs_fp16_cast_args cast;
  unsigned amax_grid[3], cast_grid[3];
  r = fp16_plan_scale(a, b, record, &amax, amax_grid, &cast, cast_grid);
  if (r == CUDA_SUCCESS && amax.total) r = launch(l, GS_K_gs_fp16_amax, amax_grid, &amax);
  if (r == CUDA_SUCCESS) r = launch(l, GS_K_gs_fp16_cast, cast_grid, &cast);
  return r;
}

CUresult fp16_write_output(const fp16_launch *l, const fp16_output *o) {
  CUresult r = launch_check(l);
  if (r != CUDA_SUCCESS) return r;
  gs_fp16_out_args out;
  unsigned grid[3];
  r = fp16_plan_output(o, &out, grid);
  if (r != CUDA_SUCCESS || out.span.groups == 0) return r;
  return launch(l, GS_K_gs_fp16_out, grid, &out);
}
