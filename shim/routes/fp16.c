/* fp16.c: bf16 GEMMs with fp32 compute on fp16 tensor cores, exactly.
 *
 * Volta and Turing (sm_70-sm_75) have no bf16 tensor cores but fp16 ones
 * with fp32 accumulation, 5-18x their bf16 GEMM rate. A bf16 value is an
 * fp16 value whenever it lies in fp16's range, and a power of two moves a
 * value's range there without touching a significand bit. Each row of
 * op(A) and each column of op(B) is measured (its largest finite magnitude
 * and its flags, on the device, in this call), scaled into the
 * top of fp16's range and written in fp16 into transient buffers
 * (kernels/fp16.cu: two launches), multiplied by cuBLAS in fp16 with fp32
 * accumulation into a transient fp32 product, and the output kernel
 * unscales each element by its own row's and column's powers of two, or
 * recomputes it in fp32 from the bf16 operands where the scaled GEMM could
 * not be exact, then applies alpha, beta * C, bias and activation and
 * writes D in its type (docs/fp16.md). No host synchronisation, no host
 * round trip.
 *
 * Anything this file does not handle declines before touching the caller's
 * memory and runs native with the reason logged. */
#include <stdio.h>
#include <string.h>

#include "../../kernels/fp16.h"
#include "../../kernels/kernels.h"
#include "cost.h"
#include "memory.h"
#include "../resolve.h"
#include "lt.h"
#include "../shim.h"
#include "../work.h"
#include "../base/sys.h"

#define F32 CUDA_R_32F

/* The plan of one call: operand shapes as stored, members cast, and the
 * transient buffer's parts. */
typedef struct fp16_plan {
  int64_t a_rows, a_cols, b_rows, b_cols;
  int64_t a_members, b_members; /* 1 for a strided operand broadcast with stride 0 */
  int64_t bias_stride;          /* Lt: the caller's bias batch stride */
  size_t off[6];
  size_t bytes;
  char why[GS_COST_WHY]; /* the cost gate's reason */
} fp16_plan;

/* The record of device constants, the words of A's rows and B's columns
 * (one uint32 per line and member), A and B in fp16, the fp32 product. */
enum { BUF_RECORD, BUF_INFO_A, BUF_INFO_B, BUF_A16, BUF_B16, BUF_T, BUF_PARTS };

static const float host_one = 1.0f, host_zero = 0.0f;


static int fast_compute(int ct) {
  return ct == CUBLAS_COMPUTE_32F_FAST_16BF || ct == CUBLAS_COMPUTE_32F_FAST_16F || ct == CUBLAS_COMPUTE_32F_FAST_TF32;
}

/* fp16 A and B are cuBLAS's own fp16 tensor-core GEMM already. */
static const char *check_types(const gs_gemm *g) {
  if (g->a_type != CUDA_R_16BF || g->b_type != CUDA_R_16BF) return "A and B are not both bf16";
  if (fast_compute(g->compute_type))
    return "a 32f_fast compute type takes fp32 A and B only (forwarded for cuBLAS's own error)";
  if (g->compute_type == CUBLAS_COMPUTE_32F_PEDANTIC)
    return "compute type 32f_pedantic asks for cuBLAS's own bf16 arithmetic";
  if (g->compute_type != CUBLAS_COMPUTE_32F) return "compute type is not fp32";
  if (g->c_type != CUDA_R_16BF && g->c_type != F32) return "C is neither bf16 nor fp32";
  if (g->d_type != g->c_type) return "D's type differs from C's";
  return NULL;
}

/* cublasMath_t CUBLAS_PEDANTIC_MATH "uses the prescribed precision and
 * standardized arithmetic for all phases of calculations" (cuBLAS
 * documentation): the handle asks for bf16 as cuBLAS computes it. The other
 * modes leave an fp16 GEMM with fp32 compute as it is (TF32 and the fp32
 * emulations concern fp32 inputs; tensor-op math is what fp16 uses anyway). */
static const char *check_math_mode(const gs_gemm *g) {
  unsigned mode;
  const char *why = route_handle_math(g, &mode);
  if (why) return why;
  if (mode == CUBLAS_PEDANTIC_MATH) return "the handle's math mode CUBLAS_PEDANTIC_MATH asks for cuBLAS's own bf16 arithmetic";
  return NULL;
}


/* A strided operand with stride 0 is one matrix for every member: cast once. */
static int64_t members_of(const gs_gemm *g, int64_t stride) {
  return g->batch > 1 && stride == 0 && !route_is_ptr_array(g->api) ? 1 : g->batch;
}

