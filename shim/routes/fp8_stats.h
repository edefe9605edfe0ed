/* fp8_stats.h: the fp8 statistics of compared calls, the route's side
 * (fp8_stats.c); the writer's side is accuracy_read.c. */
#ifndef GEMMSHIM_ROUTES_FP8_STATS_H
#define GEMMSHIM_ROUTES_FP8_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "../shim.h"

/* Device bytes the counters take in the call's transient memory: 0 unless
 * GEMMSHIM_COMPARE is on. */
size_t fp8_stats_bytes(void);
/* After call_work_begin, before the quantize launch: a page-locked slot
 * when call c is one to compare (its counters at dev zeroed on its
 * stream), else NULL (pass NULL to the kernels). */
void *fp8_stats_begin(gs_call *c, CUdeviceptr dev);
/* The call declined after fp8_stats_begin: the slot back. */
void fp8_stats_abandon(gs_call *c, void *slot);
/* After the GEMM, before the transient memory is released: the counters
 * copied into the slot, which the record's GPU block then owns. blocks:
 * a block-scaled recipe counted (its worst blocks are logged). */
void fp8_stats_finish(gs_call *c, CUdeviceptr dev, void *slot, uint64_t a_elems, uint64_t b_elems, int blocks);

#endif
