/* gemm_ref.c: the CPU GEMM core (see gemm_ref.h for the numerics).
 *
 * Each batch member first expands op(A) (m x k) and op(B)^T (n x k) into
 * contiguous fp32 (or fp64) rows, converting and rounding every input once,
 * so the inner loop is a plain dot product whatever the types, orders and
 * transposes. */
#include "gemm_ref.h"

#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "numerics.h"
#include "scale_modes.h"

size_t sg_type_size(cudaDataType_t t) {
  switch (t) {
  case CUDA_R_64F: return 8;
  case CUDA_R_32F: return 4;
  case CUDA_R_16F:
  case CUDA_R_16BF: return 2;
  case CUDA_R_8F_E4M3:
  case CUDA_R_8F_E5M2: return 1;
  default: return 0;
  }
}

int sg_is_fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

cudaDataType_t sg_scale_type(cublasComputeType_t compute) {
  switch (compute) {
  case CUBLAS_COMPUTE_16F:
  case CUBLAS_COMPUTE_16F_PEDANTIC: return CUDA_R_16F;
  case CUBLAS_COMPUTE_64F:
  case CUBLAS_COMPUTE_64F_PEDANTIC: return CUDA_R_64F;
  default: return CUDA_R_32F;
  }
}

cublasStatus_t sg_check_types(cublasComputeType_t compute, cudaDataType_t scale,
                              cudaDataType_t atype, cudaDataType_t btype,
                              cudaDataType_t ctype, int allow_fp8) {
  int ok = 0;
  switch (compute) {
  case CUBLAS_COMPUTE_16F:
  case CUBLAS_COMPUTE_16F_PEDANTIC:
    ok = scale == CUDA_R_16F && atype == CUDA_R_16F && btype == CUDA_R_16F && ctype == CUDA_R_16F;
    break;
  case CUBLAS_COMPUTE_32F:
  case CUBLAS_COMPUTE_32F_PEDANTIC:
    if (scale != CUDA_R_32F) break;
    if (atype == CUDA_R_32F) ok = btype == CUDA_R_32F && ctype == CUDA_R_32F;
    else if (atype == CUDA_R_16F || atype == CUDA_R_16BF)
      ok = btype == atype && (ctype == atype || ctype == CUDA_R_32F);
    else if (sg_is_fp8(atype) && allow_fp8 && compute == CUBLAS_COMPUTE_32F)
      ok = sg_is_fp8(btype) && !(atype == CUDA_R_8F_E5M2 && btype == CUDA_R_8F_E5M2) &&
           (ctype == CUDA_R_16BF || ctype == CUDA_R_16F || ctype == CUDA_R_32F);
    break;
  case CUBLAS_COMPUTE_32F_FAST_TF32:
  case CUBLAS_COMPUTE_32F_FAST_16BF:
  case CUBLAS_COMPUTE_32F_FAST_16F:
    ok = scale == CUDA_R_32F && atype == CUDA_R_32F && btype == CUDA_R_32F && ctype == CUDA_R_32F;
    break;
  case CUBLAS_COMPUTE_64F:
  case CUBLAS_COMPUTE_64F_PEDANTIC:
    ok = scale == CUDA_R_64F && atype == CUDA_R_64F && btype == CUDA_R_64F && ctype == CUDA_R_64F;
    break;
  default:
    break;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

double sg_read_scalar(const void *p, cudaDataType_t t) {
  switch (t) {
  case CUDA_R_64F: return *(const double *)p;
  case CUDA_R_16F: return sn_f16_to_f32(*(const uint16_t *)p);
  case CUDA_R_16BF: return sn_bf16_to_f32(*(const uint16_t *)p);
  default: return *(const float *)p;
  }
}

static float sg_load_f32(const void *base, cudaDataType_t t, int64_t i) {
  switch (t) {
  case CUDA_R_32F: return ((const float *)base)[i];
  case CUDA_R_16F: return sn_f16_to_f32(((const uint16_t *)base)[i]);
  case CUDA_R_16BF: return sn_bf16_to_f32(((const uint16_t *)base)[i]);
  case CUDA_R_8F_E4M3: return sn_e4m3_to_f32(((const uint8_t *)base)[i]);
  case CUDA_R_8F_E5M2: return sn_e5m2_to_f32(((const uint8_t *)base)[i]);
  default: return (float)((const double *)base)[i];
  }
}

static void sg_store_f32(void *base, cudaDataType_t t, int64_t i, float v) {
  switch (t) {
  case CUDA_R_16F: ((uint16_t *)base)[i] = sn_f32_to_f16(v); break;
  case CUDA_R_16BF: ((uint16_t *)base)[i] = sn_f32_to_bf16(v); break;
  default: ((float *)base)[i] = v; break;
  }
}

/* Offset of element (r, c) of an operand. */
static int64_t sg_index(const sg_matrix *x, int64_t r, int64_t c) {
  return x->order == CUBLASLT_ORDER_ROW ? r * x->ld + c : r + c * x->ld;
}

static const void *sg_member(const sg_matrix *x, int64_t b) {
  int64_t off = x->batch_count == 1 ? 0 : b * x->stride;
  return (const char *)x->ptr + off * (int64_t)sg_type_size(x->type);
}

static float sg_round_input(cublasComputeType_t compute, float v) {
  switch (compute) {
  case CUBLAS_COMPUTE_32F_FAST_TF32: return sn_round_tf32(v);
  case CUBLAS_COMPUTE_32F_FAST_16BF: return sn_round_bf16(v);
  case CUBLAS_COMPUTE_32F_FAST_16F: return sn_round_f16(v);
  default: return v;
  }
}

/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the form cuBLASLt uses. */
static float sg_gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

static float sg_epilogue(const sg_problem *p, int64_t b, int64_t i, float v) {
  int e = p->epilogue;
  if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
      e == CUBLASLT_EPILOGUE_GELU_BIAS) {
    const void *bias = (const char *)p->bias +
                       b * p->bias_batch_stride * (int64_t)sg_type_size(p->bias_type);
    v += sg_load_f32(bias, p->bias_type, i);
  }
  if (e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS) v = fmaxf(v, 0.0f);
  if (e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS) v = sg_gelu(v);
  return v;
}

static int sg_gemm_f32(const sg_problem *p) {
  int64_t m = p->m, n = p->n, k = p->k;
  float *ao = malloc((size_t)(m * k + n * k + 1) * sizeof(float));
  if (!ao) return -1;
  float *bo = ao + m * k;
  int fp8 = sg_is_fp8(p->a.type);
  float ab_scale = fp8 ? (float)p->alpha * p->scale_a * p->scale_b : (float)p->alpha;
  float beta = (float)p->beta;
  float amax = 0.0f;
  for (int64_t b = 0; b < p->batch; b++) {
    const void *A = sg_member(&p->a, b), *B = sg_member(&p->b, b), *C = sg_member(&p->c, b);
    void *D = (void *)sg_member(&p->d, b);
    for (int64_t i = 0; i < m; i++)
      for (int64_t q = 0; q < k; q++) {
        int64_t idx = p->transa == CUBLAS_OP_N ? sg_index(&p->a, i, q) : sg_index(&p->a, q, i);
        ao[i * k + q] = sg_round_input(p->compute, sg_load_f32(A, p->a.type, idx));
        if (p->a_scale_mode)
          ao[i * k + q] *= sm_scale_at(p->a_scale_mode, p->a_scales, m, k, i, q);
      }
    for (int64_t j = 0; j < n; j++)
      for (int64_t q = 0; q < k; q++) {
        int64_t idx = p->transb == CUBLAS_OP_N ? sg_index(&p->b, q, j) : sg_index(&p->b, j, q);
        bo[j * k + q] = sg_round_input(p->compute, sg_load_f32(B, p->b.type, idx));
        if (p->b_scale_mode)
          bo[j * k + q] *= sm_scale_at(p->b_scale_mode, p->b_scales, n, k, j, q);
      }
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        const float *x = ao + i * k, *y = bo + j * k;
        float acc = 0.0f;
        for (int64_t q = 0; q < k; q++) acc += x[q] * y[q];
        float v = ab_scale * acc;
        if (beta != 0.0f) v += beta * sg_load_f32(C, p->c.type, sg_index(&p->c, i, j));
        v = sg_epilogue(p, b, i, v);
        if (p->amax_d) amax = fmaxf(amax, fabsf(v));
        sg_store_f32(D, p->d.type, sg_index(&p->d, i, j), v);
      }
  }
  if (p->amax_d) *p->amax_d = amax;
  free(ao);
  return 0;
}