static const char *plan(const gs_call *c, fp16_plan *p) {
  const gs_gemm *g = &c->g;
  memset(p, 0, sizeof *p);
  route_operand_shapes(g, &p->a_rows, &p->a_cols, &p->b_rows, &p->b_cols);
  const char *why = check_types(g);
  /* Layout orders first: the leading-dimension checks assume column-major. */
  if (!why && g->api == GS_API_LT_MATMUL) why = route_check_lt_scalars(g);
  if (!why) why = route_check_arguments(g);
  if (!why) why = route_check_output_members(g);
  if (!why) why = route_check_batch_invariance(g, p->why, sizeof p->why);
  if (why) return why;
  if (g->api != GS_API_LT_MATMUL && g->pointer_mode != CUBLAS_POINTER_MODE_HOST &&
      g->pointer_mode != CUBLAS_POINTER_MODE_DEVICE)
    return "the handle's pointer mode is unknown";
  if (g->m == 0 || g->n == 0 || g->k == 0 || g->batch == 0) return "empty GEMM: nothing to scale";
  if ((why = route_check_min_flops(g, GS_ROUTE_FP16))) return why;
  why = g->api == GS_API_LT_MATMUL ? route_lt_bias_stride(g, &p->bias_stride) : check_math_mode(g);
  if (why) return why;

  p->a_members = members_of(g, g->stride_a);
  p->b_members = members_of(g, g->stride_b);
  why = cost_gate_fp16(c, (double)p->a_rows * (double)p->a_cols * (double)p->a_members,
                       (double)p->b_rows * (double)p->b_cols * (double)p->b_members, p->why);
  if (why) return why;
  /* Every D goes through the output kernel: each element has its own
   * unscale, so no one alpha could hand it to cuBLAS. */
  const transient_part parts[BUF_PARTS] = {
      {1, 1, 1, sizeof(gs_fp16_record)},
      {g->m, 1, p->a_members, sizeof(uint32_t)},
      {g->n, 1, p->b_members, sizeof(uint32_t)},
      {p->a_rows, p->a_cols, p->a_members, 2},
      {p->b_rows, p->b_cols, p->b_members, 2},
      {g->m, g->n, g->batch, 4},
  };
  return transient_plan(parts, BUF_PARTS, gs_opt.fp16_max_bytes,
                        "needs more transient memory than GEMMSHIM_FP16_MAX_BYTES", p->off, &p->bytes);
}

/* ---- the pieces of the call ------------------------------------------------------ */
static gs_fp16_record *record_of(const fp16_plan *p, char *base) {
  return (gs_fp16_record *)(base + p->off[BUF_RECORD]);
}

/* A and B as the kernels take them: the rows of op(A) are A's stored rows
 * when A is not transposed, the columns of op(B) B's stored rows when B
 * is (CUBLAS_OP_C is CUBLAS_OP_T for real types). */
static void operands_of(const gs_call *c, const fp16_plan *p, char *base, fp16_operand *a, fp16_operand *b) {
  const gs_gemm *g = &c->g;
  const int arr = route_is_ptr_array(g->api);
  *a = (fp16_operand){g->A, arr, g->lda, g->stride_a, p->a_rows, p->a_cols, p->a_members, base + p->off[BUF_A16],
                      g->transa == CUBLAS_OP_N, (uint32_t *)(base + p->off[BUF_INFO_A])};
  *b = (fp16_operand){g->B, arr, g->ldb, g->stride_b, p->b_rows, p->b_cols, p->b_members, base + p->off[BUF_B16],
                      g->transb != CUBLAS_OP_N, (uint32_t *)(base + p->off[BUF_INFO_B])};
}

static CUresult scale_operands(const gs_call *c, const fp16_plan *p, const fp16_launch *l, char *base) {
  fp16_operand a, b;
  operands_of(c, p, base, &a, &b);
  return fp16_scale_operands(l, &a, &b, record_of(p, base));
}

static CUresult write_output(const gs_call *c, const fp16_plan *p, const fp16_launch *l, char *base) {
  const gs_gemm *g = &c->g;
  const int arr = route_is_ptr_array(g->api), lt = g->api == GS_API_LT_MATMUL;
  fp16_operand a, b;
  operands_of(c, p, base, &a, &b);
  const fp16_output o = {
      .t = (const float *)(base + p->off[BUF_T]),
      .a = &a,
      .b = &b,
      .alpha = g->alpha,
      .beta = g->beta,
      .device_scalars = route_device_scalars(g),
      .c_type = g->c_type,
      .c_array = arr,
      .c = g->C,
      .ldc = g->ldc,
      .stride_c = g->stride_c,
      .d_type = g->d_type,
      .d_array = arr,
      .d = g->D,
      .ldd = g->ldd,
      .stride_d = g->stride_d,
      .m = g->m,
      .n = g->n,
      .batch = g->batch,
      .epilogue = lt ? g->epilogue : -1,
      .bias_type = lt ? g->bias_type : -1,
      .bias = lt ? g->bias : NULL,
      .bias_stride = p->bias_stride,
  };
  return fp16_write_output(l, &o);
}

