/* test_kernels.c: the cast kernels (kernels/cast.cu), the conversions they
 * use (kernels/convert.h) and their launchers (kernels/cast_launch.c).
 *
 *   - convert.h against an independent reference that rounds in the value
 *     domain with double arithmetic; the reference itself is checked on
 *     golden values and, for fp16, against the compiler's _Float16;
 *   - every kernel of GS_CAST_KERNELS run on the CPU from the host build of
 *     the same source (the STANDIN_KERNELS library, emu.h), on fresh random
 *     data (seed printed; GS_TEST_SEED repeats a run), outputs poisoned
 *     first: every element checked bit for bit, padding and everything
 *     around the matrices checked untouched, the vector path's accesses
 *     counted against the rule that picks it;
 *   - the launchers' argument checks, which must answer before any driver
 *     call (every driver entry is armed to fail meanwhile);
 *   - the embedded PTX: every kernel of the list is an .entry in it;
 *   - the launchers end to end over the stand-in libcuda.so.1 (devices 6.1,
 *     5.2, 9.0; its cuLaunchKernel runs the host kernels): results, the
 *     module loaded once per context (also under concurrent first use) and
 *     keyed by context id, the caller's context restored, a device the PTX
 *     cannot serve reported, and every driver call failing in turn. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <library_types.h>

#include "../../kernels/cast.h"
#include "../../kernels/convert.h"
#include "../../kernels/kernels.h"
#include "../../kernels/module.h"
#include "../standin/standin_kernel.h"
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

static uint32_t rng_u32(void) { return (uint32_t)(rng_next() >> 32); }
static uint32_t rng_below(uint32_t n) { return (uint32_t)((rng_next() >> 33) % n); }

/* ---- the reference: rounding in the value domain ----------------------- */
/* A 16-bit float format: exponent bits, mantissa bits, bias. */
typedef struct fmt16 {
  int ebits, mbits, bias;
  const char *name;
} fmt16;
static const fmt16 BF16 = {8, 7, 127, "bf16"};
static const fmt16 F16 = {5, 10, 15, "fp16"};

static uint16_t inf_code(const fmt16 *f) { return (uint16_t)(((1u << f->ebits) - 1) << f->mbits); }

/* The value of a code, NaN/inf aside: plain arithmetic on its fields. */
static double ref_value(const fmt16 *f, uint16_t code) {
  int e = (code >> f->mbits) & ((1 << f->ebits) - 1);
  int m = code & ((1 << f->mbits) - 1);
  double v = e == 0 ? ldexp(m, 1 - f->bias - f->mbits)
                    : ldexp((double)((1 << f->mbits) + m), e - f->bias - f->mbits);
  return (code & 0x8000) ? -v : v;
}

/* fp32 -> 16-bit: find the neighbours lo = k*ulp <= |x| < (k+1)*ulp in
 * double (exact: every quantity has at most 25 significant bits), take the
 * nearer, the even k on a tie; overflow past the largest finite goes to
 * inf; NaN to the canonical 0x7FFF. */
static uint16_t ref_narrow(const fmt16 *f, float x) {
  if (isnan(x)) return 0x7FFF;
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double a = fabs((double)x);
  if (isinf(a)) return sign | inf_code(f);
  int emin = 1 - f->bias, emax = f->bias;
  int e = emin;
  if (a != 0) {
    frexp(a, &e);
    e = e - 1 < emin ? emin : e - 1;
  }
  double ulp = ldexp(1.0, e - f->mbits);
  double k = floor(a / ulp);
  double rem = a - k * ulp;
  if (rem > ulp / 2 || (rem == ulp / 2 && fmod(k, 2.0) == 1.0)) k += 1;
  double r = k * ulp;
  if (r >= ldexp(1.0, emax + 1)) return sign | inf_code(f);
  if (r < ldexp(1.0, emin)) return sign | (uint16_t)(r / ldexp(1.0, emin - f->mbits));
  int re;
  frexp(r, &re);
  int E = re - 1;
  uint16_t man = (uint16_t)(r / ldexp(1.0, E - f->mbits) - (1 << f->mbits));
  return sign | (uint16_t)((E + f->bias) << f->mbits) | man;
}

/* 16-bit -> fp32 bits. Values by arithmetic; NaN keeps sign and payload. */
static uint32_t ref_widen(const fmt16 *f, uint16_t code) {
  uint16_t mag = code & 0x7FFF;
  if (mag > inf_code(f)) /* NaN */
    return ((uint32_t)(code & 0x8000) << 16) | 0x7F800000u |
           ((uint32_t)(code & ((1u << f->mbits) - 1)) << (23 - f->mbits));
  if (mag == inf_code(f)) return (code & 0x8000) ? 0xFF800000u : 0x7F800000u;
  return gs_f32_bits((float)ref_value(f, code));
}

static float f32(uint32_t bits) { return gs_f32_from_bits(bits); }

/* ---- the reference itself ---------------------------------------------- */
static void test_reference_golden(void **state) {
  (void)state;
  static const struct { uint32_t in; uint16_t bf16, f16; } g[] = {
      {0x3F800000u, 0x3F80, 0x3C00}, /* 1 */
      {0xBF800000u, 0xBF80, 0xBC00}, /* -1 */
      {0x00000000u, 0x0000, 0x0000}, {0x80000000u, 0x8000, 0x8000},
      {0x40490FDBu, 0x4049, 0x4248}, /* pi */
      {0x3DCCCCCDu, 0x3DCD, 0x2E66}, /* 0.1 */
      {0x3EAAAAABu, 0x3EAB, 0x3555}, /* 1/3 */
      {0x3F808000u, 0x3F80, 0x3C04}, /* 1 + 2^-8: bf16 tie, to even (down) */
      {0x3F818000u, 0x3F82, 0x3C0C}, /* 1 + 3*2^-8: bf16 tie, to even (up) */
      {0x3F801000u, 0x3F80, 0x3C00}, /* 1 + 2^-11: fp16 tie, to even (down) */
      {0x3F803000u, 0x3F80, 0x3C02}, /* 1 + 3*2^-11: fp16 tie, to even (up) */
      {0x477FE000u, 0x4780, 0x7BFF}, /* 65504, the largest fp16 */
      {0x477FEFFFu, 0x4780, 0x7BFF}, /* just below 65520 */
      {0x477FF000u, 0x4780, 0x7C00}, /* 65520: tie, to even = inf */
      {0x7F7FFFFFu, 0x7F80, 0x7C00}, /* FLT_MAX: bf16 rounds up to inf */
      {0x7F7F7FFFu, 0x7F7F, 0x7C00},
      {0x7F7F8000u, 0x7F80, 0x7C00}, /* bf16 tie at the top: to even = inf */
      {0x7F800000u, 0x7F80, 0x7C00}, {0xFF800000u, 0xFF80, 0xFC00},
      {0x33800000u, 0x3380, 0x0001}, /* 2^-24, smallest fp16 subnormal */
      {0x33000000u, 0x3300, 0x0000}, /* 2^-25: tie, to even = 0 */
      {0x33000001u, 0x3300, 0x0001}, /* just above: 1 */
      {0x33C00000u, 0x33C0, 0x0002}, /* 1.5*2^-24: tie, to even = 2 */
      {0x34200000u, 0x3420, 0x0002}, /* 2.5*2^-24: tie, to even = 2 */
      {0x387FC000u, 0x3880, 0x03FF}, /* 2^-14 - 2^-24: largest subnormal */
      {0x387FE000u, 0x3880, 0x0400}, /* tie between it and 2^-14: even = normal */
      {0x38800000u, 0x3880, 0x0400}, /* 2^-14 */
      {0x00000001u, 0x0000, 0x0000}, /* fp32 subnormals */
      {0x00008000u, 0x0000, 0x0000}, /* bf16 tie at zero: even = 0 */
      {0x00008001u, 0x0001, 0x0000}, /* bf16 subnormal kept */
      {0x00018000u, 0x0002, 0x0000},
      {0x807FFFFFu, 0x8080, 0x8000},
      {0x7FC00000u, 0x7FFF, 0x7FFF}, /* NaNs: canonical */
      {0xFFC00001u, 0x7FFF, 0x7FFF}, {0x7F800001u, 0x7FFF, 0x7FFF},
  };
  for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
    if (ref_narrow(&BF16, f32(g[i].in)) != g[i].bf16 || ref_narrow(&F16, f32(g[i].in)) != g[i].f16)
      fail_msg("reference on 0x%08" PRIx32 ": bf16 0x%04x (golden 0x%04x), fp16 0x%04x (golden 0x%04x)",
               g[i].in, ref_narrow(&BF16, f32(g[i].in)), g[i].bf16, ref_narrow(&F16, f32(g[i].in)),
               g[i].f16);
    assert_int_equal(gs_f32_to_bf16_rn(f32(g[i].in)), g[i].bf16);
    assert_int_equal(gs_f32_to_f16_rn(f32(g[i].in)), g[i].f16);
  }
}

#if defined(__FLT16_MAX__)
/* The compiler's fp16 conversion (libgcc or F16C), NaN aside, agrees with the
 * reference: two independent roundings. */
static void test_reference_vs_float16(void **state) {
  (void)state;
  for (uint32_t i = 0; i < (1u << 22); i++) {
    uint32_t bits = i < (1u << 21) ? (i << 11) | (i & 0x7FF) : rng_u32();
    float x = f32(bits);
    if (isnan(x)) continue;
    _Float16 h = (_Float16)x;
    uint16_t hb;
    memcpy(&hb, &h, 2);
    if (hb != ref_narrow(&F16, x))
      fail_msg("0x%08" PRIx32 ": _Float16 0x%04x, reference 0x%04x", bits, hb, ref_narrow(&F16, x));
  }
}
#endif

