/* memory.h: transient device memory for the routes (memory.c). */
#ifndef GEMMSHIM_MEMORY_H
#define GEMMSHIM_MEMORY_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "../shim.h"
#include "graph_mem.h"
#include "mem_relaxed.h"

typedef struct gs_transient {
  CUdeviceptr ptr;
  size_t bytes;
  void *stream;
  int pooled;  /* 1: from the shim's pool, freed stream-ordered on release */
  void *slot;  /* scratch fallback: the locked slot, unlocked on release */
  int graph;   /* owned by the graph being captured (graph_mem.c): nothing to release */
} gs_transient;

/* NULL when the call may go on: its stream is not being captured, or is
 * (c->captured set: its buffers will be the graph's, graph_mem.c);
 * GS_CAPTURE_INVALIDATED, or why the status cannot be told. A route asks
 * once, before it touches any state of its own. */
const char *transient_capture_why(gs_call *c);
/* bytes of device memory usable on c's stream until transient_release
 * (for a captured call: by every replay of the graph). NULL on success,
 * else why not (nothing to release then). Only after transient_capture_why
 * said NULL for c. */
const char *transient_alloc(gs_call *c, size_t bytes, gs_transient *t);
/* Enqueue the free after everything enqueued so far on the stream. */
void transient_release(gs_transient *t);

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
