/* gemm_suite.c: the GEMM calls every integration client makes, checked
 * against a float64 reference computed here.
 *
 * Each call gets fresh seeded random operands. Outputs are poisoned with NaN
 * when beta == 0 (cuBLAS must not read C then), every element outside the
 * result (ld padding, gaps between batch matrices, an out-of-place C) must
 * come back bit-identical, and results must lie within atol + rtol*|ref| for
 * the output type. One line per call:
 *
 *   call <i> kind=valid|invalid|nogpu api=<name> case=<name> transa=N
 *        transb=T m= n= k= batch= a=bf16 b=bf16 c=bf16 compute=32f lda= ldb=
 *        ldc= stride_a= stride_b= stride_c= epilogue=<name|none> alpha=
 *        beta= status=<n> maxerr=<x|-> hash=<16 hex|-> ok=<0|1>
 *
 * hash is FNV-1a over the whole output buffer, so runs that must compute
 * identically (a pass-through shim) can be compared byte for byte. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

#ifdef CLIENT_BLAS_DIRECT
#define BLAS(name) name
#else
#define BLAS(name) client_blas.name
#endif

#define SUITE_EXIT_SETUP 2

/* ---- entry points ------------------------------------------------------- */
typedef enum client_api {
  API_GEMM_EX,
  API_GEMM_EX_64,
  API_STRIDED,
  API_STRIDED_64,
  API_BATCHED,
  API_BATCHED_64,
  API_LT,
  API_COUNT
} client_api;

static const char *const api_names[API_COUNT] = {
    "cublasGemmEx",        "cublasGemmEx_64",        "cublasGemmStridedBatchedEx",
    "cublasGemmStridedBatchedEx_64", "cublasGemmBatchedEx", "cublasGemmBatchedEx_64",
    "cublasLtMatmul",
};

static int api_is_batched_array(client_api a) { return a == API_BATCHED || a == API_BATCHED_64; }

/* ---- number formats ------------------------------------------------------- */
static const char *type_name(cudaDataType t) {
  switch (t) {
  case CUDA_R_32F: return "fp32";
  case CUDA_R_16F: return "fp16";
  case CUDA_R_16BF: return "bf16";
  default: return "unknown";
  }
}

static size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Round to nearest even, as __float2bfloat16_rn does. */
static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static double elem_get(cudaDataType t, const void *buf, size_t i) {
  switch (t) {
  case CUDA_R_32F: return ((const float *)buf)[i];
  case CUDA_R_16F: return (double)((const _Float16 *)buf)[i];
  default: return bf16_to_f32(((const uint16_t *)buf)[i]);
  }
}

/* Store v rounded to t; returns the value actually stored. */
static double elem_set(cudaDataType t, void *buf, size_t i, double v) {
  switch (t) {
  case CUDA_R_32F: ((float *)buf)[i] = (float)v; break;
  case CUDA_R_16F: ((_Float16 *)buf)[i] = (_Float16)(float)v; break;
  default: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
  }
  return elem_get(t, buf, i);
}

/* A quiet NaN with a payload, so a poisoned element is recognisable. */
static void elem_poison(cudaDataType t, void *buf, size_t i) {
  switch (t) {
  case CUDA_R_32F: ((uint32_t *)buf)[i] = 0x7fc0dead; break;
  case CUDA_R_16F: ((uint16_t *)buf)[i] = 0x7e5a; break;
  default: ((uint16_t *)buf)[i] = 0x7fda; break;
  }
}

/* Tolerances: the output's rounding (half an ulp relative) plus fp32
 * accumulation over k terms of magnitude <= 1. */
static void tolerance(cudaDataType out, int64_t k, double *atol, double *rtol) {
  double acc = 4e-7 * (double)k;
  switch (out) {
  case CUDA_R_32F: *atol = 1e-5 + acc; *rtol = 1e-5; break;
  case CUDA_R_16F: *atol = 1e-3 + acc; *rtol = 2e-3; break;
  default: *atol = 1e-2 + acc; *rtol = 8e-3; break;
  }
}

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* xorshift64*: small, seedable, identical everywhere. */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}
static double rng_uniform(uint64_t *s) { /* [-1, 1) */
  return (double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}
static uint64_t rng_seed(uint64_t seed, uint64_t stream) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + stream * 0xbf58476d1ce4e5b9ull + 1;
  for (int i = 0; i < 4; i++) rng_next(&s);
  return s ? s : 1;
}

/* ---- the cases ------------------------------------------------------------ */
#define OP_N CUBLAS_OP_N
#define OP_T CUBLAS_OP_T
#define BF16 CUDA_R_16BF
#define F16 CUDA_R_16F
#define F32 CUDA_R_32F
#define EPI_NONE 0

typedef struct gemm_case {
  const char *name;
  client_api api;
  cublasOperation_t ta, tb;
  int m, n, k, batch;
  cudaDataType ab, c;            /* A and B type; C (and D) type */
  int lda_pad, ldb_pad, ldc_pad; /* ld = rows + pad */
  int stride_pad;                /* batched: elements between matrices */
  int b_broadcast;               /* strided batched: strideB = 0 */
  float alpha, beta;
  int epilogue;                  /* Lt: cublasLtEpilogue_t; EPI_NONE elsewhere */
  int out_of_place;              /* Lt: D has its own buffer, C is only read */
} gemm_case;

/* Shapes are odd on purpose (off-by-one in ld or stride shows), and include
 * the calls PyTorch makes: bf16 GemmEx with beta 0, bgemm through
 * StridedBatchedEx, addmm through Lt with a bias epilogue and C == D. */
