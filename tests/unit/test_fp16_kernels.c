/* test_fp16_kernels.c: the fp16 route's kernels (kernels/fp16.cu) and their
 * launchers (kernels/fp16_launch.c), run on the CPU: the launchers call the
 * stand-in libcuda.so.1, whose cuLaunchKernel runs the host build of the
 * same source. Fresh random data each run (seed printed; GS_TEST_SEED
 * repeats a run); outputs poisoned first.
 *
 * The references are written from the formats, not from the kernels:
 *   - a line (row of op(A), column of op(B)) is scaled so that its largest
 *     finite magnitude lands in [2^15, 2^16) (IEEE 754 binary16's largest
 *     finite is 65504 = (2 - 2^-10) 2^15, and the largest bf16 below 2^16
 *     is 65280): shift = 15 - floor(log2 amax), from frexp; Inf and NaN do
 *     not count;
 *   - a line is non-finite when it holds an Inf or NaN, and lossy when a
 *     nonzero value lies more than 32 binades below its largest (the shift
 *     takes it below 2^-17, where binary16's subnormal spacing 2^-24 is
 *     coarser than the value's 8 significant bits need); independently,
 *     every value whose binary16 conversion is not exact must lie in a
 *     lossy line;
 *   - each fp16 output is x 2^shift rounded to binary16 in the value
 *     domain with double arithmetic (the same reference test_kernels.c
 *     checks convert.h against): every element compared bit for bit;
 *   - the output kernel: the exact product P = T 2^-(sa_i + sb_j) in
 *     double, rounded once to fp32, or, for a non-finite row or column,
 *     amaxes whose k products could overflow fp32 (FLT_MAX < 2^128), or a
 *     lossy row or column with |T| < 2^(ceil(log2 k) + 17), the fp32 sum
 *     of the bf16 products in order of l; then alpha P + beta C,
 *     bias, relu in fp32 and one rounding to D's type, bit for bit; GELU
 *     against double. */
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
/* A binary16 value from its bits (IEEE 754: 5 exponent bits, bias 15,
 * 10 fraction bits; exponent 0 is subnormal, 2^-24 a unit). */
static double ref_f16_value(uint16_t h) {
  const int e = (h >> 10) & 31, f = h & 1023;
  const double v = e == 31 ? (f ? NAN : INFINITY) : e ? ldexp(1024 + f, e - 25) : ldexp(f, -24);
  return h & 0x8000 ? -v : v;
}

static int ref_shift(double amax) {
  if (amax == 0) return 0;
  int e;
  frexp(amax, &e);
  return 15 - (e - 1);
}

/* ---- one operand through amax and cast ------------------------------------------ */
typedef struct opnd {
  int64_t rows, cols, ld, stride, batch;
  int array, by_row;
  uint16_t *src;   /* device: ld*cols per member, stride apart */
  void **ptrs;     /* device pointer array (array) */
  uint16_t *dst;
  uint32_t *info;  /* device: one word per line and member */
} opnd;

static int64_t opnd_lines(const opnd *o) { return o->by_row ? o->rows : o->cols; }
static int64_t opnd_length(const opnd *o) { return o->by_row ? o->cols : o->rows; }

/* Line i's magnitude: amp times 2^(e_i), e_i spread over +-60 binades line
 * by line, so neighbouring lines differ widely (the per-line scales). */
static void opnd_make(opnd *o, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int array, int by_row,
                      double amp) {
  memset(o, 0, sizeof *o);
  o->rows = rows, o->cols = cols, o->ld = ld, o->batch = batch, o->array = array, o->by_row = by_row;
  o->stride = batch > 1 ? ld * cols + 3 : 0;
  int64_t n = o->stride * (batch - 1) + ld * cols;
  o->src = dev_alloc((size_t)n * 2); /* 0xffff: NaN in the padding, which the amax must not see */
  for (int64_t b = 0; b < batch; b++)
    for (int64_t c = 0; c < cols; c++)
      for (int64_t r = 0; r < rows; r++) {
        const int64_t line = by_row ? r : c;
        const int e = (int)((line * 37 + b * 11) % 121) - 60;
        double x = ldexp(amp, e);
        if (x > 1e38) x = 1e38;
        if (x < 1e-38) x = 1e-38;
        o->src[b * o->stride + c * ld + r] = rand_bf16(x);
      }
  if (array) {
    o->ptrs = dev_alloc((size_t)batch * sizeof(void *));
    for (int64_t b = 0; b < batch; b++) o->ptrs[b] = o->src + (batch - 1 - b) * o->stride; /* backwards */
  }
  o->dst = dev_alloc((size_t)(rows * cols * batch * 2 + 16));
  o->info = dev_alloc((size_t)(opnd_lines(o) * batch * 4 + 16));
}

