/* gpu_common.h: what the GPU check programs (route_check, gemm_bench,
 * cast_bench) share.
 *
 *   - the CUDA driver, loaded by soname with dlopen as the CUDA runtime does,
 *     so one binary runs over the real libcuda.so.1 or the CPU stand-in,
 *     whichever LD_LIBRARY_PATH finds; entry points a driver may lack (the
 *     stand-in has no async device copy) are optional and checked at use;
 *   - one device, its primary context and one stream;
 *   - cuEvent timing on that stream, medians;
 *   - seeded host random numbers and bf16/fp32 conversions;
 *   - where the loaded libraries came from (which cuBLAS, whether the shim
 *     is preloaded), printed so a result says what it measured.
 *
 * cuBLAS itself is linked (-l:libcublas.so.13): a preloaded shim interposes
 * on direct calls, which is what the checks exercise. */
#ifndef GEMMSHIM_GPU_COMMON_H
#define GEMMSHIM_GPU_COMMON_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses shared by the programs (route_check matches gemm_suite). */
#define GPU_EXIT_OK 0
#define GPU_EXIT_FAILED 1 /* a result or status was wrong */
#define GPU_EXIT_SETUP 2  /* usage, missing library or driver failure */

/* Entry points every driver must have. */
#define GPU_DRIVER_FNS(X)                                                      \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetName)            \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem_v2)                               \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2)                  \
  X(cuCtxSetCurrent) X(cuStreamCreate) X(cuStreamDestroy_v2)                   \
  X(cuStreamSynchronize) X(cuMemAlloc_v2) X(cuMemFree_v2)                      \
  X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuEventCreate) X(cuEventRecord)      \
  X(cuEventSynchronize) X(cuEventElapsedTime_v2) X(cuEventDestroy_v2)

/* Entry points only some steps need; NULL when the driver lacks them. */
#define GPU_DRIVER_OPTIONAL_FNS(X)                                             \
  X(cuMemcpyDtoDAsync_v2) X(cuModuleLoadData) X(cuModuleUnload)                \
  X(cuModuleGetFunction) X(cuLaunchKernel) X(cuGetErrorName)

typedef struct gpu_driver {
#define GPU_FN_PTR(name) __typeof__(name) *name;
  GPU_DRIVER_FNS(GPU_FN_PTR)
  GPU_DRIVER_OPTIONAL_FNS(GPU_FN_PTR)
#undef GPU_FN_PTR
} gpu_driver;

extern gpu_driver drv;

/* A driver call that must succeed: on failure, one line naming the call and
 * the CUresult, then exit(GPU_EXIT_SETUP). */
void gpu_die_cu(const char *what, CUresult r);
#define CU_CHECK(call)                                                         \
  do {                                                                         \
    CUresult cu_r_ = (call);                                                   \
    if (cu_r_ != CUDA_SUCCESS) gpu_die_cu(#call, cu_r_);                       \
  } while (0)

/* The device the program runs on. */
typedef struct gpu_device {
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  char name[128];
  int cc_major, cc_minor;
  int sm_count;
  int driver_version; /* e.g. 13000 */
  size_t total_mem;
} gpu_device;

/* Load libcuda.so.1, cuInit, device 0's primary context (current on the
 * calling thread) and a non-blocking stream. Exits with GPU_EXIT_SETUP and a
 * reason when any of it fails. */
void gpu_open(gpu_device *d);
void gpu_close(gpu_device *d);

/* One line describing the device and the libraries this process loaded
 * (libcuda, libcublas, libcublasLt, libgemmshim), to out; and the same as
 * one JSON object (a "kind":"device" record) to json when not NULL. */
void gpu_describe(const gpu_device *d, const char *program, FILE *out, FILE *json);

/* The path of the first loaded object whose file name starts with prefix
 * ("libcublas.so"), or NULL. */
const char *gpu_loaded_path(const char *prefix);

/* ---- timing -------------------------------------------------------------- */
/* Enqueues one unit of work on the stream; returns 0, or a nonzero status
 * (cublasStatus_t or CUresult) that stops the measurement. */
typedef int (*gpu_work_fn)(void *arg);

/* Milliseconds per unit: `inner` units between two events on the stream,
 * elapsed / inner. A failing unit stops the loop: *status gets its status
 * and the result is negative. */
double gpu_time_ms(const gpu_device *d, gpu_work_fn fn, void *arg, int inner, int *status);

/* Units per sample so one sample takes about target_ms, given an estimate of
 * one unit's time; at least 1, at most 1000. */
int gpu_inner_for(double unit_ms, double target_ms);

double gpu_median(double *v, int n); /* sorts v */

/* ---- numbers ------------------------------------------------------------- */
/* xorshift64*, as the integration suite uses: seedable, identical
 * everywhere. rng_uniform is in [-1, 1). */
uint64_t gpu_rng_seed(uint64_t seed, uint64_t stream);
double gpu_rng_uniform(uint64_t *s);

float gpu_bf16_to_f32(uint16_t h);
uint16_t gpu_f32_to_bf16(float f); /* round to nearest even, NaN kept quiet */

/* n bf16 values uniform in [-scale, scale), and optionally (f32 != NULL)
 * the same values widened to fp32. */
void gpu_fill_bf16(uint16_t *h, float *f32, size_t n, uint64_t *rng, float scale);

/* Device memory that must be allocated: exits with a reason otherwise. */
CUdeviceptr gpu_alloc(size_t bytes);

/* Append one JSON string (quoted and escaped) to out; null for NULL. */
void gpu_json_string(FILE *out, const char *s);

#endif
