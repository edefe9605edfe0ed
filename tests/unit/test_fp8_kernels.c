/* test_fp8_kernels.c: the fp8 kernels (kernels/fp8_quantize.cu,
 * kernels/fp8_gemm.cu) and their launchers (kernels/fp8_launch.c), run on
 * the CPU: the launchers call the stand-in libcuda.so.1, whose
 * cuLaunchKernel runs the host build of the same kernel source (the
 * STANDIN_KERNELS library; fp8_block.h runs each block's threads as fibers,
 * so barriers, shared memory and the last-block fold are real). Fresh
 * random data each run (seed printed; GS_TEST_SEED repeats a run); outputs
 * are poisoned (NaN) first.
 *
 * The references beside each kernel:
 *   - quantize: an element-by-element model of the TN layout (op(A) as k x m,
 *     op(B) as k x n, k contiguous) and of x / scale encoded with
 *     saturation (fp8_convert.h, itself checked against ml_dtypes in
 *     test_fp8_convert); every byte compared, guards past the end and the
 *     source's padding (NaN, so an amax that read it would be NaN) checked;
 *   - the ring: a host model of the delayed-scaling fold (history roll,
 *     margin, clamp, 0/inf/NaN keep the scale, amax_init), compared bit
 *     for bit after every call, with counter and slots re-armed;
 *   - GEMM: the same fp32 operations in the same order on the host (decode,
 *     fmaf over k, alpha*scales, beta*C, bias, relu), so every output is
 *     compared bit for bit; GELU against double precision; and end to end
 *     (amax_init, quantize, GEMM) against a float64 GEMM of the unquantized
 *     inputs: SQNR >= 25 dB for E4M3, as torchao requires. */
#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <cublasLt.h>
#include <library_types.h>

#include "../../kernels/fp8.h"
#include "base.h"
#include "../../kernels/fp8_convert.h"
#include "../../kernels/fp8_kernels.h"
#include "../../kernels/fp8_stats.h"
#include "../../kernels/module.h"
#include "../standin/standin_kernel.h"
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
static uint32_t rng_below(uint32_t n) { return (uint32_t)((rng_next() >> 33) % n); }
static double rng_normal(void) { /* Box-Muller */
  double u = rng_unit(), v = rng_unit();
  return sqrt(-2.0 * log(u + 0x1p-60)) * cos(6.283185307179586 * v);
}

/* ---- elements ------------------------------------------------------------ */
static size_t type_size(int type) { return type == CUDA_R_32F ? 4 : 2; }

