/* decode.c: one gs_gemm from whichever entry point the call came through.
 * GemmEx-family arguments are copied; cublasLtMatmul hides the GEMM in its
 * descriptors, which are read back through the real cuBLASLt getters (the
 * same library that will run the call, so its enum values apply). Nothing
 * here dereferences caller memory: invalid arguments reach cuBLAS as they
 * came, and cuBLAS gives the caller its own error. */
#include <stdio.h>
#include <string.h>

#include "shim.h"
#include "base/sys.h"

static void gemm_defaults(gs_gemm *g) {
  g->order_a = g->order_b = g->order_c = g->order_d = -1;
  g->pointer_mode = -1;
  g->epilogue = -1;
  g->bias_type = -1;
  g->scale_type = -1;
  g->d_type = -1;
  g->algo = -1;
  g->ldd = -1;
  g->lt_unrouted = NULL;
  g->lt_invariance = -2;
  g->undecoded_attr = NULL;
}

/* The first descriptor read that failed, kept for the reason: a call that
 * runs native because cuBLASLt refused to describe it must say so, not
 * blame the types it could not read. */
static void undecoded(gs_gemm *g, char of, const char *attr, int status) {
  if (g->undecoded_attr) return;
  g->undecoded_of = of;
  g->undecoded_attr = attr;
  g->undecoded_status = status;
}

void decode_failure(const gs_gemm *g, char *buf, size_t len) {
  const char *getter = g->undecoded_of ? "cublasLtMatrixLayoutGetAttribute" : "cublasLtMatmulDescGetAttribute";
  const char *of = g->undecoded_of == 'A'   ? "A's "
                   : g->undecoded_of == 'B' ? "B's "
                   : g->undecoded_of == 'C' ? "C's "
                   : g->undecoded_of == 'D' ? "D's "
                                            : "";
  if (!g->undecoded_attr)
    snprintf(buf, len, "arguments could not be decoded");
  else if (g->undecoded_status == DECODE_NO_DESCRIPTOR)
    snprintf(buf, len, "arguments could not be decoded: %s is NULL", g->undecoded_attr);
  else if (g->undecoded_status == DECODE_NO_GETTER)
    snprintf(buf, len, "arguments could not be decoded: %s is not in the loaded cuBLASLt", getter);
  else
    snprintf(buf, len, "arguments could not be decoded: %s(%s%s) failed (status %d)", getter, of, g->undecoded_attr,
             g->undecoded_status);
}

void decode_gemm(gs_gemm *g, void *handle, int ta, int tb, int64_t m, int64_t n, int64_t k,
                 const void *alpha, const void *A, int at, int64_t lda, long long sa,
                 const void *B, int bt, int64_t ldb, long long sb, const void *beta, void *C,
                 int ct, int64_t ldc, long long sc, int64_t batch, int comp, int algo) {
  gemm_defaults(g);
  g->handle = handle;
  g->transa = ta;
  g->transb = tb;
  g->m = m;
  g->n = n;
  g->k = k;
  g->batch = batch;
  g->a_type = at;
  g->b_type = bt;
  g->c_type = g->d_type = ct;
  g->compute_type = comp;
  g->lda = lda;
  g->ldb = ldb;
  g->ldc = g->ldd = ldc;
  g->stride_a = sa;
  g->stride_b = sb;
  g->stride_c = g->stride_d = sc;
  g->algo = algo;
  g->alpha = alpha;
  g->beta = beta;
  g->A = A;
  g->B = B;
  g->C = C;
  g->D = C;
  /* The pointer mode lives in the handle; device.c asks for it together
   * with the stream, and only for a handle that is alive. */
  g->decoded = 1;
}

/* ---- cuBLASLt descriptors ---------------------------------------------- */
/* Each attribute is read with the exact size the real library expects (a
 * wrong size is CUBLAS_STATUS_INVALID_VALUE there). */
/* Each read records its failure in g (undecoded); the attribute's name
 * travels as text so that the reason can say which read it was. */
