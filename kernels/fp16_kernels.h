/* fp16_kernels.h: what the fp16 route's kernels (fp16.cu) and their
 * launchers (fp16_launch.c) share: the argument blocks, the per-line
 * records, and the list of kernels. C and C++.
 *
 * The route multiplies bf16 A and B on fp16 tensor cores. Every row of
 * op(A) and every column of op(B) (a "line": the k values one dot product
 * takes from that operand) is scaled by its own power of two, 2^shift,
 * chosen from the line's own largest finite magnitude so that it lands in
 * [2^15, 2^16): inside fp16's range (65504) and at its top. A bf16 value
 * has 8 significant bits, fp16 11, so every value the scale brings to
 * 2^-17 or above converts exactly (its lowest bit at or above 2^-24,
 * fp16's smallest subnormal). Three kernels a call:
 *
 *   gs_fp16_amax  one thread per line: its largest finite magnitude,
 *                 whether it holds an Inf or NaN, and whether it is lossy
 *                 (a nonzero value the scale takes below 2^-17), as one
 *                 word;
 *   gs_fp16_cast  A and B scaled line by line and written in fp16; block 0
 *                 also writes the record of device constants (1 and 0);
 *   gs_fp16_out   the caller's D from the fp32 product: each element
 *                 unscaled by its own row's and column's shifts, or, where
 *                 its row or column holds an Inf or NaN, the two amaxes
 *                 could overflow fp32, or a lossy line's loss could reach
 *                 the result's last bit, recomputed in fp32 from the bf16
 *                 operands;
 *                 then alpha, beta * C, bias, relu/gelu, in D's type.
 *
 * The cast and output kernels number their work in groups of GS_FP16_VEC
 * consecutive rows of one column, column by column, batch member by member
 * (gs_fp16_span); a group whose column starts at a multiple of 4 elements
 * moves as one vector access. */
#ifndef GEMMSHIM_FP16_KERNELS_H
#define GEMMSHIM_FP16_KERNELS_H

#include <stdint.h>

#include "cast.h"

#define GS_FP16_THREADS 256
#define GS_FP16_VEC 4
/* The cast kernel's grid at most (it loops). */
#define GS_FP16_CAST_BLOCKS 1024
/* A scaled line's largest magnitude lies in [2^15, 2^16). */
#define GS_FP16_TOP_EXPONENT 15
/* A bf16 value has 8 significant bits; scaled to 2^-17 or above its
 * lowest bit is at least 2^-24, fp16's smallest subnormal, so it converts
 * exactly. One more than 15 + 17 = 32 binades below its line's largest
 * would not, and makes the line lossy. */
#define GS_FP16_EXACT_SPAN 32

/* A line's word (gs_fp16_lines.info): bits 0-14 its largest finite
 * magnitude as bf16 bits (0: none); GS_FP16_NONFINITE when it holds an Inf
 * or NaN (its dot products are always recomputed); GS_FP16_LOSSY when a
 * nonzero value of it lost bits in fp16 (its dot products are recomputed
 * when the loss could reach the result's last bit: docs/fp16.md). */
#define GS_FP16_AMAX_BITS 0x7fffu
#define GS_FP16_NONFINITE 0x10000u
#define GS_FP16_LOSSY 0x20000u

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

/* Device constants for GEMMs whose scalars must be device pointers (the
 * GemmEx family in device pointer mode): written by gs_fp16_cast's block 0
 * into the call's transient memory, read by the GEMM after it. */
typedef struct gs_fp16_record {
  float one, zero;
} gs_fp16_record;

/* The lines of one operand as the caller stores it (bf16): element l of
 * line i of member b at src(b) + i*line_step + l*elem_step, `lines` lines
 * of `length` elements per member, `members` members measured (1 for a
 * strided operand with stride 0). Their words: info[b*lines + i]. by_row:
 * a line is a stored row (line_step 1), else a stored column. */
typedef struct gs_fp16_lines {
  gs_fp16_matrix src;
  int64_t line_step, elem_step;
  int64_t lines, length, members;
  uint32_t *info;
  int32_t by_row, reserved;
} gs_fp16_lines;

typedef struct gs_fp16_amax_args {
  gs_fp16_lines line[2]; /* rows of op(A), columns of op(B) */
  int64_t total;         /* both operands' lines (one thread each) */
} gs_fp16_amax_args;

typedef struct gs_fp16_cast_args {
  gs_fp16_operand op[2];
  gs_fp16_lines line[2]; /* where each element's shift comes from */
  gs_fp16_record *record;
  int64_t groups; /* both operands' */
} gs_fp16_cast_args;

typedef struct gs_fp16_out_args {
  const float *t; /* the scaled product, m x n x batch, ld m, members m*n apart */
  gs_fp16_lines line[2]; /* for the shifts, the flags and the recomputation */
  const float *alpha_ptr, *beta_ptr;
  float alpha, beta;
  gs_fp16_matrix c, d; /* d.ptr is written */
  int32_t c_elem, d_elem; /* GS_ELEM_* */
  int32_t read_c, epilogue;
  const void *bias;
  int64_t bias_stride;
  int32_t bias_elem, t_vec; /* t_vec: m % 4 == 0 */
  int32_t k_log2, reserved; /* ceil(log2 k) */
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
static_assert(sizeof(gs_fp16_lines) == 88, "gs_fp16_lines has padding");
static_assert(sizeof(gs_fp16_amax_args) == 184, "gs_fp16_amax_args has padding");
static_assert(sizeof(gs_fp16_cast_args) == 432, "gs_fp16_cast_args has padding");
static_assert(sizeof(gs_fp16_out_args) == 392, "gs_fp16_out_args has padding");
#else
_Static_assert(sizeof(gs_fp16_operand) == 120, "gs_fp16_operand has padding");
_Static_assert(sizeof(gs_fp16_lines) == 88, "gs_fp16_lines has padding");
_Static_assert(sizeof(gs_fp16_amax_args) == 184, "gs_fp16_amax_args has padding");
_Static_assert(sizeof(gs_fp16_cast_args) == 432, "gs_fp16_cast_args has padding");
_Static_assert(sizeof(gs_fp16_out_args) == 392, "gs_fp16_out_args has padding");
#endif

#endif
