/* memory.c: transient device memory for the routes, stream-ordered.
 *
 * The normal path allocates from a memory pool of the shim's own
 * (cuMemPoolCreate, one per device) with cuMemAllocFromPoolAsync on the
 * caller's stream and frees with cuMemFreeAsync right after the last kernel
 * that uses it is enqueued: no synchronisation.
 *
 * Why a pool of the shim's own: the device's default pool gives memory
 * back at every synchronisation (threshold 0), so each training step would
 * map its buffers again, and raising that threshold would change the
 * framework's memory too. Nothing of the pool or the scratch slots is
 * handed out during graph capture (that memory is shared with eager calls
 * and would be alloc/free nodes): a captured call's buffer is its graph's
 * own (graph_mem.c). Without pools, each (context, stream) gets
 * a kept scratch buffer: work on one stream runs in order. A slot is never
 * freed for being idle (the shim does not hear of a stream's end); it
 * passes to another stream ordered on the device. A forked child
 * re-initialises every lock.
 *
 * Details: docs/ffma.md, "memory.c: pools, scratch slots and fork". */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"
#include "../shim.h"
#include "../base/sys.h"

/* Pool support per device ordinal: 0 unknown, 1 yes, 2 no. */
#define MAX_DEVICES 64
static _Atomic int pools[MAX_DEVICES];

/* 1 pools, 0 none, -1 the query failed: not cached, asked again next call
 * (a transient failure must not send the device to the scratch buffers for
 * the rest of the process). A driver without the pool entry points has
 * none to offer. */
static int device_has_pools(int device) {
  if (device < 0 || device >= MAX_DEVICES) return 0;
  int p = atomic_load_explicit(&pools[device], memory_order_relaxed);
  if (p) return p == 1;
  int v = 0;
  if (gs_sys.cuDeviceGetAttribute && gs_sys.cuMemPoolCreate && gs_sys.cuMemPoolSetAttribute &&
      gs_sys.cuMemPoolTrimTo && gs_sys.cuMemAllocFromPoolAsync && gs_sys.cuMemFreeAsync &&
      GS_CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device) != CUDA_SUCCESS)
    return -1;
  atomic_store_explicit(&pools[device], v ? 1 : 2, memory_order_relaxed);
  return v != 0;
}

/* ---- the shim's pools -------------------------------------------------------- */
/* Pools are device objects, not tied to a context: "cuCtxDestroy() will not
 * destroy memory allocations by ... cuMemAllocFromPoolAsync()" (cuda.h),
 * nor does cudaDeviceReset (cuda_runtime_api.h), so one per device serves
 * the process across context resets. */
typedef struct own_pool {
  _Atomic(CUmemoryPool) pool; /* NULL until made */
  _Atomic unsigned long long give_backs;
} own_pool;
static own_pool own_pools[MAX_DEVICES];
static pthread_mutex_t own_pools_lock = PTHREAD_MUTEX_INITIALIZER; /* making one */
static pthread_once_t report_once = PTHREAD_ONCE_INIT;

/* At exit, at INFO: what each pool mapped at most and what it still holds.
 * An atexit handler registered at the first pool runs before the CUDA
 * runtime's own teardown (registered earlier, run later) and before any
 * library destructor, so the driver still answers. */
static void pools_report(void) {
  if (gs_debug_level < GS_LEVEL_INFO) return;
  for (int d = 0; d < MAX_DEVICES; d++) {
    CUmemoryPool pool = atomic_load(&own_pools[d].pool);
    if (!pool) continue;
    cuuint64_t peak = 0, peak_used = 0, kept = 0;
    unsigned long long give_backs = atomic_load(&own_pools[d].give_backs);
    if (!gs_sys.cuMemPoolGetAttribute ||
        GS_CALL(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &peak) != CUDA_SUCCESS ||
        GS_CALL(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &peak_used) != CUDA_SUCCESS ||
        GS_CALL(cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &kept) != CUDA_SUCCESS) {
      GS_INFO("transient pool device=%d: cuMemPoolGetAttribute failed at exit; give_backs=%llu", d, give_backs);
      continue;
    }
    GS_INFO("transient pool device=%d peak_mapped=%llu peak_used=%llu kept_at_exit=%llu keep_limit=%llu "
            "give_backs=%llu",
            d, (unsigned long long)peak, (unsigned long long)peak_used, (unsigned long long)kept,
            (unsigned long long)gs_opt.pool_keep_bytes, give_backs);
  }
}