static int desc_get(gs_gemm *g, void *desc, cublasLtMatmulDescAttributes_t a, const char *name, void *buf, size_t n) {
  size_t w = 0;
  if (!gs_sys.cublasLtMatmulDescGetAttribute) {
    undecoded(g, 0, name, DECODE_NO_GETTER);
    return -1;
  }
  cublasStatus_t st = GS_CALL(cublasLtMatmulDescGetAttribute, desc, a, buf, n, &w);
  if (st == CUBLAS_STATUS_SUCCESS) return 0;
  undecoded(g, 0, name, (int)st);
  return -1;
}

static int desc_i32(gs_gemm *g, void *desc, cublasLtMatmulDescAttributes_t a, const char *name, int *out) {
  int32_t v = 0;
  if (desc_get(g, desc, a, name, &v, sizeof v)) return -1;
  *out = v;
  return 0;
}

static int desc_ptr(gs_gemm *g, void *desc, cublasLtMatmulDescAttributes_t a, const char *name, const void **out) {
  void *v = NULL;
  if (desc_get(g, desc, a, name, &v, sizeof v)) return -1;
  *out = v;
  return 0;
}
#define DESC_I32(g, desc, a, out) desc_i32(g, desc, a, #a, out)
#define DESC_PTR(g, desc, a, out) desc_ptr(g, desc, a, #a, out)

typedef struct lt_layout {
  int type, order;
  int64_t rows, cols, ld, batch, stride;
} lt_layout;

static int layout_get(gs_gemm *g, char of, void *l, cublasLtMatrixLayoutAttribute_t a, const char *name, void *buf,
                      size_t n) {
  size_t w = 0;
  if (!gs_sys.cublasLtMatrixLayoutGetAttribute) {
    undecoded(g, of, name, DECODE_NO_GETTER);
    return -1;
  }
  cublasStatus_t st = GS_CALL(cublasLtMatrixLayoutGetAttribute, l, a, buf, n, &w);
  if (st == CUBLAS_STATUS_SUCCESS) return 0;
  undecoded(g, of, name, (int)st);
  return -1;
}
#define LAYOUT_GET(g, of, l, a, v) layout_get(g, of, l, a, #a, &(v), sizeof(v))

/* What of a layout to read: each getter is a call into cuBLASLt, and this
 * runs on every logged Lt call. */
enum { LAYOUT_ROWS = 1, LAYOUT_COLS = 2 };
static const char *const layout_names[4] = {"Adesc", "Bdesc", "Cdesc", "Ddesc"};

/* Type, order, ld and batch always; the batch stride only when there is a
 * batch (it means nothing otherwise and reads as 0); rows/cols as asked. */
