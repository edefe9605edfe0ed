/* fp8_threads_client.c: threads that share nothing but a call site, for
 * the fp8 recipes' isolation test (test_fp8_recipes.py).
 *
 * N threads (--threads=N, 8 by default), each with its own cuBLAS handle,
 * stream and buffers made once and kept, call the same cublasGemmEx line
 * (T,N, M = N = K = --dim, 32 by default, bf16 in and out, fp32 compute)
 * --calls times; --m and --k set M and K apart from N = --dim. With
 * --legacy-stream the handles keep the legacy stream, which a handle uses
 * unless told otherwise (cuBLAS docs, cublasSetStream): the threads then
 * share a stream and nothing else. --shared-a gives every thread one A
 * (a weight in common: unit amplitude, written once, never changed), B
 * and D still its own. --rotate hands the threads' buffer sets around:
 * at call I thread T uses set (T + I) mod N, as a caching allocator hands
 * a freed block to another thread (a second barrier after each call: no
 * set is in two threads' hands at once). With
 * --outlier, A's element (i = 3, k = 5) and B's (k = 7, j = 9) are 1e5:
 * each line then also gives sqnr_clean, over the outputs D(i, j) with
 * i >= 128 and j >= 128, which share no 1x128, 128x128 or 32-element
 * scale block with either outlier (the whole output when that is empty).
 * --autograd-first: before the threads start, a thread named
 * pt_autograd_0 (PyTorch's autograd thread) makes one 32^3 GEMM of its
 * own, so that the threads' GEMMs are known forward ones (a (T,N) GEMM's
 * A then a weight to the block recipe). Thread t's data has amplitude
 * 10^(t - 3): the threads'
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

static int THREADS = 8, CALLS = 4, DIM = 32, MDIM = 0, KDIM = 0, OUTLIER = 0, LEGACY = 0, SHARED_A = 0, ROTATE = 0,
           AUTOGRAD_FIRST = 0;
static CUcontext ctx;
static pthread_barrier_t barrier;
static CUdeviceptr set_a[64], set_b[64], set_d[64]; /* buffer set i: thread i's own */
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
  const int n = DIM, m = MDIM, kd = KDIM;
  const size_t abytes = (size_t)kd * m * 2, bbytes = (size_t)kd * n * 2, bytes = (size_t)m * n * 2;
  CUstream stream = NULL;
  cublasHandle_t handle;
  uint16_t *a = calloc((size_t)kd * m, 2), *b = calloc((size_t)kd * n, 2), *d = calloc((size_t)m * n, 2);
  if (!a || !b || !d || client_drv.cuCtxSetCurrent(ctx) || (!LEGACY && client_drv.cuStreamCreate(&stream, 0)) ||
      cublasCreate(&handle) || (!LEGACY && cublasSetStream(handle, stream))) {
    fprintf(stderr, "fp8_threads_client: thread %d set-up failed\n", w->t);
    exit(2);
  }
  const float amp = powf(10.0f, (float)(w->t - 3)), one = 1.0f, zero = 0.0f;
  uint64_t shared_rng = 0x7368617265644100ull; /* the same A in every thread */
  if (SHARED_A)
    for (int i = 0; i < kd * m; i++) a[i] = gs_f32_to_bf16_rn(uniform(&shared_rng));
  for (int call = 0; call < CALLS; call++) {
    const int set = ROTATE ? (w->t + call) % THREADS : w->t;
    const CUdeviceptr A = SHARED_A ? set_a[0] : set_a[set], B = set_b[set], D = set_d[set];
    /* New data each call, of the thread's amplitude, in the same buffers. */
    if (!SHARED_A)
      for (int i = 0; i < kd * m; i++) a[i] = gs_f32_to_bf16_rn(amp * uniform(&w->rng));
    for (int i = 0; i < kd * n; i++) b[i] = gs_f32_to_bf16_rn(amp * uniform(&w->rng));
    if (OUTLIER && m > 3 && n > 9 && kd > 7) {
      a[5 + (size_t)3 * kd] = gs_f32_to_bf16_rn(1e5f);
      b[7 + (size_t)9 * kd] = gs_f32_to_bf16_rn(1e5f);
    }
    if (!SHARED_A || (w->t == 0 && call == 0)) client_drv.cuMemcpyHtoD_v2(A, a, abytes);
    client_drv.cuMemcpyHtoD_v2(B, b, bbytes);
    pthread_barrier_wait(&barrier);
    /* D = A^T B: A stored k x m, B stored k x n. */
    cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kd, &one, (const void *)A, CUDA_R_16BF, kd,
                                    (const void *)B, CUDA_R_16BF, kd, &zero, (void *)D, CUDA_R_16BF, m,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    client_drv.cuStreamSynchronize(stream);
    client_drv.cuMemcpyDtoH_v2(d, D, bytes);
    double sig = 0, err = 0, csig = 0, cerr = 0;
    const int clean_from = m > 128 && n > 128 ? 128 : 0;
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double r = 0;
        for (int k = 0; k < kd; k++)
          r += (double)gs_bf16_to_f32(a[k + (size_t)i * kd]) * gs_bf16_to_f32(b[k + (size_t)j * kd]);
        double e = gs_bf16_to_f32(d[i + (size_t)j * m]) - r;
        sig += r * r;
        err += e * e;
        if (i >= clean_from && j >= clean_from) csig += r * r, cerr += e * e;
      }
    pthread_mutex_lock(&print_lock);
    if (s != CUBLAS_STATUS_SUCCESS) failures++;
    printf("gemm thread=%d call=%d status=%d sqnr=%.2f", w->t, call, (int)s, err == 0 ? 99.0 : 10.0 * log10(sig / err));
    if (OUTLIER) printf(" sqnr_clean=%.2f", cerr == 0 ? 99.0 : 10.0 * log10(csig / cerr));
    printf("\n");
    pthread_mutex_unlock(&print_lock);
    if (ROTATE) pthread_barrier_wait(&barrier);
  }
  cublasDestroy(handle);
  free(a), free(b), free(d);
  return NULL;
}