/* On the exiting thread: cancellation off (cancel.c). */
static void pools_report_at_exit(void) {
  cancel_enter();
  pools_report();
  cancel_leave();
}

static void register_report(void) { atexit(pools_report_at_exit); }

/* The device's pool, made at first use; NULL with *why on failure (asked
 * again at the next call). */
static CUmemoryPool own_pool_for(int device, const char **why) {
  own_pool *o = &own_pools[device];
  CUmemoryPool pool = atomic_load_explicit(&o->pool, memory_order_acquire);
  if (pool) return pool;
  pthread_mutex_lock(&own_pools_lock);
  pool = atomic_load_explicit(&o->pool, memory_order_relaxed);
  if (!pool) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = device;
    cuuint64_t keep = gs_opt.pool_keep_bytes;
    if (GS_CALL(cuMemPoolCreate, &pool, &props) != CUDA_SUCCESS) {
      pool = NULL;
      *why = "cuMemPoolCreate failed";
    } else if (GS_CALL(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) != CUDA_SUCCESS) {
      if (gs_sys.cuMemPoolDestroy) GS_CALL(cuMemPoolDestroy, pool);
      pool = NULL;
      *why = "cuMemPoolSetAttribute(RELEASE_THRESHOLD) failed";
    } else {
      atomic_store_explicit(&o->pool, pool, memory_order_release);
      pthread_once(&report_once, register_report);
    }
  }
  pthread_mutex_unlock(&own_pools_lock);
  return pool;
}

static const char *pool_alloc(gs_call *c, size_t bytes, gs_transient *t) {
  const char *why = NULL;
  CUmemoryPool pool = own_pool_for(c->device, &why);
  if (!pool) return why;
  CUresult r = GS_CALL(cuMemAllocFromPoolAsync, &t->ptr, bytes, pool, (CUstream)c->g.stream);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    /* What the pool holds unused may be what is missing: give it all back
     * (frees not yet complete stay, cuda.h cuMemPoolTrimTo) and try once
     * more. */
    atomic_fetch_add(&own_pools[c->device].give_backs, 1);
    if (GS_CALL(cuMemPoolTrimTo, pool, 0) != CUDA_SUCCESS) {
      t->ptr = 0;
      return "cuMemAllocFromPoolAsync: out of device memory, and cuMemPoolTrimTo failed";
    }
    r = GS_CALL(cuMemAllocFromPoolAsync, &t->ptr, bytes, pool, (CUstream)c->g.stream);
  }
  if (r == CUDA_SUCCESS) {
    t->bytes = bytes;
    t->pooled = 1;
    return NULL;
  }
  t->ptr = 0;
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return "cuMemAllocFromPoolAsync: out of device memory, after the pool gave back what it held unused";
  return "cuMemAllocFromPoolAsync failed";
}

