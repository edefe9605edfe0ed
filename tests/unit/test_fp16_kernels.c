/* test_fp16_kernels.c: the fp16 route's kernels (kernels/fp16.cu) and their
 * launchers (kernels/fp16_launch.c), run on the CPU: the launchers call the
 * stand-in libcuda.so.1, whose cuLaunchKernel runs the host build of the
 * same source (fp8_block.h's fibers give the amax and cast kernels real
 * barriers). Fresh random data each run (seed printed; GS_TEST_SEED repeats
 * a run); outputs poisoned first.
 *
 * The references are written from the formats, not from the kernels:
 *   - the shift puts an operand's largest finite magnitude in [2^15, 2^16)
 *     (IEEE 754 binary16's largest finite is 65504 = (2 - 2^-10) 2^15, and
 *     the largest bf16 below 2^16 is 65280): shift = 15 - floor(log2 amax),
 *     from frexp; Inf and NaN do not count;
 *   - each fp16 output is x 2^shift rounded to binary16 in the value
 *     domain with double arithmetic (the same reference test_kernels.c
 *     checks convert.h against): every element compared bit for bit;
 *   - the output kernel: the exact product P = T 2^-shifts in double,
 *     rounded once to fp32, then alpha P + beta C, bias, relu in fp32 and
 *     one rounding to D's type, bit for bit; GELU against double;
 *   - alpha_eff = alpha 2^-shifts must be a normal fp32 where the GEMM
 *     takes it (direct), the shifts giving way, never growing. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <cublasLt.h>
#include <library_types.h>

#include "../../kernels/convert.h"
#include "../../kernels/fp16.h"
#include "../../kernels/module.h"
#include "base.h"
#include "resolve.h"
#include "sys.h"

/* ---- random data ------------------------------------------------------- */
static uint64_t rng_state;

static uint64_t rng_next(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1p-53; }

/* A bf16 of magnitude about amp (random sign, mantissa and a factor of
 * up to 2^±4). */
static uint16_t rand_bf16(double amp) {
  double v = amp * ldexp(1.0 + rng_unit(), (int)(rng_next() % 9) - 4);
  if (rng_next() & 1) v = -v;
  return gs_f32_to_bf16_rn((float)v);
}

/* ---- the stand-in ---------------------------------------------------------- */
static CUcontext ctx75, ctx61;

static void build_path(char *out, size_t len, const char *rel) {
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  assert_true(n > 0);
  out[n] = 0;
  char *slash = strrchr(out, '/');
  snprintf(slash, len - (size_t)(slash - out), "/../../%s", rel);
}

static int setup(void **state) {
  (void)state;
  char path[4096], cuda[4096];
  const char *env = getenv("STANDIN_KERNELS");
  if (env && *env) snprintf(path, sizeof path, "%s", env);
  else build_path(path, sizeof path, "kernels/libgemmshim_kernels_host.so");
  /* The driver faults this test injects make the launchers warn, as they
   * should; not what it checks, and noise among make test's output. */
  snprintf(gs_debug_file, sizeof gs_debug_file, "/dev/null");
  debug_init();
  setenv("STANDIN_KERNELS", path, 1);
  setenv("STANDIN_CC", "7.5,6.1", 1);
  build_path(cuda, sizeof cuda, "standin/cu13/libcuda.so.1");
  void *standin = dlopen(cuda, RTLD_NOW | RTLD_GLOBAL);
  if (!standin) {
    fprintf(stderr, "test_fp16_kernels: cannot load the stand-in driver %s: %s\n", cuda, dlerror());
    return -1;
  }
  if (resolve_driver() || gs_sys.cuInit(0) != CUDA_SUCCESS) return -1;
  CUresult (*create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
  *(void **)&create = dlsym(standin, "cuCtxCreate_v4");
  CUcontext popped;
  if (!create || create(&ctx75, NULL, 0, 0) != CUDA_SUCCESS || gs_sys.cuCtxPopCurrent_v2(&popped)) return -1;
  if (create(&ctx61, NULL, 0, 1) != CUDA_SUCCESS || gs_sys.cuCtxPopCurrent_v2(&popped)) return -1;
  const char *seed = getenv("GS_TEST_SEED");
  rng_state = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL);
  fprintf(stderr, "test_fp16_kernels: seed %llu (GS_TEST_SEED repeats it)\n", (unsigned long long)rng_state);
  return 0;
}

