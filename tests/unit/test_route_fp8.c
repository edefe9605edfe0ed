/* The fp8 route (shim/routes/fp8.c) end to end over the CPU stand-ins: the
 * stand-in libcuda.so.1 with two devices, 9.0 (cuBLASLt's fp8 GEMM, which
 * the stand-in libcublasLt runs with scale pointers on cc >= 8.9) and 6.1
 * (the shim's own fp8 GEMM), running the host build of the shim's kernels
 * (STANDIN_KERNELS). Device memory is host memory there, so results and the
 * sites' rings are read directly.
 *
 * Asserted: results against a float64 reference of the same stored inputs
 * (SQNR >= 25 dB with E4M3 operands, >= 18 dB where one is E5M2), route,
 * backend, exact reasons and log fields; the site stable over repeated
 * calls and "new" on the first only; the first call's scale from its own
 * amax; delayed scaling across calls (a jump in amax saturates the next
 * call, the one after is right again); declines with their exact reasons
 * and the caller's output untouched; every kernel launch failing in turn;
 * cuBLASLt failing (own kernel instead); graph capture. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../kernels/convert.h"
#include "../../kernels/fp8.h"
#include "fp8_sites.h"
#include "resolve.h"
#include "lt.h"
#include "shim.h"
#include "sys.h"

#define DEV_90 0 /* STANDIN_CC order */
#define DEV_61 1
#define DEV_86 2 /* only where own-mma's sm_89 floor is tested */
static const int dev_sm[3] = {90, 61, 86};
static CUcontext ctxs[3];
static CUstream streams[3];
static cublasLtHandle_t lt_handles[3];
static void *standin_cuda, *standin_lt;

/* ---- set-up ---------------------------------------------------------------------- */
/* $(BUILD)/tests/unit/test_route_fp8 -> $(BUILD)/<rel> */
static void build_path(char *out, size_t len, const char *rel) {
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  if (n <= 0) n = 0;
  out[n] = 0;
  char *slash = strrchr(out, '/');
  if (!slash) slash = out;
  snprintf(slash, len - (size_t)(slash - out), "/../../%s", rel);
}

static void *standin_sym(const char *name) {
  void *p = dlsym(standin_cuda, name);
  if (!p) fail_msg("the stand-in libcuda has no %s", name);
  return p;
}

static void push(int dev) { assert_int_equal(gs_sys.cuCtxPushCurrent_v2(ctxs[dev]), CUDA_SUCCESS); }
static void pop(void) {
  CUcontext popped;
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
}

/* Stream-ordered copies the stand-in does not export yet: its streams run
 * work inline and its device memory is host memory, so a plain copy is
 * what the driver call would do. */
static CUresult host_dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
static CUresult host_stream_wait(CUstream s, CUevent e, unsigned flags) { return CUDA_SUCCESS; }

/* No libcublas is loaded here: the GemmEx family's handle answers its math
 * mode from this (cublasCreate leaves CUBLAS_DEFAULT_MATH; cuBLAS
 * documentation, cublasSetMathMode). */
static cublasMath_t handle_math = CUBLAS_DEFAULT_MATH;
static cublasStatus_t fake_get_math_mode(cublasHandle_t h, cublasMath_t *mode) {
  *mode = handle_math;
  return CUBLAS_STATUS_SUCCESS;
}

static int setup(void **state) {
  char kernels[4096], cuda[4096], lt[4096];
  const char *env = getenv("STANDIN_KERNELS");
  if (env && *env) snprintf(kernels, sizeof kernels, "%s", env);
  else build_path(kernels, sizeof kernels, "kernels/libgemmshim_kernels_host.so");
  setenv("STANDIN_KERNELS", kernels, 1);
  setenv("STANDIN_CC", "9.0,6.1,8.6", 1);
  build_path(cuda, sizeof cuda, "standin/cu13/libcuda.so.1");
  build_path(lt, sizeof lt, "standin/cu13/libcublasLt.so.13");
  standin_cuda = dlopen(cuda, RTLD_NOW | RTLD_GLOBAL);
  standin_lt = standin_cuda ? dlopen(lt, RTLD_NOW | RTLD_GLOBAL) : NULL;
  if (!standin_lt) {
    fprintf(stderr, "test_route_fp8: cannot load the stand-in %s: %s\n", standin_cuda ? lt : cuda, dlerror());
    return -1;
  }
  const char *why = resolve_driver();
  if (why || !resolve_hooked(GS_SYS_cublasLtMatmul) || !gs_sys.cublasLtCreate) {
    fprintf(stderr, "test_route_fp8: driver or cuBLASLt not resolved: %s\n", why ? why : "cublasLtMatmul");
    return -1;
  }
  if (gs_sys.cuInit(0) != CUDA_SUCCESS) return -1;
  if (!gs_sys.cuMemcpyDtoDAsync_v2) {
    fprintf(stderr, "test_route_fp8: the stand-in has no cuMemcpyDtoDAsync_v2; using a host copy\n");
    gs_sys.cuMemcpyDtoDAsync_v2 = host_dtod_async;
  }
  gs_sys.cublasGetMathMode = fake_get_math_mode;
  if (!gs_sys.cuStreamWaitEvent) {
    fprintf(stderr, "test_route_fp8: the stand-in has no cuStreamWaitEvent; streams run inline, so none is needed\n");
    gs_sys.cuStreamWaitEvent = host_stream_wait;
  }
  CUresult (*create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
  CUresult (*stream_create)(CUstream *, unsigned);
  *(void **)&create = standin_sym("cuCtxCreate_v4");
  *(void **)&stream_create = standin_sym("cuStreamCreate");
  for (int d = 0; d < 3; d++) {
    CUcontext popped;
    if (create(&ctxs[d], NULL, 0, d) != CUDA_SUCCESS) return -1;
    if (stream_create(&streams[d], 0) != CUDA_SUCCESS) return -1;
    if (gs_sys.cublasLtCreate(&lt_handles[d]) != CUBLAS_STATUS_SUCCESS) return -1;
    gs_sys.cuCtxPopCurrent_v2(&popped);
  }
  gs_opt.mode = GS_MODE_FP8;
  gs_opt.fp8_format = GS_FP8_FORMAT_E4M3;
  gs_opt.fp8_backend = GS_FP8_BACKEND_AUTO;
  gs_opt.fp8_history = 16;
  gs_opt.fp8_margin = 0;
  gs_opt.fp8_max_sites = 4096;
  gs_opt.fp8_max_bytes = 1u << 30;
  /* Reasons are only composed when someone reads them: a log path (never
   * opened here, since these tests do not call log_record) says so. */
  snprintf(gs_opt.log_path, sizeof gs_opt.log_path, "/dev/null");
  return 0;
}

static int test_setup(void **state) {
  gs_fault_clear();
  /* The tests written for delayed scaling keep it; the current recipe's
   * have their own setup. */
  gs_opt.fp8_recipe = GS_FP8_RECIPE_DELAYED;
  gs_opt.fp8_format = GS_FP8_FORMAT_E4M3;
  gs_opt.fp8_backend = GS_FP8_BACKEND_AUTO;
  gs_opt.fp8_max_bytes = 1u << 30;
  /* These shapes are far below what the cost gate lets through on sm_89+
   * (tests/unit/test_cost.c and test_cost_gate.py test the gate): the
   * route's mechanics are what is tested here. */
  gs_opt.gate = 0;
  return 0;
}

static int test_teardown(void **state) {
  gs_fault_clear();
  return 0;
}

/* ---- data ---------------------------------------------------------------------------- */
static uint64_t rng = 0x6670385f726f7574ull;
static double uniform(void) { /* splitmix64 -> [-1, 1) */
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}

static size_t tsize(int t) { return t == CUDA_R_32F ? 4 : 2; }

static double get(const void *base, int t, int64_t i) {
  switch (t) {
  case CUDA_R_16BF: return gs_bf16_to_f32(((const uint16_t *)base)[i]);
  case CUDA_R_16F: return gs_f16_to_f32(((const uint16_t *)base)[i]);
  default: return ((const float *)base)[i];
  }
}

static void put(void *base, int t, int64_t i, double v) {
  switch (t) {
  case CUDA_R_16BF: ((uint16_t *)base)[i] = gs_f32_to_bf16_rn((float)v); break;
  case CUDA_R_16F: ((uint16_t *)base)[i] = gs_f32_to_f16_rn((float)v); break;
  default: ((float *)base)[i] = (float)v; break;
  }
}

static void *dev_alloc(int dev, size_t bytes) {
  CUdeviceptr p;
  push(dev);
  assert_int_equal(gs_sys.cuMemAlloc_v2(&p, bytes), CUDA_SUCCESS);
  pop();
  return (void *)(uintptr_t)p;
}

static void dev_free(int dev, void *p) {
  if (!p) return;
  push(dev);
  assert_int_equal(gs_sys.cuMemFree_v2((CUdeviceptr)(uintptr_t)p), CUDA_SUCCESS);
  pop();
}

/* ---- one GEMM ------------------------------------------------------------------------- */
typedef struct problem {
  int dev;
  gs_api api;
  int ta, tb;
  int64_t m, n, k, batch;
  int ab, cd;         /* A/B type; C/D type */
  int compute;
  int epilogue;       /* cublasLtMatmul only */
  int bias_type;      /* with a bias epilogue */
  float alpha, beta;
  int device_scalars;
  int tag;            /* call site: a return address of its own */
} problem;

typedef struct gemm {
  problem p;
  void *A, *B, *C, *bias;
  float *scalars;     /* device alpha, beta */
  float alpha, beta;  /* host */
  int64_t a_rows, a_cols, b_rows, b_cols, lda, ldb, ldc, sa, sb, sc;
  size_t a_len, b_len, c_len; /* elements */
  unsigned char *c_before;
  double *ref;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  gs_call c;
  int status;
  double sqnr;
} gemm;

static char site_anchor[256]; /* return addresses: &site_anchor[tag] */

static void fill(gemm *x, double amp) {
  problem *p = &x->p;
  for (size_t i = 0; i < x->a_len; i++) put(x->A, p->ab, (int64_t)i, amp * uniform());
  for (size_t i = 0; i < x->b_len; i++) put(x->B, p->ab, (int64_t)i, amp * uniform());
  for (size_t i = 0; i < x->c_len; i++) put(x->C, p->cd, (int64_t)i, p->beta != 0.0f ? uniform() : NAN);
  if (x->bias)
    for (int64_t i = 0; i < p->m; i++) put(x->bias, p->bias_type, i, 0.5 * uniform());
  memcpy(x->c_before, x->C, x->c_len * tsize(p->cd));
  /* The reference, from the values as stored. */
  for (int64_t b = 0; b < p->batch; b++)
    for (int64_t j = 0; j < p->n; j++)
      for (int64_t i = 0; i < p->m; i++) {
        double s = 0;
        for (int64_t kk = 0; kk < p->k; kk++) {
          int64_t ai = p->ta == CUBLAS_OP_N ? i + kk * x->lda : kk + i * x->lda;
          int64_t bi = p->tb == CUBLAS_OP_N ? kk + j * x->ldb : j + kk * x->ldb;
          s += get(x->A, p->ab, b * x->sa + ai) * get(x->B, p->ab, b * x->sb + bi);
        }
        double v = (double)p->alpha * s;
        if (p->beta != 0.0f) v += (double)p->beta * get(x->C, p->cd, b * x->sc + i + j * x->ldc);
        int e = p->epilogue;
        if (x->bias) v += get(x->bias, p->bias_type, i);
        if (e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS) v = v > 0 ? v : 0;
        if (e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS)
          v = 0.5 * v * (1.0 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)));
        x->ref[(b * p->n + j) * p->m + i] = v;
      }
}

