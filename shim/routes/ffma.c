/* ffma.c: bf16/fp16 GEMMs with fp32 compute, run as fp32 GEMMs.
 *
 * GPUs without bf16 tensor cores (sm_60-sm_75) run cuBLAS's bf16 GEMM
 * through a convert-then-multiply path about 1.85x slower than sgemm (GTX
 * 1080, 4096^2). Here A and B are widened to fp32 in transient device
 * buffers by the shim's kernels, the real fp32 GEMM runs on the caller's
 * handle and stream with beta 0 into an fp32 result, and the output kernel
 * narrows it into the caller's type, adding beta * C on the way. The
 * caller's tensors keep their types and memory; the buffers are freed
 * stream-ordered.
 *
 * Every byte of the buffer is written before it is read, from the call's
 * inputs alone, and nothing is accumulated in place: two replays of two
 * executables of one captured call that overlap write the same bytes
 * (docs/graphs.md). Hence beta * C in the output kernel rather than C
 * widened into the result for the GEMM to accumulate onto; a cuBLASLt
 * relu/gelu epilogue, which must see beta * C before the activation, gets
 * C widened into a buffer of its own and runs out of place instead.
 *
 * Anything this file does not handle declines before touching caller memory
 * and runs native with the reason logged. */
#include <stdio.h>
#include <string.h>

#include "../../kernels/kernels.h"
#include "cost.h"
#include "memory.h"
#include "../resolve.h"
#include "lt.h"
#include "../shim.h"
#include "../work.h"
#include "../base/sys.h"

#define F32 CUDA_R_32F

static int half_type(int t) { return t == CUDA_R_16BF || t == CUDA_R_16F; }

static int fp32_compute(int ct) { return ct == CUBLAS_COMPUTE_32F || ct == CUBLAS_COMPUTE_32F_PEDANTIC; }

/* cuBLAS takes the "fast" fp32 compute types with fp32 A, B and C only. */
static int fast_compute(int ct) {
  return ct == CUBLAS_COMPUTE_32F_FAST_16BF || ct == CUBLAS_COMPUTE_32F_FAST_16F || ct == CUBLAS_COMPUTE_32F_FAST_TF32;
}

/* The fp32 GEMM keeps a pedantic request; anything else runs plain 32F. */
static cublasComputeType_t fp32_compute_for(int ct) {
  return ct == CUBLAS_COMPUTE_32F_PEDANTIC ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
}

/* The plan of one call: operand shapes as stored and buffer offsets. */
typedef struct ffma_plan {
  int64_t a_rows, a_cols, b_rows, b_cols;
  int own_out;   /* the fp32 result goes to a transient buffer, then narrowed */
  int c_out;     /* the output kernel adds beta * C (bf16/fp16 C, beta may be nonzero) */
  int c_apart;   /* Lt relu/gelu: C widened apart, the fp32 matmul out of place */
  int dev_zero;  /* the fp32 GEMM's beta 0 as a device scalar (device pointer mode) */
  int own_bias;  /* Lt bias widened to fp32 */
  int64_t bias_stride; /* Lt: the caller's bias batch stride (elements) */
  size_t off[6]; /* A32, B32, result, bias32, C32 (c_apart), the device zero */
  size_t bytes;
  char why[GS_COST_WHY]; /* the cost gate's reason */
} ffma_plan;

enum { BUF_A, BUF_B, BUF_C, BUF_BIAS, BUF_C32, BUF_ZERO };

static const float host_zero = 0.0f;

static const char *check_types(const gs_gemm *g) {
  if (!half_type(g->a_type) || g->b_type != g->a_type) return "A and B are not both bf16 or both fp16";
  if (fast_compute(g->compute_type))
    return "a 32f_fast compute type takes fp32 A and B only (forwarded for cuBLAS's own error)";
  if (!fp32_compute(g->compute_type)) return "compute type is not fp32";
  if (g->c_type != g->a_type && g->c_type != F32) return "C is neither fp32 nor the type of A and B";
  if (g->d_type != g->c_type) return "D's type differs from C's";
  return NULL;
}


