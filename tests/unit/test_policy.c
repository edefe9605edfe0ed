/* test_policy.c: the policy table: what a file parses into, the exact
 * message for each kind of malformed file, which rule a GEMM matches, and
 * how a rule is described in the routing log. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <library_types.h>
#include <cublas_api.h>

#include "policy.h"

#define ANY_TYPES UINT64_MAX
#define ANY_APIS UINT32_MAX
#define TYPE_BIT(v) ((uint64_t)1 << (v))
#define COMPUTE_BIT(v) ((uint64_t)1 << ((v) - 64))
#define API_BIT(v) ((uint32_t)1 << (v))
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Tables are 12 KiB; static keeps them off the test's stack. */
static policy_table table;
static char err[1024];

static int parse_text(const char *text, const char *path) {
  return policy_parse(&table, text, strlen(text), path, err, sizeof err);
}

static void parse_ok(const char *text) {
  int rc = parse_text(text, "p.txt");
  assert_string_equal(err, "");
  assert_int_equal(rc, 0);
}

static void assert_builtin_table(const policy_table *t) {
  static policy_table builtin;
  policy_builtin(&builtin);
  assert_int_equal(t->n, builtin.n);
  assert_memory_equal(t->rules, builtin.rules, sizeof(policy_rule) * (size_t)builtin.n);
  assert_string_equal(t->source, "");
}

/* The message is exact, and a failed parse leaves the built-in table. */
static void assert_parse_error_len(const char *text, size_t len, const char *message) {
  memset(&table, 0x5a, sizeof table);
  assert_int_equal(policy_parse(&table, text, len, "p.txt", err, sizeof err), -1);
  assert_string_equal(err, message);
  assert_builtin_table(&table);
}

static void assert_parse_error(const char *text, const char *message) {
  assert_parse_error_len(text, strlen(text), message);
}

static const char sm_expected[] =
    "expected major.minor, a range like 6.0-7.5, an open range 8.9- or -7.5, or any";

static const char types_expected[] =
    "expected fp32, fp64, fp16, i8, c32f, c64f, c16f, c8i, u8, i32, bf16, e4m3, e5m2 or any";

/* ------------------------------------------------------------------------ */
/* Parsing valid files. */

static void test_builtin_table(void **state) {
  (void)state;
  policy_builtin(&table);
  assert_int_equal(table.n, 3);
  const policy_rule *fp16 = &table.rules[0], *ffma = &table.rules[1], *native = &table.rules[2];
  /* Volta and Turing: fp16 tensor cores; Pascal: none (the CUDA C++
   * Programming Guide's feature table by compute capability). */
  assert_int_equal(fp16->route, GS_ROUTE_FP16);
  assert_int_equal(fp16->has_sm, 1);
  assert_int_equal(fp16->sm_lo, 70);
  assert_int_equal(fp16->sm_hi, 75);
  assert_int_equal(fp16->ab_types, TYPE_BIT(CUDA_R_16BF));
  assert_int_equal(fp16->c_types, ANY_TYPES);
  assert_int_equal(fp16->compute_types, COMPUTE_BIT(CUBLAS_COMPUTE_32F));
  assert_int_equal(fp16->apis, ANY_APIS);
  assert_int_equal(fp16->line, 0);
  assert_int_equal(ffma->route, GS_ROUTE_FFMA);
  assert_int_equal(ffma->has_sm, 1);
  assert_int_equal(ffma->sm_lo, 60);
  assert_int_equal(ffma->sm_hi, 69);
  assert_int_equal(ffma->ab_types, TYPE_BIT(CUDA_R_16BF));
  assert_int_equal(ffma->c_types, ANY_TYPES);
  assert_int_equal(ffma->compute_types, COMPUTE_BIT(CUBLAS_COMPUTE_32F));
  assert_int_equal(ffma->apis, ANY_APIS);
  assert_int_equal(ffma->line, 0);
  assert_int_equal(native->route, GS_ROUTE_NATIVE);
  assert_int_equal(native->has_sm, 0);
  assert_int_equal(native->ab_types, ANY_TYPES);
  assert_int_equal(native->compute_types, ANY_TYPES);
  assert_int_equal(native->line, 0);
  assert_string_equal(table.source, "");
}

static void test_empty_file_keeps_builtins(void **state) {
  (void)state;
  assert_int_equal(policy_parse(&table, NULL, 0, "p.txt", err, sizeof err), 0);
  assert_int_equal(table.n, 3);
  assert_int_equal(table.rules[0].route, GS_ROUTE_FP16);
  assert_string_equal(table.source, "p.txt");
  parse_ok("# only a comment\n\n   \t\n");
  assert_int_equal(table.n, 3);
  parse_ok("builtin off\n");
  assert_int_equal(table.n, 0);
}