static cublasLtMatrixLayout_t layout(int type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                     int64_t stride, int order) {
  cublasLtMatrixLayout_t l;
  int32_t b = (int32_t)batch;
  assert_int_equal(gs_sys.cublasLtMatrixLayoutCreate(&l, (cudaDataType)type, (uint64_t)rows, (uint64_t)cols, ld), 0);
  assert_int_equal(gs_sys.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b), 0);
  assert_int_equal(
      gs_sys.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride), 0);
  int32_t o = order;
  assert_int_equal(gs_sys.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &o, sizeof o), 0);
  return l;
}

/* Device buffers (leading dimensions padded by 8, batch strides by 64
 * elements), data, reference, and the call as the hook would hand it to
 * the route. */
static void gemm_make(gemm *x, const problem *p, double amp) {
  memset(x, 0, sizeof *x);
  x->p = *p;
  x->a_rows = p->ta == CUBLAS_OP_N ? p->m : p->k;
  x->a_cols = p->ta == CUBLAS_OP_N ? p->k : p->m;
  x->b_rows = p->tb == CUBLAS_OP_N ? p->k : p->n;
  x->b_cols = p->tb == CUBLAS_OP_N ? p->n : p->k;
  x->lda = x->a_rows + 8;
  x->ldb = x->b_rows + 8;
  x->ldc = p->m + 8;
  int batched = p->batch > 1 || p->api == GS_API_GEMM_STRIDED_BATCHED_EX || p->api == GS_API_GEMM_STRIDED_BATCHED_EX_64;
  x->sa = batched ? x->lda * x->a_cols + 64 : 0;
  x->sb = batched ? x->ldb * x->b_cols + 64 : 0;
  x->sc = batched ? x->ldc * p->n + 64 : 0;
  x->a_len = (size_t)((p->batch - 1) * x->sa + x->lda * x->a_cols);
  x->b_len = (size_t)((p->batch - 1) * x->sb + x->ldb * x->b_cols);
  x->c_len = (size_t)((p->batch - 1) * x->sc + x->ldc * p->n);
  x->A = dev_alloc(p->dev, x->a_len * tsize(p->ab) + 16);
  x->B = dev_alloc(p->dev, x->b_len * tsize(p->ab) + 16);
  x->C = dev_alloc(p->dev, x->c_len * tsize(p->cd) + 16);
  if (p->epilogue & CUBLASLT_EPILOGUE_BIAS) x->bias = dev_alloc(p->dev, (size_t)p->m * tsize(p->bias_type));
  x->scalars = dev_alloc(p->dev, 2 * sizeof(float));
  x->alpha = p->alpha;
  x->beta = p->beta;
  x->scalars[0] = p->alpha;
  x->scalars[1] = p->beta;
  x->c_before = malloc(x->c_len * tsize(p->cd));
  x->ref = malloc(sizeof(double) * (size_t)(p->m * p->n * p->batch));
  assert_non_null(x->c_before);
  assert_non_null(x->ref);
  fill(x, amp);

  gs_call *c = &x->c;
  const void *alpha = p->device_scalars ? (const void *)&x->scalars[0] : &x->alpha;
  const void *beta = p->device_scalars ? (const void *)&x->scalars[1] : &x->beta;
  if (p->api == GS_API_LT_MATMUL) {
    int32_t ta = p->ta, tb = p->tb, pm = p->device_scalars ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
    uint32_t epi = (uint32_t)p->epilogue;
    int32_t bt = p->bias_type;
    assert_int_equal(gs_sys.cublasLtMatmulDescCreate(&x->desc, (cublasComputeType_t)p->compute, CUDA_R_32F), 0);
    gs_sys.cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    gs_sys.cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    gs_sys.cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm);
    gs_sys.cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (x->bias) {
      gs_sys.cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x->bias, sizeof x->bias);
      gs_sys.cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    }
    x->la = layout(p->ab, x->a_rows, x->a_cols, x->lda, p->batch, x->sa, CUBLASLT_ORDER_COL);
    x->lb = layout(p->ab, x->b_rows, x->b_cols, x->ldb, p->batch, x->sb, CUBLASLT_ORDER_COL);
    x->lc = layout(p->cd, p->m, p->n, x->ldc, p->batch, x->sc, CUBLASLT_ORDER_COL);
    x->ld = layout(p->cd, p->m, p->n, x->ldc, p->batch, x->sc, CUBLASLT_ORDER_COL);
    memset(c, 0, sizeof *c);
    decode_lt(&c->g, lt_handles[p->dev], x->desc, alpha, x->A, x->la, x->B, x->lb, beta, x->C, x->lc, x->C, x->ld,
              streams[p->dev]);
    decode_lt_rest(&c->g, 1); /* what route_run does before any route */
  } else {
    memset(c, 0, sizeof *c);
    decode_gemm(&c->g, (void *)0x1, p->ta, p->tb, p->m, p->n, p->k, alpha, x->A, p->ab, x->lda, x->sa, x->B, p->ab,
                x->ldb, x->sb, beta, x->C, p->cd, x->ldc, x->sc, p->batch, p->compute, CUBLAS_GEMM_DEFAULT);
    c->g.stream = streams[p->dev];
    c->g.pointer_mode = p->device_scalars ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST;
  }
  c->g.api = p->api;
  c->ctx = ctxs[p->dev];
  c->device = p->dev;
  c->sm = dev_sm[p->dev];
  c->caller = &site_anchor[p->tag];
}

static void gemm_free(gemm *x) {
  if (x->desc) {
    gs_sys.cublasLtMatmulDescDestroy(x->desc);
    gs_sys.cublasLtMatrixLayoutDestroy(x->la);
    gs_sys.cublasLtMatrixLayoutDestroy(x->lb);
    gs_sys.cublasLtMatrixLayoutDestroy(x->lc);
    gs_sys.cublasLtMatrixLayoutDestroy(x->ld);
  }
  dev_free(x->p.dev, x->A);
  dev_free(x->p.dev, x->B);
  dev_free(x->p.dev, x->C);
  dev_free(x->p.dev, x->bias);
  dev_free(x->p.dev, x->scalars);
  free(x->c_before);
  free(x->ref);
}

/* One call through the route, as a hook makes it: a fresh gs_call state,
 * then SQNR of D against the reference. */