static float get_elem(int type, const void *p, int64_t i) {
  if (type == CUDA_R_16BF) return gs_bf16_to_f32(((const uint16_t *)p)[i]);
  if (type == CUDA_R_16F) return gs_f16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

static void put_elem(int type, void *p, int64_t i, float v) {
  if (type == CUDA_R_16BF) ((uint16_t *)p)[i] = gs_f32_to_bf16_rn(v);
  else if (type == CUDA_R_16F) ((uint16_t *)p)[i] = gs_f32_to_f16_rn(v);
  else ((float *)p)[i] = v;
}

static uint32_t get_bits(int type, const void *p, int64_t i) {
  if (type == CUDA_R_32F) return ((const uint32_t *)p)[i];
  return ((const uint16_t *)p)[i];
}

/* The element type's own rounding of an fp32 value, as bits. */
static uint32_t round_bits(int type, float v) {
  if (type == CUDA_R_16BF) return gs_f32_to_bf16_rn(v);
  if (type == CUDA_R_16F) return gs_f32_to_f16_rn(v);
  return gs_f32_bits(v);
}

/* A NaN of each type, for poisoning. */
static void put_nan(int type, void *p, int64_t i) {
  if (type == CUDA_R_32F) ((uint32_t *)p)[i] = 0x7FC00001u;
  else ((uint16_t *)p)[i] = type == CUDA_R_16BF ? 0x7FC1 : 0x7E01;
}
static uint32_t nan_bits(int type) {
  return type == CUDA_R_32F ? 0x7FC00001u : type == CUDA_R_16BF ? 0x7FC1u : 0x7E01u;
}

static const char *type_name(int type) {
  return type == CUDA_R_16BF ? "bf16" : type == CUDA_R_16F ? "fp16" : "fp32";
}

static float fmt_max(int fmt) { return fmt ? GS_FP8_E5M2_MAX : GS_FP8_E4M3_MAX; }

/* ---- the host kernels and the stand-in driver ------------------------------ */
static void *host_lib, *standin_cuda;
static CUcontext ctx;   /* the 6.1 device's: the tests' default */
static CUcontext ctx90; /* the 9.0 device's: the tensor-core GEMM loads there */
/* Where the quantize tests run: ctx (the sm_61 kernels), or ctx90 (the
 * sm_89 ones: the hardware conversion's model, fp8_quantize_sm89.cu). */
static CUcontext qctx;
static unsigned long long (*take_vector_accesses)(void);

/* $(BUILD)/tests/unit/test_fp8_kernels -> $(BUILD)/<rel> */
static void build_path(char *out, size_t len, const char *rel) {
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  assert_true(n > 0);
  out[n] = 0;
  char *slash = strrchr(out, '/');
  snprintf(slash, len - (size_t)(slash - out), "/../../%s", rel);
}

static void *standin_sym(const char *name) {
  void *p = dlsym(standin_cuda, name);
  if (!p) fail_msg("the stand-in has no %s", name);
  return p;
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
    fprintf(stderr, "test_fp8_kernels: cannot load the host kernels %s: %s\n", path, dlerror());
    return -1;
  }
  *(void **)&take_vector_accesses = dlsym(host_lib, "gs_emu_take_vector_accesses");
  if (!take_vector_accesses) return -1;
  /* The driver faults these tests inject make the launchers warn, as
   * they should; the warnings are not what the tests check, and would only
   * read as trouble among make test's output. */
  snprintf(gs_debug_file, sizeof gs_debug_file, "/dev/null");
  debug_init();
  setenv("STANDIN_KERNELS", path, 1);
  setenv("STANDIN_CC", "6.1,9.0", 1);
  build_path(cuda, sizeof cuda, "standin/cu13/libcuda.so.1");
  standin_cuda = dlopen(cuda, RTLD_NOW | RTLD_GLOBAL);
  if (!standin_cuda) {
    fprintf(stderr, "test_fp8_kernels: cannot load the stand-in driver %s: %s\n", cuda, dlerror());
    return -1;
  }
  const char *why = resolve_driver();
  if (why) {
    fprintf(stderr, "test_fp8_kernels: resolve_driver: %s\n", why);
    return -1;
  }
  if (gs_sys.cuInit(0) != CUDA_SUCCESS) return -1;
  CUresult (*create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
  *(void **)&create = dlsym(standin_cuda, "cuCtxCreate_v4");
  CUcontext popped;
  if (!create || create(&ctx, NULL, 0, 0) != CUDA_SUCCESS) return -1;
  if (gs_sys.cuCtxPopCurrent_v2(&popped) != CUDA_SUCCESS) return -1;
  if (create(&ctx90, NULL, 0, 1) != CUDA_SUCCESS) return -1;
  qctx = ctx;
  return gs_sys.cuCtxPopCurrent_v2(&popped) == CUDA_SUCCESS ? 0 : -1;
}

/* Device memory: host memory in the stand-in. */
static void *dev_alloc(size_t bytes) {
  CUdeviceptr p;
  CUcontext popped;
  assert_int_equal(gs_sys.cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuMemAlloc_v2(&p, bytes ? bytes : 1), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  return (void *)(uintptr_t)p;
}

static void dev_free(void *p) {
  CUcontext popped;
  if (!p) return;
  assert_int_equal(gs_sys.cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuMemFree_v2((CUdeviceptr)(uintptr_t)p), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
}

/* Call a host kernel directly with a grid of our choosing (the launchers
 * always cover the work with blocks; this exercises the grid-stride loops). */
static int run_host_kernel(const char *name, const unsigned grid[3], unsigned threads, void *args) {
  char sym[128];
  snprintf(sym, sizeof sym, "%s%s", STANDIN_KERNEL_PREFIX, name);
  void *p = dlsym(host_lib, sym);
  if (!p) fail_msg("%s is not in the host kernel library", sym);
  standin_kernel_fn fn;
  memcpy(&fn, &p, sizeof p);
  void *params[] = {args};
  standin_launch l = {.abi = STANDIN_KERNEL_ABI,
                      .grid = {grid[0], grid[1], grid[2]},
                      .block = {threads, 1, 1},
                      .params = params,
                      .cc_major = 6,
                      .cc_minor = 1};
  return fn(&l);
}

/* ---- rings and their host model -------------------------------------------- */
#define MAX_HISTORY 64

typedef struct ring_model {
  float scale[2];
  float hist[MAX_HISTORY];
  unsigned pos, history;
  int fmt;
  float margin_pow2;
  float last_amax;
} ring_model;

static gs_fp8_ring *ring_new(ring_model *m, unsigned history, int fmt, float margin_pow2) {
  assert_true(history <= MAX_HISTORY);
  gs_fp8_ring *r = dev_alloc((size_t)gs_fp8_ring_bytes(history));
  memset(r, 0, (size_t)gs_fp8_ring_bytes(history));
  r->scale[0][0] = r->scale[1][0] = 1.0f;
  r->history = history;
  r->fmt = (unsigned)fmt;
  r->margin_pow2 = margin_pow2;
  memset(m, 0, sizeof *m);
  m->scale[0] = m->scale[1] = 1.0f;
  m->history = history;
  m->fmt = fmt;
  m->margin_pow2 = margin_pow2;
  return r;
}

/* The smallest float step with a finite reciprocal: 2^-128 (1 + 2^-21).
 * TransformerEngine (transformer_engine/common/recipe/delayed_scaling.cu)
 * replaces a scale that overflowed to inf by FLT_MAX; this is that scale
 * as a step. */
static float min_step(void) {
  float s = ldexpf(1.0f + ldexpf(1.0f, -21), -128);
  return s;
}

/* The fold as fp8.h states it, written from the rules, not the kernel:
 * the step is amax * 2^margin / fmt_max for any finite positive amax
 * (TransformerEngine's scale = fmt_max * 2^-margin / amax, inverted;
 * test_margin_is_transformer_engines checks it against TE's own formula),
 * no lower bound but the one TE's FLT_MAX stands for. */
static float model_step(const ring_model *m, float amax) {
  float s = amax / fmt_max(m->fmt);
  s = s * m->margin_pow2;
  return s < min_step() ? min_step() : s;
}

/* init: a site's first-call amax pass, which publishes its step and enters
 * nothing (the call's quantize enters the amax, once). */
static void model_fold(ring_model *m, float amax, int parity, int init) {
  int valid = amax > 0.0f && isfinite(amax);
  m->last_amax = amax;
  if (valid && !init) {
    m->hist[m->pos] = amax;
    m->pos = (m->pos + 1) % m->history;
  }
  if (init) {
    if (valid) m->scale[parity] = model_step(m, amax);
    return;
  }
  float next = m->scale[parity];
  if (valid) {
    float h = 0;
    for (unsigned i = 0; i < m->history; i++) h = m->hist[i] > h ? m->hist[i] : h;
    next = model_step(m, h);
  }
  m->scale[parity ^ 1] = next;
}

static void ring_check(const gs_fp8_ring *r, const ring_model *m, const char *what) {
  if (gs_f32_bits(r->scale[0][0]) != gs_f32_bits(m->scale[0]) || gs_f32_bits(r->scale[1][0]) != gs_f32_bits(m->scale[1]))
    fail_msg("%s: scales %a %a, model %a %a", what, (double)r->scale[0][0], (double)r->scale[1][0],
             (double)m->scale[0], (double)m->scale[1]);
  if (isnan(m->last_amax) ? !isnan(r->last_amax) : gs_f32_bits(r->last_amax) != gs_f32_bits(m->last_amax))
    fail_msg("%s: last_amax %a, model %a", what, (double)r->last_amax, (double)m->last_amax);
  if (r->pos != m->pos) fail_msg("%s: pos %u, model %u", what, r->pos, m->pos);
  for (unsigned i = 0; i < m->history; i++)
    if (gs_f32_bits(r->hist[i]) != gs_f32_bits(m->hist[i]))
      fail_msg("%s: hist[%u] %a, model %a", what, i, (double)r->hist[i], (double)m->hist[i]);
  /* Re-armed for the next launch on the stream. */
  assert_int_equal(r->blocks_done, 0);
  for (int i = 0; i < GS_FP8_AMAX_SLOTS; i++)
    if (r->amax_slot[i] != 0.0f) fail_msg("%s: amax slot %d left at %a", what, i, (double)r->amax_slot[i]);
}

/* ---- operand matrices ------------------------------------------------------- */
/* A source matrix as stored: column-major rows x cols, ld, batch stride, in
 * device memory. Padding (rows..ld-1 and the gaps between members) is NaN:
 * an amax that read it would be NaN. */
typedef struct smat {
  int type;
  int64_t rows, cols, ld, stride, batch;
  void *p;
} smat;

static void smat_make(smat *s, int type, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                      int64_t batch, double sigma) {
  s->type = type, s->rows = rows, s->cols = cols, s->ld = ld, s->stride = stride, s->batch = batch;
  int64_t len = (batch - 1) * stride + ld * (cols - 1) + rows;
  if (len < 1) len = 1;
  s->p = dev_alloc((size_t)len * type_size(type));
  for (int64_t i = 0; i < len; i++) put_nan(type, s->p, i);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t c = 0; c < cols; c++)
      for (int64_t r = 0; r < rows; r++)
        put_elem(type, s->p, b * stride + c * ld + r, (float)(rng_normal() * sigma));
}

static float smat_get(const smat *s, int64_t b, int64_t r, int64_t c) {
  return get_elem(s->type, s->p, b * s->stride + c * s->ld + r);
}
static void smat_put(const smat *s, int64_t b, int64_t r, int64_t c, float v) {
  put_elem(s->type, s->p, b * s->stride + c * s->ld + r, v);
}

/* max |x| over the matrix (not the padding); NaN if any element is. */
static float smat_amax(const smat *s) {
  float m = 0.0f;
  for (int64_t b = 0; b < s->batch; b++)
    for (int64_t c = 0; c < s->cols; c++)
      for (int64_t r = 0; r < s->rows; r++) {
        float v = fabsf(smat_get(s, b, r, c));
        if (isnan(v)) return v;
        m = v > m ? v : m;
      }
  return m;
}

/* op(X) element (row `i` of op(A), or column `i` of op(B)) at k index p. */
static float op_elem(const smat *s, int is_b, int trans, int64_t b, int64_t i, int64_t p) {
  if (!is_b) return trans ? smat_get(s, b, p, i) : smat_get(s, b, i, p);
  return trans ? smat_get(s, b, i, p) : smat_get(s, b, p, i);
}

/* m (or n) and k of the operand stored as s. */
static void op_dims(const smat *s, int is_b, int trans, int64_t *mn, int64_t *k) {
  int k_is_rows = is_b ? !trans : trans;
  *k = k_is_rows ? s->rows : s->cols;
  *mn = k_is_rows ? s->cols : s->rows;
}

#define GUARD 64
#define FP8_POISON 0x7F /* E4M3 NaN */

/* dst (with GUARD poison bytes after it) holds the TN layout of s
 * quantized with `scale`. */
static void check_quantized(const smat *s, int is_b, int trans, const uint8_t *dst, float scale, int fmt,
                            const char *what) {
  int64_t mn, k;
  op_dims(s, is_b, trans, &mn, &k);
  int64_t total = mn * k * s->batch;
  for (int64_t b = 0; b < s->batch; b++)
    for (int64_t i = 0; i < mn; i++)
      for (int64_t p = 0; p < k; p++) {
        float x = op_elem(s, is_b, trans, b, i, p);
        /* A NaN is encoded as it is, sign kept (not the division's NaN). */
        uint8_t want = gs_f32_to_fp8_sat(isnan(x) ? x : x / scale, fmt);
        uint8_t got = dst[b * mn * k + i * k + p];
        if (got != want)
          fail_msg("%s: member %" PRId64 " %s %" PRId64 " k %" PRId64 ": 0x%02x, want 0x%02x (x %a)", what, b,
                   is_b ? "col" : "row", i, p, got, want, (double)x);
      }
  for (int g = 0; g < GUARD; g++)
    if (dst[total + g] != FP8_POISON) fail_msg("%s: wrote %d bytes past the end", what, g + 1);
}

static uint8_t *dst_alloc(int64_t bytes) {
  uint8_t *d = dev_alloc((size_t)bytes + GUARD);
  memset(d, FP8_POISON, (size_t)bytes + GUARD);
  return d;
}

/* ---- quantize ------------------------------------------------------------------- */
typedef struct qshape {
  int64_t rows, cols, ld_pad, batch, stride_pad;
} qshape;

/* One quantize call against the references; returns the vector accesses
 * the kernels made. */
static unsigned long long quantize_case(int type, int is_b, int trans, const qshape *q, int fmt, float scale) {
  smat s;
  int64_t ld = q->rows + q->ld_pad;
  int64_t stride = ld * (q->cols - 1) + q->rows + q->stride_pad;
  smat_make(&s, type, q->rows, q->cols, ld, stride, q->batch, 3.0);
  ring_model m;
  gs_fp8_ring *ring = ring_new(&m, 4, fmt, 1.0f);
  int parity = (int)rng_below(2);
  ring->scale[parity][0] = m.scale[parity] = scale;
  uint8_t *dst = dst_alloc(q->rows * q->cols * q->batch);
  take_vector_accesses();
  CUresult r = fp8_quantize(KERNEL_CTX(qctx), NULL, type, s.p, q->rows, q->cols, ld, stride, q->batch, trans, is_b, dst, ring,
                            parity);
  unsigned long long vec = take_vector_accesses();
  char what[160];
  snprintf(what, sizeof what, "quantize %s %s%s %" PRId64 "x%" PRId64 " ld %" PRId64 " batch %" PRId64 " fmt %d",
           type_name(type), is_b ? "B" : "A", trans ? "^T" : "", q->rows, q->cols, ld, q->batch, fmt);
  if (r != CUDA_SUCCESS) fail_msg("%s: CUresult %d", what, (int)r);
  check_quantized(&s, is_b, trans, dst, scale, fmt, what);
  model_fold(&m, smat_amax(&s), parity, 0);
  ring_check(ring, &m, what);
  dev_free(dst);
  dev_free(ring);
  dev_free(s.p);
  return vec;
}

static void test_quantize_layouts(void **state) {
  (void)state;
  static const qshape shapes[] = {
      {1, 1, 0, 1, 0},     {8, 16, 0, 1, 0},   {37, 70, 3, 2, 5}, {64, 64, 0, 3, 0},
      {130, 65, 6, 2, 16}, {3, 200, 1, 1, 0},  {72, 9, 0, 2, 8},
  };
  static const int types[] = {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
  for (size_t t = 0; t < 3; t++)
    for (int is_b = 0; is_b < 2; is_b++)
      for (int trans = 0; trans < 2; trans++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
          quantize_case(types[t], is_b, trans, &shapes[i], (int)((t + i) % 2), (float)(0.004 + rng_unit() * 0.02));
}

/* The 16-byte loads and 8-byte stores are taken exactly when the layout
 * allows them: aligned (ld and stride multiples of 8 elements, rows or
 * cols multiples of 8 on the side that is written contiguously) uses them;
 * odd sizes use none. */
static void test_quantize_vector_paths(void **state) {
  (void)state;
  const qshape aligned = {64, 48, 8, 2, 16}, odd = {37, 29, 2, 2, 3};
  for (int trans = 0; trans < 2; trans++) {
    assert_true(quantize_case(CUDA_R_16BF, 0, trans, &aligned, 0, 0.01f) >= 64 * 48 * 2 / 8);
    assert_true(quantize_case(CUDA_R_32F, 1, trans, &aligned, 1, 0.01f) >= 64 * 48 * 2 / 8);
    assert_int_equal(quantize_case(CUDA_R_16F, 0, trans, &odd, 0, 0.01f), 0);
  }
}

/* Hundreds of blocks (more than the 32 amax slots), the max placed at a
 * random element: only the last block folds, exactly once per call, and
 * the ring is clean for the next call. */
static void test_quantize_many_blocks(void **state) {
  (void)state;
  smat s;
  smat_make(&s, CUDA_R_16BF, 500, 700, 504, 0, 1, 1.0); /* 8 x 11 tiles = 88 blocks */
  ring_model m;
  gs_fp8_ring *ring = ring_new(&m, 8, GS_FP8_E4M3, 2.0f);
  uint8_t *dst = dst_alloc(500 * 700);
  for (int call = 0; call < 4; call++) {
    int64_t r = rng_below(500), c = rng_below(700);
    float spike = (float)(50.0 + 100.0 * call);
    smat_put(&s, 0, r, c, call % 2 ? -spike : spike);
    int parity = call % 2;
    int trans = call >= 2; /* transposing, then copying */
    memset(dst, FP8_POISON, 500 * 700 + GUARD);
    assert_int_equal(fp8_quantize(KERNEL_CTX(qctx), NULL, CUDA_R_16BF, s.p, 500, 700, 504, 0, 1, trans, 0, dst, ring, parity),
                     CUDA_SUCCESS);
    float amax = smat_amax(&s);
    assert_true(gs_f32_bits(amax) == gs_f32_bits(gs_bf16_to_f32(gs_f32_to_bf16_rn(spike))));
    check_quantized(&s, 0, trans, dst, m.scale[parity], GS_FP8_E4M3, "many blocks");
    model_fold(&m, amax, parity, 0);
    ring_check(ring, &m, "many blocks");
  }
  dev_free(dst), dev_free(ring), dev_free(s.p);
}

/* Zeros of both signs, infinities, NaNs of both signs, subnormals, values
 * that saturate: each element encoded as the reference says, in both
 * formats; the NaNs make the amax NaN, so the fold keeps the scale. */
static void test_quantize_specials(void **state) {
  (void)state;
  static const uint16_t specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x0001, 0x807F,
                                      0x4400, 0xC700, 0x3C00, 0x3B80, 0x4350, 0xC360, 0x0080, 0x7F7F};
  for (int fmt = 0; fmt < 2; fmt++)
    for (int trans = 0; trans < 2; trans++) {
      smat s;
      smat_make(&s, CUDA_R_16BF, 16, 24, 16, 0, 1, 1.0);
      for (int i = 0; i < 16 * 24; i++) ((uint16_t *)s.p)[i] = specials[rng_below(16)];
      ((uint16_t *)s.p)[5] = 0xFFC0; /* at least one -NaN */
      ring_model m;
      gs_fp8_ring *ring = ring_new(&m, 4, fmt, 1.0f);
      ring->scale[0][0] = m.scale[0] = 0.5f;
      uint8_t *dst = dst_alloc(16 * 24);
      assert_int_equal(fp8_quantize(KERNEL_CTX(qctx), NULL, CUDA_R_16BF, s.p, 16, 24, 16, 0, 1, trans, 1, dst, ring, 0),
                       CUDA_SUCCESS);
      check_quantized(&s, 1, trans, dst, 0.5f, fmt, "specials");
      int64_t at = trans ? 5 * 24 : 5; /* element (5, 0) of B as stored */
      assert_int_equal(dst[at], fmt ? 0xFE : 0xFF);
      model_fold(&m, smat_amax(&s), 0, 0);
      ring_check(ring, &m, "specials");
      dev_free(dst), dev_free(ring), dev_free(s.p);
    }
}

/* A grid smaller than the tiles makes each block loop over several tiles,
 * loading the next before it encodes the current one and keeping its amax
 * across them. */
static void test_quantize_grid_stride(void **state) {
  (void)state;
  smat s;
  smat_make(&s, CUDA_R_16F, 100, 300, 100, 100 * 300, 3, 2.0); /* 2 x 5 x 3 = 30 tiles */
  ring_model m;
  gs_fp8_ring *ring = ring_new(&m, 4, GS_FP8_E5M2, 1.0f);
  uint8_t *dst = dst_alloc(100 * 300 * 3);
  gs_fp8_quantize_args a = {
      .op = {{.src = s.p, .dst = dst, .ring = (gs_fp8_ring_dev *)ring, .rows = 100, .cols = 300, .ld = 100,
              .stride = 100 * 300, .batch = 3, .tiles_r = 2, .tiles_c = 5, .dst_ld = 300, .transpose = 1, .vec_in = 0,
              .vec_out = 0, .blocks = 4}},
      .parity = 0, .operands = 1};
  const unsigned grid[3] = {4, 1, 1};
  assert_int_equal(run_host_kernel("gs_fp8_quantize_f16", grid, GS_FP8_Q_THREADS, &a), CUDA_SUCCESS);
  check_quantized(&s, 1, 1, dst, 1.0f, GS_FP8_E5M2, "grid-stride quantize");
  model_fold(&m, smat_amax(&s), 0, 0);
  ring_check(ring, &m, "grid-stride quantize");
  dev_free(dst), dev_free(ring), dev_free(s.p);
}

/* The launch's grid and argument block, as the launcher passed them. */
static unsigned grid_seen;
static gs_fp8_quantize_args args_seen;
static CUresult (*grid_launch_real)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void **, void **);
static CUresult grid_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  grid_seen = gx;
  memcpy(&args_seen, params[0], sizeof args_seen);
  return grid_launch_real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

/* More tiles than the grid has blocks, A and B in one launch: the grid
 * is GS_FP8_Q_BLOCKS_PER_SM blocks per SM of the device (kernel_ctx.sms;
 * GS_FP8_Q_GRID where unknown), shared in proportion to the operands'
 * tiles (420 and 100), and every block's several tiles (the transposing
 * path for A, the copying one for B) give the codes and the folds the
 * reference gives: the grid changes no code. */
static void quantize_grid_case(int sms, int grid, const char *what) {
  smat a, b;
  smat_make(&a, CUDA_R_16BF, 1280, 1300, 1280, 0, 1, 1.0); /* A untransposed: 20 x 21 = 420 tiles */
  smat_make(&b, CUDA_R_16BF, 640, 640, 640, 0, 1, 0.5);    /* B untransposed: 10 x 10 = 100 tiles */
  ring_model ma, mb;
  gs_fp8_ring *ra = ring_new(&ma, 4, GS_FP8_E4M3, 1.0f), *rb = ring_new(&mb, 4, GS_FP8_E4M3, 1.0f);
  uint8_t *a8 = dst_alloc(1280 * 1300), *b8 = dst_alloc(640 * 640);
  const fp8_operand ops[2] = {{CUDA_R_16BF, a.p, 1280, 1300, 1280, 0, 1, 0, 0, a8, ra, NULL, 0, NULL, 0},
                              {CUDA_R_16BF, b.p, 640, 640, 640, 0, 1, 0, 1, b8, rb, NULL, 0, NULL, 0}};
  kernel_ctx *kc = KERNEL_CTX(qctx);
  kc->sms = sms;
  grid_launch_real = gs_sys.cuLaunchKernel;
  gs_sys.cuLaunchKernel = grid_launch;
  grid_seen = 0;
  CUresult r = fp8_quantize_operands(kc, NULL, ops, 2, 0);
  gs_sys.cuLaunchKernel = grid_launch_real;
  assert_int_equal(r, CUDA_SUCCESS);
  assert_int_equal(grid_seen, grid);
  assert_int_equal(args_seen.op[0].blocks, grid * 420 / 520);
  assert_int_equal(args_seen.op[1].blocks, grid - grid * 420 / 520);
  assert_int_equal(args_seen.op[0].transpose, 1);
  assert_int_equal(args_seen.op[1].transpose, 0);
  check_quantized(&a, 0, 0, a8, 1.0f, GS_FP8_E4M3, what);
  check_quantized(&b, 1, 0, b8, 1.0f, GS_FP8_E4M3, what);
  model_fold(&ma, smat_amax(&a), 0, 0);
  model_fold(&mb, smat_amax(&b), 0, 0);
  ring_check(ra, &ma, what);
  ring_check(rb, &mb, what);
  dev_free(a8), dev_free(b8), dev_free(ra), dev_free(rb), dev_free(a.p), dev_free(b.p);
}

/* SM count unknown: GS_FP8_Q_GRID, 396 blocks (319 and 77). */
static void test_quantize_persistent_grid(void **state) {
  (void)state;
  quantize_grid_case(0, GS_FP8_Q_GRID, "persistent grid");
}

/* 58 SMs (the stand-in's sm_89 board): 174 blocks, 140 and 34. */
static void test_quantize_grid_follows_the_sm_count(void **state) {
  (void)state;
  quantize_grid_case(58, 58 * GS_FP8_Q_BLOCKS_PER_SM, "sm-count grid");
}

/* k padded for cuBLASLt's fp8 GEMM (k a multiple of 16: 16-byte leading
 * dimensions of the TN operands, cuBLAS documentation, cublasLtMatmul):
 * with dst_ld = 48 for k = 40, both paths (A untransposed: transposing;
 * B untransposed: copying) write the codes the unpadded launch writes at
 * k stride 48, zeros in columns 40..47 over the poison, and nothing past
 * the buffers (two batch members). A dst_ld below k, or past k's last
 * 64-wide tile, is refused. */
static void test_quantize_pads_k(void **state) {
  (void)state;
  enum { M = 24, K = 40, N = 20, KP = 48, B = 2 };
  smat a, b;
  smat_make(&a, CUDA_R_16BF, M, K, M, M * K, B, 1.0);
  smat_make(&b, CUDA_R_32F, K, N, K, K * N, B, 3.0);
  ring_model m0[2], m1[2];
  gs_fp8_ring *r0[2] = {ring_new(&m0[0], 4, GS_FP8_E4M3, 1.0f), ring_new(&m0[1], 4, GS_FP8_E4M3, 1.0f)};
  gs_fp8_ring *r1[2] = {ring_new(&m1[0], 4, GS_FP8_E4M3, 1.0f), ring_new(&m1[1], 4, GS_FP8_E4M3, 1.0f)};
  uint8_t *plain[2] = {dst_alloc(M * K * B), dst_alloc(K * N * B)};
  uint8_t *pad[2] = {dst_alloc(M * KP * B), dst_alloc(KP * N * B)};
  fp8_operand ops[2] = {{CUDA_R_16BF, a.p, M, K, M, M * K, B, 0, 0, plain[0], r0[0], NULL, 0, NULL, 0},
                        {CUDA_R_32F, b.p, K, N, K, K * N, B, 0, 1, plain[1], r0[1], NULL, 0, NULL, 0}};
  assert_int_equal(fp8_quantize_operands(KERNEL_CTX(qctx), NULL, &ops[0], 1, 0), CUDA_SUCCESS);
  assert_int_equal(fp8_quantize_operands(KERNEL_CTX(qctx), NULL, &ops[1], 1, 0), CUDA_SUCCESS);
  for (int i = 0; i < 2; i++) ops[i].dst = pad[i], ops[i].ring = r1[i], ops[i].dst_ld = KP;
  assert_int_equal(fp8_quantize_operands(KERNEL_CTX(qctx), NULL, &ops[0], 1, 0), CUDA_SUCCESS);
  assert_int_equal(fp8_quantize_operands(KERNEL_CTX(qctx), NULL, &ops[1], 1, 0), CUDA_SUCCESS);
  const int outer[2] = {M, N};
  for (int i = 0; i < 2; i++) {
    for (int64_t o = 0; o < (int64_t)outer[i] * B; o++)
      for (int64_t k = 0; k < KP; k++) {
        const uint8_t got = pad[i][o * KP + k], want = k < K ? plain[i][o * K + k] : 0;
        if (got != want) fail_msg("operand %d row %lld k %lld: 0x%02x, want 0x%02x", i, (long long)o, (long long)k, got, want);
      }
    const int64_t bytes = (int64_t)outer[i] * KP * B;
    for (int g = 0; g < GUARD; g++) assert_int_equal(pad[i][bytes + g], FP8_POISON);
  }
  ops[0].dst_ld = K - 1;
  assert_int_equal(fp8_quantize_operands(KERNEL_CTX(qctx), NULL, &ops[0], 1, 0), CUDA_ERROR_INVALID_VALUE);
  ops[0].dst_ld = 65; /* past k's last tile (k = 40: columns 0..63) */
  assert_int_equal(fp8_quantize_operands(KERNEL_CTX(qctx), NULL, &ops[0], 1, 0), CUDA_ERROR_INVALID_VALUE);
  for (int i = 0; i < 2; i++) dev_free(plain[i]), dev_free(pad[i]), dev_free(r0[i]), dev_free(r1[i]);
  dev_free(a.p), dev_free(b.p);
}

/* ---- the ring state machine ------------------------------------------------------ */
/* A 24 x 40 fp32 source whose amax is exactly `amax` (0 gives all zeros). */
static void fill_amax(smat *s, float amax) {
  for (int64_t c = 0; c < s->cols; c++)
    for (int64_t r = 0; r < s->rows; r++) smat_put(s, 0, r, c, amax == 0.0f ? 0.0f : (float)(rng_unit() * amax * 0.9));
  smat_put(s, 0, rng_below((uint32_t)s->rows), rng_below((uint32_t)s->cols), rng_below(2) ? amax : -amax);
}

typedef struct ring_run {
  smat s;
  uint8_t *dst;
  gs_fp8_ring *ring;
  ring_model m;
  int parity;
} ring_run;

static void ring_run_start(ring_run *rr, unsigned history, int fmt, float margin_pow2) {
  smat_make(&rr->s, CUDA_R_32F, 24, 40, 24, 0, 1, 1.0);
  rr->dst = dst_alloc(24 * 40);
  rr->ring = ring_new(&rr->m, history, fmt, margin_pow2);
  rr->parity = 0;
}

static void ring_run_end(ring_run *rr) { dev_free(rr->dst), dev_free(rr->ring), dev_free(rr->s.p); }

static void ring_init(ring_run *rr, float amax) {
  fill_amax(&rr->s, amax);
  assert_int_equal(fp8_amax_init(KERNEL_CTX(ctx), NULL, CUDA_R_32F, rr->s.p, 24, 40, 24, 0, 1, rr->ring, rr->parity), CUDA_SUCCESS);
  model_fold(&rr->m, smat_amax(&rr->s), rr->parity, 1);
  ring_check(rr->ring, &rr->m, "amax_init");
}

/* One call of a site: quantize with scale[parity], check the codes and the
 * fold, flip the parity as the host does. Returns the scale used. */
static float ring_step(ring_run *rr, float amax) {
  if (!isnan(amax) && !isinf(amax)) fill_amax(&rr->s, amax);
  float used = rr->ring->scale[rr->parity][0];
  memset(rr->dst, FP8_POISON, 24 * 40 + GUARD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(qctx), NULL, CUDA_R_32F, rr->s.p, 24, 40, 24, 0, 1, 1, 0, rr->dst, rr->ring,
                                rr->parity),
                   CUDA_SUCCESS);
  check_quantized(&rr->s, 0, 1, rr->dst, used, (int)rr->ring->fmt, "ring step");
  model_fold(&rr->m, smat_amax(&rr->s), rr->parity, 0);
  ring_check(rr->ring, &rr->m, "ring step");
  rr->parity ^= 1;
  return used;
}

static int count_code(const ring_run *rr, uint8_t code) {
  int n = 0;
  for (int i = 0; i < 24 * 40; i++) n += (rr->dst[i] & 0x7F) == code;
  return n;
}

/* GEMMSHIM_FP8_MARGIN is TransformerEngine's margin. TE's fold
 * (transformer_engine/common/recipe/delayed_scaling.cu, amax_and_scale_update)
 * computes in fp32 scaled_max = fp8_max * 2^-margin, scale = scaled_max /
 * amax, and quantizes x * scale: with margin m the largest value lands on
 * fp8_max / 2^m. Our step is the inverse of TE's scale: for margins 0-4,
 * both formats and amax values across the range, the published step times
 * TE's scale is 1 within the two roundings between them, and quantizing
 * with it puts the largest element on the code of fp8_max / 2^m. */
static void test_margin_is_transformer_engines(void **state) {
  (void)state;
  static const float amaxes[] = {10.0f, 0.37f, 3.0e4f, 1.0e-3f, 448.0f};
  for (int fmt = GS_FP8_E4M3; fmt <= GS_FP8_E5M2; fmt++)
    for (int margin = 0; margin <= 4; margin++)
      for (size_t a = 0; a < sizeof amaxes / sizeof amaxes[0]; a++) {
        const float fp8_max = fmt == GS_FP8_E5M2 ? 57344.0f : 448.0f;
        const float scaled_max = fp8_max * powf(2.0f, (float)-margin); /* TE, in fp32 */
        const float te_scale = scaled_max / amaxes[a];
        ring_run rr;
        ring_run_start(&rr, 4, fmt, ldexpf(1.0f, margin));
        ring_init(&rr, amaxes[a]);
        double product = (double)rr.ring->scale[0][0] * (double)te_scale;
        if (fabs(product - 1.0) > 0x1p-22)
          fail_msg("fmt %d margin %d amax %g: step %a, TE scale %a, product %.9g", fmt, margin, (double)amaxes[a],
                   (double)rr.ring->scale[0][0], (double)te_scale, product);
        /* The same amax again: its largest element is fp8_max / 2^m exactly. */
        ring_step(&rr, amaxes[a]);
        const uint8_t top = gs_f32_to_fp8_sat(scaled_max, fmt);
        int at_top = 0;
        for (int i = 0; i < 24 * 40; i++) {
          if ((rr.dst[i] & 0x7F) > top) fail_msg("fmt %d margin %d: code %#x above %#x", fmt, margin, rr.dst[i], top);
          at_top += (rr.dst[i] & 0x7F) == top;
        }
        assert_true(at_top >= 1);
        ring_run_end(&rr);
      }
}

/* A site's first amax is entered in the history once: the first call's
 * amax pass publishes its step without entering it, the call's quantize
 * enters it (TransformerEngine enters each step's amax once: its history
 * roll in delayed_scaling.cu writes one slot per update). With the amax
 * entered twice the window's maximum would come out the same (the copy is
 * the oldest entry), but the ring would hold it in two slots: pos and the
 * entries are checked after every call (ring_check), and the spike leaves
 * the window of 3 after three calls. */
static void test_first_amax_entered_once(void **state) {
  (void)state;
  ring_run rr;
  ring_run_start(&rr, 3, GS_FP8_E4M3, 1.0f);
  ring_init(&rr, 100.0f);
  assert_true(rr.ring->pos == 0 && rr.ring->hist[0] == 0.0f);
  ring_step(&rr, 100.0f); /* call 1's quantize: the one entry */
  assert_true(rr.ring->pos == 1 && rr.ring->hist[0] == 100.0f && rr.ring->hist[1] == 0.0f);
  ring_step(&rr, 1.0f);
  ring_step(&rr, 1.0f);
  assert_true(rr.ring->scale[rr.parity][0] == 100.0f / 448.0f); /* [100, 1, 1] */
  ring_step(&rr, 1.0f);
  assert_true(rr.ring->scale[rr.parity][0] == 1.0f / 448.0f);   /* [1, 1, 1] */
  ring_run_end(&rr);
}

static void test_ring_state_machine(void **state) {
  (void)state;
  ring_run rr;
  ring_run_start(&rr, 4, GS_FP8_E4M3, 1.0f);
  /* First call: amax_init publishes scale[0] and enters nothing; scale[1]
   * is untouched. */
  ring_init(&rr, 10.0f);
  assert_true(rr.ring->scale[0][0] == 10.0f / 448.0f && rr.ring->scale[1][0] == 1.0f);
  assert_true(rr.ring->hist[0] == 0.0f && rr.ring->pos == 0);
  /* A jump: this call quantizes with the old step and saturates (only the
   * new max, 20 / (10/448) = 896, is past 448)... */
  assert_true(ring_step(&rr, 20.0f) == 10.0f / 448.0f);
  assert_true(count_code(&rr, GS_E4M3_MAX_CODE) >= 1);
  assert_true(rr.ring->scale[1][0] == 20.0f / 448.0f);
  /* ...and the next call has recovered: its max lands on 448 exactly. */
  assert_true(ring_step(&rr, 20.0f) == 20.0f / 448.0f);
  assert_int_equal(count_code(&rr, GS_E4M3_MAX_CODE), 1);
  /* amax 0, inf, NaN: nothing entered, the scale carried to the other slot. */
  float before = rr.ring->scale[rr.parity][0];
  unsigned pos = rr.ring->pos;
  ring_step(&rr, 0.0f);
  assert_true(rr.ring->scale[rr.parity][0] == before && rr.ring->pos == pos && rr.ring->last_amax == 0.0f);
  smat_put(&rr.s, 0, 3, 5, INFINITY);
  ring_step(&rr, INFINITY);
  assert_true(rr.ring->scale[rr.parity][0] == before && rr.ring->pos == pos && isinf(rr.ring->last_amax));
  assert_true(count_code(&rr, GS_E4M3_MAX_CODE) >= 1); /* inf saturates */
  smat_put(&rr.s, 0, 3, 5, NAN);
  ring_step(&rr, NAN);
  assert_true(rr.ring->scale[rr.parity][0] == before && rr.ring->pos == pos && isnan(rr.ring->last_amax));
  assert_true(count_code(&rr, GS_E4M3_NAN) == 1); /* NaN stays NaN */
  ring_run_end(&rr);

  /* A spike: the step follows max(history) while the spike is in the
   * window of 4 entries, then returns to the normal values'. */
  ring_run_start(&rr, 4, GS_FP8_E4M3, 1.0f);
  ring_init(&rr, 5.0f);
  ring_step(&rr, 5.0f);
  ring_step(&rr, 1000.0f);
  for (int i = 0; i < 3; i++) {
    ring_step(&rr, 5.0f);
    assert_true(rr.ring->scale[rr.parity][0] == 1000.0f / 448.0f);
  }
  ring_step(&rr, 5.0f); /* the spike's entry is overwritten */
  assert_true(rr.ring->scale[rr.parity][0] == 5.0f / 448.0f);
  ring_run_end(&rr);

  /* margin 2 (2^2 = 4) and E5M2: step = amax * 4 / 57344. */
  ring_run_start(&rr, 3, GS_FP8_E5M2, 4.0f);
  ring_init(&rr, 300.0f);
  assert_true(rr.ring->scale[0][0] == 300.0f / 57344.0f * 4.0f);
  ring_step(&rr, 700.0f);
  assert_true(rr.ring->scale[1][0] == 700.0f / 57344.0f * 4.0f);
  ring_run_end(&rr);

  /* No clamp for a small amax (TransformerEngine: scale = scaled_max /
   * amax for any finite amax > 0): the step stays amax / 448 down to
   * fp32's normal range and below it. */
  ring_run_start(&rr, 1, GS_FP8_E4M3, 1.0f);
  ring_init(&rr, 1e-30f);
  assert_true(rr.ring->scale[0][0] == 1e-30f / 448.0f);
  ring_step(&rr, 2e-30f);
  assert_true(rr.ring->scale[1][0] == 2e-30f / 448.0f);
  ring_step(&rr, 4e-36f); /* a subnormal step (8.9e-39), still with a finite reciprocal */
  assert_true(rr.ring->scale[rr.parity][0] == 4e-36f / 448.0f && rr.ring->scale[rr.parity][0] < 0x1p-126f);
  assert_true(isfinite(1.0f / rr.ring->scale[rr.parity][0]));
  /* amax / 448 below 2^-128: the step has no finite reciprocal (TE's scale
   * overflows to inf and becomes FLT_MAX); the smallest step that has one. */
  ring_step(&rr, 1e-38f);
  assert_true(rr.ring->scale[rr.parity][0] == min_step());
  assert_true(isfinite(1.0f / min_step()) && !isfinite(1.0f / ldexpf(1.0f, -128)));
  ring_step(&rr, 1e-45f); /* the smallest subnormal amax: amax / 448 is 0 */
  assert_true(rr.ring->scale[rr.parity][0] == min_step());
  /* History 1: the newest entry is the whole window. */
  ring_step(&rr, 1.0f);
  ring_step(&rr, 0.5f);
  assert_true(rr.ring->scale[rr.parity][0] == 0.5f / 448.0f);
  ring_run_end(&rr);
}

/* amax_init over many blocks, both parities, and an all-zero source that
 * leaves the scale alone. */
static void test_amax_init(void **state) {
  (void)state;
  static const int types[] = {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
  for (int t = 0; t < 3; t++)
    for (int parity = 0; parity < 2; parity++) {
      smat s;
      smat_make(&s, types[t], 300, 260, 301, 300 * 262, 2, 4.0); /* 5 x 5 x 2 = 50 blocks */
      ring_model m;
      gs_fp8_ring *ring = ring_new(&m, 16, t % 2, 1.0f);
      assert_int_equal(fp8_amax_init(KERNEL_CTX(ctx), NULL, types[t], s.p, 300, 260, 301, 300 * 262, 2, ring, parity),
                       CUDA_SUCCESS);
      model_fold(&m, smat_amax(&s), parity, 1);
      ring_check(ring, &m, "amax_init");
      assert_true(ring->scale[parity ^ 1][0] == 1.0f);
      dev_free(ring), dev_free(s.p);
    }
  ring_run rr;
  ring_run_start(&rr, 4, GS_FP8_E4M3, 1.0f);
  ring_init(&rr, 0.0f);
  assert_true(rr.ring->scale[0][0] == 1.0f && rr.ring->pos == 0);
  ring_run_end(&rr);
}

/* An empty operand (k = 0) still completes the call's contract: one block
 * measures nothing and publishes the kept scale into scale[parity ^ 1]. */
static void test_quantize_empty(void **state) {
  (void)state;
  ring_model m;
  gs_fp8_ring *ring = ring_new(&m, 4, GS_FP8_E4M3, 1.0f);
  ring->scale[1][0] = m.scale[1] = 0.25f;
  ring->scale[0][0] = m.scale[0] = 7.0f;
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, NULL, 16, 0, 16, 0, 1, 0, 0, NULL, ring, 1), CUDA_SUCCESS);
  model_fold(&m, 0.0f, 1, 0);
  ring_check(ring, &m, "empty quantize");
  assert_true(ring->scale[0][0] == 0.25f);
  assert_int_equal(fp8_amax_init(KERNEL_CTX(ctx), NULL, CUDA_R_32F, NULL, 0, 5, 1, 0, 3, ring, 0), CUDA_SUCCESS);
  model_fold(&m, 0.0f, 0, 1);
  ring_check(ring, &m, "empty amax_init");
  dev_free(ring);
}