static const gemm_case valid_cases[] = {
    {"gemm_bf16_nn", API_GEMM_EX, OP_N, OP_N, 33, 17, 29, 1, BF16, BF16, 0, 0, 0, 0, 0, 1.0f, 0.0f, EPI_NONE, 0},
    {"gemm_bf16_tn_f32out", API_GEMM_EX, OP_T, OP_N, 24, 19, 40, 1, BF16, F32, 5, 0, 3, 0, 0, 1.5f, 0.5f, EPI_NONE, 0},
    {"gemm_fp32_nt", API_GEMM_EX, OP_N, OP_T, 31, 22, 18, 1, F32, F32, 2, 7, 1, 0, 0, -0.75f, 1.25f, EPI_NONE, 0},
    {"gemm_fp16_tt", API_GEMM_EX, OP_T, OP_T, 20, 28, 33, 1, F16, F16, 0, 4, 0, 0, 0, 1.0f, 0.25f, EPI_NONE, 0},
    {"gemm_bf16_k0", API_GEMM_EX, OP_N, OP_N, 12, 9, 0, 1, BF16, BF16, 0, 0, 2, 0, 0, 1.0f, 0.0f, EPI_NONE, 0},
    {"gemm_fp32_k0_beta", API_GEMM_EX, OP_T, OP_N, 10, 11, 0, 1, F32, F32, 0, 0, 0, 0, 0, 2.0f, -0.5f, EPI_NONE, 0},
    {"gemm64_bf16_nt", API_GEMM_EX_64, OP_N, OP_T, 27, 35, 21, 1, BF16, BF16, 3, 2, 5, 0, 0, 1.0f, 0.5f, EPI_NONE, 0},
    {"gemm64_fp32_nn", API_GEMM_EX_64, OP_N, OP_N, 16, 16, 64, 1, F32, F32, 0, 0, 0, 0, 0, 0.5f, 0.0f, EPI_NONE, 0},
    {"strided_bf16_nn", API_STRIDED, OP_N, OP_N, 17, 13, 24, 3, BF16, BF16, 0, 0, 0, 0, 0, 1.0f, 0.0f, EPI_NONE, 0},
    {"strided_fp32_tn", API_STRIDED, OP_T, OP_N, 14, 18, 25, 4, F32, F32, 2, 1, 3, 5, 0, 1.0f, 0.75f, EPI_NONE, 0},
    {"strided_bf16_k0", API_STRIDED, OP_N, OP_N, 8, 7, 0, 2, BF16, F32, 0, 0, 0, 0, 0, 1.0f, 3.0f, EPI_NONE, 0},
    {"strided64_fp16_nt_bcast", API_STRIDED_64, OP_N, OP_T, 19, 15, 12, 2, F16, F16, 1, 0, 0, 2, 1, 1.0f, 0.5f, EPI_NONE, 0},
    {"strided64_bf16_tt", API_STRIDED_64, OP_T, OP_T, 11, 23, 31, 2, BF16, BF16, 0, 0, 1, 0, 0, 1.0f, 0.0f, EPI_NONE, 0},
    {"batched_bf16_tt", API_BATCHED, OP_T, OP_T, 15, 21, 26, 3, BF16, BF16, 0, 2, 1, 0, 0, 1.0f, 0.5f, EPI_NONE, 0},
    {"batched_fp16_nn_f32out", API_BATCHED, OP_N, OP_N, 23, 9, 17, 2, F16, F32, 0, 0, 0, 0, 0, 1.0f, 0.0f, EPI_NONE, 0},
    {"batched64_fp32_nt", API_BATCHED_64, OP_N, OP_T, 18, 20, 30, 2, F32, F32, 4, 0, 2, 3, 0, 1.25f, -1.0f, EPI_NONE, 0},
    {"batched64_bf16_tn", API_BATCHED_64, OP_T, OP_N, 13, 12, 22, 3, BF16, BF16, 1, 1, 0, 0, 0, 1.0f, 0.0f, EPI_NONE, 0},
    {"lt_fp32_bias_oop", API_LT, OP_N, OP_N, 26, 14, 20, 1, F32, F32, 0, 0, 2, 0, 0, 1.0f, 0.5f, CUBLASLT_EPILOGUE_BIAS, 1},
    {"lt_bf16_relu_bias_tn", API_LT, OP_T, OP_N, 32, 24, 48, 1, BF16, BF16, 0, 0, 0, 0, 0, 1.0f, 0.0f, CUBLASLT_EPILOGUE_RELU_BIAS, 0},
    {"lt_fp16_gelu_bias_oop", API_LT, OP_N, OP_T, 21, 27, 19, 1, F16, F16, 3, 1, 0, 0, 0, 1.0f, 0.5f, CUBLASLT_EPILOGUE_GELU_BIAS, 1},
    {"lt_bf16_f32out_tt", API_LT, OP_T, OP_T, 22, 13, 36, 1, BF16, F32, 2, 3, 4, 0, 0, 0.5f, 1.5f, CUBLASLT_EPILOGUE_DEFAULT, 0},
    {"lt_bf16_batched", API_LT, OP_N, OP_N, 12, 10, 16, 3, BF16, BF16, 0, 0, 0, 2, 0, 1.0f, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, 0},
    {"lt_fp32_nt", API_LT, OP_N, OP_T, 17, 19, 23, 1, F32, F32, 1, 0, 0, 0, 0, -1.0f, 0.25f, CUBLASLT_EPILOGUE_DEFAULT, 0},
};
#define N_VALID_CASES ((int)(sizeof valid_cases / sizeof valid_cases[0]))

static const char *epilogue_name(int e) {
  switch (e) {
  case EPI_NONE: return "none";
  case CUBLASLT_EPILOGUE_DEFAULT: return "default";
  case CUBLASLT_EPILOGUE_BIAS: return "bias";
  case CUBLASLT_EPILOGUE_RELU_BIAS: return "relu_bias";
  case CUBLASLT_EPILOGUE_GELU_BIAS: return "gelu_bias";
  default: return "unknown";
  }
}
static int epilogue_has_bias(int e) { return e != EPI_NONE && (e & CUBLASLT_EPILOGUE_BIAS); }

/* The concrete arguments of one call, derived from a case. */
typedef struct gemm_args {
  const gemm_case *cs;
  const char *name;
  int64_t m, n, k, batch;
  int64_t rows_a, cols_a, rows_b, cols_b;
  int64_t lda, ldb, ldc;
  int64_t sa, sb, sc; /* elements between consecutive batch matrices */
  size_t na, nb, nc;  /* elements in each buffer */
} gemm_args;

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static size_t span(int64_t ld, int64_t cols, int64_t stride, int64_t batch) {
  int64_t n = ld * cols + (batch > 1 ? stride * (batch - 1) : 0);
  return (size_t)max64(n, 1);
}

static void args_from_case(gemm_args *g, const gemm_case *cs, int64_t m, int64_t n, int64_t k) {
  memset(g, 0, sizeof *g);
  g->cs = cs;
  g->name = cs->name;
  g->m = m, g->n = n, g->k = k, g->batch = cs->batch;
  g->rows_a = cs->ta == OP_N ? m : k, g->cols_a = cs->ta == OP_N ? k : m;
  g->rows_b = cs->tb == OP_N ? k : n, g->cols_b = cs->tb == OP_N ? n : k;
  g->lda = max64(g->rows_a, 1) + cs->lda_pad;
  g->ldb = max64(g->rows_b, 1) + cs->ldb_pad;
  g->ldc = max64(m, 1) + cs->ldc_pad;
  if (g->batch > 1) {
    g->sa = g->lda * g->cols_a + cs->stride_pad;
    g->sb = cs->b_broadcast ? 0 : g->ldb * g->cols_b + cs->stride_pad;
    g->sc = g->ldc * n + cs->stride_pad;
  }
  g->na = span(g->lda, g->cols_a, g->sa, g->batch);
  g->nb = span(g->ldb, g->cols_b, g->sb, g->batch);
  g->nc = span(g->ldc, n, g->sc, g->batch);
}

/* Pointer-array batches: A's pointers run backwards through its buffer while
 * B and C run forwards, so an implementation that treats the arrays as a
 * fixed stride gets the wrong answer. */
