/* fp8_client.c: a training loop as PyTorch drives cuBLAS, for the fp8
 * route's end-to-end test (test_fp8_route.py).
 *
 * L Linear layers of one shape (H x H weights, bf16), T tokens. Each step
 * runs the forward on the main thread (y = x W^T: cublasGemmEx T,N with A =
 * W, B = x) and the backward on a new thread named "pt_autograd_0", as
 * PyTorch's autograd engine names its CUDA worker (grad-input dx = dy W: N,N
 * with A = W, B = dy; grad-weight dW = dy^T x: N,T with A = x, B = dy).
 * Every activation and gradient is a fresh allocation that is never freed,
 * so no activation pointer repeats across steps: only the weights stay put.
 * All GEMMs come from one call site in this program, as in PyTorch.
 *
 * --reset-before=S tears the context down before step S the way programs
 * do (JAX/XLA rebuilding a client, cudaDeviceReset): --reset=primary
 * releases the primary context and retains it again, --reset=device calls
 * cuDevicePrimaryCtxReset (what cudaDeviceReset does), --reset=created runs
 * the loop in a cuCtxCreate context and destroys and creates it. Nothing of
 * the old context survives (the CUDA Driver API: the primary context "is
 * automatically reset once the last reference to it is released"), so
 * the handle, the stream and the weights are made again. The new context
 * usually has the old one's address; "reset step=S same_address=0|1" says.
 *
 * --checkpoint=1 recomputes each layer's forward on the backward thread
 * before its gradients (kind=recompute), as torch.utils.checkpoint does.
 *
 * --stream=per-thread runs every GEMM on CU_STREAM_PER_THREAD (one
 * handle, the per-thread default stream: another stream in each thread,
 * the backward's new each step) instead of a stream of its own.
 *
 * --wait-log=1 waits between steps until the file GEMMSHIM_LOG names
 * holds a record of every GEMM so far (client_log_wait: 60 s at most,
 * then exit 3): the log's writer has read those calls' measurements
 * (GEMMSHIM_COMPARE) before the next step's first call.
 *
 * --churn=N instead runs N times what cudaDeviceReset and JAX client
 * rebuilds do around a GEMM: retain the primary context, make a cuBLAS
 * handle and a stream, run one forward GEMM (step=i), destroy the handle
 * and the stream and release the primary context to zero.
 *
 * Prints one line per GEMM: "gemm step=S kind=fwd|recompute|dgrad|wgrad layer=L
 * status=N sqnr=DB", the SQNR of its output against a float64 reference of
 * the stored inputs, and exits 0 when every call returned 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../kernels/convert.h"
#include "client.h"
#include "client_log.h"

static int L = 4, STEPS = 3, H = 64, T = 32, RESET_BEFORE = -1, CHURN = 0, CHECKPOINT = 0, WAIT_LOG = 0;
static const char *reset_kind = "primary";
static int PER_THREAD;
static CUdevice dev;
static CUcontext ctx;
static CUstream stream;
static cublasHandle_t handle;
static int failures, calls;

static uint64_t rng = 0x66703863;
static float uniform(void) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / (double)(1ull << 52) - 1.0);
}

/* A bf16 matrix in device memory with its host copy. */
typedef struct mat {
  CUdeviceptr dev;
  uint16_t *host;
  int rows, cols;
} mat;

static mat mat_new(int rows, int cols, float amp) {
  mat m = {0, calloc((size_t)rows * cols, 2), rows, cols};
  if (!m.host || client_drv.cuMemAlloc_v2(&m.dev, (size_t)rows * cols * 2) != CUDA_SUCCESS) {
    fprintf(stderr, "fp8_client: allocation failed\n");
    exit(2);
  }
  for (int i = 0; i < rows * cols; i++) m.host[i] = gs_f32_to_bf16_rn(amp * uniform());
  client_drv.cuMemcpyHtoD_v2(m.dev, m.host, (size_t)rows * cols * 2);
  return m;
}

static void mat_fetch(mat *m) { client_drv.cuMemcpyDtoH_v2(m->host, m->dev, (size_t)m->rows * m->cols * 2); }

static double at(const mat *m, int r, int c) { return gs_bf16_to_f32(m->host[r + (size_t)c * m->rows]); }

