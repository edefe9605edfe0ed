/* lt_scale_probe.c: what the loaded cuBLASLt does with fp8 GEMMs and its
 * block-scaling modes, case by case, checked against the rules the
 * stand-in (tests/standin/scale_modes.c, cublaslt_matmul.c) and the fp8
 * route (shim/routes/fp8.c lt_unfit) take from the cuBLAS documentation
 * ("Narrow precision data types usage", cublasLtMatmulMatrixScale_t),
 * with what an H200 with cuBLAS 13.1 showed on 2026-12-04 where the docs
 * say nothing (docs/gpu-results.md): k a multiple of 16 whatever the
 * leading dimension, m a multiple of 8, scale pointers 16-byte aligned.
 *
 * For each case: the operands are bf16 with magnitudes that differ by row
 * and by 128-column block (so a scale read from the wrong place shows),
 * quantized to E4M3 by the shim's own kernels (kernels/fp8_scaled_quantize
 * .cu, loaded from --ptx) for the block modes, on the host for per-tensor
 * scaling; then cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul, TN, D in
 * bf16 (or fp32). A case whose status differs from the stand-in's rule is a
 * MISMATCH. A case that runs is compared with a float64 model computed from
 * the fp8 bytes and scales read back, the scales indexed as the stand-in
 * indexes them ("ours") and as the other plausible layouts would: the
 * model that matches names the layout cuBLASLt reads. The GEMM must match
 * "ours" to 1e-2 of max |D| (D is bf16) and keep >= 20 dB against the
 * float64 product of the bf16 inputs.
 *
 * Usage: lt_scale_probe --ptx=build/kernels/fp8_scaled_quantize.ptx
 *        lt_scale_probe --null=desc|layouts  (what a NULL argument does)
 * Exit: 0 every case as the rules say; 1 a mismatch; 2 setup. */
#include <cublasLt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/fp8_kernels.h"
#include "gpu_common.h"

#define VEC128 CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
#define BLK128 CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
#define VEC32 CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0
#define SCALAR CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F

typedef struct probe_case {
  const char *name;
  int amode, bmode;
  int64_t m, n, k, kpad; /* kpad: the fp8 buffers' leading dimension */
  int d_f32;             /* D in fp32, else bf16 */
  int64_t ldd;           /* 0: m */
  int e5m2;              /* both operands E5M2 (per-tensor only) */
  float alpha;
  int expect_ok; /* the stand-in's / the route's rule on sm_90, cuBLAS >= 12.9 */
  int soff, doff; /* bytes added to the scale pointers and to D (alignment cases) */
} probe_case;

