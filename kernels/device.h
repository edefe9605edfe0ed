/* device.h: the little of CUDA that the kernels use, from one of two places.
 *
 *   device build  clang -x cuda --cuda-device-only -nocudainc: there are no
 *                 CUDA headers, so the attributes are spelled out here and
 *                 threadIdx/blockIdx/blockDim/gridDim come from clang's own
 *                 __clang_cuda_builtin_vars.h (part of the compiler);
 *   host build    (GS_EMU) emu.h, which runs the same kernels on the CPU.
 *
 * Also the 8- and 16-byte accesses the vector paths use: one ld/st.global.v*
 * instruction on the GPU, an alignment-checked copy on the host. */
#ifndef GEMMSHIM_DEVICE_H
#define GEMMSHIM_DEVICE_H

#include <stdint.h>

/* Four 32-bit lanes moved as one 16-byte access (LDG.128/STG.128). */
typedef struct __attribute__((aligned(16))) gs_u32x4 {
  uint32_t v[4];
} gs_u32x4;

#if defined(GS_EMU)
#include "emu.h"
#else

#if !defined(__CUDA__) || !defined(__CUDA_ARCH__)
#error "device.h: compile with clang -x cuda --cuda-device-only (or define GS_EMU for the host build)"
#endif

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __forceinline__ __attribute__((always_inline)) inline
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#include <__clang_cuda_builtin_vars.h>

static __device__ __forceinline__ uint64_t gs_ld8(const void *p) {
  return *(const uint64_t *)p;
}
static __device__ __forceinline__ void gs_st8(void *p, uint64_t v) { *(uint64_t *)p = v; }
static __device__ __forceinline__ gs_u32x4 gs_ld16(const void *p) {
  return *(const gs_u32x4 *)p;
}
static __device__ __forceinline__ void gs_st16(void *p, gs_u32x4 v) { *(gs_u32x4 *)p = v; }

#endif
#endif
