/* checks.c: what every non-native route asks of a GEMM before it
 * touches anything: arguments cuBLAS would accept, Lt descriptors in the
 * forms the routes rebuild, and the shim's kernels loaded in the call's
 * context. Each check returns NULL or the reason, in the words the routing
 * log shows. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <cublasLt.h>

#include "../../kernels/kernels.h"
#include "../resolve.h"
#include "../shim.h"
#include "../base/sys.h"

kernel_ctx route_kernel_ctx(const gs_call *c) {
  return (kernel_ctx){.ctx = (CUcontext)c->ctx, .ctx_id = c->ctx_id, .id_known = 1, .sm = c->sm};
}

/* The device lookup loaded the driver where it found the call's context;
 * asked here as well, so that a call whose lookup failed before that says
 * why the driver could not be had. */
const char *route_kernels_ready(kernel_ctx *kc) {
  const char *why = resolve_driver();
  return why ? why : kernels_ready(kc);
}

int route_beta_may_be_nonzero(const gs_gemm *g) {
  if (g->pointer_mode != CUBLAS_POINTER_MODE_HOST || !g->beta) return 1;
  return *(const float *)g->beta != 0.0f;
}

int route_device_scalars(const gs_gemm *g) {
  return g->pointer_mode == (g->api == GS_API_LT_MATMUL ? CUBLASLT_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_DEVICE);
}

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

void route_operand_shapes(const gs_gemm *g, int64_t *a_rows, int64_t *a_cols, int64_t *b_rows, int64_t *b_cols) {
  *a_rows = g->transa == CUBLAS_OP_N ? g->m : g->k;
  *a_cols = g->transa == CUBLAS_OP_N ? g->k : g->m;
  *b_rows = g->transb == CUBLAS_OP_N ? g->k : g->n;
  *b_cols = g->transb == CUBLAS_OP_N ? g->n : g->k;
}

/* The combinations of A/B, C and compute type the cuBLAS documentation
 * lists for cublasGemmEx (and cublasLtMatmul) among fp32-compute GEMMs, the
 * only ones a route takes: COMPUTE_32F(_PEDANTIC) with bf16 or fp16 A and B
 * and C of their type or fp32, or fp32 throughout; the 32F_FAST_* types
 * with fp32 A, B and C only (cublasComputeType_t: "for 32-bit input and
 * output matrices"). */
static int listed_fp32_compute(const gs_gemm *g) {
  int a = g->a_type, c = g->c_type;
  if (g->b_type != a) return 0;
  switch (g->compute_type) {
    case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_PEDANTIC:
      if (a == CUDA_R_16BF || a == CUDA_R_16F) return c == a || c == CUDA_R_32F;
      return a == CUDA_R_32F && c == CUDA_R_32F;
    case CUBLAS_COMPUTE_32F_FAST_16BF: case CUBLAS_COMPUTE_32F_FAST_16F: case CUBLAS_COMPUTE_32F_FAST_TF32:
      return a == CUDA_R_32F && c == CUDA_R_32F;
    default:
      return 0;
  }
}

/* cublasGemmAlgo_t's values (cublas_api.h); anything else is NOT_SUPPORTED.
 * CUBLAS_GEMM_AUTOTUNE (999) is spelled out: CUDA 12's headers, which the
 * shim also builds against, do not name it. */
#define GEMM_AUTOTUNE 999
static int listed_algo(int a) {
  return (a >= CUBLAS_GEMM_DEFAULT && a <= CUBLAS_GEMM_ALGO23) ||
         (a >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && a <= CUBLAS_GEMM_ALGO15_TENSOR_OP) || a == GEMM_AUTOTUNE;
}

/* Arguments cuBLAS would reject are forwarded untouched so the caller gets
 * cuBLAS's own error, never one of the shim's making: a route runs only
 * what the documentation says cuBLAS accepts. The conditions are the
 * documented ones (cuBLAS documentation: cublasGemmEx and the batched forms'
 * error values and type table; cublasLtMatmul's in-place and out-of-place
 * rules; cublasLtMatmulDescAttributes_t's bias and scale types); the
 * stand-in checks the same (tests/standin/cublas.c, cublaslt_matmul.c) and
 * tests/integration/test_arguments.py holds every route to them. */
int route_is_ptr_array(gs_api api) { return api == GS_API_GEMM_BATCHED_EX || api == GS_API_GEMM_BATCHED_EX_64; }

