/* train_demo.c: a small bf16 training loop that drives cuBLAS the way
 * PyTorch does under torch.autocast(dtype=torch.bfloat16), for `make demo`.
 *
 * The model, in PyTorch terms (row-major tensors):
 *   x  [G, B, F/G]           G groups of input features
 *   h  = relu(bmm(x, W1^T))  W1 [G, H/G, F/G]: a grouped linear layer (bmm)
 *   y  = linear(h.cat, W2, b2) with W2 [O, H], b2 [O] (addmm with a bias)
 *   loss = mse(y, t), t from a fixed "teacher" of the same shape plus noise,
 * trained full-batch with Adam on fp32 master weights; the GEMMs see bf16
 * copies of them, rewritten in place each step (the same device pointers,
 * as a caching allocator hands them out).
 *
 * The cuBLAS calls, as PyTorch makes them (all bf16 in, bf16 out, compute
 * CUBLAS_COMPUTE_32F; see ATen's CUDABlas.cpp):
 *   forward  layer 1  cublasGemmStridedBatchedEx  (bmm -> at::cuda::blas::bgemm)
 *            layer 2  cublasLtMatmul, epilogue BIAS, C == D, beta 0
 *                     (addmm with a 1-D bias -> gemm_and_bias)
 *   backward layer 2  grad-input and grad-weight: cublasGemmEx (mm)
 *            layer 1  grad-weight: cublasGemmStridedBatchedEx (bmm); the
 *                     input needs no gradient, so no grad-input GEMM
 * The backward runs on a thread named pt_autograd_0, as PyTorch's autograd
 * engine names its CUDA worker. Element-wise work (ReLU, the loss, the bias
 * gradient, the optimizer) runs on the host, where a framework would launch
 * its own kernels.
 *
 * Output: one "step N loss X" line per step, then "final loss X"; exit 0
 * when every cuBLAS call returned CUBLAS_STATUS_SUCCESS, 1 when one did
 * not, 2 for a usage or set-up error. Over real cuBLAS and a GPU it runs
 * the same way. */
#define _GNU_SOURCE
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { G = 4, FG = 16, HG = 32, F = G * FG, H = G * HG, O = 16, B = 128 };

static int steps = 40;
static float lr = 0.01f;

static CUcontext ctx;
static CUstream stream;
static cublasHandle_t blas;
static cublasLtHandle_t lt;
static int failed_calls;

/* ---- numbers ------------------------------------------------------------ */

static uint64_t rng_state;
static double uniform(void) { /* splitmix64 -> [-1, 1) */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}

/* bf16 is the top half of an fp32; round to nearest even, NaN kept quiet. */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- device tensors ----------------------------------------------------- */

/* A bf16 tensor on the device, with a host staging copy. */
typedef struct tensor {
  CUdeviceptr dev;
  uint16_t *host;
  size_t n;
} tensor;

static void die(const char *what) {
  fprintf(stderr, "train_demo: %s\n", what);
  exit(2);
}

static tensor tensor_new(size_t n) {
  tensor t = {0, calloc(n, sizeof(uint16_t)), n};
  if (!t.host || cuMemAlloc(&t.dev, n * sizeof(uint16_t)) != CUDA_SUCCESS) die("device allocation failed");
  return t;
}
/* The copies run on the legacy default stream, which a stream created with
 * CU_STREAM_DEFAULT (blocking) is ordered with: a GEMM on it sees the
 * uploaded data, and a copy waits for the GEMMs before it (CUDA driver API,
 * "Stream synchronization behavior"). The explicit synchronisation makes
 * the result visible to the host. */
static void upload(tensor *t, const float *v) {
  for (size_t i = 0; i < t->n; i++) t->host[i] = to_bf16(v[i]);
  if (cuMemcpyHtoD(t->dev, t->host, t->n * 2) != CUDA_SUCCESS) die("cuMemcpyHtoD failed");
}
static void download(tensor *t, float *v) {
  if (cuStreamSynchronize(stream) != CUDA_SUCCESS || cuMemcpyDtoH(t->host, t->dev, t->n * 2) != CUDA_SUCCESS)
    die("cuMemcpyDtoH failed");
  for (size_t i = 0; i < t->n; i++) v[i] = from_bf16(t->host[i]);
}