static uint16_t opnd_at(const opnd *o, int64_t b, int64_t r, int64_t c) {
  int64_t member = o->array ? o->batch - 1 - b : b;
  return o->src[member * o->stride + c * o->ld + r];
}

/* Element l of line i of member b. */
static uint16_t opnd_line_at(const opnd *o, int64_t b, int64_t i, int64_t l) {
  return o->by_row ? opnd_at(o, b, i, l) : opnd_at(o, b, l, i);
}

static fp16_operand opnd_arg(const opnd *o) {
  return (fp16_operand){o->array ? (const void *)o->ptrs : o->src, o->array, o->ld, o->stride, o->rows, o->cols,
                        o->batch, o->dst, o->by_row, o->info};
}

/* A line's largest finite magnitude and its flags (above): GS_FP16_NONFINITE
 * and GS_FP16_LOSSY, as *flags. */
static double ref_line(const opnd *o, int64_t b, int64_t i, uint32_t *flags) {
  double m = 0, lo = INFINITY;
  *flags = 0;
  for (int64_t l = 0; l < opnd_length(o); l++) {
    double v = fabs(gs_bf16_to_f32(opnd_line_at(o, b, i, l)));
    if (!isfinite(v)) *flags |= GS_FP16_NONFINITE;
    else if (v > 0) {
      if (v > m) m = v;
      if (v < lo) lo = v;
    }
  }
  int em, el;
  if (m > 0 && (frexp(m, &em), frexp(lo, &el), el < em - 32)) *flags |= GS_FP16_LOSSY;
  return m;
}

/* Every line's word, and every fp16 output bit for bit (the line's own
 * shift), and the bytes past the copy untouched. Returns the unsafe lines. */
static int opnd_check(const opnd *o, const char *what) {
  int flagged_lines = 0;
  for (int64_t b = 0; b < o->batch; b++)
    for (int64_t i = 0; i < opnd_lines(o); i++) {
      uint32_t flags;
      double m = ref_line(o, b, i, &flags);
      uint32_t w = o->info[b * opnd_lines(o) + i];
      if ((w & GS_FP16_AMAX_BITS) != (uint32_t)(gs_f32_bits((float)m) >> 16) ||
          (w & ~GS_FP16_AMAX_BITS) != flags)
        fail_msg("%s: member %lld line %lld: word 0x%x, expected amax %a flags 0x%x", what, (long long)b,
                 (long long)i, w, m, flags);
      flagged_lines += flags != 0;
      /* The largest magnitude lands in [2^15, 2^16), inside binary16's range. */
      if (m > 0) assert_true(ldexp(m, ref_shift(m)) >= 32768.0 && ldexp(m, ref_shift(m)) < 65504.0);
    }
  for (int64_t b = 0; b < o->batch; b++)
    for (int64_t c = 0; c < o->cols; c++)
      for (int64_t r = 0; r < o->rows; r++) {
        uint32_t flags;
        const int shift = ref_shift(ref_line(o, b, o->by_row ? r : c, &flags));
        uint16_t x = opnd_at(o, b, r, c);
        const double scaled = ldexp((double)gs_bf16_to_f32(x), shift);
        uint16_t want = ref_f16(scaled);
        uint16_t got = o->dst[(b * o->cols + c) * o->rows + r];
        /* A value binary16 does not hold exactly must be in a lossy line. */
        if (isfinite(scaled) && ref_f16_value(want) != scaled && !(flags & GS_FP16_LOSSY))
          fail_msg("%s: member %lld (%lld,%lld): bf16 0x%04x scaled %a is not exact in binary16 (0x%04x), "
                   "but its line is not lossy", what, (long long)b, (long long)r, (long long)c, x, scaled, want);
        if (got != want && !((got & 0x7fff) > 0x7c00 && (want & 0x7fff) > 0x7c00))
          fail_msg("%s: member %lld (%lld,%lld): bf16 0x%04x shift %d -> 0x%04x, expected 0x%04x", what,
                   (long long)b, (long long)r, (long long)c, x, shift, got, want);
      }
  const uint8_t *end = (const uint8_t *)(o->dst + o->rows * o->cols * o->batch);
  for (int i = 0; i < 16; i++) assert_int_equal(end[i], 0xff);
  const uint8_t *iend = (const uint8_t *)(o->info + opnd_lines(o) * o->batch);
  for (int i = 0; i < 16; i++) assert_int_equal(iend[i], 0xff);
  return flagged_lines;
}