static void *dev_alloc(size_t bytes) {
  CUdeviceptr p;
  CUcontext popped;
  assert_int_equal(gs_sys.cuCtxPushCurrent_v2(ctx75), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuMemAlloc_v2(&p, bytes ? bytes : 1), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  memset((void *)(uintptr_t)p, 0xff, bytes); /* device memory is host memory here */
  return (void *)(uintptr_t)p;
}

static void dev_free(void *p) {
  CUcontext popped;
  assert_int_equal(gs_sys.cuCtxPushCurrent_v2(ctx75), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuMemFree_v2((CUdeviceptr)(uintptr_t)p), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
}

static const fp16_launch L75 = {NULL, NULL, 75};
static kernel_ctx kc75; /* the context's modules, as a route's call keeps them */
static fp16_launch on75(void) {
  fp16_launch l = L75;
  kc75 = *KERNEL_CTX(ctx75);
  l.kc = &kc75;
  return l;
}

/* ---- the references --------------------------------------------------------- */
/* IEEE binary16 of a double (|x| exactly representable as a double times
 * a power of two): nearest, ties to even, overflow to Inf, subnormals. */
static uint16_t ref_f16(double x) {
  if (isnan(x)) return 0x7fff;
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double a = fabs(x);
  if (isinf(a)) return sign | 0x7c00;
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  int E = a == 0 ? -14 : e - 1 < -14 ? -14 : e - 1;
  double ulp = ldexp(1.0, E - 10);
  double k = floor(a / ulp), rem = a - k * ulp;
  if (rem > ulp / 2 || (rem == ulp / 2 && fmod(k, 2.0) == 1.0)) k += 1;
  double r = k * ulp;
  if (r >= 65520.0) return sign | 0x7c00;
  if (r < 0x1p-14) return sign | (uint16_t)(r / 0x1p-24);
  frexp(r, &e);
  E = e - 1;
  return sign | (uint16_t)((E + 15) << 10) | (uint16_t)(r / ldexp(1.0, E - 10) - 1024);
}

/* The shift of an operand of largest finite magnitude amax (0 for none). */
static int ref_shift(double amax) {
  if (amax == 0) return 0;
  int e;
  frexp(amax, &e);
  return 15 - (e - 1);
}

/* ---- one operand through amax and cast ------------------------------------------ */
typedef struct opnd {
  int64_t rows, cols, ld, stride, batch;
  int array;
  uint16_t *src;   /* device: ld*cols per member, stride apart */
  void **ptrs;     /* device pointer array (array) */
  uint16_t *dst;
} opnd;

static void opnd_make(opnd *o, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int array, double amp) {
  memset(o, 0, sizeof *o);
  o->rows = rows, o->cols = cols, o->ld = ld, o->batch = batch, o->array = array;
  o->stride = batch > 1 ? ld * cols + 3 : 0;
  int64_t n = o->stride * (batch - 1) + ld * cols;
  o->src = dev_alloc((size_t)n * 2); /* 0xffff: NaN in the padding, which the amax must not see */
  for (int64_t b = 0; b < batch; b++)
    for (int64_t c = 0; c < cols; c++)
      for (int64_t r = 0; r < rows; r++) o->src[b * o->stride + c * ld + r] = rand_bf16(amp);
  if (array) {
    o->ptrs = dev_alloc((size_t)batch * sizeof(void *));
    for (int64_t b = 0; b < batch; b++) o->ptrs[b] = o->src + (batch - 1 - b) * o->stride; /* backwards */
  }
  o->dst = dev_alloc((size_t)(rows * cols * batch * 2 + 16));
}

static uint16_t opnd_at(const opnd *o, int64_t b, int64_t r, int64_t c) {
  int64_t member = o->array ? o->batch - 1 - b : b;
  return o->src[member * o->stride + c * o->ld + r];
}

static fp16_operand opnd_arg(const opnd *o) {
  return (fp16_operand){o->array ? (const void *)o->ptrs : o->src, o->array, o->ld, o->stride, o->rows, o->cols,
                        o->batch, o->dst};
}

static double opnd_amax(const opnd *o) {
  double m = 0;
  for (int64_t b = 0; b < o->batch; b++)
    for (int64_t c = 0; c < o->cols; c++)
      for (int64_t r = 0; r < o->rows; r++) {
        double v = fabs(gs_bf16_to_f32(opnd_at(o, b, r, c)));
        if (isfinite(v) && v > m) m = v;
      }
  return m;
}

/* Every fp16 output bit for bit, and the bytes past the copy untouched. */
static void opnd_check(const opnd *o, int shift, const char *what) {
  for (int64_t b = 0; b < o->batch; b++)
    for (int64_t c = 0; c < o->cols; c++)
      for (int64_t r = 0; r < o->rows; r++) {
        uint16_t x = opnd_at(o, b, r, c);
        uint16_t want = ref_f16(ldexp((double)gs_bf16_to_f32(x), shift));
        uint16_t got = o->dst[(b * o->cols + c) * o->rows + r];
        if (got != want && !((got & 0x7fff) > 0x7c00 && (want & 0x7fff) > 0x7c00))
          fail_msg("%s: member %lld (%lld,%lld): bf16 0x%04x shift %d -> 0x%04x, expected 0x%04x", what,
                   (long long)b, (long long)r, (long long)c, x, shift, got, want);
      }
  const uint8_t *end = (const uint8_t *)(o->dst + o->rows * o->cols * o->batch);
  for (int i = 0; i < 16; i++) assert_int_equal(end[i], 0xff);
}

static void opnd_free(opnd *o) {
  dev_free(o->src);
  dev_free(o->dst);
  if (o->ptrs) dev_free(o->ptrs);
}

typedef struct scratch {
  uint32_t *partials;
  gs_fp16_scales *scales;
} scratch;

static scratch scratch_make(void) {
  scratch s = {dev_alloc(FP16_SCRATCH_BYTES), dev_alloc(sizeof(gs_fp16_scales))};
  return s;
}

static void scratch_free(scratch *s) {
  dev_free(s->partials);
  dev_free(s->scales);
}

/* A and B of the given amplitudes through both kernels, host alpha 1. */
static void scale_case(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int array, double amp_a, double amp_b) {
  opnd a, b;
  opnd_make(&a, rows, cols, ld, batch, array, amp_a);
  opnd_make(&b, cols + 1, rows, cols + 3, batch, array, amp_b);
  scratch s = scratch_make();
  const fp16_launch l = on75();
  const fp16_operand oa = opnd_arg(&a), ob = opnd_arg(&b);
  const float alpha = 1.0f, beta = 0.5f;
  assert_int_equal(fp16_scale_operands(&l, &oa, &ob, s.partials, s.scales, &alpha, &beta, 0, 0), CUDA_SUCCESS);
  double ma = opnd_amax(&a), mb = opnd_amax(&b);
  assert_true(s.scales->amax[0] == (float)ma && s.scales->amax[1] == (float)mb);
  assert_int_equal(s.scales->shift[0], ref_shift(ma));
  assert_int_equal(s.scales->shift[1], ref_shift(mb));
  assert_true(s.scales->one == 1.0f && s.scales->zero == 0.0f && s.scales->beta == 0.5f);
  assert_true(s.scales->alpha_eff == (float)ldexp(1.0, -(s.scales->shift[0] + s.scales->shift[1])));
  /* The largest magnitude lands in [2^15, 2^16), inside binary16's range. */
  if (ma > 0) assert_true(ldexp(ma, s.scales->shift[0]) >= 32768.0 && ldexp(ma, s.scales->shift[0]) < 65504.0);
  opnd_check(&a, s.scales->shift[0], "A");
  opnd_check(&b, s.scales->shift[1], "B");
  opnd_free(&a);
  opnd_free(&b);
  scratch_free(&s);
}

static void test_scale_shapes_and_amplitudes(void **state) {
  (void)state;
  static const double amps[][2] = {{1, 1}, {1e-9, 1e6}, {1e-30, 1e30}, {1e-38, 3e38}, {65280, 65536}, {1e-40, 1}};
  for (size_t i = 0; i < sizeof amps / sizeof amps[0]; i++) {
    scale_case(37, 29, 40, 1, 0, amps[i][0], amps[i][1]);   /* a column's ends element by element */
    scale_case(64, 48, 64, 3, 0, amps[i][0], amps[i][1]);   /* vectors throughout */
    scale_case(13, 7, 13, 4, 1, amps[i][0], amps[i][1]);    /* pointer arrays, backwards */
  }
  scale_case(3, 1, 3, 1, 0, 1, 1);
  /* More groups than the amax grid has blocks: each block loops. */
  scale_case(1024, 300, 1024, 1, 0, 1e-3, 7);
}

/* Inf and NaN: left out of the amax, kept by the cast; an operand of
 * nothing but Inf, NaN and zeros has shift 0. */
static void test_nonfinite_values(void **state) {
  (void)state;
  opnd a, b;
  opnd_make(&a, 16, 8, 16, 1, 0, 3.0);
  opnd_make(&b, 8, 4, 8, 1, 0, 1.0);
  a.src[5] = 0x7f80;  /* +Inf */
  a.src[17] = 0xff80; /* -Inf */
  a.src[40] = 0x7fc1; /* NaN */
  for (int i = 0; i < 32; i++) b.src[i] = i % 3 == 0 ? 0x7f80 : i % 3 == 1 ? 0xffc0 : 0x8000;
  scratch s = scratch_make();
  const fp16_launch l = on75();
  const fp16_operand oa = opnd_arg(&a), ob = opnd_arg(&b);
  const float one = 1.0f, zero = 0.0f;
  assert_int_equal(fp16_scale_operands(&l, &oa, &ob, s.partials, s.scales, &one, &zero, 0, 0), CUDA_SUCCESS);
  assert_int_equal(s.scales->shift[0], ref_shift(opnd_amax(&a)));
  assert_int_equal(s.scales->shift[1], 0);
  assert_true(s.scales->amax[1] == 0.0f);
  assert_int_equal(a.dst[5], 0x7c00);
  assert_int_equal(a.dst[17], 0xfc00);
  assert_true((a.dst[40] & 0x7fff) > 0x7c00);
  opnd_check(&a, s.scales->shift[0], "A");
  opnd_check(&b, 0, "B");
  opnd_free(&a);
  opnd_free(&b);
  scratch_free(&s);
}

/* Direct: the GEMM's alpha is alpha_eff, which must stay a normal fp32 to
 * be exact. Tiny operands would want shifts summing past 126 + log2|alpha|:
 * the larger shift gives way first, then both; a value still converts
 * exactly for the shift it got. Device alpha is read by the kernel. */
static void test_direct_alpha_stays_normal(void **state) {
  (void)state;
  static const struct { double amp_a, amp_b; float alpha; } cases[] = {
      {1e-30, 1e-30, 1.0f}, {1e-30, 1.0, 1.0f}, {1e-20, 1e-35, 0.125f}, {1e-12, 1e-6, 1e-30f}, {1, 1, 3.0f},
      {1e-30, 1e-30, 0x1p-130f}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int device = 0; device < 2; device++) {
      opnd a, b;
      opnd_make(&a, 24, 16, 24, 2, 0, cases[i].amp_a);
      opnd_make(&b, 16, 8, 16, 2, 0, cases[i].amp_b);
      scratch s = scratch_make();
      float *dev_scalars = dev_alloc(8);
      dev_scalars[0] = cases[i].alpha;
      dev_scalars[1] = 2.0f;
      const float host[2] = {cases[i].alpha, 2.0f};
      const fp16_launch l = on75();
      const fp16_operand oa = opnd_arg(&a), ob = opnd_arg(&b);
      const float *sc = device ? dev_scalars : host;
      assert_int_equal(fp16_scale_operands(&l, &oa, &ob, s.partials, s.scales, sc, sc + 1, device, 1), CUDA_SUCCESS);
      const int sa = s.scales->shift[0], sb = s.scales->shift[1];
      const int want_a = ref_shift(opnd_amax(&a)), want_b = ref_shift(opnd_amax(&b));
      int ea;
      frexp(cases[i].alpha, &ea);
      ea -= 1;
      assert_true(sa <= want_a && sb <= want_b);
      if (want_a + want_b <= ea + 126) {
        assert_int_equal(sa, want_a);
        assert_int_equal(sb, want_b);
      } else {
        assert_int_equal(sa + sb, ea + 126);
      }
      double alpha_eff = ldexp(cases[i].alpha, -(sa + sb));
      assert_true(s.scales->alpha_eff == (float)alpha_eff && fabs(alpha_eff) >= 0x1p-126);
      assert_true(s.scales->beta == 2.0f);
      opnd_check(&a, sa, "A");
      opnd_check(&b, sb, "B");
      opnd_free(&a);
      opnd_free(&b);
      scratch_free(&s);
      dev_free(dev_scalars);
    }
}

/* ---- the output kernel ------------------------------------------------------------- */
static float ref_relu(float v) { return v > 0.0f ? v : 0.0f; }

static void output_case(int c_elem_type, int d_type, int epilogue, int shift_sum, int device, float alpha,
                        float beta, int array) {
  const int64_t m = 19, n = 11, batch = 3, ldc = 23, ldd = ldc;
  const int64_t sc = ldc * n + 5;
  float *t = dev_alloc((size_t)(m * n * batch * 4));
  for (int64_t i = 0; i < m * n * batch; i++) t[i] = (float)((rng_unit() * 2 - 1) * ldexp(1.0, 20));
  t[7] = INFINITY;
  t[8] = NAN;
  const size_t cs = c_elem_type == CUDA_R_32F ? 4 : 2;
  char *c = dev_alloc((size_t)(sc * batch) * cs);
  for (int64_t i = 0; i < sc * batch; i++) {
    float v = (float)(rng_unit() * 2 - 1);
    if (cs == 4) ((float *)c)[i] = v;
    else ((uint16_t *)c)[i] = gs_f32_to_bf16_rn(v);
  }
  char *before = malloc((size_t)(sc * batch) * cs);
  memcpy(before, c, (size_t)(sc * batch) * cs);
  void **ptrs = NULL;
  if (array) {
    ptrs = dev_alloc((size_t)batch * sizeof(void *));
    for (int64_t b = 0; b < batch; b++) ptrs[b] = c + (size_t)(b * sc) * cs;
  }
  const int64_t bias_stride = 13;
  uint16_t *bias = dev_alloc((size_t)(bias_stride * (batch - 1) + m) * 2);
  for (int64_t i = 0; i < bias_stride * (batch - 1) + m; i++) bias[i] = gs_f32_to_bf16_rn((float)(rng_unit() - 0.5));
  gs_fp16_scales *scales = dev_alloc(sizeof *scales);
  scales->shift[0] = shift_sum / 2;
  scales->shift[1] = shift_sum - shift_sum / 2;
  float *dev_scalars = dev_alloc(8);
  dev_scalars[0] = alpha, dev_scalars[1] = beta;
  const float host[2] = {alpha, beta};
  const fp16_output o = {.t = t, .scales = scales, .alpha = device ? dev_scalars : host,
                         .beta = device ? dev_scalars + 1 : host + 1, .device_scalars = device,
                         .c_type = c_elem_type, .c_array = array, .c = array ? (const void *)ptrs : c, .ldc = ldc,
                         .stride_c = sc, .d_type = d_type, .d_array = array, .d = array ? (void *)ptrs : c,
                         .ldd = ldd, .stride_d = sc, .m = m, .n = n, .batch = batch, .epilogue = epilogue,
                         .bias_type = CUDA_R_16BF, .bias = bias, .bias_stride = bias_stride};
  const fp16_launch l = on75();
  assert_int_equal(fp16_write_output(&l, &o), CUDA_SUCCESS);
  const int has_bias = epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
                       epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        const int64_t ci = b * sc + j * ldc + i;
        const float p = (float)ldexp((double)t[(b * n + j) * m + i], -shift_sum);
        float v = alpha * p;
        float cv = cs == 4 ? ((float *)before)[ci] : gs_bf16_to_f32(((uint16_t *)before)[ci]);
        if (beta != 0.0f) v = v + beta * cv;
        if (has_bias) v = v + gs_bf16_to_f32(bias[b * bias_stride + i]);
        if (epilogue == CUBLASLT_EPILOGUE_RELU || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) v = ref_relu(v);
        float got = d_type == CUDA_R_32F ? ((float *)c)[ci] : gs_bf16_to_f32(((uint16_t *)c)[ci]);
        if (epilogue == CUBLASLT_EPILOGUE_GELU || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS) {
          /* Against double; non-finite inputs as the formula has them
           * (GELU(-Inf) = -Inf x 0, NaN). */
          double g = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * (double)v * v * v)));
          if (isinf(v)) g = v > 0 ? v : NAN;
          if (isnan(g)) assert_true(isnan(got));
          else if (isinf(g)) assert_true(got == (float)g);
          else if (!(fabs(got - g) <= 4e-7 * fabs(v) + 1e-6 + (d_type == CUDA_R_32F ? 0 : 0x1p-8 * fabs(g))))
            fail_msg("GELU(%a) = %a, expected %a", (double)v, (double)got, g);
          continue;
        }
        uint32_t want = d_type == CUDA_R_32F ? gs_f32_bits(v) : gs_f32_to_bf16_rn(v);
        uint32_t bits = d_type == CUDA_R_32F ? ((uint32_t *)c)[ci] : ((uint16_t *)c)[ci];
        if (bits != want && !(isnan(v) && isnan(got)))
          fail_msg("D[%lld](%lld,%lld) = %a, expected %a (shift sum %d, epilogue %d)", (long long)b, (long long)i,
                   (long long)j, (double)got, (double)v, shift_sum, epilogue);
      }
  free(before);
  dev_free(t), dev_free(c), dev_free(bias), dev_free(scales), dev_free(dev_scalars);
  if (ptrs) dev_free(ptrs);
}

