/* standin_kernel.h: the contract between the CPU stand-in libcuda.so.1 and
 * host builds of device kernels.
 *
 * On a GPU the shim loads its kernels with cuModuleLoadData(PTX text) and
 * starts them with cuLaunchKernel. On the CPU the same kernel source is
 * compiled for the host into a shared library, and the stand-in runs it:
 *
 *   1. STANDIN_KERNELS=/path/to/kernels.so names that library (read once,
 *      when libcuda.so.1 is loaded).
 *   2. cuModuleLoadData(&mod, image) accepts any image. When the image is PTX
 *      text (it contains ".entry"), the stand-in also checks what a driver
 *      JIT would: ".target sm_XY" above the device's capability fails with
 *      CUDA_ERROR_INVALID_PTX, a ".version" newer than the driver's PTX ISA
 *      fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
 *   3. cuModuleGetFunction(&f, mod, "name") looks up the symbol
 *      STANDIN_KERNEL_PREFIX "name" (standin_kernel_name) with dlsym in that
 *      library. No library, no such symbol, or (for PTX images) no
 *      ".entry name" in the PTX: CUDA_ERROR_NOT_FOUND.
 *   4. cuLaunchKernel(f, grid, block, sharedMemBytes, stream, kernelParams,
 *      NULL) validates like a GPU (any grid/block dimension 0, a block over
 *      the device limits, or shared memory over the function's limit:
 *      CUDA_ERROR_INVALID_VALUE), then calls the host kernel once,
 *      synchronously, on the calling thread, with a standin_launch. The host
 *      kernel iterates over every block and thread itself.
 *
 * kernelParams is passed through untouched: params[i] points at the i-th
 * argument, exactly as the launcher packed it for the GPU, so the launcher
 * code is the same on both sides. Launches through `extra` are not
 * supported (CUDA_ERROR_NOT_SUPPORTED).
 *
 * A host kernel returns 0 (CUDA_SUCCESS) or a CUresult value describing a
 * fault it detected (e.g. 700, CUDA_ERROR_ILLEGAL_ADDRESS); cuLaunchKernel
 * returns that value. On a GPU such a fault would only surface at the next
 * synchronisation; the stand-in reports it at the launch.
 */
#ifndef STANDIN_KERNEL_H
#define STANDIN_KERNEL_H

#define STANDIN_KERNEL_ABI 1
#define STANDIN_KERNEL_PREFIX "standin_kernel_"

typedef struct standin_dim3 {
  unsigned x, y, z;
} standin_dim3;

typedef struct standin_launch {
  unsigned abi;           /* STANDIN_KERNEL_ABI */
  standin_dim3 grid;      /* gridDim, every component >= 1 */
  standin_dim3 block;     /* blockDim, every component >= 1 */
  unsigned shared_bytes;  /* dynamic shared memory asked for at launch */
  void *shared;           /* shared_bytes of scratch for one block (NULL when
                             0), filled with 0xA5 before the launch because
                             GPU shared memory starts undefined; blocks run
                             one after another, so the kernel reuses it */
  void **params;          /* kernelParams exactly as given to cuLaunchKernel */
  void *stream;           /* the CUstream as given */
  int device;             /* ordinal of the device the launch runs on */
  int cc_major, cc_minor; /* that device's compute capability */
} standin_launch;

/* Every host kernel has this type and is exported as
 * STANDIN_KERNEL_PREFIX <name>, with C linkage. */
typedef int (*standin_kernel_fn)(const standin_launch *launch);

#endif
