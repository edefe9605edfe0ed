/* gpu_time.c: GPU time per call (GEMMSHIM_LOG_GPU_TIME=1).
 *
 * On a GPU a cuBLAS call returns before its GEMM runs, so the log's dur_ns
 * is launch overhead. Here events are recorded on the call's stream around
 * its work: at call_work_begin (before the route's first launch, or the
 * native call), around the GEMM a route issues between its own kernels
 * (widen/narrow, quantize), and as the call returns. The log's flusher
 * turns them into gpu_ns and gpu_ns_kernels (gpu_time_resolve): it only
 * queries the events (cuEventQuery), never waits on the caller's stream,
 * and holds a record whose work has not finished until it has.
 *
 * Events come from a pool per context, so in steady state none is
 * created. Events of a destroyed or reset context are never queried (their
 * handles may belong to new events, possibly the program's), nothing is
 * recorded under graph capture (it would change the user's graph), and
 * events are read in RELAXED capture mode, so a read never invalidates
 * another thread's capture.
 *
 * Pool, contexts, capture and event semantics: docs/profiling.md,
 * "gpu_time.c: events". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"
#include "base/sys.h"

#define POOL_CTXS 16        /* contexts with a pool of their own */
/* Free events kept per context; more are destroyed. Events return to the
 * pool when the log's writer reads them (every 10 ms), so a context has
 * about 4 events for each call of the last 10 ms in use. */
#define POOL_KEEP 16384

typedef struct ev_pool {
  unsigned long long ctx_id; /* 0: slot unused */
  void *ctx;
  CUevent *free;
  unsigned n, cap;
} ev_pool;