static int gemm_run(gemm *x) {
  gs_call *c = &x->c;
  c->site = 0;
  c->site_flags = 0;
  c->evicted_site = 0;
  c->recipe = 0;
  c->captured = 0; /* as call_begin clears it (hooks.c) */
  c->reason[0] = 0;
  c->backend = NULL;
  c->decided = GS_ROUTE_FP8;
  c->route = GS_ROUTE_NATIVE;
  x->status = route_fp8(c);
  double sig = 0, err = 0;
  const problem *p = &x->p;
  for (int64_t b = 0; b < p->batch; b++)
    for (int64_t j = 0; j < p->n; j++)
      for (int64_t i = 0; i < p->m; i++) {
        double r = x->ref[(b * p->n + j) * p->m + i];
        double d = get(x->C, p->cd, b * x->sc + i + j * x->ldc) - r;
        sig += r * r;
        err += d * d;
      }
  x->sqnr = err == 0 ? INFINITY : 10.0 * log10(sig / err);
  return x->status;
}

static int untouched(const gemm *x) {
  return memcmp(x->c_before, x->C, x->c_len * tsize(x->p.cd)) == 0;
}

/* The site's state as the next call would see it: acquiring it is a call
 * for the site table, and releasing with nothing run changes nothing. */
static fp8_use peek_site(gemm *x) {
  gs_call probe = x->c;
  fp8_use u;
  const char *why = fp8_site_acquire(&probe, 0, &u);
  if (why) fail_msg("peek: %s", why);
  assert_int_equal(u.id, x->c.site);
  fp8_site_release(&u, 0);
  return u;
}

static double amax_of(const void *base, int t, size_t len) {
  double a = 0;
  for (size_t i = 0; i < len; i++) {
    double v = fabs(get(base, t, (int64_t)i));
    if (v > a) a = v;
  }
  return a;
}

static void assert_close_rel(double got, double want, double rel) {
  if (fabs(got - want) > rel * fabs(want)) fail_msg("got %.9g, want %.9g", got, want);
}

static void assert_log_has(const gs_call *c, const char *want) {
  char line[4096];
  assert_true(log_format(c, line, sizeof line) > 0);
  if (!strstr(line, want)) fail_msg("log line lacks %s:\n%s", want, line);
}

static void assert_log_lacks(const gs_call *c, const char *what) {
  char line[4096];
  assert_true(log_format(c, line, sizeof line) > 0);
  if (strstr(line, what)) fail_msg("log line has %s:\n%s", what, line);
}

/* ---- results ---------------------------------------------------------------------------- */
#define BF16 CUDA_R_16BF
#define F16 CUDA_R_16F
#define F32 CUDA_R_32F
#define C32F CUBLAS_COMPUTE_32F
#define N_ CUBLAS_OP_N
#define T_ CUBLAS_OP_T

typedef struct result_case {
  problem p;
  const char *backend_90;  /* expected on 9.0, NULL: runs native; 6.1 always runs "own" */
  const char *reason_90;   /* the reason on 9.0 */
} result_case;