/* Every driver entry fails while armed: an argument error must be found
 * before any driver call (else the result would be CUDA_ERROR_UNKNOWN). */
static void arm_driver_failures(void) {
  static const gs_sys_id ids[] = {GS_SYS_cuCtxGetCurrent, GS_SYS_cuCtxPushCurrent_v2, GS_SYS_cuModuleLoadData,
                                  GS_SYS_cuModuleGetFunction, GS_SYS_cuLaunchKernel, GS_SYS_cuCtxGetId};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) gs_fault_arm(ids[i], 1, 1);
}

static void test_quantize_argument_checks(void **state) {
  (void)state;
  const CUresult BAD = CUDA_ERROR_INVALID_VALUE;
  ring_model m;
  gs_fp8_ring *ring = ring_new(&m, 4, GS_FP8_E4M3, 1.0f);
  uint16_t *src = dev_alloc(4096);
  uint8_t *dst = dev_alloc(4096);
  arm_driver_failures();
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, -1, 4, 4, 0, 1, 0, 0, dst, ring, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 4, -4, 4, 0, 1, 0, 0, dst, ring, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 4, 4, 4, 0, -1, 0, 0, dst, ring, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 4, 4, 3, 0, 1, 0, 0, dst, ring, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 4, 4, 4, -16, 2, 0, 0, dst, ring, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_64F, src, 4, 4, 4, 0, 1, 0, 0, dst, ring, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 4, 4, 4, 0, 1, 0, 0, dst, NULL, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 4, 4, 4, 0, 1, 0, 0, dst, ring, 2), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, NULL, 4, 4, 4, 0, 1, 0, 0, dst, ring, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 4, 4, 4, 0, 1, 0, 0, NULL, ring, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_32F, (char *)src + 2, 4, 4, 4, 0, 1, 0, 0, dst, ring, 0), BAD);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 4, INT64_MAX / 2, 4, 0, 1, 0, 0, dst, ring, 0), BAD);
  assert_int_equal(fp8_amax_init(KERNEL_CTX(ctx), NULL, CUDA_R_16F, src, 4, 4, 2, 0, 1, ring, 0), BAD);
  assert_int_equal(fp8_amax_init(KERNEL_CTX(ctx), NULL, CUDA_R_16F, src, 4, 4, 4, 0, 1, ring, -1), BAD);
  /* The control: valid work reaches the (failing) driver. */
  assert_int_not_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, src, 4, 4, 4, 0, 1, 0, 0, dst, ring, 0), CUDA_SUCCESS);
  gs_fault_clear();
  dev_free(src), dev_free(dst), dev_free(ring);
}

/* ---- golden outputs ---------------------------------------------------------------- */
/* The quantize kernels' exact outputs (codes and every byte of both rings,
 * over three calls with the parity flipping) on fixed data, as the kernels
 * produced them when each operand had a launch of its own and the encoder
 * divided (commit 55adb30 of this project; GS_FP8_GOLDEN_PRINT=1 prints the
 * hashes to regenerate them). Any later kernel (one launch for A and B, the
 * sm_89 conversion) must reproduce them bit for bit: NaNs of both signs,
 * infinities, values past the max, subnormals, exact ties of x / scale and
 * their neighbours, power-of-two and other steps, both formats, every
 * source type, transposing and not, vector and element paths. */
static uint64_t golden_state;
static uint64_t golden_next(void) { /* splitmix64, its own stream */
  uint64_t z = (golden_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
  return h;
}

/* An element for the golden data: mostly normal values around the step,
 * some exact fp8 ties of x / step (and one fp32 ulp either side), some
 * specials. */
static float golden_value(float step, int fmt) {
  uint64_t r = golden_next();
  switch (r % 8) {
  case 0: { /* a tie between neighbouring codes, times the step */
    uint8_t c = (uint8_t)((r >> 8) & 0x7F);
    if (c >= (fmt ? 0x7B : 0x7E)) c = 0x10;
    float lo = gs_fp8_to_f32(c, fmt), hi = gs_fp8_to_f32((uint8_t)(c + 1), fmt);
    float x = (lo + hi) / 2 * step;
    uint32_t bits = gs_f32_bits(x) + (uint32_t)((r >> 16) % 3) - 1;
    return gs_f32_from_bits(bits | (uint32_t)((r >> 20) & 1) << 31);
  }
  case 1: {
    static const uint32_t sp[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x00000000u,
                                  0x80000000u, 0x00000001u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x5E800000u,
                                  0x3A800000u, 0x37000000u, 0x43E00000u, 0x43E80000u, 0x47600000u, 0x47700000u};
    return gs_f32_from_bits(sp[(r >> 8) % 16]);
  }
  default: {
    double u = (double)(r >> 11) * 0x1p-53;
    return (float)((u * 2 - 1) * 600.0 * step * (double)((r >> 4) % 2 ? 1 : 1.0 / 64));
  }
  }
}

typedef struct golden_operand {
  int type, trans, fmt;
  int64_t rows, cols, ld, stride, batch;
  float step, margin_div;
} golden_operand;

static void golden_fill(const golden_operand *g, void *p) {
  int64_t len = (g->batch - 1) * g->stride + g->ld * (g->cols - 1) + g->rows;
  for (int64_t i = 0; i < len; i++) put_elem(g->type, p, i, golden_value(g->step, g->fmt));
}

/* Both operands of a GEMM as the route quantizes them: one launch (the
 * hashes were made with one fp8_quantize call per operand). */
static int golden_launches;
static CUresult (*golden_launch_real)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, CUstream, void **, void **);
static CUfunction golden_last_fn, golden_first_fn;
static CUresult golden_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                              unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  if (golden_launches++ == 0) golden_first_fn = f;
  golden_last_fn = f;
  return golden_launch_real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

static CUresult golden_quantize_pair(CUcontext c, const golden_operand *const g[2], void *const src[2],
                                     uint8_t *const dst[2], gs_fp8_ring *const ring[2], int parity) {
  fp8_operand ops[2];
  for (int i = 0; i < 2; i++)
    ops[i] = (fp8_operand){g[i]->type, src[i], g[i]->rows, g[i]->cols, g[i]->ld, g[i]->stride, g[i]->batch,
                           g[i]->trans, i, dst[i], ring[i], NULL, 0, NULL, 0};
  golden_launch_real = gs_sys.cuLaunchKernel;
  gs_sys.cuLaunchKernel = golden_launch;
  golden_launches = 0;
  CUresult r = fp8_quantize_operands(KERNEL_CTX(c), NULL, ops, 2, parity);
  gs_sys.cuLaunchKernel = golden_launch_real;
  if (r == CUDA_SUCCESS) assert_int_equal(golden_launches, 1);
  return r;
}

/* A and B of one GEMM, quantized three times (ring state carried over):
 * the hash of both outputs and both rings after each call. */
static uint64_t golden_run(CUcontext c, const golden_operand *ga, const golden_operand *gb) {
  const golden_operand *g[2] = {ga, gb};
  void *src[2];
  uint8_t *dst[2];
  gs_fp8_ring *ring[2];
  ring_model unused;
  for (int i = 0; i < 2; i++) {
    int64_t len = (g[i]->batch - 1) * g[i]->stride + g[i]->ld * (g[i]->cols - 1) + g[i]->rows;
    src[i] = dev_alloc((size_t)len * type_size(g[i]->type));
    golden_fill(g[i], src[i]);
    dst[i] = dev_alloc((size_t)(g[i]->rows * g[i]->cols * g[i]->batch));
    ring[i] = ring_new(&unused, 5, g[i]->fmt, g[i]->margin_div);
    ring[i]->scale[0][0] = g[i]->step;
  }
  uint64_t h = 0xCBF29CE484222325ull;
  for (int call = 0; call < 3; call++) {
    const int parity = call % 2;
    CUresult r = golden_quantize_pair(c, g, src, dst, ring, parity);
    if (r != CUDA_SUCCESS) fail_msg("golden quantize: CUresult %d", (int)r);
    for (int i = 0; i < 2; i++) {
      h = fnv1a(h, dst[i], (size_t)(g[i]->rows * g[i]->cols * g[i]->batch));
      /* The ring as it was when these hashes were taken, before the scale
       * slots were padded to 16 bytes: the two scales, then the rest. */
      const float scales[2] = {ring[i]->scale[0][0], ring[i]->scale[1][0]};
      h = fnv1a(h, scales, sizeof scales);
      h = fnv1a(h, ring[i]->amax_slot, (size_t)gs_fp8_ring_bytes(5) - offsetof(gs_fp8_ring, amax_slot));
    }
  }
  for (int i = 0; i < 2; i++) dev_free(src[i]), dev_free(dst[i]), dev_free(ring[i]);
  return h;
}

static const struct golden_case {
  golden_operand a, b;
  uint64_t hash;
} golden_cases[] = {
    /* bf16, A transposed through shared memory, vector paths; steps 2^-3 and not a power of two */
    {{CUDA_R_16BF, 0, GS_FP8_E4M3, 70, 64, 72, 72 * 64, 2, 0.125f, 1.0f},
     {CUDA_R_16BF, 0, GS_FP8_E5M2, 64, 40, 64, 64 * 40 + 8, 2, 0.0137f, 2.0f}, 0xd4429664ffb340edull},
    /* fp16, A^T (no transpose), B^T (transposed), odd sizes: element paths */
    {{CUDA_R_16F, 1, GS_FP8_E5M2, 37, 29, 39, 39 * 29 + 3, 3, 3.0f, 1.0f},
     {CUDA_R_16F, 1, GS_FP8_E4M3, 45, 37, 45, 45 * 37, 3, 0.0078125f, 1.0f}, 0x8d222e97788420f1ull},
    /* fp32, several blocks each */
    {{CUDA_R_32F, 0, GS_FP8_E4M3, 130, 100, 136, 0, 1, 1.7f, 4.0f},
     {CUDA_R_32F, 1, GS_FP8_E4M3, 96, 100, 96, 0, 1, 0.25f, 1.0f}, 0x8731786dc6ffb9c1ull},
};

/* On 6.1 the sm_61 kernels run; on 9.0 the sm_89 ones (the launch's
 * function is checked to be theirs): the same hashes from both. */
static void test_quantize_golden(void **state) {
  (void)state;
  const int print = getenv("GS_FP8_GOLDEN_PRINT") != NULL;
  static const struct {
    CUcontext *ctx;
    gs_kernel_id expect[3]; /* the kernel for bf16, fp16, fp32 sources */
  } where[] = {
      {&ctx, {GS_K_gs_fp8_quantize_bf16, GS_K_gs_fp8_quantize_f16, GS_K_gs_fp8_quantize_f32}},
      {&ctx90, {GS_K_gs_fp8_quantize_bf16_sm89, GS_K_gs_fp8_quantize_f16_sm89, GS_K_gs_fp8_quantize_f32_sm89}},
  };
  for (size_t w = 0; w < sizeof where / sizeof where[0]; w++)
    for (size_t i = 0; i < sizeof golden_cases / sizeof golden_cases[0]; i++) {
      golden_state = 0x5EED0000u + i;
      uint64_t h = golden_run(*where[w].ctx, &golden_cases[i].a, &golden_cases[i].b);
      const int type = golden_cases[i].a.type;
      CUfunction want;
      const char *why;
      assert_int_equal(kernels_function(KERNEL_CTX(*where[w].ctx), where[w].expect[type == CUDA_R_16BF ? 0 : type == CUDA_R_16F ? 1 : 2],
                                        &want, &why),
                       CUDA_SUCCESS);
      assert_ptr_equal(golden_last_fn, want);
      if (print) print_message("golden case %zu on context %zu: 0x%016" PRIx64 "\n", i, w, h);
      else if (h != golden_cases[i].hash)
        fail_msg("golden case %zu on context %zu: hash 0x%016" PRIx64 ", want 0x%016" PRIx64, i, w, h,
                 golden_cases[i].hash);
    }
}

/* ---- the current recipe's write-only kernels ---------------------------------- */
/* What a current-recipe operand holds: golden data, or a special pattern
 * (TransformerEngine's compute_scale_from_amax, transformer_engine/common/
 * recipe/recipe_common.cuh: scale 1 for an amax of 0, inf or NaN; an
 * infinite scale becomes FLT_MAX, whose step is min_step() here). */
