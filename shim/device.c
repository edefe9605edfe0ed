/* device.c: which device a call runs on, and its compute capability.
 *
 * handle -> stream (cublasGetStream, GemmEx family) -> context
 * (cuStreamGetCtx; the NULL and per-thread streams give the current one)
 * -> device and capability, cached per context (address and cuCtxGetId).
 * A created stream's context and that context's id are cached by the
 * stream's cuStreamGetId: one query instead of two. Nothing here
 * synchronises.
 *
 * Why a stream's id and not its address: a destroyed stream's address may
 * be handed out again for a new stream of another context, and a context's
 * address for a new context (the stand-in does both, as a driver may). An
 * id is "unique for the life of the program" (cuda.h, cuStreamGetId), a
 * stream belongs to one context for its whole life, and a context's streams
 * die with it (cuCtxDestroy, and the primary context's reset, which
 * "destroy[s] all allocations and reset[s] all state"): so while an id is
 * answered for a handle, its stream, context and context id are the ones
 * cached. The NULL, legacy and per-thread streams stand for whatever
 * context is current, and are asked every time.
 *
 * A destroyed cuBLAS handle must not be asked for its stream (that reads
 * freed memory inside cuBLAS), so handle creation and destruction are
 * watched and a dead handle is recognised. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "resolve.h"
#include "shim.h"
#include "base/ctx_table.h"
#include "base/sys.h"

/* ---- dead handles ---------------------------------------------------------- */
/* A set of destroyed handles, hashed into DEAD_BUCKETS buckets of DEAD_WAYS
 * slots: a lookup reads one bucket, DEAD_WAYS atomics, however many
 * handles the process has destroyed (cuSOLVER, cuDNN and frameworks create
 * and destroy handles all the time; a scan of every slot made each call
 * pay for that history). A handle created again at the same address leaves
 * the set. Readers take no lock (atomic slots); writers serialise on a
 * mutex. A full bucket overwrites its slots in turn, which only loses
 * protection for long-dead handles (calling a destroyed handle is the
 * program's error; this keeps the shim from reading cuBLAS's freed memory
 * for it). */
#define DEAD_BUCKETS 512
#define DEAD_WAYS 8
static _Atomic(uintptr_t) dead[DEAD_BUCKETS][DEAD_WAYS];
static unsigned char dead_next[DEAD_BUCKETS]; /* under dead_lock: the slot to overwrite next */
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
/* Most processes never destroy a handle mid-run; skip the lookup until one does. */
static _Atomic int any_dead;

static unsigned dead_bucket(uintptr_t h) {
  /* Heap addresses: the low bits are alignment; Fibonacci hashing mixes the rest. */
  return (unsigned)(((uint64_t)(h >> 4) * 0x9E3779B97F4A7C15ull) >> 55) & (DEAD_BUCKETS - 1);
}

static int dead_find(uintptr_t h, unsigned b) {
  for (int i = 0; i < DEAD_WAYS; i++)
    if (atomic_load_explicit(&dead[b][i], memory_order_acquire) == h) return i;
  return -1;
}

void device_handle_destroyed(void *handle) {
  uintptr_t h = (uintptr_t)handle;
  if (!h) return;
  unsigned b = dead_bucket(h);
  pthread_mutex_lock(&dead_lock);
  if (dead_find(h, b) < 0) {
    int i = dead_find(0, b);
    if (i < 0) {
      i = dead_next[b];
      dead_next[b] = (unsigned char)((i + 1) % DEAD_WAYS);
    }
    atomic_store_explicit(&dead[b][i], h, memory_order_release);
  }
  atomic_store_explicit(&any_dead, 1, memory_order_relaxed);
  pthread_mutex_unlock(&dead_lock);
}

void device_handle_created(void *handle) {
  uintptr_t h = (uintptr_t)handle;
  if (!h) return;
  unsigned b = dead_bucket(h);
  pthread_mutex_lock(&dead_lock);
  int i = dead_find(h, b);
  if (i >= 0) atomic_store_explicit(&dead[b][i], 0, memory_order_release);
  pthread_mutex_unlock(&dead_lock);
}

