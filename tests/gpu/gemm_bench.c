/* gemm_bench.c: a shim route against its baseline, timed in one process on
 * one stream, so the ratio compares like with like (same GPU, clocks,
 * driver, operands).
 *
 * The two sides are told apart by entry point: the route under test is
 * called through cublasGemmEx, the baseline through cublasGemmEx_64, and
 * gpu-check.sh's policy file sends them to different routes
 *     <route> api=cublasGemmEx
 *     native  api=cublasGemmEx_64
 * The routing log then proves which route each call took (summarize_log.py
 * --expect), and the {"kind":"calls"} record says how many calls each side
 * made, so the log can be checked to hold every one.
 *
 * Pairs (A: cublasGemmEx, B: cublasGemmEx_64), operands bf16 unless said:
 *   ffma-bf16   A ffma route         B native bf16 on the same operands
 *   ffma-sgemm  A ffma route         B fp32 sgemm on the same values in fp32
 *                                      (the casts' cost; goal A/B <= 1.10)
 *   fp8-bf16    A fp8 route          B native bf16 (quantization included in A)
 *   fp16-bf16   A fp16 route         B native bf16 (amax, cast and output
 *                                      kernels included in A; its speed
 *                                      counts on sm_70-75 only)
 * Layout: transa=T, transb=N, C bf16, alpha 1, beta 0 - nn.Linear's forward
 * as PyTorch calls it.
 *
 * Method: warm-up calls, one call each to size the loop, then --reps samples
 * per side, alternating A and B so drift hits both; a sample is enough calls
 * between two events to take about --target-ms; the median sample is
 * reported. --trace adds, after every shape was timed, a pass with CUPTI
 * kernel tracing on: the shim's own kernels (names starting "gs_", GEMM
 * kernels excluded) are timed from their records, and their bandwidth is set
 * against a device-to-device copy timed here before CUPTI was loaded. */
#define _GNU_SOURCE
#include <cublas_v2.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_common.h"
#include "kernel_trace.h"

/* Napkin ceilings printed next to the numbers, for an H200 (on another GPU
 * only a scale): NVIDIA's dense peaks (datasheet), torch's bf16 8192^2
 * matmul measured on an H100 by zzc0721/torch-performance-test-data #79,
 * and ~90% of the 4.8 TB/s nominal bandwidth: estimates, not measurements. */
#define PEAK_BF16_TFLOPS 989.0
#define H100_BF16_8192_TFLOPS 790.0
#define PEAK_FP8_TFLOPS 1979.0
#define ESTIMATED_COPY_TBS 4.3

typedef enum pair_kind { PAIR_FFMA_BF16, PAIR_FFMA_SGEMM, PAIR_FP8_BF16, PAIR_FP16_BF16 } pair_kind;

typedef struct pair_def {
  const char *name;
  const char *label_a, *label_b;
  const char *route;          /* the route A must take */
  double ceiling_a, ceiling_b; /* TFLOP/s; 0 = none printed */
  int b_fp32;                 /* B runs on fp32 copies of the operands */
} pair_def;

static const pair_def pairs[] = {
    [PAIR_FFMA_BF16] = {"ffma-bf16", "ffma route", "native bf16", "ffma", 0.0, PEAK_BF16_TFLOPS, 0},
    [PAIR_FFMA_SGEMM] = {"ffma-sgemm", "ffma route", "sgemm fp32", "ffma", 0.0, 0.0, 1},
    [PAIR_FP8_BF16] = {"fp8-bf16", "fp8 route", "native bf16", "fp8", PEAK_FP8_TFLOPS, PEAK_BF16_TFLOPS, 0},
    [PAIR_FP16_BF16] = {"fp16-bf16", "fp16 route", "native bf16", "fp16", 0.0, PEAK_BF16_TFLOPS, 0},
};

typedef struct shape {
  int64_t m, n, k;
} shape;

typedef struct bench_opts {
  pair_kind pair;
  shape shapes[16];
  int n_shapes;
  int reps, warmup;
  double target_ms;
  int trace;
  double copy_mib;
  double max_seconds;
  const char *json_path;
} bench_opts;