static void test_output_kernel(void **state) {
  (void)state;
  static const int epis[] = {-1, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS,
                             CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS};
  /* Shift sums whose power of two is a normal fp32, and past it either
   * way (the double path): the tiny and the huge operands' products. */
  static const int shifts[] = {0, 30, -20, 126, 127, 128, 200, -130, -250, 296};
  for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++)
    for (size_t s = 0; s < sizeof shifts / sizeof shifts[0]; s++) {
      output_case(CUDA_R_16BF, CUDA_R_16BF, epis[e], shifts[s], (int)(s & 1), 1.25f, s % 3 ? 0.5f : 0.0f, 0);
      output_case(CUDA_R_32F, CUDA_R_32F, epis[e], shifts[s], (int)!(s & 1), -0.75f, 1.0f, (int)(s % 2));
    }
}

/* beta == 0 (host mode) never reads C: a NULL C is taken. */
static void test_output_beta_zero_reads_no_c(void **state) {
  (void)state;
  float *t = dev_alloc(64 * 4), *d = dev_alloc(64 * 4);
  for (int i = 0; i < 64; i++) t[i] = (float)i;
  gs_fp16_scales *scales = dev_alloc(sizeof *scales);
  scales->shift[0] = 2, scales->shift[1] = 1;
  const float alpha = 2.0f, beta = 0.0f;
  const fp16_output o = {.t = t, .scales = scales, .alpha = &alpha, .beta = &beta, .c_type = CUDA_R_32F,
                         .c = NULL, .ldc = 8, .d_type = CUDA_R_32F, .d = d, .ldd = 8, .m = 8, .n = 8, .batch = 1,
                         .epilogue = -1};
  const fp16_launch l = on75();
  assert_int_equal(fp16_write_output(&l, &o), CUDA_SUCCESS);
  for (int i = 0; i < 64; i++) assert_true(d[i] == 2.0f * (float)i / 8.0f);
  dev_free(t), dev_free(d), dev_free(scales);
}

