/* bench_client: the host cost of intercepted calls. Makes `calls` tiny
 * GEMMs (1x1x1 fp32, so the GEMM itself costs next to nothing) through one
 * entry point and prints the wall time per call. Run it with and without
 * the shim preloaded; run_bench.py turns the pair into the added cost.
 *
 *   bench_client gemm|gemm-dead|gemm-dead1|lt CALLS
 *
 * gemm-dead first creates and destroys DEAD_HANDLES cuBLAS handles, as a
 * process using cuSOLVER or rebuilding its framework state does (gemm-dead1:
 * one): what the shim remembers of destroyed handles must not make later
 * calls dearer the more there are. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEAD_HANDLES 2000

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(x, what)                                           \
  do {                                                           \
    int s_ = (int)(x);                                           \
    if (s_) {                                                    \
      fprintf(stderr, "bench_client: %s failed (%d)\n", what, s_); \
      return 2;                                                  \
    }                                                            \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "gemm") && strcmp(argv[1], "gemm-dead") && strcmp(argv[1], "gemm-dead1") &&
                    strcmp(argv[1], "lt"))) {
    fprintf(stderr, "usage: bench_client gemm|gemm-dead|gemm-dead1|lt CALLS\n");
    return 2;
  }
  long calls = atol(argv[2]);
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr buf;
  CHECK(cuInit(0), "cuInit");
  CHECK(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  CHECK(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CHECK(cuMemAlloc(&buf, 256), "cuMemAlloc");
  float one = 1.0f, zero = 0.0f;
  float *a = (float *)buf, *b = a + 8, *c = a + 16;
  CHECK(cuMemsetD8(buf, 0, 256), "cuMemsetD8");
  double t0 = 0, t1 = 0;
  if (strncmp(argv[1], "gemm", 4) == 0) {
    cublasHandle_t h;
    int dead = !strcmp(argv[1], "gemm-dead") ? DEAD_HANDLES : !strcmp(argv[1], "gemm-dead1") ? 1 : 0;
    /* All alive at once first, so each dies at its own address. */
    static cublasHandle_t many[DEAD_HANDLES];
    for (int i = 0; i < dead; i++) CHECK(cublasCreate(&many[i]), "cublasCreate");
    for (int i = 0; i < dead; i++) CHECK(cublasDestroy(many[i]), "cublasDestroy");
    CHECK(cublasCreate(&h), "cublasCreate");
    t0 = now();
    for (long i = 0; i < calls; i++)
      CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a, CUDA_R_32F, 1, b, CUDA_R_32F, 1, &zero, c,
                         CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
    t1 = now();
    cublasDestroy(h);
  } else {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t l;
    CHECK(cublasLtCreate(&h), "cublasLtCreate");
    CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 1, 1, 1), "cublasLtMatrixLayoutCreate");
    t0 = now();
    for (long i = 0; i < calls; i++)
      CHECK(cublasLtMatmul(h, d, &one, a, l, b, l, &zero, c, l, c, l, NULL, NULL, 0, 0), "cublasLtMatmul");
    t1 = now();
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(d);
    cublasLtDestroy(h);
  }
  printf("%s calls=%ld ns_per_call=%.1f\n", argv[1], calls, (t1 - t0) * 1e9 / (double)calls);
  return 0;
}