typedef struct bench_state {
  gpu_device dev;
  cublasHandle_t h;
  FILE *json;
  long calls_a, calls_b; /* every cublasGemmEx / cublasGemmEx_64 call made */
  double copy_gbs;       /* device copy, read+write bytes per second / 1e9 */
} bench_state;

/* One side's call: everything it needs, so a gpu_work_fn can issue it. */
typedef struct side_call {
  bench_state *st;
  int use_64;
  int64_t m, n, k;
  const void *A, *B;
  void *C;
  cudaDataType ab, c;
} side_call;

static int issue_side(void *arg) {
  side_call *s = arg;
  static const float one = 1.0f, zero = 0.0f;
  cublasStatus_t r;
  /* TN: A is stored k x m, B k x n (ld = k), C m x n. */
  if (s->use_64) {
    r = cublasGemmEx_64(s->st->h, CUBLAS_OP_T, CUBLAS_OP_N, s->m, s->n, s->k, &one, s->A, s->ab, s->k, s->B,
                        s->ab, s->k, &zero, s->C, s->c, s->m, CUBLAS_COMPUTE_32F,
                        s->ab == CUDA_R_32F ? CUBLAS_GEMM_DEFAULT : CUBLAS_GEMM_DEFAULT_TENSOR_OP);
    s->st->calls_b++;
  } else {
    r = cublasGemmEx(s->st->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)s->m, (int)s->n, (int)s->k, &one, s->A, s->ab,
                     (int)s->k, s->B, s->ab, (int)s->k, &zero, s->C, s->c, (int)s->m, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT_TENSOR_OP);
    s->st->calls_a++;
  }
  return (int)r;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- device copy ------------------------------------------------------------ */
typedef struct copy_call {
  CUdeviceptr dst, src;
  size_t bytes;
  CUstream stream;
} copy_call;

static int issue_copy(void *arg) {
  copy_call *c = arg;
  return (int)drv.cuMemcpyDtoDAsync_v2(c->dst, c->src, c->bytes, c->stream);
}

/* Median read+write bandwidth of a device-to-device copy of `bytes`, GB/s;
 * negative when the driver cannot do it asynchronously. */
static double copy_bandwidth(bench_state *st, const bench_opts *op, size_t bytes) {
  if (!drv.cuMemcpyDtoDAsync_v2) return -1.0;
  copy_call c = {gpu_alloc(bytes), gpu_alloc(bytes), bytes, st->dev.stream};
  int status = 0;
  for (int i = 0; i < op->warmup; i++) issue_copy(&c);
  double est = gpu_time_ms(&st->dev, issue_copy, &c, 1, &status);
  int inner = gpu_inner_for(est, op->target_ms);
  double samples[64];
  int n = 0;
  for (int r = 0; r < op->reps && r < 64 && status == 0; r++) {
    double ms = gpu_time_ms(&st->dev, issue_copy, &c, inner, &status);
    if (status == 0) samples[n++] = ms;
  }
  CU_CHECK(drv.cuMemFree_v2(c.dst));
  CU_CHECK(drv.cuMemFree_v2(c.src));
  if (status || !n) return -1.0;
  double ms = gpu_median(samples, n);
  return 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
}

/* ---- trace pass --------------------------------------------------------------- */
static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Bytes the shim's cast or quantize kernels read and write for one A-side
 * call, each operand counted once: ffma widens A and B (2 -> 4 bytes) and
 * narrows C (4 -> 2, beta 0 so C is not widened); fp8 quantizes A and B
 * (2 -> 1 byte; TN needs no transpose), and the current recipe's amax pass
 * (its gs_fp8_amax_part kernels in the trace: amax_pass) reads them once
 * before (2 more). Block and mxfp8 scales (at most 4 bytes a 128
 * elements) are not counted. */
static double shim_kernel_bytes(pair_kind p, const shape *s, int amax_pass) {
  double a = (double)s->m * (double)s->k, b = (double)s->k * (double)s->n, c = (double)s->m * (double)s->n;
  if (p == PAIR_FP8_BF16) return (amax_pass ? 5.0 : 3.0) * (a + b);
  return 6.0 * (a + b + c);
}