static void opnd_free(opnd *o) {
  dev_free(o->src);
  dev_free(o->dst);
  dev_free(o->info);
  if (o->ptrs) dev_free(o->ptrs);
}

/* A (m x k: lines are rows, or stored k x m: columns) and B through both
 * kernels; the record's constants. */
static void scale_case(int64_t m, int64_t k, int64_t n, int64_t batch, int array, int a_rows_are_lines,
                       int b_rows_are_lines, double amp_a, double amp_b) {
  opnd a, b;
  if (a_rows_are_lines) opnd_make(&a, m, k, m + 3, batch, array, 1, amp_a);
  else opnd_make(&a, k, m, k, batch, array, 0, amp_a);
  if (b_rows_are_lines) opnd_make(&b, n, k, n + 1, batch, array, 1, amp_b);
  else opnd_make(&b, k, n, k + 2, batch, array, 0, amp_b);
  gs_fp16_record *rec = dev_alloc(sizeof *rec);
  const fp16_launch l = on75();
  const fp16_operand oa = opnd_arg(&a), ob = opnd_arg(&b);
  assert_int_equal(fp16_scale_operands(&l, &oa, &ob, rec), CUDA_SUCCESS);
  assert_true(rec->one == 1.0f && rec->zero == 0.0f);
  opnd_check(&a, "A");
  opnd_check(&b, "B");
  opnd_free(&a);
  opnd_free(&b);
  dev_free(rec);
}

static void test_scale_lines(void **state) {
  (void)state;
  /* Lines 2^-60 to 2^60 around each amplitude: each has its own scale. */
  static const double amps[][2] = {{1, 1}, {1e-9, 1e6}, {1e-20, 1e20}, {1e-30, 1e30}};
  for (size_t i = 0; i < sizeof amps / sizeof amps[0]; i++) {
    scale_case(37, 29, 11, 1, 0, 1, 0, amps[i][0], amps[i][1]); /* a column's ends element by element */
    scale_case(64, 48, 16, 3, 0, 0, 1, amps[i][0], amps[i][1]); /* vectors throughout */
    scale_case(13, 7, 5, 4, 1, 1, 1, amps[i][0], amps[i][1]);   /* pointer arrays, backwards */
  }
  scale_case(3, 1, 1, 1, 0, 0, 0, 1, 1);
  /* B's columns aligned for vector loads, 30 long: 7 loads and a tail of 2. */
  scale_case(20, 30, 12, 1, 0, 0, 0, 1e-5, 1e5);
  /* More lines and groups than one block: each kernel loops or spreads. */
  scale_case(1024, 40, 300, 1, 0, 1, 0, 1e-3, 7);
}

/* Unsafe lines: an Inf or NaN; a nonzero value 30 binades below the
 * largest (2^-15 after scaling: a binary16 subnormal); exactly 29 below is
 * 2^-14, binary16's smallest normal: safe. Inf and NaN are left out of the
 * amax and kept by the cast; a line of nothing but Inf, NaN and zeros has
 * amax 0 (shift 0). */
