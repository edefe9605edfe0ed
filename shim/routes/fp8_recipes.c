/* fp8_recipes.c: the table of fp8 scaling recipes and the choice of one
 * per call (fp8_recipe.h).
 *
 * block (fp8_block.c) and mxfp8 (fp8_mx.c) say themselves where the GPU
 * and the loaded cuBLAS run them (cuBLAS documentation, "Narrow precision
 * data types usage"); elsewhere they fall back to the next recipe with
 * that said. current and delayed run everywhere the fp8 route does. */
#include <stdio.h>
#include <string.h>

#include "cost.h"
#include "fp8_recipe.h"

static const fp8_recipe *const table[GS_FP8_RECIPES] = {
    [GS_FP8_RECIPE_CURRENT] = &fp8_recipe_current,
    [GS_FP8_RECIPE_BLOCK] = &fp8_recipe_block,
    [GS_FP8_RECIPE_MXFP8] = &fp8_recipe_mxfp8,
    [GS_FP8_RECIPE_DELAYED] = &fp8_recipe_delayed,
};

const fp8_recipe *fp8_recipe_get(int recipe) {
  return recipe > GS_FP8_RECIPE_AUTO && recipe < GS_FP8_RECIPES ? table[recipe] : NULL;
}

int fp8_recipe_choose(const gs_call *c, char *why, size_t len) {
  int r = gs_opt.fp8_recipe;
  /* auto: MXFP8 where the GPU has it (TransformerEngine's preferred recipe
   * on Blackwell), else current scaling (torchao's default). */
  if (r == GS_FP8_RECIPE_AUTO) r = c->sm >= 100 ? GS_FP8_RECIPE_MXFP8 : GS_FP8_RECIPE_CURRENT;
  size_t n = 0;
  why[0] = 0;
  for (int hops = 0; hops < GS_FP8_RECIPES; hops++) {
    const fp8_recipe *rc = fp8_recipe_get(r);
    char buf[160];
    const char *no = rc->unfit ? rc->unfit(c, buf, sizeof buf) : NULL;
    if (!no && !rc->acquire) no = "not in this build"; /* a table entry without kernels */
    if (!no || rc->next == GS_FP8_RECIPE_AUTO) return r;
    int w = snprintf(why + n, len - n, "%s%s", n ? "; " : "", no);
    if (w > 0) n += (size_t)w < len - n ? (size_t)w : len - n - 1;
    r = rc->next;
  }
  return GS_FP8_RECIPE_CURRENT;
}


const char *fp8_recipe_gate(const gs_call *c, const fp8_recipe *rc, char *why) {
  const gs_gemm *g = &c->g;
  /* The current recipe pays an amax pass, the others quantize in one
   * (block and mxfp8 one launch per operand). */
  return cost_gate_fp8(c, (double)g->m * (double)g->k * (double)g->batch, (double)g->k * (double)g->n * (double)g->batch,
                       rc == &fp8_recipe_current   ? GS_COST_FP8_CURRENT
                       : rc == &fp8_recipe_delayed ? GS_COST_FP8_ONE_PASS
                                                   : GS_COST_FP8_BLOCK,
                       why);
}

size_t fp8_recipe_scratch(const fp8_recipe *rc, const gs_call *c) {
  return rc->scratch ? rc->scratch(c) : rc->scratch_bytes;
}