/* One GEMM on a thread named as PyTorch names its autograd thread. */
static void *autograd_call(void *arg) {
  (void)arg;
  enum { N = 32 };
  static uint16_t host[N * N];
  for (int i = 0; i < N * N; i++) host[i] = gs_f32_to_bf16_rn((float)(i % 7) - 3.0f);
  CUdeviceptr a, b, d;
  cublasHandle_t h;
  const float one = 1.0f, zero = 0.0f;
  if (pthread_setname_np(pthread_self(), "pt_autograd_0") || client_drv.cuCtxSetCurrent(ctx) ||
      client_drv.cuMemAlloc_v2(&a, sizeof host) || client_drv.cuMemAlloc_v2(&b, sizeof host) ||
      client_drv.cuMemAlloc_v2(&d, sizeof host) || client_drv.cuMemcpyHtoD_v2(a, host, sizeof host) ||
      client_drv.cuMemcpyHtoD_v2(b, host, sizeof host) || cublasCreate(&h)) {
    fprintf(stderr, "fp8_threads_client: autograd thread set-up failed\n");
    exit(2);
  }
  cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, (const void *)a, CUDA_R_16BF, N,
                                  (const void *)b, CUDA_R_16BF, N, &zero, (void *)d, CUDA_R_16BF, N,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  client_drv.cuStreamSynchronize(NULL);
  printf("autograd status=%d\n", (int)s);
  if (s != CUBLAS_STATUS_SUCCESS) failures++;
  cublasDestroy(h);
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (sscanf(argv[i], "--threads=%d", &THREADS) == 1 || sscanf(argv[i], "--calls=%d", &CALLS) == 1 ||
        sscanf(argv[i], "--dim=%d", &DIM) == 1 || sscanf(argv[i], "--m=%d", &MDIM) == 1 ||
        sscanf(argv[i], "--k=%d", &KDIM) == 1)
      continue;
    static const struct {
      const char *name;
      int *on;
    } flags[] = {{"--outlier", &OUTLIER}, {"--legacy-stream", &LEGACY}, {"--shared-a", &SHARED_A}, {"--rotate", &ROTATE},
                 {"--autograd-first", &AUTOGRAD_FIRST}};
    int known = 0;
    for (size_t f = 0; f < sizeof flags / sizeof flags[0] && !known; f++)
      if (strcmp(argv[i], flags[f].name) == 0) *flags[f].on = known = 1;
    if (known) continue;
    fprintf(stderr, "usage: fp8_threads_client [--threads=N] [--calls=C] [--dim=D] [--m=M] [--k=K] [--outlier] "
                    "[--legacy-stream] [--shared-a] [--rotate] [--autograd-first]\n");
    return 2;
  }
  if (!MDIM) MDIM = DIM;
  if (!KDIM) KDIM = DIM;
  if (THREADS < 1 || THREADS > 64 || CALLS < 1 || DIM < 1 || MDIM < 1 || KDIM < 1) return 2;
  CUdevice dev;
  const char *why = client_driver_load();
  if (why || client_drv.cuInit(0) || client_drv.cuDeviceGet(&dev, 0) || client_drv.cuDevicePrimaryCtxRetain(&ctx, dev)) {
    fprintf(stderr, "fp8_threads_client: set-up failed: %s\n", why ? why : "driver");
    return 2;
  }
  for (int t = 0; t < THREADS; t++)
    if (client_drv.cuCtxSetCurrent(ctx) || client_drv.cuMemAlloc_v2(&set_a[t], (size_t)KDIM * MDIM * 2) ||
        client_drv.cuMemAlloc_v2(&set_b[t], (size_t)KDIM * DIM * 2) ||
        client_drv.cuMemAlloc_v2(&set_d[t], (size_t)MDIM * DIM * 2)) {
      fprintf(stderr, "fp8_threads_client: allocation failed\n");
      return 2;
    }
  if (AUTOGRAD_FIRST) {
    pthread_t ag;
    if (pthread_create(&ag, NULL, autograd_call, NULL) || pthread_join(ag, NULL)) return 2;
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