typedef struct kernel_group {
  const char *name;
  int count;
  double us;
} kernel_group;

static void trace_pass(bench_state *st, const bench_opts *op, const shape *s, side_call *a) {
  const int calls = 3;
  CU_CHECK(drv.cuStreamSynchronize(st->dev.stream));
  if (trace_begin()) {
    const char *why = trace_error();
    printf("  trace: unavailable (%s)\n", why);
    if (st->json) {
      fprintf(st->json, "{\"kind\":\"trace\",\"pair\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"available\":false,\"why\":",
              pairs[op->pair].name, (long long)s->m, (long long)s->n, (long long)s->k);
      gpu_json_string(st->json, why);
      fprintf(st->json, "}\n");
    }
    return;
  }
  int status = 0;
  for (int i = 0; i < calls && status == 0; i++) status = issue_side(a);
  CU_CHECK(drv.cuStreamSynchronize(st->dev.stream));
  trace_kernel *k = NULL;
  size_t n = 0;
  if (trace_end(&k, &n) || status) {
    printf("  trace: failed (status %d)\n", status);
    free(k);
    return;
  }
  double cast_us = 0.0, shim_gemm_us = 0.0, other_us = 0.0;
  kernel_group groups[32];
  int ng = 0;
  for (size_t i = 0; i < n; i++) {
    double us = (double)(k[i].end_ns - k[i].start_ns) / 1e3;
    if (starts_with(k[i].name, "gs_") && !strstr(k[i].name, "gemm")) cast_us += us;
    else if (starts_with(k[i].name, "gs_")) shim_gemm_us += us;
    else other_us += us;
    int g = 0;
    while (g < ng && strcmp(groups[g].name, k[i].name)) g++;
    if (g == ng && ng < 32) groups[ng++] = (kernel_group){k[i].name, 0, 0.0};
    if (g < ng) groups[g].count++, groups[g].us += us;
  }
  cast_us /= calls, shim_gemm_us /= calls, other_us /= calls;
  int amax_pass = 0;
  for (int g = 0; g < ng; g++) amax_pass |= starts_with(groups[g].name, "gs_fp8_amax_part");
  double bytes = shim_kernel_bytes(op->pair, s, amax_pass);
  double gbs = cast_us > 0.0 ? bytes / (cast_us * 1e-6) / 1e9 : 0.0;
  printf("  trace (%d calls): shim cast/quantize kernels %.1f us/call = %.0f GB/s", calls, cast_us, gbs);
  if (st->copy_gbs > 0.0 && gbs > 0.0) printf(" (%.0f%% of device copy %.0f GB/s)", 100.0 * gbs / st->copy_gbs, st->copy_gbs);
  printf("; shim GEMM kernels %.1f us/call; other kernels %.1f us/call\n", shim_gemm_us, other_us);
  for (int g = 0; g < ng; g++)
    printf("    %5d x %-60.60s %10.1f us/call\n", groups[g].count, groups[g].name, groups[g].us / calls);
  if (st->json) {
    fprintf(st->json,
            "{\"kind\":\"trace\",\"pair\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"available\":true,\"calls\":%d,"
            "\"shim_cast_us\":%.3f,\"shim_gemm_us\":%.3f,\"other_us\":%.3f,\"cast_bytes\":%.0f,\"cast_gbs\":%.1f,"
            "\"copy_gbs\":%.1f,\"kernels\":[",
            pairs[op->pair].name, (long long)s->m, (long long)s->n, (long long)s->k, calls, cast_us, shim_gemm_us,
            other_us, bytes, gbs, st->copy_gbs > 0.0 ? st->copy_gbs : 0.0);
    for (int g = 0; g < ng; g++) {
      fprintf(st->json, "%s{\"name\":", g ? "," : "");
      gpu_json_string(st->json, groups[g].name);
      fprintf(st->json, ",\"count\":%d,\"us_per_call\":%.3f}", groups[g].count, groups[g].us / calls);
    }
    fprintf(st->json, "]}\n");
    fflush(st->json);
  }
  free(k);
}

