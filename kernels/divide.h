/* divide.h: n / d for any 64-bit n, in device code and its host build, by
 * the multiplier cast.h's gs_cast_div holds (Granlund and Montgomery; the
 * launchers make it with gs_cast_div_for). The kernels that number their
 * work across columns and batch members (cast.cu, fp16.cu) find a work
 * item's column and member with two of these instead of two 64-bit
 * divisions, which the GPU does in software. */
#ifndef GEMMSHIM_DIVIDE_H
#define GEMMSHIM_DIVIDE_H

#include "cast.h"
#include "device.h"

static __device__ __forceinline__ uint64_t gs_mulhi64(uint64_t a, uint64_t b) {
#if defined(GS_EMU)
  return (uint64_t)(((unsigned __int128)a * b) >> 64);
#else
  return __nvvm_mulhi_ull(a, b);
#endif
}

static __device__ __forceinline__ uint64_t gs_div_by(uint64_t n, const gs_cast_div &d) {
  uint64_t t = gs_mulhi64(d.magic, n);
  return (t + ((n - t) >> d.sh1)) >> d.sh2;
}

#endif
