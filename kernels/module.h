/* module.h: the shim's kernel modules as the launchers see them
 * (module_launch.c). Internal to kernels/; kernels.h is the interface the
 * routes use. */
#ifndef GEMMSHIM_MODULE_H
#define GEMMSHIM_MODULE_H

#include <cuda.h>
#include <library_types.h>
#include <stdint.h>

#include "accuracy_kernels.h"
#include "cast.h"
#include "fp16_kernels.h"
#include "fp8_kernels.h"
#include "kernels.h"

/* Every kernel file, X(file, its kernel list, its PTX target): kernels/<file>.cu
 * becomes the PTX image gs_ptx_<file> (kernels.mk, ptx_blob.S; .target
 * sm_<target>), loaded as one module; its list names the kernels it
 * defines, entries X(name, ...). A new file adds its line here.
 *
 * Files for GS_KERNEL_BASE_SM are every context's: their load failing fails
 * the context's load. A file for a newer target is optional: loaded only
 * where the device's compute capability reaches it, and where it is not
 * loaded (older device, or a driver that does not take its PTX) its kernels
 * are absent and kernels_function says why; the others load regardless. */
#define GS_KERNEL_BASE_SM 61
#define GS_KERNEL_FILES(X)                                                     \
  X(cast, GS_CAST_KERNELS, 61)                                                 \
  X(fp8_quantize, GS_FP8_QUANTIZE_KERNELS, 61)                                 \
  X(fp8_gemm, GS_FP8_GEMM_KERNELS, 61)                                         \
  X(fp8_gemm_mma, GS_FP8_GEMM_MMA_KERNELS, 89)                                 \
  X(fp8_quantize_sm89, GS_FP8_QUANTIZE_SM89_MODULE, 89)                        \
  X(fp16, GS_FP16_KERNELS, 70)                                                 \
  X(accuracy, GS_ACC_KERNELS, 61)                                              \
  X(fp8_scaled_quantize, GS_FP8_SCALED_QUANTIZE_KERNELS, 90)

/* One id per kernel, over all files, in file order. */
#define GS_KERNEL_ID(name, ...) GS_K_##name,
#define GS_KERNEL_FILE_IDS(file, list, sm) list(GS_KERNEL_ID)
typedef enum gs_kernel_id { GS_KERNEL_FILES(GS_KERNEL_FILE_IDS) GS_KERNEL_COUNT } gs_kernel_id;
#undef GS_KERNEL_FILE_IDS
#undef GS_KERNEL_ID

/* Each file's PTX text, NUL-terminated. */
#define GS_KERNEL_PTX_DECL(file, list, sm) extern const char gs_ptx_##file[];
GS_KERNEL_FILES(GS_KERNEL_PTX_DECL)
#undef GS_KERNEL_PTX_DECL

/* Kernel id's function in kc->ctx's copy of the modules, loading them on
 * first use. CUDA_SUCCESS, or the failing driver call's result with *why
 * set (static string); CUDA_ERROR_NOT_SUPPORTED with *why set for a kernel
 * of an optional file that this context has not loaded (module.h's
 * GS_KERNEL_FILES). A driver entry it needs that was not looked up
 * (resolve_driver) fails it with CUDA_ERROR_NOT_FOUND. */
CUresult kernels_function(kernel_ctx *kc, gs_kernel_id id, CUfunction *f, const char **why);

/* cuLaunchKernel on stream with kc->ctx current (pushed around the call when
 * it is not: a function launches only in its module's context). No dynamic
 * shared memory. */
CUresult kernels_launch(kernel_ctx *kc, CUfunction f, const unsigned grid[3],
                        const unsigned block[3], CUstream stream, void **params);

/* ---- the cast launchers' plan (cast_launch.c), for their tests ---------- */
struct kernel_cast_operand;
/* The argument block and grid of one cast launch of operands ops[0..n) from
 * element kind src to dst (cast.h); CUDA_ERROR_INVALID_VALUE for an invalid
 * operand. Operands with nothing to do take no chunks. */
CUresult kernel_cast_plan(const struct kernel_cast_operand *ops, int n, int src, int dst, gs_cast_args *a,
                          unsigned grid[3]);
/* The multiplier that divides by d >= 1 (cast.h's gs_cast_div). */
gs_cast_div kernel_cast_div(uint64_t d);

/* ---- what every launcher shares ------------------------------------------ */
/* gridDim.y/z are at most 65535 on every GPU; x is capped alike, the
 * kernels' grid-stride loops cover the rest. */
#define GRID_MAX 65535

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* cudaDataType -> the kernels' element kind (cast.h); -1 for other types. */
static inline int elem_of(int type) {
  switch (type) {
  case CUDA_R_16BF: return GS_ELEM_BF16;
  case CUDA_R_16F: return GS_ELEM_F16;
  case CUDA_R_32F: return GS_ELEM_F32;
  default: return -1;
  }
}

#endif
