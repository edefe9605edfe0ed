/* fp8_stats.c: the fp8 statistics of a compared call (GEMMSHIM_COMPARE):
 * per operand, its amax, the step it was quantized with, and how many of
 * its elements saturated and flushed to zero (for the block-scaled
 * recipes also the worst block of each), counted by the quantize kernels
 * (kernels/fp8_stats.h) into counters in the call's transient memory.
 *
 * Only calls compare_decide picks are counted: the others pass NULL to
 * the kernels and pay nothing but a uniform branch. The counters are
 * zeroed on the call's stream before the quantize launch, and copied
 * after the GEMM into a page-locked slot (the accuracy measure's pool,
 * accuracy_read.c) while the transient memory is still the call's; the
 * log's writer reads the slot once the call's last event has completed
 * (gpu_time_resolve), as it reads the accuracy figures: the calling
 * thread never waits. docs/log-format.md, "fp8 statistics". */
#include <stdint.h>
#include <string.h>

#include "../../kernels/fp8_stats.h"
#include "../accuracy_read.h"
#include "fp8_stats.h"
#include "../base/sys.h"

size_t fp8_stats_bytes(void) { return gs_opt.compare ? sizeof(gs_fp8_stats) : 0; }

void *fp8_stats_begin(gs_call *c, CUdeviceptr dev) {
  if (!gs_opt.compare || !dev || !c->gpu.on || !compare_decide(c)) return NULL;
  const char *why = NULL;
  gs_compare_slot *slot = accuracy_slot_take(c->ctx, c->gpu.ctx_id, &why);
  if (!slot) {
    call_note(c, "fp8 statistics not counted: %s", why);
    return NULL;
  }
  if (!gs_sys.cuMemsetD8Async) { /* an old driver: optional in the call table (fp8_ring.c) */
    call_note(c, "fp8 statistics not counted: the driver has no cuMemsetD8Async");
    accuracy_slot_give(c->gpu.ctx_id, slot);
    return NULL;
  }
  CUresult r = GS_CALL(cuMemsetD8Async, dev, 0, sizeof(gs_fp8_stats), (CUstream)c->g.stream);
  if (r != CUDA_SUCCESS) {
    call_note(c, "fp8 statistics not counted: cuMemsetD8Async failed (CUresult %d)", (int)r);
    accuracy_slot_give(c->gpu.ctx_id, slot);
    return NULL;
  }
  return slot;
}

void fp8_stats_abandon(gs_call *c, void *slot) {
  if (slot) accuracy_slot_give(c->gpu.ctx_id, slot);
}

void fp8_stats_finish(gs_call *c, CUdeviceptr dev, void *slot, uint64_t a_elems, uint64_t b_elems, int blocks) {
  if (!slot) return;
  if (!c->gpu.on) { /* its events were given up: nobody would read the slot */
    accuracy_slot_give(c->gpu.ctx_id, slot);
    return;
  }
  CUresult r = !gs_sys.cuMemcpyDtoHAsync_v2
                   ? CUDA_ERROR_NOT_FOUND
                   : GS_CALL(cuMemcpyDtoHAsync_v2, slot, dev, sizeof(gs_fp8_stats), (CUstream)c->g.stream);
  if (r != CUDA_SUCCESS) {
    if (!gs_sys.cuMemcpyDtoHAsync_v2)
      call_note(c, "fp8 statistics not read: the driver has no cuMemcpyDtoHAsync");
    else
      call_note(c, "fp8 statistics not read: cuMemcpyDtoHAsync failed (CUresult %d)", (int)r);
    accuracy_slot_give(c->gpu.ctx_id, slot);
    return;
  }
  c->gpu.fp8[0].elems = a_elems;
  c->gpu.fp8[1].elems = b_elems;
  c->gpu.fp8_blocks = (uint8_t)(blocks != 0);
  c->gpu.fp8_slot = slot;
}
