/* memory.h: transient device memory for the routes (memory.c). */
#ifndef GEMMSHIM_MEMORY_H
#define GEMMSHIM_MEMORY_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "../shim.h"

typedef struct gs_transient {
  CUdeviceptr ptr;
  size_t bytes;
  void *stream;
  int pooled;  /* 1: from the shim's pool, freed stream-ordered on release */
  void *slot;  /* scratch fallback: the locked slot, unlocked on release */
} gs_transient;

/* Why a routed call runs native during graph capture. Its transient
 * buffers would be memory alloc/free nodes (or scratch shared with eager
 * work), and a graph with memory nodes cannot be cloned, used as a child
 * graph (XLA's command buffers do both) or instantiated twice (cuda.h,
 * cuGraphAddMemAllocNode). */
#define GS_CAPTURE_DECLINE \
  "stream is being captured (a graph holding the call's buffers could not be cloned, used as a child or instantiated twice)"

/* NULL when c's stream is not being captured; GS_CAPTURE_DECLINE when it
 * is (an invalidated capture is still a capture); else why it cannot be
 * told. A route asks once, before it touches any state of its own. */
const char *transient_capture_why(const gs_call *c);
/* bytes of device memory usable on c's stream until transient_release.
 * NULL on success, else why not (nothing to release then). Only after
 * transient_capture_why said NULL for c. */
const char *transient_alloc(gs_call *c, size_t bytes, gs_transient *t);
/* Enqueue the free after everything enqueued so far on the stream. */
void transient_release(gs_transient *t);
/* cuMemAlloc / cuMemFree in the current context for memory the shim keeps
 * outside any stream (fp8 rings, cuBLASLt workspaces, scratch buffers),
 * made in relaxed capture mode so that another thread's global-mode capture
 * is neither refused nor invalidated by them. *mode_failed (alloc): 1 when
 * the switch to relaxed mode failed, nothing allocated. */
CUresult mem_alloc_relaxed(CUdeviceptr *p, size_t bytes, int *mode_failed);
CUresult mem_free_relaxed(CUdeviceptr p);
/* The calling thread's number, from 1, never reused (a finished thread's
 * per-thread default stream may still be running its last work): what
 * names CU_STREAM_PER_THREAD apart in each thread. */
uint64_t shim_thread_number(void);
/* One sub-buffer of a route's transient allocation: d0 x d1 x d2 elements
 * of elem bytes (any dimension 0: none). */
typedef struct transient_part {
  int64_t d0, d1, d2;
  size_t elem;
} transient_part;
/* The one size check of every route, before anything is allocated: n
 * parts laid out in one allocation, each 256-byte aligned (what cuBLAS
 * wants of its operands), every product and sum checked. NULL with
 * offsets[0..n) and *bytes set, or too_big (the route's "needs more
 * transient memory than GEMMSHIM_<ROUTE>_MAX_BYTES") when the total is over
 * cap or does not fit the arithmetic at all (a batch of 2^40 members of
 * 2048 x 2048: no device has that memory, and a wrapped product would
 * look small). */
const char *transient_plan(const transient_part *parts, int n, uint64_t cap, const char *too_big, size_t *offsets,
                           size_t *bytes);

#endif