/* ---- argument checks ---------------------------------------------------------------- */
/* Every driver entry fails while armed: an argument error must be found
 * before any driver call (else the result would be CUDA_ERROR_UNKNOWN). */
static void arm_driver_failures(void) {
  static const gs_sys_id ids[] = {GS_SYS_cuCtxGetCurrent, GS_SYS_cuCtxPushCurrent_v2, GS_SYS_cuModuleLoadData,
                                  GS_SYS_cuModuleGetFunction, GS_SYS_cuLaunchKernel, GS_SYS_cuCtxGetId};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) gs_fault_arm(ids[i], 1, 1);
}

static void test_argument_checks(void **state) {
  (void)state;
  const CUresult BAD = CUDA_ERROR_INVALID_VALUE;
  uint16_t *src = dev_alloc(4096), *dst = dev_alloc(4096);
  scratch s = scratch_make();
  const float one = 1.0f;
  const fp16_launch l = on75();
  fp16_launch l61 = {KERNEL_CTX(ctx61), NULL, 61}, nul = {NULL, NULL, 75};
  const fp16_operand ok = {src, 0, 8, 0, 8, 8, 1, dst};
  fp16_operand bad[8];
  for (int i = 0; i < 8; i++) bad[i] = ok;
  bad[0].rows = -1;
  bad[1].ld = 7;          /* below rows */
  bad[2].src = NULL;
  bad[3].dst = NULL;
  bad[4].src = (char *)src + 1; /* misaligned */
  bad[5].batch = 2, bad[5].stride = -8;
  bad[6].cols = INT64_MAX / 2; /* the span does not fit */
  bad[7].src_array = 1, bad[7].src = (char *)src + 2; /* a pointer array not pointer-aligned */
  arm_driver_failures();
  for (int i = 0; i < 8; i++) {
    assert_int_equal(fp16_scale_operands(&l, &bad[i], &ok, s.partials, s.scales, &one, &one, 0, 0), BAD);
    assert_int_equal(fp16_scale_operands(&l, &ok, &bad[i], s.partials, s.scales, &one, &one, 0, 0), BAD);
  }
  assert_int_equal(fp16_scale_operands(&l, &ok, &ok, NULL, s.scales, &one, &one, 0, 0), BAD);
  assert_int_equal(fp16_scale_operands(&l, &ok, &ok, s.partials, NULL, &one, &one, 0, 0), BAD);
  assert_int_equal(fp16_scale_operands(&l, &ok, &ok, s.partials, s.scales, NULL, &one, 0, 0), BAD);
  assert_int_equal(fp16_scale_operands(&nul, &ok, &ok, s.partials, s.scales, &one, &one, 0, 0), BAD);
  /* No fp16 tensor cores, no kernels: refused before the driver. */
  assert_int_equal(fp16_scale_operands(&l61, &ok, &ok, s.partials, s.scales, &one, &one, 0, 0),
                   CUDA_ERROR_NOT_SUPPORTED);
  float *t = dev_alloc(256);
  const fp16_output out = {.t = t, .scales = s.scales, .alpha = &one, .beta = &one, .c_type = CUDA_R_16BF,
                           .c = dst, .ldc = 8, .d_type = CUDA_R_16BF, .d = dst, .ldd = 8, .m = 8, .n = 8,
                           .batch = 1, .epilogue = -1};
  fp16_output o2[7];
  for (int i = 0; i < 7; i++) o2[i] = out;
  o2[0].d_type = CUDA_R_16F; /* D is bf16 or fp32 */
  o2[1].ldd = 7;
  o2[2].c = NULL;           /* beta is 1: C is read */
  o2[3].epilogue = CUBLASLT_EPILOGUE_BIAS; /* no bias */
  o2[4].batch = 2, o2[4].stride_d = 10;    /* written members overlap */
  o2[5].t = NULL;
  o2[6].m = -1;
  for (int i = 0; i < 7; i++) assert_int_equal(fp16_write_output(&l, &o2[i]), BAD);
  fp16_output aux = out;
  aux.epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
  assert_int_equal(fp16_write_output(&l, &aux), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(fp16_write_output(&l61, &out), CUDA_ERROR_NOT_SUPPORTED);
  /* The controls: valid work reaches the (failing) driver. */
  assert_int_not_equal(fp16_scale_operands(&l, &ok, &ok, s.partials, s.scales, &one, &one, 0, 0), CUDA_SUCCESS);
  assert_int_not_equal(fp16_write_output(&l, &out), CUDA_SUCCESS);
  gs_fault_clear();
  /* Empty operands still get their record: shift 0. */
  fp16_operand empty = ok;
  empty.rows = 0;
  assert_int_equal(fp16_scale_operands(&l, &empty, &empty, s.partials, s.scales, &one, &one, 0, 0), CUDA_SUCCESS);
  assert_int_equal(s.scales->shift[0], 0);
  assert_int_equal(s.scales->shift[1], 0);
  dev_free(src), dev_free(dst), dev_free(t);
  scratch_free(&s);
}

/* The launch shapes: the amax grid never writes more partials than the
 * cast kernel folds, and the cast grid is capped (it loops). */
static void test_plans(void **state) {
  (void)state;
  uint16_t *src = dev_alloc(64), *dst = dev_alloc(64);
  scratch s = scratch_make();
  const float one = 1.0f;
  fp16_operand big = {src, 0, 1 << 20, 0, 1 << 20, 1 << 12, 4, dst};
  fp16_operand small = {src, 0, 8, 0, 8, 8, 1, dst};
  gs_fp16_amax_args amax;
  gs_fp16_cast_args cast;
  unsigned ag[3], cg[3];
  assert_int_equal(fp16_plan_scale(&big, &small, s.partials, s.scales, &one, &one, 0, 0, &amax, ag, &cast, cg),
                   CUDA_SUCCESS);
  assert_int_equal(amax.blocks[0], GS_FP16_PARTIALS);
  assert_int_equal(amax.blocks[1], 1);
  assert_int_equal(ag[0], GS_FP16_PARTIALS);
  assert_int_equal(ag[1], 2);
  assert_int_equal(cg[0], GS_FP16_CAST_BLOCKS);
  assert_int_equal(cast.groups, (int64_t)(1 << 18) * (1 << 12) * 4 + 2 * 8);
  assert_int_equal(amax.op[0].src.vec, 1);
  assert_int_equal(amax.op[1].span.first, (int64_t)(1 << 18) * (1 << 12) * 4);
  dev_free(src), dev_free(dst);
  scratch_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plans),
      cmocka_unit_test(test_argument_checks),
      cmocka_unit_test(test_scale_shapes_and_amplitudes),
      cmocka_unit_test(test_nonfinite_values),
      cmocka_unit_test(test_direct_alpha_stays_normal),
      cmocka_unit_test(test_output_kernel),
      cmocka_unit_test(test_output_beta_zero_reads_no_c),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