/* ---- scratch fallback ------------------------------------------------------ */
#define SCRATCH_SLOTS 32
typedef struct scratch_slot {
  pthread_mutex_t lock; /* held from transient_alloc to transient_release */
  /* The owner, written under both scratch_table_lock and lock (either
   * suffices to read it); ctx NULL = free slot. */
  void *ctx, *stream;
  uint64_t thread;           /* CU_STREAM_PER_THREAD: the owning thread's number */
  unsigned long long ctx_id; /* the context's cuCtxGetId (0 without it) */
  uint64_t last_claim;       /* under scratch_table_lock: the table's clock at the owner's last call */
  /* Under lock. */
  CUdeviceptr ptr;
  size_t bytes;
  CUevent done;      /* in the owner's context; NULL until made */
  int done_valid;    /* done follows the last call's work */
} scratch_slot;
static scratch_slot scratch[SCRATCH_SLOTS];
static uint64_t scratch_clock; /* under scratch_table_lock */
static pthread_mutex_t scratch_table_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_init(void) {
  for (int i = 0; i < SCRATCH_SLOTS; i++) pthread_mutex_init(&scratch[i].lock, NULL);
}

/* A slot back to free, owning nothing: its buffer and event are gone (a
 * dead context took them) or not ours (a forked child's are the parent's). */
static void slot_forget(scratch_slot *s) {
  s->ctx = s->stream = NULL;
  s->thread = 0;
  s->ctx_id = 0;
  s->last_claim = 0;
  s->ptr = 0;
  s->bytes = 0;
  s->done = NULL;
  s->done_valid = 0;
}

static void scratch_after_fork_child(void) {
  pthread_mutex_init(&own_pools_lock, NULL);
  for (int i = 0; i < MAX_DEVICES; i++) {
    atomic_store(&own_pools[i].pool, NULL);
    atomic_store(&own_pools[i].give_backs, 0);
  }
  pthread_mutex_init(&scratch_table_lock, NULL);
  for (int i = 0; i < SCRATCH_SLOTS; i++) {
    pthread_mutex_init(&scratch[i].lock, NULL);
    slot_forget(&scratch[i]);
  }
  scratch_clock = 0;
}

/* At load, not at first use: a first use inside another fork handler would
 * call pthread_atfork while fork holds its lock. */
__attribute__((constructor)) static void scratch_register_fork(void) {
  pthread_atfork(NULL, NULL, scratch_after_fork_child);
}

static int slot_owned_by(const scratch_slot *s, void *ctx, unsigned long long ctx_id, void *stream, uint64_t thread) {
  return s->ctx == ctx && s->ctx_id == ctx_id && s->stream == stream && s->thread == thread;
}

/* Under scratch_table_lock and s->lock: the slot's new owner. */
static void slot_claim(scratch_slot *s, void *ctx, unsigned long long ctx_id, void *stream, uint64_t thread) {
  s->ctx = ctx;
  s->ctx_id = ctx_id;
  s->stream = stream;
  s->thread = thread;
}

/* Under scratch_table_lock: slots of a context that died at ctx's address
 * (another id) are free again. Their buffer and event went with that
 * context: nothing to free. A slot some call still holds is left (only a
 * program calling into a destroyed context can get there). */
static void reclaim_dead(void *ctx, unsigned long long ctx_id) {
  for (int i = 0; i < SCRATCH_SLOTS; i++) {
    scratch_slot *s = &scratch[i];
    if (s->ctx != ctx || s->ctx_id == ctx_id || pthread_mutex_trylock(&s->lock) != 0) continue;
    slot_forget(s);
    pthread_mutex_unlock(&s->lock);
  }
}

/* Under scratch_table_lock: a slot for the new owner, locked; NULL if every
 * slot is held by a call or belongs to another live context. First a free
 * slot, then the idle one of the same context claimed longest ago whose
 * last work an event marks (the new owner's first call waits for it). */
