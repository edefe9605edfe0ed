/* What the launcher calls in the shim's own code: options_check (the
 * environment checked without opening any output or arming any fault),
 * options_read_policy, options_describe, and the policy explanation
 * helpers policy_rule_misses and policy_sm_parse, which must agree with
 * policy_match on every key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <cublas_v2.h>

#include "shim.h"
#include "sys.h"

static const char *const all_vars[] = {"GEMMSHIM_MODE",       "GEMMSHIM_POLICY", "GEMMSHIM_LOG",
                                       "GEMMSHIM_DEBUG",      "GEMMSHIM_DEBUG_FILE",
                                       "GEMMSHIM_FP8_HISTORY", "GEMMSHIM_FAULT", NULL};

typedef struct problems {
  int n;
  char text[8][1024];
} problems;

static void collect(const char *message, void *arg) {
  problems *p = arg;
  if (p->n < 8) snprintf(p->text[p->n], sizeof p->text[0], "%s", message);
  p->n++;
}

static char path_in_tmp[256];

static int setup(void **state) {
  for (int i = 0; all_vars[i]; i++) unsetenv(all_vars[i]);
  gs_fault_clear();
  return 0;
}

static int teardown(void **state) {
  for (int i = 0; all_vars[i]; i++) unsetenv(all_vars[i]);
  gs_fault_clear();
  if (path_in_tmp[0]) unlink(path_in_tmp);
  path_in_tmp[0] = 0;
  return 0;
}

static const char *write_tmp(const char *text) {
  snprintf(path_in_tmp, sizeof path_in_tmp, "/tmp/gemmshim-test-check-%d.txt", (int)getpid());
  FILE *f = fopen(path_in_tmp, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return path_in_tmp;
}

static void test_check_reports_every_problem_in_table_order(void **state) {
  setenv("GEMMSHIM_MODE", "bogus", 1);
  setenv("GEMMSHIM_FP8_HISTORY", "0", 1);
  problems p = {0};
  assert_int_equal(options_check(collect, &p), 2);
  assert_int_equal(p.n, 2);
  assert_string_equal(p.text[0], "GEMMSHIM_MODE='bogus': expected auto, native, ffma, fp8 or fp16");
  assert_string_equal(p.text[1], "GEMMSHIM_FP8_HISTORY='0': expected a whole number from 1 to 4096");
  /* As options_init would leave it: the default in place of the bad value. */
  assert_int_equal(gs_opt.mode, GS_MODE_AUTO);
  assert_int_equal(gs_opt.passthrough, 1);
}

static void test_check_opens_no_output(void **state) {
  char debug[256];
  snprintf(debug, sizeof debug, "/tmp/gemmshim-test-check-debug-%d.txt", (int)getpid());
  unlink(debug);
  setenv("GEMMSHIM_DEBUG_FILE", debug, 1);
  setenv("GEMMSHIM_DEBUG", "INFO", 1);
  setenv("GEMMSHIM_LOG", "/tmp/gemmshim-test-check-log.jsonl", 1);
  problems p = {0};
  assert_int_equal(options_check(collect, &p), 0);
  assert_int_equal(access(debug, F_OK), -1);
  assert_int_equal(access("/tmp/gemmshim-test-check-log.jsonl", F_OK), -1);
  assert_string_equal(gs_opt.log_path, "/tmp/gemmshim-test-check-log.jsonl");
  assert_int_equal(gs_opt.passthrough, 0);
}

/* A valid GEMMSHIM_FAULT is checked, not armed: the policy file is still
 * read (open:1 would fail its open). A bad one is a problem. */
static void test_fault_spec_checked_not_armed(void **state) {
  setenv("GEMMSHIM_POLICY", write_tmp("fp8 sm=9.0\n"), 1);
  setenv("GEMMSHIM_FAULT", "open:1", 1);
  problems p = {0};
  assert_int_equal(options_check(collect, &p), 0);
  assert_int_equal(gs_policy.n, 4);
  assert_int_equal(gs_fault_armed, 0);

  setenv("GEMMSHIM_FAULT", "nosuchcall:1", 1);
  p.n = 0;
  assert_int_equal(options_check(collect, &p), 1);
  char want[1024];
  assert_int_equal(gs_fault_parse("nosuchcall:1", want, sizeof want), -1);
  assert_string_equal(p.text[0], want);
}