static void test_unsafe_lines(void **state) {
  (void)state;
  opnd a, b;
  opnd_make(&a, 8, 6, 8, 1, 0, 1, 1.0); /* lines are rows: element l of row i at i + 8 l */
  opnd_make(&b, 6, 4, 6, 1, 0, 0, 1.0); /* lines are columns */
  for (int l = 0; l < 6; l++) {
    a.src[0 + 8 * l] = gs_f32_to_bf16_rn(l == 0 ? 1.0f : 0.5f); /* row 0: exact */
    /* row 1: 0x1.fep-32 scales to 0x1.fep-17, its lowest bit at 2^-24: exact */
    a.src[1 + 8 * l] = gs_f32_to_bf16_rn(l == 0 ? 1.0f : l == 1 ? 0x1.fep-32f : 0.0f);
    /* row 2: 0x1.02p-33 scales to 0x1.02p-18, a bit at 2^-25: lossy */
    a.src[2 + 8 * l] = gs_f32_to_bf16_rn(l == 0 ? 1.5f : l == 1 ? 0x1.02p-33f : 0.0f);
    a.src[3 + 8 * l] = l == 2 ? 0x7f80 : gs_f32_to_bf16_rn(3.0f);  /* +Inf */
    a.src[4 + 8 * l] = l == 5 ? 0xff80 : 0;                        /* -Inf and zeros: amax 0 */
    a.src[5 + 8 * l] = l == 3 ? 0x7fc1 : gs_f32_to_bf16_rn(-2.0f); /* NaN */
    a.src[6 + 8 * l] = 0x0001;                                       /* bf16 subnormals only: exact */
    a.src[7 + 8 * l] = gs_f32_to_bf16_rn(l == 0 ? 0x1p127f : 0x1p-100f); /* lossy */
  }
  for (int i = 0; i < 24; i++) b.src[i] = i % 3 == 0 ? 0x7f80 : i % 3 == 1 ? 0xffc0 : 0x8000;
  gs_fp16_record *rec = dev_alloc(sizeof *rec);
  const fp16_launch l = on75();
  const fp16_operand oa = opnd_arg(&a), ob = opnd_arg(&b);
  assert_int_equal(fp16_scale_operands(&l, &oa, &ob, rec), CUDA_SUCCESS);
  const uint32_t N = GS_FP16_NONFINITE, L = GS_FP16_LOSSY;
  static const uint32_t want_flags[8] = {0, 0, GS_FP16_LOSSY, GS_FP16_NONFINITE, GS_FP16_NONFINITE,
                                         GS_FP16_NONFINITE, 0, GS_FP16_LOSSY};
  for (int i = 0; i < 8; i++) assert_int_equal(a.info[i] & (N | L), want_flags[i]);
  assert_int_equal(a.info[4] & GS_FP16_AMAX_BITS, 0);
  assert_int_equal(a.dst[3 + 8 * 2], 0x7c00); /* Inf stays Inf */
  assert_int_equal(a.dst[4 + 8 * 5], 0xfc00);
  assert_true((a.dst[5 + 8 * 3] & 0x7fff) > 0x7c00);
  assert_int_equal(a.dst[1 + 8 * 1], ref_f16(0x1.fep-17)); /* exact: 0x1.fep-17 */
  assert_true(ref_f16_value(a.dst[1 + 8 * 1]) == 0x1.fep-17);
  assert_int_equal(opnd_check(&a, "A"), 5);
  assert_int_equal(opnd_check(&b, "B"), 4);
  for (int j = 0; j < 4; j++) assert_int_equal(b.info[j], GS_FP16_NONFINITE);
  opnd_free(&a);
  opnd_free(&b);
  dev_free(rec);
}

/* Normal data flag nothing: standard normal values (Box-Muller), rounded
 * to bf16. A line is flagged only by a nonzero value more than 2^32 below
 * its largest: for N(0,1) that needs |x| < ~4 * 2^-32 ~ 9.3e-10,
 * probability 2 * 9.3e-10 / sqrt(2 pi) ~ 7.4e-10 per value, so A's 256
 * rows of 1024 and B's 64 columns of 1024 (3.3e5 values) flag one with
 * probability ~2.5e-4;
 * the test draws fixed data (its own seed) so it cannot flake. */
