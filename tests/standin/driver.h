/* driver.h: internals of the stand-in libcuda.so.1, shared by driver_*.c.
 *
 *   driver_init.c    environment controls, cuInit, devices and attributes,
 *                    the object registry, call counters and the exit report
 *   driver_ctx.c     contexts: primary contexts, the per-thread stack
 *   driver_stream.c  streams, graph capture, events, synchronisation
 *   driver_graph.c   graphs: the work captured into them, cloning, child
 *                    graphs, instantiation and launch
 *   driver_userobj.c user objects and the references graphs and
 *                    instantiations hold on them
 *   driver_mem.c     device memory (= host memory), copies, memsets
 *   driver_pool.c    stream-ordered memory pools and their release threshold
 *   driver_module.c  modules and kernel launches (standin_kernel.h)
 *   driver_errors.c  cuGetErrorName / cuGetErrorString
 *
 * Device memory is host memory and every stream runs its work inline, on
 * the calling thread, before the enqueuing call returns; work enqueued on a
 * capturing stream is recorded into the capture's graph instead and runs
 * when an instantiation of the graph is launched. One mutex (sd_lock)
 * guards all driver state; it is never held while user work (a host kernel)
 * runs. The opaque handle types of cuda.h (CUctx_st, CUstream_st, ...) are
 * defined here, as a driver defines them; a handle is valid while it is in
 * the registry, so a stale or foreign handle is reported, never
 * dereferenced.
 */
#ifndef STANDIN_DRIVER_H
#define STANDIN_DRIVER_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#include "common.h"
#include "standin_kernel.h"

/* cu12 builds report a CUDA 12.8 driver, cu13 builds a CUDA 13.0 driver;
 * the newest PTX ISA each one's JIT accepts goes with it. */
#if STANDIN_CUDA_MAJOR == 12
#define SD_DRIVER_VERSION 12080
#define SD_PTX_ISA_MAX 87 /* 8.7 */
#else
#define SD_DRIVER_VERSION 13000
#define SD_PTX_ISA_MAX 90 /* 9.0 */
#endif

#define SD_MAX_DEVICES 16
#define SD_CTX_STACK_MAX 32 /* contexts one thread can push */

/* ------------------------------------------------------------------------ */
/* Every exported function, for STANDIN_COUNTS. */
#define SD_API_LIST(X)                                                         \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet)           \
  X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem_v2)            \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2)                  \
  X(cuDevicePrimaryCtxReset_v2)                                                \
  X(cuCtxCreate_v4) X(cuCtxDestroy_v2) X(cuCtxSetCurrent) X(cuCtxGetCurrent)   \
  X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuCtxGetDevice)               \
  X(cuCtxGetDevice_v2) X(cuCtxGetId) X(cuCtxSynchronize)                       \
  X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamGetCtx) X(cuStreamGetId)   \
  X(cuStreamSynchronize) X(cuStreamIsCapturing) X(cuStreamBeginCapture_v2)     \
  X(cuStreamEndCapture) X(cuStreamWaitEvent) X(cuGraphDestroy)                 \
  X(cuThreadExchangeStreamCaptureMode)                                         \
  X(cuGraphCreate) X(cuGraphClone) X(cuGraphAddChildGraphNode)                 \
  X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy)        \
  X(cuGraphGetNodes)                                                           \
  X(cuLaunchHostFunc)                                                          \
  X(cuStreamGetCaptureInfo_v2) X(cuStreamGetCaptureInfo_v3)                   \
  X(cuUserObjectCreate) X(cuUserObjectRetain) X(cuUserObjectRelease)          \
  X(cuGraphRetainUserObject) X(cuGraphReleaseUserObject) X(user_object_destroyed) \
  X(cuEventCreate) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize)      \
  X(cuEventElapsedTime_v2) X(cuEventDestroy_v2)                                \
  X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemFreeAsync)        \
  X(mem_free_in_own_capture)                                                   \
  X(cuMemGetInfo_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoD_v2)  \
  X(cuMemcpyDtoDAsync_v2) X(cuMemsetD8_v2) X(cuMemsetD8Async) X(cuMemsetD32_v2) \
  X(cuMemsetD32Async) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyDtoHAsync_v2) \
  X(cuMemAllocFromPoolAsync) X(cuMemPoolCreate) X(cuMemPoolDestroy)            \
  X(cuDeviceGetDefaultMemPool) X(cuMemPoolTrimTo) X(cuMemPoolSetAttribute)     \
  X(cuMemPoolGetAttribute)                                                     \
  X(cuPointerGetAttribute)                                                     \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                 \
  X(cuLaunchKernel) X(cuFuncSetAttribute)                                      \
  X(cuGetErrorString) X(cuGetErrorName)

