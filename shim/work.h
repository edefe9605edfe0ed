/* work.h: the stretch of a call that issues its device work (work.c),
 * inline because every call passes here and most pay only a test. */
#ifndef GEMMSHIM_WORK_H
#define GEMMSHIM_WORK_H

#include "shim.h"

/* "work.c": the call's device work starts now, on `route` (a route calls
 * it before its first launch, the hook before the native call; only the
 * first call counts): opens the call's NVTX range and starts its GPU time.
 * call_work_end, as the call returns, ends both. gs_work_hooks: either is
 * on (work_init, at load); without, a call pays a test of it. */
extern int gs_work_hooks;
void work_init(void);
void call_work_hooks(gs_call *c, gs_route route);
void call_work_hooks_end(gs_call *c);
static inline void call_work_begin(gs_call *c, gs_route route) {
  if (c->work_begun) return;
  c->work_begun = 1;
  c->gpu.on = 0;
  if (gs_work_hooks) call_work_hooks(c, route);
}
/* A route declined (the call runs native next): if it had begun its
 * work, the GEMM it marked for its kernels' share is not the call's. */
static inline void call_work_declined(gs_call *c) {
  if (c->work_begun && c->gpu.on) gpu_time_unmark_gemm(c);
}
static inline void call_work_end(gs_call *c) {
  if (c->work_begun && gs_work_hooks) call_work_hooks_end(c);
}
#endif