/* ---- the fp16 GEMM ------------------------------------------------------------------ */
/* The GemmEx family on the caller's handle (its stream, workspace and math
 * mode), with fp16 A and B. Pointer-array batches run as strided ones over
 * the fp16 copies, into the transient fp32 product with alpha 1 and beta
 * 0, in the handle's pointer mode (host floats, or the record's on the
 * device). */
static cublasStatus_t gemm_ex16(const gs_call *c, const fp16_plan *p, char *base) {
  const gs_gemm *g = &c->g;
  static const gs_sys_id entry[] = {
      [GS_API_GEMM_EX] = GS_SYS_cublasGemmEx,
      [GS_API_GEMM_EX_64] = GS_SYS_cublasGemmEx_64,
      [GS_API_GEMM_STRIDED_BATCHED_EX] = GS_SYS_cublasGemmStridedBatchedEx,
      [GS_API_GEMM_STRIDED_BATCHED_EX_64] = GS_SYS_cublasGemmStridedBatchedEx_64,
      [GS_API_GEMM_BATCHED_EX] = GS_SYS_cublasGemmStridedBatchedEx,
      [GS_API_GEMM_BATCHED_EX_64] = GS_SYS_cublasGemmStridedBatchedEx_64,
  };
  if ((unsigned)g->api >= sizeof entry / sizeof entry[0] || !resolve_hooked(entry[g->api]))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const gs_fp16_record *r = record_of(p, base);
  const int dev = route_device_scalars(g);
  const void *alpha = dev ? (const void *)&r->one : &host_one;
  const void *beta = dev ? (const void *)&r->zero : &host_zero;
  const void *A = base + p->off[BUF_A16], *B = base + p->off[BUF_B16];
  void *C = base + p->off[BUF_T];
  const int64_t ldc = g->m, sc = g->m * g->n;
  const int64_t sa = p->a_members > 1 ? p->a_rows * p->a_cols : 0, sb = p->b_members > 1 ? p->b_rows * p->b_cols : 0;
  cublasHandle_t h = (cublasHandle_t)g->handle;
  cublasOperation_t ta = (cublasOperation_t)g->transa, tb = (cublasOperation_t)g->transb;
  const cudaDataType H = CUDA_R_16F;
  const cublasComputeType_t comp = CUBLAS_COMPUTE_32F;
  switch (g->api) {
    case GS_API_GEMM_EX:
      return GS_CALL(cublasGemmEx, h, ta, tb, (int)g->m, (int)g->n, (int)g->k, alpha, A, H, (int)p->a_rows, B, H,
                     (int)p->b_rows, beta, C, F32, (int)ldc, comp, CUBLAS_GEMM_DEFAULT);
    case GS_API_GEMM_EX_64:
      return GS_CALL(cublasGemmEx_64, h, ta, tb, g->m, g->n, g->k, alpha, A, H, p->a_rows, B, H, p->b_rows, beta, C,
                     F32, ldc, comp, CUBLAS_GEMM_DEFAULT);
    case GS_API_GEMM_STRIDED_BATCHED_EX:
    case GS_API_GEMM_BATCHED_EX:
      return GS_CALL(cublasGemmStridedBatchedEx, h, ta, tb, (int)g->m, (int)g->n, (int)g->k, alpha, A, H,
                     (int)p->a_rows, sa, B, H, (int)p->b_rows, sb, beta, C, F32, (int)ldc, sc, (int)g->batch, comp,
                     CUBLAS_GEMM_DEFAULT);
    default:
      return GS_CALL(cublasGemmStridedBatchedEx_64, h, ta, tb, g->m, g->n, g->k, alpha, A, H, p->a_rows, sa, B, H,
                     p->b_rows, sb, beta, C, F32, ldc, sc, g->batch, comp, CUBLAS_GEMM_DEFAULT);
  }
}

/* cublasLtMatmul with the route's own descriptor, kept as a plan (lt.c:
 * its key holds every attribute, so a call in steady state makes only the
 * matmul), into the transient product: host 1 and 0, no epilogue (the
 * output kernel applies it). The caller's workspace. */