/* ---- one shape -------------------------------------------------------------------- */
static double tflops(const shape *s, double ms) {
  return ms > 0.0 ? 2.0 * (double)s->m * (double)s->n * (double)s->k / (ms * 1e-3) / 1e12 : 0.0;
}

static void print_side(const char *label, double ms, double tf, double ceiling) {
  printf("%s %9.3f ms %7.1f TFLOP/s", label, ms, tf);
  if (ceiling > 0.0) printf(" (%.0f%% of %.0f peak)", 100.0 * tf / ceiling, ceiling);
}

/* One shape's device operands and the two sides' calls on them. */
typedef struct shape_run {
  side_call a, b;
  CUdeviceptr bufs[6]; /* A, B, C of side A, C of side B, fp32 A and B */
} shape_run;

static void shape_setup(bench_state *st, const bench_opts *op, const shape *s, const uint16_t *host16,
                        const float *host32, shape_run *r) {
  const pair_def *p = &pairs[op->pair];
  size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->k * s->n), nc = (size_t)(s->m * s->n);
  memset(r, 0, sizeof *r);
  CUdeviceptr *d = r->bufs;
  d[0] = gpu_alloc(na * 2), d[1] = gpu_alloc(nb * 2), d[2] = gpu_alloc(nc * 2);
  CU_CHECK(drv.cuMemcpyHtoD_v2(d[0], host16, na * 2));
  CU_CHECK(drv.cuMemcpyHtoD_v2(d[1], host16 + na % 977, nb * 2)); /* offset: B is not A */
  r->a = (side_call){st, 0, s->m, s->n, s->k, (void *)(uintptr_t)d[0], (void *)(uintptr_t)d[1],
                     (void *)(uintptr_t)d[2], CUDA_R_16BF, CUDA_R_16BF};
  r->b = r->a;
  r->b.use_64 = 1;
  if (p->b_fp32) {
    d[3] = gpu_alloc(nc * 4), d[4] = gpu_alloc(na * 4), d[5] = gpu_alloc(nb * 4);
    CU_CHECK(drv.cuMemcpyHtoD_v2(d[4], host32, na * 4));
    CU_CHECK(drv.cuMemcpyHtoD_v2(d[5], host32 + na % 977, nb * 4));
    r->b.A = (void *)(uintptr_t)d[4], r->b.B = (void *)(uintptr_t)d[5];
    r->b.ab = r->b.c = CUDA_R_32F;
  } else {
    d[3] = gpu_alloc(nc * 2);
  }
  r->b.C = (void *)(uintptr_t)d[3];
}

static void shape_teardown(bench_state *st, shape_run *r) {
  CU_CHECK(drv.cuStreamSynchronize(st->dev.stream));
  for (size_t i = 0; i < sizeof r->bufs / sizeof r->bufs[0]; i++)
    if (r->bufs[i]) CU_CHECK(drv.cuMemFree_v2(r->bufs[i]));
}