static scratch_slot *slot_take(void *ctx, unsigned long long ctx_id, void *stream, uint64_t thread) {
  for (int i = 0; i < SCRATCH_SLOTS; i++)
    if (!scratch[i].ctx && pthread_mutex_trylock(&scratch[i].lock) == 0) {
      if (!scratch[i].ctx) {
        slot_claim(&scratch[i], ctx, ctx_id, stream, thread);
        return &scratch[i];
      }
      pthread_mutex_unlock(&scratch[i].lock);
    }
  unsigned tried = 0; /* bit i: slot i was tried */
  for (int round = 0; round < SCRATCH_SLOTS; round++) {
    scratch_slot *oldest = NULL;
    int oldest_i = -1;
    for (int i = 0; i < SCRATCH_SLOTS; i++) {
      scratch_slot *s = &scratch[i];
      if ((tried >> i & 1u) || s->ctx != ctx || s->ctx_id != ctx_id) continue;
      if (!oldest || s->last_claim < oldest->last_claim) oldest = s, oldest_i = i;
    }
    if (!oldest) return NULL;
    tried |= 1u << oldest_i;
    if (pthread_mutex_trylock(&oldest->lock) != 0) continue;
    if (oldest->done_valid || !oldest->ptr) {
      slot_claim(oldest, ctx, ctx_id, stream, thread);
      return oldest;
    }
    pthread_mutex_unlock(&oldest->lock); /* its last work is not marked: it cannot be ordered after */
  }
  return NULL;
}

/* The call's slot, locked, or NULL. A slot found by its owner is locked
 * after the table lock is dropped (a call may hold it for a while), and
 * may have passed to another owner meanwhile: then look again. */
static scratch_slot *scratch_slot_for(void *ctx, unsigned long long ctx_id, void *stream) {
  pthread_once(&scratch_once, scratch_init);
  uint64_t thread = stream == (void *)CU_STREAM_PER_THREAD ? gs_thread_number() : 0;
  for (int attempt = 0; attempt < 8; attempt++) {
    scratch_slot *found = NULL, *taken = NULL;
    pthread_mutex_lock(&scratch_table_lock);
    for (int i = 0; i < SCRATCH_SLOTS && !found; i++)
      if (slot_owned_by(&scratch[i], ctx, ctx_id, stream, thread)) found = &scratch[i];
    if (!found) {
      reclaim_dead(ctx, ctx_id);
      found = taken = slot_take(ctx, ctx_id, stream, thread);
    }
    if (found) found->last_claim = ++scratch_clock;
    pthread_mutex_unlock(&scratch_table_lock);
    if (!found || taken) return found;
    pthread_mutex_lock(&found->lock);
    if (slot_owned_by(found, ctx, ctx_id, stream, thread)) return found;
    pthread_mutex_unlock(&found->lock);
  }
  return NULL;
}

