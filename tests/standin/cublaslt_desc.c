/* cublaslt_desc.c: the stand-in cuBLASLt handle, versions and descriptors.
 *
 * Attribute get/set behave as the real library does (checked against it):
 * NULL descriptor, unknown attribute, NULL buffer or a size that is not
 * exactly the attribute's size give CUBLAS_STATUS_INVALID_VALUE; a get with
 * sizeInBytes 0 reports the size in *sizeWritten. Values are stored as given
 * and only judged by cublasLtMatmul, like the real library. Creation does
 * not validate types or sizes either. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_status.h"
#include "cublaslt.h"
#include "runtime.h"

unsigned long long lt_counts[LT_API_COUNT];
unsigned long long lt_fp16_tensor_core_gemms;
unsigned long long lt_fp8_gemms, lt_fp8_fast_accum_gemms, lt_fp8_blk128_a_gemms, lt_fp8_e5m2_b_gemms,
    lt_fp8_batch_stride_gemms;

static const char *const lt_api_names[LT_API_COUNT] = {
#define LT_API_NAME(name) #name,
    LT_API_LIST(LT_API_NAME)
#undef LT_API_NAME
};

static void lt_at_exit(void) {
  standin_counters table = {lt_api_names, lt_counts, LT_API_COUNT};
  char extra[512];
  snprintf(extra, sizeof extra,
           "standin_fp16_tensor_core_gemms %llu\nstandin_fp8_gemms %llu\nstandin_fp8_fast_accum_gemms %llu\n"
           "standin_fp8_blk128_a_gemms %llu\nstandin_fp8_e5m2_b_gemms %llu\nstandin_fp8_batch_stride_gemms %llu\n",
           __atomic_load_n(&lt_fp16_tensor_core_gemms, __ATOMIC_RELAXED),
           __atomic_load_n(&lt_fp8_gemms, __ATOMIC_RELAXED),
           __atomic_load_n(&lt_fp8_fast_accum_gemms, __ATOMIC_RELAXED),
           __atomic_load_n(&lt_fp8_blk128_a_gemms, __ATOMIC_RELAXED),
           __atomic_load_n(&lt_fp8_e5m2_b_gemms, __ATOMIC_RELAXED),
           __atomic_load_n(&lt_fp8_batch_stride_gemms, __ATOMIC_RELAXED));
  standin_counts_append(&table, extra);
}

__attribute__((constructor)) static void lt_load(void) { atexit(lt_at_exit); }

/* ------------------------------------------------------------------------ */
cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
  LT_COUNT(cublasLtCreate);
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  int device;
  if (rt_ensure_context(-1) || rt_current_device(&device)) return CUBLAS_STATUS_NOT_INITIALIZED;
  struct cublasLtContext *h = calloc(1, sizeof *h);
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  h->magic = LT_HANDLE_MAGIC;
  h->device = device;
  *lightHandle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  LT_COUNT(cublasLtDestroy);
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  if (lightHandle->magic != LT_HANDLE_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
  lightHandle->magic = 0;
  free(lightHandle);
  return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion(void) {
  LT_COUNT(cublasLtGetVersion);
  return standin_lt_version();
}

size_t cublasLtGetCudartVersion(void) {
  LT_COUNT(cublasLtGetCudartVersion);
  return STANDIN_CUDART_VERSION;
}

cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int *value) {
  LT_COUNT(cublasLtGetProperty);
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
  case MAJOR_VERSION: *value = (int)(standin_lt_version() / 10000); return CUBLAS_STATUS_SUCCESS;
  case MINOR_VERSION: *value = (int)(standin_lt_version() / 100 % 100); return CUBLAS_STATUS_SUCCESS;
  case PATCH_LEVEL: *value = (int)(standin_lt_version() % 100); return CUBLAS_STATUS_SUCCESS;
  default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

const char *cublasLtGetStatusName(cublasStatus_t status) {
  LT_COUNT(cublasLtGetStatusName);
  return standin_status_name(status);
}

const char *cublasLtGetStatusString(cublasStatus_t status) {
  LT_COUNT(cublasLtGetStatusString);
  return standin_status_string(status);
}

/* ------------------------------------------------------------------------ */
/* Attribute tables: where each attribute lives and how big it is. */
typedef struct lt_attr {
  int id;
  size_t offset, size;
  size_t since; /* the first cuBLAS version (standin_lt_version) that has it */
} lt_attr;

#define LT_FIELD(type, id, field) {id, offsetof(type, field), sizeof(((type *)0)->field), 0}
#define LT_FIELD_SINCE(type, id, field, version) {id, offsetof(type, field), sizeof(((type *)0)->field), version}

/* The toolkit's libcublasLt 13 also takes descriptor attribute 16, which
 * cublasLt.h does not name: 4 bytes, default 0, stored and read back
 * (tests/real/test_real_tables.py asks it). Kept and never read here, as
 * its meaning is not documented. */
#define LT_DESC_ATTR_16 16

static const lt_attr lt_desc_attrs[] = {
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_TRANSA, transa),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_TRANSB, transb),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_TRANSC, transc),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_FILL_MODE, fill_mode),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_batch_stride),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_batch_stride),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, alpha_vector_batch_stride),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, sm_count_target),
    LT_FIELD(lt_desc, LT_DESC_ATTR_16, attr16),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, c_scale),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_d),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, aux_scale),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, aux_amax),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_scale_mode),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_scale_mode),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_C_SCALE_MODE, c_scale_mode),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_D_SCALE_MODE, d_scale_mode),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, aux_scale_mode),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, d_out_scale),
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, d_out_scale_mode),
#if STANDIN_CUDA_MAJOR == 12
    /* cuBLAS 12's cublasLt.h (12.9, nvidia-cublas-cu12 12.9.3): the
     * EXPERIMENTAL atomic synchronization attributes, int32_t chunk counts
     * (default 0, "atomic synchronization disabled") and int32_t * counter
     * arrays (default NULL); CUDA 13's header and library drop them. 12.9.3
     * also takes id 38, undeclared there, as 4 bytes (default 0), where
     * CUDA 13 has EMULATION_DESCRIPTOR. */
    LT_FIELD(lt_desc, LT_CU12_ATOMIC_SYNC_NUM_CHUNKS_D_ROWS, atomic_chunks_rows),
    LT_FIELD(lt_desc, LT_CU12_ATOMIC_SYNC_NUM_CHUNKS_D_COLS, atomic_chunks_cols),
    LT_FIELD(lt_desc, LT_CU12_ATOMIC_SYNC_IN_COUNTERS_POINTER, atomic_in_counters),
    LT_FIELD(lt_desc, LT_CU12_ATOMIC_SYNC_OUT_COUNTERS_POINTER, atomic_out_counters),
    LT_FIELD(lt_desc, 38, attr38_cu12),
