/* fp8_formats.c: the operands' fp8 formats under GEMMSHIM_FP8_FORMAT for
 * the recipes that keep no state (current, block, mxfp8; fp8_recipe.h).
 * delayed keeps its formats per site (fp8_sites.c). */
#include <cublasLt.h>

#include "fp8_recipe.h"

/* E4M3 for both operands (E5M2 under GEMMSHIM_FP8_FORMAT=e5m2): the
 * default of torchao's tensorwise recipe (torchao/float8/config.py,
 * CastConfig) and of TE's Float8BlockScaling and MXFP8BlockScaling
 * (transformer_engine/common/recipe/__init__.py). Under hybrid, TE's
 * Format.HYBRID, which all three TE recipes accept (E4M3 in the forward
 * pass, E5M2 in the backward pass): a GEMM on PyTorch's autograd thread is
 * a backward one, and both of nn.Linear's backward GEMMs reach cuBLAS with
 * grad_output as B (dgrad dX^T = W^T-as-stored x dY^T: A = W, B = dY;
 * wgrad dW^T = X^T x dY: A = X, B = dY; TE's linear.py passes grad_output
 * second to both), so B is E5M2 there. Not a (T,N) GEMM there: that is
 * nn.Linear's forward layout, which activation checkpointing recomputes
 * on the autograd thread, and its B is an activation. Elsewhere, and
 * where no autograd thread has been seen, E4M3 (docs/fp8.md, "`current`:
 * what it does and costs").
 * E4M3 x E5M2 is a pair cuBLASLt's fp8 GEMM takes under every scale mode
 * used here; E5M2 x E5M2 it refuses (TE's
 * tests/pytorch/test_float8_blockwise_gemm_exact.py runs both mixed pairs
 * block-scaled and skips only E5M2 x E5M2). */
const char *fp8_recipe_formats(const gs_call *c, int fmt[2], int gradient[2]) {
  const int tn = c->g.transa != CUBLAS_OP_N && c->g.transb == CUBLAS_OP_N;
  const int hybrid = gs_opt.fp8_format == GS_FP8_FORMAT_HYBRID, backward = hybrid && !tn && fp8_thread_backward();
  for (int i = 0; i < 2; i++) {
    gradient[i] = backward && i == 1;
    fmt[i] = gs_opt.fp8_format == GS_FP8_FORMAT_E5M2 || gradient[i] ? GS_FP8_E5M2 : GS_FP8_E4M3;
  }
  return hybrid && !backward && !fp8_autograd_seen() ? FP8_HYBRID_UNTOLD : NULL;
}