/* ---- convert.h against the reference ------------------------------------ */
static void test_widen_all_codes(void **state) {
  (void)state;
  for (uint32_t c = 0; c < 0x10000; c++) {
    assert_int_equal(gs_f32_bits(gs_bf16_to_f32((uint16_t)c)), ref_widen(&BF16, (uint16_t)c));
    assert_int_equal(gs_f32_bits(gs_f16_to_f32((uint16_t)c)), ref_widen(&F16, (uint16_t)c));
  }
}

/* Every sign/exponent/top-mantissa combination (the top 20 bits, all of
 * them) with low bits at the rounding edges and at random: each rounding
 * position of both formats meets below-half, half, above-half and sticky
 * bits, in every binade, subnormal and overflow ones included. */
static void test_narrow_sweep(void **state) {
  (void)state;
  static const uint32_t low[] = {0x000, 0x001, 0x7FF, 0x800, 0x801, 0xFFF};
  for (uint32_t hi = 0; hi < (1u << 20); hi++)
    for (size_t j = 0; j <= sizeof low / sizeof low[0]; j++) {
      uint32_t bits = (hi << 12) | (j < sizeof low / sizeof low[0] ? low[j] : (rng_u32() & 0xFFF));
      float x = f32(bits);
      uint16_t b = gs_f32_to_bf16_rn(x), h = gs_f32_to_f16_rn(x);
      if (b != ref_narrow(&BF16, x) || h != ref_narrow(&F16, x))
        fail_msg("0x%08" PRIx32 ": bf16 0x%04x (ref 0x%04x), fp16 0x%04x (ref 0x%04x)", bits, b,
                 ref_narrow(&BF16, x), h, ref_narrow(&F16, x));
    }
}

/* ---- the host kernels ---------------------------------------------------- */
static void *host_lib, *standin_cuda;
static gs_sys_table real_sys; /* the table as resolve_driver() filled it */
static unsigned long long (*take_vector_accesses)(void);

/* $(BUILD)/tests/unit/test_kernels -> $(BUILD)/<rel> */
static void build_path(char *out, size_t len, const char *rel) {
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  assert_true(n > 0);
  out[n] = 0;
  char *slash = strrchr(out, '/');
  snprintf(slash, len - (size_t)(slash - out), "/../../%s", rel);
}

/* The host kernels, and the stand-in libcuda.so.1 (cu13) loaded before the
 * shim looks for libcuda.so.1, so that its dlopen finds this one by soname.
 * The stand-in reads its environment when loaded. */
static int setup(void **state) {
  (void)state;
  char path[4096], cuda[4096];
  const char *env = getenv("STANDIN_KERNELS");
  if (env && *env) snprintf(path, sizeof path, "%s", env);
  else build_path(path, sizeof path, "kernels/libgemmshim_kernels_host.so");
  host_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!host_lib) {
    fprintf(stderr, "test_kernels: cannot load the host kernels %s: %s\n", path, dlerror());
    return -1;
  }
  take_vector_accesses = (unsigned long long (*)(void))dlsym(host_lib, "gs_emu_take_vector_accesses");
  if (!take_vector_accesses) return -1;

  /* The driver faults these tests inject make the launchers warn, as
   * they should; the warnings are not what the tests check, and would only
   * read as trouble among make test's output. */
  snprintf(gs_debug_file, sizeof gs_debug_file, "/dev/null");
  debug_init();
  setenv("STANDIN_KERNELS", path, 1);
  setenv("STANDIN_CC", "6.1,5.2,9.0", 1);
  build_path(cuda, sizeof cuda, "standin/cu13/libcuda.so.1");
  standin_cuda = dlopen(cuda, RTLD_NOW | RTLD_GLOBAL);
  if (!standin_cuda) {
    fprintf(stderr, "test_kernels: cannot load the stand-in driver %s: %s\n", cuda, dlerror());
    return -1;
  }
  const char *why = resolve_driver();
  if (why) {
    fprintf(stderr, "test_kernels: resolve_driver: %s\n", why);
    return -1;
  }
  real_sys = gs_sys;
  return gs_sys.cuInit(0) == CUDA_SUCCESS ? 0 : -1;
}

/* Each stand-in test starts from the real driver entries, no fault armed
 * and no current context, whatever a failed test before it left. */
static int fresh(void **state) {
  (void)state;
  gs_fault_clear();
  gs_sys = real_sys;
  CUcontext c = NULL, popped;
  while (gs_sys.cuCtxGetCurrent(&c) == CUDA_SUCCESS && c) gs_sys.cuCtxPopCurrent_v2(&popped);
  return 0;
}

static int run_host_kernel(const char *name, const unsigned grid[3], const unsigned block[3],
                           gs_cast_args *a) {
  char sym[128];
  snprintf(sym, sizeof sym, "%s%s", STANDIN_KERNEL_PREFIX, name);
  standin_kernel_fn fn;
  void *p = dlsym(host_lib, sym);
  if (!p) fail_msg("%s is not in the host kernel library", sym);
  memcpy(&fn, &p, sizeof p);
  void *params[] = {a};
  standin_launch l = {.abi = STANDIN_KERNEL_ABI,
                      .grid = {grid[0], grid[1], grid[2]},
                      .block = {block[0], block[1], block[2]},
                      .params = params,
                      .cc_major = 6,
                      .cc_minor = 1};
  return fn(&l);
}

static size_t elem_size(int e) { return e == GS_ELEM_F32 ? 4 : 2; }

/* A random source element: all bit patterns for 16-bit sources; for fp32 a
 * mix weighted to where narrowing is hard. */
static uint32_t random_source(int src, int dst) {
  if (src != GS_ELEM_F32) return rng_u32() & 0xFFFF;
  const fmt16 *f = dst == GS_ELEM_BF16 ? &BF16 : &F16;
  switch (rng_below(6)) {
  case 0: return rng_u32();
  case 1: { /* a midpoint between neighbours, or one fp32 ulp off it */
    uint16_t c = (uint16_t)(rng_u32() & 0x7FFF);
    if (c >= inf_code(f)) c = (uint16_t)(inf_code(f) - 1);
    float mid = (float)((ref_value(f, c) + ref_value(f, (uint16_t)(c + 1))) / 2);
    return (gs_f32_bits(mid) + rng_below(3) - 1) | (rng_below(2) << 31);
  }
  case 2: return gs_f32_bits((float)((double)rng_u32() / 4294967296.0 * 140000.0 - 70000.0));
  case 3: return gs_f32_bits(ldexpf((float)(rng_u32() >> 8), -24 - (int)rng_below(40)));
  case 4: { /* specials */
    static const uint32_t s[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFFFFFFFu,
                                 0x7F800001u, 0x00000000u, 0x80000000u, 0x00000001u,
                                 0x007FFFFFu, 0x477FF000u, 0x477FEFFFu, 0x7F7F8000u,
                                 0x7F7F7FFFu, 0x7F7FFFFFu, 0x33000000u, 0x33000001u};
    return s[rng_below(sizeof s / sizeof s[0])];
  }
  default: return gs_f32_bits((float)ref_value(f, (uint16_t)rng_u32()));
  }
}

static uint32_t expected(int src, int dst, uint32_t x) {
  if (src == GS_ELEM_BF16) return ref_widen(&BF16, (uint16_t)x);
  if (src == GS_ELEM_F16) return ref_widen(&F16, (uint16_t)x);
  if (dst == GS_ELEM_BF16) return ref_narrow(&BF16, f32(x));
  if (dst == GS_ELEM_F16) return ref_narrow(&F16, f32(x));
  return x;
}

static uint32_t get(const void *p, size_t esz, int64_t i) {
  if (esz == 2) return ((const uint16_t *)p)[i];
  return ((const uint32_t *)p)[i];
}
static void put(void *p, size_t esz, int64_t i, uint32_t v) {
  if (esz == 2) ((uint16_t *)p)[i] = (uint16_t)v;
  else ((uint32_t *)p)[i] = v;
}

#define POISON 0xA5A5A5A5u
#define MAX_BATCH 8

/* How batch member b is found on each side. */
#define STRIDED 0   /* src + b*stride_src, dst + b*stride_dst */
#define SRC_ARRAY 1 /* ((T *const *)src)[b], dst strided */
#define DST_ARRAY 2 /* src strided, ((T *const *)dst)[b] */

/* One kernel run, planned by the launcher's own kernel_cast_plan. Offsets
 * are in elements from a 64-byte aligned buffer: for a pointer-array side,
 * one buffer per member at off[b]; for a strided side, one buffer with
 * member b at off[0] + b*stride. */
typedef struct cast_case {
  const char *kernel;
  int src, dst, layout;
  int64_t rows, cols, batch, ld_src, ld_dst, stride_src, stride_dst;
  int src_off[MAX_BATCH], dst_off[MAX_BATCH];
} cast_case;

typedef struct side {
  int array;
  size_t esz;
  int64_t ld, stride, len; /* len: elements in each buffer */
  char *buf[MAX_BATCH];    /* allocations (one unless array) */
  void *base[MAX_BATCH];   /* each member's first element */
} side;

static void side_alloc(side *s, int array, size_t esz, int64_t ld, int64_t stride,
                       const cast_case *c, const int *off) {
  memset(s, 0, sizeof *s);
  s->array = array, s->esz = esz, s->ld = ld, s->stride = stride;
  int64_t span = ld * (c->cols - 1) + c->rows;
  int nbuf = array ? (int)c->batch : 1;
  s->len = array ? span + 8 : off[0] + stride * (c->batch - 1) + span + 8;
  for (int b = 0; b < nbuf; b++) {
    size_t bytes = ((size_t)s->len * esz + 63) / 64 * 64;
    s->buf[b] = aligned_alloc(64, bytes);
    assert_non_null(s->buf[b]);
  }
  for (int b = 0; b < c->batch; b++)
    s->base[b] = array ? s->buf[b] + off[b] * esz : s->buf[0] + (off[0] + b * stride) * esz;
}