/* A strided batch's D members must not overlap: the routes' output
 * kernels give each element one writer, and a member that overlaps the
 * next would have two. Checked before anything is allocated; cuBLAS
 * defines no result for such a call, so it runs native. (A pointer array
 * lives on the device and is not read here.) */
const char *route_check_output_members(const gs_gemm *g) {
  if (g->batch <= 1 || route_is_ptr_array(g->api)) return NULL;
  int64_t span;
  if (__builtin_mul_overflow(g->ldd, max1(g->n) - 1, &span) || __builtin_add_overflow(span, max1(g->m), &span) ||
      g->stride_d < span)
    return "D's batch members overlap (stride below ldd x (n - 1) + m): an element would have two writers";
  return NULL;
}

/* cuBLAS 13.10's batch invariance (its cublasLt.h): BATCH_INVARIANCE_FLAGS,
 * descriptor id 41, defaults to CUBLASLT_BATCH_INVARIANCE_UNSET (0x8000),
 * under which "batch invariance is controlled by the
 * CUBLAS_BATCH_INVARIANCE_FLAGS environment variable instead"; a value set
 * on the descriptor takes precedence. No route asks the GEMMs it runs for
 * invariance, and the current and delayed fp8 scales span the whole
 * operand, so while the variable asks for it a call that defers to it runs
 * native (decode.c declined every set value but DISABLED, 0, and UNSET).
 * Read once, at the first call a route checks, so that a program may set
 * it after the shim loaded (Python's os.environ before importing its
 * framework). Off: unset, empty, or a number that is 0 (strtoul base 0, as
 * 13.10's library reads it); anything else counts as on, the values 13.10
 * ignores as invalid included (it takes 0-4 and 8): a later release may
 * take more, and a wrong guess this way costs a native call. */
#define LT_BATCH_INVARIANCE_FLAGS 41
#define CUBLAS_13_10 131000 /* cublasLtGetVersion's number: the first release with id 41 */

static pthread_once_t invariance_once = PTHREAD_ONCE_INIT;
static char invariance_why[160]; /* empty: the variable asks for nothing */

static void invariance_read(void) {
  const char *v = getenv("CUBLAS_BATCH_INVARIANCE_FLAGS");
  if (!v || !*v) return;
  char *end;
  if (strtoull(v, &end, 0) == 0 && *end == '\0' && *v != '-' && *v != '+') return;
  char shown[41];
  size_t n = 0;
  for (; v[n] && n < sizeof shown - 1; n++) shown[n] = v[n] > 0x20 && v[n] < 0x7f ? v[n] : '?';
  shown[n] = '\0';
  snprintf(invariance_why, sizeof invariance_why,
           "CUBLAS_BATCH_INVARIANCE_FLAGS=%s%s asks cuBLAS for batch-invariant results, which no route promises",
           shown, v[n] ? "..." : "");
}

#define PROBING "probing whether cuBLASLt reads CUBLAS_BATCH_INVARIANCE_FLAGS"

/* A cuBLASLt answered INVALID_VALUE for id 41, its answer for an id it does
 * not know (cublasLt.h), but also the fault table's for a failed getter: it
 * lacks the attribute only if its version is older than 13.10. NULL when
 * that holds, else the reason the call runs native. */
static const char *confirm_lacks(char *buf, size_t len) {
  size_t v = gs_sys.cublasLtGetVersion ? GS_CALL(cublasLtGetVersion) : 0;
  if (v && v < CUBLAS_13_10) return NULL;
  if (!v)
    snprintf(buf, len, "cublasLtGetVersion %s " PROBING, gs_sys.cublasLtGetVersion ? "returned 0" : "was not found");
  else
    snprintf(buf, len,
             "cublasLtMatmulDescGetAttribute refused BATCH_INVARIANCE_FLAGS on cuBLASLt %zu.%zu.%zu, which has it, "
             PROBING, v / 10000, v / 100 % 100, v % 100);
  return buf;
}

/* Whether the cuBLASLt of the GemmEx family knows id 41: 1 yes, 2 no, 0 not
 * yet known. libcublas.so.13 runs its GEMMs in libcublasLt (it imports the
 * matmul entry points), which reads the variable; whether they honour it
 * is not documented, so they are taken to. */
static int blas_lt_knows_invariance;

