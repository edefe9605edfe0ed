/* graph_mem.c: device memory for routed calls captured into CUDA graphs.
 *
 * A captured call's buffers must outlive the capture and serve every
 * replay, of the graph and of its clones, child-graph copies and
 * instantiations, and go back when the last of them is gone. Memory
 * alloc/free nodes cannot do that: "The graph cannot be cloned", "can only
 * be used in a child node if the ownership is moved to the parent", "Only
 * one instantiation of the graph may exist at any point in time" (cuda.h,
 * cuGraphAddMemAllocNode). So each captured call gets its buffer from
 * cuMemAlloc, made in relaxed capture mode (mem_relaxed.c:
 * not a node, and no capture is invalidated by it), and hands its one
 * reference to a user object owning the buffer to the graph being captured
 * (cuStreamGetCaptureInfo's graph_out, cuGraphRetainUserObject with
 * CU_GRAPH_USER_OBJECT_MOVE). Clones, child nodes and executable graphs
 * hold references of their own (CUDA C++ Programming Guide, "CUDA User
 * Objects"); the destructor runs when the last one goes.
 *
 * "Destructor callbacks cannot make CUDA API calls" (cuda.h,
 * cuUserObjectCreate): the destructor only pushes the buffer on a
 * lock-free list; the shim frees what is there at its next routed call
 * whose stream is not being captured, and at exit, in relaxed capture
 * mode. Never in a captured call: cudaFree "may perform implicit
 * synchronization" for memory not from the stream-ordered allocator (CUDA
 * Runtime API, cudaFree), and a synchronisation during capture can
 * invalidate it; a buffer a failed captured call made waits on the list
 * too. A buffer whose context is gone (or reset: another id) went with it
 * and is only forgotten.
 *
 * GEMMSHIM_GRAPH_MAX_BYTES bounds what captured calls' buffers hold in
 * all, until they are freed; a call that would pass it runs native, with
 * the figures. Sharing between replays: docs/graphs.md. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph_mem.h"
#include "mem_relaxed.h"
#include "../shim.h"
#include "../base/sys.h"

typedef struct graph_buf {
  CUdeviceptr ptr;
  size_t bytes;
  void *ctx;
  unsigned long long ctx_id;
  struct graph_buf *next;
} graph_buf;

static _Atomic(graph_buf *) released; /* destructors' list, newest first */
static _Atomic uint64_t held;         /* bytes of buffers not yet freed */
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

/* The user object's destructor, on the driver's thread: no CUDA, no lock. */
static void graph_buf_released(void *p) {
  graph_buf *b = p;
  graph_buf *head = atomic_load_explicit(&released, memory_order_relaxed);
  do b->next = head;
  while (!atomic_compare_exchange_weak_explicit(&released, &head, b, memory_order_release, memory_order_relaxed));
}

/* Free b's memory in its context, if that still lives: the context's id
 * is asked first (as gpu_time.c asks of its events' contexts), so a
 * destroyed or reset context is never made current. */
static void graph_buf_unmap(const graph_buf *b) {
  if (!b->ptr) return;
  unsigned long long id = 0;
  if (b->ctx_id && gs_sys.cuCtxGetId &&
      (GS_CALL(cuCtxGetId, (CUcontext)b->ctx, &id) != CUDA_SUCCESS || id != b->ctx_id))
    return; /* the memory went with its context */
  if (GS_CALL(cuCtxPushCurrent_v2, (CUcontext)b->ctx) != CUDA_SUCCESS) return;
  if (mem_free_relaxed(b->ptr) != CUDA_SUCCESS)
    GS_WARN("cuMemFree of a CUDA graph's released buffer (%zu bytes) failed; it stays allocated", b->bytes);
  CUcontext popped;
  GS_CALL(cuCtxPopCurrent_v2, &popped);
}

static void graph_buf_free(graph_buf *b) {
  graph_buf_unmap(b);
  atomic_fetch_sub_explicit(&held, b->bytes, memory_order_relaxed);
  free(b);
}

/* Leave b for the next reclaim (as its destructor would). */
static void graph_buf_defer(graph_buf *b) { graph_buf_released(b); }

void graph_mem_reclaim(const gs_call *c) {
  if (c && c->captured) return;
  if (!atomic_load_explicit(&released, memory_order_relaxed)) return;
  graph_buf *b = atomic_exchange_explicit(&released, NULL, memory_order_acquire);
  while (b) {
    graph_buf *next = b->next;
    graph_buf_free(b);
    b = next;
  }
}

/* At exit, on the exiting thread with cancellation off (cancel.c): what
 * graphs destroyed by then gave back. Graphs still alive keep theirs. */