static void side_free(side *s) {
  for (int b = 0; b < MAX_BATCH; b++) free(s->buf[b]);
}

/* Vector accesses the kernel must make: a column goes 4 at a time iff its
 * source and destination share their element offset mod 4, after a head of
 * up to 3 elements; one load and one store per group. Columns as the
 * launcher hands them over: contiguous columns (ld == rows on both sides)
 * are one column, and so are contiguous strided members. */
static unsigned long long vector_accesses_expected(const cast_case *c, const side *s, const side *d) {
  int64_t rows = c->rows, cols = c->cols, batch = c->batch, ld_s = s->ld, ld_d = d->ld;
  if (cols > 1 && ld_s == rows && ld_d == rows) rows *= cols, cols = 1, ld_s = ld_d = rows;
  if (!s->array && !d->array && cols == 1 && batch > 1 && s->stride == rows && d->stride == rows)
    rows *= batch, batch = 1;
  unsigned long long n = 0;
  for (int b = 0; b < batch; b++)
    for (int64_t col = 0; col < cols; col++) {
      uintptr_t sa = (uintptr_t)s->base[b] + (uintptr_t)(col * ld_s) * s->esz;
      uintptr_t da = (uintptr_t)d->base[b] + (uintptr_t)(col * ld_d) * d->esz;
      int64_t so = (int64_t)(sa / s->esz % 4), dof = (int64_t)(da / d->esz % 4);
      if (so != dof) continue;
      int64_t head = (4 - so) % 4;
      if (head > rows) head = rows;
      n += 2 * (unsigned long long)((rows - head) / 4);
    }
  return n;
}

static void run_case(const cast_case *c) {
  side s, d;
  side_alloc(&s, c->layout == SRC_ARRAY, elem_size(c->src), c->ld_src, c->stride_src, c,
             c->src_off);
  side_alloc(&d, c->layout == DST_ARRAY, elem_size(c->dst), c->ld_dst, c->stride_dst, c,
             c->dst_off);
  int nsrc = s.array ? (int)c->batch : 1, ndst = d.array ? (int)c->batch : 1;
  for (int b = 0; b < nsrc; b++)
    for (int64_t i = 0; i < s.len; i++) put(s.buf[b], s.esz, i, random_source(c->src, c->dst));
  for (int b = 0; b < ndst; b++)
    for (int64_t i = 0; i < d.len; i++) put(d.buf[b], d.esz, i, POISON);

  kernel_cast_operand o = {c->src == GS_ELEM_F32 ? CUDA_R_32F : CUDA_R_16BF,
                           s.array ? (const void *)s.base : s.base[0], s.array,
                           c->ld_src, c->stride_src,
                           d.array ? (void *)d.base : d.base[0], d.array,
                           c->ld_dst, c->stride_dst, c->rows, c->cols, c->batch};
  gs_cast_args a;
  unsigned grid[3];
  assert_int_equal(kernel_cast_plan(&o, 1, c->src, c->dst, &a, grid), CUDA_SUCCESS);
  unsigned block[3] = {GS_CAST_THREADS, 1, 1};
  take_vector_accesses();
  int r = run_host_kernel(c->kernel, grid, block, &a);
  unsigned long long vec = take_vector_accesses();
  if (r != 0) fail_msg("%s returned %d", c->kernel, r);

  /* Every element, then everything else in the destination untouched. */
  char *covered[MAX_BATCH] = {0};
  for (int b = 0; b < ndst; b++) assert_non_null(covered[b] = calloc((size_t)d.len, 1));
  for (int b = 0; b < c->batch; b++)
    for (int64_t col = 0; col < c->cols; col++)
      for (int64_t row = 0; row < c->rows; row++) {
        int64_t si = col * c->ld_src + row, di = col * c->ld_dst + row;
        uint32_t x = get(s.base[b], s.esz, si);
        uint32_t got = get(d.base[b], d.esz, di), want = expected(c->src, c->dst, x);
        if (got != want)
          fail_msg("%s %" PRId64 "x%" PRId64 "x%" PRId64 ": (%" PRId64 ",%" PRId64 ",%d) from 0x%08" PRIx32
                   ": got 0x%08" PRIx32 ", want 0x%08" PRIx32,
                   c->kernel, c->rows, c->cols, c->batch, row, col, b, x, got, want);
        int db = d.array ? b : 0;
        int64_t pos = ((char *)d.base[b] - d.buf[db]) / (int64_t)d.esz + di;
        covered[db][pos] = 1;
      }
  for (int b = 0; b < ndst; b++) {
    for (int64_t i = 0; i < d.len; i++)
      if (!covered[b][i] && get(d.buf[b], d.esz, i) != (POISON & (d.esz == 2 ? 0xFFFF : ~0u)))
        fail_msg("%s wrote outside the matrix: buffer %d element %" PRId64, c->kernel, b, i);
    free(covered[b]);
  }
  unsigned long long want_vec = vector_accesses_expected(c, &s, &d);
  if (vec != want_vec)
    fail_msg("%s: %llu vector accesses, the path rule expects %llu", c->kernel, vec, want_vec);
  side_free(&s);
  side_free(&d);
}

/* The same shapes for each kernel of one (source, destination) pair. */
static void run_family(const char *kernel, int src, int dst, int array_ok) {
  int layout_array = src == GS_ELEM_F32 ? DST_ARRAY : SRC_ARRAY;
  const cast_case cases[] = {
      /* contiguous, aligned: all vector but the last rows' tail */
      {kernel, src, dst, STRIDED, 64, 8, 1, 64, 64, 0, 0, {0}, {0}},
      /* ld > rows on both sides, equal and a multiple of 4: vector columns */
      {kernel, src, dst, STRIDED, 37, 5, 3, 40, 40, 40 * 5 + 4, 40 * 5, {0}, {0}},
      /* equal odd ld: each column peels its own head, still vector */
      {kernel, src, dst, STRIDED, 67, 9, 2, 69, 69, 69 * 9, 69 * 9 + 3, {0}, {0}},
      /* different ld: alignment differs column to column, mixed paths */
      {kernel, src, dst, STRIDED, 33, 7, 2, 35, 37, 300, 280, {1}, {2}},
      /* bases misaligned alike: vector after a head; unlike: scalar */
      {kernel, src, dst, STRIDED, 50, 4, 1, 52, 52, 0, 0, {1}, {1}},
      {kernel, src, dst, STRIDED, 50, 4, 1, 52, 52, 0, 0, {1}, {2}},
      {kernel, src, dst, STRIDED, 50, 4, 1, 52, 52, 0, 0, {3}, {3}},
      /* fewer rows than the head: every element scalar */
      {kernel, src, dst, STRIDED, 2, 3, 2, 2, 2, 6, 6, {1}, {1}},
      /* one row */
      {kernel, src, dst, STRIDED, 1, 5, 1, 1, 3, 0, 0, {0}, {0}},
      /* broadcast source (stride 0) */
      {kernel, src, dst, STRIDED, 20, 3, 3, 24, 20, 0, 60, {0}, {0}},
      /* many columns and members, several blocks */
      {kernel, src, dst, STRIDED, 1000, 21, 5, 1003, 1001, 1003 * 21, 1001 * 21, {2}, {3}},
      {kernel, src, dst, STRIDED, 300, 40, 3, 300, 300, 300 * 40, 300 * 40, {0}, {0}},
      {kernel, src, dst, STRIDED, 300, 40, 3, 300, 300, 300 * 40 + 2, 300 * 40 + 2, {1}, {1}},
      /* pointer arrays: each member's alignment on its own */
      {kernel, src, dst, layout_array, 45, 6, 5, 48, 47, 48 * 6, 47 * 6, {0, 1, 2, 3, 0}, {0, 1, 3, 2, 1}},
      {kernel, src, dst, layout_array, 129, 3, 4, 132, 132, 132 * 3, 132 * 3, {0, 1, 2, 3}, {0, 1, 2, 3}},
  };
  /* fp32 -> fp32 (the bias copy) never comes with a pointer array. */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (array_ok || cases[i].layout == STRIDED) run_case(&cases[i]);
}

static void test_widen_bf16(void **state) {
  (void)state;
  run_family("gs_widen_bf16", GS_ELEM_BF16, GS_ELEM_F32, 1);
}
static void test_widen_f16(void **state) {
  (void)state;
  run_family("gs_widen_f16", GS_ELEM_F16, GS_ELEM_F32, 1);
}
static void test_widen_f32(void **state) {
  (void)state;
  run_family("gs_widen_f32", GS_ELEM_F32, GS_ELEM_F32, 0);
}
static void test_narrow_bf16(void **state) {
  (void)state;
  run_family("gs_narrow_bf16", GS_ELEM_F32, GS_ELEM_BF16, 1);
}
static void test_narrow_f16(void **state) {
  (void)state;
  run_family("gs_narrow_f16", GS_ELEM_F32, GS_ELEM_F16, 1);
}

/* ---- the embedded module ----------------------------------------------- */
/* Each file's image is PTX for its target (module.h: sm_61, or a newer one
 * for an optional file) and defines every kernel its list names
 * (cuModuleGetFunction would fail at run time otherwise). */
static void check_image(const char *file, const char *ptx, int sm, const char *const *names, size_t n) {
  char target[32];
  snprintf(target, sizeof target, "\n.target sm_%d\n", sm);
  if (!strstr(ptx, target)) fail_msg("gs_ptx_%s is not sm_%d PTX", file, sm);
  for (size_t i = 0; i < n; i++) {
    char entry[160];
    snprintf(entry, sizeof entry, ".entry %s(", names[i]);
    if (!strstr(ptx, entry)) fail_msg("no .entry %s in gs_ptx_%s", names[i], file);
  }
}

