/* driver_mem.c: device memory is host memory. Allocations are 256-byte
 * aligned (as cuMemAlloc guarantees) and filled with 0xFF, which reads as
 * NaN in fp32/fp16/bf16, so code that consumes memory it never wrote gets
 * visibly wrong results instead of lucky zeros. Every live allocation is
 * recorded (sorted by address) so the stand-in can reject pointers a GPU
 * could not use: copies, memsets, pointer queries and the cuBLAS stand-ins
 * check that the bytes they touch lie inside one live allocation. Stream
 * ordered frees (cuMemFreeAsync) take effect at once, since streams run
 * inline; the stream-ordered allocations come from pools (driver_pool.c),
 * and freeing one gives its memory back to its pool. */
#include "driver.h"

#include <stdlib.h>
#include <string.h>

typedef struct sd_alloc {
  uintptr_t base;
  size_t size;
  CUcontext ctx;
  struct CUmemPoolHandle_st *pool; /* the pool that owns the memory, or NULL */
} sd_alloc;

static sd_alloc *sd_allocs;
static size_t sd_nallocs, sd_cap_allocs;

/* Index of the allocation containing p, or -1. Lock held. */
static long sd_mem_find(uintptr_t p) {
  size_t lo = 0, hi = sd_nallocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (sd_allocs[mid].base + sd_allocs[mid].size <= p) lo = mid + 1;
    else hi = mid;
  }
  if (lo < sd_nallocs && sd_allocs[lo].base <= p && p < sd_allocs[lo].base + sd_allocs[lo].size)
    return (long)lo;
  return -1;
}

int sd_mem_covers_locked(CUdeviceptr p, size_t n) {
  long i = sd_mem_find((uintptr_t)p);
  if (i < 0) return 0;
  return n <= sd_allocs[i].base + sd_allocs[i].size - (uintptr_t)p;
}

void sd_mem_totals(unsigned long long *allocations, unsigned long long *bytes) {
  pthread_mutex_lock(&sd_lock);
  unsigned long long b = 0;
  for (size_t i = 0; i < sd_nallocs; i++) b += sd_allocs[i].size;
  *allocations = sd_nallocs;
  *bytes = b;
  pthread_mutex_unlock(&sd_lock);
}

/* Set by cuMemFreeAsync around its free: a pool block it gives back is
 * pending until a synchronisation observes it (driver_pool.c). Lock held. */
static int sd_freeing_async;

static void sd_mem_remove_at(size_t i) {
  if (sd_allocs[i].pool) {
    sd_pool_give_back_locked(sd_allocs[i].pool, sd_allocs[i].base, sd_freeing_async);
  } else {
    sd_device *d = &sd.dev[sd_allocs[i].ctx->device];
    d->live_bytes -= sd_allocs[i].size;
    free((void *)sd_allocs[i].base);
  }
  memmove(&sd_allocs[i], &sd_allocs[i + 1], (sd_nallocs - i - 1) * sizeof *sd_allocs);
  sd_nallocs--;
}

void sd_mem_drop_ctx_locked(CUcontext ctx) {
  for (size_t i = sd_nallocs; i-- > 0;)
    if (sd_allocs[i].ctx == ctx) sd_mem_remove_at(i);
}

int sd_mem_insert_locked(uintptr_t base, size_t bytes, CUcontext ctx, struct CUmemPoolHandle_st *pool) {
  if (sd_nallocs == sd_cap_allocs) {
    size_t cap = sd_cap_allocs ? sd_cap_allocs * 2 : 256;
    sd_alloc *n = realloc(sd_allocs, cap * sizeof *n);
    if (!n) return -1;
    sd_allocs = n;
    sd_cap_allocs = cap;
  }
  size_t i = 0;
  while (i < sd_nallocs && sd_allocs[i].base < base) i++;
  memmove(&sd_allocs[i + 1], &sd_allocs[i], (sd_nallocs - i) * sizeof *sd_allocs);
  sd_allocs[i] = (sd_alloc){base, bytes, ctx, pool};
  sd_nallocs++;
  return 0;
}

