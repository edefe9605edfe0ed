/* hooks.c: what the process sees. The exported cuBLAS entry points, each
 * the same four steps (decode, decide, route, log) around the real call, and
 * the explicit-handle half of the dlsym wrapper (dlsym.S has the rest).
 *
 * Re-entrancy: libcublas calls cublasLtMatmul through the PLT, so a call the
 * shim forwards can come back into the shim's cublasLtMatmul. A per-thread
 * depth counter lets such nested calls straight through: not decided, not
 * logged as calls of their own. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "resolve.h"
#include "shim.h"
#include "work.h"
#include "base/sys.h"

#define GS_EXPORT __attribute__((visibility("default")))

static __thread int call_depth __attribute__((tls_model("initial-exec")));
/* gettid is a system call: once per thread. */
static __thread int thread_id __attribute__((tls_model("initial-exec")));
static _Atomic uint64_t call_seq;

/* The real function of hooked entry `name`, typed. */
#define REAL(name) ((__typeof__(gs_sys.name))resolve_hooked(GS_SYS_##name))

static uint64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Set up a top-level call. Returns 0 when the call must simply be forwarded
 * (nested inside a call the shim is already making). A top-level call runs
 * with cancellation disabled from here to call_end (cancel.c), its real
 * function's lookup included: each hook calls this first. */
static int call_begin(gs_call *c, gs_api api, const void *caller) {
  if (call_depth) return 0; /* inside a call of ours: cancellation is off already */
  call_depth++;
  cancel_enter();
  /* The reason buffer is most of the struct and only its first byte
   * needs clearing. */
  memset(c, 0, offsetof(gs_call, reason));
  c->reason[0] = '\0';
  c->g.api = api;
  c->caller = caller;
  c->device = c->sm = -1;
  c->quiet = !hooks_timing();
  if (!c->quiet) {
    if (!thread_id) thread_id = (int)gettid();
    c->tid = thread_id;
    c->seq = atomic_fetch_add_explicit(&call_seq, 1, memory_order_relaxed) + 1;
    c->t_ns = now_ns(CLOCK_REALTIME);
    c->dur_ns = now_ns(CLOCK_MONOTONIC);
  }
  return 1;
}

static cublasStatus_t call_end(gs_call *c, cublasStatus_t status) {
  call_work_end(c);
  c->status = status;
  if (!c->quiet) c->dur_ns = now_ns(CLOCK_MONOTONIC) - c->dur_ns;
  call_finish(c);
  call_depth--;
  cancel_leave();
  return status;
}

/* The real function could not be found: say so in the log, answer as
 * cuBLAS does for an unusable library. */
static cublasStatus_t no_real(gs_call *c) {
  call_note(c, "the real %s was not found in any loaded cuBLAS", gs_api_name(c->g.api));
  return call_end(c, CUBLAS_STATUS_NOT_INITIALIZED);
}

/* Run the decided route; GS_DECLINED means "run native" (reason set). */
#define DISPATCH(c, native_call)                                               \
  do {                                                                         \
    call_decide(c);                                                            \
    int st_ = GS_DECLINED;                                                     \
    if ((c)->decided != GS_ROUTE_NATIVE) st_ = route_run(c);                   \
    if (st_ != GS_DECLINED && gs_opt.compare) compare_after_route(c);          \
    if (st_ == GS_DECLINED) {                                                  \
      (c)->route = GS_ROUTE_NATIVE;                                            \
      call_work_declined(c);                                                   \
      call_work_begin(c, GS_ROUTE_NATIVE);                                     \
      st_ = (native_call);                                                     \
    }                                                                          \
    return call_end(c, (cublasStatus_t)st_);                                   \
  } while (0)

GS_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                      int m, int n, int k, const void *alpha, const void *A,
                                      cudaDataType at, int lda, const void *B, cudaDataType bt,
                                      int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                                      cublasComputeType_t comp, cublasGemmAlgo_t algo) {
  gs_call c;
  int top = call_begin(&c, GS_API_GEMM_EX, __builtin_return_address(0));
  __typeof__(gs_sys.cublasGemmEx) real = REAL(cublasGemmEx);
  if (!top)
    return real ? real(h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp, algo)
                : CUBLAS_STATUS_NOT_INITIALIZED;
  decode_gemm(&c.g, h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, comp, algo);
  if (!real) return no_real(&c);
  DISPATCH(&c, GS_CALL(cublasGemmEx, h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp, algo));
}

