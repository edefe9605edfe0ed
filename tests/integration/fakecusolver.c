/* fakecusolver.c: libcusolver.so.12, a stand-in for cuSOLVER's use of
 * cuBLAS. The real libcusolver.so.12 imports cublasGemmEx (`nm -D
 * /usr/local/cuda/lib64/libcusolver.so.12`: `U cublasGemmEx@libcublas.so.13`),
 * so the GEMMs its factorisations make bind to a preloaded definition and
 * reach the shim as top-level calls from inside the library. This one makes
 * one such GEMM per call, C = A B (column-major, no transposes, compute 32F),
 * on the caller's handle. Only the entry point is exported. */
#include <cublas_v2.h>

__attribute__((visibility("default"))) cublasStatus_t fakecusolver_gemm(cublasHandle_t h, cudaDataType type,
                                                                        int m, int n, int k, const void *A,
                                                                        const void *B, void *C) {
  const float one = 1.0f, zero = 0.0f;
  return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A, type, m, B, type, k, &zero, C, type, m,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