static const char *probe_failed(char *buf, size_t len, const char *call, int status) {
  snprintf(buf, len, "%s failed (status %d) " PROBING, call, status);
  return buf;
}

static const char *blas_invariance(char *buf, size_t len) {
  int known = __atomic_load_n(&blas_lt_knows_invariance, __ATOMIC_RELAXED);
  if (known) return known == 1 ? invariance_why : NULL;
  /* Resolving cublasLtMatmul loads cuBLASLt's other entries (resolve.c):
   * a program that only calls the GemmEx family has not resolved it yet. */
  if (!resolve_hooked(GS_SYS_cublasLtMatmul) || !gs_sys.cublasLtMatmulDescGetAttribute ||
      !gs_sys.cublasLtMatmulDescCreate)
    return "CUBLAS_BATCH_INVARIANCE_FLAGS is set and cuBLASLt's descriptor functions were not found " PROBING;
  /* The probe asks the cuBLASLt the hooks resolved; the GemmEx family runs
   * in the one its libcublas loaded. Two majors at once: no answer. */
  const int blas = resolve_cublas_major((const void *)gs_sys.cublasGetMathMode);
  const int lt = resolve_cublas_major((const void *)gs_sys.cublasLtMatmulDescCreate);
  if (blas && lt && blas != lt) {
    snprintf(buf, len, "CUBLAS_BATCH_INVARIANCE_FLAGS is set and libcublas.so.%d runs beside libcublasLt.so.%d: "
             "cannot tell whether its GEMMs read it", blas, lt);
    return buf;
  }
  cublasLtMatmulDesc_t d = NULL;
  int32_t v = 0;
  size_t w = 0;
  cublasStatus_t s = GS_CALL(cublasLtMatmulDescCreate, &d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) return probe_failed(buf, len, "cublasLtMatmulDescCreate", (int)s);
  s = GS_CALL(cublasLtMatmulDescGetAttribute, d, (cublasLtMatmulDescAttributes_t)LT_BATCH_INVARIANCE_FLAGS, &v,
              sizeof v, &w);
  if (gs_sys.cublasLtMatmulDescDestroy) (void)GS_CALL(cublasLtMatmulDescDestroy, d);
  if (s == CUBLAS_STATUS_SUCCESS) {
    known = 1;
  } else if (s == CUBLAS_STATUS_INVALID_VALUE) {
    const char *why = confirm_lacks(buf, len);
    if (why) return why;
    known = 2;
  } else {
    return probe_failed(buf, len, "cublasLtMatmulDescGetAttribute", (int)s);
  }
  __atomic_store_n(&blas_lt_knows_invariance, known, __ATOMIC_RELAXED);
  return known == 1 ? invariance_why : NULL;
}

const char *route_check_batch_invariance(const gs_gemm *g, char *buf, size_t len) {
  pthread_once(&invariance_once, invariance_read);
  if (!invariance_why[0]) return NULL;
  if (g->api != GS_API_LT_MATMUL) return blas_invariance(buf, len);
  /* What decode.c read from the call's own descriptor. */
  switch (g->lt_invariance) {
    case 1: return invariance_why; /* UNSET */
    case 0: return NULL;           /* DISABLED */
    case -1: return confirm_lacks(buf, len);
    default: return "CUBLAS_BATCH_INVARIANCE_FLAGS is set and the descriptor's BATCH_INVARIANCE_FLAGS was not read";
  }
}

const char *route_check_min_flops(const gs_gemm *g, int route) {
  const double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)g->batch;
  if (route == GS_ROUTE_FFMA && flops < (double)gs_opt.ffma_min_flops) return "GEMM smaller than GEMMSHIM_FFMA_MIN_FLOPS";
  if (route == GS_ROUTE_FP16 && flops < (double)gs_opt.fp16_min_flops) return "GEMM smaller than GEMMSHIM_FP16_MIN_FLOPS";
  return NULL;
}