static void check(const char *what, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  failed_calls++;
  fprintf(stderr, "train_demo: %s returned %d\n", what, (int)s);
}

/* ---- the three ways PyTorch calls cuBLAS --------------------------------- */

static const float one = 1.0f, zero = 0.0f;

/* mm: D = op(A) op(B), column-major. */
static void mm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const tensor *A, int lda,
               const tensor *Bm, int ldb, tensor *D, int ldd) {
  check("cublasGemmEx",
        cublasGemmEx(blas, ta, tb, m, n, k, &one, (const void *)A->dev, CUDA_R_16BF, lda, (const void *)Bm->dev,
                     CUDA_R_16BF, ldb, &zero, (void *)D->dev, CUDA_R_16BF, ldd, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT_TENSOR_OP));
}

/* bmm: G strided GEMMs. */
static void bmm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const tensor *A, int lda,
                long long sa, const tensor *Bm, int ldb, long long sb, tensor *D, int ldd, long long sd) {
  check("cublasGemmStridedBatchedEx",
        cublasGemmStridedBatchedEx(blas, ta, tb, m, n, k, &one, (const void *)A->dev, CUDA_R_16BF, lda, sa,
                                   (const void *)Bm->dev, CUDA_R_16BF, ldb, sb, &zero, (void *)D->dev, CUDA_R_16BF,
                                   ldd, sd, G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
}

/* addmm with a 1-D bias: D = op(A)^T op(B) + bias (per row of D), through
 * cuBLASLt with the BIAS epilogue, the output passed as both C and D and
 * beta 0, an algorithm from the heuristic and a workspace, as ATen's
 * gemm_and_bias does. */
enum { LT_WORKSPACE = 1 << 20 };
static CUdeviceptr lt_workspace;

static void addmm_bias(int m, int n, int k, const tensor *A, int lda, const tensor *Bm, int ldb, const tensor *bias,
                       tensor *D, int ldd) {
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  const void *bias_ptr = (const void *)bias->dev;
  size_t ws = LT_WORKSPACE;
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  cublasStatus_t s = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
#define STEP(call) \
  if (s == CUBLAS_STATUS_SUCCESS) s = (call)
  STEP(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  STEP(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  STEP(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  STEP(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr));
  STEP(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, lda));
  STEP(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, ldb));
  STEP(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, ldd));
  STEP(cublasLtMatmulPreferenceCreate(&pref));
  STEP(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  STEP(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &heur, &found));
  if (s == CUBLAS_STATUS_SUCCESS && found == 0) s = CUBLAS_STATUS_NOT_SUPPORTED;
  STEP(cublasLtMatmul(lt, desc, &one, (const void *)A->dev, la, (const void *)Bm->dev, lb, &zero,
                      (const void *)D->dev, ld, (void *)D->dev, ld, &heur.algo, (void *)lt_workspace,
                      LT_WORKSPACE, stream));
#undef STEP
  check("cublasLtMatmul (with its descriptors)", s);
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (desc) cublasLtMatmulDescDestroy(desc);
}

/* ---- the model ----------------------------------------------------------- */

/* A parameter: fp32 master weights, Adam moments, and the bf16 copy the
 * GEMMs read. */
typedef struct param {
  float *w, *grad, *m, *v;
  tensor bf16;
  size_t n;
} param;

static param param_new(size_t n, double amp) {
  param p = {calloc(n, 4), calloc(n, 4), calloc(n, 4), calloc(n, 4), tensor_new(n), n};
  if (!p.w || !p.grad || !p.m || !p.v) die("out of memory");
  for (size_t i = 0; i < n; i++) p.w[i] = (float)(amp * uniform());
  upload(&p.bf16, p.w);
  return p;
}

/* Adam (beta1 0.9, beta2 0.999, eps 1e-8), then the new bf16 copy. */
static void adam_step(param *p, int t) {
  const double b1 = 0.9, b2 = 0.999, c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
  for (size_t i = 0; i < p->n; i++) {
    p->m[i] = (float)(b1 * p->m[i] + (1 - b1) * p->grad[i]);
    p->v[i] = (float)(b2 * p->v[i] + (1 - b2) * (double)p->grad[i] * p->grad[i]);
    p->w[i] -= (float)(lr * (p->m[i] / c1) / (sqrt(p->v[i] / c2) + 1e-8));
  }
  upload(&p->bf16, p->w);
}

static param W1, W2, b2;
/* Activations and gradients, allocated once. Column-major shapes:
 * x [FG, B] per group, h1 [HG, B] per group, hcat [H, B], y and dy [O, B],
 * dh [H, B], dh1 [HG, B] per group, dW1 [FG, HG] per group, dW2 [H, O]. */
static tensor x, h1, hcat, y, dy, dh, dh1, dW1, dW2;
static float *target, *h1_f, *y_f, *buf_f;

static void forward(void) {
  /* h1[g] = x[g] W1[g]^T: column-major D [HG, B] = W1cm[g]^T [HG, FG] x[g] [FG, B]. */
  bmm(CUBLAS_OP_T, CUBLAS_OP_N, HG, B, FG, &W1.bf16, FG, (long long)HG * FG, &x, FG, (long long)FG * B, &h1, HG,
      (long long)HG * B);
  /* relu, and the groups side by side: hcat[b, g*HG + j] = relu(h1[g][b, j]). */
  download(&h1, h1_f);
  for (int g = 0; g < G; g++)
    for (int b = 0; b < B; b++)
      for (int j = 0; j < HG; j++) {
        float v = h1_f[(size_t)g * HG * B + (size_t)b * HG + j];
        buf_f[(size_t)b * H + g * HG + j] = v > 0 ? v : 0;
      }
  upload(&hcat, buf_f);
  /* y = hcat W2^T + b2: column-major D [O, B] = W2cm^T [O, H] hcat [H, B] + b2. */
  addmm_bias(O, B, H, &W2.bf16, H, &hcat, H, &b2.bf16, &y, O);
}

/* The loss and its gradient dy = 2 (y - t) / (B O), in bf16 as autocast
 * leaves it; the bias gradient is its sum over the batch. */
static double loss_and_dy(void) {
  download(&y, y_f);
  double loss = 0;
  memset(b2.grad, 0, sizeof(float) * O);
  for (int i = 0; i < B * O; i++) {
    double d = (double)y_f[i] - target[i];
    loss += d * d;
    buf_f[i] = (float)(2.0 * d / (B * O));
    b2.grad[i % O] += buf_f[i];
  }
  upload(&dy, buf_f);
  return loss / (B * O);
}

static void *backward(void *arg) {
  pthread_setname_np(pthread_self(), "pt_autograd_0");
  if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) die("cuCtxSetCurrent failed on the backward thread");
  /* layer 2, grad-input: dh = dy W2, column-major [H, B] = W2cm [H, O] dy [O, B]. */
  mm(CUBLAS_OP_N, CUBLAS_OP_N, H, B, O, &W2.bf16, H, &dy, O, &dh, H);
  /* layer 2, grad-weight: dW2 = dy^T hcat, column-major [H, O] = hcat [H, B] dy^T [B, O]. */
  mm(CUBLAS_OP_N, CUBLAS_OP_T, H, O, B, &hcat, H, &dy, O, &dW2, H);
  /* relu backward, back into groups: dh1[g][b, j] = dh[b, g*HG + j] where h1 > 0. */
  download(&dh, buf_f);
  float *dh1_f = calloc((size_t)G * HG * B, 4);
  if (!dh1_f) die("out of memory");
  for (int g = 0; g < G; g++)
    for (int b = 0; b < B; b++)
      for (int j = 0; j < HG; j++) {
        size_t i = (size_t)g * HG * B + (size_t)b * HG + j;
        dh1_f[i] = h1_f[i] > 0 ? buf_f[(size_t)b * H + g * HG + j] : 0;
      }
  upload(&dh1, dh1_f);
  free(dh1_f);
  /* layer 1, grad-weight: dW1[g] = dh1[g]^T x[g], column-major [FG, HG] = x[g] [FG, B] dh1[g]^T [B, HG]. */
  bmm(CUBLAS_OP_N, CUBLAS_OP_T, FG, HG, B, &x, FG, (long long)FG * B, &dh1, HG, (long long)HG * B, &dW1, FG,
      (long long)FG * HG);
  download(&dW1, W1.grad);
  download(&dW2, W2.grad);
  return arg;
}

