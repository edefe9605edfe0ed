/* fp8_recipe.h: the fp8 route's scaling recipes (GEMMSHIM_FP8_RECIPE),
 * one file each, in one table (fp8_recipes.c).
 *
 * The route (fp8.c) asks fp8_recipe_choose which recipe a call runs: the
 * one asked for, or, where the GPU or the loaded cuBLAS cannot run it, the
 * next one down (mxfp8 -> block -> current), with each reason. It then
 * lends the recipe scratch device memory in the call's transient buffer,
 * lets it acquire its scales (fp8_scales), quantizes A and B with them,
 * runs the GEMM with the scale pointers they name, and releases.
 * Recipes and their sources: docs/fp8.md, "Recipes". */
#ifndef GEMMSHIM_FP8_RECIPE_H
#define GEMMSHIM_FP8_RECIPE_H

#include <stddef.h>

#include "../../kernels/fp8.h"
#include "../../kernels/kernels.h"
#include "../shim.h"
#include "fp8_sites.h"

/* One call's scales, as a recipe's acquire fills them. */
typedef struct fp8_scales {
  int fmt[2];           /* GS_FP8_E4M3 / GS_FP8_E5M2 of A and B */
  int gradient[2];      /* the recipe took this operand for a gradient */
  gs_fp8_ring *ring[2]; /* device: the quantize kernels' rings */
  int parity;           /* quantize and multiply with ring[i]->scale[parity] */
  int needs_amax_init;  /* run the amax pass before the quantize pass */
  int per_call;         /* the scales live in this call's transient memory:
                         * their pointers change from call to call */
  int forward;          /* the GEMM is known to compute a forward output */
  const char *note;     /* extra words for the call's reason, or NULL */
  fp8_use use;          /* delayed: the held site */
} fp8_scales;

typedef struct fp8_recipe {
  const char *name;
  int next;             /* gs_fp8_recipe to fall back to; AUTO: none */
  /* Why call c's GPU or loaded cuBLAS cannot run this recipe, or NULL.
   * buf (len bytes) may hold the text. */
  const char *(*unfit)(const gs_call *c, char *buf, size_t len);
  /* Device bytes the recipe needs in the call's transient buffer. */
  size_t scratch_bytes;
  /* Fill *s for call c with scratch (scratch_bytes, 256-byte aligned) on
   * c's stream, c's context current. NULL, or why the call runs native
   * (nothing held then). */
  const char *(*acquire)(gs_call *c, CUdeviceptr scratch, fp8_scales *s);
  /* End the call: ran is what ran (FP8_RAN_*). */
  void (*release)(fp8_scales *s, unsigned ran);
} fp8_recipe;

extern const fp8_recipe fp8_recipe_current, fp8_recipe_delayed;

/* The recipe call c runs (a gs_fp8_recipe, never AUTO) under
 * GEMMSHIM_FP8_RECIPE. Where that is not the one asked for (AUTO resolved
 * aside), why[0..len) says why, "" otherwise. */
int fp8_recipe_choose(const gs_call *c, char *why, size_t len);
const fp8_recipe *fp8_recipe_get(int recipe);

#endif