static const probe_case cases[] = {
    /* per-tensor scaling: the rules of the fp8 route's lt_unfit */
    {"scalar_aligned", SCALAR, SCALAR, 256, 256, 512, 512, 0, 0, 0, 1.0f, 1, 0, 0},
    {"scalar_k200", SCALAR, SCALAR, 256, 256, 200, 200, 0, 0, 0, 1.0f, 0, 0, 0},
    {"scalar_k200_ld208", SCALAR, SCALAR, 256, 256, 200, 208, 0, 0, 0, 1.0f, 0, 0, 0},
    {"scalar_k24", SCALAR, SCALAR, 64, 64, 24, 24, 0, 0, 0, 1.0f, 0, 0, 0},
    {"scalar_ldd100", SCALAR, SCALAR, 100, 64, 256, 256, 0, 100, 0, 1.0f, 0, 0, 0},
    {"scalar_ldd104", SCALAR, SCALAR, 100, 64, 256, 256, 0, 104, 0, 1.0f, 0, 0, 0},
    {"scalar_e5m2xe5m2", SCALAR, SCALAR, 256, 256, 256, 256, 0, 0, 1, 1.0f, 0, 0, 0},
    {"scalar_d_f32", SCALAR, SCALAR, 256, 256, 512, 512, 1, 0, 0, 1.0f, 1, 0, 0},
    {"scalar_k208", SCALAR, SCALAR, 256, 256, 208, 208, 0, 0, 0, 1.0f, 1, 0, 0},
    {"scalar_m104", SCALAR, SCALAR, 104, 64, 256, 256, 0, 104, 0, 1.0f, 1, 0, 0},
    {"scalar_m120", SCALAR, SCALAR, 120, 64, 256, 256, 0, 120, 0, 1.0f, 1, 0, 0},
    {"scalar_m200", SCALAR, SCALAR, 200, 64, 256, 256, 0, 200, 0, 1.0f, 1, 0, 0},
    {"scalar_m100_f32", SCALAR, SCALAR, 100, 64, 256, 256, 1, 100, 0, 1.0f, 0, 0, 0},
    {"scalar_m8", SCALAR, SCALAR, 8, 64, 256, 256, 0, 8, 0, 1.0f, 1, 0, 0},
    {"scalar_n100", SCALAR, SCALAR, 256, 100, 256, 256, 0, 0, 0, 1.0f, 1, 0, 0},
    {"scalar_n4", SCALAR, SCALAR, 256, 4, 256, 256, 0, 0, 0, 1.0f, 1, 0, 0},
    {"scalar_scale_off4", SCALAR, SCALAR, 256, 256, 256, 256, 0, 0, 0, 1.0f, 0, 4, 0},
    {"scalar_scale_off8", SCALAR, SCALAR, 256, 256, 256, 256, 0, 0, 0, 1.0f, 0, 8, 0},
    {"scalar_scale_off16", SCALAR, SCALAR, 256, 256, 256, 256, 0, 0, 0, 1.0f, 1, 16, 0},
    {"scalar_d_off8", SCALAR, SCALAR, 256, 256, 256, 256, 0, 0, 0, 1.0f, 0, 0, 8},
    /* block scaling on sm_90 */
    {"vec128_vec128", VEC128, VEC128, 256, 256, 512, 512, 0, 0, 0, 1.0f, 1, 0, 0},
    {"blk128_vec128", BLK128, VEC128, 256, 256, 512, 512, 0, 0, 0, 1.0f, 1, 0, 0},
    {"vec128_blk128", VEC128, BLK128, 256, 256, 512, 512, 0, 0, 0, 1.0f, 1, 0, 0},
    {"blk128_blk128", BLK128, BLK128, 256, 256, 512, 512, 0, 0, 0, 1.0f, 0, 0, 0},
    {"vec128_alpha_half", VEC128, VEC128, 256, 256, 512, 512, 0, 0, 0, 0.5f, 1, 0, 0},
    {"vec128_d_f32", VEC128, VEC128, 256, 256, 512, 512, 1, 0, 0, 1.0f, 1, 0, 0},
    {"vec128_k320", VEC128, VEC128, 256, 256, 320, 320, 0, 0, 0, 1.0f, 1, 0, 0},
    {"blk128_k320", BLK128, VEC128, 384, 256, 320, 320, 0, 0, 0, 1.0f, 1, 0, 0},
    {"vec128_k64", VEC128, VEC128, 128, 128, 64, 64, 0, 0, 0, 1.0f, 1, 0, 0},
    {"vec128_m260", VEC128, VEC128, 260, 256, 256, 256, 0, 264, 0, 1.0f, 0, 0, 0},
    {"vec128_m264", VEC128, VEC128, 264, 256, 256, 256, 0, 264, 0, 1.0f, 1, 0, 0},
    {"vec128_m200", VEC128, VEC128, 200, 256, 256, 256, 0, 200, 0, 1.0f, 1, 0, 0},
    {"vec128_scale_off4", VEC128, VEC128, 256, 256, 256, 256, 0, 0, 0, 1.0f, 0, 4, 0},
    {"vec128_m258", VEC128, VEC128, 258, 256, 256, 256, 0, 264, 0, 1.0f, 0, 0, 0},
    {"vec128_n258", VEC128, VEC128, 256, 258, 256, 256, 0, 0, 0, 1.0f, 0, 0, 0},
    {"blk128_m200", BLK128, VEC128, 200, 256, 256, 256, 0, 200, 0, 1.0f, 1, 0, 0},
    {"vec128_n8", VEC128, VEC128, 256, 8, 256, 256, 0, 0, 0, 1.0f, 1, 0, 0},
    /* n % 8 with 1x128 scales on B: TransformerEngine observed a refusal */
    {"vec128_n12", VEC128, VEC128, 256, 12, 256, 256, 0, 0, 0, 1.0f, 0, 0, 0},
    {"blk128_n12", BLK128, VEC128, 256, 12, 256, 256, 0, 0, 0, 1.0f, 0, 0, 0},
    {"scalar_vec128", SCALAR, VEC128, 256, 256, 256, 256, 0, 0, 0, 1.0f, 0, 0, 0},
    {"vec32_vec32", VEC32, VEC32, 256, 256, 256, 256, 0, 0, 0, 1.0f, 0, 0, 0},
};

