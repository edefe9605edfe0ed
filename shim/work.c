/* work.c: the stretch of a call during which its device work is issued,
 * from the route's first launch (or the native call) to the call's return:
 * what the call's NVTX range (nvtx.c) encloses and its GPU time
 * (gpu_time.c) measures. */
#include "shim.h"
#include "work.h"

int gs_work_hooks;

void work_init(void) { gs_work_hooks = gs_nvtx_on || gpu_time_wanted(); }

void call_work_hooks(gs_call *c, gs_route route) {
  if (gs_nvtx_on) nvtx_call_begin(c, route);
  if (gpu_time_wanted()) gpu_time_begin(c);
}

void call_work_hooks_end(gs_call *c) {
  if (c->gpu.on) gpu_time_end(c);
  if (c->nvtx_open) nvtx_call_end(c);
}