static int handle_is_dead(void *handle) {
  if (!atomic_load_explicit(&any_dead, memory_order_relaxed)) return 0;
  uintptr_t h = (uintptr_t)handle;
  return dead_find(h, dead_bucket(h)) >= 0;
}

/* ---- per-context cache --------------------------------------------------- */
/* The device and capability of each context (base/ctx_table.h): entries
 * are immutable, and one a new context at the same address replaces is
 * abandoned (a few bytes per reset; a reader may still hold it). */
typedef struct ctx_entry_dev {
  ctx_entry head;
  int device, sm;
} ctx_entry_dev;
CTX_TABLE_DEFINE(ctx_cache, 64, NULL);
static pthread_mutex_t stream_lock = PTHREAD_MUTEX_INITIALIZER; /* the per-stream cache's writers */

/* Both locks are held only for a table update, but a fork from another
 * thread can still land inside one: the child (the forking thread alone)
 * gets fresh locks. Entries are published last, so a half-made one is
 * invisible. Registered at load, never inside a fork handler. */
static void device_after_fork_child(void) {
  pthread_mutex_init(&dead_lock, NULL);
  ctx_table_after_fork_child(&ctx_cache, 0);
  pthread_mutex_init(&stream_lock, NULL);
}

__attribute__((constructor)) static void device_register_fork(void) {
  pthread_atfork(NULL, NULL, device_after_fork_child);
}

static int ctx_lookup(void *ctx, unsigned long long id, int *device, int *sm) {
  const ctx_entry_dev *e = (const ctx_entry_dev *)ctx_table_find(&ctx_cache, ctx, id);
  if (!e) return 0;
  *device = e->device;
  *sm = e->sm;
  return 1;
}

static void ctx_insert(void *ctx, unsigned long long id, int device, int sm) {
  ctx_entry_dev *n = GS_CALL(calloc, 1, sizeof *n);
  if (!n) return; /* not cached: asked again next call */
  n->device = device;
  n->sm = sm;
  ctx_table_lock(&ctx_cache);
  ctx_entry *old;
  int i = ctx_table_find(&ctx_cache, ctx, id) ? -1 : ctx_table_place(&ctx_cache, ctx, &old);
  if (i >= 0) ctx_table_publish(&ctx_cache, i, &n->head, ctx, id);
  else free(n); /* there already, or a full cache: queried every time */
  ctx_table_unlock(&ctx_cache);
}

/* ---- per-stream cache ------------------------------------------------------ */
/* Direct-mapped by stream id; a newer stream takes its slot. Each slot is a
 * seqlock: the writer (under stream_lock) makes seq odd, writes, makes it
 * even again; a reader that sees seq change or odd treats it as a miss. */
#define STREAM_SLOTS 256
typedef struct stream_slot {
  _Atomic unsigned seq;
  _Atomic(unsigned long long) sid;
  _Atomic(uintptr_t) ctx;
  _Atomic(unsigned long long) ctx_id;
} stream_slot;
static stream_slot stream_cache[STREAM_SLOTS];

static stream_slot *stream_slot_of(unsigned long long sid) {
  return &stream_cache[((sid * 0x9E3779B97F4A7C15ull) >> 56) % STREAM_SLOTS];
}

static int stream_lookup(unsigned long long sid, void **ctx, unsigned long long *ctx_id) {
  stream_slot *s = stream_slot_of(sid);
  unsigned s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
  if (s1 & 1) return 0;
  unsigned long long got = atomic_load_explicit(&s->sid, memory_order_relaxed);
  uintptr_t c = atomic_load_explicit(&s->ctx, memory_order_relaxed);
  unsigned long long id = atomic_load_explicit(&s->ctx_id, memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&s->seq, memory_order_relaxed) != s1 || got != sid) return 0;
  *ctx = (void *)c;
  *ctx_id = id;
  return 1;
}

