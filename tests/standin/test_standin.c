/* test_standin.c: self-test of the CPU stand-ins for libcuda.so.1,
 * libcublas.so.N and libcublasLt.so.N.
 *
 * The binary runs itself under the environment it needs: devices of
 * capability 8.0, 9.0 and 6.1 (STANDIN_CC) and the test kernels
 * (STANDIN_KERNELS, test_kernels.so beside the binary). Scenarios that need
 * another environment (no pools, a memory limit, forbidden synchronisation,
 * the counts file, a bad configuration, a process before cuInit) run in a
 * child process: `test_standin_cuN --child <scenario>`.
 *
 * Every GEMM check uses random data from a fixed seed, fills outputs with
 * NaN (0xFF bytes) first, and compares with a float64 reference within
 * atol + rtol * |ref|, where atol covers the accumulation (k terms at the
 * accumulator's precision, scaled by sum |a b|) and rtol the final rounding
 * to the output type. Elements outside the logical matrices (ld padding,
 * batch gaps) must keep their poison.
 *
 * The test binary defines cublasLtMatmul itself, forwarding to the stand-in
 * with dlsym(RTLD_NEXT): exactly what a preloaded interposer does. It counts
 * the calls libcublas makes through its PLT. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda.h>

#include "numerics.h"
#include "standin_kernel.h"

#define SELFTEST_CC "8.0,9.0,6.1"
#if STANDIN_CUDA_MAJOR == 12
#define EXPECT_CUBLAS_VERSION 120804
#define EXPECT_DRIVER_VERSION 12080
#define STANDIN_PTX_ISA_OK "8.7"
#else
#define EXPECT_CUBLAS_VERSION 130100
#define EXPECT_DRIVER_VERSION 13000
#define STANDIN_PTX_ISA_OK "9.0"
#endif

extern char **environ;

/* ------------------------------------------------------------------------ */
/* The interposer: counts cublasLtMatmul calls, wherever they come from. */
typedef cublasStatus_t (*lt_matmul_fn)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *,
                                       const void *, cublasLtMatrixLayout_t, const void *,
                                       cublasLtMatrixLayout_t, const void *, const void *,
                                       cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                                       const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
static lt_matmul_fn real_lt_matmul;
static pthread_once_t real_lt_once = PTHREAD_ONCE_INIT;
static unsigned long long lt_matmul_calls;

static void resolve_real_lt(void) {
  void *p = dlsym(RTLD_NEXT, "cublasLtMatmul");
  memcpy(&real_lt_matmul, &p, sizeof p);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t ad, const void *B,
                              cublasLtMatrixLayout_t bd, const void *beta, const void *C,
                              cublasLtMatrixLayout_t cd, void *D, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t wss,
                              cudaStream_t s) {
  pthread_once(&real_lt_once, resolve_real_lt);
  __atomic_fetch_add(&lt_matmul_calls, 1ull, __ATOMIC_RELAXED);
  return real_lt_matmul(h, desc, alpha, A, ad, B, bd, beta, C, cd, D, dd, algo, ws, wss, s);
}

static unsigned long long lt_calls(void) {
  return __atomic_load_n(&lt_matmul_calls, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------ */
/* Small helpers. */
#define CU_OK(x) assert_int_equal((x), CUDA_SUCCESS)
#define BL_OK(x) assert_int_equal((x), CUBLAS_STATUS_SUCCESS)

static uint64_t rng;
static void rng_seed(uint64_t s) { rng = s * 0x9E3779B97F4A7C15ull + 1; }
static uint64_t rng_next(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545F4914F6CDD1Dull;
}
static double rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static void *dalloc(size_t n) {
  CUdeviceptr p = 0;
  CU_OK(cuMemAlloc_v2(&p, n));
  return (void *)p;
}
static void dfree(void *p) { CU_OK(cuMemFree_v2((CUdeviceptr)p)); }
static void h2d(void *d, const void *h, size_t n) { CU_OK(cuMemcpyHtoD_v2((CUdeviceptr)d, h, n)); }
static void d2h(void *h, const void *d, size_t n) { CU_OK(cuMemcpyDtoH_v2(h, (CUdeviceptr)d, n)); }

static size_t type_size(cudaDataType_t t) {
  switch (t) {
  case CUDA_R_64F: return 8;
  case CUDA_R_32F: return 4;
  case CUDA_R_16F:
  case CUDA_R_16BF: return 2;
  default: return 1;
  }
}

static uint32_t f32_bits(float f) { return sn_f32_bits(f); }

/* A matrix (or a strided batch of them) mirrored on host and device. */
typedef struct tmat {
  cudaDataType_t type;
  int row_major;
  int64_t rows, cols, ld, batch, stride;
  size_t esize, bytes;
  unsigned char *host;
  void *dev;
} tmat;

static int64_t tm_off(const tmat *m, int64_t b, int64_t r, int64_t c) {
  return b * m->stride + (m->row_major ? r * m->ld + c : r + c * m->ld);
}

static void tm_init(tmat *m, cudaDataType_t t, int row_major, int64_t rows, int64_t cols,
                    int64_t ld, int64_t batch, int64_t stride) {
  memset(m, 0, sizeof *m);
  m->type = t;
  m->row_major = row_major;
  m->rows = rows;
  m->cols = cols;
  m->ld = ld;
  m->batch = batch;
  m->stride = stride;
  m->esize = type_size(t);
  int64_t one = rows && cols ? (row_major ? (rows - 1) * ld + cols : (cols - 1) * ld + rows) : 0;
  int64_t n = (batch - 1) * stride + one;
  m->bytes = (size_t)(n > 0 ? n : 1) * m->esize;
  m->host = malloc(m->bytes);
  assert_non_null(m->host);
  memset(m->host, 0xFF, m->bytes); /* NaN in every float format */
  m->dev = dalloc(m->bytes);
}

static double tm_get(const tmat *m, int64_t b, int64_t r, int64_t c) {
  const unsigned char *p = m->host + (size_t)tm_off(m, b, r, c) * m->esize;
  uint16_t h;
  switch (m->type) {
  case CUDA_R_64F: { double v; memcpy(&v, p, 8); return v; }
  case CUDA_R_32F: { float v; memcpy(&v, p, 4); return v; }
  case CUDA_R_16F: memcpy(&h, p, 2); return sn_f16_to_f32(h);
  case CUDA_R_16BF: memcpy(&h, p, 2); return sn_bf16_to_f32(h);
  case CUDA_R_8F_E4M3: return sn_e4m3_to_f32(*p);
  case CUDA_R_8F_E5M2: return sn_e5m2_to_f32(*p);
  default: fail(); return 0;
  }
}

static void tm_put(tmat *m, int64_t b, int64_t r, int64_t c, double v) {
  unsigned char *p = m->host + (size_t)tm_off(m, b, r, c) * m->esize;
  uint16_t h;
  float f = (float)v;
  switch (m->type) {
  case CUDA_R_64F: memcpy(p, &v, 8); break;
  case CUDA_R_32F: memcpy(p, &f, 4); break;
  case CUDA_R_16F: h = sn_f32_to_f16(f); memcpy(p, &h, 2); break;
  case CUDA_R_16BF: h = sn_f32_to_bf16(f); memcpy(p, &h, 2); break;
  case CUDA_R_8F_E4M3: *p = sn_f32_to_e4m3(f); break;
  case CUDA_R_8F_E5M2: *p = sn_f32_to_e5m2(f); break;
  default: fail();
  }
}

static void tm_fill(tmat *m, double lo, double hi) {
  for (int64_t b = 0; b < m->batch; b++)
    for (int64_t c = 0; c < m->cols; c++)
      for (int64_t r = 0; r < m->rows; r++) tm_put(m, b, r, c, rng_uniform(lo, hi));
}

static void tm_upload(tmat *m) { h2d(m->dev, m->host, m->bytes); }
static void tm_download(tmat *m) { d2h(m->host, m->dev, m->bytes); }
static void tm_free(tmat *m) {
  dfree(m->dev);
  free(m->host);
}

/* Is this byte offset inside a logical element of the matrix? */
static int tm_is_element(const tmat *m, size_t byte) {
  int64_t e = (int64_t)(byte / m->esize);
  for (int64_t b = 0; b < m->batch; b++) {
    int64_t o = e - b * m->stride;
    if (o < 0) continue;
    int64_t major = o / m->ld, minor = o % m->ld;
    int64_t r = m->row_major ? major : minor, c = m->row_major ? minor : major;
    if (r < m->rows && c < m->cols) return 1;
  }
  return 0;
}

/* Every byte outside the matrices must still hold the 0xFF poison. */
static void tm_check_padding(const tmat *m) {
  for (size_t i = 0; i < m->bytes; i++)
    if (!tm_is_element(m, i) && m->host[i] != 0xFF) {
      print_error("byte %zu outside the matrix was written (0x%02x)\n", i, m->host[i]);
      fail();
    }
}

/* Scalars (alpha, beta) in a scale type. */
typedef union scalar {
  double d;
  float f;
  uint16_t h;
} scalar;

static scalar make_scalar(cudaDataType_t t, double v) {
  scalar s;
  memset(&s, 0, sizeof s);
  if (t == CUDA_R_64F) s.d = v;
  else if (t == CUDA_R_16F) s.h = sn_f32_to_f16((float)v);
  else s.f = (float)v;
  return s;
}

/* ------------------------------------------------------------------------ */
/* The float64 reference and the comparison. */
typedef struct ref_gemm {
  int ta, tb;
  int64_t m, n, k;
  double alpha, beta;
  double scale_ab;               /* fp8 scale_a * scale_b */
  const tmat *A, *B, *C;         /* C: values before the call */
  int epilogue;
  const tmat *bias;              /* a 1 x (m * batch) vector, or NULL */
  int64_t bias_stride;
  double (*round_in)(double);    /* what the compute type may do to inputs */
  double eps_acc, eps_out;
  double rtol_extra;             /* e.g. tanh's error for GELU */
} ref_gemm;

static double round_none(double v) { return v; }
static double round_tf32(double v) { return sn_round_tf32((float)v); }
static double round_bf16(double v) { return sn_round_bf16((float)v); }
static double round_f16(double v) { return sn_round_f16((float)v); }

static double op_get(const tmat *x, int t, int64_t b, int64_t r, int64_t c) {
  int64_t bb = x->batch == 1 ? 0 : b;
  return t == CUBLAS_OP_N ? tm_get(x, bb, r, c) : tm_get(x, bb, c, r);
}

/* Check D (downloaded) against the reference; returns the number of
 * elements compared. */
static int64_t check_gemm(const ref_gemm *g, const tmat *D, int64_t batch) {
  int64_t checked = 0;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t j = 0; j < g->n; j++)
      for (int64_t i = 0; i < g->m; i++) {
        double acc = 0, absum = 0;
        for (int64_t q = 0; q < g->k; q++) {
          double x = g->round_in(op_get(g->A, g->ta, b, i, q));
          double y = g->round_in(op_get(g->B, g->tb, b, q, j));
          acc += x * y;
          absum += fabs(x * y);
        }
        double ref = g->alpha * g->scale_ab * acc;
        absum *= fabs(g->alpha * g->scale_ab);
        if (g->beta != 0) {
          double c = tm_get(g->C, g->C->batch == 1 ? 0 : b, i, j);
          ref += g->beta * c;
          absum += fabs(g->beta * c);
        }
        int e = g->epilogue;
        if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
            e == CUBLASLT_EPILOGUE_GELU_BIAS) {
          double bias = tm_get(g->bias, 0, 0, b * g->bias_stride + i);
          ref += bias;
          absum += fabs(bias);
        }
        if (e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS) ref = ref > 0 ? ref : 0;
        if (e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS)
          ref = 0.5 * ref * (1 + tanh(0.7978845608 * (ref + 0.044715 * ref * ref * ref)));
        double got = tm_get(D, b, i, j);
        double tol = (double)(g->k + 4) * g->eps_acc * absum +
                     (g->eps_out + g->rtol_extra) * fabs(ref) + 1e-300;
        if (!(fabs(got - ref) <= tol)) {
          print_error("D[b=%lld][%lld,%lld] = %.17g, reference %.17g (tol %.3g)\n", (long long)b,
                      (long long)i, (long long)j, got, ref, tol);
          fail();
        }
        checked++;
      }
  tm_check_padding(D);
  return checked;
}

/* ------------------------------------------------------------------------ */
/* Child processes: run this binary with a scenario and extra environment;
 * collect the exit status and stderr. */
typedef struct child_result {
  int status; /* exit status, or 128 + signal */
  char err[8192];
} child_result;

static void run_child(const char *scenario, const char *const *env_set, const char *const *env_unset,
                      child_result *out) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 16, sizeof *env);
  assert_non_null(env);
  size_t e = 0;
  for (size_t i = 0; i < n; i++) {
    int drop = 0;
    for (const char *const *u = env_unset; u && *u; u++) {
      size_t l = strlen(*u);
      if (!strncmp(environ[i], *u, l) && environ[i][l] == '=') drop = 1;
    }
    for (const char *const *s = env_set; s && *s; s++) {
      size_t l = strchr(*s, '=') - *s + 1;
      if (!strncmp(environ[i], *s, l)) drop = 1;
    }
    if (!drop) env[e++] = environ[i];
  }
  for (const char *const *s = env_set; s && *s; s++) env[e++] = (char *)*s;
  env[e] = NULL;

  char errpath[] = "/tmp/standin_child_XXXXXX";
  int fd = mkstemp(errpath);
  assert_true(fd >= 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  char self[4096];
  ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(l > 0);
  self[l] = 0;
  char *argv[] = {self, (char *)"--child", (char *)scenario, NULL};
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, self, &fa, NULL, argv, env), 0);
  posix_spawn_file_actions_destroy(&fa);
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  out->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  ssize_t got = pread(fd, out->err, sizeof out->err - 1, 0);
  out->err[got > 0 ? got : 0] = 0;
  close(fd);
  unlink(errpath);
  free(env);
}

/* "name count" from a STANDIN_COUNTS file, -1 if absent. */
static long long count_of(const char *text, const char *name) {
  size_t l = strlen(name);
  for (const char *p = text; p && *p;) {
    if (!strncmp(p, name, l) && p[l] == ' ') return atoll(p + l + 1);
    p = strchr(p, '\n');
    if (p) p++;
  }
  return -1;
}

