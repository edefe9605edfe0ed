/* fp8_current.c: the current recipe. Each operand's scale comes from its
 * own amax in this call (TransformerEngine's Float8CurrentScaling,
 * torchao's tensorwise dynamic scaling): an amax pass, then the quantize
 * pass with the scale it published, both on the call's stream, no host
 * wait. No state outlives the call, so no identity is guessed and no
 * history is shared.
 *
 * Write-only (docs/graphs.md, "Replays, eager calls and a second
 * instantiation"): the amax pass stores each block's amax in its own slot
 * of the call's scratch, and every block of the quantize pass reduces the
 * slots to the step, amax / fp8_max (x8 = x / step, TransformerEngine's
 * scale = fp8_max / amax, transformer_engine/common/recipe/
 * recipe_common.cuh, compute_scale_from_amax); block 0 stores it where the
 * GEMM reads it (a 16-byte record holding scale[0][0] of gs_fp8_ring, the
 * only field used). No memset, atomic or counter: a replay of a captured call
 * writes each byte from the call's inputs alone. An amax of 0, inf or NaN
 * gives the step 1 as TE's scale 1; a step below the kernel's floor is
 * clamped as TE turns an infinite scale into FLT_MAX. Not rounded to a power
 * of two: neither TE's Float8CurrentScaling (QParams power_2_scale False)
 * nor torchao's tensorwise recipe (round_scales_to_power_of_2 False) does
 * by default.
 *
 * Formats: fp8_recipe_formats (fp8_formats.c), TE's Format.HYBRID when
 * asked for. */
#include "fp8_recipe.h"

#include <stddef.h>

#include "../../kernels/fp8_kernels.h"
#include "../base/sys.h"

/* Each operand's step: gs_fp8_ring's scale[0][0], the one field the
 * kernels and the GEMM use (a gs_fp8_ring pointer names it), 16 bytes a
 * record: cuBLASLt's scale pointers stay 16-byte aligned
 * (docs/gpu-results.md). */
#define STEP_STRIDE ((size_t)16)
_Static_assert(offsetof(gs_fp8_ring, scale) == 0, "the step is not at the ring's start");
/* Then each operand's per-block amax slots. */
#define SLOTS_BYTES (GS_FP8_CUR_SLOTS * sizeof(uint32_t))

static const char *current_acquire(gs_call *c, CUdeviceptr scratch, fp8_scales *s) {
  s->note = fp8_recipe_formats(c, s->fmt, s->gradient);
  for (int i = 0; i < 2; i++) {
    s->ring[i] = (gs_fp8_ring *)(uintptr_t)(scratch + (CUdeviceptr)(i * STEP_STRIDE));
    s->partial[i] = (uint32_t *)(uintptr_t)(scratch + (CUdeviceptr)(2 * STEP_STRIDE + i * SLOTS_BYTES));
  }
  s->parity = 0;
  s->needs_amax_init = 1;
  s->per_call = 1;
  /* Fast accumulation for forward GEMMs only (fp8.c, lt_fp8). */
  s->forward = fp8_thread_forward();
  return NULL;
}

static void current_release(fp8_scales *s, unsigned ran) { (void)s, (void)ran; }

const fp8_recipe fp8_recipe_current = {"current", GS_FP8_RECIPE_AUTO, NULL, 2 * (STEP_STRIDE + SLOTS_BYTES),
                                        current_acquire, current_release, FP8_LT_K_ALIGN, NULL, NULL};