const char *route_check_arguments(const gs_gemm *g) {
  int64_t a_rows, a_cols, b_rows, b_cols;
  route_operand_shapes(g, &a_rows, &a_cols, &b_rows, &b_cols);
  if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0) return "negative size (forwarded for cuBLAS's own error)";
  if (g->lda < max1(a_rows) || g->ldb < max1(b_rows) || g->ldc < max1(g->m) || g->ldd < max1(g->m))
    return "leading dimension too small (forwarded for cuBLAS's own error)";
  if (!g->handle || !g->alpha || !g->beta || !g->A || !g->B || !g->C || !g->D)
    return "NULL handle or pointer (forwarded for cuBLAS's own error)";
  if ((g->transa != CUBLAS_OP_N && g->transa != CUBLAS_OP_T && g->transa != CUBLAS_OP_C) ||
      (g->transb != CUBLAS_OP_N && g->transb != CUBLAS_OP_T && g->transb != CUBLAS_OP_C))
    return "unsupported transpose (forwarded for cuBLAS's own error)";
  if (!listed_fp32_compute(g))
    return "types and compute type are not a combination cuBLAS lists for fp32 compute "
           "(forwarded for cuBLAS's own answer)";
  if (g->api == GS_API_LT_MATMUL) {
    if (g->d_type != g->c_type) return "D's type differs from C's (forwarded for cuBLAS's own error)";
    if (g->scale_type != CUDA_R_32F) return "scale type is not fp32 (forwarded for cuBLAS's own error)";
    /* In place is C == D with one layout; two layouts over one matrix
     * conflict. */
    if (g->C == g->D && (g->ldc != g->ldd || g->order_c != g->order_d ||
                         (g->batch > 1 && g->stride_c != g->stride_d)))
      return "C and D are the same memory with different layouts (forwarded for cuBLAS's own error)";
    /* Outside fp8 inputs the bias is D's type. */
    if ((g->epilogue & CUBLASLT_EPILOGUE_BIAS) && g->bias_type != g->d_type)
      return "bias type is not D's type (forwarded for cuBLAS's own error)";
  } else if (!listed_algo(g->algo)) {
    return "algo is not a cublasGemmAlgo_t value (forwarded for cuBLAS's own error)";
  }
  return NULL;
}

const char *route_handle_math(const gs_gemm *g, unsigned *mode) {
  cublasMath_t m;
  if (!gs_sys.cublasGetMathMode || GS_CALL(cublasGetMathMode, (cublasHandle_t)g->handle, &m) != CUBLAS_STATUS_SUCCESS)
    return "cublasGetMathMode failed";
  /* The flag bits (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) aside. */
  *mode = (unsigned)m & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  return NULL;
}

const char *route_check_lt(const gs_gemm *g) {
  /* First: a pointer-array layout's other fields describe arrays of
   * pointers, not the matrices the checks below judge. */
  if (g->lt_unrouted) return g->lt_unrouted;
  if (g->order_a != CUBLASLT_ORDER_COL || g->order_b != CUBLASLT_ORDER_COL || g->order_c != CUBLASLT_ORDER_COL ||
      g->order_d != CUBLASLT_ORDER_COL)
    return "a layout is not column-major";
  switch (g->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_RELU: case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS: case CUBLASLT_EPILOGUE_GELU: case CUBLASLT_EPILOGUE_GELU_BIAS:
      break;
    default:
      return "epilogue other than bias/relu/gelu";
  }
  if (g->a_scale || g->b_scale || g->c_scale || g->d_scale || g->amax_d) return "the caller set scale pointers";
  if ((g->epilogue & CUBLASLT_EPILOGUE_BIAS) && !g->bias) return "bias epilogue without a bias pointer";
  if (g->batch_mismatch) return "the layouts' batch counts differ";
  if (g->shape_mismatch) return "the layouts' shapes disagree (forwarded for cuBLAS's own error)";
  return NULL;
}

const char *route_lt_bias_stride(const gs_gemm *g, int64_t *stride) {
  *stride = 0;
  if (!(g->epilogue & CUBLASLT_EPILOGUE_BIAS) || g->batch < 2) return NULL;
  size_t w = 0;
  if (!gs_sys.cublasLtMatmulDescGetAttribute ||
      GS_CALL(cublasLtMatmulDescGetAttribute, g->lt_desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, stride,
              sizeof *stride, &w) != CUBLAS_STATUS_SUCCESS)
    return "the bias batch stride could not be read";
  if (*stride < 0) return "negative bias batch stride";
  return NULL;
}

const char *route_check_lt_scalars(const gs_gemm *g) {
  const char *why = route_check_lt(g);
  if (why) return why;
  if (g->pointer_mode != CUBLASLT_POINTER_MODE_HOST && g->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    return "alpha/beta pointer mode is a vector mode";
  return NULL;
}
