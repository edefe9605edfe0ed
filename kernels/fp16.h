/* fp16.h: the fp16 route's kernels (fp16.cu, fp16_kernels.h) seen from the
 * host: their launchers (fp16_launch.c). The caller passes what a launch
 * needs (context, stream, the device's compute capability); the launchers
 * know nothing of the call that asked.
 *
 * Every launcher checks its arguments before any driver call (bad ones:
 * CUDA_ERROR_INVALID_VALUE; a device below sm_70, which has no fp16 tensor
 * cores and does not load these kernels: CUDA_ERROR_NOT_SUPPORTED), is
 * stream-ordered, never synchronises, and returns the driver's CUresult.
 * The driver must be resolved (the route's kernels_ready). Matrices are
 * column-major; sizes and strides in elements; types cudaDataType_t. */
#ifndef GEMMSHIM_FP16_H
#define GEMMSHIM_FP16_H

#include <cuda.h>
#include <stdint.h>

#include "fp16_kernels.h"
#include "kernels.h"

/* Where the work goes: ctx must be the stream's context; sm its device's
 * compute capability, major*10 + minor. */
typedef struct fp16_launch {
  kernel_ctx *kc; /* the call's context (kernels.h) */
  CUstream stream;
  int sm;
} fp16_launch;

/* NULL when l's context has the fp16 kernels (the modules are loaded on
 * first use), else why not (static string): a device below sm_70, or the
 * module's load failing (module.h: the file is optional, so the other
 * kernels load without it). */
const char *fp16_kernels_ready(const fp16_launch *l);

/* One bf16 operand, rows x cols per member: member b at src + b*stride
 * (stride 0: one matrix for every member), or, with src_array, at the
 * device pointer src[b]. Its fp16 copy goes to dst, dense (ld = rows,
 * members rows*cols apart), batch members of it. */
typedef struct fp16_operand {
  const void *src;
  int src_array;
  int64_t ld, stride;
  int64_t rows, cols, batch;
  void *dst;
} fp16_operand;

/* Device memory fp16_scale_operands needs besides the scales: the partial
 * maxima. */
#define FP16_SCRATCH_BYTES ((uint64_t)2 * GS_FP16_PARTIALS * sizeof(uint32_t))

/* A and B measured, their shifts and the call's record written to
 * *scales, and their fp16 copies made: two launches (gs_fp16_amax,
 * gs_fp16_cast). alpha and beta are host floats, or with device_scalars
 * device pointers read by the kernel; direct: the GEMM will take
 * scales->alpha_eff as its alpha (fp16_kernels.h). */
CUresult fp16_scale_operands(const fp16_launch *l, const fp16_operand *a, const fp16_operand *b,
                             uint32_t *scratch, gs_fp16_scales *scales, const void *alpha, const void *beta,
                             int device_scalars, int direct);

/* The caller's D from the scaled fp32 product t (m x n x batch, ld m,
 * members m*n apart): unscaled by scales' shifts, then alpha * t + beta *
 * C (C not read where beta is 0), the epilogue (cublasLtEpilogue_t
 * DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS; -1 for none) with a bias
 * of m per member, bias_stride apart, and D's type (bf16 or fp32). C and D
 * may be the same matrix, and either pointer arrays (c_array, d_array). */
typedef struct fp16_output {
  const float *t;
  const gs_fp16_scales *scales;
  const void *alpha, *beta;
  int device_scalars;
  int c_type, c_array;
  const void *c;
  int64_t ldc, stride_c;
  int d_type, d_array;
  void *d;
  int64_t ldd, stride_d;
  int64_t m, n, batch;
  int epilogue, bias_type;
  const void *bias;
  int64_t bias_stride;
} fp16_output;

CUresult fp16_write_output(const fp16_launch *l, const fp16_output *o);

/* ---- for tests ------------------------------------------------------------------ */
/* The argument blocks and grids the launchers would use: CUDA_SUCCESS, or
 * what the launcher would return without launching. */
CUresult fp16_plan_scale(const fp16_operand *a, const fp16_operand *b, uint32_t *scratch, gs_fp16_scales *scales,
                         const void *alpha, const void *beta, int device_scalars, int direct,
                         gs_fp16_amax_args *amax, unsigned amax_grid[3], gs_fp16_cast_args *cast,
                         unsigned cast_grid[3]);
CUresult fp16_plan_output(const fp16_output *o, gs_fp16_out_args *out, unsigned grid[3]);

#endif
