/* fp8_ring.c: a new gs_fp8_ring, by memsets on the caller's stream. */
#include <stddef.h>
#include <string.h>

#include "../../kernels/fp8.h"
#include "../base/sys.h"
#include "fp8_ring.h"

/* count 32-bit words of value v at p. */
static CUresult set_u32(CUdeviceptr p, uint32_t v, size_t count, CUstream stream, const char **failed) {
  if (gs_sys.cuMemsetD32Async) {
    *failed = "cuMemsetD32Async";
    return GS_CALL(cuMemsetD32Async, p, v, count, stream);
  }
  *failed = "cuMemsetD8Async";
  /* Byte by byte where the driver has no 32-bit memset (little endian). */
  CUresult r = CUDA_SUCCESS;
  for (size_t w = 0; w < count; w++)
    for (int i = 0; i < 4 && r == CUDA_SUCCESS; i++)
      r = GS_CALL(cuMemsetD8Async, p + (CUdeviceptr)(4 * w + (size_t)i), (unsigned char)(v >> (8 * i)), 1, stream);
  return r;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

CUresult fp8_ring_init(CUdeviceptr ring, int fmt, unsigned history, unsigned margin, CUstream stream,
                       const char **failed) {
  *failed = "cuMemsetD8Async";
  if (!gs_sys.cuMemsetD8Async) return CUDA_ERROR_NOT_SUPPORTED;
  uint32_t margin_pow2 = (uint32_t)(127 + margin) << 23; /* 2^margin as float bits */
  CUresult r = GS_CALL(cuMemsetD8Async, ring, 0, (size_t)gs_fp8_ring_bytes(history), stream);
  /* scale[0] and scale[1] with their padding: one memset (the padding is
   * never read). */
  if (r == CUDA_SUCCESS)
    r = set_u32(ring + offsetof(gs_fp8_ring, scale), f32_bits(1.0f), sizeof(((gs_fp8_ring *)0)->scale) / 4, stream,
                failed);
  if (r == CUDA_SUCCESS) r = set_u32(ring + offsetof(gs_fp8_ring, history), history, 1, stream, failed);
  if (r == CUDA_SUCCESS && fmt) r = set_u32(ring + offsetof(gs_fp8_ring, fmt), (uint32_t)fmt, 1, stream, failed);
  if (r == CUDA_SUCCESS) r = set_u32(ring + offsetof(gs_fp8_ring, margin_pow2), margin_pow2, 1, stream, failed);
  return r;
}