enum { CUR_GOLDEN, CUR_ZERO, CUR_NAN, CUR_INF, CUR_TINY, CUR_HUGE };
static void cur_fill(const golden_operand *g, int kind, void *p) {
  int64_t len = (g->batch - 1) * g->stride + g->ld * (g->cols - 1) + g->rows;
  for (int64_t i = 0; i < len; i++) {
    float v = golden_value(g->step, g->fmt);
    if (kind == CUR_ZERO) v = (i % 3) ? 0.0f : -0.0f;
    if (kind == CUR_TINY) v = ldexpf((float)(i % 7) - 3.0f, -140); /* amax / fmt_max below min_step() */
    if (kind == CUR_HUGE) v = (i % 2 ? -3.0e38f : 1.0e38f) * (0.25f * (float)(i % 5));
    if (kind == CUR_NAN && !isfinite(v)) v = 1.0f;
    if (kind == CUR_INF && !isfinite(v)) v = 2.0f;
    put_elem(g->type, p, i, v);
  }
  if (kind == CUR_NAN) put_elem(g->type, p, g->ld + 1, NAN); /* row 1 of column 1 */
  if (kind == CUR_INF) put_elem(g->type, p, len - 1, -INFINITY);
}

/* Whether operand g (A or B: is_b; its source at src, its output at dst
 * with k stride k) meets the current recipe's fast kernels' layout rule
 * as fp8_kernels.h states it: empty, or the source's columns (and batch
 * members) on 16 bytes and, quantizing, the output's rows on 8 bytes. k
 * runs across the stored columns for an untransposed A and a transposed
 * B (fp8.h's TN layout), else down them. */
static int cur_fast_layout(const golden_operand *g, int is_b, const void *src, const void *dst, int quantize) {
  const int64_t es = (int64_t)type_size(g->type), k = (g->trans != 0) == (is_b != 0) ? g->cols : g->rows;
  if (g->rows == 0 || g->cols == 0 || g->batch == 0) return 1;
  const int in = (uintptr_t)src % 16 == 0 && g->ld * es % 16 == 0 && (g->batch == 1 || g->stride * es % 16 == 0);
  return in && (!quantize || ((uintptr_t)dst % 8 == 0 && k % 8 == 0));
}

/* Counting launches and the functions of the first and the last
 * (golden_launch). */
static void cur_hook(void) {
  golden_launch_real = gs_sys.cuLaunchKernel;
  gs_sys.cuLaunchKernel = golden_launch;
  golden_launches = 0;
}

/* The current recipe's passes (fp8_current_amax, fp8_current_quantize)
 * give, for every input, the codes, step and statistics that the ring
 * kernels gave it before (a fresh ring of one entry, margin 0, scale 1:
 * fp8_amax_init_operands then fp8_quantize_operands, parity 0), on the
 * sm_61 kernels and on the sm_89 ones (9.0 device), plain and counting.
 * Their scratch starts as garbage and is never reset: the amax pass
 * writes every slot the quantize pass reads. Run twice as two overlapping
 * replays would be ordered at worst by kernel (amax, amax, quantize,
 * quantize on the same buffers): the same bytes. */
static void test_current_matches_ring(void **state) {
  (void)state;
  static const struct {
    golden_operand a, b;
    int kind_a, kind_b;
    int sms; /* the device's SMs as the launchers see them (kernel_ctx.sms); 0: as the stand-in says */
  } cases[] = {
      {golden_cases[0].a, golden_cases[0].b, CUR_GOLDEN, CUR_GOLDEN, 0},
      {golden_cases[2].a, golden_cases[2].b, CUR_GOLDEN, CUR_GOLDEN, 0},
      /* 160 tiles: more blocks than the ring's 32 amax slots */
      {{CUDA_R_16BF, 0, GS_FP8_E4M3, 1024, 640, 1024, 0, 1, 0.5f, 1.0f},
       {CUDA_R_16BF, 1, GS_FP8_E4M3, 640, 96, 648, 0, 1, 2.0f, 1.0f}, CUR_GOLDEN, CUR_ZERO, 0},
      {{CUDA_R_32F, 0, GS_FP8_E4M3, 130, 100, 136, 0, 1, 1.0f, 1.0f},
       {CUDA_R_32F, 1, GS_FP8_E5M2, 96, 100, 96, 0, 1, 1.0f, 1.0f}, CUR_NAN, CUR_INF, 0},
      {{CUDA_R_16F, 1, GS_FP8_E5M2, 70, 90, 72, 72 * 90, 2, 1.0f, 1.0f},
       {CUDA_R_32F, 0, GS_FP8_E4M3, 70, 40, 70, 0, 1, 1.0f, 1.0f}, CUR_ZERO, CUR_TINY, 0},
      {{CUDA_R_32F, 0, GS_FP8_E5M2, 200, 64, 200, 0, 1, 1.0f, 1.0f},
       {CUDA_R_32F, 1, GS_FP8_E4M3, 0, 64, 1, 0, 1, 1.0f, 1.0f}, CUR_HUGE, CUR_GOLDEN, 0},
      /* Over three tiles a block, batched: A's 120 tiles, 5 a member (260
       * x 8, 24 members), and B's 36, on a device of 8 SMs: a grid of 24,
       * 18 blocks for A, so a block of A steps 3 members and 3 tile rows
       * at a time, carrying into the tile column and on into the member
       * on most steps (the current kernels walk their tiles; the ring
       * kernels locate each one by division) */
      {{CUDA_R_16BF, 0, GS_FP8_E4M3, 260, 8, 264, 264 * 8 + 8, 24, 1.0f, 1.0f},
       {CUDA_R_16F, 1, GS_FP8_E4M3, 130, 200, 136, 136 * 200, 3, 1.0f, 1.0f}, CUR_GOLDEN, CUR_GOLDEN, 8},
  };
  CUcontext *ctxs[2] = {&ctx, &ctx90};
  for (int w = 0; w < 2; w++)
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
      for (int counting = 0; counting < 2; counting++) {
        const golden_operand *g[2] = {&cases[ci].a, &cases[ci].b};
        const int kinds[2] = {cases[ci].kind_a, cases[ci].kind_b};
        void *src[2];
        uint8_t *dst_ring[2], *dst_cur[2];
        gs_fp8_ring *ring[2], *rec[2];
        uint32_t *slots[2];
        gs_fp8_op_stats *st = dev_alloc(4 * sizeof *st);
        memset(st, 0, 4 * sizeof *st);
        ring_model unused;
        size_t out[2];
        fp8_operand rops[2], cops[2];
        golden_state = 0xC0FFEE00u + (uint32_t)ci;
        for (int i = 0; i < 2; i++) {
          int64_t len = (g[i]->batch - 1) * g[i]->stride + g[i]->ld * (g[i]->cols - 1) + g[i]->rows;
          if (g[i]->rows == 0) len = 0;
          src[i] = dev_alloc((size_t)(len > 0 ? len : 1) * type_size(g[i]->type));
          if (len > 0) cur_fill(g[i], kinds[i], src[i]);
          out[i] = (size_t)(g[i]->rows * g[i]->cols * g[i]->batch);
          dst_ring[i] = dev_alloc(out[i] + 1);
          dst_cur[i] = dev_alloc(out[i] + 1);
          memset(dst_ring[i], 0x5A, out[i] + 1);
          memset(dst_cur[i], 0x5A, out[i] + 1);
          ring[i] = ring_new(&unused, 1, g[i]->fmt, 1.0f);
          rec[i] = dev_alloc(16);
          memset(rec[i], 0xA7, 16);
          slots[i] = dev_alloc(GS_FP8_CUR_SLOTS * sizeof(uint32_t));
          memset(slots[i], 0xFF, GS_FP8_CUR_SLOTS * sizeof(uint32_t)); /* NaN bits: any slot read unwritten shows */
          rops[i] = (fp8_operand){g[i]->type, src[i], g[i]->rows, g[i]->cols, g[i]->ld, g[i]->stride, g[i]->batch,
                                  g[i]->trans, i, dst_ring[i], ring[i], counting ? &st[i] : NULL, 0, NULL, 0};
          cops[i] = rops[i];
          cops[i].dst = dst_cur[i];
          cops[i].ring = rec[i];
          cops[i].stats = counting ? &st[2 + i] : NULL;
          cops[i].partial = slots[i];
          cops[i].fmt = g[i]->fmt;
        }
        kernel_ctx *kc = KERNEL_CTX(*ctxs[w]);
        const int sms = kc->sms;
        if (cases[ci].sms) kc->sms = cases[ci].sms;
        assert_int_equal(fp8_amax_init_operands(kc, NULL, rops, 2, 0), CUDA_SUCCESS);
        assert_int_equal(fp8_quantize_operands(kc, NULL, rops, 2, 0), CUDA_SUCCESS);
        for (int rep = 0; rep < 2; rep++) {
          cur_hook();
          CUresult r = fp8_current_amax(kc, NULL, cops, 2);
          if (r == CUDA_SUCCESS && rep) r = fp8_current_amax(kc, NULL, cops, 2);
          const int amax_launches = golden_launches;
          if (r == CUDA_SUCCESS) r = fp8_current_quantize(kc, NULL, cops, 2);
          if (r == CUDA_SUCCESS && rep) r = fp8_current_quantize(kc, NULL, cops, 2);
          gs_sys.cuLaunchKernel = golden_launch_real;
          assert_int_equal(r, CUDA_SUCCESS);
          /* one launch a pass, two where the source types differ */
          assert_int_equal(golden_launches, 2 * amax_launches);
          assert_int_equal(amax_launches, (g[0]->type == g[1]->type ? 1 : 2) * (rep ? 2 : 1));
          /* the quantize pass ran the kernel for B's type and this device, counting or not */
          const int e = g[1]->type == CUDA_R_16BF ? 0 : g[1]->type == CUDA_R_16F ? 1 : 2;
          static const gs_kernel_id want_ids[2][2][3] = {
              {{GS_K_gs_fp8_quantize_cur_bf16, GS_K_gs_fp8_quantize_cur_f16, GS_K_gs_fp8_quantize_cur_f32},
               {GS_K_gs_fp8_quantize_cur_bf16_stats, GS_K_gs_fp8_quantize_cur_f16_stats,
                GS_K_gs_fp8_quantize_cur_f32_stats}},
              {{GS_K_gs_fp8_quantize_cur_bf16_sm89, GS_K_gs_fp8_quantize_cur_f16_sm89,
                GS_K_gs_fp8_quantize_cur_f32_sm89},
               {GS_K_gs_fp8_quantize_cur_bf16_sm89_stats, GS_K_gs_fp8_quantize_cur_f16_sm89_stats,
                GS_K_gs_fp8_quantize_cur_f32_sm89_stats}}};
          /* on the 9.0 device, the fast kernels (fp8_current_fast.h) where
           * both operands' layouts take them and nothing is counted; the
           * amax pass needs the sources' alignment only */
          static const gs_kernel_id fast_q[3] = {GS_K_gs_fp8_quantize_cur_v_bf16_sm89,
                                                 GS_K_gs_fp8_quantize_cur_v_f16_sm89,
                                                 GS_K_gs_fp8_quantize_cur_v_f32_sm89};
          static const gs_kernel_id fast_a[3] = {GS_K_gs_fp8_amax_part_v_bf16_sm89, GS_K_gs_fp8_amax_part_v_f16_sm89,
                                                 GS_K_gs_fp8_amax_part_v_f32_sm89};
          static const gs_kernel_id gen_a[3] = {GS_K_gs_fp8_amax_part_bf16, GS_K_gs_fp8_amax_part_f16,
                                                GS_K_gs_fp8_amax_part_f32};
          const int same = g[0]->type == g[1]->type;
          const int fast_ok_q = cur_fast_layout(g[1], 1, src[1], dst_cur[1], 1) &&
                                (!same || cur_fast_layout(g[0], 0, src[0], dst_cur[0], 1));
          const int ea = g[0]->type == CUDA_R_16BF ? 0 : g[0]->type == CUDA_R_16F ? 1 : 2;
          const int fast_ok_a = cur_fast_layout(g[0], 0, src[0], NULL, 0) &&
                                (!same || cur_fast_layout(g[1], 1, src[1], NULL, 0));
          CUfunction want, want_a;
          const char *why;
          assert_int_equal(kernels_function(kc, w && !counting && fast_ok_q ? fast_q[e] : want_ids[w][counting][e],
                                            &want, &why),
                           CUDA_SUCCESS);
          assert_ptr_equal(golden_last_fn, want);
          assert_int_equal(kernels_function(kc, w && fast_ok_a ? fast_a[ea] : gen_a[ea], &want_a, &why), CUDA_SUCCESS);
          assert_ptr_equal(golden_first_fn, want_a);
          for (int i = 0; i < 2; i++) {
            if (memcmp(dst_ring[i], dst_cur[i], out[i] + 1) != 0)
              fail_msg("case %zu context %d counting %d operand %d: codes differ from the ring kernels'", ci, w,
                       counting, i);
            if (gs_f32_bits(rec[i]->scale[0][0]) != gs_f32_bits(ring[i]->scale[0][0]))
              fail_msg("case %zu context %d operand %d: step 0x%08x, the ring kernels' 0x%08x", ci, w, i,
                       gs_f32_bits(rec[i]->scale[0][0]), gs_f32_bits(ring[i]->scale[0][0]));
            if (counting) { /* counted twice (two quantize launches) on the second round */
              assert_int_equal(st[2 + i].saturated, st[i].saturated * (rep ? 3 : 1));
              assert_int_equal(st[2 + i].flushed, st[i].flushed * (rep ? 3 : 1));
              assert_int_equal(st[2 + i].amax, st[i].amax);
              assert_int_equal(st[2 + i].step, st[i].step);
            }
          }
        }
        /* the specials' steps, from TE's rules (not the kernels) */
        for (int i = 0; i < 2; i++) {
          const float step = rec[i]->scale[0][0];
          if (kinds[i] == CUR_ZERO || kinds[i] == CUR_NAN || kinds[i] == CUR_INF || g[i]->rows == 0)
            assert_true(step == 1.0f);
          if (kinds[i] == CUR_TINY) assert_true(step == min_step());
          if (kinds[i] == CUR_HUGE) assert_true(step == 3.0e38f / fmt_max(g[i]->fmt));
        }
        kc->sms = sms;
        for (int i = 0; i < 2; i++) {
          dev_free(src[i]), dev_free(dst_ring[i]), dev_free(dst_cur[i]);
          dev_free(ring[i]), dev_free(rec[i]), dev_free(slots[i]);
        }
        dev_free(st);
      }
}

/* ---- the current recipe's fast kernels ---------------------------------------- */
/* Edge values by source type, as raw bits: NaN of both signs, +-inf, the
 * largest finite (FLT_MAX for fp32), the smallest subnormal, a larger
 * subnormal, +-0. */
static uint32_t cf_special(int type, unsigned i) {
  static const uint32_t bf16[] = {0x7FC1, 0xFFC1, 0x7F80, 0xFF80, 0x7F7F, 0x0001, 0x807F, 0x0000, 0x8000};
  static const uint32_t f16[] = {0x7E01, 0xFE01, 0x7C00, 0xFC00, 0x7BFF, 0x0001, 0x83FF, 0x0000, 0x8000};
  static const uint32_t f32[] = {0x7FC00001u, 0xFFC00001u, 0x7F800000u, 0xFF800000u, 0x7F7FFFFFu,
                                 0x00000001u, 0x807FFFFFu, 0x00000000u, 0x80000000u};
  const uint32_t *t = type == CUDA_R_16BF ? bf16 : type == CUDA_R_16F ? f16 : f32;
  return t[i % 9];
}
static void put_bits(int type, void *p, int64_t i, uint32_t v) {
  if (type == CUDA_R_32F) ((uint32_t *)p)[i] = v;
  else ((uint16_t *)p)[i] = (uint16_t)v;
}

/* What a case's data is: each picks a different way through the fast
 * quantize kernel (the instruction for every group where the operand's
 * amax is finite and its step in [2^-60, 2^60], else the general
 * kernel's choice group by group) and a different step rule
 * (TransformerEngine's compute_scale_from_amax, transformer_engine/common/
 * recipe/recipe_common.cuh: scale 1 for an amax of 0, inf or NaN). */
enum { CF_NORMAL, CF_FINITE_EDGES, CF_NONFINITE, CF_SMALL, CF_TINY, CF_SUBNORMAL, CF_ZEROS, CF_HUGE, CF_KINDS };
static void cf_fill(int type, void *p, int64_t len, int kind) {
  for (int64_t i = 0; i < len; i++) {
    float v = (float)rng_normal();
    if (kind == CF_SMALL) v = ldexpf(v, type == CUDA_R_16F ? -12 : -52); /* step near 2^-60 (fp16: its range) */
    if (kind == CF_TINY) v = ldexpf(v, type == CUDA_R_16F ? -20 : -66);  /* step below 2^-60 (fp16: subnormal) */
    if (kind == CF_HUGE) v = ldexpf(v, 120);                             /* step above 2^60 */
    if (kind == CF_ZEROS) v = i % 2 ? -0.0f : 0.0f;
    put_elem(type, p, i, v);
    if (kind == CF_SUBNORMAL) put_bits(type, p, i, cf_special(type, 5 + rng_below(4)) | (rng_below(2) << 3));
    if (kind == CF_FINITE_EDGES && rng_below(6) == 0) put_bits(type, p, i, cf_special(type, 4 + rng_below(5)));
    if (kind == CF_NONFINITE && rng_below(6) == 0) put_bits(type, p, i, cf_special(type, rng_below(9)));
  }
}

typedef struct cf_case {
  int type, transpose;
  int64_t rows, cols, ld, stride, batch, dst_ld;
} cf_case;

/* One operand of a current-recipe launch, built as fp8_launch.c builds it
 * for an aligned layout, on a grid of `blocks`. */
static gs_fp8_quantize_args cf_args(const cf_case *c, void *src, uint8_t *dst, void *rec, uint32_t *slots,
                                    int fmt, int blocks) {
  gs_fp8_quantize_args q;
  memset(&q, 0, sizeof q);
  gs_fp8_q_operand *o = &q.op[0];
  o->src = src, o->dst = dst, o->ring = rec;
  o->rows = c->rows, o->cols = c->cols, o->ld = c->ld, o->stride = c->batch > 1 ? c->stride : 0, o->batch = c->batch;
  o->tiles_r = (c->rows + 63) / 64, o->tiles_c = (c->cols + 63) / 64;
  o->dst_ld = c->dst_ld, o->transpose = c->transpose, o->vec_in = 1, o->vec_out = 1;
  o->blocks = blocks, o->partial = slots, o->fmt = fmt;
  q.operands = 1;
  return q;
}

static const char *cf_sfx(int type) { return type == CUDA_R_16BF ? "bf16" : type == CUDA_R_16F ? "f16" : "f32"; }

/* The fast kernels (fp8_current_fast.h) give the general kernels' bytes:
 * the amax pass the same slots (every block's, 0 included, none past the
 * grid), the quantize pass the same step and the same codes and zero
 * padding of k to dst_ld, for k-contiguous and k-strided sources of each
 * type, odd sizes, batches, grids of 1 to 40 blocks, and data that takes
 * each of their ways: NaN of both signs, +-inf, FLT_MAX and the types'
 * largest, subnormals, +-0, steps just inside and outside the bound and
 * clamped to the smallest. Both are also held to a host model of the
 * recipe (step = amax / fmt_max, at least min_step(); 1 for an amax of 0,
 * inf or NaN: TransformerEngine's Float8CurrentScaling; each element x /
 * step encoded with saturation, cvt.rn.satfinite's rule in the PTX ISA,
 * a NaN as itself). */
