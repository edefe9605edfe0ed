/* The options table: shared parsers, and options_init over real
 * environments, asserting the exact one-line message for each bad input. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "shim.h"
#include "sys.h"

static char debug_path[256];

static const char *const all_vars[] = {"GEMMSHIM_MODE", "GEMMSHIM_POLICY", "GEMMSHIM_LOG", "GEMMSHIM_DEBUG",
                                       "GEMMSHIM_DEBUG_FILE", "GEMMSHIM_DLSYM", "GEMMSHIM_FAULT",
                                       "GEMMSHIM_LOG_WAIT", "GEMMSHIM_FFMA_MAX_BYTES", "GEMMSHIM_FFMA_MIN_FLOPS",
                                       "GEMMSHIM_FP8_FORMAT", "GEMMSHIM_FP8_BACKEND", "GEMMSHIM_FP8_HISTORY",
                                       "GEMMSHIM_FP8_MARGIN", "GEMMSHIM_FP8_MAX_SITES", "GEMMSHIM_FP8_MAX_BYTES",
                                       "GEMMSHIM_POOL_KEEP_BYTES", "GEMMSHIM_GATE", NULL};

static int setup(void **state) {
  for (int i = 0; all_vars[i]; i++) unsetenv(all_vars[i]);
  snprintf(debug_path, sizeof debug_path, "/tmp/gemmshim-test-options-%d.txt", (int)getpid());
  setenv("GEMMSHIM_DEBUG_FILE", debug_path, 1);
  gs_fault_clear();
  return 0;
}

static int teardown(void **state) {
  for (int i = 0; all_vars[i]; i++) unsetenv(all_vars[i]);
  unlink(debug_path);
  gs_fault_clear();
  return 0;
}

/* Everything the shim printed since options_init, and its line count. */
static char *debug_output(int *lines) {
  static char buf[16384];
  FILE *f = fopen(debug_path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  *lines = 0;
  for (char *p = buf; *p; p++) *lines += *p == '\n';
  return buf;
}

/* The debug file is appended to, never truncated: a test that runs
 * options_init again starts from no file to read one init's lines. */
static void options_init_fresh(void) {
  unlink(debug_path);
  options_init();
}

static void expect_one_warning(const char *text) {
  int lines;
  char *out = debug_output(&lines);
  assert_int_equal(lines, 1);
  assert_non_null(strstr(out, " WARN "));
  if (!strstr(out, text)) fail_msg("expected '%s' in '%s'", text, out);
}

static void test_parse_u64(void **state) {
  char err[256];
  uint64_t v = 0;
  assert_int_equal(options_parse_u64("V", "16", 1, 1024, &v, err, sizeof err), 0);
  assert_int_equal(v, 16);
  assert_int_equal(options_parse_u64("V", "0", 1, 1024, &v, err, sizeof err), -1);
  assert_string_equal(err, "V='0': expected a whole number from 1 to 1024");
  assert_int_equal(options_parse_u64("V", "12abc", 1, 1024, &v, err, sizeof err), -1);
  assert_int_equal(options_parse_u64("V", "-3", 0, 10, &v, err, sizeof err), -1);
  assert_string_equal(err, "V='-3': expected a whole number from 0 to 10");
  assert_int_equal(options_parse_u64("V", "", 0, 10, &v, err, sizeof err), -1);
  assert_int_equal(options_parse_u64("V", "99999999999999999999999", 0, UINT64_MAX, &v, err, sizeof err), -1);
}

static void test_parse_size(void **state) {
  char err[256];
  uint64_t v = 0;
  assert_int_equal(options_parse_size("S", "512M", &v, err, sizeof err), 0);
  assert_int_equal(v, 512ull << 20);
  assert_int_equal(options_parse_size("S", "2GiB", &v, err, sizeof err), 0);
  assert_int_equal(v, 2ull << 30);
  assert_int_equal(options_parse_size("S", "3k", &v, err, sizeof err), 0);
  assert_int_equal(v, 3072);
  assert_int_equal(options_parse_size("S", "1T", &v, err, sizeof err), 0);
  assert_int_equal(v, 1ull << 40);
  assert_int_equal(options_parse_size("S", "4096", &v, err, sizeof err), 0);
  assert_int_equal(v, 4096);
  assert_int_equal(options_parse_size("S", "100B", &v, err, sizeof err), 0);
  assert_int_equal(v, 100);
  assert_int_equal(options_parse_size("S", "12X", &v, err, sizeof err), -1);
  assert_string_equal(err, "S='12X': expected a size in bytes, optionally with K, M, G or T (e.g. 512M)");
  assert_int_equal(options_parse_size("S", "-1", &v, err, sizeof err), -1);
  assert_int_equal(options_parse_size("S", "M", &v, err, sizeof err), -1);
  assert_int_equal(options_parse_size("S", "99999999999T", &v, err, sizeof err), -1);
}

/* A GEMMSHIM_* name the shim does not read is a typo until shown
 * otherwise: one warning each at load, naming the nearest name it reads
 * (a swap of two letters counts as one edit), and nothing else changes. */
static void collect_message(const char *message, void *arg) {
  char *buf = arg;
  strncat(buf, message, 4095 - strlen(buf));
  strncat(buf, "\n", 4095 - strlen(buf));
}

static void test_unknown_variables_warned(void **state) {
  setenv("GEMMSHIM_MDOE", "fp8", 1);
  setenv("GEMMSHIM_FFMA_MIN_FLOP", "1", 1);
  setenv("GEMMSHIM_NOTHING_LIKE_IT", "1", 1);
  setenv("GEMMSHIM_BAD\nNAME", "1", 1);
  setenv("GEMMSHIM_MODE", "ffma", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.mode, GS_MODE_FFMA);
  assert_int_equal(gs_opt.passthrough, 0);
  char got[4096] = "";
  assert_int_equal(options_unknown(collect_message, got), 4);
  const char *want[] = {
      "GEMMSHIM_MDOE is not a variable the shim reads (did you mean GEMMSHIM_MODE?); it is ignored\n",
      "GEMMSHIM_FFMA_MIN_FLOP is not a variable the shim reads (did you mean GEMMSHIM_FFMA_MIN_FLOPS?); it is "
      "ignored\n",
      "GEMMSHIM_NOTHING_LIKE_IT is not a variable the shim reads (expected one that `gemmshim --help` lists); it "
      "is ignored\n",
      "GEMMSHIM_BAD\\nNAME is not a variable the shim reads (expected one that `gemmshim --help` lists); it is "
      "ignored\n"};
  for (int i = 0; i < 4; i++)
    if (!strstr(got, want[i])) fail_msg("expected '%s' in '%s'", want[i], got);
  /* options_init said each once, at WARN. */
  int lines;
  char *out = debug_output(&lines);
  assert_int_equal(lines, 4);
  for (int i = 0; i < 4; i++) {
    char line[512];
    snprintf(line, sizeof line, " WARN %s", want[i]);
    if (!strstr(out, line)) fail_msg("expected '%s' in '%s'", line, out);
  }
  unsetenv("GEMMSHIM_MDOE");
  unsetenv("GEMMSHIM_FFMA_MIN_FLOP");
  unsetenv("GEMMSHIM_NOTHING_LIKE_IT");
  unsetenv("GEMMSHIM_BAD\nNAME");
  got[0] = '\0';
  assert_int_equal(options_unknown(collect_message, got), 0); /* GEMMSHIM_MODE and the debug file are ours */
  assert_string_equal(got, "");
}

static void test_defaults(void **state) {
  options_init();
  assert_int_equal(gs_opt.mode, GS_MODE_AUTO);
  assert_int_equal(gs_opt.passthrough, 0);
  assert_int_equal(gs_debug_level, GS_LEVEL_WARN);
  assert_int_equal(gs_opt.dlsym_hook, 1);
  /* The cost model decides; the flop floors are off unless set. */
  assert_int_equal(gs_opt.gate, 1);
  assert_int_equal(gs_opt.ffma_min_flops, 0);
  assert_int_equal(gs_opt.fp16_min_flops, 0);
  assert_string_equal(gs_opt.log_path, "");
  assert_int_equal(gs_policy.n, 3); /* the built-in table */
  int lines;
  debug_output(&lines);
  assert_int_equal(lines, 0); /* nothing to say at WARN */
}

/* The transient pool's keep limit: a size, 256 MiB by default (a quarter
 * of each route's per-call cap); a bad value is named and leaves the
 * default in place, with the shim pass-through. */
static void test_pool_keep_bytes(void **state) {
  options_init_fresh();
  assert_int_equal(gs_opt.pool_keep_bytes, 256ull << 20);
  setenv("GEMMSHIM_POOL_KEEP_BYTES", "0", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.pool_keep_bytes, 0);
  assert_int_equal(gs_opt.passthrough, 0);
  setenv("GEMMSHIM_POOL_KEEP_BYTES", "64MiB", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.pool_keep_bytes, 64ull << 20);
  setenv("GEMMSHIM_POOL_KEEP_BYTES", "lots", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.pool_keep_bytes, 256ull << 20);
  assert_int_equal(gs_opt.passthrough, 1);
  expect_one_warning("GEMMSHIM_POOL_KEEP_BYTES='lots': expected a size in bytes, optionally with K, M, G or T "
                     "(e.g. 512M); running pass-through (every GEMM native)");
}

static void test_mode_values(void **state) {
  setenv("GEMMSHIM_MODE", "FP8", 1); /* case-insensitive, like NCCL's */
  options_init();
  assert_int_equal(gs_opt.mode, GS_MODE_FP8);
  setenv("GEMMSHIM_MODE", "native", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.mode, GS_MODE_NATIVE);
  assert_int_equal(gs_opt.passthrough, 0);
}

static void test_bad_mode(void **state) {
  setenv("GEMMSHIM_MODE", "fast", 1);
  options_init();
  assert_int_equal(gs_opt.passthrough, 1);
  assert_int_equal(gs_opt.mode, GS_MODE_AUTO);
  expect_one_warning("GEMMSHIM_MODE='fast': expected auto, native, ffma, fp8 or fp16; running pass-through (every GEMM native)\n");
  /* With a log, what pass-through keeps; with a log path that was itself
   * rejected, no log to speak of (it said "still logged"). */
  setenv("GEMMSHIM_LOG", "/tmp/x.jsonl", 1);
  options_init_fresh();
  expect_one_warning("GEMMSHIM_MODE='fast': expected auto, native, ffma, fp8 or fp16; running pass-through (every GEMM native, still logged)\n");
  static char long_path[700];
  memset(long_path, 'p', sizeof long_path - 1);
  setenv("GEMMSHIM_LOG", long_path, 1);
  unsetenv("GEMMSHIM_MODE");
  options_init_fresh();
  expect_one_warning("GEMMSHIM_LOG: path of 699 bytes; expected at most 511; running pass-through (every GEMM native)\n");
  unsetenv("GEMMSHIM_LOG");
}

static void test_bad_bool_and_level(void **state) {
  setenv("GEMMSHIM_DLSYM", "maybe", 1);
  options_init();
  assert_int_equal(gs_opt.passthrough, 1);
  assert_int_equal(gs_opt.dlsym_hook, 1);
  expect_one_warning("GEMMSHIM_DLSYM='maybe': expected 1/0, true/false, yes/no or on/off; running pass-through");
  unsetenv("GEMMSHIM_DLSYM");
  setenv("GEMMSHIM_DEBUG", "LOUD", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.passthrough, 1);
  expect_one_warning("GEMMSHIM_DEBUG='LOUD': expected WARN, INFO or TRACE; running pass-through");
}

static void test_missing_policy(void **state) {
  setenv("GEMMSHIM_POLICY", "/nonexistent/policy.txt", 1);
  options_init();
  assert_int_equal(gs_opt.passthrough, 1);
  assert_int_equal(gs_policy.n, 3);
  expect_one_warning("GEMMSHIM_POLICY='/nonexistent/policy.txt': cannot open (No such file or directory); expected a readable policy file; running pass-through");
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_policy_file(void **state) {
  char path[256];
  snprintf(path, sizeof path, "/tmp/gemmshim-test-policy-%d.txt", (int)getpid());
  write_file(path, "# ours\nfp8 sm=9.0 ab=bf16\n");
  setenv("GEMMSHIM_POLICY", path, 1);
  options_init();
  assert_int_equal(gs_opt.passthrough, 0);
  assert_int_equal(gs_policy.n, 4);
  assert_int_equal(gs_policy.rules[0].route, GS_ROUTE_FP8);

  write_file(path, "fp8 sm=9.0\nfast sm=6.1\n");
  options_init_fresh();
  assert_int_equal(gs_opt.passthrough, 1);
  assert_int_equal(gs_policy.n, 3);
  char want[512];
  snprintf(want, sizeof want, "%s:2: unknown route 'fast'; expected native, ffma, fp8 or fp16; running pass-through", path);
  expect_one_warning(want);

  /* A read error is reported, not mistaken for an empty file. */
  write_file(path, "native\n");
  gs_fault_arm(GS_SYS_read, 1, 0);
  options_init_fresh();
  assert_int_equal(gs_opt.passthrough, 1);
  snprintf(want, sizeof want, "GEMMSHIM_POLICY='%s': cannot read (Input/output error); running pass-through", path);
  expect_one_warning(want);
  unlink(path);
}

static void test_bad_fault_spec(void **state) {
  setenv("GEMMSHIM_FAULT", "writ:1", 1);
  options_init();
  assert_int_equal(gs_opt.passthrough, 1);
  expect_one_warning("GEMMSHIM_FAULT: unknown call 'writ'; expected a name from the shim's call table (e.g. write, cuMemAllocFromPoolAsync); running pass-through");
  setenv("GEMMSHIM_FAULT", "write:0", 1);
  options_init_fresh();
  expect_one_warning("GEMMSHIM_FAULT: bad count in 'write:0'; expected a number from 1, optionally followed by '+'");
  setenv("GEMMSHIM_FAULT", "write", 1);
  options_init_fresh();
  expect_one_warning("GEMMSHIM_FAULT: 'write' has no ':N'; expected name:N[+],...");
  /* An empty entry anywhere is refused, a trailing comma too (it was
   * taken, so a typo passed silently). */
  static const char *const empty[] = {"write:1,", ",write:1", "write:1,,read:2", ",", NULL};
  for (int i = 0; empty[i]; i++) {
    setenv("GEMMSHIM_FAULT", empty[i], 1);
    options_init_fresh();
    assert_int_equal(gs_opt.passthrough, 1);
    char want[256];
    snprintf(want, sizeof want, "GEMMSHIM_FAULT='%s': an empty entry (a comma too many); expected name:N[+],...; "
             "running pass-through", empty[i]);
    expect_one_warning(want);
  }
}

/* A call named twice: which count was meant cannot be told (the later one
 * used to replace the first silently). And a value refused anywhere arms
 * nothing: pass-through must not still fail the calls its valid first
 * entries named. */
static void test_fault_spec_twice_or_refused_arms_nothing(void **state) {
  gs_fault_clear();
  setenv("GEMMSHIM_FAULT", "write:1,read:2,write:3+", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.passthrough, 1);
  expect_one_warning("GEMMSHIM_FAULT: 'write' is named twice ('write:1', then 'write:3+'); expected each call at "
                     "most once; running pass-through");
  assert_int_equal(gs_fault_hit(GS_SYS_write), 0);
  assert_int_equal(gs_fault_hit(GS_SYS_read), 0);
  assert_int_equal(gs_fault_hit(GS_SYS_read), 0);
  setenv("GEMMSHIM_FAULT", "close:1,writ:1", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.passthrough, 1);
  expect_one_warning("GEMMSHIM_FAULT: unknown call 'writ'");
  assert_int_equal(gs_fault_hit(GS_SYS_close), 0);
  unsetenv("GEMMSHIM_FAULT");
  gs_fault_clear();
}

/* A relative GEMMSHIM_LOG is made absolute against getcwd(3) at load; a
 * '%' in the directory is doubled (it is a directory's character, not a
 * placeholder). A name that would not fit (sizeof gs_opt.log_path) stays
 * relative, and the warning gives the length it would have had: the
 * directory with its '%'s doubled, a '/', the name. */
static void test_relative_log_made_absolute(void **state) {
  char start[4096], here[4096];
  assert_non_null(getcwd(start, sizeof start));
  snprintf(here, sizeof here, "/tmp/gs-opt-%d-100%%", (int)getpid());
  assert_int_equal(mkdir(here, 0700), 0);
  assert_int_equal(chdir(here), 0);
  setenv("GEMMSHIM_LOG", "run-%p.jsonl", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.passthrough, 0);
  char want[600];
  snprintf(want, sizeof want, "/tmp/gs-opt-%d-100%%%%/run-%%p.jsonl", (int)getpid());
  assert_string_equal(gs_opt.log_path, want);
  /* 5 levels of 100 characters with a '%' each: the directory alone is
   * 21 + 5 x 101 = 526 bytes, 531 with the '%'s doubled. */
  char deep[4096], part[101];
  memset(part, 'd', 99);
  part[99] = '%';
  part[100] = '\0';
  snprintf(deep, sizeof deep, "%s", here);
  for (int i = 0; i < 5; i++) {
    snprintf(deep + strlen(deep), sizeof deep - strlen(deep), "/%s", part);
    assert_int_equal(mkdir(deep, 0700), 0);
  }
  assert_int_equal(chdir(deep), 0);
  size_t dlen = strlen(deep) + 6; /* doubled: 5 '%' of the parts, 1 of "100%" */
  setenv("GEMMSHIM_LOG", "rel.jsonl", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.passthrough, 0);
  assert_string_equal(gs_opt.log_path, "rel.jsonl");
  snprintf(want, sizeof want, "GEMMSHIM_LOG='rel.jsonl': relative, and %zu bytes once the working directory is put "
           "before it; expected at most 511; the name stays relative", dlen + 1 + strlen("rel.jsonl"));
  expect_one_warning(want);
  assert_int_equal(chdir(start), 0);
  for (int i = 5; i >= 0; i--) {
    rmdir(deep);
    *strrchr(deep, '/') = '\0';
    if (i == 0) break;
  }
  rmdir(here);
  unsetenv("GEMMSHIM_LOG");
}

static void test_fault_counting(void **state) {
  char err[256];
  gs_fault_clear();
  assert_int_equal(gs_fault_parse("close:2,read:1+", err, sizeof err), 0);
  assert_int_equal(gs_fault_hit(GS_SYS_close), 0);
  assert_int_equal(gs_fault_hit(GS_SYS_close), 1);
  assert_int_equal(gs_fault_hit(GS_SYS_close), 0);
  for (int i = 0; i < 5; i++) assert_int_equal(gs_fault_hit(GS_SYS_read), 1);
  assert_int_equal(gs_fault_hit(GS_SYS_write), 0);
  gs_fault_clear();
  assert_int_equal(gs_fault_hit(GS_SYS_read), 0);
}

static void test_info_prints_every_option(void **state) {
  setenv("GEMMSHIM_DEBUG", "INFO", 1);
  setenv("GEMMSHIM_LOG", "/tmp/x-%p.jsonl", 1);
  options_init();
  int lines;
  char *out = debug_output(&lines);
  assert_non_null(strstr(out, "GEMMSHIM_MODE=auto (default): auto: the policy table decides"));
  assert_non_null(strstr(out, "GEMMSHIM_LOG set by environment to /tmp/x-%p.jsonl"));
  assert_non_null(strstr(out, "GEMMSHIM_DEBUG set by environment to INFO"));
  assert_non_null(strstr(out, "GEMMSHIM_DLSYM=1 (default)"));
  assert_non_null(strstr(out, "policy rule 1: built-in rule 1 (fp16 sm=7.0-7.5 ab=bf16 compute=32f)"));
  assert_non_null(strstr(out, "policy rule 2: built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)"));
  assert_non_null(strstr(out, "policy rule 3: built-in rule 3 (native)"));
  gs_debug_level = GS_LEVEL_WARN;
}

/* A path is a user's text like any value: a newline in it forged a line
 * of the INFO listing ("gemmshim ... INFO fake"); bytes that are not UTF-8
 * went out raw. Escaped as gs_quote does for every message. */
static void test_info_escapes_paths(void **state) {
  setenv("GEMMSHIM_DEBUG", "INFO", 1);
  setenv("GEMMSHIM_LOG", "/tmp/x\ngemmshim vm:1:1 INFO fake\xff.jsonl", 1);
  options_init_fresh();
  int lines;
  char *out = debug_output(&lines);
  assert_non_null(strstr(out, " INFO GEMMSHIM_LOG set by environment to /tmp/x\\ngemmshim vm:1:1 INFO fake\\xff.jsonl\n"));
  for (char *l = out; *l; l = strchr(l, '\n') + 1) { /* no line but the shim's own */
    assert_int_equal(strncmp(l, "gemmshim ", 9), 0);
    assert_int_not_equal(strncmp(l, "gemmshim vm:1:1 ", 16), 0);
  }
  unsetenv("GEMMSHIM_LOG");
  gs_debug_level = GS_LEVEL_WARN;
}

/* strtoull skips leading white space and takes a sign: ' -1' became
 * 2^64-1. A number starts with a digit (as NCCL's and mimalloc's option
 * readers require of a plain value). */
static void test_numbers_reject_space_and_sign(void **state) {
  char err[512];
  uint64_t v = 7;
  static const char *const bad[] = {" -1", " 5", "\n1", "\x0c" "2", "+3", "-0", "\t9", NULL};
  for (int i = 0; bad[i]; i++) {
    assert_int_equal(options_parse_u64("V", bad[i], 0, UINT64_MAX, &v, err, sizeof err), -1);
    assert_int_equal(options_parse_size("S", bad[i], &v, err, sizeof err), -1);
  }
  assert_int_equal(v, 7);
  assert_int_equal(options_parse_size("S", " -1", &v, err, sizeof err), -1);
  assert_string_equal(err, "S=' -1': expected a size in bytes, optionally with K, M, G or T (e.g. 512M)");
  assert_int_equal(options_parse_u64("V", "\x0c" "2", 0, 9, &v, err, sizeof err), -1);
  assert_string_equal(err, "V='\\x0c2': expected a whole number from 0 to 9");
  setenv("GEMMSHIM_FFMA_MAX_BYTES", " -1", 1);
  options_init();
  assert_int_equal(gs_opt.passthrough, 1);
  assert_int_equal(gs_opt.ffma_max_bytes, 1ull << 30); /* the default, not 2^64-1 */
  gs_fault_clear();
  assert_int_equal(gs_fault_parse("write: 1", err, sizeof err), -1);
  assert_string_equal(err, "GEMMSHIM_FAULT: bad count in 'write: 1'; expected a number from 1, optionally followed by '+'");
  assert_int_equal(gs_fault_parse("write:+1", err, sizeof err), -1);
  assert_int_equal(gs_fault_hit(GS_SYS_write), 0);
}

/* One problem, one line, with what was expected and what happens instead:
 * a newline in a value used to start a forged line of its own, and a long
 * value pushed the rest out of the 1024-byte line. */
static void test_values_escaped_and_cut(void **state) {
  setenv("GEMMSHIM_MODE", "fp8\ngemmshim vm:1:1 INFO fake", 1);
  options_init();
  expect_one_warning("GEMMSHIM_MODE='fp8\\ngemmshim vm:1:1 INFO fake': expected auto, native, ffma, fp8 or fp16; "
                     "running pass-through (every GEMM native)\n");
  static char big[100001];
  memset(big, 'x', sizeof big - 1);
  setenv("GEMMSHIM_MODE", big, 1);
  options_init_fresh();
  char want[512];
  snprintf(want, sizeof want, "GEMMSHIM_MODE='%.96s...(100000 bytes)': expected auto, native, ffma, fp8 or fp16; "
           "running pass-through (every GEMM native)\n", big);
  expect_one_warning(want);
  unsetenv("GEMMSHIM_MODE");
  big[3000] = '\0';
  char fault[3100];
  snprintf(fault, sizeof fault, "%.3000s:1", big);
  setenv("GEMMSHIM_FAULT", fault, 1);
  options_init_fresh();
  snprintf(want, sizeof want, "GEMMSHIM_FAULT: unknown call '%.96s...(3000 bytes)'; expected a name from the shim's "
           "call table (e.g. write, cuMemAllocFromPoolAsync); running pass-through", big);
  expect_one_warning(want);
  setenv("GEMMSHIM_FAULT", "wr\x01te:1", 1);
  options_init_fresh();
  expect_one_warning("GEMMSHIM_FAULT: unknown call 'wr\\x01te'; expected a name");
}

/* Every bad setting is reported (only 8 problems found before the debug
 * output opened were kept). */
static void test_every_problem_reported(void **state) {
  static char long_path[700];
  memset(long_path, 'p', sizeof long_path - 1);
  static const char *const bad[][2] = {
      {"GEMMSHIM_MODE", "fast"},         {"GEMMSHIM_LOG_WAIT", "maybe"},     {"GEMMSHIM_DEBUG", "LOUD"},
      {"GEMMSHIM_FFMA_MAX_BYTES", "1Q"},  {"GEMMSHIM_FFMA_MIN_FLOPS", "-1"},   {"GEMMSHIM_FP8_FORMAT", "e3m4"},
      {"GEMMSHIM_FP8_BACKEND", "gpu"},   {"GEMMSHIM_FP8_HISTORY", "0"},      {"GEMMSHIM_FP8_MARGIN", "65"},
      {"GEMMSHIM_FP8_MAX_SITES", "0"},   {"GEMMSHIM_FP8_MAX_BYTES", " 1G"},   {"GEMMSHIM_DLSYM", "2"},
      {"GEMMSHIM_POOL_KEEP_BYTES", "256 M"},
  };
  size_t n_bad = sizeof bad / sizeof bad[0];
  for (size_t i = 0; i < n_bad; i++) setenv(bad[i][0], bad[i][1], 1);
  setenv("GEMMSHIM_POLICY", long_path, 1);
  setenv("GEMMSHIM_LOG", long_path, 1);
  setenv("GEMMSHIM_FAULT", "nosuchcall:1", 1);
  options_init();
  int lines;
  char *out = debug_output(&lines);
  assert_int_equal(lines, (int)n_bad + 3);
  for (size_t i = 0; i < n_bad; i++) {
    char want[128];
    snprintf(want, sizeof want, " WARN %s='%s': expected ", bad[i][0], bad[i][1]);
    if (!strstr(out, want)) fail_msg("no '%s' in '%s'", want, out);
  }
  assert_non_null(strstr(out, " WARN GEMMSHIM_POLICY: path of 699 bytes; expected at most 511; running pass-through"));
  assert_non_null(strstr(out, " WARN GEMMSHIM_LOG: path of 699 bytes; expected at most 511; running pass-through"));
  assert_non_null(strstr(out, " WARN GEMMSHIM_FAULT: unknown call 'nosuchcall'"));
}

/* A FIFO as the policy file is refused, whether a writer is there, comes
 * later or never: a FIFO with no writer reads as its end at once (fifo(7)),
 * which ran with no rules of its own and said nothing, and its text reaches
 * only the first process. Nothing opens it: a writer waiting for a reader
 * keeps waiting (open(2) on a FIFO blocks until the other end is opened). */
static void test_policy_fifo(void **state) {
  char fifo[256];
  snprintf(fifo, sizeof fifo, "/tmp/gemmshim-test-policy-fifo-%d", (int)getpid());
  unlink(fifo);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  setenv("GEMMSHIM_POLICY", fifo, 1);
  char want[512];
  snprintf(want, sizeof want,
           "GEMMSHIM_POLICY='%s': a FIFO or pipe; expected a regular file (a FIFO's text reaches only the first "
           "process that reads it); running pass-through",
           fifo);
  options_init_fresh(); /* no writer */
  assert_int_equal(gs_opt.passthrough, 1);
  assert_int_equal(gs_policy.n, 3); /* the built-in rules */
  expect_one_warning(want);
  int wr_keep = open(fifo, O_RDWR | O_NONBLOCK); /* a writer with a policy, never closing */
  assert_true(wr_keep >= 0);
  assert_int_equal(write(wr_keep, "native\n", 7), 7);
  options_init_fresh();
  expect_one_warning(want);
  char left[16];
  assert_int_equal(read(wr_keep, left, sizeof left), 7); /* not a byte taken */
  close(wr_keep);
  unlink(fifo);
}

/* A directory or another file that is not one: what it is and what was
 * expected ("cannot read (Is a directory)" said neither). */
static void test_policy_not_a_file(void **state) {
  setenv("GEMMSHIM_POLICY", "/tmp", 1);
  options_init_fresh();
  assert_int_equal(gs_opt.passthrough, 1);
  expect_one_warning("GEMMSHIM_POLICY='/tmp': a directory; expected a regular file; running pass-through");
}

/* A terminal that never ends its input: a bounded wait, then one message. */
static void test_policy_terminal_waits_bounded(void **state) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  assert_true(master >= 0);
  assert_int_equal(grantpt(master), 0);
  assert_int_equal(unlockpt(master), 0);
  char name[128];
  snprintf(name, sizeof name, "%s", ptsname(master));
  setenv("GEMMSHIM_POLICY", name, 1);
  options_init_fresh();
  close(master);
  assert_int_equal(gs_opt.passthrough, 1);
  char want[512];
  snprintf(want, sizeof want, "GEMMSHIM_POLICY='%s': cannot read (no end of input within 1000 ms); running pass-through",
           name);
  expect_one_warning(want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_u64),
      cmocka_unit_test(test_parse_size),
      cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_keep_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mode_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_mode, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_bool_and_level, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_policy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_policy_file, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_fault_spec, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_spec_twice_or_refused_arms_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_relative_log_made_absolute, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_counting, setup, teardown),
      cmocka_unit_test_setup_teardown(test_info_prints_every_option, setup, teardown),
      cmocka_unit_test_setup_teardown(test_info_escapes_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_numbers_reject_space_and_sign, setup, teardown),
      cmocka_unit_test_setup_teardown(test_values_escaped_and_cut, setup, teardown),
      cmocka_unit_test_setup_teardown(test_every_problem_reported, setup, teardown),
      cmocka_unit_test_setup_teardown(test_policy_fifo, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_variables_warned, setup, teardown),
      cmocka_unit_test_setup_teardown(test_policy_not_a_file, setup, teardown),
      cmocka_unit_test_setup_teardown(test_policy_terminal_waits_bounded, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
