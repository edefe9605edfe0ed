/* The routes' cost model (shim/routes/cost.c) over the emulated GPUs the
 * integration tests pick: which route each shape takes, the decline
 * reason's exact text, and docs/perf-static.md's gate table, which this
 * program prints with --table (scripts/perf_report.py writes it there). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cost.h"
#include "shim.h"
#include "sys.h"

/* The stand-in's boards (tests/standin/driver_init.c): the figures
 * cuDeviceGetAttribute reports for these parts. */
typedef struct emulated {
  const char *name;
  gs_cost_device d;
} emulated;

static const emulated gtx1080 = {"GTX 1080 (sm_61)", {61, 20, 1733500, 5005000, 256}};
static const emulated v100 = {"V100 SXM2 (sm_70)", {70, 80, 1530000, 877000, 4096}};
static const emulated t4 = {"T4 (sm_75)", {75, 40, 1590000, 5001000, 256}};
/* The stand-in's sm_89 board: an Ada part of 58 SMs, GDDR6 on 192 bits. */
static const emulated ada = {"Ada, 58 SMs (sm_89)", {89, 58, 2040000, 6251000, 192}};
static const emulated h100 = {"H100 SXM5 (sm_90)", {90, 132, 1980000, 2619000, 5120}};

typedef struct shape {
  const char *what;
  int64_t m, n, k;
} shape;