/* CUBLAS_TENSOR_OP_MATH lets cuBLAS run an fp32 GEMM as COMPUTE_32F_FAST_16F:
 * the widened inputs rounded to fp16, so bf16 values beyond fp16's range
 * become infinities. The route leaves the caller's handle as it is, so such
 * a handle keeps its GEMMs native. TF32 rounding is exact on widened
 * bf16/fp16 values, so the TF32 mode is fine. CUBLAS_PEDANTIC_MATH is fine
 * too: the fp32 GEMM runs on the caller's handle, pedantic as well, and
 * exactly widened inputs with fp32 accumulation are the precision the
 * call prescribes. */
static const char *check_math_mode(const gs_gemm *g) {
  unsigned mode;
  const char *why = route_handle_math(g, &mode);
  if (why) return why;
  if (mode == CUBLAS_TENSOR_OP_MATH)
    return "the handle's math mode CUBLAS_TENSOR_OP_MATH would round the fp32 GEMM's inputs to fp16";
  return NULL;
}

static const char *plan(const gs_call *c, ffma_plan *p) {
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
  if (g->m == 0 || g->n == 0 || g->k == 0 || g->batch == 0) return "empty GEMM: nothing to cast";
  if ((why = route_check_min_flops(g, GS_ROUTE_FFMA))) return why;
  if (route_is_ptr_array(g->api)) {
    if (g->c_type == F32) return "pointer-array batch with fp32 C";
  }
  why = g->api == GS_API_LT_MATMUL ? route_lt_bias_stride(g, &p->bias_stride) : check_math_mode(g);
  if (why) return why;

  p->own_out = g->c_type != F32;
  const int read_c = p->own_out && route_beta_may_be_nonzero(g);
  /* relu(alpha*AB + beta*C + bias): beta * C must come before the
   * activation, so it stays in cuBLASLt's matmul. */
  p->c_apart = read_c && g->api == GS_API_LT_MATMUL && (g->epilogue & (CUBLASLT_EPILOGUE_RELU | CUBLASLT_EPILOGUE_GELU));
  p->c_out = read_c && !p->c_apart;
  p->dev_zero = p->own_out && !p->c_apart && route_device_scalars(g);
  why = cost_gate_ffma(c, (double)p->a_rows * (double)p->a_cols * (double)g->batch,
                       (double)p->b_rows * (double)p->b_cols * (double)g->batch, p->own_out,
                       p->c_apart ? GS_COST_FFMA_C_WIDENED : p->c_out ? GS_COST_FFMA_C_READ : GS_COST_FFMA_C_NONE,
                       p->why);
  if (why) return why;
  p->own_bias = g->bias && g->bias_type != F32 && (g->epilogue & CUBLASLT_EPILOGUE_BIAS);
  /* A widened bias with a batch stride: one vector of m per member. */
  int64_t bias_members = p->bias_stride ? g->batch : 1;
  const transient_part parts[6] = {
      {p->a_rows, p->a_cols, g->batch, 4},
      {p->b_rows, p->b_cols, g->batch, 4},
      {g->m, g->n, p->own_out ? g->batch : 0, 4},
      {g->m, bias_members, p->own_bias ? 1 : 0, 4},
      {g->m, g->n, p->c_apart ? g->batch : 0, 4},
      {1, 1, p->dev_zero ? 1 : 0, 4},
  };
  return transient_plan(parts, 6, gs_opt.ffma_max_bytes, "needs more transient memory than GEMMSHIM_FFMA_MAX_BYTES",
                        p->off, &p->bytes);
}

/* ---- casts in ---------------------------------------------------------------- */

/* A, B, C (Lt relu/gelu only) and the bias share one type (check_types,
 * check_lt): one launch widens them all, and stores the device zero. */
