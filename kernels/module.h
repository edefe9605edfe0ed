/* module.h: the shim's kernel modules as the launchers see them
 * (module_launch.c). Internal to kernels/; kernels.h is the interface the
 * routes use. */
#ifndef GEMMSHIM_MODULE_H
#define GEMMSHIM_MODULE_H

#include <cuda.h>

#include "cast.h"
#include "fp8_kernels.h"

/* Every kernel file, X(file, its kernel list): kernels/<file>.cu becomes the
 * PTX image gs_ptx_<file> (kernels.mk, ptx_blob.S), loaded as one module;
 * its list names the kernels it defines, entries X(name, ...). A new file
 * adds its line here. */
#define GS_KERNEL_FILES(X)                                                     \
  X(cast, GS_CAST_KERNELS)                                                     \
  X(fp8_quantize, GS_FP8_QUANTIZE_KERNELS)                                     \
  X(fp8_gemm, GS_FP8_GEMM_KERNELS)

/* One id per kernel, over all files, in file order. */
#define GS_KERNEL_ID(name, ...) GS_K_##name,
#define GS_KERNEL_FILE_IDS(file, list) list(GS_KERNEL_ID)
typedef enum gs_kernel_id { GS_KERNEL_FILES(GS_KERNEL_FILE_IDS) GS_KERNEL_COUNT } gs_kernel_id;
#undef GS_KERNEL_FILE_IDS
#undef GS_KERNEL_ID

/* Each file's PTX text, NUL-terminated. */
#define GS_KERNEL_PTX_DECL(file, list) extern const char gs_ptx_##file[];
GS_KERNEL_FILES(GS_KERNEL_PTX_DECL)
#undef GS_KERNEL_PTX_DECL

/* Kernel id's function in ctx's copy of the modules, loading them on first
 * use. CUDA_SUCCESS, or the failing driver call's result with *why set
 * (static string). The driver must be resolved (resolve_driver()). */
CUresult kernels_function(CUcontext ctx, gs_kernel_id id, CUfunction *f, const char **why);

/* cuLaunchKernel on stream with ctx current (pushed around the call when it
 * is not: a function launches only in its module's context). No dynamic
 * shared memory. */
CUresult kernels_launch(CUcontext ctx, CUfunction f, const unsigned grid[3],
                        const unsigned block[3], CUstream stream, void **params);

#endif
