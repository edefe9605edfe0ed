/* driver_ctx.c: contexts. Each device has one primary context (active while
 * retained); cuCtxCreate makes ordinary ones. Every thread has its own
 * context stack, as with a driver: cuCtxSetCurrent replaces the top,
 * push/pop nest. Destroying a context frees its memory, streams, events and
 * modules; threads that still have it current get
 * CUDA_ERROR_CONTEXT_IS_DESTROYED until a new context takes its address.
 *
 * Addresses are reused as a driver's allocator reuses them: a primary
 * context released to zero and retained again keeps its handle with a new
 * id, and cuCtxCreate after cuCtxDestroy hands out the destroyed context's
 * address (the most recently destroyed first) with a new id. The CUDA
 * Driver API promises only that cuCtxGetId's id "is unique for the life of
 * the program": code that keys state by the address alone must see it come
 * back, as it does on a GPU. */
#include "driver.h"

#include <stdlib.h>

static __thread CUcontext tls_stack[SD_CTX_STACK_MAX];
static __thread int tls_depth;
static unsigned long long sd_ctx_ids; /* under sd_lock */
/* Destroyed created contexts, most recent last: their storage is reused. */
#define SD_CTX_REUSE_MAX 64
static CUcontext sd_ctx_dead[SD_CTX_REUSE_MAX];
static int sd_ctx_ndead;

unsigned long long sd_ctx_next_id(void) { return ++sd_ctx_ids; }

CUcontext sd_ctx_new(int device, int primary) {
  if (!primary && sd_ctx_ndead > 0) {
    CUcontext c = sd_ctx_dead[--sd_ctx_ndead];
    *c = (struct CUctx_st){.id = sd_ctx_next_id(), .device = device};
    return c;
  }
  CUcontext c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->id = sd_ctx_next_id();
  c->device = device;
  c->primary = primary;
  if (sd_reg_add(c, SD_CTX) != 0) {
    free(c);
    return NULL;
  }
  return c;
}

