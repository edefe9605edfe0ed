/* route_lt.c: the cuBLASLt objects a route builds for its own matmul (the
 * ffma route's fp32 copy of a call, the fp8 route's cuBLASLt backend):
 * host-side descriptors, made per call and destroyed once the matmul is
 * enqueued, all through the call table so tests can make each step fail. */
#include "route_lt.h"
#include "shim.h"
#include "sys.h"

int route_lt_available(void) {
  return gs_sys.cublasLtMatmulDescCreate && gs_sys.cublasLtMatmulDescSetAttribute &&
         gs_sys.cublasLtMatrixLayoutCreate && gs_sys.cublasLtMatrixLayoutSetAttribute &&
         gs_sys.cublasLtMatmulDescDestroy && gs_sys.cublasLtMatrixLayoutDestroy;
}

/* A column-major layout with its batch count and stride set. */
cublasStatus_t route_lt_layout(cublasLtMatrixLayout_t *l, int type, int64_t rows, int64_t cols, int64_t ld,
                               int64_t batch, int64_t stride) {
  int32_t b = (int32_t)batch;
  cublasStatus_t s = GS_CALL(cublasLtMatrixLayoutCreate, l, (cudaDataType)type, (uint64_t)rows, (uint64_t)cols, ld);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = GS_CALL(cublasLtMatrixLayoutSetAttribute, *l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = GS_CALL(cublasLtMatrixLayoutSetAttribute, *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                sizeof stride);
  return s;
}

void route_lt_destroy(route_lt *o) {
  if (o->desc) GS_CALL(cublasLtMatmulDescDestroy, o->desc);
  cublasLtMatrixLayout_t *ls[] = {&o->la, &o->lb, &o->lc, &o->ld};
  for (int i = 0; i < 4; i++)
    if (*ls[i]) GS_CALL(cublasLtMatrixLayoutDestroy, *ls[i]);
}
