/* kernels.h: the shim's own device code, seen from the host. The kernels
 * are CUDA C in kernels/ (.cu files), compiled to sm_61 PTX (the oldest target the
 * shim serves; the driver JIT-compiles it for any later GPU), embedded in
 * libgemmshim.so, loaded once per context with cuModuleLoadData and
 * launched with cuLaunchKernel: no cudart.
 *
 * Every launcher is stream-ordered on `stream`, never synchronises, returns
 * the driver's CUresult (CUDA_SUCCESS when nothing needed launching, e.g. a
 * zero-sized matrix), and must be called with kc->ctx the stream's context.
 *
 * Matrices are column-major: element (r, c) of batch member b lives at
 * base + b*stride + c*ld + r. rows/cols/ld/stride are in elements.
 * Types are cudaDataType_t values: CUDA_R_16BF, CUDA_R_16F (and CUDA_R_32F
 * where a launcher says so). */
#ifndef GEMMSHIM_KERNELS_H
#define GEMMSHIM_KERNELS_H

#include <cuda.h>
#include <stdint.h>

/* What the loaders and launchers know of the context they work in, given
 * by the caller: the routes fill it from the call's device lookup
 * (device.c), so a launch asks the driver nothing the lookup already knew.
 * A caller that knows only the context passes KERNEL_CTX(ctx): the id is
 * then asked with cuCtxGetId at each load lookup, and the compute
 * capability of the context's device when the modules are loaded.
 *
 * The thread's current context is asked at the first launch made with a
 * kernel_ctx and kept in it: the caller must not change the current context
 * while it uses one. A routed call keeps one for the call: the shim's own
 * pushes are popped before it goes on, and the only foreign code it runs
 * in between, the forwarded fp32 GEMM or cuBLASLt matmul, runs in whatever
 * context is current without changing it (cuBLAS docs, "cuBLAS context":
 * the handle's device must be the current one; a runtime that finds no
 * current context makes the primary one current, and a launch that assumed
 * "not current" pushes anyway). */
typedef struct kernel_ctx {
  CUcontext ctx;
  unsigned long long ctx_id; /* its cuCtxGetId (0 where the driver has none) */
  int id_known;              /* 0: ctx_id is asked of the driver */
  int sm;                    /* its device's major*10 + minor; -1: asked of the driver */
  int current_known;         /* set by the first launch: */
  CUcontext current;         /* the thread's current context then */
  int sms;                   /* its device's SM count, sizing persistent grids; 0: unknown */
} kernel_ctx;
#define KERNEL_CTX(c) (&(kernel_ctx){.ctx = (c), .sm = -1})

/* Load the modules for kc->ctx if needed. NULL on success, else why not
 * (static string). Thread-safe; cached per context. The driver's entries
 * must have been looked up (resolve_driver): a missing one is a failure
 * here, never a crash. */
const char *kernels_ready(kernel_ctx *kc);

/* One operand of a cast: element (r, c) of batch member b is at
 * src + b*stride_src + c*ld_src + r, or with src_array at
 * ((T *const *)src)[b] + c*ld_src + r (a device array of member pointers,
 * cublasGemmBatchedEx's, never read on the host); the same for dst. */
typedef struct kernel_cast_operand {
  int src_type;
  const void *src;
  int src_array;
  int64_t ld_src, stride_src;
  void *dst;
  int dst_array;
  int64_t ld_dst, stride_dst;
  int64_t rows, cols, batch;
} kernel_cast_operand;

/* Up to 4 operands (bf16/fp16/fp32, dst fp32 and strided) widened exactly,
 * in one launch per distinct source type: a GEMM's A, B, C and bias are
 * one launch. Every operand is checked before anything is launched. */
CUresult kernel_widen_operands(kernel_ctx *kc, CUstream stream, const kernel_cast_operand *ops, int n);
/* The same, and the first launch's thread 0 stores 0.0f at zero (when not
 * NULL; 4-byte aligned device memory): a device beta of 0 for a GEMM run
 * after it in device pointer mode, written by every call, never read back
 * by the kernels. */