CUresult sd_mem_alloc_locked(CUdeviceptr *dptr, size_t bytes, CUcontext ctx) {
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  sd_device *d = &sd.dev[ctx->device];
  if (sd.mem_limit && (bytes > sd.mem_limit || d->live_bytes > sd.mem_limit - bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  void *p = NULL;
  if (posix_memalign(&p, 256, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (sd_mem_insert_locked((uintptr_t)p, bytes, ctx, NULL) != 0) {
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memset(p, 0xFF, bytes);
  d->live_bytes += bytes;
  *dptr = (CUdeviceptr)p;
  return CUDA_SUCCESS;
}

/* A free of 0 does nothing, as cudaFree(NULL) does; anything else must be
 * the start of a live allocation. */
CUresult sd_mem_free_locked(CUdeviceptr p) {
  if (p == 0) return CUDA_SUCCESS;
  long i = sd_mem_find((uintptr_t)p);
  if (i < 0 || sd_allocs[i].base != (uintptr_t)p) return CUDA_ERROR_INVALID_VALUE;
  sd_mem_remove_at((size_t)i);
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  SD_COUNT(cuMemAlloc_v2);
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  CUresult r = sd_ctx_current_locked(&ctx);
  if (!r) r = sd_capture_forbids_locked();
  if (!r) r = sd_mem_alloc_locked(dptr, bytesize, ctx);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* cudaFree "may perform implicit synchronization" for memory not from the
 * stream-ordered allocator (CUDA Runtime API, cudaFree), and a
 * synchronisation during capture can invalidate it. A free allowed in
 * relaxed mode while the calling thread captures is counted
 * (mem_free_in_own_capture) so that tests can assert none happen. */
CUresult cuMemFree_v2(CUdeviceptr dptr) {
  SD_COUNT(cuMemFree_v2);
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  CUresult r = sd_ctx_current_locked(&ctx);
  if (!r) r = sd_capture_forbids_locked();
  if (!r && sd_thread_capturing_locked()) SD_COUNT(mem_free_in_own_capture);
  if (!r) r = sd_mem_free_locked(dptr);
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* In capture a free of the graph's own allocation is a free node (cuda.h,
 * cuGraphAddMemAllocNode: "The allocation's address remains fixed across
 * instantiations and launches"); it does nothing more. */
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  SD_COUNT(cuMemFreeAsync);
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  CUresult r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  if (!r && sd.no_pools) r = CUDA_ERROR_NOT_SUPPORTED;
  struct CUgraph_st *g = r ? NULL : sd_capture_graph_locked(st);
  if (g) {
    int own = 0;
    for (size_t i = 0; i < g->nallocs; i++) own |= g->allocs[i] == dptr;
    sd_node n = {.kind = SD_NODE_MEM_FREE, .dst = dptr};
    if (!own) r = CUDA_ERROR_NOT_SUPPORTED; /* freeing outside memory in a graph: not modelled */
    else if (sd_graph_append_locked(g, &n) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    else g->mem_nodes++;
  } else if (!r) {
    sd_freeing_async = 1;
    r = sd_mem_free_locked(dptr);
    sd_freeing_async = 0;
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
  SD_COUNT(cuMemGetInfo_v2);
  if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  CUresult r = sd_ctx_current_locked(&ctx);
  if (!r) {
    const sd_device *d = &sd.dev[ctx->device];
    *total = (size_t)d->total_mem;
    *free_bytes = d->live_bytes < d->total_mem ? (size_t)(d->total_mem - d->live_bytes) : 0;
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}

/* Synchronous copies run on the legacy stream and wait for it. */
static CUresult sd_copy_begin(const char *fn) {
  sd_note_sync(fn);
  CUcontext ctx;
  CUresult r = sd_ctx_current_locked(&ctx);
  if (!r) r = sd_capture_forbids_locked();
  if (!r) r = sd_stream_enqueue_locked(CU_STREAM_LEGACY, &ctx, NULL);
  return r;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  SD_COUNT(cuMemcpyHtoD_v2);
  pthread_mutex_lock(&sd_lock);
  CUresult r = sd_copy_begin("cuMemcpyHtoD_v2");
  if (!r && ByteCount && (!srcHost || !sd_mem_covers_locked(dstDevice, ByteCount)))
    r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_unlock(&sd_lock);
  if (!r && ByteCount) memcpy((void *)dstDevice, srcHost, ByteCount);
  return r;
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  SD_COUNT(cuMemcpyDtoH_v2);
  pthread_mutex_lock(&sd_lock);
  CUresult r = sd_copy_begin("cuMemcpyDtoH_v2");
  if (!r && ByteCount && (!dstHost || !sd_mem_covers_locked(srcDevice, ByteCount)))
    r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_unlock(&sd_lock);
  if (!r && ByteCount) memcpy(dstHost, (const void *)srcDevice, ByteCount);
  return r;
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  SD_COUNT(cuMemcpyDtoD_v2);
  pthread_mutex_lock(&sd_lock);
  CUresult r = sd_copy_begin("cuMemcpyDtoD_v2");
  if (!r && ByteCount && (!sd_mem_covers_locked(dstDevice, ByteCount) ||
                          !sd_mem_covers_locked(srcDevice, ByteCount)))
    r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_unlock(&sd_lock);
  if (!r && ByteCount) memmove((void *)dstDevice, (const void *)srcDevice, ByteCount);
  return r;
}

/* Synchronous memsets are legacy-stream work but, unlike copies, do not
 * wait for the device: they are not synchronisation points. */
static CUresult sd_memset_begin(CUdeviceptr dst, size_t bytes) {
  CUcontext ctx;
  CUresult r = sd_ctx_current_locked(&ctx);
  if (!r) r = sd_capture_forbids_locked();
  if (!r) r = sd_stream_enqueue_locked(CU_STREAM_LEGACY, &ctx, NULL);
  if (!r && bytes && !sd_mem_covers_locked(dst, bytes)) r = CUDA_ERROR_INVALID_VALUE;
  return r;
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  SD_COUNT(cuMemsetD8_v2);
  pthread_mutex_lock(&sd_lock);
  CUresult r = sd_memset_begin(dstDevice, N);
  pthread_mutex_unlock(&sd_lock);
  if (!r && N) memset((void *)dstDevice, uc, N);
  return r;
}

CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  SD_COUNT(cuMemsetD32_v2);
  if (dstDevice % 4) return CUDA_ERROR_INVALID_VALUE;
  if (N > SIZE_MAX / 4) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUresult r = sd_memset_begin(dstDevice, N * 4);
  pthread_mutex_unlock(&sd_lock);
  if (!r)
    for (size_t i = 0; i < N; i++) memcpy((char *)dstDevice + 4 * i, &ui, 4);
  return r;
}

/* Record n into st's capture (1), or 0 when st is not capturing; the
 * result in *r. Lock held. */
static int sd_mem_record_locked(struct CUstream_st *st, const sd_node *n, CUresult *r) {
  struct CUgraph_st *g = sd_capture_graph_locked(st);
  if (!g) return 0;
  *r = sd_graph_append_locked(g, n) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
  return 1;
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  SD_COUNT(cuMemsetD8Async);
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  CUresult r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  if (!r && N && !sd_mem_covers_locked(dstDevice, N)) r = CUDA_ERROR_INVALID_VALUE;
  sd_node n = {.kind = SD_NODE_MEMSET, .dst = dstDevice, .bytes = N, .value = uc, .elem_size = 1};
  int recorded = !r && sd_mem_record_locked(st, &n, &r);
  pthread_mutex_unlock(&sd_lock);
  if (!r && N && !recorded) memset((void *)dstDevice, uc, N);
  return r;
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  SD_COUNT(cuMemsetD32Async);
  if (dstDevice % 4 || N > SIZE_MAX / 4) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  CUresult r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  if (!r && N && !sd_mem_covers_locked(dstDevice, N * 4)) r = CUDA_ERROR_INVALID_VALUE;
  sd_node n = {.kind = SD_NODE_MEMSET, .dst = dstDevice, .bytes = N * 4, .value = ui, .elem_size = 4};
  int recorded = !r && sd_mem_record_locked(st, &n, &r);
  pthread_mutex_unlock(&sd_lock);
  if (!r && !recorded)
    for (size_t i = 0; i < N; i++) memcpy((char *)dstDevice + 4 * i, &ui, 4);
  return r;
}

/* Stream-ordered: not a synchronisation, allowed during capture. */
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream) {
  SD_COUNT(cuMemcpyDtoDAsync_v2);
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  CUresult r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  if (!r && ByteCount && (!sd_mem_covers_locked(dstDevice, ByteCount) ||
                          !sd_mem_covers_locked(srcDevice, ByteCount)))
    r = CUDA_ERROR_INVALID_VALUE;
  sd_node n = {.kind = SD_NODE_MEMCPY, .dst = dstDevice, .src = srcDevice, .bytes = ByteCount};
  int recorded = !r && sd_mem_record_locked(st, &n, &r);
  pthread_mutex_unlock(&sd_lock);
  if (!r && ByteCount && !recorded) memmove((void *)dstDevice, (const void *)srcDevice, ByteCount);
  return r;
}

/* Page-locked host memory: plain host memory here (the stand-in's device
 * memory is host memory too). Flags as cuda.h's CU_MEMHOSTALLOC_*; others
 * are refused, as the driver refuses them. */
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  SD_COUNT(cuMemHostAlloc);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!pp || (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                  CU_MEMHOSTALLOC_WRITECOMBINED)))
    return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx;
  pthread_mutex_lock(&sd_lock);
  r = sd_ctx_current_locked(&ctx);
  pthread_mutex_unlock(&sd_lock);
  if (r) return r;
  *pp = calloc(1, bytesize ? bytesize : 1);
  return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void *p) {
  SD_COUNT(cuMemFreeHost);
  CUresult r = sd_check_init();
  if (r) return r;
  free(p);
  return CUDA_SUCCESS;
}

/* Stream-ordered like the other async copies (run at once, or a node under
 * capture). */
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SD_COUNT_ONLY(cuMemcpyDtoHAsync_v2);
  pthread_mutex_lock(&sd_lock);
  CUcontext ctx;
  struct CUstream_st *st = NULL;
  CUresult r = sd_stream_enqueue_locked(hStream, &ctx, &st);
  if (!r && ByteCount && (!dstHost || !sd_mem_covers_locked(srcDevice, ByteCount))) r = CUDA_ERROR_INVALID_VALUE;
  sd_node n = {.kind = SD_NODE_MEMCPY, .dst = (CUdeviceptr)(uintptr_t)dstHost, .src = srcDevice, .bytes = ByteCount};
  int recorded = !r && sd_mem_record_locked(st, &n, &r);
  pthread_mutex_unlock(&sd_lock);
  /* Behind a held graph launch on this stream (STANDIN_GRAPH_OVERLAP), it
   * runs after that launch. */
  if (!r && !recorded && !sd_graph_overlap_join(hStream, &n)) {
    if (ByteCount) memcpy(dstHost, (const void *)srcDevice, ByteCount);
  } else if (r || recorded) {
    sd_graph_overlap_flush();
  }
  return r;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  SD_COUNT(cuPointerGetAttribute);
  CUresult r = sd_check_init();
  if (r) return r;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sd_lock);
  long i = sd_mem_find((uintptr_t)ptr);
  if (i < 0) {
    r = CUDA_ERROR_INVALID_VALUE; /* not memory the driver knows */
  } else {
    const sd_alloc *a = &sd_allocs[i];
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = a->ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a->ctx->device; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = (CUdeviceptr)a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    default: r = CUDA_ERROR_NOT_SUPPORTED; break; /* not modelled */
    }
  }
  pthread_mutex_unlock(&sd_lock);
  return r;
}