static void test_current_fast_matches_general(void **state) {
  (void)state;
  static const cf_case cases[] = {
      {CUDA_R_16BF, 0, 37, 19, 40, 0, 1, 56},          /* k-contiguous: k = rows, odd; two whole zero groups */
      {CUDA_R_16BF, 0, 200, 100, 200, 0, 1, 200},      /* 2500 groups: several trips a thread on small grids */
      {CUDA_R_16BF, 0, 130, 7, 136, 0, 1, 136},        /* k padded 130 -> 136 */
      {CUDA_R_16F, 0, 61, 11, 64, 64 * 11 + 8, 3, 64}, /* batched, k padded 61 -> 64 */
      {CUDA_R_32F, 0, 45, 9, 48, 0, 1, 48},
      {CUDA_R_16BF, 1, 37, 45, 40, 0, 1, 56},          /* k-strided: k = cols, padded 45 -> 56 */
      {CUDA_R_16F, 1, 70, 136, 72, 72 * 136, 2, 136},  /* batched */
      {CUDA_R_32F, 1, 33, 20, 36, 36 * 20 + 4, 2, 32}, /* batched, k padded 20 -> 32 */
      {CUDA_R_16BF, 1, 300, 8, 304, 0, 1, 8},          /* many row tiles */
  };
  static const int grids[] = {1, 3, 7, 40, 2, 1};
  void *rec_g = dev_alloc(16), *rec_f = dev_alloc(16);
  uint32_t *slots_g = dev_alloc((GS_FP8_CUR_SLOTS + 1) * sizeof(uint32_t));
  uint32_t *slots_f = dev_alloc((GS_FP8_CUR_SLOTS + 1) * sizeof(uint32_t));
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
    for (int kind = 0; kind < CF_KINDS; kind++) {
      const cf_case *c = &cases[ci];
      const int fmt = (int)((ci + (size_t)kind) % 2), blocks = grids[(ci + (size_t)kind) % 6];
      const int64_t len = (c->batch - 1) * c->stride + c->ld * (c->cols - 1) + c->rows;
      const int64_t outer = c->transpose ? c->rows : c->cols, k = c->transpose ? c->cols : c->rows;
      const size_t out = (size_t)(c->batch * outer * c->dst_ld);
      void *src = dev_alloc((size_t)len * type_size(c->type));
      uint8_t *dst_g = dev_alloc(out + 8), *dst_f = dev_alloc(out + 8);
      cf_fill(c->type, src, len, kind);
      memset(dst_g, 0x5A, out + 8), memset(dst_f, 0x5A, out + 8);
      memset(slots_g, 0xFF, (GS_FP8_CUR_SLOTS + 1) * sizeof(uint32_t));
      memset(slots_f, 0xFF, (GS_FP8_CUR_SLOTS + 1) * sizeof(uint32_t));
      memset(rec_g, 0xA7, 16), memset(rec_f, 0xA7, 16);
      const unsigned grid[3] = {(unsigned)blocks, 1, 1};
      char name[64];
      gs_fp8_quantize_args ag = cf_args(c, src, dst_g, rec_g, slots_g, fmt, blocks);
      gs_fp8_quantize_args af = cf_args(c, src, dst_f, rec_f, slots_f, fmt, blocks);
      snprintf(name, sizeof name, "gs_fp8_amax_part_%s", cf_sfx(c->type));
      assert_int_equal(run_host_kernel(name, grid, GS_FP8_Q_THREADS, &ag), CUDA_SUCCESS);
      snprintf(name, sizeof name, "gs_fp8_amax_part_v_%s_sm89", cf_sfx(c->type));
      assert_int_equal(run_host_kernel(name, grid, GS_FP8_Q_THREADS, &af), CUDA_SUCCESS);
      /* the blocks split the work differently (groups, not 64 x 64
       * tiles): the same maximum over the slots, every slot written */
      uint32_t max_g = 0, max_f = 0;
      for (int i = 0; i < blocks; i++) {
        if (slots_f[i] == 0xFFFFFFFFu) fail_msg("case %zu kind %d grid %d: slot %d not written", ci, kind, blocks, i);
        max_g = slots_g[i] > max_g ? slots_g[i] : max_g;
        max_f = slots_f[i] > max_f ? slots_f[i] : max_f;
      }
      if (max_f != max_g)
        fail_msg("case %zu kind %d grid %d: slots' maximum 0x%08x, the general kernel's 0x%08x", ci, kind, blocks,
                 max_f, max_g);
      assert_int_equal(slots_f[blocks], 0xFFFFFFFFu); /* nothing past the grid */
      snprintf(name, sizeof name, "gs_fp8_quantize_cur_%s_sm89", cf_sfx(c->type));
      assert_int_equal(run_host_kernel(name, grid, GS_FP8_Q_THREADS, &ag), CUDA_SUCCESS);
      snprintf(name, sizeof name, "gs_fp8_quantize_cur_v_%s_sm89", cf_sfx(c->type));
      assert_int_equal(run_host_kernel(name, grid, GS_FP8_Q_THREADS, &af), CUDA_SUCCESS);
      const float step = *(float *)rec_f;
      if (gs_f32_bits(step) != gs_f32_bits(*(float *)rec_g))
        fail_msg("case %zu kind %d: step %a, the general kernel's %a", ci, kind, (double)step, (double)*(float *)rec_g);
      for (size_t i = 0; i < out + 8; i++)
        if (dst_f[i] != dst_g[i])
          fail_msg("case %zu kind %d grid %d fmt %d: byte %zu 0x%02x, the general kernel's 0x%02x", ci, kind, blocks,
                   fmt, i, dst_f[i], dst_g[i]);
      /* the host model */
      float amax = 0.0f;
      int nan = 0;
      for (int64_t b = 0; b < c->batch; b++)
        for (int64_t col = 0; col < c->cols; col++)
          for (int64_t r = 0; r < c->rows; r++) {
            const float x = get_elem(c->type, src, b * c->stride + col * c->ld + r);
            nan |= isnan(x);
            amax = fabsf(x) > amax ? fabsf(x) : amax;
          }
      float want_step = 1.0f;
      if (!nan && amax > 0.0f && isfinite(amax)) {
        want_step = amax / fmt_max(fmt);
        if (want_step < min_step()) want_step = min_step();
      }
      if (gs_f32_bits(step) != gs_f32_bits(want_step))
        fail_msg("case %zu kind %d: step %a, the recipe's %a", ci, kind, (double)step, (double)want_step);
      for (int64_t b = 0; b < c->batch; b++)
        for (int64_t o = 0; o < outer; o++)
          for (int64_t q = 0; q < c->dst_ld; q++) {
            const int64_t r = c->transpose ? o : q, col = c->transpose ? q : o;
            uint8_t want = 0;
            if (q < k) {
              const float x = get_elem(c->type, src, b * c->stride + col * c->ld + r);
              want = gs_f32_to_fp8_sat(isnan(x) ? x : x / step, fmt);
            }
            const uint8_t got = dst_f[(b * outer + o) * c->dst_ld + q];
            if (got != want)
              fail_msg("case %zu kind %d: member %" PRId64 " row %" PRId64 " k %" PRId64 ": 0x%02x, the model's 0x%02x",
                       ci, kind, b, o, q, got, want);
          }
      for (int i = 0; i < 8; i++) assert_int_equal(dst_f[out + (size_t)i], 0x5A);
      dev_free(src), dev_free(dst_g), dev_free(dst_f);
    }
  dev_free(rec_g), dev_free(rec_f), dev_free(slots_g), dev_free(slots_f);
}

/* Kernel `name` of module.h's list in kc's modules. */
static CUresult kernel_by_name(kernel_ctx *kc, const char *name, CUfunction *f) {
#define KERNEL_BY_NAME(kname, ...) {#kname, GS_K_##kname},
#define KERNEL_FILE_BY_NAME(file, list, sm) list(KERNEL_BY_NAME)
  static const struct {
    const char *name;
    gs_kernel_id id;
  } all[] = {GS_KERNEL_FILES(KERNEL_FILE_BY_NAME)};
#undef KERNEL_FILE_BY_NAME
#undef KERNEL_BY_NAME
  const char *why;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (strcmp(all[i].name, name) == 0) return kernels_function(kc, all[i].id, f, &why);
  fail_msg("no kernel %s in module.h's list", name);
  return CUDA_ERROR_NOT_FOUND;
}

/* Which kernels the current recipe's launchers run, by layout: on the
 * 9.0 device the fast ones where every operand of the launch is aligned
 * (fp8_kernels.h: sources' columns on 16 bytes; quantizing, outputs' rows
 * on 8, i.e. k % 8 == 0 here), the general ones elsewhere and for a
 * compared call's quantize pass (the counting lives there); on the 6.1
 * device the sm_61 ones. A and B bf16, m = n = 64. */
static void test_current_fast_kernel_choice(void **state) {
  (void)state;
  static const struct {
    const char *what;
    int ta, tb;
    int64_t k, lda_pad, ldb_pad;
    int counting;
    const char *amax90, *quant90;
  } cases[] = {
      {"A^T B: both k-contiguous", 1, 0, 64, 0, 0, 0, "gs_fp8_amax_part_v_bf16_sm89", "gs_fp8_quantize_cur_v_bf16_sm89"},
      {"A B^T: both k-strided", 0, 1, 64, 0, 0, 0, "gs_fp8_amax_part_v_bf16_sm89", "gs_fp8_quantize_cur_v_bf16_sm89"},
      {"A B: one of each", 0, 0, 64, 0, 0, 0, "gs_fp8_amax_part_v_bf16_sm89", "gs_fp8_quantize_cur_v_bf16_sm89"},
      {"k = 60: output rows off 8 bytes", 1, 0, 60, 4, 4, 0, "gs_fp8_amax_part_v_bf16_sm89",
       "gs_fp8_quantize_cur_bf16_sm89"},
      {"A's ld off 16 bytes", 1, 0, 64, 1, 0, 0, "gs_fp8_amax_part_bf16", "gs_fp8_quantize_cur_bf16_sm89"},
      {"a compared call", 1, 0, 64, 0, 0, 1, "gs_fp8_amax_part_v_bf16_sm89", "gs_fp8_quantize_cur_bf16_sm89_stats"},
  };
  const int64_t m = 64, n = 64;
  uint16_t *a = dev_alloc(2 * 80 * 80), *b = dev_alloc(2 * 80 * 80);
  memset(a, 0, 2 * 80 * 80), memset(b, 0, 2 * 80 * 80);
  uint8_t *da = dev_alloc(64 * 64), *db = dev_alloc(64 * 64);
  gs_fp8_ring *rec = dev_alloc(64);
  uint32_t *slots = dev_alloc(2 * GS_FP8_CUR_SLOTS * sizeof(uint32_t));
  gs_fp8_op_stats *st = dev_alloc(2 * sizeof *st);
  memset(st, 0, 2 * sizeof *st);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int w = 0; w < 2; w++) {
      const int64_t k = cases[i].k;
      const int64_t ar = cases[i].ta ? k : m, ac = cases[i].ta ? m : k;
      const int64_t br = cases[i].tb ? n : k, bc = cases[i].tb ? k : n;
      fp8_operand o[2] = {
          {CUDA_R_16BF, a, ar, ac, ar + cases[i].lda_pad, 0, 1, cases[i].ta, 0, da, rec, cases[i].counting ? &st[0] : NULL,
           0, slots, GS_FP8_E4M3},
          {CUDA_R_16BF, b, br, bc, br + cases[i].ldb_pad, 0, 1, cases[i].tb, 1, db, (gs_fp8_ring *)((char *)rec + 32),
           cases[i].counting ? &st[1] : NULL, 0, slots + GS_FP8_CUR_SLOTS, GS_FP8_E4M3}};
      kernel_ctx *kc = KERNEL_CTX(w ? ctx90 : ctx);
      cur_hook();
      CUresult r = fp8_current_amax(kc, NULL, o, 2);
      CUfunction amax_fn = golden_last_fn;
      if (r == CUDA_SUCCESS) r = fp8_current_quantize(kc, NULL, o, 2);
      gs_sys.cuLaunchKernel = golden_launch_real;
      assert_int_equal(r, CUDA_SUCCESS);
      assert_int_equal(golden_launches, 2);
      const char *want_a = w ? cases[i].amax90 : "gs_fp8_amax_part_bf16";
      const char *want_q = w ? cases[i].quant90 : cases[i].counting ? "gs_fp8_quantize_cur_bf16_stats"
                                                                     : "gs_fp8_quantize_cur_bf16";
      CUfunction fa, fq;
      assert_int_equal(kernel_by_name(kc, want_a, &fa), CUDA_SUCCESS);
      assert_int_equal(kernel_by_name(kc, want_q, &fq), CUDA_SUCCESS);
      if (amax_fn != fa || golden_last_fn != fq)
        fail_msg("%s on the %s device: ran %s, %s; want %s, %s", cases[i].what, w ? "9.0" : "6.1",
                 amax_fn == fa ? want_a : "another amax kernel", golden_last_fn == fq ? want_q : "another quantize kernel",
                 want_a, want_q);
    }
  dev_free(a), dev_free(b), dev_free(da), dev_free(db), dev_free(rec), dev_free(slots), dev_free(st);
}

/* The current launchers check what only they take: slots and a format. */
static void test_current_argument_checks(void **state) {
  (void)state;
  uint16_t *src = dev_alloc(64 * 2);
  uint8_t *dst = dev_alloc(64);
  gs_fp8_ring *rec = dev_alloc(32);
  uint32_t *slots = dev_alloc(2 * GS_FP8_CUR_SLOTS * sizeof(uint32_t));
  memset(src, 0, 64 * 2);
  fp8_operand o[2] = {{CUDA_R_16BF, src, 8, 8, 8, 0, 1, 0, 0, dst, rec, NULL, 0, slots, GS_FP8_E4M3},
                      {CUDA_R_16BF, src, 8, 8, 8, 0, 1, 0, 1, dst, rec + 1, NULL, 0, slots + GS_FP8_CUR_SLOTS,
                       GS_FP8_E4M3}};
  kernel_ctx *kc = KERNEL_CTX(ctx);
  assert_int_equal(fp8_current_amax(kc, NULL, o, 2), CUDA_SUCCESS);
  o[1].partial = slots + GS_FP8_CUR_SLOTS - 1; /* overlapping slots */
  assert_int_equal(fp8_current_amax(kc, NULL, o, 2), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fp8_current_quantize(kc, NULL, o, 2), CUDA_ERROR_INVALID_VALUE);
  o[1].partial = NULL;
  assert_int_equal(fp8_current_quantize(kc, NULL, o, 2), CUDA_ERROR_INVALID_VALUE);
  o[1].partial = slots + GS_FP8_CUR_SLOTS;
  o[1].fmt = 7;
  assert_int_equal(fp8_current_amax(kc, NULL, o, 2), CUDA_ERROR_INVALID_VALUE);
  dev_free(src), dev_free(dst), dev_free(rec), dev_free(slots);
}

/* The quantize launch's geometry, recorded instead of run: one launch for
 * A and B, op[0].blocks + op[1].blocks blocks of GS_FP8_Q_THREADS, each
 * block a 64 x 64 tile at a time (fp8_quantize.cu); thread t takes the
 * 8-element groups t and t + 256 of the tile (column g / 8, rows
 * (g % 8) * 8 on) and has work when either lies inside the matrix. At
 * least 95% of the launched threads have work for each shape class at
 * transformer sizes: plain and transposed operands, a strided batch. */
static unsigned q_grid[3], q_block[3];
static gs_fp8_quantize_args q_args;
static CUresult q_record(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned shmem, CUstream s, void **params, void **extra) {
  q_grid[0] = gx, q_grid[1] = gy, q_grid[2] = gz;
  q_block[0] = bx, q_block[1] = by, q_block[2] = bz;
  memcpy(&q_args, params[0], sizeof q_args);
  golden_launches++;
  return CUDA_SUCCESS;
}

/* Threads of operand o's blocks with work, over the tiles each visits. */
static double q_useful(const gs_fp8_q_operand *o, int64_t *threads) {
  const int64_t tiles = o->tiles_r * o->tiles_c * o->batch;
  int64_t useful = 0;
  for (int64_t bx = 0; bx < o->blocks; bx++)
    for (int t = 0; t < GS_FP8_Q_THREADS; t++) {
      int has = 0;
      for (int64_t tile = bx; tile < tiles && !has; tile += o->blocks) {
        const int64_t in_member = tile % (o->tiles_r * o->tiles_c);
        const int64_t r0 = in_member % o->tiles_r * 64, c0 = in_member / o->tiles_r * 64;
        for (int u = 0; u < 2 && !has; u++) {
          const int g = t + u * GS_FP8_Q_THREADS;
          has = c0 + g / 8 < o->cols && r0 + (g % 8) * 8 < o->rows;
        }
      }
      useful += has;
    }
  *threads = o->blocks * GS_FP8_Q_THREADS;
  return (double)useful;
}

static void test_quantize_geometry(void **state) {
  (void)state;
  static const struct {
    const char *what;
    int64_t m, n, k, batch;
    int ta, tb;
  } shapes[] = {
      {"8192^3, A^T B (a Linear's forward)", 8192, 8192, 8192, 1, 1, 0},
      {"4096 x 4096 x 1024", 4096, 4096, 1024, 1, 1, 0},
      {"4096 x 11008 x 4096, A B (transposing A)", 4096, 11008, 4096, 1, 0, 0},
      {"1024^3, A B^T (transposing both)", 1024, 1024, 1024, 1, 0, 1},
      {"4000 x 1000 x 2000 (edge tiles)", 4000, 1000, 2000, 1, 1, 0},
      {"strided batch 16 x 512 x 512 x 64", 512, 512, 64, 16, 1, 0},
  };
  char *p = (char *)(uintptr_t)0x10000000; /* never touched: nothing runs */
  gs_fp8_ring *rings[2] = {(gs_fp8_ring *)(uintptr_t)0x70000000, (gs_fp8_ring *)(uintptr_t)0x70010000};
  golden_launch_real = gs_sys.cuLaunchKernel;
  gs_sys.cuLaunchKernel = q_record;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t m = shapes[i].m, n = shapes[i].n, k = shapes[i].k, batch = shapes[i].batch;
    /* stored shapes: op(A) = m x k, op(B) = k x n */
    const int64_t ar = shapes[i].ta ? k : m, ac = shapes[i].ta ? m : k;
    const int64_t br = shapes[i].tb ? n : k, bc = shapes[i].tb ? k : n;
    const fp8_operand ops[2] = {
        {CUDA_R_16BF, p, ar, ac, ar, ar * ac, batch, shapes[i].ta, 0, (uint8_t *)p + 0x40000000, rings[0], NULL, 0, NULL, 0},
        {CUDA_R_16BF, p + 0x20000000, br, bc, br, br * bc, batch, shapes[i].tb, 1, (uint8_t *)p + 0x60000000,
         rings[1], NULL, 0, NULL, 0},
    };
    golden_launches = 0;
    assert_int_equal(fp8_quantize_operands(KERNEL_CTX(ctx), NULL, ops, 2, 0), CUDA_SUCCESS);
    assert_int_equal(golden_launches, 1);
    assert_int_equal(q_args.operands, 2);
    assert_int_equal(q_block[0], GS_FP8_Q_THREADS);
    assert_int_equal(q_block[1] * q_block[2] * q_grid[1] * q_grid[2], 1);
    assert_int_equal(q_grid[0], (unsigned)(q_args.op[0].blocks + q_args.op[1].blocks));
    int64_t ta, tb;
    const double ua = q_useful(&q_args.op[0], &ta), ub = q_useful(&q_args.op[1], &tb);
    const double frac = (ua + ub) / (double)(ta + tb);
    print_message("quantize geometry %-44s %8u blocks, %6.2f%% of threads with work\n", shapes[i].what, q_grid[0],
                  100.0 * frac);
    if (frac < 0.95) fail_msg("%s: %.2f%% of the threads have work", shapes[i].what, 100.0 * frac);
  }
  gs_sys.cuLaunchKernel = golden_launch_real;
}