static void test_parse_fields(void **state) {
  (void)state;
  parse_ok("# header\r\n"
           "\r\n"
           "  fp8\tsm=8.9-  ab=e4m3,E5M2 # trailing comment\r\n"
           "FFMA sm=6.1 c=fp32 compute=32f,32f_fast_tf32 api=cublasGemmEx,CUBLASLTMATMUL\n"
           "native sm=any ab=* c=any compute=any api=any#no space before it\n"
           "ffma sm=-7.5\n"
           "ffma sm=10.0-12.1");
  assert_int_equal(table.n, 8);
  const policy_rule *r = table.rules;
  assert_int_equal(r[0].route, GS_ROUTE_FP8);
  assert_int_equal(r[0].line, 3);
  assert_int_equal(r[0].has_sm, 1);
  assert_int_equal(r[0].sm_lo, 89);
  assert_int_equal(r[0].sm_hi, 1000);
  assert_int_equal(r[0].ab_types, TYPE_BIT(CUDA_R_8F_E4M3) | TYPE_BIT(CUDA_R_8F_E5M2));
  assert_int_equal(r[0].c_types, ANY_TYPES);
  assert_int_equal(r[0].compute_types, ANY_TYPES);
  assert_int_equal(r[0].apis, ANY_APIS);

  assert_int_equal(r[1].route, GS_ROUTE_FFMA);
  assert_int_equal(r[1].line, 4);
  assert_int_equal(r[1].sm_lo, 61);
  assert_int_equal(r[1].sm_hi, 61);
  assert_int_equal(r[1].ab_types, ANY_TYPES);
  assert_int_equal(r[1].c_types, TYPE_BIT(CUDA_R_32F));
  assert_int_equal(r[1].compute_types,
                   COMPUTE_BIT(CUBLAS_COMPUTE_32F) | COMPUTE_BIT(CUBLAS_COMPUTE_32F_FAST_TF32));
  assert_int_equal(r[1].apis, API_BIT(GS_API_GEMM_EX) | API_BIT(GS_API_LT_MATMUL));

  assert_int_equal(r[2].route, GS_ROUTE_NATIVE);
  assert_int_equal(r[2].has_sm, 0);
  assert_int_equal(r[2].ab_types, ANY_TYPES);
  assert_int_equal(r[2].c_types, ANY_TYPES);
  assert_int_equal(r[2].compute_types, ANY_TYPES);
  assert_int_equal(r[2].apis, ANY_APIS);

  assert_int_equal(r[3].sm_lo, 0);
  assert_int_equal(r[3].sm_hi, 75);
  assert_int_equal(r[4].sm_lo, 100);
  assert_int_equal(r[4].sm_hi, 121);
  assert_int_equal(r[4].line, 7);
  assert_int_equal(r[5].line, 0);
  assert_int_equal(r[5].route, GS_ROUTE_FP16);
  assert_int_equal(r[6].route, GS_ROUTE_FFMA);
  assert_int_equal(r[7].route, GS_ROUTE_NATIVE);
}

static void test_builtin_directive_last_wins(void **state) {
  (void)state;
  parse_ok("builtin off\nfp8\nbuiltin ON\n");
  assert_int_equal(table.n, 4);
  parse_ok("builtin on\nfp8\nBUILTIN off\n");
  assert_int_equal(table.n, 1);
}

static void test_line_limit_is_inclusive(void **state) {
  (void)state;
  static char text[1100];
  memset(text, ' ', 1024);
  memcpy(text, "native", 6);
  memcpy(text + 1024, "\r\nfp8", 6);
  parse_ok(text);
  assert_int_equal(table.n, 5);
}

static void test_rule_limit(void **state) {
  (void)state;
  static char text[POLICY_MAX_RULES * 8 + 64];
  text[0] = '\0';
  strcat(text, "builtin off\n");
  for (int i = 0; i < POLICY_MAX_RULES; i++) strcat(text, "native\n");
  parse_ok(text);
  assert_int_equal(table.n, POLICY_MAX_RULES);

  text[0] = '\0';
  for (int i = 0; i < POLICY_MAX_RULES - 3; i++) strcat(text, "native\n");
  parse_ok(text);
  assert_int_equal(table.n, POLICY_MAX_RULES);
  assert_int_equal(table.rules[POLICY_MAX_RULES - 1].line, 0);
}

/* ------------------------------------------------------------------------ */
/* Malformed files: one exact message each. */

static void test_error_unknown_route(void **state) {
  (void)state;
  assert_parse_error("ffmaa\n", "p.txt:1: unknown route 'ffmaa'; expected native, ffma, fp8 or fp16");
  assert_parse_error("# c\r\n\r\nnative\r\nnative\r\nfp9 ab=bf16\r\n",
                     "p.txt:5: unknown route 'fp9'; expected native, ffma, fp8 or fp16");
  assert_parse_error("ab=bf16 native\n",
                     "p.txt:1: 'ab=bf16' before a route; expected a route first: native, ffma, "
                     "fp8 or fp16");
}

static void test_error_unknown_key(void **state) {
  (void)state;
  assert_parse_error("native ab_type=bf16\n",
                     "p.txt:1: unknown key 'ab_type'; expected sm, ab, c, compute, api, caller, m, n, k, batch or "
                     "site");
  assert_parse_error("native =bf16\n", "p.txt:1: '=bf16' has no key; expected key=value");
}