static void test_ptx_has_every_kernel(void **state) {
  (void)state;
#define ENTRY_NAME(name, ...) #name,
#define CHECK_FILE(file, list, sm)                                              \
  {                                                                             \
    static const char *const names[] = {list(ENTRY_NAME)};                      \
    check_image(#file, gs_ptx_##file, sm, names, sizeof names / sizeof names[0]); \
  }
  GS_KERNEL_FILES(CHECK_FILE)
#undef CHECK_FILE
#undef ENTRY_NAME
}

/* ---- launcher argument checks ------------------------------------------- */
/* Every driver entry fails while these run: an answer that needed the
 * driver would come back as CUDA_ERROR_UNKNOWN or NOT_INITIALIZED. */
static void arm_driver_faults(void) {
#define ARM(name, ret, fail, params, args) gs_fault_arm(GS_SYS_##name, 1, 1);
  GS_SYS_DRIVER(ARM)
#undef ARM
}

static void test_launcher_argument_checks(void **state) {
  (void)state;
  arm_driver_faults();
  CUcontext ctx = (CUcontext)0x1000;
  _Alignas(16) uint16_t h[16];
  _Alignas(16) float f[16];
  const void *arr[2] = {h, h};
  void *darr[2] = {h, h};
  const CUresult BAD = CUDA_ERROR_INVALID_VALUE, OK = CUDA_SUCCESS;
  /* negative sizes */
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, 0, f, 4, 0, -1, 2, 1), BAD);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, 0, f, 4, 0, 4, -2, 1), BAD);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, 0, f, 4, 0, 4, 2, -1), BAD);
  assert_int_equal(kernel_narrow(KERNEL_CTX(ctx), NULL, CUDA_R_16F, f, 4, 0, h, 4, 0, -4, 2, 1), BAD);
  assert_int_equal(kernel_widen_vector(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, f, -1), BAD);
  /* ld < rows, either side */
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 3, 0, f, 4, 0, 4, 2, 1), BAD);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, 0, f, 3, 0, 4, 2, 1), BAD);
  assert_int_equal(kernel_narrow(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, f, 2, 0, h, 4, 0, 4, 2, 1), BAD);
  assert_int_equal(kernel_widen_ptrarray(KERNEL_CTX(ctx), NULL, CUDA_R_16F, arr, 2, f, 4, 8, 4, 2, 2), BAD);
  assert_int_equal(kernel_narrow_ptrarray(KERNEL_CTX(ctx), NULL, CUDA_R_16F, f, 4, 8, darr, 3, 4, 2, 2), BAD);
  /* ld < rows is invalid even when another size is zero */
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 3, 0, f, 4, 0, 4, 0, 1), BAD);
  /* types: widen takes bf16/fp16, the vector also fp32 */
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_32F, h, 4, 0, f, 4, 0, 4, 2, 1), BAD);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_8I, h, 4, 0, f, 4, 0, 4, 2, 1), BAD);
  assert_int_equal(kernel_narrow(KERNEL_CTX(ctx), NULL, CUDA_R_32F, f, 4, 0, h, 4, 0, 4, 2, 1), BAD);
  assert_int_equal(kernel_widen_vector(KERNEL_CTX(ctx), NULL, CUDA_R_64F, h, f, 4), BAD);
  /* strides: negative, overlapping destination members */
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, -8, f, 4, 8, 4, 2, 2), BAD);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, 8, f, 4, 7, 4, 2, 2), BAD);
  assert_int_equal(kernel_narrow(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, f, 4, 8, h, 4, 0, 4, 2, 2), BAD);
  /* offsets past int64 */
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, INT64_MAX / 2, 0, f, 4, 0, 4, 3, 1), BAD);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, INT64_MAX / 2, f, 4, 8, 4, 2, 3), BAD);
  /* NULL or misaligned pointers with work to do */
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, NULL, 4, 0, f, 4, 0, 4, 2, 1), BAD);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, (char *)h + 1, 4, 0, f, 4, 0, 4, 2, 1), BAD);
  assert_int_equal(kernel_narrow(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, (float *)((char *)f + 2), 4, 0, h, 4, 0, 4, 2, 1), BAD);
  assert_int_equal(kernel_narrow_ptrarray(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, f, 4, 8, NULL, 4, 4, 2, 2), BAD);
  /* nothing to do: success, no driver call (every one would fail) */
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, 0, f, 4, 0, 0, 2, 1), OK);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, 0, f, 4, 0, 4, 0, 1), OK);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, 0, f, 4, 0, 4, 2, 0), OK);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, NULL, 0, 0, NULL, 0, 0, 0, 0, 0), OK);
  assert_int_equal(kernel_widen_ptrarray(KERNEL_CTX(ctx), NULL, CUDA_R_16F, NULL, 4, NULL, 4, 8, 4, 2, 0), OK);
  assert_int_equal(kernel_narrow(KERNEL_CTX(ctx), NULL, CUDA_R_16F, f, 4, 0, h, 4, 0, 4, 0, 1), OK);
  assert_int_equal(kernel_narrow_ptrarray(KERNEL_CTX(ctx), NULL, CUDA_R_16F, f, 4, 8, darr, 4, 0, 2, 2), OK);
  assert_int_equal(kernel_widen_vector(KERNEL_CTX(ctx), NULL, CUDA_R_32F, NULL, NULL, 0), OK);
  /* The control: valid work does reach the (failing) driver. */
  assert_int_not_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, h, 4, 0, f, 4, 0, 4, 2, 1), OK);
  gs_fault_clear();
}

/* ---- the launchers over the stand-in driver ------------------------------ */
#define DEV_61 0 /* STANDIN_CC order */
#define DEV_52 1
#define DEV_90 2
/* Modules a context loads: every sm_61 file; on 9.0 the sm_89 one too. */
#define FILE_COUNT_BASE(file, list, sm) +((sm) == GS_KERNEL_BASE_SM)
#define FILE_COUNT_ALL(file, list, sm) +1
static const int module_files = 0 GS_KERNEL_FILES(FILE_COUNT_BASE);
static const int module_files_90 = 0 GS_KERNEL_FILES(FILE_COUNT_ALL);

static void *standin_sym(const char *name) {
  void *p = dlsym(standin_cuda, name);
  if (!p) fail_msg("the stand-in has no %s", name);
  return p;
}