static int sg_gemm_f64(const sg_problem *p) {
  int64_t m = p->m, n = p->n, k = p->k;
  double *ao = malloc((size_t)(m * k + n * k + 1) * sizeof(double));
  if (!ao) return -1;
  double *bo = ao + m * k;
  for (int64_t b = 0; b < p->batch; b++) {
    const double *A = sg_member(&p->a, b), *B = sg_member(&p->b, b), *C = sg_member(&p->c, b);
    double *D = (double *)sg_member(&p->d, b);
    for (int64_t i = 0; i < m; i++)
      for (int64_t q = 0; q < k; q++)
        ao[i * k + q] = A[p->transa == CUBLAS_OP_N ? sg_index(&p->a, i, q) : sg_index(&p->a, q, i)];
    for (int64_t j = 0; j < n; j++)
      for (int64_t q = 0; q < k; q++)
        bo[j * k + q] = B[p->transb == CUBLAS_OP_N ? sg_index(&p->b, q, j) : sg_index(&p->b, j, q)];
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        double acc = 0.0;
        for (int64_t q = 0; q < k; q++) acc += ao[i * k + q] * bo[j * k + q];
        double v = p->alpha * acc;
        if (p->beta != 0.0) v += p->beta * C[sg_index(&p->c, i, j)];
        if (p->epilogue == CUBLASLT_EPILOGUE_BIAS || p->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
            p->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS)
          v += ((const double *)p->bias)[b * p->bias_batch_stride + i];
        if (p->epilogue == CUBLASLT_EPILOGUE_RELU || p->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS)
          v = fmax(v, 0.0);
        if (p->epilogue == CUBLASLT_EPILOGUE_GELU || p->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS)
          v = 0.5 * v * (1.0 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)));
        D[sg_index(&p->d, i, j)] = v;
      }
  }
  free(ao);
  return 0;
}

int sg_has_fp16_tensor_cores(int major, int minor) {
  (void)minor;
  return major >= 7;
}

int sg_on_fp16_tensor_cores(const sg_problem *p, int major, int minor) {
  if (!sg_has_fp16_tensor_cores(major, minor)) return 0;
  if (p->a.type == CUDA_R_16F && p->b.type == CUDA_R_16F)
    return p->compute == CUBLAS_COMPUTE_32F || p->compute == CUBLAS_COMPUTE_16F;
  return p->a.type == CUDA_R_32F && p->compute == CUBLAS_COMPUTE_32F_FAST_16F;
}

int sg_gemm(const sg_problem *p) {
  if (p->m == 0 || p->n == 0 || p->batch == 0) return 0;
  standin_trace("gemm %lldx%lldx%lld batch %lld", (long long)p->m, (long long)p->n, (long long)p->k,
                (long long)p->batch);
  cuStandinGemmRan((p->a.type == CUDA_R_8F_E4M3 || p->a.type == CUDA_R_8F_E5M2) &&
                   (p->b.type == CUDA_R_8F_E4M3 || p->b.type == CUDA_R_8F_E5M2));
  return p->d.type == CUDA_R_64F ? sg_gemm_f64(p) : sg_gemm_f32(p);
}
