/* fuzz_lt_decode.c: libFuzzer harness for the cuBLASLt descriptor decoder
 * (decode_lt / decode_lt_rest, shim/decode.c), the routes' Lt checks
 * (shim/routes/checks.c) and the routing log's formatter (log_format),
 * fed descriptors built through the CPU stand-in libcublasLt with random
 * attribute values: the stand-in, like cuBLASLt, takes any value of the
 * right size and judges values only in cublasLtMatmul.
 *
 * Input: byte 0 flags (bit 0: C and D share one layout; bit 1: no matmul
 * descriptor; bit 2: no A layout), then records of [target][attribute]
 * [value bytes] where target % 5 is the matmul descriptor or layout A, B,
 * C, D and the value has the attribute's size (asked of the library).
 *
 * Invariants: with every descriptor present the decode succeeds, and every
 * field it reports is what the library holds (read back here with the
 * library's getter), k and m, n taken as cuBLASLt documents them (k from
 * op(A), m and n from D), an unset bias type meaning D's type; with one
 * missing, decoded is 0 and the reason names it. The log line is one JSON
 * object on one line of printable text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "shim.h"
#include "sys.h"

static void die(const char *what, long long got, long long want) {
  fprintf(stderr, "fuzz_lt_decode: invariant broken: %s (got %lld, want %lld)\n", what, got, want);
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  gs_sys.cublasLtMatmulDescGetAttribute = cublasLtMatmulDescGetAttribute;
  gs_sys.cublasLtMatrixLayoutGetAttribute = cublasLtMatrixLayoutGetAttribute;
  return 0;
}

static int64_t desc_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, size_t size) {
  int64_t v = 0;
  size_t w = 0;
  if (cublasLtMatmulDescGetAttribute(d, a, &v, size, &w) != CUBLAS_STATUS_SUCCESS) die("read back", a, 0);
  if (size == 4) return (int64_t)(int32_t)v;
  if (size == 1) return (int64_t)(int8_t)v;
  return v;
}

static int64_t layout_attr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, size_t size) {
  int64_t v = 0;
  size_t w = 0;
  if (cublasLtMatrixLayoutGetAttribute(l, a, &v, size, &w) != CUBLAS_STATUS_SUCCESS) die("read back", a, 0);
  return size == 4 ? (int64_t)(int32_t)v : v;
}

#define EQ(what, got, want) do { if ((long long)(got) != (long long)(want)) die(what, (long long)(got), (long long)(want)); } while (0)

static void check_layout(cublasLtMatrixLayout_t l, int type, int64_t ld, int order, int64_t stride, const char *name) {
  EQ(name, type, (int)(uint32_t)layout_attr(l, CUBLASLT_MATRIX_LAYOUT_TYPE, 4));
  EQ(name, ld, layout_attr(l, CUBLASLT_MATRIX_LAYOUT_LD, 8));
  EQ(name, order, layout_attr(l, CUBLASLT_MATRIX_LAYOUT_ORDER, 4));
  int32_t batch = (int32_t)layout_attr(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 4);
  /* The stride is read only for batched layouts. */
  if (batch != 1) EQ(name, stride, layout_attr(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 8));
}