typedef enum sd_api_id {
#define SD_API_ID(name) SD_API_##name,
  SD_API_LIST(SD_API_ID)
#undef SD_API_ID
  SD_API_COUNT
} sd_api_id;

extern unsigned long long sd_counts[SD_API_COUNT];
/* Every entry point counts itself, then runs a graph launch that
 * STANDIN_GRAPH_OVERLAP held back (driver_graph.c): whatever the call is,
 * it may observe or order that launch. The three calls that may pair with
 * or join a held launch (cuGraphLaunch, cuLaunchHostFunc,
 * cuMemcpyDtoHAsync_v2) count with SD_COUNT_ONLY and decide themselves. */
#define SD_COUNT_ONLY(name) STANDIN_BUMP(sd_counts, SD_API_##name)
#define SD_COUNT(name)                                                         \
  do {                                                                         \
    SD_COUNT_ONLY(name);                                                       \
    sd_graph_overlap_flush();                                                  \
  } while (0)

/* ------------------------------------------------------------------------ */
/* "driver_init.c": devices and process-wide state. */
typedef struct sd_device {
  int major, minor;
  char name[64];
  int sm_count;
  int max_threads_per_sm;
  int max_blocks_per_sm;
  int shared_optin;       /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
  int shared_per_sm;
  int l2_bytes;
  int clock_khz, mem_clock_khz, bus_width;
  uint64_t total_mem;
  uint64_t live_bytes;    /* under sd_lock */
  CUcontext primary;
  int primary_used;       /* retained at least once (under sd_lock) */
  struct CUmemPoolHandle_st *default_pool; /* made at first use (under sd_lock) */
} sd_device;

typedef struct sd_state {
  int initialized;        /* cuInit succeeded (atomic) */
  int config_error;       /* a STANDIN_* variable was bad: cuInit fails */
  int ndev;
  sd_device dev[SD_MAX_DEVICES];
  int no_pools;           /* STANDIN_NO_POOLS */
  int forbid_sync;        /* STANDIN_FORBID_SYNC */
  int fresh_streams;      /* STANDIN_FRESH_STREAMS */
  uint64_t mem_limit;     /* STANDIN_MEM_LIMIT, 0 = none */
  uint64_t event_lag;     /* STANDIN_EVENT_LAG, 0 = events complete at once */
  uint64_t kernel_ns;     /* STANDIN_KERNEL_NS, 0 = kernels take their host time */
  uint64_t gemm_ns;       /* STANDIN_GEMM_NS, 0 = GEMMs take their host time */
  uint64_t clock_khz;     /* STANDIN_CLOCK_KHZ, 0 = each board's own */
  uint64_t clock_ns;      /* GPU time the kernels took beyond their host time (under sd_lock) */
  char kernels[1024];     /* STANDIN_KERNELS, "" = none */
  unsigned long long forbidden_syncs;
  unsigned long long prohibited_queries; /* cuEventQuery refused by a capture (driver_stream.c) */
} sd_state;

extern sd_state sd;
extern pthread_mutex_t sd_lock;

/* CUDA_SUCCESS once cuInit succeeded, else CUDA_ERROR_NOT_INITIALIZED. */
CUresult sd_check_init(void);
/* CUDA_ERROR_INVALID_DEVICE unless 0 <= dev < ndev (after init). */
CUresult sd_check_device(CUdevice dev);

/* The registry of live handles. All of these need sd_lock held. */
typedef enum sd_kind {
  SD_CTX = 1, SD_STREAM, SD_EVENT, SD_MODULE, SD_FUNC, SD_GRAPH, SD_GRAPH_NODE, SD_GRAPH_EXEC, SD_POOL, SD_USER_OBJECT
} sd_kind;
int sd_reg_add(void *obj, sd_kind kind);        /* 0, or -1 out of memory */
int sd_reg_has(const void *obj, sd_kind kind);
void sd_reg_del(const void *obj);
/* Call fn on every live object of `kind`; fn may sd_reg_del its object. */
void sd_reg_each(sd_kind kind, void (*fn)(void *obj, void *arg), void *arg);

/* ------------------------------------------------------------------------ */
/* "driver_ctx.c" */
struct CUctx_st {
  unsigned long long id; /* cuCtxGetId: unique for the process's lifetime */
  int device;
  int primary;    /* a device's primary context */
  int refs;       /* primary: retain count; active while > 0 */
  int destroyed;  /* kept in the registry so users get CONTEXT_IS_DESTROYED */
};

