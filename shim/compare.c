/* compare.c: route versus native, measured in the same run
 * (GEMMSHIM_COMPARE=1).
 *
 * After a call that a route ran (ffma, fp8), now and then the same GEMM
 * also runs native, on the same handle and stream, into scratch device
 * memory, between the call's END event and one more (NATIVE_END): the log
 * gets native_gpu_ns beside the route's gpu_ns, and `gemmshim report` shows
 * the measured speedup per shape. Which calls: the first of each call site
 * (return address and shape, site.c) and then every GEMMSHIM_COMPARE_EVERY-th.
 *
 * The caller's results are the route's, untouched: the native run writes
 * only the scratch output (C of the GemmEx family, D of cuBLASLt; C is
 * read as the caller's for cuBLASLt, a scratch copy of nothing for GemmEx,
 * whose values do not change a GEMM's time). Calls whose native run would
 * write anything else of the caller's are never compared: pointer-array
 * batches, cuBLASLt epilogues with an auxiliary output, an amax output.
 *
 * Cost: one more native GEMM per compared call (the first call of each
 * site and 1 in N after), and scratch memory the size of the output,
 * stream-ordered and bounded by the route's own GEMMSHIM_*_MAX_BYTES. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>

#include "memory.h"
#include "shim.h"
#include "sys.h"

/* Calls seen per site, for "first, then every Nth". An open-addressed
 * table; a site whose slot another took starts counting again (it is
 * compared once more: bounded extra cost). */
#define COMPARE_SITES 4096

static struct {
  uint64_t site, calls;
} seen[COMPARE_SITES];
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static int compare_due(uint64_t site) {
  pthread_mutex_lock(&seen_lock);
  unsigned i = (unsigned)(site ^ (site >> 29)) % COMPARE_SITES;
  if (seen[i].site != site) {
    seen[i].site = site;
    seen[i].calls = 0;
  }
  int due = seen[i].calls % gs_opt.compare_every == 0;
  seen[i].calls++;
  pthread_mutex_unlock(&seen_lock);
  return due;
}

static size_t elem_bytes(int t) {
  switch (t) {
    case CUDA_R_64F: case CUDA_C_32F: return 8;
    case CUDA_R_32F: case CUDA_R_32I: case CUDA_C_16F: case CUDA_C_16BF: return 4;
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    case CUDA_R_8I: case CUDA_R_8U: case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
    case CUDA_C_64F: return 16;
    default: return 0;
  }
}

/* Bytes of an output of `cols` columns of ld elements (rows for a row-major
 * layout), batch members stride elements apart; 0 if it overflows. */
static size_t output_bytes(int type, int64_t ld, int64_t cols, int64_t batch, int64_t stride) {
  size_t e = elem_bytes(type);
  if (!e || ld <= 0 || cols <= 0 || batch <= 0 || stride < 0) return 0;
  unsigned __int128 one = (unsigned __int128)(uint64_t)ld * (uint64_t)cols;
  unsigned __int128 span = one + (unsigned __int128)(uint64_t)(batch - 1) * (uint64_t)stride;
  if (one > span) span = one;
  span *= e;
  return span > SIZE_MAX / 2 ? 0 : (size_t)span;
}

/* Why this call cannot be compared, or NULL; *bytes the scratch output. */
static const char *plan(const gs_call *c, size_t *bytes) {
  const gs_gemm *g = &c->g;
  switch (g->api) {
    case GS_API_GEMM_BATCHED_EX:
    case GS_API_GEMM_BATCHED_EX_64: return "pointer-array batch";
    case GS_API_LT_MATMUL:
      if (g->amax_d) return "amax output";
      if (g->epilogue != CUBLASLT_EPILOGUE_DEFAULT && g->epilogue != CUBLASLT_EPILOGUE_BIAS &&
          g->epilogue != CUBLASLT_EPILOGUE_RELU && g->epilogue != CUBLASLT_EPILOGUE_RELU_BIAS &&
          g->epilogue != CUBLASLT_EPILOGUE_GELU && g->epilogue != CUBLASLT_EPILOGUE_GELU_BIAS)
        return "epilogue with an auxiliary output";
      *bytes = output_bytes(g->d_type, g->ldd, g->order_d == CUBLASLT_ORDER_ROW ? g->m : g->n, g->batch,
                            g->batch > 1 ? g->stride_d : 0);
      break;
    default:
      *bytes = output_bytes(g->c_type, g->ldc, g->n, g->batch, g->batch > 1 ? g->stride_c : 0);
      break;
  }
  if (!*bytes) return "output size unknown";
  uint64_t most = c->route == GS_ROUTE_FP8 ? gs_opt.fp8_max_bytes : gs_opt.ffma_max_bytes;
  if (*bytes > most) return "scratch output over the route's memory bound";
  return NULL;
}