static void test_error_missing_value(void **state) {
  (void)state;
  assert_parse_error("native ab\n", "p.txt:1: 'ab' has no value; expected key=value");
  assert_parse_error("native ffma\n", "p.txt:1: 'ffma' has no value; expected key=value");
}

static void test_error_empty_value(void **state) {
  (void)state;
  assert_parse_error("native ab=\n",
                     "p.txt:1: 'ab=' has an empty value; expected a comma-separated list of "
                     "types, or any");
  assert_parse_error("native c=\n",
                     "p.txt:1: 'c=' has an empty value; expected a comma-separated list of "
                     "types, or any");
  assert_parse_error("native compute=\n",
                     "p.txt:1: 'compute=' has an empty value; expected a comma-separated list "
                     "of compute types, or any");
  assert_parse_error("native api=\n",
                     "p.txt:1: 'api=' has an empty value; expected a comma-separated list of "
                     "entry points, or any");
  char message[256];
  snprintf(message, sizeof message, "p.txt:1: 'sm=' has an empty value; %s", sm_expected);
  assert_parse_error("native sm=\n", message);
}

static void test_error_unknown_names_in_lists(void **state) {
  (void)state;
  char message[512];
  snprintf(message, sizeof message, "p.txt:1: unknown type 'fp17' in ab; %s", types_expected);
  assert_parse_error("native ab=bf16,fp17\n", message);
  snprintf(message, sizeof message, "p.txt:1: unknown type 'tf32' in c; %s", types_expected);
  assert_parse_error("native c=tf32\n", message);
  assert_parse_error("native compute=32x\n",
                     "p.txt:1: unknown compute type '32x' in compute; expected 16f, "
                     "16f_pedantic, 32f, 32f_pedantic, 64f, 64f_pedantic, 32i, 32i_pedantic, "
                     "32f_fast_16f, 32f_fast_16bf, 32f_fast_tf32, 32f_emulated_16bfx9, "
                     "64f_emulated_fixedpoint or any");
  assert_parse_error("native api=cublasGemmEx,cublasSgemm\n",
                     "p.txt:1: unknown entry point 'cublasSgemm' in api; expected "
                     "cublasGemmEx, cublasGemmEx_64, cublasGemmStridedBatchedEx, "
                     "cublasGemmStridedBatchedEx_64, cublasGemmBatchedEx, "
                     "cublasGemmBatchedEx_64, cublasLtMatmul or any");
}

static void test_error_list_shape(void **state) {
  (void)state;
  assert_parse_error("native c=fp32,,bf16\n",
                     "p.txt:1: empty type in 'c=fp32,,bf16'; expected a comma-separated list "
                     "of types, or any");
  assert_parse_error("native ab=bf16,\n",
                     "p.txt:1: empty type in 'ab=bf16,'; expected a comma-separated list of "
                     "types, or any");
  assert_parse_error("native api=,cublasGemmEx\n",
                     "p.txt:1: empty entry point in 'api=,cublasGemmEx'; expected a "
                     "comma-separated list of entry points, or any");
  assert_parse_error("native ab=bf16,any\n",
                     "p.txt:1: 'any' inside the list 'ab=bf16,any'; expected ab=any alone or a "
                     "list without it");
}

static void test_error_bad_sm(void **state) {
  (void)state;
  static const char *const bad[] = {"6.x", "6", "6.", ".5", "6.10", "100.0", "0.5", "-",
                                    "6.0-7.5-8.0", "6.0--", "a.b", "6,1", "+6.1", "6.1x"};
  char text[64], message[256];
  for (size_t i = 0; i < COUNT_OF(bad); i++) {
    snprintf(text, sizeof text, "native sm=%s", bad[i]);
    snprintf(message, sizeof message, "p.txt:1: bad sm '%s'; %s", bad[i], sm_expected);
    assert_parse_error(text, message);
  }
}

static void test_error_inverted_sm_range(void **state) {
  (void)state;
  assert_parse_error("native sm=7.5-6.0\n",
                     "p.txt:1: inverted sm range '7.5-6.0'; expected the lower bound first, "
                     "like 6.0-7.5");
  parse_ok("native sm=7.5-7.5\n");
  assert_int_equal(table.rules[0].sm_lo, 75);
  assert_int_equal(table.rules[0].sm_hi, 75);
}

static void test_error_duplicate_key(void **state) {
  (void)state;
  assert_parse_error("native ab=bf16 c=fp32 AB=fp16\n",
                     "p.txt:1: duplicate key 'AB'; expected each key at most once per rule");
  assert_parse_error("native sm=any sm=8.0\n",
                     "p.txt:1: duplicate key 'sm'; expected each key at most once per rule");
}