/* A new context on `device`, not left current. */
static CUcontext new_context(int device) {
  CUresult (*create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
  *(void **)&create = standin_sym("cuCtxCreate_v4");
  CUcontext ctx, popped;
  assert_int_equal(create(&ctx, NULL, 0, device), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  assert_ptr_equal(popped, ctx);
  return ctx;
}

static CUcontext current(void) {
  CUcontext c = NULL;
  assert_int_equal(gs_sys.cuCtxGetCurrent(&c), CUDA_SUCCESS);
  return c;
}

/* Device memory (host memory in the stand-in, 0xFF-filled), owned by ctx. */
static void *dev_alloc(CUcontext ctx, size_t bytes) {
  CUdeviceptr p;
  CUcontext popped;
  assert_int_equal(gs_sys.cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuMemAlloc_v2(&p, bytes), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  return (void *)(uintptr_t)p;
}

static void dev_free(CUcontext ctx, void *p) {
  CUcontext popped;
  assert_int_equal(gs_sys.cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuMemFree_v2((CUdeviceptr)(uintptr_t)p), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
}

/* A matrix in device memory: member b at base[b] (one allocation for a
 * strided side, one per member for a pointer-array side). */
typedef struct dmat {
  int elem, array;
  int64_t rows, cols, batch, ld, stride;
  void *alloc[MAX_BATCH];
  void *base[MAX_BATCH];
  int64_t len; /* elements per allocation */
} dmat;

static void dmat_make(dmat *m, CUcontext ctx, int elem, int array, int64_t rows, int64_t cols,
                      int64_t batch, int64_t ld, int64_t stride, int fill) {
  memset(m, 0, sizeof *m);
  m->elem = elem, m->array = array, m->rows = rows, m->cols = cols, m->batch = batch;
  m->ld = ld, m->stride = stride;
  int64_t span = ld * (cols - 1) + rows;
  m->len = array ? span : stride * (batch - 1) + span;
  size_t esz = elem_size(elem);
  for (int b = 0; b < (array ? batch : 1); b++) m->alloc[b] = dev_alloc(ctx, (size_t)m->len * esz);
  for (int b = 0; b < batch; b++)
    m->base[b] = array ? m->alloc[b] : (char *)m->alloc[0] + (size_t)(b * stride) * esz;
  if (fill)
    for (int b = 0; b < (array ? batch : 1); b++)
      for (int64_t i = 0; i < m->len; i++)
        put(m->alloc[b], esz, i, random_source(elem, rng_below(2) ? GS_ELEM_BF16 : GS_ELEM_F16));
}

static void dmat_free(dmat *m, CUcontext ctx) {
  for (int b = 0; b < MAX_BATCH; b++)
    if (m->alloc[b]) dev_free(ctx, m->alloc[b]);
}

/* The device copy of the member pointers, for the pointer-array launchers. */
static void **dmat_ptr_array(dmat *m, CUcontext ctx) {
  void **arr = dev_alloc(ctx, sizeof(void *) * (size_t)m->batch);
  for (int b = 0; b < m->batch; b++) arr[b] = m->base[b];
  return arr;
}

/* dst holds cast(src) element by element, and its bytes outside the
 * matrix are still the stand-in's 0xFF. */
static void dmat_check(const dmat *src, const dmat *dst, const char *what) {
  size_t sz = elem_size(src->elem), dz = elem_size(dst->elem);
  for (int b = 0; b < src->batch; b++)
    for (int64_t c = 0; c < src->cols; c++)
      for (int64_t r = 0; r < src->rows; r++) {
        uint32_t x = get(src->base[b], sz, c * src->ld + r);
        uint32_t got = get(dst->base[b], dz, c * dst->ld + r);
        uint32_t want = expected(src->elem, dst->elem, x);
        if (got != want)
          fail_msg("%s (%" PRId64 ",%" PRId64 ",%d): from 0x%08" PRIx32 " got 0x%08" PRIx32
                   ", want 0x%08" PRIx32, what, r, c, b, x, got, want);
      }
  uint32_t ff = dz == 2 ? 0xFFFF : 0xFFFFFFFFu;
  for (int a = 0; a < (dst->array ? dst->batch : 1); a++)
    for (int64_t i = 0; i < dst->len; i++) {
      int inside = 0;
      for (int b = 0; b < dst->batch && !inside; b++) {
        if (dst->array && b != a) continue;
        int64_t off = ((char *)dst->alloc[a] + i * (int64_t)dz - (char *)dst->base[b]) / (int64_t)dz;
        if (off >= 0 && off % dst->ld < dst->rows && off / dst->ld < dst->cols) inside = 1;
      }
      if (!inside && get(dst->alloc[a], dz, i) != ff)
        fail_msg("%s wrote outside the matrix: allocation %d element %" PRId64, what, a, i);
    }
}

/* kernel_narrow_c: D = round(fp32(src + beta * C)), one fma then the
 * reference rounding (ref_narrow, ref_widen: plain arithmetic, not the
 * kernels' code). Shapes that take the vector path and the element path
 * (C's offset mod 4 unlike the source's), ldc != ldd, C == D, strided and
 * pointer-array members, a device beta, and beta 0 with C all NaN (not
 * read: "if beta == 0 then C does not have to be a valid input", cuBLAS
 * documentation, cublas<t>gemm). */
typedef struct narrow_c_case {
  const char *what;
  int type, rows, cols, batch, ldd, ldc, c_off, in_place, c_array, device_beta;
  float beta;
} narrow_c_case;

static void test_narrow_with_c(void **state) {
  (void)state;
  CUcontext ctx = new_context(DEV_61);
  static const narrow_c_case cases[] = {
      {"bf16 vectors", CUDA_R_16BF, 40, 5, 2, 40, 40, 0, 0, 0, 0, 0.3f},
      {"fp16 ldc != ldd", CUDA_R_16F, 37, 6, 3, 41, 39, 0, 0, 0, 0, -1.5f},
      {"bf16 C offset 1 (elements)", CUDA_R_16BF, 33, 4, 1, 36, 36, 1, 0, 0, 0, 0.7f},
      {"bf16 in place", CUDA_R_16BF, 35, 5, 2, 36, 36, 0, 1, 0, 0, 0.25f},
      {"fp16 pointer arrays", CUDA_R_16F, 29, 3, 4, 30, 31, 0, 0, 1, 0, 2.0f},
      {"bf16 device beta", CUDA_R_16BF, 24, 7, 2, 24, 28, 0, 0, 0, 1, 0.6f},
      {"bf16 beta 0, C NaN", CUDA_R_16BF, 31, 4, 2, 32, 32, 0, 0, 0, 0, 0.0f},
      {"fp16 device beta 0, C NaN", CUDA_R_16F, 31, 4, 2, 32, 32, 0, 0, 0, 1, 0.0f},
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    const narrow_c_case *k = &cases[t];
    const fmt16 *f = k->type == CUDA_R_16F ? &F16 : &BF16;
    const int64_t n = (int64_t)k->rows * k->cols;
    const int64_t sd = (int64_t)k->ldd * k->cols, sc = (int64_t)k->ldc * k->cols + k->c_off;
    float *src = dev_alloc(ctx, (size_t)n * k->batch * 4);
    uint16_t *d = dev_alloc(ctx, (size_t)(sd * k->batch + 8) * 2);
    uint16_t *c = k->in_place ? d : dev_alloc(ctx, (size_t)(sc * k->batch + 8) * 2);
    uint16_t *c_host = malloc((size_t)(sc * k->batch + 8) * 2);
    assert_non_null(c_host);
    for (int64_t i = 0; i < n * k->batch; i++) src[i] = (float)((int64_t)rng_below(2001) - 1000) / 64.0f;
    for (int64_t i = 0; i < sc * k->batch + 8; i++) {
      uint16_t v = ref_narrow(f, (float)((int64_t)rng_below(2001) - 1000) / 128.0f);
      c_host[i] = k->beta == 0.0f ? 0x7FC1 : v; /* NaN where it must not be read */
      if (!k->in_place) c[i] = c_host[i];
    }
    if (k->in_place)
      for (int64_t i = 0; i < sd * k->batch + 8; i++) d[i] = c_host[i];
    else
      memset(d, 0xEE, (size_t)(sd * k->batch + 8) * 2);
    uint16_t *cbase = c + k->c_off;
    float *beta_dev = dev_alloc(ctx, 4);
    *beta_dev = k->beta;
    void **darr = NULL, **carr = NULL;
    if (k->c_array) {
      darr = dev_alloc(ctx, sizeof(void *) * (size_t)k->batch);
      carr = dev_alloc(ctx, sizeof(void *) * (size_t)k->batch);
      for (int b = 0; b < k->batch; b++) darr[b] = d + b * sd, carr[b] = cbase + b * sc;
    }
    const kernel_cast_c cb = {.c = k->c_array ? (const void *)carr : cbase,
                              .c_array = k->c_array,
                              .ld_c = k->ldc,
                              .stride_c = sc,
                              .beta = k->device_beta ? 0.0f : k->beta,
                              .beta_ptr = k->device_beta ? beta_dev : NULL};
    assert_int_equal(kernel_narrow_c(KERNEL_CTX(ctx), NULL, k->type, src, k->rows, n,
                                     k->c_array ? (void *)darr : d, k->c_array, k->ldd, sd, k->rows, k->cols, k->batch,
                                     &cb),
                     CUDA_SUCCESS);
    for (int b = 0; b < k->batch; b++)
      for (int j = 0; j < k->cols; j++)
        for (int i = 0; i < k->ldd; i++) {
          const int64_t di = b * sd + (int64_t)j * k->ldd + i;
          if (i >= k->rows) {
            /* padding: untouched (in place it is C's own) */
            uint16_t was = k->in_place ? c_host[di] : 0xEEEE;
            if (d[di] != was) fail_msg("%s: padding at %" PRId64 " written", k->what, di);
            continue;
          }
          const float x = src[b * n + (int64_t)j * k->rows + i];
          float v = x;
          if (k->beta != 0.0f)
            v = fmaf(k->beta, f32(ref_widen(f, c_host[k->c_off + b * sc + (int64_t)j * k->ldc + i])), x);
          const uint16_t want = ref_narrow(f, v);
          if (d[di] != want)
            fail_msg("%s: member %d (%d, %d) is 0x%04x, want 0x%04x", k->what, b, i, j, d[di], want);
        }
    if (darr) dev_free(ctx, darr), dev_free(ctx, carr);
    dev_free(ctx, beta_dev);
    if (!k->in_place) dev_free(ctx, c);
    dev_free(ctx, d), dev_free(ctx, src);
    free(c_host);
  }
  /* Argument checks: C NULL, ldc below the rows, a misaligned C, a
   * misaligned device beta; none with host beta 0 (C not read). */
  float *src = dev_alloc(ctx, 64 * 4);
  uint16_t *d = dev_alloc(ctx, 64 * 2);
  kernel_cast_c cb = {.c = NULL, .ld_c = 8, .beta = 1.0f};
  assert_int_equal(kernel_narrow_c(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 8, 0, d, 0, 8, 0, 8, 8, 1, &cb),
                   CUDA_ERROR_INVALID_VALUE);
  cb.c = d, cb.ld_c = 7;
  assert_int_equal(kernel_narrow_c(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 8, 0, d, 0, 8, 0, 8, 8, 1, &cb),
                   CUDA_ERROR_INVALID_VALUE);
  cb.c = (const char *)d + 1, cb.ld_c = 8;
  assert_int_equal(kernel_narrow_c(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 8, 0, d, 0, 8, 0, 8, 8, 1, &cb),
                   CUDA_ERROR_INVALID_VALUE);
  cb.c = d, cb.beta_ptr = (const float *)((const char *)src + 2);
  assert_int_equal(kernel_narrow_c(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 8, 0, d, 0, 8, 0, 8, 8, 1, &cb),
                   CUDA_ERROR_INVALID_VALUE);
  cb = (kernel_cast_c){.c = NULL, .ld_c = 0, .beta = 0.0f};
  assert_int_equal(kernel_narrow_c(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 8, 0, d, 0, 8, 0, 8, 8, 1, &cb),
                   CUDA_SUCCESS);
  dev_free(ctx, src), dev_free(ctx, d);
}

static void test_launch_results(void **state) {
  (void)state;
  CUcontext ctx = new_context(DEV_61);
  dmat s, w, n;
  /* ld > rows on the source, contiguous destination: no folding. */
  dmat_make(&s, ctx, GS_ELEM_BF16, 0, 45, 7, 3, 48, 48 * 7 + 5, 1);
  dmat_make(&w, ctx, GS_ELEM_F32, 0, 45, 7, 3, 45, 45 * 7, 0);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, s.base[0], s.ld, s.stride, w.base[0], w.ld,
                                w.stride, 45, 7, 3), CUDA_SUCCESS);
  dmat_check(&s, &w, "kernel_widen bf16");
  dmat_make(&n, ctx, GS_ELEM_BF16, 0, 45, 7, 3, 50, 50 * 7, 0);
  assert_int_equal(kernel_narrow(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, w.base[0], w.ld, w.stride, n.base[0], n.ld,
                                 n.stride, 45, 7, 3), CUDA_SUCCESS);
  dmat_check(&w, &n, "kernel_narrow bf16");
  dmat_free(&s, ctx), dmat_free(&w, ctx), dmat_free(&n, ctx);

  /* Contiguous both sides, members back to back: folded into one column. */
  dmat_make(&s, ctx, GS_ELEM_F16, 0, 33, 5, 4, 33, 33 * 5, 1);
  dmat_make(&w, ctx, GS_ELEM_F32, 0, 33, 5, 4, 33, 33 * 5, 0);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16F, s.base[0], 33, 165, w.base[0], 33, 165, 33, 5, 4),
                   CUDA_SUCCESS);
  dmat_check(&s, &w, "kernel_widen fp16 (folded)");
  dmat_free(&s, ctx);
  dmat_make(&s, ctx, GS_ELEM_F32, 0, 33, 5, 4, 33, 33 * 5, 1);
  dmat_make(&n, ctx, GS_ELEM_F16, 0, 33, 5, 4, 33, 33 * 5, 0);
  assert_int_equal(kernel_narrow(KERNEL_CTX(ctx), NULL, CUDA_R_16F, s.base[0], 33, 165, n.base[0], 33, 165, 33, 5, 4),
                   CUDA_SUCCESS);
  dmat_check(&s, &n, "kernel_narrow fp16 (folded)");
  dmat_free(&s, ctx), dmat_free(&w, ctx), dmat_free(&n, ctx);

  /* Contiguous columns, members back to back in the source only: the
   * columns fold, the batch must not. */
  dmat_make(&s, ctx, GS_ELEM_BF16, 0, 33, 5, 4, 33, 33 * 5, 1);
  dmat_make(&w, ctx, GS_ELEM_F32, 0, 33, 5, 4, 33, 33 * 5 + 7, 0);
  assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, s.base[0], 33, 165, w.base[0], 33, 172, 33, 5, 4),
                   CUDA_SUCCESS);
  dmat_check(&s, &w, "kernel_widen bf16 (columns folded)");
  dmat_free(&s, ctx), dmat_free(&w, ctx);

  /* Pointer arrays, folded columns (ld == rows) but separate members. */
  dmat_make(&s, ctx, GS_ELEM_BF16, 1, 29, 6, 5, 29, 0, 1);
  dmat_make(&w, ctx, GS_ELEM_F32, 0, 29, 6, 5, 31, 31 * 6 + 1, 0);
  void **arr = dmat_ptr_array(&s, ctx);
  assert_int_equal(kernel_widen_ptrarray(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, (const void *const *)arr, 29, w.base[0],
                                         31, w.stride, 29, 6, 5), CUDA_SUCCESS);
  dmat_check(&s, &w, "kernel_widen_ptrarray bf16");
  dev_free(ctx, arr);
  dmat_make(&n, ctx, GS_ELEM_F16, 1, 29, 6, 5, 30, 0, 0);
  arr = dmat_ptr_array(&n, ctx);
  assert_int_equal(kernel_narrow_ptrarray(KERNEL_CTX(ctx), NULL, CUDA_R_16F, w.base[0], 31, w.stride, arr, 30, 29, 6, 5),
                   CUDA_SUCCESS);
  dmat_check(&w, &n, "kernel_narrow_ptrarray fp16");
  dev_free(ctx, arr);
  dmat_free(&s, ctx), dmat_free(&w, ctx), dmat_free(&n, ctx);

  /* Bias vectors of every type. */
  static const int types[] = {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
  static const int elems[] = {GS_ELEM_BF16, GS_ELEM_F16, GS_ELEM_F32};
  for (int t = 0; t < 3; t++) {
    dmat_make(&s, ctx, elems[t], 0, 1001, 1, 1, 1001, 0, 1);
    dmat_make(&w, ctx, GS_ELEM_F32, 0, 1001, 1, 1, 1001, 0, 0);
    assert_int_equal(kernel_widen_vector(KERNEL_CTX(ctx), NULL, types[t], s.base[0], w.base[0], 1001), CUDA_SUCCESS);
    dmat_check(&s, &w, "kernel_widen_vector");
    dmat_free(&s, ctx), dmat_free(&w, ctx);
  }
  assert_null(current());
}

