/* device.c: which device a call runs on, and its compute capability.
 *
 * handle -> stream (cublasGetStream, GemmEx family) -> context
 * (cuStreamGetCtx; the NULL and per-thread streams give the current one)
 * -> device and capability, cached per context so the per-call cost is two
 * cheap queries and a table scan. Nothing here synchronises.
 *
 * A destroyed cuBLAS handle must not be asked for its stream (that reads
 * freed memory inside cuBLAS), so handle creation and destruction are
 * watched and a dead handle is recognised. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "resolve.h"
#include "shim.h"
#include "sys.h"

/* ---- dead handles ---------------------------------------------------------- */
/* An open-addressed set of destroyed handles; a handle created again at the
 * same address leaves it. Readers scan without a lock (atomic slots);
 * writers serialise on a mutex. Full table: the oldest entries are simply
 * overwritten, which only loses protection for long-dead handles. */
#define DEAD_SLOTS 1024
static _Atomic(uintptr_t) dead[DEAD_SLOTS];
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned dead_next;
/* Most processes never destroy a handle mid-run; skip the scan until one does. */
static _Atomic int any_dead;

static int dead_find(uintptr_t h) {
  for (int i = 0; i < DEAD_SLOTS; i++)
    if (atomic_load_explicit(&dead[i], memory_order_acquire) == h) return i;
  return -1;
}

void device_handle_destroyed(void *handle) {
  uintptr_t h = (uintptr_t)handle;
  if (!h) return;
  pthread_mutex_lock(&dead_lock);
  if (dead_find(h) < 0) {
    atomic_store_explicit(&dead[dead_next], h, memory_order_release);
    dead_next = (dead_next + 1) % DEAD_SLOTS;
  }
  atomic_store_explicit(&any_dead, 1, memory_order_relaxed);
  pthread_mutex_unlock(&dead_lock);
}

void device_handle_created(void *handle) {
  uintptr_t h = (uintptr_t)handle;
  if (!h) return;
  pthread_mutex_lock(&dead_lock);
  int i = dead_find(h);
  if (i >= 0) atomic_store_explicit(&dead[i], 0, memory_order_release);
  pthread_mutex_unlock(&dead_lock);
}

static int handle_is_dead(void *handle) {
  if (!atomic_load_explicit(&any_dead, memory_order_relaxed)) return 0;
  return dead_find((uintptr_t)handle) >= 0;
}

/* ---- per-context cache --------------------------------------------------- */
#define CTX_SLOTS 64
typedef struct ctx_entry {
  _Atomic(uintptr_t) ctx; /* 0 = empty; published last */
  int device, sm;
} ctx_entry;
static ctx_entry ctx_cache[CTX_SLOTS];
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;

/* Both locks are held only for a table update, but a fork from another
 * thread can still land inside one: the child (the forking thread alone)
 * gets fresh locks. Entries are published last, so a half-made one is
 * invisible. Registered at load, never inside a fork handler. */
static void device_after_fork_child(void) {
  pthread_mutex_init(&dead_lock, NULL);
  pthread_mutex_init(&ctx_lock, NULL);
}

__attribute__((constructor)) static void device_register_fork(void) {
  pthread_atfork(NULL, NULL, device_after_fork_child);
}

static int ctx_lookup(uintptr_t ctx, int *device, int *sm) {
  for (int i = 0; i < CTX_SLOTS; i++) {
    uintptr_t c = atomic_load_explicit(&ctx_cache[i].ctx, memory_order_acquire);
    if (c == 0) return 0;
    if (c == ctx) {
      *device = ctx_cache[i].device;
      *sm = ctx_cache[i].sm;
      return 1;
    }
  }
  return 0;
}

static void ctx_insert(uintptr_t ctx, int device, int sm) {
  pthread_mutex_lock(&ctx_lock);
  int d, s;
  if (!ctx_lookup(ctx, &d, &s)) {
    for (int i = 0; i < CTX_SLOTS; i++) {
      if (atomic_load_explicit(&ctx_cache[i].ctx, memory_order_relaxed) == 0) {
        ctx_cache[i].device = device;
        ctx_cache[i].sm = sm;
        atomic_store_explicit(&ctx_cache[i].ctx, ctx, memory_order_release);
        break;
      }
    }
    /* A full cache just means this context is queried every time. */
  }
  pthread_mutex_unlock(&ctx_lock);
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

int device_cached_sm(void *ctx) {
  int device, sm;
  return ctx && ctx_lookup((uintptr_t)ctx, &device, &sm) ? sm : -1;
}

const char *device_of_call(gs_call *c) {
  c->device = c->sm = -1;
  c->ctx = NULL;
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
  CUcontext ctx = NULL;
  if (GS_CALL(cuStreamGetCtx, (CUstream)g->stream, &ctx) != CUDA_SUCCESS || !ctx)
    return "cuStreamGetCtx failed (no current context?)";
  c->ctx = ctx;
  if (ctx_lookup((uintptr_t)ctx, &c->device, &c->sm)) return NULL;
  int device, sm;
  why = query_ctx(ctx, &device, &sm);
  if (why) return why;
  ctx_insert((uintptr_t)ctx, device, sm);
  c->device = device;
  c->sm = sm;
  return NULL;
}