/* bf16 A, B and D, beta 0, one member. */
static const shape shapes[] = {
    {"skinny", 4096, 16, 4096},
    {"small-k", 4096, 4096, 64},
    {"cube", 4096, 4096, 4096},
    {"LLaMA-7B MLP", 4096, 11008, 4096},
    {"GPT-2 small LM head", 768, 50257, 768},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

typedef struct row {
  const emulated *gpu;
  gs_cost_route route;
  const char *expect; /* per shape: 1 routes, 0 stays native */
} row;

/* What the model gives, stated here so a change to a rate or a byte count
 * that flips a decision fails this test (docs/cost-model.md explains each). */
static const row rows[] = {
    {&gtx1080, GS_COST_FFMA, "00111"},
    {&v100, GS_COST_FFMA, "00111"},
    {&v100, GS_COST_FP16, "01111"},
    {&t4, GS_COST_FFMA, "00111"},
    {&t4, GS_COST_FP16, "01111"},
    {&ada, GS_COST_FP8, "00000"},
    {&h100, GS_COST_FP8, "00000"},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

static const char *const route_names[] = {"ffma", "fp16", "fp8"};

/* The bytes the routes' kernels move, as cost_gate_ffma/fp16/fp8 count them
 * for this case (bf16 D, beta 0). */
static gs_cost_work work_of(gs_cost_route r, const shape *s) {
  double ab = (double)(s->m * s->k + s->k * s->n), mn = (double)s->m * (double)s->n;
  double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
  /* The gates' own work (cost.c), bf16 A, B and D, beta 0: ffma narrows
   * its fp32 result into D and reads no C; fp8 runs the current recipe
   * (the default), nothing around the GEMM. */
  switch (r) {
    case GS_COST_FFMA: return cost_work_ffma(flops, CUDA_R_16BF, ab, mn, 1, GS_COST_FFMA_C_NONE);
    case GS_COST_FP16: return cost_work_fp16(flops, CUDA_R_16BF, ab, mn, CUDA_R_16BF);
    default: return cost_work_fp8(flops, CUDA_R_16BF, ab, GS_COST_FP8_CURRENT, 0, 0);
  }
}

static void ms(double us, char *buf, size_t len) { snprintf(buf, len, "%.3f", us / 1000); }

/* The markdown table of every row and shape. */
static size_t table(char *out, size_t len) {
  size_t at = 0;
#define PUT(...) at += (size_t)snprintf(out + at, at < len ? len - at : 0, __VA_ARGS__)
  PUT("| GPU | route | shape | m x n x k | native ms | route ms | GEMM ms | passes ms | launches | estimated speedup "
      "| routes |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (size_t i = 0; i < N_ROWS; i++) {
    for (size_t j = 0; j < N_SHAPES; j++) {
      gs_cost_work w = work_of(rows[i].route, &shapes[j]);
      gs_cost e;
      if (cost_estimate(&rows[i].gpu->d, rows[i].route, &w, &e) != 0) continue;
      char a[32], b[32], c[32], d[32];
      ms(e.native_us, a, sizeof a);
      ms(e.route_us, b, sizeof b);
      ms(e.gemm_us, c, sizeof c);
      ms(e.pass_us, d, sizeof d);
      PUT("| %s | %s | %s | %lldx%lldx%lld | %s | %s | %s | %s | %d | %.2fx | %s |\n", rows[i].gpu->name,
          route_names[rows[i].route], shapes[j].what, (long long)shapes[j].m, (long long)shapes[j].n,
          (long long)shapes[j].k, a, b, c, d, w.launches, e.speedup, e.speedup > 1.0 ? "yes" : "no");
    }
  }
#undef PUT
  return at;
}

static void test_routes_per_gpu_and_shape(void **state) {
  (void)state;
  for (size_t i = 0; i < N_ROWS; i++) {
    for (size_t j = 0; j < N_SHAPES; j++) {
      gs_cost_work w = work_of(rows[i].route, &shapes[j]);
      gs_cost e;
      assert_int_equal(cost_estimate(&rows[i].gpu->d, rows[i].route, &w, &e), 0);
      int routes = e.speedup > 1.0;
      if (routes != (rows[i].expect[j] == '1'))
        fail_msg("%s %s %s: estimated %.3fx", rows[i].gpu->name, route_names[rows[i].route], shapes[j].what,
                 e.speedup);
    }
  }
}

/* The audit's figures for a GTX 1080 (~0.3x skinny, ~0.8x small-k), worked
 * by hand: scale 20 x 1733.5 / (28 x 1582) = 0.7827; bf16 5.38 x 0.7827 =
 * 4.211 T, fp32 10.09 x 0.7827 = 7.898 T; 2 x 5005 MHz x 32 B = 320.3 GB/s,
 * 80% of it 256.3 GB/s. Skinny: 0.537 GFLOP -> native 127.5 us, GEMM
 * 68.0 us; bytes 6(mk + kn) + 6mn = 6 x 16,842,752 + 6 x 65,536 =
 * 101,449,728 -> 395.9 us; + 2 x 5 us = 473.9 us: 0.269x. */
static void test_reason_text(void **state) {
  (void)state;
  gs_cost_work w = work_of(GS_COST_FFMA, &shapes[0]);
  gs_cost e;
  assert_int_equal(cost_estimate(&gtx1080.d, GS_COST_FFMA, &w, &e), 0);
  char buf[GS_REASON_MAX];
  cost_describe(&e, GS_COST_FFMA, &w, buf, sizeof buf);
  assert_string_equal(buf,
                      "estimated 0.269x native here: native 127.5 us, route 473.9 us (ffma GEMM 68.0 us + passes "
                      "395.9 us + 2 launches 10.0 us; GTX 1080 Ti rates x 0.783, 320 GB/s); GEMMSHIM_GATE=off "
                      "routes it anyway");
}

/* Failed attribute queries (zeros): the reference part's own figures. */
static void test_unknown_figures_take_the_reference_part(void **state) {
  (void)state;
  gs_cost_device d = {61, 0, 0, 0, 0};
  gs_cost_work w = {2e9, CUDA_R_16BF, 0, 0, 0};
  gs_cost e;
  assert_int_equal(cost_estimate(&d, GS_COST_FFMA, &w, &e), 0);
  assert_true(e.scale == 1.0);
  assert_true(e.bw_gbs == 484.0);
  assert_true(e.native_us == 2e9 / (5.38e12) * 1e6);
}

/* Rows: the same major's nearest (sm_60 -> GTX 1080 Ti figures, sm_86 ->
 * A100's); nothing older than the oldest row; fp8 only where a rate is. */
static void test_rows_chosen(void **state) {
  (void)state;
  gs_cost_work w = {2e9, CUDA_R_16BF, 0, 1, 0};
  gs_cost e;
  gs_cost_device d = {60, 0, 0, 0, 0};
  assert_int_equal(cost_estimate(&d, GS_COST_FFMA, &w, &e), 0);
  assert_string_equal(e.part, "GTX 1080 Ti");
  d.sm = 86;
  assert_int_equal(cost_estimate(&d, GS_COST_FP16, &w, &e), 0);
  assert_string_equal(e.part, "A100 SXM4");
  assert_int_equal(cost_estimate(&d, GS_COST_FP8, &w, &e), -1);
  d.sm = 52;
  assert_int_equal(cost_estimate(&d, GS_COST_FFMA, &w, &e), -1);
  /* A major with no row of its own: the newest older one's (sm_12.0 ->
   * B200's), and sm_10.0 its own. */
  d.sm = 100;
  assert_int_equal(cost_estimate(&d, GS_COST_FP8, &w, &e), 0);
  assert_string_equal(e.part, "B200");
  assert_true(e.route_tflops == 4500.0 && e.native_tflops == 2250.0);
  d.sm = 120;
  assert_int_equal(cost_estimate(&d, GS_COST_FP8, &w, &e), 0);
  assert_string_equal(e.part, "B200");
  d.sm = 103;
  assert_int_equal(cost_estimate(&d, GS_COST_FP8, &w, &e), 0);
  assert_string_equal(e.part, "B200");
}

/* GEMMSHIM_GATE=0: no estimate asked; an unknown architecture declines
 * naming what is missing. */
static void test_gate_option(void **state) {
  (void)state;
  gs_cost_work w = {2.0, CUDA_R_16BF, 6.0, 2, 0};
  char why[GS_COST_WHY];
  gs_opt.gate = 1;
  assert_string_equal(cost_gate(-1, 52, GS_COST_FFMA, &w, why),
                      "no ffma rate figures for sm_52 to estimate what it saves; GEMMSHIM_GATE=off routes it anyway");
  assert_non_null(cost_gate(-1, 61, GS_COST_FFMA, &w, why));
  gs_opt.gate = 0;
  assert_null(cost_gate(-1, 52, GS_COST_FFMA, &w, why));
  gs_opt.gate = 1;
}

#define BEGIN "<!-- cost-table: printed by build/tests/unit/test_cost --table -->\n"
#define END "<!-- end cost-table -->\n"

static void test_docs_table_matches(void **state) {
  (void)state;
  static char want[32768], doc[1 << 18];
  table(want, sizeof want);
  FILE *f = fopen("docs/perf-static.md", "r");
  assert_non_null(f);
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[n] = 0;
  char *b = strstr(doc, BEGIN), *e = b ? strstr(b, END) : NULL;
  if (!b || !e) fail_msg("docs/perf-static.md has no cost-table section");
  b += strlen(BEGIN);
  *e = 0;
  if (strcmp(b, want) != 0) fail_msg("docs/perf-static.md's cost table differs from the model:\n%s", want);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--table") == 0) {
    static char out[32768];
    table(out, sizeof out);
    fputs(BEGIN, stdout);
    fputs(out, stdout);
    fputs(END, stdout);
    return 0;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_routes_per_gpu_and_shape),
      cmocka_unit_test(test_reason_text),
      cmocka_unit_test(test_unknown_figures_take_the_reference_part),
      cmocka_unit_test(test_rows_chosen),
      cmocka_unit_test(test_gate_option),
      cmocka_unit_test(test_docs_table_matches),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