/* The teacher: the same architecture, its own weights, in fp64 on the host. */
static void make_data(void) {
  double w1[G * HG * FG], w2[O * H], bias[O];
  rng_state = 0x7465616368ull; /* "teach" */
  for (int i = 0; i < G * HG * FG; i++) w1[i] = uniform() * sqrt(3.0 / FG);
  for (int i = 0; i < O * H; i++) w2[i] = uniform() * sqrt(6.0 / H);
  for (int i = 0; i < O; i++) bias[i] = 0.5 * uniform();
  float *xf = calloc((size_t)G * FG * B, 4);
  if (!xf) die("out of memory");
  for (int i = 0; i < G * FG * B; i++) xf[i] = (float)uniform();
  upload(&x, xf);
  download(&x, xf); /* the teacher sees the bf16 inputs the model sees */
  for (int b = 0; b < B; b++) {
    double hid[H];
    for (int g = 0; g < G; g++)
      for (int j = 0; j < HG; j++) {
        double s = 0;
        for (int f = 0; f < FG; f++) s += xf[(size_t)g * FG * B + (size_t)b * FG + f] * w1[(g * HG + j) * FG + f];
        hid[g * HG + j] = s > 0 ? s : 0;
      }
    for (int o = 0; o < O; o++) {
      double s = bias[o];
      for (int j = 0; j < H; j++) s += hid[j] * w2[o * H + j];
      target[(size_t)b * O + o] = (float)(s + 0.01 * uniform());
    }
  }
  free(xf);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (sscanf(argv[i], "--steps=%d", &steps) == 1 && steps > 0) continue;
    if (sscanf(argv[i], "--lr=%f", &lr) == 1 && lr > 0) continue;
    fprintf(stderr, "usage: train_demo [--steps=N (> 0, default 40)] [--lr=X (default 0.01)]\n");
    return 2;
  }
  CUdevice dev;
  int major = 0, minor = 0;
  char name[128] = "";
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuStreamCreate(&stream, CU_STREAM_DEFAULT) != CUDA_SUCCESS)
    die("no CUDA device (cuInit, cuDeviceGet, the primary context or a stream failed)");
  cuDeviceGetName(name, sizeof name, dev);
  cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(blas, stream) != CUBLAS_STATUS_SUCCESS ||
      cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS || cuMemAlloc(&lt_workspace, LT_WORKSPACE) != CUDA_SUCCESS)
    die("cuBLAS or cuBLASLt set-up failed");
  printf("device %s (sm_%d.%d); model %d -> %d (%d groups) -> %d, batch %d, %d steps, Adam lr %g\n", name, major,
         minor, F, H, G, O, B, steps, lr);

  x = tensor_new((size_t)G * FG * B);
  h1 = tensor_new((size_t)G * HG * B);
  hcat = tensor_new((size_t)H * B);
  y = tensor_new((size_t)O * B);
  dy = tensor_new((size_t)O * B);
  dh = tensor_new((size_t)H * B);
  dh1 = tensor_new((size_t)G * HG * B);
  dW1 = tensor_new((size_t)G * FG * HG);
  dW2 = tensor_new((size_t)H * O);
  target = calloc((size_t)B * O, 4);
  h1_f = calloc((size_t)G * HG * B, 4);
  y_f = calloc((size_t)B * O, 4);
  buf_f = calloc((size_t)H * B, 4);
  if (!target || !h1_f || !y_f || !buf_f) die("out of memory");
  make_data();
  rng_state = 0x73747564656e74ull; /* "student" */
  W1 = param_new((size_t)G * HG * FG, sqrt(3.0 / FG));
  W2 = param_new((size_t)O * H, sqrt(3.0 / H));
  b2 = param_new(O, 0.0);

  double loss = 0;
  for (int step_no = 0; step_no < steps; step_no++) {
    forward();
    loss = loss_and_dy();
    printf("step %d loss %.6f\n", step_no, loss);
    pthread_t t;
    if (pthread_create(&t, NULL, backward, NULL) != 0 || pthread_join(t, NULL) != 0) die("backward thread failed");
    adam_step(&W1, step_no + 1);
    adam_step(&W2, step_no + 1);
    adam_step(&b2, step_no + 1);
  }
  printf("final loss %.6f\n", loss);
  cublasLtDestroy(lt);
  cublasDestroy(blas);
  return failed_calls ? 1 : 0;
}