static const result_case result_cases[] = {
    {{0, GS_API_GEMM_EX, T_, N_, 64, 48, 96, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 1}, "cublaslt-fp8",
     "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    /* 32F_FAST_* with fp32 operands: the only kind cuBLAS lists (cuBLAS
     * documentation, cublasGemmEx's type table); fp16 operands with it are
     * forwarded for cuBLAS's NOT_SUPPORTED (tests/integration/test_arguments.py). */
    {{0, GS_API_GEMM_EX, N_, N_, 40, 24, 64, 1, F32, F32, CUBLAS_COMPUTE_32F_FAST_16F, 0, -1, 0.5f, 0.0f, 0, 2},
     "cublaslt-fp8", "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    /* m = 33, ldc 33: cuBLASLt's fp8 GEMM wants 16-byte aligned C/D
     * (cuBLAS documentation, cublasLtMatmul) and refuses m % 8 (an H200,
     * docs/gpu-results.md): the route writes an aligned fp32 D' with m
     * padded to 40 and A8's extra columns zero, then casts D' into D. */
    {{0, GS_API_GEMM_EX_64, N_, T_, 33, 17, 48, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 3}, "cublaslt-fp8",
     "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    /* A batch keeps m as it is (the quantize kernels' A8 member stride
     * is m x k): an odd-m batch stays native with its reason. */
    {{0, GS_API_GEMM_STRIDED_BATCHED_EX, N_, T_, 33, 17, 48, 2, BF16, BF16, C32F, 0, -1, 1.0f, 0.5f, 0, 12}, NULL,
     "fp8 declined: m is not a multiple of 8 (cuBLASLt fp8 refuses it); the own fp8 kernel is slower than native bf16 on sm_89+; ran native"},
    /* beta = 0.5 through D': C widened into D' first, m padded to 40. */
    {{0, GS_API_GEMM_EX, N_, T_, 33, 17, 48, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.5f, 0, 13}, "cublaslt-fp8",
     "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    /* The same with alpha/beta read from device memory (C always read). */
    {{0, GS_API_GEMM_EX, N_, T_, 33, 17, 48, 1, F16, F16, C32F, 0, -1, 1.0f, 0.5f, 1, 14}, "cublaslt-fp8",
     "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    /* fp32 D (D' copied out, not rounded) through an Lt call with GELU. */
    {{0, GS_API_LT_MATMUL, T_, N_, 33, 24, 48, 1, BF16, F32, C32F, CUBLASLT_EPILOGUE_GELU, -1, 1.0f, 0.5f, 0, 15},
     "cublaslt-fp8", "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    {{0, GS_API_GEMM_STRIDED_BATCHED_EX, T_, T_, 32, 40, 80, 3, BF16, BF16, C32F, 0, -1, 1.0f, 0.5f, 1, 4},
     "cublaslt-fp8", "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    {{0, GS_API_GEMM_STRIDED_BATCHED_EX_64, N_, N_, 24, 16, 32, 2, F32, F32, C32F, 0, -1, 1.0f, 0.0f, 0, 5},
     "cublaslt-fp8", "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    /* k = 40: cuBLASLt's fp8 GEMM wants k a multiple of 16 (16-byte
     * leading dimensions of its TN operands, cuBLAS documentation,
     * cublasLtMatmul); the route's fp8 buffers pad k to 48 with zeros. */
    {{0, GS_API_GEMM_EX, T_, N_, 64, 48, 40, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 6}, "cublaslt-fp8",
     "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    {{0, GS_API_LT_MATMUL, T_, N_, 64, 32, 64, 1, BF16, BF16, C32F, CUBLASLT_EPILOGUE_BIAS, BF16, 1.0f, 0.0f, 0, 7},
     "cublaslt-fp8", "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    {{0, GS_API_LT_MATMUL, N_, N_, 48, 32, 64, 1, F16, F16, C32F, CUBLASLT_EPILOGUE_GELU_BIAS, F16, 1.0f, 0.0f, 1, 8},
     "cublaslt-fp8", "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    /* An fp32 bias on an fp32 D: D's type, as cuBLASLt requires outside fp8
     * inputs; its fp8 GEMM wants bf16 there, so the call runs native. */
    {{0, GS_API_LT_MATMUL, T_, N_, 32, 32, 32, 1, BF16, F32, C32F, CUBLASLT_EPILOGUE_RELU_BIAS, F32, 1.0f, 0.0f, 0, 9},
     NULL, "fp8 declined: bias type is not cuBLASLt's fp8 bias type; the own fp8 kernel is slower than native bf16 on sm_89+; ran native"},
    {{0, GS_API_LT_MATMUL, T_, N_, 32, 16, 48, 1, BF16, F32, C32F, CUBLASLT_EPILOGUE_RELU, -1, 1.0f, 0.0f, 0, 10},
     "cublaslt-fp8", "fp8 e4m3 x e4m3; first call: scales from its own amax"},
    /* Batched Lt, layouts agreeing on the batch count, beta read. */
    {{0, GS_API_LT_MATMUL, T_, N_, 32, 24, 48, 3, BF16, BF16, C32F, CUBLASLT_EPILOGUE_GELU, -1, 1.0f, 0.5f, 0, 11},
     "cublaslt-fp8", "fp8 e4m3 x e4m3; first call: scales from its own amax"},
};

static void test_results(void **state) {
  for (size_t i = 0; i < sizeof result_cases / sizeof result_cases[0]; i++)
    for (int dev = 0; dev < 2; dev++) {
      problem p = result_cases[i].p;
      p.dev = dev;
      p.tag += 16 * dev;
      gemm x;
      gemm_make(&x, &p, 1.0);
      int status = gemm_run(&x);
      if (dev == DEV_90 && !result_cases[i].backend_90) {
        assert_int_equal(status, GS_DECLINED);
        assert_int_equal(x.c.route, GS_ROUTE_NATIVE);
        assert_string_equal(x.c.reason, result_cases[i].reason_90);
        assert_true(untouched(&x));
        gemm_free(&x);
        continue;
      }
      const char *backend = dev == DEV_90 ? result_cases[i].backend_90 : "own";
      char reason[GS_REASON_MAX];
      if (dev == DEV_90)
        snprintf(reason, sizeof reason, "%s", result_cases[i].reason_90);
      else
        snprintf(reason, sizeof reason,
                 "fp8 e4m3 x e4m3; first call: scales from its own amax; own kernel: cuBLASLt fp8 needs sm_89 or "
                 "newer");
      if (x.status != CUBLAS_STATUS_SUCCESS || x.c.route != GS_ROUTE_FP8)
        fail_msg("case %zu on sm %d: status %d route %d: %s", i, dev_sm[dev], x.status, (int)x.c.route, x.c.reason);
      if (strcmp(x.c.backend, backend) != 0 || strcmp(x.c.reason, reason) != 0)
        fail_msg("case %zu on sm %d: backend %s, reason \"%s\"; want %s, \"%s\"", i, dev_sm[dev], x.c.backend,
                 x.c.reason, backend, reason);
      if (x.sqnr < 25.0) fail_msg("case %zu on sm %d: SQNR %.2f dB < 25", i, dev_sm[dev], x.sqnr);
      printf("test_route_fp8: case %zu on sm %d (%s): SQNR %.1f dB\n", i, dev_sm[dev], backend, x.sqnr);
      assert_int_equal(x.c.site_flags, GS_SITE_NEW);
      gemm_free(&x);
    }
}

/* ---- one site over repeated calls ----------------------------------------------------------- */
static void test_site_stable_and_logged(void **state) {
  for (int dev = 0; dev < 2; dev++) {
    problem p = {dev, GS_API_GEMM_EX, T_, N_, 64, 32, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 40 + dev};
    gemm x;
    gemm_make(&x, &p, 1.0);
    uint64_t site = 0;
    for (int call = 0; call < 4; call++) {
      fill(&x, 1.0);
      assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
      if (call == 0) site = x.c.site;
      assert_int_equal(x.c.site, site);
      assert_int_equal(x.c.site_flags, call == 0 ? GS_SITE_NEW : 0);
      assert_true(x.sqnr >= 25.0);
      char want[64];
      snprintf(want, sizeof want, "\"site\":\"%016llx\"", (unsigned long long)site);
      assert_log_has(&x.c, want);
      assert_log_has(&x.c, "\"route\":\"fp8\"");
      assert_log_has(&x.c, dev == DEV_90 ? "\"backend\":\"cublaslt-fp8\"" : "\"backend\":\"own\"");
      if (call == 0) assert_log_has(&x.c, "\"site_event\":\"new\"");
      else assert_log_lacks(&x.c, "site_event");
      assert_int_equal(!!strstr(x.c.reason, "first call"), call == 0);
    }
    gemm_free(&x);
  }
}

/* ---- scaling -------------------------------------------------------------------------------- */
/* The first call measures its own amax (amax_init) before quantizing; the
 * next quantizes with the scale the previous call published: an 8x jump in
 * the data saturates that call, and the call after it is right again. */
static void test_delayed_scaling(void **state) {
  for (int dev = 0; dev < 2; dev++) {
    problem p = {dev, GS_API_GEMM_EX, T_, N_, 64, 48, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 50 + dev};
    gemm x;
    gemm_make(&x, &p, 1.0);
    double a1 = amax_of(x.A, BF16, x.a_len), b1 = amax_of(x.B, BF16, x.b_len);
    assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
    assert_true(x.sqnr >= 25.0);
    fp8_use u = peek_site(&x);
    /* amax_init published scale[0]; the quantize, scale[1]: both from this data. */
    assert_int_equal(u.parity, 1);
    assert_int_equal(u.needs_amax_init, 0);
    assert_close_rel(u.ring[0]->scale[0][0], a1 / 448.0, 1e-6);
    assert_close_rel(u.ring[0]->scale[1][0], a1 / 448.0, 1e-6);
    assert_close_rel(u.ring[1]->scale[0][0], b1 / 448.0, 1e-6);
    assert_close_rel(u.ring[1]->scale[1][0], b1 / 448.0, 1e-6);
    assert_close_rel(u.ring[0]->last_amax, a1, 0);

    fill(&x, 8.0);
    double a8 = amax_of(x.A, BF16, x.a_len);
    assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
    if (x.sqnr >= 15.0) fail_msg("sm %d: an 8x jump quantized with the old scale gave %.2f dB", dev_sm[dev], x.sqnr);
    u = peek_site(&x);
    assert_int_equal(u.parity, 0);
    assert_close_rel(u.ring[0]->scale[0][0], a8 / 448.0, 1e-6); /* max of the history */
    assert_close_rel(u.ring[0]->last_amax, a8, 0);

    fill(&x, 8.0);
    assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
    if (x.sqnr < 25.0) fail_msg("sm %d: after the jump %.2f dB", dev_sm[dev], x.sqnr);
    gemm_free(&x);
  }
}

/* ---- formats and backends ------------------------------------------------------------------- */
/* cuBLASLt's fp8 GEMM has no E5M2 x E5M2 (cuBLAS documentation, the fp8
 * type combinations of cublasLtMatmul): native on sm_89+, where the own
 * kernel would lose to native bf16; the own kernel below sm_89. */
static void test_e5m2_runs_own_kernel(void **state) {
  gs_opt.fp8_format = GS_FP8_FORMAT_E5M2;
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 64, 48, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 60};
  gemm x;
  gemm_make(&x, &p, 1.0);
  assert_int_equal(gemm_run(&x), GS_DECLINED);
  assert_int_equal(x.c.route, GS_ROUTE_NATIVE);
  assert_string_equal(x.c.reason, "fp8 declined: cuBLASLt fp8 has no E5M2 x E5M2; the own fp8 kernel is slower than "
                                  "native bf16 on sm_89+; ran native");
  assert_true(untouched(&x));
  gemm_free(&x);
  p.dev = DEV_61;
  p.tag = 62;
  gemm_make(&x, &p, 1.0);
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
  assert_string_equal(x.c.backend, "own");
  assert_string_equal(x.c.reason, "fp8 e5m2 x e5m2; first call: scales from its own amax; own kernel: cuBLASLt fp8 "
                                  "needs sm_89 or newer");
  if (x.sqnr < 18.0) fail_msg("E5M2: %.2f dB", x.sqnr);
  fp8_use u = peek_site(&x);
  assert_int_equal(u.ring[0]->fmt, GS_FP8_E5M2);
  assert_close_rel(u.ring[0]->scale[0][0], amax_of(x.A, BF16, x.a_len) / 57344.0, 1e-6);
  gemm_free(&x);
}

/* ---- recipes ----------------------------------------------------------------------------- */
/* cublasLt.h: CUBLASLT_VERSION is major * 10000 + minor * 100 + patch;
 * 120804 is cuBLAS 12.8 update 4's, the stand-in's cuBLAS 12. */
static size_t lt_version_12_8(void) { return 120804; }

/* The block recipe needs cuBLAS 12.9 (the cuBLAS documentation's narrow
 * precision section: VEC128_32F and BLK128x128_32F from 12.9 on sm_90),
 * asked of the loaded cuBLASLt at run time through the call table; an
 * older one, or a failed query, falls back to current with the reason. */
static void test_block_checks_the_loaded_cublas_version(void **state) {
  gs_opt.fp8_recipe = GS_FP8_RECIPE_BLOCK;
  size_t (*real)(void) = gs_sys.cublasLtGetVersion;
  assert_non_null(real);
  assert_int_equal(real(), 130100); /* the stand-in's cuBLAS 13.1 */
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 64, 48, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 70};
  gemm x;
  gemm_make(&x, &p, 1.0);
  gs_sys.cublasLtGetVersion = lt_version_12_8;
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
  gs_sys.cublasLtGetVersion = real;
  assert_int_equal(x.c.recipe, GS_FP8_RECIPE_CURRENT);
  assert_string_equal(x.c.reason, "fp8 e4m3 x e4m3; recipe current instead: block needs cuBLAS 12.9 or newer, the "
                                  "loaded cuBLASLt is 12.8.4");
  assert_true(x.sqnr >= 25.0);
  gs_fault_arm(GS_SYS_cublasLtGetVersion, 1, 1);
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
  gs_fault_clear();
  assert_string_equal(x.c.reason, "fp8 e4m3 x e4m3; recipe current instead: block needs cuBLAS 12.9 or newer, and "
                                  "cublasLtGetVersion returned 0");
  assert_true(x.sqnr >= 25.0);
  gemm_free(&x);
}

/* Current scaling on the first call: the step is this call's amax over
 * E4M3's 448 (TransformerEngine, recipe_common.cuh: scale = fp8_max /
 * amax; the step is its inverse), no site, no history. */
static void test_current_first_call(void **state) {
  gs_opt.fp8_recipe = GS_FP8_RECIPE_CURRENT;
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 64, 48, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 71};
  gemm x;
  gemm_make(&x, &p, 3.0);
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(x.c.recipe, GS_FP8_RECIPE_CURRENT);
  assert_string_equal(x.c.backend, "cublaslt-fp8");
  assert_string_equal(x.c.reason, "fp8 e4m3 x e4m3");
  assert_true(x.c.site_flags == 0);
  if (x.sqnr < 25.0) fail_msg("current, first call: %.2f dB", x.sqnr);
  /* All zeros: amax 0 keeps the step at 1 (TE: scale 1), output zeros. */
  memset(x.A, 0, x.a_len * 2);
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
  for (int64_t j = 0; j < p.n; j++)
    for (int64_t i = 0; i < p.m; i++) assert_true(get(x.C, BF16, i + j * x.ldc) == 0.0);
  gemm_free(&x);
}

static void test_backend_own_option(void **state) {
  gs_opt.fp8_backend = GS_FP8_BACKEND_OWN;
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 64, 48, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 61};
  gemm x;
  gemm_make(&x, &p, 1.0);
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
  assert_string_equal(x.c.backend, "own");
  assert_string_equal(x.c.reason, "fp8 e4m3 x e4m3; first call: scales from its own amax");
  assert_true(x.sqnr >= 25.0);
  gemm_free(&x);
}

/* GEMMSHIM_FP8_BACKEND=own-mma: the tensor-core kernel on 9.0 (never
 * cuBLASLt, no reason logged); on 8.6 and 6.1 the FFMA kernel, with the
 * exact reason; both within the E4M3 SQNR bound. */
static void test_backend_own_mma_option(void **state) {
  gs_opt.fp8_backend = GS_FP8_BACKEND_OWN_MMA;
  static const struct {
    int dev;
    const char *backend, *reason;
  } cases[] = {
      {DEV_90, "own-mma", "fp8 e4m3 x e4m3; first call: scales from its own amax"},
      {DEV_86, "own",
       "fp8 e4m3 x e4m3; first call: scales from its own amax; own-mma needs sm_89 or newer (device is sm_86); ran "
       "the own kernel"},
      {DEV_61, "own",
       "fp8 e4m3 x e4m3; first call: scales from its own amax; own-mma needs sm_89 or newer (device is sm_61); ran "
       "the own kernel"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    problem p = {cases[i].dev, GS_API_GEMM_EX, T_, N_, 70, 45, 100, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0,
                 (int)(120 + i)};
    gemm x;
    gemm_make(&x, &p, 1.0);
    assert_int_equal(gemm_run(&x), CUDA_SUCCESS);
    assert_string_equal(x.c.backend, cases[i].backend);
    assert_string_equal(x.c.reason, cases[i].reason);
    if (x.sqnr < 25.0) fail_msg("own-mma on sm %d: %.2f dB", dev_sm[cases[i].dev], x.sqnr);
    printf("test_route_fp8: own-mma option on sm %d (%s): SQNR %.1f dB\n", dev_sm[cases[i].dev], x.c.backend, x.sqnr);
    gemm_free(&x);
  }
}

/* cuBLASLt returning an error on sm_89+ leaves D alone and the call runs
 * native: the own kernel is slower than native bf16 there (an H200 refused
 * calls at run time that the static rules let through:
 * docs/gpu-results.md). Below sm_89 there is no cuBLASLt fp8 to refuse. */
static void test_lt_failure_runs_native(void **state) {
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 64, 48, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 62};
  gemm x;
  gemm_make(&x, &p, 1.0);
  gs_fault_arm(GS_SYS_cublasLtMatmul, 1, 0);
  assert_int_equal(gemm_run(&x), GS_DECLINED);
  assert_int_equal(x.c.route, GS_ROUTE_NATIVE);
  assert_string_equal(x.c.reason, "fp8 declined: cuBLASLt fp8 refused this call (status 13); ran native");
  gemm_free(&x);
}

/* ---- kept cuBLASLt plans and the workspace ------------------------------------------------- */
/* A site's calls in steady state build nothing: one plan per scale slot
 * (the scale pointers alternate with the parity), made on the first two
 * calls and reused. The bias pointer is set per call where it changes: the
 * same site (same A, B and C) with its bias moved to another buffer of
 * other values uses the same plan and gets the new bias (a stale pointer
 * would add the old values, which these results' SQNR would show). */
static void test_lt_plans_kept(void **state) {
  problem p = {DEV_90, GS_API_LT_MATMUL, T_, N_, 64, 32, 64, 1, BF16, BF16, C32F, CUBLASLT_EPILOGUE_BIAS, BF16,
               1.0f, 0.0f, 0, 120};
  gemm x;
  gemm_make(&x, &p, 1.0);
  uint64_t built = route_lt_plans_built();
  size_t live = route_lt_plans_live();
  for (int i = 0; i < 4; i++) {
    fill(&x, 1.0);
    assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
    assert_string_equal(x.c.backend, "cublaslt-fp8");
    if (x.sqnr < 25.0) fail_msg("call %d: %.2f dB", i, x.sqnr);
    assert_int_equal(route_lt_plans_built(), built + (uint64_t)(i < 2 ? i + 1 : 2));
  }
  assert_int_equal(route_lt_plans_live(), live + 2);
  uint64_t site = x.c.site;
  void *bias[2] = {x.bias, dev_alloc(p.dev, (size_t)p.m * 2)};
  for (int i = 0; i < 4; i++) {
    x.c.g.bias = x.bias = bias[(i + 1) % 2];
    fill(&x, 1.0); /* new bias values, and the reference with them */
    assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(x.c.site, site);
    assert_string_equal(x.c.backend, "cublaslt-fp8");
    if (x.sqnr < 25.0) fail_msg("bias moved, call %d: %.2f dB", i, x.sqnr);
  }
  assert_int_equal(route_lt_plans_built(), built + 2);
  x.bias = bias[0];
  dev_free(p.dev, bias[1]);
  gemm_free(&x);
}

/* A plan holds the algorithm chosen for its operands' alignment: the
 * heuristic is told each pointer's alignment (PyTorch's gemm_and_bias and
 * scaled_gemm do the same) and excludes algorithms that need more
 * (cublasLt.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), and
 * cublasLtMatmul refuses an algorithm the buffers are less aligned for
 * (the stand-in models both: its best algorithm needs 64-byte pointers,
 * leading dimensions and 512 KiB of workspace). The same site with D
 * moved 16 bytes gets plans of its own, made for 16-byte alignment, and
 * stays on cuBLASLt; moved back it finds its first plans. m = 56: ldc 64,
 * 128 bytes of bf16, so only the pointer differs. */
static void test_lt_plan_follows_alignment(void **state) {
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 56, 32, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 122};
  gemm x;
  gemm_make(&x, &p, 1.0);
  void *c0 = x.C;
  assert_int_equal((uintptr_t)c0 % 256, 0);
  uint64_t built = route_lt_plans_built();
  static const int shift[6] = {0, 0, 16, 16, 0, 0};
  static const uint64_t plans[6] = {1, 2, 3, 4, 4, 4};
  for (int i = 0; i < 6; i++) {
    x.C = (char *)c0 + shift[i];
    x.c.g.C = x.c.g.D = x.C;
    fill(&x, 1.0);
    assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
    assert_string_equal(x.c.backend, "cublaslt-fp8");
    assert_string_equal(x.c.reason, i ? "fp8 e4m3 x e4m3" : "fp8 e4m3 x e4m3; first call: scales from its own amax");
    if (x.sqnr < 25.0) fail_msg("call %d: %.2f dB", i, x.sqnr);
    assert_int_equal(route_lt_plans_built(), built + plans[i]);
  }
  x.C = c0;
  gemm_free(&x);
}

