/* fp8_scaled.h: what the block-scaled recipes share (fp8_scaled.c). */
#ifndef GEMMSHIM_FP8_SCALED_H
#define GEMMSHIM_FP8_SCALED_H

#include <cublasLt.h>
#include <stdio.h>

#include "fp8_recipe.h"

/* Bytes of one operand's scale tensor in cuBLASLt scale mode `mode`
 * (cublasLtMatmulMatrixScale_t) for outer x k_pad. */
size_t fp8_scaled_bytes(int32_t mode, int64_t outer, int64_t k_pad);
/* NULL, or why the quantize kernels are not loaded for call c (acquire's
 * reason: the call runs native). */
const char *fp8_scaled_loaded(const gs_call *c);
/* Scratch for both operands' scale tensors (mx: VEC32_UE8M0, else
 * VEC128_32F or BLK128x128_32F), and their places in it. */
size_t fp8_scaled_scratch(const gs_call *c, int64_t k_pad, int mx);
void fp8_scaled_place(const gs_call *c, CUdeviceptr scratch, int64_t k_pad, int mx, fp8_scales *s);
/* Both operands through fp8_scaled_quantize on c's stream, k_pad as
 * fp8_scaled_place set it (a recipe's quantize). */
CUresult fp8_scaled_quantize_operands(const gs_call *c, kernel_ctx *kc, const fp8_scales *s, uint8_t *a8,
                                      uint8_t *b8);
/* A recipe's release: nothing is held past the call. */
void fp8_scaled_release(fp8_scales *s, unsigned ran);
/* Why call c cannot run a block-scaled recipe whatever its GPU, or NULL. */
const char *fp8_scaled_unfit(const gs_call *c, const char *recipe);
/* NULL when the loaded cuBLASLt is at least version `need`
 * (cublasLtGetVersion's number: major * 10000 + minor * 100 + patch,
 * cublasLt.h's CUBLASLT_VERSION), else why not: `what` (e.g. "block needs
 * cuBLAS 12.9 or newer") and the version found, in buf or a static string. */
const char *fp8_scaled_cublas_before(size_t need, const char *what, char *buf, size_t len);

#endif