static int run_native(const gs_call *c, void *out) {
  const gs_gemm *g = &c->g;
  cublasHandle_t h = (cublasHandle_t)g->handle;
  switch (g->api) {
    case GS_API_GEMM_EX:
      return GS_CALL(cublasGemmEx, h, g->transa, g->transb, (int)g->m, (int)g->n, (int)g->k, g->alpha, g->A,
                     g->a_type, (int)g->lda, g->B, g->b_type, (int)g->ldb, g->beta, out, g->c_type, (int)g->ldc,
                     g->compute_type, g->algo);
    case GS_API_GEMM_EX_64:
      return GS_CALL(cublasGemmEx_64, h, g->transa, g->transb, g->m, g->n, g->k, g->alpha, g->A, g->a_type, g->lda,
                     g->B, g->b_type, g->ldb, g->beta, out, g->c_type, g->ldc, g->compute_type, g->algo);
    case GS_API_GEMM_STRIDED_BATCHED_EX:
      return GS_CALL(cublasGemmStridedBatchedEx, h, g->transa, g->transb, (int)g->m, (int)g->n, (int)g->k, g->alpha,
                     g->A, g->a_type, (int)g->lda, g->stride_a, g->B, g->b_type, (int)g->ldb, g->stride_b, g->beta,
                     out, g->c_type, (int)g->ldc, g->stride_c, (int)g->batch, g->compute_type, g->algo);
    case GS_API_GEMM_STRIDED_BATCHED_EX_64:
      return GS_CALL(cublasGemmStridedBatchedEx_64, h, g->transa, g->transb, g->m, g->n, g->k, g->alpha, g->A,
                     g->a_type, g->lda, g->stride_a, g->B, g->b_type, g->ldb, g->stride_b, g->beta, out, g->c_type,
                     g->ldc, g->stride_c, g->batch, g->compute_type, g->algo);
    case GS_API_LT_MATMUL:
      return GS_CALL(cublasLtMatmul, (cublasLtHandle_t)g->handle, (cublasLtMatmulDesc_t)g->lt_desc, g->alpha, g->A,
                     (cublasLtMatrixLayout_t)g->lt_layout[0], g->B, (cublasLtMatrixLayout_t)g->lt_layout[1], g->beta,
                     g->C, (cublasLtMatrixLayout_t)g->lt_layout[2], out, (cublasLtMatrixLayout_t)g->lt_layout[3],
                     NULL, g->workspace, g->workspace_size, (cudaStream_t)g->stream);
    default: return -1;
  }
}

void compare_after_route(gs_call *c) {
  if (!gs_opt.compare || !c->work_begun || !c->gpu.on || c->route == GS_ROUTE_NATIVE) return;
  if (!compare_due(site_id(c->caller, &c->g))) return;
  size_t bytes = 0;
  const char *why = plan(c, &bytes);
  gs_transient t;
  if (!why) why = transient_alloc(c, bytes, &t);
  if (why) {
    call_decline(c, c->route, "compare skipped: %s", why);
    return;
  }
  /* The route's work ends here; the native run's after it. */
  gpu_time_mark(c, GS_GPU_EV_END);
  int st = c->gpu.on ? run_native(c, (void *)(uintptr_t)t.ptr) : -1;
  if (st == CUBLAS_STATUS_SUCCESS) gpu_time_mark(c, GS_GPU_EV_NATIVE_END);
  else if (c->gpu.on) call_decline(c, c->route, "compare: native run returned status %d", st);
  transient_release(&t);
}