/* Launch shapes, recorded instead of run. */
static unsigned last_grid[3], last_block[3];
static gs_cast_args last_args;
static int launches;
static CUresult record_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                              void **extra) {
  last_grid[0] = gx, last_grid[1] = gy, last_grid[2] = gz;
  last_block[0] = bx, last_block[1] = by, last_block[2] = bz;
  assert_int_equal(shmem, 0);
  assert_null(extra);
  assert_non_null(params);
  memcpy(&last_args, params[0], sizeof last_args);
  launches++;
  return CUDA_SUCCESS;
}

/* Threads of a launch that get work. The kernels' rule (cast.cu): a column
 * is cut into 8-element chunks starting at the source's 4-element
 * boundaries of memory when its source and destination share their offset
 * mod 4, else at its first row; one chunk a thread. So a column holds
 * ceil((rows + pre) / 8) chunks with elements, pre being that offset (or
 * 0). Pointer-array members are taken 16-byte aligned (pre 0), as the
 * allocator gives them. */
static int64_t useful_threads(const kernel_cast_operand *o, size_t ss, size_t ds) {
  int64_t n = 0;
  for (int64_t b = 0; b < o->batch; b++)
    for (int64_t c = 0; c < o->cols; c++) {
      uintptr_t sa = o->src_array ? 0 : (uintptr_t)o->src + (uintptr_t)((b * o->stride_src + c * o->ld_src) * (int64_t)ss);
      uintptr_t da = o->dst_array ? 0 : (uintptr_t)o->dst + (uintptr_t)((b * o->stride_dst + c * o->ld_dst) * (int64_t)ds);
      if (o->src_array) sa = (uintptr_t)(c * o->ld_src) * ss;
      if (o->dst_array) da = (uintptr_t)(c * o->ld_dst) * ds;
      int64_t so = (int64_t)(sa / ss % 4), dof = (int64_t)(da / ds % 4);
      int64_t pre = so == dof ? so : 0;
      n += (o->rows + pre + 7) / 8;
    }
  return n;
}

/* The geometry the launchers pick, per shape class: one launch, 256-thread
 * one-dimensional blocks, and at least 95% of the launched threads with
 * elements to move (the rest: the last block's tail, and at most one chunk
 * a column where alignment is not known on the host). Each thread moves
 * GS_CAST_CHUNK / GS_CAST_VEC vector groups, their loads issued together. */