static CUresult casts_in(const gs_call *c, kernel_ctx *kc, const ffma_plan *p, char *base) {
  const gs_gemm *g = &c->g;
  const int arr = route_is_ptr_array(g->api);
  kernel_cast_operand ops[4];
  int n = 0;
  ops[n++] = (kernel_cast_operand){g->a_type, g->A, arr, g->lda, g->stride_a, base + p->off[BUF_A], 0, p->a_rows,
                                   p->a_rows * p->a_cols, p->a_rows, p->a_cols, g->batch};
  ops[n++] = (kernel_cast_operand){g->b_type, g->B, arr, g->ldb, g->stride_b, base + p->off[BUF_B], 0, p->b_rows,
                                   p->b_rows * p->b_cols, p->b_rows, p->b_cols, g->batch};
  if (p->c_apart)
    ops[n++] = (kernel_cast_operand){g->c_type, g->C, arr, g->ldc, g->stride_c, base + p->off[BUF_C32], 0, g->m,
                                     g->m * g->n, g->m, g->n, g->batch};
  /* A bias with a batch stride: one vector of m per member. */
  if (p->own_bias)
    ops[n++] = (kernel_cast_operand){g->bias_type, g->bias, 0, g->m, p->bias_stride, base + p->off[BUF_BIAS], 0,
                                     g->m, g->m, g->m, 1, p->bias_stride ? g->batch : 1};
  return kernel_widen_operands_zero(kc, g->stream, ops, n, p->dev_zero ? (float *)(base + p->off[BUF_ZERO]) : NULL);
}

/* D = narrow(result + beta * C): C read here, never copied into the
 * buffer; beta from the caller's pointer in device mode. */
static CUresult cast_out(const gs_call *c, kernel_ctx *kc, const ffma_plan *p, char *base) {
  const gs_gemm *g = &c->g;
  const float *res = (const float *)(base + p->off[BUF_C]);
  const int arr = route_is_ptr_array(g->api);
  const int dev = route_device_scalars(g);
  const kernel_cast_c cb = {.c = g->C,
                            .c_array = arr,
                            .ld_c = g->ldc,
                            .stride_c = g->stride_c,
                            .beta = dev || !g->beta ? 0.0f : *(const float *)g->beta,
                            .beta_ptr = dev ? (const float *)g->beta : NULL};
  return kernel_narrow_c(kc, g->stream, g->d_type, res, g->m, g->m * g->n, g->D, arr, g->ldd, g->stride_d, g->m,
                         g->n, g->batch, p->c_out ? &cb : NULL);
}

/* ---- the fp32 GEMM ------------------------------------------------------------ */
/* The real fp32 entry point this call uses; pointer-array batches run as
 * strided batches over the transient buffers. */
static gs_sys_id fp32_entry(gs_api api) {
  switch (api) {
    case GS_API_GEMM_EX: return GS_SYS_cublasGemmEx;
    case GS_API_GEMM_EX_64: return GS_SYS_cublasGemmEx_64;
    case GS_API_GEMM_STRIDED_BATCHED_EX:
    case GS_API_GEMM_BATCHED_EX: return GS_SYS_cublasGemmStridedBatchedEx;
    default: return GS_SYS_cublasGemmStridedBatchedEx_64;
  }
}

/* The fp32 GEMM's beta: the caller's with an fp32 C (written in place),
 * else 0 (the result is only written), on the host or the device zero. */
static const void *fp32_beta(const gs_gemm *g, const ffma_plan *p, char *base) {
  if (!p->own_out || p->c_apart) return g->beta;
  return p->dev_zero ? (const void *)(base + p->off[BUF_ZERO]) : &host_zero;
}

