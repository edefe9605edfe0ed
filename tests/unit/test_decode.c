/* Descriptor decoding against the real cuBLASLt of the toolkit: its
 * descriptors work without a GPU, so the attribute sizes and enum values the
 * shim reads are checked against the library users run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <cublasLt.h>

#include "shim.h"
#include "sys.h"

static void use_real_lt(void) {
  gs_sys.cublasLtMatmulDescGetAttribute = cublasLtMatmulDescGetAttribute;
  gs_sys.cublasLtMatrixLayoutGetAttribute = cublasLtMatrixLayoutGetAttribute;
}

/* What a route or the log sees: the policy's fields, then the rest. */
static void decode_all(gs_gemm *g, void *h, void *d, const void *alpha, const void *A, void *la,
                       const void *B, void *lb, const void *beta, const void *C, void *lc, void *D,
                       void *ld, void *stream) {
  decode_lt(g, h, d, alpha, A, la, B, lb, beta, C, lc, D, ld, stream);
  decode_lt_rest(g, 1);
}

static cublasLtMatrixLayout_t layout(cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld,
                                     int32_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = NULL;
  assert_int_equal(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), 0);
  assert_int_equal(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride), 0);
  return l;
}

static void test_lt_full_descriptor(void **state) {
  use_real_lt();
  cublasLtMatmulDesc_t d = NULL;
  assert_int_equal(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), 0);
  int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  uint32_t epi = CUBLASLT_EPILOGUE_GELU_BIAS;
  const void *bias = (const void *)0x1000;
  int32_t bias_type = CUDA_R_16BF;
  int8_t fast = 1;
  const void *sa = (const void *)0x2000;
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
  /* A is stored k x m (transposed), B k x n, C/D m x n; m=64 n=32 k=48. */
  cublasLtMatrixLayout_t la = layout(CUDA_R_16BF, 48, 64, 56, 3, 56 * 64);
  cublasLtMatrixLayout_t lb = layout(CUDA_R_16BF, 48, 32, 48, 3, 48 * 32);
  cublasLtMatrixLayout_t lc = layout(CUDA_R_16BF, 64, 32, 64, 3, 64 * 32);
  cublasLtMatrixLayout_t ld = layout(CUDA_R_16BF, 64, 32, 72, 3, 72 * 32);
  int32_t row = CUBLASLT_ORDER_ROW;
  cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row);

  gs_gemm g;
  memset(&g, 0, sizeof g);
  decode_all(&g, (void *)0x10, d, (void *)0x20, (void *)0x30, la, (void *)0x40, lb, (void *)0x50,
            (void *)0x60, lc, (void *)0x70, ld, (void *)0x80);
  assert_int_equal(g.decoded, 1);
  assert_int_equal(g.transa, CUBLAS_OP_T);
  assert_int_equal(g.transb, CUBLAS_OP_N);
  assert_int_equal(g.m, 64);
  assert_int_equal(g.n, 32);
  assert_int_equal(g.k, 48);
  assert_int_equal(g.batch, 3);
  assert_int_equal(g.compute_type, CUBLAS_COMPUTE_32F);
  assert_int_equal(g.scale_type, CUDA_R_32F);
  assert_int_equal(g.pointer_mode, CUBLASLT_POINTER_MODE_HOST);
  assert_int_equal(g.epilogue, CUBLASLT_EPILOGUE_GELU_BIAS);
  assert_ptr_equal(g.bias, bias);
  assert_int_equal(g.bias_type, CUDA_R_16BF);
  assert_int_equal(g.fast_accum, 1);
  assert_ptr_equal(g.a_scale, sa);
  assert_null(g.b_scale);
  assert_int_equal(g.a_type, CUDA_R_16BF);
  assert_int_equal(g.lda, 56);
  assert_int_equal(g.ldb, 48);
  assert_int_equal(g.ldc, 64);
  assert_int_equal(g.ldd, 72);
  assert_int_equal(g.order_a, CUBLASLT_ORDER_COL);
  assert_int_equal(g.order_b, CUBLASLT_ORDER_ROW);
  assert_int_equal(g.stride_a, 56 * 64);
  assert_int_equal(g.stride_d, 72 * 32);
  assert_ptr_equal(g.C, (void *)0x60);
  assert_ptr_equal(g.D, (void *)0x70);
  assert_ptr_equal(g.stream, (void *)0x80);
  assert_int_equal(g.algo, -1);
  assert_int_equal(g.shape_mismatch, 0);
  assert_int_equal(g.batch_mismatch, 0);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(d);
}