static void report_shape(bench_state *st, const bench_opts *op, const shape *s, const double *sa, const double *sb,
                         int n, int inner_a, int inner_b) {
  const pair_def *p = &pairs[op->pair];
  /* gpu_median sorts its argument: medians come from copies, the JSON
   * keeps the samples in the order they were taken. */
  double ca[64], cb[64];
  memcpy(ca, sa, sizeof(double) * (size_t)n);
  memcpy(cb, sb, sizeof(double) * (size_t)n);
  double ms_a = gpu_median(ca, n), ms_b = gpu_median(cb, n);
  double tf_a = tflops(s, ms_a), tf_b = tflops(s, ms_b);
  printf("%-10s %5lldx%lldx%lld  ", p->name, (long long)s->m, (long long)s->n, (long long)s->k);
  print_side(p->label_a, ms_a, tf_a, p->ceiling_a);
  printf(" | ");
  print_side(p->label_b, ms_b, tf_b, p->ceiling_b);
  printf(" | A/B time %.3f\n", ms_a / ms_b);
  if (!st->json) return;
  fprintf(st->json,
          "{\"kind\":\"gemm\",\"pair\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"status\":0,\"reps\":%d,"
          "\"inner_a\":%d,\"inner_b\":%d,\"a\":{\"label\":\"%s\",\"api\":\"cublasGemmEx\",\"route\":\"%s\","
          "\"ms\":%.6f,\"tflops\":%.3f},\"b\":{\"label\":\"%s\",\"api\":\"cublasGemmEx_64\",\"route\":\"native\","
          "\"ms\":%.6f,\"tflops\":%.3f},\"ratio_a_over_b\":%.6f,\"ceiling_a_tflops\":%.0f,"
          "\"ceiling_b_tflops\":%.0f,\"samples_a\":[",
          p->name, (long long)s->m, (long long)s->n, (long long)s->k, n, inner_a, inner_b, p->label_a, p->route, ms_a,
          tf_a, p->label_b, ms_b, tf_b, ms_a / ms_b, p->ceiling_a, p->ceiling_b);
  for (int i = 0; i < n; i++) fprintf(st->json, "%s%.6f", i ? "," : "", sa[i]);
  fprintf(st->json, "],\"samples_b\":[");
  for (int i = 0; i < n; i++) fprintf(st->json, "%s%.6f", i ? "," : "", sb[i]);
  fprintf(st->json, "]}\n");
  fflush(st->json);
}

/* The timed samples of one shape. Returns 1 when both sides ran. */
static int time_shape(bench_state *st, const bench_opts *op, const shape *s, const uint16_t *host16,
                      const float *host32) {
  const pair_def *p = &pairs[op->pair];
  shape_run r;
  shape_setup(st, op, s, host16, host32, &r);
  int status = 0;
  for (int i = 0; i < op->warmup && status == 0; i++) status = issue_side(&r.a);
  for (int i = 0; i < op->warmup && status == 0; i++) status = issue_side(&r.b);
  double est_a = status ? -1.0 : gpu_time_ms(&st->dev, issue_side, &r.a, 1, &status);
  double est_b = status ? -1.0 : gpu_time_ms(&st->dev, issue_side, &r.b, 1, &status);
  int inner_a = gpu_inner_for(est_a, op->target_ms), inner_b = gpu_inner_for(est_b, op->target_ms);
  double sa[64], sb[64];
  int n = 0;
  for (int i = 0; i < op->reps && i < 64 && status == 0; i++) {
    sa[n] = gpu_time_ms(&st->dev, issue_side, &r.a, inner_a, &status);
    if (status == 0) sb[n] = gpu_time_ms(&st->dev, issue_side, &r.b, inner_b, &status);
    if (status == 0) n++;
  }
  int ok = status == 0 && n > 0;
  if (ok) {
    report_shape(st, op, s, sa, sb, n, inner_a, inner_b);
  } else {
    printf("%-10s %5lldx%lldx%lld  failed: cuBLAS status %d\n", p->name, (long long)s->m, (long long)s->n,
           (long long)s->k, status);
    if (st->json)
      fprintf(st->json, "{\"kind\":\"gemm\",\"pair\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"status\":%d}\n",
              p->name, (long long)s->m, (long long)s->n, (long long)s->k, status);
  }
  shape_teardown(st, &r);
  return ok;
}

/* The CUPTI pass of one shape: side A only, after one untimed call so the
 * trace sees no first-call work. */
static void trace_shape(bench_state *st, const bench_opts *op, const shape *s, const uint16_t *host16,
                        const float *host32) {
  shape_run r;
  shape_setup(st, op, s, host16, host32, &r);
  int status = issue_side(&r.a);
  if (status == 0) trace_pass(st, op, s, &r.a);
  else printf("  trace: the untimed call failed: cuBLAS status %d\n", status);
  shape_teardown(st, &r);
}

