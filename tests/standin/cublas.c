/* cublas.c: the stand-in libcublas.so.N.
 *
 * Handles carry a magic number (cleared by cublasDestroy before the free),
 * so a NULL, destroyed or foreign handle gives CUBLAS_STATUS_NOT_INITIALIZED
 * instead of a crash. Like the real library, creating a handle needs no
 * explicit driver set-up (see runtime.h), and the GemmEx family does its
 * work through cuBLASLt: each call (each member, for the pointer-array
 * batched forms) builds Lt descriptors and calls cublasLtMatmul, an imported
 * symbol reached through the PLT, so an interposed cublasLtMatmul sees the
 * nested call. The Sgemm entry points compute directly.
 *
 * Argument checks follow the cuBLAS documentation: transa/transb not
 * N/T/C, m, n, k or batchCount < 0, lda < max(1, rows of A as stored),
 * ldb likewise, ldc < max(1, m) give INVALID_VALUE; type/compute
 * combinations cuBLAS lacks and unknown algo values give NOT_SUPPORTED.
 * m, n or batchCount 0 does nothing; k 0 computes C = beta C.
 *
 * Math mode: with CUBLAS_TF32_TENSOR_OP_MATH (or the deprecated
 * CUBLAS_TENSOR_OP_MATH) an fp32 GEMM with COMPUTE_32F may use TF32 (fp16)
 * tensor cores on a GPU; the stand-in then computes with
 * COMPUTE_32F_FAST_TF32 (_FAST_16F), the least precise result allowed. */
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cublas_api.h>

#include "common.h"
#include "cublas_status.h"
#include "gemm_ref.h"
#include "runtime.h"

#define BL_API_LIST(X)                                                         \
  X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasGetVersion_v2)                \
  X(cublasGetProperty) X(cublasGetStatusName) X(cublasGetStatusString)         \
  X(cublasSetStream_v2) X(cublasGetStream_v2) X(cublasSetMathMode)             \
  X(cublasGetMathMode) X(cublasSetPointerMode_v2) X(cublasGetPointerMode_v2)   \
  X(cublasSetWorkspace_v2) X(cublasSgemm_v2) X(cublasSgemmStridedBatched)      \
  X(cublasGemmEx) X(cublasGemmEx_64) X(cublasGemmStridedBatchedEx)             \
  X(cublasGemmStridedBatchedEx_64) X(cublasGemmBatchedEx)                      \
  X(cublasGemmBatchedEx_64)

typedef enum bl_api_id {
#define BL_API_ID(name) BL_API_##name,
  BL_API_LIST(BL_API_ID)
#undef BL_API_ID
  BL_API_COUNT
} bl_api_id;

static unsigned long long bl_counts[BL_API_COUNT];
static const char *const bl_api_names[BL_API_COUNT] = {
#define BL_API_NAME(name) #name,
    BL_API_LIST(BL_API_NAME)
#undef BL_API_NAME
};
#define BL_COUNT(name) STANDIN_BUMP(bl_counts, BL_API_##name)

static void bl_at_exit(void) {
  standin_counters table = {bl_api_names, bl_counts, BL_API_COUNT};
  standin_counts_append(&table, NULL);
}

__attribute__((constructor)) static void bl_load(void) { atexit(bl_at_exit); }

#define BL_HANDLE_MAGIC 0x63426c48u /* "cBlH" */

struct cublasContext {
  uint32_t magic;
  int device;                 /* current device at creation */
  cudaStream_t stream;
  cublasPointerMode_t pointer_mode;
  cublasMath_t math_mode;
  void *workspace;            /* NULL: the library's own (none needed here) */
  size_t workspace_size;
  cublasLtHandle_t lt;
};

static int bl_valid(cublasHandle_t h) { return h && h->magic == BL_HANDLE_MAGIC; }

/* ------------------------------------------------------------------------ */
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  BL_COUNT(cublasCreate_v2);
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  int device;
  if (rt_ensure_context(-1) || rt_current_device(&device)) return CUBLAS_STATUS_NOT_INITIALIZED;
  struct cublasContext *h = calloc(1, sizeof *h);
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  cublasStatus_t s = cublasLtCreate(&h->lt);
  if (s) {
    free(h);
    return s;
  }
  h->magic = BL_HANDLE_MAGIC;
  h->device = device;
  h->pointer_mode = CUBLAS_POINTER_MODE_HOST;
  h->math_mode = CUBLAS_DEFAULT_MATH;
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  BL_COUNT(cublasDestroy_v2);
  if (!bl_valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->magic = 0;
  cublasLtDestroy(handle->lt);
  free(handle);
  return CUBLAS_STATUS_SUCCESS;
}