static void test_policy_problems(void **state) {
  setenv("GEMMSHIM_POLICY", "/nonexistent/p.txt", 1);
  problems p = {0};
  assert_int_equal(options_check(collect, &p), 1);
  assert_string_equal(p.text[0],
                      "GEMMSHIM_POLICY='/nonexistent/p.txt': cannot open (No such file or directory); expected a "
                      "readable policy file");
  assert_int_equal(gs_policy.n, 3); /* built-in rules only */

  const char *path = write_tmp("ffma sm=7.5-6.0\n");
  setenv("GEMMSHIM_POLICY", path, 1);
  p.n = 0;
  assert_int_equal(options_check(collect, &p), 1);
  char want[512];
  snprintf(want, sizeof want, "%s:1: inverted sm range '7.5-6.0'; expected the lower bound first, like 6.0-7.5", path);
  assert_string_equal(p.text[0], want);

  policy_table t;
  char err[1024];
  assert_int_equal(options_read_policy(path, &t, err, sizeof err), -1);
  assert_string_equal(err, want);
  assert_int_equal(t.n, 3);
  write_tmp("native api=cublasLtMatmul\n");
  assert_int_equal(options_read_policy(path, &t, err, sizeof err), 0);
  assert_int_equal(t.n, 4);
  assert_int_equal(t.rules[0].line, 1);
}

static void test_describe_walks_the_table(void **state) {
  const char *def, *meaning;
  int is_path = -1;
  assert_string_equal(options_describe(0, &def, &meaning, &is_path), "GEMMSHIM_MODE");
  assert_string_equal(def, "auto");
  assert_int_equal(is_path, 0);
  size_t n = 0, paths = 0;
  const char *name;
  while ((name = options_describe(n, NULL, NULL, &is_path))) {
    assert_int_equal(strncmp(name, "GEMMSHIM_", 9), 0);
    if (is_path) paths++;
    n++;
  }
  assert_true(n >= 10);
  assert_int_equal(paths, 3); /* GEMMSHIM_POLICY, GEMMSHIM_LOG, GEMMSHIM_DEBUG_FILE */
  assert_null(options_describe(n, NULL, NULL, NULL));
}

static void test_sm_parse(void **state) {
  assert_int_equal(policy_sm_parse("6.1", 3), 61);
  assert_int_equal(policy_sm_parse("12.0", 4), 120);
  assert_int_equal(policy_sm_parse("9.0-", 3), 90); /* len bounds the text */
  assert_int_equal(policy_sm_parse("6", 1), -1);
  assert_int_equal(policy_sm_parse("6.x", 3), -1);
  assert_int_equal(policy_sm_parse("0.5", 3), -1);
  assert_int_equal(policy_sm_parse("123.4", 5), -1);
  assert_int_equal(policy_sm_parse("6.10", 4), -1);
}

/* Over every combination of a few values per key, the first rule with no
 * misses is the one policy_match picks, and each miss bit is the key that
 * fails: changing only that key to the rule's own value clears it. */