static const char *mode_name(int m) {
  switch (m) {
  case SCALAR: return "scalar";
  case VEC128: return "vec128";
  case BLK128: return "blk128";
  case VEC32: return "vec32";
  default: return "?";
  }
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- fp8 on the host ------------------------------------------------------- */
static double fp8_decode(uint8_t v, int e5m2) {
  int s = v >> 7, e, m;
  double x;
  if (e5m2) {
    e = (v >> 2) & 31, m = v & 3;
    if (e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
    x = e ? ldexp(1.0 + m / 4.0, e - 15) : ldexp(m / 4.0, -14);
  } else {
    e = (v >> 3) & 15, m = v & 7;
    if (e == 15 && m == 7) return NAN;
    x = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
  }
  return s ? -x : x;
}

/* Nearest finite fp8 value (ties to the even code): only needs to give
 * valid bytes; the model reads back whatever was stored. */
static uint8_t fp8_encode(double x, int e5m2) {
  uint8_t best = 0;
  double bd = INFINITY;
  for (int c = 0; c < 256; c++) {
    double v = fp8_decode((uint8_t)c, e5m2);
    if (!isfinite(v)) continue;
    double d = fabs(v - x);
    if (d < bd || (d == bd && !(c & 1))) bd = d, best = (uint8_t)c;
  }
  return best;
}

/* ---- scale layouts --------------------------------------------------------- */
/* The layouts a probe tells apart: "ours" is the stand-in's (and the
 * quantize kernel's); the others are what a misreading of the docs would
 * give. */
enum { LAY_OURS, LAY_ALT1, LAY_ALT2, LAY_N };

static int64_t scale_index(int mode, int lay, int64_t outer, int64_t k, int64_t r, int64_t q);

static double scale_at(int mode, int lay, const float *f, size_t nf, int64_t outer, int64_t k, int64_t r, int64_t q) {
  int64_t i = scale_index(mode, lay, outer, k, r, q);
  return i >= 0 && (size_t)i < nf ? f[i] : NAN; /* a layout that reads past the tensor fits nothing */
}

static int64_t scale_index(int mode, int lay, int64_t outer, int64_t k, int64_t r, int64_t q) {
  int64_t kb = q / 128, KB = cdiv(k, 128), rb = r / 128, RB = cdiv(outer, 128);
  switch (mode) {
  case VEC128:
    if (lay == LAY_OURS) return r + kb * outer;
    if (lay == LAY_ALT1) return r * KB + kb;
    return r * (cdiv(KB, 4) * 4) + kb;
  case BLK128: {
    int64_t ld = cdiv(KB, 4) * 4;
    if (lay == LAY_OURS) return kb + rb * ld;
    if (lay == LAY_ALT1) return rb + kb * RB;
    return kb + rb * KB;
  }
  default: return 0;
  }
}

static size_t scale_floats(int mode, int64_t outer, int64_t k) {
  switch (mode) {
  case VEC128: return (size_t)(outer * cdiv(k, 128));
  case BLK128: return (size_t)(cdiv(outer, 128) * cdiv(cdiv(k, 128), 4) * 4);
  case VEC32: return (size_t)(cdiv(outer, 128) * cdiv(cdiv(k, 32), 4) * 512 / 4);
  default: return 1;
  }
}

/* ---- one operand ------------------------------------------------------------- */
typedef struct operand {
  int64_t outer, k, kpad;
  int mode, e5m2;
  uint16_t *bf16; /* outer x k, k-contiguous */
  uint8_t *q;     /* outer x kpad read back */
  float *s;       /* scales read back */
  size_t nscale;
  CUdeviceptr d_src, d_q, d_s;
} operand;

static CUfunction k_bq;

static void operand_make(operand *o, int64_t outer, int64_t k, int64_t kpad, int mode, int e5m2, uint64_t *rng,
                         CUstream st) {
  memset(o, 0, sizeof *o);
  o->outer = outer, o->k = k, o->kpad = kpad, o->mode = mode, o->e5m2 = e5m2;
  o->bf16 = calloc((size_t)(outer * k), 2);
  o->q = calloc((size_t)(outer * kpad), 1);
  o->nscale = scale_floats(mode, outer, kpad);
  o->s = calloc(o->nscale, sizeof(float));
  /* rows and 128-blocks at different binades: 2^((r % 7) - 3) * 2^((q/128) % 3) */
  for (int64_t r = 0; r < outer; r++)
    for (int64_t q = 0; q < k; q++) {
      double v = gpu_rng_uniform(rng) * ldexp(1.0, (int)(r % 7) - 3 + (int)((q / 128) % 3));
      o->bf16[r * k + q] = gpu_f32_to_bf16((float)v);
    }
  o->d_q = gpu_alloc((size_t)(outer * kpad) + 256);
  o->d_s = gpu_alloc(o->nscale * sizeof(float) + 256);
  if (mode == SCALAR) {
    /* per-tensor: scale 1, the values are well inside E4M3/E5M2 */
    for (int64_t r = 0; r < outer; r++)
      for (int64_t q = 0; q < kpad; q++)
        o->q[r * kpad + q] = q < k ? fp8_encode(gpu_bf16_to_f32(o->bf16[r * k + q]), e5m2) : 0;
    o->s[0] = 1.0f;
    CU_CHECK(drv.cuMemcpyHtoD_v2(o->d_q, o->q, (size_t)(outer * kpad)));
    CU_CHECK(drv.cuMemcpyHtoD_v2(o->d_s, o->s, sizeof(float)));
    return;
  }
  o->d_src = gpu_alloc((size_t)(outer * k) * 2);
  CU_CHECK(drv.cuMemcpyHtoD_v2(o->d_src, o->bf16, (size_t)(outer * k) * 2));
  gs_fp8_bq_args a;
  memset(&a, 0, sizeof a);
  a.src = (const void *)(uintptr_t)o->d_src;
  a.dst = (uint8_t *)(uintptr_t)o->d_q;
  a.scales = (void *)(uintptr_t)o->d_s;
  a.outer = outer, a.k = k, a.k_pad = kpad, a.stride_r = k, a.stride_q = 1;
  a.mode = mode == VEC128 ? GS_FP8_BQ_VEC128 : mode == BLK128 ? GS_FP8_BQ_BLK128 : GS_FP8_BQ_MX32;
  a.fmt = GS_FP8_DEV_E4M3;
  int64_t chunks = cdiv(kpad, 128);
  int64_t rows = mode == BLK128 ? cdiv(outer, 128) : mode == VEC32 ? cdiv(outer, 128) * 128 : outer;
  unsigned grid = (unsigned)(rows * chunks < 65535 ? rows * chunks : 65535);
  void *params[] = {&a};
  CU_CHECK(drv.cuLaunchKernel(k_bq, grid, 1, 1, GS_FP8_BQ_THREADS, 1, 1, 0, st, params, NULL));
  CU_CHECK(drv.cuStreamSynchronize(st));
  CU_CHECK(drv.cuMemcpyDtoH_v2(o->q, o->d_q, (size_t)(outer * kpad)));
  CU_CHECK(drv.cuMemcpyDtoH_v2(o->s, o->d_s, o->nscale * sizeof(float)));
}

static void operand_free(operand *o) {
  if (o->d_src) drv.cuMemFree_v2(o->d_src);
  drv.cuMemFree_v2(o->d_q);
  drv.cuMemFree_v2(o->d_s);
  free(o->bf16), free(o->q), free(o->s);
}

/* The dequantized operand, outer x k, under a scale layout. */
static double *dequant(const operand *o, int lay) {
  double *x = malloc(sizeof(double) * (size_t)(o->outer * o->k));
  for (int64_t r = 0; r < o->outer; r++)
    for (int64_t q = 0; q < o->k; q++)
      x[r * o->k + q] =
          fp8_decode(o->q[r * o->kpad + q], o->e5m2) * scale_at(o->mode, lay, o->s, o->nscale, o->outer, o->kpad, r, q);
  return x;
}

/* D[i + j * ldd] = alpha * sum_q a[i,q] b[j,q] (column-major m x n) */
static void gemm64(const double *a, const double *b, int64_t m, int64_t n, int64_t k, double alpha, double *d) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double s = 0;
      for (int64_t q = 0; q < k; q++) s += a[i * k + q] * b[j * k + q];
      d[i + j * m] = alpha * s;
    }
}

