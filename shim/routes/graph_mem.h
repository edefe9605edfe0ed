/* graph_mem.h: buffers of routed calls captured into CUDA graphs
 * (graph_mem.c). */
#ifndef GEMMSHIM_GRAPH_MEM_H
#define GEMMSHIM_GRAPH_MEM_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "../shim.h"

/* Why a routed call runs native on a stream whose capture was invalidated
 * (cuStreamEndCapture will give no graph; native cuBLAS returns its own
 * error for work enqueued there). */
#define GS_CAPTURE_INVALIDATED "the stream's capture was invalidated (its graph will not be made)"

/* A buffer of bytes owned by the graph c's stream is capturing into, for
 * every replay of it, its clones and child copies, under
 * GEMMSHIM_GRAPH_MAX_BYTES: NULL with *ptr, or why not (nothing held). */
const char *graph_mem_alloc(gs_call *c, size_t bytes, CUdeviceptr *ptr);
/* Free the buffers of graphs gone since the last call (cheap when none),
 * unless c is a captured call (c->captured): then they wait for a call
 * whose stream is not being captured. c NULL: at exit. */
void graph_mem_reclaim(const gs_call *c);
/* Bytes the graphs' buffers hold, freed or not yet. */
uint64_t graph_mem_held(void);

#endif