static void test_misses_agree_with_match(void **state) {
  static const char text[] = "fp8 sm=8.9- ab=bf16,fp16 c=bf16\n"
                             "ffma sm=6.1 compute=32f api=cublasGemmEx,cublasLtMatmul\n"
                             "native ab=fp32 c=fp32\n"
                             "fp8 caller=cusolver,cublas ab=fp16\n";
  policy_table t;
  char err[512];
  assert_int_equal(policy_parse(&t, text, sizeof text - 1, "t", err, sizeof err), 0);
  const int sms[] = {POLICY_SM_UNKNOWN, 60, 61, 75, 89, 90};
  const int types[] = {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF, CUDA_R_8F_E4M3};
  const int computes[] = {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F, CUBLAS_COMPUTE_16F};
  const gs_caller callers[] = {GS_CALLER_APP, GS_CALLER_CUSOLVER, GS_CALLER_CUBLASLT};
  int checked = 0, matched_by[8] = {0};
  for (size_t s = 0; s < sizeof sms / sizeof *sms; s++)
    for (size_t a = 0; a < 4; a++)
      for (size_t b = 0; b < 4; b++)
        for (size_t c = 0; c < 4; c++)
          for (size_t cp = 0; cp < 3; cp++)
            for (int api = 0; api < GS_API_COUNT; api++)
              for (size_t who = 0; who < 3; who++) {
              policy_key k = {.sm = sms[s], .a_type = types[a], .b_type = types[b], .c_type = types[c],
                              .compute_type = computes[cp], .api = (gs_api)api, .caller = callers[who]};
              int match = policy_match(&t, &k), first = -1;
              for (int i = 0; i < t.n && first < 0; i++)
                if (policy_rule_misses(&t, i, &k) == 0) first = i;
              assert_int_equal(first, match);
              if (match >= 0) matched_by[match]++;
              checked++;
            }
  assert_int_equal(checked, 6 * 4 * 4 * 4 * 3 * GS_API_COUNT * 3);
  for (int i = 0; i < t.n; i++) assert_true(matched_by[i] > 0); /* every rule wins somewhere */

  /* Rule 2 (ffma sm=6.1 compute=32f api=...): one miss per wrong key. */
  policy_key k = {.sm = 90, .a_type = CUDA_R_16BF, .b_type = CUDA_R_16BF, .c_type = CUDA_R_16BF,
                  .compute_type = CUBLAS_COMPUTE_64F, .api = GS_API_GEMM_BATCHED_EX, .caller = GS_CALLER_APP};
  assert_int_equal(policy_rule_misses(&t, 1, &k), POLICY_MISS_SM | POLICY_MISS_COMPUTE | POLICY_MISS_API);
  k.sm = 61;
  assert_int_equal(policy_rule_misses(&t, 1, &k), POLICY_MISS_COMPUTE | POLICY_MISS_API);
  k.compute_type = CUBLAS_COMPUTE_32F;
  k.api = GS_API_LT_MATMUL;
  assert_int_equal(policy_rule_misses(&t, 1, &k), 0);
  /* Rule 1's ab: both A and B must be in the list. */
  k = (policy_key){.sm = 90, .a_type = CUDA_R_16BF, .b_type = CUDA_R_8F_E4M3, .c_type = CUDA_R_32F,
                   .compute_type = CUBLAS_COMPUTE_32F, .api = GS_API_GEMM_EX, .caller = GS_CALLER_APP};
  assert_int_equal(policy_rule_misses(&t, 0, &k), POLICY_MISS_AB | POLICY_MISS_C);
  /* A rule without a caller key takes the program's calls only; rule 4
   * takes cuSOLVER's and cuBLAS's, not the program's. */
  k.caller = GS_CALLER_CUSOLVER;
  assert_int_equal(policy_rule_misses(&t, 0, &k), POLICY_MISS_AB | POLICY_MISS_C | POLICY_MISS_CALLER);
  k = (policy_key){.sm = 90, .a_type = CUDA_R_16F, .b_type = CUDA_R_16F, .c_type = CUDA_R_16F,
                   .compute_type = CUBLAS_COMPUTE_32F, .api = GS_API_GEMM_EX, .caller = GS_CALLER_APP};
  assert_int_equal(policy_rule_misses(&t, 3, &k), POLICY_MISS_CALLER);
  k.caller = GS_CALLER_CUBLAS;
  assert_int_equal(policy_rule_misses(&t, 3, &k), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_check_reports_every_problem_in_table_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_check_opens_no_output, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_spec_checked_not_armed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_policy_problems, setup, teardown),
      cmocka_unit_test_setup_teardown(test_describe_walks_the_table, setup, teardown),
      cmocka_unit_test(test_sm_parse),
      cmocka_unit_test(test_misses_agree_with_match),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
