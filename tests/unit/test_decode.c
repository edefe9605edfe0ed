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

/* Every descriptor attribute whose non-default value changes what
 * cublasLtMatmul computes (or makes it refuse the call), set on the real
 * cuBLASLt's descriptor, makes the routes leave the call to cuBLASLt, and
 * the reason names it. The attributes and their defaults are CUDA 13's
 * cublasLt.h (cublasLtMatmulDescAttributes_t, cublasLtMatrixLayoutAttribute_t);
 * TRANSC: "Currently only CUBLAS_OP_N is supported"; BATCH_MODE
 * CUBLASLT_BATCH_MODE_POINTER_ARRAY: "The address of the matrix of each
 * instance of the batch are read from arrays of pointers". */
static const struct {
  int id, size;
  int64_t value;
  const char *named;
} unrouted_attrs[] = {
    {CUBLASLT_MATMUL_DESC_TRANSC, 4, CUBLAS_OP_T, "CUBLASLT_MATMUL_DESC_TRANSC"},
    {CUBLASLT_MATMUL_DESC_FILL_MODE, 4, CUBLAS_FILL_MODE_UPPER, "CUBLASLT_MATMUL_DESC_FILL_MODE"},
    {CUBLASLT_MATMUL_DESC_FILL_MODE, 4, CUBLAS_FILL_MODE_LOWER, "CUBLASLT_MATMUL_DESC_FILL_MODE"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, 8, 0x4000, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, 8, 128, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, 8, 1024, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE"},
    {CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, 8, 64, "CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, 4, CUDA_R_16F, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, 8, 0x4000, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, 8, 0x4000, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER"},
    {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, 4, 1, "CUBLASLT_MATMUL_DESC_A_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_B_SCALE_MODE, 4, 1, "CUBLASLT_MATMUL_DESC_B_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_C_SCALE_MODE, 4, 1, "CUBLASLT_MATMUL_DESC_C_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_D_SCALE_MODE, 4, 1, "CUBLASLT_MATMUL_DESC_D_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, 4, 1, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, 8, 0x4000, "CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER"},
    {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, 4, 1, "CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, 8, 0x4000, "CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR"},
};

/* An untouched bf16 descriptor (m=8 n=7 k=5, N/N): nothing unrouted. */
static void routable_lt(cublasLtMatmulDesc_t *d, cublasLtMatrixLayout_t l[4]) {
  assert_int_equal(cublasLtMatmulDescCreate(d, CUBLAS_COMPUTE_32F, CUDA_R_32F), 0);
  l[0] = layout(CUDA_R_16BF, 8, 5, 8, 1, 0);
  l[1] = layout(CUDA_R_16BF, 5, 7, 5, 1, 0);
  l[2] = layout(CUDA_R_16BF, 8, 7, 8, 1, 0);
  l[3] = layout(CUDA_R_16BF, 8, 7, 8, 1, 0);
}

static void decode_routable(gs_gemm *g, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t l[4]) {
  memset(g, 0, sizeof *g);
  decode_all(g, (void *)0x10, d, (void *)0x20, (void *)0x30, l[0], (void *)0x40, l[1], (void *)0x50,
             (void *)0x60, l[2], (void *)0x70, l[3], (void *)0x80);
}

static void release_lt(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t l[4]) {
  for (int i = 0; i < 4; i++) cublasLtMatrixLayoutDestroy(l[i]);
  cublasLtMatmulDescDestroy(d);
}

static void test_lt_unrouted_attributes(void **state) {
  use_real_lt();
  cublasLtMatmulDesc_t d;
  cublasLtMatrixLayout_t l[4];
  gs_gemm g;
  routable_lt(&d, l);
  decode_routable(&g, d, l);
  assert_int_equal(g.decoded, 1);
  assert_null(g.lt_unrouted);
  assert_null(route_check_lt(&g));
  /* SM_COUNT_TARGET only steers cuBLASLt's heuristics: still routable. */
  int32_t sms = 20;
  assert_int_equal(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof sms), 0);
  decode_routable(&g, d, l);
  assert_null(route_check_lt(&g));
  release_lt(d, l);

  for (size_t i = 0; i < sizeof unrouted_attrs / sizeof unrouted_attrs[0]; i++) {
    routable_lt(&d, l);
    int32_t v32 = (int32_t)unrouted_attrs[i].value;
    int64_t v64 = unrouted_attrs[i].value;
    const void *v = unrouted_attrs[i].size == 4 ? (const void *)&v32 : (const void *)&v64;
    assert_int_equal(cublasLtMatmulDescSetAttribute(d, (cublasLtMatmulDescAttributes_t)unrouted_attrs[i].id, v,
                                                    (size_t)unrouted_attrs[i].size),
                     CUBLAS_STATUS_SUCCESS);
    decode_routable(&g, d, l);
    assert_int_equal(g.decoded, 1);
    const char *why = route_check_lt(&g);
    assert_non_null(why);
    assert_non_null(strstr(why, unrouted_attrs[i].named));
    release_lt(d, l);
  }
}

/* A pointer-array batch on any one layout (even of batch count 1: each
 * operand is then an array of one pointer), and a planar-complex plane
 * offset, leave the call to cuBLASLt. */
static void test_lt_unrouted_layouts(void **state) {
  use_real_lt();
  for (int which = 0; which < 4; which++) {
    for (int attr = 0; attr < 2; attr++) {
      cublasLtMatmulDesc_t d;
      cublasLtMatrixLayout_t l[4];
      routable_lt(&d, l);
      uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
      int64_t plane = 4096;
      if (attr == 0)
        assert_int_equal(cublasLtMatrixLayoutSetAttribute(l[which], CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode,
                                                          sizeof mode), 0);
      else
        assert_int_equal(cublasLtMatrixLayoutSetAttribute(l[which], CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, &plane,
                                                          sizeof plane), 0);
      gs_gemm g;
      decode_routable(&g, d, l);
      assert_int_equal(g.decoded, 1);
      const char *why = route_check_lt(&g);
      assert_non_null(why);
      assert_non_null(strstr(why, attr == 0 ? "CUBLASLT_BATCH_MODE_POINTER_ARRAY" : "CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET"));
      release_lt(d, l);
    }
  }
}

/* A cuBLASLt older than an attribute (CUDA 12.6's cublasLt.h has no ids
 * from 31 on, nor the layout's BATCH_MODE) answers INVALID_VALUE for it,
 * the getters' only documented failure: nobody can have set it, so the call
 * stays routable. Any other answer to those reads leaves the call
 * undecoded, the read named. */
static cublasStatus_t old_lt_desc_get(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, void *buf,
                                      size_t n, size_t *w) {
  if ((int)a >= 31) return CUBLAS_STATUS_INVALID_VALUE;
  return cublasLtMatmulDescGetAttribute(d, a, buf, n, w);
}

static cublasStatus_t old_lt_layout_get(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, void *buf,
                                        size_t n, size_t *w) {
  if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_MODE) return CUBLAS_STATUS_INVALID_VALUE;
  return cublasLtMatrixLayoutGetAttribute(l, a, buf, n, w);
}

