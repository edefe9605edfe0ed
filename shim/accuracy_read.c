/* accuracy_read.c: the host side of the accuracy measure (accuracy.c):
 * the page-locked slots the statistics are copied into, and what the log's
 * writer makes of them once their copy has completed (gpu_time_resolve).
 * Apart from accuracy.c so that the writer's side depends on nothing that
 * issues device work. docs/log-format.md, "Accuracy of compared calls". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../kernels/accuracy_kernels.h"
#include "accuracy_read.h"
#include "shim.h"
#include "base/ctx_table.h"
#include "base/sys.h"

/* ---- page-locked slots, per context ------------------------------------- */
/* Slots are taken by compared calls and given back by the log's writer:
 * a context needs as many as compared calls in flight between two flushes
 * (10 ms). SLOTS_PER_BLOCK a cuMemHostAlloc, at most BLOCKS blocks. */
#define ACC_CTXS 16
#define SLOTS_PER_BLOCK 64
#define BLOCKS 4

typedef struct acc_pool {
  void *ctx;                 /* the context's address, to tell it gone */
  unsigned long long ctx_id; /* 0: unused */
  gs_compare_slot *block[BLOCKS];
  gs_compare_slot *free[SLOTS_PER_BLOCK * BLOCKS];
  unsigned n, blocks;
} acc_pool;

static acc_pool pools[ACC_CTXS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* The pool of ctx_id; with create, a free one, else the pool of a context
 * that is gone (ctx_table_gone: cuCtxGetId refuses its address or answers
 * another id), asked only when every pool is taken. A gone context's
 * blocks are abandoned, not freed (cuMemFreeHost needs a live context);
 * its slots still in flight are never given back (accuracy_release), so
 * nothing of it is reused. */
static acc_pool *pool_of(void *ctx, unsigned long long ctx_id, int create) {
  acc_pool *empty = NULL;
  for (int i = 0; i < ACC_CTXS; i++) {
    if (pools[i].ctx_id == ctx_id) return &pools[i];
    if (!pools[i].ctx_id && !empty) empty = &pools[i];
  }
  if (!create) return NULL;
  for (int i = 0; i < ACC_CTXS && !empty; i++) {
    const ctx_entry e = {pools[i].ctx, pools[i].ctx_id, NULL};
    if (ctx_table_gone(&e)) empty = &pools[i];
  }
  if (!empty) return NULL;
  memset(empty, 0, sizeof *empty);
  empty->ctx = ctx;
  empty->ctx_id = ctx_id;
  return empty;
}

/* A slot of the call's context, or NULL with *why set. The block is
 * allocated in the call's context, which is current (a routed call runs in
 * it). */
gs_compare_slot *accuracy_slot_take(void *ctx, unsigned long long ctx_id, const char **why) {
  pthread_mutex_lock(&pool_lock);
  acc_pool *p = pool_of(ctx, ctx_id, 1);
  gs_compare_slot *s = NULL;
  if (!p) {
    *why = "more live contexts than the accuracy slots serve (16)";
  } else if (p->n) {
    s = p->free[--p->n];
  } else if (p->blocks == BLOCKS) {
    *why = "every accuracy slot is waiting for the log";
  } else {
    void *mem = NULL;
    CUresult r = !gs_sys.cuMemHostAlloc ? CUDA_ERROR_NOT_FOUND
                                        : GS_CALL(cuMemHostAlloc, &mem, sizeof(gs_compare_slot) * SLOTS_PER_BLOCK,
                                                  CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS || !mem) {
      *why = r == CUDA_ERROR_NOT_FOUND ? "the driver has no cuMemHostAlloc"
             : r == CUDA_ERROR_OUT_OF_MEMORY ? "cuMemHostAlloc: out of page-locked memory (CUresult 2)"
                                             : "cuMemHostAlloc failed";
    } else {
      gs_compare_slot *b = mem;
      p->block[p->blocks++] = b;
      for (unsigned i = 1; i < SLOTS_PER_BLOCK; i++) p->free[p->n++] = &b[i];
      s = &b[0];
    }
  }
  pthread_mutex_unlock(&pool_lock);
  return s;
}

void accuracy_slot_give(unsigned long long ctx_id, void *slot) {
  if (!slot) return;
  pthread_mutex_lock(&pool_lock);
  acc_pool *p = pool_of(NULL, ctx_id, 0);
  if (p && p->n < SLOTS_PER_BLOCK * BLOCKS) p->free[p->n++] = slot;
  pthread_mutex_unlock(&pool_lock);
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
  accuracy_slot_give(t->ctx_id, t->acc_slot);
  t->acc_slot = NULL;
}

void accuracy_release(gs_gpu_time *t, int ctx_alive) {
  if (t->acc_slot && ctx_alive) accuracy_slot_give(t->ctx_id, t->acc_slot);
  if (t->fp8_slot && ctx_alive) accuracy_slot_give(t->ctx_id, t->fp8_slot);
  t->acc_slot = t->fp8_slot = NULL;
}

/* ---- the fp8 route's counters (routes/fp8_stats.c) ------------------------ */
void fp8_stats_summarise(const gs_fp8_stats *s, gs_gpu_time *t) {
  for (int i = 0; i < 2; i++) {
    const gs_fp8_op_stats *o = &s->op[i];
    t->fp8[i].saturated = o->saturated;
    t->fp8[i].flushed = o->flushed;
    memcpy(&t->fp8[i].amax, &o->amax, sizeof o->amax);
    memcpy(&t->fp8[i].step, &o->step, sizeof o->step);
    /* The keys (kernels/fp8_stats.h): fraction above, 2^32 - 1 - index below. */
    t->fp8[i].worst_sat = (double)(o->worst_sat >> 32) / 4294967296.0;
    t->fp8[i].worst_flush = (double)(o->worst_flush >> 32) / 4294967296.0;
    t->fp8[i].worst_sat_block = 0xFFFFFFFFull - (o->worst_sat & 0xFFFFFFFFull);
    t->fp8[i].worst_flush_block = 0xFFFFFFFFull - (o->worst_flush & 0xFFFFFFFFull);
  }
  t->has_fp8 = 1;
}

void fp8_stats_resolve(gs_gpu_time *t) {
  if (!t->fp8_slot) return;
  fp8_stats_summarise(&((const gs_compare_slot *)t->fp8_slot)->fp8, t);
  accuracy_slot_give(t->ctx_id, t->fp8_slot);
  t->fp8_slot = NULL;
}
