/* cast.h: what the cast kernels (cast.cu) and their launchers
 * (cast_launch.c) share: the one argument block every cast kernel takes, and
 * the list of kernels. The list is the only place a kernel is named: cast.cu
 * defines one kernel per entry (and, in the host build, its stand-in entry
 * point), module_launch.c looks each up in the module, cast_launch.c picks one
 * by (source type, destination type). C and C++. */
#ifndef GEMMSHIM_CAST_H
#define GEMMSHIM_CAST_H

#include <stdint.h>

/* Element types of a cast's source or destination. */
#define GS_ELEM_F32 0
#define GS_ELEM_BF16 1
#define GS_ELEM_F16 2

/* Launch shape (see cast.cu's opening comment for why): one-dimensional
 * blocks of GS_CAST_THREADS; each thread takes chunks of GS_CAST_CHUNK
 * consecutive elements of a column, as GS_CAST_CHUNK / GS_CAST_VEC vector
 * accesses issued together. */
#define GS_CAST_VEC 4
#define GS_CAST_CHUNK 8
#define GS_CAST_THREADS 256
/* Operands one launch can carry (the ffma route's A, B, C and bias). */
#define GS_CAST_MAX_OPERANDS 4

/* n / d for any 64-bit n by a multiply (Granlund and Montgomery, "Division
 * by Invariant Integers using Multiplication", PLDI 1994, figure 4.1):
 * t = mulhi(magic, n), n / d = (t + ((n - t) >> sh1)) >> sh2. Made by the
 * launcher (cast_launch.c) for each d >= 1. */
typedef struct gs_cast_div {
  uint64_t d, magic;
  uint32_t sh1, sh2;
} gs_cast_div;

/* One matrix (or strided/pointer-array batch) to cast. Element (r, c) of
 * member b is at src + b*stride_src + c*ld_src + r, or, for src_array, at
 * ((T *const *)src)[b] + c*ld_src + r; the same for dst. Sizes in elements,
 * validated by the launcher. A column is cut into `per_col.d` chunks that
 * start at 4-element boundaries of memory (so their vector accesses are
 * aligned), columns are numbered member by member (`per_member.d` columns a
 * member), and the operand's chunks are the launch's chunks first ..
 * first + per_col.d * per_member.d * batch - 1. */
typedef struct gs_cast_operand {
  const void *src;
  void *dst;
  int64_t ld_src, stride_src;
  int64_t ld_dst, stride_dst;
  int64_t rows, first;
  gs_cast_div per_col, per_member;
  int32_t src_array, dst_array;
} gs_cast_operand;

/* What a narrowing launch adds to its fp32 source: D = narrow(src + beta*C),
 * the sum rounded once to fp32 (an fma), C in D's type at the same (r, c, b)
 * as D, by ld_c/stride_c or the device array c. beta is read from beta_ptr
 * (device pointer mode) or taken from `beta`; where it is 0, or c is NULL,
 * C is not read at all ("if beta == 0 then C does not have to be a valid
 * input", cuBLAS documentation, cublas<t>gemm). A widening launch instead
 * may store 0.0f to `zero` (thread 0): the device beta of 0 that an fp32
 * GEMM in device pointer mode then reads, written, never read back. */
typedef struct gs_cast_out_c {
  const void *c;
  const float *beta_ptr;
  float *zero;
  int64_t ld_c, stride_c;
  float beta;
  int32_t c_array;
} gs_cast_out_c;

/* Passed by value as the kernel's only parameter, so the launcher and the
 * kernel cannot disagree on argument order; every field is 8 bytes or one of
 * a pair of 4-byte fields, so C (gcc, host) and CUDA C++ (clang, nvptx64) lay
 * it out alike. Unused operands have first == chunks. */
typedef struct gs_cast_args {
  gs_cast_operand op[GS_CAST_MAX_OPERANDS];
  int64_t chunks; /* all operands' chunks */
  int64_t operands;
  gs_cast_out_c out_c; /* all zero: a plain cast */
} gs_cast_args;

#if !defined(__CUDA_ARCH__)
/* The multiplier that divides by d >= 1 (host code: launchers, tests). */
static inline gs_cast_div gs_cast_div_for(uint64_t d) {
  gs_cast_div m;
  uint32_t l = 0; /* ceil(log2 d) */
  while (l < 64 && ((unsigned __int128)1 << l) < d) l++;
  m.d = d;
  m.magic = (uint64_t)((((unsigned __int128)1 << 64) * (((unsigned __int128)1 << l) - d)) / d + 1);
  m.sh1 = l < 1 ? l : 1;
  m.sh2 = l > 1 ? l - 1 : 0;
  return m;
}
#endif

#if defined(__cplusplus)
static_assert(sizeof(gs_cast_operand) == 120, "gs_cast_operand has padding");
#else
_Static_assert(sizeof(gs_cast_operand) == 120, "gs_cast_operand has padding");
#endif
#if defined(__cplusplus)
static_assert(sizeof(gs_cast_out_c) == 48, "gs_cast_out_c has padding");
#else
_Static_assert(sizeof(gs_cast_out_c) == 48, "gs_cast_out_c has padding");
#endif

/* X(name, source element, destination element) */
#define GS_CAST_KERNELS(X)                                                     \
  X(gs_widen_bf16, GS_ELEM_BF16, GS_ELEM_F32)                                  \
  X(gs_widen_f16, GS_ELEM_F16, GS_ELEM_F32)                                    \
  X(gs_widen_f32, GS_ELEM_F32, GS_ELEM_F32)                                    \
  X(gs_narrow_bf16, GS_ELEM_F32, GS_ELEM_BF16)                                 \
  X(gs_narrow_f16, GS_ELEM_F32, GS_ELEM_F16)

#endif
