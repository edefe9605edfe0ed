/* fp8_recipes.c: the table of fp8 scaling recipes and the choice of one
 * per call (fp8_recipe.h).
 *
 * block (fp8_block.c) and mxfp8 (fp8_mx.c) say themselves where the GPU
 * and the loaded cuBLAS run them (cuBLAS documentation, "Narrow precision
 * data types usage"); elsewhere they fall back to the next recipe with
 * that said. current and delayed run everywhere the fp8 route does. */
#include <cublasLt.h>
#include <stdint.h>
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


static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }
static int64_t out_size(int t) { return t == CUDA_R_32F ? 4 : 2; }

int fp8_lt_c_d_aligned(const gs_gemm *g) {
  const int64_t es = out_size(g->d_type);
  return aligned16(g->C) && aligned16(g->D) && (g->ldc * es) % 16 == 0 && (g->ldd * es) % 16 == 0 &&
         (g->batch == 1 || ((g->stride_c * es) % 16 == 0 && (g->stride_d * es) % 16 == 0));
}

void fp8_recipe_out(const gs_call *c, const fp8_recipe *rc, fp8_out *o) {
  const gs_gemm *g = &c->g;
  const int lt_path = cost_gate_applies(c, GS_ROUTE_FP8);
  /* Padding m needs one A8 member (the quantize kernels' batch stride is
   * m x k), scale tensors that do not change with m (not block's VEC128,
   * whose layout has m for its stride) and no bias (cuBLASLt would read
   * m_pad elements of the caller's). */
  const int bias = g->api == GS_API_LT_MATMUL && g->epilogue > 0 && (g->epilogue & CUBLASLT_EPILOGUE_BIAS);
  const int pad_m = lt_path && g->m % 8 && g->batch == 1 && !bias && rc != &fp8_recipe_block;
  o->m_pad = pad_m ? (g->m + 7) / 8 * 8 : g->m;
  o->out_t = lt_path && (pad_m || !fp8_lt_c_d_aligned(g));
  o->cast_c = o->out_t && route_beta_may_be_nonzero(g);
  o->ld_t = (o->m_pad + 3) / 4 * 4;
}

const char *fp8_recipe_gate(const gs_call *c, const fp8_recipe *rc, const fp8_out *o, char *why) {
  const gs_gemm *g = &c->g;
  /* D' out: read 4 bytes, write D's; C in: read C's, write 4. */
  const double mn = (double)g->m * (double)g->n * (double)g->batch;
  const double out_bytes = (o->out_t ? (4.0 + (double)out_size(g->d_type)) * mn : 0) +
                           (o->cast_c ? ((double)out_size(g->c_type) + 4.0) * mn : 0);
  /* The current recipe pays an amax pass, the others quantize in one
   * (block and mxfp8 one launch per operand). */
  return cost_gate_fp8(c, (double)g->m * (double)g->k * (double)g->batch, (double)g->k * (double)g->n * (double)g->batch,
                       rc == &fp8_recipe_current   ? GS_COST_FP8_CURRENT
                       : rc == &fp8_recipe_delayed ? GS_COST_FP8_ONE_PASS
                                                   : GS_COST_FP8_BLOCK,
                       out_bytes, o->out_t + o->cast_c, why);
}

size_t fp8_recipe_scratch(const fp8_recipe *rc, const gs_call *c) {
  return rc->scratch ? rc->scratch(c) : rc->scratch_bytes;
}