static void test_error_builtin_directive(void **state) {
  (void)state;
  assert_parse_error("builtin\n", "p.txt:1: 'builtin' alone; expected builtin off or builtin on");
  assert_parse_error("builtin maybe\n",
                     "p.txt:1: builtin 'maybe'; expected builtin off or builtin on");
  assert_parse_error("builtin off now\n",
                     "p.txt:1: 'now' after builtin off; expected nothing more on the line");
  parse_ok("builtin off # a comment is not more\n");
}

static void test_error_too_many_rules(void **state) {
  (void)state;
  static char text[POLICY_MAX_RULES * 8 + 64];
  strcpy(text, "builtin off\n");
  for (int i = 0; i <= POLICY_MAX_RULES; i++) strcat(text, "native\n");
  assert_parse_error(text, "p.txt:258: rule 257 is over the limit; expected at most 256 rules");

  /* 254 file rules would fit alone, but not with the three built-in ones. */
  strcpy(text, "# many\n");
  for (int i = 0; i < POLICY_MAX_RULES - 2; i++) strcat(text, "native\n");
  assert_parse_error(text,
                     "p.txt:255: rule 254 leaves no room for the 3 built-in rules; expected at "
                     "most 253 rules, or builtin off");
}

static void test_error_nul_byte(void **state) {
  (void)state;
  static const char text[] = "native\nfp8 ab=e4\0m3\n";
  assert_parse_error_len(text, sizeof text - 1, "p.txt:2: NUL byte at column 10; expected text");
  static const char in_comment[] = "native # \0\n";
  assert_parse_error_len(in_comment, sizeof in_comment - 1,
                         "p.txt:1: NUL byte at column 10; expected text");
}

static void test_error_long_line(void **state) {
  (void)state;
  static char text[1100];
  memset(text, 0, sizeof text);
  memset(text, ' ', 1025);
  memcpy(text, "native", 6);
  assert_parse_error(text, "p.txt:1: line of 1025 characters; expected at most 1024");
  text[1024] = '#'; /* a comment counts too */
  assert_parse_error(text, "p.txt:1: line of 1025 characters; expected at most 1024");
}

/* Found text is escaped and cut short so the message stays readable. */
static void test_error_shows_found_text_safely(void **state) {
  (void)state;
  assert_parse_error("nat\x01ive\n",
                     "p.txt:1: unknown route 'nat\\x01ive'; expected native, ffma, fp8 or fp16");
  assert_parse_error("native\rffma\n",
                     "p.txt:1: unknown route 'native\\x0dffma'; expected native, ffma, fp8 or fp16");
  char text[128], message[256];
  memset(text, 'x', 100);
  text[100] = '\0';
  snprintf(message, sizeof message,
           "p.txt:1: unknown route '%.48s...'; expected native, ffma, fp8 or fp16", text);
  assert_parse_error(text, message);
}

static void test_error_buffer_limits(void **state) {
  (void)state;
  char small[12];
  assert_int_equal(policy_parse(&table, "ffmaa", 5, "p.txt", small, sizeof small), -1);
  assert_string_equal(small, "p.txt:1: un");
  assert_int_equal(policy_parse(&table, "ffmaa", 5, "p.txt", NULL, 0), -1);
  small[0] = 'z';
  assert_int_equal(policy_parse(&table, "ffmaa", 5, "p.txt", small, 0), -1);
  assert_int_equal(small[0], 'z');
  assert_builtin_table(&table);
}

/* ------------------------------------------------------------------------ */
/* Matching. */

static void assert_describes(int i, const char *want) {
  char buf[256];
  int n = policy_rule_describe(&table, i, buf, sizeof buf);
  assert_string_equal(buf, want);
  assert_int_equal(n, (int)strlen(want));
}

static policy_key gemm(int sm, int a, int b, int c, int compute, gs_api api) {
  policy_key k = {.sm = sm, .a_type = a, .b_type = b, .c_type = c, .compute_type = compute,
                  .api = api};
  return k;
}

static policy_key bf16_gemm(int sm) {
  return gemm(sm, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, GS_API_GEMM_EX);
}

static int match(policy_key k) { return policy_match(&table, &k); }

/* m, n, k and batch take a value or a range as sm does; site takes the
 * log's 16-hex-digit ids. Rules with them match only the GEMMs they name,
 * and policy_match_in sees the file's rules apart from the built-in ones. */
