/* cast_bench.c: the ffma route's cast kernels (kernels/cast.cu) on their own:
 * checked bit for bit against the host, and their bandwidth set against a
 * device-to-device copy moving the same bytes.
 *
 * The kernels are hidden inside libgemmshim.so, so this program loads the
 * same PTX itself: from a .ptx file, or straight out of the library (the
 * embedded text is the NUL-terminated string holding ".entry gs_widen_bf16"),
 * with cuModuleLoadData, and launches gs_widen_bf16 / gs_narrow_bf16 with the
 * argument block kernels/cast.h defines, as the launcher
 * (kernels/cast_launch.c) plans a contiguous matrix: one column of rows x
 * cols elements, one GS_CAST_CHUNK-element chunk per thread, blocks of
 * GS_CAST_THREADS. gemm_bench --trace measures the same kernels as
 * the shim itself launches them inside the ffma route.
 *
 * Bytes: a widen of E elements reads 2E and writes 4E; a narrow reads 4E and
 * writes 2E. The reference copy moves 3E bytes (reads 3E, writes 3E), the
 * same 6E of traffic. Bandwidths are read+write bytes per second; the goal
 * is >= 85% of the copy. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cast.h"
#include "gpu_common.h"

#define ESTIMATED_COPY_TBS 4.3 /* estimate: ~90% of an H200's 4.8 TB/s nominal (NVIDIA datasheet) */
#define GOAL_OF_COPY 0.85

typedef struct cast_opts {
  const char *ptx_path;
  int64_t sizes[8][2];
  int n_sizes;
  int reps, warmup;
  double target_ms;
  const char *json_path;
} cast_opts;

/* ---- the PTX --------------------------------------------------------------- */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = 0, *len = (size_t)n;
  return buf;
}

/* The PTX text: the whole file when it is PTX, else the NUL-terminated
 * string inside it (a shared library) that defines gs_widen_bf16. */
static char *load_ptx(const char *path, char *why, size_t why_len) {
  size_t len = 0;
  char *buf = read_file(path, &len);
  if (!buf) return snprintf(why, why_len, "cannot read %s", path), NULL;
  static const char marker[] = ".entry gs_widen_bf16";
  char *hit = memmem(buf, len, marker, sizeof marker - 1);
  if (!hit) {
    free(buf);
    return snprintf(why, why_len, "%s holds no \"%s\"", path, marker), NULL;
  }
  if (len >= 4 && !memcmp(buf, "\177ELF", 4)) {
    char *start = hit, *end = hit;
    while (start > buf && start[-1]) start--;
    while (end < buf + len && *end) end++;
    size_t n = (size_t)(end - start);
    char *ptx = malloc(n + 1);
    if (!ptx) exit(GPU_EXIT_SETUP);
    memcpy(ptx, start, n);
    ptx[n] = 0;
    free(buf);
    buf = ptx;
  }
  if (!strstr(buf, ".version") || !strstr(buf, ".target")) {
    free(buf);
    return snprintf(why, why_len, "%s: the text around gs_widen_bf16 is not a PTX module", path), NULL;
  }
  return buf;
}

/* ---- launches ------------------------------------------------------------------ */
typedef struct cast_call {
  CUfunction fn;
  gs_cast_args args;
  CUstream stream;
} cast_call;

static int issue_cast(void *arg) {
  cast_call *c = arg;
  unsigned gx = (unsigned)((c->args.chunks + GS_CAST_THREADS - 1) / GS_CAST_THREADS);
  void *params[] = {&c->args};
  return (int)drv.cuLaunchKernel(c->fn, gx, 1, 1, GS_CAST_THREADS, 1, 1, 0, c->stream, params, NULL);
}

/* n contiguous elements from src to dst (both from cuMemAlloc, so aligned
 * alike: chunks start at the first element), as the launcher folds them. */