/* ------------------------------------------------------------------------ */
/* Numerics. */
static void test_bf16_conversions(void **state) {
  (void)state;
  assert_int_equal(sn_f32_to_bf16(1.0f), 0x3f80);
  /* ties to even: 1 + 2^-8 is halfway between 0x3f80 and 0x3f81 */
  assert_int_equal(sn_f32_to_bf16(sn_f32_from_bits(0x3f808000u)), 0x3f80);
  assert_int_equal(sn_f32_to_bf16(sn_f32_from_bits(0x3f818000u)), 0x3f82);
  assert_int_equal(sn_f32_to_bf16(sn_f32_from_bits(0x3f808001u)), 0x3f81);
  assert_int_equal(sn_f32_to_bf16(-0.0f), 0x8000);
  assert_int_equal(sn_f32_to_bf16(sn_f32_from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> inf */
  assert_int_equal(sn_f32_to_bf16(sn_f32_from_bits(0x7f800001u)) & 0x7fc0, 0x7fc0);
  assert_true(isnan(sn_bf16_to_f32(sn_f32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = sn_bf16_to_f32((uint16_t)h);
    if (!isnan(f)) assert_int_equal(sn_f32_to_bf16(f), h);
  }
}

static void test_fp16_conversions(void **state) {
  (void)state;
  assert_int_equal(sn_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(sn_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
  assert_int_equal(sn_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  assert_int_equal(sn_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(sn_f32_to_f16(65519.0f), 0x7bff);
  assert_int_equal(sn_f32_to_f16(65520.0f), 0x7c00);
  assert_int_equal(sn_f32_to_f16(0x1p-24f), 0x0001);
  assert_int_equal(sn_f32_to_f16(0x1p-25f), 0x0000);           /* tie to even: 0 */
  assert_int_equal(sn_f32_to_f16(0x1p-25f * 1.0000001f), 0x0001);
  assert_int_equal(sn_f32_to_f16(3 * 0x1p-25f), 0x0002);       /* 1.5 units -> 2 */
  assert_int_equal(sn_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* rounds up to the smallest normal */
  assert_int_equal(sn_f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(sn_f32_to_f16(INFINITY), 0x7c00);
  assert_true(isnan(sn_f16_to_f32(sn_f32_to_f16(NAN))));
  assert_true(sn_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(sn_f16_to_f32(0x7bff) == 65504.0f);
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = sn_f16_to_f32((uint16_t)h);
    if (!isnan(f)) assert_int_equal(sn_f32_to_f16(f), h);
  }
}

static void test_fp8_conversions(void **state) {
  (void)state;
  assert_true(sn_e4m3_to_f32(0x00) == 0.0f);
  assert_true(sn_e4m3_to_f32(0x01) == 0x1p-9f);
  assert_true(sn_e4m3_to_f32(0x07) == 7 * 0x1p-9f);
  assert_true(sn_e4m3_to_f32(0x08) == 0x1p-6f);
  assert_true(sn_e4m3_to_f32(0x38) == 1.0f);
  assert_true(sn_e4m3_to_f32(0x3c) == 1.5f);
  assert_true(sn_e4m3_to_f32(0x7e) == 448.0f);
  assert_true(sn_e4m3_to_f32(0xfe) == -448.0f);
  assert_true(isnan(sn_e4m3_to_f32(0x7f)) && isnan(sn_e4m3_to_f32(0xff)));
  assert_true(sn_e4m3_to_f32(0x78) == 256.0f); /* E4M3 has no infinity */
  assert_int_equal(sn_f32_to_e4m3(500.0f), 0x7e);
  assert_int_equal(sn_f32_to_e4m3(-INFINITY), 0xfe);
  assert_int_equal(sn_f32_to_e4m3(464.0f), 0x7e);
  assert_int_equal(sn_f32_to_e4m3(1.0625f), 0x38); /* tie to even */
  assert_int_equal(sn_f32_to_e4m3(1.1875f), 0x3a);
  assert_int_equal(sn_f32_to_e4m3(0x1p-10f), 0x00);
  assert_int_equal(sn_f32_to_e4m3(0x1p-10f * 1.01f), 0x01);
  assert_int_equal(sn_f32_to_e4m3(NAN) & 0x7f, 0x7f);

  assert_true(sn_e5m2_to_f32(0x3c) == 1.0f);
  assert_true(sn_e5m2_to_f32(0x01) == 0x1p-16f);
  assert_true(sn_e5m2_to_f32(0x7b) == 57344.0f);
  assert_true(isinf(sn_e5m2_to_f32(0x7c)) && sn_e5m2_to_f32(0xfc) < 0);
  assert_true(isnan(sn_e5m2_to_f32(0x7d)) && isnan(sn_e5m2_to_f32(0x7f)));
  assert_int_equal(sn_f32_to_e5m2(1e6f), 0x7b);
  assert_int_equal(sn_f32_to_e5m2(INFINITY), 0x7b);
  assert_int_equal(sn_f32_to_e5m2(1.125f), 0x3c); /* tie to even */
  assert_int_equal(sn_f32_to_e5m2(1.375f), 0x3e);
  for (int c = 0; c < 256; c++) {
    float a = sn_e4m3_to_f32((uint8_t)c), b = sn_e5m2_to_f32((uint8_t)c);
    if (!isnan(a)) assert_int_equal(sn_f32_to_e4m3(a), c);
    if (!isnan(b) && !isinf(b)) assert_int_equal(sn_f32_to_e5m2(b), c);
  }
  /* decode is monotonic over the positive codes */
  for (int c = 1; c < 0x7f; c++) assert_true(sn_e4m3_to_f32((uint8_t)c) > sn_e4m3_to_f32((uint8_t)(c - 1)));
  for (int c = 1; c < 0x7c; c++) assert_true(sn_e5m2_to_f32((uint8_t)c) > sn_e5m2_to_f32((uint8_t)(c - 1)));
}

static void test_tf32_rounding(void **state) {
  (void)state;
  assert_true(sn_round_tf32(1.0f + 0x1p-12f) == 1.0f);          /* below half an ulp */
  assert_true(sn_round_tf32(1.0f + 0x1p-11f) == 1.0f);          /* tie to even */
  assert_true(sn_round_tf32(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
  assert_true(isinf(sn_round_tf32(INFINITY)));
}

/* ------------------------------------------------------------------------ */
/* Driver: devices. The group set-up made device 0's primary context current
 * on the main thread. */
static CUcontext primary[3];

static int driver_setup(void **state) {
  (void)state;
  if (cuInit(0) != CUDA_SUCCESS) return -1;
  for (int d = 0; d < 3; d++)
    if (cuDevicePrimaryCtxRetain(&primary[d], d) != CUDA_SUCCESS) return -1;
  return cuCtxSetCurrent(primary[0]) == CUDA_SUCCESS ? 0 : -1;
}

static void test_devices(void **state) {
  (void)state;
  int n = 0, v = 0;
  CU_OK(cuDeviceGetCount(&n));
  assert_int_equal(n, 3);
  CU_OK(cuDriverGetVersion(&v));
  assert_int_equal(v, EXPECT_DRIVER_VERSION);
  static const int cc[3][2] = {{8, 0}, {9, 0}, {6, 1}};
  static const int sms[3] = {108, 132, 20};
  for (int d = 0; d < 3; d++) {
    CUdevice dev;
    CU_OK(cuDeviceGet(&dev, d));
    assert_int_equal(dev, d);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    assert_int_equal(v, cc[d][0]);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    assert_int_equal(v, cc[d][1]);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    assert_int_equal(v, sms[d]);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
    assert_int_equal(v, 32);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev));
    assert_int_equal(v, 1024);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, dev));
    assert_int_equal(v, 49152);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, dev));
    assert_int_equal(v, 65536);
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev));
    assert_int_equal(v, 1);
    char name[64];
    CU_OK(cuDeviceGetName(name, sizeof name, dev));
    char want[64];
    snprintf(want, sizeof want, "Standin GPU sm_%d%d", cc[d][0], cc[d][1]);
    assert_string_equal(name, want);
    size_t mem = 0;
    CU_OK(cuDeviceTotalMem_v2(&mem, dev));
    assert_true(mem >= (size_t)8 << 30);
  }
  CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
  assert_int_equal(v, 166912);
  CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 1));
  assert_int_equal(v, 232448);
  CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 2));
  assert_int_equal(v, 49152);
  assert_int_equal(cuDeviceGetAttribute(&v, (CUdevice_attribute)9999, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 3), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_ERROR_INVALID_VALUE);
  CUdevice dev;
  assert_int_equal(cuDeviceGet(&dev, 3), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

static void test_error_strings(void **state) {
  (void)state;
  const char *s = NULL;
  CU_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  assert_string_equal(s, "CUDA_ERROR_OUT_OF_MEMORY");
  CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  assert_string_equal(s, "out of memory");
  CU_OK(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, &s));
  assert_string_equal(s, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  CU_OK(cuGetErrorName(CUDA_SUCCESS, &s));
  assert_string_equal(s, "CUDA_SUCCESS");
  assert_int_equal(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
  assert_null(s);
  assert_int_equal(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
  assert_null(s);
}

/* ------------------------------------------------------------------------ */
/* Contexts. */
static void *ctx_thread_fresh(void *arg) {
  int *out = arg;
  CUcontext c = (CUcontext)1;
  out[0] = cuCtxGetCurrent(&c);
  out[1] = c == NULL;
  CUdevice d;
  out[2] = cuCtxGetDevice(&d);
  CUcontext sc;
  out[3] = cuStreamGetCtx(NULL, &sc);
  out[4] = cuMemAlloc_v2(&(CUdeviceptr){0}, 16);
  return NULL;
}

static CUcontext destroyed_ctx;
static void *ctx_thread_destroyed(void *arg) {
  int *out = arg;
  out[0] = cuCtxSetCurrent(destroyed_ctx);
  CUdevice d;
  out[1] = cuCtxGetDevice(&d);
  return NULL;
}

static void test_contexts(void **state) {
  (void)state;
  CUcontext c = NULL, popped = NULL;
  CUdevice d = -1;
  CU_OK(cuCtxGetCurrent(&c));
  assert_ptr_equal(c, primary[0]);
  /* retaining again gives the same primary context */
  CUcontext again;
  CU_OK(cuDevicePrimaryCtxRetain(&again, 1));
  assert_ptr_equal(again, primary[1]);
  CU_OK(cuDevicePrimaryCtxRelease_v2(1));
  /* push / pop nest */
  CU_OK(cuCtxPushCurrent_v2(primary[1]));
  CU_OK(cuCtxGetDevice(&d));
  assert_int_equal(d, 1);
  CU_OK(cuCtxPushCurrent_v2(primary[2]));
  CU_OK(cuCtxGetDevice(&d));
  assert_int_equal(d, 2);
  CU_OK(cuCtxPopCurrent_v2(&popped));
  assert_ptr_equal(popped, primary[2]);
  CU_OK(cuCtxPopCurrent_v2(&popped));
  assert_ptr_equal(popped, primary[1]);
  CU_OK(cuCtxGetCurrent(&c));
  assert_ptr_equal(c, primary[0]);
  /* SetCurrent replaces the top; NULL pops it */
  CU_OK(cuCtxPushCurrent_v2(primary[1]));
  CU_OK(cuCtxSetCurrent(primary[2]));
  CU_OK(cuCtxPopCurrent_v2(&popped));
  assert_ptr_equal(popped, primary[2]);
  CU_OK(cuCtxGetCurrent(&c));
  assert_ptr_equal(c, primary[0]);
  CU_OK(cuCtxPushCurrent_v2(primary[1]));
  CU_OK(cuCtxSetCurrent(NULL));
  CU_OK(cuCtxGetCurrent(&c));
  assert_ptr_equal(c, primary[0]);
  assert_int_equal(cuCtxPushCurrent_v2((CUcontext)&c), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxPushCurrent_v2(NULL), CUDA_ERROR_INVALID_VALUE);
  /* cuCtxGetDevice_v2 names its context */
  CU_OK(cuCtxGetDevice_v2(&d, primary[2]));
  assert_int_equal(d, 2);
  /* context ids: distinct, stable, NULL = current */
  unsigned long long id0, id1, idc;
  CU_OK(cuCtxGetId(primary[0], &id0));
  CU_OK(cuCtxGetId(primary[1], &id1));
  CU_OK(cuCtxGetId(NULL, &idc));
  assert_true(id0 != id1 && idc == id0);
  assert_int_equal(cuCtxGetId((CUcontext)&c, &idc), CUDA_ERROR_INVALID_CONTEXT);

  /* A created context is pushed; destroying it pops it and frees what it
   * owned; other threads still holding it see CONTEXT_IS_DESTROYED. */
  CUcontext mine;
  CU_OK(cuCtxCreate_v4(&mine, NULL, 0, 1));
  CU_OK(cuCtxGetCurrent(&c));
  assert_ptr_equal(c, mine);
  unsigned long long idm;
  CU_OK(cuCtxGetId(mine, &idm));
  assert_true(idm != id0 && idm != id1);
  CUstream s;
  CU_OK(cuStreamCreate(&s, 0));
  CUdeviceptr p;
  CU_OK(cuMemAlloc_v2(&p, 1000));
  CU_OK(cuCtxDestroy_v2(mine));
  CU_OK(cuCtxGetCurrent(&c));
  assert_ptr_equal(c, primary[0]);
  assert_int_equal(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuCtxDestroy_v2(mine), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  assert_int_equal(cuCtxGetId(mine, &idm), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  assert_int_equal(cuCtxDestroy_v2(primary[0]), CUDA_ERROR_INVALID_CONTEXT);
  destroyed_ctx = mine;
  int out[2] = {-1, -1};
  pthread_t t;
  pthread_create(&t, NULL, ctx_thread_destroyed, out);
  pthread_join(t, NULL);
  assert_int_equal(out[0], CUDA_ERROR_CONTEXT_IS_DESTROYED);
  assert_int_equal(out[1], CUDA_ERROR_INVALID_CONTEXT);

  /* Addresses come back, ids never do (the CUDA Driver API: cuCtxGetId's id
   * "is unique for the life of the program"): a context created after a
   * destroy takes the destroyed one's address, on any device, with none of
   * its memory; a primary context released to zero and retained again keeps
   * its handle and gets a new id. */
  CUcontext next;
  CU_OK(cuCtxCreate_v4(&next, NULL, 0, 2));
  assert_ptr_equal(next, mine);
  unsigned long long idn;
  CU_OK(cuCtxGetId(next, &idn));
  assert_true(idn != idm && idn != id0 && idn != id1);
  CU_OK(cuCtxGetDevice(&d));
  assert_int_equal(d, 2);
  CU_OK(cuCtxDestroy_v2(next));
  CUcontext p2again;
  unsigned long long idp, idp2;
  CU_OK(cuCtxPushCurrent_v2(primary[2]));
  CU_OK(cuCtxGetId(primary[2], &idp));
  CUdeviceptr old_mem;
  CU_OK(cuMemAlloc_v2(&old_mem, 256));
  CU_OK(cuCtxPopCurrent_v2(&popped));
  CU_OK(cuDevicePrimaryCtxRelease_v2(2)); /* the only retain: reset */
  CU_OK(cuDevicePrimaryCtxRetain(&p2again, 2));
  assert_ptr_equal(p2again, primary[2]);
  CU_OK(cuCtxGetId(p2again, &idp2));
  assert_true(idp2 != idp);
  assert_int_equal(cuMemsetD8_v2(old_mem, 0, 256), CUDA_ERROR_INVALID_VALUE); /* went with the old one */
  /* cudaDeviceReset's cuDevicePrimaryCtxReset: everything goes, the retain
   * stays, the handle is a new context at once. */
  CU_OK(cuCtxPushCurrent_v2(primary[2]));
  CU_OK(cuMemAlloc_v2(&old_mem, 256));
  CU_OK(cuCtxPopCurrent_v2(&popped));
  CU_OK(cuDevicePrimaryCtxReset_v2(2));
  CU_OK(cuCtxGetId(primary[2], &idp));
  assert_true(idp != idp2);
  assert_int_equal(cuMemsetD8_v2(old_mem, 0, 256), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuCtxGetDevice_v2(&d, primary[2])); /* still retained: usable */
  assert_int_equal(d, 2);
  assert_int_equal(cuDevicePrimaryCtxReset_v2(99), CUDA_ERROR_INVALID_DEVICE);

  /* A new thread has no current context. */
  int fresh[5];
  pthread_create(&t, NULL, ctx_thread_fresh, fresh);
  pthread_join(t, NULL);
  assert_int_equal(fresh[0], CUDA_SUCCESS);
  assert_int_equal(fresh[1], 1);
  assert_int_equal(fresh[2], CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(fresh[3], CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(fresh[4], CUDA_ERROR_INVALID_CONTEXT);
}

/* ------------------------------------------------------------------------ */
/* Streams, events, capture. */
static void test_streams(void **state) {
  (void)state;
  CUstream s;
  CUcontext c;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamGetCtx(s, &c));
  assert_ptr_equal(c, primary[0]);
  CU_OK(cuStreamGetCtx(NULL, &c));
  assert_ptr_equal(c, primary[0]);
  CU_OK(cuStreamGetCtx(CU_STREAM_LEGACY, &c));
  assert_ptr_equal(c, primary[0]);
  CU_OK(cuStreamGetCtx(CU_STREAM_PER_THREAD, &c));
  assert_ptr_equal(c, primary[0]);
  /* a stream keeps its context whatever is current */
  CU_OK(cuCtxPushCurrent_v2(primary[1]));
  CU_OK(cuStreamGetCtx(s, &c));
  assert_ptr_equal(c, primary[0]);
  CU_OK(cuStreamGetCtx(NULL, &c));
  assert_ptr_equal(c, primary[1]);
  CU_OK(cuCtxPopCurrent_v2(NULL));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamSynchronize(NULL));
  CU_OK(cuCtxSynchronize());
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CU_OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
  assert_int_equal(cuStreamCreate(&s, 4), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuStreamDestroy_v2(s));
  assert_int_equal(cuStreamGetCtx(s, &c), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE);
}

/* cuStreamGetId (cuda.h): "unique for the life of the program", for created
 * and special streams. A destroyed stream's address is handed out again by
 * the next cuStreamCreate, in any context, as a driver's allocator may: its
 * id is new. */
static void test_stream_ids_and_reuse(void **state) {
  (void)state;
  CUstream s1, s2, s3;
  CUcontext c;
  unsigned long long id1, id1b, id2, id3, legacy0, legacy1, legacy0b;
  CU_OK(cuStreamCreate(&s1, 0));
  CU_OK(cuStreamGetId(s1, &id1));
  CU_OK(cuStreamGetId(s1, &id1b));
  assert_true(id1 != 0 && id1 == id1b);
  assert_int_equal(cuStreamGetId(s1, NULL), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuStreamGetId(NULL, &legacy0));
  CU_OK(cuStreamGetId(CU_STREAM_LEGACY, &legacy0b));
  assert_true(legacy0 == legacy0b && legacy0 != id1);
  assert_int_equal(cuStreamGetId(CU_STREAM_PER_THREAD, &id2), CUDA_ERROR_NOT_SUPPORTED);
  CU_OK(cuStreamDestroy_v2(s1));
  assert_int_equal(cuStreamGetId(s1, &id2), CUDA_ERROR_INVALID_HANDLE);
  /* the same address, in another context, with a new id */
  CU_OK(cuCtxPushCurrent_v2(primary[1]));
  CU_OK(cuStreamGetId(NULL, &legacy1));
  assert_true(legacy1 != legacy0);
  CU_OK(cuStreamCreate(&s2, 0));
  assert_ptr_equal(s2, s1);
  CU_OK(cuStreamGetId(s2, &id2));
  assert_true(id2 != id1 && id2 != 0);
  CU_OK(cuStreamGetCtx(s2, &c));
  assert_ptr_equal(c, primary[1]);
  CU_OK(cuStreamCreate(&s3, 0));
  assert_ptr_not_equal(s3, s2);
  CU_OK(cuStreamGetId(s3, &id3));
  assert_true(id3 != id2 && id3 != id1);
  CU_OK(cuStreamDestroy_v2(s2));
  CU_OK(cuStreamDestroy_v2(s3));
  CU_OK(cuCtxPopCurrent_v2(NULL));
}

static void test_events(void **state) {
  (void)state;
  CUevent a, b, nt;
  CU_OK(cuEventCreate(&a, 0));
  CU_OK(cuEventCreate(&b, 0));
  CU_OK(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
  assert_int_equal(cuEventCreate(&a, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  float ms = -1;
  assert_int_equal(cuEventElapsedTime_v2(&ms, a, b), CUDA_ERROR_INVALID_HANDLE); /* not recorded */
  /* cuEventQuery (driver API): CUDA_SUCCESS for an event never recorded. */
  CU_OK(cuEventQuery(a));
  CU_OK(cuEventRecord(a, NULL));
  /* ... and once the work it captured is done: inline streams, at once
   * (STANDIN_EVENT_LAG unset in the self-test). */
  CU_OK(cuEventQuery(a));
  usleep(2000);
  CU_OK(cuEventRecord(b, NULL));
  CU_OK(cuEventRecord(nt, NULL));
  CU_OK(cuEventSynchronize(b));
  CU_OK(cuEventElapsedTime_v2(&ms, a, b));
  assert_true(ms >= 1.5f && ms < 1000.0f);
  assert_int_equal(cuEventElapsedTime_v2(&ms, a, nt), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuEventElapsedTime_v2(NULL, a, b), CUDA_ERROR_INVALID_VALUE);
  /* an event and a stream of different contexts do not mix */
  CUstream other;
  CU_OK(cuCtxPushCurrent_v2(primary[1]));
  CU_OK(cuStreamCreate(&other, 0));
  CU_OK(cuCtxPopCurrent_v2(NULL));
  assert_int_equal(cuEventRecord(a, other), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(cuStreamDestroy_v2(other));
  CU_OK(cuEventDestroy_v2(a));
  CU_OK(cuEventDestroy_v2(b));
  CU_OK(cuEventDestroy_v2(nt));
  assert_int_equal(cuEventDestroy_v2(a), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuEventQuery(a), CUDA_ERROR_INVALID_HANDLE);
}

/* The mode capture_other_thread sets before it allocates. */
static CUstreamCaptureMode capture_other_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* res[0]: its allocation, res[1]: ending the caller's capture, res[2]:
 * the mode the thread started in. */
static void *capture_other_thread(void *arg) {
  CUstream s = arg;
  int *res = malloc(3 * sizeof *res);
  if (!res) return NULL;
  /* no cmocka assertions off the main thread: they longjmp */
  (void)cuCtxSetCurrent(primary[0]);
  CUstreamCaptureMode mode = capture_other_mode;
  res[2] = cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS ? (int)mode : -1;
  CUdeviceptr p = 0;
  res[0] = cuMemAlloc_v2(&p, 64);
  if (res[0] == CUDA_SUCCESS) cuMemFree_v2(p);
  CUgraph g;
  res[1] = cuStreamEndCapture(s, &g);
  return res;
}

/* Another thread's cuEventQuery in the given capture mode; its answer. */
typedef struct query_job {
  CUevent ev;
  CUstreamCaptureMode mode;
  int exchange, query, restored;
} query_job;

static void *query_thread(void *arg) {
  query_job *j = arg;
  (void)cuCtxSetCurrent(primary[0]);
  CUstreamCaptureMode m = j->mode;
  j->exchange = cuThreadExchangeStreamCaptureMode(&m);
  j->query = cuEventQuery(j->ev);
  j->restored = m; /* the mode the thread had: GLOBAL, every thread's first */
  return NULL;
}

/* cuda.h, cuThreadExchangeStreamCaptureMode: a thread in GLOBAL mode (the
 * default) is prohibited from potentially unsafe calls while any other
 * thread has a capture begun in GLOBAL mode, or while it has one of its own
 * not begun RELAXED; THREAD_LOCAL ignores other threads' captures; RELAXED
 * is not prohibited. cuEventQuery is such a call (pytorch pull requests
 * 104487 and 105182: a watchdog's event query broke another thread's
 * capture; ROCm/rocm-systems pull request 3176 applies the same modes to
 * hipEventQuery). A prohibited call fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture. */
static void test_event_query_and_capture_modes(void **state) {
  (void)state;
  CUstream s;
  CUgraph g = NULL;
  CUevent ev;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(cuEventCreate(&ev, 0));
  CU_OK(cuEventRecord(ev, s)); /* before any capture */

  struct { CUstreamCaptureMode begin, other; int query, end; } cases[] = {
      {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_GLOBAL, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
       CUDA_ERROR_STREAM_CAPTURE_INVALIDATED},
      {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CUDA_SUCCESS, CUDA_SUCCESS},
      {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_RELAXED, CUDA_SUCCESS, CUDA_SUCCESS},
      {CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_GLOBAL, CUDA_SUCCESS, CUDA_SUCCESS},
      {CU_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_GLOBAL, CUDA_SUCCESS, CUDA_SUCCESS},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CU_OK(cuStreamBeginCapture_v2(s, cases[i].begin));
    query_job j = {ev, cases[i].other, -1, -1, -1};
    pthread_t t;
    pthread_create(&t, NULL, query_thread, &j);
    pthread_join(t, NULL);
    assert_int_equal(j.exchange, CUDA_SUCCESS);
    assert_int_equal(j.restored, CU_STREAM_CAPTURE_MODE_GLOBAL);
    assert_int_equal(j.query, cases[i].query);
    assert_int_equal(cuStreamEndCapture(s, &g), cases[i].end);
    if (g) CU_OK(cuGraphDestroy(g));
    g = NULL;
  }
  /* This thread's own capture: GLOBAL or THREAD_LOCAL prohibit it unless
   * the capture was begun RELAXED; RELAXED mode is never prohibited. */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  assert_int_equal(cuEventQuery(ev), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_OK(cuEventQuery(ev));
  CU_OK(cuStreamEndCapture(s, &g));
  CU_OK(cuGraphDestroy(g));
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  CU_OK(cuThreadExchangeStreamCaptureMode(&m));
  assert_int_equal(m, CU_STREAM_CAPTURE_MODE_GLOBAL);
  CU_OK(cuEventQuery(ev));
  CU_OK(cuThreadExchangeStreamCaptureMode(&m)); /* back to GLOBAL */
  assert_int_equal(m, CU_STREAM_CAPTURE_MODE_RELAXED);
  CU_OK(cuStreamEndCapture(s, &g));
  CU_OK(cuGraphDestroy(g));
  CU_OK(cuEventDestroy_v2(ev));
  CU_OK(cuStreamDestroy_v2(s));
}

/* ---- user objects (driver_userobj.c) -------------------------------------- */
static int destructor_cuda_call;
static void count_destroy(void *p) { (*(int *)p)++; }
static void destroy_calling_cuda(void *p) {
  (void)p;
  int n;
  destructor_cuda_call = cuDeviceGetCount(&n);
}

/* The entry point CUDA 11.3 to 12.2 headers named cuStreamGetCaptureInfo
 * (cuda.h of CUDA 13 still lists it among the versioned names). */
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out);

/* cuda.h: cuUserObjectCreate ("The initial references are owned by the
 * caller"; flags: "it is required to pass CU_USER_OBJECT_NO_DESTRUCTOR_SYNC,
 * which is the only defined flag"; "Destructor callbacks cannot make CUDA
 * API calls"), cuUserObjectRelease ("The object's destructor is invoked if
 * the reference count reaches zero"), cuGraphRetainUserObject (counts "Must
 * be nonzero and not larger than INT_MAX"; CU_GRAPH_USER_OBJECT_MOVE
 * "transfers references from the calling thread"), and
 * cuStreamGetCaptureInfo (graph_out: "the graph being captured into";
 * id_out "unique over the lifetime of the process"). CUDA C++ Programming
 * Guide, "CUDA User Objects": clones, child graph nodes and executable
 * graphs hold references of their own. */
static void test_user_objects(void **state) {
  (void)state;
  CUuserObject o, o2;
  int n = 0;
  /* refusals */
  assert_int_equal(cuUserObjectCreate(&o, &n, count_destroy, 1, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuUserObjectCreate(&o, &n, count_destroy, 0, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuUserObjectCreate(&o, &n, NULL, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuUserObjectCreate(&o, &n, count_destroy, 0x80000000u, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
                   CUDA_ERROR_INVALID_VALUE);
  /* the caller's references: the destructor runs at the last release, once */
  CU_OK(cuUserObjectCreate(&o, &n, count_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(cuUserObjectRetain(o, 2));
  assert_int_equal(cuUserObjectRetain(o, 0), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuUserObjectRelease(o, 2));
  assert_int_equal(n, 0);
  CU_OK(cuUserObjectRelease(o, 1));
  assert_int_equal(n, 1);

  /* a capture's graph takes the reference; clone, child node and two
   * instantiations each hold their own, and the last of them to go runs
   * the destructor */
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CUgraph cg = (CUgraph)1;
  cuuint64_t id1 = 0, id2 = 0;
  CU_OK(cuStreamGetCaptureInfo(s, &cs, &id1, &cg, NULL, NULL, NULL));
  assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_NONE);
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const CUgraphNode *deps = NULL;
  size_t ndeps = 7;
  CU_OK(cuStreamGetCaptureInfo(s, &cs, &id1, &cg, &deps, NULL, &ndeps));
  assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  assert_non_null(cg);
  assert_int_equal(ndeps, 0);
  CUgraph cg2 = NULL;
  CU_OK(cuStreamGetCaptureInfo_v2(s, &cs, &id2, &cg2, NULL, NULL));
  assert_ptr_equal(cg2, cg);
  assert_true(id1 == id2 && id1 != 0);
  n = 0;
  CU_OK(cuUserObjectCreate(&o, &n, count_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  assert_int_equal(cuGraphRetainUserObject(cg, o, 2, CU_GRAPH_USER_OBJECT_MOVE), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphRetainUserObject(cg, o, 1, 2), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuGraphRetainUserObject(cg, o, 1, CU_GRAPH_USER_OBJECT_MOVE));
  CUgraph g = NULL, clone = NULL, parent = NULL;
  CU_OK(cuStreamEndCapture(s, &g));
  assert_ptr_equal(g, cg);
  CU_OK(cuGraphClone(&clone, g));
  CU_OK(cuGraphCreate(&parent, 0));
  CUgraphNode node;
  CU_OK(cuGraphAddChildGraphNode(&node, parent, NULL, 0, g));
  CUgraphExec e1, e2;
  CU_OK(cuGraphInstantiateWithFlags(&e1, g, 0));
  CU_OK(cuGraphInstantiateWithFlags(&e2, g, 0));
  CU_OK(cuGraphDestroy(g));
  CU_OK(cuGraphExecDestroy(e1));
  CU_OK(cuGraphDestroy(clone));
  assert_int_equal(n, 0);
  CU_OK(cuGraphDestroy(parent));
  assert_int_equal(n, 0);
  CU_OK(cuGraphExecDestroy(e2)); /* the last owner */
  assert_int_equal(n, 1);

  /* cuGraphDestroy destroys the graph, and its references with it; an
   * executable keeps the object through the copy it took at instantiation
   * ("CUDA User Objects": references owned by a graph are copied to its
   * executables). Whichever goes first, graph or executable, the
   * destructor waits for the other. */
  for (int exec_first = 0; exec_first < 2; exec_first++) {
    n = 0;
    CU_OK(cuGraphCreate(&g, 0));
    CU_OK(cuUserObjectCreate(&o, &n, count_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CU_OK(cuGraphRetainUserObject(g, o, 1, CU_GRAPH_USER_OBJECT_MOVE));
    CU_OK(cuGraphInstantiateWithFlags(&e1, g, 0));
    CU_OK(exec_first ? cuGraphExecDestroy(e1) : cuGraphDestroy(g));
    assert_int_equal(n, 0);
    CU_OK(exec_first ? cuGraphDestroy(g) : cuGraphExecDestroy(e1));
    assert_int_equal(n, 1);
  }

  /* a second capture has another id; a graph gives back only what it owns */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuStreamGetCaptureInfo(s, &cs, &id2, &cg, NULL, NULL, NULL));
  assert_true(id2 != id1);
  n = 0;
  CU_OK(cuUserObjectCreate(&o, &n, count_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(cuUserObjectCreate(&o2, &n, count_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(cuGraphRetainUserObject(cg, o, 1, 0)); /* a new reference: o has 2 */
  assert_int_equal(cuGraphReleaseUserObject(cg, o2, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphReleaseUserObject(cg, o, 2), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuGraphRetainUserObject(cg, o2, 1, CU_GRAPH_USER_OBJECT_MOVE));
  /* a prohibited call invalidates the capture (cuda.h,
   * cuThreadExchangeStreamCaptureMode); its graph goes at
   * cuStreamEndCapture, with its references */
  CUdeviceptr p;
  assert_int_equal(cuMemAlloc_v2(&p, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_int_equal(n, 1); /* o2's; o keeps the caller's reference */
  CU_OK(cuUserObjectRelease(o, 1));
  assert_int_equal(n, 2);

  /* a destructor may not call CUDA */
  destructor_cuda_call = -1;
  CU_OK(cuUserObjectCreate(&o, NULL, destroy_calling_cuda, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(cuUserObjectRelease(o, 1));
  assert_int_equal(destructor_cuda_call, CUDA_ERROR_NOT_PERMITTED);
  CU_OK(cuStreamDestroy_v2(s));
}

/* STANDIN_GRAPH_OVERLAP (README, "Environment"): host nodes 'a' 'b' 'c'
 * tell the order the operations of two executables of one graph ran in. */
static char overlap_trace[64];
static size_t overlap_len;
static void overlap_tag(void *tag) {
  if (overlap_len + 1 < sizeof overlap_trace) overlap_trace[overlap_len++] = *(const char *)tag;
  overlap_trace[overlap_len] = 0;
}
static const char overlap_tags[] = "abcX";

static const char *overlap_pair(CUgraphExec e1, CUstream s1, CUgraphExec e2, CUstream s2, const char *shift,
                                int between) {
  overlap_len = 0;
  overlap_trace[0] = 0;
  if (shift) setenv("STANDIN_GRAPH_OVERLAP", shift, 1);
  CU_OK(cuGraphLaunch(e1, s1));
  if (between == 1) CU_OK(cuLaunchHostFunc(s1, overlap_tag, (void *)&overlap_tags[3])); /* joins e1 */
  if (between == 2) CU_OK(cuStreamSynchronize(s1)); /* orders e1 before e2 */
  CU_OK(cuGraphLaunch(e2, s2));
  unsetenv("STANDIN_GRAPH_OVERLAP");
  CU_OK(cuCtxSynchronize());
  return overlap_trace;
}

static void test_graph_overlap(void **state) {
  (void)state;
  CUstream cap, s1, s2;
  CU_OK(cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamCreate(&s2, 0));
  CUgraph g = NULL;
  CU_OK(cuStreamBeginCapture_v2(cap, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < 3; i++) CU_OK(cuLaunchHostFunc(cap, overlap_tag, (void *)&overlap_tags[i]));
  CU_OK(cuStreamEndCapture(cap, &g));
  /* cuda.h, cuGraphGetNodes: "nodes may be NULL, in which case this
   * function will return the number of nodes in numNodes" */
  size_t n = 0;
  CU_OK(cuGraphGetNodes(g, NULL, &n));
  assert_int_equal(n, 3);
  CUgraphNode nodes[3];
  assert_int_equal(cuGraphGetNodes(g, nodes, &n), CUDA_ERROR_NOT_SUPPORTED); /* not modelled */
  assert_int_equal(cuGraphGetNodes(g, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  CUgraphExec e1, e2;
  CU_OK(cuGraphInstantiateWithFlags(&e1, g, 0));
  CU_OK(cuGraphInstantiateWithFlags(&e2, g, 0));
  /* Unset: each launch runs to its end at once. */
  assert_string_equal(overlap_pair(e1, s1, e2, s2, NULL, 0), "abcabc");
  /* The second executable's operations s steps behind the first's. */
  assert_string_equal(overlap_pair(e1, s1, e2, s2, "0", 0), "aabbcc");
  assert_string_equal(overlap_pair(e1, s1, e2, s2, "1", 0), "abacbc");
  assert_string_equal(overlap_pair(e1, s1, e2, s2, "2", 0), "abcabc");
  assert_string_equal(overlap_pair(e1, s1, e2, s2, "3", 0), "abcabc");
  assert_string_equal(overlap_pair(e2, s2, e1, s1, "1", 0), "abacbc");
  /* A host function behind the first on its stream runs after it. */
  assert_string_equal(overlap_pair(e1, s1, e2, s2, "1", 1), "abacbXc");
  /* Anything between the launches orders them. */
  assert_string_equal(overlap_pair(e1, s1, e2, s2, "0", 2), "abcabc");
  /* One executable's launches never overlap (cuda.h, cuGraphLaunch: "Each
   * launch is ordered behind ... any previous launches of hGraphExec"),
   * nor launches on one stream, nor on the legacy stream. */
  assert_string_equal(overlap_pair(e1, s1, e1, s2, "0", 0), "abcabc");
  assert_string_equal(overlap_pair(e1, s1, e2, s1, "0", 0), "abcabc");
  assert_string_equal(overlap_pair(e1, s1, e2, CU_STREAM_LEGACY, "0", 0), "abcabc");
  assert_string_equal(overlap_pair(e1, NULL, e2, s2, "0", 0), "abcabc");
  /* A launch held back alone runs at the next call. */
  overlap_len = 0;
  setenv("STANDIN_GRAPH_OVERLAP", "0", 1);
  CU_OK(cuGraphLaunch(e1, s1));
  unsetenv("STANDIN_GRAPH_OVERLAP");
  assert_string_equal(overlap_trace, "abcabc"); /* the previous pair's, untouched */
  CU_OK(cuStreamSynchronize(s2));
  assert_string_equal(overlap_trace, "abc");
  CU_OK(cuGraphExecDestroy(e1));
  CU_OK(cuGraphExecDestroy(e2));
  CU_OK(cuGraphDestroy(g));
  CU_OK(cuStreamDestroy_v2(cap));
  CU_OK(cuStreamDestroy_v2(s1));
  CU_OK(cuStreamDestroy_v2(s2));
}

/* Launch-time answers of graphs with memory (cuda.h, cuGraphLaunch: "If
 * any allocations created by hGraphExec remain unfreed (from a previous
 * launch) and hGraphExec was not instantiated with
 * CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, the launch will fail
 * with CUDA_ERROR_INVALID_VALUE"), and a graph whose target memory was
 * freed: on a GPU its work faults on an invalid address
 * (CUDA_ERROR_ILLEGAL_ADDRESS, cuda.h); the stand-in must not write freed
 * host memory. */
static void test_graph_launch_memory(void **state) {
  (void)state;
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p = 0;
  CUgraph g = NULL;
  CUgraphExec e = NULL, e_auto = NULL;
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuMemAllocAsync(&p, 4096, s));
  CU_OK(cuMemsetD8Async(p, 7, 4096, s));
  CU_OK(cuStreamEndCapture(s, &g));
  CU_OK(cuGraphInstantiateWithFlags(&e, g, 0));
  CU_OK(cuGraphLaunch(e, s));
  assert_int_equal(cuGraphLaunch(e, s), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuGraphExecDestroy(e));
  CU_OK(cuGraphInstantiateWithFlags(&e_auto, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
  CU_OK(cuGraphLaunch(e_auto, s));
  CU_OK(cuGraphLaunch(e_auto, s)); /* the driver frees the previous launch's allocation */
  unsigned char byte = 0;
  memcpy(&byte, (void *)p, 1);
  assert_int_equal(byte, 7);
  CU_OK(cuGraphExecDestroy(e_auto));
  CU_OK(cuGraphDestroy(g));

  /* memset and copy nodes whose memory is freed before the launch */
  CUdeviceptr r, a, b;
  CU_OK(cuMemAlloc_v2(&r, 4096));
  CU_OK(cuMemAlloc_v2(&a, 256));
  CU_OK(cuMemAlloc_v2(&b, 256));
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuMemsetD8Async(r, 7, 4096, s));
  CU_OK(cuStreamEndCapture(s, &g));
  CU_OK(cuGraphInstantiateWithFlags(&e, g, 0));
  CU_OK(cuMemFree_v2(r));
  assert_int_equal(cuGraphLaunch(e, s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_OK(cuGraphExecDestroy(e));
  CU_OK(cuGraphDestroy(g));
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuMemcpyDtoDAsync_v2(a, b, 256, s));
  CU_OK(cuStreamEndCapture(s, &g));
  CU_OK(cuGraphInstantiateWithFlags(&e, g, 0));
  CU_OK(cuGraphLaunch(e, s));
  CU_OK(cuMemFree_v2(b));
  assert_int_equal(cuGraphLaunch(e, s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_OK(cuGraphExecDestroy(e));
  CU_OK(cuGraphDestroy(g));
  CU_OK(cuMemFree_v2(a));
  CU_OK(cuStreamDestroy_v2(s));
}

static void test_capture(void **state) {
  (void)state;
  CUstream s, s2;
  CUgraph g = NULL;
  CUstreamCaptureStatus st;
  CU_OK(cuStreamCreate(&s, 0));
  CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));

  /* A clean capture: stream-ordered work is recorded, not run (cuda.h,
   * cuStreamBeginCapture: "When a stream is in capture mode, all operations
   * pushed into the stream will not be executed, but will instead be
   * captured into a graph"). */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CU_OK(cuStreamIsCapturing(s2, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
  assert_int_equal(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  CUdeviceptr p;
  CU_OK(cuMemAllocAsync(&p, 256, s));
  CU_OK(cuMemsetD8Async(p, 0x11, 256, s));
  unsigned char byte = 0;
  memcpy(&byte, (void *)p, 1);
  assert_int_equal(byte, 0xFF); /* fresh memory's poison: the memset has not run */
  CUdeviceptr keep;
  CU_OK(cuMemAllocAsync(&keep, 64, s)); /* not freed in the graph: the graph keeps it */
  CU_OK(cuMemFreeAsync(p, s));
  /* the legacy stream: a query is an error, the capture stays valid */
  assert_int_equal(cuStreamIsCapturing(NULL, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CU_OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CU_OK(cuStreamEndCapture(s, &g));
  assert_non_null(g);
  /* A graph with memory alloc/free nodes (cuda.h, cuGraphAddMemAllocNode:
   * "The graph can only be used in a child node if the ownership is moved
   * to the parent. Only one instantiation of the graph may exist at any
   * point in time. The graph cannot be cloned."). */
  CUgraph clone = NULL, parent;
  CUgraphNode node;
  CUgraphExec e1, e2;
  assert_int_equal(cuGraphClone(&clone, g), CUDA_ERROR_INVALID_VALUE);
  assert_null(clone);
  CU_OK(cuGraphCreate(&parent, 0));
  assert_int_equal(cuGraphAddChildGraphNode(&node, parent, NULL, 0, g), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuGraphInstantiateWithFlags(&e1, g, 0));
  assert_int_equal(cuGraphInstantiateWithFlags(&e2, g, 0), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuGraphLaunch(e1, s));
  memcpy(&byte, (void *)p, 1);
  assert_int_equal(byte, 0x11); /* the launch ran it */
  CU_OK(cuGraphExecDestroy(e1));
  CU_OK(cuGraphInstantiateWithFlags(&e2, g, 0));
  CU_OK(cuGraphDestroy(g)); /* the instantiation keeps what it needs */
  CU_OK(cuGraphLaunch(e2, s));
  CU_OK(cuGraphExecDestroy(e2));
  assert_int_equal(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphExecDestroy(e2), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuGraphDestroy(parent));

  /* Synchronising a capturing stream fails and invalidates the capture. */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CU_OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  assert_int_equal(cuMemsetD8Async((CUdeviceptr)0, 0, 0, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_null(g);
  CU_OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);

  /* Global mode: allocation is refused and invalidates the capture. */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  assert_int_equal(cuMemAlloc_v2(&p, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  /* Legacy-stream work joins blocking streams: IMPLICIT, invalidated. */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUdeviceptr q;
  CU_OK(cuMemAlloc_v2(&q, 64)); /* relaxed: allowed */
  assert_int_equal(cuMemsetD8Async(q, 0, 64, NULL), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CU_OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  /* a non-blocking stream's capture does not meet the legacy stream */
  CU_OK(cuStreamBeginCapture_v2(s2, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_OK(cuMemsetD8Async(q, 0, 64, NULL));
  CU_OK(cuStreamEndCapture(s2, &g));
  CU_OK(cuGraphDestroy(g));
  CU_OK(cuMemFree_v2(q));

  /* Thread-local mode: another thread may allocate, but may not end it. */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  pthread_t t;
  void *ret;
  pthread_create(&t, NULL, capture_other_thread, s);
  pthread_join(t, &ret);
  int *res = ret;
  assert_int_equal(res[0], CUDA_SUCCESS);
  assert_int_equal(res[1], CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  free(res);
  assert_int_equal(cuMemAlloc_v2(&p, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  /* Global mode on this thread: another thread in the default (global)
   * mode is refused its allocation, and the refusal invalidates this
   * capture (cuda.h, cuThreadExchangeStreamCaptureMode; the Programming
   * Guide: "any associated capture graphs are invalidated"). */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  pthread_create(&t, NULL, capture_other_thread, s);
  pthread_join(t, &ret);
  res = ret;
  assert_int_equal(res[0], CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(res[1], CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  assert_int_equal(res[2], CU_STREAM_CAPTURE_MODE_GLOBAL);
  free(res);
  CU_OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_null(g);
  /* ... while a thread in thread-local or relaxed mode may allocate, and
   * the capture goes on ("Concurrent capture sequences in other threads are
   * ignored"; relaxed: "not prohibited from potentially unsafe API calls"). */
  static const CUstreamCaptureMode other_modes[2] = {CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                                     CU_STREAM_CAPTURE_MODE_RELAXED};
  for (int i = 0; i < 2; i++) {
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    capture_other_mode = other_modes[i];
    pthread_create(&t, NULL, capture_other_thread, s);
    pthread_join(t, &ret);
    capture_other_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    res = ret;
    assert_int_equal(res[0], CUDA_SUCCESS);
    assert_int_equal(res[1], CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    assert_int_equal(res[2], CU_STREAM_CAPTURE_MODE_GLOBAL); /* every thread starts global */
    free(res);
    CU_OK(cuStreamEndCapture(s, &g));
    assert_non_null(g);
    CU_OK(cuGraphDestroy(g));
  }
  /* The capturing thread itself in relaxed mode may allocate during its own
   * global capture; back in global mode it may not. */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CU_OK(cuThreadExchangeStreamCaptureMode(&mode));
  assert_int_equal(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
  CU_OK(cuMemAlloc_v2(&q, 64));
  CU_OK(cuMemFree_v2(q));
  CU_OK(cuThreadExchangeStreamCaptureMode(&mode));
  assert_int_equal(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  CU_OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  assert_int_equal(cuMemAlloc_v2(&q, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  /* cuThreadExchangeStreamCaptureMode's own checks */
  assert_int_equal(cuThreadExchangeStreamCaptureMode(NULL), CUDA_ERROR_INVALID_VALUE);
  mode = (CUstreamCaptureMode)3;
  assert_int_equal(cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(mode, 3);

  /* Fork and join: waiting on an event recorded in the capture pulls the
   * waiting stream in; it must be joined back before the end. */
  CUevent fork_ev, join_ev;
  CU_OK(cuEventCreate(&fork_ev, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuEventCreate(&join_ev, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr scratch;
  CU_OK(cuMemAlloc_v2(&scratch, 64));
  for (int joined = 0; joined < 2; joined++) {
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_OK(cuEventRecord(fork_ev, s));
    assert_int_equal(cuEventSynchronize(fork_ev), CUDA_ERROR_CAPTURED_EVENT);
    CU_OK(cuStreamWaitEvent(s2, fork_ev, 0));
    CU_OK(cuStreamIsCapturing(s2, &st));
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CU_OK(cuMemsetD8Async(scratch, 7, 64, s2));
    assert_int_equal(cuStreamEndCapture(s2, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    if (joined) {
      CU_OK(cuEventRecord(join_ev, s2));
      CU_OK(cuStreamWaitEvent(s, join_ev, 0));
      CU_OK(cuStreamEndCapture(s, &g));
      CU_OK(cuGraphDestroy(g));
    } else {
      assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    }
    CU_OK(cuStreamIsCapturing(s2, &st));
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
  }
  /* work after the join needs joining again */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuEventRecord(fork_ev, s));
  CU_OK(cuStreamWaitEvent(s2, fork_ev, 0));
  CU_OK(cuEventRecord(join_ev, s2));
  CU_OK(cuMemsetD8Async(scratch, 7, 64, s2));
  CU_OK(cuStreamWaitEvent(s, join_ev, 0));
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  /* synchronising a forked stream invalidates the whole capture */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuEventRecord(fork_ev, s));
  CU_OK(cuStreamWaitEvent(s2, fork_ev, 0));
  assert_int_equal(cuStreamSynchronize(s2), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CU_OK(cuStreamIsCapturing(s, &st));
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  /* two captures cannot merge; an event from outside any capture is fine */
  CU_OK(cuEventRecord(join_ev, NULL));
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_OK(cuStreamBeginCapture_v2(s2, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_OK(cuStreamWaitEvent(s, join_ev, 0));
  CU_OK(cuEventRecord(fork_ev, s));
  assert_int_equal(cuStreamWaitEvent(s2, fork_ev, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_int_equal(cuStreamEndCapture(s2, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_int_equal(cuStreamWaitEvent(s, join_ev, 4), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemFree_v2(scratch));
  CU_OK(cuEventDestroy_v2(fork_ev));
  CU_OK(cuEventDestroy_v2(join_ev));

  assert_int_equal(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
                   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamBeginCapture_v2(s, (CUstreamCaptureMode)7), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
  CU_OK(cuStreamDestroy_v2(s));
  CU_OK(cuStreamDestroy_v2(s2));
}

/* ------------------------------------------------------------------------ */
/* Graphs as XLA and PyTorch use them: captured work (kernels with their
 * arguments copied at capture, copies, memsets, host functions) runs at
 * each launch of each instantiation, reading memory as it is then; a graph
 * without memory nodes can be cloned, embedded as a child (cuda.h: "The
 * child graph is cloned in this call") and instantiated more than once. */
static int host_runs;
static void count_run(void *arg) { host_runs += *(int *)arg; }

static const char ptx_saxpy[] =
    ".version 8.5\n.target sm_61\n.address_size 64\n"
    ".visible .entry saxpy(\n\t.param .u32 n,\n\t.param .f32 a,\n\t.param .u64 .ptr .global .align 4 x,\n"
    "\t.param .u64 y\n)\n{\n  ret;\n}\n";

static void test_graphs(void **state) {
  (void)state;
  CUmodule mod;
  CUfunction saxpy;
  CU_OK(cuModuleLoadData(&mod, ptx_saxpy));
  CU_OK(cuModuleGetFunction(&saxpy, mod, "saxpy"));
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  enum { N = 8 };
  float *x = dalloc(N * 4), *y = dalloc(N * 4), *z = dalloc(N * 4);
  float ones[N], got[N];
  for (int i = 0; i < N; i++) ones[i] = 1.0f;
  h2d(x, ones, sizeof ones);
  h2d(y, ones, sizeof ones);
  int n = N, inc = 1;
  float a = 2.0f;
  void *params[] = {&n, &a, &x, &y};
  CUgraph g;
  host_runs = 0;
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CU_OK(cuLaunchKernel(saxpy, 1, 1, 1, N, 1, 1, 0, s, params, NULL)); /* y = 2x + y */
  CU_OK(cuMemcpyDtoDAsync_v2((CUdeviceptr)z, (CUdeviceptr)y, N * 4, s));
  CU_OK(cuMemsetD32Async((CUdeviceptr)x, 0x40400000u, N, s)); /* x = 3.0f */
  CU_OK(cuLaunchHostFunc(s, count_run, &inc));
  CU_OK(cuStreamEndCapture(s, &g));
  a = 100.0f; /* kernel arguments were copied at capture */
  d2h(got, y, sizeof got);
  assert_true(got[0] == 1.0f && host_runs == 0); /* nothing ran during capture */

  CUgraph clone, parent;
  CUgraphNode child1, child2;
  CU_OK(cuGraphClone(&clone, g));
  CU_OK(cuGraphCreate(&parent, 0));
  CU_OK(cuGraphAddChildGraphNode(&child1, parent, NULL, 0, g));
  CU_OK(cuGraphAddChildGraphNode(&child2, parent, &child1, 1, clone));
  assert_int_equal(cuGraphAddChildGraphNode(&child2, parent, &child1, 1, parent), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphAddChildGraphNode(&child2, parent, NULL, 1, g), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphCreate(&parent, 1), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuGraphDestroy(g)); /* the clone and the children are copies */
  CUgraphExec e1, e2;
  CU_OK(cuGraphInstantiateWithFlags(&e1, clone, 0));
  CU_OK(cuGraphInstantiateWithFlags(&e2, clone, 0));
  assert_int_equal(cuGraphInstantiateWithFlags(&e2, clone, 1ull << 20), CUDA_ERROR_INVALID_VALUE);

  CU_OK(cuGraphLaunch(e1, s)); /* y = 2*1 + 1 = 3, z = y, x = 3 */
  d2h(got, z, sizeof got);
  assert_true(got[0] == 3.0f && got[N - 1] == 3.0f);
  assert_int_equal(host_runs, 1);
  CU_OK(cuGraphLaunch(e2, s)); /* x is 3 now: y = 2*3 + 3 = 9 */
  d2h(got, z, sizeof got);
  assert_true(got[0] == 9.0f);
  assert_int_equal(host_runs, 2);
  CUgraphExec ep;
  CU_OK(cuGraphInstantiateWithFlags(&ep, parent, 0));
  CU_OK(cuGraphLaunch(ep, s)); /* twice: 2*3 + 9 = 15, then 2*3 + 15 = 21 */
  d2h(got, z, sizeof got);
  assert_true(got[0] == 21.0f);
  assert_int_equal(host_runs, 4);

  /* A capture that forks onto another stream records both streams' work. */
  CUstream s2;
  CUevent fork_ev, join_ev;
  CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CU_OK(cuEventCreate(&fork_ev, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuEventCreate(&join_ev, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(cuEventRecord(fork_ev, s));
  CU_OK(cuStreamWaitEvent(s2, fork_ev, 0));
  CU_OK(cuMemsetD32Async((CUdeviceptr)z, 0x3f800000u, N, s2)); /* z = 1.0f */
  CU_OK(cuEventRecord(join_ev, s2));
  CU_OK(cuStreamWaitEvent(s, join_ev, 0));
  CU_OK(cuLaunchHostFunc(s, count_run, &inc));
  CU_OK(cuStreamEndCapture(s, &g));
  CUgraphExec ef;
  CU_OK(cuGraphInstantiateWithFlags(&ef, g, 0));
  d2h(got, z, sizeof got);
  assert_true(got[0] == 21.0f);
  CU_OK(cuGraphLaunch(ef, s));
  d2h(got, z, sizeof got);
  assert_true(got[0] == 1.0f);
  assert_int_equal(host_runs, 5);
  /* Launching into a capture is not modelled. */
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  assert_int_equal(cuGraphLaunch(ef, s), CUDA_ERROR_NOT_SUPPORTED);
  CUgraph dropped;
  CU_OK(cuStreamEndCapture(s, &dropped));
  CU_OK(cuGraphDestroy(dropped));

  CU_OK(cuGraphExecDestroy(ef));
  CU_OK(cuGraphExecDestroy(ep));
  CU_OK(cuGraphExecDestroy(e1));
  CU_OK(cuGraphExecDestroy(e2));
  assert_int_equal(cuGraphLaunch(e1, s), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuGraphDestroy(g));
  CU_OK(cuGraphDestroy(clone));
  CU_OK(cuGraphDestroy(parent));
  CU_OK(cuEventDestroy_v2(fork_ev));
  CU_OK(cuEventDestroy_v2(join_ev));
  CU_OK(cuStreamDestroy_v2(s2));
  CU_OK(cuStreamDestroy_v2(s));
  CU_OK(cuModuleUnload(mod));
  CU_OK(cuMemFree_v2((CUdeviceptr)x));
  CU_OK(cuMemFree_v2((CUdeviceptr)y));
  CU_OK(cuMemFree_v2((CUdeviceptr)z));
}

/* A cuBLAS GEMM captured into a graph runs at each launch, on the operands
 * as they are then; a host-mode alpha is taken at capture (a kernel argument),
 * a device-mode beta is read at launch (cuBLAS: "device pointer mode ...
 * scalars are read by the kernel"). */
static void test_graph_gemm(void **state) {
  (void)state;
  cublasHandle_t h;
  CUstream s;
  BL_OK(cublasCreate_v2(&h));
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  BL_OK(cublasSetStream_v2(h, s));
  float *A = dalloc(16), *B = dalloc(16), *C = dalloc(16), *beta_dev = dalloc(4);
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {0, 0, 0, 0}, got[4], zero = 0.0f, alpha = 1.0f;
  h2d(A, a, 16);
  h2d(B, b, 16);
  h2d(C, c, 16);
  h2d(beta_dev, &zero, 4);
  CUgraph g;
  CUgraphExec e;
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  BL_OK(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, A, 2, B, 2, &zero, C, 2)); /* C = A */
  CU_OK(cuStreamEndCapture(s, &g));
  alpha = 7.0f;
  d2h(got, C, 16);
  assert_true(got[0] == 0.0f && got[3] == 0.0f); /* not run yet */
  CU_OK(cuGraphInstantiateWithFlags(&e, g, 0));
  CU_OK(cuGraphLaunch(e, s));
  d2h(got, C, 16);
  assert_true(got[0] == 1.0f && got[1] == 2.0f && got[2] == 3.0f && got[3] == 4.0f);
  a[0] = 10.0f;
  h2d(A, a, 16);
  CU_OK(cuGraphLaunch(e, s));
  d2h(got, C, 16);
  assert_true(got[0] == 10.0f && got[3] == 4.0f);
  CU_OK(cuGraphExecDestroy(e));
  CU_OK(cuGraphDestroy(g));

  /* device pointer mode: C = A + beta C with beta read at each launch */
  BL_OK(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE));
  float *alpha_dev = dalloc(4);
  float one = 1.0f;
  h2d(alpha_dev, &one, 4);
  CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  BL_OK(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, alpha_dev, A, 2, B, 2, beta_dev, C, 2));
  CU_OK(cuStreamEndCapture(s, &g));
  CU_OK(cuGraphInstantiateWithFlags(&e, g, 0));
  CU_OK(cuGraphLaunch(e, s)); /* beta 0: C = A */
  d2h(got, C, 16);
  assert_true(got[0] == 10.0f && got[1] == 2.0f);
  h2d(beta_dev, &one, 4);
  CU_OK(cuGraphLaunch(e, s)); /* beta 1: C = A + C */
  d2h(got, C, 16);
  assert_true(got[0] == 20.0f && got[1] == 4.0f);
  CU_OK(cuGraphExecDestroy(e));
  CU_OK(cuGraphDestroy(g));
  BL_OK(cublasDestroy_v2(h));
  CU_OK(cuStreamDestroy_v2(s));
  float *bufs[] = {A, B, C, beta_dev, alpha_dev};
  for (int i = 0; i < 5; i++) CU_OK(cuMemFree_v2((CUdeviceptr)bufs[i]));
}

/* ------------------------------------------------------------------------ */
/* Memory. */
static void test_memory(void **state) {
  (void)state;
  CUdeviceptr a, b, c;
  CU_OK(cuMemAlloc_v2(&a, 1000));
  CU_OK(cuMemAlloc_v2(&b, 1000));
  assert_int_equal(a % 256, 0);
  assert_int_equal(b % 256, 0);
  unsigned char host[1000], back[1000];
  d2h(back, (void *)a, 1000);
  for (int i = 0; i < 1000; i++) assert_int_equal(back[i], 0xFF); /* fresh memory is poisoned */
  for (int i = 0; i < 1000; i++) host[i] = (unsigned char)(i * 7);
  CU_OK(cuMemcpyHtoD_v2(a, host, 1000));
  CU_OK(cuMemcpyDtoD_v2(b, a, 1000));
  CU_OK(cuMemcpyDtoH_v2(back, b, 1000));
  assert_memory_equal(back, host, 1000);
  CU_OK(cuMemsetD8_v2(a + 10, 0x5A, 20));
  CU_OK(cuMemcpyDtoH_v2(back, a, 1000));
  assert_int_equal(back[9], host[9]);
  assert_int_equal(back[10], 0x5A);
  assert_int_equal(back[29], 0x5A);
  assert_int_equal(back[30], host[30]);
  CU_OK(cuMemsetD32_v2(b, 0xDEADBEEFu, 250));
  uint32_t w[250];
  CU_OK(cuMemcpyDtoH_v2(w, b, 1000));
  for (int i = 0; i < 250; i++) assert_int_equal(w[i], 0xDEADBEEFu);
  assert_int_equal(cuMemsetD32_v2(b + 2, 0, 1), CUDA_ERROR_INVALID_VALUE); /* misaligned */
  CU_OK(cuMemsetD32Async(b + 8, 0x01020304u, 2, NULL));
  CU_OK(cuMemcpyDtoH_v2(w, b, 16));
  assert_true(w[1] == 0xDEADBEEFu && w[2] == 0x01020304u && w[3] == 0x01020304u);
  assert_int_equal(cuMemsetD32Async(b + 1, 0, 1, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemsetD32Async(b + 996, 0, 2, NULL), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemcpyDtoDAsync_v2(a, b + 8, 8, NULL));
  CU_OK(cuMemcpyDtoH_v2(w, a, 8));
  assert_true(w[0] == 0x01020304u && w[1] == 0x01020304u);
  assert_int_equal(cuMemcpyDtoDAsync_v2(a, b, 1001, NULL), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemsetD8Async(b, 1, 1000, NULL));

  /* pointers the driver does not know, or ranges past the end */
  assert_int_equal(cuMemcpyHtoD_v2(a + 900, host, 200), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyHtoD_v2((CUdeviceptr)back, host, 10), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemsetD8Async((CUdeviceptr)back, 0, 10, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFree_v2(a + 8), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFree_v2((CUdeviceptr)host), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemFree_v2(0));
  assert_int_equal(cuMemAlloc_v2(&c, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAlloc_v2(NULL, 10), CUDA_ERROR_INVALID_VALUE);

  /* pointer attributes */
  unsigned int type = 0;
  CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 100));
  assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
  CUdeviceptr start = 0;
  size_t size = 0;
  CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 100));
  CU_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 100));
  assert_true(start == a && size == 1000);
  int ord = -1;
  CU_OK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a));
  assert_int_equal(ord, 0);
  CUcontext pc;
  CU_OK(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, a));
  assert_ptr_equal(pc, primary[0]);
  assert_int_equal(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)host),
                   CUDA_ERROR_INVALID_VALUE);

  /* stream-ordered allocation and the free/total report */
  size_t free0, total, free1;
  CU_OK(cuMemGetInfo_v2(&free0, &total));
  CUstream s;
  CU_OK(cuStreamCreate(&s, 0));
  CU_OK(cuMemAllocAsync(&c, 4096, s));
  assert_int_equal(c % 256, 0);
  CU_OK(cuMemGetInfo_v2(&free1, &total));
  assert_int_equal(free0 - free1, 4096);
  CU_OK(cuMemFreeAsync(c, s));
  assert_int_equal(cuMemFreeAsync(c, s), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuStreamDestroy_v2(s));
  CU_OK(cuMemFree_v2(a));
  CU_OK(cuMemFree_v2(b));
}

/* ------------------------------------------------------------------------ */
/* Memory pools (cuda.h: cuMemPoolCreate, cuMemPoolSetAttribute,
 * cuMemPoolGetAttribute, cuMemPoolTrimTo, cuMemPoolDestroy). */
static cuuint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute a) {
  cuuint64_t v = 12345;
  CU_OK(cuMemPoolGetAttribute(pool, a, &v));
  return v;
}

static void test_pools(void **state) {
  (void)state;
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 1;
  CUmemoryPool pool, bad;
  /* properties cuda.h requires, or that the stand-in does not model */
  assert_int_equal(cuMemPoolCreate(NULL, &props), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemPoolCreate(&bad, NULL), CUDA_ERROR_INVALID_VALUE);
  CUmemPoolProps p2 = props;
  p2.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
  assert_int_equal(cuMemPoolCreate(&bad, &p2), CUDA_ERROR_INVALID_VALUE);
  p2 = props;
  p2.location.id = 3; /* three devices */
  assert_int_equal(cuMemPoolCreate(&bad, &p2), CUDA_ERROR_INVALID_VALUE);
  p2 = props;
  p2.reserved[7] = 1; /* "reserved for future use, must be 0" */
  assert_int_equal(cuMemPoolCreate(&bad, &p2), CUDA_ERROR_INVALID_VALUE);
  p2 = props;
  p2.location.type = CU_MEM_LOCATION_TYPE_HOST;
  assert_int_equal(cuMemPoolCreate(&bad, &p2), CUDA_ERROR_NOT_SUPPORTED);
  p2 = props;
  p2.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  assert_int_equal(cuMemPoolCreate(&bad, &p2), CUDA_ERROR_NOT_SUPPORTED);

  CU_OK(cuMemPoolCreate(&pool, &props));
  /* defaults: threshold 0, reuse enabled, nothing reserved */
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0);
  int reuse = 0;
  CU_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
  assert_int_equal(reuse, 1);
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
  cuuint64_t keep = 4096;
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));

  CUstream s;
  CU_OK(cuStreamCreate(&s, 0));
  CUdeviceptr a, b;
  assert_int_equal(cuMemAllocFromPoolAsync(&a, 0, pool, s), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAllocFromPoolAsync(&a, 64, NULL, s), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemAllocFromPoolAsync(&a, 1000, pool, s));
  assert_int_equal(a % 256, 0);
  unsigned char back[1000];
  d2h(back, (void *)a, 1000);
  for (int i = 0; i < 1000; i++) assert_int_equal(back[i], 0xFF);
  CU_OK(cuMemsetD8Async(a, 7, 1000, s));
  assert_int_equal(cuMemsetD8Async(a, 7, 1001, s), CUDA_ERROR_INVALID_VALUE); /* exactly as large as asked */
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 1000);
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 1000);
  CU_OK(cuMemFreeAsync(a, s));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0);
  assert_int_equal(cuMemsetD8Async(a, 7, 1, s), CUDA_ERROR_INVALID_VALUE); /* freed: not usable */
  /* at or under the threshold a synchronisation keeps the reserve */
  CU_OK(cuStreamSynchronize(s));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 1000);
  /* the kept block serves a smaller allocation, poisoned again */
  CU_OK(cuMemAllocFromPoolAsync(&a, 800, pool, s));
  d2h(back, (void *)a, 800);
  for (int i = 0; i < 800; i++) assert_int_equal(back[i], 0xFF);
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 1000);
  CU_OK(cuMemAllocFromPoolAsync(&b, 5000, pool, s));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 6000);
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 6000);
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 5800);
  CU_OK(cuMemFreeAsync(b, s));
  CU_OK(cuMemFreeAsync(a, s));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 6000); /* no synchronisation yet */
  /* above the threshold: released at the next synchronisation, the block
   * freed first going first, down to the threshold */
  CU_OK(cuCtxSynchronize());
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 1000);
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 6000);
  /* an event synchronisation trims too */
  keep = 0;
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
  CUevent ev;
  CU_OK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuEventRecord(ev, s));
  CU_OK(cuEventSynchronize(ev));
  CU_OK(cuEventDestroy_v2(ev));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
  /* trimming by hand: a no-op under minBytesToKeep, else down to it */
  keep = UINT64_MAX;
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
  CU_OK(cuMemAllocFromPoolAsync(&a, 3000, pool, s));
  CU_OK(cuMemFreeAsync(a, s));
  CU_OK(cuStreamSynchronize(s));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 3000);
  CU_OK(cuMemPoolTrimTo(pool, 5000));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 3000);
  CU_OK(cuMemPoolTrimTo(pool, 0));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
  assert_int_equal(cuMemPoolTrimTo(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  /* A free not yet observed on the host counts as outstanding (cuda.h,
   * cuMemPoolTrimTo: "Allocations that have been asynchronously freed but
   * whose completion has not been observed on the host (eg. by a
   * synchronize) can count as outstanding"; the allocator "cannot release
   * OS allocations that back outstanding asynchronous allocations"): trim
   * gives nothing back until a synchronisation; the pending block is still
   * reused by the stream's next allocation. cuMemFree frees observed. */
  CU_OK(cuMemAllocFromPoolAsync(&a, 3000, pool, s));
  CU_OK(cuMemFreeAsync(a, s));
  CU_OK(cuMemPoolTrimTo(pool, 0));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 3000);
  CU_OK(cuMemAllocFromPoolAsync(&b, 2000, pool, s));
  assert_int_equal(b, a);
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 3000);
  CU_OK(cuMemFreeAsync(b, s));
  CU_OK(cuStreamSynchronize(s)); /* observed; the threshold (UINT64_MAX) keeps it */
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 3000);
  CU_OK(cuMemPoolTrimTo(pool, 0));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
  CU_OK(cuMemAllocFromPoolAsync(&a, 3000, pool, s));
  CU_OK(cuMemFree_v2(a));
  CU_OK(cuMemPoolTrimTo(pool, 0));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
  /* watermarks reset to the current value; only 0 may be written */
  cuuint64_t v = 1;
  assert_int_equal(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v), CUDA_ERROR_INVALID_VALUE);
  v = 0;
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v));
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0);
  assert_int_equal(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0);
  /* destroyed with an allocation outstanding: gone for the program, its
   * memory released when the allocation is freed */
  CU_OK(cuMemAllocFromPoolAsync(&a, 512, pool, s));
  CU_OK(cuMemPoolDestroy(pool));
  assert_int_equal(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAllocFromPoolAsync(&b, 64, pool, s), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemsetD8Async(a, 1, 512, s));
  CU_OK(cuMemFreeAsync(a, s));

  /* the default pool: threshold 0, cannot be destroyed, what
   * cuMemAllocAsync uses */
  CUmemoryPool def;
  CU_OK(cuDeviceGetDefaultMemPool(&def, 0));
  assert_int_equal(cuDeviceGetDefaultMemPool(&def, 3), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(pool_attr(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0);
  assert_int_equal(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuStreamSynchronize(s));
  cuuint64_t before = pool_attr(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  CU_OK(cuMemAllocAsync(&a, 2048, s));
  assert_int_equal(pool_attr(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), before + 2048);
  CU_OK(cuMemFreeAsync(a, s));
  CU_OK(cuStreamSynchronize(s));
  assert_int_equal(pool_attr(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
  CU_OK(cuStreamDestroy_v2(s));
}

/* ------------------------------------------------------------------------ */
/* Modules and host kernels. */
static const char ptx_ok[] =
    "//\n// test module\n//\n.version 8.5\n.target sm_61\n.address_size 64\n\n"
    ".visible .entry saxpy(\n  .param .u32 n\n)\n{\n  ret;\n}\n"
    ".visible .entry shared_probe(.param .u64 out)\n{\n  ret;\n}\n"
    ".visible .entry fault()\n{\n  ret;\n}\n"
    ".visible .entry nohost()\n{\n  ret;\n}\n";

static void test_modules(void **state) {
  (void)state;
  CUmodule mod, mod2;
  CUfunction saxpy, again, probe, fault;
  CU_OK(cuModuleLoadData(&mod, ptx_ok));
  CU_OK(cuModuleGetFunction(&saxpy, mod, "saxpy"));
  CU_OK(cuModuleGetFunction(&again, mod, "saxpy"));
  assert_ptr_equal(saxpy, again);
  assert_int_equal(cuModuleGetFunction(&again, mod, "sax"), CUDA_ERROR_NOT_FOUND);    /* not in the PTX */
  assert_int_equal(cuModuleGetFunction(&again, mod, "nohost"), CUDA_ERROR_NOT_FOUND); /* no host symbol */
  CU_OK(cuModuleGetFunction(&probe, mod, "shared_probe"));
  CU_OK(cuModuleGetFunction(&fault, mod, "fault"));

  /* saxpy over 1000 elements in blocks of 128 */
  int n = 1000;
  float a = 2.0f, x[1000], y[1000], out[1000];
  for (int i = 0; i < n; i++) x[i] = (float)i, y[i] = 1.0f;
  float *dx = dalloc(sizeof x), *dy = dalloc(sizeof y);
  h2d(dx, x, sizeof x);
  h2d(dy, y, sizeof y);
  void *params[] = {&n, &a, &dx, &dy};
  CUstream s;
  CU_OK(cuStreamCreate(&s, 0));
  CU_OK(cuLaunchKernel(saxpy, (n + 127) / 128, 1, 1, 128, 1, 1, 0, s, params, NULL));
  d2h(out, dy, sizeof out);
  for (int i = 0; i < n; i++) assert_true(out[i] == 2.0f * (float)i + 1.0f);

  /* launch validation, as on a GPU */
  assert_int_equal(cuLaunchKernel(saxpy, 0, 1, 1, 128, 1, 1, 0, s, params, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(saxpy, 1, 1, 1, 128, 0, 1, 0, s, params, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(saxpy, 1, 1, 1, 1025, 1, 1, 0, s, params, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(saxpy, 1, 1, 1, 32, 32, 2, 0, s, params, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(saxpy, 1, 65536, 1, 32, 1, 1, 0, s, params, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(saxpy, 1, 1, 1, 32, 1, 1, 0, s, params, (void **)params),
                   CUDA_ERROR_INVALID_VALUE);
  void *extra[] = {CU_LAUNCH_PARAM_END};
  assert_int_equal(cuLaunchKernel(saxpy, 1, 1, 1, 32, 1, 1, 0, s, NULL, extra), CUDA_ERROR_NOT_SUPPORTED);

  /* dynamic shared memory: 48 KiB by default, more after opting in */
  unsigned *dres = dalloc(7 * sizeof(unsigned)), res[7];
  void *pp[] = {&dres};
  assert_int_equal(cuLaunchKernel(probe, 2, 1, 1, 8, 4, 2, 65536, s, pp, NULL), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuLaunchKernel(probe, 2, 1, 1, 8, 4, 2, 49152, s, pp, NULL));
  assert_int_equal(cuFuncSetAttribute(probe, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 166913),
                   CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuFuncSetAttribute(probe, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536));
  CU_OK(cuFuncSetAttribute(probe, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
  assert_int_equal(cuFuncSetAttribute(probe, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1),
                   CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuLaunchKernel(probe, 2, 3, 1, 8, 4, 2, 65536, s, pp, NULL));
  d2h(res, dres, sizeof res);
  assert_int_equal(res[0], 65536);
  assert_int_equal(res[1], 1);
  assert_int_equal(res[2], 6);
  assert_int_equal(res[3], 8);
  assert_int_equal(res[4], 4);
  assert_int_equal(res[5], 2);
  assert_int_equal(res[6], 80);

  /* a fault the host kernel detects is the launch's result */
  assert_int_equal(cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_ILLEGAL_ADDRESS);

  /* a function runs only in its module's context */
  CUstream s1;
  CU_OK(cuCtxPushCurrent_v2(primary[1]));
  CU_OK(cuStreamCreate(&s1, 0));
  assert_int_equal(cuLaunchKernel(saxpy, 1, 1, 1, 32, 1, 1, 0, s1, params, NULL), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuLaunchKernel(saxpy, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_HANDLE);
  /* ... and the JIT checks the PTX against the device: sm_90 PTX loads on
   * the 9.0 device, not on the 8.0 one */
  static const char ptx90[] = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry saxpy()\n{\n}\n";
  CU_OK(cuModuleLoadData(&mod2, ptx90));
  CU_OK(cuModuleUnload(mod2));
  CU_OK(cuStreamDestroy_v2(s1));
  CU_OK(cuCtxPopCurrent_v2(NULL));
  assert_int_equal(cuModuleLoadData(&mod2, ptx90), CUDA_ERROR_INVALID_PTX);
  static const char ptx90a[] = ".version 8.0\n.target sm_90a\n.visible .entry saxpy()\n{\n}\n";
  CU_OK(cuCtxPushCurrent_v2(primary[1]));
  CU_OK(cuModuleLoadData(&mod2, ptx90a));
  CU_OK(cuModuleUnload(mod2));
  CU_OK(cuCtxPopCurrent_v2(NULL));
  static const char ptx_new[] = ".version 9.9\n.target sm_61\n.visible .entry saxpy()\n{\n}\n";
  assert_int_equal(cuModuleLoadData(&mod2, ptx_new), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  static const char ptx_isa[] = ".version " STANDIN_PTX_ISA_OK "\n.target sm_80\n.visible .entry saxpy()\n{\n}\n";
  CU_OK(cuModuleLoadData(&mod2, ptx_isa));
  CU_OK(cuModuleUnload(mod2));
  /* binary images are taken as they are; any name the host library has */
  static const unsigned char elf[16] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  CU_OK(cuModuleLoadData(&mod2, elf));
  assert_int_equal(cuModuleGetFunction(&again, mod2, "nohost2"), CUDA_ERROR_NOT_FOUND);
  CU_OK(cuModuleGetFunction(&again, mod2, "saxpy"));
  CU_OK(cuModuleUnload(mod2));
  assert_int_equal(cuModuleLoadData(&mod2, NULL), CUDA_ERROR_INVALID_VALUE);

  CU_OK(cuModuleUnload(mod));
  assert_int_equal(cuLaunchKernel(saxpy, 1, 1, 1, 32, 1, 1, 0, s, params, NULL), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(cuStreamDestroy_v2(s));
  dfree(dx);
  dfree(dy);
  dfree(dres);
}

/* ------------------------------------------------------------------------ */
/* Scenarios run in a child process (main: --child <name>). They return 0
 * when every check held, else print the failed check and return 1. */
#define CHILD_CHECK(cond)                                                          \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "child check failed (line %d): %s\n", __LINE__, #cond);     \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

static int child_setup(void) {
  CUcontext c;
  if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c)) return 1;
  return 0;
}

static int child_preinit(void) {
  int n;
  CUcontext c;
  CUdeviceptr p;
  CHILD_CHECK(cuDriverGetVersion(&n) == CUDA_SUCCESS && n == EXPECT_DRIVER_VERSION);
  CHILD_CHECK(cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED);
  CHILD_CHECK(cuCtxGetCurrent(&c) == CUDA_ERROR_NOT_INITIALIZED);
  CHILD_CHECK(cuMemAlloc_v2(&p, 16) == CUDA_ERROR_NOT_INITIALIZED);
  CHILD_CHECK(cuInit(1) == CUDA_ERROR_INVALID_VALUE);
  CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
  CHILD_CHECK(cuDeviceGetCount(&n) == CUDA_SUCCESS && n == 1);
  CHILD_CHECK(cuCtxGetCurrent(&c) == CUDA_SUCCESS && c == NULL);
  CHILD_CHECK(cuMemAlloc_v2(&p, 16) == CUDA_ERROR_INVALID_CONTEXT);
  return 0;
}

static int child_forbid(void) {
  CHILD_CHECK(child_setup() == 0);
  CUstream s;
  CUdeviceptr p;
  unsigned char b[4] = {0};
  CHILD_CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemAlloc_v2(&p, 4) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemsetD8Async(p, 1, 4, s) == CUDA_SUCCESS); /* not a synchronisation */
  CHILD_CHECK(cuStreamSynchronize(s) == CUDA_SUCCESS);      /* still works */
  CHILD_CHECK(cuMemcpyDtoH_v2(b, p, 4) == CUDA_SUCCESS);
  CHILD_CHECK(b[3] == 1);
  CHILD_CHECK(cuMemFree_v2(p) == CUDA_SUCCESS && cuStreamDestroy_v2(s) == CUDA_SUCCESS);
  return 0; /* the stand-in turns this into 86 at exit */
}

static int child_counts(void) {
  CHILD_CHECK(child_setup() == 0);
  CUstream s;
  CUdeviceptr p[3], keep;
  CHILD_CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  for (int i = 0; i < 3; i++) CHILD_CHECK(cuMemAllocAsync(&p[i], 1024, s) == CUDA_SUCCESS);
  for (int i = 0; i < 3; i++) CHILD_CHECK(cuMemFreeAsync(p[i], s) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemAlloc_v2(&keep, 512) == CUDA_SUCCESS); /* left live on purpose */
  cublasHandle_t h;
  CHILD_CHECK(cublasCreate_v2(&h) == CUBLAS_STATUS_SUCCESS);
  float *A = dalloc(4), *B = dalloc(4), *C = dalloc(4), one = 1, zero = 0;
  CHILD_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, A, CUDA_R_32F, 1, B,
                           CUDA_R_32F, 1, &zero, C, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHILD_CHECK(cublasDestroy_v2(h) == CUBLAS_STATUS_SUCCESS);
  dfree(A);
  dfree(B);
  dfree(C);
  CHILD_CHECK(cuStreamDestroy_v2(s) == CUDA_SUCCESS);
  return 0;
}

static int child_nopools(void) {
  CHILD_CHECK(child_setup() == 0);
  int v = -1;
  CUdeviceptr p;
  CHILD_CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0) == CUDA_SUCCESS);
  CHILD_CHECK(v == 0);
  CHILD_CHECK(cuMemAllocAsync(&p, 64, NULL) == CUDA_ERROR_NOT_SUPPORTED);
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemoryPool pool;
  CHILD_CHECK(cuMemPoolCreate(&pool, &props) == CUDA_ERROR_NOT_SUPPORTED);
  CHILD_CHECK(cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_ERROR_NOT_SUPPORTED);
  CHILD_CHECK(cuMemAlloc_v2(&p, 64) == CUDA_SUCCESS && cuMemFree_v2(p) == CUDA_SUCCESS);
  return 0;
}

/* STANDIN_FRESH_STREAMS: 64 streams made and destroyed one at a time, then
 * 8 that die with their context's reset: no address comes back, and a
 * destroyed stream's handle is refused. */
static int child_fresh_streams(void) {
  CHILD_CHECK(child_setup() == 0);
  CUstream seen[72];
  int n = 0;
  for (int i = 0; i < 64; i++, n++) {
    CHILD_CHECK(cuStreamCreate(&seen[n], 0) == CUDA_SUCCESS);
    for (int j = 0; j < n; j++) CHILD_CHECK(seen[j] != seen[n]);
    CHILD_CHECK(cuStreamDestroy_v2(seen[n]) == CUDA_SUCCESS);
    CHILD_CHECK(cuStreamSynchronize(seen[n]) == CUDA_ERROR_INVALID_HANDLE);
  }
  CUdevice dev;
  CUcontext ctx;
  CHILD_CHECK(cuDeviceGet(&dev, 0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS);
  CHILD_CHECK(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  for (int i = 0; i < 8; i++, n++) {
    CHILD_CHECK(cuStreamCreate(&seen[n], 0) == CUDA_SUCCESS);
    for (int j = 0; j < n; j++) CHILD_CHECK(seen[j] != seen[n]);
  }
  CHILD_CHECK(cuDevicePrimaryCtxReset_v2(dev) == CUDA_SUCCESS);
  CHILD_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  CUstream after;
  CHILD_CHECK(cuStreamCreate(&after, 0) == CUDA_SUCCESS);
  for (int j = 0; j < n; j++) CHILD_CHECK(seen[j] != after);
  return 0;
}

static int child_memlimit(void) {
  CHILD_CHECK(child_setup() == 0);
  size_t total = 0, free_b = 0;
  CUdeviceptr a, b;
  CHILD_CHECK(cuDeviceTotalMem_v2(&total, 0) == CUDA_SUCCESS && total == 1u << 20);
  CHILD_CHECK(cuMemAlloc_v2(&a, 600000) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemAlloc_v2(&b, 600000) == CUDA_ERROR_OUT_OF_MEMORY);
  CHILD_CHECK(cuMemAllocAsync(&b, 600000, NULL) == CUDA_ERROR_OUT_OF_MEMORY);
  CHILD_CHECK(cuMemAllocAsync(&b, (1u << 20) - 600000, NULL) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && free_b == 0);
  CHILD_CHECK(cuMemFreeAsync(b, NULL) == CUDA_SUCCESS && cuMemFree_v2(a) == CUDA_SUCCESS);
  /* The default pool keeps the freed block until a synchronisation (its
   * release threshold is 0: cuda.h, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
   * the stand-in does not give it back by itself to make room. */
  CHILD_CHECK(cuMemAllocAsync(&b, 1u << 20, NULL) == CUDA_ERROR_OUT_OF_MEMORY);
  CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  CHILD_CHECK(cuMemAllocAsync(&b, 1u << 20, NULL) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemFreeAsync(b, NULL) == CUDA_SUCCESS);
  CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);

  /* A pool that keeps everything holds its memory against the limit until
   * it is trimmed; a pool's maxSize bounds its reserve. */
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool;
  CHILD_CHECK(cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS);
  cuuint64_t all = UINT64_MAX, v = 0;
  CHILD_CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &all) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemAllocFromPoolAsync(&a, 600000, pool, NULL) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemFreeAsync(a, NULL) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS);
  CHILD_CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) == CUDA_SUCCESS && v == 600000);
  CHILD_CHECK(cuMemAllocFromPoolAsync(&a, 600000, pool, NULL) == CUDA_SUCCESS); /* the kept block */
  CHILD_CHECK(cuMemFreeAsync(a, NULL) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemAllocAsync(&b, 500000, NULL) == CUDA_ERROR_OUT_OF_MEMORY);
  CHILD_CHECK(cuMemAllocFromPoolAsync(&b, 700000, pool, NULL) == CUDA_ERROR_OUT_OF_MEMORY);
  CHILD_CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && free_b == (1u << 20) - 600000);
  /* its free not yet observed: trimming keeps it (cuda.h, cuMemPoolTrimTo) */
  CHILD_CHECK(cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) == CUDA_SUCCESS && v == 600000);
  CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS && cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) == CUDA_SUCCESS && v == 0);
  CHILD_CHECK(cuMemAllocFromPoolAsync(&b, 700000, pool, NULL) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemFreeAsync(b, NULL) == CUDA_SUCCESS && cuMemPoolDestroy(pool) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && free_b == 1u << 20);
  props.maxSize = 4096;
  CHILD_CHECK(cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemAllocFromPoolAsync(&a, 4096, pool, NULL) == CUDA_SUCCESS);
  CHILD_CHECK(cuMemAllocFromPoolAsync(&b, 256, pool, NULL) == CUDA_ERROR_OUT_OF_MEMORY);
  CHILD_CHECK(cuMemFreeAsync(a, NULL) == CUDA_SUCCESS && cuMemPoolDestroy(pool) == CUDA_SUCCESS);
  return 0;
}

static int child_badcc(void) {
  int n;
  cublasHandle_t h;
  cublasLtHandle_t lt;
  CHILD_CHECK(cuInit(0) == CUDA_ERROR_INVALID_VALUE);
  CHILD_CHECK(cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED);
  CHILD_CHECK(cublasCreate_v2(&h) == CUBLAS_STATUS_NOT_INITIALIZED);
  CHILD_CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_NOT_INITIALIZED);
  return 0;
}

static int child_nokernels(void) {
  CHILD_CHECK(child_setup() == 0);
  CUmodule m;
  CUfunction f;
  CHILD_CHECK(cuModuleLoadData(&m, ptx_ok) == CUDA_SUCCESS);
  CHILD_CHECK(cuModuleGetFunction(&f, m, "saxpy") == CUDA_ERROR_NOT_FOUND);
  CHILD_CHECK(cuModuleUnload(m) == CUDA_SUCCESS);
  return 0;
}

/* What a CUDA runtime program sees: no driver calls before cuBLAS, and a
 * thread that never set a context can still run GEMMs. */
typedef struct implicit_job {
  cublasHandle_t h;
  float *A, *B, *C;
  int status;
  CUcontext ctx;
} implicit_job;

static void *implicit_thread(void *arg) {
  implicit_job *j = arg;
  float one = 1, zero = 0;
  CUcontext c = (CUcontext)1;
  if (cuCtxGetCurrent(&c) != CUDA_SUCCESS || c != NULL) return NULL; /* nothing current yet */
  /* cuBLAS binds the primary context itself, as the runtime would */
  j->status = cublasGemmEx(j->h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, j->A, CUDA_R_32F, 1,
                           j->B, CUDA_R_32F, 1, &zero, j->C, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT);
  cuCtxGetCurrent(&j->ctx);
  return NULL;
}

static int child_implicit(void) {
  cublasHandle_t h;
  cublasLtHandle_t lt;
  CUcontext cur = NULL, prim = NULL;
  CHILD_CHECK(cublasCreate_v2(&h) == CUBLAS_STATUS_SUCCESS);
  CHILD_CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS);
  CHILD_CHECK(cuDevicePrimaryCtxRetain(&prim, 0) == CUDA_SUCCESS && cur == prim);
  CHILD_CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  float a = 3, b = 5, c = 0;
  implicit_job j = {h, dalloc(4), dalloc(4), dalloc(4), -1, NULL};
  h2d(j.A, &a, 4);
  h2d(j.B, &b, 4);
  pthread_t t;
  pthread_create(&t, NULL, implicit_thread, &j);
  pthread_join(t, NULL);
  CHILD_CHECK(j.status == CUBLAS_STATUS_SUCCESS);
  CHILD_CHECK(j.ctx == prim);
  d2h(&c, j.C, 4);
  CHILD_CHECK(c == 15.0f);
  CHILD_CHECK(cublasLtDestroy(lt) == CUBLAS_STATUS_SUCCESS);
  CHILD_CHECK(cublasDestroy_v2(h) == CUBLAS_STATUS_SUCCESS);
  return 0;
}

/* Five GEMMs, of which three run on fp16 tensor cores where the device has
 * them (sg_on_fp16_tensor_cores): fp16 A/B with COMPUTE_32F and with
 * COMPUTE_16F, fp32 A/B with COMPUTE_32F_FAST_16F; not fp16 with
 * COMPUTE_32F_PEDANTIC, nor bf16. */
static int child_fp16_gemms(void) {
  CHILD_CHECK(child_setup() == 0);
  cublasHandle_t h;
  CHILD_CHECK(cublasCreate_v2(&h) == CUBLAS_STATUS_SUCCESS);
  void *A = dalloc(4), *B = dalloc(4), *C = dalloc(4);
  float one = 1, zero = 0;
  uint16_t h_one = 0x3c00, h_zero = 0;
  const struct { cudaDataType_t ab, c; cublasComputeType_t compute; const void *alpha, *beta; } g[] = {
      {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, &one, &zero},
      {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_16F, &h_one, &h_zero},
      {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16F, &one, &zero},
      {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, &one, &zero},
      {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, &one, &zero},
  };
  for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
    CHILD_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, g[i].alpha, A, g[i].ab, 1, B, g[i].ab, 1,
                             g[i].beta, C, g[i].c, 1, g[i].compute, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHILD_CHECK(cublasDestroy_v2(h) == CUBLAS_STATUS_SUCCESS);
  dfree(A);
  dfree(B);
  dfree(C);
  return 0;
}

/* Block scaling of fp8 A/B (cublasLt.h cublasLtMatmulMatrixScale_t; cuBLAS
 * docs, "Narrow precision data types usage" and its block scaling factors
 * layouts), run on the device STANDIN_CC names. The layouts here are
 * written from the docs independently of the stand-in's:
 *   VEC128_32F      (r, kb) at r + kb * outer
 *   BLK128x128_32F  (r/128, kb) at kb + (r/128) * roundup(ceil(K/128), 4)
 *   VEC32_UE8M0     128x4 tiles of 512 bytes, k-blocks first:
 *                   ((r/128) * ceil(ceil(K/32)/4) + kb/4) * 512
 *                   + (r%32)*16 + ((r%128)/32)*4 + kb%4
 * Which run: VEC128/BLK pairs but BLKxBLK on 9.0 from cuBLAS 12.9, M and N
 * multiples of 4, N of 8 where B has 1x128 scales (TransformerEngine's
 * cublaslt_gemm.cu: "Outer dimension requirement on B", observed of
 * cuBLASLt); VEC32xVEC32 on 10.0+. E8M0 per the OCP MX spec v1.0:
 * 2^(e-127), 0xFF NaN. Padding of the VEC32 tiles is filled with 0xFF here
 * (the docs ask for zeros) so a GEMM that read it would turn NaN. */
#define BK_K 256
static int64_t bk_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static size_t bk_bytes(int mode, int64_t outer) {
  if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) return (size_t)(outer * bk_cdiv(BK_K, 128)) * 4;
  if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
    return (size_t)(bk_cdiv(outer, 128) * bk_cdiv(bk_cdiv(BK_K, 128), 4) * 4) * 4;
  return (size_t)(bk_cdiv(outer, 128) * bk_cdiv(bk_cdiv(BK_K, 32), 4)) * 512;
}

/* Fill a scale tensor; scale[r][q] receives each element's scale. */
static void bk_scales(int mode, int64_t outer, unsigned char *buf, double *scale, int salt) {
  memset(buf, 0xff, bk_bytes(mode, outer));
  for (int64_t r = 0; r < outer; r++)
    for (int64_t q = 0; q < BK_K; q++) {
      double v;
      if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0) {
        int64_t kb = q / 32;
        int64_t off = ((r / 128) * bk_cdiv(bk_cdiv(BK_K, 32), 4) + kb / 4) * 512 + (r % 32) * 16 +
                      ((r % 128) / 32) * 4 + kb % 4;
        unsigned char e = (unsigned char)(124 + (r * 3 + kb + salt) % 7);
        buf[off] = e;
        v = ldexp(1.0, e - 127);
      } else if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) {
        int64_t kb = q / 128;
        float f = (float)(0.25 * (1 + (r * 5 + kb * 3 + salt) % 9)) * (kb % 2 ? -1.0f : 1.0f);
        memcpy(buf + (r + kb * outer) * 4, &f, 4);
        v = f;
      } else {
        int64_t kb = q / 128, ld = bk_cdiv(bk_cdiv(BK_K, 128), 4) * 4;
        float f = (float)(0.5 * (1 + (kb * 7 + (r / 128) + salt) % 5));
        memcpy(buf + (kb + (r / 128) * ld) * 4, &f, 4);
        v = f;
      }
      scale[r * BK_K + q] = v;
    }
}

typedef struct bk_case { int am, bm; int64_t m, n; } bk_case;

/* Run D = A^T B (A K x m, B K x n, E4M3, fp32 D) with the case's modes; on
 * success compare D with the host model. Returns the status. */
static cublasStatus_t bk_run(cublasLtHandle_t lt, const bk_case *c, int check, int nan_scale) {
  int64_t m = c->m, n = c->n, k = BK_K;
  unsigned char *hA = malloc(k * m), *hB = malloc(k * n);
  unsigned char *hsa = malloc(bk_bytes(c->am, m) + 4), *hsb = malloc(bk_bytes(c->bm, n) + 4);
  double *sa = malloc(sizeof(double) * m * k), *sb = malloc(sizeof(double) * n * k);
  float *hD = malloc(4 * m * n);
  for (int64_t i = 0; i < k * m; i++) hA[i] = (unsigned char)(rng_next() >> 56) & 0xf7; /* no NaN */
  for (int64_t i = 0; i < k * n; i++) hB[i] = (unsigned char)(rng_next() >> 56) & 0xf7;
  bk_scales(c->am, m, hsa, sa, 1);
  bk_scales(c->bm, n, hsb, sb, 2);
  if (nan_scale) hsb[0] = 0xff; /* column 0, k-block 0 of B */
  unsigned char *A = dalloc(k * m), *B = dalloc(k * n), *SA = dalloc(bk_bytes(c->am, m)),
                *SB = dalloc(bk_bytes(c->bm, n));
  float *D = dalloc(4 * m * n);
  h2d(A, hA, k * m);
  h2d(B, hB, k * n);
  h2d(SA, hsa, bk_bytes(c->am, m));
  h2d(SB, hsb, bk_bytes(c->bm, n));
  cublasLtMatmulDesc_t d;
  CHILD_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0);
  int32_t ta = CUBLAS_OP_T, am = c->am, bm = c->bm;
  const void *pa = SA, *pb = SB;
  CHILD_CHECK(!cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4));
  CHILD_CHECK(!cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, 4));
  CHILD_CHECK(!cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, 4));
  CHILD_CHECK(!cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof pa));
  CHILD_CHECK(!cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof pb));
  cublasLtMatrixLayout_t la, lb, ld;
  CHILD_CHECK(!cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k));
  CHILD_CHECK(!cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k));
  CHILD_CHECK(!cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
  cublasLtMatmulPreference_t pr;
  CHILD_CHECK(!cublasLtMatmulPreferenceCreate(&pr));
  cublasLtMatmulHeuristicResult_t hr[1];
  int found = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, ld, ld, pr, 1, hr, &found);
  float alpha = 1, beta = 0;
  cublasStatus_t s = cublasLtMatmul(lt, d, &alpha, A, la, B, lb, &beta, D, ld, D, ld, NULL, NULL, 0, 0);
  CHILD_CHECK(hs == s); /* the heuristic refuses what the matmul refuses */
  if (!s && check) {
    d2h(hD, D, 4 * m * n);
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        double acc = 0, mag = 0;
        for (int64_t q = 0; q < k; q++) {
          double t = sn_e4m3_to_f32(hA[i * k + q]) * sa[i * k + q] * sn_e4m3_to_f32(hB[j * k + q]) *
                     sb[j * k + q];
          acc += t;
          mag += fabs(t);
        }
        float got = hD[i + j * m];
        if (nan_scale && j == 0) {
          CHILD_CHECK(isnan(got));
        } else if (!(fabs(got - acc) <= 1e-5 * mag)) {
          fprintf(stderr, "modes %d x %d: D(%lld,%lld) = %g, expected %g\n", c->am, c->bm, (long long)i,
                  (long long)j, got, acc);
          s = CUBLAS_STATUS_INTERNAL_ERROR;
        }
      }
  }
  cublasLtMatmulPreferenceDestroy(pr);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(d);
  dfree(A); dfree(B); dfree(SA); dfree(SB); dfree(D);
  free(hA); free(hB); free(hsa); free(hsb); free(sa); free(sb); free(hD);
  return s;
}

/* cublasLtMatmul with a NULL computeDesc and a live handle: cuBLAS's docs
 * say INVALID_VALUE, cuBLASLt 13.1 on an H200 died of SIGSEGV
 * (docs/gpu-results.md); the stand-in dies the same way. */
static int child_null_desc(void) {
  CHILD_CHECK(child_setup() == 0);
  cublasLtHandle_t lt;
  CHILD_CHECK(cublasLtCreate(&lt) == 0);
  cublasLtMatrixLayout_t l;
  CHILD_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 8, 8) == 0);
  void *buf = dalloc(256);
  float one = 1.0f, zero = 0.0f;
  cublasStatus_t s = cublasLtMatmul(lt, NULL, &one, buf, l, buf, l, &zero, buf, l, buf, l, NULL, NULL, 0, NULL);
  fprintf(stderr, "cublasLtMatmul returned %d\n", (int)s);
  return 3;
}

static int child_block_scales(void) {
  CHILD_CHECK(child_setup() == 0);
  int major = 0, minor = 0;
  CHILD_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0) == 0 &&
              cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0) == 0);
  int cc = major * 10 + minor;
  int hopper = cc == 90 && EXPECT_CUBLAS_VERSION >= 120900, mx = cc >= 100;
  enum { V128 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, B128 = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
         V32 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, SC = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F };
  static const struct { bk_case c; int runs_on_hopper, runs_on_mx; } cases[] = {
      {{V128, V128, 8, 8}, 1, 0},   {{V128, B128, 8, 4}, 1, 0},  {{B128, V128, 136, 8}, 1, 0},
      {{B128, B128, 8, 4}, 0, 0},   {{V128, V128, 8, 6}, 0, 0},  {{V128, SC, 8, 4}, 0, 0},
      {{V128, V128, 8, 12}, 0, 0},  {{B128, V128, 136, 12}, 0, 0},
      {{V32, V32, 8, 4}, 0, 1},     {{V32, V32, 136, 4}, 0, 1},  {{V32, V128, 8, 4}, 0, 0},
  };
  rng_seed(19);
  CUstream st;
  (void)st;
  cublasLtHandle_t lt;
  CHILD_CHECK(cublasLtCreate(&lt) == 0);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int want_ok = hopper ? cases[i].runs_on_hopper : mx ? cases[i].runs_on_mx : 0;
    cublasStatus_t s = bk_run(lt, &cases[i].c, 1, 0);
    /* a per-tensor scale with a block one is INVALID_VALUE (measured on an
     * H200, cuBLAS 13.1: docs/gpu-results.md), other refusals NOT_SUPPORTED */
    cublasStatus_t no = cases[i].c.am == SC || cases[i].c.bm == SC ? CUBLAS_STATUS_INVALID_VALUE
                                                                   : CUBLAS_STATUS_NOT_SUPPORTED;
    if (s != (want_ok ? CUBLAS_STATUS_SUCCESS : no)) {
      fprintf(stderr, "cc %d case %zu (modes %d x %d, %lldx%lld): status %d\n", cc, i, cases[i].c.am,
              cases[i].c.bm, (long long)cases[i].c.m, (long long)cases[i].c.n, (int)s);
      return 1;
    }
  }
  if (mx) { /* an E8M0 0xFF scale is NaN: the outputs using it turn NaN, no others */
    bk_case c = {V32, V32, 8, 4};
    CHILD_CHECK(bk_run(lt, &c, 1, 1) == CUBLAS_STATUS_SUCCESS);
  }
  CHILD_CHECK(cublasLtDestroy(lt) == 0);
  return 0;
}

static int child_main(const char *scenario) {
  if (!strcmp(scenario, "preinit")) return child_preinit();
  if (!strcmp(scenario, "forbid")) return child_forbid();
  if (!strcmp(scenario, "counts")) return child_counts();
  if (!strcmp(scenario, "nopools")) return child_nopools();
  if (!strcmp(scenario, "fresh_streams")) return child_fresh_streams();
  if (!strcmp(scenario, "memlimit")) return child_memlimit();
  if (!strcmp(scenario, "badcc")) return child_badcc();
  if (!strcmp(scenario, "nokernels")) return child_nokernels();
  if (!strcmp(scenario, "implicit")) return child_implicit();
  if (!strcmp(scenario, "fp16_gemms")) return child_fp16_gemms();
  if (!strcmp(scenario, "block_scales")) return child_block_scales();
  if (!strcmp(scenario, "null_desc")) return child_null_desc();
  fprintf(stderr, "unknown scenario %s\n", scenario);
  return 2;
}

static void expect_child(const char *scenario, const char *const *set, const char *const *unset,
                         int status, const char *stderr_has) {
  child_result r;
  run_child(scenario, set, unset, &r);
  if (r.status != status || (stderr_has && !strstr(r.err, stderr_has))) {
    print_error("scenario %s: status %d (expected %d), stderr:\n%s\n", scenario, r.status, status,
                r.err);
    fail();
  }
}

static void test_env_controls(void **state) {
  (void)state;
  static const char *const one_dev[] = {"STANDIN_CC=7.5", NULL};
  expect_child("preinit", one_dev, NULL, 0, NULL);
  static const char *const forbid[] = {"STANDIN_FORBID_SYNC=1", NULL};
  expect_child("forbid", forbid, NULL, 86, "standin: forbidden synchronisation: cuStreamSynchronize\n");
  expect_child("forbid", forbid, NULL, 86, "standin: forbidden synchronisation: cuMemcpyDtoH_v2\n");
  expect_child("forbid", NULL, NULL, 0, NULL);
  static const char *const nopools[] = {"STANDIN_NO_POOLS=1", NULL};
  expect_child("nopools", nopools, NULL, 0, NULL);
  static const char *const fresh[] = {"STANDIN_FRESH_STREAMS=1", NULL};
  expect_child("fresh_streams", fresh, NULL, 0, NULL);
  static const char *const memlimit[] = {"STANDIN_MEM_LIMIT=1m", NULL};
  expect_child("memlimit", memlimit, NULL, 0, NULL);
  static const char *const badcc[] = {"STANDIN_CC=9", NULL};
  expect_child("badcc", badcc, NULL, 0, "standin: STANDIN_CC=\"9\": expected a comma list");
  static const char *const badcc2[] = {"STANDIN_CC=8.0,,9.0", NULL};
  expect_child("badcc", badcc2, NULL, 0, "STANDIN_CC=\"8.0,,9.0\"");
  static const char *const badflag[] = {"STANDIN_NO_POOLS=yes", NULL};
  expect_child("badcc", badflag, NULL, 0, "STANDIN_NO_POOLS=\"yes\": expected 0 or 1");
  static const char *const badlimit[] = {"STANDIN_MEM_LIMIT=12q", NULL};
  expect_child("badcc", badlimit, NULL, 0, "STANDIN_MEM_LIMIT=\"12q\"");
  static const char *const nokernels[] = {"STANDIN_KERNELS", NULL};
  expect_child("nokernels", NULL, nokernels, 0, NULL);
  static const char *const badkernels[] = {"STANDIN_KERNELS=/nonexistent/kernels.so", NULL};
  expect_child("nokernels", badkernels, NULL, 0, "STANDIN_KERNELS=/nonexistent/kernels.so");
  expect_child("implicit", NULL, NULL, 0, NULL);
}

/* The counts file a child scenario leaves, with one more setting (or
 * NULL); the file holds a stale line first, which libcuda must empty. */
static const char *child_counts_file(const char *scenario, const char *setting2) {
  char path[] = "/tmp/standin_counts_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "stale 1\n", 8), 8); /* emptied when libcuda loads */
  close(fd);
  char setting[64];
  snprintf(setting, sizeof setting, "STANDIN_COUNTS=%s", path);
  const char *const set[] = {setting, setting2, NULL};
  expect_child(scenario, set, NULL, 0, NULL);
  static char text[65536];
  fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  unlink(path);
  assert_true(n > 0);
  text[n] = 0;
  return text;
}

static void test_counts_file(void **state) {
  (void)state;
  const char *text = child_counts_file("counts", NULL);
  assert_int_equal(count_of(text, "stale"), -1);
  assert_int_equal(count_of(text, "cuMemAllocAsync"), 3);
  assert_int_equal(count_of(text, "cuMemFreeAsync"), 3);
  assert_int_equal(count_of(text, "cuStreamSynchronize"), 0);
  assert_int_equal(count_of(text, "cublasGemmEx"), 1);
  assert_int_equal(count_of(text, "cublasGemmBatchedEx"), 0);
  assert_int_equal(count_of(text, "cublasLtMatmul"), 1); /* nested in cublasGemmEx */
  assert_int_equal(count_of(text, "cublasLtMatmulDescCreate"), 1);
  assert_int_equal(count_of(text, "cublasLtMatmulDescDestroy"), 1);
  assert_int_equal(count_of(text, "standin_forbidden_syncs"), 0);
  assert_int_equal(count_of(text, "standin_live_allocations"), 1);
  assert_int_equal(count_of(text, "standin_live_bytes"), 512);
  /* three blocks mapped by the default pool, none given back: no
   * synchronisation followed the frees */
  assert_int_equal(count_of(text, "standin_pool_maps"), 3);
  assert_int_equal(count_of(text, "standin_pool_unmaps"), 0);
  assert_int_equal(count_of(text, "cuMemPoolTrimTo"), 0);
}

/* ------------------------------------------------------------------------ */
/* cuBLAS: handles. */
static void test_cublas_handle(void **state) {
  (void)state;
  float one = 1;
  cudaStream_t st = (cudaStream_t)1;
  cublasPointerMode_t pm;
  cublasMath_t mm;
  /* a NULL handle is NOT_INITIALIZED before anything else is looked at */
  assert_int_equal(cublasGemmEx(NULL, CUBLAS_OP_N, CUBLAS_OP_N, -1, -1, -1, &one, NULL, CUDA_R_32F,
                                0, NULL, CUDA_R_32F, 0, &one, NULL, CUDA_R_32F, 0, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasGemmStridedBatchedEx_64(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, NULL,
                                                 CUDA_R_32F, 1, 0, NULL, CUDA_R_32F, 1, 0, &one,
                                                 NULL, CUDA_R_32F, 1, 0, -5, CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasSgemm_v2(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, NULL, 1, NULL, 1,
                                  &one, NULL, 1),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasDestroy_v2(NULL), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasSetStream_v2(NULL, NULL), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasGetStream_v2(NULL, &st), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasSetMathMode(NULL, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasGetPointerMode_v2(NULL, &pm), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasCreate_v2(NULL), CUBLAS_STATUS_INVALID_VALUE);

  int v = 0;
  BL_OK(cublasGetVersion_v2(NULL, &v)); /* needs no handle */
  assert_int_equal(v, EXPECT_CUBLAS_VERSION);
  BL_OK(cublasGetProperty(MAJOR_VERSION, &v));
  assert_int_equal(v, EXPECT_CUBLAS_VERSION / 10000);
  BL_OK(cublasGetProperty(MINOR_VERSION, &v));
  assert_int_equal(v, EXPECT_CUBLAS_VERSION / 100 % 100);
  BL_OK(cublasGetProperty(PATCH_LEVEL, &v));
  assert_int_equal(v, EXPECT_CUBLAS_VERSION % 100);
  assert_int_equal(cublasGetProperty((libraryPropertyType)7, &v), CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(cublasGetVersion_v2(NULL, &v)); /* one release: cuBLAS's version is cuBLASLt's */
  assert_int_equal((size_t)v, cublasLtGetVersion());
  assert_string_equal(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  assert_string_equal(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE),
                      "an unsupported value or parameter was passed to the function");
  assert_string_equal(cublasGetStatusName((cublasStatus_t)2), "unrecognized status");

  cublasHandle_t h;
  BL_OK(cublasCreate_v2(&h));
  BL_OK(cublasGetVersion_v2(h, &v));
  assert_int_equal(v, EXPECT_CUBLAS_VERSION);
  BL_OK(cublasGetStream_v2(h, &st));
  assert_null(st);
  CUstream s;
  CU_OK(cuStreamCreate(&s, 0));
  BL_OK(cublasSetStream_v2(h, s));
  BL_OK(cublasGetStream_v2(h, &st));
  assert_ptr_equal(st, s);
  BL_OK(cublasGetPointerMode_v2(h, &pm));
  assert_int_equal(pm, CUBLAS_POINTER_MODE_HOST);
  BL_OK(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE));
  BL_OK(cublasGetPointerMode_v2(h, &pm));
  assert_int_equal(pm, CUBLAS_POINTER_MODE_DEVICE);
  assert_int_equal(cublasSetPointerMode_v2(h, (cublasPointerMode_t)2), CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(cublasGetMathMode(h, &mm));
  assert_int_equal(mm, CUBLAS_DEFAULT_MATH);
  BL_OK(cublasSetMathMode(h, (cublasMath_t)(CUBLAS_TF32_TENSOR_OP_MATH |
                                            CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  BL_OK(cublasGetMathMode(h, &mm));
  assert_int_equal(mm, CUBLAS_TF32_TENSOR_OP_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  assert_int_equal(cublasSetMathMode(h, (cublasMath_t)5), CUBLAS_STATUS_INVALID_VALUE);
  void *ws = dalloc(4096);
  unsigned char host_ws[512];
  BL_OK(cublasSetWorkspace_v2(h, ws, 4096));
  assert_int_equal(cublasSetWorkspace_v2(h, (char *)ws + 16, 1024), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasSetWorkspace_v2(h, ws, 8192), CUBLAS_STATUS_INVALID_VALUE); /* past the end */
  assert_int_equal(cublasSetWorkspace_v2(h, NULL, 1024), CUBLAS_STATUS_INVALID_VALUE);
  if ((uintptr_t)host_ws % 256 == 0)
    assert_int_equal(cublasSetWorkspace_v2(h, host_ws, 256), CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(cublasSetWorkspace_v2(h, NULL, 0));
  BL_OK(cublasDestroy_v2(h));
  CU_OK(cuStreamDestroy_v2(s));
  dfree(ws);
}

/* ------------------------------------------------------------------------ */
/* cuBLAS: the GemmEx family. */
typedef struct gemm_cfg {
  cudaDataType_t ab, c;
  cublasComputeType_t compute;
  double eps_acc; /* what the accumulation may lose per term, on any GPU */
} gemm_cfg;

static const gemm_cfg gemm_cfgs[] = {
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0x1p-23},
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, 0x1p-23},
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 0x1p-10},
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF, 0x1p-7},
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16F, 0x1p-10},
    {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0x1p-23},
    {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0x1p-23},
    {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F_PEDANTIC, 0x1p-23},
    {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 0x1p-23},
    {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0x1p-23},
    {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_16F, 0x1p-10},
    {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, 0x1p-52},
};

static double eps_of(cudaDataType_t t) {
  switch (t) {
  case CUDA_R_64F: return 0x1p-53;
  case CUDA_R_32F: return 0x1p-24;
  case CUDA_R_16F: return 0x1p-11;
  default: return 0x1p-8;
  }
}

static cudaDataType_t scale_type_of(cublasComputeType_t c) {
  return c == CUBLAS_COMPUTE_16F ? CUDA_R_16F : c == CUBLAS_COMPUTE_64F ? CUDA_R_64F : CUDA_R_32F;
}

static void tm_clone_host(const tmat *m, tmat *out) {
  *out = *m;
  out->dev = NULL;
  out->host = malloc(m->bytes);
  assert_non_null(out->host);
  memcpy(out->host, m->host, m->bytes);
}

enum { API_GEMMEX, API_GEMMEX_64, API_STRIDED, API_STRIDED_64, API_BATCHED, API_BATCHED_64 };

/* One GEMM through one entry point: m x n x k, batch members, A/B/C with
 * padded leading dimensions, gaps between strided members and B broadcast
 * (stride 0) for the strided forms; checked against the reference. */
static void gemm_case(cublasHandle_t h, const gemm_cfg *cfg, int api, int ta, int tb, int64_t m,
                      int64_t n, int64_t k, double alpha, double beta, int device_scalars) {
  int64_t batch = api == API_GEMMEX || api == API_GEMMEX_64 ? 1 : 3;
  int strided = api == API_STRIDED || api == API_STRIDED_64;
  int64_t ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  int64_t br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  int64_t lda = ar + 3, ldb = br + 1, ldc = m + 2;
  tmat A, B, C, C0;
  tm_init(&A, cfg->ab, 0, ar, ac, lda, batch, lda * ac + 7);
  tm_init(&B, cfg->ab, 0, br, bc, ldb, strided ? 1 : batch, ldb * bc); /* strided: broadcast */
  tm_init(&C, cfg->c, 0, m, n, ldc, batch, ldc * n + 5);
  tm_fill(&A, -1, 1);
  tm_fill(&B, -1, 1);
  if (beta != 0) tm_fill(&C, -1, 1); /* else C stays NaN: it must not be read */
  tm_upload(&A);
  tm_upload(&B);
  tm_upload(&C);
  tm_clone_host(&C, &C0);

  cudaDataType_t st = scale_type_of(cfg->compute);
  scalar al = make_scalar(st, alpha), be = make_scalar(st, beta);
  const void *pa = &al, *pb = &be;
  void *dscal = NULL;
  if (device_scalars) {
    dscal = dalloc(2 * sizeof(scalar));
    h2d(dscal, &al, sizeof al);
    h2d((char *)dscal + sizeof(scalar), &be, sizeof be);
    pa = dscal;
    pb = (char *)dscal + sizeof(scalar);
    BL_OK(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE));
  }
  /* pointer arrays (device memory) for the batched forms */
  const void **ha = calloc(batch, sizeof *ha), **hb = calloc(batch, sizeof *hb);
  void **hc = calloc(batch, sizeof *hc);
  for (int64_t b = 0; b < batch; b++) {
    ha[b] = (char *)A.dev + b * A.stride * A.esize;
    hb[b] = (char *)B.dev + b * B.stride * B.esize;
    hc[b] = (char *)C.dev + b * C.stride * C.esize;
  }
  void *da = dalloc(batch * sizeof(void *)), *db = dalloc(batch * sizeof(void *)),
       *dc = dalloc(batch * sizeof(void *));
  h2d(da, ha, batch * sizeof(void *));
  h2d(db, hb, batch * sizeof(void *));
  h2d(dc, hc, batch * sizeof(void *));

  unsigned long long before = lt_calls();
  cublasStatus_t s = CUBLAS_STATUS_INTERNAL_ERROR;
  cublasGemmAlgo_t algo = cfg->ab == CUDA_R_32F ? CUBLAS_GEMM_DEFAULT : CUBLAS_GEMM_DEFAULT_TENSOR_OP;
  switch (api) {
  case API_GEMMEX:
    s = cublasGemmEx(h, ta, tb, (int)m, (int)n, (int)k, pa, A.dev, A.type, (int)lda, B.dev, B.type,
                     (int)ldb, pb, C.dev, C.type, (int)ldc, cfg->compute, algo);
    break;
  case API_GEMMEX_64:
    s = cublasGemmEx_64(h, ta, tb, m, n, k, pa, A.dev, A.type, lda, B.dev, B.type, ldb, pb, C.dev,
                        C.type, ldc, cfg->compute, algo);
    break;
  case API_STRIDED:
    s = cublasGemmStridedBatchedEx(h, ta, tb, (int)m, (int)n, (int)k, pa, A.dev, A.type, (int)lda,
                                   A.stride, B.dev, B.type, (int)ldb, 0, pb, C.dev, C.type,
                                   (int)ldc, C.stride, (int)batch, cfg->compute, algo);
    break;
  case API_STRIDED_64:
    s = cublasGemmStridedBatchedEx_64(h, ta, tb, m, n, k, pa, A.dev, A.type, lda, A.stride, B.dev,
                                      B.type, ldb, 0, pb, C.dev, C.type, ldc, C.stride, batch,
                                      cfg->compute, algo);
    break;
  case API_BATCHED:
    s = cublasGemmBatchedEx(h, ta, tb, (int)m, (int)n, (int)k, pa, (const void *const *)da, A.type,
                            (int)lda, (const void *const *)db, B.type, (int)ldb, pb,
                            (void *const *)dc, C.type, (int)ldc, (int)batch, cfg->compute, algo);
    break;
  case API_BATCHED_64:
    s = cublasGemmBatchedEx_64(h, ta, tb, m, n, k, pa, (const void *const *)da, A.type, lda,
                               (const void *const *)db, B.type, ldb, pb, (void *const *)dc, C.type,
                               ldc, batch, cfg->compute, algo);
    break;
  }
  assert_int_equal(s, CUBLAS_STATUS_SUCCESS);
  /* every GemmEx form reaches cublasLtMatmul through the PLT: once, or once
   * per member for the pointer-array forms */
  unsigned long long want = m && n ? (api == API_BATCHED || api == API_BATCHED_64 ? batch : 1) : 0;
  assert_int_equal(lt_calls() - before, want);
  tm_download(&C);
  ref_gemm g = {ta, tb, m, n, k, alpha, beta, 1.0, &A, &B, &C0, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0,
                round_none, cfg->eps_acc, eps_of(cfg->c), 0};
  /* the reference reads alpha/beta as the library does: in the scale type */
  g.alpha = st == CUDA_R_16F ? sn_f16_to_f32(al.h) : st == CUDA_R_64F ? al.d : al.f;
  g.beta = st == CUDA_R_16F ? sn_f16_to_f32(be.h) : st == CUDA_R_64F ? be.d : be.f;
  check_gemm(&g, &C, batch);
  if (device_scalars) {
    BL_OK(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_HOST));
    dfree(dscal);
  }
  dfree(da);
  dfree(db);
  dfree(dc);
  free(ha);
  free(hb);
  free(hc);
  free(C0.host);
  tm_free(&A);
  tm_free(&B);
  tm_free(&C);
}

static const int trans_pairs[][2] = {{CUBLAS_OP_N, CUBLAS_OP_N}, {CUBLAS_OP_N, CUBLAS_OP_T},
                                     {CUBLAS_OP_T, CUBLAS_OP_N}, {CUBLAS_OP_T, CUBLAS_OP_T},
                                     {CUBLAS_OP_C, CUBLAS_OP_N}};

static void test_gemmex_numerics(void **state) {
  (void)state;
  cublasHandle_t h;
  BL_OK(cublasCreate_v2(&h));
  rng_seed(1);
  for (size_t c = 0; c < sizeof gemm_cfgs / sizeof gemm_cfgs[0]; c++)
    for (size_t t = 0; t < sizeof trans_pairs / sizeof trans_pairs[0]; t++) {
      gemm_case(h, &gemm_cfgs[c], API_GEMMEX, trans_pairs[t][0], trans_pairs[t][1], 7, 5, 9, 1.25, 0, 0);
      gemm_case(h, &gemm_cfgs[c], API_GEMMEX_64, trans_pairs[t][0], trans_pairs[t][1], 6, 4, 11, -0.5,
                0.75, t == 2);
    }
  /* k == 0: C = beta C; m or n == 0: nothing at all */
  gemm_case(h, &gemm_cfgs[0], API_GEMMEX, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 0, 1.0, 0.5, 0);
  gemm_case(h, &gemm_cfgs[5], API_GEMMEX, CUBLAS_OP_T, CUBLAS_OP_N, 4, 3, 0, 1.0, 0.0, 0);
  gemm_case(h, &gemm_cfgs[5], API_GEMMEX, CUBLAS_OP_N, CUBLAS_OP_N, 0, 3, 5, 1.0, 0.0, 0);
  gemm_case(h, &gemm_cfgs[5], API_GEMMEX, CUBLAS_OP_N, CUBLAS_OP_N, 3, 0, 5, 1.0, 0.0, 0);
  /* a stream of the handle's device */
  CUstream s;
  CU_OK(cuStreamCreate(&s, 0));
  BL_OK(cublasSetStream_v2(h, s));
  gemm_case(h, &gemm_cfgs[6], API_GEMMEX, CUBLAS_OP_T, CUBLAS_OP_N, 33, 17, 40, 1.0, 1.0, 0);
  BL_OK(cublasSetStream_v2(h, NULL));
  CU_OK(cuStreamDestroy_v2(s));
  BL_OK(cublasDestroy_v2(h));
}

static void test_gemmex_batched(void **state) {
  (void)state;
  cublasHandle_t h;
  BL_OK(cublasCreate_v2(&h));
  rng_seed(2);
  static const int apis[] = {API_STRIDED, API_STRIDED_64, API_BATCHED, API_BATCHED_64};
  static const size_t cfgs[] = {0, 5, 9, 11};
  for (size_t a = 0; a < 4; a++)
    for (size_t c = 0; c < 4; c++)
      for (size_t t = 0; t < 3; t++)
        gemm_case(h, &gemm_cfgs[cfgs[c]], apis[a], trans_pairs[t][0], trans_pairs[t][1], 5, 6, 7,
                  0.5, t == 1 ? 0.25 : 0, a == 3);
  /* batchCount 0 does nothing */
  float one = 1;
  unsigned long long before = lt_calls();
  BL_OK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, NULL, CUDA_R_32F, 2, 4,
                                   NULL, CUDA_R_32F, 2, 4, &one, NULL, CUDA_R_32F, 2, 4, 0,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  assert_int_equal(lt_calls(), before);
  /* pointer arrays must be device memory */
  float *m4 = dalloc(16);
  const void *harr[1] = {m4};
  void *harrc[1] = {m4};
  assert_int_equal(cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, harr, CUDA_R_32F, 2,
                                       harr, CUDA_R_32F, 2, &one, harrc, CUDA_R_32F, 2, 1,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   CUBLAS_STATUS_EXECUTION_FAILED);
  dfree(m4);
  BL_OK(cublasDestroy_v2(h));
}

static void test_gemmex_errors(void **state) {
  (void)state;
  cublasHandle_t h;
  BL_OK(cublasCreate_v2(&h));
  float one = 1;
  float *A = dalloc(4096), *B = dalloc(4096), *C = dalloc(4096);
  const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  const cudaDataType_t F = CUDA_R_32F;
  const cublasComputeType_t C32 = CUBLAS_COMPUTE_32F;
  const cublasGemmAlgo_t D = CUBLAS_GEMM_DEFAULT;
#define GEMM(ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, comp, algo)                              \
  cublasGemmEx(h, ta, tb, m, n, k, &one, A, at, lda, B, bt, ldb, &one, C, ct, ldc, comp, algo)
  unsigned long long before = lt_calls();
  assert_int_equal(GEMM((cublasOperation_t)3, N, 2, 2, 2, F, 2, F, 2, F, 2, C32, D), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(GEMM(N, (cublasOperation_t)7, 2, 2, 2, F, 2, F, 2, F, 2, C32, D), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(GEMM(N, N, -1, 2, 2, F, 2, F, 2, F, 2, C32, D), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(GEMM(N, N, 2, -1, 2, F, 2, F, 2, F, 2, C32, D), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(GEMM(N, N, 2, 2, -1, F, 2, F, 2, F, 2, C32, D), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(GEMM(N, N, 4, 2, 3, F, 3, F, 3, F, 4, C32, D), CUBLAS_STATUS_INVALID_VALUE); /* lda < m */
  assert_int_equal(GEMM(T, N, 4, 2, 3, F, 2, F, 3, F, 4, C32, D), CUBLAS_STATUS_INVALID_VALUE); /* lda < k */
  assert_int_equal(GEMM(N, N, 4, 2, 3, F, 4, F, 2, F, 4, C32, D), CUBLAS_STATUS_INVALID_VALUE); /* ldb < k */
  assert_int_equal(GEMM(N, T, 4, 2, 3, F, 4, F, 1, F, 4, C32, D), CUBLAS_STATUS_INVALID_VALUE); /* ldb < n */
  assert_int_equal(GEMM(N, N, 4, 2, 3, F, 4, F, 3, F, 3, C32, D), CUBLAS_STATUS_INVALID_VALUE); /* ldc < m */
  assert_int_equal(GEMM(N, N, 0, 2, 3, F, 0, F, 3, F, 0, C32, D), CUBLAS_STATUS_INVALID_VALUE); /* ld >= 1 */
  assert_int_equal(cublasGemmStridedBatchedEx(h, N, N, 2, 2, 2, &one, A, F, 2, 4, B, F, 2, 4, &one, C,
                                              F, 2, 4, -1, C32, D),
                   CUBLAS_STATUS_INVALID_VALUE);
  /* combinations cuBLAS does not have */
  assert_int_equal(GEMM(N, N, 2, 2, 2, CUDA_R_16BF, 2, CUDA_R_16F, 2, F, 2, C32, D), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM(N, N, 2, 2, 2, CUDA_R_16BF, 2, CUDA_R_16BF, 2, CUDA_R_16F, 2, C32, D),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM(N, N, 2, 2, 2, CUDA_R_16BF, 2, CUDA_R_16BF, 2, CUDA_R_16BF, 2,
                        CUBLAS_COMPUTE_32F_FAST_TF32, D),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM(N, N, 2, 2, 2, CUDA_R_16BF, 2, CUDA_R_16BF, 2, CUDA_R_16BF, 2, CUBLAS_COMPUTE_16F, D),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM(N, N, 2, 2, 2, CUDA_R_16F, 2, CUDA_R_16F, 2, F, 2, CUBLAS_COMPUTE_16F, D),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM(N, N, 2, 2, 2, F, 2, F, 2, F, 2, CUBLAS_COMPUTE_64F, D), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM(T, N, 2, 2, 16, CUDA_R_8F_E4M3, 16, CUDA_R_8F_E4M3, 16, F, 2, C32, D),
                   CUBLAS_STATUS_NOT_SUPPORTED); /* fp8 is cuBLASLt only */
  assert_int_equal(GEMM(N, N, 2, 2, 2, CUDA_R_8I, 2, CUDA_R_8I, 2, CUDA_R_32I, 2, CUBLAS_COMPUTE_32I, D),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM(N, N, 2, 2, 2, F, 2, F, 2, F, 2, C32, (cublasGemmAlgo_t)12345), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(lt_calls(), before); /* rejected before cuBLASLt */
  /* memory a GPU could not use */
  float host[16];
  assert_int_equal(cublasGemmEx(h, N, N, 2, 2, 2, &one, host, F, 2, B, F, 2, &one, C, F, 2, C32, D),
                   CUBLAS_STATUS_EXECUTION_FAILED);
  assert_int_equal(cublasGemmEx(h, N, N, 64, 64, 64, &one, A, F, 64, B, F, 64, &one, C, F, 64, C32, D),
                   CUBLAS_STATUS_EXECUTION_FAILED); /* 16 KiB operands in 4 KiB buffers */
  assert_int_equal(cublasGemmEx(h, N, N, 2, 2, 2, A, A, F, 2, B, F, 2, &one, C, F, 2, C32, D),
                   CUBLAS_STATUS_EXECUTION_FAILED); /* host pointer mode, device alpha */
#undef GEMM
  dfree(A);
  dfree(B);
  dfree(C);
  BL_OK(cublasDestroy_v2(h));
}

static void test_sgemm(void **state) {
  (void)state;
  cublasHandle_t h;
  BL_OK(cublasCreate_v2(&h));
  rng_seed(3);
  int64_t m = 9, n = 7, k = 13;
  for (int t = 0; t < 4; t++) {
    int ta = trans_pairs[t][0], tb = trans_pairs[t][1];
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    tmat A, B, C, C0;
    tm_init(&A, CUDA_R_32F, 0, ar, ac, ar + 1, 2, (ar + 1) * ac + 3);
    tm_init(&B, CUDA_R_32F, 0, br, bc, br + 2, 2, (br + 2) * bc);
    tm_init(&C, CUDA_R_32F, 0, m, n, m + 1, 2, (m + 1) * n + 1);
    tm_fill(&A, -1, 1);
    tm_fill(&B, -1, 1);
    tm_fill(&C, -1, 1);
    tm_upload(&A);
    tm_upload(&B);
    tm_upload(&C);
    tm_clone_host(&C, &C0);
    float alpha = 0.75f, beta = -1.5f;
    unsigned long long before = lt_calls();
    if (t % 2)
      BL_OK(cublasSgemmStridedBatched(h, ta, tb, (int)m, (int)n, (int)k, &alpha, A.dev, (int)A.ld,
                                      A.stride, B.dev, (int)B.ld, B.stride, &beta, C.dev, (int)C.ld,
                                      C.stride, 2));
    else
      for (int b = 0; b < 2; b++)
        BL_OK(cublasSgemm_v2(h, ta, tb, (int)m, (int)n, (int)k, &alpha,
                             (float *)A.dev + b * A.stride, (int)A.ld, (float *)B.dev + b * B.stride,
                             (int)B.ld, &beta, (float *)C.dev + b * C.stride, (int)C.ld));
    assert_int_equal(lt_calls(), before); /* Sgemm computes without cuBLASLt */
    tm_download(&C);
    ref_gemm g = {ta, tb, m, n, k, alpha, beta, 1.0, &A, &B, &C0, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0,
                  round_none, 0x1p-23, 0x1p-24, 0};
    check_gemm(&g, &C, 2);
    free(C0.host);
    tm_free(&A);
    tm_free(&B);
    tm_free(&C);
  }
  /* Stand-in contract: with TF32 math an fp32 GEMM takes the least precise
   * result allowed, inputs rounded to tf32 (a GPU may do better). */
  float a = 1.0f + 0x1p-12f, b = 1.0f, c = 0, one = 1, zero = 0;
  float *da = dalloc(4), *db = dalloc(4), *dc = dalloc(4);
  h2d(da, &a, 4);
  h2d(db, &b, 4);
  BL_OK(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, 1, db, 1, &zero, dc, 1));
  d2h(&c, dc, 4);
  assert_true(c == a);
  BL_OK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
  BL_OK(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, 1, db, 1, &zero, dc, 1));
  d2h(&c, dc, 4);
  assert_true(c == 1.0f);
  BL_OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, db, CUDA_R_32F, 1,
                     &zero, dc, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  d2h(&c, dc, 4);
  assert_true(c == 1.0f);
  BL_OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, db, CUDA_R_32F, 1,
                     &zero, dc, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
  d2h(&c, dc, 4);
  assert_true(c == a);
  dfree(da);
  dfree(db);
  dfree(dc);
  BL_OK(cublasDestroy_v2(h));
}

/* ------------------------------------------------------------------------ */
/* cuBLASLt: descriptors. Sizes and defaults are the real library's. */
typedef struct attr_case {
  int attr;
  size_t size;
  uint64_t deflt; /* little-endian bytes of the default */
} attr_case;

static void attr_roundtrip(const attr_case *cases, size_t n, void *obj,
                           cublasStatus_t (*set)(void *, int, const void *, size_t),
                           cublasStatus_t (*get)(void *, int, void *, size_t, size_t *)) {
  for (size_t i = 0; i < n; i++) {
    const attr_case *c = &cases[i];
    size_t written = 999;
    unsigned char buf[16], val[16];
    BL_OK(get(obj, c->attr, NULL, 0, &written)); /* size query */
    assert_int_equal(written, c->size);
    memset(buf, 0xAB, sizeof buf);
    BL_OK(get(obj, c->attr, buf, c->size, &written));
    assert_int_equal(written, c->size);
    uint64_t d = 0;
    memcpy(&d, buf, c->size);
    if (d != c->deflt) {
      print_error("attribute %d default 0x%llx, expected 0x%llx\n", c->attr, (unsigned long long)d,
                  (unsigned long long)c->deflt);
      fail();
    }
    for (size_t b = 0; b < c->size; b++) val[b] = (unsigned char)(0x11 * (b + 1) + c->attr);
    BL_OK(set(obj, c->attr, val, c->size));
    memset(buf, 0, sizeof buf);
    BL_OK(get(obj, c->attr, buf, c->size, NULL));
    assert_memory_equal(buf, val, c->size);
    assert_int_equal(set(obj, c->attr, val, c->size + 1), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(set(obj, c->attr, val, c->size - 1), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(set(obj, c->attr, NULL, c->size), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(get(obj, c->attr, buf, c->size + 1, &written), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(get(obj, c->attr, NULL, c->size, &written), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(get(obj, c->attr, NULL, 0, NULL), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(get(NULL, c->attr, buf, c->size, &written), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(set(NULL, c->attr, val, c->size), CUBLAS_STATUS_INVALID_VALUE);
  }
}

static cublasStatus_t desc_set(void *o, int a, const void *b, size_t n) {
  return cublasLtMatmulDescSetAttribute(o, a, b, n);
}
static cublasStatus_t desc_get(void *o, int a, void *b, size_t n, size_t *w) {
  return cublasLtMatmulDescGetAttribute(o, a, b, n, w);
}
static cublasStatus_t layout_set(void *o, int a, const void *b, size_t n) {
  return cublasLtMatrixLayoutSetAttribute(o, a, b, n);
}
static cublasStatus_t layout_get(void *o, int a, void *b, size_t n, size_t *w) {
  return cublasLtMatrixLayoutGetAttribute(o, a, b, n, w);
}
static cublasStatus_t pref_set(void *o, int a, const void *b, size_t n) {
  return cublasLtMatmulPreferenceSetAttribute(o, a, b, n);
}
static cublasStatus_t pref_get(void *o, int a, void *b, size_t n, size_t *w) {
  return cublasLtMatmulPreferenceGetAttribute(o, a, b, n, w);
}

static void test_lt_descriptors(void **state) {
  (void)state;
  static const attr_case desc_cases[] = {
      {CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, 4, CUBLAS_COMPUTE_32F},
      {CUBLASLT_MATMUL_DESC_SCALE_TYPE, 4, CUDA_R_32F},
      {CUBLASLT_MATMUL_DESC_POINTER_MODE, 4, 0},
      {CUBLASLT_MATMUL_DESC_TRANSA, 4, 0},
      {CUBLASLT_MATMUL_DESC_TRANSB, 4, 0},
      {CUBLASLT_MATMUL_DESC_TRANSC, 4, 0},
      {CUBLASLT_MATMUL_DESC_FILL_MODE, 4, CUBLAS_FILL_MODE_FULL},
      {CUBLASLT_MATMUL_DESC_EPILOGUE, 4, CUBLASLT_EPILOGUE_DEFAULT},
      {CUBLASLT_MATMUL_DESC_BIAS_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, 8, 0},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, 8, 0},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, 8, 0},
      {CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, 8, 0},
      {CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, 4, 0},
      {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, 4, 0xffffffffu},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_FAST_ACCUM, 1, 0},
      {CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, 4, 0xffffffffu},
      {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, 4, 0},
      {CUBLASLT_MATMUL_DESC_B_SCALE_MODE, 4, 0},
      {CUBLASLT_MATMUL_DESC_C_SCALE_MODE, 4, 0},
      {CUBLASLT_MATMUL_DESC_D_SCALE_MODE, 4, 0},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, 4, 0},
      {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, 8, 0},
      {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, 4, 0},
      {16, 4, 0}, /* undeclared; the toolkit's cuBLASLt 13 and cuBLAS 12.9.3 take it */
#if STANDIN_CUDA_MAJOR == 12
      /* cuBLAS 12's cublasLt.h: ATOMIC_SYNC_NUM_CHUNKS_D_ROWS, _D_COLS,
       * ATOMIC_SYNC_IN_COUNTERS_POINTER, _OUT_COUNTERS_POINTER */
      {27, 4, 0},
      {28, 4, 0},
      {29, 8, 0},
      {30, 8, 0},
      {38, 4, 0}, /* cuBLAS 12.9.3: undeclared, 4 bytes */
#else
      {CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, 8, 0},
#endif
  };
  cublasLtMatmulDesc_t d;
  BL_OK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  attr_roundtrip(desc_cases, sizeof desc_cases / sizeof desc_cases[0], d, desc_set, desc_get);
  int32_t v = 1;
  size_t w;
  assert_int_equal(cublasLtMatmulDescSetAttribute(d, (cublasLtMatmulDescAttributes_t)9, &v, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, (cublasLtMatmulDescAttributes_t)100, &v, 4, &w),
                   CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(cublasLtMatmulDescDestroy(d));
  BL_OK(cublasLtMatmulDescDestroy(NULL));
  assert_int_equal(cublasLtMatmulDescCreate(NULL, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_INVALID_VALUE);
  /* in-place initialisation, as cublasLtMatmulDescInit does */
  cublasLtMatmulDescOpaque_t od;
  assert_int_equal(cublasLtMatmulDescInit_internal(&od, 8, CUBLAS_COMPUTE_64F, CUDA_R_64F),
                   CUBLAS_STATUS_ALLOC_FAILED);
  BL_OK(cublasLtMatmulDescInit(&od, CUBLAS_COMPUTE_64F, CUDA_R_64F));
  BL_OK(cublasLtMatmulDescGetAttribute(&od, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &v, 4, &w));
  assert_int_equal(v, CUBLAS_COMPUTE_64F);

  static const attr_case layout_cases[] = {
      {CUBLASLT_MATRIX_LAYOUT_TYPE, 4, CUDA_R_16BF},
      {CUBLASLT_MATRIX_LAYOUT_ORDER, 4, CUBLASLT_ORDER_COL},
      {CUBLASLT_MATRIX_LAYOUT_ROWS, 8, 3},
      {CUBLASLT_MATRIX_LAYOUT_COLS, 8, 5},
      {CUBLASLT_MATRIX_LAYOUT_LD, 8, 7},
      {CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 4, 1},
      {CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 8, 0},
      {CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, 8, 0},
      {CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, 4, 0},
  };
  cublasLtMatrixLayout_t l;
  BL_OK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 3, 5, 7));
  attr_roundtrip(layout_cases, sizeof layout_cases / sizeof layout_cases[0], l, layout_set, layout_get);
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(l, (cublasLtMatrixLayoutAttribute_t)9, &v, 4, &w),
                   CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(cublasLtMatrixLayoutDestroy(l));
  BL_OK(cublasLtMatrixLayoutDestroy(NULL));
  /* creation judges nothing: ld < rows is only refused by cublasLtMatmul */
  BL_OK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 5, 2));
  BL_OK(cublasLtMatrixLayoutDestroy(l));
  cublasLtMatrixLayoutOpaque_t ol;
  assert_int_equal(cublasLtMatrixLayoutInit_internal(&ol, 8, CUDA_R_32F, 1, 1, 1), CUBLAS_STATUS_ALLOC_FAILED);
  BL_OK(cublasLtMatrixLayoutInit(&ol, CUDA_R_32F, 4, 2, 4));

  static const attr_case pref_cases[] = {
      {CUBLASLT_MATMUL_PREF_SEARCH_MODE, 4, 0},
      {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, 8, 0},
      {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, 4, CUBLASLT_REDUCTION_SCHEME_MASK},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 4, 256},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, 4, 256},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, 4, 256},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, 4, 256},
      {CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, 4, 0},
      {CUBLASLT_MATMUL_PREF_IMPL_MASK, 8, ~0ull},
  };
  cublasLtMatmulPreference_t p;
  BL_OK(cublasLtMatmulPreferenceCreate(&p));
  attr_roundtrip(pref_cases, sizeof pref_cases / sizeof pref_cases[0], p, pref_set, pref_get);
  BL_OK(cublasLtMatmulPreferenceDestroy(p));

  assert_int_equal(cublasLtGetVersion(), EXPECT_CUBLAS_VERSION);
  assert_string_equal(cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  int prop;
  BL_OK(cublasLtGetProperty(MAJOR_VERSION, &prop));
  assert_int_equal(prop, EXPECT_CUBLAS_VERSION / 10000);
  assert_int_equal(cublasLtDestroy(NULL), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtCreate(NULL), CUBLAS_STATUS_INVALID_VALUE);
}

/* ------------------------------------------------------------------------ */
/* cuBLASLt: matmul. */
static cublasLtMatrixLayout_t lt_layout_of(const tmat *m, int32_t batch) {
  cublasLtMatrixLayout_t l;
  BL_OK(cublasLtMatrixLayoutCreate(&l, m->type, (uint64_t)m->rows, (uint64_t)m->cols, m->ld));
  if (m->row_major) {
    int32_t o = CUBLASLT_ORDER_ROW;
    BL_OK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &o, sizeof o));
  }
  if (batch > 1) {
    int64_t stride = m->batch == 1 ? 0 : m->stride; /* one matrix for all: stride 0 */
    BL_OK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    BL_OK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                           sizeof stride));
  }
  return l;
}

static void desc_set_i32(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, int32_t v) {
  BL_OK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}
static void desc_set_ptr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *p) {
  BL_OK(cublasLtMatmulDescSetAttribute(d, a, &p, sizeof p));
}

typedef struct lt_case {
  cudaDataType_t ab, cd;
  int ta, tb;
  int a_row, b_row, cd_row;    /* row-major operands */
  int64_t m, n, k, batch;
  double alpha, beta;
  int epilogue;
  cudaDataType_t bias_type;    /* 0: leave BIAS_DATA_TYPE unset */
  int out_of_place;
  int device_scalars;
} lt_case;

static void lt_run_case(cublasLtHandle_t lt, const lt_case *c) {
  int64_t ar = c->ta == CUBLAS_OP_N ? c->m : c->k, ac = c->ta == CUBLAS_OP_N ? c->k : c->m;
  int64_t br = c->tb == CUBLAS_OP_N ? c->k : c->n, bc = c->tb == CUBLAS_OP_N ? c->n : c->k;
  int64_t lda = (c->a_row ? ac : ar) + 2, ldb = (c->b_row ? bc : br) + 1,
          ldc = (c->cd_row ? c->n : c->m) + 3;
  tmat A, B, C, D, C0, bias;
  tm_init(&A, c->ab, c->a_row, ar, ac, lda, c->batch, (c->a_row ? ar : ac) * lda + 4);
  tm_init(&B, c->ab, c->b_row, br, bc, ldb, 1, 0); /* shared by every member */
  tm_init(&C, c->cd, c->cd_row, c->m, c->n, ldc, c->batch, (c->cd_row ? c->m : c->n) * ldc + 2);
  tm_fill(&A, -1, 1);
  tm_fill(&B, -1, 1);
  if (c->beta != 0) tm_fill(&C, -2, 2);
  tm_upload(&A);
  tm_upload(&B);
  tm_upload(&C);
  tm_clone_host(&C, &C0);
  if (c->out_of_place) {
    tm_init(&D, c->cd, c->cd_row, c->m, c->n, ldc, c->batch, C.stride);
    tm_upload(&D);
  } else {
    D = C;
  }
  cudaDataType_t bt = c->bias_type ? c->bias_type : c->cd;
  int64_t bias_stride = c->m + 1;
  tm_init(&bias, bt, 0, 1, bias_stride * c->batch, 1, 1, 0);
  tm_fill(&bias, -1, 1);
  tm_upload(&bias);

  cublasLtMatmulDesc_t desc;
  BL_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  desc_set_i32(desc, CUBLASLT_MATMUL_DESC_TRANSA, c->ta);
  desc_set_i32(desc, CUBLASLT_MATMUL_DESC_TRANSB, c->tb);
  desc_set_i32(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, c->epilogue);
  desc_set_ptr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.dev);
  int64_t bs = bias_stride;
  BL_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bs, sizeof bs));
  if (c->bias_type) desc_set_i32(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, c->bias_type);
  cublasLtMatrixLayout_t la = lt_layout_of(&A, (int32_t)c->batch), lb = lt_layout_of(&B, (int32_t)c->batch),
                         lc = lt_layout_of(&C, (int32_t)c->batch), ld = lt_layout_of(&D, (int32_t)c->batch);
  float al = (float)c->alpha, be = (float)c->beta;
  const void *pa = &al, *pb = &be;
  float *dsc = NULL;
  if (c->device_scalars) {
    dsc = dalloc(8);
    h2d(dsc, &al, 4);
    h2d(dsc + 1, &be, 4);
    pa = dsc;
    pb = dsc + 1;
    desc_set_i32(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE);
  }
  cublasLtMatmulPreference_t pref;
  BL_OK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t heur[2];
  int found = 0;
  BL_OK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 1, heur, &found));
  assert_int_equal(found, 1);
  assert_int_equal(heur[0].state, CUBLAS_STATUS_SUCCESS);
  void *ws = dalloc(1 << 16);
  BL_OK(cublasLtMatmul(lt, desc, pa, A.dev, la, B.dev, lb, pb, C.dev, lc, D.dev, ld, &heur[0].algo, ws,
                       1 << 16, NULL));
  tm_download(&D);
  ref_gemm g = {c->ta, c->tb, c->m, c->n, c->k, al, be, 1.0, &A, &B, &C0, c->epilogue, &bias,
                bias_stride, round_none, 0x1p-23, eps_of(c->cd),
                c->epilogue & CUBLASLT_EPILOGUE_GELU ? 1e-6 : 0};
  check_gemm(&g, &D, c->batch);
  if (c->out_of_place) {
    tm_download(&C); /* C is only read */
    assert_memory_equal(C.host, C0.host, C.bytes);
    tm_free(&D);
  }
  dfree(ws);
  if (dsc) dfree(dsc);
  BL_OK(cublasLtMatmulPreferenceDestroy(pref));
  BL_OK(cublasLtMatrixLayoutDestroy(la));
  BL_OK(cublasLtMatrixLayoutDestroy(lb));
  BL_OK(cublasLtMatrixLayoutDestroy(lc));
  BL_OK(cublasLtMatrixLayoutDestroy(ld));
  BL_OK(cublasLtMatmulDescDestroy(desc));
  free(C0.host);
  tm_free(&A);
  tm_free(&B);
  tm_free(&C);
  tm_free(&bias);
}

static void test_lt_matmul(void **state) {
  (void)state;
  cublasLtHandle_t lt;
  BL_OK(cublasLtCreate(&lt));
  rng_seed(4);
  static const int epilogues[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_RELU,
                                  CUBLASLT_EPILOGUE_BIAS,    CUBLASLT_EPILOGUE_RELU_BIAS,
                                  CUBLASLT_EPILOGUE_GELU,    CUBLASLT_EPILOGUE_GELU_BIAS};
  static const cudaDataType_t types[][2] = {{CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F},
                                           {CUDA_R_16F, CUDA_R_16F},   {CUDA_R_32F, CUDA_R_32F}};
  for (size_t e = 0; e < 6; e++)
    for (size_t t = 0; t < 4; t++) {
      lt_case c = {types[t][0], types[t][1], CUBLAS_OP_T, CUBLAS_OP_N, 0, 0, 0, 7, 6, 10, 1, 1.0,
                   e % 2 ? 0.5 : 0.0, epilogues[e], 0, 0, 0};
      lt_run_case(lt, &c);
      /* row-major operands, out of place, batched with a per-member bias */
      lt_case r = {types[t][0], types[t][1], CUBLAS_OP_N, CUBLAS_OP_T, 1, t % 2, 1, 5, 8, 6, 3, -0.75,
                   0.25, epilogues[e], 0, 1, (int)e == 3};
      lt_run_case(lt, &r);
    }
  /* k == 0 with a bias: D = beta C + bias */
  lt_case k0 = {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_N, 0, 0, 0, 4, 3, 0, 1, 1.0, 0.5,
                CUBLASLT_EPILOGUE_BIAS, 0, 0, 0};
  lt_run_case(lt, &k0);
  BL_OK(cublasLtDestroy(lt));
}

/* Ties in the final rounding go to even, NaN stays NaN. Each case sums
 * three exactly representable products (k = 3, B all ones), exact in fp32,
 * so only the store rounds. */
static void test_lt_output_rounding(void **state) {
  (void)state;
  cublasLtHandle_t lt;
  BL_OK(cublasLtCreate(&lt));
  uint16_t *A = dalloc(6), *B = dalloc(6), *D = dalloc(2);
  cublasLtMatmulDesc_t desc;
  BL_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  desc_set_i32(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  static const struct {
    cudaDataType_t t;
    float a[3], alpha;
    uint16_t want;
  } cases[] = {
      {CUDA_R_16BF, {1.0f, 0x1p-8f, 0}, 1, 0x3f80},             /* 1 + 2^-8: tie, to even 1.0 */
      {CUDA_R_16BF, {1.0f + 0x1p-7f, 0x1p-8f, 0}, 1, 0x3f82},   /* tie, to even 1 + 2^-6 */
      {CUDA_R_16BF, {1.0f, 0x1p-8f, 0x1p-20f}, 1, 0x3f81},      /* just above the tie */
      {CUDA_R_16BF, {-1.0f, -0x1p-8f, 0}, 1, 0xbf80},
      {CUDA_R_16BF, {0x1p127f, 0x1p127f, 0}, 1, 0x7f80},        /* overflow to inf */
      {CUDA_R_16F, {65504.0f, 16.0f, 0}, 1, 0x7c00},            /* 65520 rounds to inf */
      {CUDA_R_16F, {65504.0f, 15.0f, 0}, 1, 0x7bff},
      {CUDA_R_16F, {1.0f, 0x1p-11f, 0}, 1, 0x3c00},             /* tie, to even */
      {CUDA_R_16F, {1.0f + 0x1p-10f, 0x1p-11f, 0}, 1, 0x3c02},  /* tie, to even */
      {CUDA_R_16F, {0x1p-24f, 0, 0}, 0.5f, 0x0000},             /* 2^-25: subnormal tie to 0 */
      {CUDA_R_16F, {0x1p-23f, 0x1p-24f, 0}, 0.5f, 0x0002},      /* 1.5 units: to even 2 */
  };
  float zero = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int bf = cases[i].t == CUDA_R_16BF;
    uint16_t a[3], b[3];
    for (int q = 0; q < 3; q++) {
      a[q] = bf ? sn_f32_to_bf16(cases[i].a[q]) : sn_f32_to_f16(cases[i].a[q]);
      assert_true((bf ? sn_bf16_to_f32(a[q]) : sn_f16_to_f32(a[q])) == cases[i].a[q]);
      b[q] = bf ? sn_f32_to_bf16(1.0f) : sn_f32_to_f16(1.0f);
    }
    h2d(A, a, 6);
    h2d(B, b, 6);
    cublasLtMatrixLayout_t la, lb, lo;
    BL_OK(cublasLtMatrixLayoutCreate(&la, cases[i].t, 3, 1, 3));
    BL_OK(cublasLtMatrixLayoutCreate(&lb, cases[i].t, 3, 1, 3));
    BL_OK(cublasLtMatrixLayoutCreate(&lo, cases[i].t, 1, 1, 1));
    BL_OK(cublasLtMatmul(lt, desc, &cases[i].alpha, A, la, B, lb, &zero, D, lo, D, lo, NULL, NULL, 0,
                         NULL));
    uint16_t got;
    d2h(&got, D, 2);
    if (got != cases[i].want) {
      print_error("case %zu: 0x%04x, expected 0x%04x\n", i, got, cases[i].want);
      fail();
    }
    if (i == 0) {
      /* NaN in an input gives a NaN, still NaN after the bf16 store */
      a[1] = 0x7fc1;
      h2d(A, a, 6);
      BL_OK(cublasLtMatmul(lt, desc, &cases[i].alpha, A, la, B, lb, &zero, D, lo, D, lo, NULL, NULL,
                           0, NULL));
      d2h(&got, D, 2);
      assert_true((got & 0x7f80) == 0x7f80 && (got & 0x7f) != 0);
    }
    BL_OK(cublasLtMatrixLayoutDestroy(la));
    BL_OK(cublasLtMatrixLayoutDestroy(lb));
    BL_OK(cublasLtMatrixLayoutDestroy(lo));
  }
  BL_OK(cublasLtMatmulDescDestroy(desc));
  dfree(A);
  dfree(B);
  dfree(D);
  BL_OK(cublasLtDestroy(lt));
}

/* The heuristic's algorithms and what cublasLtMatmul holds them to
 * (cublasLt.h): MIN_ALIGNMENT_*_BYTES "will exclude algorithms that can not
 * work with matrix A that is not as strictly aligned as they need",
 * MAX_WORKSPACE_BYTES "default: 0 - no workspace allowed", results
 * "ordered in increasing estimated compute time"; an algorithm's
 * alignment covers the "buffer pointer, leading dimension, and possibly
 * other strides"; cublasLtMatmul is INVALID_VALUE "when
 * workspaceSizeInBytes is less than workspace required by configured
 * algo", and (the stand-in's reading of "parameters are in conflict") when
 * the buffers are less aligned than the algorithm needs. The stand-in's
 * catalogue: 64-byte alignment with 512 KiB of workspace, 16-byte with
 * none, element alignment with none. */
static void test_lt_algo_requirements(void **state) {
  (void)state;
  cublasLtHandle_t lt;
  BL_OK(cublasLtCreate(&lt));
  float one = 1, zero = 0;
  enum { M = 16 }; /* fp32, ld 16: 64 bytes */
  char *buf = dalloc(8 * M * M * 4);
  char *A = buf, *B = buf + 2 * M * M * 4, *D = buf + 4 * M * M * 4;
  CU_OK(cuMemsetD8_v2((CUdeviceptr)buf, 0, 8 * M * M * 4));
  cublasLtMatmulDesc_t d;
  BL_OK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t l, l17;
  BL_OK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, M, M, M));
  BL_OK(cublasLtMatrixLayoutCreate(&l17, CUDA_R_32F, M, M, M + 1)); /* ld 68 bytes */
  cublasLtMatmulPreference_t p;
  BL_OK(cublasLtMatmulPreferenceCreate(&p));
  cublasLtMatmulHeuristicResult_t r[4];
  int found = 0;
  /* the default preference: no workspace, 256-byte alignment */
  BL_OK(cublasLtMatmulAlgoGetHeuristic(lt, d, l, l, l, l, p, 4, r, &found));
  assert_int_equal(found, 2);
  assert_int_equal(r[0].workspaceSize, 0);
  assert_int_equal(r[1].workspaceSize, 0);
  cublasLtMatmulAlgo_t a16 = r[0].algo, a_elem = r[1].algo;
  /* workspace allowed: the workspace algorithm comes first */
  uint64_t wss = 1 << 20;
  BL_OK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wss, sizeof wss));
  BL_OK(cublasLtMatmulAlgoGetHeuristic(lt, d, l, l, l, l, p, 4, r, &found));
  assert_int_equal(found, 3);
  assert_int_equal(r[0].workspaceSize, 512 << 10);
  cublasLtMatmulAlgo_t a64 = r[0].algo;
  assert_memory_equal(&r[1].algo, &a16, sizeof a16);
  assert_memory_equal(&r[2].algo, &a_elem, sizeof a_elem);
  BL_OK(cublasLtMatmulAlgoGetHeuristic(lt, d, l, l, l, l, p, 1, r, &found)); /* as many as asked */
  assert_int_equal(found, 1);
  /* D aligned to 16 only: the 64-byte one goes; A aligned to 4: only the
   * element one is left; below fp32's 4 bytes nothing */
  uint32_t al = 16;
  BL_OK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
  BL_OK(cublasLtMatmulAlgoGetHeuristic(lt, d, l, l, l, l, p, 4, r, &found));
  assert_int_equal(found, 2);
  assert_memory_equal(&r[0].algo, &a16, sizeof a16);
  al = 4;
  BL_OK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
  BL_OK(cublasLtMatmulAlgoGetHeuristic(lt, d, l, l, l, l, p, 4, r, &found));
  assert_int_equal(found, 1);
  assert_memory_equal(&r[0].algo, &a_elem, sizeof a_elem);
  al = 2;
  BL_OK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
  assert_int_equal(cublasLtMatmulAlgoGetHeuristic(lt, d, l, l, l, l, p, 4, r, &found), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(found, 0);
  /* a leading dimension of 68 bytes: only the element one, whatever the
   * pointers */
  al = 256;
  BL_OK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
  BL_OK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
  BL_OK(cublasLtMatmulAlgoGetHeuristic(lt, d, l17, l, l, l, p, 4, r, &found));
  assert_int_equal(found, 1);
  assert_memory_equal(&r[0].algo, &a_elem, sizeof a_elem);

  void *ws = dalloc(1 << 20);
#define MMA(algo, a, la, dd, ws_, wss_) \
  cublasLtMatmul(lt, d, &one, a, la, B, l, &zero, dd, l, dd, l, &(algo), ws_, wss_, NULL)
  BL_OK(MMA(a64, A, l, D, ws, (size_t)512 << 10));
  assert_int_equal(MMA(a64, A, l, D, ws, (size_t)256 << 10), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(MMA(a64, A, l, D, NULL, (size_t)512 << 10), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(MMA(a64, A, l, D, NULL, 0), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(MMA(a64, A, l, D + 16, ws, 1 << 20), CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(MMA(a16, A, l, D + 16, NULL, 0));
  assert_int_equal(MMA(a16, A + 4, l, D, NULL, 0), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(MMA(a16, A, l17, D, NULL, 0), CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(MMA(a_elem, A + 4, l17, D + 4, NULL, 0));
  BL_OK(MMA(a64, A, l, D, ws, 1 << 20));
  /* an algo no heuristic of this library made */
  cublasLtMatmulAlgo_t bogus;
  memset(&bogus, 0, sizeof bogus);
  bogus.data[0] = 1;
  assert_int_equal(MMA(bogus, A, l, D, ws, 1 << 20), CUBLAS_STATUS_INVALID_VALUE);
#undef MMA
  dfree(ws);
  dfree(buf);
  BL_OK(cublasLtMatmulPreferenceDestroy(p));
  BL_OK(cublasLtMatrixLayoutDestroy(l));
  BL_OK(cublasLtMatrixLayoutDestroy(l17));
  BL_OK(cublasLtMatmulDescDestroy(d));
  BL_OK(cublasLtDestroy(lt));
}

static void test_lt_errors(void **state) {
  (void)state;
  cublasLtHandle_t lt;
  BL_OK(cublasLtCreate(&lt));
  float one = 1, zero = 0;
  void *buf = dalloc(1 << 16);
  cublasLtMatmulDesc_t d;
  BL_OK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t a, b, c, x;
  BL_OK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, 8, 4, 8));  /* m = 8, k = 4 */
  BL_OK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, 4, 6, 4));  /* n = 6 */
  BL_OK(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, 8, 6, 8));
#define MM(dd, la, lb, lc, ld) \
  cublasLtMatmul(lt, dd, &one, buf, la, buf, lb, &zero, buf, lc, buf, ld, NULL, NULL, 0, NULL)
  BL_OK(MM(d, a, b, c, c));
  assert_int_equal(cublasLtMatmul(NULL, d, &one, buf, a, buf, b, &zero, buf, c, buf, c, NULL, NULL, 0, NULL),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  /* MM(NULL, ...) kills the process as cuBLASLt 13.1 did on an H200:
   * test_lt_null_desc_dies. */
  assert_int_equal(MM(d, a, b, NULL, c), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmul(lt, d, NULL, buf, a, buf, b, &zero, buf, c, buf, c, NULL, NULL, 0, NULL),
                   CUBLAS_STATUS_INVALID_VALUE);
  /* shapes that do not chain */
  assert_int_equal(MM(d, a, a, c, c), CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, 8, 5, 8));
  assert_int_equal(MM(d, a, b, x, c), CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(cublasLtMatrixLayoutDestroy(x));
  /* leading dimension below the rows */
  BL_OK(cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, 8, 4, 7));
  assert_int_equal(MM(d, x, b, c, c), CUBLAS_STATUS_INVALID_VALUE);
  int32_t row = CUBLASLT_ORDER_ROW; /* row order: ld counts columns, 7 >= 4 */
  BL_OK(cublasLtMatrixLayoutSetAttribute(x, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row));
  BL_OK(MM(d, x, b, c, c));
  int32_t col32 = CUBLASLT_ORDER_COL32;
  BL_OK(cublasLtMatrixLayoutSetAttribute(x, CUBLASLT_MATRIX_LAYOUT_ORDER, &col32, sizeof col32));
  assert_int_equal(MM(d, x, b, c, c), CUBLAS_STATUS_NOT_SUPPORTED);
  BL_OK(cublasLtMatrixLayoutDestroy(x));
  /* C and D: same type, shape and order */
  BL_OK(cublasLtMatrixLayoutCreate(&x, CUDA_R_32F, 8, 6, 8));
  assert_int_equal(MM(d, a, b, x, c), CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(cublasLtMatrixLayoutDestroy(x));
  BL_OK(cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, 8, 6, 6));
  BL_OK(cublasLtMatrixLayoutSetAttribute(x, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row));
  assert_int_equal(MM(d, a, b, x, c), CUBLAS_STATUS_NOT_SUPPORTED);
  BL_OK(cublasLtMatrixLayoutDestroy(x));
  /* in place needs the same layout */
  BL_OK(cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, 8, 6, 9));
  assert_int_equal(MM(d, a, b, c, x), CUBLAS_STATUS_INVALID_VALUE);
  BL_OK(cublasLtMatmul(lt, d, &one, buf, a, buf, b, &zero, buf, c, (char *)buf + 4096, x, NULL, NULL, 0, NULL));
  BL_OK(cublasLtMatrixLayoutDestroy(x));
  /* batches */
  BL_OK(cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, 8, 4, 8));
  int32_t two = 2, three = 3;
  BL_OK(cublasLtMatrixLayoutSetAttribute(x, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two));
  cublasLtMatrixLayout_t c3;
  BL_OK(cublasLtMatrixLayoutCreate(&c3, CUDA_R_16BF, 8, 6, 8));
  BL_OK(cublasLtMatrixLayoutSetAttribute(c3, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &three, sizeof three));
  assert_int_equal(MM(d, x, b, c3, c3), CUBLAS_STATUS_INVALID_VALUE);
  uint32_t ptr_array = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
  BL_OK(cublasLtMatrixLayoutSetAttribute(x, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &three, sizeof three));
  BL_OK(cublasLtMatrixLayoutSetAttribute(x, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &ptr_array, sizeof ptr_array));
  assert_int_equal(MM(d, x, b, c3, c3), CUBLAS_STATUS_NOT_SUPPORTED);
  BL_OK(cublasLtMatrixLayoutDestroy(x));
  BL_OK(cublasLtMatrixLayoutDestroy(c3));
  /* types */
  BL_OK(cublasLtMatrixLayoutCreate(&x, CUDA_R_16F, 4, 6, 4));
  assert_int_equal(MM(d, a, x, c, c), CUBLAS_STATUS_NOT_SUPPORTED);
  BL_OK(cublasLtMatrixLayoutDestroy(x));
  cublasLtMatmulDesc_t d64;
  BL_OK(cublasLtMatmulDescCreate(&d64, CUBLAS_COMPUTE_32F, CUDA_R_64F));
  assert_int_equal(MM(d64, a, b, c, c), CUBLAS_STATUS_NOT_SUPPORTED);
  BL_OK(cublasLtMatmulDescDestroy(d64));
  /* descriptor values are judged here, not when set */
  cublasLtMatmulDesc_t e;
  BL_OK(cublasLtMatmulDescCreate(&e, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_TRANSA, 5);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_INVALID_VALUE);
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N);
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_TRANSC, CUBLAS_OP_T);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_NOT_SUPPORTED);
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_TRANSC, CUBLAS_OP_N);
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE_VECTOR);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_NOT_SUPPORTED);
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_POINTER_MODE, 9);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_INVALID_VALUE);
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_HOST);
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DRELU);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_NOT_SUPPORTED);
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_NOT_SUPPORTED);
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_INVALID_VALUE); /* no bias pointer */
  desc_set_ptr(e, CUBLASLT_MATMUL_DESC_BIAS_POINTER, buf);
  BL_OK(MM(e, a, b, c, c));
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_NOT_SUPPORTED); /* bias follows D: bf16 */
  desc_set_i32(e, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
  BL_OK(MM(e, a, b, c, c));
  float *scale = dalloc(4);
  desc_set_ptr(e, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_INVALID_VALUE); /* scales are for fp8 */
  desc_set_ptr(e, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, NULL);
  desc_set_ptr(e, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, scale);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_INVALID_VALUE);
  desc_set_ptr(e, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, NULL);
  desc_set_ptr(e, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, scale);
  assert_int_equal(MM(e, a, b, c, c), CUBLAS_STATUS_INVALID_VALUE);
  desc_set_ptr(e, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, NULL);
  BL_OK(MM(e, a, b, c, c));
  /* memory: host buffers, host-mode scalars in device memory */
  char host[4096];
  assert_int_equal(cublasLtMatmul(lt, d, &one, buf, a, buf, b, &zero, buf, c, host, c, NULL, NULL, 0, NULL),
                   CUBLAS_STATUS_EXECUTION_FAILED);
  assert_int_equal(cublasLtMatmul(lt, d, scale, buf, a, buf, b, &zero, buf, c, buf, c, NULL, NULL, 0, NULL),
                   CUBLAS_STATUS_EXECUTION_FAILED);
  assert_int_equal(cublasLtMatmul(lt, d, &one, buf, a, buf, b, &zero, buf, c, buf, c, NULL, host, 64, NULL),
                   CUBLAS_STATUS_EXECUTION_FAILED);
  /* m == 0: nothing to do, nothing read */
  BL_OK(cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, 0, 6, 1));
  cublasLtMatrixLayout_t a0;
  BL_OK(cublasLtMatrixLayoutCreate(&a0, CUDA_R_16BF, 0, 4, 1));
  BL_OK(cublasLtMatmul(lt, d, &one, NULL, a0, buf, b, &zero, NULL, x, NULL, x, NULL, NULL, 0, NULL));
  BL_OK(cublasLtMatrixLayoutDestroy(x));
  BL_OK(cublasLtMatrixLayoutDestroy(a0));
  /* the heuristic */
  cublasLtMatmulPreference_t p;
  BL_OK(cublasLtMatmulPreferenceCreate(&p));
  cublasLtMatmulHeuristicResult_t r[1];
  int found = 7;
  assert_int_equal(cublasLtMatmulAlgoGetHeuristic(lt, d, a, b, c, c, p, 0, r, &found), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulAlgoGetHeuristic(NULL, d, a, b, c, c, p, 1, r, &found),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasLtMatmulAlgoGetHeuristic(lt, d, a, a, c, c, p, 1, r, &found), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(found, 0);
  BL_OK(cublasLtMatmulAlgoGetHeuristic(lt, d, a, b, c, c, p, 1, r, &found));
  assert_int_equal(found, 1);
  BL_OK(cublasLtMatmulPreferenceDestroy(p));
#undef MM
  dfree(scale);
  BL_OK(cublasLtMatmulDescDestroy(e));
  BL_OK(cublasLtMatmulDescDestroy(d));
  BL_OK(cublasLtMatrixLayoutDestroy(a));
  BL_OK(cublasLtMatrixLayoutDestroy(b));
  BL_OK(cublasLtMatrixLayoutDestroy(c));
  dfree(buf);
  BL_OK(cublasLtDestroy(lt));
}

