/* driver_pool.c: stream-ordered memory pools, as cuda.h documents them.
 *
 * A pool keeps the device memory its allocations were carved from (its
 * reserve) after they are freed, and hands it out again. The release
 * threshold is what it keeps: "When more than the release threshold bytes
 * of memory are held by the memory pool, the allocator will try to release
 * memory back to the OS on the next call to stream, event or context
 * synchronize. (default 0)" (cuda.h, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD).
 * Each device's default pool (what cuMemAllocAsync uses) starts at 0, so a
 * program that synchronises every step maps its stream-ordered memory
 * again every step; a pool with a threshold does not.
 *
 * The model, kept simple and countable:
 * - The reserve is a list of blocks. An allocation takes the smallest free
 *   block that holds it, else maps a new block of exactly its size (one
 *   "map", counted for STANDIN_COUNTS as standin_pool_maps). A block is
 *   never split or merged, so the counts are exact and predictable; a real
 *   allocator's granularity differs.
 * - Reserved bytes count against STANDIN_MEM_LIMIT like any device memory
 *   and against the pool's maxSize; past either the allocation fails with
 *   CUDA_ERROR_OUT_OF_MEMORY. The stand-in does not give a pool's unused
 *   blocks back by itself to make room: the pool's owner must trim.
 * - Releasing (at a successful synchronisation, down to the threshold, or
 *   cuMemPoolTrimTo, down to minBytesToKeep) unmaps free blocks, the one
 *   freed longest ago first, while the reserve is above the target
 *   (standin_pool_unmaps). Only blocks whose free has been observed are
 *   released: cuMemPoolTrimTo "cannot release OS allocations that back
 *   outstanding asynchronous allocations", and "Allocations that have
 *   been asynchronously freed but whose completion has not been observed
 *   on the host (eg. by a synchronize) can count as outstanding" (cuda.h).
 *   A block freed by cuMemFreeAsync is pending until the next successful
 *   stream, event or context synchronisation, which observes every free
 *   made before it (kinder than a GPU in one respect: a stream's
 *   synchronisation observes that stream's frees only); cuMemFree, which
 *   synchronises, frees observed. Pending blocks are handed out again
 *   (the stream-ordered reuse the REUSE_* switches allow).
 * - Used bytes are the sizes asked for; reserved bytes the blocks' sizes.
 *   The high watermarks follow both and can only be reset, to the current
 *   value ("It is illegal to set this attribute to a non-zero value").
 * Allocations from a pool are ordinary live allocations for the pointer
 * checks (driver_mem.c), exactly as large as asked, poisoned with 0xFF each
 * time a block is handed out. */
#include "driver.h"

#include <stdlib.h>
#include <string.h>

typedef struct sd_pool_block {
  uintptr_t base;
  size_t size;      /* mapped bytes */
  size_t used;      /* 0: free; else the bytes of the allocation in it */
  int pending;      /* free, but its asynchronous free not yet observed */
  unsigned long long freed_at;
} sd_pool_block;

struct CUmemPoolHandle_st {
  int device;
  int is_default;
  int destroyed;   /* cuMemPoolDestroy ran; kept until its last block is freed */
  uint64_t threshold;
  int reuse[3];    /* REUSE_* attributes: kept and reported, no effect */
  size_t max_size; /* 0: the device's memory */
  uint64_t reserved, reserved_high, used, used_high;
  sd_pool_block *blocks;
  size_t nblocks, cap;
  unsigned long long clock;
};

unsigned long long sd_pool_maps, sd_pool_unmaps;

static struct CUmemPoolHandle_st *sd_pool_new_locked(int device, int is_default) {
  struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (sd_reg_add(p, SD_POOL) != 0) {
    free(p);
    return NULL;
  }
  p->device = device;
  p->is_default = is_default;
  p->reuse[0] = p->reuse[1] = p->reuse[2] = 1; /* cuda.h: each "(default enabled)" */
  return p;
}

static struct CUmemPoolHandle_st *sd_default_pool_locked(int device) {
  sd_device *d = &sd.dev[device];
  if (!d->default_pool) d->default_pool = sd_pool_new_locked(device, 1);
  return d->default_pool;
}

static void sd_pool_unmap_at(struct CUmemPoolHandle_st *p, size_t i) {
  sd.dev[p->device].live_bytes -= p->blocks[i].size;
  p->reserved -= p->blocks[i].size;
  free((void *)p->blocks[i].base);
  p->blocks[i] = p->blocks[--p->nblocks];
  sd_pool_unmaps++;
}

/* Unmap free blocks whose free was observed, oldest free first, while more
 * than keep is reserved. */
