/* route_calls: CALLS bf16 GEMMs of one shape through cublasGemmEx (T,N, bf16
 * A, B and C, fp32 compute, beta 0, as a PyTorch Linear forward), on one
 * handle and stream with the same buffers each call, so that every call
 * after the first is a routed call in steady state. scripts/perf_report.py
 * runs it over the CPU stand-in with STANDIN_COUNTS, natively and under
 * each route, for the library calls and kernel launches per call.
 *
 *   route_calls M N K CALLS */
#include <cublas_v2.h>
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x, what)                                                 \
  do {                                                                 \
    int s_ = (int)(x);                                                 \
    if (s_) {                                                          \
      fprintf(stderr, "route_calls: %s failed (%d)\n", what, s_);      \
      return 2;                                                        \
    }                                                                  \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: route_calls M N K CALLS\n");
    return 2;
  }
  const int m = atoi(argv[1]), n = atoi(argv[2]), k = atoi(argv[3]);
  const long calls = atol(argv[4]);
  if (m <= 0 || n <= 0 || k <= 0 || calls < 0) {
    fprintf(stderr, "route_calls: sizes must be positive\n");
    return 2;
  }
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUdeviceptr a, b, c;
  CHECK(cuInit(0), "cuInit");
  CHECK(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  CHECK(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CHECK(cuMemAlloc(&a, (size_t)k * m * 2), "cuMemAlloc A");
  CHECK(cuMemAlloc(&b, (size_t)k * n * 2), "cuMemAlloc B");
  CHECK(cuMemAlloc(&c, (size_t)m * n * 2), "cuMemAlloc C");
  /* Small finite values for every route (bf16 bits). */
  size_t most = (size_t)k * (m > n ? m : n);
  uint16_t *host = malloc(most * 2);
  if (!host) return 2;
  for (size_t i = 0; i < most; i++) host[i] = (uint16_t)(0x3C00 + (i * 7919) % 512);
  CHECK(cuMemcpyHtoD(a, host, (size_t)k * m * 2), "cuMemcpyHtoD A");
  CHECK(cuMemcpyHtoD(b, host, (size_t)k * n * 2), "cuMemcpyHtoD B");
  free(host);
  cublasHandle_t h;
  CHECK(cublasCreate(&h), "cublasCreate");
  CHECK(cublasSetStream(h, (cudaStream_t)stream), "cublasSetStream");
  const float one = 1.0f, zero = 0.0f;
  for (long i = 0; i < calls; i++)
    CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, (const void *)(uintptr_t)a, CUDA_R_16BF, k,
                       (const void *)(uintptr_t)b, CUDA_R_16BF, k, &zero, (void *)(uintptr_t)c, CUDA_R_16BF, m,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP),
          "cublasGemmEx");
  CHECK(cuStreamSynchronize(stream), "cuStreamSynchronize");
  cublasDestroy(h);
  printf("route_calls %dx%dx%d calls=%ld ok\n", m, n, k, calls);
  return 0;
}