static double max_rel(const double *got, const double *ref, size_t n) {
  double mx = 0, md = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
    double d = fabs(got[i] - ref[i]);
    if (!(d <= md)) md = d; /* NaN wins */
  }
  return mx > 0 ? md / mx : md;
}

static double sqnr_db(const double *got, const double *ref, size_t n) {
  double s = 0, e = 0;
  for (size_t i = 0; i < n; i++) s += ref[i] * ref[i], e += (got[i] - ref[i]) * (got[i] - ref[i]);
  if (!(e == e)) return -INFINITY;
  return e > 0 ? 10 * log10(s / e) : INFINITY;
}

static const char *st_name(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "SUCCESS";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "NOT_SUPPORTED";
  case CUBLAS_STATUS_INVALID_VALUE: return "INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "ARCH_MISMATCH";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "EXECUTION_FAILED";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "NOT_INITIALIZED";
  default: return "OTHER";
  }
}

static int run_case(const gpu_device *dev, cublasLtHandle_t lt, CUdeviceptr ws, size_t ws_size, const probe_case *c,
                    FILE *json) {
  uint64_t rng = gpu_rng_seed(1234, (uint64_t)(c - cases));
  operand A, B;
  operand_make(&A, c->m, c->k, c->kpad, c->amode, c->e5m2, &rng, dev->stream);
  operand_make(&B, c->n, c->k, c->kpad, c->bmode, c->e5m2, &rng, dev->stream);
  if (c->soff) { /* the same scales, moved to the offset pointer */
    CU_CHECK(drv.cuMemcpyHtoD_v2(A.d_s + (CUdeviceptr)c->soff, A.s, A.nscale * sizeof(float)));
    CU_CHECK(drv.cuMemcpyHtoD_v2(B.d_s + (CUdeviceptr)c->soff, B.s, B.nscale * sizeof(float)));
  }
  int64_t ldd = c->ldd ? c->ldd : c->m;
  size_t es = c->d_f32 ? 4 : 2, dbytes = (size_t)(ldd * c->n) * es;
  CUdeviceptr D0 = gpu_alloc(dbytes + 256), D = D0 + (CUdeviceptr)c->doff;
  cudaDataType dt = c->d_f32 ? CUDA_R_32F : CUDA_R_16BF;
  cudaDataType ft = c->e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;

  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasStatus_t s, hs = CUBLAS_STATUS_SUCCESS, ms = CUBLAS_STATUS_NOT_INITIALIZED;
  int count = 0;
  const char *setup = NULL;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  int32_t am = c->amode, bm = c->bmode;
  void *sa = (void *)(uintptr_t)(A.d_s + (CUdeviceptr)c->soff), *sb = (void *)(uintptr_t)(B.d_s + (CUdeviceptr)c->soff);
  if ((s = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F))) setup = "DescCreate";
  else if ((s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
           (s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)))
    setup = "TRANS";
  else if ((s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof am)) ||
           (s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm)))
    setup = "SCALE_MODE";
  else if ((s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa)) ||
           (s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb)))
    setup = "SCALE_POINTER";
  else if ((s = cublasLtMatrixLayoutCreate(&la, ft, (uint64_t)c->k, (uint64_t)c->m, c->kpad)) ||
           (s = cublasLtMatrixLayoutCreate(&lb, ft, (uint64_t)c->k, (uint64_t)c->n, c->kpad)) ||
           (s = cublasLtMatrixLayoutCreate(&ld, dt, (uint64_t)c->m, (uint64_t)c->n, ldd)))
    setup = "LayoutCreate";
  else if ((s = cublasLtMatmulPreferenceCreate(&pref)) ||
           (s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size,
                                                     sizeof ws_size)))
    setup = "Preference";
  cublasLtMatmulHeuristicResult_t h[4];
  memset(h, 0, sizeof h);
  if (!setup) {
    hs = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 4, h, &count);
    if (hs == CUBLAS_STATUS_SUCCESS && count > 0) {
      float alpha = c->alpha, beta = 0.0f;
      ms = cublasLtMatmul(lt, op, &alpha, (void *)(uintptr_t)A.d_q, la, (void *)(uintptr_t)B.d_q, lb, &beta,
                          (void *)(uintptr_t)D, ld, (void *)(uintptr_t)D, ld, &h[0].algo, (void *)(uintptr_t)ws,
                          ws_size, dev->stream);
      CUresult r = drv.cuStreamSynchronize(dev->stream);
      if (r != CUDA_SUCCESS) gpu_die_cu("cuStreamSynchronize after cublasLtMatmul", r);
    }
  }
  int ran = !setup && hs == CUBLAS_STATUS_SUCCESS && count > 0 && ms == CUBLAS_STATUS_SUCCESS;
  int ok = ran == c->expect_ok;
  double fit[LAY_N] = {NAN, NAN, NAN}, sq = NAN;
  int best = -1;
  if (ran) {
    size_t mn = (size_t)(c->m * c->n);
    unsigned char *raw = malloc(dbytes);
    CU_CHECK(drv.cuMemcpyDtoH_v2(raw, D, dbytes));
    double *got = malloc(sizeof(double) * mn), *ref = malloc(sizeof(double) * mn);
    for (int64_t j = 0; j < c->n; j++)
      for (int64_t i = 0; i < c->m; i++)
        got[i + j * c->m] = c->d_f32 ? ((float *)raw)[i + j * ldd] : gpu_bf16_to_f32(((uint16_t *)raw)[i + j * ldd]);
    for (int lay = 0; lay < LAY_N; lay++) {
      double *a = dequant(&A, lay), *b = dequant(&B, lay);
      gemm64(a, b, c->m, c->n, c->k, c->alpha, ref);
      fit[lay] = max_rel(got, ref, mn);
      if (best < 0 || fit[lay] < fit[best]) best = lay;
      free(a), free(b);
    }
    /* against the bf16 inputs in float64 */
    double *a = malloc(sizeof(double) * (size_t)(c->m * c->k)), *b = malloc(sizeof(double) * (size_t)(c->n * c->k));
    for (int64_t i = 0; i < c->m * c->k; i++) a[i] = gpu_bf16_to_f32(A.bf16[i]);
    for (int64_t i = 0; i < c->n * c->k; i++) b[i] = gpu_bf16_to_f32(B.bf16[i]);
    gemm64(a, b, c->m, c->n, c->k, c->alpha, ref);
    sq = sqnr_db(got, ref, mn);
    free(a), free(b), free(raw), free(got), free(ref);
    if (!(fit[LAY_OURS] <= 1e-2) || !(sq >= 20.0)) ok = 0;
  }
  static const char *lay_names[LAY_N] = {"ours", "alt1", "alt2"};
  printf("%-8s %-20s %-6s x %-6s m=%-4lld n=%-4lld k=%-4lld ld=%-4lld ldd=%-4lld %s%s alpha=%g  setup=%s heuristic=%s(%d) "
         "matmul=%s expect=%s",
         ok ? "ok" : "MISMATCH", c->name, mode_name(c->amode), mode_name(c->bmode), (long long)c->m, (long long)c->n,
         (long long)c->k, (long long)c->kpad, (long long)ldd, c->d_f32 ? "f32" : "bf16", c->e5m2 ? " e5m2" : "",
         (double)c->alpha, setup ? setup : "-", st_name(hs), count, setup || hs || !count ? "-" : st_name(ms),
         c->expect_ok ? "runs" : "refused");
  if (ran)
    printf(" fit(ours)=%.2e fit(alt1)=%.2e fit(alt2)=%.2e best=%s sqnr=%.1fdB", fit[0], fit[1], fit[2],
           lay_names[best], sq);
  printf("\n");
  if (json) {
    fprintf(json,
            "{\"kind\":\"lt_scale_case\",\"case\":\"%s\",\"ok\":%s,\"ran\":%s,\"expect_runs\":%s,\"setup\":\"%s\","
            "\"heuristic\":\"%s\",\"algos\":%d,\"matmul\":\"%s\"",
            c->name, ok ? "true" : "false", ran ? "true" : "false", c->expect_ok ? "true" : "false",
            setup ? setup : "", st_name(hs), count, setup || hs || !count ? "" : st_name(ms));
    if (ran) fprintf(json, ",\"fit_ours\":%.3e,\"fit_alt1\":%.3e,\"fit_alt2\":%.3e,\"sqnr_db\":%.2f", fit[0], fit[1], fit[2], sq);
    fprintf(json, "}\n");
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  drv.cuMemFree_v2(D0);
  operand_free(&A), operand_free(&B);
  return ok;
}