/* Works without a handle, as the real library's does. cuBLAS and
 * cuBLASLt ship together, one version for both: STANDIN_CUBLASLT_VERSION
 * moves both (standin_lt_version). */
cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version) {
  BL_COUNT(cublasGetVersion_v2);
  if (!version) return CUBLAS_STATUS_INVALID_VALUE;
  *version = (int)standin_lt_version();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value) {
  BL_COUNT(cublasGetProperty);
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
  case MAJOR_VERSION: *value = (int)(standin_lt_version() / 10000); return CUBLAS_STATUS_SUCCESS;
  case MINOR_VERSION: *value = (int)(standin_lt_version() / 100 % 100); return CUBLAS_STATUS_SUCCESS;
  case PATCH_LEVEL: *value = (int)(standin_lt_version() % 100); return CUBLAS_STATUS_SUCCESS;
  default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

const char *cublasGetStatusName(cublasStatus_t status) {
  BL_COUNT(cublasGetStatusName);
  return standin_status_name(status);
}

const char *cublasGetStatusString(cublasStatus_t status) {
  BL_COUNT(cublasGetStatusString);
  return standin_status_string(status);
}

/* Setting a stream drops a user workspace, as documented for cuBLAS. */
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  BL_COUNT(cublasSetStream_v2);
  if (!bl_valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  handle->workspace = NULL;
  handle->workspace_size = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId) {
  BL_COUNT(cublasGetStream_v2);
  if (!bl_valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!streamId) return CUBLAS_STATUS_INVALID_VALUE;
  *streamId = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  BL_COUNT(cublasSetMathMode);
  if (!bl_valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  unsigned base = (unsigned)mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (base > CUBLAS_FP32_EMULATED_BF16X9_MATH && base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
  BL_COUNT(cublasGetMathMode);
  if (!bl_valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  BL_COUNT(cublasSetPointerMode_v2);
  if (!bl_valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode) {
  BL_COUNT(cublasGetPointerMode_v2);
  if (!bl_valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

/* The workspace must be device memory aligned to 256 bytes. */
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                     size_t workspaceSizeInBytes) {
  BL_COUNT(cublasSetWorkspace_v2);
  if (!bl_valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspaceSizeInBytes && (!workspace || (uintptr_t)workspace % 256))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (workspaceSizeInBytes &&
      !rt_check_operand("cublasSetWorkspace_v2", "workspace", workspace, workspaceSizeInBytes))
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspaceSizeInBytes ? workspace : NULL;
  handle->workspace_size = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* One GEMM call of any GemmEx form. */
typedef struct bl_gemm {
  const char *fn;
  cublasOperation_t ta, tb;
  int64_t m, n, k;
  const void *alpha, *beta;
  const void *A, *B;
  void *C;
  const void *const *Aarray, *const *Barray; /* pointer-array forms */
  void *const *Carray;
  cudaDataType at, bt, ct;
  int64_t lda, ldb, ldc;
  long long sa, sb, sc;
  int64_t batch;
  cublasComputeType_t compute;
  cublasGemmAlgo_t algo;
} bl_gemm;

static int bl_op_ok(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

static int64_t bl_max1(int64_t x) { return x > 1 ? x : 1; }

static int bl_algo_ok(cublasGemmAlgo_t a) {
  return (a >= CUBLAS_GEMM_DEFAULT && a <= CUBLAS_GEMM_ALGO23) ||
         (a >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && a <= CUBLAS_GEMM_ALGO15_TENSOR_OP) ||
         a == CUBLAS_GEMM_AUTOTUNE;
}

static cublasStatus_t bl_check_args(cublasHandle_t h, const bl_gemm *g) {
  if (!bl_valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!bl_op_ok(g->ta) || !bl_op_ok(g->tb)) return CUBLAS_STATUS_INVALID_VALUE;
  if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (g->lda < bl_max1(g->ta == CUBLAS_OP_N ? g->m : g->k) ||
      g->ldb < bl_max1(g->tb == CUBLAS_OP_N ? g->k : g->n) || g->ldc < bl_max1(g->m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!g->alpha || !g->beta) return CUBLAS_STATUS_INVALID_VALUE;
  cublasStatus_t s = sg_check_types(g->compute, sg_scale_type(g->compute), g->at, g->bt, g->ct, 0);
  if (s) return s;
  return bl_algo_ok(g->algo) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

/* The compute type cuBLAS may use for this call under the handle's math
 * mode (see the top of the file). */
static cublasComputeType_t bl_effective_compute(cublasHandle_t h, cublasComputeType_t c,
                                                cudaDataType at) {
  unsigned base = (unsigned)h->math_mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (c != CUBLAS_COMPUTE_32F || at != CUDA_R_32F) return c;
  if (base == CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_COMPUTE_32F_FAST_TF32;
  if (base == CUBLAS_TENSOR_OP_MATH) return CUBLAS_COMPUTE_32F_FAST_16F;
  return c;
}

/* Descriptors for one Lt call covering `count` members. */
typedef struct bl_lt_call {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
} bl_lt_call;

static void bl_lt_release(bl_lt_call *lc) {
  if (lc->a) cublasLtMatrixLayoutDestroy(lc->a);
  if (lc->b) cublasLtMatrixLayoutDestroy(lc->b);
  if (lc->c) cublasLtMatrixLayoutDestroy(lc->c);
  if (lc->desc) cublasLtMatmulDescDestroy(lc->desc);
}

static cublasStatus_t bl_layout(cublasLtMatrixLayout_t *l, cudaDataType t, int64_t rows,
                                int64_t cols, int64_t ld, int32_t count, int64_t stride) {
  cublasStatus_t s = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
  if (!s && count > 1) {
    s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                         sizeof count);
    if (!s)
      s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &stride, sizeof stride);
  }
  return s;
}

static cublasStatus_t bl_lt_prepare(cublasHandle_t h, const bl_gemm *g, int32_t count,
                                    bl_lt_call *lc) {
  memset(lc, 0, sizeof *lc);
  cublasComputeType_t compute = bl_effective_compute(h, g->compute, g->at);
  int32_t ta = g->ta, tb = g->tb, pm = h->pointer_mode;
  cublasStatus_t s = cublasLtMatmulDescCreate(&lc->desc, compute, sg_scale_type(g->compute));
  if (!s) s = cublasLtMatmulDescSetAttribute(lc->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (!s) s = cublasLtMatmulDescSetAttribute(lc->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (!s)
    s = cublasLtMatmulDescSetAttribute(lc->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm);
  if (!s)
    s = bl_layout(&lc->a, g->at, g->ta == CUBLAS_OP_N ? g->m : g->k,
                  g->ta == CUBLAS_OP_N ? g->k : g->m, g->lda, count, g->sa);
  if (!s)
    s = bl_layout(&lc->b, g->bt, g->tb == CUBLAS_OP_N ? g->k : g->n,
                  g->tb == CUBLAS_OP_N ? g->n : g->k, g->ldb, count, g->sb);
  if (!s) s = bl_layout(&lc->c, g->ct, g->m, g->n, g->ldc, count, g->sc);
  if (s) bl_lt_release(lc);
  return s;
}

static cublasStatus_t bl_lt_run(cublasHandle_t h, const bl_gemm *g, const bl_lt_call *lc,
                                const void *A, const void *B, void *C) {
  return cublasLtMatmul(h->lt, lc->desc, g->alpha, A, lc->a, B, lc->b, g->beta, C, lc->c, C,
                        lc->c, NULL, h->workspace, h->workspace_size, h->stream);
}

static cublasStatus_t bl_gemm_ex(cublasHandle_t h, const bl_gemm *g) {
  cublasStatus_t s = bl_check_args(h, g);
  if (s || g->m == 0 || g->n == 0 || g->batch == 0) return s;
  bl_lt_call lc;
  if (g->Aarray) {
    /* The pointer arrays live in device memory, as cuBLAS requires. */
    size_t bytes;
    if (__builtin_mul_overflow((uint64_t)g->batch, sizeof(void *), &bytes)) bytes = SIZE_MAX;
    if (!rt_check_operand(g->fn, "Aarray", g->Aarray, bytes) ||
        !rt_check_operand(g->fn, "Barray", g->Barray, bytes) ||
        !rt_check_operand(g->fn, "Carray", g->Carray, bytes))
      return CUBLAS_STATUS_EXECUTION_FAILED;
    if ((s = bl_lt_prepare(h, g, 1, &lc))) return s;
    for (int64_t i = 0; i < g->batch && !s; i++)
      s = bl_lt_run(h, g, &lc, g->Aarray[i], g->Barray[i], g->Carray[i]);
    bl_lt_release(&lc);
    return s;
  }
  /* Lt batch counts are int32: a larger _64 batch goes in chunks. */
  const int64_t chunk_max = 1 << 30;
  size_t asz = sg_type_size(g->at), bsz = sg_type_size(g->bt), csz = sg_type_size(g->ct);
  for (int64_t b0 = 0; b0 < g->batch && !s; b0 += chunk_max) {
    int64_t count = g->batch - b0 < chunk_max ? g->batch - b0 : chunk_max;
    if ((s = bl_lt_prepare(h, g, (int32_t)count, &lc))) return s;
    s = bl_lt_run(h, g, &lc, (const char *)g->A + b0 * g->sa * (int64_t)asz,
                  (const char *)g->B + b0 * g->sb * (int64_t)bsz,
                  (char *)g->C + b0 * g->sc * (int64_t)csz);
    bl_lt_release(&lc);
  }
  return s;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  BL_COUNT(cublasGemmEx);
  bl_gemm g = {.fn = "cublasGemmEx", .ta = transa, .tb = transb, .m = m, .n = n, .k = k,
               .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C, .at = Atype, .bt = Btype,
               .ct = Ctype, .lda = lda, .ldb = ldb, .ldc = ldc, .batch = 1,
               .compute = computeType, .algo = algo};
  return bl_gemm_ex(handle, &g);
}

cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa,
                               cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                               const void *alpha, const void *A, cudaDataType Atype, int64_t lda,
                               const void *B, cudaDataType Btype, int64_t ldb, const void *beta,
                               void *C, cudaDataType Ctype, int64_t ldc,
                               cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  BL_COUNT(cublasGemmEx_64);
  bl_gemm g = {.fn = "cublasGemmEx_64", .ta = transa, .tb = transb, .m = m, .n = n, .k = k,
               .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C, .at = Atype, .bt = Btype,
               .ct = Ctype, .lda = lda, .ldb = ldb, .ldc = ldc, .batch = 1,
               .compute = computeType, .algo = algo};
  return bl_gemm_ex(handle, &g);
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA,
    const void *B, cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  BL_COUNT(cublasGemmStridedBatchedEx);
  bl_gemm g = {.fn = "cublasGemmStridedBatchedEx", .ta = transa, .tb = transb, .m = m, .n = n,
               .k = k, .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C, .at = Atype,
               .bt = Btype, .ct = Ctype, .lda = lda, .ldb = ldb, .ldc = ldc, .sa = strideA,
               .sb = strideB, .sc = strideC, .batch = batchCount,
               .compute = computeType, .algo = algo};
  return bl_gemm_ex(handle, &g);
}

cublasStatus_t cublasGemmStridedBatchedEx_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
    int64_t n, int64_t k, const void *alpha, const void *A, cudaDataType Atype, int64_t lda,
    long long int strideA, const void *B, cudaDataType Btype, int64_t ldb, long long int strideB,
    const void *beta, void *C, cudaDataType Ctype, int64_t ldc, long long int strideC,
    int64_t batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  BL_COUNT(cublasGemmStridedBatchedEx_64);
  bl_gemm g = {.fn = "cublasGemmStridedBatchedEx_64", .ta = transa, .tb = transb, .m = m,
               .n = n, .k = k, .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C, .at = Atype,
               .bt = Btype, .ct = Ctype, .lda = lda, .ldb = ldb, .ldc = ldc, .sa = strideA,
               .sb = strideB, .sc = strideC, .batch = batchCount,
               .compute = computeType, .algo = algo};
  return bl_gemm_ex(handle, &g);
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k,
                                   const void *alpha, const void *const Aarray[],
                                   cudaDataType Atype, int lda, const void *const Barray[],
                                   cudaDataType Btype, int ldb, const void *beta,
                                   void *const Carray[], cudaDataType Ctype, int ldc,
                                   int batchCount, cublasComputeType_t computeType,
                                   cublasGemmAlgo_t algo) {
  BL_COUNT(cublasGemmBatchedEx);
  bl_gemm g = {.fn = "cublasGemmBatchedEx", .ta = transa, .tb = transb, .m = m, .n = n, .k = k,
               .alpha = alpha, .beta = beta, .Aarray = Aarray, .Barray = Barray,
               .Carray = Carray, .at = Atype, .bt = Btype, .ct = Ctype, .lda = lda, .ldb = ldb,
               .ldc = ldc, .batch = batchCount, .compute = computeType, .algo = algo};
  return bl_gemm_ex(handle, &g);
}

cublasStatus_t cublasGemmBatchedEx_64(cublasHandle_t handle, cublasOperation_t transa,
                                      cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                      const void *alpha, const void *const Aarray[],
                                      cudaDataType Atype, int64_t lda, const void *const Barray[],
                                      cudaDataType Btype, int64_t ldb, const void *beta,
                                      void *const Carray[], cudaDataType Ctype, int64_t ldc,
                                      int64_t batchCount, cublasComputeType_t computeType,
                                      cublasGemmAlgo_t algo) {
  BL_COUNT(cublasGemmBatchedEx_64);
  bl_gemm g = {.fn = "cublasGemmBatchedEx_64", .ta = transa, .tb = transb, .m = m, .n = n,
               .k = k, .alpha = alpha, .beta = beta, .Aarray = Aarray, .Barray = Barray,
               .Carray = Carray, .at = Atype, .bt = Btype, .ct = Ctype, .lda = lda, .ldb = ldb,
               .ldc = ldc, .batch = batchCount, .compute = computeType, .algo = algo};
  return bl_gemm_ex(handle, &g);
}

/* ------------------------------------------------------------------------ */
/* Sgemm: fp32 in, fp32 out, computed here without cuBLASLt. */
static cublasStatus_t bl_sgemm(cublasHandle_t h, const char *fn, cublasOperation_t ta,
                               cublasOperation_t tb, int m, int n, int k, const float *alpha,
                               const float *A, int lda, long long sa, const float *B, int ldb,
                               long long sb, const float *beta, float *C, int ldc, long long sc,
                               int batch) {
  bl_gemm g = {.fn = fn, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = alpha,
               .beta = beta, .at = CUDA_R_32F, .bt = CUDA_R_32F, .ct = CUDA_R_32F, .lda = lda,
               .ldb = ldb, .ldc = ldc, .batch = batch, .compute = CUBLAS_COMPUTE_32F,
               .algo = CUBLAS_GEMM_DEFAULT};
  cublasStatus_t s = bl_check_args(h, &g);
  if (s || m == 0 || n == 0 || batch == 0) return s;
  int device, major, minor;
  if (rt_ensure_context(h->device) ||
      rt_stream_device((CUstream)h->stream, &device, &major, &minor))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  int dev_mode = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  if (dev_mode ? !rt_check_operand(fn, "alpha", alpha, 4) || !rt_check_operand(fn, "beta", beta, 4)
               : rt_is_device_pointer(alpha) || rt_is_device_pointer(beta)) {
    if (!dev_mode) standin_msg("%s: alpha/beta are device memory but the pointer mode is HOST", fn);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  sg_problem p;
  memset(&p, 0, sizeof p);
  p.transa = ta;
  p.transb = tb;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = batch;
  p.compute = bl_effective_compute(h, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  p.alpha = *alpha;
  p.beta = *beta;
  p.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  p.scale_a = p.scale_b = 1.0f;
  p.a = (sg_matrix){A, CUDA_R_32F, CUBLASLT_ORDER_COL, ta == CUBLAS_OP_N ? m : k,
                    ta == CUBLAS_OP_N ? k : m, lda, batch, sa};
  p.b = (sg_matrix){B, CUDA_R_32F, CUBLASLT_ORDER_COL, tb == CUBLAS_OP_N ? k : n,
                    tb == CUBLAS_OP_N ? n : k, ldb, batch, sb};
  p.c = (sg_matrix){C, CUDA_R_32F, CUBLASLT_ORDER_COL, m, n, ldc, batch, sc};
  p.d = p.c;
  size_t span_a = rt_matrix_span(4, p.a.rows, p.a.cols, lda, 0, batch, sa);
  size_t span_b = rt_matrix_span(4, p.b.rows, p.b.cols, ldb, 0, batch, sb);
  size_t span_c = rt_matrix_span(4, m, n, ldc, 0, batch, sc);
  if (!rt_check_operand(fn, "A", A, span_a) || !rt_check_operand(fn, "B", B, span_b) ||
      !rt_check_operand(fn, "C", C, span_c))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  rt_late late = {dev_mode ? (const void *)alpha : NULL, dev_mode ? (const void *)beta : NULL, CUDA_R_32F, NULL, NULL};
  int queued = rt_gemm_on_stream(&p, &late, (CUstream)h->stream);
  return queued == -1 ? CUBLAS_STATUS_ALLOC_FAILED : queued ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float *alpha,
                              const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
  BL_COUNT(cublasSgemm_v2);
  return bl_sgemm(handle, "cublasSgemm_v2", transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0,
                  beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long int strideA, const float *B, int ldb,
                                         long long int strideB, const float *beta, float *C,
                                         int ldc, long long int strideC, int batchCount) {
  BL_COUNT(cublasSgemmStridedBatched);
  return bl_sgemm(handle, "cublasSgemmStridedBatched", transa, transb, m, n, k, alpha, A, lda,
                  strideA, B, ldb, strideB, beta, C, ldc, strideC, batchCount);
}
