/* cublaslt_matmul.c: cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic.
 *
 * Validation follows cuBLASLt. A NULL handle is NOT_INITIALIZED. These are
 * INVALID_VALUE: NULL descriptors or scalars; shapes that do not chain
 * (op(A) m x k, op(B) k x n, C and D m x n); leading dimensions below the
 * stored rows (columns for row order); batch counts other than D's (or 1);
 * C of another type than D; A/B scale and amax pointers on a non-fp8
 * problem; C/D scale pointers (they apply to fp8 C/D, which the stand-in
 * does not offer). These are NOT_SUPPORTED: type combinations cuBLAS lacks,
 * other memory orders, pointer-array or planar-complex batches, vector
 * pointer modes, transposed C, other epilogues, C/D scale modes, A/B
 * block-scaling modes other than those scale_modes.h describes (and those
 * on another device or cuBLAS version than it names). fp8
 * inputs need a device of capability 8.9 or newer, the TN form (A
 * transposed, B not), and 16-byte aligned A/B pointers and leading
 * dimensions.
 *
 * The call runs synchronously on the calling thread; the stream only picks
 * the device (and so the capability).
 *
 * Algorithms. The CPU needs no workspace and no alignment, but callers must
 * honour what cuBLASLt's contract says of an algorithm, so the heuristic
 * offers a small catalogue (lt_algos) whose entries need workspace and
 * alignment as real ones do (the entries are invented; the rules are
 * cublasLt.h's): CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES "will exclude
 * algorithms that can not work with matrix A that is not as strictly
 * aligned as they need", MAX_WORKSPACE_BYTES ("default: 0 - no workspace
 * allowed") excludes those needing more; an algorithm's
 * CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_* covers the "buffer pointer, leading
 * dimension, and possibly other strides", so the heuristic also leaves out
 * those the layouts' leading dimensions and strides do not meet. Results
 * come best first, as the real heuristic's. cublasLtMatmul with such an
 * algorithm returns INVALID_VALUE ("parameters are in conflict ... e.g.
 * when workspaceSizeInBytes is less than workspace required by configured
 * algo") when the workspace is smaller than it needs or a pointer, leading
 * dimension or stride is less aligned than it needs, where a GPU kernel
 * would fault or read wrong data; an algo that no heuristic of this
 * library made is INVALID_VALUE too. algo NULL runs as before. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_status.h"
#include "cublaslt.h"
#include "gemm_ref.h"
#include "runtime.h"
#include "scale_modes.h"

static int lt_has_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS;
}

static int lt_epilogue_supported(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_RELU ||
         e == CUBLASLT_EPILOGUE_GELU || lt_has_bias(e);
}

/* The bias type in effect: BIAS_DATA_TYPE, or by default D's type, except
 * bf16 for fp8 GEMMs with an fp32 D (cuBLASLt's fp8 rule). */
static cudaDataType_t lt_bias_type(const lt_desc *d, cudaDataType_t atype, cudaDataType_t dtype) {
  if (d->bias_type != -1) return (cudaDataType_t)d->bias_type;
  return sg_is_fp8(atype) && dtype == CUDA_R_32F ? CUDA_R_16BF : dtype;
}

static int lt_bias_type_ok(cudaDataType_t bias, cudaDataType_t atype, cudaDataType_t dtype) {
  if (sg_is_fp8(atype)) return bias == (dtype == CUDA_R_32F ? CUDA_R_16BF : dtype);
  return bias == dtype;
}