static void test_size_and_site_keys(void **state) {
  (void)state;
  parse_ok("native m=50257\nffma k=-1024 batch=2-\nfp8 n=64-128 site=00000000000000ab,CD\n");
  static policy_table builtin;
  policy_builtin(&builtin);
  assert_int_equal(table.n_file, 3);
  assert_int_equal(table.n, 3 + builtin.n);
  const int native_rule = table.n - 1; /* the built-in catch-all; the others are for sm below 8.0 */
  assert_int_equal(table.has_site_keys, 1);
  assert_describes(0, "p.txt:1 (native m=50257)");
  assert_describes(1, "p.txt:2 (ffma k=-1024 batch=2-)");
  assert_describes(2, "p.txt:3 (fp8 n=64-128 site=00000000000000ab,00000000000000cd)");
  policy_key k = bf16_gemm(90);
  k.m = 50257, k.n = 768, k.k = 4096, k.batch = 1;
  assert_int_equal(match(k), 0);
  k.m = 50256;
  assert_int_equal(match(k), native_rule);
  k.k = 1024, k.batch = 2;
  assert_int_equal(match(k), 1);
  k.batch = 1;
  assert_int_equal(match(k), native_rule);
  k.n = 128, k.site = 0xcd;
  assert_int_equal(match(k), 2);
  k.site = 0xce;
  assert_int_equal(match(k), native_rule);
  assert_int_equal(policy_rule_misses(&table, 2, &k), POLICY_MISS_SITE);
  k.n = 129;
  assert_int_equal(policy_rule_misses(&table, 2, &k), POLICY_MISS_SITE | POLICY_MISS_DIM(POLICY_DIM_N));
  /* Only the file's rules: none takes this GEMM. */
  assert_int_equal(policy_match_in(&table, &k, 0, table.n_file), -1);
  k.m = 50257;
  assert_int_equal(policy_match_in(&table, &k, 0, table.n_file), 0);
  assert_int_equal(policy_match_in(&table, &k, 1, table.n), native_rule);
  /* Without a site key the caller need not work the site out. */
  parse_ok("native m=1-\n");
  assert_int_equal(table.has_site_keys, 0);
  assert_describes(0, "p.txt:1 (native m=1-)");
  /* 0- is every size: described as written, so it parses again (a lone
   * "-" would not; found by fuzz_policy) */
  parse_ok("native m=0- k=0-64\n");
  assert_describes(0, "p.txt:1 (native m=0- k=-64)");
  assert_parse_error("native m=1-2-3\n", "p.txt:1: bad m '1-2-3'; expected a size like 1024, a range like 1-4096, an "
                                        "open range 1024- or -64, or any");
  assert_parse_error("native batch=x\n", "p.txt:1: bad batch 'x'; expected a size like 1024, a range like 1-4096, "
                                         "an open range 1024- or -64, or any");
  assert_parse_error("native n=9223372036854775808\n",
                     "p.txt:1: bad n '9223372036854775808'; expected a size like 1024, a range like 1-4096, an open "
                     "range 1024- or -64, or any");
  assert_parse_error("native k=8-4\n", "p.txt:1: inverted k range '8-4'; expected the lower bound first, like 1-4096");
  assert_parse_error("native site=1,2,3,4,5,6,7,8,9\n",
                     "p.txt:1: more than 8 sites in 'site=1,2,3,4,5,6,7,8,9'; expected at most 8 per rule (write "
                     "more rules)");
  assert_parse_error("native site=00000000000000abc\n",
                     "p.txt:1: bad site '00000000000000abc' in 'site=00000000000000abc'; expected call-site ids as "
                     "the routing log prints them (16 hex digits), comma-separated, or any");
  assert_parse_error("native m=1 m=2\n", "p.txt:1: duplicate key 'm'; expected each key at most once per rule");
}

static void test_match_builtin_sm_bounds_inclusive(void **state) {
  (void)state;
  policy_builtin(&table);
  assert_int_equal(match(bf16_gemm(60)), 1);
  assert_int_equal(match(bf16_gemm(61)), 1);
  assert_int_equal(match(bf16_gemm(69)), 1);
  assert_int_equal(match(bf16_gemm(70)), 0);
  assert_int_equal(match(bf16_gemm(72)), 0);
  assert_int_equal(match(bf16_gemm(75)), 0);
  assert_int_equal(match(bf16_gemm(53)), 2);
  assert_int_equal(match(bf16_gemm(59)), 2);
  assert_int_equal(match(bf16_gemm(76)), 2);
  assert_int_equal(match(bf16_gemm(80)), 2);
  assert_int_equal(match(bf16_gemm(POLICY_SM_UNKNOWN)), 2);
  policy_key fp16 = gemm(70, CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F,
                         GS_API_GEMM_EX);
  assert_int_equal(match(fp16), 2);
  policy_key fast = gemm(70, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF,
                         GS_API_GEMM_EX);
  assert_int_equal(match(fast), 2);
}

static void test_match_first_rule_wins(void **state) {
  (void)state;
  parse_ok("fp8 ab=bf16\nffma ab=bf16\nnative\n");
  assert_int_equal(match(bf16_gemm(70)), 0);
  parse_ok("ffma sm=8.0\nfp8 ab=bf16\n");
  assert_int_equal(match(bf16_gemm(80)), 0);
  assert_int_equal(match(bf16_gemm(90)), 1);
}

static void test_match_file_rules_before_builtins(void **state) {
  (void)state;
  parse_ok("native sm=7.0 ab=bf16\n");
  assert_int_equal(table.n, 4);
  assert_int_equal(match(bf16_gemm(70)), 0);
  assert_int_equal(match(bf16_gemm(75)), 1);
  assert_int_equal(table.rules[1].route, GS_ROUTE_FP16);
  assert_int_equal(match(bf16_gemm(61)), 2);
  assert_int_equal(table.rules[2].route, GS_ROUTE_FFMA);
  assert_int_equal(match(bf16_gemm(80)), 3);
  assert_int_equal(table.rules[3].route, GS_ROUTE_NATIVE);
}