/* ------------------------------------------------------------------------ */
/* fp8: every code through the GEMM, a random scaled GEMM, and the rules
 * (capability 8.9+, TN only, no E5M2 x E5M2, 16-byte alignment). */
typedef struct fp8_rig {
  cublasLtHandle_t lt;
  CUstream stream;
  float *scales; /* device: scale_a, scale_b, amax */
} fp8_rig;

static void fp8_rig_open(fp8_rig *r, int device) {
  CU_OK(cuCtxPushCurrent_v2(primary[device]));
  BL_OK(cublasLtCreate(&r->lt));
  CU_OK(cuStreamCreate(&r->stream, CU_STREAM_NON_BLOCKING));
  r->scales = dalloc(32); /* A's scale, then B's 16 bytes on: cuBLASLt takes 16-byte aligned ones */
}

static void fp8_rig_close(fp8_rig *r) {
  dfree(r->scales);
  CU_OK(cuStreamDestroy_v2(r->stream));
  BL_OK(cublasLtDestroy(r->lt));
  CU_OK(cuCtxPopCurrent_v2(NULL));
}

/* D (m x 1, fp32) = alpha sa sb A^T B, A k x m with code i at the top of
 * column i, B = (1, 0, ..., 0). */
static cublasStatus_t fp8_codes(fp8_rig *r, cudaDataType_t at, cudaDataType_t bt, int ta, int tb,
                                float *out) {
  const int m = 256, k = 16;
  unsigned char *hA = calloc(k * m, 1), hB[16] = {0};
  for (int i = 0; i < m; i++) hA[i * k] = (unsigned char)i;
  hB[0] = bt == CUDA_R_8F_E4M3 ? 0x38 : 0x3c; /* 1.0 */
  unsigned char *A = dalloc(k * m), *B = dalloc(k);
  float *D = dalloc(m * 4);
  h2d(A, hA, k * m);
  h2d(B, hB, k);
  float sc[8] = {2.0f, 0, 0, 0, 0.5f, 0, 0, 0};
  h2d(r->scales, sc, sizeof sc);
  cublasLtMatmulDesc_t d;
  BL_OK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  desc_set_i32(d, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  desc_set_i32(d, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  desc_set_ptr(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, r->scales);
  desc_set_ptr(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, r->scales + 4);
  int8_t fast = 1;
  BL_OK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, 1));
  cublasLtMatrixLayout_t la, lb, lc;
  /* shapes consistent for any transposes, so only the TN rule can refuse */
  if (ta == CUBLAS_OP_T) BL_OK(cublasLtMatrixLayoutCreate(&la, at, k, m, k));
  else BL_OK(cublasLtMatrixLayoutCreate(&la, at, m, k, m));
  if (tb == CUBLAS_OP_N) BL_OK(cublasLtMatrixLayoutCreate(&lb, bt, k, 1, k));
  else BL_OK(cublasLtMatrixLayoutCreate(&lb, bt, 1, k, 16));
  BL_OK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, 1, m));
  float alpha = 0.5f, beta = 0;
  cublasStatus_t s = cublasLtMatmul(r->lt, d, &alpha, A, la, B, lb, &beta, D, lc, D, lc, NULL, NULL, 0,
                                    r->stream);
  d2h(out, D, m * 4);
  BL_OK(cublasLtMatrixLayoutDestroy(la));
  BL_OK(cublasLtMatrixLayoutDestroy(lb));
  BL_OK(cublasLtMatrixLayoutDestroy(lc));
  BL_OK(cublasLtMatmulDescDestroy(d));
  dfree(A);
  dfree(B);
  dfree(D);
  free(hA);
  return s;
}

