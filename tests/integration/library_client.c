/* library_client.c: GEMMs from the program and from inside an NVIDIA
 * library (tests/integration/fakecusolver.c, named libcusolver.so.12 as
 * the real one is), for test_library_callers.py.
 *
 * Four GEMMs of one shape, C = A B: the program's own cublasGemmEx in bf16
 * and in fp32, then the same two through fakecusolver_gemm. Prints one line
 * per GEMM, "gemm index=I from=app|cusolver type=bf16|fp32 status=N
 * err=E hash=H": the largest |C - ref| / max|ref| against a float64
 * product of the stored inputs, and a hash of C's bytes (to compare runs
 * with and without the shim). Exits 0 when every call returned 0. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/convert.h"
#include "client.h"

cublasStatus_t fakecusolver_gemm(cublasHandle_t h, cudaDataType type, int m, int n, int k, const void *A,
                                 const void *B, void *C);

enum { M = 48, N = 40, K = 64 };

static uint64_t rng = 0x6c6962;
static double uniform(void) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}

static size_t tsize(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
static double get(const void *p, cudaDataType t, size_t i) {
  return t == CUDA_R_32F ? ((const float *)p)[i] : gs_bf16_to_f32(((const uint16_t *)p)[i]);
}
static void put(void *p, cudaDataType t, size_t i, double v) {
  if (t == CUDA_R_32F) ((float *)p)[i] = (float)v;
  else ((uint16_t *)p)[i] = gs_f32_to_bf16_rn((float)v);
}

static cublasHandle_t handle;
static CUstream stream;
static int failures;

static CUdeviceptr upload(const void *host, size_t bytes) {
  CUdeviceptr d;
  if (client_drv.cuMemAlloc_v2(&d, bytes) || client_drv.cuMemcpyHtoD_v2(d, host, bytes)) {
    fprintf(stderr, "library_client: device memory failed\n");
    exit(2);
  }
  return d;
}

static void one_gemm(int index, int from_library, cudaDataType t) {
  size_t es = tsize(t);
  void *a = malloc(M * K * es), *b = malloc(K * N * es), *c = calloc(M * N, es);
  for (size_t i = 0; i < M * K; i++) put(a, t, i, uniform());
  for (size_t i = 0; i < K * N; i++) put(b, t, i, uniform());
  CUdeviceptr A = upload(a, M * K * es), B = upload(b, K * N * es), C = upload(c, M * N * es);
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t s =
      from_library ? fakecusolver_gemm(handle, t, M, N, K, (void *)A, (void *)B, (void *)C)
                   : cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (void *)A, t, M, (void *)B, t, K,
                                  &zero, (void *)C, t, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  client_drv.cuStreamSynchronize(stream);
  client_drv.cuMemcpyDtoH_v2(c, C, M * N * es);
  double worst = 0, top = 0;
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int j = 0; j < N; j++)
    for (int i = 0; i < M; i++) {
      double r = 0;
      for (int kk = 0; kk < K; kk++) r += get(a, t, i + (size_t)kk * M) * get(b, t, kk + (size_t)j * K);
      worst = fmax(worst, fabs(get(c, t, i + (size_t)j * M) - r));
      top = fmax(top, fabs(r));
    }
  for (size_t i = 0; i < M * N * es; i++) hash = (hash ^ ((unsigned char *)c)[i]) * 0x100000001b3ull;
  if (s != CUBLAS_STATUS_SUCCESS) failures++;
  printf("gemm index=%d from=%s type=%s status=%d err=%.3e hash=%016llx\n", index, from_library ? "cusolver" : "app",
         t == CUDA_R_32F ? "fp32" : "bf16", (int)s, worst / top, (unsigned long long)hash);
  client_drv.cuMemFree_v2(A);
  client_drv.cuMemFree_v2(B);
  client_drv.cuMemFree_v2(C);
  free(a);
  free(b);
  free(c);
}

int main(void) {
  const char *why = client_driver_load();
  CUdevice dev;
  CUcontext ctx;
  if (why || client_drv.cuInit(0) || client_drv.cuDeviceGet(&dev, 0) ||
      client_drv.cuDevicePrimaryCtxRetain(&ctx, dev) || client_drv.cuCtxSetCurrent(ctx) ||
      client_drv.cuStreamCreate(&stream, 0) || cublasCreate(&handle) || cublasSetStream(handle, stream)) {
    fprintf(stderr, "library_client: set-up failed: %s\n", why ? why : "driver or cuBLAS");
    return 2;
  }
  one_gemm(0, 0, CUDA_R_16BF);
  one_gemm(1, 0, CUDA_R_32F);
  one_gemm(2, 1, CUDA_R_16BF);
  one_gemm(3, 1, CUDA_R_32F);
  cublasDestroy(handle);
  return failures ? 1 : 0;
}