static void test_match_builtin_off(void **state) {
  (void)state;
  parse_ok("fp8 ab=e4m3\nbuiltin off\n");
  assert_int_equal(match(bf16_gemm(70)), -1);
  policy_key e4m3 = gemm(90, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F,
                         GS_API_LT_MATMUL);
  assert_int_equal(match(e4m3), 0);
}

static void test_match_open_ranges(void **state) {
  (void)state;
  parse_ok("fp8 sm=8.9-\nffma sm=-7.5\nbuiltin off\n");
  assert_int_equal(match(bf16_gemm(89)), 0);
  assert_int_equal(match(bf16_gemm(121)), 0);
  assert_int_equal(match(bf16_gemm(999)), 0);
  assert_int_equal(match(bf16_gemm(88)), -1);
  assert_int_equal(match(bf16_gemm(80)), -1);
  assert_int_equal(match(bf16_gemm(75)), 1);
  assert_int_equal(match(bf16_gemm(10)), 1);
}

/* An unknown device skips every rule with an sm key; sm=any is no key. */
static void test_match_unknown_sm(void **state) {
  (void)state;
  parse_ok("fp8 sm=8.9-\nffma sm=-7.5\nnative sm=1.0-99.9\nfp8 sm=any ab=bf16\n");
  assert_int_equal(match(bf16_gemm(POLICY_SM_UNKNOWN)), 3);
  policy_key fp16 = gemm(POLICY_SM_UNKNOWN, CUDA_R_16F, CUDA_R_16F, CUDA_R_32F,
                         CUBLAS_COMPUTE_32F, GS_API_GEMM_EX);
  assert_int_equal(match(fp16), 6); /* built-in fp16 and ffma have sm; built-in native has not */
  policy_key negative = bf16_gemm(-7);
  assert_int_equal(match(negative), 3);
}

static void test_match_ab_needs_both(void **state) {
  (void)state;
  parse_ok("ffma ab=bf16\nfp8 ab=e4m3,e5m2\nbuiltin off\n");
  int bf16 = CUDA_R_16BF, fp16 = CUDA_R_16F, e4m3 = CUDA_R_8F_E4M3, e5m2 = CUDA_R_8F_E5M2;
  int fp32 = CUDA_R_32F, c32 = CUBLAS_COMPUTE_32F;
  assert_int_equal(match(gemm(80, bf16, bf16, fp32, c32, GS_API_GEMM_EX)), 0);
  assert_int_equal(match(gemm(80, bf16, fp16, fp32, c32, GS_API_GEMM_EX)), -1);
  assert_int_equal(match(gemm(80, fp16, bf16, fp32, c32, GS_API_GEMM_EX)), -1);
  assert_int_equal(match(gemm(80, e4m3, e5m2, fp32, c32, GS_API_LT_MATMUL)), 1);
  assert_int_equal(match(gemm(80, e5m2, e4m3, fp32, c32, GS_API_LT_MATMUL)), 1);
  assert_int_equal(match(gemm(80, e4m3, bf16, fp32, c32, GS_API_LT_MATMUL)), -1);
}

static void test_match_c_and_compute(void **state) {
  (void)state;
  parse_ok("ffma c=bf16 compute=32f,32f_pedantic\nfp8 c=fp32\nbuiltin off\n");
  int bf16 = CUDA_R_16BF, fp32 = CUDA_R_32F;
  assert_int_equal(match(gemm(80, bf16, bf16, bf16, CUBLAS_COMPUTE_32F, GS_API_GEMM_EX)), 0);
  assert_int_equal(match(gemm(80, bf16, bf16, bf16, CUBLAS_COMPUTE_32F_PEDANTIC, GS_API_GEMM_EX)),
                   0);
  assert_int_equal(match(gemm(80, bf16, bf16, bf16, CUBLAS_COMPUTE_16F, GS_API_GEMM_EX)), -1);
  assert_int_equal(match(gemm(80, bf16, bf16, fp32, CUBLAS_COMPUTE_16F, GS_API_GEMM_EX)), 1);
}

static void test_match_api_lists(void **state) {
  (void)state;
  parse_ok("fp8 api=cublasLtMatmul\nffma api=cublasGemmEx,cublasGemmStridedBatchedEx_64\n"
           "builtin off\n");
  policy_key k = bf16_gemm(80);
  k.api = GS_API_LT_MATMUL;
  assert_int_equal(match(k), 0);
  k.api = GS_API_GEMM_EX;
  assert_int_equal(match(k), 1);
  k.api = GS_API_GEMM_STRIDED_BATCHED_EX_64;
  assert_int_equal(match(k), 1);
  k.api = GS_API_GEMM_BATCHED_EX;
  assert_int_equal(match(k), -1);
  k.api = GS_API_COUNT;
  assert_int_equal(match(k), -1);
}

