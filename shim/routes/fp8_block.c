/* fp8_block.c: the block recipe, DeepSeek-V3's fine-grained scaling
 * (arXiv 2412.19437, sec. 3.3) as TransformerEngine's Float8BlockScaling
 * runs it: 1 x 128 scales along k for activations and gradients, 128 x 128
 * for weights, fp32 powers of two, each from its own block's amax in this
 * call. cuBLASLt reads them in the VEC128_32F and BLK128x128_32F scale
 * modes, on compute capability 9.0 from cuBLAS 12.9 (cuBLAS documentation,
 * "Narrow precision data types usage"), never 128 x 128 on both operands.
 * No state outlives the call.
 *
 * Which operand is a weight: the shim is not told. It takes A for one
 * only when the GEMM is known to be a forward one (fp8_thread_forward:
 * PyTorch's autograd thread has been seen and this is another thread)
 * and A is transposed: nn.Linear's forward, y = x W^T, reaches cuBLAS as
 * (T, N) with A = W (docs/fp8.md, "block"). Every other call gets 1 x 128
 * on both operands, which is always valid, only finer for a weight. */
#include <stdio.h>

#include "fp8_scaled.h"

#define CUBLAS_12_9 120900 /* cublasLtGetVersion's number (fp8_scaled.h) */

static int64_t k_pad(const gs_call *c) { return fp8_recipe_k_pad(&fp8_recipe_block, c); }

static const char *block_unfit(const gs_call *c, char *buf, size_t len) {
  if (c->sm != 90) {
    snprintf(buf, len, "block needs sm_90 (cuBLASLt's 1x128/128x128 scale modes), device is sm_%d", c->sm);
    return buf;
  }
  const char *old_lt = fp8_scaled_cublas_before(CUBLAS_12_9, "block needs cuBLAS 12.9 or newer", buf, len);
  if (old_lt) return old_lt;
  /* VEC128/BLK128 need M and N multiples of 4 (an H200 refused n = 258,
   * docs/gpu-results.md): refused here, the call goes to the next recipe
   * before anything is quantized. */
  if (c->g.m % 4 || c->g.n % 4) {
    snprintf(buf, len, "block needs m and n multiples of 4 (cuBLASLt's 1x128/128x128 scale modes), the call is %lldx%lld",
             (long long)c->g.m, (long long)c->g.n);
    return buf;
  }
  /* cuBLASLt's fp8 GEMM refuses m % 8 (an H200 refused m = 100 and 260,
   * docs/gpu-results.md); current pads m in its output, block cannot (its
   * 1x128 scale layout has m for its stride): the next recipe takes it. */
  if (c->g.m % 8) {
    snprintf(buf, len, "block needs m a multiple of 8 (cuBLASLt's fp8 GEMM; its 1x128 scales cannot be padded in m), the call has m = %lld",
             (long long)c->g.m);
    return buf;
  }
  /* 1x128 scales on B (always, here) need n a multiple of 8: what
   * TransformerEngine observed of cuBLASLt (transformer_engine/common/gemm/
   * cublaslt_gemm.cu, "Outer dimension requirement on B for
   * NVTE_BLOCK_SCALING GEMM"); no GPU of ours has run n = 12 yet. */
  if (c->g.n % 8) {
    snprintf(buf, len, "block needs n a multiple of 8 (cuBLASLt's 1x128 scales on B), the call has n = %lld",
             (long long)c->g.n);
    return buf;
  }
  /* TransformerEngine runs block-scaled GEMMs with the DEFAULT, BIAS and
   * DGELU epilogues only, "the available and tested cuBLAS functionality
   * for float8 block scaled GEMM" (cublaslt_gemm.cu). Of those the fp8
   * route takes (route_check_lt), RELU and GELU forms go to a recipe
   * cuBLASLt runs them with; an epilogue no recipe takes is declined
   * as such, not blamed on this one. */
  const int epi = c->g.api == GS_API_LT_MATMUL ? c->g.epilogue : CUBLASLT_EPILOGUE_DEFAULT;
  if (epi == CUBLASLT_EPILOGUE_RELU || epi == CUBLASLT_EPILOGUE_RELU_BIAS || epi == CUBLASLT_EPILOGUE_GELU ||
      epi == CUBLASLT_EPILOGUE_GELU_BIAS) {
    snprintf(buf, len,
             "block takes no %s epilogue (TransformerEngine runs block-scaled GEMMs with DEFAULT, BIAS and DGELU "
             "only)",
             gs_epilogue_name(epi));
    return buf;
  }
  return fp8_scaled_unfit(c, "block");
}

static size_t block_scratch(const gs_call *c) { return fp8_scaled_scratch(c, k_pad(c), 0); }

static const char *block_acquire(gs_call *c, CUdeviceptr scratch, fp8_scales *s) {
  const char *loaded = fp8_scaled_loaded(c);
  if (loaded) return loaded;
  const char *format_note = fp8_recipe_formats(c, s->fmt, s->gradient);
  fp8_scaled_place(c, scratch, k_pad(c), 0, s);
  /* A known forward GEMM tells the weight; fast accumulation is never
   * set: TransformerEngine's Float8BlockScaling requires split
   * accumulation on every GEMM (transformer_engine/common/recipe/
   * __init__.py: "FP8 block scaling requires split accumulation"). */
  const int a_weight = fp8_thread_forward() && c->g.transa != CUBLAS_OP_N;
  s->forward = 0;
  s->scale_mode[0] = a_weight ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  s->scale_mode[1] = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  s->per_call = 1;
  /* A known forward GEMM has told backward ones apart: no format note. */
  s->note = a_weight ? "A: 128x128 blocks (weight), B: 1x128"
            : format_note ? "1x128 blocks on A and B; " FP8_HYBRID_UNTOLD
                          : "1x128 blocks on A and B";
  return NULL;
}

const fp8_recipe fp8_recipe_block = {"block", GS_FP8_RECIPE_CURRENT, block_unfit,   0, block_acquire,
                                     fp8_scaled_release,    FP8_LT_K_ALIGN,     block_scratch, fp8_scaled_quantize_operands};
