/* cast.h: what the cast kernels (cast.cu) and their launchers
 * (cast_launch.c) share: the one argument block every cast kernel takes, and
 * the list of kernels. The list is the only place a kernel is named: cast.cu
 * defines one kernel per entry (and, in the host build, its stand-in entry
 * point), module_launch.c looks each up in the module, cast_launch.c picks one
 * by (source type, destination type, batch layout). C and C++. */
#ifndef GEMMSHIM_CAST_H
#define GEMMSHIM_CAST_H

#include <stdint.h>

/* Element types of a cast's source or destination. */
#define GS_ELEM_F32 0
#define GS_ELEM_BF16 1
#define GS_ELEM_F16 2

/* How batch member b is found. */
#define GS_BATCH_STRIDED 0   /* src + b*stride_src, dst + b*stride_dst */
#define GS_BATCH_SRC_ARRAY 1 /* ((T *const *)src)[b], dst strided */
#define GS_BATCH_DST_ARRAY 2 /* src strided, ((T *const *)dst)[b] */

/* Passed by value as the kernel's only parameter, so the launcher and the
 * kernel cannot disagree on argument order; every field is 8 bytes, so C
 * (gcc, host) and CUDA C++ (clang, nvptx64) lay it out alike. Sizes and
 * strides are in elements, already validated by the launcher. */
typedef struct gs_cast_args {
  const void *src; /* base, or for GS_BATCH_SRC_ARRAY the device pointer array */
  void *dst;       /* base, or for GS_BATCH_DST_ARRAY the device pointer array */
  int64_t ld_src, stride_src;
  int64_t ld_dst, stride_dst;
  int64_t rows, cols, batch;
} gs_cast_args;

/* X(name, source element, destination element, batch layout) */
#define GS_CAST_KERNELS(X)                                                     \
  X(gs_widen_bf16, GS_ELEM_BF16, GS_ELEM_F32, GS_BATCH_STRIDED)                \
  X(gs_widen_f16, GS_ELEM_F16, GS_ELEM_F32, GS_BATCH_STRIDED)                  \
  X(gs_widen_f32, GS_ELEM_F32, GS_ELEM_F32, GS_BATCH_STRIDED)                  \
  X(gs_widen_bf16_ptrarray, GS_ELEM_BF16, GS_ELEM_F32, GS_BATCH_SRC_ARRAY)     \
  X(gs_widen_f16_ptrarray, GS_ELEM_F16, GS_ELEM_F32, GS_BATCH_SRC_ARRAY)       \
  X(gs_narrow_bf16, GS_ELEM_F32, GS_ELEM_BF16, GS_BATCH_STRIDED)               \
  X(gs_narrow_f16, GS_ELEM_F32, GS_ELEM_F16, GS_BATCH_STRIDED)                 \
  X(gs_narrow_bf16_ptrarray, GS_ELEM_F32, GS_ELEM_BF16, GS_BATCH_DST_ARRAY)    \
  X(gs_narrow_f16_ptrarray, GS_ELEM_F32, GS_ELEM_F16, GS_BATCH_DST_ARRAY)

/* Launch shape (see cast.cu's opening comment for why): a warp along a
 * column, GS_CAST_VEC elements per thread, GS_CAST_BLOCK_Y columns a block. */
#define GS_CAST_VEC 4
#define GS_CAST_BLOCK_X 32
#define GS_CAST_BLOCK_Y 8

#endif
