/* accuracy.c: how far a compared call's route output is from the native
 * one (GEMMSHIM_COMPARE), measured on the device.
 *
 * compare.c runs the GEMM natively into scratch memory after the route;
 * then, on the same stream, the accuracy kernels (kernels/accuracy.cu)
 * reduce both outputs to one gs_acc_stats, which is copied into a slot of
 * page-locked host memory (so the copy is asynchronous), and the event
 * ACC_END is recorded after it. The log's writer reads the slot once that
 * event has completed (gpu_time_resolve): the calling thread never waits.
 *
 * What the log gets of the statistics, and its edge cases:
 * docs/log-format.md, "Accuracy of compared calls". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../kernels/accuracy_kernels.h"
#include "shim.h"
#include "base/sys.h"

/* ---- page-locked slots, per context ------------------------------------- */
/* Slots are taken by compared calls and given back by the log's writer:
 * a context needs as many as compared calls in flight between two flushes
 * (10 ms). SLOTS_PER_BLOCK a cuMemHostAlloc, at most BLOCKS blocks. */
#define ACC_CTXS 16
#define SLOTS_PER_BLOCK 64
#define BLOCKS 4

typedef struct acc_pool {
  unsigned long long ctx_id; /* 0: unused */
  gs_acc_stats *block[BLOCKS];
  gs_acc_stats *free[SLOTS_PER_BLOCK * BLOCKS];
  unsigned n, blocks;
} acc_pool;