GS_EXPORT cublasStatus_t cublasGemmEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                         int64_t m, int64_t n, int64_t k, const void *alpha,
                                         const void *A, cudaDataType at, int64_t lda, const void *B,
                                         cudaDataType bt, int64_t ldb, const void *beta, void *C,
                                         cudaDataType ct, int64_t ldc, cublasComputeType_t comp,
                                         cublasGemmAlgo_t algo) {
  gs_call c;
  int top = call_begin(&c, GS_API_GEMM_EX_64, __builtin_return_address(0));
  __typeof__(gs_sys.cublasGemmEx_64) real = REAL(cublasGemmEx_64);
  if (!top)
    return real ? real(h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp, algo)
                : CUBLAS_STATUS_NOT_INITIALIZED;
  decode_gemm(&c.g, h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, comp, algo);
  if (!real) return no_real(&c);
  DISPATCH(&c, GS_CALL(cublasGemmEx_64, h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp, algo));
}

GS_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B,
    cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t comp, cublasGemmAlgo_t algo) {
  gs_call c;
  int top = call_begin(&c, GS_API_GEMM_STRIDED_BATCHED_EX, __builtin_return_address(0));
  __typeof__(gs_sys.cublasGemmStridedBatchedEx) real = REAL(cublasGemmStridedBatchedEx);
  if (!top)
    return real ? real(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, comp, algo)
                : CUBLAS_STATUS_NOT_INITIALIZED;
  decode_gemm(&c.g, h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, comp, algo);
  if (!real) return no_real(&c);
  DISPATCH(&c, GS_CALL(cublasGemmStridedBatchedEx, h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, comp, algo));
}

GS_EXPORT cublasStatus_t cublasGemmStridedBatchedEx_64(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
    const void *alpha, const void *A, cudaDataType at, int64_t lda, long long sa, const void *B,
    cudaDataType bt, int64_t ldb, long long sb, const void *beta, void *C, cudaDataType ct,
    int64_t ldc, long long sc, int64_t batch, cublasComputeType_t comp, cublasGemmAlgo_t algo) {
  gs_call c;
  int top = call_begin(&c, GS_API_GEMM_STRIDED_BATCHED_EX_64, __builtin_return_address(0));
  __typeof__(gs_sys.cublasGemmStridedBatchedEx_64) real = REAL(cublasGemmStridedBatchedEx_64);
  if (!top)
    return real ? real(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, comp, algo)
                : CUBLAS_STATUS_NOT_INITIALIZED;
  decode_gemm(&c.g, h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, comp, algo);
  if (!real) return no_real(&c);
  DISPATCH(&c, GS_CALL(cublasGemmStridedBatchedEx_64, h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, comp, algo));
}

GS_EXPORT cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                             cublasOperation_t tb, int m, int n, int k,
                                             const void *alpha, const void *const A[],
                                             cudaDataType at, int lda, const void *const B[],
                                             cudaDataType bt, int ldb, const void *beta,
                                             void *const C[], cudaDataType ct, int ldc, int batch,
                                             cublasComputeType_t comp, cublasGemmAlgo_t algo) {
  gs_call c;
  int top = call_begin(&c, GS_API_GEMM_BATCHED_EX, __builtin_return_address(0));
  __typeof__(gs_sys.cublasGemmBatchedEx) real = REAL(cublasGemmBatchedEx);
  if (!top)
    return real ? real(h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, batch, comp, algo)
                : CUBLAS_STATUS_NOT_INITIALIZED;
  decode_gemm(&c.g, h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, (void *)C, ct, ldc, 0, batch, comp, algo);
  if (!real) return no_real(&c);
  DISPATCH(&c, GS_CALL(cublasGemmBatchedEx, h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, batch, comp, algo));
}

GS_EXPORT cublasStatus_t cublasGemmBatchedEx_64(cublasHandle_t h, cublasOperation_t ta,
                                                cublasOperation_t tb, int64_t m, int64_t n,
                                                int64_t k, const void *alpha,
                                                const void *const A[], cudaDataType at,
                                                int64_t lda, const void *const B[],
                                                cudaDataType bt, int64_t ldb, const void *beta,
                                                void *const C[], cudaDataType ct, int64_t ldc,
                                                int64_t batch, cublasComputeType_t comp,
                                                cublasGemmAlgo_t algo) {
  gs_call c;
  int top = call_begin(&c, GS_API_GEMM_BATCHED_EX_64, __builtin_return_address(0));
  __typeof__(gs_sys.cublasGemmBatchedEx_64) real = REAL(cublasGemmBatchedEx_64);
  if (!top)
    return real ? real(h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, batch, comp, algo)
                : CUBLAS_STATUS_NOT_INITIALIZED;
  decode_gemm(&c.g, h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, (void *)C, ct, ldc, 0, batch, comp, algo);
  if (!real) return no_real(&c);
  DISPATCH(&c, GS_CALL(cublasGemmBatchedEx_64, h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, batch, comp, algo));
}