CUresult kernel_widen_operands_zero(kernel_ctx *kc, CUstream stream, const kernel_cast_operand *ops, int n,
                                    float *zero);

/* bf16/fp16 -> fp32, widening exactly. */
CUresult kernel_widen(kernel_ctx *kc, CUstream stream, int src_type, const void *src, int64_t ld_src,
                      int64_t stride_src, float *dst, int64_t ld_dst, int64_t stride_dst,
                      int64_t rows, int64_t cols, int64_t batch);

/* The same, reading batch member b from the device array src_array[b]
 * (cublasGemmBatchedEx's pointer arrays, which live in device memory and
 * are never read on the host). dst is one strided buffer. */
CUresult kernel_widen_ptrarray(kernel_ctx *kc, CUstream stream, int src_type,
                               const void *const *src_array, int64_t ld_src, float *dst,
                               int64_t ld_dst, int64_t stride_dst, int64_t rows, int64_t cols,
                               int64_t batch);

/* fp32 -> bf16/fp16, round to nearest even, NaN kept, overflow to inf. */
CUresult kernel_narrow(kernel_ctx *kc, CUstream stream, int dst_type, const float *src,
                       int64_t ld_src, int64_t stride_src, void *dst, int64_t ld_dst,
                       int64_t stride_dst, int64_t rows, int64_t cols, int64_t batch);

/* The same, writing batch member b to the device array dst_array[b]. */
CUresult kernel_narrow_ptrarray(kernel_ctx *kc, CUstream stream, int dst_type, const float *src,
                                int64_t ld_src, int64_t stride_src, void *const *dst_array,
                                int64_t ld_dst, int64_t rows, int64_t cols, int64_t batch);

/* C and beta for kernel_narrow_c: C in D's type, element (r, c) of member
 * b at c + b*stride_c + c*ld_c + r, or ((T *const *)c)[b] + c*ld_c + r
 * with c_array. beta from the device pointer beta_ptr, or the value beta
 * when beta_ptr is NULL. */
typedef struct kernel_cast_c {
  const void *c;
  int c_array;
  int64_t ld_c, stride_c;
  float beta;
  const float *beta_ptr;
} kernel_cast_c;

/* fp32 -> bf16/fp16 with beta*C added: D = narrow(fma(beta, C, src)),
 * rounded once to fp32 then to D's type (nearest even). C is not read
 * where beta is 0 (cb NULL, host beta 0, or a device beta read as 0 by
 * the kernel), as cuBLAS's gemm never reads C then; C may be D (each
 * element is read and written by one thread). dst_array: dst is a device
 * array of member pointers. */
CUresult kernel_narrow_c(kernel_ctx *kc, CUstream stream, int dst_type, const float *src, int64_t ld_src,
                         int64_t stride_src, void *dst, int dst_array, int64_t ld_dst, int64_t stride_dst,
                         int64_t rows, int64_t cols, int64_t batch, const kernel_cast_c *cb);

/* A vector of n elements (bias): bf16/fp16/fp32 -> fp32. */
CUresult kernel_widen_vector(kernel_ctx *kc, CUstream stream, int src_type, const void *src,
                             float *dst, int64_t n);

/* GEMMSHIM_COMPARE's measure of a route's output against the native one
 * (accuracy_kernels.h): route and native are rows x cols x batch matrices
 * of one layout (ld, stride in elements) and type (bf16, fp16, fp32);
 * partials: GS_ACC_PARTIALS gs_acc_partial of device scratch; out: one
 * gs_acc_stats in device memory. Two launches, nothing written to route
 * or native. CUDA_ERROR_INVALID_VALUE for a shape or type it cannot take. */
struct gs_acc_stats;
struct gs_acc_partial;
CUresult kernel_accuracy(kernel_ctx *kc, CUstream stream, int type, const void *route, const void *native,
                         int64_t ld, int64_t stride, int64_t rows, int64_t cols, int64_t batch,
                         struct gs_acc_partial *partials, struct gs_acc_stats *out);

#endif