static cublasStatus_t broken_transc_get(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, void *buf,
                                        size_t n, size_t *w) {
  if (a == CUBLASLT_MATMUL_DESC_TRANSC) return CUBLAS_STATUS_INTERNAL_ERROR;
  return cublasLtMatmulDescGetAttribute(d, a, buf, n, w);
}

static cublasStatus_t broken_plane_get(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, void *buf,
                                       size_t n, size_t *w) {
  if (a == CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET) return CUBLAS_STATUS_INTERNAL_ERROR;
  return cublasLtMatrixLayoutGetAttribute(l, a, buf, n, w);
}

static void test_lt_unrouted_older_library(void **state) {
  cublasLtMatmulDesc_t d;
  cublasLtMatrixLayout_t l[4];
  gs_gemm g;
  char why[GS_REASON_MAX];
  routable_lt(&d, l);
  gs_sys.cublasLtMatmulDescGetAttribute = old_lt_desc_get;
  gs_sys.cublasLtMatrixLayoutGetAttribute = old_lt_layout_get;
  decode_routable(&g, d, l);
  assert_int_equal(g.decoded, 1);
  assert_null(route_check_lt(&g));
  use_real_lt();
  gs_sys.cublasLtMatmulDescGetAttribute = broken_transc_get;
  decode_routable(&g, d, l);
  assert_int_equal(g.decoded, 0);
  decode_failure(&g, why, sizeof why);
  assert_string_equal(why, "arguments could not be decoded: cublasLtMatmulDescGetAttribute"
                           "(CUBLASLT_MATMUL_DESC_TRANSC) failed (status 14)");
  use_real_lt();
  gs_sys.cublasLtMatrixLayoutGetAttribute = broken_plane_get;
  decode_routable(&g, d, l);
  assert_int_equal(g.decoded, 0);
  decode_failure(&g, why, sizeof why);
  assert_string_equal(why, "arguments could not be decoded: cublasLtMatrixLayoutGetAttribute"
                           "(A's CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET) failed (status 14)");
  use_real_lt();
  /* Every read of the full decode failing in turn with INVALID_VALUE (the
   * injection's value, sys.h): the 1 + 13 descriptor reads of the policy
   * key and fields, and the 3 + 4*6 layout reads of the types and four
   * layouts, leave the call undecoded; the 24 + 4*2 reads of unrouted
   * attributes (after the descriptor's fields, before the layouts' fields)
   * take it for an attribute the library does not know. */
  unsigned nth;
  for (nth = 1; nth <= 1 + 13 + 24; nth++) {
    gs_fault_clear();
    gs_fault_arm(GS_SYS_cublasLtMatmulDescGetAttribute, nth, 0);
    decode_routable(&g, d, l);
    assert_int_equal(g.decoded, nth > 1 + 13);
  }
  for (nth = 1; nth <= 3 + 4 * 6 + 4 * 2; nth++) {
    gs_fault_clear();
    gs_fault_arm(GS_SYS_cublasLtMatrixLayoutGetAttribute, nth, 0);
    decode_routable(&g, d, l);
    assert_int_equal(g.decoded, nth > 3 && nth <= 3 + 4 * 2);
  }
  gs_fault_clear();
  release_lt(d, l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lt_full_descriptor), cmocka_unit_test(test_lt_defaults),
      cmocka_unit_test(test_lt_null_descriptors), cmocka_unit_test(test_lt_getter_failure),
      cmocka_unit_test(test_gemm_ex_fields), cmocka_unit_test(test_lt_key_only),
      cmocka_unit_test(test_lt_unrouted_attributes), cmocka_unit_test(test_lt_unrouted_layouts),
      cmocka_unit_test(test_lt_unrouted_older_library),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
