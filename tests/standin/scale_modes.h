/* scale_modes.h: cuBLASLt's block-scaling modes for fp8 A/B as the stand-in
 * models them: which mode pairs and devices run, where each operand's scale
 * for (outer row, k) lives in its scale tensor, and how large it is.
 *
 * Sources: cublasLt.h (cublasLtMatmulMatrixScale_t,
 * CUBLASLT_MATMUL_DESC_A/B_SCALE_MODE) and the cuBLAS documentation,
 * "Narrow precision data types usage" and its "1D block scaling factors
 * layout" / "block scaling factors layout" sections:
 *   - VEC128_32F: one fp32 scale per 128 elements along k, stored
 *     outer-major: element (r, kb) at r + kb * outer, outer = M for A, N
 *     for B (a multiple of 4, so each column of scales is 16-byte aligned).
 *   - BLK128x128_32F: one fp32 scale per 128x128 tile, stored k-major:
 *     tile (rb, kb) at kb + rb * roundup(ceil(K/128), 4).
 *     Both only on compute capability 9.0 from cuBLAS 12.9; VEC128xVEC128,
 *     VEC128xBLK and BLKxVEC128 run, BLKxBLK does not; M and N multiples
 *     of 4, and N of 8 where B is VEC128 (TransformerEngine's
 *     cublaslt_gemm.cu checks it: "Outer dimension requirement on B").
 *   - VEC32_UE8M0: one E8M0 scale per 32 elements along k, in 128x4 tiles
 *     of 512 bytes (128 outer rows by 4 k-blocks), tiles ordered k-block
 *     first: byte (r, kb) at ((r/128) * ceil(ceil(K/32)/4) + kb/4) * 512 +
 *     (r%32)*16 + ((r%128)/32)*4 + kb%4; padding rows/blocks zero-filled;
 *     the same layout whatever the operand's transposition. Compute
 *     capability 10.0 and newer; both A and B in this mode.
 * E8M0 (OCP Microscaling Formats spec v1.0, 5.4.1): value 2^(e-127), 0xFF
 * is NaN, no sign, no zero. */
#ifndef STANDIN_SCALE_MODES_H
#define STANDIN_SCALE_MODES_H

#include <stddef.h>
#include <stdint.h>

/* CUBLAS_STATUS_SUCCESS, or NOT_SUPPORTED when the pair (modes of A and B)
 * is not one cuBLASLt runs for fp8 (unknown values are INVALID_VALUE).
 * m, n: D's rows and columns. */
int sm_check_modes(int32_t amode, int32_t bmode, int64_t m, int64_t n);
/* CUBLAS_STATUS_SUCCESS or NOT_SUPPORTED for a pair that passed
 * sm_check_modes, on this device and cuBLAS version. */
int sm_check_device(int32_t amode, int32_t bmode, int cc, int cublas_version);
/* 1 for a mode with a scale tensor (not SCALAR_32F). */
int sm_is_block(int32_t mode);
/* Bytes of the scale tensor of an operand with `outer` rows (M or N). */
size_t sm_scale_bytes(int32_t mode, int64_t outer, int64_t k);
/* The scale of element (r, q) (q along k) of an operand. */
float sm_scale_at(int32_t mode, const void *scales, int64_t outer, int64_t k, int64_t r, int64_t q);
/* OCP MX v1.0 E8M0 decode. */
float sm_e8m0_to_f32(uint8_t e);

#endif
