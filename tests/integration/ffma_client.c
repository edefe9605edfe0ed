/* ffma_client.c: the ffma route's end-to-end client (test_ffma_route.py).
 *
 * A program that uses only the CUDA driver API (dlopen()ed, as the CUDA
 * runtime loads it) and cuBLAS/cuBLASLt (linked), so the same binary runs on
 * a GPU with the real libraries. Each --gemm=key=value,... option describes
 * one call; the calls run in order on one handle and stream, each with fresh
 * seeded operands, outputs poisoned with NaN where the call must not read
 * them, and every result compared against a float64 reference computed
 * here from the stored inputs. One line per call:
 *
 *   call <i> name=<name> api=<api> status=<n> ok=<0|1> maxerr=<x|-> math=<before>/<after>
 *        sqnr=<dB|inf|-> nonfinite=<n|->
 *
 * ok=1: status 0 and every element of the result within tolerance, every
 * element outside it (ld padding, gaps between batch members, an
 * out-of-place C) bit-identical to what was uploaded; or, for a call cuBLAS
 * refused, the output untouched. math is the handle's math mode read just
 * before and just after the call (GemmEx family; "-" for cuBLASLt). sqnr:
 * the result's signal to noise ratio against float64 over the elements
 * whose reference is finite, 10 log10(sum ref^2 / sum err^2); nonfinite:
 * how many result elements are Inf or NaN. An element whose float64
 * reference is Inf or NaN is right when the result is the same Inf, or a
 * NaN.
 *
 * Keys of --gemm (defaults in brackets):
 *   name                      label printed back [gemm<i>]
 *   api                       ex ex64 strided strided64 batched batched64 lt [ex]
 *   ab, c                     bf16 fp16 fp32: A/B type, C/D type [bf16, ab]
 *   m n k batch               sizes [64 48 80 1]
 *   ta tb                     N T [T N]
 *   pad spad                  leading-dimension and batch-stride padding [3 5]
 *   alpha beta                [1 0.75]
 *   pm                        host device: where alpha/beta live [host]
 *   compute                   32f 32f_pedantic 32f_fast_16bf 32f_fast_16f 32f_fast_tf32 [32f]
 *   math                      the handle's math mode to set before the call:
 *                             default tensor_op tf32 pedantic, "+disallow" adds
 *                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION [unchanged]
 *   amp                       magnitude of A and B elements [1]
 *   span=LO:HI                A's and B's magnitudes spread log-uniformly
 *                             from LO to HI, random signs [uniform in amp]
 *   special, specialb         inf ninf nan, or a number (an outlier): A's (B's) first stored element
 *                             is that value [none]
 *   ampb                      magnitude of B's elements alone [amp]
 *   apat, bpat=V0:V1:...      explicit values (up to 8): element (i, l) of
 *                             op(A) is V[(i*k + l) % count], element (l, j)
 *                             of op(B) V[(j*k + l) % count], in every member
 *                             [random]
 *   rowexp, colexp=E0:E1:...  row i of op(A) (column j of op(B)) times
 *                             2^E[i % count] (up to 8) [none]
 *   dump=PATH                 write every result element, member by member,
 *                             column by column, as three float64s: the
 *                             result, the float64 reference and its bound
 *                             (NaN where the reference is not finite)
 *   exact=1                   (bf16/fp16 C, no bias or activation) each
 *                             element must equal, bit for bit, the split
 *                             model: r = fp32(alpha * AB), v = fp32(r +
 *                             beta * C) (one rounding; beta 0: v = r), D =
 *                             v rounded to D's type, nearest even, from
 *                             the float64 product of the stored inputs;
 *                             the operands must make AB exact in fp32
 *                             (apat/bpat), and a sum float64 cannot hold
 *                             exactly fails the call [0]
 *   seed                      the data's seed (same seed, same data) [the
 *                             run's --seed plus the call's index]
 *   Arguments cuBLAS may refuse (the buffers stay as the keys above size
 *   them; only what the call is told changes):
 *   bt                        B's type as passed (bf16 fp16 fp32) [ab]
 *   apad bpad cpad            padding of one leading dimension; negative
 *                             gives ld below the stored rows [pad]
 *   ta tb = X                 an operation cuBLAS's GEMMs do not take
 *                             (CUBLAS_OP_CONJG)
 *   compute also: 64f 16f
 *   algo                      cublasGemmAlgo_t value (GemmEx family) [-1: DEFAULT]
 *   call_m call_n call_k call_batch   sizes as passed (GemmEx family) [as above]
 *   call_sab                  A's and B's batch stride as passed (strided
 *                             GemmEx forms) [as allocated]
 *   lt only: dt (D's type as passed in its layout) [c];
 *   lt only: epi (default relu bias relu_bias gelu gelu_bias) [default];
 *            bias (unset bf16 fp16 fp32: BIAS_DATA_TYPE) [unset: D's type];
 *            bstride (BIAS_BATCH_STRIDE, elements) [0]; oop (D apart from C) [0];
 *            order (col row) [col]; scale (fp32 bf16: SCALE_TYPE) [fp32];
 *            dpad (D's leading dimension exceeds C's by this much; with
 *            oop=0 the call is in place with two different layouts) [0];
 *            dattr (ID:VALUE, a cublasLtMatmulDescAttributes_t id and an
 *            integer value, stored in the attribute's size: int32 or int64;
 *            up to 4 of them) [none];
 *            lmode (strided ptr: every layout's BATCH_MODE; with ptr, the
 *            client still passes its matrices, so cuBLASLt must refuse or
 *            a route would read them as arrays of pointers) [strided]
 *
 * Modes:
 *   --stream=own|legacy|per-thread   the handle's stream [own: cuStreamCreate]
 *   --capture-from=N   calls N.. are issued inside a graph capture of the
 *                      stream (global mode), after calls 0..N-1 ran eagerly;
 *                      every operand is allocated and uploaded before the
 *                      capture begins; the graph is then instantiated and
 *                      launched, and the results checked after the launch.
 *   --reset-after=N    after call N-1: destroy the handles and stream,
 *                      release the primary context (its memory goes with
 *                      it), retain it again and carry on
 *   --reset-every=N    the same before every call whose index is a
 *                      positive multiple of N (a program that rebuilds its
 *                      CUDA state again and again)
 *   --streams=S        (sequential, --stream=own) S streams, all alive
 *                      until the end (or a reset): call i runs on stream
 *                      i % S, one call at a time
 *   --one-at-a-time    (with --threads) each thread starts after the
 *                      previous one exited
 *   --threads=T --iters=I   T threads, each with its own handles, run every
 *                      call I times; the stream is per thread (own,
 *                      per-thread) or shared by all (--stream=shared, or
 *                      legacy); every thread's handles and stream live
 *                      from before any thread's first call to after the
 *                      last thread's last call
 *   --side-capture=PATH   after the eager calls, a graph capture (global
 *                      mode) of another stream of this thread stays open
 *                      until PATH holds a line for every eager call (the
 *                      shim's log writer read their events meanwhile), then
 *                      ends: "side capture begin=B end=E"
 *   --wait-log=PATH    after each eager call i, wait (up to 60 s) until
 *                      PATH holds i+1 lines: the shim's routing log has
 *                      written the call's record before the next call
 *   --fp8              results are judged as fp8 GEMMs (the shim's fp8 route):
 *                      each element within 0.13 x sum|a*b| (+|beta*c|+|bias|)
 *                      + 2^-8 |ref| (two E4M3 roundings of 2^-4 each and
 *                      the output's), and the whole output at an SQNR of
 *                      at least 25 dB against float64 (torchao's figure
 *                      for fp8 GEMMs)
 *   --dump=DIR         each call's output buffer, raw as the call left it
 *                      (padding included), to DIR/<name>.out
 *   --setenv=NAME=VALUE   setenv(NAME, VALUE) before the first call, after
 *                      a preloaded shim's constructor ran (as a Python
 *                      program sets os.environ before importing its
 *                      framework)
 *   --nosync           no synchronisation and no host copies at all:
 *                      operands filled by stream-ordered memsets, results not
 *                      read (ok=1 when status is 0): for running under a
 *                      driver that flags every synchronisation
 *
 * The process exits 0 when every call is ok, 1 when one is not, 2 on a
 * set-up error. The primary context stays retained at exit, so device
 * memory anyone left allocated is still there for a leak check. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>

#include "client_log.h"

#define EXIT_SETUP 2

/* ---- the driver, loaded as the CUDA runtime loads it ---------------------- */
#define DRIVER_FNS(X)                                                          \
  X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2) \
  X(cuCtxSetCurrent) X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize) \
  X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2)      \
  X(cuMemsetD32Async) X(cuStreamBeginCapture_v2) X(cuStreamEndCapture) X(cuGraphDestroy)