/* Values without a bit (types >= 64, compute types outside 64..127) never
 * match a list, yet match "any". */
static void test_match_out_of_range_values(void **state) {
  (void)state;
  parse_ok("ffma ab=bf16\nfp8 c=fp32\nffma compute=32f\nfp8 api=cublasGemmEx\nnative\n"
           "builtin off\n");
  int bf16 = CUDA_R_16BF, fp32 = CUDA_R_32F, c32 = CUBLAS_COMPUTE_32F;
  static const int odd_types[] = {64, 65, 200, -1, -64};
  for (size_t i = 0; i < COUNT_OF(odd_types); i++) {
    int t = odd_types[i];
    assert_int_equal(match(gemm(80, t, t, fp32, c32, GS_API_GEMM_EX)), 1);
    assert_int_equal(match(gemm(80, bf16, t, fp32, c32, GS_API_GEMM_EX)), 1);
    assert_int_equal(match(gemm(80, t, t, t, c32, GS_API_GEMM_EX)), 2);
  }
  static const int odd_computes[] = {63, 128, 0, -1, 1000};
  for (size_t i = 0; i < COUNT_OF(odd_computes); i++) {
    int c = odd_computes[i];
    assert_int_equal(match(gemm(80, fp32, fp32, bf16, c, GS_API_GEMM_EX)), 3);
    assert_int_equal(match(gemm(80, fp32, fp32, bf16, c, GS_API_LT_MATMUL)), 4);
  }
  assert_int_equal(match(gemm(80, fp32, fp32, bf16, c32, (gs_api)40)), 2);
  assert_int_equal(match(gemm(80, fp32, fp32, bf16, 0, (gs_api)-1)), 4);
}

/* GEMMs an NVIDIA library makes inside itself (cuSOLVER imports
 * cublasGemmEx and libcublas imports cublasLtMatmul: `nm -D` of
 * /usr/local/cuda/lib64/libcusolver.so.12 and libcublas.so.13) match only
 * rules that name their caller; a rule without a caller key is the app's. */
static void test_match_caller(void **state) {
  (void)state;
  policy_builtin(&table);
  policy_key k = bf16_gemm(61);
  assert_int_equal(match(k), 1);
  k.caller = GS_CALLER_CUSOLVER;
  assert_int_equal(match(k), -1);
  k.caller = GS_CALLER_CUBLAS;
  assert_int_equal(match(k), -1);
  assert_int_equal(policy_route_without_sm(&table, &k), -1);

  parse_ok("fp8 caller=cusolver,cudnn\nnative caller=any ab=fp32\nffma caller=app,cublas\n");
  assert_int_equal(table.rules[0].callers,
                   (uint32_t)(1u << GS_CALLER_CUSOLVER | 1u << GS_CALLER_CUDNN));
  assert_int_equal(table.rules[1].callers, UINT32_MAX);
  assert_int_equal(table.rules[3].callers, 1u << GS_CALLER_APP); /* built-in */
  k = bf16_gemm(80);
  k.caller = GS_CALLER_CUSOLVER;
  assert_int_equal(match(k), 0);
  k.caller = GS_CALLER_CUBLAS;
  assert_int_equal(match(k), 2);
  k.caller = GS_CALLER_NCCL;
  assert_int_equal(match(k), -1);
  k.caller = GS_CALLER_APP;
  assert_int_equal(match(k), 2);
  k.a_type = k.b_type = CUDA_R_32F;
  k.caller = GS_CALLER_TENSORRT;
  assert_int_equal(match(k), 1);
  k.caller = (gs_caller)40; /* no bit: only "any" */
  assert_int_equal(match(k), 1);
  k.caller = GS_CALLER_CUSOLVER;
  assert_int_equal(policy_route_without_sm(&table, &k), GS_ROUTE_FP8);

  assert_describes(0, "p.txt:1 (fp8 caller=cusolver,cudnn)");
  assert_describes(1, "p.txt:2 (native ab=fp32 caller=any)");
  assert_describes(2, "p.txt:3 (ffma caller=app,cublas)");
  assert_describes(3, "built-in rule 1 (fp16 sm=7.0-7.5 ab=bf16 compute=32f)");
  assert_describes(4, "built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)");

  assert_parse_error("fp8 caller=cusolvr\n",
                     "p.txt:1: unknown caller 'cusolvr' in caller; expected app, cublas, cublaslt, "
                     "cusolver, cusparse, cusparselt, cufft, cudnn, nccl, tensorrt, cutensor, cudss or any");
  assert_parse_error("fp8 caller=\n",
                     "p.txt:1: 'caller=' has an empty value; expected a comma-separated list of callers, or any");
}

/* ------------------------------------------------------------------------ */
/* Describing rules. */