/* Defaults: no bias type set means "the D type"; N/N gives k from A's cols. */
static void test_lt_defaults(void **state) {
  use_real_lt();
  cublasLtMatmulDesc_t d = NULL;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t la = layout(CUDA_R_32F, 8, 5, 8, 1, 0);
  cublasLtMatrixLayout_t lb = layout(CUDA_R_32F, 5, 7, 5, 1, 0);
  cublasLtMatrixLayout_t lc = layout(CUDA_R_32F, 8, 7, 8, 1, 0);
  gs_gemm g;
  decode_all(&g, NULL, d, NULL, NULL, la, NULL, lb, NULL, NULL, lc, NULL, lc, NULL);
  assert_int_equal(g.decoded, 1);
  assert_int_equal(g.m, 8);
  assert_int_equal(g.n, 7);
  assert_int_equal(g.k, 5);
  assert_int_equal(g.epilogue, CUBLASLT_EPILOGUE_DEFAULT);
  assert_int_equal(g.bias_type, CUDA_R_32F);
  assert_null(g.bias);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(d);
}

/* NULL descriptors are the caller's error: decoding notes it, never crashes,
 * and keeps what it could read. */
static void test_lt_null_descriptors(void **state) {
  use_real_lt();
  cublasLtMatrixLayout_t la = layout(CUDA_R_16F, 4, 4, 4, 1, 0);
  gs_gemm g;
  decode_all(&g, NULL, NULL, NULL, NULL, la, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
  assert_int_equal(g.decoded, 0);
  assert_int_equal(g.a_type, CUDA_R_16F);
  assert_int_equal(g.m, -1);
  assert_int_equal(g.transa, -1);
  char why[GS_REASON_MAX];
  decode_failure(&g, why, sizeof why);
  /* cublasLtMatmul's parameter names (cublasLt.h): the first NULL one. */
  assert_string_equal(why, "arguments could not be decoded: computeDesc is NULL");
  cublasLtMatmulDesc_t d = NULL;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  decode_all(&g, NULL, d, NULL, NULL, la, NULL, la, NULL, NULL, NULL, NULL, la, NULL);
  decode_failure(&g, why, sizeof why);
  assert_string_equal(why, "arguments could not be decoded: Cdesc is NULL");
  decode_all(&g, NULL, d, NULL, NULL, la, NULL, la, NULL, NULL, la, NULL, la, NULL);
  assert_int_equal(g.decoded, 1);
  decode_failure(&g, why, sizeof why);
  assert_string_equal(why, "arguments could not be decoded");
  cublasLtMatmulDescDestroy(d);
  cublasLtMatrixLayoutDestroy(la);
}

/* Decodes one call whose descriptors are all d / l with entry `id`'s nth
 * call failing (nth 0: none), and returns the reason's decode part. */
static const char *decode_failing(gs_sys_id id, unsigned nth, int persistent, void *d, void *l, gs_gemm *g) {
  static char why[GS_REASON_MAX];
  gs_fault_clear();
  if (nth) gs_fault_arm(id, nth, persistent);
  decode_all(g, NULL, d, NULL, NULL, l, NULL, l, NULL, NULL, l, NULL, l, NULL);
  gs_fault_clear();
  decode_failure(g, why, sizeof why);
  return why;
}

/* A getter that fails (fault injected) leaves the call undecoded, and the
 * reason names the read that failed and cuBLASLt's status: cublasLt.h
 * documents CUBLAS_STATUS_INVALID_VALUE (7) as the getters' only failure,
 * which is what the injection gives (sys.h). */
static void test_lt_getter_failure(void **state) {
  use_real_lt();
  cublasLtMatmulDesc_t d = NULL;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t l = layout(CUDA_R_32F, 4, 4, 4, 1, 0);
  gs_gemm g;
  for (unsigned nth = 1; nth <= 14; nth++) {
    decode_failing(GS_SYS_cublasLtMatmulDescGetAttribute, nth, 0, d, l, &g);
    assert_int_equal(g.decoded, 0);
  }
  assert_string_equal(decode_failing(GS_SYS_cublasLtMatmulDescGetAttribute, 1, 0, d, l, &g),
                      "arguments could not be decoded: cublasLtMatmulDescGetAttribute"
                      "(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE) failed (status 7)");
  /* The second read is B's type; every later one fails too, the first is named. */
  assert_string_equal(decode_failing(GS_SYS_cublasLtMatrixLayoutGetAttribute, 2, 1, d, l, &g),
                      "arguments could not be decoded: cublasLtMatrixLayoutGetAttribute"
                      "(B's CUBLASLT_MATRIX_LAYOUT_TYPE) failed (status 7)");
  assert_int_equal(g.decoded, 0);
  decode_failing(GS_SYS_cublasLtMatrixLayoutGetAttribute, 3, 0, d, l, &g);
  assert_int_equal(g.decoded, 0);
  /* A cuBLASLt without the getter (resolve.c left it NULL). */
  gs_sys.cublasLtMatrixLayoutGetAttribute = NULL;
  assert_string_equal(decode_failing(GS_SYS_cublasLtMatrixLayoutGetAttribute, 0, 0, d, l, &g),
                      "arguments could not be decoded: cublasLtMatrixLayoutGetAttribute is not in the loaded "
                      "cuBLASLt");
  assert_int_equal(g.decoded, 0);
  use_real_lt();
  assert_string_equal(decode_failing(GS_SYS_cublasLtMatrixLayoutGetAttribute, 0, 0, d, l, &g),
                      "arguments could not be decoded");
  assert_int_equal(g.decoded, 1);
  cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(d);
}

/* The policy needs four reads; the rest waits for the log or a route. */
static void test_lt_key_only(void **state) {
  use_real_lt();
  cublasLtMatmulDesc_t d = NULL;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F_FAST_16BF, CUDA_R_32F);
  cublasLtMatrixLayout_t la = layout(CUDA_R_16BF, 8, 5, 8, 1, 0);
  cublasLtMatrixLayout_t lc = layout(CUDA_R_32F, 8, 7, 8, 1, 0);
  gs_gemm g;
  memset(&g, 0, sizeof g);
  g.api = GS_API_LT_MATMUL;
  decode_lt(&g, NULL, d, NULL, NULL, la, NULL, la, NULL, NULL, lc, NULL, lc, NULL);
  assert_int_equal(g.decoded, 1);
  assert_int_equal(g.lt_full, 0);
  assert_int_equal(g.compute_type, CUBLAS_COMPUTE_32F_FAST_16BF);
  assert_int_equal(g.a_type, CUDA_R_16BF);
  assert_int_equal(g.b_type, CUDA_R_16BF);
  assert_int_equal(g.c_type, CUDA_R_32F);
  assert_int_equal(g.m, -1);
  assert_int_equal(g.transa, -1);
  decode_lt_rest(&g, 0); /* what the log shows */
  assert_int_equal(g.lt_full, 1);
  assert_int_equal(g.m, 8);
  assert_int_equal(g.n, 7);
  assert_int_equal(g.k, 5);
  assert_int_equal(g.shape_mismatch, 0); /* not checked for the log */
  decode_lt_rest(&g, 1); /* what a route needs */
  assert_int_equal(g.lt_full, 2);
  /* B was given A's 8x5 layout: op(B) is not k x n, so a route must leave
   * the call to cuBLAS. */
  assert_int_equal(g.shape_mismatch, 1);
  assert_int_equal(g.decoded, 1);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(d);
}