/* D = op(A) op(B), column-major, and the SQNR of the result. */
static void gemm(int step, const char *kind, int layer, int ta, int tb, mat *A, mat *B, mat *D) {
  const float one = 1.0f, zero = 0.0f;
  int m = D->rows, n = D->cols, k = ta == CUBLAS_OP_N ? A->cols : A->rows;
  cublasStatus_t s = cublasGemmEx(handle, (cublasOperation_t)ta, (cublasOperation_t)tb, m, n, k, &one,
                                  (const void *)A->dev, CUDA_R_16BF, A->rows, (const void *)B->dev, CUDA_R_16BF,
                                  B->rows, &zero, (void *)D->dev, CUDA_R_16BF, D->rows, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT);
  client_drv.cuStreamSynchronize(stream);
  mat_fetch(D);
  double sig = 0, err = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double r = 0;
      for (int kk = 0; kk < k; kk++)
        r += (ta == CUBLAS_OP_N ? at(A, i, kk) : at(A, kk, i)) * (tb == CUBLAS_OP_N ? at(B, kk, j) : at(B, j, kk));
      double d = at(D, i, j) - r;
      sig += r * r;
      err += d * d;
    }
  if (s != CUBLAS_STATUS_SUCCESS) failures++;
  __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  printf("gemm step=%d kind=%s layer=%d status=%d sqnr=%.2f\n", step, kind, layer, (int)s,
         err == 0 ? 99.0 : 10.0 * log10(sig / err));
}

static mat *W, *x;
static int cur_step;

static void *backward(void *arg) {
  pthread_setname_np(pthread_self(), "pt_autograd_0");
  client_drv.cuCtxSetCurrent(ctx);
  mat dy = mat_new(H, T, 1.0f);
  for (int l = L - 1; l >= 0; l--) {
    mat dx = mat_new(H, T, 0.0f), dW = mat_new(H, H, 0.0f);
    if (CHECKPOINT) {
      /* torch.utils.checkpoint: the layer's forward again, on this thread */
      mat y = mat_new(H, T, 0.0f);
      gemm(cur_step, "recompute", l, CUBLAS_OP_T, CUBLAS_OP_N, &W[l], &x[l], &y);
    }
    gemm(cur_step, "dgrad", l, CUBLAS_OP_N, CUBLAS_OP_N, &W[l], &dy, &dx);
    gemm(cur_step, "wgrad", l, CUBLAS_OP_N, CUBLAS_OP_T, &x[l], &dy, &dW);
    dy = dx;
  }
  return arg;
}

/* cuCtxCreate/cuCtxDestroy/cuDevicePrimaryCtxReset: not in the shared
 * client table (client.h). */
static CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
static CUresult (*ctx_destroy)(CUcontext);
static CUresult (*primary_reset)(CUdevice);

static void *driver_symbol(const char *name) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return h ? dlsym(h, name) : NULL;
}

static int session_open(void) {
  if (PER_THREAD) stream = CU_STREAM_PER_THREAD;
  else if (client_drv.cuStreamCreate(&stream, 0)) return -1;
  return cublasCreate(&handle) || cublasSetStream(handle, stream) ? -1 : 0;
}

static int session_close(void) {
  return cublasDestroy(handle) || (!PER_THREAD && client_drv.cuStreamDestroy_v2(stream)) ? -1 : 0;
}

static int context_open(void) {
  if (strcmp(reset_kind, "created") == 0) {
    ctx_create = (__typeof__(ctx_create))driver_symbol("cuCtxCreate_v4");
    ctx_destroy = (__typeof__(ctx_destroy))driver_symbol("cuCtxDestroy_v2");
    if (!ctx_create || !ctx_destroy || ctx_create(&ctx, NULL, 0, dev)) return -1;
  } else if (client_drv.cuDevicePrimaryCtxRetain(&ctx, dev) || client_drv.cuCtxSetCurrent(ctx)) {
    return -1;
  }
  return session_open();
}

static void weights_new(void) {
  /* Weights scaled 1/sqrt(H): activations stay of one size through the layers. */
  for (int l = 0; l < L; l++) {
    free(W[l].host);
    W[l] = mat_new(H, H, 1.0f / sqrtf((float)H));
  }
}

/* Everything of the old context goes with it; the program makes its
 * objects again, as a framework rebuilding its client does. */