static gs_cast_args contiguous_args(CUdeviceptr src, CUdeviceptr dst, int64_t n) {
  gs_cast_args a;
  memset(&a, 0, sizeof a);
  int64_t chunks = (n + GS_CAST_CHUNK - 1) / GS_CAST_CHUNK;
  a.op[0].src = (const void *)(uintptr_t)src;
  a.op[0].dst = (void *)(uintptr_t)dst;
  a.op[0].ld_src = a.op[0].ld_dst = a.op[0].rows = n;
  a.op[0].per_col = gs_cast_div_for((uint64_t)chunks);
  a.op[0].per_member = gs_cast_div_for(1);
  for (int i = 1; i < GS_CAST_MAX_OPERANDS; i++) a.op[i].first = chunks;
  a.chunks = chunks;
  a.operands = 1;
  return a;
}

typedef struct copy_call {
  CUdeviceptr dst, src;
  size_t bytes;
  CUstream stream;
} copy_call;

static int issue_copy(void *arg) {
  copy_call *c = arg;
  return (int)drv.cuMemcpyDtoDAsync_v2(c->dst, c->src, c->bytes, c->stream);
}

/* Median ms of fn over reps samples of ~target_ms each; negative on error. */
static double median_ms(const gpu_device *d, const cast_opts *op, gpu_work_fn fn, void *arg) {
  int status = 0;
  for (int i = 0; i < op->warmup && status == 0; i++) status = fn(arg);
  double est = status ? -1.0 : gpu_time_ms(d, fn, arg, 1, &status);
  int inner = gpu_inner_for(est, op->target_ms);
  double v[64];
  int n = 0;
  for (int r = 0; r < op->reps && r < 64 && status == 0; r++) {
    double ms = gpu_time_ms(d, fn, arg, inner, &status);
    if (status == 0) v[n++] = ms;
  }
  return status || !n ? -1.0 : gpu_median(v, n);
}