static ev_pool pools[POOL_CTXS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static ev_pool *pool_of(unsigned long long ctx_id, void *ctx, int create) {
  ev_pool *empty = NULL;
  for (int i = 0; i < POOL_CTXS; i++) {
    if (pools[i].ctx_id == ctx_id) return &pools[i];
    if (!pools[i].ctx_id && !empty) empty = &pools[i];
  }
  if (!create || !empty) return NULL;
  empty->ctx_id = ctx_id;
  empty->ctx = ctx;
  empty->n = 0;
  return empty;
}

/* One event of the context, from the pool or new (ctx made current for
 * cuEventCreate, which creates in the current context). */
static CUevent event_take(unsigned long long ctx_id, void *ctx) {
  CUevent e = NULL;
  pthread_mutex_lock(&pool_lock);
  ev_pool *p = pool_of(ctx_id, ctx, 1);
  if (p && p->n) e = p->free[--p->n];
  pthread_mutex_unlock(&pool_lock);
  if (e) return e;
  if (GS_CALL(cuCtxPushCurrent_v2, (CUcontext)ctx) != CUDA_SUCCESS) return NULL;
  if (GS_CALL(cuEventCreate, &e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) e = NULL;
  CUcontext popped;
  GS_CALL(cuCtxPopCurrent_v2, &popped);
  return e;
}

/* 1: ctx is still the context with id ctx_id; 0: it is gone (destroyed,
 * reset, released); -1: the driver could not say. A driver without
 * context ids (ctx_id is the address then) cannot tell: 1. */
static int ctx_alive(void *ctx, unsigned long long ctx_id) {
  if (!gs_sys.cuCtxGetId || ctx_id == (uintptr_t)ctx) return 1;
  unsigned long long id = 0;
  CUresult r = GS_CALL(cuCtxGetId, (CUcontext)ctx, &id);
  if (r == CUDA_SUCCESS) return id == ctx_id;
  return r == CUDA_ERROR_CONTEXT_IS_DESTROYED || r == CUDA_ERROR_INVALID_CONTEXT ? 0 : -1;
}

static void event_give(void *ctx, unsigned long long ctx_id, CUevent e) {
  if (!e) return;
  pthread_mutex_lock(&pool_lock);
  ev_pool *p = pool_of(ctx_id, NULL, 0);
  if (p && p->n == p->cap && p->cap < POOL_KEEP) {
    unsigned cap = p->cap ? p->cap * 2 : 64;
    CUevent *grown = GS_CALL(calloc, cap, sizeof *grown);
    if (grown) {
      if (p->n) memcpy(grown, p->free, p->n * sizeof *grown);
      free(p->free);
      p->free = grown;
      p->cap = cap;
    }
  }
  if (p && p->n < p->cap) {
    p->free[p->n++] = e;
    e = NULL;
  }
  pthread_mutex_unlock(&pool_lock);
  /* No room (or past POOL_CTXS contexts): an event of a live context is
   * destroyed; one of a dead context went with it, and its handle may be
   * another event's now. */
  if (e && ctx_alive(ctx, ctx_id) == 1) GS_CALL(cuEventDestroy_v2, e);
}

static int record(gs_call *c, int slot) {
  gs_gpu_time *t = &c->gpu;
  CUevent e = event_take(t->ctx_id, c->ctx);
  if (!e) {
    t->skip = GS_GPU_SKIP_NO_EVENT;
    return 0;
  }
  if (GS_CALL(cuEventRecord, e, (CUstream)c->g.stream) != CUDA_SUCCESS) {
    /* Most likely the context was reset under the pool: forget it. */
    event_give(c->ctx, t->ctx_id, e);
    t->skip = GS_GPU_SKIP_RECORD_FAILED;
    return 0;
  }
  t->ev[slot] = (void *)e;
  return 1;
}

/* Every driver function the measurement needs (an old driver may lack one). */
static int have_event_api(void) {
  return gs_sys.cuEventCreate && gs_sys.cuEventRecord && gs_sys.cuEventQuery && gs_sys.cuEventElapsedTime_v2 &&
         gs_sys.cuEventDestroy_v2 && gs_sys.cuStreamIsCapturing && gs_sys.cuCtxPushCurrent_v2 &&
         gs_sys.cuCtxPopCurrent_v2;
}

void gpu_time_begin(gs_call *c) {
  gs_gpu_time *t = &c->gpu;
  memset(t, 0, sizeof *t);
  if (!have_event_api()) {
    t->skip = GS_GPU_SKIP_NO_EVENT;
    return;
  }
  if (!c->ctx) {
    t->skip = GS_GPU_SKIP_NO_DEVICE;
    return;
  }
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  if (GS_CALL(cuStreamIsCapturing, (CUstream)c->g.stream, &cs) != CUDA_SUCCESS) {
    t->skip = GS_GPU_SKIP_RECORD_FAILED;
    return;
  }
  if (cs != CU_STREAM_CAPTURE_STATUS_NONE) {
    t->skip = GS_GPU_SKIP_CAPTURE;
    return;
  }
  /* The context's id as the device lookup found it (device.c). */
  t->ctx_id = c->ctx_id;
  if (!t->ctx_id) t->ctx_id = (uintptr_t)c->ctx; /* a driver without context ids */
  t->ctx = c->ctx;
  if (record(c, GS_GPU_EV_START)) t->on = 1;
}

void gpu_time_mark(gs_call *c, int slot) {
  if (c->gpu.on && !c->gpu.ev[slot] && !record(c, slot)) gpu_time_discard(&c->gpu);
}

void gpu_time_end(gs_call *c) { gpu_time_mark(c, GS_GPU_EV_END); /* unless a compare run recorded it */ }

/* The events go back to the pool while their capture may still be
 * pending: re-recording an event replaces its capture (cuEventRecord). */
void gpu_time_unmark_gemm(gs_call *c) {
  gs_gpu_time *t = &c->gpu;
  for (int slot = GS_GPU_EV_GEMM_BEGIN; slot <= GS_GPU_EV_GEMM_END; slot++) {
    event_give(t->ctx, t->ctx_id, (CUevent)t->ev[slot]);
    t->ev[slot] = NULL;
  }
}

void gpu_time_discard(gs_gpu_time *t) {
  /* Unread, its copy may still be on its way: the slot is never reused. */
  accuracy_release(t, 0);
  for (int i = 0; i < GS_GPU_EVENTS; i++) {
    event_give(t->ctx, t->ctx_id, (CUevent)t->ev[i]);
    t->ev[i] = NULL;
  }
  t->on = 0;
}

/* This thread reads events in RELAXED capture mode for the rest of its
 * life (the log's writer thread); 0 for every other thread. */
static __thread int relaxed_for_life __attribute__((tls_model("initial-exec")));

void gpu_time_reader_thread(void) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (gs_sys.cuThreadExchangeStreamCaptureMode &&
      GS_CALL(cuThreadExchangeStreamCaptureMode, &mode) == CUDA_SUCCESS)
    relaxed_for_life = 1;
}

static int elapsed_ns(CUevent a, CUevent b, uint64_t *ns) {
  float ms = 0;
  if (GS_CALL(cuEventElapsedTime_v2, &ms, a, b) != CUDA_SUCCESS || !(ms >= 0)) return 0;
  *ns = (uint64_t)((double)ms * 1e6 + 0.5);
  return 1;
}

static int resolve(gs_gpu_time *t);

int gpu_time_resolve(gs_gpu_time *t) {
  if (!t->on) return 1;
  if (relaxed_for_life || !gs_sys.cuThreadExchangeStreamCaptureMode) return resolve(t);
  /* Not the writer thread: RELAXED for these calls only, then this
   * thread's own mode again. If the exchange fails, the events are read
   * in the thread's mode, as before capture modes existed. */
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  int swapped = GS_CALL(cuThreadExchangeStreamCaptureMode, &mode) == CUDA_SUCCESS;
  int done = resolve(t);
  if (swapped) GS_CALL(cuThreadExchangeStreamCaptureMode, &mode);
  return done;
}

static int resolve(gs_gpu_time *t) {
  int alive = ctx_alive(t->ctx, t->ctx_id);
  if (alive != 1) {
    /* The events are not ours to touch any more (or may not be): forgotten,
     * neither queried nor given back. */
    t->skip = alive == 0 ? GS_GPU_SKIP_CTX_GONE : GS_GPU_SKIP_QUERY_FAILED;
    memset(t->ev, 0, sizeof t->ev);
    accuracy_release(t, 0);
    t->on = 0;
    return 1;
  }
  /* The last event recorded completes last: a stream runs in order. */
  CUevent last = (CUevent)(t->ev[GS_GPU_EV_ACC_END]      ? t->ev[GS_GPU_EV_ACC_END]
                           : t->ev[GS_GPU_EV_NATIVE_END] ? t->ev[GS_GPU_EV_NATIVE_END]
                                                         : t->ev[GS_GPU_EV_END]);
  CUresult q = GS_CALL(cuEventQuery, last);
  if (q == CUDA_ERROR_NOT_READY) return 0;
  CUevent *ev = (CUevent *)t->ev;
  uint64_t total = 0, gemm = 0, native = 0;
  if (q != CUDA_SUCCESS || !elapsed_ns(ev[GS_GPU_EV_START], ev[GS_GPU_EV_END], &total)) {
    t->skip = GS_GPU_SKIP_QUERY_FAILED;
  } else {
    t->gpu_ns = total;
    t->has_gpu_ns = 1;
    if (ev[GS_GPU_EV_GEMM_BEGIN] && ev[GS_GPU_EV_GEMM_END] &&
        elapsed_ns(ev[GS_GPU_EV_GEMM_BEGIN], ev[GS_GPU_EV_GEMM_END], &gemm)) {
      t->kernels_ns = total > gemm ? total - gemm : 0;
      t->has_kernels_ns = 1;
    }
    if (ev[GS_GPU_EV_NATIVE_END] && elapsed_ns(ev[GS_GPU_EV_END], ev[GS_GPU_EV_NATIVE_END], &native)) {
      t->native_ns = native;
      t->has_native_ns = 1;
    }
    if (ev[GS_GPU_EV_ACC_END]) accuracy_resolve(t); /* the copy into the slot is done */
    fp8_stats_resolve(t); /* copied before END (routes/fp8_stats.c) */
  }
  gpu_time_discard(t);
  return 1;
}

const char *gpu_time_skip_name(int skip) {
  switch (skip) {
    case GS_GPU_SKIP_CAPTURE: return "graph capture";
    case GS_GPU_SKIP_NO_DEVICE: return "device unknown";
    case GS_GPU_SKIP_NO_EVENT: return "no event available";
    case GS_GPU_SKIP_RECORD_FAILED: return "event record failed";
    case GS_GPU_SKIP_QUERY_FAILED: return "event query failed";
    case GS_GPU_SKIP_UNFINISHED: return "not finished when the log closed";
    case GS_GPU_SKIP_HELD_FULL: return "not finished, too many records waiting for the GPU";
    case GS_GPU_SKIP_NO_WORK: return "no device work";
    case GS_GPU_SKIP_CTX_GONE: return "context destroyed before its events were read";
    default: return NULL;
  }
}