#else
    LT_FIELD(lt_desc, CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, emulation),
    /* cublaslt.h, LT_V1310_*: only when answering as 13.10 or newer
     * (STANDIN_CUBLASLT_VERSION) */
    LT_FIELD_SINCE(lt_desc, LT_V1310_ALPHA_BATCH_STRIDE, alpha_batch_stride, 131000),
    LT_FIELD_SINCE(lt_desc, LT_V1310_BETA_BATCH_STRIDE, beta_batch_stride, 131000),
    LT_FIELD_SINCE(lt_desc, LT_V1310_BATCH_INVARIANCE_FLAGS, batch_invariance, 131000),
#endif
};

static const lt_attr lt_layout_attrs[] = {
    LT_FIELD(lt_layout, CUBLASLT_MATRIX_LAYOUT_TYPE, type),
    LT_FIELD(lt_layout, CUBLASLT_MATRIX_LAYOUT_ORDER, order),
    LT_FIELD(lt_layout, CUBLASLT_MATRIX_LAYOUT_ROWS, rows),
    LT_FIELD(lt_layout, CUBLASLT_MATRIX_LAYOUT_COLS, cols),
    LT_FIELD(lt_layout, CUBLASLT_MATRIX_LAYOUT_LD, ld),
    LT_FIELD(lt_layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch_count),
    LT_FIELD(lt_layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride),
    LT_FIELD(lt_layout, CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, plane_offset),
    LT_FIELD(lt_layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, batch_mode),
};

static const lt_attr lt_pref_attrs[] = {
    LT_FIELD(lt_pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, search_mode),
    LT_FIELD(lt_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_workspace),
    LT_FIELD(lt_pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction_mask),
    LT_FIELD(lt_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a),
    LT_FIELD(lt_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b),
    LT_FIELD(lt_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c),
    LT_FIELD(lt_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d),
    LT_FIELD(lt_pref, CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, max_waves),
    LT_FIELD(lt_pref, CUBLASLT_MATMUL_PREF_IMPL_MASK, impl_mask),
};

#define LT_COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static const lt_attr *lt_attr_find(const lt_attr *t, size_t n, int id) {
  for (size_t i = 0; i < n; i++)
    if (t[i].id == id) return standin_lt_version() >= t[i].since ? &t[i] : NULL;
  return NULL;
}