static int64_t a_slot(const gemm_args *g, int64_t b) {
  return api_is_batched_array(g->cs->api) ? g->batch - 1 - b : b;
}
static size_t a_index(const gemm_args *g, int64_t b, int64_t i, int64_t l) {
  int64_t base = a_slot(g, b) * g->sa;
  return (size_t)(base + (g->cs->ta == OP_N ? i + l * g->lda : l + i * g->lda));
}
static size_t b_index(const gemm_args *g, int64_t b, int64_t l, int64_t j) {
  return (size_t)(b * g->sb + (g->cs->tb == OP_N ? l + j * g->ldb : j + l * g->ldb));
}
static size_t c_index(const gemm_args *g, int64_t b, int64_t i, int64_t j) {
  return (size_t)(b * g->sc + i + j * g->ldc);
}

/* ---- per-thread context --------------------------------------------------- */
typedef struct suite_ctx {
  CUcontext cu;
  CUstream stream;
  cublasHandle_t h;
  cublasLtHandle_t lt;
  CUdeviceptr workspace;
  size_t workspace_size;
} suite_ctx;

static void die_cu(const char *what, CUresult r) {
  fprintf(stderr, "gemm_suite: %s failed: CUresult %d\n", what, (int)r);
  exit(SUITE_EXIT_SETUP);
}
static void die_blas(const char *what, cublasStatus_t s) {
  fprintf(stderr, "gemm_suite: %s failed: cublasStatus_t %d\n", what, (int)s);
  exit(SUITE_EXIT_SETUP);
}
#define CU(call)                                                               \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) die_cu(#call, r_);                                 \
  } while (0)

static CUdevice g_dev;
static CUcontext g_primary;

static void ctx_open(suite_ctx *x) {
  memset(x, 0, sizeof *x);
  x->cu = g_primary;
  CU(client_drv.cuCtxSetCurrent(x->cu));
  CU(client_drv.cuStreamCreate(&x->stream, CU_STREAM_DEFAULT));
  cublasStatus_t s = BLAS(cublasCreate_v2)(&x->h);
  if (s != CUBLAS_STATUS_SUCCESS) die_blas("cublasCreate_v2", s);
  s = BLAS(cublasSetStream_v2)(x->h, (cudaStream_t)x->stream);
  if (s != CUBLAS_STATUS_SUCCESS) die_blas("cublasSetStream_v2", s);
  s = BLAS(cublasLtCreate)(&x->lt);
  if (s != CUBLAS_STATUS_SUCCESS) die_blas("cublasLtCreate", s);
  x->workspace_size = 4u << 20;
  CU(client_drv.cuMemAlloc_v2(&x->workspace, x->workspace_size));
}

static void ctx_close(suite_ctx *x) {
  CU(client_drv.cuMemFree_v2(x->workspace));
  cublasStatus_t s = BLAS(cublasLtDestroy)(x->lt);
  if (s != CUBLAS_STATUS_SUCCESS) die_blas("cublasLtDestroy", s);
  s = BLAS(cublasDestroy_v2)(x->h);
  if (s != CUBLAS_STATUS_SUCCESS) die_blas("cublasDestroy_v2", s);
  CU(client_drv.cuStreamDestroy_v2(x->stream));
}

typedef struct dev_buf {
  void *host;
  CUdeviceptr dev;
  size_t bytes;
} dev_buf;

static void buf_alloc(dev_buf *b, size_t bytes) {
  b->bytes = bytes;
  b->host = calloc(1, bytes);
  if (!b->host) {
    fprintf(stderr, "gemm_suite: out of host memory\n");
    exit(SUITE_EXIT_SETUP);
  }
  CU(client_drv.cuMemAlloc_v2(&b->dev, bytes));
}
static void buf_upload(dev_buf *b) { CU(client_drv.cuMemcpyHtoD_v2(b->dev, b->host, b->bytes)); }
static void *buf_download(const dev_buf *b) {
  void *out = malloc(b->bytes);
  if (!out) {
    fprintf(stderr, "gemm_suite: out of host memory\n");
    exit(SUITE_EXIT_SETUP);
  }
  CU(client_drv.cuMemcpyDtoH_v2(out, b->dev, b->bytes));
  return out;
}
static void buf_free(dev_buf *b) {
  if (b->dev) CU(client_drv.cuMemFree_v2(b->dev));
  free(b->host);
  memset(b, 0, sizeof *b);
}

/* ---- one call -------------------------------------------------------------- */
typedef struct call_result {
  int status;
  double maxerr;   /* < 0: not measured */
  uint64_t hash;
  int has_hash;
  int ok;
} call_result;

typedef struct call_operands {
  dev_buf a, b, c, d, bias, ptrs; /* d: Lt out-of-place output only */
  float alpha, beta;
} call_operands;

static void fill_random(cudaDataType t, dev_buf *b, size_t n, uint64_t *rng) {
  for (size_t i = 0; i < n; i++) elem_set(t, b->host, i, rng_uniform(rng));
}

static void make_operands(call_operands *o, const gemm_args *g, uint64_t seed) {
  const gemm_case *cs = g->cs;
  uint64_t rng = seed;
  memset(o, 0, sizeof *o);
  o->alpha = cs->alpha, o->beta = cs->beta;
  buf_alloc(&o->a, g->na * type_size(cs->ab));
  buf_alloc(&o->b, g->nb * type_size(cs->ab));
  buf_alloc(&o->c, g->nc * type_size(cs->c));
  fill_random(cs->ab, &o->a, g->na, &rng);
  fill_random(cs->ab, &o->b, g->nb, &rng);
  if (cs->beta != 0.0f)
    fill_random(cs->c, &o->c, g->nc, &rng);
  else
    for (size_t i = 0; i < g->nc; i++) elem_poison(cs->c, o->c.host, i);
  if (cs->out_of_place) {
    buf_alloc(&o->d, g->nc * type_size(cs->c));
    for (size_t i = 0; i < g->nc; i++) elem_poison(cs->c, o->d.host, i);
    buf_upload(&o->d);
  }
  if (epilogue_has_bias(cs->epilogue)) {
    buf_alloc(&o->bias, (size_t)g->m * type_size(cs->c));
    fill_random(cs->c, &o->bias, (size_t)g->m, &rng);
    buf_upload(&o->bias);
  }
  buf_upload(&o->a);
  buf_upload(&o->b);
  buf_upload(&o->c);
  if (api_is_batched_array(cs->api)) {
    /* Device arrays of device pointers: A, then B, then C. */
    buf_alloc(&o->ptrs, 3 * (size_t)g->batch * sizeof(CUdeviceptr));
    CUdeviceptr *p = o->ptrs.host;
    for (int64_t b = 0; b < g->batch; b++) {
      p[b] = o->a.dev + (CUdeviceptr)(a_slot(g, b) * g->sa) * type_size(cs->ab);
      p[g->batch + b] = o->b.dev + (CUdeviceptr)(b * g->sb) * type_size(cs->ab);
      p[2 * g->batch + b] = o->c.dev + (CUdeviceptr)(b * g->sc) * type_size(cs->c);
    }
    buf_upload(&o->ptrs);
  }
}

