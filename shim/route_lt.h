/* route_lt.h: the cuBLASLt objects a route builds for its own matmul
 * (route_lt.c). */
#ifndef GEMMSHIM_ROUTE_LT_H
#define GEMMSHIM_ROUTE_LT_H

#include <cublasLt.h>
#include <stdint.h>

typedef struct route_lt {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc, ld;
} route_lt;

/* 1 when every builder function of the loaded cuBLASLt was found. */
int route_lt_available(void);
/* A column-major layout of type with its batch count and stride set. */
cublasStatus_t route_lt_layout(cublasLtMatrixLayout_t *l, int type, int64_t rows, int64_t cols, int64_t ld,
                               int64_t batch, int64_t stride);
/* Destroy whatever of o was created. */
void route_lt_destroy(route_lt *o);

#endif
