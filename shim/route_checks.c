/* route_checks.c: what every non-native route asks of a GEMM before it
 * touches anything: arguments cuBLAS would accept, and Lt descriptors in the
 * forms the routes rebuild. Each check returns NULL or the reason, in the
 * words the routing log shows. */
#include <cublasLt.h>

#include "shim.h"

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

void route_operand_shapes(const gs_gemm *g, int64_t *a_rows, int64_t *a_cols, int64_t *b_rows, int64_t *b_cols) {
  *a_rows = g->transa == CUBLAS_OP_N ? g->m : g->k;
  *a_cols = g->transa == CUBLAS_OP_N ? g->k : g->m;
  *b_rows = g->transb == CUBLAS_OP_N ? g->k : g->n;
  *b_cols = g->transb == CUBLAS_OP_N ? g->n : g->k;
}

/* Arguments cuBLAS would reject are forwarded untouched so the caller gets
 * cuBLAS's own error, never one of the shim's making. */
const char *route_check_arguments(const gs_gemm *g) {
  int64_t a_rows, a_cols, b_rows, b_cols;
  route_operand_shapes(g, &a_rows, &a_cols, &b_rows, &b_cols);
  if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0) return "negative size (forwarded for cuBLAS's own error)";
  if (g->lda < max1(a_rows) || g->ldb < max1(b_rows) || g->ldc < max1(g->m) || g->ldd < max1(g->m))
    return "leading dimension too small (forwarded for cuBLAS's own error)";
  if (!g->handle || !g->alpha || !g->beta || !g->A || !g->B || !g->C || !g->D)
    return "NULL handle or pointer (forwarded for cuBLAS's own error)";
  if ((g->transa != CUBLAS_OP_N && g->transa != CUBLAS_OP_T && g->transa != CUBLAS_OP_C) ||
      (g->transb != CUBLAS_OP_N && g->transb != CUBLAS_OP_T && g->transb != CUBLAS_OP_C))
    return "unsupported transpose (forwarded for cuBLAS's own error)";
  return NULL;
}

const char *route_check_lt(const gs_gemm *g) {
  if (g->order_a != CUBLASLT_ORDER_COL || g->order_b != CUBLASLT_ORDER_COL || g->order_c != CUBLASLT_ORDER_COL ||
      g->order_d != CUBLASLT_ORDER_COL)
    return "a layout is not column-major";
  switch (g->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_RELU: case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS: case CUBLASLT_EPILOGUE_GELU: case CUBLASLT_EPILOGUE_GELU_BIAS:
      break;
    default:
      return "epilogue other than bias/relu/gelu";
  }
  if (g->a_scale || g->b_scale || g->c_scale || g->d_scale || g->amax_d) return "the caller set scale pointers";
  if ((g->epilogue & CUBLASLT_EPILOGUE_BIAS) && !g->bias) return "bias epilogue without a bias pointer";
  if (g->batch_mismatch) return "the layouts' batch counts differ";
  if (g->shape_mismatch) return "the layouts' shapes disagree (forwarded for cuBLAS's own error)";
  return NULL;
}
