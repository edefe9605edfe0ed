/* cublaslt.h: internals of the stand-in libcublasLt.so.N, shared by
 *
 *   cublaslt_desc.c    the handle, versions, and the three descriptors
 *   cublaslt_matmul.c  cublasLtMatmul and the heuristic query
 *
 * Descriptors live inside the opaque storage the header gives them
 * (cublasLtMatmulDescOpaque_t etc.), so both Create and the stack-allocated
 * Init_internal forms work, as with the real library. */
#ifndef STANDIN_CUBLASLT_H
#define STANDIN_CUBLASLT_H

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <stdint.h>

#include "common.h"

#define LT_API_LIST(X)                                                         \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion)                   \
  X(cublasLtGetCudartVersion) X(cublasLtGetProperty) X(cublasLtGetStatusName)  \
  X(cublasLtGetStatusString)                                                   \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescInit_internal)               \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)               \
  X(cublasLtMatmulDescGetAttribute)                                            \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutInit_internal)           \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)           \
  X(cublasLtMatrixLayoutGetAttribute)                                          \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceInit_internal)   \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)   \
  X(cublasLtMatmulPreferenceGetAttribute)                                      \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

typedef enum lt_api_id {
#define LT_API_ID(name) LT_API_##name,
  LT_API_LIST(LT_API_ID)
#undef LT_API_ID
  LT_API_COUNT
} lt_api_id;

extern unsigned long long lt_counts[LT_API_COUNT];
/* cublasLtMatmul calls that ran on fp16 tensor cores (sg_on_fp16_tensor_cores):
 * standin_fp16_tensor_core_gemms in the counts file. */
extern unsigned long long lt_fp16_tensor_core_gemms;
/* cublasLtMatmul calls with fp8 A and B, and those of them whose
 * descriptor had CUBLASLT_MATMUL_DESC_FAST_ACCUM set (standin_fp8_gemms,
 * standin_fp8_fast_accum_gemms in the counts file): what a caller asked
 * of the accumulation, which the stand-in's fp32 sums do not model; and
 * those whose A scale mode was BLK128x128_32F (standin_fp8_blk128_a_gemms):
 * 1x128 scales on a weight are finer, so the results alone cannot tell;
 * and those whose B was E5M2 (standin_fp8_e5m2_b_gemms): what a hybrid
 * format gave cuBLASLt for a gradient; and those whose descriptor set
 * CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE
 * (standin_fp8_batch_stride_gemms): what TransformerEngine sets on MXFP8
 * descriptors for cuBLASLt 12.8.3 and older, whose effect on that
 * version's heuristic cache the stand-in does not model. */
extern unsigned long long lt_fp8_gemms, lt_fp8_fast_accum_gemms, lt_fp8_blk128_a_gemms, lt_fp8_e5m2_b_gemms,
    lt_fp8_batch_stride_gemms;
#define LT_COUNT(name) STANDIN_BUMP(lt_counts, LT_API_##name)

#define LT_HANDLE_MAGIC 0x4c74486eu /* "LtHn" */

struct cublasLtContext {
  uint32_t magic; /* cleared by cublasLtDestroy before the free */
  int device;     /* current device at creation */
};

/* Matmul descriptor state; field types are the attribute types. */
/* cuBLAS 13.10's cublasLt.h (PyPI nvidia-cublas 13.10.0.20), newer than
 * the toolkit's 13.1 this is built with: ALPHA_BATCH_STRIDE,
 * BETA_BATCH_STRIDE (int64_t, default 0, "Used when matrix D's
 * CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT > 1"), BATCH_INVARIANCE_FLAGS
 * (cublasLtMatmulBatchInvarianceFlags_t, default
 * CUBLASLT_BATCH_INVARIANCE_UNSET 0x8000). */
#define LT_V1310_ALPHA_BATCH_STRIDE 39
#define LT_V1310_BETA_BATCH_STRIDE 40
#define LT_V1310_BATCH_INVARIANCE_FLAGS 41
#define LT_V1310_BATCH_INVARIANCE_UNSET 0x8000u

/* cuBLAS 12's ids of the atomic synchronization attributes (its
 * cublasLt.h; not in CUDA 13's, which this is built with). */
#define LT_CU12_ATOMIC_SYNC_NUM_CHUNKS_D_ROWS 27
#define LT_CU12_ATOMIC_SYNC_NUM_CHUNKS_D_COLS 28
#define LT_CU12_ATOMIC_SYNC_IN_COUNTERS_POINTER 29
#define LT_CU12_ATOMIC_SYNC_OUT_COUNTERS_POINTER 30

typedef struct lt_desc {
  int32_t compute, scale, pointer_mode, transa, transb, transc, fill_mode;
  uint32_t epilogue;
  const void *bias;
  int64_t bias_batch_stride;
  void *aux;
  int64_t aux_ld, aux_batch_stride, alpha_vector_batch_stride;
  int32_t sm_count_target;
  int32_t attr16; /* LT_DESC_ATTR_16 (cublaslt_desc.c) */
  const void *a_scale, *b_scale, *c_scale, *d_scale;
  void *amax_d;
  int32_t aux_type;
  void *aux_scale, *aux_amax;
  int8_t fast_accum;
  int32_t bias_type;
  int32_t a_scale_mode, b_scale_mode, c_scale_mode, d_scale_mode, aux_scale_mode;
  void *d_out_scale;
  int32_t d_out_scale_mode;
#if STANDIN_CUDA_MAJOR == 12
  /* cuBLAS 12 only (cublaslt_desc.c): atomic synchronization, and id 38 */
  int32_t atomic_chunks_rows, atomic_chunks_cols, attr38_cu12;
  void *atomic_in_counters, *atomic_out_counters;
#else
  void *emulation;
  /* cuBLAS 13.10 on (cublaslt_desc.c): per-member alpha and beta, batch
   * invariance */
  int64_t alpha_batch_stride, beta_batch_stride;
  uint32_t batch_invariance;
#endif
} lt_desc;

typedef struct lt_layout {
  uint32_t type;
  int32_t order;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch_count;
  uint32_t batch_mode;
  int64_t stride;
  int64_t plane_offset;
} lt_layout;

typedef struct lt_pref {
  uint32_t search_mode;
  uint64_t max_workspace;
  uint32_t reduction_mask;
  uint32_t align_a, align_b, align_c, align_d;
  float max_waves;
  uint64_t impl_mask;
} lt_pref;

_Static_assert(sizeof(lt_desc) <= sizeof(cublasLtMatmulDescOpaque_t), "matmul desc fits");
_Static_assert(sizeof(lt_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");
_Static_assert(sizeof(lt_pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference fits");


static inline const lt_desc *lt_desc_of(cublasLtMatmulDesc_t d) { return (const lt_desc *)d; }
static inline const lt_layout *lt_layout_of(cublasLtMatrixLayout_t l) {
  return (const lt_layout *)l;
}

#endif