/* ---- options ------------------------------------------------------------------------ */
static void usage(void) {
  fprintf(stderr,
          "usage: gemm_bench --pair=ffma-bf16|ffma-sgemm|fp8-bf16|fp16-bf16 [options]\n"
          "  --shapes=MxNxK,...   shapes (default 4096x4096x4096)\n"
          "  --reps=N             samples per side, median reported (default 7)\n"
          "  --warmup=N           untimed calls per side first (default 3)\n"
          "  --target-ms=X        time one sample should take (default 20)\n"
          "  --trace              CUPTI pass: the shim's kernels' time and bandwidth\n"
          "  --copy-mib=N         device copy of N MiB as the bandwidth reference (default 512)\n"
          "  --max-seconds=S      skip the remaining shapes after S seconds (default 240)\n"
          "  --json=FILE          append one JSON record per result to FILE\n");
}

static int parse(int argc, char **argv, bench_opts *op) {
  memset(op, 0, sizeof *op);
  op->pair = (pair_kind)-1;
  op->reps = 7, op->warmup = 3, op->target_ms = 20.0, op->copy_mib = 512.0, op->max_seconds = 240.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage();
      exit(0);
    } else if (!strncmp(a, "--pair=", 7)) {
      for (int p = 0; p < (int)(sizeof pairs / sizeof pairs[0]); p++)
        if (!strcmp(a + 7, pairs[p].name)) op->pair = (pair_kind)p;
      if ((int)op->pair < 0) return fprintf(stderr, "gemm_bench: unknown pair %s\n", a + 7), -1;
    } else if (!strncmp(a, "--shapes=", 9)) {
      const char *p = a + 9;
      op->n_shapes = 0;
      while (*p) {
        long long m, n, k;
        int used = 0;
        if (sscanf(p, "%lldx%lldx%lld%n", &m, &n, &k, &used) != 3 || m < 1 || n < 1 || k < 1 ||
            op->n_shapes == 16)
          return fprintf(stderr, "gemm_bench: bad shape list %s\n", a + 9), -1;
        op->shapes[op->n_shapes++] = (shape){m, n, k};
        p += used;
        if (*p == ',') p++;
        else if (*p) return fprintf(stderr, "gemm_bench: bad shape list %s\n", a + 9), -1;
      }
    } else if (!strncmp(a, "--reps=", 7)) {
      op->reps = atoi(a + 7);
    } else if (!strncmp(a, "--warmup=", 9)) {
      op->warmup = atoi(a + 9);
    } else if (!strncmp(a, "--target-ms=", 12)) {
      op->target_ms = atof(a + 12);
    } else if (!strcmp(a, "--trace")) {
      op->trace = 1;
    } else if (!strncmp(a, "--copy-mib=", 11)) {
      op->copy_mib = atof(a + 11);
    } else if (!strncmp(a, "--max-seconds=", 14)) {
      op->max_seconds = atof(a + 14);
    } else if (!strncmp(a, "--json=", 7)) {
      op->json_path = a + 7;
    } else {
      fprintf(stderr, "gemm_bench: unknown option %s\n", a);
      usage();
      return -1;
    }
  }
  if ((int)op->pair < 0) return usage(), -1;
  if (op->reps < 1 || op->reps > 64 || op->warmup < 0 || !(op->target_ms > 0.0))
    return fprintf(stderr, "gemm_bench: --reps must be 1..64, --warmup >= 0, --target-ms > 0\n"), -1;
  if (!op->n_shapes) op->shapes[op->n_shapes++] = (shape){4096, 4096, 4096};
  return 0;
}

