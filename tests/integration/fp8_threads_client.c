/* fp8_threads_client.c: threads that share nothing but a call site, for
 * the fp8 recipes' isolation test (test_fp8_recipes.py).
 *
 * N threads (--threads=N, 8 by default), each with its own cuBLAS handle,
 * stream and buffers made once and kept, call the same cublasGemmEx line
 * (T,N, M = N = K = --dim, 32 by default, bf16 in and out, fp32 compute)
 * --calls times. Thread t's data has amplitude 10^(t - 3): the threads'
 * operands differ by up to seven orders of magnitude, so a scale one
 * thread borrowed from another would saturate or flush its values. A
 * barrier before each call makes the threads' calls interleave.
 *
 * Prints one line per GEMM: "gemm thread=T call=I status=N sqnr=DB", the
 * SQNR of its output against a float64 reference of the stored inputs,
 * and exits 0 when every call returned 0. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/convert.h"
#include "client.h"

static int THREADS = 8, CALLS = 4, DIM = 32;
static CUcontext ctx;
static pthread_barrier_t barrier;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static int failures;

typedef struct worker {
  int t;
  uint64_t rng;
} worker;

static float uniform(uint64_t *rng) {
  uint64_t z = (*rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / (double)(1ull << 52) - 1.0);
}

static void *run(void *arg) {
  worker *w = arg;
  const int n = DIM;
  const size_t bytes = (size_t)n * n * 2;
  CUstream stream;
  cublasHandle_t handle;
  CUdeviceptr A, B, D;
  uint16_t *a = calloc((size_t)n * n, 2), *b = calloc((size_t)n * n, 2), *d = calloc((size_t)n * n, 2);
  if (!a || !b || !d || client_drv.cuCtxSetCurrent(ctx) || client_drv.cuStreamCreate(&stream, 0) ||
      cublasCreate(&handle) || cublasSetStream(handle, stream) || client_drv.cuMemAlloc_v2(&A, bytes) ||
      client_drv.cuMemAlloc_v2(&B, bytes) || client_drv.cuMemAlloc_v2(&D, bytes)) {
    fprintf(stderr, "fp8_threads_client: thread %d set-up failed\n", w->t);
    exit(2);
  }
  const float amp = powf(10.0f, (float)(w->t - 3)), one = 1.0f, zero = 0.0f;
  for (int call = 0; call < CALLS; call++) {
    /* New data each call, of the thread's amplitude, in the same buffers. */
    for (int i = 0; i < n * n; i++) a[i] = gs_f32_to_bf16_rn(amp * uniform(&w->rng));
    for (int i = 0; i < n * n; i++) b[i] = gs_f32_to_bf16_rn(amp * uniform(&w->rng));
    client_drv.cuMemcpyHtoD_v2(A, a, bytes);
    client_drv.cuMemcpyHtoD_v2(B, b, bytes);
    pthread_barrier_wait(&barrier);
    /* D = A^T B: A stored k x m, B stored k x n. */
    cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, (const void *)A, CUDA_R_16BF, n,
                                    (const void *)B, CUDA_R_16BF, n, &zero, (void *)D, CUDA_R_16BF, n,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    client_drv.cuStreamSynchronize(stream);
    client_drv.cuMemcpyDtoH_v2(d, D, bytes);
    double sig = 0, err = 0;
    for (int j = 0; j < n; j++)
      for (int i = 0; i < n; i++) {
        double r = 0;
        for (int k = 0; k < n; k++)
          r += (double)gs_bf16_to_f32(a[k + (size_t)i * n]) * gs_bf16_to_f32(b[k + (size_t)j * n]);
        double e = gs_bf16_to_f32(d[i + (size_t)j * n]) - r;
        sig += r * r;
        err += e * e;
      }
    pthread_mutex_lock(&print_lock);
    if (s != CUBLAS_STATUS_SUCCESS) failures++;
    printf("gemm thread=%d call=%d status=%d sqnr=%.2f\n", w->t, call, (int)s,
           err == 0 ? 99.0 : 10.0 * log10(sig / err));
    pthread_mutex_unlock(&print_lock);
  }
  cublasDestroy(handle);
  free(a), free(b), free(d);
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (sscanf(argv[i], "--threads=%d", &THREADS) == 1 || sscanf(argv[i], "--calls=%d", &CALLS) == 1 ||
        sscanf(argv[i], "--dim=%d", &DIM) == 1)
      continue;
    fprintf(stderr, "usage: fp8_threads_client [--threads=N] [--calls=C] [--dim=D]\n");
    return 2;
  }
  if (THREADS < 1 || THREADS > 64 || CALLS < 1 || DIM < 1) return 2;
  CUdevice dev;
  const char *why = client_driver_load();
  if (why || client_drv.cuInit(0) || client_drv.cuDeviceGet(&dev, 0) || client_drv.cuDevicePrimaryCtxRetain(&ctx, dev)) {
    fprintf(stderr, "fp8_threads_client: set-up failed: %s\n", why ? why : "driver");
    return 2;
  }
  pthread_barrier_init(&barrier, NULL, (unsigned)THREADS);
  pthread_t tid[64];
  worker w[64];
  for (int t = 0; t < THREADS; t++) {
    w[t] = (worker){t, 0x7468726561647300ull + (uint64_t)t};
    if (pthread_create(&tid[t], NULL, run, &w[t])) return 2;
  }
  for (int t = 0; t < THREADS; t++) pthread_join(tid[t], NULL);
  return failures ? 1 : 0;
}