static acc_pool pools[ACC_CTXS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static acc_pool *pool_of(unsigned long long ctx_id, int create) {
  acc_pool *empty = NULL;
  for (int i = 0; i < ACC_CTXS; i++) {
    if (pools[i].ctx_id == ctx_id) return &pools[i];
    if (!pools[i].ctx_id && !empty) empty = &pools[i];
  }
  if (!create || !empty) return NULL;
  memset(empty, 0, sizeof *empty);
  empty->ctx_id = ctx_id;
  return empty;
}

/* A slot of the call's context, or NULL with *why set. The block is
 * allocated in the call's context, which is current (a routed call runs in
 * it). */
static gs_acc_stats *slot_take(unsigned long long ctx_id, const char **why) {
  pthread_mutex_lock(&pool_lock);
  acc_pool *p = pool_of(ctx_id, 1);
  gs_acc_stats *s = NULL;
  if (!p) {
    *why = "more contexts than the accuracy slots serve";
  } else if (p->n) {
    s = p->free[--p->n];
  } else if (p->blocks == BLOCKS) {
    *why = "every accuracy slot is waiting for the log";
  } else {
    void *mem = NULL;
    CUresult r = !gs_sys.cuMemHostAlloc ? CUDA_ERROR_NOT_FOUND
                                        : GS_CALL(cuMemHostAlloc, &mem, sizeof(gs_acc_stats) * SLOTS_PER_BLOCK,
                                                  CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS || !mem) {
      *why = r == CUDA_ERROR_NOT_FOUND ? "the driver has no cuMemHostAlloc"
             : r == CUDA_ERROR_OUT_OF_MEMORY ? "cuMemHostAlloc: out of page-locked memory (CUresult 2)"
                                             : "cuMemHostAlloc failed";
    } else {
      gs_acc_stats *b = mem;
      p->block[p->blocks++] = b;
      for (unsigned i = 1; i < SLOTS_PER_BLOCK; i++) p->free[p->n++] = &b[i];
      s = &b[0];
    }
  }
  pthread_mutex_unlock(&pool_lock);
  return s;
}

static void slot_give(unsigned long long ctx_id, void *slot) {
  if (!slot) return;
  pthread_mutex_lock(&pool_lock);
  acc_pool *p = pool_of(ctx_id, 0);
  if (p && p->n < SLOTS_PER_BLOCK * BLOCKS) p->free[p->n++] = slot;
  pthread_mutex_unlock(&pool_lock);
}

/* ---- the measure --------------------------------------------------------- */
const char *accuracy_plan(const gs_call *c, accuracy_output *o) {
  const gs_gemm *g = &c->g;
  const int lt = g->api == GS_API_LT_MATMUL;
  o->type = lt ? g->d_type : g->c_type;
  if (o->type != CUDA_R_32F && o->type != CUDA_R_16BF && o->type != CUDA_R_16F)
    return "output type the accuracy measure does not read";
  /* The native run reads the caller's C: once the route has written D over
   * it (in place), that run is not the call's GEMM any more. */
  const int beta_read = g->pointer_mode != CUBLAS_POINTER_MODE_HOST || !g->beta ||
                        (g->scale_type == CUDA_R_64F ? *(const double *)g->beta != 0.0
                                                     : *(const float *)g->beta != 0.0f);
  if (beta_read && (!lt || g->C == g->D)) return "C is read (beta may be nonzero) and the route wrote over it";
  o->route = g->D;
  o->ld = lt ? g->ldd : g->ldc;
  o->stride = g->batch > 1 ? (lt ? g->stride_d : g->stride_c) : 0;
  const int row_major = lt && g->order_d == CUBLASLT_ORDER_ROW;
  o->rows = row_major ? g->n : g->m;
  o->cols = row_major ? g->m : g->n;
  o->batch = g->batch;
  return NULL;
}

size_t accuracy_scratch_bytes(void) {
  return ((sizeof(gs_acc_partial) * GS_ACC_PARTIALS + 255) & ~(size_t)255) + sizeof(gs_acc_stats);
}

void accuracy_measure(gs_call *c, const accuracy_output *o, const void *native, void *scratch) {
  gs_gpu_time *t = &c->gpu;
  const char *why = NULL;
  gs_acc_stats *slot = slot_take(t->ctx_id, &why);
  if (!slot) {
    call_note(c, "accuracy not measured: %s", why);
    return;
  }
  gs_acc_partial *partials = scratch;
  gs_acc_stats *dev = (gs_acc_stats *)(void *)((char *)scratch + ((sizeof(gs_acc_partial) * GS_ACC_PARTIALS + 255) &
                                                                  ~(size_t)255));
  kernel_ctx kc = route_kernel_ctx(c);
  CUresult r = kernel_accuracy(&kc, (CUstream)c->g.stream, o->type, o->route, native, o->ld, o->stride, o->rows,
                               o->cols, o->batch, partials, dev);
  if (r != CUDA_SUCCESS) {
    call_note(c, "accuracy not measured: kernel launch failed (CUresult %d)", (int)r);
    slot_give(t->ctx_id, slot);
    return;
  }
  if (!gs_sys.cuMemcpyDtoHAsync_v2) {
    call_note(c, "accuracy not measured: the driver has no cuMemcpyDtoHAsync");
    slot_give(t->ctx_id, slot);
    return;
  }
  r = GS_CALL(cuMemcpyDtoHAsync_v2, slot, (CUdeviceptr)(uintptr_t)dev, sizeof *slot, (CUstream)c->g.stream);
  if (r != CUDA_SUCCESS) {
    call_note(c, "accuracy not measured: cuMemcpyDtoHAsync failed (CUresult %d)", (int)r);
    slot_give(t->ctx_id, slot);
    return;
  }
  gpu_time_mark(c, GS_GPU_EV_ACC_END);
  if (!c->gpu.on || !c->gpu.ev[GS_GPU_EV_ACC_END]) {
    /* No event to say when the copy is done: the slot may still be written
     * (the stream runs on), so it is not reused. */
    return;
  }
  t->acc_slot = slot;
}

/* ---- what the log prints -------------------------------------------------- */
/* log10 without libm (the library links libc only): x = m * 2^e, m in
 * [1, 2), ln m = 2 atanh(s), s = (m - 1) / (m + 1) <= 1/3; the series to
 * s^23 is within 1e-12 of it. x > 0 and finite. */
double gs_log10(double x) {
  uint64_t u;
  memcpy(&u, &x, 8);
  int e = (int)((u >> 52) & 0x7ff);
  if (e == 0) { /* subnormal: scale up by 2^64 */
    x *= 18446744073709551616.0;
    memcpy(&u, &x, 8);
    e = (int)((u >> 52) & 0x7ff) - 64;
  }
  e -= 1023;
  u = (u & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m;
  memcpy(&m, &u, 8);
  const double s = (m - 1) / (m + 1), s2 = s * s;
  double term = s, sum = 0;
  for (int k = 1; k <= 23; k += 2) {
    sum += term / k;
    term *= s2;
  }
  const double ln = 2 * sum + e * 0.69314718055994530942;
  return ln * 0.43429448190325182765; /* 1 / ln 10 */
}

/* The histogram's quantile q (nearest rank) as its bin's upper edge. */
static double quantile(const gs_acc_stats *s, double q) {
  uint64_t rank = (uint64_t)(q * (double)s->finite);
  if ((double)rank < q * (double)s->finite) rank++;
  if (rank < 1) rank = 1;
  uint64_t seen = 0;
  int b = 0;
  for (; b < GS_ACC_BINS - 1; b++) {
    seen += s->hist[b];
    if (seen >= rank) break;
  }
  if (b == 0) return 0;
  if (b == GS_ACC_BINS - 1) return __builtin_inf();
  /* bin 1: below 2^LO; bin 2 + i: up to 2^(LO + (i + 1) / 4) */
  const int quarter = b == 1 ? 0 : b - 1; /* quarters above 2^LO of the upper edge */
  double v = 1;
  for (int i = 0; i < -GS_ACC_LOG2_LO; i++) v *= 0.5;
  for (int i = 0; i < quarter / 4; i++) v *= 2;
  static const double fourth[4] = {1, 1.18920711500272106672, 1.41421356237309504880, 1.68179283050742908606};
  return v * fourth[quarter % 4];
}

void accuracy_summarise(const gs_acc_stats *s, gs_gpu_time *t) {
  const double inf = __builtin_inf();
  if (s->sum_d2 == 0) t->acc_sqnr_db = inf;
  else if (s->sum_n2 == 0) t->acc_sqnr_db = -inf;
  else t->acc_sqnr_db = 10 * (gs_log10(s->sum_n2) - gs_log10(s->sum_d2));
  if (s->max_d == 0) t->acc_max_rel = 0;
  else if (s->max_n == 0) t->acc_max_rel = inf;
  else t->acc_max_rel = (double)s->max_d / (double)s->max_n;
  t->acc_mismatch = s->mismatch;
  t->has_acc_quantiles = s->finite > 0;
  if (s->finite) {
    t->acc_p50 = quantile(s, 0.5);
    t->acc_p99 = quantile(s, 0.99);
  }
  t->has_acc = 1;
}

void accuracy_resolve(gs_gpu_time *t) {
  if (!t->acc_slot) return;
  accuracy_summarise((const gs_acc_stats *)t->acc_slot, t);
  slot_give(t->ctx_id, t->acc_slot);
  t->acc_slot = NULL;
}

void accuracy_release(gs_gpu_time *t, int ctx_alive) {
  if (t->acc_slot && ctx_alive) slot_give(t->ctx_id, t->acc_slot);
  t->acc_slot = NULL;
}