static void test_gaussian_flags_nothing(void **state) {
  (void)state;
  const uint64_t saved = rng_state;
  rng_state = 12345;
  opnd a, b;
  opnd_make(&a, 256, 1024, 256, 1, 0, 1, 1.0);
  opnd_make(&b, 1024, 64, 1024, 1, 0, 0, 1.0);
  for (opnd *o = &a; o; o = o == &a ? &b : NULL)
    for (int64_t i = 0; i < o->rows * o->cols; i++) {
      double u1 = rng_unit() + 0x1p-60, u2 = rng_unit();
      o->src[i] = gs_f32_to_bf16_rn((float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2)));
    }
  rng_state = saved;
  gs_fp16_record *rec = dev_alloc(sizeof *rec);
  const fp16_launch l = on75();
  const fp16_operand oa = opnd_arg(&a), ob = opnd_arg(&b);
  assert_int_equal(fp16_scale_operands(&l, &oa, &ob, rec), CUDA_SUCCESS);
  assert_int_equal(opnd_check(&a, "A"), 0);
  assert_int_equal(opnd_check(&b, "B"), 0);
  opnd_free(&a);
  opnd_free(&b);
  dev_free(rec);
}

/* ---- the output kernel ------------------------------------------------------------- */
static float ref_relu(float v) { return v > 0.0f ? v : 0.0f; }

/* A word: amax 2^e (bf16 bits) and flags. */
static uint32_t word_of(int e, uint32_t flags) { return (gs_f32_bits(ldexpf(1.0f, e)) >> 16) | flags; }

static int word_shift(uint32_t w) {
  return (w & GS_FP16_AMAX_BITS) ? ref_shift(gs_bf16_to_f32((uint16_t)(w & GS_FP16_AMAX_BITS))) : 0;
}

/* exps: where the rows' and columns' amax exponents lie (their sum sets
 * the unscale: normal powers of two, and past them either way). Row 1
 * non-finite (it holds an Inf); row 5 and column 2 lossy, recomputed where
 * |T| < 2^(3 + 17) (k = 5), T drawn from +-2^21 so that both ways occur;
 * row 3 and column 4 at 2^127 and 2^1, whose k products could pass
 * FLT_MAX: recomputed. */