static void test_launch_geometry(void **state) {
  (void)state;
  _Static_assert(GS_CAST_CHUNK / GS_CAST_VEC >= 2, "a thread keeps two vector loads in flight");
  CUcontext ctx = new_context(DEV_61);
  gs_sys.cuLaunchKernel = record_launch;
  /* Never touched: nothing runs. 256-byte aligned, as cudaMalloc gives. */
  char *p = (char *)(uintptr_t)0x10000000, *q = (char *)(uintptr_t)0x50000000;
  char *r = (char *)(uintptr_t)0x90000000, *t = (char *)(uintptr_t)0xD0000000;
  const int BF = CUDA_R_16BF;
  static const struct geometry_case {
    const char *what;
    int n;                     /* operands */
    kernel_cast_operand op[4]; /* src_type, src, src_array, ld, stride, dst, dst_array, ld, stride, rows, cols, batch */
  } cases[] = {
      {"contiguous 1024^2", 1, {{BF, 0, 0, 1024, 0, 0, 0, 1024, 0, 1024, 1024, 1}}},
      {"contiguous 4096^2", 1, {{BF, 0, 0, 4096, 0, 0, 0, 4096, 0, 4096, 4096, 1}}},
      {"contiguous 1000x999", 1, {{BF, 0, 0, 1000, 0, 0, 0, 1000, 0, 1000, 999, 1}}},
      {"padded ld 1000 of 1024", 1, {{BF, 0, 0, 1024, 0, 0, 0, 1000, 0, 1000, 512, 1}}},
      {"padded odd ld 1001 of 1003", 1, {{BF, 0, 0, 1003, 0, 0, 0, 1001, 0, 1001, 700, 1}}},
      {"padded ld, short columns 37 of 40", 1, {{BF, 0, 0, 40, 0, 0, 0, 37, 0, 37, 2048, 1}}},
      {"strided batch, contiguous members", 1, {{BF, 0, 0, 64, 4096, 0, 0, 64, 4096, 64, 64, 512}}},
      {"strided batch, padded members", 1, {{BF, 0, 0, 72, 72 * 64 + 8, 0, 0, 64, 4096, 64, 64, 256}}},
      {"pointer-array batch", 1, {{BF, 0, 1, 512, 0, 0, 0, 512, 512 * 512, 512, 512, 16}}},
      {"pointer-array batch, padded", 1, {{BF, 0, 1, 520, 0, 0, 0, 500, 500 * 300, 500, 300, 16}}},
      {"beta != 0: A, B and C", 3,
       {{BF, 0, 0, 4096, 0, 0, 0, 4096, 0, 4096, 1024, 1},
        {BF, 0, 0, 1024, 0, 0, 0, 1024, 0, 1024, 4096, 1},
        {BF, 0, 0, 4096, 0, 0, 0, 4096, 0, 4096, 4096, 1}}},
      {"bias: A, B and a vector", 3,
       {{BF, 0, 0, 1024, 0, 0, 0, 1024, 0, 1024, 1024, 1},
        {BF, 0, 0, 1024, 0, 0, 0, 1024, 0, 1024, 1024, 1},
        {BF, 0, 0, 1024, 0, 0, 0, 1024, 0, 1024, 1, 1}}},
      {"batched bias: A, B, C and a strided vector", 4,
       {{BF, 0, 0, 256, 65536, 0, 0, 256, 65536, 256, 256, 8},
        {BF, 0, 0, 256, 65536, 0, 0, 256, 65536, 256, 256, 8},
        {BF, 0, 0, 256, 65536, 0, 0, 256, 65536, 256, 256, 8},
        {BF, 0, 0, 256, 300, 0, 0, 256, 256, 256, 1, 8}}},
  };
  char *bases[4] = {p, q, r, t};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kernel_cast_operand ops[4];
    int64_t useful = 0, elements = 0;
    for (int k = 0; k < cases[i].n; k++) {
      ops[k] = cases[i].op[k];
      ops[k].src = bases[k];
      ops[k].dst = bases[(k + 2) % 4] + 0x1000000;
      useful += useful_threads(&ops[k], 2, 4);
      elements += ops[k].rows * ops[k].cols * ops[k].batch;
    }
    launches = 0;
    assert_int_equal(kernel_widen_operands(KERNEL_CTX(ctx), NULL, ops, cases[i].n), CUDA_SUCCESS);
    assert_int_equal(launches, 1);
    assert_int_equal(last_block[0], GS_CAST_THREADS);
    assert_int_equal(last_block[1] * last_block[2] * last_grid[1] * last_grid[2], 1);
    assert_int_equal(last_args.operands, cases[i].n);
    const int64_t launched = (int64_t)last_grid[0] * GS_CAST_THREADS;
    assert_true(last_args.chunks <= launched && useful <= last_args.chunks);
    assert_true(useful * GS_CAST_CHUNK >= elements);
    print_message("geometry %-44s %10" PRId64 " elements %9" PRId64 " threads, %6.2f%% with work\n",
                  cases[i].what, elements, launched, 100.0 * (double)useful / (double)launched);
    if ((double)useful < 0.95 * (double)launched)
      fail_msg("%s: %" PRId64 " of %" PRId64 " threads have work", cases[i].what, useful, launched);
  }
  /* The narrowing launch: one operand, the same rule. */
  launches = 0;
  assert_int_equal(kernel_narrow(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, (float *)p, 4096, 0, q, 4096, 0, 4096, 4096, 1), 0);
  assert_int_equal(launches, 1);
  assert_int_equal(last_grid[0], 4096 * 4096 / 8 / GS_CAST_THREADS);
  launches = 0;
  assert_int_equal(kernel_narrow_ptrarray(KERNEL_CTX(ctx), NULL, CUDA_R_16F, (float *)p, 1000, 20000, (void *const *)q, 1000,
                                          1000, 20, 3), 0);
  assert_int_equal(launches, 1);
  assert_int_equal(last_grid[0], (3 * ((20000 + 3 + 7) / 8) + 255) / 256); /* columns fold, members never */
  /* Sources of different types: one launch each. */
  kernel_cast_operand mixed[3] = {{CUDA_R_16F, p, 0, 64, 0, q, 0, 64, 0, 64, 64, 1},
                                  {CUDA_R_32F, r, 0, 64, 0, t, 0, 64, 0, 64, 1, 1},
                                  {CUDA_R_16F, p + 0x10000, 0, 64, 0, q + 0x10000, 0, 64, 0, 64, 64, 1}};
  launches = 0;
  assert_int_equal(kernel_widen_operands(KERNEL_CTX(ctx), NULL, mixed, 3), 0);
  assert_int_equal(launches, 2);
  /* A grid of 2^29 blocks: no cap below the hardware's 2^31 - 1. */
  assert_int_equal(kernel_widen_vector(KERNEL_CTX(ctx), NULL, CUDA_R_32F, p, (float *)q, (int64_t)1 << 40), 0);
  assert_int_equal(last_grid[0], 1u << 29);
  gs_sys.cuLaunchKernel = real_sys.cuLaunchKernel;
}

/* The multiplier division (cast.h, Granlund and Montgomery's figure 4.1)
 * against the CPU's division, on the divisors where such methods go wrong
 * (1, powers of two and their neighbours, the top of the range) and random
 * ones, each with the dividends around its multiples and random ones. */
static uint64_t magic_div(uint64_t n, gs_cast_div d) {
  uint64_t t = (uint64_t)(((unsigned __int128)d.magic * n) >> 64);
  return (t + ((n - t) >> d.sh1)) >> d.sh2;
}

static void test_division_by_multiply(void **state) {
  (void)state;
  uint64_t divisors[400];
  int nd = 0;
  for (int k = 0; k < 64; k++) {
    uint64_t p2 = (uint64_t)1 << k;
    divisors[nd++] = p2;
    if (p2 > 1) divisors[nd++] = p2 - 1;
    divisors[nd++] = p2 + 1;
  }
  divisors[nd++] = UINT64_MAX;
  divisors[nd++] = 7;
  divisors[nd++] = 641;
  while (nd < 400) divisors[nd++] = (rng_next() >> rng_below(64)) | 1;
  for (int i = 0; i < nd; i++) {
    const uint64_t d = divisors[i];
    const gs_cast_div m = kernel_cast_div(d);
    assert_true(m.d == d);
    uint64_t ns[64];
    int nn = 0;
    ns[nn++] = 0, ns[nn++] = 1, ns[nn++] = UINT64_MAX, ns[nn++] = UINT64_MAX - 1, ns[nn++] = d, ns[nn++] = d - 1;
    for (int k = 0; k < 20; k++) {
      uint64_t mult = d * (rng_next() % (UINT64_MAX / d));
      ns[nn++] = mult, ns[nn++] = mult - 1;
    }
    while (nn < 64) ns[nn++] = rng_next() >> rng_below(64);
    for (int k = 0; k < nn; k++)
      if (magic_div(ns[k], m) != ns[k] / d)
        fail_msg("%" PRIu64 " / %" PRIu64 ": got %" PRIu64 ", want %" PRIu64, ns[k], d, magic_div(ns[k], m), ns[k] / d);
  }
}

/* A GEMM's operands in one launch over the stand-in, each checked element
 * by element: A padded, B contiguous, C strided, a bias vector. */
static CUresult (*counted_launch_real)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                       unsigned, CUstream, void **, void **);
static CUresult counted_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  launches++;
  return counted_launch_real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