static cublasStatus_t gemm_ex_fp32(const gs_call *c, const ffma_plan *p, char *base) {
  const gs_gemm *g = &c->g;
  if (!resolve_hooked(fp32_entry(g->api))) return CUBLAS_STATUS_NOT_SUPPORTED;
  const void *A = base + p->off[BUF_A], *B = base + p->off[BUF_B];
  const void *beta = fp32_beta(g, p, base);
  void *C = p->own_out ? (void *)(base + p->off[BUF_C]) : g->D;
  int64_t ldc = p->own_out ? g->m : g->ldc;
  int64_t sc = p->own_out ? g->m * g->n : g->stride_c;
  int64_t sa = p->a_rows * p->a_cols, sb = p->b_rows * p->b_cols;
  cublasComputeType_t comp = fp32_compute_for(g->compute_type);
  cublasHandle_t h = (cublasHandle_t)g->handle;
  cublasOperation_t ta = (cublasOperation_t)g->transa, tb = (cublasOperation_t)g->transb;
  switch (g->api) {
    case GS_API_GEMM_EX:
      return GS_CALL(cublasGemmEx, h, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha, A, F32, (int)p->a_rows, B,
                     F32, (int)p->b_rows, beta, C, F32, (int)ldc, comp, CUBLAS_GEMM_DEFAULT);
    case GS_API_GEMM_EX_64:
      return GS_CALL(cublasGemmEx_64, h, ta, tb, g->m, g->n, g->k, g->alpha, A, F32, p->a_rows, B, F32, p->b_rows,
                     beta, C, F32, ldc, comp, CUBLAS_GEMM_DEFAULT);
    case GS_API_GEMM_STRIDED_BATCHED_EX:
    case GS_API_GEMM_BATCHED_EX:
      return GS_CALL(cublasGemmStridedBatchedEx, h, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha, A, F32,
                     (int)p->a_rows, sa, B, F32, (int)p->b_rows, sb, beta, C, F32, (int)ldc, sc, (int)g->batch,
                     comp, CUBLAS_GEMM_DEFAULT);
    case GS_API_GEMM_STRIDED_BATCHED_EX_64:
    case GS_API_GEMM_BATCHED_EX_64:
      return GS_CALL(cublasGemmStridedBatchedEx_64, h, ta, tb, g->m, g->n, g->k, g->alpha, A, F32, p->a_rows, sa, B,
                     F32, p->b_rows, sb, beta, C, F32, ldc, sc, g->batch, comp, CUBLAS_GEMM_DEFAULT);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

/* Lt: the same descriptor in fp32 (transposes, pointer mode, epilogue,
 * bias), fp32 layouts for the transient buffers, the caller's workspace.
 * The plan is kept (routes/lt.c): its key holds every attribute, so a call
 * in steady state makes only the matmul. The transient buffers' addresses
 * vary per call but not their alignment, which is all the plan holds. */
static cublasStatus_t lt_fp32(const gs_call *c, const ffma_plan *p, char *base, void *ws, size_t wss,
                              const char **why) {
  const gs_gemm *g = &c->g;
  if (!route_lt_available()) return CUBLAS_STATUS_NOT_SUPPORTED;
  const void *bias = p->own_bias ? (const void *)(base + p->off[BUF_BIAS]) : g->bias;
  void *D = p->own_out ? (void *)(base + p->off[BUF_C]) : g->D;
  const void *C = p->c_apart ? (const void *)(base + p->off[BUF_C32]) : p->own_out ? D : g->C;
  int64_t ldc = p->own_out ? g->m : g->ldc, ldd = p->own_out ? g->m : g->ldd;
  int64_t sc = p->own_out ? g->m * g->n : g->stride_c, sd = p->own_out ? g->m * g->n : g->stride_d;
  const void *A = base + p->off[BUF_A], *B = base + p->off[BUF_B];
  route_lt_key k;
  route_lt_key_init(&k, c);
  k.compute = fp32_compute_for(g->compute_type);
  k.scale = F32;
  k.transa = g->transa;
  k.transb = g->transb;
  k.pointer_mode = g->pointer_mode;
  k.epilogue = (uint32_t)g->epilogue;
  if (g->bias) {
    k.has_bias = 1;
    k.bias_type = F32;
  }
  k.bias_stride = p->own_bias && p->bias_stride ? g->m : p->bias_stride;
  route_lt_key_layout(&k, 0, F32, p->a_rows, p->a_cols, p->a_rows, g->batch, p->a_rows * p->a_cols);
  route_lt_key_layout(&k, 1, F32, p->b_rows, p->b_cols, p->b_rows, g->batch, p->b_rows * p->b_cols);
  route_lt_key_layout(&k, 2, F32, g->m, g->n, ldc, g->batch, sc);
  route_lt_key_layout(&k, 3, F32, g->m, g->n, ldd, g->batch, sd);
  k.align[0] = route_lt_alignment(A);
  k.align[1] = route_lt_alignment(B);
  k.align[2] = route_lt_alignment(C);
  k.align[3] = route_lt_alignment(D);
  k.workspace_size = wss;
  cublasLtHandle_t h = (cublasLtHandle_t)g->handle;
  cublasStatus_t s;
  const route_lt_plan *plan = route_lt_plan_get(h, &k, bias, &s, why);
  if (!plan) return s;
  s = route_lt_matmul(h, plan, g->alpha, A, B, fp32_beta(g, p, base), C, D, bias, ws, wss, g->stream);
  route_lt_plan_put(plan);
  return s;
}

/* ---- the route ---------------------------------------------------------------- */
/* Every decline of this route reads "ffma declined: <why>; ran native". */
#define FFMA_DECLINE(c, ...) ROUTE_DECLINE((c), "ffma", __VA_ARGS__)

int route_ffma(gs_call *c) {
  ffma_plan p;
  const char *why = plan(c, &p);
  if (why) return FFMA_DECLINE(c, "%s", why);
  why = transient_capture_why(c);
  if (why) return FFMA_DECLINE(c, "%s", why);
  kernel_ctx kc = route_kernel_ctx(c);
  why = route_kernels_ready(&kc);
  if (why) return FFMA_DECLINE(c, "kernels not loaded (%s)", why);
  gs_transient t;
  why = transient_alloc(c, p.bytes, &t);
  if (why) return FFMA_DECLINE(c, "%s", why);
  call_work_begin(c, GS_ROUTE_FFMA);
  char *base = (char *)(uintptr_t)t.ptr;
  CUresult r = casts_in(c, &kc, &p, base);
  if (r != CUDA_SUCCESS) {
    transient_release(&t);
    return FFMA_DECLINE(c, "cast kernel launch failed (CUresult %d)", (int)r);
  }
  if (c->gpu.on) gpu_time_mark(c, GS_GPU_EV_GEMM_BEGIN);
  const char *plan_why = NULL;
  cublasStatus_t s = c->g.api == GS_API_LT_MATMUL
                         ? lt_fp32(c, &p, base, c->g.workspace, c->g.workspace_size, &plan_why)
                         : gemm_ex_fp32(c, &p, base);
  if (c->gpu.on) gpu_time_mark(c, GS_GPU_EV_GEMM_END);
  if (s != CUBLAS_STATUS_SUCCESS) {
    /* Nothing of the caller's was written yet: a failed fp32 GEMM writes
     * nothing, and with fp32 C it is the only writer. Native gives the
     * caller cuBLAS's own answer. */
    transient_release(&t);
    if (plan_why) return FFMA_DECLINE(c, "%s", plan_why);
    return FFMA_DECLINE(c, "fp32 GEMM returned status %d", (int)s);
  }
  if (p.own_out) {
    r = cast_out(c, &kc, &p, base);
    if (r != CUDA_SUCCESS) {
      /* The caller's C is untouched (the result sits in the transient
       * buffer), so native can still run it. */
      transient_release(&t);
      return FFMA_DECLINE(c, "narrowing kernel launch failed (CUresult %d)", (int)r);
    }
  }
  transient_release(&t);
  c->route = GS_ROUTE_FFMA;
  c->backend = c->g.api == GS_API_LT_MATMUL ? "lt-fp32" : "sgemm";
  return CUBLAS_STATUS_SUCCESS;
}