static void free_operands(call_operands *o) {
  buf_free(&o->a);
  buf_free(&o->b);
  buf_free(&o->c);
  buf_free(&o->d);
  buf_free(&o->bias);
  buf_free(&o->ptrs);
}

/* ---- cuBLASLt descriptors -------------------------------------------------- */
typedef struct lt_descs {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c, d;
} lt_descs;

static cublasStatus_t layout_make(cublasLtMatrixLayout_t *l, cudaDataType t, int64_t rows,
                                  int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasStatus_t s = BLAS(cublasLtMatrixLayoutCreate)(l, t, (uint64_t)rows, (uint64_t)cols, ld);
  if (s != CUBLAS_STATUS_SUCCESS || batch <= 1) return s;
  int32_t count = (int32_t)batch;
  s = BLAS(cublasLtMatrixLayoutSetAttribute)(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  return BLAS(cublasLtMatrixLayoutSetAttribute)(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &stride, sizeof stride);
}

/* Descriptors for g; bias is a device (or, with no GPU, any) pointer. */
static void lt_make(lt_descs *L, const gemm_args *g, const void *bias) {
  const gemm_case *cs = g->cs;
  cublasStatus_t s;
  memset(L, 0, sizeof *L);
  if ((s = BLAS(cublasLtMatmulDescCreate)(&L->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)))
    die_blas("cublasLtMatmulDescCreate", s);
  int32_t ta = cs->ta, tb = cs->tb;
  if ((s = BLAS(cublasLtMatmulDescSetAttribute)(L->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
      (s = BLAS(cublasLtMatmulDescSetAttribute)(L->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)))
    die_blas("cublasLtMatmulDescSetAttribute(TRANS)", s);
  uint32_t epi = (uint32_t)cs->epilogue;
  if ((s = BLAS(cublasLtMatmulDescSetAttribute)(L->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)))
    die_blas("cublasLtMatmulDescSetAttribute(EPILOGUE)", s);
  if (epilogue_has_bias(cs->epilogue) &&
      (s = BLAS(cublasLtMatmulDescSetAttribute)(L->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias)))
    die_blas("cublasLtMatmulDescSetAttribute(BIAS_POINTER)", s);
  if ((s = layout_make(&L->a, cs->ab, g->rows_a, g->cols_a, g->lda, g->batch, g->sa)) ||
      (s = layout_make(&L->b, cs->ab, g->rows_b, g->cols_b, g->ldb, g->batch, g->sb)) ||
      (s = layout_make(&L->c, cs->c, g->m, g->n, g->ldc, g->batch, g->sc)))
    die_blas("cublasLtMatrixLayoutCreate", s);
  /* Out of place, D gets a descriptor object of its own (same layout, as
   * cuBLASLt requires); in place, PyTorch passes one descriptor twice. */
  if (cs->out_of_place) {
    if ((s = layout_make(&L->d, cs->c, g->m, g->n, g->ldc, g->batch, g->sc)))
      die_blas("cublasLtMatrixLayoutCreate", s);
  } else {
    L->d = L->c;
  }
}

static void lt_free(lt_descs *L) {
  if (L->d && L->d != L->c) BLAS(cublasLtMatrixLayoutDestroy)(L->d);
  if (L->c) BLAS(cublasLtMatrixLayoutDestroy)(L->c);
  if (L->b) BLAS(cublasLtMatrixLayoutDestroy)(L->b);
  if (L->a) BLAS(cublasLtMatrixLayoutDestroy)(L->a);
  if (L->op) BLAS(cublasLtMatmulDescDestroy)(L->op);
}

/* The GemmEx family's algo: what PyTorch passes for reduced precision. */
static cublasGemmAlgo_t algo_for(const gemm_case *cs) {
  return cs->ab == CUDA_R_32F ? CUBLAS_GEMM_DEFAULT : CUBLAS_GEMM_DEFAULT_TENSOR_OP;
}

/* What one call passes: device pointers, or host stand-ins with no GPU. */
typedef struct call_ptrs {
  const void *A, *B;
  void *C, *D;                         /* D: cublasLtMatmul only */
  const void *const *pa, *const *pb;   /* pointer-array batches */
  void *const *pc;
  const float *alpha, *beta;
} call_ptrs;

static call_ptrs device_ptrs(const gemm_args *g, const call_operands *o) {
  call_ptrs p = {0};
  p.A = (const void *)(uintptr_t)o->a.dev;
  p.B = (const void *)(uintptr_t)o->b.dev;
  p.C = (void *)(uintptr_t)o->c.dev;
  p.D = g->cs->out_of_place ? (void *)(uintptr_t)o->d.dev : p.C;
  if (api_is_batched_array(g->cs->api)) {
    CUdeviceptr base = o->ptrs.dev, n = (CUdeviceptr)g->batch * sizeof(CUdeviceptr);
    p.pa = (const void *const *)(uintptr_t)base;
    p.pb = (const void *const *)(uintptr_t)(base + n);
    p.pc = (void *const *)(uintptr_t)(base + 2 * n);
  }
  p.alpha = &o->alpha, p.beta = &o->beta;
  return p;
}

/* Issue g on handle h (NULL allowed: the invalid calls). L may be NULL (Lt
 * with no descriptors), x too (no GPU: no stream, no workspace). */
static cublasStatus_t issue(const gemm_args *g, cublasHandle_t h, cublasLtHandle_t lt,
                            const lt_descs *L, const call_ptrs *p, const suite_ctx *x) {
  const gemm_case *cs = g->cs;
  const void *A = p->A, *B = p->B;
  void *C = p->C;
  const void *const *pa = p->pa, *const *pb = p->pb;
  void *const *pc = p->pc;
  const float *alpha = p->alpha, *beta = p->beta;
  cublasComputeType_t comp = CUBLAS_COMPUTE_32F;
  cublasGemmAlgo_t algo = algo_for(cs);
  switch (cs->api) {
  case API_GEMM_EX:
    return BLAS(cublasGemmEx)(h, cs->ta, cs->tb, (int)g->m, (int)g->n, (int)g->k, alpha, A, cs->ab,
                              (int)g->lda, B, cs->ab, (int)g->ldb, beta, C, cs->c, (int)g->ldc, comp, algo);
  case API_GEMM_EX_64:
    return BLAS(cublasGemmEx_64)(h, cs->ta, cs->tb, g->m, g->n, g->k, alpha, A, cs->ab, g->lda, B,
                                 cs->ab, g->ldb, beta, C, cs->c, g->ldc, comp, algo);
  case API_STRIDED:
    return BLAS(cublasGemmStridedBatchedEx)(h, cs->ta, cs->tb, (int)g->m, (int)g->n, (int)g->k, alpha,
                                            A, cs->ab, (int)g->lda, g->sa, B, cs->ab, (int)g->ldb, g->sb,
                                            beta, C, cs->c, (int)g->ldc, g->sc, (int)g->batch, comp, algo);
  case API_STRIDED_64:
    return BLAS(cublasGemmStridedBatchedEx_64)(h, cs->ta, cs->tb, g->m, g->n, g->k, alpha, A, cs->ab,
                                               g->lda, g->sa, B, cs->ab, g->ldb, g->sb, beta, C, cs->c,
                                               g->ldc, g->sc, g->batch, comp, algo);
  case API_BATCHED:
    return BLAS(cublasGemmBatchedEx)(h, cs->ta, cs->tb, (int)g->m, (int)g->n, (int)g->k, alpha, pa,
                                     cs->ab, (int)g->lda, pb, cs->ab, (int)g->ldb, beta, pc, cs->c,
                                     (int)g->ldc, (int)g->batch, comp, algo);
  case API_BATCHED_64:
    return BLAS(cublasGemmBatchedEx_64)(h, cs->ta, cs->tb, g->m, g->n, g->k, alpha, pa, cs->ab, g->lda,
                                        pb, cs->ab, g->ldb, beta, pc, cs->c, g->ldc, g->batch, comp, algo);
  case API_LT:
    return BLAS(cublasLtMatmul)(lt, L ? L->op : NULL, alpha, A, L ? L->a : NULL, B, L ? L->b : NULL,
                                beta, C, L ? L->c : NULL, p->D, L ? L->d : NULL, NULL,
                                x ? (void *)(uintptr_t)x->workspace : NULL, x ? x->workspace_size : 0,
                                x ? (cudaStream_t)x->stream : NULL);
  default:
    return CUBLAS_STATUS_INVALID_VALUE;
  }
}

static double gelu_tanh(double v) {
  /* cuBLASLt's GELU epilogue is the tanh approximation. */
  return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

/* Compare the output against the float64 reference; every element outside
 * the result must be bit-identical to what was uploaded. */
static void verify(const gemm_args *g, const call_operands *o, const void *out, call_result *r) {
  const gemm_case *cs = g->cs;
  const void *out_before = cs->out_of_place ? o->d.host : o->c.host;
  size_t es = type_size(cs->c);
  char *is_result = calloc(g->nc, 1);
  double atol, rtol;
  tolerance(cs->c, g->k, &atol, &rtol);
  r->maxerr = 0.0;
  r->ok = is_result != NULL;
  for (int64_t b = 0; b < g->batch; b++)
    for (int64_t j = 0; j < g->n; j++)
      for (int64_t i = 0; i < g->m; i++) {
        double acc = 0.0;
        for (int64_t l = 0; l < g->k; l++)
          acc += elem_get(cs->ab, o->a.host, a_index(g, b, i, l)) *
                 elem_get(cs->ab, o->b.host, b_index(g, b, l, j));
        size_t ci = c_index(g, b, i, j);
        double ref = (double)cs->alpha * acc;
        if (cs->beta != 0.0f) ref += (double)cs->beta * elem_get(cs->c, o->c.host, ci);
        if (epilogue_has_bias(cs->epilogue)) ref += elem_get(cs->c, o->bias.host, (size_t)i);
        if (cs->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) ref = ref > 0 ? ref : 0;
        if (cs->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS) ref = gelu_tanh(ref);
        double got = elem_get(cs->c, out, ci);
        double err = fabs(got - ref);
        if (!(err <= atol + rtol * fabs(ref))) r->ok = 0;
        if (isnan(err) || err > r->maxerr) r->maxerr = err; /* a NaN sticks */
        is_result[ci] = 1;
      }
  for (size_t i = 0; i < g->nc && r->ok; i++)
    if (!is_result[i] && memcmp((const char *)out + i * es, (const char *)out_before + i * es, es))
      r->ok = 0;
  free(is_result);
}

static void run_valid(suite_ctx *x, const gemm_args *g, uint64_t seed, call_result *r) {
  const gemm_case *cs = g->cs;
  call_operands o;
  lt_descs L = {0};
  make_operands(&o, g, seed);
  call_ptrs p = device_ptrs(g, &o);
  if (cs->api == API_LT) lt_make(&L, g, (const void *)(uintptr_t)o.bias.dev);
  r->status = issue(g, x->h, x->lt, &L, &p, x);
  CU(client_drv.cuStreamSynchronize(x->stream));
  const dev_buf *outb = cs->out_of_place ? &o.d : &o.c;
  void *out = buf_download(outb);
  r->hash = fnv1a(out, outb->bytes), r->has_hash = 1;
  if (r->status == CUBLAS_STATUS_SUCCESS) {
    verify(g, &o, out, r);
  } else {
    r->ok = 0, r->maxerr = -1;
  }
  /* An out-of-place C is an input only. */
  if (cs->out_of_place) {
    void *c_after = buf_download(&o.c);
    if (memcmp(c_after, o.c.host, o.c.bytes)) r->ok = 0;
    free(c_after);
  }
  free(out);
  if (cs->api == API_LT) lt_free(&L);
  free_operands(&o);
}

/* ---- output lines ------------------------------------------------------------ */
static int format_line(char *buf, size_t len, const char *index, const char *kind,
                       const gemm_args *g, const call_result *r) {
  const gemm_case *cs = g->cs;
  /* Pointer-array batches have no stride argument: "0", as for batch 1. */
  int ptr_array = api_is_batched_array(cs->api);
  char err[32], hash[24];
  if (r->maxerr >= 0 || r->maxerr != r->maxerr)
    snprintf(err, sizeof err, "%.3e", r->maxerr);
  else
    snprintf(err, sizeof err, "-");
  if (r->has_hash)
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)r->hash);
  else
    snprintf(hash, sizeof hash, "-");
  return snprintf(buf, len,
                  "call %s kind=%s api=%s case=%s transa=%c transb=%c m=%lld n=%lld k=%lld "
                  "batch=%lld a=%s b=%s c=%s compute=32f lda=%lld ldb=%lld ldc=%lld stride_a=%lld "
                  "stride_b=%lld stride_c=%lld epilogue=%s "
                  "alpha=%g beta=%g status=%d maxerr=%s hash=%s ok=%d",
                  index, kind, api_names[cs->api], g->name, cs->ta == OP_N ? 'N' : 'T',
                  cs->tb == OP_N ? 'N' : 'T', (long long)g->m, (long long)g->n, (long long)g->k,
                  (long long)g->batch, type_name(cs->ab), type_name(cs->ab), type_name(cs->c),
                  (long long)g->lda, (long long)g->ldb, (long long)g->ldc, (long long)(ptr_array ? 0 : g->sa),
                  (long long)(ptr_array ? 0 : g->sb), (long long)(ptr_array ? 0 : g->sc),
                  epilogue_name(cs->epilogue),
                  (double)cs->alpha, (double)cs->beta, r->status, err, hash, r->ok);
}

static int print_call(int index, const char *kind, const gemm_args *g, const call_result *r) {
  char idx[16], line[512];
  snprintf(idx, sizeof idx, "%d", index);
  format_line(line, sizeof line, idx, kind, g, r);
  printf("%s\n", line);
  fflush(stdout);
  return r->ok;
}

/* ---- invalid calls ----------------------------------------------------------- */
/* Each is a valid case with one argument broken; cuBLAS must reject it
 * (status != SUCCESS) without touching the output. The status is printed for
 * the caller to compare: cuBLAS documents NOT_INITIALIZED for a bad handle
 * and INVALID_VALUE for m < 0 or ld < max(1, rows). */
typedef enum breakage {
  BREAK_NEG_M,
  BREAK_LDA_SMALL,
  BREAK_LDC_SMALL,
  BREAK_NEG_BATCH,
  BREAK_NULL_HANDLE,
  BREAK_NULL_MATMUL_DESC,
  BREAK_NULL_LAYOUTS,
} breakage;

typedef struct invalid_case {
  const char *name;
  const char *base; /* the valid case it breaks */
  breakage what;
  int named_only;   /* run only when --case names it: the call kills the process */
} invalid_case;

static const invalid_case invalid_cases[] = {
    {"inv_gemm_neg_m", "gemm_bf16_nn", BREAK_NEG_M, 0},
    {"inv_gemm_lda_small", "gemm_fp32_nt", BREAK_LDA_SMALL, 0},
    {"inv_gemm_null_handle", "gemm_bf16_nn", BREAK_NULL_HANDLE, 0},
    {"inv_gemm64_null_handle", "gemm64_bf16_nt", BREAK_NULL_HANDLE, 0},
    {"inv_strided_neg_batch", "strided_bf16_nn", BREAK_NEG_BATCH, 0},
    {"inv_strided64_null_handle", "strided64_bf16_tt", BREAK_NULL_HANDLE, 0},
    {"inv_batched_null_handle", "batched_bf16_tt", BREAK_NULL_HANDLE, 0},
    {"inv_batched64_ldc_small", "batched64_fp32_nt", BREAK_LDC_SMALL, 0},
    {"inv_lt_null_handle", "lt_bf16_relu_bias_tn", BREAK_NULL_HANDLE, 0},
    /* cuBLAS's docs promise INVALID_VALUE for NULL parameters, but
     * cuBLASLt 13.1 on an H200 dereferenced a NULL computeDesc (SIGSEGV;
     * docs/gpu-results.md), and the stand-in does the same: run only when
     * asked for, by a test that expects the process to die. */
    {"inv_lt_null_matmul_desc", "lt_fp32_nt", BREAK_NULL_MATMUL_DESC, 1},
    {"inv_lt_null_layouts", "lt_fp32_nt", BREAK_NULL_LAYOUTS, 0},
};
#define N_INVALID_CASES ((int)(sizeof invalid_cases / sizeof invalid_cases[0]))

static const gemm_case *find_case(const char *name) {
  for (int i = 0; i < N_VALID_CASES; i++)
    if (!strcmp(valid_cases[i].name, name)) return &valid_cases[i];
  return NULL;
}

static void run_invalid(suite_ctx *x, const invalid_case *ic, uint64_t seed, gemm_args *g,
                        call_result *r) {
  const gemm_case *cs = find_case(ic->base);
  args_from_case(g, cs, cs->m, cs->n, cs->k);
  g->name = ic->name;
  call_operands o;
  lt_descs L = {0};
  make_operands(&o, g, seed);
  if (cs->api == API_LT) lt_make(&L, g, (const void *)(uintptr_t)o.bias.dev);
  gemm_args bad = *g;
  lt_descs badL = L;
  cublasHandle_t h = x->h;
  cublasLtHandle_t lt = x->lt;
  switch (ic->what) {
  case BREAK_NEG_M: bad.m = -1; break;
  case BREAK_LDA_SMALL: bad.lda = max64(bad.rows_a, 1) - 1; break;
  case BREAK_LDC_SMALL: bad.ldc = max64(bad.m, 1) - 1; break;
  case BREAK_NEG_BATCH: bad.batch = -1; break;
  case BREAK_NULL_HANDLE: h = NULL, lt = NULL; break;
  case BREAK_NULL_MATMUL_DESC: badL.op = NULL; break;
  case BREAK_NULL_LAYOUTS: badL.a = badL.b = badL.c = badL.d = NULL; break;
  }
  call_ptrs p = device_ptrs(g, &o);
  r->status = issue(&bad, h, lt, &badL, &p, x);
  CU(client_drv.cuStreamSynchronize(x->stream));
  const dev_buf *outb = cs->out_of_place ? &o.d : &o.c;
  void *out = buf_download(outb);
  r->hash = fnv1a(out, outb->bytes), r->has_hash = 1;
  r->maxerr = -1;
  r->ok = r->status != CUBLAS_STATUS_SUCCESS && !memcmp(out, outb->host, outb->bytes);
  free(out);
  *g = bad;
  if (cs->api == API_LT) lt_free(&L);
  free_operands(&o);
}

/* ---- options ----------------------------------------------------------------- */
typedef struct suite_opts {
  uint64_t seed;
  unsigned apis;            /* bit per client_api */
  int types[3];             /* allowed A/B types; -1 = unused slot */
  int ntypes;
  const char *case_filter;  /* comma list of case names, NULL = all */
  int64_t shape_m, shape_n, shape_k; /* 0 = case's own */
  int valid, invalid;
  int threads, iters;
  int nogpu;
} suite_opts;

static int list_has(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncmp(p, word, n)) return 1;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

static int case_selected(const suite_opts *op, const gemm_case *cs) {
  if (!(op->apis & (1u << cs->api))) return 0;
  int type_ok = op->ntypes == 0;
  for (int i = 0; i < op->ntypes; i++) type_ok |= op->types[i] == (int)cs->ab;
  if (!type_ok) return 0;
  return !op->case_filter || list_has(op->case_filter, cs->name);
}

static void case_args(const suite_opts *op, const gemm_case *cs, gemm_args *g) {
  /* --shape applies to the cases that multiply something; k == 0 cases keep
   * k == 0, which is what they test. */
  int64_t m = op->shape_m ? op->shape_m : cs->m;
  int64_t n = op->shape_n ? op->shape_n : cs->n;
  int64_t k = cs->k == 0 ? 0 : (op->shape_k ? op->shape_k : cs->k);
  args_from_case(g, cs, m, n, k);
}

static void usage(void) {
  fprintf(stderr,
          "options:\n"
          "  --seed=N            operand seed (default 1)\n"
          "  --api=LIST          entry points, e.g. cublasGemmEx,cublasLtMatmul (default all)\n"
          "  --type=LIST         A/B types: bf16,fp16,fp32 (default all)\n"
          "  --case=LIST         case names (see --list)\n"
          "  --shape=MxNxK       override every case's shape (k == 0 cases keep k == 0)\n"
          "  --valid=0|1         run the checked calls (default 1)\n"
          "  --invalid=0|1       run the invalid calls (default 1)\n"
          "  --threads=N --iters=M  N threads, own handle and stream each, M calls each\n"
          "  --nogpu             no driver: every entry point with a NULL handle\n"
          "  --list              print the case names\n");
}

static int parse_opts(int argc, char **argv, suite_opts *op) {
  memset(op, 0, sizeof *op);
  op->seed = 1;
  op->apis = (1u << API_COUNT) - 1;
  op->valid = op->invalid = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    long long x, y, z;
    if (!strncmp(a, "--seed=", 7)) {
      op->seed = strtoull(a + 7, NULL, 0);
    } else if (!strncmp(a, "--api=", 6)) {
      op->apis = 0;
      for (int k = 0; k < API_COUNT; k++)
        if (list_has(a + 6, api_names[k])) op->apis |= 1u << k;
      if (!op->apis) return fprintf(stderr, "gemm_suite: no known entry point in %s\n", a), -1;
    } else if (!strncmp(a, "--type=", 7)) {
      static const cudaDataType all[] = {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
      for (int k = 0; k < 3; k++)
        if (list_has(a + 7, type_name(all[k]))) op->types[op->ntypes++] = all[k];
      if (!op->ntypes) return fprintf(stderr, "gemm_suite: no known type in %s\n", a), -1;
    } else if (!strncmp(a, "--case=", 7)) {
      op->case_filter = a + 7;
    } else if (sscanf(a, "--shape=%lldx%lldx%lld", &x, &y, &z) == 3) {
      if (x < 1 || y < 1 || z < 1) return fprintf(stderr, "gemm_suite: bad %s\n", a), -1;
      op->shape_m = x, op->shape_n = y, op->shape_k = z;
    } else if (!strncmp(a, "--valid=", 8)) {
      op->valid = atoi(a + 8);
    } else if (!strncmp(a, "--invalid=", 10)) {
      op->invalid = atoi(a + 10);
    } else if (!strncmp(a, "--threads=", 10)) {
      op->threads = atoi(a + 10);
    } else if (!strncmp(a, "--iters=", 8)) {
      op->iters = atoi(a + 8);
    } else if (!strcmp(a, "--nogpu")) {
      op->nogpu = 1;
    } else if (!strcmp(a, "--list")) {
      for (int k = 0; k < N_VALID_CASES; k++)
        printf("case %s api=%s\n", valid_cases[k].name, api_names[valid_cases[k].api]);
      for (int k = 0; k < N_INVALID_CASES; k++)
        printf("invalid %s%s\n", invalid_cases[k].name, invalid_cases[k].named_only ? " named-only" : "");
      exit(0);
    } else if (!strncmp(a, "--cuda=", 7)) {
      /* consumed by the loader programs */
    } else {
      fprintf(stderr, "gemm_suite: unknown option %s\n", a);
      usage();
      return -1;
    }
  }
  if ((op->threads > 0) != (op->iters > 0))
    return fprintf(stderr, "gemm_suite: --threads and --iters go together\n"), -1;
  return 0;
}

/* ---- modes -------------------------------------------------------------------- */
static int run_sequential(const suite_opts *op) {
  suite_ctx x;
  ctx_open(&x);
  int index = 0, failed = 0, selected = 0;
  if (op->valid)
    for (int i = 0; i < N_VALID_CASES; i++) {
      const gemm_case *cs = &valid_cases[i];
      if (!case_selected(op, cs)) continue;
      selected++;
      gemm_args g;
      call_result r = {0};
      case_args(op, cs, &g);
      run_valid(&x, &g, rng_seed(op->seed, (uint64_t)i), &r);
      failed += !print_call(index++, "valid", &g, &r);
    }
  if (op->invalid)
    for (int i = 0; i < N_INVALID_CASES; i++) {
      const gemm_case *base = find_case(invalid_cases[i].base);
      if (!(op->apis & (1u << base->api))) continue;
      if (invalid_cases[i].named_only && !(op->case_filter && list_has(op->case_filter, invalid_cases[i].name)))
        continue;
      selected++;
      gemm_args g;
      call_result r = {0};
      run_invalid(&x, &invalid_cases[i], rng_seed(op->seed, 1000u + (uint64_t)i), &g, &r);
      failed += !print_call(index++, "invalid", &g, &r);
    }
  ctx_close(&x);
  printf("summary calls=%d failed=%d\n", index, failed);
  /* Filters that match nothing are a mistake; --valid=0 --invalid=0 is a
   * deliberate run without GEMMs. */
  if (!selected && (op->valid || op->invalid))
    return fprintf(stderr, "gemm_suite: no case selected\n"), SUITE_EXIT_SETUP;
  return failed ? 1 : 0;
}

typedef struct thread_job {
  const suite_opts *op;
  const int *cases; /* indices into valid_cases */
  int ncases;
  int t;
  char (*lines)[512];
  int failed;
} thread_job;

/* Each thread: its own handle, Lt handle and stream; call j uses a case
 * chosen by (t + j) and a shape offset by t and j, so threads run different
 * entry points and shapes at the same time. */
static void *thread_main(void *arg) {
  thread_job *job = arg;
  const suite_opts *op = job->op;
  suite_ctx x;
  ctx_open(&x);
  for (int j = 0; j < op->iters; j++) {
    const gemm_case *cs = &valid_cases[job->cases[(job->t + j) % job->ncases]];
    gemm_args g;
    call_result r = {0};
    int64_t m = (op->shape_m ? op->shape_m : cs->m) + job->t % 4;
    int64_t n = (op->shape_n ? op->shape_n : cs->n) + j % 3;
    int64_t k = cs->k == 0 ? 0 : (op->shape_k ? op->shape_k : cs->k);
    args_from_case(&g, cs, m, n, k);
    run_valid(&x, &g, rng_seed(op->seed, (uint64_t)job->t << 20 | (uint64_t)j), &r);
    char idx[32];
    snprintf(idx, sizeof idx, "%d.%d", job->t, j);
    format_line(job->lines[j], sizeof job->lines[j], idx, "valid", &g, &r);
    job->failed += !r.ok;
  }
  ctx_close(&x);
  return NULL;
}

static int run_threads(const suite_opts *op) {
  int cases[N_VALID_CASES], ncases = 0;
  for (int i = 0; i < N_VALID_CASES; i++)
    if (case_selected(op, &valid_cases[i])) cases[ncases++] = i;
  if (!ncases) return fprintf(stderr, "gemm_suite: no case selected\n"), SUITE_EXIT_SETUP;
  pthread_t *tid = calloc((size_t)op->threads, sizeof *tid);
  thread_job *jobs = calloc((size_t)op->threads, sizeof *jobs);
  if (!tid || !jobs) return fprintf(stderr, "gemm_suite: out of memory\n"), SUITE_EXIT_SETUP;
  for (int t = 0; t < op->threads; t++) {
    jobs[t] = (thread_job){.op = op, .cases = cases, .ncases = ncases, .t = t};
    jobs[t].lines = calloc((size_t)op->iters, sizeof *jobs[t].lines);
    if (!jobs[t].lines) return fprintf(stderr, "gemm_suite: out of memory\n"), SUITE_EXIT_SETUP;
    if (pthread_create(&tid[t], NULL, thread_main, &jobs[t]))
      return fprintf(stderr, "gemm_suite: pthread_create failed\n"), SUITE_EXIT_SETUP;
  }
  int failed = 0;
  for (int t = 0; t < op->threads; t++) {
    pthread_join(tid[t], NULL);
    for (int j = 0; j < op->iters; j++) printf("%s\n", jobs[t].lines[j]);
    failed += jobs[t].failed;
    free(jobs[t].lines);
  }
  printf("summary calls=%d failed=%d\n", op->threads * op->iters, failed);
  free(jobs);
  free(tid);
  return failed ? 1 : 0;
}

/* No GPU: cublasCreate cannot succeed, so every entry point is called with a
 * NULL handle, host buffers standing in for device memory (cuBLAS rejects the
 * handle before it looks at them). The Lt call gets real descriptors, read
 * back here, so a caller can check what an interposer decoded from them. */
static int run_nogpu(const suite_opts *op) {
  cublasHandle_t h = NULL;
  cublasStatus_t s = BLAS(cublasCreate_v2)(&h);
  printf("create api=cublasCreate_v2 status=%d\n", (int)s);
  if (s == CUBLAS_STATUS_SUCCESS) BLAS(cublasDestroy_v2)(h);
  cublasLtHandle_t lt = NULL;
  s = BLAS(cublasLtCreate)(&lt);
  printf("create api=cublasLtCreate status=%d\n", (int)s);
  if (s == CUBLAS_STATUS_SUCCESS) BLAS(cublasLtDestroy)(lt);

  /* One case per entry point; the Lt one with an epilogue and padded lds so
   * every descriptor field differs from its default. */
  static const char *const per_api[API_COUNT] = {
      "gemm_bf16_tn_f32out", "gemm64_bf16_nt", "strided_fp32_tn", "strided64_fp16_nt_bcast",
      "batched_bf16_tt",     "batched64_fp32_nt", "lt_fp16_gelu_bias_oop",
  };
  static float host_mem[4096];
  static void *host_array[8];
  for (int i = 0; i < 8; i++) host_array[i] = host_mem;
  int index = 0, failed = 0;
  for (int a = 0; a < API_COUNT; a++) {
    if (!(op->apis & (1u << a))) continue;
    const gemm_case *cs = find_case(per_api[a]);
    gemm_args g;
    call_result r = {0};
    case_args(op, cs, &g);
    lt_descs L = {0};
    float alpha = cs->alpha, beta = cs->beta;
    call_ptrs p = {host_mem, host_mem, host_mem, host_mem, (const void *const *)host_array,
                   (const void *const *)host_array, host_array, &alpha, &beta};
    if (cs->api == API_LT) {
      lt_make(&L, &g, host_mem);
      /* What the descriptors hold, read back through cuBLASLt itself. */
      int32_t ta = -1, tb = -1, comp = -1;
      uint32_t epi = 0;
      uint64_t rows = 0, cols = 0;
      int64_t ld = 0;
      size_t w;
      int bad = 0;
      bad |= BLAS(cublasLtMatmulDescGetAttribute)(L.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, &w);
      bad |= BLAS(cublasLtMatmulDescGetAttribute)(L.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, &w);
      bad |= BLAS(cublasLtMatmulDescGetAttribute)(L.op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &comp, sizeof comp,
                                                 &w);
      bad |= BLAS(cublasLtMatmulDescGetAttribute)(L.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, &w);
      bad |= BLAS(cublasLtMatrixLayoutGetAttribute)(L.a, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, &w);
      bad |= BLAS(cublasLtMatrixLayoutGetAttribute)(L.a, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols, &w);
      bad |= BLAS(cublasLtMatrixLayoutGetAttribute)(L.a, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld, &w);
      printf("ltdesc status=%d transa=%d transb=%d compute=%d epilogue=%u a_rows=%llu a_cols=%llu lda=%lld\n",
             bad, ta, tb, comp, epi, (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
      int differs = ta != (int32_t)cs->ta || tb != (int32_t)cs->tb || comp != CUBLAS_COMPUTE_32F ||
                    epi != (uint32_t)cs->epilogue || rows != (uint64_t)g.rows_a ||
                    cols != (uint64_t)g.cols_a || ld != g.lda;
      if (bad || differs) failed++;
    }
    r.status = issue(&g, NULL, NULL, &L, &p, NULL);
    r.maxerr = -1;
    /* With no device nothing can succeed; a SUCCESS would mean a GPU was
     * there after all, and --nogpu is the wrong mode. */
    r.ok = r.status != CUBLAS_STATUS_SUCCESS;
    failed += !print_call(index++, "nogpu", &g, &r);
    if (cs->api == API_LT) {
      /* No descriptors at all: nothing for an interposer to decode. */
      gemm_args nd = g;
      nd.name = "nogpu_lt_null_descs";
      call_result rn = {0};
      rn.status = issue(&nd, NULL, NULL, NULL, &p, NULL);
      rn.maxerr = -1;
      rn.ok = rn.status != CUBLAS_STATUS_SUCCESS;
      failed += !print_call(index++, "nogpu", &nd, &rn);
      lt_free(&L);
    }
  }
  printf("summary calls=%d failed=%d\n", index, failed);
  return failed ? 1 : 0;
}

int gemm_suite_main(int argc, char **argv) {
  suite_opts op;
  if (parse_opts(argc, argv, &op)) return SUITE_EXIT_SETUP;
  if (op.nogpu) return run_nogpu(&op);
  const char *err = client_driver_load();
  if (err) return fprintf(stderr, "gemm_suite: %s\n", err), SUITE_EXIT_SETUP;
  CU(client_drv.cuInit(0));
  CU(client_drv.cuDeviceGet(&g_dev, 0));
  int major = 0, minor = 0;
  CU(client_drv.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g_dev));
  CU(client_drv.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g_dev));
  printf("device ordinal=%d sm=%d.%d\n", (int)g_dev, major, minor);
  CU(client_drv.cuDevicePrimaryCtxRetain(&g_primary, g_dev));
  int rc = op.threads > 0 ? run_threads(&op) : run_sequential(&op);
  CU(client_drv.cuDevicePrimaryCtxRelease_v2(g_dev));
  return rc;
}
