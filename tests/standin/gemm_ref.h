/* gemm_ref.h: the CPU GEMM core behind the stand-in cuBLAS and cuBLASLt.
 *
 *   D = epilogue(alpha * scale_a * scale_b * op(A) op(B) + beta * C + bias)
 *
 * per batch member, for the type combinations sg_check_types accepts.
 * Numerics, chosen to look like a GPU's rather than to be as exact as
 * possible, so tests built on the stand-in need tolerances that also hold
 * on hardware:
 *   - inputs convert exactly to fp32 (fp64 for COMPUTE_64F); the
 *     COMPUTE_32F_FAST_TF32 / _FAST_16BF / _FAST_16F types first round
 *     fp32 inputs to tf32 / bf16 / fp16, the most a GPU is allowed to;
 *   - products accumulate in fp32 (fp64 for COMPUTE_64F) in k order. For
 *     COMPUTE_16F the accumulator is fp32 too, rounded once at the store: a
 *     GPU may accumulate in fp16, so tests must allow for that;
 *   - alpha/beta scaling, bias and activation in fp32; one round-to-
 *     nearest-even conversion to D's type (NaN kept);
 *   - beta == 0 means C is not read, so NaN or garbage in C never leaks.
 */
#ifndef STANDIN_GEMM_REF_H
#define STANDIN_GEMM_REF_H

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <stddef.h>
#include <stdint.h>

/* One operand as stored. */
typedef struct sg_matrix {
  const void *ptr;       /* element (0,0) of batch member 0 */
  cudaDataType_t type;
  int order;             /* CUBLASLT_ORDER_COL or CUBLASLT_ORDER_ROW */
  int64_t rows, cols, ld;
  int64_t batch_count;   /* 1: the same matrix for every member */
  int64_t stride;        /* elements between members */
} sg_matrix;

typedef struct sg_problem {
  int transa, transb;    /* CUBLAS_OP_N, or T/C (the same for real types) */
  int64_t m, n, k, batch;
  sg_matrix a, b, c, d;  /* a/b as stored (before op); c/d are m x n */
  cublasComputeType_t compute;
  double alpha, beta;    /* already read in the scale type */
  cublasLtEpilogue_t epilogue; /* DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS */
  const void *bias;      /* m elements per member */
  cudaDataType_t bias_type;
  int64_t bias_batch_stride;
  float scale_a, scale_b; /* fp8 A/B scales; 1 when not set */
  int32_t a_scale_mode, b_scale_mode; /* cublasLtMatmulMatrixScale_t */
  const void *a_scales, *b_scales; /* scale tensors of block modes (scale_modes.h) */
  float *amax_d;         /* max |D| (after the epilogue), or NULL */
} sg_problem;

/* Bytes per element of a supported type, 0 for anything else. */
size_t sg_type_size(cudaDataType_t t);
int sg_is_fp8(cudaDataType_t t);
/* The scale type a compute type uses (alpha/beta type). */
cudaDataType_t sg_scale_type(cublasComputeType_t compute);
/* CUBLAS_STATUS_SUCCESS when cuBLAS supports this combination of compute,
 * scale and operand types (C and D share ctype), else
 * CUBLAS_STATUS_NOT_SUPPORTED. fp8 inputs are legal only where allow_fp8
 * (cuBLASLt; the caller checks the device and the transposes). */
cublasStatus_t sg_check_types(cublasComputeType_t compute, cudaDataType_t scale,
                              cudaDataType_t atype, cudaDataType_t btype,
                              cudaDataType_t ctype, int allow_fp8);
/* Read one scalar of type `t` as a double (alpha, beta). */
double sg_read_scalar(const void *p, cudaDataType_t t);
/* Compute the whole problem. 0, or -1 when host memory ran out. */
int sg_gemm(const sg_problem *p);
/* 1 when a device of capability major.minor has fp16 tensor cores (mma with
 * fp16 multiplicands and fp32 or fp16 accumulators): compute capability 7.0
 * and newer, per the CUDA C++ Programming Guide's table of features by
 * compute capability (Tensor Cores from Volta, 7.0; Xavier 7.2 and Turing
 * 7.5 included; none on Maxwell 5.x or Pascal 6.x). */
int sg_has_fp16_tensor_cores(int major, int minor);
/* 1 when cuBLAS runs problem p on fp16 tensor cores on such a device: fp16
 * A and B with COMPUTE_32F or COMPUTE_16F, or fp32 A and B with
 * COMPUTE_32F_FAST_16F (inputs rounded to fp16 first). The pedantic compute
 * types ask for "the prescribed precision and standardized arithmetic for
 * all phases of calculations" (cuBLAS documentation, cublasComputeType_t)
 * and are not counted. The numerics are those of every other fp32-compute
 * problem (above): fp16 inputs convert exactly, their products are exact in
 * fp32 (11 x 11 significant bits), and they accumulate in fp32. */
int sg_on_fp16_tensor_cores(const sg_problem *p, int major, int minor);

#endif