/* A plan that cannot be made is not kept: the call runs native (nothing
 * of the caller's written by cuBLASLt), the next call makes it. */
static void test_lt_plan_failure_not_kept(void **state) {
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 64, 48, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 121};
  gemm x;
  gemm_make(&x, &p, 1.0);
  uint64_t built = route_lt_plans_built();
  gs_fault_arm(GS_SYS_cublasLtMatrixLayoutCreate, 3, 0);
  assert_int_equal(gemm_run(&x), GS_DECLINED);
  assert_int_equal(x.c.route, GS_ROUTE_NATIVE);
  assert_string_equal(x.c.reason, "fp8 declined: cuBLASLt fp8 refused this call (status 3); ran native");
  assert_int_equal(route_lt_plans_built(), built);
  fill(&x, 1.0);
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
  assert_string_equal(x.c.backend, "cublaslt-fp8");
  assert_int_equal(route_lt_plans_built(), built + 1);
  gemm_free(&x);
}

static int desc_destroys;
static cublasStatus_t (*real_desc_destroy)(cublasLtMatmulDesc_t);
static cublasStatus_t counting_desc_destroy(cublasLtMatmulDesc_t d) {
  desc_destroys++;
  return real_desc_destroy(d);
}

/* A key of an fp8 problem m x 32 x 64 on the 9.0 device. */
static route_lt_key key_of(int64_t m) {
  gs_call c;
  memset(&c, 0, sizeof c);
  c.ctx = ctxs[DEV_90];
  route_lt_key k;
  route_lt_key_init(&k, &c);
  k.compute = CUBLAS_COMPUTE_32F;
  k.scale = CUDA_R_32F;
  k.transa = CUBLAS_OP_T;
  k.transb = CUBLAS_OP_N;
  route_lt_key_layout(&k, 0, CUDA_R_8F_E4M3, 64, m, 64, 1, 64 * m);
  route_lt_key_layout(&k, 1, CUDA_R_8F_E4M3, 64, 32, 64, 1, 64 * 32);
  route_lt_key_layout(&k, 2, CUDA_R_16BF, m, 32, m, 1, 0);
  route_lt_key_layout(&k, 3, CUDA_R_16BF, m, 32, m, 1, 0);
  for (int i = 0; i < 4; i++) k.align[i] = 256;
  return k;
}

/* Past the limit the least recently used plans go: destroyed at once when
 * nobody holds them, else when the holder lets go (never under a matmul).
 * A held plan is never handed to a second holder: another is built. */
