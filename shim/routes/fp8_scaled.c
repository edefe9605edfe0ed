/* fp8_scaled.c: what the block-scaled recipes (fp8_block.c, fp8_mx.c)
 * share: their scale tensors' sizes and places in the call's scratch, and
 * the quantize of both operands with kernels/fp8_scaled_quantize.cu.
 *
 * Each operand is read as outer x k (A: m x k, B: n x k, whatever the
 * caller's transposes) and written k-contiguous, k_pad columns wide with
 * zeros past k: A8 is k_pad x m and B8 k_pad x n, column-major, the TN
 * layout cuBLASLt's fp8 GEMM takes. Zero columns add nothing to any dot
 * product, and their scales are written too (the kernel's padding), so
 * data and scales describe the same k_pad. Sizes: the cuBLAS
 * documentation, "Narrow precision data types usage" (block scaling
 * factors layouts): VEC128_32F outer x ceil(K/128) fp32; BLK128x128_32F
 * ceil(outer/128) x roundup(ceil(K/128), 4) fp32; VEC32_UE8M0
 * ceil(outer/128) x ceil(ceil(K/32)/4) tiles of 512 bytes. */
#include "fp8_scaled.h"
#include "../base/sys.h"
#include "../resolve.h"

#include "../../kernels/fp8_kernels.h"
#include "../../kernels/fp8_stats.h"

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

size_t fp8_scaled_bytes(int32_t mode, int64_t outer, int64_t k_pad) {
  switch (mode) {
  case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return (size_t)(outer * cdiv(k_pad, 128)) * sizeof(float);
  case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
    return (size_t)(cdiv(outer, 128) * (cdiv(cdiv(k_pad, 128), 4) * 4)) * sizeof(float);
  case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0: return (size_t)(cdiv(outer, 128) * cdiv(cdiv(k_pad, 32), 4)) * 512;
  default: return 0;
  }
}

/* Every scale mode's size is at most the largest of the three for the
 * same shape: the scratch holds either choice of mode. */
static size_t max_bytes(int64_t outer, int64_t k_pad, int mx) {
  if (mx) return fp8_scaled_bytes(CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, outer, k_pad);
  size_t v = fp8_scaled_bytes(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, outer, k_pad);
  size_t b = fp8_scaled_bytes(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, outer, k_pad);
  return v > b ? v : b;
}

size_t fp8_scaled_scratch(const gs_call *c, int64_t k_pad, int mx) {
  return align256(max_bytes(c->g.m, k_pad, mx)) + align256(max_bytes(c->g.n, k_pad, mx));
}

const char *fp8_scaled_loaded(const gs_call *c) {
  /* Before anything is enqueued: a module that did not load (its driver
   * call failed) is named in the call's reason, and the call runs native. */
  static __thread char buf[160] __attribute__((tls_model("initial-exec")));
  kernel_ctx kc = route_kernel_ctx(c);
  const char *why = fp8_scaled_ready(&kc, c->g.a_type);
  if (!why) return NULL;
  snprintf(buf, sizeof buf, "block-scaled quantize kernels not loaded (%s)", why);
  return buf;
}

void fp8_scaled_place(const gs_call *c, CUdeviceptr scratch, int64_t k_pad, int mx, fp8_scales *s) {
  s->scaled = 1;
  s->k_pad = k_pad;
  s->scales[0] = scratch;
  s->scales[1] = scratch + (CUdeviceptr)align256(max_bytes(c->g.m, k_pad, mx));
}

static int32_t kernel_mode(int32_t mode) {
  return mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F ? GS_FP8_BQ_BLK128
         : mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0  ? GS_FP8_BQ_MX32_CEIL /* fp8_mx.c */
                                                              : GS_FP8_BQ_VEC128;
}

CUresult fp8_scaled_quantize_operands(const gs_call *c, kernel_ctx *kc, const fp8_scales *s, uint8_t *a8,
                                      uint8_t *b8) {
  const gs_gemm *g = &c->g;
  const int64_t k_pad = s->k_pad;
  /* Element (r, q) of op(A) (r < m) and of op(B)^T (r < n), q along k, in
   * the caller's column-major storage. */
  const int ta = g->transa != CUBLAS_OP_N, tb = g->transb != CUBLAS_OP_N;
  const gs_fp8_bq_args args[2] = {
      {g->A, a8, (void *)(uintptr_t)s->scales[0], g->m, g->k, k_pad, ta ? g->lda : 1, ta ? 1 : g->lda,
       kernel_mode(s->scale_mode[0]), s->fmt[0] == GS_FP8_E5M2 ? GS_FP8_DEV_E5M2 : GS_FP8_DEV_E4M3,
       s->stats ? &s->stats->op[0] : NULL},
      {g->B, b8, (void *)(uintptr_t)s->scales[1], g->n, g->k, k_pad, tb ? 1 : g->ldb, tb ? g->ldb : 1,
       kernel_mode(s->scale_mode[1]), s->fmt[1] == GS_FP8_E5M2 ? GS_FP8_DEV_E5M2 : GS_FP8_DEV_E4M3,
       s->stats ? &s->stats->op[1] : NULL},
  };
  CUresult r = fp8_scaled_quantize(kc, (CUstream)g->stream, g->a_type, &args[0]);
  if (r == CUDA_SUCCESS) r = fp8_scaled_quantize(kc, (CUstream)g->stream, g->b_type, &args[1]);
  return r;
}

void fp8_scaled_release(fp8_scales *s, unsigned ran) { (void)s, (void)ran; }

const char *fp8_scaled_unfit(const gs_call *c, const char *recipe) {
  static __thread char buf[96] __attribute__((tls_model("initial-exec")));
  /* One scale tensor per operand: the shim quantizes one matrix each. */
  if (c->g.batch > 1) {
    snprintf(buf, sizeof buf, "%s scales one matrix per operand, the call has a batch of %lld", recipe,
             (long long)c->g.batch);
    return buf;
  }
  if (gs_opt.fp8_backend == GS_FP8_BACKEND_OWN || gs_opt.fp8_backend == GS_FP8_BACKEND_OWN_MMA) {
    snprintf(buf, sizeof buf, "%s runs on cuBLASLt's fp8 GEMM only (GEMMSHIM_FP8_BACKEND=%s)", recipe,
             gs_opt.fp8_backend == GS_FP8_BACKEND_OWN ? "own" : "own-mma");
    return buf;
  }
  return NULL;
}

const char *fp8_scaled_cublas_before(size_t need, const char *what, char *buf, size_t len) {
  /* Resolving cublasLtMatmul loads cuBLASLt's other entries (resolve.c). */
  if (!resolve_hooked(GS_SYS_cublasLtMatmul) || !gs_sys.cublasLtGetVersion) {
    snprintf(buf, len, "%s, and cublasLtGetVersion was not found", what);
    return buf;
  }
  size_t v = GS_CALL(cublasLtGetVersion);
  if (v == 0) {
    snprintf(buf, len, "%s, and cublasLtGetVersion returned 0", what);
    return buf;
  }
  if (v >= need) return NULL;
  snprintf(buf, len, "%s, the loaded cuBLASLt is %zu.%zu.%zu", what, v / 10000, v / 100 % 100, v % 100);
  return buf;
}