int main(int argc, char **argv) {
  bench_opts op;
  if (parse(argc, argv, &op)) return GPU_EXIT_SETUP;
  bench_state st;
  memset(&st, 0, sizeof st);
  if (op.json_path && !(st.json = fopen(op.json_path, "a"))) {
    perror(op.json_path);
    return GPU_EXIT_SETUP;
  }
  double t0 = now_s();
  gpu_open(&st.dev);
  cublasStatus_t s = cublasCreate(&st.h);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(st.h, (cudaStream_t)st.dev.stream);
  if (s != CUBLAS_STATUS_SUCCESS) return fprintf(stderr, "gemm_bench: cuBLAS setup failed: status %d\n", (int)s), GPU_EXIT_SETUP;
  gpu_describe(&st.dev, "gemm_bench", stdout, st.json);
  const pair_def *p = &pairs[op.pair];
  printf("pair %s: A = %s via cublasGemmEx, B = %s via cublasGemmEx_64; TN, C bf16%s, beta 0; "
         "median of %d samples of ~%.0f ms after %d warm-up calls\n",
         p->name, p->label_a, p->label_b, p->b_fp32 ? " (B: fp32)" : "", op.reps, op.target_ms, op.warmup);
  printf("napkin: bf16 dense peak %.0f TFLOP/s (measured ~%.0f at 8192^3 on an H200), fp8 %.0f, copy ~%.1f TB/s\n",
         PEAK_BF16_TFLOPS, H100_BF16_8192_TFLOPS, PEAK_FP8_TFLOPS, ESTIMATED_COPY_TBS);

  if (op.trace) {
    st.copy_gbs = copy_bandwidth(&st, &op, (size_t)(op.copy_mib * 1048576.0));
    if (st.copy_gbs > 0.0)
      printf("device copy %.0f MiB: %.0f GB/s read+write (napkin ~%.0f)\n", op.copy_mib, st.copy_gbs,
             ESTIMATED_COPY_TBS * 1000.0);
    else
      printf("device copy: unavailable (driver lacks cuMemcpyDtoDAsync_v2)\n");
    if (st.json && st.copy_gbs > 0.0)
      fprintf(st.json, "{\"kind\":\"copy\",\"bytes\":%.0f,\"gbs\":%.1f}\n", op.copy_mib * 1048576.0, st.copy_gbs);
    else if (st.json)
      fprintf(st.json, "{\"kind\":\"copy\",\"bytes\":%.0f,\"gbs\":null}\n", op.copy_mib * 1048576.0);
  }

  /* One set of host operands, big enough for every shape; each shape
   * uploads its slice. */
  size_t most = 0;
  for (int i = 0; i < op.n_shapes; i++) {
    size_t a = (size_t)(op.shapes[i].m * op.shapes[i].k), b = (size_t)(op.shapes[i].k * op.shapes[i].n);
    size_t need = (a > b ? a : b) + a % 977;
    if (need > most) most = need;
  }
  uint16_t *host16 = malloc(most * 2);
  float *host32 = p->b_fp32 ? malloc(most * 4) : NULL;
  if (!host16 || (p->b_fp32 && !host32)) return fprintf(stderr, "gemm_bench: out of host memory\n"), GPU_EXIT_SETUP;
  uint64_t rng = gpu_rng_seed(7, 0);
  gpu_fill_bf16(host16, host32, most, &rng, 1.0f);

  int failed = 0;
  for (int i = 0; i < op.n_shapes; i++) {
    if (now_s() - t0 > op.max_seconds) {
      printf("%-10s %5lldx%lldx%lld  skipped: past --max-seconds=%.0f\n", p->name, (long long)op.shapes[i].m,
             (long long)op.shapes[i].n, (long long)op.shapes[i].k, op.max_seconds);
      failed++;
      continue;
    }
    failed += !time_shape(&st, &op, &op.shapes[i], host16, host32);
  }
  /* CUPTI attaches to the driver when first used: every timed sample above
   * ran before it did. */
  for (int i = 0; op.trace && i < op.n_shapes; i++) {
    printf("trace %s %lldx%lldx%lld\n", p->name, (long long)op.shapes[i].m, (long long)op.shapes[i].n,
           (long long)op.shapes[i].k);
    trace_shape(&st, &op, &op.shapes[i], host16, host32);
  }
  printf("calls cublasGemmEx=%ld cublasGemmEx_64=%ld\n", st.calls_a, st.calls_b);
  if (st.json) {
    fprintf(st.json, "{\"kind\":\"calls\",\"pair\":\"%s\",\"cublasGemmEx\":%ld,\"cublasGemmEx_64\":%ld}\n", p->name,
            st.calls_a, st.calls_b);
    fclose(st.json);
  }
  free(host16);
  free(host32);
  cublasDestroy(st.h);
  gpu_close(&st.dev);
  return failed ? GPU_EXIT_FAILED : GPU_EXIT_OK;
}