static int read_layout(gs_gemm *g, char of, void *l, unsigned want, lt_layout *out) {
  uint32_t type = 0;
  int32_t order = 0, batch = 0;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0, stride = 0;
  if (!l) {
    undecoded(g, of, layout_names[of - 'A'], DECODE_NO_DESCRIPTOR);
    return -1;
  }
  int bad = LAYOUT_GET(g, of, l, CUBLASLT_MATRIX_LAYOUT_TYPE, type) |
            LAYOUT_GET(g, of, l, CUBLASLT_MATRIX_LAYOUT_ORDER, order) |
            LAYOUT_GET(g, of, l, CUBLASLT_MATRIX_LAYOUT_LD, ld) |
            LAYOUT_GET(g, of, l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch);
  if (!bad && (want & LAYOUT_ROWS)) bad |= LAYOUT_GET(g, of, l, CUBLASLT_MATRIX_LAYOUT_ROWS, rows);
  if (!bad && (want & LAYOUT_COLS)) bad |= LAYOUT_GET(g, of, l, CUBLASLT_MATRIX_LAYOUT_COLS, cols);
  if (!bad && batch != 1) bad |= LAYOUT_GET(g, of, l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  if (bad) return -1;
  *out = (lt_layout){(int)type, order, (int64_t)rows, (int64_t)cols, ld, batch, stride};
  return 0;
}

void decode_lt(gs_gemm *g, void *handle, void *desc, const void *alpha, const void *A,
               void *adesc, const void *B, void *bdesc, const void *beta, const void *C,
               void *cdesc, void *D, void *ddesc, void *stream) {
  gemm_defaults(g);
  g->api = GS_API_LT_MATMUL;
  g->lt_full = 0;
  g->handle = handle;
  g->stream = stream;
  g->alpha = alpha;
  g->beta = beta;
  g->A = A;
  g->B = B;
  g->C = C;
  g->D = D;
  g->lt_desc = desc;
  g->lt_layout[0] = adesc, g->lt_layout[1] = bdesc, g->lt_layout[2] = cdesc, g->lt_layout[3] = ddesc;
  g->transa = g->transb = -1;
  g->m = g->n = g->k = g->batch = -1;
  g->a_type = g->b_type = g->c_type = g->compute_type = -1;
  g->lda = g->ldb = g->ldc = -1;
  g->stride_a = g->stride_b = g->stride_c = g->stride_d = -1;
  g->fast_accum = -1;
  /* What the policy table is keyed on: four reads. The rest waits until a
   * route or the log needs it (decode_lt_rest). */
  uint32_t t[3] = {0, 0, 0};
  if (!desc) undecoded(g, 0, "computeDesc", DECODE_NO_DESCRIPTOR);
  int ok = desc && DESC_I32(g, desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &g->compute_type) == 0;
  for (int i = 0; i < 3; i++) {
    void *l = g->lt_layout[i];
    if (!l) undecoded(g, (char)('A' + i), layout_names[i], DECODE_NO_DESCRIPTOR);
    else if (LAYOUT_GET(g, (char)('A' + i), l, CUBLASLT_MATRIX_LAYOUT_TYPE, t[i]) == 0) continue;
    ok = 0;
    t[i] = (uint32_t)-1;
  }
  g->a_type = (int)t[0], g->b_type = (int)t[1], g->c_type = (int)t[2];
  g->decoded = ok;
}

/* The caller's fp8 scale pointers and fast-accumulation flag matter only to
 * a route deciding whether it can rebuild the call; the log does not show
 * them. */
static int read_scales(gs_gemm *g) {
  void *desc = g->lt_desc;
  int8_t fast = 0;
  int ok = DESC_PTR(g, desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->a_scale) == 0 &&
           DESC_PTR(g, desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->b_scale) == 0 &&
           DESC_PTR(g, desc, CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, &g->c_scale) == 0 &&
           DESC_PTR(g, desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &g->d_scale) == 0 &&
           DESC_PTR(g, desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &g->amax_d) == 0 &&
           desc_get(g, desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, "CUBLASLT_MATMUL_DESC_FAST_ACCUM", &fast, sizeof fast) == 0;
  if (ok) g->fast_accum = fast;
  return ok;
}

/* Attributes no route reproduces, with the value that means "not used". A
 * route rebuilds the GEMM from the fields above, so any of these at another
 * value would be dropped: the call must run native, where cuBLASLt applies
 * it or gives its own error (cublasLt.h documents each; TRANSC: "Currently
 * only CUBLAS_OP_N is supported"). Not listed, because they cannot change a
 * result: SM_COUNT_TARGET (a heuristics hint). Read elsewhere: the types,
 * transposes, epilogue, bias, pointer mode, the fp8 scale and amax
 * pointers, FAST_ACCUM. BIAS_BATCH_STRIDE is reproduced by the routes that
 * take batched biases (routes/ffma.c; routes/fp8.c refuses batched biases).
 * The ids from 31 on (and the layout's BATCH_MODE) are spelled out, with
 * CUDA 13's cublasLt.h values: older headers the shim also builds with
 * lack them (12.6 has none of them, 12.8 no BATCH_MODE, 12.9 no
 * EMULATION_DESCRIPTOR). Ids 27-30 are cuBLAS 12's atomic synchronization
 * (its cublasLt.h: chunk counts, "default 0 (atomic synchronization
 * disabled)", and counter arrays the GEMM waits on and signals), gone from
 * CUDA 13's header and library (INVALID_VALUE: unused): a route would
 * neither wait nor signal, and whoever waits on the counters would wait
 * for ever. cuBLAS 12.9.3 takes id 38, undeclared in its header, as 4
 * bytes (default 0): read at that size where the 8-byte read is refused.
 * Ids 39-41 are cuBLAS 13.10's (its cublasLt.h, newer than the toolkit's):
 * alpha and beta batch strides, which a route would not apply, and batch
 * invariance flags, which no route promises: UNSET (the default) and
 * DISABLED are unused, and what was read is kept (g->lt_invariance), as
 * UNSET defers to an environment variable (routes/checks.c). */
typedef struct lt_attr_default {
  int id;
  unsigned char size; /* the attribute's storage: 1, 4 or 8 bytes */
  int64_t unused;     /* the documented default */
  const char *name;
  const char *why;    /* the routing log's reason when it holds another value */
  unsigned char alt_size; /* another release's storage, tried when size is refused */
  int64_t also_unused;    /* a second value that changes nothing (= unused if none) */
  unsigned char keep;     /* 1: what was read goes to g->lt_invariance */
} lt_attr_default;

#define LT_SETS(name) "the descriptor sets " name ", which no route reproduces"
#define LT_DESC_ATTR(id, size, unused) {id, size, unused, #id, LT_SETS(#id), 0, unused, 0}
#define LT_DESC_NEW(name, value, size, unused) LT_DESC_NEW2(name, value, size, unused, 0, unused, 0)
#define LT_DESC_NEW2(name, value, size, unused, alt_size, also_unused, keep)                                     \
  {value, size, unused, "CUBLASLT_MATMUL_DESC_" name, LT_SETS("CUBLASLT_MATMUL_DESC_" name), alt_size, also_unused, \
   keep}
static const lt_attr_default desc_unrouted[] = {
    LT_DESC_ATTR(CUBLASLT_MATMUL_DESC_TRANSC, 4, CUBLAS_OP_N),
    LT_DESC_ATTR(CUBLASLT_MATMUL_DESC_FILL_MODE, 4, CUBLAS_FILL_MODE_FULL),
    LT_DESC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, 8, 0),
    LT_DESC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, 8, 0),
    LT_DESC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, 8, 0),
    LT_DESC_ATTR(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, 8, 0),
    LT_DESC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, 4, -1),
    LT_DESC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, 8, 0),
    LT_DESC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, 8, 0),
    LT_DESC_NEW("ATOMIC_SYNC_NUM_CHUNKS_D_ROWS", 27, 4, 0),
    LT_DESC_NEW("ATOMIC_SYNC_NUM_CHUNKS_D_COLS", 28, 4, 0),
    LT_DESC_NEW("ATOMIC_SYNC_IN_COUNTERS_POINTER", 29, 8, 0),
    LT_DESC_NEW("ATOMIC_SYNC_OUT_COUNTERS_POINTER", 30, 8, 0),
    LT_DESC_NEW("A_SCALE_MODE", 31, 4, 0),
    LT_DESC_NEW("B_SCALE_MODE", 32, 4, 0),
    LT_DESC_NEW("C_SCALE_MODE", 33, 4, 0),
    LT_DESC_NEW("D_SCALE_MODE", 34, 4, 0),
    LT_DESC_NEW("EPILOGUE_AUX_SCALE_MODE", 35, 4, 0),
    LT_DESC_NEW("D_OUT_SCALE_POINTER", 36, 8, 0),
    LT_DESC_NEW("D_OUT_SCALE_MODE", 37, 4, 0),
    LT_DESC_NEW2("EMULATION_DESCRIPTOR", 38, 8, 0, 4, 0, 0),
    LT_DESC_NEW("ALPHA_BATCH_STRIDE", 39, 8, 0),
    LT_DESC_NEW("BETA_BATCH_STRIDE", 40, 8, 0),
    LT_DESC_NEW2("BATCH_INVARIANCE_FLAGS", 41, 4, 0x8000, 0, 0, 1),
};
#undef LT_DESC_NEW2
#undef LT_DESC_NEW
#undef LT_DESC_ATTR
#undef LT_SETS