static cublasStatus_t lt16(const gs_call *c, const fp16_plan *p, char *base, const char **why) {
  const gs_gemm *g = &c->g;
  if (!route_lt_available()) return CUBLAS_STATUS_NOT_SUPPORTED;
  const void *A = base + p->off[BUF_A16], *B = base + p->off[BUF_B16];
  void *D = base + p->off[BUF_T];
  const void *C = D;
  const void *alpha = &host_one, *beta = &host_zero;
  route_lt_key k;
  route_lt_key_init(&k, c);
  k.compute = CUBLAS_COMPUTE_32F;
  k.scale = F32;
  k.transa = g->transa;
  k.transb = g->transb;
  k.pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  k.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  route_lt_key_layout(&k, 0, CUDA_R_16F, p->a_rows, p->a_cols, p->a_rows, g->batch,
                      p->a_members > 1 ? p->a_rows * p->a_cols : 0);
  route_lt_key_layout(&k, 1, CUDA_R_16F, p->b_rows, p->b_cols, p->b_rows, g->batch,
                      p->b_members > 1 ? p->b_rows * p->b_cols : 0);
  route_lt_key_layout(&k, 2, F32, g->m, g->n, g->m, g->batch, g->m * g->n);
  route_lt_key_layout(&k, 3, F32, g->m, g->n, g->m, g->batch, g->m * g->n);
  k.align[0] = route_lt_alignment(A);
  k.align[1] = route_lt_alignment(B);
  k.align[2] = route_lt_alignment(C);
  k.align[3] = route_lt_alignment(D);
  k.workspace_size = g->workspace_size;
  cublasLtHandle_t h = (cublasLtHandle_t)g->handle;
  cublasStatus_t st;
  const route_lt_plan *plan = route_lt_plan_get(h, &k, NULL, &st, why);
  if (!plan) return st;
  st = route_lt_matmul(h, plan, alpha, A, B, beta, C, D, NULL, g->workspace, g->workspace_size, g->stream);
  route_lt_plan_put(plan);
  return st;
}

/* ---- the route ------------------------------------------------------------------------ */
static int fp16_decline(gs_call *c, const char *why) { return ROUTE_DECLINE(c, "fp16", "%s", why); }

int route_fp16(gs_call *c) {
  char why_buf[128];
  fp16_plan p;
  const char *why = plan(c, &p);
  if (why) return fp16_decline(c, why);
  if (!c->ctx || c->sm < 0) return fp16_decline(c, "the call's device is unknown");
  /* GEMMSHIM_MODE=fp16 reaches any device; the route needs fp16 tensor
   * cores (compute capability 7.0 and newer). */
  if (c->sm < 70) {
    snprintf(why_buf, sizeof why_buf, "the device (sm_%d.%d) has no fp16 tensor cores (7.0 or newer)", c->sm / 10,
             c->sm % 10);
    return fp16_decline(c, why_buf);
  }
  why = transient_capture_why(c);
  if (why) return fp16_decline(c, why);
  kernel_ctx kc = route_kernel_ctx(c);
  const fp16_launch l = {&kc, (CUstream)c->g.stream, c->sm};
  why = route_kernels_ready(&kc);
  if (!why) why = fp16_kernels_ready(&l);
  if (why) {
    snprintf(why_buf, sizeof why_buf, "kernels not loaded (%s)", why);
    return fp16_decline(c, why_buf);
  }
  gs_transient t;
  why = transient_alloc(c, p.bytes, &t);
  if (why) return fp16_decline(c, why);
  call_work_begin(c, GS_ROUTE_FP16);
  char *base = (char *)(uintptr_t)t.ptr;
  CUresult r = scale_operands(c, &p, &l, base);
  if (r != CUDA_SUCCESS) {
    transient_release(&t);
    snprintf(why_buf, sizeof why_buf, "scale kernel launch failed (CUresult %d)", (int)r);
    return fp16_decline(c, why_buf);
  }
  if (c->gpu.on) gpu_time_mark(c, GS_GPU_EV_GEMM_BEGIN);
  const char *plan_why = NULL;
  cublasStatus_t s = c->g.api == GS_API_LT_MATMUL ? lt16(c, &p, base, &plan_why) : gemm_ex16(c, &p, base);
  if (c->gpu.on) gpu_time_mark(c, GS_GPU_EV_GEMM_END);
  if (s != CUBLAS_STATUS_SUCCESS) {
    /* A failed cuBLAS call writes nothing, and nothing else has written
     * the caller's memory: native gives the caller cuBLAS's own answer. */
    transient_release(&t);
    if (!plan_why) {
      snprintf(why_buf, sizeof why_buf, "fp16 GEMM returned status %d", (int)s);
      plan_why = why_buf;
    }
    return fp16_decline(c, plan_why);
  }
  r = write_output(c, &p, &l, base);
  if (r != CUDA_SUCCESS) {
    /* The product sits in the transient buffer; the caller's C is
     * untouched, so native can still run the call. */
    transient_release(&t);
    snprintf(why_buf, sizeof why_buf, "output kernel launch failed (CUresult %d)", (int)r);
    return fp16_decline(c, why_buf);
  }
  transient_release(&t);
  c->route = GS_ROUTE_FP16;
  c->backend = c->g.api == GS_API_LT_MATMUL ? "lt-fp16" : "cublas-fp16";
  return CUBLAS_STATUS_SUCCESS;
}