CUcontext sd_ctx_new(int device, int primary); /* lock held; NULL on OOM */
unsigned long long sd_ctx_next_id(void);        /* lock held */
/* The calling thread's current context, checked: NOT_INITIALIZED,
 * INVALID_CONTEXT (none, unknown or an inactive primary) or
 * CONTEXT_IS_DESTROYED. Lock held. */
CUresult sd_ctx_current_locked(CUcontext *out);
/* The same check for a given context. Lock held. */
CUresult sd_ctx_usable_locked(CUcontext ctx);

/* ------------------------------------------------------------------------ */
/* "driver_stream.c" */
struct CUstream_st {
  unsigned long long id; /* cuStreamGetId: unique for the process's lifetime */
  CUcontext ctx;
  unsigned flags;
  CUstreamCaptureStatus capture;
  CUstreamCaptureMode capture_mode;
  pthread_t capture_thread;
  struct CUstream_st *origin; /* the stream that began the capture (itself
                                 for the origin, another for a forked one) */
  unsigned long long work;    /* operations enqueued, for join tracking */
  int unjoined;               /* forked, with work the origin has not
                                 waited for */
  struct CUgraph_st *graph;   /* origin of a capture: the graph being built */
  unsigned long long capture_id; /* origin of a capture: its sequence's id */
  struct CUstream_st *kept;   /* STANDIN_FRESH_STREAMS: the destroyed stream kept before this one */
};

struct CUevent_st {
  CUcontext ctx;
  unsigned flags;
  int recorded;
  int captured;   /* last recorded into a capture: not a point in time */
  struct CUstream_st *captured_on; /* that capture's stream, its work count */
  unsigned long long captured_work;
  uint64_t t_ns;
  struct CUstream_st *stream; /* recorded on (NULL: the NULL stream) */
  unsigned lag;   /* STANDIN_EVENT_LAG: queries still answered "not ready" */
  unsigned long long order; /* when it was recorded, among all records */
};

/* One operation of a graph, recorded as the driver would: kernel
 * arguments by value, memset values, copy addresses. Graphs are kept as the
 * flat list of their operations in an order their dependencies allow (the
 * order of capture; a child graph's operations in place of its node):
 * launches run them one after another. */
typedef enum sd_node_kind {
  SD_NODE_KERNEL = 1, SD_NODE_MEMCPY, SD_NODE_MEMSET, SD_NODE_HOST, SD_NODE_MEM_ALLOC, SD_NODE_MEM_FREE
} sd_node_kind;

typedef struct sd_node {
  sd_node_kind kind;
  CUdeviceptr dst, src;            /* memcpy, memset, alloc/free (dst) */
  size_t bytes;                    /* memcpy/memset/alloc bytes */
  unsigned value, elem_size;       /* memset: value, 1 or 4 */
  standin_kernel_fn fn;            /* kernel */
  standin_launch launch;           /* kernel: params point into blob at run */
  unsigned nparams;
  unsigned char *blob;             /* kernel: nparams offsets (size_t), then the values */
  size_t blob_size;
  CUhostFn host_fn;                /* host */
  void *user_data;
} sd_node;

/* References to user objects (driver_userobj.c), as a graph or an
 * instantiation owns them. */
typedef struct sd_user_ref {
  struct CUuserObject_st *obj;
  unsigned count;
} sd_user_ref;
typedef struct sd_user_refs {
  sd_user_ref *v;
  size_t n, cap;
} sd_user_refs;

struct CUgraph_st {
  CUcontext ctx;
  sd_node *nodes;
  size_t n, cap;
  unsigned mem_nodes;    /* alloc and free nodes: no clone, no child, one instantiation */
  unsigned execs;        /* live instantiations */
  int destroyed;         /* cuGraphDestroy ran; kept while execs hold it */
  CUdeviceptr *allocs;   /* memory of its alloc nodes, freed with the graph */
  size_t nallocs;
  sd_user_refs refs;     /* user object references it owns */
};

/* "driver_userobj.c". Lock held for all of these except sd_user_run_pending. */
/* Give every reference of refs back; a destructor whose object loses its
 * last one is queued for sd_user_run_pending. refs ends up empty. */
void sd_user_refs_drop_locked(sd_user_refs *refs);
/* dst gets the references src holds, as new ones (clone, child graph,
 * instantiation); 0, or -1 out of memory (dst unchanged). */
int sd_user_refs_copy_locked(sd_user_refs *dst, const sd_user_refs *src);
/* Run the destructors queued by the last releases. Call with sd_lock NOT
 * held, after every call that may have dropped references. */
void sd_user_run_pending(void);