/* Graph execution, where the driver has it. */
#define DRIVER_OPTIONAL_FNS(X) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy)

static struct {
#define FN_PTR(name) __typeof__(name) *name;
  DRIVER_FNS(FN_PTR)
  DRIVER_OPTIONAL_FNS(FN_PTR)
#undef FN_PTR
} drv;

static void die(const char *what, long code) {
  fprintf(stderr, "ffma_client: %s failed (%ld)\n", what, code);
  exit(EXIT_SETUP);
}
#define CU(call)                                                               \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) die(#call, (long)r_);                              \
  } while (0)
#define BL(call)                                                               \
  do {                                                                         \
    cublasStatus_t s_ = (call);                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) die(#call, (long)s_);                     \
  } while (0)

static void driver_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) die("dlopen(libcuda.so.1)", 0);
#define LOAD(name)                                                             \
  drv.name = (__typeof__(drv.name))dlsym(h, #name);                            \
  if (!drv.name) die("dlsym(" #name ")", 0);
  DRIVER_FNS(LOAD)
#undef LOAD
#define LOAD_OPT(name) drv.name = (__typeof__(drv.name))dlsym(h, #name);
  DRIVER_OPTIONAL_FNS(LOAD_OPT)
#undef LOAD_OPT
}

/* ---- numbers ---------------------------------------------------------------- */
static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) { /* round to nearest even */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static size_t tsize(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static double get(cudaDataType t, const void *buf, size_t i) {
  switch (t) {
  case CUDA_R_32F: return ((const float *)buf)[i];
  case CUDA_R_16F: return (double)((const _Float16 *)buf)[i];
  default: return bf16_to_f32(((const uint16_t *)buf)[i]);
  }
}

static void put(cudaDataType t, void *buf, size_t i, double v) {
  switch (t) {
  case CUDA_R_32F: ((float *)buf)[i] = (float)v; break;
  case CUDA_R_16F: ((_Float16 *)buf)[i] = (_Float16)(float)v; break;
  default: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
  }
}

/* A quiet NaN with a payload: an element nobody may read or write. */
static void poison(cudaDataType t, void *buf, size_t i) {
  if (t == CUDA_R_32F) ((uint32_t *)buf)[i] = 0x7fc0dead;
  else ((uint16_t *)buf)[i] = t == CUDA_R_16F ? 0x7e5a : 0x7fda;
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0; }

/* ---- one call's description ---------------------------------------------------- */
enum { API_EX, API_EX64, API_STRIDED, API_STRIDED64, API_BATCHED, API_BATCHED64, API_LT };
static const char *const api_names[] = {"cublasGemmEx", "cublasGemmEx_64", "cublasGemmStridedBatchedEx",
                                        "cublasGemmStridedBatchedEx_64", "cublasGemmBatchedEx",
                                        "cublasGemmBatchedEx_64", "cublasLtMatmul"};
static const char *const api_keys[] = {"ex", "ex64", "strided", "strided64", "batched", "batched64", "lt"};

#define MATH_UNCHANGED (-1)

typedef struct spec {
  char name[64];
  int api;
  cudaDataType ab, c;
  int64_t m, n, k, batch;
  cublasOperation_t ta, tb;
  int64_t pad, spad;
  float alpha, beta;
  int device_scalars;
  cublasComputeType_t compute;
  int math;            /* cublasMath_t to set, or MATH_UNCHANGED */
  double amp, ampb; /* ampb < 0: amp */
  int epilogue;        /* cublasLtEpilogue_t */
  int bias_type;       /* -1: attribute left unset (D's type) */
  int64_t bias_stride;
  int oop, row_major;
  int exact; /* judge bf16/fp16 results bit for bit by the split model */
  cudaDataType scale;
  int64_t dpad;
  cudaDataType bt, dt;      /* as passed; -1: ab / c */
  int64_t apad, bpad, cpad; /* INT64_MIN: pad */
  int algo;
  int64_t call_m, call_n, call_k, call_batch; /* INT64_MIN: as allocated */
  int64_t call_sab;                            /* INT64_MIN: as allocated */
  uint64_t seed;                               /* 0: the run's seed + the call's index */
  int ndattr;
  struct { int id; int64_t value; } dattr[4]; /* Lt descriptor attributes to set */
  int ptr_array_mode;                          /* Lt: BATCH_MODE = POINTER_ARRAY */
  double span_lo, span_hi;                     /* span_hi > 0: log-uniform magnitudes */
  double special[2];                           /* A's, B's first element; 0: none */
  double pat[2][8];                            /* apat, bpat */
  int npat[2];                                 /* 0: random values */
  int lexp[2][8];                              /* rowexp, colexp */
  int nlexp[2];
  char dump[512];                              /* "": no dump */
} spec;

/* "X0:X1:..." into at most 8 doubles; the count, or -1 when bad. */
static int parse_list(const char *v, double out[8]) {
  int n = 0;
  char *end;
  for (;;) {
    if (n == 8) return -1;
    out[n++] = strtod(v, &end);
    if (end == v) return -1;
    if (*end == 0) return n;
    if (*end != ':') return -1;
    v = end + 1;
  }
}

static int is_ptr_array(int api) { return api == API_BATCHED || api == API_BATCHED64; }
static int is_strided(int api) { return api == API_STRIDED || api == API_STRIDED64; }
static int has_bias(const spec *s) { return s->api == API_LT && (s->epilogue & CUBLASLT_EPILOGUE_BIAS); }

static int type_of(const char *v, cudaDataType *t) {
  if (!strcmp(v, "bf16")) *t = CUDA_R_16BF;
  else if (!strcmp(v, "fp16")) *t = CUDA_R_16F;
  else if (!strcmp(v, "fp32")) *t = CUDA_R_32F;
  else return -1;
  return 0;
}

static int parse_spec(const char *text, int index, spec *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "gemm%d", index);
  s->api = API_EX;
  s->ab = CUDA_R_16BF;
  s->c = (cudaDataType)-1;
  s->m = 64, s->n = 48, s->k = 80, s->batch = 1;
  s->ta = CUBLAS_OP_T, s->tb = CUBLAS_OP_N;
  s->pad = 3, s->spad = 5;
  s->alpha = 1.0f, s->beta = 0.75f;
  s->compute = CUBLAS_COMPUTE_32F;
  s->math = MATH_UNCHANGED;
  s->amp = 1.0;
  s->ampb = -1.0;
  s->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  s->bias_type = -1;
  s->scale = CUDA_R_32F;
  s->bt = s->dt = (cudaDataType)-1;
  s->apad = s->bpad = s->cpad = INT64_MIN;
  s->algo = CUBLAS_GEMM_DEFAULT;
  s->call_m = s->call_n = s->call_k = s->call_batch = s->call_sab = INT64_MIN;
  char *copy = strdup(text), *save = NULL;
  int bad = !copy;
  for (char *kv = copy ? strtok_r(copy, ",", &save) : NULL; kv && !bad; kv = strtok_r(NULL, ",", &save)) {
    char *v = strchr(kv, '=');
    if (!v) {
      bad = 1;
      break;
    }
    *v++ = 0;
    if (!strcmp(kv, "name")) snprintf(s->name, sizeof s->name, "%s", v);
    else if (!strcmp(kv, "api")) {
      s->api = -1;
      for (int i = 0; i <= API_LT; i++)
        if (!strcmp(v, api_keys[i])) s->api = i;
      bad = s->api < 0;
    } else if (!strcmp(kv, "ab")) bad = type_of(v, &s->ab);
    else if (!strcmp(kv, "c")) bad = type_of(v, &s->c);
    else if (!strcmp(kv, "m")) s->m = atoll(v);
    else if (!strcmp(kv, "n")) s->n = atoll(v);
    else if (!strcmp(kv, "k")) s->k = atoll(v);
    else if (!strcmp(kv, "batch")) s->batch = atoll(v);
    else if (!strcmp(kv, "ta")) s->ta = *v == 'N' ? CUBLAS_OP_N : *v == 'X' ? CUBLAS_OP_CONJG : CUBLAS_OP_T;
    else if (!strcmp(kv, "tb")) s->tb = *v == 'N' ? CUBLAS_OP_N : *v == 'X' ? CUBLAS_OP_CONJG : CUBLAS_OP_T;
    else if (!strcmp(kv, "bt")) bad = type_of(v, &s->bt);
    else if (!strcmp(kv, "dt")) bad = type_of(v, &s->dt);
    else if (!strcmp(kv, "apad")) s->apad = atoll(v);
    else if (!strcmp(kv, "bpad")) s->bpad = atoll(v);
    else if (!strcmp(kv, "cpad")) s->cpad = atoll(v);
    else if (!strcmp(kv, "algo")) s->algo = atoi(v);
    else if (!strcmp(kv, "call_m")) s->call_m = atoll(v);
    else if (!strcmp(kv, "call_n")) s->call_n = atoll(v);
    else if (!strcmp(kv, "call_k")) s->call_k = atoll(v);
    else if (!strcmp(kv, "call_batch")) s->call_batch = atoll(v);
    else if (!strcmp(kv, "call_sab")) s->call_sab = atoll(v);
    else if (!strcmp(kv, "pad")) s->pad = atoll(v);
    else if (!strcmp(kv, "spad")) s->spad = atoll(v);
    else if (!strcmp(kv, "alpha")) s->alpha = strtof(v, NULL);
    else if (!strcmp(kv, "beta")) s->beta = strtof(v, NULL);
    else if (!strcmp(kv, "pm")) s->device_scalars = !strcmp(v, "device");
    else if (!strcmp(kv, "amp")) s->amp = strtod(v, NULL);
    else if (!strcmp(kv, "ampb")) s->ampb = strtod(v, NULL);
    else if (!strcmp(kv, "compute")) {
      static const struct { const char *n; cublasComputeType_t c; } cs[] = {
          {"32f", CUBLAS_COMPUTE_32F}, {"32f_pedantic", CUBLAS_COMPUTE_32F_PEDANTIC},
          {"32f_fast_16bf", CUBLAS_COMPUTE_32F_FAST_16BF}, {"32f_fast_16f", CUBLAS_COMPUTE_32F_FAST_16F},
          {"32f_fast_tf32", CUBLAS_COMPUTE_32F_FAST_TF32}, {"64f", CUBLAS_COMPUTE_64F},
          {"16f", CUBLAS_COMPUTE_16F}};
      bad = 1;
      for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        if (!strcmp(v, cs[i].n)) s->compute = cs[i].c, bad = 0;
    } else if (!strcmp(kv, "math")) {
      int flags = 0;
      char *plus = strchr(v, '+');
      if (plus) {
        *plus = 0;
        flags = !strcmp(plus + 1, "disallow") ? CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION : -1;
      }
      if (!strcmp(v, "default")) s->math = CUBLAS_DEFAULT_MATH;
      else if (!strcmp(v, "tensor_op")) s->math = CUBLAS_TENSOR_OP_MATH;
      else if (!strcmp(v, "tf32")) s->math = CUBLAS_TF32_TENSOR_OP_MATH;
      else if (!strcmp(v, "pedantic")) s->math = CUBLAS_PEDANTIC_MATH;
      else bad = 1;
      if (flags < 0) bad = 1;
      else s->math |= flags;
    } else if (!strcmp(kv, "epi")) {
      static const struct { const char *n; int e; } es[] = {
          {"default", CUBLASLT_EPILOGUE_DEFAULT}, {"relu", CUBLASLT_EPILOGUE_RELU},
          {"bias", CUBLASLT_EPILOGUE_BIAS},       {"relu_bias", CUBLASLT_EPILOGUE_RELU_BIAS},
          {"gelu", CUBLASLT_EPILOGUE_GELU},       {"gelu_bias", CUBLASLT_EPILOGUE_GELU_BIAS}};
      bad = 1;
      for (size_t i = 0; i < sizeof es / sizeof es[0]; i++)
        if (!strcmp(v, es[i].n)) s->epilogue = es[i].e, bad = 0;
    } else if (!strcmp(kv, "bias")) {
      cudaDataType t;
      if (!strcmp(v, "unset")) s->bias_type = -1;
      else if (!(bad = type_of(v, &t))) s->bias_type = t;
    } else if (!strcmp(kv, "bstride")) s->bias_stride = atoll(v);
    else if (!strcmp(kv, "oop")) s->oop = atoi(v);
    else if (!strcmp(kv, "exact")) s->exact = atoi(v);
    else if (!strcmp(kv, "order")) s->row_major = !strcmp(v, "row");
    else if (!strcmp(kv, "scale")) bad = type_of(v, &s->scale);
    else if (!strcmp(kv, "dpad")) s->dpad = atoll(v);
    else if (!strcmp(kv, "seed")) s->seed = strtoull(v, NULL, 0);
    else if (!strcmp(kv, "dattr")) {
      char *colon = strchr(v, ':');
      bad = !colon || s->ndattr == 4;
      if (!bad) {
        s->dattr[s->ndattr].id = atoi(v);
        s->dattr[s->ndattr++].value = atoll(colon + 1);
      }
    } else if (!strcmp(kv, "span")) {
      char *colon = strchr(v, ':');
      bad = !colon;
      if (!bad) {
        s->span_lo = strtod(v, NULL);
        s->span_hi = strtod(colon + 1, NULL);
        bad = !(s->span_lo > 0 && s->span_hi >= s->span_lo);
      }
    } else if (!strcmp(kv, "special") || !strcmp(kv, "specialb")) {
      double x = !strcmp(v, "inf") ? INFINITY : !strcmp(v, "ninf") ? -INFINITY : !strcmp(v, "nan") ? NAN
                 : strtod(v, NULL);
      bad = x == 0;
      s->special[kv[7] == 'b'] = x;
    } else if (!strcmp(kv, "apat") || !strcmp(kv, "bpat")) {
      int w = kv[0] == 'b';
      s->npat[w] = parse_list(v, s->pat[w]);
      bad = s->npat[w] < 1;
    } else if (!strcmp(kv, "rowexp") || !strcmp(kv, "colexp")) {
      int w = kv[0] == 'c';
      double e[8];
      s->nlexp[w] = parse_list(v, e);
      bad = s->nlexp[w] < 1;
      for (int i = 0; i < s->nlexp[w] && !bad; i++) s->lexp[w][i] = (int)e[i];
    } else if (!strcmp(kv, "dump")) {
      snprintf(s->dump, sizeof s->dump, "%s", v);
    } else if (!strcmp(kv, "lmode")) {
      s->ptr_array_mode = !strcmp(v, "ptr");
      bad = !s->ptr_array_mode && strcmp(v, "strided");
    } else bad = 1;
  }
  free(copy);
  if ((int)s->c == -1) s->c = s->ab;
  if ((int)s->bt == -1) s->bt = s->ab;
  if ((int)s->dt == -1) s->dt = s->c;
  if (s->apad == INT64_MIN) s->apad = s->pad;
  if (s->bpad == INT64_MIN) s->bpad = s->pad;
  if (s->cpad == INT64_MIN) s->cpad = s->pad;
  if (s->call_m == INT64_MIN) s->call_m = s->m;
  if (s->call_n == INT64_MIN) s->call_n = s->n;
  if (s->call_k == INT64_MIN) s->call_k = s->k;
  if (s->call_batch == INT64_MIN) s->call_batch = s->batch;
  if (s->m < 1 || s->n < 1 || s->k < 1 || s->batch < 1) bad = 1;
  if ((s->row_major || s->dpad || s->ndattr || s->ptr_array_mode) && s->api != API_LT) bad = 1;
  if (bad) fprintf(stderr, "ffma_client: bad --gemm=%s\n", text);
  return bad ? -1 : 0;
}

/* ---- per-thread device state ------------------------------------------------------ */
typedef enum { STREAM_OWN, STREAM_LEGACY, STREAM_PER_THREAD, STREAM_SHARED } stream_kind;

static CUdevice g_dev;
static CUcontext g_ctx;

typedef struct session {
  CUstream stream;
  int own_stream;
  cublasHandle_t h;
  cublasLtHandle_t lt;
  CUdeviceptr ws;
  size_t ws_size;
} session;

static void session_open(session *x, stream_kind kind, CUstream shared) {
  memset(x, 0, sizeof *x);
  CU(drv.cuCtxSetCurrent(g_ctx));
  switch (kind) {
  case STREAM_OWN:
    CU(drv.cuStreamCreate(&x->stream, CU_STREAM_NON_BLOCKING));
    x->own_stream = 1;
    break;
  case STREAM_LEGACY: x->stream = NULL; break;
  case STREAM_PER_THREAD: x->stream = CU_STREAM_PER_THREAD; break;
  case STREAM_SHARED: x->stream = shared; break;
  }
  BL(cublasCreate(&x->h));
  BL(cublasSetStream(x->h, (cudaStream_t)x->stream));
  BL(cublasLtCreate(&x->lt));
  x->ws_size = 1u << 20;
  CU(drv.cuMemAlloc_v2(&x->ws, x->ws_size));
}

static void session_close(session *x) {
  CU(drv.cuMemFree_v2(x->ws));
  BL(cublasLtDestroy(x->lt));
  BL(cublasDestroy(x->h));
  if (x->own_stream) CU(drv.cuStreamDestroy_v2(x->stream));
}

/* ---- operands ------------------------------------------------------------------------ */
typedef struct buf {
  void *host;      /* what was uploaded */
  CUdeviceptr dev;
  size_t bytes;
} buf;

typedef struct gemm {
  spec s;
  int64_t a_rows, a_cols, b_rows, b_cols, lda, ldb, ldc, ldd, sa, sb, sc, sd;
  size_t na, nb, nc, nd, nbias;
  buf a, b, c, d, bias, ptrs, scalars;
  float host_scalars[2];
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  int status;
  int ok;
  double maxerr, sqnr;
  long long nonfinite;
  int math_before, math_after;
} gemm;

static void buf_alloc(buf *b, size_t bytes) {
  b->bytes = (bytes + 3) & ~(size_t)3; /* whole 32-bit words, for the memsets */
  b->host = calloc(1, b->bytes);
  if (!b->host) die("calloc", 0);
  CU(drv.cuMemAlloc_v2(&b->dev, b->bytes));
}

static void buf_free(buf *b) {
  if (b->dev) CU(drv.cuMemFree_v2(b->dev));
  free(b->host);
  memset(b, 0, sizeof *b);
}

/* Element (r, c) of batch member `member` of a matrix stored with leading
 * dimension ld and batch stride stride. */
static size_t at(const gemm *g, int64_t member, int64_t stride, int64_t ld, int64_t r, int64_t c) {
  return (size_t)(member * stride + (g->s.row_major ? r * ld + c : r + c * ld));
}

static int64_t span_of(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch, int row_major) {
  return (batch - 1) * stride + (row_major ? (rows - 1) * ld + cols : (cols - 1) * ld + rows);
}

/* Pointer-array batches: A's pointers run backwards through its buffer, so
 * treating the array as a fixed stride would give a wrong answer. */
static int64_t a_member(const gemm *g, int64_t b) { return is_ptr_array(g->s.api) ? g->s.batch - 1 - b : b; }

static void gemm_shape(gemm *g) {
  const spec *s = &g->s;
  g->a_rows = s->ta == CUBLAS_OP_N ? s->m : s->k, g->a_cols = s->ta == CUBLAS_OP_N ? s->k : s->m;
  g->b_rows = s->tb == CUBLAS_OP_N ? s->k : s->n, g->b_cols = s->tb == CUBLAS_OP_N ? s->n : s->k;
  /* Column-major ld covers the rows, row-major the columns. */
  g->lda = (s->row_major ? g->a_cols : g->a_rows) + s->apad;
  g->ldb = (s->row_major ? g->b_cols : g->b_rows) + s->bpad;
  g->ldc = (s->row_major ? s->n : s->m) + s->cpad;
  g->ldd = g->ldc + s->dpad;
  int batched = s->batch > 1 || is_strided(s->api);
  g->sa = batched ? span_of(g->a_rows, g->a_cols, g->lda, 0, 1, s->row_major) + s->spad : 0;
  g->sb = batched ? span_of(g->b_rows, g->b_cols, g->ldb, 0, 1, s->row_major) + s->spad : 0;
  g->sc = batched ? span_of(s->m, s->n, g->ldc, 0, 1, s->row_major) + s->spad : 0;
  g->sd = batched ? span_of(s->m, s->n, g->ldd, 0, 1, s->row_major) + s->spad : 0;
  g->na = (size_t)span_of(g->a_rows, g->a_cols, g->lda, g->sa, s->batch, s->row_major);
  g->nb = (size_t)span_of(g->b_rows, g->b_cols, g->ldb, g->sb, s->batch, s->row_major);
  g->nc = (size_t)span_of(s->m, s->n, g->ldc, g->sc, s->batch, s->row_major);
  g->nd = (size_t)span_of(s->m, s->n, g->ldd, g->sd, s->batch, s->row_major);
  g->nbias = (size_t)(s->m + s->bias_stride * (s->batch - 1));
}

static cudaDataType bias_type_of(const spec *s) { return s->bias_type == -1 ? s->c : (cudaDataType)s->bias_type; }

static void fill_pattern(buf *b, uint32_t word, CUstream stream) {
  CU(drv.cuMemsetD32Async(b->dev, word, b->bytes / 4, stream));
}

static void layout_make(cublasLtMatrixLayout_t *l, cudaDataType t, int64_t rows, int64_t cols, int64_t ld,
                        int64_t batch, int64_t stride, int row_major, int ptr_array) {
  BL(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
  if (ptr_array) {
    uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
    BL(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode, sizeof mode));
  }
  if (batch > 1) {
    int32_t count = (int32_t)batch;
    BL(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    BL(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  if (row_major) {
    int32_t order = CUBLASLT_ORDER_ROW;
    BL(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
  }
}

/* One element of A or B: uniform in [-amp, amp], or with a span a random
 * sign and a magnitude log-uniform over it. */
static double operand_value(const spec *s, double amp, uint64_t *rng) {
  if (s->span_hi <= 0) return amp * uniform(rng);
  double u = uniform(rng), mag = exp(log(s->span_lo) + (0.5 * (uniform(rng) + 1)) * log(s->span_hi / s->span_lo));
  return u < 0 ? -mag : mag;
}

/* apat/bpat and rowexp/colexp over the random values, line by line of
 * op(A) and op(B), every stored member. */
static void shape_operands(gemm *g) {
  const spec *s = &g->s;
  for (int w = 0; w < 2; w++) {
    if (!s->npat[w] && !s->nlexp[w]) continue;
    const int64_t lines = w ? s->n : s->m;
    const int trans = (w ? s->tb : s->ta) != CUBLAS_OP_N;
    for (int64_t bm = 0; bm < s->batch; bm++)
      for (int64_t i = 0; i < lines; i++)
        for (int64_t l = 0; l < s->k; l++) {
          /* op(A)(i, l) is A(i, l) or A(l, i); op(B)(l, j) is B(l, j) or B(j, l). */
          size_t idx = w == 0 ? (trans ? at(g, bm, g->sa, g->lda, l, i) : at(g, bm, g->sa, g->lda, i, l))
                              : (trans ? at(g, bm, g->sb, g->ldb, i, l) : at(g, bm, g->sb, g->ldb, l, i));
          void *mem = w ? g->b.host : g->a.host;
          double v = s->npat[w] ? s->pat[w][(i * s->k + l) % s->npat[w]] : get(s->ab, mem, idx);
          if (s->nlexp[w]) v = ldexp(v, s->lexp[w][i % s->nlexp[w]]);
          put(s->ab, mem, idx, v);
        }
  }
}

/* Buffers, data and descriptors; nosync: stream-ordered fills, no copies. */
static void gemm_prepare(gemm *g, const spec *s, uint64_t seed, CUstream stream, int nosync) {
  memset(g, 0, sizeof *g);
  g->s = *s;
  gemm_shape(g);
  uint64_t rng = seed;
  buf_alloc(&g->a, g->na * tsize(s->ab));
  buf_alloc(&g->b, g->nb * tsize(s->ab));
  buf_alloc(&g->c, g->nc * tsize(s->c));
  if (s->oop) buf_alloc(&g->d, g->nd * tsize(s->c));
  if (has_bias(s)) buf_alloc(&g->bias, g->nbias * tsize(bias_type_of(s)));
  buf_alloc(&g->scalars, 2 * sizeof(float));
  g->host_scalars[0] = s->alpha, g->host_scalars[1] = s->beta;
  memcpy(g->scalars.host, g->host_scalars, sizeof g->host_scalars);
  if (nosync) {
    /* 1.0 in every format the buffer holds; NaN where nothing may be read. */
    uint32_t one16 = s->ab == CUDA_R_16F ? 0x3c003c00u : 0x3f803f80u;
    fill_pattern(&g->a, s->ab == CUDA_R_32F ? 0x3f800000u : one16, stream);
    fill_pattern(&g->b, s->ab == CUDA_R_32F ? 0x3f800000u : one16, stream);
    uint32_t c_one = s->c == CUDA_R_32F ? 0x3f800000u : s->c == CUDA_R_16F ? 0x3c003c00u : 0x3f803f80u;
    fill_pattern(&g->c, s->beta != 0.0f ? c_one : 0xffffffffu, stream);
    if (s->oop) fill_pattern(&g->d, 0xffffffffu, stream);
    if (g->bias.dev) fill_pattern(&g->bias, 0, stream);
    uint32_t w[2];
    memcpy(w, g->host_scalars, sizeof w);
    CU(drv.cuMemsetD32Async(g->scalars.dev, w[0], 1, stream));
    CU(drv.cuMemsetD32Async(g->scalars.dev + 4, w[1], 1, stream));
  } else {
    double ampb = s->ampb < 0 ? s->amp : s->ampb;
    for (size_t i = 0; i < g->na; i++) put(s->ab, g->a.host, i, operand_value(s, s->amp, &rng));
    for (size_t i = 0; i < g->nb; i++) put(s->ab, g->b.host, i, operand_value(s, ampb, &rng));
    shape_operands(g);
    if (s->special[0] != 0) put(s->ab, g->a.host, 0, s->special[0]);
    if (s->special[1] != 0) put(s->ab, g->b.host, 0, s->special[1]);
    /* C: values where beta may be read, NaN everywhere when it must not be. */
    for (size_t i = 0; i < g->nc; i++) {
      if (s->beta != 0.0f) put(s->c, g->c.host, i, uniform(&rng));
      else poison(s->c, g->c.host, i);
    }
    if (s->oop)
      for (size_t i = 0; i < g->nd; i++) poison(s->c, g->d.host, i);
    if (g->bias.dev)
      for (size_t i = 0; i < g->nbias; i++) put(bias_type_of(s), g->bias.host, i, 0.5 * uniform(&rng));
    buf *up[] = {&g->a, &g->b, &g->c, &g->d, &g->bias, &g->scalars};
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++)
      if (up[i]->dev) CU(drv.cuMemcpyHtoD_v2(up[i]->dev, up[i]->host, up[i]->bytes));
  }
  if (is_ptr_array(s->api)) {
    buf_alloc(&g->ptrs, 3 * (size_t)s->batch * sizeof(CUdeviceptr));
    CUdeviceptr *p = g->ptrs.host;
    for (int64_t b = 0; b < s->batch; b++) {
      p[b] = g->a.dev + (CUdeviceptr)(a_member(g, b) * g->sa) * tsize(s->ab);
      p[s->batch + b] = g->b.dev + (CUdeviceptr)(b * g->sb) * tsize(s->ab);
      p[2 * s->batch + b] = g->c.dev + (CUdeviceptr)(b * g->sc) * tsize(s->c);
    }
    /* The pointer arrays must be uploaded whatever the mode: a
     * synchronous copy, so --nosync refuses pointer-array batches. */
    if (nosync) die("--nosync with a pointer-array batch", 0);
    CU(drv.cuMemcpyHtoD_v2(g->ptrs.dev, g->ptrs.host, g->ptrs.bytes));
  }
  if (s->api == API_LT) {
    BL(cublasLtMatmulDescCreate(&g->desc, s->compute, s->scale));
    int32_t ta = s->ta, tb = s->tb;
    int32_t pm = s->device_scalars ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
    uint32_t epi = (uint32_t)s->epilogue;
    BL(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    BL(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    BL(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm));
    BL(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g->bias.dev) {
      const void *bp = (const void *)(uintptr_t)g->bias.dev;
      BL(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
      if (s->bias_type != -1) {
        int32_t bt = s->bias_type;
        BL(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
      }
      if (s->bias_stride) {
        int64_t bs = s->bias_stride;
        BL(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bs, sizeof bs));
      }
    }
    /* Each attribute's storage is the loaded library's: asked with the
     * size query (cublasLtMatmulDescGetAttribute, sizeInBytes 0), so ids
     * of other releases (cuBLAS 12's 27-30, 13.10's 39-41) take their own
     * sizes. An id the library does not know is set as an int32, for the
     * library's own refusal. */
    for (int i = 0; i < s->ndattr; i++) {
      int id = s->dattr[i].id;
      size_t size = 0;
      int wide = cublasLtMatmulDescGetAttribute(g->desc, (cublasLtMatmulDescAttributes_t)id, NULL, 0, &size) ==
                     CUBLAS_STATUS_SUCCESS &&
                 size == 8;
      int32_t v32 = (int32_t)s->dattr[i].value;
      int64_t v64 = s->dattr[i].value;
      BL(cublasLtMatmulDescSetAttribute(g->desc, (cublasLtMatmulDescAttributes_t)id, wide ? (void *)&v64 : (void *)&v32,
                                        wide ? sizeof v64 : sizeof v32));
    }
    layout_make(&g->la, s->ab, g->a_rows, g->a_cols, g->lda, s->batch, g->sa, s->row_major, s->ptr_array_mode);
    layout_make(&g->lb, s->bt, g->b_rows, g->b_cols, g->ldb, s->batch, g->sb, s->row_major, s->ptr_array_mode);
    layout_make(&g->lc, s->c, s->m, s->n, g->ldc, s->batch, g->sc, s->row_major, s->ptr_array_mode);
    layout_make(&g->ld, s->dt, s->m, s->n, g->ldd, s->batch, g->sd, s->row_major, s->ptr_array_mode);
  }
}

static void gemm_release(gemm *g) {
  if (g->desc) {
    BL(cublasLtMatrixLayoutDestroy(g->la));
    BL(cublasLtMatrixLayoutDestroy(g->lb));
    BL(cublasLtMatrixLayoutDestroy(g->lc));
    BL(cublasLtMatrixLayoutDestroy(g->ld));
    BL(cublasLtMatmulDescDestroy(g->desc));
  }
  buf *all[] = {&g->a, &g->b, &g->c, &g->d, &g->bias, &g->ptrs, &g->scalars};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) buf_free(all[i]);
}

static int math_now(cublasHandle_t h) {
  cublasMath_t m;
  return cublasGetMathMode(h, &m) == CUBLAS_STATUS_SUCCESS ? (int)m : -1;
}

static void gemm_issue(gemm *g, session *x) {
  const spec *s = &g->s;
  cublasHandle_t h = x->h;
  const void *alpha = s->device_scalars ? (const void *)(uintptr_t)g->scalars.dev : (const void *)&g->host_scalars[0];
  const void *beta =
      s->device_scalars ? (const void *)(uintptr_t)(g->scalars.dev + 4) : (const void *)&g->host_scalars[1];
  const void *A = (const void *)(uintptr_t)g->a.dev, *B = (const void *)(uintptr_t)g->b.dev;
  void *C = (void *)(uintptr_t)g->c.dev;
  CUdeviceptr pa = g->ptrs.dev, pn = (CUdeviceptr)s->batch * sizeof(CUdeviceptr);
  const void *const *PA = (const void *const *)(uintptr_t)pa;
  const void *const *PB = (const void *const *)(uintptr_t)(pa + pn);
  void *const *PC = (void *const *)(uintptr_t)(pa + 2 * pn);
  cublasGemmAlgo_t algo = (cublasGemmAlgo_t)s->algo;
  g->math_before = g->math_after = -1;
  if (s->api != API_LT) {
    BL(cublasSetPointerMode(h, s->device_scalars ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST));
    if (s->math != MATH_UNCHANGED) BL(cublasSetMathMode(h, (cublasMath_t)s->math));
    g->math_before = math_now(h);
  }
  int m = (int)s->call_m, n = (int)s->call_n, k = (int)s->call_k, batch = (int)s->call_batch;
  int64_t sa = s->call_sab == INT64_MIN ? g->sa : s->call_sab, sb = s->call_sab == INT64_MIN ? g->sb : s->call_sab;
  switch (s->api) {
  case API_EX:
    g->status = cublasGemmEx(h, s->ta, s->tb, m, n, k, alpha, A, s->ab, (int)g->lda, B, s->bt, (int)g->ldb, beta, C,
                             s->c, (int)g->ldc, s->compute, algo);
    break;
  case API_EX64:
    g->status = cublasGemmEx_64(h, s->ta, s->tb, s->call_m, s->call_n, s->call_k, alpha, A, s->ab, g->lda, B, s->bt,
                                g->ldb, beta, C, s->c, g->ldc, s->compute, algo);
    break;
  case API_STRIDED:
    g->status = cublasGemmStridedBatchedEx(h, s->ta, s->tb, m, n, k, alpha, A, s->ab, (int)g->lda, sa, B, s->bt,
                                           (int)g->ldb, sb, beta, C, s->c, (int)g->ldc, g->sc, batch, s->compute,
                                           algo);
    break;
  case API_STRIDED64:
    g->status = cublasGemmStridedBatchedEx_64(h, s->ta, s->tb, s->call_m, s->call_n, s->call_k, alpha, A, s->ab,
                                              g->lda, sa, B, s->bt, g->ldb, sb, beta, C, s->c, g->ldc, g->sc,
                                              s->call_batch, s->compute, algo);
    break;
  case API_BATCHED:
    g->status = cublasGemmBatchedEx(h, s->ta, s->tb, m, n, k, alpha, PA, s->ab, (int)g->lda, PB, s->bt, (int)g->ldb,
                                    beta, PC, s->c, (int)g->ldc, batch, s->compute, algo);
    break;
  case API_BATCHED64:
    g->status = cublasGemmBatchedEx_64(h, s->ta, s->tb, s->call_m, s->call_n, s->call_k, alpha, PA, s->ab, g->lda,
                                       PB, s->bt, g->ldb, beta, PC, s->c, g->ldc, s->call_batch, s->compute, algo);
    break;
  default:
    g->status = cublasLtMatmul(x->lt, g->desc, alpha, A, g->la, B, g->lb, beta, C, g->lc,
                               s->oop ? (void *)(uintptr_t)g->d.dev : C, g->ld, NULL, (void *)(uintptr_t)x->ws,
                               x->ws_size, (cudaStream_t)x->stream);
    break;
  }
  if (s->api != API_LT) g->math_after = math_now(h);
}

static double gelu(double v) { return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

/* Bound on |result - reference|: the output's rounding (one unit in the
 * last place, relative) plus fp32 accumulation of k terms, scaled by the
 * magnitude of everything summed. */
static int fp8_tolerance; /* --fp8 */
static const char *dump_dir; /* --dump */

/* --dump: the output buffer as the call left it, raw, to DIR/<name>.out. */
static void dump_output(const gemm *g, const void *out, size_t bytes) {
  if (!dump_dir) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.out", dump_dir, g->s.name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(out, 1, bytes, f) != bytes || fclose(f)) die("--dump: cannot write the output", 0);
}

static double bound(cudaDataType out, int64_t k, double ref, double mag) {
  if (fp8_tolerance) return 0.13 * mag + 0x1p-8 * fabs(ref) + 1e-30;
  double rel = out == CUDA_R_32F ? 0x1p-22 : out == CUDA_R_16F ? 0x1p-10 : 0x1p-8;
  double sub = out == CUDA_R_16F ? 0x1p-24 : 0.0; /* fp16 subnormal spacing */
  return rel * fabs(ref) + 4.0 * (double)(k + 2) * 0x1p-24 * mag + sub + 1e-30;
}

/* v rounded to bf16 (8 significant bits) or fp16 (11, subnormal spacing
 * 2^-24, largest finite 65504), nearest even, overflow to infinity: IEEE
 * 754 roundTiesToEven on the value, by nearbyint in the default rounding
 * mode, not by the shim's conversion code. */
static double round_to(cudaDataType t, double v) {
  if (v == 0 || !isfinite(v)) return v;
  const int bits = t == CUDA_R_16F ? 11 : 8;
  int e = ilogb(v);
  if (t == CUDA_R_16F && e < -14) e = -14; /* fp16 subnormals: fixed spacing */
  double q = ldexp(nearbyint(ldexp(v, bits - 1 - e)), e - (bits - 1));
  const double max = t == CUDA_R_16F ? 65504.0 : 0x1.fep127;
  return fabs(q) > max ? copysign(INFINITY, q) : q;
}

/* The split model of one element (exact=1): NaN when float64 cannot hold
 * the fp32 sum exactly (the model would round twice). */
static double split_model(const spec *s, double acc, double cv) {
  double r = (float)((double)s->alpha * acc); /* alpha * AB rounded once to fp32 */
  if (s->beta == 0.0f) return round_to(s->c, r);
  double p = (double)s->beta * cv, sum = r + p;
  /* Two-sum (Knuth): sum is exact iff the error term is 0. */
  double bb = sum - r, err = (r - (sum - bb)) + (p - bb);
  if (err != 0) return NAN;
  return round_to(s->c, (float)sum);
}

static void gemm_check(gemm *g) {
  const spec *s = &g->s;
  buf *outb = s->oop ? &g->d : &g->c;
  /* The result is laid out as D's descriptor says (out of place). */
  int64_t ldo = s->oop ? g->ldd : g->ldc, so = s->oop ? g->sd : g->sc;
  size_t no = s->oop ? g->nd : g->nc;
  void *out = malloc(outb->bytes);
  if (!out) die("malloc", 0);
  CU(drv.cuMemcpyDtoH_v2(out, outb->dev, outb->bytes));
  dump_output(g, out, outb->bytes);
  g->maxerr = -1;
  g->sqnr = NAN;
  g->nonfinite = -1;
  if (g->status != CUBLAS_STATUS_SUCCESS) {
    /* A refused call writes nothing. */
    g->ok = !memcmp(out, outb->host, outb->bytes);
  } else {
    char *is_result = calloc(no, 1);
    if (!is_result) die("calloc", 0);
    FILE *dump = s->dump[0] ? fopen(s->dump, "wb") : NULL;
    if (s->dump[0] && !dump) die("fopen dump", 0);
    g->ok = 1;
    g->maxerr = 0;
    g->nonfinite = 0;
    double signal = 0, noise = 0;
    const int64_t sa = s->call_sab == INT64_MIN ? g->sa : s->call_sab;
    const int64_t sb = s->call_sab == INT64_MIN ? g->sb : s->call_sab;
    cudaDataType bt = bias_type_of(s);
    /* The sizes the call was given, where smaller (a zero-sized call
     * computes nothing, or only beta C for k = 0). */
    const int64_t M = s->call_m < s->m ? s->call_m : s->m, N = s->call_n < s->n ? s->call_n : s->n;
    const int64_t K = s->call_k < s->k ? s->call_k : s->k, NB = s->call_batch < s->batch ? s->call_batch : s->batch;
    for (int64_t b = 0; b < NB; b++)
      for (int64_t j = 0; j < N; j++)
        for (int64_t i = 0; i < M; i++) {
          double acc = 0, mag = 0;
          for (int64_t l = 0; l < K; l++) {
            size_t ai = s->ta == CUBLAS_OP_N ? at(g, a_member(g, b), sa, g->lda, i, l)
                                             : at(g, a_member(g, b), sa, g->lda, l, i);
            size_t bi = s->tb == CUBLAS_OP_N ? at(g, b, sb, g->ldb, l, j) : at(g, b, sb, g->ldb, j, l);
            double p = get(s->ab, g->a.host, ai) * get(s->ab, g->b.host, bi);
            acc += p;
            mag += fabs(p);
          }
          size_t ci = at(g, b, g->sc, g->ldc, i, j);
          double ref = (double)s->alpha * acc;
          mag *= fabs((double)s->alpha);
          if (s->beta != 0.0f) {
            double cv = (double)s->beta * get(s->c, g->c.host, ci);
            ref += cv;
            mag += fabs(cv);
          }
          if (has_bias(s)) {
            double bv = get(bt, g->bias.host, (size_t)(b * s->bias_stride + i));
            ref += bv;
            mag += fabs(bv);
          }
          int e = s->api == API_LT ? s->epilogue : CUBLASLT_EPILOGUE_DEFAULT;
          if (e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS) ref = ref > 0 ? ref : 0;
          if (e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS) ref = gelu(ref);
          size_t oi = at(g, b, so, ldo, i, j);
          double got = get(s->c, out, oi);
          g->nonfinite += !isfinite(got);
          is_result[oi] = 1;
          if (dump) {
            const double rec[3] = {got, ref, isfinite(ref) ? bound(s->c, K, ref, mag) : NAN};
            if (fwrite(rec, sizeof rec, 1, dump) != 1) die("fwrite dump", 0);
          }
          if (!isfinite(ref)) {
            /* Inf or NaN in the operands: the same Inf, or a NaN. */
            if (isnan(ref) ? !isnan(got) : got != ref) g->ok = 0;
            continue;
          }
          double err = fabs(got - ref);
          if (!(err <= bound(s->c, K, ref, mag))) g->ok = 0;
          if (s->exact && got != split_model(s, acc, get(s->c, g->c.host, ci))) g->ok = 0;
          signal += ref * ref;
          noise += err * err;
          if (isnan(err) || err > g->maxerr) g->maxerr = err;
        }
    if (dump && fclose(dump)) die("fclose dump", 0);
    g->sqnr = noise > 0 ? 10.0 * log10(signal / noise) : INFINITY;
    if (fp8_tolerance && noise > 0 && !(g->sqnr >= 25.0)) g->ok = 0;
    size_t es = tsize(s->c);
    for (size_t i = 0; i < no; i++)
      if (!is_result[i] && memcmp((char *)out + i * es, (char *)outb->host + i * es, es)) g->ok = 0;
    free(is_result);
  }
  if (s->oop) { /* C is an input only */
    void *c_after = malloc(g->c.bytes);
    if (!c_after) die("malloc", 0);
    CU(drv.cuMemcpyDtoH_v2(c_after, g->c.dev, g->c.bytes));
    if (memcmp(c_after, g->c.host, g->c.bytes)) g->ok = 0;
    free(c_after);
  }
  free(out);
}

static void format_line(char *line, size_t len, const char *index, const gemm *g, int checked) {
  char err[32] = "-", math[32] = "-", sqnr[32] = "-", nonfinite[32] = "-";
  if (g->maxerr >= 0 || isnan(g->maxerr)) snprintf(err, sizeof err, "%.3e", g->maxerr);
  if (g->s.api != API_LT) snprintf(math, sizeof math, "%d/%d", g->math_before, g->math_after);
  if (checked && isinf(g->sqnr)) snprintf(sqnr, sizeof sqnr, "inf");
  else if (checked && !isnan(g->sqnr)) snprintf(sqnr, sizeof sqnr, "%.3f", g->sqnr);
  if (checked && g->nonfinite >= 0) snprintf(nonfinite, sizeof nonfinite, "%lld", g->nonfinite);
  snprintf(line, len, "call %s name=%s api=%s status=%d ok=%d maxerr=%s math=%s sqnr=%s nonfinite=%s", index,
           g->s.name, api_names[g->s.api], g->status, checked ? g->ok : g->status == CUBLAS_STATUS_SUCCESS, err,
           math, sqnr, nonfinite);
}

/* ---- modes --------------------------------------------------------------------------- */
typedef struct options {
  spec *specs;
  int nspecs;
  stream_kind stream;
  int capture_from; /* -1: none */
  int reset_after;  /* -1: none */
  int reset_every;  /* 0: none */
  int streams;      /* 0: one */
  int one_at_a_time; /* threads run one after another */
  int threads, iters;
  int nosync;
  uint64_t seed;
  const char *wait_log; /* NULL: none */
  const char *side_capture; /* NULL: none */
} options;

static int report(const char *index, gemm *g, int checked) {
  char line[512];
  format_line(line, sizeof line, index, g, checked);
  printf("%s\n", line);
  fflush(stdout);
  return checked ? g->ok : g->status == CUBLAS_STATUS_SUCCESS;
}

static void retain_primary(void) {
  CU(drv.cuDevicePrimaryCtxRetain(&g_ctx, g_dev));
  CU(drv.cuCtxSetCurrent(g_ctx));
}

/* --streams: the session's other streams, alive until closed. */
static CUstream *streams_open(const options *op) {
  if (op->streams < 1) return NULL;
  CUstream *all = calloc((size_t)op->streams, sizeof *all);
  if (!all) die("calloc", 0);
  for (int i = 0; i < op->streams; i++) CU(drv.cuStreamCreate(&all[i], CU_STREAM_NON_BLOCKING));
  return all;
}

static void streams_close(const options *op, CUstream *all) {
  for (int i = 0; all && i < op->streams; i++) CU(drv.cuStreamDestroy_v2(all[i]));
  free(all);
}

static int run_sequential(const options *op) {
  session x;
  session_open(&x, op->stream, NULL);
  CUstream *streams = streams_open(op), own = x.stream;
  int failed = 0;
  int eager_end = op->capture_from >= 0 ? op->capture_from : op->nspecs;
  for (int i = 0; i < eager_end; i++) {
    if (i == op->reset_after || (op->reset_every > 0 && i > 0 && i % op->reset_every == 0)) {
      /* What a device reset does: nothing of the old context survives. */
      x.stream = own;
      streams_close(op, streams);
      session_close(&x);
      CU(drv.cuDevicePrimaryCtxRelease_v2(g_dev));
      retain_primary();
      session_open(&x, op->stream, NULL);
      streams = streams_open(op);
      own = x.stream;
      printf("reset before=%d\n", i);
    }
    if (streams) {
      x.stream = streams[i % op->streams];
      BL(cublasSetStream(x.h, (cudaStream_t)x.stream));
    }
    gemm g;
    uint64_t seed = op->specs[i].seed ? op->specs[i].seed : op->seed + (uint64_t)i;
    gemm_prepare(&g, &op->specs[i], seed, x.stream, op->nosync);
    gemm_issue(&g, &x);
    char idx[16];
    snprintf(idx, sizeof idx, "%d", i);
    if (!op->nosync) {
      CU(drv.cuStreamSynchronize(x.stream));
      gemm_check(&g);
    }
    failed += !report(idx, &g, !op->nosync);
    gemm_release(&g);
    if (op->wait_log && !client_log_wait(op->wait_log, i + 1))
      die("--wait-log: the log never reached the line count", 0);
  }
  if (op->side_capture) {
    CUstream side;
    CU(drv.cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
    CUresult begin = drv.cuStreamBeginCapture_v2(side, CU_STREAM_CAPTURE_MODE_GLOBAL);
    if (!client_log_wait(op->side_capture, eager_end)) die("--wait-log: the log never reached the line count", 0);
    CUgraph graph = NULL;
    CUresult end = drv.cuStreamEndCapture(side, &graph);
    if (graph) CU(drv.cuGraphDestroy(graph));
    CU(drv.cuStreamDestroy_v2(side));
    printf("side capture begin=%d end=%d\n", (int)begin, (int)end);
    if (begin || end) failed++;
  }
  if (op->capture_from >= 0) {
    int n = op->nspecs - op->capture_from;
    gemm *gs = calloc((size_t)n, sizeof *gs);
    if (!gs) die("calloc", 0);
    for (int i = 0; i < n; i++)
      gemm_prepare(&gs[i], &op->specs[op->capture_from + i], op->seed + (uint64_t)(op->capture_from + i), x.stream, 0);
    CU(drv.cuStreamSynchronize(x.stream));
    CUresult begin = drv.cuStreamBeginCapture_v2(x.stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    for (int i = 0; i < n; i++) gemm_issue(&gs[i], &x);
    CUgraph graph = NULL;
    CUresult end = drv.cuStreamEndCapture(x.stream, &graph);
    CUresult launch = CUDA_SUCCESS;
    if (end == CUDA_SUCCESS && drv.cuGraphInstantiateWithFlags && drv.cuGraphLaunch && drv.cuGraphExecDestroy) {
      CUgraphExec exec;
      launch = drv.cuGraphInstantiateWithFlags(&exec, graph, 0);
      if (launch == CUDA_SUCCESS) {
        launch = drv.cuGraphLaunch(exec, x.stream);
        CU(drv.cuStreamSynchronize(x.stream));
        CU(drv.cuGraphExecDestroy(exec));
      }
    }
    if (graph) CU(drv.cuGraphDestroy(graph));
    printf("capture begin=%d end=%d launch=%d\n", (int)begin, (int)end, (int)launch);
    if (begin || end || launch) failed++;
    CU(drv.cuStreamSynchronize(x.stream));
    for (int i = 0; i < n; i++) {
      char idx[16];
      snprintf(idx, sizeof idx, "%d", op->capture_from + i);
      gemm_check(&gs[i]);
      failed += !report(idx, &gs[i], 1);
      gemm_release(&gs[i]);
    }
    free(gs);
  }
  x.stream = own;
  BL(cublasSetStream(x.h, (cudaStream_t)x.stream));
  streams_close(op, streams);
  session_close(&x);
  return failed;
}

typedef struct worker {
  const options *op;
  int t;
  CUstream shared;
  char (*lines)[512];
  int failed;
} worker;

/* Every thread holds its handles and stream from before the first call
 * until after the last, so no two threads' streams can be one reused
 * address. */
static pthread_barrier_t all_open, all_done;

static void *worker_main(void *arg) {
  worker *w = arg;
  const options *op = w->op;
  session x;
  session_open(&x, op->stream, w->shared);
  pthread_barrier_wait(&all_open);
  for (int j = 0; j < op->iters; j++)
    for (int i = 0; i < op->nspecs; i++) {
      int slot = j * op->nspecs + i;
      gemm g;
      gemm_prepare(&g, &op->specs[i], op->seed + ((uint64_t)w->t << 32) + (uint64_t)slot, x.stream, 0);
      gemm_issue(&g, &x);
      CU(drv.cuStreamSynchronize(x.stream));
      gemm_check(&g);
      char idx[32];
      snprintf(idx, sizeof idx, "%d.%d", w->t, slot);
      format_line(w->lines[slot], sizeof w->lines[slot], idx, &g, 1);
      w->failed += !g.ok;
      gemm_release(&g);
    }
  pthread_barrier_wait(&all_done);
  session_close(&x);
  return NULL;
}

static int run_threads(const options *op) {
  CUstream shared = NULL;
  if (op->stream == STREAM_SHARED) CU(drv.cuStreamCreate(&shared, CU_STREAM_NON_BLOCKING));
  pthread_t *tid = calloc((size_t)op->threads, sizeof *tid);
  worker *ws = calloc((size_t)op->threads, sizeof *ws);
  if (!tid || !ws) die("calloc", 0);
  unsigned together = op->one_at_a_time ? 1u : (unsigned)op->threads;
  if (pthread_barrier_init(&all_open, NULL, together) || pthread_barrier_init(&all_done, NULL, together))
    die("pthread_barrier_init", 0);
  for (int t = 0; t < op->threads; t++) {
    ws[t] = (worker){op, t, shared, calloc((size_t)(op->iters * op->nspecs), 512), 0};
    if (!ws[t].lines || pthread_create(&tid[t], NULL, worker_main, &ws[t])) die("pthread_create", 0);
    /* --one-at-a-time: each thread exits before the next starts. */
    if (op->one_at_a_time) pthread_join(tid[t], NULL);
  }
  int failed = 0;
  for (int t = 0; t < op->threads; t++) {
    if (!op->one_at_a_time) pthread_join(tid[t], NULL);
    for (int j = 0; j < op->iters * op->nspecs; j++) printf("%s\n", ws[t].lines[j]);
    failed += ws[t].failed;
    free(ws[t].lines);
  }
  if (shared) CU(drv.cuStreamDestroy_v2(shared));
  pthread_barrier_destroy(&all_open);
  pthread_barrier_destroy(&all_done);
  free(ws);
  free(tid);
  return failed;
}

int main(int argc, char **argv) {
  options op = {.stream = STREAM_OWN, .capture_from = -1, .reset_after = -1, .seed = 1};
  op.specs = calloc((size_t)argc, sizeof *op.specs);
  if (!op.specs) die("calloc", 0);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "--gemm=", 7)) {
      if (parse_spec(a + 7, op.nspecs, &op.specs[op.nspecs])) return EXIT_SETUP;
      op.nspecs++;
    } else if (!strcmp(a, "--stream=own")) op.stream = STREAM_OWN;
    else if (!strcmp(a, "--stream=legacy")) op.stream = STREAM_LEGACY;
    else if (!strcmp(a, "--stream=per-thread")) op.stream = STREAM_PER_THREAD;
    else if (!strcmp(a, "--stream=shared")) op.stream = STREAM_SHARED;
    else if (!strncmp(a, "--capture-from=", 15)) op.capture_from = atoi(a + 15);
    else if (!strncmp(a, "--reset-after=", 14)) op.reset_after = atoi(a + 14);
    else if (!strncmp(a, "--reset-every=", 14)) op.reset_every = atoi(a + 14);
    else if (!strncmp(a, "--streams=", 10)) op.streams = atoi(a + 10);
    else if (!strcmp(a, "--one-at-a-time")) op.one_at_a_time = 1;
    else if (!strncmp(a, "--threads=", 10)) op.threads = atoi(a + 10);
    else if (!strncmp(a, "--iters=", 8)) op.iters = atoi(a + 8);
    else if (!strncmp(a, "--seed=", 7)) op.seed = strtoull(a + 7, NULL, 0);
    else if (!strcmp(a, "--nosync")) op.nosync = 1;
    else if (!strncmp(a, "--wait-log=", 11)) op.wait_log = a + 11;
    else if (!strncmp(a, "--dump=", 7)) dump_dir = a + 7;
    else if (!strncmp(a, "--side-capture=", 15)) op.side_capture = a + 15;
    else if (!strcmp(a, "--fp8")) fp8_tolerance = 1;
    else if (!strncmp(a, "--setenv=", 9) && strchr(a + 9, '=') > a + 9) {
      char name[128];
      const size_t n = (size_t)(strchr(a + 9, '=') - (a + 9));
      if (n >= sizeof name) die("--setenv: name too long", 0);
      memcpy(name, a + 9, n), name[n] = '\0';
      if (setenv(name, a + 9 + n + 1, 1)) die("setenv", 0);
    } else {
      fprintf(stderr, "ffma_client: unknown option %s (see the top of ffma_client.c)\n", a);
      return EXIT_SETUP;
    }
  }
  if (!op.nspecs || (op.threads > 0) != (op.iters > 0) || (op.capture_from >= 0 && op.capture_from > op.nspecs) ||
      (op.nosync && (op.capture_from >= 0 || op.threads)) || (op.stream == STREAM_SHARED && !op.threads) ||
      (op.streams && (op.threads || op.stream != STREAM_OWN || op.capture_from >= 0)) ||
      (op.one_at_a_time && !op.threads) || (op.side_capture && (op.threads || op.nosync))) {
    fprintf(stderr, "ffma_client: inconsistent options\n");
    return EXIT_SETUP;
  }
  driver_load();
  CU(drv.cuInit(0));
  CU(drv.cuDeviceGet(&g_dev, 0));
  retain_primary();
  int failed = op.threads ? run_threads(&op) : run_sequential(&op);
  printf("summary failed=%d\n", failed);
  free(op.specs);
  return failed ? 1 : 0;
}