static void test_fp8(void **state) {
  (void)state;
  float out[256];
  fp8_rig r;
  fp8_rig_open(&r, 1); /* capability 9.0 */
  BL_OK(fp8_codes(&r, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUBLAS_OP_T, CUBLAS_OP_N, out));
  for (int c = 0; c < 256; c++) {
    float want = sn_e4m3_to_f32((uint8_t)c) * 0.5f; /* 2 * 0.5 * 0.5 */
    if (isnan(want) ? !isnan(out[c]) : out[c] != want) {
      print_error("E4M3 code 0x%02x: %g, expected %g\n", c, out[c], want);
      fail();
    }
  }
  BL_OK(fp8_codes(&r, CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUBLAS_OP_T, CUBLAS_OP_N, out));
  for (int c = 0; c < 256; c++) {
    float want = sn_e5m2_to_f32((uint8_t)c) * 0.5f;
    if (isnan(want) ? !isnan(out[c]) : out[c] != want) {
      print_error("E5M2 code 0x%02x: %g, expected %g\n", c, out[c], want);
      fail();
    }
  }
  BL_OK(fp8_codes(&r, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUBLAS_OP_T, CUBLAS_OP_N, out));
  assert_true(out[0x38] == 0.5f);
  assert_int_equal(fp8_codes(&r, CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, CUBLAS_OP_T, CUBLAS_OP_N, out),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(fp8_codes(&r, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUBLAS_OP_N, CUBLAS_OP_N, out),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(fp8_codes(&r, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUBLAS_OP_T, CUBLAS_OP_T, out),
                   CUBLAS_STATUS_NOT_SUPPORTED);

  /* A random scaled GEMM: bf16 C and D, bf16 bias, GELU, amax of D. */
  rng_seed(5);
  const int64_t m = 24, n = 16, k = 64;
  tmat A, B, C, C0, bias;
  tm_init(&A, CUDA_R_8F_E4M3, 0, k, m, k, 1, 0);
  tm_init(&B, CUDA_R_8F_E4M3, 0, k, n, k, 1, 0);
  tm_init(&C, CUDA_R_16BF, 0, m, n, m, 1, 0);
  tm_init(&bias, CUDA_R_16BF, 0, 1, m, 1, 1, 0);
  tm_fill(&A, -8, 8);
  tm_fill(&B, -8, 8);
  tm_fill(&C, -4, 4);
  tm_fill(&bias, -1, 1);
  tm_upload(&A);
  tm_upload(&B);
  tm_upload(&C);
  tm_upload(&bias);
  tm_clone_host(&C, &C0);
  float sc[3] = {0.25f, -1.0f, 0.125f}; /* A's scale, amax of D, B's 16-byte aligned scale at [4] */
  h2d(r.scales, sc, 8);
  h2d(r.scales + 4, sc + 2, 4);
  cublasLtMatmulDesc_t d;
  BL_OK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  desc_set_i32(d, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  desc_set_ptr(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, r.scales);
  desc_set_ptr(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, r.scales + 4);
  desc_set_ptr(d, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, r.scales + 1);
  desc_set_i32(d, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_BIAS);
  desc_set_ptr(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.dev);
  cublasLtMatrixLayout_t la = lt_layout_of(&A, 1), lb = lt_layout_of(&B, 1), lc = lt_layout_of(&C, 1);
  float alpha = 0.5f, beta = 1.0f;
  BL_OK(cublasLtMatmul(r.lt, d, &alpha, A.dev, la, B.dev, lb, &beta, C.dev, lc, C.dev, lc, NULL, NULL, 0,
                       r.stream));
  tm_download(&C);
  ref_gemm g = {CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, alpha, beta, 0.25 * 0.125, &A, &B, &C0,
                CUBLASLT_EPILOGUE_GELU_BIAS, &bias, 0, round_none, 0x1p-12, 0x1p-8, 1e-6};
  check_gemm(&g, &C, 1);
  /* amax is taken before the bf16 store: within bf16 rounding of max |D| */
  float amax = 0;
  d2h(&amax, r.scales + 1, 4);
  double dmax = 0;
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) dmax = fmax(dmax, fabs(tm_get(&C, 0, i, j)));
  assert_true(dmax > 0 && fabs(amax - dmax) <= 0x1p-8 * dmax);
  /* fp32 D: the bias defaults to bf16; an fp32 bias is not offered */
  tmat D32;
  tm_init(&D32, CUDA_R_32F, 0, m, n, m, 1, 0);
  cublasLtMatrixLayout_t l32 = lt_layout_of(&D32, 1);
  float zero = 0;
  BL_OK(cublasLtMatmul(r.lt, d, &alpha, A.dev, la, B.dev, lb, &zero, D32.dev, l32, D32.dev, l32, NULL,
                       NULL, 0, r.stream));
  desc_set_i32(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
  assert_int_equal(cublasLtMatmul(r.lt, d, &alpha, A.dev, la, B.dev, lb, &zero, D32.dev, l32, D32.dev, l32,
                                  NULL, NULL, 0, r.stream),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  desc_set_i32(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, -1);
  /* 16-byte alignment of A/B and of their leading dimensions */
  assert_int_equal(cublasLtMatmul(r.lt, d, &alpha, (char *)A.dev + 1, la, B.dev, lb, &zero, D32.dev, l32,
                                  D32.dev, l32, NULL, NULL, 0, r.stream),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatrixLayout_t la8, lb8;
  BL_OK(cublasLtMatrixLayoutCreate(&la8, CUDA_R_8F_E4M3, 8, m, 8));
  BL_OK(cublasLtMatrixLayoutCreate(&lb8, CUDA_R_8F_E4M3, 8, n, 8));
  assert_int_equal(cublasLtMatmul(r.lt, d, &alpha, A.dev, la8, B.dev, lb8, &zero, D32.dev, l32, D32.dev,
                                  l32, NULL, NULL, 0, r.stream),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  /* the heuristic agrees on this device ... */
  cublasLtMatmulPreference_t p;
  BL_OK(cublasLtMatmulPreferenceCreate(&p));
  cublasLtMatmulHeuristicResult_t hr[1];
  int found = 0;
  BL_OK(cublasLtMatmulAlgoGetHeuristic(r.lt, d, la, lb, l32, l32, p, 1, hr, &found));
  assert_int_equal(found, 1);
  fp8_rig_close(&r);
  /* ... and on devices below 8.9 fp8 is not there, whatever the stream */
  for (int dev = 0; dev < 3; dev += 2) {
    fp8_rig_open(&r, dev);
    assert_int_equal(fp8_codes(&r, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUBLAS_OP_T, CUBLAS_OP_N, out),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(r.lt, d, la, lb, l32, l32, p, 1, hr, &found),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    fp8_rig_close(&r);
  }
  BL_OK(cublasLtMatmulPreferenceDestroy(p));
  BL_OK(cublasLtMatrixLayoutDestroy(la));
  BL_OK(cublasLtMatrixLayoutDestroy(lb));
  BL_OK(cublasLtMatrixLayoutDestroy(lc));
  BL_OK(cublasLtMatrixLayoutDestroy(l32));
  BL_OK(cublasLtMatrixLayoutDestroy(la8));
  BL_OK(cublasLtMatrixLayoutDestroy(lb8));
  BL_OK(cublasLtMatmulDescDestroy(d));
  free(C0.host);
  /* the buffers belong to device 1's context */
  CU_OK(cuCtxPushCurrent_v2(primary[1]));
  tm_free(&A);
  tm_free(&B);
  tm_free(&C);
  tm_free(&bias);
  tm_free(&D32);
  CU_OK(cuCtxPopCurrent_v2(NULL));
}

/* ------------------------------------------------------------------------ */
/* Many threads at once: each with its own handle (bound to device 0 by the
 * runtime, since the threads never set a context) plus one handle shared by
 * all. No cmocka assertions off the main thread: failures are counted. */
typedef struct mt_job {
  cublasHandle_t shared;
  int seed;
  int failures;
} mt_job;

static void *mt_worker(void *arg) {
  mt_job *j = arg;
  enum { M = 12, N = 10, K = 24 };
  cublasHandle_t own;
  if (cublasCreate_v2(&own) != CUBLAS_STATUS_SUCCESS) {
    j->failures++;
    return NULL;
  }
  uint16_t ha[M * K], hb[K * N], hc[M * N];
  CUdeviceptr A, B, C;
  if (cuMemAlloc_v2(&A, sizeof ha) || cuMemAlloc_v2(&B, sizeof hb) || cuMemAlloc_v2(&C, sizeof hc)) {
    j->failures++;
    return NULL;
  }
  uint64_t x = (uint64_t)j->seed * 2654435761u + 1;
  for (int it = 0; it < 12; it++) {
    for (int i = 0; i < M * K; i++) ha[i] = sn_f32_to_bf16((float)((x = x * 6364136223846793005ull + 1) >> 40) / (1 << 24) - 0.5f);
    for (int i = 0; i < K * N; i++) hb[i] = sn_f32_to_bf16((float)((x = x * 6364136223846793005ull + 1) >> 40) / (1 << 24) - 0.5f);
    cuMemcpyHtoD_v2(A, ha, sizeof ha);
    cuMemcpyHtoD_v2(B, hb, sizeof hb);
    float one = 1, zero = 0;
    cublasHandle_t h = it % 2 ? own : j->shared;
    cublasStatus_t s;
    if (it % 3 == 0) {
      /* straight to cuBLASLt */
      cublasLtHandle_t lt;
      cublasLtMatmulDesc_t d;
      cublasLtMatrixLayout_t la, lb, lc;
      s = cublasLtCreate(&lt);
      if (!s) s = cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
      if (!s) s = cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, M, K, M);
      if (!s) s = cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, N, K);
      if (!s) s = cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, M, N, M);
      if (!s) s = cublasLtMatmul(lt, d, &one, (void *)A, la, (void *)B, lb, &zero, (void *)C, lc, (void *)C,
                                 lc, NULL, NULL, 0, NULL);
      if (!s) {
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(d);
        cublasLtDestroy(lt);
      }
    } else {
      s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (void *)A, CUDA_R_16BF, M, (void *)B,
                       CUDA_R_16BF, K, &zero, (void *)C, CUDA_R_16BF, M, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT_TENSOR_OP);
    }
    if (s != CUBLAS_STATUS_SUCCESS || cuMemcpyDtoH_v2(hc, C, sizeof hc)) {
      j->failures++;
      continue;
    }
    for (int c = 0; c < N; c++)
      for (int r = 0; r < M; r++) {
        double ref = 0, abs = 0;
        for (int q = 0; q < K; q++) {
          double p = (double)sn_bf16_to_f32(ha[r + q * M]) * sn_bf16_to_f32(hb[q + c * K]);
          ref += p;
          abs += fabs(p);
        }
        double got = sn_bf16_to_f32(hc[r + c * M]);
        if (!(fabs(got - ref) <= (K + 4) * 0x1p-23 * abs + 0x1p-8 * fabs(ref))) j->failures++;
      }
  }
  cuMemFree_v2(A);
  cuMemFree_v2(B);
  cuMemFree_v2(C);
  if (cublasDestroy_v2(own) != CUBLAS_STATUS_SUCCESS) j->failures++;
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* fp16 inputs: what the scaled-fp16 route relies on. */

/* fp16 A and B with fp32 compute, as cuBLAS runs them on fp16 tensor cores
 * (the PTX ISA's mma with .f16 multiplicands and .f32 accumulators): the
 * inputs exact, subnormals included; each product exact in fp32 (11 x 11
 * significant bits); the sum in fp32. Three 1 x 1 x k GEMMs whose fp32 D
 * shows each: 2^-24 x 2^-24 (the smallest fp16 subnormal, squared) is
 * 2^-48; 2047 x 2047 = 4190209 needs 22 bits; and 65504^2 + 2^-14 - 65504^2
 * is 0 summed in fp32 in k order (2^-14 is lost beside 2^32, whose fp32
 * spacing is 512), 2^-14 in float64, and infinite in fp16. */
static void test_fp16_gemm_numerics(void **state) {
  (void)state;
  cublasHandle_t h;
  BL_OK(cublasCreate_v2(&h));
  const struct { int k; uint16_t a[3], b[3]; float want; } cases[] = {
      {1, {0x0001}, {0x0001}, 0x1p-48f},
      {1, {0x67ff}, {0x67ff}, 4190209.0f},
      {3, {0x7bff, 0x0400, 0xfbff}, {0x7bff, 0x3c00, 0x7bff}, 0.0f},
  };
  uint16_t *A = dalloc(6), *B = dalloc(6);
  float *C = dalloc(4), one = 1, zero = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    h2d(A, cases[i].a, 6);
    h2d(B, cases[i].b, 6);
    float got = -1;
    BL_OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, cases[i].k, &one, A, CUDA_R_16F, 1, B, CUDA_R_16F,
                       cases[i].k, &zero, C, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    d2h(&got, C, 4);
    assert_true(got == cases[i].want);
  }
  /* The last case's float64 sum is 2^-14; an fp16 sum would overflow. */
  assert_true(sn_f16_to_f32(0x0400) == 0x1p-14f && sn_f16_to_f32(0x7bff) == 65504.0f);
  dfree(A);
  dfree(B);
  dfree(C);
  BL_OK(cublasDestroy_v2(h));
}

/* Which devices have fp16 tensor cores (the CUDA C++ Programming Guide's
 * feature table by compute capability: from 7.0), seen through the counter
 * of GEMMs the stand-in ran on them: three of child_fp16_gemms' five on
 * such devices, none on Maxwell and Pascal. */
/* Block-scaled fp8 on devices before, at and after each mode's own
 * (child_block_scales says which run where and checks the values). */
static void test_block_scales(void **state) {
  (void)state;
  static const char *const ccs[][2] = {{"STANDIN_CC=8.9", NULL}, {"STANDIN_CC=9.0", NULL},
                                       {"STANDIN_CC=10.0", NULL}};
  for (size_t i = 0; i < 3; i++) expect_child("block_scales", ccs[i], NULL, 0, NULL);
}

static void test_lt_null_desc_dies(void **state) {
  (void)state;
  child_result r;
  run_child("null_desc", NULL, NULL, &r);
  /* Killed by SIGSEGV; under ASan or TSan the sanitizer catches it,
   * reports the SEGV and exits with its own status. */
  int died = r.status == 128 + SIGSEGV || (r.status != 0 && r.status != 3 && strstr(r.err, "SEGV on unknown address"));
  if (!died || !strstr(r.err, "computeDesc is NULL")) {
    print_error("scenario null_desc: status %d, stderr:\n%s\n", r.status, r.err);
    fail();
  }
}

static void test_fp16_tensor_core_devices(void **state) {
  (void)state;
  static const struct { const char *cc; long long want; } devices[] = {
      {"5.2", 0}, {"6.0", 0}, {"6.1", 0}, {"7.0", 3}, {"7.2", 3}, {"7.5", 3},
      {"8.0", 3}, {"8.6", 3}, {"8.9", 3}, {"9.0", 3}, {"10.0", 3}, {"12.0", 3},
  };
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
    char cc[32];
    snprintf(cc, sizeof cc, "STANDIN_CC=%s", devices[i].cc);
    const char *text = child_counts_file("fp16_gemms", cc);
    if (count_of(text, "standin_fp16_tensor_core_gemms") != devices[i].want) {
      print_error("STANDIN_CC=%s: %lld fp16 tensor-core GEMMs, expected %lld\n", devices[i].cc,
                  count_of(text, "standin_fp16_tensor_core_gemms"), devices[i].want);
      fail();
    }
    assert_int_equal(count_of(text, "cublasGemmEx"), 5);
  }
}

/* What cuBLAS refuses for fp16 inputs (cuBLAS documentation: cublasGemmEx's
 * table of supported type combinations, cublasComputeType_t, and
 * cublasLtMatmul's bias type, D's type outside fp8 inputs): fp16 with
 * bf16 B or C, the 32F_FAST_* types (fp32 data only), COMPUTE_16F with an
 * fp32 C; through cuBLASLt, a bias of another type than D's. */
static void test_fp16_refusals(void **state) {
  (void)state;
  cublasHandle_t h;
  BL_OK(cublasCreate_v2(&h));
  void *A = dalloc(64), *B = dalloc(64), *C = dalloc(64), *bias = dalloc(64);
  float one = 1;
  const cudaDataType_t H = CUDA_R_16F, F = CUDA_R_32F, BF = CUDA_R_16BF;
#define GEMM16(bt, ct, comp)                                                                       \
  cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, A, H, 2, B, bt, 2, &one, C, ct, 2, comp, \
               CUBLAS_GEMM_DEFAULT)
  assert_int_equal(GEMM16(BF, F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM16(H, BF, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM16(H, F, CUBLAS_COMPUTE_32F_FAST_16F), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM16(H, H, CUBLAS_COMPUTE_32F_FAST_TF32), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(GEMM16(H, F, CUBLAS_COMPUTE_16F), CUBLAS_STATUS_NOT_SUPPORTED);
  BL_OK(GEMM16(H, F, CUBLAS_COMPUTE_32F));
  BL_OK(GEMM16(H, H, CUBLAS_COMPUTE_32F));
#undef GEMM16
  cublasLtHandle_t lt;
  BL_OK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t d;
  cublasLtMatrixLayout_t l16, l32;
  BL_OK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  BL_OK(cublasLtMatrixLayoutCreate(&l16, H, 2, 2, 2));
  BL_OK(cublasLtMatrixLayoutCreate(&l32, F, 2, 2, 2));
  int32_t epi = CUBLASLT_EPILOGUE_BIAS;
  BL_OK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  BL_OK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  const struct { cublasLtMatrixLayout_t cd; int32_t bias_type; cublasStatus_t want; } lt_cases[] = {
      {l32, F, CUBLAS_STATUS_SUCCESS}, {l32, H, CUBLAS_STATUS_NOT_SUPPORTED},
      {l32, BF, CUBLAS_STATUS_NOT_SUPPORTED}, {l16, H, CUBLAS_STATUS_SUCCESS},
      {l16, F, CUBLAS_STATUS_NOT_SUPPORTED},
  };
  for (size_t i = 0; i < sizeof lt_cases / sizeof lt_cases[0]; i++) {
    BL_OK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &lt_cases[i].bias_type,
                                         sizeof lt_cases[i].bias_type));
    assert_int_equal(cublasLtMatmul(lt, d, &one, A, l16, B, l16, &one, C, lt_cases[i].cd, C, lt_cases[i].cd, NULL,
                                    NULL, 0, NULL),
                     lt_cases[i].want);
  }
  BL_OK(cublasLtMatrixLayoutDestroy(l16));
  BL_OK(cublasLtMatrixLayoutDestroy(l32));
  BL_OK(cublasLtMatmulDescDestroy(d));
  BL_OK(cublasLtDestroy(lt));
  dfree(A);
  dfree(B);
  dfree(C);
  dfree(bias);
  BL_OK(cublasDestroy_v2(h));
}

static void test_concurrency(void **state) {
  (void)state;
  enum { THREADS = 8 };
  cublasHandle_t shared;
  BL_OK(cublasCreate_v2(&shared));
  pthread_t t[THREADS];
  mt_job jobs[THREADS];
  unsigned long long before = lt_calls();
  for (int i = 0; i < THREADS; i++) {
    jobs[i] = (mt_job){shared, i + 1, 0};
    pthread_create(&t[i], NULL, mt_worker, &jobs[i]);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; i++) assert_int_equal(jobs[i].failures, 0);
  assert_int_equal(lt_calls() - before, THREADS * 12);
  BL_OK(cublasDestroy_v2(shared));
}

/* ------------------------------------------------------------------------ */
/* Re-run under the self-test's environment unless already in it. */
static void ensure_environment(char **argv) {
  const char *cc = getenv("STANDIN_CC");
  if (cc && !strcmp(cc, SELFTEST_CC) && getenv("STANDIN_KERNELS")) return;
  char self[4096], kernels[4200];
  ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
  if (l <= 0) {
    perror("readlink /proc/self/exe");
    exit(2);
  }
  self[l] = 0;
  char *slash = strrchr(self, '/');
  snprintf(kernels, sizeof kernels, "%.*s/test_kernels.so", (int)(slash - self), self);
  setenv("STANDIN_CC", SELFTEST_CC, 1);
  if (!getenv("STANDIN_KERNELS")) setenv("STANDIN_KERNELS", kernels, 1);
  static const char *const clear[] = {"STANDIN_NO_POOLS", "STANDIN_FRESH_STREAMS", "STANDIN_MEM_LIMIT", "STANDIN_FORBID_SYNC",
                                      "STANDIN_COUNTS"};
  for (size_t i = 0; i < sizeof clear / sizeof clear[0]; i++) unsetenv(clear[i]);
  execv(self, argv);
  perror("execv");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--child")) return child_main(argv[2]);
  ensure_environment(argv);
  const struct CMUnitTest numerics[] = {
      cmocka_unit_test(test_bf16_conversions),
      cmocka_unit_test(test_fp16_conversions),
      cmocka_unit_test(test_fp8_conversions),
      cmocka_unit_test(test_tf32_rounding),
  };
  const struct CMUnitTest standin[] = {
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_error_strings),
      cmocka_unit_test(test_contexts),
      cmocka_unit_test(test_streams),
      cmocka_unit_test(test_stream_ids_and_reuse),
      cmocka_unit_test(test_events),
      cmocka_unit_test(test_capture),
      cmocka_unit_test(test_event_query_and_capture_modes),
      cmocka_unit_test(test_graphs),
      cmocka_unit_test(test_graph_launch_memory),
      cmocka_unit_test(test_graph_overlap),
      cmocka_unit_test(test_user_objects),
      cmocka_unit_test(test_graph_gemm),
      cmocka_unit_test(test_memory),
      cmocka_unit_test(test_pools),
      cmocka_unit_test(test_modules),
      cmocka_unit_test(test_env_controls),
      cmocka_unit_test(test_counts_file),
      cmocka_unit_test(test_cublas_handle),
      cmocka_unit_test(test_gemmex_numerics),
      cmocka_unit_test(test_gemmex_batched),
      cmocka_unit_test(test_gemmex_errors),
      cmocka_unit_test(test_sgemm),
      cmocka_unit_test(test_lt_descriptors),
      cmocka_unit_test(test_lt_matmul),
      cmocka_unit_test(test_lt_output_rounding),
      cmocka_unit_test(test_lt_algo_requirements),
      cmocka_unit_test(test_lt_errors),
      cmocka_unit_test(test_fp8),
      cmocka_unit_test(test_fp16_gemm_numerics),
      cmocka_unit_test(test_fp16_tensor_core_devices),
      cmocka_unit_test(test_block_scales),
      cmocka_unit_test(test_lt_null_desc_dies),
      cmocka_unit_test(test_fp16_refusals),
      cmocka_unit_test(test_concurrency),
  };
  int failed = cmocka_run_group_tests_name("standin numerics", numerics, NULL, NULL);
  failed += cmocka_run_group_tests_name("standin libraries", standin, driver_setup, NULL);
  return failed ? 1 : 0;
}