GS_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                        const void *alpha, const void *A, cublasLtMatrixLayout_t ad,
                                        const void *B, cublasLtMatrixLayout_t bd, const void *beta,
                                        const void *C, cublasLtMatrixLayout_t cd, void *D,
                                        cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t *algo,
                                        void *ws, size_t wss, cudaStream_t s) {
  gs_call c;
  int top = call_begin(&c, GS_API_LT_MATMUL, __builtin_return_address(0));
  __typeof__(gs_sys.cublasLtMatmul) real = REAL(cublasLtMatmul);
  if (!top)
    return real ? real(h, desc, alpha, A, ad, B, bd, beta, C, cd, D, dd, algo, ws, wss, s)
                : CUBLAS_STATUS_NOT_INITIALIZED;
  if (!real) return no_real(&c);
  decode_lt(&c.g, h, desc, alpha, A, ad, B, bd, beta, C, cd, D, dd, s);
  c.g.workspace = ws;
  c.g.workspace_size = wss;
  if (!c.quiet) decode_lt_rest(&c.g, 0);
  DISPATCH(&c, GS_CALL(cublasLtMatmul, h, desc, alpha, A, ad, B, bd, beta, C, cd, D, dd, algo, ws, wss, s));
}

/* Handles: only watched so the decision step never asks a destroyed handle
 * for its stream. */
GS_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  cancel_enter();
  __typeof__(gs_sys.cublasCreate_v2) real = REAL(cublasCreate_v2);
  cublasStatus_t st = CUBLAS_STATUS_NOT_INITIALIZED;
  if (real) {
    st = GS_CALL(cublasCreate_v2, h);
    if (st == CUBLAS_STATUS_SUCCESS && h) device_handle_created(*h);
  }
  cancel_leave();
  return st;
}

GS_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  cancel_enter();
  __typeof__(gs_sys.cublasDestroy_v2) real = REAL(cublasDestroy_v2);
  cublasStatus_t st = CUBLAS_STATUS_NOT_INITIALIZED;
  if (real) {
    device_handle_destroyed(h);
    st = GS_CALL(cublasDestroy_v2, h);
  }
  cancel_leave();
  return st;
}

/* ---- dlsym on an explicit handle ---------------------------------------------- */
/* The shim's wrapper of each hooked entry, from the call table's list. */
static void *const hook_of[GS_SYS_COUNT] = {
#define HOOK_OF(name, ret, fail, params, args) [GS_SYS_##name] = (void *)name,
    GS_SYS_HOOKED(HOOK_OF)
#undef HOOK_OF
};

/* dlsym_entry.c found that `name` (a cublas* name) resolved to p on an
 * explicit handle. Only a lookup that really lands in cuBLAS is swapped:
 * anything else (another library's function of that name, the shim
 * itself) is left as the loader answered. */
static void *hooks_dlsym_swap(const char *name, void *p) {
  if (!hooks_dlsym_enabled()) return p;
  for (int i = 0; i < GS_SYS_COUNT; i++) {
    if (!hook_of[i] || strcmp(name, gs_sys_names[i]) != 0) continue;
    cancel_enter(); /* resolve_adopt takes a lock */
    void *swapped = p;
    if (!resolve_is_self(p) && resolve_object_is_cublas(p, NULL)) {
      resolve_adopt((gs_sys_id)i, p);
      swapped = hook_of[i];
    }
    cancel_leave();
    return swapped;
  }
  return p;
}

/* ---- load and exit -------------------------------------------------------- */
static void forget_thread_id(void) { thread_id = 0; }

/* Both run on a thread of the program (the one that loads the library, the
 * one that exits), with cancellation disabled (cancel.c): log_shutdown
 * waits and writes under the log's lock. */
__attribute__((constructor)) static void shim_load(void) {
  cancel_enter();
  resolve_init();
  dlsym_entry_swap_with(hooks_dlsym_swap);
  exec_init();
  pthread_atfork(NULL, NULL, forget_thread_id);
  options_init();
  decide_policy_loaded();
  nvtx_init();
  work_init();
  log_init();
  cancel_leave();
}

__attribute__((destructor)) static void shim_unload(void) {
  cancel_enter();
  log_shutdown();
  cancel_leave();
}