static void check_line(const char *line, size_t n) {
  if (n < 3 || line[0] != '{' || line[n - 2] != '}' || line[n - 1] != '\n') die("log line not one JSON object", (long long)n, 0);
  int in_string = 0, depth = 0;
  for (size_t i = 0; i + 1 < n; i++) {
    unsigned char c = (unsigned char)line[i];
    if (c < 0x20) die("log line has a control byte", c, 0);
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = 0;
    } else if (c == '"') {
      in_string = 1;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if (c == '}' || c == ']') {
      depth--;
    }
  }
  if (in_string || depth != 0) die("log line's strings or brackets do not close", depth, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned flags = data[0];
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t lay[4] = {NULL, NULL, NULL, NULL};
  if (cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) abort();
  for (int i = 0; i < 4; i++)
    if (cublasLtMatrixLayoutCreate(&lay[i], CUDA_R_16BF, 64, 48, 64) != CUBLAS_STATUS_SUCCESS) abort();
  size_t pos = 1;
  while (pos + 2 <= size) {
    int target = data[pos] % 5, attr = data[pos + 1] % (target == 0 ? 40 : 12);
    pos += 2;
    size_t need = 0;
    cublasStatus_t s = target == 0 ? cublasLtMatmulDescGetAttribute(desc, attr, NULL, 0, &need)
                                   : cublasLtMatrixLayoutGetAttribute(lay[target - 1], attr, NULL, 0, &need);
    if (s != CUBLAS_STATUS_SUCCESS || need == 0 || need > 64) continue; /* not an attribute */
    uint8_t value[64] = {0};
    size_t take = size - pos < need ? size - pos : need;
    memcpy(value, data + pos, take);
    pos += take;
    s = target == 0 ? cublasLtMatmulDescSetAttribute(desc, attr, value, need)
                    : cublasLtMatrixLayoutSetAttribute(lay[target - 1], attr, value, need);
    if (s != CUBLAS_STATUS_SUCCESS) die("the library refused a value of the attribute's size", attr, 0);
  }
  int shared = flags & 1, no_desc = (flags >> 1) & 1, no_a = (flags >> 2) & 1;
  void *la = no_a ? NULL : lay[0], *lc = shared ? lay[3] : lay[2];
  static const float one = 1, zero = 0;
  gs_call c;
  memset(&c, 0, sizeof c);
  gs_gemm *g = &c.g;
  decode_lt(g, (void *)0x10, no_desc ? NULL : desc, &one, (void *)0x1000, la, (void *)0x2000, lay[1], &zero,
            (void *)0x3000, lc, (void *)0x4000, lay[3], NULL);
  decode_lt_rest(g, 1);
  if (no_desc || no_a) {
    EQ("decoded with a descriptor missing", g->decoded, 0);
    /* The reason names the first missing argument, by cublasLtMatmul's
     * parameter names. */
    char why[GS_REASON_MAX];
    decode_failure(g, why, sizeof why);
    const char *want = no_desc ? "arguments could not be decoded: computeDesc is NULL"
                               : "arguments could not be decoded: Adesc is NULL";
    if (strcmp(why, want) != 0) {
      fprintf(stderr, "fuzz_lt_decode: invariant broken: reason '%s', want '%s'\n", why, want);
      abort();
    }
  } else {
    EQ("decoded", g->decoded, 1);
    EQ("compute_type", g->compute_type, desc_attr(desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, 4));
    EQ("scale_type", g->scale_type, desc_attr(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, 4));
    EQ("pointer_mode", g->pointer_mode, desc_attr(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, 4));
    EQ("transa", g->transa, desc_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, 4));
    EQ("transb", g->transb, desc_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, 4));
    EQ("epilogue", g->epilogue, (int)(uint32_t)desc_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, 4));
    EQ("bias", (intptr_t)g->bias, desc_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, 8));
    EQ("a_scale", (intptr_t)g->a_scale, desc_attr(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, 8));
    EQ("b_scale", (intptr_t)g->b_scale, desc_attr(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, 8));
    EQ("amax_d", (intptr_t)g->amax_d, desc_attr(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, 8));
    EQ("fast_accum", g->fast_accum, desc_attr(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, 1));
    int d_type = (int)(uint32_t)layout_attr(lay[3], CUBLASLT_MATRIX_LAYOUT_TYPE, 4);
    int bias_type = (int)desc_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, 4);
    /* cuBLASLt: BIAS_DATA_TYPE -1 (the default) means D's type. */
    EQ("bias_type", g->bias_type, bias_type == -1 ? d_type : bias_type);
    EQ("m", g->m, layout_attr(lay[3], CUBLASLT_MATRIX_LAYOUT_ROWS, 8));
    EQ("n", g->n, layout_attr(lay[3], CUBLASLT_MATRIX_LAYOUT_COLS, 8));
    EQ("batch", g->batch, layout_attr(lay[3], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 4));
    /* Another TRANSA value is cuBLAS's to refuse; k is then whatever. */
    if (g->transa == CUBLAS_OP_N) EQ("k", g->k, layout_attr(lay[0], CUBLASLT_MATRIX_LAYOUT_COLS, 8));
    else if (g->transa == CUBLAS_OP_T || g->transa == CUBLAS_OP_C)
      EQ("k", g->k, layout_attr(lay[0], CUBLASLT_MATRIX_LAYOUT_ROWS, 8));
    check_layout(lay[0], g->a_type, g->lda, g->order_a, g->stride_a, "A layout");
    check_layout(lay[1], g->b_type, g->ldb, g->order_b, g->stride_b, "B layout");
    check_layout(lc, g->c_type, g->ldc, g->order_c, g->stride_c, "C layout");
    check_layout(lay[3], g->d_type, g->ldd, g->order_d, g->stride_d, "D layout");
  }
  const char *why = route_check_arguments(g);
  if (!why) why = route_check_lt(g);
  snprintf(c.reason, sizeof c.reason, "fuzz; %s", why ? why : "accepted");
  c.decided = c.route = GS_ROUTE_NATIVE;
  c.device = -1, c.sm = -1;
  char line[8192];
  size_t n = log_format(&c, line, sizeof line);
  if (n == 0) die("log_format did not fit 8 KiB", 0, 0);
  check_line(line, n);
  cublasLtMatmulDescDestroy(desc);
  for (int i = 0; i < 4; i++) cublasLtMatrixLayoutDestroy(lay[i]);
  return 0;
}