/* The layouts, specials, blocks and ring steps once more on the 9.0
 * device: the sm_89 kernels against the same references (NaNs keep their
 * sign and E5M2's NaN is 0x7E, which the instruction's model would not
 * give: the kernel must keep NaNs off it). */
static void test_quantize_sm89(void **state) {
  qctx = ctx90;
  test_quantize_layouts(state);
  test_quantize_specials(state);
  test_quantize_many_blocks(state);
  test_ring_state_machine(state);
  qctx = ctx;
}

/* fp8 statistics (kernels/fp8_stats.h, docs/log-format.md "fp8
 * statistics"): A and B quantized in one launch with a step of 0.5, as the
 * delayed recipe quantizes with the scale of a history smaller than this
 * call's values. The counts are taken from the definitions here, element
 * by element: saturated = not NaN and |x / step| overflows the format as
 * IEEE 754-2008 7.4 defines overflow (rounded to its precision with the
 * exponent unbounded, past the largest finite value, OCP 8-bit Floating
 * Point Specification v1.0: E4M3 448, E5M2 57344; so |x / step| > 464,
 * resp. >= 61440, the tie going to the even 480 resp. 65536's side: 448 is
 * 1.110b x 2^8, 57344 1.11b x 2^15), infinities included; flushed = finite, non-zero, and
 * encoded as +-0. Values at, just below and above both formats' limits,
 * tiny ones at and around half the smallest subnormal (E4M3 2^-9, E5M2
 * 2^-16) times the step, zeros, infinities and a NaN in A; several blocks
 * and partial tiles; on the sm_61 and the sm_89 kernels. amax is the
 * operand's (NaN in A), the step the one used. A NULL pointer counts
 * nothing (the other tests pass it). */
static void test_quantize_stats(void **state) {
  (void)state;
  static const float values[] = {0.0f, -0.0f, 1.0f, -3.0f, 224.0f, 225.0f, 232.0f, -233.0f, -300.0f, 28672.0f,
                                 28673.0f, 30592.0f, -30720.0f,
                                 -1e5f, 0x1p-11f, 0x1p-12f, -0x1.2p-11f, 0x1p-18f, 0x1p-17f, 0x1.1p-18f, INFINITY,
                                 -INFINITY};
  const int nv = (int)(sizeof values / sizeof values[0]);
  for (int dev = 0; dev < 2; dev++)
    for (int fmt = 0; fmt < 2; fmt++) {
      qctx = dev ? ctx90 : ctx;
      smat m[2];
      smat_make(&m[0], CUDA_R_16BF, 200, 130, 200, 0, 1, 1.0);
      smat_make(&m[1], CUDA_R_16BF, 70, 90, 72, 0, 1, 1.0);
      uint64_t want_sat[2] = {0, 0}, want_flush[2] = {0, 0};
      for (int o = 0; o < 2; o++)
        for (int64_t c = 0; c < m[o].cols; c++)
          for (int64_t r = 0; r < m[o].rows; r++) {
            float x = values[rng_below((unsigned)nv)];
            if (o == 0 && r == 7 && c == 100) x = NAN;
            smat_put(&m[o], 0, r, c, x);
            x = smat_get(&m[o], 0, r, c); /* as bf16 stored it */
            if (x != x) continue;
            const float q = x / 0.5f;
            const uint8_t code = gs_f32_to_fp8_sat(q, fmt);
            want_sat[o] += fmt ? fabsf(q) >= 61440.0f : fabsf(q) > 464.0f;
            want_flush[o] += x != 0 && !isinf(x) && (code & 0x7F) == 0;
          }
      assert_true(want_sat[0] > 0 && want_sat[1] > 0 && want_flush[0] > 0 && want_flush[1] > 0);
      ring_model rm[2];
      gs_fp8_ring *ring[2];
      uint8_t *dst[2];
      for (int o = 0; o < 2; o++) {
        ring[o] = ring_new(&rm[o], 4, fmt, 1.0f);
        ring[o]->scale[0][0] = 0.5f;
        dst[o] = dst_alloc(m[o].rows * m[o].cols);
      }
      gs_fp8_stats *st = dev_alloc(sizeof *st);
      memset(st, 0, sizeof *st);
      const fp8_operand ops[2] = {
          {CUDA_R_16BF, m[0].p, 200, 130, 200, 0, 1, 0, 0, dst[0], ring[0], &st->op[0], 0, NULL, 0},
          {CUDA_R_16BF, m[1].p, 70, 90, 72, 0, 1, 1, 1, dst[1], ring[1], &st->op[1], 0, NULL, 0},
      };
      assert_int_equal(fp8_quantize_operands(KERNEL_CTX(qctx), NULL, ops, 2, 0), CUDA_SUCCESS);
      for (int o = 0; o < 2; o++) {
        check_quantized(&m[o], o, o, dst[o], 0.5f, fmt, "stats");
        assert_int_equal(st->op[o].saturated, want_sat[o]);
        assert_int_equal(st->op[o].flushed, want_flush[o]);
        assert_int_equal(st->op[o].step, 0x3F000000u); /* 0.5 */
      }
      assert_true(st->op[0].amax > 0x7F800000u); /* the NaN */
      assert_int_equal(st->op[1].amax, 0x7F800000u); /* an infinity */
      for (int o = 0; o < 2; o++) dev_free(dst[o]), dev_free(ring[o]), dev_free(m[o].p);
      dev_free(st);
    }
  qctx = ctx;
}

/* ---- block-scaled quantize launcher ----------------------------------------------- */
/* The kernel the stand-in ran last, from its STANDIN_GRIDS file (lines
 * "<tid> <kernel> X Y Z", tests/standin/driver_init.c), into name. */
static void last_launched(const char *path, char *name, size_t len) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[256];
  name[0] = 0;
  while (fgets(line, sizeof line, f)) {
    char tid[32], kern[128];
    if (sscanf(line, "%31s %127s", tid, kern) == 2) snprintf(name, len, "%s", kern);
  }
  fclose(f);
}

/* The launcher (fp8_scaled_launch.c), which picks a fast kernel per
 * layout, against the general host kernel called directly with one block (whose output the NumPy model of the cuBLAS
 * layouts checks byte for byte: tests/integration/test_fp8_scaled_quantize.py):
 * the same bytes in every mode; the kernel it picks (fp8_kernels.h's
 * conditions: aligned k-contiguous _k_, k-strided _s_, their 128 x 128
 * tile twins _kt_/_st_, unaligned or counting statistics the general one),
 * read from the stand-in's STANDIN_GRIDS launch log, since the bytes alone
 * cannot tell a fast kernel from the general one; refusals before the
 * driver; not loaded on the 6.1 device. */
static void test_scaled_quantize_launcher(void **state) {
  (void)state;
  const int64_t outer = 136, k = 200, k_pad = 256;
  float *src = dev_alloc(sizeof(float) * (outer * k + 1));
  for (int64_t i = 0; i < outer * k + 1; i++) src[i] = (float)((rng_unit() - 0.5) * 1000.0);
  uint8_t *dst = dev_alloc(outer * k_pad), *want = malloc(outer * k_pad);
  /* scale bytes per mode (fp8_kernels.h's layouts): 136 x 2 fp32;
   * 2 x roundup(2, 4) fp32; 2 x 2 tiles of 512 (MX32 and MX32_CEIL) */
  static const size_t sc_bytes[] = {136 * 2 * 4, 2 * 4 * 4, 4 * 512, 4 * 512};
  uint8_t *sc = dev_alloc(4 * 512), *want_sc = malloc(4 * 512);
  /* the launcher's kernel per layout (fp8_kernels.h): k-contiguous and
   * aligned (_k_/_kt_), k-strided (_s_/_st_: 136 fp32 a column), and
   * k-contiguous one element off 16 bytes (the general kernel) */
  assert_true((uintptr_t)src % 16 == 0 && (uintptr_t)dst % 16 == 0); /* cuMemAlloc: 256-byte aligned */
  /* which kernel ran: the stand-in logs each launch's name (STANDIN_GRIDS) */
  char grids[64], ran[128];
  snprintf(grids, sizeof grids, "/tmp/gemmshim-test-bq-grids-%d.txt", (int)getpid());
  unlink(grids);
  setenv("STANDIN_GRIDS", grids, 1);
  static const char *const want_kernel[3][4] = {
      {"gs_fp8_bq_k_f32", "gs_fp8_bq_kt_f32", "gs_fp8_bq_k_f32", "gs_fp8_bq_k_f32"},
      {"gs_fp8_bq_s_f32", "gs_fp8_bq_st_f32", "gs_fp8_bq_s_f32", "gs_fp8_bq_s_f32"},
      {"gs_fp8_bq_f32", "gs_fp8_bq_f32", "gs_fp8_bq_f32", "gs_fp8_bq_f32"},
  };
  for (int case_ = 0; case_ < 12; case_++) {
    const int mode = case_ % 4, layout = case_ / 4;
    gs_fp8_bq_args a = {layout == 2 ? src + 1 : src, dst, sc, outer, k, k_pad, layout == 1 ? 1 : k,
                        layout == 1 ? outer : 1, mode, GS_FP8_DEV_E4M3, NULL};
    memset(dst, 0xA5, outer * k_pad);
    memset(sc, 0xA5, 4 * 512);
    const unsigned one[3] = {1, 1, 1};
    assert_int_equal(run_host_kernel("gs_fp8_bq_f32", one, GS_FP8_BQ_THREADS, &a), 0);
    memcpy(want, dst, outer * k_pad);
    memcpy(want_sc, sc, 4 * 512);
    memset(dst, 0x5A, outer * k_pad);
    memset(sc, 0x5A, sc_bytes[mode]);
    assert_int_equal(fp8_scaled_quantize(KERNEL_CTX(ctx90), NULL, CUDA_R_32F, &a), CUDA_SUCCESS);
    last_launched(grids, ran, sizeof ran);
    assert_string_equal(ran, want_kernel[layout][mode]);
    assert_memory_equal(dst, want, outer * k_pad);
    assert_memory_equal(sc, want_sc, sc_bytes[mode]);
    /* a compared call (statistics counted) takes the general kernel, the
     * only one that counts them, whatever the layout */
    gs_fp8_op_stats st;
    memset(&st, 0, sizeof st);
    gs_fp8_bq_args counted = a;
    counted.stats = &st;
    assert_int_equal(fp8_scaled_quantize(KERNEL_CTX(ctx90), NULL, CUDA_R_32F, &counted), CUDA_SUCCESS);
    last_launched(grids, ran, sizeof ran);
    assert_string_equal(ran, "gs_fp8_bq_f32");
    assert_memory_equal(dst, want, outer * k_pad);
    assert_int_equal(fp8_scaled_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_32F, &a), CUDA_ERROR_NOT_SUPPORTED);
  }
  unsetenv("STANDIN_GRIDS");
  unlink(grids);
  gs_fp8_bq_args bad[] = {
      {src, dst, sc, outer, k, k - 1, k, 1, GS_FP8_BQ_VEC128, GS_FP8_DEV_E4M3, NULL}, /* k_pad < k */
      {src, dst, sc, 0, k, k_pad, k, 1, GS_FP8_BQ_VEC128, GS_FP8_DEV_E4M3, NULL},     /* no rows */
      {src, dst, sc, outer, k, k_pad, k, 1, 4, GS_FP8_DEV_E4M3, NULL},                /* no such mode */
      {src, dst, sc, outer, k, k_pad, k, 1, GS_FP8_BQ_MX32, 2, NULL},                 /* no such format */
      {src, dst, NULL, outer, k, k_pad, k, 1, GS_FP8_BQ_MX32, GS_FP8_DEV_E4M3, NULL}, /* no scales */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(fp8_scaled_quantize(KERNEL_CTX(ctx90), NULL, CUDA_R_32F, &bad[i]), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fp8_scaled_quantize(KERNEL_CTX(ctx90), NULL, CUDA_R_8I, &bad[0]), CUDA_ERROR_INVALID_VALUE);
  /* fp8_scaled_ready: loaded on 9.0, a reason on 6.1 and for other types */
  assert_null(fp8_scaled_ready(KERNEL_CTX(ctx90), CUDA_R_16BF));
  assert_non_null(fp8_scaled_ready(KERNEL_CTX(ctx), CUDA_R_16BF));
  assert_non_null(fp8_scaled_ready(KERNEL_CTX(ctx90), CUDA_R_8I));
  dev_free(src), dev_free(dst), dev_free(sc);
  free(want), free(want_sc);
}

/* The block-scaled kernels' statistics (kernels/fp8_stats.h): the worst
 * block by flushed and by saturated fraction of its elements inside the
 * matrix, and its index (docs/log-format.md, "fp8 statistics"), in the
 * three layouts, on data whose counts are known by construction: values
 * of 1 (scale 256 under TransformerEngine's power-of-two rule for E4M3,
 * 448 / 1 rounded down) with 2^-20 among them (2^-20 * 256 = 2^-12, below
 * half of E4M3's smallest subnormal 2^-9: flushed); under the OCP MX spec's
 * rule (GS_FP8_BQ_MX32: shared exponent floor(log2 amax) - 8) a block of
 * amax 500 has the scale 1 and its 500s saturate (above 448). */
static void bq_stats_case(int mode, int64_t outer, int64_t k, int64_t k_pad, const int64_t (*special)[3],
                          int nspecial, gs_fp8_op_stats *st) {
  float *src = dev_alloc((size_t)(outer * k) * sizeof(float));
  for (int64_t i = 0; i < outer * k; i++) src[i] = 1.0f;
  /* special[i]: row, first column, count of 2^-20 (or of 500 in MX32) */
  for (int i = 0; i < nspecial; i++)
    for (int64_t j = 0; j < special[i][2]; j++)
      src[special[i][0] * k + special[i][1] + j] = mode == GS_FP8_BQ_MX32 ? 500.0f : 0x1p-20f;
  uint8_t *dst = dev_alloc((size_t)((outer + 127) / 128 * 128 * k_pad)), *sc = dev_alloc(1 << 16);
  memset(st, 0, sizeof *st);
  gs_fp8_bq_args a = {src, dst, sc, outer, k, k_pad, k, 1, mode, GS_FP8_DEV_E4M3, st};
  assert_int_equal(fp8_scaled_quantize(KERNEL_CTX(ctx90), NULL, CUDA_R_32F, &a), CUDA_SUCCESS);
  dev_free(src), dev_free(dst), dev_free(sc);
}

static unsigned long long bq_key(unsigned long long count, unsigned long long elems, unsigned long long index) {
  return ((count << 32) / elems) << 32 | (0xFFFFFFFFull - index);
}

static void test_scaled_quantize_stats(void **state) {
  (void)state;
  gs_fp8_op_stats *st = dev_alloc(sizeof *st);
  /* 1 x 128 along k, k = 300: blocks of 128, 128 and 44 per row, index
   * row * 3 + segment. 40 of block (2, 1)'s 128 flush, 20 of block
   * (3, 2)'s 44: the latter is the worst, by fraction. */
  static const int64_t vec[][3] = {{2, 128, 40}, {3, 256, 20}};
  bq_stats_case(GS_FP8_BQ_VEC128, 4, 300, 304, vec, 2, st);
  assert_int_equal(st->saturated, 0);
  assert_int_equal(st->flushed, 60);
  assert_true(st->worst_flush == bq_key(20, 44, 11));
  assert_true(st->worst_sat == bq_key(0, 128, 0)); /* none: the lowest index */
  assert_int_equal(st->amax, 0x3F800000u);                  /* 1.0 */
  assert_int_equal(st->step, 0x3B800000u);                  /* 1/256: the smallest scale's step */
  /* 128 x 128 tiles, 130 x 200: tile (1, 1) holds 2 x 72 elements, 9 of
   * which flush; tile (0, 0) 100 of 16384. Index row block * 2 + column
   * block. */
  static const int64_t blk[][3] = {{129, 128, 9}, {0, 0, 100}};
  bq_stats_case(GS_FP8_BQ_BLK128, 130, 200, 208, blk, 2, st);
  assert_int_equal(st->flushed, 109);
  assert_true(st->worst_flush == bq_key(9, 144, 3));
  /* 32-element blocks under the spec's rule, 2 x 64: three 500s in block
   * (1, 1), index row * 2 + block: 3 of its 32 saturate; the 1s of the
   * others (scale 256) do not. */
  static const int64_t mx[][3] = {{1, 40, 3}};
  bq_stats_case(GS_FP8_BQ_MX32, 2, 64, 64, mx, 1, st);
  assert_int_equal(st->saturated, 3);
  assert_int_equal(st->flushed, 0);
  assert_true(st->worst_sat == bq_key(3, 32, 3));
  assert_int_equal(st->amax, 0x43FA0000u); /* 500 */
  /* TransformerEngine's rounding (MX32_CEIL) gives that block the scale
   * 1/2: nothing saturates. */
  bq_stats_case(GS_FP8_BQ_MX32_CEIL, 2, 64, 64, mx, 1, st);
  assert_int_equal(st->saturated, 0);
  dev_free(st);
}

/* ---- GEMM ------------------------------------------------------------------------- */
typedef struct gemm_case {
  const char *name;
  int64_t m, n, k, batch;
  int fmt_a, fmt_b;
  int c_type, d_type, bias_type;
  int epilogue; /* cuBLASLt's */
  float alpha, beta;
  int pointer_mode;
  int in_place;  /* C == D */
  int c_null;    /* C = NULL (beta 0 on the host) */
  int64_t ldc_pad, ldd_pad;
  int c_broadcast; /* stride_c = 0 */
} gemm_case;

/* fp8 codes of normally distributed values (sigma 16: zeros, subnormals and
 * the top binades all occur), never NaN. */
static void random_codes(uint8_t *p, int64_t n, int fmt) {
  for (int64_t i = 0; i < n; i++) p[i] = gs_f32_to_fp8_sat((float)(rng_normal() * 16.0), fmt);
}

static double gelu_ref(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
}

static int epi_flags(int epilogue) {
  switch (epilogue) {
  case CUBLASLT_EPILOGUE_RELU: return GS_FP8_EPI_RELU;
  case CUBLASLT_EPILOGUE_BIAS: return GS_FP8_EPI_BIAS;
  case CUBLASLT_EPILOGUE_RELU_BIAS: return GS_FP8_EPI_BIAS | GS_FP8_EPI_RELU;
  case CUBLASLT_EPILOGUE_GELU: return GS_FP8_EPI_GELU;
  case CUBLASLT_EPILOGUE_GELU_BIAS: return GS_FP8_EPI_BIAS | GS_FP8_EPI_GELU;
  default: return 0;
  }
}

/* Set: gemm_run runs the tensor-core kernel (fp8_gemm_mma) instead, and
 * compares with the same reference (the FFMA kernel's operations, bit for
 * bit that kernel's result) within what a different fp32 summation order
 * allows. The emulated mma reads the fragments through the layout the
 * kernel loads them with, so a wrong layout gives wrong products here. */
static int gemm_use_mma;