/* --null=desc|layouts: one bf16 cublasLtMatmul with a NULL descriptor or
 * NULL layouts; prints the status it returns (if it returns). */
static int null_call(const gpu_device *dev, cublasLtHandle_t lt, const char *what) {
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t l = NULL;
  CUdeviceptr buf = gpu_alloc(64 * 64 * 4);
  if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
      cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 64, 64, 64)) {
    fprintf(stderr, "lt_scale_probe: descriptor set-up failed\n");
    return GPU_EXIT_SETUP;
  }
  float one = 1.0f, zero = 0.0f;
  void *p = (void *)(uintptr_t)buf;
  printf("null %s: calling cublasLtMatmul\n", what);
  fflush(stdout);
  cublasStatus_t s = !strcmp(what, "desc")
                         ? cublasLtMatmul(lt, NULL, &one, p, l, p, l, &zero, p, l, p, l, NULL, NULL, 0, dev->stream)
                         : cublasLtMatmul(lt, op, &one, p, NULL, p, NULL, &zero, p, NULL, p, NULL, NULL, NULL, 0,
                                          dev->stream);
  printf("null %s: status %d (%s)\n", what, (int)s, st_name(s));
  cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
  drv.cuMemFree_v2(buf);
  return GPU_EXIT_OK;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
  b[n] = 0;
  fclose(f);
  return b;
}

