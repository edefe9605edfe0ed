/* fp8_recipes.c: the table of fp8 scaling recipes and the choice of one
 * per call (fp8_recipe.h).
 *
 * block and mxfp8 are in the table with the rules of the GPU and cuBLAS
 * that runs them (cuBLAS documentation, "Narrow precision data types
 * usage": the VEC128_32F and BLK128x128_32F scale modes on compute
 * capability 9.0 from cuBLAS 12.9, VEC32_UE8M0 on 10.0 and newer), but
 * without their quantize kernels yet: they fall back to the next recipe
 * with that said. current and delayed run everywhere the fp8 route does. */
#include <stdio.h>
#include <string.h>

#include "../base/sys.h"
#include "../resolve.h"
#include "fp8_recipe.h"

/* cublasLtGetVersion's number: major * 10000 + minor * 100 + patch
 * (cublasLt.h: CUBLASLT_VERSION from CUBLAS_VER_*). */
#define CUBLAS_12_9 120900

static const char *block_unfit(const gs_call *c, char *buf, size_t len) {
  if (c->sm != 90) {
    snprintf(buf, len, "block needs sm_90 (cuBLASLt's 1x128/128x128 scale modes), device is sm_%d", c->sm);
    return buf;
  }
  /* Resolving cublasLtMatmul loads cuBLASLt's other entries (resolve.c). */
  if (!resolve_hooked(GS_SYS_cublasLtMatmul) || !gs_sys.cublasLtGetVersion) return "block needs cuBLAS 12.9 or newer, and cublasLtGetVersion was not found";
  size_t v = GS_CALL(cublasLtGetVersion);
  if (v == 0) return "block needs cuBLAS 12.9 or newer, and cublasLtGetVersion returned 0";
  if (v < CUBLAS_12_9) {
    snprintf(buf, len, "block needs cuBLAS 12.9 or newer, the loaded cuBLASLt is %zu.%zu.%zu", v / 10000,
             v / 100 % 100, v % 100);
    return buf;
  }
  return "block's quantize kernels (1x128 and 128x128 scales) are not in this build";
}

static const char *mxfp8_unfit(const gs_call *c, char *buf, size_t len) {
  if (c->sm < 100) {
    snprintf(buf, len, "mxfp8 needs sm_100 or newer (cuBLASLt's VEC32_UE8M0 scale mode), device is sm_%d", c->sm);
    return buf;
  }
  return "mxfp8's quantize kernels (32-element blocks, E8M0 scales) are not in this build";
}

static const fp8_recipe recipe_block = {"block", GS_FP8_RECIPE_CURRENT, block_unfit, 0, NULL, NULL};
static const fp8_recipe recipe_mxfp8 = {"mxfp8", GS_FP8_RECIPE_BLOCK, mxfp8_unfit, 0, NULL, NULL};

static const fp8_recipe *const table[GS_FP8_RECIPES] = {
    [GS_FP8_RECIPE_CURRENT] = &fp8_recipe_current,
    [GS_FP8_RECIPE_BLOCK] = &recipe_block,
    [GS_FP8_RECIPE_MXFP8] = &recipe_mxfp8,
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