static void output_case(int c_elem_type, int d_type, int epilogue, int exp_base, int device, float alpha,
                        float beta, int array) {
  const int64_t m = 19, n = 11, k = 5, batch = 3, ldc = 23, ldd = ldc;
  const int64_t sc = ldc * n + 5;
  float *t = dev_alloc((size_t)(m * n * batch * 4));
  for (int64_t i = 0; i < m * n * batch; i++) t[i] = (float)((rng_unit() * 2 - 1) * ldexp(1.0, 21));
  t[7] = INFINITY;
  t[8] = NAN;
  /* The bf16 operands the recomputation reads: A m x k (rows are lines),
   * B k x n (columns are lines), one member each (shared by every member). */
  opnd a, b;
  opnd_make(&a, m, k, m, 1, 0, 1, 1.0);
  opnd_make(&b, k, n, k, 1, 0, 0, 1.0);
  for (int64_t i = 0; i < m; i++)
    a.info[i] = word_of(exp_base + (int)(i % 7) - 3, i == 1 ? GS_FP16_NONFINITE : i == 5 ? GS_FP16_LOSSY : 0);
  for (int64_t j = 0; j < n; j++) b.info[j] = word_of(exp_base / 2 + (int)(j % 5) - 2, j == 2 ? GS_FP16_LOSSY : 0);
  for (int64_t l = 0; l < k; l++) {
    a.src[3 + l * m] = gs_f32_to_bf16_rn(l % 2 ? 0x1p127f : -0x1p127f);
    b.src[l + 4 * k] = gs_f32_to_bf16_rn(2.0f);
  }
  a.info[3] = word_of(127, 0);
  b.info[4] = word_of(1, 0);
  a.src[1 + 2 * m] = 0x7f80; /* row 1: an Inf, so the recomputation shows it */
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
    for (int64_t bb = 0; bb < batch; bb++) ptrs[bb] = c + (size_t)(bb * sc) * cs;
  }
  const int64_t bias_stride = 13;
  uint16_t *bias = dev_alloc((size_t)(bias_stride * (batch - 1) + m) * 2);
  for (int64_t i = 0; i < bias_stride * (batch - 1) + m; i++) bias[i] = gs_f32_to_bf16_rn((float)(rng_unit() - 0.5));
  float *dev_scalars = dev_alloc(8);
  dev_scalars[0] = alpha, dev_scalars[1] = beta;
  const float host[2] = {alpha, beta};
  const fp16_operand oa = opnd_arg(&a), ob = opnd_arg(&b);
  const fp16_output o = {.t = t, .a = &oa, .b = &ob, .alpha = device ? dev_scalars : host,
                         .beta = device ? dev_scalars + 1 : host + 1, .device_scalars = device,
                         .c_type = c_elem_type, .c_array = array, .c = array ? (const void *)ptrs : c, .ldc = ldc,
                         .stride_c = sc, .d_type = d_type, .d_array = array, .d = array ? (void *)ptrs : c,
                         .ldd = ldd, .stride_d = sc, .m = m, .n = n, .batch = batch, .epilogue = epilogue,
                         .bias_type = CUDA_R_16BF, .bias = bias, .bias_stride = bias_stride};
  const fp16_launch l = on75();
  assert_int_equal(fp16_write_output(&l, &o), CUDA_SUCCESS);
  const int has_bias = epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
                       epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
  for (int64_t bb = 0; bb < batch; bb++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        const int64_t ci = bb * sc + j * ldc + i;
        const uint32_t wa = a.info[i], wb = b.info[j];
        float p;
        const int ea = (int)((wa >> 7) & 0xff) - 127, eb = (int)((wb >> 7) & 0xff) - 127;
        /* k = 5: ceil(log2 k) = 3; k products below 2^(ea+1) 2^(eb+1) each. */
        const float tt = t[(bb * n + j) * m + i];
        if ((wa | wb) & GS_FP16_NONFINITE || ea + eb + 2 + 3 > 127 ||
            ((wa | wb) & GS_FP16_LOSSY && !(fabs((double)tt) >= 0x1p20))) {
          p = 0.0f;
          for (int64_t q = 0; q < k; q++) {
            float prod = gs_bf16_to_f32(a.src[i + q * m]) * gs_bf16_to_f32(b.src[q + j * k]);
            p = p + prod;
          }
        } else {
          p = (float)ldexp((double)t[(bb * n + j) * m + i], -(word_shift(wa) + word_shift(wb)));
        }
        float v = alpha * p;
        float cv = cs == 4 ? ((float *)before)[ci] : gs_bf16_to_f32(((uint16_t *)before)[ci]);
        if (beta != 0.0f) v = v + beta * cv;
        if (has_bias) v = v + gs_bf16_to_f32(bias[bb * bias_stride + i]);
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
          fail_msg("D[%lld](%lld,%lld) = %a, expected %a (exponents %d %d, epilogue %d)", (long long)bb,
                   (long long)i, (long long)j, (double)got, (double)v, ea, eb, epilogue);
      }
  /* Row 3 against column 4: 2^128 products, native's fp32 overflows: not finite. */
  if (epilogue == -1) assert_false(isfinite(d_type == CUDA_R_32F ? ((float *)c)[4 * ldc + 3]
                                                             : gs_bf16_to_f32(((uint16_t *)c)[4 * ldc + 3])));
  free(before);
  opnd_free(&a), opnd_free(&b);
  dev_free(t), dev_free(c), dev_free(bias), dev_free(dev_scalars);
  if (ptrs) dev_free(ptrs);
}

static void test_output_kernel(void **state) {
  (void)state;
  static const int epis[] = {-1, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS,
                             CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS};
  /* Amax exponents whose shift sums make powers of two inside fp32's
   * normal range and past it either way (the double path), and sums whose
   * k products could overflow (recomputed). */
  static const int exps[] = {0, 30, -20, 80, 84, -100, -120, 60};
  for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++)
    for (size_t s = 0; s < sizeof exps / sizeof exps[0]; s++) {
      output_case(CUDA_R_16BF, CUDA_R_16BF, epis[e], exps[s], (int)(s & 1), 1.25f, s % 3 ? 0.5f : 0.0f, 0);
      output_case(CUDA_R_32F, CUDA_R_32F, epis[e], exps[s], (int)!(s & 1), -0.75f, 1.0f, (int)(s % 2));
    }
}

