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
 * Why a native run beside the route: a route's speedup is measured on the
 * same GPU, shapes and run. The caller's results stay the route's: the
 * native run writes only scratch output, and calls whose native run would
 * write anything else of the caller's are never compared. The number of
 * compared calls stays bounded even when sites evict each other from the
 * table.
 *
 * Outputs, cost and the worst-case bound: docs/profiling.md,
 * "compare.c: which calls, at what cost". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "routes/cost.h"
#include "routes/memory.h"
#include "shim.h"
#include "base/sys.h"

/* Calls seen per site, for "first, then every Nth" (the contract above).
 * 1024 sets of 4: 4096 sites, 112 KiB, as many sites as the direct-mapped
 * table this replaced; with 4 places a set, a few hundred sites (a model's
 * GEMMs) rarely put 5 in one set. */
#define COMPARE_SETS 1024
#define COMPARE_WAYS 4

static struct compare_set {
  uint64_t calls;         /* calls of the set's sites, ever */
  uint64_t newcomer_at;   /* `calls` at the last compared newcomer; 0: none yet */
  struct {
    uint64_t site, calls; /* calls: of this site since it took the place */
    uint64_t last;        /* the set's `calls` at this site's last call; 0: free */
  } way[COMPARE_WAYS];
} sets[COMPARE_SETS];
static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;

unsigned compare_set_of(uint64_t site) { return (unsigned)((site ^ (site >> 29)) % COMPARE_SETS); }

int compare_due(uint64_t site) {
  uint64_t every = gs_opt.compare_every ? gs_opt.compare_every : 1;
  pthread_mutex_lock(&sets_lock);
  struct compare_set *s = &sets[compare_set_of(site)];
  uint64_t now = ++s->calls;
  int w, victim = 0, due;
  for (w = 0; w < COMPARE_WAYS; w++)
    if (s->way[w].last && s->way[w].site == site) break;
  if (w < COMPARE_WAYS) {
    due = s->way[w].calls % every == 0;
  } else {
    for (w = 0; w < COMPARE_WAYS; w++) {
      if (!s->way[w].last) break;
      if (s->way[w].last < s->way[victim].last) victim = w;
    }
    if (w < COMPARE_WAYS) {
      due = 1; /* a free place: nobody's count is lost */
    } else {
      w = victim;
      due = !s->newcomer_at || now - s->newcomer_at >= every;
      if (due) s->newcomer_at = now;
    }
    s->way[w].site = site;
    s->way[w].calls = 0;
  }
  s->way[w].calls++;
  s->way[w].last = now;
  pthread_mutex_unlock(&sets_lock);
  return due;
}

int compare_decide(gs_call *c) {
  if (!c->compare_asked) {
    c->compare_asked = 1;
    c->compare_due = compare_due(c->site ? c->site : site_id(c->caller, &c->g));
  }
  return c->compare_due;
}

void compare_forgo(gs_call *c) {
  if (!c->compare_asked) return;
  c->compare_asked = 0;
  const uint64_t site = c->site ? c->site : site_id(c->caller, &c->g);
  pthread_mutex_lock(&sets_lock);
  struct compare_set *s = &sets[compare_set_of(site)];
  for (int w = 0; w < COMPARE_WAYS; w++)
    if (s->way[w].last && s->way[w].site == site) {
      /* its place in "first, then every Nth" back: the next call of the
       * site asks again as this one did (a site evicted since has lost
       * its count anyway) */
      if (s->way[w].calls) s->way[w].calls--;
      break;
    }
  pthread_mutex_unlock(&sets_lock);
}

void compare_forget_for_tests(void) {
  pthread_mutex_lock(&sets_lock);
  memset(sets, 0, sizeof sets);
  pthread_mutex_unlock(&sets_lock);
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
  uint64_t most = c->route == GS_ROUTE_FP8    ? gs_opt.fp8_max_bytes
                  : c->route == GS_ROUTE_FP16 ? gs_opt.fp16_max_bytes
                                              : gs_opt.ffma_max_bytes;
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
  /* A captured call's work runs at each replay, where nothing of the
   * call's is left to time or compare (gpu_time.c records no events in a
   * capture). */
  if (gs_opt.compare && c->captured && c->work_begun && c->route != GS_ROUTE_NATIVE) {
    call_note(c, "compare skipped: captured into a CUDA graph");
    return;
  }
  if (!gs_opt.compare || !c->work_begun || !c->gpu.on || c->route == GS_ROUTE_NATIVE) return;
  /* The record's site: for the delayed recipe the per-layer one its
   * acquire named, so that "first, then every Nth" counts each layer
   * (counted on the call site, every Nth call could fall on one layer). */
  if (!compare_decide(c)) return;
  /* Only calls the gate could turn native count for the measured gate
   * (the own fp8 kernels are numerics checks it leaves alone). */
  c->gpu.gated = (uint8_t)cost_gate_applies(c, c->route);
  size_t bytes = 0;
  const char *why = plan(c, &bytes);
  /* The accuracy measure's scratch follows the native output (accuracy.c). */
  accuracy_output acc;
  const char *acc_why = why ? NULL : accuracy_plan(c, &acc);
  const size_t out_bytes = (bytes + 255) & ~(size_t)255;
  if (!why && !acc_why) bytes = out_bytes + accuracy_scratch_bytes();
  gs_transient t;
  if (!why) why = transient_alloc(c, bytes, &t);
  if (why) {
    call_note(c, "compare skipped: %s", why);
    return;
  }
  /* GEMMSHIM_FAULT=route_output: a wrong route result, for the tests of
   * the accuracy measure and the guard (first column of member 0 zeroed). */
  if (!acc_why && gs_fault_corrupt_hit()) {
    const size_t e = acc.type == CUDA_R_32F ? 4 : 2;
    if (GS_CALL(cuMemsetD8Async, (CUdeviceptr)(uintptr_t)acc.route, 0, (size_t)acc.rows * e,
                (CUstream)c->g.stream) == CUDA_SUCCESS)
      call_note(c, "GEMMSHIM_FAULT: route output corrupted");
  }
  /* The route's work ends here; the native run's after it. */
  gpu_time_mark(c, GS_GPU_EV_END);
  int st = c->gpu.on ? run_native(c, (void *)(uintptr_t)t.ptr) : -1;
  if (st == CUBLAS_STATUS_SUCCESS) {
    gpu_time_mark(c, GS_GPU_EV_NATIVE_END);
    if (acc_why) call_note(c, "accuracy not measured: %s", acc_why);
    else if (c->gpu.on) accuracy_measure(c, &acc, (const void *)(uintptr_t)t.ptr, (char *)(uintptr_t)t.ptr + out_bytes);
  } else if (c->gpu.on) {
    call_note(c, "compare: native run returned status %d", st);
  }
  transient_release(&t);
}
