/* fp16_kernels.h: what the fp16 route's kernels (fp16.cu) and their
 * launchers (fp16_launch.c) share: the argument blocks, the record of one
 * call's scales, and the list of kernels. C and C++.
 *
 * The route multiplies bf16 A and B on fp16 tensor cores. Each operand is
 * scaled by a power of two, 2^shift, chosen from its own amax so that its
 * largest finite magnitude lands in [2^15, 2^16): inside fp16's range
 * (65504) and at its top. A bf16 value has 8 significant bits, fp16 11, so
 * every value the scale brings to 2^-14 or above converts exactly; only
 * values more than about 2^32 below the operand's largest lose bits (and
 * below about 2^-40 of it they become 0). Three kernels a call:
 *
 *   gs_fp16_amax  the largest finite |x| of A and of B, as partial maxima,
 *                 one per block (no atomics, so nothing to zero first);
 *   gs_fp16_cast  every block folds the partials (a few KiB, from L2) into
 *                 the two shifts; block 0 writes the call's gs_fp16_scales;
 *                 then A and B are scaled and written in fp16;
 *   gs_fp16_out   (when the GEMM wrote a transient fp32 product) the
 *                 caller's D: the product unscaled exactly, then alpha,
 *                 beta * C, bias, relu/gelu, in D's type.
 *
 * Work is numbered in groups of GS_FP16_VEC consecutive rows of one column,
 * column by column, batch member by member (gs_fp16_span); a group whose
 * column starts at a multiple of 4 elements moves as one vector access. */
#ifndef GEMMSHIM_FP16_KERNELS_H
#define GEMMSHIM_FP16_KERNELS_H

#include <stdint.h>

#include "cast.h"

#define GS_FP16_THREADS 256
#define GS_FP16_VEC 4
/* Partial maxima per operand: the amax grid's x extent at most. */
#define GS_FP16_PARTIALS 256
/* The cast kernel's grid at most (it loops): each block folds the partials
 * once, so fewer, longer-lived blocks read them less. */
#define GS_FP16_CAST_BLOCKS 1024
/* A scaled operand's largest magnitude lies in [2^15, 2^16). */
#define GS_FP16_TOP_EXPONENT 15

/* The epilogue gs_fp16_out applies (cuBLASLt's, in its order). */
#define GS_FP16_EPI_BIAS 1
#define GS_FP16_EPI_RELU 2
#define GS_FP16_EPI_GELU 4

/* One matrix or batch of them: element (r, c) of member b is at
 * ptr + b*stride + c*ld + r, or with array at ((T *const *)ptr)[b] + c*ld + r
 * (a device array of member pointers, never read on the host). vec: every
 * member's every column starts at a multiple of 4 elements (and ptr is
 * aligned for it), so whole groups move as 4-element vectors. */
typedef struct gs_fp16_matrix {
  const void *ptr;
  int64_t ld, stride;
  int32_t array, vec;
} gs_fp16_matrix;

/* The groups of one matrix: rows x per_member.d columns x members, each
 * column cut into per_col.d groups; the launch's groups first .. first +
 * groups - 1 are this matrix's. */
typedef struct gs_fp16_span {
  int64_t rows, first, groups;
  gs_cast_div per_col, per_member;
} gs_fp16_span;

/* One operand to measure and cast: src in bf16, dst in fp16, dense (ld =
 * rows, members rows*cols apart), dst_vec when its columns start at
 * multiples of 4 elements (rows % 4 == 0). */
typedef struct gs_fp16_operand {
  gs_fp16_matrix src;
  gs_fp16_span span;
  void *dst;
  int32_t dst_vec, reserved;
} gs_fp16_operand;

/* One call's scales, written by gs_fp16_cast's block 0 into the call's
 * transient memory and read by what follows on the stream: A16 = A *
 * 2^shift[0], B16 = B * 2^shift[1]. alpha_eff = alpha * 2^-(shift[0] +
 * shift[1]), exact (a power of two times alpha, kept a normal fp32 where
 * direct), for a GEMM that writes the caller's fp32 D itself; beta, one and
 * zero are there for GEMMs whose scalars must be device pointers. amax: the
 * measured largest finite magnitudes (bf16 values as fp32). */
typedef struct gs_fp16_scales {
  int32_t shift[2];
  float alpha_eff, beta, one, zero;
  float amax[2];
} gs_fp16_scales;

typedef struct gs_fp16_amax_args {
  gs_fp16_operand op[2];
  uint32_t *partials; /* [2][GS_FP16_PARTIALS]: bf16 magnitudes */
  int32_t blocks[2];  /* partials written per operand (the grid's x extent it uses) */
} gs_fp16_amax_args;

typedef struct gs_fp16_cast_args {
  gs_fp16_operand op[2];
  const uint32_t *partials;
  gs_fp16_scales *scales;
  const float *alpha_ptr, *beta_ptr; /* device pointer mode; NULL: alpha, beta */
  float alpha, beta;
  int32_t blocks[2];
  int32_t direct, reserved; /* direct: the GEMM's alpha is alpha_eff */
  int64_t groups;           /* both operands' */
} gs_fp16_cast_args;

typedef struct gs_fp16_out_args {
  const float *t; /* the scaled product, m x n x batch, ld m, members m*n apart */
  const gs_fp16_scales *scales;
  const float *alpha_ptr, *beta_ptr;
  float alpha, beta;
  gs_fp16_matrix c, d; /* d.ptr is written */
  int32_t c_elem, d_elem; /* GS_ELEM_* */
  int32_t read_c, epilogue;
  const void *bias;
  int64_t bias_stride;
  int32_t bias_elem, t_vec; /* t_vec: m % 4 == 0 */
  gs_fp16_span span;        /* D's groups: rows m, n columns, batch members */
} gs_fp16_out_args;

/* X(name, source element) */
#define GS_FP16_KERNELS(X)                                                     \
  X(gs_fp16_amax, GS_ELEM_BF16)                                                \
  X(gs_fp16_cast, GS_ELEM_BF16)                                                \
  X(gs_fp16_out, GS_ELEM_F32)

/* Laid out alike by gcc (launchers), clang (device) and g++ (host kernels). */
#if defined(__cplusplus)
static_assert(sizeof(gs_fp16_operand) == 120, "gs_fp16_operand has padding");
static_assert(sizeof(gs_fp16_cast_args) == 304, "gs_fp16_cast_args has padding");
static_assert(sizeof(gs_fp16_out_args) == 216, "gs_fp16_out_args has padding");
#else
_Static_assert(sizeof(gs_fp16_operand) == 120, "gs_fp16_operand has padding");
_Static_assert(sizeof(gs_fp16_cast_args) == 304, "gs_fp16_cast_args has padding");
_Static_assert(sizeof(gs_fp16_out_args) == 216, "gs_fp16_out_args has padding");
#endif

#endif