static int context_reset(int step) {
  CUcontext old = ctx;
  if (session_close()) return -1;
  if (strcmp(reset_kind, "device") == 0) {
    /* The retain stays: the same handle is the new context at once. */
    primary_reset = (__typeof__(primary_reset))driver_symbol("cuDevicePrimaryCtxReset_v2");
    if (!primary_reset || primary_reset(dev) != CUDA_SUCCESS || session_open()) return -1;
  } else {
    if (strcmp(reset_kind, "created") == 0 ? ctx_destroy(ctx) != CUDA_SUCCESS
                                           : client_drv.cuDevicePrimaryCtxRelease_v2(dev) != CUDA_SUCCESS)
      return -1;
    if (context_open()) return -1;
  }
  weights_new();
  printf("reset step=%d same_address=%d\n", step, ctx == old);
  return 0;
}

/* --churn: nothing of a round outlives its context. */
static int churn(void) {
  for (int i = 0; i < CHURN; i++) {
    if (context_open()) return 2;
    mat w = mat_new(H, H, 1.0f / sqrtf((float)H)), a = mat_new(H, T, 1.0f), y = mat_new(H, T, 0.0f);
    gemm(i, "fwd", 0, CUBLAS_OP_T, CUBLAS_OP_N, &w, &a, &y);
    free(w.host), free(a.host), free(y.host);
    if (session_close() || client_drv.cuDevicePrimaryCtxRelease_v2(dev)) return 2;
  }
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  static char kind[16];
  for (int i = 1; i < argc; i++) {
    if (sscanf(argv[i], "--layers=%d", &L) == 1 || sscanf(argv[i], "--steps=%d", &STEPS) == 1 ||
        sscanf(argv[i], "--dim=%d", &H) == 1 || sscanf(argv[i], "--tokens=%d", &T) == 1 ||
        sscanf(argv[i], "--reset-before=%d", &RESET_BEFORE) == 1 || sscanf(argv[i], "--churn=%d", &CHURN) == 1 ||
        sscanf(argv[i], "--checkpoint=%d", &CHECKPOINT) == 1 || sscanf(argv[i], "--wait-log=%d", &WAIT_LOG) == 1)
      continue;
    if (strcmp(argv[i], "--stream=per-thread") == 0) {
      PER_THREAD = 1;
      continue;
    }
    if (sscanf(argv[i], "--reset=%15s", kind) == 1 && (!strcmp(kind, "primary") || !strcmp(kind, "created") || !strcmp(kind, "device"))) {
      reset_kind = kind;
      continue;
    }
    fprintf(stderr, "usage: fp8_client [--layers=L] [--steps=S] [--dim=H] [--tokens=T] [--reset-before=S] "
                    "[--reset=primary|device|created] [--checkpoint=0|1] [--stream=per-thread] [--wait-log=1] "
                    "[--churn=N]\n");
    return 2;
  }
  const char *why = client_driver_load();
  if (why || client_drv.cuInit(0) || client_drv.cuDeviceGet(&dev, 0) || (!CHURN && context_open())) {
    fprintf(stderr, "fp8_client: set-up failed: %s\n", why ? why : "driver or cuBLAS");
    return 2;
  }
  if (CHURN) return churn();
  W = calloc((size_t)L, sizeof *W);
  x = calloc((size_t)L + 1, sizeof *x);
  weights_new();
  for (cur_step = 0; cur_step < STEPS; cur_step++) {
    if (cur_step == RESET_BEFORE && context_reset(cur_step)) {
      fprintf(stderr, "fp8_client: the context reset failed\n");
      return 2;
    }
    x[0] = mat_new(H, T, 1.0f);
    for (int l = 0; l < L; l++) {
      x[l + 1] = mat_new(H, T, 0.0f);
      gemm(cur_step, "fwd", l, CUBLAS_OP_T, CUBLAS_OP_N, &W[l], &x[l], &x[l + 1]);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, backward, NULL) || pthread_join(t, NULL)) return 2;
    const char *log = getenv("GEMMSHIM_LOG");
    if (WAIT_LOG && cur_step + 1 < STEPS && !(log && client_log_wait(log, calls))) {
      fprintf(stderr, "fp8_client: %s did not hold %d records within 60 s\n", log ? log : "(GEMMSHIM_LOG unset)",
              calls);
      return 3;
    }
  }
  cublasDestroy(handle);
  return failures ? 1 : 0;
}