/* ---- one size ------------------------------------------------------------------- */
static int run_size(const gpu_device *d, const cast_opts *op, CUfunction widen, CUfunction narrow, int64_t rows,
                    int64_t cols, FILE *json) {
  size_t e = (size_t)(rows * cols);
  uint16_t *h16 = malloc(e * 2), *back16 = malloc(e * 2);
  float *h32 = malloc(e * 4), *back32 = malloc(e * 4);
  if (!h16 || !back16 || !h32 || !back32) return fprintf(stderr, "cast_bench: out of host memory\n"), 0;
  uint64_t rng = gpu_rng_seed(11, (uint64_t)rows);
  gpu_fill_bf16(h16, NULL, e, &rng, 3.0f);
  /* Narrow input: fp32 values with bits below bf16's precision, so rounding
   * to nearest even is exercised on every element. */
  for (size_t i = 0; i < e; i++) h32[i] = (float)(gpu_rng_uniform(&rng) * 3.0);
  CUdeviceptr d16 = gpu_alloc(e * 2), d32 = gpu_alloc(e * 4);
  int ok = 1;

  /* widen: bf16 -> fp32 must be exact. */
  CU_CHECK(drv.cuMemcpyHtoD_v2(d16, h16, e * 2));
  cast_call w = {widen, contiguous_args(d16, d32, (int64_t)e), d->stream};
  int st = issue_cast(&w);
  CU_CHECK(drv.cuStreamSynchronize(d->stream));
  CU_CHECK(drv.cuMemcpyDtoH_v2(back32, d32, e * 4));
  size_t bad_w = 0;
  for (size_t i = 0; i < e; i++) {
    float want = gpu_bf16_to_f32(h16[i]);
    if (memcmp(&want, &back32[i], 4)) bad_w++;
  }
  /* narrow: fp32 -> bf16, round to nearest even, bit for bit. */
  CU_CHECK(drv.cuMemcpyHtoD_v2(d32, h32, e * 4));
  cast_call nw = {narrow, contiguous_args(d32, d16, (int64_t)e), d->stream};
  int st2 = issue_cast(&nw);
  CU_CHECK(drv.cuStreamSynchronize(d->stream));
  CU_CHECK(drv.cuMemcpyDtoH_v2(back16, d16, e * 2));
  size_t bad_n = 0;
  for (size_t i = 0; i < e; i++) bad_n += back16[i] != gpu_f32_to_bf16(h32[i]);
  if (st || st2 || bad_w || bad_n) ok = 0;
  printf("check %lldx%lld widen_bf16 launch=%d wrong=%zu narrow_bf16 launch=%d wrong=%zu ok=%d\n", (long long)rows,
         (long long)cols, st, bad_w, st2, bad_n, ok);

  double ms_w = median_ms(d, op, issue_cast, &w);
  double ms_n = median_ms(d, op, issue_cast, &nw);
  double ms_c = -1.0;
  if (drv.cuMemcpyDtoDAsync_v2) {
    CUdeviceptr a = gpu_alloc(3 * e), b = gpu_alloc(3 * e);
    copy_call c = {b, a, 3 * e, d->stream};
    ms_c = median_ms(d, op, issue_copy, &c);
    CU_CHECK(drv.cuMemFree_v2(a));
    CU_CHECK(drv.cuMemFree_v2(b));
  }
  double traffic = 6.0 * (double)e;
  double gbs_w = ms_w > 0 ? traffic / (ms_w * 1e-3) / 1e9 : 0, gbs_n = ms_n > 0 ? traffic / (ms_n * 1e-3) / 1e9 : 0;
  double gbs_c = ms_c > 0 ? traffic / (ms_c * 1e-3) / 1e9 : 0;
  printf("bandwidth %lldx%lld (%.1f MB of traffic): widen %.0f GB/s, narrow %.0f GB/s", (long long)rows,
         (long long)cols, traffic / 1e6, gbs_w, gbs_n);
  if (gbs_c > 0)
    printf(", device copy %.0f GB/s (napkin ~%.0f); widen/copy %.0f%%, narrow/copy %.0f%% (goal >= %.0f%%)\n",
           gbs_c, ESTIMATED_COPY_TBS * 1000.0, 100.0 * gbs_w / gbs_c, 100.0 * gbs_n / gbs_c, 100.0 * GOAL_OF_COPY);
  else
    printf(", device copy n/a (the driver lacks cuMemcpyDtoDAsync_v2)\n");
  if (json) {
    fprintf(json,
            "{\"kind\":\"cast\",\"rows\":%lld,\"cols\":%lld,\"ok\":%s,\"wrong_widen\":%zu,\"wrong_narrow\":%zu,"
            "\"traffic_bytes\":%.0f,\"widen_ms\":%.6f,\"narrow_ms\":%.6f,\"copy_ms\":%.6f,\"widen_gbs\":%.1f,"
            "\"narrow_gbs\":%.1f,\"copy_gbs\":%.1f,\"widen_of_copy\":%.4f,\"narrow_of_copy\":%.4f,\"goal_of_copy\":%.2f}\n",
            (long long)rows, (long long)cols, ok ? "true" : "false", bad_w, bad_n, traffic, ms_w, ms_n, ms_c, gbs_w,
            gbs_n, gbs_c, gbs_c > 0 ? gbs_w / gbs_c : 0.0, gbs_c > 0 ? gbs_n / gbs_c : 0.0, GOAL_OF_COPY);
    fflush(json);
  }
  CU_CHECK(drv.cuMemFree_v2(d16));
  CU_CHECK(drv.cuMemFree_v2(d32));
  free(h16), free(back16), free(h32), free(back32);
  return ok && ms_w > 0 && ms_n > 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: cast_bench --ptx=FILE [options]\n"
          "  --ptx=FILE         the kernels' PTX: a .ptx file or build/libgemmshim.so\n"
          "  --sizes=RxC,...    matrices (default 4096x4096,8192x8192)\n"
          "  --reps=N --warmup=N --target-ms=X   as gemm_bench (7, 3, 20)\n"
          "  --json=FILE        append one JSON record per size\n");
}