/* |got - want| within the bound for fp32 sums of k terms in two different
 * orders (each within (k-1) u sum|a b|, u = 2^-24), carried through the
 * epilogue's few roundings, plus one step of D's type. */
static void mma_check(const char *name, int64_t i, int64_t j, int64_t b, double got, double want, double tol,
                      int d_type) {
  double step = d_type == CUDA_R_16BF ? 0x1p-7 : d_type == CUDA_R_16F ? 0x1p-10 : 0.0;
  double bound = tol + step * (fabs(want) + tol) + (d_type == CUDA_R_16F ? 0x1p-24 : 0x1p-126);
  if (!(fabs(got - want) <= bound))
    fail_msg("%s (own-mma): D(%" PRId64 ",%" PRId64 ",%" PRId64 ") = %.9g, want %.9g within %.3g", name, i, j, b, got,
             want, bound);
}

static unsigned long long gemm_run(const gemm_case *g) {
  const int64_t m = g->m, n = g->n, k = g->k, batch = g->batch;
  const int flags = epi_flags(g->epilogue);
  uint8_t *a8 = k ? dev_alloc((size_t)(m * k * batch)) : NULL;
  uint8_t *b8 = k ? dev_alloc((size_t)(n * k * batch)) : NULL;
  if (k) random_codes(a8, m * k * batch, g->fmt_a), random_codes(b8, n * k * batch, g->fmt_b);
  float *scales = dev_alloc(2 * sizeof(float));
  scales[0] = (float)(0.01 + rng_unit() / 64), scales[1] = (float)(0.01 + rng_unit() / 64);

  const int64_t ldd = m + g->ldd_pad, stride_d = ldd * n + 3;
  const int64_t ldc = g->in_place ? ldd : m + g->ldc_pad;
  const int64_t stride_c = g->in_place ? stride_d : g->c_broadcast ? 0 : ldc * n + 5;
  const int64_t d_len = stride_d * batch;
  void *d = dev_alloc((size_t)d_len * type_size(g->d_type));
  for (int64_t i = 0; i < d_len; i++) put_nan(g->d_type, d, i);
  void *c = NULL;
  float *c_ref = NULL; /* C's values before the call (C may be D) */
  if (!g->c_null) {
    int64_t c_len = (g->c_broadcast ? 0 : stride_c * (batch - 1)) + ldc * (n - 1) + m;
    c = g->in_place ? d : dev_alloc((size_t)c_len * type_size(g->c_type));
    c_ref = calloc((size_t)c_len, sizeof(float));
    for (int64_t b = 0; b < (g->c_broadcast ? 1 : batch); b++)
      for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
          int64_t at = b * stride_c + j * ldc + i;
          put_elem(g->c_type, c, at, (float)rng_normal() * 4.0f);
          c_ref[at] = get_elem(g->c_type, c, at);
        }
  }
  void *bias = NULL;
  if (flags & GS_FP8_EPI_BIAS) {
    bias = dev_alloc((size_t)m * type_size(g->bias_type));
    for (int64_t i = 0; i < m; i++) put_elem(g->bias_type, bias, i, (float)rng_normal());
  }
  const void *alpha = &g->alpha, *beta = &g->beta;
  float *dev_ab = NULL;
  if (g->pointer_mode == 1) {
    dev_ab = dev_alloc(2 * sizeof(float));
    dev_ab[0] = g->alpha, dev_ab[1] = g->beta;
    alpha = &dev_ab[0], beta = &dev_ab[1];
  }

  take_vector_accesses();
  CUresult r = (gemm_use_mma ? fp8_gemm_mma : fp8_gemm)(KERNEL_CTX(ctx), NULL, m, n, k, batch, a8, g->fmt_a, b8, g->fmt_b, &scales[0], &scales[1], alpha, beta, g->pointer_mode,
      g->c_type, c, ldc, stride_c, g->d_type, d, ldd, stride_d, g->epilogue, bias, g->bias_type);
  unsigned long long vec = take_vector_accesses();
  if (r != CUDA_SUCCESS) fail_msg("%s: %s CUresult %d", g->name, gemm_use_mma ? "fp8_gemm_mma" : "fp8_gemm", (int)r);

  /* The reference: the kernel's fp32 operations in the kernel's order. */
  const float scale = k > 0 ? g->alpha * (scales[0] * scales[1]) : g->alpha;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        float acc = 0.0f;
        double abs_sum = 0.0;
        for (int64_t p = 0; p < k; p++) {
          float x = gs_fp8_to_f32(a8[(b * m + i) * k + p], g->fmt_a), y = gs_fp8_to_f32(b8[(b * n + j) * k + p], g->fmt_b);
          acc = fmaf(x, y, acc);
          abs_sum += fabs((double)x * y);
        }
        float v = acc * scale;
        double c_term = 0.0, bias_term = 0.0;
        if (g->beta != 0.0f) v = fmaf(g->beta, c_ref[b * stride_c + j * ldc + i], v), c_term = fabs(g->beta * c_ref[b * stride_c + j * ldc + i]);
        if (flags & GS_FP8_EPI_BIAS) v = v + get_elem(g->bias_type, bias, i), bias_term = fabs(get_elem(g->bias_type, bias, i));
        if ((flags & GS_FP8_EPI_RELU) && v < 0.0f) v = 0.0f;
        int64_t at = b * stride_d + j * ldd + i;
        /* The tensor-core kernel's bound: two summation orders, then the
         * epilogue's roundings on values that differ by that much. */
        const double mma_tol = 2.0 * (double)(k + 1) * 0x1p-24 * abs_sum * fabs(scale) +
                               4.0 * 0x1p-24 * (fabs((double)acc * scale) + c_term + bias_term);
        if (gemm_use_mma && !(flags & GS_FP8_EPI_GELU)) {
          mma_check(g->name, i, j, b, get_elem(g->d_type, d, at), v, mma_tol, g->d_type);
          continue;
        }
        if (flags & GS_FP8_EPI_GELU) {
          double want = gelu_ref(v), got = get_elem(g->d_type, d, at);
          double tol = 2e-6 * fabs(want) + 1e-6 + (g->d_type == CUDA_R_32F ? 0.0 : fabs(want) * 0x1p-8) +
                       (gemm_use_mma ? 1.2 * mma_tol + (g->d_type == CUDA_R_32F ? 0.0 : 1.2 * mma_tol * 0x1p-7) : 0.0);
          if (!(fabs(got - want) <= tol))
            fail_msg("%s: D(%" PRId64 ",%" PRId64 ",%" PRId64 ") = %.9g, gelu(%.9g) = %.9g", g->name, i, j, b, got,
                     (double)v, want);
          continue;
        }
        uint32_t got = get_bits(g->d_type, d, at), want = round_bits(g->d_type, v);
        if (got != want)
          fail_msg("%s: D(%" PRId64 ",%" PRId64 ",%" PRId64 ") = 0x%08x, want 0x%08x (%.9g)", g->name, i, j, b, got,
                   want, (double)v);
      }
  /* Nothing written outside D: ld padding and the gaps between members
   * keep their poison. */
  for (int64_t at = 0; at < d_len; at++) {
    int64_t in = at % stride_d;
    if (at / stride_d < batch && in / ldd < n && in % ldd < m) continue;
    if (get_bits(g->d_type, d, at) != nan_bits(g->d_type))
      fail_msg("%s: wrote outside D at element %" PRId64, g->name, at);
  }
  if (!g->in_place) dev_free(c);
  free(c_ref);
  dev_free(a8), dev_free(b8), dev_free(scales), dev_free(d), dev_free(bias), dev_free(dev_ab);
  return vec;
}

#define E4 GS_FP8_E4M3
#define E5 GS_FP8_E5M2
#define BF CUDA_R_16BF
#define HF CUDA_R_16F
#define FL CUDA_R_32F

