/* fp8_current.c: the current recipe. Each operand's scale comes from its
 * own amax in this call (TransformerEngine's Float8CurrentScaling,
 * torchao's tensorwise dynamic scaling): an amax pass, then the quantize
 * pass with the scale it published, both on the call's stream, no host
 * wait. No state outlives the call, so no identity is guessed and no
 * history is shared.
 *
 * The two rings live in the call's transient buffer, made new by memsets
 * (fp8_ring.c) with a history of one entry: the amax pass publishes
 * scale[0] = amax / fp8_max as a step (x8 = x / step, TransformerEngine's
 * scale = fp8_max / amax, transformer_engine/common/recipe/
 * recipe_common.cuh, compute_scale_from_amax): an amax of 0, inf or NaN
 * leaves the step at 1 as TE's scale 1; a step below the kernel's floor is
 * clamped as TE turns an infinite scale into FLT_MAX. Not rounded to a power
 * of two: neither TE's Float8CurrentScaling (QParams power_2_scale False)
 * nor torchao's tensorwise recipe (round_scales_to_power_of_2 False) does
 * by default. The quantize pass's fold into scale[1] is unused.
 *
 * Formats: E4M3 for both operands (E5M2 under GEMMSHIM_FP8_FORMAT=e5m2),
 * torchao's default for input, weight and
 * grad_output alike (torchao/float8/config.py, CastConfig). Under
 * GEMMSHIM_FP8_FORMAT=hybrid, TE's Format.HYBRID (transformer_engine/common/
 * recipe/__init__.py: E4M3 in the forward pass, E5M2 in the backward
 * pass): a GEMM on PyTorch's autograd thread is a backward one, and both
 * of nn.Linear's backward GEMMs reach cuBLAS with grad_output as B (dgrad
 * dX^T = W^T-as-stored x dY^T: A = W, B = dY; wgrad dW^T = X^T x dY: A =
 * X, B = dY; TE's linear.py passes grad_output second to both), so B is
 * E5M2 there; not a (T,N) GEMM there, nn.Linear's forward layout, which
 * activation checkpointing recomputes on the autograd thread. Elsewhere,
 * and where no autograd thread has been seen, E4M3
 * (docs/fp8.md, "Recipes"). */
#include "fp8_recipe.h"
#include "fp8_ring.h"

#include <stdio.h>

#include "../base/sys.h"

/* gs_fp8_ring_bytes(1), rounded up to 16 bytes. */
#define RING_STRIDE ((sizeof(gs_fp8_ring) + sizeof(float) + 15) & ~(size_t)15)

static const char *current_acquire(gs_call *c, CUdeviceptr scratch, fp8_scales *s) {
  CUstream st = (CUstream)c->g.stream;
  if (GS_CALL(cuCtxPushCurrent_v2, (CUcontext)c->ctx) != CUDA_SUCCESS)
    return "cuCtxPushCurrent failed before initialising the call's fp8 scales";
  CUresult r = CUDA_SUCCESS;
  const char *failed = NULL;
  /* A (T,N) GEMM is nn.Linear's forward layout (dgrad is (N,N), wgrad
   * (N,T)): on the autograd thread it is a forward recomputed by
   * torch.utils.checkpoint, whose B is an activation, not a gradient. */
  const int tn = c->g.transa != CUBLAS_OP_N && c->g.transb == CUBLAS_OP_N;
  const int hybrid = gs_opt.fp8_format == GS_FP8_FORMAT_HYBRID, backward = hybrid && !tn && fp8_thread_backward();
  for (int i = 0; i < 2 && r == CUDA_SUCCESS; i++) {
    s->gradient[i] = backward && i == 1;
    s->fmt[i] = gs_opt.fp8_format == GS_FP8_FORMAT_E5M2 || s->gradient[i] ? GS_FP8_E5M2 : GS_FP8_E4M3;
    s->ring[i] = (gs_fp8_ring *)(uintptr_t)(scratch + (CUdeviceptr)(i * RING_STRIDE));
    r = fp8_ring_init(scratch + (CUdeviceptr)(i * RING_STRIDE), s->fmt[i], 1, 0, st, &failed);
  }
  CUcontext popped;
  GS_CALL(cuCtxPopCurrent_v2, &popped);
  if (r != CUDA_SUCCESS) {
    /* Thread-local: the reason is copied before the next call. */
    static __thread char why[96] __attribute__((tls_model("initial-exec")));
    snprintf(why, sizeof why, "could not initialise the call's fp8 scales (%s failed, CUresult %d)", failed, (int)r);
    return why;
  }
  s->parity = 0;
  s->needs_amax_init = 1;
  s->per_call = 1;
  /* Fast accumulation for forward GEMMs only (fp8.c, lt_fp8). */
  s->forward = fp8_thread_forward();
  s->note = hybrid && !backward && !s->forward
                ? "hybrid asked for, but no autograd thread has been seen to tell backward GEMMs apart: e4m3 for both"
                : NULL;
  return NULL;
}

static void current_release(fp8_scales *s, unsigned ran) { (void)s, (void)ran; }

const fp8_recipe fp8_recipe_current = {"current", GS_FP8_RECIPE_AUTO, NULL, 2 * RING_STRIDE, current_acquire,
                                        current_release, FP8_LT_K_ALIGN, NULL, NULL};