/* BATCH_MODE POINTER_ARRAY (cublasLtBatchMode_t: "The address of the matrix
 * of each instance of the batch are read from arrays of pointers") makes A,
 * B, C and D device arrays of pointers, which a route would take for the
 * matrices themselves; PLANE_OFFSET is planar complex. */
static const lt_attr_default layout_unrouted[] = {
    {8, 4, 0, "CUBLASLT_MATRIX_LAYOUT_BATCH_MODE",
     "a layout's CUBLASLT_MATRIX_LAYOUT_BATCH_MODE is not strided (CUBLASLT_BATCH_MODE_POINTER_ARRAY: A, B, C and D "
     "are arrays of pointers; cuBLAS 13.10's GROUPED: groups of their own shapes); the routes take strided batches "
     "only", 0, 0, 0},
    {CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, 8, 0, "CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET",
     "a layout sets CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET (planar complex), which no route reproduces", 0, 0, 0},
};

/* 1: the attribute holds its unused value; 0: another; -1: unreadable
 * (recorded in g). A getter answering INVALID_VALUE for an attribute id the
 * library does not know (an older cuBLASLt) means nobody could have set it;
 * any other failure leaves the call undecoded. of: 0 for the matmul
 * descriptor, 'A'..'D' for a layout. */