static void reclaim_at_exit(void) {
  cancel_enter();
  graph_mem_reclaim(NULL);
  cancel_leave();
}

static void register_exit(void) { atexit(reclaim_at_exit); }

/* A forked child has no CUDA context of its parent's: nothing to free. */
static void after_fork_child(void) {
  atomic_store(&released, NULL);
  atomic_store(&held, 0);
}

__attribute__((constructor)) static void graph_mem_register_fork(void) {
  pthread_atfork(NULL, NULL, after_fork_child);
}

uint64_t graph_mem_held(void) { return atomic_load_explicit(&held, memory_order_relaxed); }

const char *graph_mem_alloc(gs_call *c, size_t bytes, CUdeviceptr *ptr) {
  static __thread char why[256] __attribute__((tls_model("initial-exec")));
  if (!gs_sys.cuStreamGetCaptureInfo_v2 || !gs_sys.cuUserObjectCreate || !gs_sys.cuGraphRetainUserObject ||
      !gs_sys.cuUserObjectRelease)
    return "the driver has no user objects (cuUserObjectCreate) to tie the call's buffers to the graph";
  uint64_t before = atomic_fetch_add_explicit(&held, bytes, memory_order_relaxed);
  if (before + bytes < before || before + bytes > gs_opt.graph_max_bytes) {
    atomic_fetch_sub_explicit(&held, bytes, memory_order_relaxed);
    snprintf(why, sizeof why,
             "CUDA graphs' buffers would pass GEMMSHIM_GRAPH_MAX_BYTES=%llu (they hold %llu, this call needs %zu)",
             (unsigned long long)gs_opt.graph_max_bytes, (unsigned long long)before, bytes);
    return why;
  }
  const char *fail = NULL;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = NULL;
  graph_buf *b = NULL;
  if (GS_CALL(cuStreamGetCaptureInfo_v2, (CUstream)c->g.stream, &status, NULL, &graph, NULL, NULL) != CUDA_SUCCESS)
    fail = "cuStreamGetCaptureInfo failed";
  else if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || !graph)
    fail = GS_CAPTURE_INVALIDATED;
  else if (!(b = GS_CALL(malloc, sizeof *b)))
    fail = "out of host memory for the graph buffer's record";
  if (fail) {
    atomic_fetch_sub_explicit(&held, bytes, memory_order_relaxed);
    return fail;
  }
  b->ptr = 0;
  b->bytes = bytes;
  b->ctx = c->ctx;
  b->ctx_id = c->ctx_id;
  b->next = NULL;
  int mode_failed = 0;
  CUresult r = GS_CALL(cuCtxPushCurrent_v2, (CUcontext)c->ctx);
  if (r != CUDA_SUCCESS) {
    fail = "cuCtxPushCurrent failed before allocating the graph's buffer";
  } else {
    r = mem_alloc_relaxed(&b->ptr, bytes, &mode_failed);
    CUcontext popped;
    GS_CALL(cuCtxPopCurrent_v2, &popped);
    if (mode_failed) fail = "cuThreadExchangeStreamCaptureMode failed before allocating the graph's buffer";
    else if (r == CUDA_ERROR_OUT_OF_MEMORY) fail = "cuMemAlloc: out of device memory for the graph's buffer";
    else if (r != CUDA_SUCCESS) fail = "cuMemAlloc of the graph's buffer failed";
  }
  if (fail) {
    b->ptr = 0;
    graph_buf_free(b);
    return fail;
  }
  CUuserObject obj;
  if (GS_CALL(cuUserObjectCreate, &obj, b, graph_buf_released, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) !=
      CUDA_SUCCESS) {
    graph_buf_defer(b);
    return "cuUserObjectCreate failed";
  }
  if (GS_CALL(cuGraphRetainUserObject, graph, obj, 1, CU_GRAPH_USER_OBJECT_MOVE) != CUDA_SUCCESS) {
    /* Ours alone still: releasing it hands the buffer to the destructor.
     * If even that fails, the object (a few bytes) is kept with an empty
     * record, never destroyed, and a copy of the record goes on the list
     * (freed here only if the copy cannot be made). */
    if (GS_CALL(cuUserObjectRelease, obj, 1) != CUDA_SUCCESS) {
      graph_buf *copy = GS_CALL(malloc, sizeof *copy);
      if (copy) {
        *copy = *b;
        graph_buf_defer(copy);
      } else {
        graph_buf_unmap(b);
        atomic_fetch_sub_explicit(&held, bytes, memory_order_relaxed);
      }
      b->ptr = 0;
      b->bytes = 0;
    }
    return "cuGraphRetainUserObject failed";
  }
  pthread_once(&exit_once, register_exit);
  *ptr = b->ptr;
  return NULL;
}
