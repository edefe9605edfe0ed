/* emu.h: runs the shim's CUDA kernels on the CPU, for the stand-in
 * libcuda.so.1 (contract: tests/standin/standin_kernel.h). The kernel source
 * is compiled unchanged as C++ with GS_EMU defined; device.h then includes
 * this file instead of the device definitions.
 *
 * How: threadIdx/blockIdx/blockDim/gridDim are thread_local variables. A
 * launch runs every block, and in each block every thread, one after another
 * on the calling thread (x fastest, then y, z), calling the kernel with the
 * arguments unpacked from kernelParams by the kernel's own parameter types.
 * Launches from different host threads are independent.
 *
 * Limits, each enforced where it can be:
 *   - a block's threads never run concurrently, so there are no barriers:
 *     calling __syncthreads() is a compile error, and __shared__, warp
 *     shuffles/votes and atomics are not defined. The cast kernels need none
 *     of them: every thread owns the outputs it writes. Kernels that do
 *     (fp8) get fiber-scheduled blocks from fp8_block.h, built on this file.
 *   - faults: gs_ld8/gs_st8/gs_ld16/gs_st16 check alignment as the GPU does
 *     and the launch returns CUDA_ERROR_MISALIGNED_ADDRESS (the access is
 *     skipped); other bad addresses are not detected here (the ASan build
 *     catches them on the host).
 *   - one fixed thread order: a race between threads of a kernel cannot show.
 *   - dynamic shared memory (launch->shared) is not offered to the kernels. */
#ifndef GEMMSHIM_EMU_H
#define GEMMSHIM_EMU_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <utility>
#include <type_traits>

#include "../tests/standin/standin_kernel.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct gs_emu_dim3 {
  unsigned x, y, z;
};

inline thread_local gs_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
/* The first fault of the running launch; CUDA_SUCCESS while none. */
inline thread_local CUresult gs_emu_fault;

/* A barrier needs the block's threads to be live at once; see the limits. */
template <bool instantiated = true> inline void __syncthreads() {
  static_assert(!instantiated, "emu.h runs a block's threads one after another and "
                               "cannot honour __syncthreads()");
}

/* Vector accesses made on this host thread, for tests that check which path
 * a kernel took: read and reset by gs_emu_take_vector_accesses(). */
inline thread_local unsigned long long gs_emu_vector_accesses;
extern "C" __attribute__((visibility("default"), used)) inline unsigned long long
gs_emu_take_vector_accesses(void) {
  unsigned long long n = gs_emu_vector_accesses;
  gs_emu_vector_accesses = 0;
  return n;
}

static inline int gs_emu_aligned(const void *p, size_t n) {
  gs_emu_vector_accesses++;
  if ((uintptr_t)p % n == 0) return 1;
  if (gs_emu_fault == CUDA_SUCCESS) gs_emu_fault = CUDA_ERROR_MISALIGNED_ADDRESS;
  return 0;
}

static inline uint64_t gs_ld8(const void *p) {
  uint64_t v = 0;
  if (gs_emu_aligned(p, 8)) memcpy(&v, p, 8);
  return v;
}
static inline void gs_st8(void *p, uint64_t v) {
  if (gs_emu_aligned(p, 8)) memcpy(p, &v, 8);
}
static inline gs_u32x4 gs_ld16(const void *p) {
  gs_u32x4 v = {{0, 0, 0, 0}};
  if (gs_emu_aligned(p, 16)) memcpy(&v, p, 16);
  return v;
}
static inline void gs_st16(void *p, gs_u32x4 v) {
  if (gs_emu_aligned(p, 16)) memcpy(p, &v, 16);
}

/* kernelParams[i] points at argument i, typed as the kernel declares it. */
template <typename... A, size_t... I>
static std::tuple<typename std::decay<A>::type...> gs_emu_args(void **params,
                                                               std::index_sequence<I...>) {
  return std::tuple<typename std::decay<A>::type...>(
      *static_cast<typename std::decay<A>::type *>(params[I])...);
}

/* Run kernel k over the launch's grid. Arguments are copied out of
 * kernelParams once, as the driver copies them into parameter space. */
template <typename... A>
static int gs_emu_launch(const standin_launch *l, void (*k)(A...)) {
  if (!l || l->abi != STANDIN_KERNEL_ABI) return CUDA_ERROR_NOT_SUPPORTED;
  if (sizeof...(A) > 0 && !l->params) return CUDA_ERROR_INVALID_VALUE;
  auto args = gs_emu_args<A...>(l->params, std::index_sequence_for<A...>{});
  gridDim = {l->grid.x, l->grid.y, l->grid.z};
  blockDim = {l->block.x, l->block.y, l->block.z};
  gs_emu_fault = CUDA_SUCCESS;
  for (unsigned bz = 0; bz < gridDim.z; bz++)
    for (unsigned by = 0; by < gridDim.y; by++)
      for (unsigned bx = 0; bx < gridDim.x; bx++) {
        blockIdx = {bx, by, bz};
        for (unsigned tz = 0; tz < blockDim.z; tz++)
          for (unsigned ty = 0; ty < blockDim.y; ty++)
            for (unsigned tx = 0; tx < blockDim.x; tx++) {
              threadIdx = {tx, ty, tz};
              std::apply(k, args);
              /* A faulting GPU kernel stops; nothing after it runs. */
              if (gs_emu_fault != CUDA_SUCCESS) return gs_emu_fault;
            }
      }
  return CUDA_SUCCESS;
}

/* The stand-in's entry point for kernel `name`: standin_kernel_<name>. */
#define GS_EMU_ENTRY(name)                                                     \
  extern "C" __attribute__((visibility("default"))) int standin_kernel_##name( \
      const standin_launch *l) {                                               \
    return gs_emu_launch(l, name);                                             \
  }

#endif