static int attr_unused(gs_gemm *g, char of, void *obj, const lt_attr_default *a) {
  int64_t v = 0; /* little-endian: a 1- or 4-byte value lands in the low bytes */
  size_t w = 0;
  cublasStatus_t s;
  if (of ? !gs_sys.cublasLtMatrixLayoutGetAttribute : !gs_sys.cublasLtMatmulDescGetAttribute) {
    undecoded(g, of, a->name, DECODE_NO_GETTER);
    return -1;
  }
  unsigned size = a->size;
  if (of)
    s = GS_CALL(cublasLtMatrixLayoutGetAttribute, obj, (cublasLtMatrixLayoutAttribute_t)a->id, &v, size, &w);
  else
    s = GS_CALL(cublasLtMatmulDescGetAttribute, obj, (cublasLtMatmulDescAttributes_t)a->id, &v, size, &w);
  if (s == CUBLAS_STATUS_INVALID_VALUE && a->alt_size && !of) {
    size = a->alt_size;
    v = 0;
    s = GS_CALL(cublasLtMatmulDescGetAttribute, obj, (cublasLtMatmulDescAttributes_t)a->id, &v, size, &w);
  }
  if (s == CUBLAS_STATUS_INVALID_VALUE) {
    if (a->keep) g->lt_invariance = -1;
    return 1;
  }
  if (s != CUBLAS_STATUS_SUCCESS) {
    undecoded(g, of, a->name, (int)s);
    return -1;
  }
  if (size == 4) v = (int32_t)v;
  else if (size == 1) v = (int8_t)v;
  if (a->keep) g->lt_invariance = v == a->unused;
  return v == a->unused || v == a->also_unused;
}

/* The reason of the first attribute of desc or a layout that no route
 * reproduces (NULL if none); *bad when one could not be read. */
static const char *find_unrouted(gs_gemm *g, int *bad) {
  for (size_t i = 0; i < sizeof desc_unrouted / sizeof desc_unrouted[0]; i++) {
    int u = attr_unused(g, 0, g->lt_desc, &desc_unrouted[i]);
    if (u < 0) *bad = 1;
    if (u == 0) return desc_unrouted[i].why;
  }
  for (int l = 0; l < 4; l++) {
    int seen = !g->lt_layout[l]; /* NULL: read_layout leaves the call undecoded */
    for (int e = 0; e < l; e++) seen |= g->lt_layout[e] == g->lt_layout[l];
    for (size_t i = 0; !seen && i < sizeof layout_unrouted / sizeof layout_unrouted[0]; i++) {
      int u = attr_unused(g, (char)('A' + l), g->lt_layout[l], &layout_unrouted[i]);
      if (u < 0) *bad = 1;
      if (u == 0) return layout_unrouted[i].why;
    }
  }
  return NULL;
}