static void test_lt_plans_evicted(void **state) {
  real_desc_destroy = gs_sys.cublasLtMatmulDescDestroy;
  gs_sys.cublasLtMatmulDescDestroy = counting_desc_destroy;
  size_t before_limit = route_lt_plans_set_limit(2);
  cublasLtHandle_t h = lt_handles[DEV_90];
  cublasStatus_t st;
  route_lt_key ka = key_of(16), kb = key_of(32), kc = key_of(48);
  const route_lt_plan *a = route_lt_plan_get(h, &ka, NULL, &st, NULL);
  assert_non_null(a);
  const route_lt_plan *b = route_lt_plan_get(h, &kb, NULL, &st, NULL);
  assert_non_null(b);
  route_lt_plan_put(b);
  assert_int_equal(route_lt_plans_live(), 2); /* earlier tests' plans went */
  desc_destroys = 0;
  /* a is held and the oldest: taken out, not destroyed */
  const route_lt_plan *c = route_lt_plan_get(h, &kc, NULL, &st, NULL);
  assert_non_null(c);
  route_lt_plan_put(c);
  assert_int_equal(route_lt_plans_live(), 2);
  assert_int_equal(desc_destroys, 0);
  route_lt_plan_put(a);
  assert_int_equal(desc_destroys, 1);
  /* b is now the oldest: a again evicts and destroys it at once */
  uint64_t built = route_lt_plans_built();
  const route_lt_plan *a2 = route_lt_plan_get(h, &ka, NULL, &st, NULL);
  assert_non_null(a2);
  assert_int_equal(route_lt_plans_built(), built + 1);
  assert_int_equal(desc_destroys, 2);
  route_lt_plan_put(a2);
  /* c is kept: found, not built */
  const route_lt_plan *c2 = route_lt_plan_get(h, &kc, NULL, &st, NULL);
  assert_ptr_equal(c2, c);
  route_lt_plan_put(c2);
  assert_int_equal(route_lt_plans_built(), built + 1);
  const route_lt_plan *x = route_lt_plan_get(h, &kc, NULL, &st, NULL);
  const route_lt_plan *y = route_lt_plan_get(h, &kc, NULL, &st, NULL);
  assert_ptr_equal(x, c);
  assert_non_null(y);
  assert_ptr_not_equal(x, y);
  assert_int_equal(route_lt_plans_built(), built + 2);
  assert_int_equal(desc_destroys, 3); /* a2, the least recently used */
  route_lt_plan_put(x);
  route_lt_plan_put(y);
  route_lt_plans_set_limit(before_limit);
  gs_sys.cublasLtMatmulDescDestroy = real_desc_destroy;
}

static const char *ws_why; /* the last ws_of's reason */

static int mem_allocs;
static CUresult (*real_mem_alloc)(CUdeviceptr *, size_t);
static CUresult counting_mem_alloc(CUdeviceptr *p, size_t n) {
  mem_allocs++;
  return real_mem_alloc(p, n);
}

static void *ws_on(CUcontext ctx, int device, void *stream, size_t *size) {
  gs_call c;
  memset(&c, 0, sizeof c);
  c.ctx = ctx;
  c.device = device;
  assert_int_equal(gs_sys.cuCtxGetId(ctx, &c.ctx_id), CUDA_SUCCESS);
  c.g.stream = stream;
  void *ws;
  ws_why = route_lt_workspace(&c, &ws, size);
  return ws;
}

static void *ws_of(CUcontext ctx, void *stream, size_t *size) {
  int device = -1;
  for (int d = 0; d < 3; d++)
    if (ctxs[d] == ctx) device = d; /* STANDIN_CC order: the ordinal */
  return ws_on(ctx, device, stream, size);
}

/* One workspace per stream, kept; a stream is its cuStreamGetId: a stream
 * destroyed and another created at its address (the stand-in, like a
 * driver, hands the address out again) gets a workspace of its own, since
 * the destroyed stream's last work may still use the old one ("resources
 * ... released automatically once the device has completed all work":
 * cuda.h, cuStreamDestroy). */
static void test_lt_workspace_per_stream(void **state) {
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*stream_destroy)(CUstream);
  *(void **)&stream_create = standin_sym("cuStreamCreate");
  *(void **)&stream_destroy = standin_sym("cuStreamDestroy_v2");
  CUcontext ctx = ctxs[DEV_90];
  size_t sz;
  push(DEV_90);
  CUstream s1, s2;
  assert_int_equal(stream_create(&s1, 0), CUDA_SUCCESS);
  void *w1 = ws_of(ctx, s1, &sz);
  assert_non_null(w1);
  assert_int_equal(sz, ROUTE_LT_WORKSPACE);
  assert_int_equal((uintptr_t)w1 % 256, 0); /* cublasLtMatmul: workspace 256-byte aligned */
  assert_ptr_equal(ws_of(ctx, s1, &sz), w1);
  void *w0 = ws_of(ctx, NULL, &sz); /* the legacy stream */
  assert_non_null(w0);
  assert_ptr_not_equal(w0, w1);
  assert_ptr_equal(ws_of(ctx, CU_STREAM_LEGACY, &sz), w0);
  assert_int_equal(stream_destroy(s1), CUDA_SUCCESS);
  assert_int_equal(stream_create(&s2, 0), CUDA_SUCCESS);
  assert_ptr_equal(s2, s1);
  void *w2 = ws_of(ctx, s2, &sz);
  assert_non_null(w2);
  assert_ptr_not_equal(w2, w1);
  assert_ptr_not_equal(w2, w0);
  /* none for the per-thread stream, none when the stream's id cannot be
   * had (asked again next call) */
  assert_null(ws_of(ctx, CU_STREAM_PER_THREAD, &sz));
  assert_int_equal(sz, 0);
  assert_null(ws_why);
  CUstream s3, s4;
  assert_int_equal(stream_create(&s3, 0), CUDA_SUCCESS);
  gs_fault_arm(GS_SYS_cuStreamGetId, 1, 0);
  assert_null(ws_of(ctx, s3, &sz));
  assert_null(ws_why);
  void *w3 = ws_of(ctx, s3, &sz);
  assert_non_null(w3);
  assert_int_equal(sz, ROUTE_LT_WORKSPACE);
  /* A failed allocation is kept with its reason: the stream's later calls
   * say why and do not allocate again. */
  assert_int_equal(stream_create(&s4, 0), CUDA_SUCCESS);
  gs_fault_arm(GS_SYS_cuMemAlloc_v2, 1, 0);
  assert_null(ws_of(ctx, s4, &sz));
  assert_int_equal(sz, 0);
  static const char oom[] =
      "no cuBLASLt workspace on this stream: cuMemAlloc: out of device memory at the stream's first call "
      "(not tried again)";
  assert_string_equal(ws_why, oom);
  real_mem_alloc = gs_sys.cuMemAlloc_v2;
  gs_sys.cuMemAlloc_v2 = counting_mem_alloc;
  mem_allocs = 0;
  for (int i = 0; i < 3; i++) {
    assert_null(ws_of(ctx, s4, &sz));
    assert_string_equal(ws_why, oom);
  }
  assert_int_equal(mem_allocs, 0);
  gs_sys.cuMemAlloc_v2 = real_mem_alloc;
  /* ... and so is a failed switch to relaxed capture mode, before any
   * allocation (mem_relaxed.c, mem_alloc_relaxed) */
  CUstream s5;
  assert_int_equal(stream_create(&s5, 0), CUDA_SUCCESS);
  gs_fault_arm(GS_SYS_cuThreadExchangeStreamCaptureMode, 1, 0);
  assert_null(ws_of(ctx, s5, &sz));
  assert_string_equal(ws_why, "no cuBLASLt workspace on this stream: cuThreadExchangeStreamCaptureMode failed at "
                              "the stream's first call (not tried again)");
  gs_fault_clear();
  /* another context's legacy stream has its own */
  void *w0b = ws_of(ctxs[DEV_61], NULL, &sz);
  assert_non_null(w0b);
  assert_ptr_not_equal(w0b, w0);
  assert_int_equal(stream_destroy(s2), CUDA_SUCCESS);
  assert_int_equal(stream_destroy(s3), CUDA_SUCCESS);
  assert_int_equal(stream_destroy(s4), CUDA_SUCCESS);
  assert_int_equal(stream_destroy(s5), CUDA_SUCCESS);
  pop();
}

/* Workspaces are kept for the process's life (a destroyed stream's last
 * matmul may still use its workspace, and its handle cannot be asked),
 * ROUTE_LT_WORKSPACES per device: PyTorch's default stream and its
 * max_compile_time_stream_priorities (4) x kStreamsPerPool (32) pool
 * streams (c10/cuda/CUDAStream.h, CUDAStream.cpp) all get one. A stream
 * beyond them gets none, and its calls say why; streams destroyed free no
 * slot; another device's streams have their own. */
