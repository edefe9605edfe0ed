/* scale_modes.c: cuBLASLt block-scaling modes (see scale_modes.h). */
#include "scale_modes.h"

#include <math.h>

#include "gemm_ref.h"

#define SM_VEC32 CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0
#define SM_VEC128 CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
#define SM_BLK128 CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F

static int64_t sm_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int sm_is_block(int32_t mode) { return mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F; }

static int sm_is_hopper_block(int32_t mode) { return mode == SM_VEC128 || mode == SM_BLK128; }

int sm_check_modes(int32_t amode, int32_t bmode, int64_t m, int64_t n) {
  if (amode < 0 || amode >= CUBLASLT_MATMUL_MATRIX_SCALE_END || bmode < 0 ||
      bmode >= CUBLASLT_MATMUL_MATRIX_SCALE_END)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (amode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && bmode == amode) return CUBLAS_STATUS_SUCCESS;
  if (amode == SM_VEC32 && bmode == SM_VEC32) return CUBLAS_STATUS_SUCCESS;
  if (sm_is_hopper_block(amode) && sm_is_hopper_block(bmode)) {
    if (amode == SM_BLK128 && bmode == SM_BLK128) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m % 4 || n % 4) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* 1x128 scales on B with n % 8: TransformerEngine observed cuBLASLt
     * refuse them (transformer_engine/common/gemm/cublaslt_gemm.cu, "Outer
     * dimension requirement on B"); taken as a refusal here. */
    if (bmode == SM_VEC128 && n % 8) return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
  }
  /* A per-tensor scale with a block one: INVALID_VALUE from the heuristic
   * (measured: SCALAR_32F x VEC128_32F, cuBLAS 13.1 on an H200,
   * docs/gpu-results.md). */
  if ((amode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && sm_is_hopper_block(bmode)) ||
      (bmode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && sm_is_hopper_block(amode)))
    return CUBLAS_STATUS_INVALID_VALUE;
  /* OUTER_VEC, NVFP4's VEC16 (fp4 only), other pairs */
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

int sm_check_device(int32_t amode, int32_t bmode, int cc, int cublas_version) {
  (void)bmode;
  /* VEC32_UE8M0 from cuBLAS 12.8 (the first with Blackwell), VEC128/BLK128
   * from 12.9 (cuBLAS documentation, "Narrow precision data types usage";
   * NVIDIA's cuBLAS 12.9 blog post). */
  if (amode == SM_VEC32)
    return cc >= 100 && cublas_version >= 120800 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
  if (sm_is_hopper_block(amode))
    return cc == 90 && cublas_version >= 120900 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

static int64_t sm_blk_ld(int64_t k) { return sm_cdiv(sm_cdiv(k, 128), 4) * 4; }

size_t sm_scale_bytes(int32_t mode, int64_t outer, int64_t k) {
  switch (mode) {
  case SM_VEC128: return (size_t)(outer * sm_cdiv(k, 128)) * sizeof(float);
  case SM_BLK128: return (size_t)(sm_cdiv(outer, 128) * sm_blk_ld(k)) * sizeof(float);
  case SM_VEC32: return (size_t)(sm_cdiv(outer, 128) * sm_cdiv(sm_cdiv(k, 32), 4)) * 512;
  default: return sizeof(float);
  }
}

float sm_e8m0_to_f32(uint8_t e) { return e == 0xff ? NAN : ldexpf(1.0f, (int)e - 127); }

float sm_scale_at(int32_t mode, const void *scales, int64_t outer, int64_t k, int64_t r, int64_t q) {
  const float *f = scales;
  switch (mode) {
  case SM_VEC128: return f[r + (q / 128) * outer];
  case SM_BLK128: return f[q / 128 + (r / 128) * sm_blk_ld(k)];
  case SM_VEC32: {
    int64_t kb = q / 32, tiles_k = sm_cdiv(sm_cdiv(k, 32), 4);
    int64_t off = ((r / 128) * tiles_k + kb / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + kb % 4;
    return sm_e8m0_to_f32(((const uint8_t *)scales)[off]);
  }
  default: return *f;
  }
}