void decode_lt_rest(gs_gemm *g, int for_route) {
  /* lt_full: 1 = what the log shows was read, 2 = everything a route needs
   * (read again in full: routed calls are the expensive ones anyway). */
  if (g->api != GS_API_LT_MATMUL || g->lt_full >= (for_route ? 2 : 1)) return;
  g->lt_full = for_route ? 2 : 1;
  void *desc = g->lt_desc;
  int ok = desc != NULL;
  if (ok) {
    ok = DESC_I32(g, desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &g->scale_type) == 0 &&
         DESC_I32(g, desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &g->pointer_mode) == 0 &&
         DESC_I32(g, desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->transa) == 0 &&
         DESC_I32(g, desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->transb) == 0 &&
         DESC_I32(g, desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epilogue) == 0 &&
         DESC_PTR(g, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias) == 0 &&
         DESC_I32(g, desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g->bias_type) == 0 &&
         (!for_route || read_scales(g));
  }
  g->lt_unrouted = NULL;
  g->lt_invariance = -2;
  if (ok && for_route) {
    int bad = 0;
    g->lt_unrouted = find_unrouted(g, &bad);
    ok = !bad;
  }

  lt_layout la, lb, lc, ld;
  /* k is the inner dimension of op(A); m and n come from D. */
  const unsigned all = LAYOUT_ROWS | LAYOUT_COLS;
  unsigned a_want = for_route ? all : g->transa == CUBLAS_OP_N ? LAYOUT_COLS : g->transa == -1 ? 0 : LAYOUT_ROWS;
  int have_a = read_layout(g, 'A', g->lt_layout[0], a_want, &la) == 0;
  int have_b = read_layout(g, 'B', g->lt_layout[1], for_route ? all : 0, &lb) == 0;
  int have_d = read_layout(g, 'D', g->lt_layout[3], all, &ld) == 0;
  /* C and D often share one layout object (in-place GEMMs). */
  int have_c = g->lt_layout[2] == g->lt_layout[3] ? (lc = ld, have_d)
                                                 : read_layout(g, 'C', g->lt_layout[2], for_route ? all : 0, &lc) == 0;
  if (have_a) {
    g->a_type = la.type, g->lda = la.ld, g->order_a = la.order, g->stride_a = la.stride;
    if (g->transa != -1) g->k = g->transa == CUBLAS_OP_N ? la.cols : la.rows;
  }
  if (have_b) g->b_type = lb.type, g->ldb = lb.ld, g->order_b = lb.order, g->stride_b = lb.stride;
  if (have_c) g->c_type = lc.type, g->ldc = lc.ld, g->order_c = lc.order, g->stride_c = lc.stride;
  if (have_d) {
    g->d_type = ld.type, g->ldd = ld.ld, g->order_d = ld.order, g->stride_d = ld.stride;
    g->m = ld.rows, g->n = ld.cols, g->batch = ld.batch;
  }
  g->batch_mismatch = (have_a && have_d && la.batch != ld.batch) || (have_b && have_d && lb.batch != ld.batch) ||
                      (have_c && have_d && lc.batch != ld.batch);
  /* A route rebuilds the GEMM from m, n, k: layouts that disagree with
   * them must reach cuBLAS as they are, for cuBLAS's own error. */
  if (for_route && have_a && have_b && have_c && have_d && g->transb != -1) {
    int64_t a_m = g->transa == CUBLAS_OP_N ? la.rows : la.cols, b_k = g->transb == CUBLAS_OP_N ? lb.rows : lb.cols;
    int64_t b_n = g->transb == CUBLAS_OP_N ? lb.cols : lb.rows;
    g->shape_mismatch = a_m != g->m || b_k != g->k || b_n != g->n || lc.rows != g->m || lc.cols != g->n;
  }
  /* An unset bias type means "the D type" (cuBLASLt's documented default). */
  if (g->bias_type == -1 && g->d_type != -1) g->bias_type = g->d_type;
  g->decoded = g->decoded && ok && have_a && have_b && have_c && have_d;
}