int main(int argc, char **argv) {
  const char *ptx_path = NULL, *json_path = NULL, *only = NULL, *null_what = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--ptx=", 6)) ptx_path = argv[i] + 6;
    else if (!strncmp(argv[i], "--json=", 7)) json_path = argv[i] + 7;
    else if (!strncmp(argv[i], "--only=", 7)) only = argv[i] + 7;
    else if (!strcmp(argv[i], "--null=desc") || !strcmp(argv[i], "--null=layouts")) null_what = argv[i] + 7;
    else {
      fprintf(stderr, "usage: lt_scale_probe --ptx=FILE [--json=FILE] [--only=CASE] | --null=desc|layouts\n");
      return GPU_EXIT_SETUP;
    }
  }
  if (null_what) {
    gpu_device dev;
    gpu_open(&dev);
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt)) return GPU_EXIT_SETUP;
    int rc = null_call(&dev, lt, null_what);
    cublasLtDestroy(lt);
    gpu_close(&dev);
    return rc;
  }
  if (!ptx_path) {
    fprintf(stderr, "lt_scale_probe: --ptx=FILE (build/kernels/fp8_scaled_quantize.ptx) is required\n");
    return GPU_EXIT_SETUP;
  }
  gpu_device dev;
  gpu_open(&dev);
  FILE *json = json_path ? fopen(json_path, "w") : NULL;
  gpu_describe(&dev, "lt_scale_probe", stdout, json);
  printf("cublasLtGetVersion %zu\n", cublasLtGetVersion());
  if (!drv.cuModuleLoadData || !drv.cuModuleGetFunction || !drv.cuLaunchKernel) {
    fprintf(stderr, "lt_scale_probe: the driver lacks module loading\n");
    return GPU_EXIT_SETUP;
  }
  char *ptx = read_file(ptx_path);
  if (!ptx) {
    fprintf(stderr, "lt_scale_probe: cannot read %s\n", ptx_path);
    return GPU_EXIT_SETUP;
  }
  CUmodule mod;
  CU_CHECK(drv.cuModuleLoadData(&mod, ptx));
  CU_CHECK(drv.cuModuleGetFunction(&k_bq, mod, "gs_fp8_bq_bf16"));
  cublasLtHandle_t lt;
  cublasStatus_t s = cublasLtCreate(&lt);
  if (s) {
    fprintf(stderr, "lt_scale_probe: cublasLtCreate: %d\n", (int)s);
    return GPU_EXIT_SETUP;
  }
  size_t ws_size = 32u << 20;
  CUdeviceptr ws = gpu_alloc(ws_size);
  int bad = 0, n = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (only && strcmp(only, cases[i].name)) continue;
    n++;
    if (!run_case(&dev, lt, ws, ws_size, &cases[i], json)) bad++;
  }
  printf("summary cases=%d mismatches=%d\n", n, bad);
  drv.cuMemFree_v2(ws);
  cublasLtDestroy(lt);
  drv.cuModuleUnload(mod);
  if (json) fclose(json);
  gpu_close(&dev);
  free(ptx);
  return bad ? GPU_EXIT_FAILED : GPU_EXIT_OK;
}