static void test_launch_operands(void **state) {
  (void)state;
  CUcontext ctx = new_context(DEV_61);
  dmat a, b, c, bias, wa, wb, wc, wbias;
  dmat_make(&a, ctx, GS_ELEM_BF16, 0, 45, 30, 2, 49, 49 * 30 + 3, 1);
  dmat_make(&b, ctx, GS_ELEM_BF16, 0, 30, 21, 2, 30, 30 * 21, 1);
  dmat_make(&c, ctx, GS_ELEM_BF16, 0, 45, 21, 2, 47, 47 * 21 + 1, 1);
  dmat_make(&bias, ctx, GS_ELEM_BF16, 0, 45, 1, 2, 45, 50, 1);
  dmat_make(&wa, ctx, GS_ELEM_F32, 0, 45, 30, 2, 45, 45 * 30, 0);
  dmat_make(&wb, ctx, GS_ELEM_F32, 0, 30, 21, 2, 30, 30 * 21, 0);
  dmat_make(&wc, ctx, GS_ELEM_F32, 0, 45, 21, 2, 45, 45 * 21, 0);
  dmat_make(&wbias, ctx, GS_ELEM_F32, 0, 45, 1, 2, 45, 45, 0);
  const dmat *src[4] = {&a, &b, &c, &bias}, *dst[4] = {&wa, &wb, &wc, &wbias};
  kernel_cast_operand ops[4];
  for (int i = 0; i < 4; i++)
    ops[i] = (kernel_cast_operand){CUDA_R_16BF, src[i]->base[0], 0, src[i]->ld, src[i]->stride, dst[i]->base[0], 0,
                                   dst[i]->ld, dst[i]->stride, src[i]->rows, src[i]->cols, src[i]->batch};
  counted_launch_real = gs_sys.cuLaunchKernel;
  gs_sys.cuLaunchKernel = counted_launch;
  launches = 0;
  assert_int_equal(kernel_widen_operands(KERNEL_CTX(ctx), NULL, ops, 4), CUDA_SUCCESS);
  gs_sys.cuLaunchKernel = counted_launch_real;
  assert_int_equal(launches, 1);
  static const char *const what[4] = {"A", "B", "C", "bias"};
  for (int i = 0; i < 4; i++) dmat_check(src[i], dst[i], what[i]);
  /* One bad operand: nothing launched at all. */
  ops[2].ld_src = 3;
  gs_sys.cuLaunchKernel = record_launch;
  launches = 0;
  assert_int_equal(kernel_widen_operands(KERNEL_CTX(ctx), NULL, ops, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(kernel_widen_operands(KERNEL_CTX(ctx), NULL, ops, 5), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(launches, 0);
  gs_sys.cuLaunchKernel = counted_launch_real;
  for (int i = 0; i < 4; i++) dmat_free((dmat *)src[i], ctx), dmat_free((dmat *)dst[i], ctx);
  assert_null(current());
}

/* Module loads and unloads, counted. */
static _Atomic int loads, unloads;
static CUresult (*real_load)(CUmodule *, const void *);
static CUresult (*real_unload)(CUmodule);
static int slow_load; /* widen the window in which a second thread can race */
static CUresult count_load(CUmodule *m, const void *image) {
  if (slow_load) usleep(20000);
  CUresult r = real_load(m, image);
  if (r == CUDA_SUCCESS) loads++;
  return r;
}
static CUresult count_unload(CUmodule m) {
  unloads++;
  return real_unload(m);
}
static void count_modules(int on) {
  real_load = real_sys.cuModuleLoadData, real_unload = real_sys.cuModuleUnload;
  gs_sys.cuModuleLoadData = on ? count_load : real_load;
  gs_sys.cuModuleUnload = on ? count_unload : real_unload;
  if (on) loads = unloads = 0;
}

/* A small widen on ctx, checked. */
static CUresult small_widen(CUcontext ctx, int check) {
  dmat s, w;
  dmat_make(&s, ctx, GS_ELEM_BF16, 0, 10, 3, 2, 12, 36, 1);
  dmat_make(&w, ctx, GS_ELEM_F32, 0, 10, 3, 2, 11, 33, 0);
  CUresult r = kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, s.base[0], 12, 36, w.base[0], 11, 33, 10, 3, 2);
  if (check) dmat_check(&s, &w, "small widen");
  dmat_free(&s, ctx), dmat_free(&w, ctx);
  return r;
}

/* The launcher pushes the context it is given and restores the caller's. */
static void test_launch_other_context(void **state) {
  (void)state;
  CUcontext a = new_context(DEV_61), b = new_context(DEV_90), popped;
  assert_int_equal(gs_sys.cuCtxPushCurrent_v2(a), CUDA_SUCCESS);
  count_modules(1);
  assert_null(kernels_ready(KERNEL_CTX(b)));
  assert_ptr_equal(current(), a);
  assert_int_equal(small_widen(b, 1), CUDA_SUCCESS);
  assert_ptr_equal(current(), a);
  assert_int_equal(small_widen(a, 1), CUDA_SUCCESS);
  assert_ptr_equal(current(), a);
  assert_int_equal(loads, module_files + module_files_90);
  count_modules(0);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
}

static void test_module_once_per_context(void **state) {
  (void)state;
  CUcontext a = new_context(DEV_61), b = new_context(DEV_61);
  count_modules(1);
  for (int i = 0; i < 3; i++) assert_int_equal(small_widen(a, 1), CUDA_SUCCESS);
  assert_int_equal(loads, module_files);
  assert_null(kernels_ready(KERNEL_CTX(a)));
  assert_int_equal(small_widen(b, 1), CUDA_SUCCESS);
  assert_int_equal(loads, 2 * module_files);
  assert_int_equal(unloads, 0);
  count_modules(0);
}

typedef struct first_use {
  CUcontext ctx;
  CUresult r;
  float out[300];
  uint16_t in[300];
} first_use;

static pthread_barrier_t first_use_start;

static void *first_use_thread(void *arg) {
  first_use *u = arg;
  pthread_barrier_wait(&first_use_start);
  u->r = kernel_widen_vector(KERNEL_CTX(u->ctx), NULL, CUDA_R_16F, u->in, u->out, 300);
  return NULL;
}

/* Threads racing to the first launch in a context load its modules once. */
static void test_concurrent_first_use(void **state) {
  (void)state;
  enum { THREADS = 8 };
  CUcontext ctx = new_context(DEV_61);
  count_modules(1);
  slow_load = 1;
  static first_use u[THREADS];
  pthread_t t[THREADS];
  assert_int_equal(pthread_barrier_init(&first_use_start, NULL, THREADS), 0);
  for (int i = 0; i < THREADS; i++) {
    u[i].ctx = ctx;
    for (int j = 0; j < 300; j++) u[i].in[j] = (uint16_t)rng_u32();
    assert_int_equal(pthread_create(&t[i], NULL, first_use_thread, &u[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(u[i].r, CUDA_SUCCESS);
    for (int j = 0; j < 300; j++) assert_int_equal(gs_f32_bits(u[i].out[j]), ref_widen(&F16, u[i].in[j]));
  }
  assert_int_equal(loads, module_files);
  slow_load = 0;
  count_modules(0);
  pthread_barrier_destroy(&first_use_start);
}

/* A context destroyed and another made at the same address differ by id:
 * the cache must load again. The stand-in never reuses addresses, so ids
 * come from a stand-in for cuCtxGetId. */
static unsigned long long fake_id;
static CUresult fake_get_id(CUcontext c, unsigned long long *id) {
  (void)c;
  *id = fake_id;
  return CUDA_SUCCESS;
}

static void test_module_keyed_by_context_id(void **state) {
  (void)state;
  CUcontext ctx = new_context(DEV_61);
  gs_sys.cuCtxGetId = fake_get_id;
  count_modules(1);
  fake_id = 1001;
  assert_int_equal(small_widen(ctx, 1), CUDA_SUCCESS);
  assert_int_equal(small_widen(ctx, 1), CUDA_SUCCESS);
  assert_int_equal(loads, module_files);
  fake_id = 1002;
  assert_int_equal(small_widen(ctx, 1), CUDA_SUCCESS);
  assert_int_equal(loads, 2 * module_files);
  count_modules(0);
  gs_sys.cuCtxGetId = real_sys.cuCtxGetId;
}

/* sm_52 is older than the PTX's .target: the driver refuses the module and
 * the launcher says why, launching nothing. */
static void test_device_too_old(void **state) {
  (void)state;
  CUcontext ctx = new_context(DEV_52);
  const char *why = kernels_ready(KERNEL_CTX(ctx));
  assert_non_null(why);
  assert_non_null(strstr(why, "cuModuleLoadData"));
  assert_int_equal(small_widen(ctx, 0), CUDA_ERROR_INVALID_PTX);
  assert_null(current());
}

/* Each driver call the launcher makes fails in turn (the nth call of each
 * entry, n = 1, 2, ...), in a fresh context: the launcher returns the
 * failure or succeeds with the right result, unloads what a failed load
 * loaded, restores the caller's context (unless restoring is what failed),
 * and a retry succeeds. */
static void test_driver_failures(void **state) {
  (void)state;
  static const gs_sys_id entries[] = {GS_SYS_cuCtxGetId,          GS_SYS_cuCtxGetCurrent,
                                      GS_SYS_cuCtxPushCurrent_v2,  GS_SYS_cuCtxPopCurrent_v2,
                                      GS_SYS_cuModuleLoadData,     GS_SYS_cuModuleGetFunction,
                                      GS_SYS_cuLaunchKernel};
  /* The stand-in has cuCtxGetId, as CUDA 12+ drivers do: ids key the cache. */
  assert_non_null(gs_sys.cuCtxGetId);
  CUcontext base = new_context(DEV_61), popped;
  assert_int_equal(gs_sys.cuCtxPushCurrent_v2(base), CUDA_SUCCESS);
  int failures = 0;
  for (size_t e = 0; e < sizeof entries / sizeof entries[0]; e++)
    for (unsigned n = 1; n <= 4; n++) {
      CUcontext ctx = new_context(DEV_61);
      dmat s, w;
      dmat_make(&s, ctx, GS_ELEM_BF16, 0, 10, 3, 1, 12, 0, 1);
      dmat_make(&w, ctx, GS_ELEM_F32, 0, 10, 3, 1, 10, 0, 0);
      count_modules(1);
      gs_fault_arm(entries[e], n, 0);
      CUresult r = kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, s.base[0], 12, 0, w.base[0], 10, 0, 10, 3, 1);
      gs_fault_clear();
      if (r == CUDA_SUCCESS) {
        dmat_check(&s, &w, "widen under a fault that missed");
      } else {
        failures++;
        assert_int_equal(r, CUDA_ERROR_UNKNOWN);
      }
      if (entries[e] == GS_SYS_cuCtxPopCurrent_v2 && current() == ctx)
        assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
      assert_ptr_equal(current(), base);
      assert_int_equal(kernel_widen(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, s.base[0], 12, 0, w.base[0], 10, 0, 10, 3, 1),
                       CUDA_SUCCESS);
      dmat_check(&s, &w, "widen retried after a fault");
      assert_ptr_equal(current(), base);
      /* One live set of modules in ctx: a failed load unloaded its part. */
      count_modules(0);
      assert_int_equal(loads - unloads, module_files);
      dmat_free(&s, ctx), dmat_free(&w, ctx);
    }
  /* Each entry failed at least on its first call. */
  assert_true(failures >= (int)(sizeof entries / sizeof entries[0]));
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
}

int main(void) {
  const char *seed_env = getenv("GS_TEST_SEED");
  uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 0) : 0x6B65726E656C73ull;
  rng_state = seed;
  printf("test_kernels: seed 0x%" PRIx64 " (GS_TEST_SEED=0x%" PRIx64 " repeats this run)\n", seed, seed);
  fflush(stdout);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_golden),
#if defined(__FLT16_MAX__)
      cmocka_unit_test(test_reference_vs_float16),
#endif
      cmocka_unit_test(test_widen_all_codes),
      cmocka_unit_test(test_narrow_sweep),
      cmocka_unit_test(test_widen_bf16),
      cmocka_unit_test(test_widen_f16),
      cmocka_unit_test(test_widen_f32),
      cmocka_unit_test(test_narrow_bf16),
      cmocka_unit_test(test_narrow_f16),
      cmocka_unit_test(test_ptx_has_every_kernel),
      cmocka_unit_test_setup(test_launcher_argument_checks, fresh),
      cmocka_unit_test_setup(test_narrow_with_c, fresh),
      cmocka_unit_test_setup(test_launch_results, fresh),
      cmocka_unit_test_setup(test_launch_geometry, fresh),
      cmocka_unit_test(test_division_by_multiply),
      cmocka_unit_test_setup(test_launch_operands, fresh),
      cmocka_unit_test_setup(test_launch_other_context, fresh),
      cmocka_unit_test_setup(test_module_once_per_context, fresh),
      cmocka_unit_test_setup(test_concurrent_first_use, fresh),
      cmocka_unit_test_setup(test_module_keyed_by_context_id, fresh),
      cmocka_unit_test_setup(test_device_too_old, fresh),
      cmocka_unit_test_setup(test_driver_failures, fresh),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