/* Whether the calling thread is running a user object's destructor. */
int sd_user_in_destructor(void);
/* "driver_stream.c": whether g is a capture's graph (lock held). */
int sd_graph_capturing_locked(const struct CUgraph_st *g);

/* "driver_graph.c". Lock held for all of these. */
/* The graph st's capture records into, or NULL when st is not capturing. */
struct CUgraph_st *sd_capture_graph_locked(struct CUstream_st *st);
/* Append a copy of n (its blob included); 0, or -1 out of memory. */
int sd_graph_append_locked(struct CUgraph_st *g, const sd_node *n);
/* A new, unregistered graph of ctx; NULL out of memory. */
struct CUgraph_st *sd_graph_new_locked(CUcontext ctx);
/* Free g and the memory of its alloc nodes (registered or not). */
void sd_graph_free_locked(struct CUgraph_st *g);
/* Free every graph and instantiation of ctx (context destruction). */
void sd_graphs_drop_ctx_locked(CUcontext ctx);
/* STANDIN_GRAPH_OVERLAP: run the graph launch held back for pairing, if
 * any (every entry point makes this first, in SD_COUNT). Lock not held. */
void sd_graph_overlap_flush(void);
/* Append n (a host function or a copy enqueued on `stream`) to the held
 * launch when it is on that stream: 1. Otherwise run the held launch and
 * answer 0 (the caller runs n itself). Lock not held. */
int sd_graph_overlap_join(CUstream stream, const sd_node *n);

/* Resolve a stream handle for enqueuing work: NULL, CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD mean the current context. Fails like a driver:
 * INVALID_HANDLE for an unknown stream, the context errors, IMPLICIT when
 * legacy-stream work meets a blocking stream under capture (which is
 * invalidated), CAPTURE_INVALIDATED on an invalidated capture. *real is
 * the stream object, NULL for the special handles. Lock held. */
CUresult sd_stream_enqueue_locked(CUstream s, CUcontext *ctx, struct CUstream_st **real);
/* The same lookup without the capture rules (for queries). Lock held. */
CUresult sd_stream_lookup_locked(CUstream s, CUcontext *ctx, struct CUstream_st **real);
/* Potentially unsafe calls (allocation, synchronous copies and memsets,
 * synchronisation) by cuda.h's rule for the calling thread's capture mode
 * (cuThreadExchangeStreamCaptureMode): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 * invalidating the captures that prohibit the call, or CUDA_SUCCESS.
 * Lock held. */
CUresult sd_capture_forbids_locked(void);
/* 1 when the calling thread has a capture under way, on any stream. */
int sd_thread_capturing_locked(void);
/* A synchronising call: counted, and under STANDIN_FORBID_SYNC reported. */
void sd_note_sync(const char *fn);
/* Free every stream/event of ctx (context destruction). Lock held. */
void sd_streams_drop_ctx_locked(CUcontext ctx);

/* ------------------------------------------------------------------------ */
/* "driver_mem.c" */
/* Is [p, p+n) inside one live allocation? 1/0. Lock held. */
int sd_mem_covers_locked(CUdeviceptr p, size_t n);
/* Allocate / free device memory of ctx (the accounting of cuMemAlloc). */
CUresult sd_mem_alloc_locked(CUdeviceptr *dptr, size_t bytes, CUcontext ctx);
/* Record a live allocation at base (memory already taken; a pool's when
 * pool is not NULL, given back to it when freed). 0, or -1 out of memory. */
int sd_mem_insert_locked(uintptr_t base, size_t bytes, CUcontext ctx, struct CUmemPoolHandle_st *pool);
CUresult sd_mem_free_locked(CUdeviceptr p);
void sd_mem_drop_ctx_locked(CUcontext ctx);
void sd_mem_totals(unsigned long long *allocations, unsigned long long *bytes);

/* ------------------------------------------------------------------------ */
/* "driver_pool.c". Lock held for all of these. */
/* A successful stream, event or context synchronisation: every pool above
 * its release threshold gives back what it can. */
void sd_pools_sync_locked(void);
/* An allocation's memory returns to its pool (driver_mem.c's free). */
void sd_pool_give_back_locked(struct CUmemPoolHandle_st *p, uintptr_t base, int pending);
/* Blocks mapped / unmapped by pools since load (STANDIN_COUNTS). */
extern unsigned long long sd_pool_maps, sd_pool_unmaps;

/* ------------------------------------------------------------------------ */
/* "driver_module.c" */
void sd_modules_drop_ctx_locked(CUcontext ctx);
/* Call a host kernel with its dynamic shared scratch (the lock NOT held);
 * returns its fault or CUDA_SUCCESS. */
CUresult sd_kernel_call(standin_kernel_fn fn, standin_launch *l);

#endif