static void test_gemm_ex_fields(void **state) {
  gs_gemm g;
  decode_gemm(&g, (void *)0x1, CUBLAS_OP_T, CUBLAS_OP_N, 10, 20, 30, (void *)2, (void *)3,
              CUDA_R_16BF, 40, 1200, (void *)4, CUDA_R_16BF, 50, 1500, (void *)5, (void *)6,
              CUDA_R_32F, 60, 1200, 7, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
  assert_int_equal(g.decoded, 1);
  assert_int_equal(g.m, 10);
  assert_int_equal(g.n, 20);
  assert_int_equal(g.k, 30);
  assert_int_equal(g.batch, 7);
  assert_int_equal(g.lda, 40);
  assert_int_equal(g.ldb, 50);
  assert_int_equal(g.ldc, 60);
  assert_int_equal(g.ldd, 60);
  assert_int_equal(g.c_type, CUDA_R_32F);
  assert_int_equal(g.d_type, CUDA_R_32F);
  assert_int_equal(g.stride_b, 1500);
  assert_int_equal(g.algo, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
  assert_int_equal(g.epilogue, -1);
  assert_int_equal(g.order_a, -1);
  assert_ptr_equal(g.D, (void *)6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lt_full_descriptor), cmocka_unit_test(test_lt_defaults),
      cmocka_unit_test(test_lt_null_descriptors), cmocka_unit_test(test_lt_getter_failure),
      cmocka_unit_test(test_gemm_ex_fields), cmocka_unit_test(test_lt_key_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