static cublasStatus_t lt_check_layout(const lt_layout *l, int32_t batch) {
  if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (l->batch_mode != 0 || l->plane_offset != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (l->rows > INT64_MAX / 2 || l->cols > INT64_MAX / 2) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t need = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
  if (l->ld < 0 || (uint64_t)l->ld < need) return CUBLAS_STATUS_INVALID_VALUE;
  if (l->batch_count != batch && l->batch_count != 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (l->stride < 0) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

static void lt_matrix(sg_matrix *x, const lt_layout *l, const void *ptr) {
  x->ptr = ptr;
  x->type = (cudaDataType_t)l->type;
  x->order = l->order;
  x->rows = (int64_t)l->rows;
  x->cols = (int64_t)l->cols;
  x->ld = l->ld;
  x->batch_count = l->batch_count;
  x->stride = l->stride;
}

/* Everything that can be judged without touching memory. */
static cublasStatus_t lt_plan(const lt_desc *d, const lt_layout *A, const lt_layout *B,
                              const lt_layout *C, const lt_layout *D, sg_problem *p) {
  cublasStatus_t s;
  if (d->transa < CUBLAS_OP_N || d->transa > CUBLAS_OP_C || d->transb < CUBLAS_OP_N ||
      d->transb > CUBLAS_OP_C || d->transc < CUBLAS_OP_N || d->transc > CUBLAS_OP_C)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (d->transc != CUBLAS_OP_N || d->fill_mode != CUBLAS_FILL_MODE_FULL)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST &&
      d->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    return d->pointer_mode >= 0 && d->pointer_mode <= CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST
               ? CUBLAS_STATUS_NOT_SUPPORTED
               : CUBLAS_STATUS_INVALID_VALUE;
  if (D->batch_count < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if ((s = lt_check_layout(A, D->batch_count)) || (s = lt_check_layout(B, D->batch_count)) ||
      (s = lt_check_layout(C, D->batch_count)) || (s = lt_check_layout(D, D->batch_count)))
    return s;
  if (C->order != D->order) return CUBLAS_STATUS_NOT_SUPPORTED;

  uint64_t m = D->rows, n = D->cols;
  uint64_t am = d->transa == CUBLAS_OP_N ? A->rows : A->cols;
  uint64_t ak = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
  uint64_t bk = d->transb == CUBLAS_OP_N ? B->rows : B->cols;
  uint64_t bn = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
  if (am != m || bn != n || ak != bk || C->rows != m || C->cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (C->type != D->type) return CUBLAS_STATUS_INVALID_VALUE;

  cudaDataType_t at = (cudaDataType_t)A->type, dt = (cudaDataType_t)D->type;
  if ((s = sg_check_types((cublasComputeType_t)d->compute, (cudaDataType_t)d->scale, at,
                          (cudaDataType_t)B->type, dt, 1)))
    return s;
  int fp8 = sg_is_fp8(at);
  if (fp8) {
    if (d->transa != CUBLAS_OP_T || d->transb != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (A->ld % 16 || B->ld % 16) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* Measured on an H200 with cuBLAS 13.1 (tests/gpu/lt_scale_probe.c,
     * docs/gpu-results.md), none of it in the docs: k = 200 refused with
     * leading dimensions of 208; m = 100 (ldd 104) and m = 260 (ldd 264)
     * refused, m = 200 and 256 taken; an A/B scale pointer 4 bytes past a
     * 16-byte boundary refused. The rules below are the simplest that fit
     * those points. */
    if (ak % 16 || m % 8) return CUBLAS_STATUS_NOT_SUPPORTED;
    if ((uintptr_t)d->a_scale % 16 || (uintptr_t)d->b_scale % 16) return CUBLAS_STATUS_NOT_SUPPORTED;
  } else if (d->a_scale || d->b_scale || d->amax_d) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (d->c_scale || d->d_scale) return CUBLAS_STATUS_INVALID_VALUE;
#if STANDIN_CUDA_MAJOR == 12
  /* cuBLAS 12's atomic synchronization makes the GEMM wait on and signal
   * counters chunk by chunk. The real library runs it where its kernels
   * have it; the stand-in cannot signal a counter another kernel watches,
   * so it refuses every such call with cublasLtMatmul's status for an
   * unsupported configuration: stricter than a GPU, never kinder. */
  if (d->atomic_chunks_rows || d->atomic_chunks_cols || d->atomic_in_counters || d->atomic_out_counters)
    return CUBLAS_STATUS_NOT_SUPPORTED;
#else
  /* cuBLAS 13.10 takes alpha and beta batch strides for grouped GEMMs only
   * (its libcublasLt.so.13: "A batch stride for alpha is only supported for
   * grouped operations.", the same for beta); the stand-in has no grouped
   * GEMMs, so it refuses every call that sets one, with NOT_SUPPORTED (the
   * real status is not documented). Batch invariance is kept: every
   * element is summed in one fixed order, whatever the batch. */
  if (d->alpha_batch_stride || d->beta_batch_stride) return CUBLAS_STATUS_NOT_SUPPORTED;
#endif
  /* A/B block scaling (scale_modes.h) is for fp8 operands; C/D/aux/D-out
   * scale modes apply to fp8/fp4 outputs, which the stand-in does not
   * offer. A block mode reads its scale tensor through the A/B scale
   * pointer, so that pointer must be set. */
  if (d->c_scale_mode || d->d_scale_mode || d->aux_scale_mode || d->d_out_scale_mode ||
      d->d_out_scale)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->a_scale_mode || d->b_scale_mode) {
    if (!fp8) return CUBLAS_STATUS_NOT_SUPPORTED;
    if ((s = sm_check_modes(d->a_scale_mode, d->b_scale_mode, (int64_t)D->rows, (int64_t)D->cols)))
      return s;
    if (!d->a_scale || !d->b_scale) return CUBLAS_STATUS_INVALID_VALUE;
    if (D->batch_count != 1) return CUBLAS_STATUS_NOT_SUPPORTED; /* stand-in limit */
  }
  if (!lt_epilogue_supported(d->epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
  cudaDataType_t bias_type = lt_bias_type(d, at, dt);
  if (lt_has_bias(d->epilogue)) {
    if (!d->bias) return CUBLAS_STATUS_INVALID_VALUE;
    if (!lt_bias_type_ok(bias_type, at, dt)) return CUBLAS_STATUS_NOT_SUPPORTED;
  }

  memset(p, 0, sizeof *p);
  p->transa = d->transa;
  p->transb = d->transb;
  p->m = (int64_t)m;
  p->n = (int64_t)n;
  p->k = (int64_t)ak;
  p->batch = D->batch_count;
  p->compute = (cublasComputeType_t)d->compute;
  p->epilogue = (cublasLtEpilogue_t)d->epilogue;
  p->bias = d->bias;
  p->bias_type = bias_type;
  p->bias_batch_stride = d->bias_batch_stride;
  p->scale_a = p->scale_b = 1.0f;
  p->a_scale_mode = d->a_scale_mode;
  p->b_scale_mode = d->b_scale_mode;
  lt_matrix(&p->a, A, NULL);
  lt_matrix(&p->b, B, NULL);
  lt_matrix(&p->c, C, NULL);
  lt_matrix(&p->d, D, NULL);
  return CUBLAS_STATUS_SUCCESS;
}

/* cuBLAS's docs say INVALID_VALUE for NULL parameters; cuBLASLt 13.1 on
 * an H200, with a live handle, dereferenced a NULL computeDesc and the
 * process died of SIGSEGV (docs/gpu-results.md). A caller that passes one
 * gets the same here. */
static void lt_null_desc_dies(void) {
  standin_msg("cublasLtMatmul: computeDesc is NULL: the real cuBLASLt dereferences it (SIGSEGV)");
  raise(SIGSEGV);
  abort();
}

static cublasStatus_t lt_check_device(int device, const sg_problem *p) {
  int major, minor;
  if (rt_device_cc(device, &major, &minor)) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (sg_is_fp8(p->a.type) && major * 10 + minor < 89) return CUBLAS_STATUS_NOT_SUPPORTED;
  return (cublasStatus_t)sm_check_device(p->a_scale_mode, p->b_scale_mode, major * 10 + minor,
                                         (int)standin_lt_version());
}

static size_t lt_span(const sg_matrix *x) {
  return rt_matrix_span(sg_type_size(x->type), x->rows, x->cols, x->ld,
                        x->order == CUBLASLT_ORDER_ROW, x->batch_count, x->stride);
}

/* Read a scalar as the pointer mode says. Host mode must not be handed
 * device memory: a GPU program would fault reading it on the host. */
static int lt_read_scalar(const char *what, const void *ptr, int device_mode, cudaDataType_t t,
                          double *out) {
  size_t size = sg_type_size(t);
  if (device_mode ? !rt_check_operand("cublasLtMatmul", what, ptr, size)
                  : rt_is_device_pointer(ptr)) {
    if (!device_mode)
      standin_msg("cublasLtMatmul: %s (%p) is device memory but the pointer mode is HOST", what,
                  ptr);
    return 0;
  }
  *out = sg_read_scalar(ptr, t);
  return 1;
}

static int lt_read_scale(const char *what, const void *ptr, float *out) {
  if (!ptr) return 1;
  if (!rt_check_operand("cublasLtMatmul", what, ptr, sizeof(float))) return 0;
  *out = *(const float *)ptr;
  return 1;
}

/* The catalogue, best first. algo.data: [0] LT_ALGO_MAGIC + index. */
typedef struct lt_algo_info {
  uint32_t align;    /* bytes, for each of A, B, C, D; 0: the element size */
  size_t workspace;  /* bytes */
} lt_algo_info;
static const lt_algo_info lt_algos[] = {
    {64, (size_t)512 << 10}, /* wide tiles, split-k partials in the workspace */
    {16, 0},                 /* 16-byte vector loads */
    {0, 0},                  /* element-wise loads: fits any problem */
};
#define LT_ALGO_MAGIC 0x5354414c474f0000ull /* "STALGO" */
#define LT_ALGO_COUNT (sizeof lt_algos / sizeof lt_algos[0])

static const lt_algo_info *lt_algo_of(const cublasLtMatmulAlgo_t *algo) {
  uint64_t v = algo->data[0];
  if ((v & ~0xffffull) != LT_ALGO_MAGIC || (v & 0xffff) >= LT_ALGO_COUNT) return NULL;
  for (int i = 1; i < 8; i++)
    if (algo->data[i]) return NULL;
  return &lt_algos[v & 0xffff];
}

/* 1 when x's pointer (skipped when NULL: the heuristic knows none), leading
 * dimension and batch stride, in bytes, are multiples of the algorithm's
 * alignment. */
static int lt_algo_fits(const lt_algo_info *a, const sg_matrix *x, const void *ptr) {
  uint64_t es = sg_type_size(x->type);
  uint64_t al = a->align ? a->align : es;
  if (ptr && (uintptr_t)ptr % al) return 0;
  if (((uint64_t)x->ld * es) % al) return 0;
  if (x->batch_count > 1 && ((uint64_t)x->stride * es) % al) return 0;
  return 1;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  LT_COUNT(cublasLtMatmul);
  if (!lightHandle || lightHandle->magic != LT_HANDLE_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!computeDesc) lt_null_desc_dies();
  if (!computeDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  const lt_desc *d = lt_desc_of(computeDesc);
  sg_problem p;
  cublasStatus_t s = lt_plan(d, lt_layout_of(Adesc), lt_layout_of(Bdesc), lt_layout_of(Cdesc),
                             lt_layout_of(Ddesc), &p);
  if (s) return s;

  int device, major, minor;
  if (rt_ensure_context(lightHandle->device) ||
      rt_stream_device((CUstream)stream, &device, &major, &minor))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if ((s = lt_check_device(device, &p))) return s;
  if (sg_is_fp8(p.a.type) && (((uintptr_t)A | (uintptr_t)B) % 16))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  /* cuBLAS documentation, cublasLtMatmul, FP8 requirements: "All matrix
   * dimensions must meet the optimal requirements listed in Tensor Core
   * Usage (i.e. pointers and matrix dimension must support 16-byte
   * alignment)": C and D too, their leading dimensions and batch strides. */
  if (sg_is_fp8(p.a.type)) {
    const sg_matrix *cd[2] = {&p.c, &p.d};
    const void *cdp[2] = {C, D};
    for (int i = 0; i < 2; i++) {
      const uint64_t es = sg_type_size(cd[i]->type);
      if ((uintptr_t)cdp[i] % 16 || ((uint64_t)cd[i]->ld * es) % 16 ||
          (cd[i]->batch_count > 1 && ((uint64_t)cd[i]->stride * es) % 16))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }

  cudaDataType_t st = (cudaDataType_t)d->scale;
  int dev_mode = d->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  if (!lt_read_scalar("alpha", alpha, dev_mode, st, &p.alpha) ||
      !lt_read_scalar("beta", beta, dev_mode, st, &p.beta))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  int blocks = p.a_scale_mode != 0;
  if (blocks) {
    /* the scale tensors are read when the GEMM runs, as A and B are */
    if (!rt_check_operand("cublasLtMatmul", "A scale tensor", d->a_scale,
                          sm_scale_bytes(p.a_scale_mode, p.m, p.k)) ||
        !rt_check_operand("cublasLtMatmul", "B scale tensor", d->b_scale,
                          sm_scale_bytes(p.b_scale_mode, p.n, p.k)))
      return CUBLAS_STATUS_EXECUTION_FAILED;
    p.a_scales = d->a_scale;
    p.b_scales = d->b_scale;
  } else if (!lt_read_scale("A scale", d->a_scale, &p.scale_a) ||
             !lt_read_scale("B scale", d->b_scale, &p.scale_b)) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (d->amax_d && !rt_check_operand("cublasLtMatmul", "amax D", d->amax_d, sizeof(float)))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  p.amax_d = d->amax_d;

  if (algo) {
    const lt_algo_info *a = lt_algo_of(algo);
    if (!a || workspaceSizeInBytes < a->workspace || (a->workspace && !workspace))
      return CUBLAS_STATUS_INVALID_VALUE;
    if (!lt_algo_fits(a, &p.a, A) || !lt_algo_fits(a, &p.b, B) || (C && !lt_algo_fits(a, &p.c, C)) ||
        !lt_algo_fits(a, &p.d, D))
      return CUBLAS_STATUS_INVALID_VALUE;
  }

  p.a.ptr = A;
  p.b.ptr = B;
  p.c.ptr = C;
  p.d.ptr = D;
  if (C == D && C && (p.c.ld != p.d.ld || (p.batch > 1 && p.c.stride != p.d.stride) ||
                      p.c.batch_count != p.d.batch_count))
    return CUBLAS_STATUS_INVALID_VALUE; /* in place needs identical layouts */
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;

  /* the bias: m elements per member, bias_batch_stride apart */
  size_t bias_bytes = rt_matrix_span(sg_type_size(p.bias_type), 1, p.m, 1, 1, p.batch,
                                     p.bias_batch_stride);
  if (!rt_check_operand("cublasLtMatmul", "A", A, lt_span(&p.a)) ||
      !rt_check_operand("cublasLtMatmul", "B", B, lt_span(&p.b)) ||
      (p.beta != 0.0 && !rt_check_operand("cublasLtMatmul", "C", C, lt_span(&p.c))) ||
      !rt_check_operand("cublasLtMatmul", "D", D, lt_span(&p.d)) ||
      (lt_has_bias(p.epilogue) &&
       !rt_check_operand("cublasLtMatmul", "bias", p.bias, bias_bytes)) ||
      (workspace && workspaceSizeInBytes &&
       !rt_check_operand("cublasLtMatmul", "workspace", workspace, workspaceSizeInBytes)))
    return CUBLAS_STATUS_EXECUTION_FAILED;

  rt_late late = {dev_mode ? alpha : NULL, dev_mode ? beta : NULL, (int)st,
                  blocks ? NULL : d->a_scale, blocks ? NULL : d->b_scale};
  if (sg_on_fp16_tensor_cores(&p, major, minor)) STANDIN_BUMP(&lt_fp16_tensor_core_gemms, 0);
  if (sg_is_fp8(p.a.type)) {
    STANDIN_BUMP(&lt_fp8_gemms, 0);
    if (d->fast_accum) STANDIN_BUMP(&lt_fp8_fast_accum_gemms, 0);
    if (d->a_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) STANDIN_BUMP(&lt_fp8_blk128_a_gemms, 0);
    if (p.b.type == CUDA_R_8F_E5M2) STANDIN_BUMP(&lt_fp8_e5m2_b_gemms, 0);
    if (d->alpha_vector_batch_stride) STANDIN_BUMP(&lt_fp8_batch_stride_gemms, 0);
  }
  int queued = rt_gemm_on_stream(&p, &late, (CUstream)stream);
  return queued == -1 ? CUBLAS_STATUS_ALLOC_FAILED : queued ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                              cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount) {
  LT_COUNT(cublasLtMatmulAlgoGetHeuristic);
  if (!lightHandle || lightHandle->magic != LT_HANDLE_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!operationDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !preference ||
      requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  sg_problem p;
  cublasStatus_t s = lt_plan(lt_desc_of(operationDesc), lt_layout_of(Adesc), lt_layout_of(Bdesc),
                             lt_layout_of(Cdesc), lt_layout_of(Ddesc), &p);
  if (s) return s;
  int device;
  if (rt_ensure_context(lightHandle->device) || rt_current_device(&device))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if ((s = lt_check_device(device, &p))) return s;
  const lt_pref *pr = (const lt_pref *)preference;
  const uint32_t pref_align[4] = {pr->align_a, pr->align_b, pr->align_c, pr->align_d};
  const sg_matrix *mats[4] = {&p.a, &p.b, &p.c, &p.d};
  int n = 0;
  for (size_t i = 0; i < LT_ALGO_COUNT && n < requestedAlgoCount; i++) {
    const lt_algo_info *a = &lt_algos[i];
    int ok = a->workspace <= pr->max_workspace;
    for (int j = 0; j < 4 && ok; j++) {
      uint32_t need = a->align ? a->align : (uint32_t)sg_type_size(mats[j]->type);
      ok = need <= pref_align[j] && lt_algo_fits(a, mats[j], NULL);
    }
    if (!ok) continue;
    memset(&heuristicResultsArray[n], 0, sizeof heuristicResultsArray[n]);
    heuristicResultsArray[n].algo.data[0] = LT_ALGO_MAGIC + i;
    heuristicResultsArray[n].workspaceSize = a->workspace;
    heuristicResultsArray[n].state = CUBLAS_STATUS_SUCCESS;
    heuristicResultsArray[n].wavesCount = 1.0f;
    n++;
  }
  *returnAlgoCount = n;
  /* "CUBLAS_STATUS_NOT_SUPPORTED if no heuristic function available for
   * current configuration" (cublasLt.h, cublasLtMatmulAlgoGetHeuristic) */
  return n ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}