static int parse(int argc, char **argv, cast_opts *op) {
  memset(op, 0, sizeof *op);
  op->reps = 7, op->warmup = 3, op->target_ms = 20.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage();
      exit(0);
    } else if (!strncmp(a, "--ptx=", 6)) {
      op->ptx_path = a + 6;
    } else if (!strncmp(a, "--sizes=", 8)) {
      const char *p = a + 8;
      while (*p) {
        long long r, c;
        int used = 0;
        if (sscanf(p, "%lldx%lld%n", &r, &c, &used) != 2 || r < 1 || c < 1 || op->n_sizes == 8)
          return fprintf(stderr, "cast_bench: bad size list %s\n", a + 8), -1;
        op->sizes[op->n_sizes][0] = r, op->sizes[op->n_sizes][1] = c, op->n_sizes++;
        p += used;
        if (*p == ',') p++;
        else if (*p) return fprintf(stderr, "cast_bench: bad size list %s\n", a + 8), -1;
      }
    } else if (!strncmp(a, "--reps=", 7)) {
      op->reps = atoi(a + 7);
    } else if (!strncmp(a, "--warmup=", 9)) {
      op->warmup = atoi(a + 9);
    } else if (!strncmp(a, "--target-ms=", 12)) {
      op->target_ms = atof(a + 12);
    } else if (!strncmp(a, "--json=", 7)) {
      op->json_path = a + 7;
    } else {
      fprintf(stderr, "cast_bench: unknown option %s\n", a);
      usage();
      return -1;
    }
  }
  if (!op->ptx_path) return usage(), -1;
  if (op->reps < 1 || op->reps > 64 || op->warmup < 0 || !(op->target_ms > 0.0))
    return fprintf(stderr, "cast_bench: --reps must be 1..64, --warmup >= 0, --target-ms > 0\n"), -1;
  if (!op->n_sizes) {
    op->sizes[0][0] = op->sizes[0][1] = 4096;
    op->sizes[1][0] = op->sizes[1][1] = 8192;
    op->n_sizes = 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  cast_opts op;
  if (parse(argc, argv, &op)) return GPU_EXIT_SETUP;
  char why[512];
  char *ptx = load_ptx(op.ptx_path, why, sizeof why);
  if (!ptx) return fprintf(stderr, "cast_bench: %s\n", why), GPU_EXIT_SETUP;
  FILE *json = op.json_path ? fopen(op.json_path, "a") : NULL;
  if (op.json_path && !json) return perror(op.json_path), GPU_EXIT_SETUP;
  gpu_device d;
  gpu_open(&d);
  gpu_describe(&d, "cast_bench", stdout, json);
  if (!drv.cuModuleLoadData || !drv.cuModuleGetFunction || !drv.cuLaunchKernel)
    return fprintf(stderr, "cast_bench: the driver lacks module loading or kernel launch\n"), GPU_EXIT_SETUP;
  CUmodule mod;
  CUfunction widen, narrow;
  /* The driver JIT-compiles the shim's sm_61 PTX for this GPU, as it does
   * when the shim loads it. */
  CU_CHECK(drv.cuModuleLoadData(&mod, ptx));
  CU_CHECK(drv.cuModuleGetFunction(&widen, mod, "gs_widen_bf16"));
  CU_CHECK(drv.cuModuleGetFunction(&narrow, mod, "gs_narrow_bf16"));
  printf("ptx: %s (%zu bytes); block %d, %d elements per thread\n", op.ptx_path, strlen(ptx), GS_CAST_THREADS,
         GS_CAST_CHUNK);
  int failed = 0;
  for (int i = 0; i < op.n_sizes; i++)
    failed += !run_size(&d, &op, widen, narrow, op.sizes[i][0], op.sizes[i][1], json);
  if (drv.cuModuleUnload) CU_CHECK(drv.cuModuleUnload(mod));
  gpu_close(&d);
  if (json) fclose(json);
  free(ptx);
  printf("summary sizes=%d failed=%d\n", op.n_sizes, failed);
  return failed ? GPU_EXIT_FAILED : GPU_EXIT_OK;
}