/* beta == 0 (host mode) never reads C: a NULL C is taken. */
static void test_output_beta_zero_reads_no_c(void **state) {
  (void)state;
  float *t = dev_alloc(64 * 4), *d = dev_alloc(64 * 4);
  for (int i = 0; i < 64; i++) t[i] = (float)i;
  opnd a, b;
  opnd_make(&a, 8, 4, 8, 1, 0, 1, 1.0);
  opnd_make(&b, 4, 8, 4, 1, 0, 0, 1.0);
  for (int i = 0; i < 8; i++) a.info[i] = word_of(13, 0), b.info[i] = word_of(14, 0); /* shifts 2 and 1 */
  const fp16_operand oa = opnd_arg(&a), ob = opnd_arg(&b);
  const float alpha = 2.0f, beta = 0.0f;
  const fp16_output o = {.t = t, .a = &oa, .b = &ob, .alpha = &alpha, .beta = &beta, .c_type = CUDA_R_32F,
                         .c = NULL, .ldc = 8, .d_type = CUDA_R_32F, .d = d, .ldd = 8, .m = 8, .n = 8, .batch = 1,
                         .epilogue = -1};
  const fp16_launch l = on75();
  assert_int_equal(fp16_write_output(&l, &o), CUDA_SUCCESS);
  for (int i = 0; i < 64; i++) assert_true(d[i] == 2.0f * (float)i / 8.0f);
  dev_free(t), dev_free(d);
  opnd_free(&a), opnd_free(&b);
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
  uint32_t *info = dev_alloc(4096);
  gs_fp16_record *rec = dev_alloc(sizeof *rec);
  const float one = 1.0f;
  const fp16_launch l = on75();
  fp16_launch l61 = {KERNEL_CTX(ctx61), NULL, 61}, nul = {NULL, NULL, 75};
  const fp16_operand ok = {src, 0, 8, 0, 8, 8, 1, dst, 1, info};
  fp16_operand bad[10];
  for (int i = 0; i < 10; i++) bad[i] = ok;
  bad[0].rows = -1;
  bad[1].ld = 7;          /* below rows */
  bad[2].src = NULL;
  bad[3].dst = NULL;
  bad[4].src = (char *)src + 1; /* misaligned */
  bad[5].batch = 2, bad[5].stride = -8;
  bad[6].cols = INT64_MAX / 2; /* the span does not fit */
  bad[7].src_array = 1, bad[7].src = (char *)src + 2; /* a pointer array not pointer-aligned */
  bad[8].info = NULL;
  bad[9].info = (uint32_t *)((char *)info + 2);
  fp16_operand shorter = ok; /* lines of 4 against lines of 8: not one k */
  shorter.cols = 4;
  arm_driver_failures();
  for (int i = 0; i < 10; i++) {
    assert_int_equal(fp16_scale_operands(&l, &bad[i], &ok, rec), BAD);
    assert_int_equal(fp16_scale_operands(&l, &ok, &bad[i], rec), BAD);
  }
  assert_int_equal(fp16_scale_operands(&l, &ok, &shorter, rec), BAD);
  assert_int_equal(fp16_scale_operands(&l, &ok, &ok, NULL), BAD);
  assert_int_equal(fp16_scale_operands(&nul, &ok, &ok, rec), BAD);
  /* No fp16 tensor cores, no kernels: refused before the driver. */
  assert_int_equal(fp16_scale_operands(&l61, &ok, &ok, rec), CUDA_ERROR_NOT_SUPPORTED);
  float *t = dev_alloc(256);
  const fp16_output out = {.t = t, .a = &ok, .b = &ok, .alpha = &one, .beta = &one, .c_type = CUDA_R_16BF,
                           .c = dst, .ldc = 8, .d_type = CUDA_R_16BF, .d = dst, .ldd = 8, .m = 8, .n = 8,
                           .batch = 1, .epilogue = -1};
  fp16_output o2[11];
  for (int i = 0; i < 11; i++) o2[i] = out;
  o2[0].d_type = CUDA_R_16F; /* D is bf16 or fp32 */
  o2[1].ldd = 7;
  o2[2].c = NULL;           /* beta is 1: C is read */
  o2[3].epilogue = CUBLASLT_EPILOGUE_BIAS; /* no bias */
  o2[4].batch = 2, o2[4].stride_d = 10;    /* written members overlap */
  o2[5].t = NULL;
  o2[6].m = -1;
  o2[7].a = NULL;
  o2[8].b = &shorter;       /* lines of another length */
  o2[9].n = 4, o2[9].ldd = 8; /* B has 8 lines, D 4 columns */
  o2[10].a = &bad[8];       /* no words */
  for (int i = 0; i < 11; i++) assert_int_equal(fp16_write_output(&l, &o2[i]), BAD);
  fp16_output aux = out;
  aux.epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
  assert_int_equal(fp16_write_output(&l, &aux), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(fp16_write_output(&l61, &out), CUDA_ERROR_NOT_SUPPORTED);
  /* The controls: valid work reaches the (failing) driver. */
  assert_int_not_equal(fp16_scale_operands(&l, &ok, &ok, rec), CUDA_SUCCESS);
  assert_int_not_equal(fp16_write_output(&l, &out), CUDA_SUCCESS);
  gs_fault_clear();
  /* Empty operands still get their record. */
  fp16_operand empty = ok;
  empty.rows = 0;
  rec->one = rec->zero = 7.0f;
  assert_int_equal(fp16_scale_operands(&l, &empty, &empty, rec), CUDA_SUCCESS);
  assert_true(rec->one == 1.0f && rec->zero == 0.0f);
  dev_free(src), dev_free(dst), dev_free(t), dev_free(info), dev_free(rec);
}

/* The launch shapes: one amax thread per line (A's first), the cast grid
 * capped (it loops), every line of a row-wise operand one stored row. */
static void test_plans(void **state) {
  (void)state;
  uint16_t *src = dev_alloc(64), *dst = dev_alloc(64);
  uint32_t *info = dev_alloc(64);
  gs_fp16_record *rec = dev_alloc(sizeof *rec);
  fp16_operand big = {src, 0, 1 << 20, 0, 1 << 20, 1 << 12, 4, dst, 0, info};   /* k = 2^20, 2^12 lines */
  fp16_operand small = {src, 0, 8, 0, 8, 1 << 20, 1, dst, 1, info};             /* 8 lines of 2^20 */
  gs_fp16_amax_args amax;
  gs_fp16_cast_args cast;
  unsigned ag[3], cg[3];
  assert_int_equal(fp16_plan_scale(&big, &small, rec, &amax, ag, &cast, cg), CUDA_SUCCESS);
  assert_int_equal(amax.total, (int64_t)(1 << 12) * 4 + 8);
  assert_int_equal(ag[0], ((1 << 12) * 4 + 8 + GS_FP16_THREADS - 1) / GS_FP16_THREADS);
  assert_int_equal(amax.line[0].line_step, 1 << 20);
  assert_int_equal(amax.line[0].elem_step, 1);
  assert_int_equal(amax.line[0].length, 1 << 20);
  assert_int_equal(amax.line[1].line_step, 1);
  assert_int_equal(amax.line[1].elem_step, 8);
  assert_int_equal(amax.line[1].lines, 8);
  assert_int_equal(cg[0], GS_FP16_CAST_BLOCKS);
  assert_int_equal(cast.groups, (int64_t)(1 << 18) * (1 << 12) * 4 + 2 * (1 << 20));
  assert_int_equal(cast.op[0].src.vec, 1);
  assert_int_equal(cast.op[1].span.first, (int64_t)(1 << 18) * (1 << 12) * 4);
  dev_free(src), dev_free(dst), dev_free(info), dev_free(rec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plans),
      cmocka_unit_test(test_argument_checks),
      cmocka_unit_test(test_scale_lines),
      cmocka_unit_test(test_unsafe_lines),
      cmocka_unit_test(test_gaussian_flags_nothing),
      cmocka_unit_test(test_output_kernel),
      cmocka_unit_test(test_output_beta_zero_reads_no_c),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