static void sd_pool_trim_locked(struct CUmemPoolHandle_st *p, uint64_t keep) {
  while (p->reserved > keep) {
    size_t best = p->nblocks;
    for (size_t i = 0; i < p->nblocks; i++)
      if (!p->blocks[i].used && !p->blocks[i].pending &&
          (best == p->nblocks || p->blocks[i].freed_at < p->blocks[best].freed_at))
        best = i;
    if (best == p->nblocks) return;
    sd_pool_unmap_at(p, best);
  }
}

static void sd_pool_observe(struct CUmemPoolHandle_st *p) {
  for (size_t i = 0; i < p->nblocks; i++) p->blocks[i].pending = 0;
}

/* A synchronisation: every free made so far is observed, then the pool
 * releases down to its threshold. */
static void sd_pool_trim_one(void *obj, void *arg) {
  (void)arg;
  struct CUmemPoolHandle_st *p = obj;
  sd_pool_observe(p);
  sd_pool_trim_locked(p, p->threshold);
}

void sd_pools_sync_locked(void) { sd_reg_each(SD_POOL, sd_pool_trim_one, NULL); }

CUresult sd_pool_alloc_locked(struct CUmemPoolHandle_st *p, CUdeviceptr *dptr, size_t bytes, CUcontext ctx) {
  size_t best = p->nblocks;
  for (size_t i = 0; i < p->nblocks; i++)
    if (!p->blocks[i].used && p->blocks[i].size >= bytes &&
        (best == p->nblocks || p->blocks[i].size < p->blocks[best].size))
      best = i;
  int mapped = 0;
  if (best == p->nblocks) {
    sd_device *d = &sd.dev[p->device];
    uint64_t max = p->max_size ? p->max_size : d->total_mem;
    if (bytes > max || p->reserved > max - bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    if (sd.mem_limit && (bytes > sd.mem_limit || d->live_bytes > sd.mem_limit - bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (p->nblocks == p->cap) {
      size_t cap = p->cap ? p->cap * 2 : 16;
      sd_pool_block *n = realloc(p->blocks, cap * sizeof *n);
      if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
      p->blocks = n;
      p->cap = cap;
    }
    void *mem = NULL;
    if (posix_memalign(&mem, 256, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    p->blocks[p->nblocks] = (sd_pool_block){(uintptr_t)mem, bytes, 0, 0, 0};
    best = p->nblocks;
    mapped = 1;
  }
  sd_pool_block *b = &p->blocks[best];
  if (sd_mem_insert_locked(b->base, bytes, ctx, p) != 0) {
    if (mapped) free((void *)b->base);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (mapped) {
    p->nblocks++;
    sd.dev[p->device].live_bytes += bytes;
    p->reserved += bytes;
    if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
    sd_pool_maps++;
  }
  memset((void *)b->base, 0xFF, bytes);
  b->used = bytes;
  b->pending = 0;
  p->used += bytes;
  if (p->used > p->used_high) p->used_high = p->used;
  *dptr = (CUdeviceptr)b->base;
  return CUDA_SUCCESS;
}

void sd_pool_give_back_locked(struct CUmemPoolHandle_st *p, uintptr_t base, int pending) {
  for (size_t i = 0; i < p->nblocks; i++) {
    if (p->blocks[i].base != base) continue;
    p->used -= p->blocks[i].used;
    p->blocks[i].used = 0;
    p->blocks[i].pending = pending;
    p->blocks[i].freed_at = ++p->clock;
    break;
  }
  if (p->destroyed) {
    /* "released automatically once there are no more outstanding
     * allocations": the pool's owner let it go; nobody can trim it */
    sd_pool_observe(p);
    sd_pool_trim_locked(p, 0);
    if (!p->nblocks) {
      free(p->blocks);
      free(p);
    }
  }
}

/* ------------------------------------------------------------------------ */
/* The two allocating entry points: in a capture the memory is an alloc node
 * and "owned by the graph instead of the memory pool" (cuda.h,
 * cuMemAllocAsync); otherwise it comes from the pool. Lock held. */
static CUresult sd_pool_alloc_async_locked(struct CUmemPoolHandle_st *pool, CUdeviceptr *dptr, size_t bytes,
                                           CUstream hStream) {
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  CUresult r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  if (r) return r;
  if (sd.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  struct CUgraph_st *g = sd_capture_graph_locked(st);
  if (!g) {
    if (!pool) pool = sd_default_pool_locked(ctx->device);
    return pool ? sd_pool_alloc_locked(pool, dptr, bytes, ctx) : CUDA_ERROR_OUT_OF_MEMORY;
  }
  r = sd_mem_alloc_locked(dptr, bytes, ctx);
  if (r) return r;
  CUdeviceptr *grown = realloc(g->allocs, (g->nallocs + 1) * sizeof *grown);
  sd_node n = {.kind = SD_NODE_MEM_ALLOC, .dst = *dptr, .bytes = bytes};
  if (grown) g->allocs = grown;
  if (!grown || sd_graph_append_locked(g, &n) != 0) {
    sd_mem_free_locked(*dptr);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g->allocs[g->nallocs++] = *dptr;
  g->mem_nodes++;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  SD_COUNT(cuMemAllocAsync);
  pthread_mutex_lock(&sd_lock);
  CUresult r = sd_pool_alloc_async_locked(NULL, dptr, bytesize, hStream);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  SD_COUNT(cuMemAllocFromPoolAsync);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!pool || !sd_reg_has(pool, SD_POOL)) r = CUDA_ERROR_INVALID_VALUE;
  else r = sd_pool_alloc_async_locked(pool, dptr, bytesize, hStream);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* ------------------------------------------------------------------------ */
/* Pools made by the program: device memory only (the modelled case);
 * IPC handle types, host locations and usage flags are not modelled. */
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
  SD_COUNT(cuMemPoolCreate);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
  static const unsigned char zero[sizeof props->reserved];
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->win32SecurityAttributes ||
      memcmp(props->reserved, zero, sizeof zero) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    if (props->location.type == CU_MEM_LOCATION_TYPE_HOST || props->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
      return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (sd_check_device(props->location.id)) return CUDA_ERROR_INVALID_VALUE;
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE || props->usage) return CUDA_ERROR_NOT_SUPPORTED;
  if (sd.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&sd_lock);
  struct CUmemPoolHandle_st *p = sd_pool_new_locked(props->location.id, 0);
  if (p) p->max_size = props->maxSize;
  pthread_mutex_unlock(&sd_lock);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  *pool = p;
  return CUDA_SUCCESS;
}

/* "A device's default memory pool cannot be destroyed"; one with memory
 * still allocated goes when that is freed ("the function will return
 * immediately and the resources associated with the pool will be released
 * automatically once there are no more outstanding allocations"). */
CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  SD_COUNT(cuMemPoolDestroy);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!pool || !sd_reg_has(pool, SD_POOL) || pool->is_default) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    sd_reg_del(pool);
    pool->destroyed = 1;
    sd_pool_observe(pool);
    sd_pool_trim_locked(pool, 0);
    if (!pool->nblocks) {
      free(pool->blocks);
      free(pool);
    }
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
  SD_COUNT(cuDeviceGetDefaultMemPool);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (sd_check_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (sd.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&sd_lock);
  struct CUmemPoolHandle_st *p = sd_default_pool_locked(dev);
  pthread_mutex_unlock(&sd_lock);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  *pool = p;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  SD_COUNT(cuMemPoolTrimTo);
  CUresult r = sd_check_init();
  if (r) return r;
  pthread_mutex_lock(&sd_lock);
  if (!pool || !sd_reg_has(pool, SD_POOL)) r = CUDA_ERROR_INVALID_VALUE;
  else sd_pool_trim_locked(pool, minBytesToKeep);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* Both attribute calls. Value types as cuda.h gives them: cuuint64_t for
 * the byte counts, int for the REUSE_* switches. Setting: the threshold
 * and switches; the high marks only to 0 (a reset to the current value);
 * the CURRENT counters are read-only. */
static CUresult sd_pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value, int set) {
  CUresult r = sd_check_init();
  if (r) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  cuuint64_t *bytes = value, *high = NULL, current = 0;
  if (!pool || !sd_reg_has(pool, SD_POOL)) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      if (set) pool->threshold = *bytes;
      else *bytes = pool->threshold;
      break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: {
      int *sw = &pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
      if (set) *sw = *(int *)value != 0;
      else *(int *)value = *sw;
      break;
    }
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      if (set) r = CUDA_ERROR_INVALID_VALUE;
      else *bytes = attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? pool->reserved : pool->used;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: high = &pool->reserved_high, current = pool->reserved; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: high = &pool->used_high, current = pool->used; break;
    default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
    if (high && !set) *bytes = *high;
    else if (high && *bytes) r = CUDA_ERROR_INVALID_VALUE; /* "illegal to set ... to a non-zero value" */
    else if (high) *high = current;
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
  SD_COUNT(cuMemPoolSetAttribute);
  return sd_pool_attribute(pool, attr, value, 1);
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
  SD_COUNT(cuMemPoolGetAttribute);
  return sd_pool_attribute(pool, attr, value, 0);
}
