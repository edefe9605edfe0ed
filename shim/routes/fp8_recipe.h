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
  uint32_t *partial[2]; /* device, the current recipe's per-block amax slots
                         * (GS_FP8_CUR_SLOTS words each): its write-only
                         * passes (fp8_current_amax/_quantize) in place of the
                         * ring kernels; NULL for the ring recipes */
  int forward;          /* the GEMM is known to compute a forward output */
  const char *note;     /* extra words for the call's reason, or NULL */
  fp8_use use;          /* delayed: the held site */
  /* Block-scaled recipes (block, mxfp8; fp8_scaled.c): no rings. The
   * recipe's quantize writes A8/B8 k_pad columns wide and a scale tensor
   * per operand, read by cuBLASLt in scale_mode[i]
   * (cublasLtMatmulMatrixScale_t). */
  int scaled;
  int32_t scale_mode[2];
  CUdeviceptr scales[2];
  int64_t k_pad;
  /* Set by the route after acquire: a compared call's device counters
   * (kernels/fp8_stats.h), which every recipe's quantize passes on; NULL
   * for other calls. */
  struct gs_fp8_stats *stats;
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
  /* k padded with zeros to a multiple of k_align (fp8_recipe_k_pad).
   * Block-scaled recipes only (NULL otherwise): the scratch bytes for call c (replacing
   * scratch_bytes); quantize A and B of c into a8/b8 (k_pad x m and
   * k_pad x n, k contiguous) with the scales acquire placed. */
  int k_align;
  size_t (*scratch)(const gs_call *c);
  CUresult (*quantize)(const gs_call *c, kernel_ctx *kc, const fp8_scales *s, uint8_t *a8, uint8_t *b8);
} fp8_recipe;

extern const fp8_recipe fp8_recipe_current, fp8_recipe_delayed, fp8_recipe_block, fp8_recipe_mxfp8;

/* Whether call c's fp8 GEMM is cuBLASLt's: sm_89+ with no own kernel
 * named (the own kernels are slower than native bf16 there, docs/fp8.md).
 * The cost gate applies to exactly these calls (cost_gate_applies). */
static inline int fp8_lt_path(const gs_call *c) {
  return c->sm >= 89 && gs_opt.fp8_backend != GS_FP8_BACKEND_OWN && gs_opt.fp8_backend != GS_FP8_BACKEND_OWN_MMA;
}

/* cuBLASLt's fp8 GEMM: k a multiple of 16 (16-byte leading dimensions of
 * the TN operands, cuBLAS documentation, cublasLtMatmul). */
#define FP8_LT_K_ALIGN 16

/* k as recipe rc lays the fp8 operands out: g->k rounded up to k_align
 * where cuBLASLt's fp8 GEMM reads them (sm_89+, no own kernel asked for);
 * the own kernels take k as it is. */
static inline int64_t fp8_recipe_k_pad(const fp8_recipe *rc, const gs_call *c) {
  const int64_t a = rc->k_align > 1 && fp8_lt_path(c) ? rc->k_align : 1;
  return (c->g.k + a - 1) / a * a;
}
/* Where cuBLASLt's fp8 GEMM cannot write the caller's C/D as given, the
 * route has it write an fp32 transient D' (16-byte aligned, ld_t) and casts
 * D' into D after, C widened into D' first when beta may be nonzero
 * (cast_c); m is rounded up to 8 in A8 and D' where cuBLASLt refuses m % 8
 * (docs/fp8.md, "Transient output"). */
typedef struct fp8_out {
  int64_t m_pad; /* m as cuBLASLt sees it */
  int64_t ld_t;  /* D''s leading dimension */
  int out_t, cast_c;
} fp8_out;
/* C and D as cuBLASLt's fp8 GEMM takes them: 16-byte aligned pointers,
 * leading dimensions and batch strides. */
int fp8_lt_c_d_aligned(const gs_gemm *g);
/* The output layout of call c under recipe rc (no D' off cuBLASLt's path). */
void fp8_recipe_out(const gs_call *c, const fp8_recipe *rc, fp8_out *o);
/* The cost gate (cost.h) for call c under recipe rc with output layout o:
 * its passes and launches over A (m x k) and B (k x n), every batch member,
 * and D''s copies; NULL when fp8 pays, else why (GS_COST_WHY bytes). Also
 * `gemmshim policy explain`'s. */
const char *fp8_recipe_gate(const gs_call *c, const fp8_recipe *rc, const fp8_out *o, char *why);
/* The scratch bytes rc needs for call c. */
size_t fp8_recipe_scratch(const fp8_recipe *rc, const gs_call *c);

/* The formats of call c's operands under the per-call recipes (current,
 * block, mxfp8) and GEMMSHIM_FP8_FORMAT: fmt[i] and whether operand i is
 * taken for a gradient. NULL, or a note for the call's reason (hybrid
 * asked for where backward GEMMs cannot be told apart yet). The hybrid
 * rule: fp8_formats.c. */
#define FP8_HYBRID_UNTOLD "hybrid asked for, but no autograd thread has been seen to tell backward GEMMs apart: e4m3 for both"
const char *fp8_recipe_formats(const gs_call *c, int fmt[2], int gradient[2]);

/* The recipe call c runs (a gs_fp8_recipe, never AUTO) under
 * GEMMSHIM_FP8_RECIPE. Where that is not the one asked for (AUTO resolved
 * aside), why[0..len) says why, "" otherwise. */
int fp8_recipe_choose(const gs_call *c, char *why, size_t len);
const fp8_recipe *fp8_recipe_get(int recipe);

#endif
