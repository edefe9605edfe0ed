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

/* One bf16 operand, rows x cols per member as stored: member b at src +
 * b*stride (stride 0: one matrix for every member), or, with src_array, at
 * the device pointer src[b]. Its lines (the rows of op(A), the columns of
 * op(B)) are its stored rows (by_row) or its stored columns; their words
 * go to info (lines x batch uint32), its fp16 copy to dst, dense (ld =
 * rows, members rows*cols apart), batch members of it. */
typedef struct fp16_operand {
  const void *src;
  int src_array;
  int64_t ld, stride;
  int64_t rows, cols, batch;
  void *dst;
  int by_row;
  uint32_t *info;
} fp16_operand;

/* The words of A's and B's lines measured (gs_fp16_amax), then A and B
 * scaled line by line into their fp16 copies, and the record of device
 * constants written (gs_fp16_cast): two launches. A's and B's lines must
 * be as long (k). */
CUresult fp16_scale_operands(const fp16_launch *l, const fp16_operand *a, const fp16_operand *b,
                             gs_fp16_record *record);

/* The caller's D from the scaled fp32 product t (m x n x batch, ld m,
 * members m*n apart) and the operands' words (a and b as given to
 * fp16_scale_operands; their fp16 copies are not read): each element
 * unscaled by its row's and column's shifts, or recomputed from the bf16
 * operands where they say so, then alpha * t + beta * C (C not read where
 * beta is 0), the epilogue (cublasLtEpilogue_t DEFAULT, RELU, BIAS,
 * RELU_BIAS, GELU, GELU_BIAS; -1 for none) with a bias of m per member,
 * bias_stride apart, and D's type (bf16 or fp32). C and D may be the same
 * matrix, and either pointer arrays (c_array, d_array). */
typedef struct fp16_output {
  const float *t;
  const fp16_operand *a, *b;
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
CUresult fp16_plan_scale(const fp16_operand *a, const fp16_operand *b, gs_fp16_record *record,
                         gs_fp16_amax_args *amax, unsigned amax_grid[3], gs_fp16_cast_args *cast,
                         unsigned cast_grid[3]);
CUresult fp16_plan_output(const fp16_output *o, gs_fp16_out_args *out, unsigned grid[3]);

#endif