static void test_gemm_shapes(void **state) {
  (void)state;
  const gemm_case cases[] = {
      {"1x1x1", 1, 1, 1, 1, E4, E4, FL, FL, FL, 0, 1.0f, 0.0f, 0, 0, 1, 0, 0, 0},
      {"65x63x33 bf16", 65, 63, 33, 1, E4, E4, BF, BF, FL, -1, 1.5f, 0.0f, 0, 0, 1, 0, 7, 0},
      {"130x7x70 e5m2 x e4m3 fp16 beta", 130, 7, 70, 1, E5, E4, HF, HF, FL, CUBLASLT_EPILOGUE_DEFAULT, 0.75f, 0.5f,
       0, 0, 0, 3, 2, 0},
      {"5x129x17 batch 3 fp32 out, bf16 C", 5, 129, 17, 3, E4, E5, BF, FL, FL, 0, -2.0f, -1.25f, 0, 0, 0, 0, 0, 0},
      {"e5m2 x e5m2 70x70x100", 70, 70, 100, 2, E5, E5, FL, BF, FL, 0, 1.0f, 0.0f, 0, 0, 1, 0, 1, 0},
      {"C == D", 77, 66, 40, 2, E4, E4, BF, BF, FL, 0, 1.0f, 1.0f, 0, 1, 0, 0, 5, 0},
      {"broadcast C", 33, 20, 24, 3, E4, E4, HF, HF, FL, 0, 1.0f, 2.0f, 0, 0, 0, 4, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gemm_run(&cases[i]);
}

/* k a multiple of 16 with aligned operands: staging uses 16-byte loads;
 * otherwise byte loads only (and the same results). */
static void test_gemm_vector_path(void **state) {
  (void)state;
  const gemm_case vec = {"k 64", 64, 64, 64, 1, E4, E4, FL, FL, FL, 0, 1.0f, 0.0f, 0, 0, 1, 0, 0, 0};
  const gemm_case byte = {"k 63", 64, 64, 63, 1, E4, E4, FL, FL, FL, 0, 1.0f, 0.0f, 0, 0, 1, 0, 0, 0};
  assert_true(gemm_run(&vec) >= 2 * 64 * 64 / 16);
  assert_int_equal(gemm_run(&byte), 0);
}

static void test_gemm_epilogues(void **state) {
  (void)state;
  const gemm_case cases[] = {
      {"bias fp32", 70, 9, 40, 1, E4, E4, FL, FL, FL, CUBLASLT_EPILOGUE_BIAS, 1.0f, 0.0f, 0, 0, 1, 0, 0, 0},
      {"relu bias bf16", 70, 33, 40, 2, E4, E4, BF, BF, BF, CUBLASLT_EPILOGUE_RELU_BIAS, 1.0f, 0.5f, 0, 0, 0, 0, 0, 0},
      {"relu", 40, 70, 12, 1, E4, E5, HF, HF, FL, CUBLASLT_EPILOGUE_RELU, 1.0f, 0.0f, 0, 0, 1, 0, 0, 0},
      {"gelu bias fp16", 70, 31, 40, 1, E4, E4, FL, FL, HF, CUBLASLT_EPILOGUE_GELU_BIAS, 1.0f, 0.0f, 0, 0, 1, 0, 0, 0},
      {"gelu", 66, 20, 48, 1, E4, E4, BF, BF, FL, CUBLASLT_EPILOGUE_GELU, 1.0f, 1.0f, 0, 1, 0, 0, 0, 0},
      {"gelu bias bf16 out", 20, 20, 200, 2, E5, E4, BF, BF, BF, CUBLASLT_EPILOGUE_GELU_BIAS, 0.5f, 0.25f, 0, 0, 0, 1, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gemm_run(&cases[i]);
}

/* k = 0: D = beta*C (+ bias, epilogue), no operand read (A8/B8 NULL). */
static void test_gemm_k0(void **state) {
  (void)state;
  const gemm_case cases[] = {
      {"k 0", 33, 17, 0, 2, E4, E4, BF, BF, FL, 0, 1.0f, 0.5f, 0, 0, 0, 0, 0, 0},
      {"k 0 relu bias", 70, 3, 0, 1, E4, E4, FL, FL, HF, CUBLASLT_EPILOGUE_RELU_BIAS, 1.0f, -1.0f, 0, 1, 0, 0, 2, 0},
      {"k 0 beta 0", 9, 9, 0, 1, E4, E4, FL, HF, FL, 0, 3.0f, 0.0f, 0, 0, 1, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gemm_run(&cases[i]);
}

/* alpha and beta from device memory (cuBLAS's device pointer mode); beta 0
 * there also leaves C unread: a NaN C must not show in D. */
static void test_gemm_pointer_modes(void **state) {
  (void)state;
  const gemm_case cases[] = {
      {"device alpha beta", 50, 40, 30, 2, E4, E4, BF, BF, FL, 0, 0.5f, 2.0f, 1, 0, 0, 0, 0, 0},
      {"device beta 0", 50, 40, 30, 1, E4, E4, BF, BF, FL, 0, 1.0f, 0.0f, 1, 0, 0, 0, 0, 0},
      {"host beta 0, C NULL", 50, 40, 30, 1, E4, E4, BF, BF, FL, 0, 1.0f, 0.0f, 0, 0, 1, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gemm_run(&cases[i]);

  /* C all NaN with beta 0: not read, in either mode. */
  for (int mode = 0; mode < 2; mode++) {
    uint8_t *a8 = dev_alloc(16 * 16), *b8 = dev_alloc(16 * 16);
    random_codes(a8, 256, E4), random_codes(b8, 256, E4);
    float *sc = dev_alloc(4 * sizeof(float));
    sc[0] = sc[1] = 1.0f, sc[2] = 1.0f, sc[3] = 0.0f;
    float host_ab[2] = {1.0f, 0.0f};
    uint16_t *cm = dev_alloc(256 * 2), *dm = dev_alloc(256 * 2);
    for (int i = 0; i < 256; i++) cm[i] = 0x7FC1, dm[i] = 0x7FC1;
    const void *al = mode ? (void *)&sc[2] : (void *)&host_ab[0], *be = mode ? (void *)&sc[3] : (void *)&host_ab[1];
    assert_int_equal(fp8_gemm(KERNEL_CTX(ctx), NULL, 16, 16, 16, 1, a8, E4, b8, E4, &sc[0], &sc[1], al, be, mode, BF, cm, 16, 0,
                              BF, dm, 16, 0, -1, NULL, 0),
                     CUDA_SUCCESS);
    for (int i = 0; i < 256; i++) assert_false(isnan(gs_bf16_to_f32(dm[i])));
    dev_free(a8), dev_free(b8), dev_free(sc), dev_free(cm), dev_free(dm);
  }
}

/* A grid smaller than the tiles and batch: every block loops in x, y, z. */
static void test_gemm_grid_stride(void **state) {
  (void)state;
  const int64_t m = 150, n = 140, k = 20, batch = 3;
  uint8_t *a8 = dev_alloc((size_t)(m * k * batch)), *b8 = dev_alloc((size_t)(n * k * batch));
  random_codes(a8, m * k * batch, E4), random_codes(b8, n * k * batch, E4);
  float *sc = dev_alloc(2 * sizeof(float));
  sc[0] = 0.02f, sc[1] = 0.03f;
  float *d = dev_alloc((size_t)(m * n * batch) * sizeof(float));
  for (int64_t i = 0; i < m * n * batch; i++) put_nan(FL, d, i);
  gs_fp8_gemm_args a = {.a8 = a8, .b8 = b8, .scale_a = &sc[0], .scale_b = &sc[1], .d = d, .m = m, .n = n,
                        .k = k, .batch = batch, .ldd = m, .stride_d = m * n, .tiles_m = 3, .tiles_n = 3,
                        .alpha = 1.0f, .beta = 0.0f, .fmt_a = E4, .fmt_b = E4, .c_type = GS_ELEM_F32,
                        .d_type = GS_ELEM_F32, .bias_type = GS_ELEM_F32};
  const unsigned grid[3] = {2, 1, 2};
  assert_int_equal(run_host_kernel("gs_fp8_gemm", grid, GS_FP8_G_THREADS, &a), CUDA_SUCCESS);
  const float scale = 1.0f * (sc[0] * sc[1]);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        float acc = 0.0f;
        for (int64_t p = 0; p < k; p++)
          acc = fmaf(gs_e4m3_to_f32(a8[(b * m + i) * k + p]), gs_e4m3_to_f32(b8[(b * n + j) * k + p]), acc);
        float want = acc * scale, got = d[b * m * n + j * m + i];
        if (gs_f32_bits(got) != gs_f32_bits(want))
          fail_msg("grid-stride D(%" PRId64 ",%" PRId64 ",%" PRId64 ") %a want %a", i, j, b, (double)got, (double)want);
      }
  dev_free(a8), dev_free(b8), dev_free(sc), dev_free(d);
}

/* The whole fp8 path on fresh normal data: amax_init, quantize (A and B in
 * every transpose), the GEMM with the scales the operands were quantized
 * with, against a float64 GEMM of the unquantized bf16 inputs. */
static double sqnr_case(int64_t m, int64_t n, int64_t k, int64_t batch, int ta, int tb, int fmt) {
  smat a, b;
  if (ta) smat_make(&a, BF, k, m, k + 2, (k + 2) * m, batch, 1.0);
  else smat_make(&a, BF, m, k, m, m * k, batch, 1.0);
  if (tb) smat_make(&b, BF, n, k, n, n * k + 8, batch, 0.05);
  else smat_make(&b, BF, k, n, k, k * n, batch, 0.05);
  ring_model ma, mb;
  gs_fp8_ring *ra = ring_new(&ma, 16, fmt, 1.0f), *rb = ring_new(&mb, 16, fmt, 1.0f);
  uint8_t *a8 = dst_alloc(m * k * batch), *b8 = dst_alloc(n * k * batch);
  float *d = dev_alloc((size_t)(m * n * batch) * sizeof(float));
  for (int64_t i = 0; i < m * n * batch; i++) put_nan(FL, d, i);
  const int parity = 0;
  assert_int_equal(fp8_amax_init(KERNEL_CTX(ctx), NULL, BF, a.p, a.rows, a.cols, a.ld, a.stride, batch, ra, parity), CUDA_SUCCESS);
  assert_int_equal(fp8_amax_init(KERNEL_CTX(ctx), NULL, BF, b.p, b.rows, b.cols, b.ld, b.stride, batch, rb, parity), CUDA_SUCCESS);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, BF, a.p, a.rows, a.cols, a.ld, a.stride, batch, ta, 0, a8, ra, parity),
                   CUDA_SUCCESS);
  assert_int_equal(fp8_quantize(KERNEL_CTX(ctx), NULL, BF, b.p, b.rows, b.cols, b.ld, b.stride, batch, tb, 1, b8, rb, parity),
                   CUDA_SUCCESS);
  check_quantized(&a, 0, ta, a8, ra->scale[parity][0], fmt, "pipeline A");
  check_quantized(&b, 1, tb, b8, rb->scale[parity][0], fmt, "pipeline B");
  /* The round trip: decode(code) * scale against the input. */
  double cast_db[2];
  for (int op = 0; op < 2; op++) {
    const smat *s = op ? &b : &a;
    const uint8_t *q8 = op ? b8 : a8;
    const float sc = (op ? rb : ra)->scale[parity][0];
    int64_t mn = op ? n : m;
    double sig = 0, err = 0;
    for (int64_t bb = 0; bb < batch; bb++)
      for (int64_t i = 0; i < mn; i++)
        for (int64_t p = 0; p < k; p++) {
          double x = op_elem(s, op, op ? tb : ta, bb, i, p);
          double y = (double)gs_fp8_to_f32(q8[(bb * mn + i) * k + p], fmt) * sc;
          sig += x * x, err += (y - x) * (y - x);
        }
    cast_db[op] = 10.0 * log10(sig / err);
  }
  printf("  %s cast SQNR: A %.1f dB, B %.1f dB\n", fmt ? "e5m2" : "e4m3", cast_db[0], cast_db[1]);
  assert_true(cast_db[0] >= (fmt ? 18.0 : 25.0) && cast_db[1] >= (fmt ? 18.0 : 25.0));
  const float one = 1.0f, zero = 0.0f;
  assert_int_equal((gemm_use_mma ? fp8_gemm_mma : fp8_gemm)(KERNEL_CTX(ctx), NULL, m, n, k, batch, a8, fmt, b8, fmt,
                                                            &ra->scale[parity][0], &rb->scale[parity][0], &one, &zero, 0, FL,
                                                            NULL, m, m * n, FL, d, m, m * n, CUBLASLT_EPILOGUE_DEFAULT,
                                                            NULL, 0),
                   CUDA_SUCCESS);
  double sig = 0, err = 0;
  for (int64_t bb = 0; bb < batch; bb++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        double ref = 0;
        for (int64_t p = 0; p < k; p++) ref += (double)op_elem(&a, 0, ta, bb, i, p) * (double)op_elem(&b, 1, tb, bb, j, p);
        double got = d[bb * m * n + j * m + i];
        sig += ref * ref;
        err += (got - ref) * (got - ref);
      }
  dev_free(a8), dev_free(b8), dev_free(d), dev_free(ra), dev_free(rb), dev_free(a.p), dev_free(b.p);
  return 10.0 * log10(sig / err);
}

static void test_gemm_sqnr(void **state) {
  (void)state;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      double db = sqnr_case(96, 80, 128, 2, ta, tb, E4);
      printf("  e4m3 pipeline %s%s 96x80x128 batch 2: SQNR %.1f dB\n", ta ? "T" : "N", tb ? "T" : "N", db);
      assert_true(db >= 25.0);
    }
  /* E5M2 keeps two mantissa bits: about 6 dB less per bit lost. */
  double db = sqnr_case(64, 64, 128, 1, 0, 1, E5);
  printf("  e5m2 pipeline NT 64x64x128: SQNR %.1f dB\n", db);
  assert_true(db >= 18.0);
}

static void test_gemm_argument_checks(void **state) {
  (void)state;
  const CUresult BAD = CUDA_ERROR_INVALID_VALUE, OK = CUDA_SUCCESS;
  uint8_t *a8 = dev_alloc(4096), *b8 = dev_alloc(4096);
  float *sc = dev_alloc(16), *d = dev_alloc(4096);
  const float one = 1.0f, zero = 0.0f;
#define G(m, n, k, batch, A, fa, B, fb, al, be, pm, C, ldc, D, ldd, sd, epi, bias) \
  fp8_gemm(KERNEL_CTX(ctx), NULL, m, n, k, batch, A, fa, B, fb, &sc[0], &sc[1], al, be, pm, FL, C, ldc, 0, FL, D, ldd, sd, epi, bias, FL)
  arm_driver_failures();
  assert_int_equal(G(-1, 4, 4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, -4, 4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, -4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, 4, -1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, 4, 1, a8, 2, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, &one, &zero, 2, NULL, 4, d, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, NULL, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 3, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, NULL, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, 4, 2, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 15, -1, NULL), BAD); /* D members overlap */
  assert_int_equal(G(4, 4, 4, 1, NULL, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, &one, &one, 0, NULL, 4, d, 4, 0, -1, NULL), BAD); /* beta 1: C needed */
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, &one, &one, 0, d, 3, d, 4, 0, -1, NULL), BAD);
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, &one, &zero, 1, NULL, 4, d, 4, 0, -1, NULL), BAD); /* device beta: C needed */
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, CUBLASLT_EPILOGUE_BIAS, NULL), BAD);
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, CUBLASLT_EPILOGUE_DRELU, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(G(4, 4, 4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, CUBLASLT_EPILOGUE_GELU_AUX, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  /* Nothing to compute: no launch (an empty grid is illegal), success. */
  assert_int_equal(G(0, 4, 4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), OK);
  assert_int_equal(G(4, 0, 4, 1, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), OK);
  assert_int_equal(G(4, 4, 4, 0, a8, E4, b8, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), OK);
  assert_int_equal(G(0, 0, 0, 1, NULL, E4, NULL, E4, &one, &one, 0, NULL, 1, NULL, 1, 0, -1, NULL), OK);
  /* The control: k = 0 still launches (it writes beta*C). */
  assert_int_not_equal(G(4, 4, 0, 1, NULL, E4, NULL, E4, &one, &zero, 0, NULL, 4, d, 4, 0, -1, NULL), OK);
  gs_fault_clear();
#undef G
  dev_free(a8), dev_free(b8), dev_free(sc), dev_free(d);
}

/* Every kernel of the list is an .entry of its file's PTX, which targets
 * sm_61. */
extern const char gs_ptx_fp8_quantize[], gs_ptx_fp8_gemm[];
static void test_ptx_has_every_kernel(void **state) {
  (void)state;
  char entry[128];
#define CHECK(ptx, name)                                                       \
  snprintf(entry, sizeof entry, ".entry %s(", #name);                          \
  if (!strstr(ptx, entry)) fail_msg("%s is not in %s", entry, #ptx);
#define IN_QUANTIZE(name, elem, mode) CHECK(gs_ptx_fp8_quantize, name)
#define IN_GEMM(name, elem, mode) CHECK(gs_ptx_fp8_gemm, name)
  GS_FP8_QUANTIZE_KERNELS(IN_QUANTIZE)
  GS_FP8_GEMM_KERNELS(IN_GEMM)
#undef IN_QUANTIZE
#undef IN_GEMM
#undef CHECK
  assert_non_null(strstr(gs_ptx_fp8_quantize, "\n.target sm_61"));
  assert_non_null(strstr(gs_ptx_fp8_gemm, "\n.target sm_61"));
}

/* A second context (another device) gets its own modules and works. */
static void test_other_context(void **state) {
  (void)state;
  CUresult (*create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
  *(void **)&create = standin_sym("cuCtxCreate_v4");
  CUcontext other, popped, saved = ctx;
  assert_int_equal(create(&other, NULL, 0, 1), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  ctx = other;
  const gemm_case g = {"other context", 20, 30, 40, 1, E4, E4, FL, FL, FL, 0, 1.0f, 0.0f, 0, 0, 1, 0, 0, 0};
  gemm_run(&g);
  const qshape q = {40, 30, 0, 1, 0};
  quantize_case(CUDA_R_16BF, 0, 0, &q, 0, 0.01f);
  ctx = saved;
  CUcontext cur = (CUcontext)1;
  assert_int_equal(gs_sys.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_null(cur); /* the launchers restored the caller's (no) context */
}

/* The modules load once per context, also when several threads make the
 * context's first fp8 calls at once; every call computes right. */
static CUresult (*real_load)(CUmodule *, const void *);
static int loads;
static CUresult counting_load(CUmodule *m, const void *image) {
  __atomic_fetch_add(&loads, 1, __ATOMIC_SEQ_CST);
  return real_load(m, image);
}

typedef struct first_use {
  smat s;
  gs_fp8_ring *ring;
  ring_model m;
  uint8_t *dst;
  CUresult r;
} first_use;

static void *first_use_thread(void *arg) {
  first_use *u = arg;
  u->r = fp8_quantize(KERNEL_CTX(ctx), NULL, CUDA_R_16BF, u->s.p, u->s.rows, u->s.cols, u->s.ld, 0, 1, 0, 0, u->dst, u->ring, 0);
  return NULL;
}

static void test_module_once_per_context(void **state) {
  (void)state;
  CUresult (*create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
  *(void **)&create = standin_sym("cuCtxCreate_v4");
  CUcontext fresh, popped, saved = ctx;
  assert_int_equal(create(&fresh, NULL, 0, 0), CUDA_SUCCESS);
  assert_int_equal(gs_sys.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  ctx = fresh;
  enum { THREADS = 4 };
  first_use u[THREADS];
  for (int i = 0; i < THREADS; i++) {
    smat_make(&u[i].s, CUDA_R_16BF, 70 + i, 90, 70 + i, 0, 1, 1.0);
    u[i].ring = ring_new(&u[i].m, 4, GS_FP8_E4M3, 1.0f);
    u[i].dst = dst_alloc(u[i].s.rows * 90);
  }
  real_load = gs_sys.cuModuleLoadData;
  gs_sys.cuModuleLoadData = counting_load;
  loads = 0;
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, first_use_thread, &u[i]), 0);
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  int after_first = loads;
  const gemm_case g = {"after first use", 8, 8, 8, 1, E4, E4, FL, FL, FL, 0, 1.0f, 0.0f, 0, 0, 1, 0, 0, 0};
  gemm_run(&g);
  gs_sys.cuModuleLoadData = real_load;
  /* Every kernel file (module.h's GS_KERNEL_FILES: cast, fp8_quantize,
   * fp8_gemm, accuracy) loads once per context, together. */
  assert_int_equal(after_first, 4);
  assert_int_equal(loads, 4);
  for (int i = 0; i < THREADS; i++) {
    assert_int_equal(u[i].r, CUDA_SUCCESS);
    check_quantized(&u[i].s, 0, 0, u[i].dst, 1.0f, GS_FP8_E4M3, "first use");
    model_fold(&u[i].m, smat_amax(&u[i].s), 0, 0);
    ring_check(u[i].ring, &u[i].m, "first use");
    dev_free(u[i].dst), dev_free(u[i].ring), dev_free(u[i].s.p);
  }
  ctx = saved;
}

/* ---- the tensor-core GEMM (fp8_gemm_mma.cu) ---------------------------------- */
/* Its module is the 9.0 device's only: the GEMM tests run there with
 * gemm_use_mma set, then the defaults come back. */
static CUcontext ctx61_saved;
static int mma_setup(void **state) {
  (void)state;
  ctx61_saved = ctx;
  gemm_use_mma = 1;
  ctx = ctx90;
  return 0;
}
static int mma_teardown(void **state) {
  (void)state;
  gemm_use_mma = 0;
  ctx = ctx61_saved;
  return 0;
}

/* Every FFMA case (shapes, vector path, epilogues, k = 0, pointer modes):
 * the same contract, within the summation-order bound. */
static void test_mma_ffma_cases(void **state) {
  test_gemm_shapes(state);
  test_gemm_vector_path(state);
  test_gemm_epilogues(state);
  test_gemm_k0(state);
  test_gemm_pointer_modes(state);
}

/* Random shapes (m, n, k off the 16/8/32 fragment sizes, k past one step
 * and not), both formats each side, every epilogue, output types, C == D. */
static void test_mma_random_shapes(void **state) {
  (void)state;
  static const int types[3] = {BF, HF, FL};
  static const int epis[6] = {0, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_RELU_BIAS,
                              CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS};
  for (int t = 0; t < 36; t++) {
    gemm_case g;
    memset(&g, 0, sizeof g);
    g.m = 1 + rng_below(140), g.n = 1 + rng_below(140), g.k = t % 9 == 0 ? 0 : 1 + rng_below(160);
    g.batch = 1 + rng_below(3);
    g.fmt_a = (int)rng_below(2), g.fmt_b = (int)rng_below(2);
    g.d_type = types[rng_below(3)];
    g.c_type = g.d_type;
    g.bias_type = types[rng_below(3)];
    g.epilogue = epis[t % 6];
    g.alpha = (float)(0.5 + rng_unit());
    g.beta = t % 3 == 0 ? 0.0f : (float)(rng_unit() - 0.5);
    g.in_place = t % 4 == 1;
    g.c_null = g.beta == 0.0f && t % 2 == 0;
    g.ldd_pad = rng_below(4), g.ldc_pad = rng_below(4);
    char name[96];
    snprintf(name, sizeof name, "random %" PRId64 "x%" PRId64 "x%" PRId64 " batch %" PRId64 " %s x %s %s epi %d",
             g.m, g.n, g.k, g.batch, g.fmt_a ? "e5m2" : "e4m3", g.fmt_b ? "e5m2" : "e4m3", type_name(g.d_type),
             g.epilogue);
    g.name = name;
    gemm_run(&g);
  }
}

/* The host kernel directly, with a grid smaller than the tiles: every
 * block loops over tiles and batch, against the FFMA reference bound. */
static void test_mma_grid_stride(void **state) {
  (void)state;
  const int64_t m = 150, n = 140, k = 70, batch = 3;
  uint8_t *a8 = dev_alloc((size_t)(m * k * batch)), *b8 = dev_alloc((size_t)(n * k * batch));
  random_codes(a8, m * k * batch, E4), random_codes(b8, n * k * batch, E5);
  float *sc = dev_alloc(2 * sizeof(float));
  sc[0] = 0.02f, sc[1] = 0.03f;
  float *d = dev_alloc((size_t)(m * n * batch) * sizeof(float));
  for (int64_t i = 0; i < m * n * batch; i++) put_nan(FL, d, i);
  gs_fp8_gemm_args a = {.a8 = a8, .b8 = b8, .scale_a = &sc[0], .scale_b = &sc[1], .d = d, .m = m, .n = n,
                        .k = k, .batch = batch, .ldd = m, .stride_d = m * n, .tiles_m = 3, .tiles_n = 3,
                        .alpha = 1.0f, .beta = 0.0f, .fmt_a = E4, .fmt_b = E5, .c_type = GS_ELEM_F32,
                        .d_type = GS_ELEM_F32, .bias_type = GS_ELEM_F32};
  const unsigned grid[3] = {2, 1, 2};
  assert_int_equal(run_host_kernel("gs_fp8_gemm_mma", grid, GS_FP8_G_THREADS, &a), CUDA_SUCCESS);
  const float scale = 1.0f * (sc[0] * sc[1]);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        float acc = 0.0f;
        double abs_sum = 0.0;
        for (int64_t p = 0; p < k; p++) {
          float x = gs_e4m3_to_f32(a8[(b * m + i) * k + p]), y = gs_e5m2_to_f32(b8[(b * n + j) * k + p]);
          acc = fmaf(x, y, acc);
          abs_sum += fabs((double)x * y);
        }
        double tol = 2.0 * (double)(k + 1) * 0x1p-24 * abs_sum * scale + 4.0 * 0x1p-24 * fabs((double)acc * scale);
        mma_check("grid-stride", i, j, b, d[b * m * n + j * m + i], acc * scale, tol, FL);
      }
  dev_free(a8), dev_free(b8), dev_free(sc), dev_free(d);
}

/* E4M3 end to end (amax_init, quantize, the tensor-core GEMM) against
 * float64: SQNR >= 25 dB, as for the FFMA kernel. */
static void test_mma_sqnr(void **state) {
  (void)state;
  for (int ta = 0; ta < 2; ta++) {
    double db = sqnr_case(96, 80, 128, 2, ta, !ta, E4);
    printf("  e4m3 pipeline (own-mma) %s%s 96x80x128 batch 2: SQNR %.1f dB\n", ta ? "T" : "N", ta ? "N" : "T", db);
    assert_true(db >= 25.0);
  }
}

/* On the 6.1 device the module is not loaded: the launcher returns
 * CUDA_ERROR_NOT_SUPPORTED and writes nothing; the FFMA kernel still runs
 * in the same context. */
static void test_mma_absent_below_sm89(void **state) {
  (void)state;
  uint8_t *a8 = dev_alloc(32 * 32), *b8 = dev_alloc(32 * 32);
  random_codes(a8, 32 * 32, E4), random_codes(b8, 32 * 32, E4);
  float *sc = dev_alloc(2 * sizeof(float)), *d = dev_alloc(32 * 32 * sizeof(float));
  sc[0] = sc[1] = 1.0f;
  for (int i = 0; i < 32 * 32; i++) put_nan(FL, d, i);
  const float one = 1.0f, zero = 0.0f;
  assert_int_equal(fp8_gemm_mma(KERNEL_CTX(ctx), NULL, 32, 32, 32, 1, a8, E4, b8, E4, &sc[0], &sc[1], &one, &zero, 0, FL, NULL, 32,
                                0, FL, d, 32, 0, -1, NULL, 0),
                   CUDA_ERROR_NOT_SUPPORTED);
  for (int i = 0; i < 32 * 32; i++) assert_int_equal(get_bits(FL, d, i), nan_bits(FL));
  assert_int_equal(fp8_gemm(KERNEL_CTX(ctx), NULL, 32, 32, 32, 1, a8, E4, b8, E4, &sc[0], &sc[1], &one, &zero, 0, FL, NULL, 32, 0,
                            FL, d, 32, 0, -1, NULL, 0),
                   CUDA_SUCCESS);
  for (int i = 0; i < 32 * 32; i++) assert_false(isnan(d[i]));
  dev_free(a8), dev_free(b8), dev_free(sc), dev_free(d);
}

int main(void) {
  const char *seed_env = getenv("GS_TEST_SEED");
  uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)getpid() * 0x9E3779B97F4A7C15ull;
  rng_state = seed;
  printf("test_fp8_kernels: seed 0x%" PRIx64 " (GS_TEST_SEED=0x%" PRIx64 " repeats this run)\n", seed, seed);
  fflush(stdout);
  /* GS_TEST_FILTER: run only the tests whose names match (cmocka's
   * pattern: * and ?), for work on one part */
  const char *filter = getenv("GS_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ptx_has_every_kernel),
      cmocka_unit_test(test_quantize_layouts),
      cmocka_unit_test(test_quantize_vector_paths),
      cmocka_unit_test(test_quantize_specials),
      cmocka_unit_test(test_quantize_many_blocks),
      cmocka_unit_test(test_quantize_grid_stride),
      cmocka_unit_test(test_quantize_persistent_grid),
      cmocka_unit_test(test_quantize_grid_follows_the_sm_count),
      cmocka_unit_test(test_quantize_pads_k),
      cmocka_unit_test(test_ring_state_machine),
      cmocka_unit_test(test_margin_is_transformer_engines),
      cmocka_unit_test(test_first_amax_entered_once),
      cmocka_unit_test(test_amax_init),
      cmocka_unit_test(test_quantize_empty),
      cmocka_unit_test(test_quantize_golden),
      cmocka_unit_test(test_quantize_sm89),
      cmocka_unit_test(test_quantize_stats),
      cmocka_unit_test(test_quantize_geometry),
      cmocka_unit_test(test_quantize_argument_checks),
      cmocka_unit_test(test_gemm_shapes),
      cmocka_unit_test(test_gemm_vector_path),
      cmocka_unit_test(test_gemm_epilogues),
      cmocka_unit_test(test_gemm_k0),
      cmocka_unit_test(test_gemm_pointer_modes),
      cmocka_unit_test(test_gemm_grid_stride),
      cmocka_unit_test(test_gemm_sqnr),
      cmocka_unit_test(test_gemm_argument_checks),
      cmocka_unit_test(test_current_matches_ring),
      cmocka_unit_test(test_current_argument_checks),
      cmocka_unit_test(test_current_fast_matches_general),
      cmocka_unit_test(test_current_fast_kernel_choice),
      cmocka_unit_test(test_other_context),
      cmocka_unit_test(test_scaled_quantize_launcher),
      cmocka_unit_test(test_scaled_quantize_stats),
      cmocka_unit_test(test_module_once_per_context),
      cmocka_unit_test(test_mma_absent_below_sm89),
      cmocka_unit_test_setup_teardown(test_mma_ffma_cases, mma_setup, mma_teardown),
      cmocka_unit_test_setup_teardown(test_mma_random_shapes, mma_setup, mma_teardown),
      cmocka_unit_test_setup_teardown(test_mma_grid_stride, mma_setup, mma_teardown),
      cmocka_unit_test_setup_teardown(test_mma_sqnr, mma_setup, mma_teardown),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