static void test_describe_builtin(void **state) {
  (void)state;
  policy_builtin(&table);
  assert_describes(0, "built-in rule 1 (fp16 sm=7.0-7.5 ab=bf16 compute=32f)");
  assert_describes(1, "built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)");
  assert_describes(2, "built-in rule 3 (native)");
}

static void test_describe_file_rules(void **state) {
  (void)state;
  static const char text[] =
      "# x\n\n"
      "fp8 sm=8.9- ab=bf16,fp16\n"
      "ffma sm=6.1 c=fp32 compute=32f_fast_tf32,32f api=cublasLtMatmul,cublasGemmEx\n"
      "native sm=-7.5 ab=any\n"
      "NATIVE sm=6.0-7.5 c=FP32\n"
      "fp8 sm=any\n";
  assert_int_equal(policy_parse(&table, text, strlen(text), "/etc/p.txt", err, sizeof err), 0);
  assert_describes(0, "/etc/p.txt:3 (fp8 sm=8.9- ab=fp16,bf16)");
  assert_describes(1, "/etc/p.txt:4 (ffma sm=6.1 c=fp32 compute=32f,32f_fast_tf32 "
                      "api=cublasGemmEx,cublasLtMatmul)");
  assert_describes(2, "/etc/p.txt:5 (native sm=-7.5)");
  assert_describes(3, "/etc/p.txt:6 (native sm=6.0-7.5 c=fp32)");
  assert_describes(4, "/etc/p.txt:7 (fp8)");
  assert_describes(5, "built-in rule 1 (fp16 sm=7.0-7.5 ab=bf16 compute=32f)");
  assert_describes(6, "built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)");
  assert_describes(7, "built-in rule 3 (native)");
  assert_describes(8, "no rule 8");
  assert_describes(-1, "no rule -1");
}

static void test_describe_unnamed_values(void **state) {
  (void)state;
  policy_builtin(&table);
  table.rules[2].ab_types = TYPE_BIT(CUDA_R_4I);
  table.rules[2].route = GS_ROUTE_COUNT;
  char want[128];
  snprintf(want, sizeof want, "built-in rule 3 (unknown(%d) ab=unknown(%d))",
           (int)GS_ROUTE_COUNT, (int)CUDA_R_4I);
  assert_describes(2, want);
}

static void test_describe_truncates_like_snprintf(void **state) {
  (void)state;
  policy_builtin(&table);
  static const char full[] = "built-in rule 1 (fp16 sm=7.0-7.5 ab=bf16 compute=32f)";
  char buf[10];
  assert_int_equal(policy_rule_describe(&table, 0, buf, sizeof buf), (int)strlen(full));
  assert_string_equal(buf, "built-in ");
  assert_int_equal(policy_rule_describe(&table, 0, NULL, 0), (int)strlen(full));
  char exact[sizeof full];
  assert_int_equal(policy_rule_describe(&table, 0, exact, sizeof exact), (int)strlen(full));
  assert_string_equal(exact, full);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_builtin_table),
      cmocka_unit_test(test_match_caller),
      cmocka_unit_test(test_empty_file_keeps_builtins),
      cmocka_unit_test(test_parse_fields),
      cmocka_unit_test(test_builtin_directive_last_wins),
      cmocka_unit_test(test_line_limit_is_inclusive),
      cmocka_unit_test(test_rule_limit),
      cmocka_unit_test(test_error_unknown_route),
      cmocka_unit_test(test_error_unknown_key),
      cmocka_unit_test(test_error_missing_value),
      cmocka_unit_test(test_error_empty_value),
      cmocka_unit_test(test_error_unknown_names_in_lists),
      cmocka_unit_test(test_error_list_shape),
      cmocka_unit_test(test_error_bad_sm),
      cmocka_unit_test(test_error_inverted_sm_range),
      cmocka_unit_test(test_error_duplicate_key),
      cmocka_unit_test(test_error_builtin_directive),
      cmocka_unit_test(test_error_too_many_rules),
      cmocka_unit_test(test_error_nul_byte),
      cmocka_unit_test(test_error_long_line),
      cmocka_unit_test(test_error_shows_found_text_safely),
      cmocka_unit_test(test_error_buffer_limits),
      cmocka_unit_test(test_match_builtin_sm_bounds_inclusive),
      cmocka_unit_test(test_match_first_rule_wins),
      cmocka_unit_test(test_match_file_rules_before_builtins),
      cmocka_unit_test(test_match_builtin_off),
      cmocka_unit_test(test_match_open_ranges),
      cmocka_unit_test(test_match_unknown_sm),
      cmocka_unit_test(test_match_ab_needs_both),
      cmocka_unit_test(test_match_c_and_compute),
      cmocka_unit_test(test_match_api_lists),
      cmocka_unit_test(test_match_out_of_range_values),
      cmocka_unit_test(test_describe_builtin),
      cmocka_unit_test(test_describe_file_rules),
      cmocka_unit_test(test_describe_unnamed_values),
      cmocka_unit_test(test_describe_truncates_like_snprintf),
      cmocka_unit_test(test_size_and_site_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