static cublasStatus_t lt_attr_set(void *obj, const lt_attr *t, size_t n, int id, const void *buf,
                                  size_t size) {
  const lt_attr *a = obj ? lt_attr_find(t, n, id) : NULL;
  if (!a || !buf || size != a->size) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy((char *)obj + a->offset, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t lt_attr_get(const void *obj, const lt_attr *t, size_t n, int id, void *buf,
                                  size_t size, size_t *written) {
  const lt_attr *a = obj ? lt_attr_find(t, n, id) : NULL;
  if (!a) return CUBLAS_STATUS_INVALID_VALUE;
  if (size == 0) {
    if (!written) return CUBLAS_STATUS_INVALID_VALUE;
    *written = a->size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf || size != a->size) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(buf, (const char *)obj + a->offset, size);
  if (written) *written = size;
  return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
static void lt_desc_init(lt_desc *d, cublasComputeType_t compute, cudaDataType_t scale) {
  memset(d, 0, sizeof *d);
  d->compute = compute;
  d->scale = scale;
  d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  d->transa = d->transb = d->transc = CUBLAS_OP_N;
  d->fill_mode = CUBLAS_FILL_MODE_FULL;
  d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  d->aux_type = -1;
  d->bias_type = -1;
#if STANDIN_CUDA_MAJOR != 12
  d->batch_invariance = LT_V1310_BATCH_INVARIANCE_UNSET;
#endif
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  LT_COUNT(cublasLtMatmulDescCreate);
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulDescOpaque_t *d = malloc(sizeof *d);
  if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
  lt_desc_init((lt_desc *)d, computeType, scaleType);
  *matmulDesc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t matmulDesc, size_t size,
                                               cublasComputeType_t computeType,
                                               cudaDataType_t scaleType) {
  LT_COUNT(cublasLtMatmulDescInit_internal);
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  if (size < sizeof(cublasLtMatmulDescOpaque_t)) return CUBLAS_STATUS_ALLOC_FAILED;
  lt_desc_init((lt_desc *)matmulDesc, computeType, scaleType);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  LT_COUNT(cublasLtMatmulDescDestroy);
  free(matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
  LT_COUNT(cublasLtMatmulDescSetAttribute);
  return lt_attr_set(matmulDesc, lt_desc_attrs, LT_COUNT_OF(lt_desc_attrs), attr, buf,
                     sizeInBytes);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, void *buf,
                                              size_t sizeInBytes, size_t *sizeWritten) {
  LT_COUNT(cublasLtMatmulDescGetAttribute);
  return lt_attr_get(matmulDesc, lt_desc_attrs, LT_COUNT_OF(lt_desc_attrs), attr, buf,
                     sizeInBytes, sizeWritten);
}

/* ------------------------------------------------------------------------ */
static void lt_layout_init(lt_layout *l, cudaDataType type, uint64_t rows, uint64_t cols,
                           int64_t ld) {
  memset(l, 0, sizeof *l);
  l->type = (uint32_t)type;
  l->order = CUBLASLT_ORDER_COL;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  l->batch_count = 1;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  LT_COUNT(cublasLtMatrixLayoutCreate);
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatrixLayoutOpaque_t *l = malloc(sizeof *l);
  if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
  lt_layout_init((lt_layout *)l, type, rows, cols, ld);
  *matLayout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t matLayout, size_t size,
                                                 cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  LT_COUNT(cublasLtMatrixLayoutInit_internal);
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  if (size < sizeof(cublasLtMatrixLayoutOpaque_t)) return CUBLAS_STATUS_ALLOC_FAILED;
  lt_layout_init((lt_layout *)matLayout, type, rows, cols, ld);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  LT_COUNT(cublasLtMatrixLayoutDestroy);
  free(matLayout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes) {
  LT_COUNT(cublasLtMatrixLayoutSetAttribute);
  return lt_attr_set(matLayout, lt_layout_attrs, LT_COUNT_OF(lt_layout_attrs), attr, buf,
                     sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr, void *buf,
                                                size_t sizeInBytes, size_t *sizeWritten) {
  LT_COUNT(cublasLtMatrixLayoutGetAttribute);
  return lt_attr_get(matLayout, lt_layout_attrs, LT_COUNT_OF(lt_layout_attrs), attr, buf,
                     sizeInBytes, sizeWritten);
}

/* ------------------------------------------------------------------------ */
static void lt_pref_init(lt_pref *p) {
  memset(p, 0, sizeof *p);
  p->search_mode = CUBLASLT_SEARCH_BEST_FIT;
  p->reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  p->align_a = p->align_b = p->align_c = p->align_d = 256;
  p->impl_mask = ~0ull;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  LT_COUNT(cublasLtMatmulPreferenceCreate);
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulPreferenceOpaque_t *p = malloc(sizeof *p);
  if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
  lt_pref_init((lt_pref *)p);
  *pref = p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref,
                                                     size_t size) {
  LT_COUNT(cublasLtMatmulPreferenceInit_internal);
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  if (size < sizeof(cublasLtMatmulPreferenceOpaque_t)) return CUBLAS_STATUS_ALLOC_FAILED;
  lt_pref_init((lt_pref *)pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  LT_COUNT(cublasLtMatmulPreferenceDestroy);
  free(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes) {
  LT_COUNT(cublasLtMatmulPreferenceSetAttribute);
  return lt_attr_set(pref, lt_pref_attrs, LT_COUNT_OF(lt_pref_attrs), attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    void *buf, size_t sizeInBytes,
                                                    size_t *sizeWritten) {
  LT_COUNT(cublasLtMatmulPreferenceGetAttribute);
  return lt_attr_get(pref, lt_pref_attrs, LT_COUNT_OF(lt_pref_attrs), attr, buf, sizeInBytes,
                     sizeWritten);
}
