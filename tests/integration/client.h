/* client.h: the integration clients' shared interface.
 *
 * One GEMM suite (gemm_suite.c) runs under three loading patterns:
 *   client_linked_cuN   links libcublas/libcublasLt (plain C/C++ programs);
 *   client_framework    dlopen()s libfakeframework.so RTLD_LOCAL, which links
 *                       cuBLAS (the PyTorch wheel layout);
 *   client_xla          dlopen()s libcublas(Lt).so.N itself and fills function
 *                       pointers with dlsym(handle, name) (XLA/TensorFlow).
 * The suite calls cuBLAS through BLAS(name): a direct call when compiled with
 * CLIENT_BLAS_DIRECT, else through the client_blas table that client_xla
 * fills. The driver is always dlopen()ed, as the CUDA runtime does, so a
 * machine without libcuda.so.1 can still run the "no GPU" mode. */
#ifndef GEMMSHIM_TEST_CLIENT_H
#define GEMMSHIM_TEST_CLIENT_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>

/* Every cuBLAS / cuBLASLt function the suite calls, by its exported name. */
#define CLIENT_CUBLAS_FNS(X)                                                   \
  X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2)                 \
  X(cublasGemmEx) X(cublasGemmEx_64)                                           \
  X(cublasGemmStridedBatchedEx) X(cublasGemmStridedBatchedEx_64)               \
  X(cublasGemmBatchedEx) X(cublasGemmBatchedEx_64)
#define CLIENT_CUBLASLT_FNS(X)                                                 \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul)                       \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                     \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulDescGetAttribute)          \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                 \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatrixLayoutGetAttribute)

typedef struct client_blas_table {
#define CLIENT_FN_PTR(name) __typeof__(name) *name;
  CLIENT_CUBLAS_FNS(CLIENT_FN_PTR)
  CLIENT_CUBLASLT_FNS(CLIENT_FN_PTR)
#undef CLIENT_FN_PTR
} client_blas_table;

/* Filled by client_xla.c before gemm_suite_main runs. */
extern client_blas_table client_blas;

/* The driver entry points the suite uses, by their exported names. */
#define CLIENT_DRIVER_FNS(X)                                                   \
  X(cuInit) X(cuDeviceGet) X(cuDeviceGetAttribute)                             \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2) X(cuCtxSetCurrent) \
  X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize)               \
  X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2)

typedef struct client_driver_table {
#define CLIENT_FN_PTR(name) __typeof__(name) *name;
  CLIENT_DRIVER_FNS(CLIENT_FN_PTR)
#undef CLIENT_FN_PTR
} client_driver_table;

extern client_driver_table client_drv;

/* "client_cuda.c": load libcuda.so.1 into client_drv. NULL on success, else
 * what failed (static text). */
const char *client_driver_load(void);

/* "gemm_suite.c": parse argv (options are listed by --help), run the suite,
 * print one line per call; returns the process exit status (0: every call
 * behaved, 1: a result or status was wrong, 2: usage or setup error). */
int gemm_suite_main(int argc, char **argv);

#endif