CUresult sd_ctx_usable_locked(CUcontext ctx) {
  if (!ctx || !sd_reg_has(ctx, SD_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (ctx->primary && ctx->refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

CUresult sd_ctx_current_locked(CUcontext *out) {
  CUresult r = sd_check_init();
  if (r) return r;
  if (tls_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext c = tls_stack[tls_depth - 1];
  r = sd_ctx_usable_locked(c);
  if (r) return r;
  *out = c;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  SD_COUNT(cuDevicePrimaryCtxRetain);
  CUresult r = sd_check_device(dev);
  if (r) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext c = sd.dev[dev].primary;
  /* Re-activating a released primary context makes a new context behind the
   * same handle, with a new id. */
  if (c->refs++ == 0 && sd.dev[dev].primary_used) c->id = sd_ctx_next_id();
  sd.dev[dev].primary_used = 1;
  *pctx = c;
  pthread_mutex_unlock(&sd_lock);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  SD_COUNT(cuDevicePrimaryCtxRelease_v2);
  CUresult r = sd_check_device(dev);
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  CUcontext c = sd.dev[dev].primary;
  if (c->refs <= 0) {
    r = CUDA_ERROR_INVALID_CONTEXT;
  } else if (--c->refs == 0) {
    /* The last release tears the primary context down, as a driver does. */
    sd_modules_drop_ctx_locked(c);
    sd_streams_drop_ctx_locked(c);
    sd_mem_drop_ctx_locked(c);
  }
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending(); /* the context's graphs gave their references back */
  return r;
}

/* What cudaDeviceReset does: the CUDA Driver API, cuDevicePrimaryCtxReset
 * ("Destroy all allocations and reset all state on the primary context";
 * "Resetting the primary context does not release it"). Retains stay as
 * they are; behind the same handle there is a new context, with a new id,
 * active again at once when still retained. */
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  SD_COUNT(cuDevicePrimaryCtxReset_v2);
  CUresult r = sd_check_device(dev);
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  CUcontext c = sd.dev[dev].primary;
  sd_modules_drop_ctx_locked(c);
  sd_streams_drop_ctx_locked(c);
  sd_mem_drop_ctx_locked(c);
  if (sd.dev[dev].primary_used) c->id = sd_ctx_next_id();
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending();
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                        CUdevice dev) {
  SD_COUNT(cuCtxCreate_v4);
  CUresult r = sd_check_device(dev);
  if (r) return r;
  if (!pctx || (flags & ~(unsigned)CU_CTX_FLAGS_MASK)) return CUDA_ERROR_INVALID_VALUE;
  /* Execution affinity and CIG contexts are not modelled. */
  if (params && (params->numExecAffinityParams || params->cigParams))
    return CUDA_ERROR_NOT_SUPPORTED;
  if (tls_depth == SD_CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&sd_lock);
  CUcontext c = sd_ctx_new(dev, 0);
  pthread_mutex_unlock(&sd_lock);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  tls_stack[tls_depth++] = c;
  *pctx = c;
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  SD_COUNT(cuCtxDestroy_v2);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  r = sd_ctx_usable_locked(ctx);
  if (!r && ctx->primary) r = CUDA_ERROR_INVALID_CONTEXT; /* release, never destroy */
  if (!r) {
    sd_modules_drop_ctx_locked(ctx);
    sd_streams_drop_ctx_locked(ctx);
    sd_mem_drop_ctx_locked(ctx);
    ctx->destroyed = 1;
    if (sd_ctx_ndead < SD_CTX_REUSE_MAX) sd_ctx_dead[sd_ctx_ndead++] = ctx;
  }
  pthread_mutex_unlock(&sd_lock);
  sd_user_run_pending();
  if (!r && tls_depth > 0 && tls_stack[tls_depth - 1] == ctx) tls_depth--;
  return r;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  SD_COUNT(cuCtxSetCurrent);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!ctx) {
    if (tls_depth > 0) tls_depth--;
    return CUDA_SUCCESS;
  }
  pthread_mutex_lock(&sd_lock);
  int known = sd_reg_has(ctx, SD_CTX);
  int destroyed = known && ctx->destroyed;
  pthread_mutex_unlock(&sd_lock);
  if (!known) return CUDA_ERROR_INVALID_CONTEXT;
  if (destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (tls_depth == 0) tls_depth = 1;
  tls_stack[tls_depth - 1] = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
  SD_COUNT(cuCtxGetCurrent);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = tls_depth ? tls_stack[tls_depth - 1] : NULL;
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  SD_COUNT(cuCtxPushCurrent_v2);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  int known = sd_reg_has(ctx, SD_CTX);
  int destroyed = known && ctx->destroyed;
  pthread_mutex_unlock(&sd_lock);
  if (!known) return CUDA_ERROR_INVALID_CONTEXT;
  if (destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (tls_depth == SD_CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  tls_stack[tls_depth++] = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  SD_COUNT(cuCtxPopCurrent_v2);
  CUresult r = sd_check_init();
  if (r) return r;
  if (tls_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext c = tls_stack[--tls_depth];
  if (pctx) *pctx = c;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
  SD_COUNT(cuCtxGetDevice);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext c;
  CUresult r = sd_ctx_current_locked(&c);
  if (!r) *device = c->device;
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
  SD_COUNT(cuCtxGetDevice_v2);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUresult r = ctx ? sd_check_init() : sd_ctx_current_locked(&ctx);
  if (!r) r = sd_ctx_usable_locked(ctx);
  if (!r) *device = ctx->device;
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* NULL means the current context. */
CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId) {
  SD_COUNT(cuCtxGetId);
  if (!ctxId) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUresult r = ctx ? sd_check_init() : sd_ctx_current_locked(&ctx);
  if (!r) r = sd_ctx_usable_locked(ctx);
  if (!r) *ctxId = ctx->id;
  pthread_mutex_unlock(&sd_lock);
  return r;
}