static void test_lt_workspace_cap(void **state) {
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*stream_destroy)(CUstream);
  *(void **)&stream_create = standin_sym("cuStreamCreate");
  *(void **)&stream_destroy = standin_sym("cuStreamDestroy_v2");
  assert_int_equal(ROUTE_LT_WORKSPACES, 4 * 32 + 1);
  CUcontext ctx = ctxs[DEV_86];
  size_t sz, before = route_lt_workspaces_lent(DEV_86);
  enum { N = ROUTE_LT_WORKSPACES + 2 };
  static CUstream s[N];
  push(DEV_86);
  size_t lent = before;
  for (int i = 0; i < N; i++) {
    assert_int_equal(stream_create(&s[i], CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    void *w = ws_of(ctx, s[i], &sz);
    if (lent < ROUTE_LT_WORKSPACES) {
      assert_non_null(w);
      assert_null(ws_why);
      lent++;
    } else {
      assert_null(w);
      assert_int_equal(sz, 0);
      assert_string_equal(ws_why, "no cuBLASLt workspace on this stream: the device's 129 stream workspaces are "
                                  "taken for the process's life (PyTorch uses at most 4 x 32 pool streams and the "
                                  "default stream per device)");
    }
    assert_int_equal(route_lt_workspaces_lent(DEV_86), lent);
  }
  assert_int_equal(lent, ROUTE_LT_WORKSPACES);
  for (int i = 0; i < N; i++) assert_int_equal(stream_destroy(s[i]), CUDA_SUCCESS);
  CUstream late;
  assert_int_equal(stream_create(&late, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_null(ws_of(ctx, late, &sz));
  assert_non_null(ws_why);
  assert_int_equal(stream_destroy(late), CUDA_SUCCESS);
  pop();
  /* the 9.0 device's own count is untouched */
  push(DEV_90);
  CUstream other;
  assert_int_equal(stream_create(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_non_null(ws_of(ctxs[DEV_90], other, &sz));
  assert_null(ws_why);
  assert_int_equal(stream_destroy(other), CUDA_SUCCESS);
  pop();
}

/* Contexts destroyed take their workspaces with them: a device whose 129
 * are held by contexts that are gone, at addresses no new context has
 * taken, still lends one to a live context's new stream (a program that
 * rebuilds its contexts, as JAX rebuilding its client does, would
 * otherwise run out for good). The bound is only reached once those
 * contexts are gone; then the count is of live contexts' streams. */
static void test_lt_workspace_gone_contexts(void **state) {
  CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
  CUresult (*ctx_destroy)(CUcontext);
  CUresult (*stream_create)(CUstream *, unsigned);
  *(void **)&ctx_create = standin_sym("cuCtxCreate_v4");
  *(void **)&ctx_destroy = standin_sym("cuCtxDestroy_v2");
  *(void **)&stream_create = standin_sym("cuStreamCreate");
  enum { STREAMS = 4, MAX_CTX = 40 };
  static CUcontext made[MAX_CTX];
  const size_t before = route_lt_workspaces_lent(DEV_61);
  size_t sz, lent = before;
  int n = 0, full = 0;
  CUcontext popped;
  while (!full) {
    assert_true(n < MAX_CTX);
    assert_int_equal(ctx_create(&made[n], NULL, 0, DEV_61), CUDA_SUCCESS);
    for (int i = 0; i < STREAMS && !full; i++) {
      CUstream s;
      assert_int_equal(stream_create(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
      if (ws_on(made[n], DEV_61, s, &sz)) {
        assert_null(ws_why);
        lent++;
      } else {
        assert_string_equal(ws_why, "no cuBLASLt workspace on this stream: the device's 129 stream workspaces are "
                                    "taken for the process's life (PyTorch uses at most 4 x 32 pool streams and the "
                                    "default stream per device)");
        full = 1;
      }
      assert_int_equal(route_lt_workspaces_lent(DEV_61), lent);
    }
    assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
    n++;
  }
  assert_int_equal(lent, ROUTE_LT_WORKSPACES);
  /* A live context made while they lived (at an address of its own),
   * then every one of them destroyed. */
  CUcontext live;
  CUstream s;
  assert_int_equal(ctx_create(&live, NULL, 0, DEV_61), CUDA_SUCCESS);
  assert_int_equal(stream_create(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  for (int i = 0; i < n; i++) {
    assert_ptr_not_equal(made[i], live);
    assert_int_equal(ctx_destroy(made[i]), CUDA_SUCCESS);
  }
  void *w = ws_on(live, DEV_61, s, &sz);
  assert_non_null(w);
  assert_null(ws_why);
  assert_int_equal(sz, ROUTE_LT_WORKSPACE);
  assert_ptr_equal(ws_on(live, DEV_61, s, &sz), w);
  /* What earlier tests' live contexts hold, and this one. */
  assert_int_equal(route_lt_workspaces_lent(DEV_61), before + 1);
  assert_int_equal(ctx_destroy(live), CUDA_SUCCESS);
}

/* ---- declines ------------------------------------------------------------------------------- */
typedef struct decline_case {
  problem p;
  const char *reason;
} decline_case;

#define DECL(api, ta, tb, m, n, k, batch, ab, cd, comp, epi, tag) \
  {DEV_90, api, ta, tb, m, n, k, batch, ab, cd, comp, epi, -1, 1.0f, 0.0f, 0, tag}

static void expect_decline(gemm *x, const char *reason) {
  memcpy(x->c_before, x->C, x->c_len * tsize(x->p.cd));
  assert_int_equal(gemm_run(x), GS_DECLINED);
  assert_int_equal(x->c.route, GS_ROUTE_NATIVE);
  assert_null(x->c.backend);
  assert_string_equal(x->c.reason, reason);
  assert_true(untouched(x));
}

static void test_declines(void **state) {
  static const decline_case cases[] = {
      {DECL(GS_API_GEMM_EX, T_, N_, 32, 16, 32, 1, F16, F16, CUBLAS_COMPUTE_32F_PEDANTIC, 0, 70),
       "fp8 declined: compute type 32f_pedantic asks for exact fp32 arithmetic; ran native"},
      {DECL(GS_API_GEMM_EX, T_, N_, 32, 16, 32, 1, F16, F16, CUBLAS_COMPUTE_16F, 0, 71),
       "fp8 declined: compute type is not fp32; ran native"},
      {DECL(GS_API_GEMM_EX, T_, N_, 0, 16, 32, 1, BF16, BF16, C32F, 0, 72),
       "fp8 declined: empty GEMM: nothing to quantize; ran native"},
      {DECL(GS_API_GEMM_EX, T_, N_, 32, 16, 0, 1, BF16, BF16, C32F, 0, 73),
       "fp8 declined: empty GEMM: nothing to quantize; ran native"},
      {DECL(GS_API_LT_MATMUL, T_, N_, 32, 16, 32, 1, BF16, BF16, C32F, CUBLASLT_EPILOGUE_DRELU, 74),
       "fp8 declined: epilogue other than bias/relu/gelu; ran native"},
      {{DEV_90, GS_API_LT_MATMUL, T_, N_, 32, 16, 32, 2, BF16, BF16, C32F, CUBLASLT_EPILOGUE_RELU_BIAS, BF16, 1.0f,
        0.0f, 0, 75},
       "fp8 declined: batched cublasLtMatmul with a bias; ran native"},
      /* What cuBLAS refuses (cuBLAS documentation: cublasLtMatmul's type
       * table and BIAS_DATA_TYPE, cublasComputeType_t): forwarded. */
      {{DEV_90, GS_API_LT_MATMUL, T_, N_, 32, 16, 32, 1, BF16, BF16, C32F, CUBLASLT_EPILOGUE_BIAS, F32, 1.0f,
        0.0f, 0, 76},
       "fp8 declined: bias type is not D's type (forwarded for cuBLAS's own error); ran native"},
      {DECL(GS_API_GEMM_EX, T_, N_, 32, 16, 32, 1, BF16, BF16, CUBLAS_COMPUTE_32F_FAST_16BF, 0, 77),
       "fp8 declined: types and compute type are not a combination cuBLAS lists for fp32 compute (forwarded for "
       "cuBLAS's own answer); ran native"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gemm x;
    gemm_make(&x, &cases[i].p, 1.0);
    expect_decline(&x, cases[i].reason);
    assert_int_equal(x.c.site, 0); /* declined before any site was made */
    gemm_free(&x);
  }
}

/* Declines that need an argument the table cannot express. */
static void test_declines_arguments(void **state) {
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 32, 16, 32, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 80};
  gemm x;
  gemm_make(&x, &p, 1.0);
  x.c.g.b_type = F16;
  expect_decline(&x, "fp8 declined: A and B are not both bf16, fp16 or fp32; ran native");
  x.c.g.b_type = BF16;
  x.c.g.lda = 16;
  expect_decline(&x, "fp8 declined: leading dimension too small (forwarded for cuBLAS's own error); ran native");
  x.c.g.lda = x.lda;
  x.c.g.n = -1;
  expect_decline(&x, "fp8 declined: negative size (forwarded for cuBLAS's own error); ran native");
  x.c.g.n = 16;
  x.c.g.B = NULL;
  expect_decline(&x, "fp8 declined: NULL handle or pointer (forwarded for cuBLAS's own error); ran native");
  x.c.g.B = x.B;
  x.c.g.pointer_mode = -1;
  expect_decline(&x, "fp8 declined: the handle's pointer mode is unknown; ran native");
  x.c.g.pointer_mode = CUBLAS_POINTER_MODE_HOST;
  x.c.g.api = GS_API_GEMM_BATCHED_EX;
  expect_decline(&x, "fp8 declined: pointer-array batch (the fp8 kernels take strided operands only); ran native");
  x.c.g.api = GS_API_GEMM_EX;
  /* cublasMath_t: CUBLAS_PEDANTIC_MATH "uses the prescribed precision and
   * standardized arithmetic for all phases of calculations", the handle's
   * form of COMPUTE_32F_PEDANTIC (with or without the flag bit). */
  handle_math = CUBLAS_PEDANTIC_MATH;
  expect_decline(&x, "fp8 declined: the handle's math mode CUBLAS_PEDANTIC_MATH asks for exact fp32 arithmetic; "
                     "ran native");
  handle_math = (cublasMath_t)(CUBLAS_PEDANTIC_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  expect_decline(&x, "fp8 declined: the handle's math mode CUBLAS_PEDANTIC_MATH asks for exact fp32 arithmetic; "
                     "ran native");
  handle_math = CUBLAS_DEFAULT_MATH;
  gs_fault_arm(GS_SYS_cublasGetMathMode, 1, 0);
  expect_decline(&x, "fp8 declined: cublasGetMathMode failed; ran native");
  gs_fault_clear();
  x.c.ctx = NULL;
  expect_decline(&x, "fp8 declined: the call's device is unknown; ran native");
  x.c.ctx = ctxs[DEV_90];
  gs_opt.fp8_max_bytes = 1024;
  expect_decline(&x, "fp8 declined: needs more transient memory than GEMMSHIM_FP8_MAX_BYTES; ran native");
  gs_opt.fp8_max_bytes = 1u << 30;
  gemm_free(&x);

  problem q = {DEV_90, GS_API_LT_MATMUL, T_, N_, 32, 16, 32, 1, BF16, BF16, C32F, CUBLASLT_EPILOGUE_DEFAULT, -1,
               1.0f, 0.0f, 0, 81};
  gemm_make(&x, &q, 1.0);
  x.c.g.a_scale = x.scalars;
  expect_decline(&x, "fp8 declined: the caller set scale pointers; ran native");
  x.c.g.a_scale = NULL;
  x.c.g.order_b = CUBLASLT_ORDER_ROW;
  expect_decline(&x, "fp8 declined: a layout is not column-major; ran native");
  x.c.g.order_b = CUBLASLT_ORDER_COL;
  x.c.g.d_type = F32;
  expect_decline(&x, "fp8 declined: D's type differs from C's; ran native");
  x.c.g.d_type = BF16;
  x.c.g.scale_type = BF16;
  expect_decline(&x, "fp8 declined: scale type is not fp32; ran native");
  x.c.g.scale_type = F32;
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS); /* and with every field back, it runs */
  gemm_free(&x);
}

/* ---- failures ------------------------------------------------------------------------------- */
/* A first call on 6.1 makes three launches (amax_init of A and B; quantize
 * of A and B; GEMM). Failing each in turn: the call declines with D
 * untouched and the exact reason; with none failing it runs. */
static void test_each_launch_failing(void **state) {
  for (unsigned nth = 1; nth <= 4; nth++) {
    problem p = {DEV_61, GS_API_GEMM_EX, T_, N_, 32, 24, 48, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0,
                 (int)(90 + nth)};
    gemm x;
    gemm_make(&x, &p, 1.0);
    gs_fault_arm(GS_SYS_cuLaunchKernel, nth, 0);
    int st = gemm_run(&x);
    gs_fault_clear();
    if (nth <= 2) {
      assert_int_equal(st, GS_DECLINED);
      assert_string_equal(x.c.reason, "fp8 declined: quantize kernel launch failed (CUresult 999); ran native");
      assert_true(untouched(&x));
    } else if (nth == 3) {
      assert_int_equal(st, GS_DECLINED);
      assert_string_equal(x.c.reason, "fp8 declined: fp8 GEMM kernel launch failed (CUresult 999); ran native");
      assert_true(untouched(&x));
    } else {
      assert_int_equal(st, CUBLAS_STATUS_SUCCESS);
      assert_true(x.sqnr >= 25.0);
    }
    assert_int_equal(x.c.site_flags, GS_SITE_NEW);
    /* Whatever failed, the site's next call is right. */
    fill(&x, 1.0);
    assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
    if (x.sqnr < 25.0) fail_msg("after failing launch %u: %.2f dB", nth, x.sqnr);
    gemm_free(&x);
  }
}

static void test_transient_alloc_failure(void **state) {
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 32, 24, 48, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 100};
  gemm x;
  gemm_make(&x, &p, 1.0);
  /* Every allocation failing: the pool's give-back and the second try
   * fail too. */
  gs_fault_arm(GS_SYS_cuMemAllocFromPoolAsync, 1, 1);
  expect_decline(&x, "fp8 declined: cuMemAllocFromPoolAsync: out of device memory, after the pool gave back what "
                 "it held unused; ran native");
  gs_fault_arm(GS_SYS_cuMemAllocFromPoolAsync, 0, 0);
  /* Memory comes before the recipe's state: no site was made, so the next
   * call is the site's first and measures. */
  assert_true(x.c.site == 0);
  fill(&x, 1.0);
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
  assert_true(strstr(x.c.reason, "first call") != NULL);
  assert_true(x.sqnr >= 25.0);
  gemm_free(&x);
}

/* ---- capture -------------------------------------------------------------------------------- */
/* In a graph the parity is fixed: each call quantizes with scale[p] and
 * the scale it published is carried into scale[p] after the GEMM. */
/* During capture a delayed-recipe call declines before its site is looked
 * up: the site's history parity and matching live on the host, which a
 * replay would not advance, and the site's rings must stay what eager
 * calls see (PyTorch interleaves replays with eager calls of the same
 * layers). Nothing of the site changes, and no site is made for a call
 * first seen in capture. */
static void test_capture(void **state) {
  CUresult (*begin)(CUstream, CUstreamCaptureMode);
  CUresult (*end)(CUstream, CUgraph *);
  CUresult (*destroy)(CUgraph);
  *(void **)&begin = standin_sym("cuStreamBeginCapture_v2");
  *(void **)&end = standin_sym("cuStreamEndCapture");
  *(void **)&destroy = standin_sym("cuGraphDestroy");
  problem p = {DEV_90, GS_API_GEMM_EX, T_, N_, 64, 32, 64, 1, BF16, BF16, C32F, 0, -1, 1.0f, 0.0f, 0, 110};
  gemm x;
  gemm_make(&x, &p, 1.0);
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS); /* warm-up, outside capture */
  fp8_use before = peek_site(&x);
  float scales[2] = {before.ring[0]->scale[0][0], before.ring[0]->scale[1][0]};
  size_t live = fp8_sites_live(x.c.ctx);

  problem q = p;
  q.tag = 111;
  gemm y;
  gemm_make(&y, &q, 1.0); /* no allocation during capture */
  push(DEV_90);
  assert_int_equal(begin(streams[DEV_90], CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  /* the delayed recipe alone stays out of graphs (docs/graphs.md) */
  static const char why[] =
      "fp8 declined: the delayed recipe is not captured into CUDA graphs: its per-site state (amax history "
      "parity, site matching) is kept on the host, and replays would not advance it; ran native";
  assert_int_equal(gemm_run(&x), GS_DECLINED);
  assert_string_equal(x.c.reason, why);
  assert_int_equal(gemm_run(&y), GS_DECLINED);
  assert_string_equal(y.c.reason, why);
  assert_int_equal(y.c.site_flags, 0);
  CUgraph g;
  assert_int_equal(end(streams[DEV_90], &g), CUDA_SUCCESS);
  assert_int_equal(destroy(g), CUDA_SUCCESS);
  pop();
  assert_int_equal(fp8_sites_live(x.c.ctx), live);
  x.c.site = before.id; /* the declined calls named no site */
  fp8_use after = peek_site(&x);
  assert_int_equal(after.parity, before.parity);
  assert_true(after.ring[0]->scale[0][0] == scales[0] && after.ring[0]->scale[1][0] == scales[1]);
  /* and the eager call after the capture runs on the warm-up's scales */
  assert_int_equal(gemm_run(&x), CUBLAS_STATUS_SUCCESS);
  assert_string_equal(x.c.backend, "cublaslt-fp8");
  if (x.sqnr < 25.0) fail_msg("eager call after the capture: %.2f dB", x.sqnr);
  gemm_free(&y);
  gemm_free(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_results, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_site_stable_and_logged, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_delayed_scaling, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_e5m2_runs_own_kernel, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_block_checks_the_loaded_cublas_version, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_current_first_call, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_backend_own_option, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_backend_own_mma_option, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_lt_failure_runs_native, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_lt_plans_kept, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_lt_plan_failure_not_kept, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_lt_plans_evicted, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_lt_plan_follows_alignment, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_lt_workspace_per_stream, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_lt_workspace_cap, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_lt_workspace_gone_contexts, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_declines, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_declines_arguments, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_each_launch_failing, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_transient_alloc_failure, test_setup, test_teardown),
      cmocka_unit_test_setup_teardown(test_capture, test_setup, test_teardown),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
