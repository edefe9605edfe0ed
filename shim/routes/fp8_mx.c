/* fp8_mx.c: the mxfp8 recipe, TransformerEngine's MXFP8BlockScaling: one
 * E8M0 scale per 32 consecutive elements along k, E4M3 data, on both
 * operands, each from its own block's amax in this call. cuBLASLt reads
 * the scales in the VEC32_UE8M0 mode (compute capability 10.0 and newer:
 * cuBLAS documentation, "Narrow precision data types usage"), laid out in
 * 128 x 4 tiles. No state outlives the call.
 *
 * Scale rounding: the OCP Microscaling Formats spec v1.0, sec. 6.3, sets
 * the shared exponent to floor(log2(amax)) - emax_elem and lets a block's
 * largest elements saturate to fp8_max: up to 12.5% off for E4M3 (amax /
 * 2^e up to 512, clipped to 448). TransformerEngine rounds the exponent up
 * (float_to_e8m0(amax / max_norm), its MXFP8 documentation): nothing
 * saturates, at the price of up to one bit at the bottom of the block.
 * This recipe runs TE's rule (GS_FP8_BQ_MX32_CEIL): the cuBLASLt MXFP8
 * GEMMs it feeds are TE's, and on the CPU the spec's rule measured 23.1 dB
 * on ffma_client's 64x48x64 GEMM against float64, below torchao's 25 dB,
 * where TE's passes (test_fp8_recipes.py; docs/fp8.md, "mxfp8").
 *
 * k is padded with zeros to a multiple of 32: whole E8M0 blocks, and a
 * multiple of the 16 cuBLASLt's fp8 GEMM needs. */
#include <stdio.h>

#include "fp8_scaled.h"

#define K_ALIGN 32
/* cuBLASLt's VEC32_UE8M0 mode came with cuBLAS 12.8, the first with
 * Blackwell support (CUDA 12.8 release notes, "cuBLAS: Release 12.8").
 * cublasLtGetVersion's number (fp8_scaled.h). */
#define CUBLAS_12_8 120800

static int64_t k_pad(const gs_call *c) { return fp8_recipe_k_pad(&fp8_recipe_mxfp8, c); }

static const char *mxfp8_unfit(const gs_call *c, char *buf, size_t len) {
  if (c->sm < 100) {
    snprintf(buf, len, "mxfp8 needs sm_100 or newer (cuBLASLt's VEC32_UE8M0 scale mode), device is sm_%d", c->sm);
    return buf;
  }
  const char *old_lt = fp8_scaled_cublas_before(CUBLAS_12_8, "mxfp8 needs cuBLAS 12.8 or newer", buf, len);
  if (old_lt) return old_lt;
  return fp8_scaled_unfit(c, "mxfp8");
}

static size_t mxfp8_scratch(const gs_call *c) { return fp8_scaled_scratch(c, k_pad(c), 1); }

static const char *mxfp8_acquire(gs_call *c, CUdeviceptr scratch, fp8_scales *s) {
  const char *loaded = fp8_scaled_loaded(c);
  if (loaded) return loaded;
  const char *format_note = fp8_recipe_formats(c, s->fmt, s->gradient);
  fp8_scaled_place(c, scratch, k_pad(c), 1, s);
  s->scale_mode[0] = s->scale_mode[1] = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
  s->forward = fp8_thread_forward();
  s->per_call = 1;
  s->note = format_note;
  return NULL;
}

const fp8_recipe fp8_recipe_mxfp8 = {"mxfp8", GS_FP8_RECIPE_BLOCK, mxfp8_unfit, 0, mxfp8_acquire, fp8_scaled_release,
                                     K_ALIGN, mxfp8_scratch, fp8_scaled_quantize_operands};
