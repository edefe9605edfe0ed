/* accuracy.c: how far a compared call's route output is from the native
 * one (GEMMSHIM_COMPARE), measured on the device.
 *
 * compare.c runs the GEMM natively into scratch memory after the route;
 * then, on the same stream, the accuracy kernels (kernels/accuracy.cu)
 * reduce both outputs to one gs_acc_stats, which is copied into a slot of
 * page-locked host memory (so the copy is asynchronous), and the event
 * ACC_END is recorded after it. The log's writer reads the slot once that
 * event has completed (gpu_time_resolve): the calling thread never waits.
 *
 * The slots and what the log makes of them: accuracy_read.c. What the log
 * gets of the statistics, and its edge cases: docs/log-format.md,
 * "Accuracy of compared calls". */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "../kernels/accuracy_kernels.h"
#include "accuracy_read.h"
#include "shim.h"
#include "base/sys.h"

/* ---- the measure --------------------------------------------------------- */
const char *accuracy_plan(const gs_call *c, accuracy_output *o) {
  const gs_gemm *g = &c->g;
  const int lt = g->api == GS_API_LT_MATMUL;
  o->type = lt ? g->d_type : g->c_type;
  if (o->type != CUDA_R_32F && o->type != CUDA_R_16BF && o->type != CUDA_R_16F)
    return "output type the accuracy measure does not read";
  /* The native run reads the caller's C: once the route has written D over
   * it (in place), that run is not the call's GEMM any more. */
  const int beta_read = g->pointer_mode != CUBLAS_POINTER_MODE_HOST || !g->beta ||
                        (g->scale_type == CUDA_R_64F ? *(const double *)g->beta != 0.0
                                                     : *(const float *)g->beta != 0.0f);
  if (beta_read && (!lt || g->C == g->D)) return "C is read (beta may be nonzero) and the route wrote over it";
  o->route = g->D;
  o->ld = lt ? g->ldd : g->ldc;
  o->stride = g->batch > 1 ? (lt ? g->stride_d : g->stride_c) : 0;
  const int row_major = lt && g->order_d == CUBLASLT_ORDER_ROW;
  o->rows = row_major ? g->n : g->m;
  o->cols = row_major ? g->m : g->n;
  o->batch = g->batch;
  return NULL;
}

size_t accuracy_scratch_bytes(void) {
  return ((sizeof(gs_acc_partial) * GS_ACC_PARTIALS + 255) & ~(size_t)255) + sizeof(gs_acc_stats);
}

void accuracy_measure(gs_call *c, const accuracy_output *o, const void *native, void *scratch) {
  gs_gpu_time *t = &c->gpu;
  const char *why = NULL;
  gs_compare_slot *taken = accuracy_slot_take(c->ctx, t->ctx_id, &why);
  if (!taken) {
    call_note(c, "accuracy not measured: %s", why);
    return;
  }
  gs_acc_stats *slot = &taken->acc;
  gs_acc_partial *partials = scratch;
  gs_acc_stats *dev = (gs_acc_stats *)(void *)((char *)scratch + ((sizeof(gs_acc_partial) * GS_ACC_PARTIALS + 255) &
                                                                  ~(size_t)255));
  kernel_ctx kc = route_kernel_ctx(c);
  CUresult r = kernel_accuracy(&kc, (CUstream)c->g.stream, o->type, o->route, native, o->ld, o->stride, o->rows,
                               o->cols, o->batch, partials, dev);
  if (r != CUDA_SUCCESS) {
    call_note(c, "accuracy not measured: kernel launch failed (CUresult %d)", (int)r);
    accuracy_slot_give(t->ctx_id, slot);
    return;
  }
  if (!gs_sys.cuMemcpyDtoHAsync_v2) {
    call_note(c, "accuracy not measured: the driver has no cuMemcpyDtoHAsync");
    accuracy_slot_give(t->ctx_id, slot);
    return;
  }
  r = GS_CALL(cuMemcpyDtoHAsync_v2, slot, (CUdeviceptr)(uintptr_t)dev, sizeof *slot, (CUstream)c->g.stream);
  if (r != CUDA_SUCCESS) {
    call_note(c, "accuracy not measured: cuMemcpyDtoHAsync failed (CUresult %d)", (int)r);
    accuracy_slot_give(t->ctx_id, slot);
    return;
  }
  gpu_time_mark(c, GS_GPU_EV_ACC_END);
  if (!c->gpu.on || !c->gpu.ev[GS_GPU_EV_ACC_END]) {
    /* No event to say when the copy is done: the slot may still be written
     * (the stream runs on), so it is not reused. */
    return;
  }
  t->acc_slot = slot;
}