static void stream_insert(unsigned long long sid, void *ctx, unsigned long long ctx_id) {
  stream_slot *s = stream_slot_of(sid);
  pthread_mutex_lock(&stream_lock);
  unsigned seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
  atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&s->sid, sid, memory_order_relaxed);
  atomic_store_explicit(&s->ctx, (uintptr_t)ctx, memory_order_relaxed);
  atomic_store_explicit(&s->ctx_id, ctx_id, memory_order_relaxed);
  atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
  pthread_mutex_unlock(&stream_lock);
}

static int special_stream(const void *s) {
  return s == NULL || s == (void *)CU_STREAM_LEGACY || s == (void *)CU_STREAM_PER_THREAD;
}

/* The device of ctx: make it current for a moment, then restore. */
static const char *query_ctx(CUcontext ctx, int *device, int *sm) {
  CUdevice dev;
  CUcontext popped;
  int major = 0, minor = 0;
  if (GS_CALL(cuCtxPushCurrent_v2, ctx) != CUDA_SUCCESS) return "cuCtxPushCurrent failed";
  CUresult r = GS_CALL(cuCtxGetDevice, &dev);
  GS_CALL(cuCtxPopCurrent_v2, &popped);
  if (r != CUDA_SUCCESS) return "cuCtxGetDevice failed";
  if (GS_CALL(cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
      GS_CALL(cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
    return "cuDeviceGetAttribute(compute capability) failed";
  *device = dev;
  *sm = major * 10 + minor;
  return NULL;
}

const char *device_of_call(gs_call *c) {
  c->device = c->sm = -1;
  c->ctx = NULL;
  c->ctx_id = 0;
  c->stream_id = 0;
  gs_gemm *g = &c->g;
  if (g->api != GS_API_LT_MATMUL) {
    /* The GemmEx family runs on the handle's stream. */
    if (!g->handle) return "NULL cuBLAS handle";
    if (handle_is_dead(g->handle)) return "cuBLAS handle already destroyed";
    cudaStream_t s = NULL;
    if (!gs_sys.cublasGetStream_v2) return "cublasGetStream not found";
    if (GS_CALL(cublasGetStream_v2, (cublasHandle_t)g->handle, &s) != CUBLAS_STATUS_SUCCESS)
      return "cublasGetStream failed";
    g->stream = s;
    cublasPointerMode_t pm;
    if (gs_sys.cublasGetPointerMode_v2 &&
        GS_CALL(cublasGetPointerMode_v2, (cublasHandle_t)g->handle, &pm) == CUBLAS_STATUS_SUCCESS)
      g->pointer_mode = pm;
  }
  const char *why = resolve_driver();
  if (why) return why;
  c->stream_id = 0;
  unsigned long long sid = 0;
  void *cached = NULL;
  unsigned long long id = 0;
  /* A failed cuStreamGetId is not the call's failure: the stream is then
   * asked for its context (cuStreamGetCtx), as a stream without an id is. */
  if (!special_stream(g->stream) && gs_sys.cuStreamGetId &&
      (GS_CALL(cuStreamGetId, (CUstream)g->stream, &sid) != CUDA_SUCCESS))
    sid = 0;
  CUcontext ctx = NULL;
  if (sid && stream_lookup(sid, &cached, &id)) {
    ctx = (CUcontext)cached;
  } else {
    if (GS_CALL(cuStreamGetCtx, (CUstream)g->stream, &ctx) != CUDA_SUCCESS || !ctx)
      return "cuStreamGetCtx failed (no current context?)";
    if (gs_sys.cuCtxGetId && GS_CALL(cuCtxGetId, ctx, &id) != CUDA_SUCCESS)
      return "cuCtxGetId failed (destroyed context?)";
    /* Only where the context's id is known: without cuCtxGetId a context
     * at an old address could not be told from the old one. */
    if (sid && gs_sys.cuCtxGetId) stream_insert(sid, ctx, id);
  }
  c->ctx = ctx;
  c->ctx_id = id;
  c->stream_id = sid;
  if (ctx_lookup(ctx, id, &c->device, &c->sm)) return NULL;
  int device, sm;
  why = query_ctx(ctx, &device, &sm);
  if (why) return why;
  ctx_insert(ctx, id, device, sm);
  c->device = device;
  c->sm = sm;
  return NULL;
}