static const char *scratch_alloc(gs_call *c, size_t bytes, gs_transient *t) {
  unsigned long long ctx_id = 0;
  if (gs_sys.cuCtxGetId && GS_CALL(cuCtxGetId, (CUcontext)c->ctx, &ctx_id) != CUDA_SUCCESS)
    return "cuCtxGetId failed";
  scratch_slot *s = scratch_slot_for(c->ctx, ctx_id, c->g.stream);
  if (!s) return "no stream-ordered allocator and every scratch slot is in use by a call or another context";
  /* Even on the slot's own stream address: that may be a new stream a
   * driver handed out at a destroyed one's address, whose work may still be
   * running. On the same stream the wait orders nothing new. */
  if (s->ptr && s->done_valid && GS_CALL(cuStreamWaitEvent, (CUstream)c->g.stream, s->done, 0) != CUDA_SUCCESS) {
    /* The buffer may still be in use by its last owner's work. */
    pthread_mutex_unlock(&s->lock);
    return "cuStreamWaitEvent on the scratch slot's last work failed";
  }
  if (s->bytes < bytes || !s->done) {
    if (GS_CALL(cuCtxPushCurrent_v2, (CUcontext)c->ctx) != CUDA_SUCCESS) {
      pthread_mutex_unlock(&s->lock);
      return "cuCtxPushCurrent failed";
    }
    /* The event that orders a later owner after this one's work; without
     * it the slot stays with its stream. */
    if (!s->done && GS_CALL(cuEventCreate, &s->done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) s->done = NULL;
    CUresult r = CUDA_SUCCESS;
    const char *why = NULL;
    if (s->bytes < bytes) {
      if (s->ptr) mem_free_relaxed(s->ptr);
      s->ptr = 0;
      s->bytes = 0;
      CUdeviceptr p = 0;
      int mode_failed;
      r = mem_alloc_relaxed(&p, bytes, &mode_failed);
      if (mode_failed) why = "cuThreadExchangeStreamCaptureMode failed before allocating the scratch buffer";
      if (r == CUDA_SUCCESS) {
        s->ptr = p;
        s->bytes = bytes;
      }
    }
    CUcontext popped;
    GS_CALL(cuCtxPopCurrent_v2, &popped);
    if (r != CUDA_SUCCESS) {
      pthread_mutex_unlock(&s->lock);
      return why ? why : "cuMemAlloc of the scratch buffer failed";
    }
  }
  t->ptr = s->ptr;
  t->bytes = bytes;
  t->slot = s;
  return NULL;
}

/* ---- the interface ---------------------------------------------------------- */
const char *transient_capture_why(gs_call *c) {
  /* A driver without cuStreamIsCapturing predates graph capture. Not
   * knowing is not "not capturing". */
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (gs_sys.cuStreamIsCapturing && GS_CALL(cuStreamIsCapturing, (CUstream)c->g.stream, &capture) != CUDA_SUCCESS)
    return "cuStreamIsCapturing failed";
  if (capture == CU_STREAM_CAPTURE_STATUS_NONE) return NULL;
  c->captured = 1;
  return capture == CU_STREAM_CAPTURE_STATUS_ACTIVE ? NULL : GS_CAPTURE_INVALIDATED;
}

const char *transient_alloc(gs_call *c, size_t bytes, gs_transient *t) {
  memset(t, 0, sizeof *t);
  t->stream = c->g.stream;
  graph_mem_reclaim(c); /* what destroyed graphs gave back, never in a capture */
  if (bytes == 0) return NULL;
  if (!c->ctx) return "the call's context is unknown";
  if (c->captured) {
    const char *why = graph_mem_alloc(c, bytes, &t->ptr);
    if (!why) {
      t->bytes = bytes;
      t->graph = 1;
    }
    return why;
  }
  int has_pools = device_has_pools(c->device);
  if (has_pools < 0) return "cuDeviceGetAttribute(MEMORY_POOLS_SUPPORTED) failed";
  if (has_pools) return pool_alloc(c, bytes, t);
  return scratch_alloc(c, bytes, t);
}

void transient_release(gs_transient *t) {
  if (t->graph) {
    /* The graph's: its replays use it; it goes with the graph. */
  } else if (t->pooled) {
    if (t->ptr) GS_CALL(cuMemFreeAsync, t->ptr, (CUstream)t->stream);
  } else if (t->slot) {
    /* Mark this call's last work, for whichever stream takes the slot next. */
    scratch_slot *s = t->slot;
    s->done_valid = s->done && GS_CALL(cuEventRecord, s->done, (CUstream)t->stream) == CUDA_SUCCESS;
    pthread_mutex_unlock(&s->lock);
  }
  memset(t, 0, sizeof *t);
}

const char *transient_plan(const transient_part *parts, int n, uint64_t cap, const char *too_big, size_t *offsets,
                           size_t *bytes) {
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    const transient_part *q = &parts[i];
    size_t size = 0;
    if (q->d0 < 0 || q->d1 < 0 || q->d2 < 0 || __builtin_mul_overflow((size_t)q->d0, (size_t)q->d1, &size) ||
        __builtin_mul_overflow(size, (size_t)q->d2, &size) || __builtin_mul_overflow(size, q->elem, &size) ||
        __builtin_add_overflow(size, (size_t)255, &size))
      return too_big;
    offsets[i] = off;
    if (__builtin_add_overflow(off, size & ~(size_t)255, &off)) return too_big;
  }
  if (off > cap) return too_big;
  *bytes = off;
  return NULL;
}
