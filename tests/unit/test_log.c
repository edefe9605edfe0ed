/* test_log.c: the routing log. The exact JSON of a record, path
 * placeholders, buffered writes (one write per flush, in order, from many
 * threads), every failure the log can meet (open, write, no flusher thread)
 * and fork, then the exit summary read back from the debug output. */
#define _GNU_SOURCE
#include <errno.h>
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
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "shim.h"
#include "../../kernels/accuracy_kernels.h"
/* cublasLt.h (through sys.h) has a declaration without a prototype. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include "sys.h"
#pragma GCC diagnostic pop

/* ThreadSanitizer cannot follow a child that starts a thread after a fork
 * in a process that had one (it reuses the parent's thread id and stops):
 * under it the fork tests run without flusher threads. */
#if defined(__SANITIZE_THREAD__)
#define FORK_WITHOUT_FLUSHER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FORK_WITHOUT_FLUSHER 1
#endif
#endif
#ifndef FORK_WITHOUT_FLUSHER
#define FORK_WITHOUT_FLUSHER 0
#endif

/* log.c's sizes: records flushed per write depend on them. A record takes
 * LOG_REC_HEADER bytes, then its backend and reason, rounded up to 8, in a
 * buffer of LOG_BIN_BYTES; its text is reserved LOG_TEXT_FIXED bytes plus 6
 * a string byte, of LOG_TEXT_BYTES; a buffer is written when the next
 * record fits either no more. */
#define LOG_BIN_BYTES (128u * 1024)
#define LOG_TEXT_BYTES (1024u * 1024)
#define LOG_TEXT_FIXED 2048
#define LOG_REC_HEADER 232
#define LOG_RECORD_MAX 4096

static char dir[64];

/* ---- helpers -------------------------------------------------------------- */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  for (size_t got; (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
  }
  fclose(f);
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

static void path_in_dir(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", dir, name); }

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* The log's text without its header lines (one per process, at its
 * first write: docs/log-format.md); how many of them name pid is counted
 * in *of_pid, and every one must name pid or this process. */
static char *without_headers(char *text, pid_t pid, int *of_pid) {
  char *out = text, *line = text;
  *of_pid = 0;
  while (*line) {
    char *end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) + 1 : strlen(line);
    if (strncmp(line, "{\"header\":", 10) == 0) {
      char mine[48], theirs[48];
      snprintf(theirs, sizeof theirs, ",\"pid\":%d,", (int)pid);
      snprintf(mine, sizeof mine, ",\"pid\":%d,", (int)getpid());
      int is_theirs = strstr(line, theirs) && strstr(line, theirs) < line + n;
      int is_mine = strstr(line, mine) && strstr(line, mine) < line + n;
      assert_true(is_theirs || is_mine);
      *of_pid += is_theirs;
    } else {
      memmove(out, line, n);
      out += n;
    }
    line += n;
  }
  *out = '\0';
  return text;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Start a fresh log writing to dir/name ("" = off) and debug output to
 * dir/debug_name ("" = stderr). */
static void start_log(const char *name, gs_level level, const char *debug_name) {
  if (name[0]) path_in_dir(gs_opt.log_path, sizeof gs_opt.log_path, name);
  else gs_opt.log_path[0] = '\0';
  if (debug_name[0]) path_in_dir(gs_debug_file, sizeof gs_debug_file, debug_name);
  else gs_debug_file[0] = '\0';
  gs_debug_level = level;
  debug_init();
  log_init();
}

static int teardown(void **state) {
  (void)state;
  log_shutdown();
  gs_fault_clear();
  gs_opt.log_wait = 0;
  gs_opt.log_path[0] = '\0';
  gs_debug_file[0] = '\0';
  gs_debug_level = GS_LEVEL_WARN;
  debug_init();
  log_init();
  return 0;
}

/* A cublasGemmEx call as decode.c and hooks.c fill it. */
static gs_call gemm_ex_call(void) {
  gs_call c;
  memset(&c, 0, sizeof c);
  c.g = (gs_gemm){
      .api = GS_API_GEMM_EX,
      .transa = 1, /* CUBLAS_OP_T */
      .transb = 0,
      .m = 4096, .n = 1024, .k = 512, .batch = 1,
      .a_type = 14, .b_type = 14, .c_type = 0, .d_type = -1, /* bf16 bf16 fp32 */
      .compute_type = 68, .scale_type = -1,                  /* CUBLAS_COMPUTE_32F */
      .lda = 512, .ldb = 512, .ldc = 4096, .ldd = -1,
      .stride_a = 0, .stride_b = 0, .stride_c = 0, .stride_d = 0,
      .order_a = -1, .order_b = -1, .order_c = -1, .order_d = -1,
      .pointer_mode = 0,
      .epilogue = -1,
      .bias_type = -1,
      .algo = 99, /* CUBLAS_GEMM_DEFAULT_TENSOR_OP */
      .stream = (void *)(uintptr_t)0x7f00dead0000ull,
      .decoded = 1,
  };
  c.seq = 42;
  c.t_ns = 1700000000123456789ull;
  c.dur_ns = 15300;
  c.tid = 4242;
  c.device = 0;
  c.sm = 61;
  c.site = 0x00ab12cd34ef5678ull;
  c.decided = GS_ROUTE_FFMA;
  c.route = GS_ROUTE_FFMA;
  c.backend = "sgemm";
  snprintf(c.reason, sizeof c.reason, "policy: built-in rule 1 (ffma sm=6.0-7.5 ab=bf16 compute=32f)");
  c.status = 0;
  return c;
}

static const char gemm_ex_line[] =
    "{\"seq\":42,\"t_ns\":1700000000123456789,\"tid\":4242,\"api\":\"cublasGemmEx\","
    "\"m\":4096,\"n\":1024,\"k\":512,\"batch\":1,\"transa\":\"T\",\"transb\":\"N\","
    "\"a_type\":\"bf16\",\"b_type\":\"bf16\",\"c_type\":\"fp32\",\"compute_type\":\"32f\","
    "\"lda\":512,\"ldb\":512,\"ldc\":4096,\"stride_a\":0,\"stride_b\":0,\"stride_c\":0,"
    "\"pointer_mode\":\"host\",\"algo\":99,\"device\":0,\"sm\":\"6.1\",\"stream\":\"0x7f00dead0000\","
    "\"site\":\"00ab12cd34ef5678\",\"decided\":\"ffma\",\"route\":\"ffma\",\"backend\":\"sgemm\","
    "\"reason\":\"policy: built-in rule 1 (ffma sm=6.0-7.5 ab=bf16 compute=32f)\",\"status\":0,"
    "\"status_name\":\"CUBLAS_STATUS_SUCCESS\",\"dur_ns\":15300}\n";

/* A small call for the buffering tests: seq and reason vary. */
static gs_call numbered_call(uint64_t seq) {
  gs_call c = gemm_ex_call();
  c.seq = seq;
  snprintf(c.reason, sizeof c.reason, "r%llu", (unsigned long long)seq);
  return c;
}

static void log_numbered(uint64_t seq) {
  gs_call c = numbered_call(seq);
  log_record(&c);
}

static size_t format_numbered(uint64_t seq, char *buf, size_t len) {
  gs_call c = numbered_call(seq);
  return log_format(&c, buf, len);
}

/* ---- log_format ----------------------------------------------------------- */
static void test_format_gemm_ex(void **state) {
  (void)state;
  gs_call c = gemm_ex_call();
  char buf[4096];
  size_t n = log_format(&c, buf, sizeof buf);
  assert_string_equal(buf, gemm_ex_line);
  assert_int_equal(n, strlen(gemm_ex_line));
}

static void test_format_lt_epilogue_bias(void **state) {
  (void)state;
  gs_call c = gemm_ex_call();
  static const uint16_t bias[4];
  c.g.api = GS_API_LT_MATMUL;
  c.g.transa = 1, c.g.transb = 0;
  c.g.m = 256, c.g.n = 128, c.g.k = 64, c.g.batch = 8;
  c.g.a_type = 28, c.g.b_type = 28, c.g.c_type = 14, c.g.d_type = 14; /* e4m3 e4m3 bf16 bf16 */
  c.g.compute_type = 68, c.g.scale_type = 0;                             /* 32f, fp32 */
  c.g.lda = 64, c.g.ldb = 64, c.g.ldc = 256, c.g.ldd = 256;
  c.g.stride_a = 16384, c.g.stride_b = 8192, c.g.stride_c = 32768, c.g.stride_d = 32768;
  c.g.order_a = c.g.order_b = c.g.order_c = c.g.order_d = 0;
  c.g.epilogue = 36; /* CUBLASLT_EPILOGUE_GELU_BIAS */
  c.g.bias = bias;
  c.g.bias_type = 14;
  c.g.pointer_mode = 1;
  c.g.algo = -1;
  c.g.stream = NULL;
  c.device = 3, c.sm = 90;
  c.site = 1;
  c.decided = GS_ROUTE_FP8, c.route = GS_ROUTE_NATIVE;
  c.backend = NULL;
  snprintf(c.reason, sizeof c.reason, "fp8 declined: n %% 16 != 0");
  c.status = 15;
  c.dur_ns = 0;
  char buf[4096];
  log_format(&c, buf, sizeof buf);
  assert_string_equal(buf,
                      "{\"seq\":42,\"t_ns\":1700000000123456789,\"tid\":4242,\"api\":\"cublasLtMatmul\","
                      "\"m\":256,\"n\":128,\"k\":64,\"batch\":8,\"transa\":\"T\",\"transb\":\"N\","
                      "\"a_type\":\"e4m3\",\"b_type\":\"e4m3\",\"c_type\":\"bf16\",\"d_type\":\"bf16\","
                      "\"compute_type\":\"32f\",\"scale_type\":\"fp32\",\"lda\":64,\"ldb\":64,\"ldc\":256,"
                      "\"ldd\":256,\"stride_a\":16384,\"stride_b\":8192,\"stride_c\":32768,"
                      "\"epilogue\":\"gelu_bias\",\"bias_type\":\"bf16\",\"pointer_mode\":\"device\","
                      "\"device\":3,\"sm\":\"9.0\",\"stream\":\"0x0\",\"site\":\"0000000000000001\","
                      "\"decided\":\"fp8\",\"route\":\"native\",\"reason\":\"fp8 declined: n % 16 != 0\","
                      "\"status\":15,\"status_name\":\"CUBLAS_STATUS_NOT_SUPPORTED\",\"dur_ns\":0}\n");
}

static void test_format_escapes_reason(void **state) {
  (void)state;
  gs_call c = gemm_ex_call();
  snprintf(c.reason, sizeof c.reason, "say \"hi\"\nback\\slash\x01\x1f\t end");
  c.backend = "a\"b";
  char buf[4096];
  log_format(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, ",\"backend\":\"a\\\"b\",\"reason\":\"say \\\"hi\\\"\\u000aback\\\\slash"
                              "\\u0001\\u001f\\u0009 end\",\"status\":0,"));
}

/* A reason filling the whole array without a NUL stops at the array's end. */
static void test_format_unterminated_reason(void **state) {
  (void)state;
  gs_call c = gemm_ex_call();
  memset(c.reason, 'x', sizeof c.reason);
  char buf[4096], want[GS_REASON_MAX + 32];
  log_format(&c, buf, sizeof buf);
  snprintf(want, sizeof want, "\"reason\":\"%.*s\",\"status\"", GS_REASON_MAX, c.reason);
  assert_non_null(strstr(buf, want));
}

static void test_format_unknown_values(void **state) {
  (void)state;
  gs_call c = gemm_ex_call();
  c.g.api = (gs_api)10;
  c.g.transa = 7;
  c.g.a_type = 99, c.g.b_type = -1, c.g.d_type = 123, c.g.scale_type = 77;
  c.g.compute_type = 12345;
  c.g.ldd = 5, c.g.stride_a = -1, c.g.stride_b = -1, c.g.stride_c = -1;
  c.g.epilogue = 3; /* epilogue, d_type and ldd: not printed, not an Lt call */
  c.g.pointer_mode = 9;
  c.g.algo = -1;
  c.device = -1, c.sm = -1;
  c.decided = (gs_route)9, c.route = (gs_route)-2;
  c.status = 999;
  char buf[4096];
  log_format(&c, buf, sizeof buf);
  assert_string_equal(buf,
                      "{\"seq\":42,\"t_ns\":1700000000123456789,\"tid\":4242,\"api\":\"unknown(10)\","
                      "\"m\":4096,\"n\":1024,\"k\":512,\"batch\":1,\"transa\":\"unknown(7)\",\"transb\":\"N\","
                      "\"a_type\":\"unknown(99)\",\"b_type\":\"unknown(-1)\",\"c_type\":\"fp32\","
                      "\"compute_type\":\"unknown(12345)\",\"scale_type\":\"unknown(77)\","
                      "\"lda\":512,\"ldb\":512,\"ldc\":4096,\"pointer_mode\":\"unknown(9)\",\"algo\":-1,"
                      "\"device\":-1,\"sm\":null,\"stream\":\"0x7f00dead0000\",\"site\":\"00ab12cd34ef5678\","
                      "\"decided\":\"unknown(9)\",\"route\":\"unknown(-2)\",\"backend\":\"sgemm\","
                      "\"reason\":\"policy: built-in rule 1 (ffma sm=6.0-7.5 ab=bf16 compute=32f)\","
                      "\"status\":999,\"status_name\":\"unknown\",\"dur_ns\":15300}\n");
}

static void test_format_lt_unknown_epilogue(void **state) {
  (void)state;
  gs_call c = gemm_ex_call();
  c.g.api = GS_API_LT_MATMUL;
  c.g.epilogue = 3;
  c.g.pointer_mode = -1;
  c.sm = 121;
  char buf[4096];
  log_format(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, ",\"stride_c\":0,\"epilogue\":\"unknown(3)\",\"device\":0,\"sm\":\"12.1\","));
}

/* Every size short of the record plus its NUL fails cleanly. */
static void test_format_too_small(void **state) {
  (void)state;
  gs_call c = gemm_ex_call();
  size_t need = strlen(gemm_ex_line) + 1;
  char buf[4096];
  for (size_t len = 0; len < need; len++) {
    memset(buf, '#', sizeof buf);
    assert_int_equal(log_format(&c, buf, len), 0);
    if (len) assert_int_equal(buf[0], '\0');
    assert_int_equal(buf[len], '#'); /* nothing written past len */
  }
  assert_int_equal(log_format(&c, buf, need), need - 1);
  assert_string_equal(buf, gemm_ex_line);
}

/* The text of c with a buffer far larger than the record (the unchecked
 * formatter) and with one exactly its size (the checked one): both must
 * be the same, and the same as the record's JSON everywhere else. */
static size_t format_both_ways(const gs_call *c, char *out, size_t out_len) {
  static char big[1 << 16];
  size_t n = log_format(c, big, sizeof big);
  assert_true(n > 0 && n + 1 <= out_len);
  assert_int_equal(log_format(c, out, n + 1), n);
  assert_string_equal(out, big);
  assert_int_equal(log_format(c, out, n), 0); /* one byte short: nothing */
  assert_int_equal(log_format(c, big, sizeof big), n);
  memcpy(out, big, n + 1);
  return n;
}

/* Every integer field against printf, across digit counts and extremes. */
static void test_format_numbers(void **state) {
  (void)state;
  uint64_t values[256];
  int nv = 0;
  for (uint64_t p = 1; nv < 60; p *= 10) {
    values[nv++] = p - 1, values[nv++] = p, values[nv++] = p + 1;
    if (p > UINT64_MAX / 10) break;
  }
  for (int b = 0; b < 64; b++) values[nv++] = (uint64_t)1 << b, values[nv++] = ((uint64_t)1 << b) - 1;
  values[nv++] = UINT64_MAX, values[nv++] = UINT64_MAX - 1, values[nv++] = 1700000000123456789ull;
  values[nv++] = 12345678, values[nv++] = 123456789, values[nv++] = 99999999, values[nv++] = 100000000;
  values[nv++] = 10000000000000000ull, values[nv++] = 9999999999999999ull, values[nv++] = 1234567890123456789ull;
  char buf[8192], want[128];
  for (int i = 0; i < nv; i++) {
    uint64_t v = values[i];
    gs_call c = gemm_ex_call();
    c.seq = v, c.t_ns = v, c.dur_ns = v;
    c.g.m = (int64_t)v, c.g.n = (int64_t)(0 - v), c.g.lda = (int64_t)(v >> 1);
    c.tid = (int)(uint32_t)v, c.status = (int)(0u - (uint32_t)v);
    format_both_ways(&c, buf, sizeof buf);
    snprintf(want, sizeof want, "{\"seq\":%" PRIu64 ",\"t_ns\":%" PRIu64 ",\"tid\":%d,", v, v, c.tid);
    assert_memory_equal(buf, want, strlen(want));
    snprintf(want, sizeof want, ",\"m\":%" PRId64 ",\"n\":%" PRId64 ",", c.g.m, c.g.n);
    assert_non_null(strstr(buf, want));
    snprintf(want, sizeof want, ",\"lda\":%" PRId64 ",", c.g.lda);
    assert_non_null(strstr(buf, want));
    snprintf(want, sizeof want, ",\"status\":%d,", c.status);
    assert_non_null(strstr(buf, want));
    snprintf(want, sizeof want, ",\"dur_ns\":%" PRIu64 "}\n", v);
    assert_non_null(strstr(buf, want));
  }
  gs_call c = gemm_ex_call();
  c.g.m = INT64_MIN, c.g.k = INT64_MAX, c.tid = INT32_MIN, c.device = INT32_MAX;
  format_both_ways(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, ",\"m\":-9223372036854775808,\"n\":1024,\"k\":9223372036854775807,"));
  assert_non_null(strstr(buf, ",\"tid\":-2147483648,"));
  assert_non_null(strstr(buf, ",\"device\":2147483647,"));
}

static void test_format_hex(void **state) {
  (void)state;
  char buf[8192], want[128];
  uint64_t values[256];
  int nv = 0;
  values[nv++] = 0, values[nv++] = UINT64_MAX, values[nv++] = 0x7f00dead0000ull, values[nv++] = 0x123456789abcdefull;
  for (int b = 0; b < 64; b++) {
    uint64_t v = (uint64_t)1 << b;
    values[nv++] = v - 1, values[nv++] = v, values[nv++] = v + 1;
  }
  for (int i = 0; i < nv; i++) {
    uint64_t x = values[i];
    gs_call c = gemm_ex_call();
    c.g.stream = (void *)(uintptr_t)x;
    c.site = x;
    c.site_flags = GS_SITE_EVICTED;
    c.evicted_site = ~x;
    format_both_ways(&c, buf, sizeof buf);
    snprintf(want, sizeof want,
             ",\"stream\":\"0x%" PRIx64 "\",\"site\":\"%016" PRIx64 "\",\"site_event\":\"evicted\","
             "\"evicted_site\":\"%016" PRIx64 "\",",
             x, x, ~x);
    assert_non_null(strstr(buf, want));
  }
}

/* The length of the UTF-8 character at s, decoded to its code point and
 * checked against RFC 3629 section 3 (the shortest form, no surrogates
 * D800..DFFF, nothing past 10FFFF); 0 when it is not one. */
static size_t utf8_ref(const unsigned char *s, size_t n) {
  size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
  if (len == 0 || len > n) return 0;
  uint32_t cp = len == 1 ? s[0] : s[0] & (0x7f >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  return len;
}

/* JSON escaping as the header comment states it, one character at a time:
 * RFC 8259's escapes, UTF-8 as it is, any other byte as the text \xNN. */
static size_t escape_ref(char *out, const char *s, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    unsigned char ch = (unsigned char)s[i];
    size_t len = utf8_ref((const unsigned char *)s + i, n - i);
    if (ch == '"' || ch == '\\') out[o++] = '\\', out[o++] = (char)ch;
    else if (ch < 0x20) o += (size_t)sprintf(out + o, "\\u%04x", ch);
    else if (len == 0) o += (size_t)sprintf(out + o, "\\\\x%02x", ch);
    else memcpy(out + o, s + i, len), o += len, i += len - 1;
    i++;
  }
  out[o] = '\0';
  return o;
}

/* Characters of 2, 3 and 4 bytes and byte strings that are not UTF-8
 * (RFC 3629: a lone continuation byte, a cut sequence, overlong forms, a
 * surrogate, past U+10FFFF, bytes F5..FF) at every offset across two
 * 8-byte words, in both formatters: UTF-8 is copied, anything else is
 * \xNN, so json.loads takes every line (RFC 8259 section 8.1). */
static void test_format_utf8_every_position(void **state) {
  (void)state;
  static const char *const pieces[] = {
      "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "\xef\xbf\xbd", /* valid */
      "\x80", "\xbf", "\xc3", "\xe2\x82", "\xf0\x9f\x98", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf",
      "\xf0\x8f\xbf\xbf", "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xfe"};
  static char buf[8192], want[GS_REASON_MAX * 6 + 64];
  for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
    for (size_t at = 0; at < 17; at++) {
      for (size_t tail = 0; tail < 3; tail++) { /* the piece at the very end of the string, or not */
        gs_call c = gemm_ex_call();
        memset(c.reason, 0, sizeof c.reason);
        memset(c.reason, 'r', at);
        size_t len = at;
        memcpy(c.reason + len, pieces[k], strlen(pieces[k]));
        len += strlen(pieces[k]);
        memset(c.reason + len, 's', tail * 5);
        len += tail * 5;
        c.backend = pieces[(k + at) % (sizeof pieces / sizeof pieces[0])];
        format_both_ways(&c, buf, sizeof buf);
        char *w = want + sprintf(want, ",\"backend\":\"");
        w += escape_ref(w, c.backend, strlen(c.backend));
        w += sprintf(w, "\",\"reason\":\"");
        w += escape_ref(w, c.reason, len);
        sprintf(w, "\",\"status\":0,");
        assert_non_null(strstr(buf, want));
      }
    }
  }
  /* Spelled out once. */
  gs_call c = gemm_ex_call();
  snprintf(c.reason, sizeof c.reason, "caf\xc3\xa9 \xff\xc3(\xed\xa0\x80)");
  format_both_ways(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, ",\"reason\":\"caf\xc3\xa9 \\\\xff\\\\xc3(\\\\xed\\\\xa0\\\\x80)\","));
}

/* Strings are copied 8 bytes at a time while no byte needs escaping: put
 * each escaped byte at each position of a word, in reasons of every
 * length up to the array's, and bytes >= 0x80 next to them. */
static void test_format_escapes_every_position(void **state) {
  (void)state;
  static const unsigned char specials[] = {'"', '\\', 0x01, 0x1f, '\n', 0x7f, 0x80, 0xff, ' ', 0x21, '!', 0x5b, 0x5d};
  static char buf[8192], want[GS_REASON_MAX * 6 + 64];
  unsigned seed = 1;
  for (size_t len = 0; len <= GS_REASON_MAX; len += len < 40 ? 1 : 37) {
    for (size_t k = 0; k < sizeof specials; k++) {
      gs_call c = gemm_ex_call();
      memset(c.reason, 0, sizeof c.reason);
      for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        c.reason[i] = (char)(' ' + (seed >> 16) % 90);
        if (c.reason[i] == '"' || c.reason[i] == '\\') c.reason[i] = 'x';
      }
      if (len) c.reason[(k * 7 + len) % len] = (char)specials[k];
      if (len > 9) c.reason[len - 1] = (char)specials[(k + 3) % sizeof specials];
      c.backend = k % 2 ? "own" : "a\"b\\c\td";
      format_both_ways(&c, buf, sizeof buf);
      char *at = want + sprintf(want, ",\"backend\":\"");
      at += escape_ref(at, c.backend, strlen(c.backend));
      at += sprintf(at, "\",\"reason\":\"");
      at += escape_ref(at, c.reason, len);
      sprintf(at, "\",\"status\":0,");
      assert_non_null(strstr(buf, want));
    }
  }
}

/* A call with every field at its widest text. */
static void widest_call(gs_call *c, int lt) {
  memset(c, 0, sizeof *c);
  c->g.api = lt ? GS_API_LT_MATMUL : GS_API_GEMM_STRIDED_BATCHED_EX_64; /* the longest name */
  c->g.transa = c->g.transb = INT32_MIN;
  c->g.m = c->g.n = c->g.k = c->g.batch = INT64_MIN;
  c->g.a_type = c->g.b_type = c->g.c_type = c->g.d_type = c->g.scale_type = c->g.bias_type = INT32_MIN;
  c->g.compute_type = 79; /* 64f_emulated_fixedpoint: longer than unknown(...) */
  c->g.lda = c->g.ldb = c->g.ldc = c->g.ldd = c->g.stride_a = c->g.stride_b = c->g.stride_c = INT64_MIN;
  c->g.epilogue = INT32_MIN;
  c->g.bias = c;
  c->g.pointer_mode = 4; /* alpha_device_vector_beta_host */
  c->g.algo = INT32_MIN;
  c->g.stream = (void *)UINTPTR_MAX;
  c->seq = c->t_ns = c->dur_ns = UINT64_MAX;
  c->tid = c->device = INT32_MIN;
  c->sm = INT32_MAX;
  c->site = c->evicted_site = UINT64_MAX;
  c->site_flags = GS_SITE_NEW | GS_SITE_EVICTED;
  c->decided = c->route = (gs_route)INT32_MIN;
  c->backend = "";
  c->status = 13; /* CUBLAS_STATUS_EXECUTION_FAILED, the longest name */
}

/* Every field at its widest: the text stays within what log.c reserves
 * for a record (LOG_TEXT_FIXED less 32 bytes of slack and the NUL, plus 6
 * a string byte), for both families, and the longest reason fully escaped
 * stays within LOG_RECORD_MAX. */
static void test_format_widest_record(void **state) {
  (void)state;
  static char buf[16384];
  for (int lt = 0; lt < 2; lt++) {
    gs_call c;
    widest_call(&c, lt);
    size_t n = format_both_ways(&c, buf, sizeof buf);
    assert_true(n + 32 + 1 <= LOG_TEXT_FIXED);
    memset(c.reason, 0x01, sizeof c.reason); /* 6 bytes each once escaped */
    c.backend = "cublaslt-fp8";
    n = format_both_ways(&c, buf, sizeof buf);
    assert_true(n + 1 <= LOG_RECORD_MAX);
  }
}

/* GPU time (GEMMSHIM_LOG_GPU_TIME): gpu_ns, gpu_ns_kernels and
 * native_gpu_ns after dur_ns, at their widest still within the text
 * reserved per record; or gpu_skipped with the reason's name. */
/* GPU time on (a log path, GEMMSHIM_LOG_GPU_TIME) and c the widest call
 * with every GPU time at its widest; the log path before, in saved. */
static void widest_timed_call(gs_call *c, char *saved) {
  memcpy(saved, gs_opt.log_path, sizeof gs_opt.log_path);
  snprintf(gs_opt.log_path, sizeof gs_opt.log_path, "%s", "/dev/null");
  gs_opt.log_gpu_time = 1;
  widest_call(c, 0);
  c->work_begun = 1;
  c->gpu.has_gpu_ns = c->gpu.has_kernels_ns = c->gpu.has_native_ns = 1;
  c->gpu.gpu_ns = c->gpu.kernels_ns = c->gpu.native_ns = UINT64_MAX;
}

static void test_format_gpu_time(void **state) {
  (void)state;
  static char buf[16384];
  char saved[sizeof gs_opt.log_path];
  gs_call c;
  widest_timed_call(&c, saved);
  size_t n = format_both_ways(&c, buf, sizeof buf);
  assert_true(n + 32 + 1 <= LOG_TEXT_FIXED);
  assert_non_null(strstr(buf, ",\"dur_ns\":18446744073709551615,\"gpu_ns\":18446744073709551615,"
                              "\"gpu_ns_kernels\":18446744073709551615,\"native_gpu_ns\":18446744073709551615}\n"));
  c.gpu.has_kernels_ns = c.gpu.has_native_ns = 0;
  c.gpu.gpu_ns = 1234;
  format_both_ways(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, "\"dur_ns\":18446744073709551615,\"gpu_ns\":1234}\n"));
  c.gpu.has_gpu_ns = 0;
  c.gpu.skip = GS_GPU_SKIP_CAPTURE;
  format_both_ways(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, "\"dur_ns\":18446744073709551615,\"gpu_skipped\":\"graph capture\"}\n"));
  /* A call that never started device work (an error answered at once). */
  c.gpu.skip = 0;
  c.work_begun = 0;
  format_both_ways(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, ",\"gpu_skipped\":\"no device work\"}\n"));
  /* Off: no key at all. */
  gs_opt.log_gpu_time = 0;
  format_both_ways(&c, buf, sizeof buf);
  assert_null(strstr(buf, "gpu_"));
  memcpy(gs_opt.log_path, saved, sizeof saved);
}

/* GEMMSHIM_COMPARE's accuracy (docs/log-format.md, "Accuracy of compared
 * calls"): the fields after native_gpu_ns, at their widest within the
 * reserved text; infinities as the strings "inf"/"-inf"; quantiles only
 * when some position was finite in both outputs. */
/* widest_timed_call with every accuracy figure at its widest. */
static void widest_compared_call(gs_call *c, char *saved) {
  widest_timed_call(c, saved);
  c->gpu.has_acc = c->gpu.has_acc_quantiles = 1;
  c->gpu.acc_sqnr_db = -6320.123456;
  c->gpu.acc_max_rel = c->gpu.acc_p50 = c->gpu.acc_p99 = -1.23456789e-300;
  c->gpu.acc_mismatch = UINT64_MAX;
}

static void test_format_accuracy(void **state) {
  (void)state;
  static char buf[16384];
  char saved[sizeof gs_opt.log_path];
  gs_call c;
  widest_compared_call(&c, saved);
  size_t n = format_both_ways(&c, buf, sizeof buf);
  assert_true(n + 32 + 1 <= LOG_TEXT_FIXED);
  assert_non_null(strstr(buf, "\"native_gpu_ns\":18446744073709551615,\"sqnr_db\":-6320.12,\"max_rel\":-1.235e-300,"
                              "\"nonfinite_mismatch\":18446744073709551615,\"rel_err_p50\":-1.235e-300,"
                              "\"rel_err_p99\":-1.235e-300}\n"));
  c.gpu.acc_sqnr_db = __builtin_inf();
  c.gpu.acc_max_rel = 0;
  c.gpu.acc_mismatch = 0;
  c.gpu.acc_p50 = 0;
  c.gpu.acc_p99 = __builtin_inf();
  format_both_ways(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, ",\"sqnr_db\":\"inf\",\"max_rel\":0,\"nonfinite_mismatch\":0,\"rel_err_p50\":0,"
                              "\"rel_err_p99\":\"inf\"}\n"));
  c.gpu.acc_sqnr_db = -__builtin_inf();
  c.gpu.has_acc_quantiles = 0;
  format_both_ways(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, ",\"sqnr_db\":\"-inf\",\"max_rel\":0,\"nonfinite_mismatch\":0}\n"));
  c.gpu.has_acc = 0;
  format_both_ways(&c, buf, sizeof buf);
  assert_null(strstr(buf, "sqnr_db"));
  gs_opt.log_gpu_time = 0;
  memcpy(gs_opt.log_path, saved, sizeof saved);
}

/* The fp8 statistics (docs/log-format.md, "fp8 statistics") after the
 * accuracy figures, every one at its widest within the reserved text;
 * the scale is the fp32 reciprocal of the step; absent without has_fp8. */
static void test_format_fp8_stats(void **state) {
  (void)state;
  static char buf[16384];
  char saved[sizeof gs_opt.log_path];
  gs_call c;
  widest_compared_call(&c, saved);
  c.gpu.has_fp8 = c.gpu.fp8_blocks = 1;
  for (int i = 0; i < 2; i++) {
    c.gpu.fp8[i].elems = c.gpu.fp8[i].saturated = c.gpu.fp8[i].flushed = UINT64_MAX;
    c.gpu.fp8[i].worst_sat = c.gpu.fp8[i].worst_flush = -1.23456789e-300;
    c.gpu.fp8[i].worst_sat_block = c.gpu.fp8[i].worst_flush_block = UINT64_MAX;
    c.gpu.fp8[i].amax = -3.40282347e38f;
    c.gpu.fp8[i].step = 1.17549435e-38f * 0x1p-22f; /* a subnormal: scale 2^148 overflows fp32 */
  }
  size_t n = format_both_ways(&c, buf, sizeof buf);
  assert_true(n + 32 + 1 <= LOG_TEXT_FIXED);
  c.gpu.fp8_blocks = 0; /* the ring recipes: no worst blocks */
  c.gpu.fp8[0].amax = 3.0f;
  c.gpu.fp8[0].step = 3.0f / 448.0f;
  c.gpu.fp8[0].elems = 4096, c.gpu.fp8[0].saturated = 1, c.gpu.fp8[0].flushed = 512;
  c.gpu.fp8[1].amax = 7.0f;
  c.gpu.fp8[1].step = 0.015625f;
  c.gpu.fp8[1].elems = 64, c.gpu.fp8[1].saturated = 0, c.gpu.fp8[1].flushed = 0;
  format_both_ways(&c, buf, sizeof buf);
  char want[256];
  snprintf(want, sizeof want,
           ",\"rel_err_p99\":-1.235e-300,\"a_amax\":3,\"a_scale\":%.9g,\"a_elems\":4096,\"a_sat\":1,"
           "\"a_flush\":512,\"b_amax\":7,\"b_scale\":64,\"b_elems\":64,\"b_sat\":0,\"b_flush\":0}\n",
           (double)(float)(1.0 / (double)(3.0f / 448.0f)));
  assert_non_null(strstr(buf, want));
  /* A block-scaled recipe: each operand's worst blocks after its counts. */
  c.gpu.fp8_blocks = 1;
  c.gpu.fp8[0].worst_sat = 0, c.gpu.fp8[0].worst_sat_block = 0;
  c.gpu.fp8[0].worst_flush = 0.125, c.gpu.fp8[0].worst_flush_block = 70;
  c.gpu.fp8[1].worst_sat = 1.0 / 3, c.gpu.fp8[1].worst_sat_block = 3;
  c.gpu.fp8[1].worst_flush = 0, c.gpu.fp8[1].worst_flush_block = 0;
  format_both_ways(&c, buf, sizeof buf);
  assert_non_null(strstr(buf, "\"a_flush\":512,\"a_worst_sat\":0,\"a_worst_sat_block\":0,\"a_worst_flush\":0.125,"
                              "\"a_worst_flush_block\":70,\"b_amax\":7,"));
  assert_non_null(strstr(buf, "\"b_flush\":0,\"b_worst_sat\":0.333333,\"b_worst_sat_block\":3,\"b_worst_flush\":0,"
                              "\"b_worst_flush_block\":0}\n"));
  c.gpu.has_fp8 = 0;
  format_both_ways(&c, buf, sizeof buf);
  assert_null(strstr(buf, "a_amax"));
  gs_opt.log_gpu_time = 0;
  memcpy(gs_opt.log_path, saved, sizeof saved);
}

/* accuracy_summarise (shim/accuracy.c) from hand-made statistics: the
 * edge cases docs/log-format.md defines, and quantiles as bin edges. */
static void test_accuracy_summarise(void **state) {
  (void)state;
  static gs_acc_stats s;
  gs_gpu_time t;
  memset(&s, 0, sizeof s);
  memset(&t, 0, sizeof t);
  accuracy_summarise(&s, &t); /* nothing finite: identical, no quantiles */
  assert_true(t.has_acc && !t.has_acc_quantiles && t.acc_sqnr_db > 1e308 && t.acc_max_rel == 0);
  s.sum_n2 = 0;
  s.sum_d2 = 4;
  s.max_d = 2;
  s.finite = 10;
  s.hist[GS_ACC_BINS - 1] = 10;
  accuracy_summarise(&s, &t); /* native all zero, the route not */
  assert_true(t.acc_sqnr_db < -1e308 && t.acc_max_rel > 1e308 && t.acc_p50 > 1e308);
  s.sum_n2 = 1000;
  s.sum_d2 = 1;
  s.max_n = 8;
  s.max_d = 2;
  s.mismatch = 3;
  memset(s.hist, 0, sizeof s.hist);
  s.finite = 100;
  s.hist[0] = 50;                          /* exact */
  s.hist[2 + 4 * (-4 - GS_ACC_LOG2_LO) + 2] = 49; /* [2^-3.5, 2^-3.25) */
  s.hist[GS_ACC_BINS - 1] = 1;
  accuracy_summarise(&s, &t);
  assert_true(fabs(t.acc_sqnr_db - 30.0) < 1e-9);
  assert_true(t.acc_max_rel == 0.25 && t.acc_mismatch == 3);
  assert_true(t.acc_p50 == 0);                             /* rank 50: the exact bin */
  assert_true(fabs(t.acc_p99 - pow(2, -3.25)) < 1e-12);    /* rank 99 */
  s.hist[0] = 49;
  s.hist[1] = 1;
  accuracy_summarise(&s, &t);
  assert_true(t.acc_p50 == pow(2, GS_ACC_LOG2_LO));        /* rank 50: below 2^-32 */
  /* gs_log10 without libm, against libm. */
  static const double xs[] = {1e-320, 1e-300, 0.5, 1, 2, 10, 123456.789, 1e300};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) assert_true(fabs(gs_log10(xs[i]) - log10(xs[i])) < 1e-9);
}

/* ---- path_expand_here ------------------------------------------------------ */
static void short_host(char *host, size_t len) {
  assert_int_equal(gethostname(host, len), 0);
  char *dot = strchr(host, '.');
  if (dot && dot != host) *dot = '\0';
}

static void test_expand_pid_host(void **state) {
  (void)state;
  char out[512], want[512], host[256];
  short_host(host, sizeof host);
  assert_int_equal(path_expand_here("/tmp/gemm.%h.%p.jsonl", out, sizeof out), 0);
  snprintf(want, sizeof want, "/tmp/gemm.%s.%d.jsonl", host, (int)getpid());
  assert_string_equal(out, want);
  gs_fault_arm(GS_SYS_gethostname, 1, 0);
  assert_int_equal(path_expand_here("%h.log", out, sizeof out), 0);
  assert_string_equal(out, "unknown.log");
}

static void test_expand_rank(void **state) {
  (void)state;
  char out[64];
  setenv("RANK", "3", 1);
  setenv("LOCAL_RANK", "1", 1);
  assert_int_equal(path_expand_here("log.%r", out, sizeof out), 0);
  assert_string_equal(out, "log.3");
  unsetenv("RANK");
  assert_int_equal(path_expand_here("log.%r", out, sizeof out), 0);
  assert_string_equal(out, "log.1");
  setenv("RANK", "abc", 1); /* not a number: ignored */
  assert_int_equal(path_expand_here("log.%r", out, sizeof out), 0);
  assert_string_equal(out, "log.1");
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
  assert_int_equal(path_expand_here("log.%r", out, sizeof out), 0);
  assert_string_equal(out, "log.0");
}

static void test_expand_literal_percent(void **state) {
  (void)state;
  char out[64];
  assert_int_equal(path_expand_here("a%%p%x%", out, sizeof out), 0);
  assert_string_equal(out, "a%p%x%");
  assert_int_equal(path_expand_here("", out, sizeof out), 0);
  assert_string_equal(out, "");
}

static void test_expand_overflow(void **state) {
  (void)state;
  char out[16];
  memset(out, '#', sizeof out);
  assert_int_equal(path_expand_here("0123456789abcdef", out, sizeof out), -1);
  assert_string_equal(out, "");
  assert_int_equal(path_expand_here("0123456789abcde", out, sizeof out), 0); /* 15 + NUL fits */
  assert_string_equal(out, "0123456789abcde");
  char pid_path[64], big[64];
  int need = snprintf(pid_path, sizeof pid_path, "01234567%d", (int)getpid()) + 1;
  assert_int_equal(path_expand_here("01234567%p", big, (size_t)need - 1), -1);
  assert_int_equal(path_expand_here("01234567%p", big, (size_t)need), 0);
  assert_string_equal(big, pid_path);
  assert_int_equal(path_expand_here("x", out, 0), -1);
}

/* ---- writing -------------------------------------------------------------- */
static void test_lazy_open(void **state) {
  (void)state;
  char path[128];
  start_log("lazy.jsonl", GS_LEVEL_WARN, "");
  path_in_dir(path, sizeof path, "lazy.jsonl");
  log_flush();
  assert_false(file_exists(path)); /* no record, no file */
  gs_call c = numbered_call(1);
  log_record(&c);
  assert_true(file_exists(path));
}

static void test_records_in_order(void **state) {
  (void)state;
  char path[128], want[8192] = "", line[1024];
  start_log("order.jsonl", GS_LEVEL_WARN, "");
  for (uint64_t s = 1; s <= 5; s++) {
    gs_call c = numbered_call(s);
    log_record(&c);
    assert_int_not_equal(log_format(&c, line, sizeof line), 0);
    strcat(want, line);
  }
  log_flush();
  path_in_dir(path, sizeof path, "order.jsonl");
  char *got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
}

/* Counts the log's writes (those that start a record), checks each ends
 * on a whole line, and notes whether the recording thread made them. */
static ssize_t (*real_write)(int, const void *, size_t);
static int log_writes;
static int log_writes_by_recorder;
static size_t log_write_max;
static int log_write_partial_line;
static pthread_t recorder;

static ssize_t counting_write(int fd, const void *buf, size_t n) {
  if (n >= 8 && memcmp(buf, "{\"seq\":", 7) == 0) {
    log_writes++;
    log_writes_by_recorder += pthread_equal(pthread_self(), recorder) != 0;
    if (n > log_write_max) log_write_max = n;
    if (((const char *)buf)[n - 1] != '\n') log_write_partial_line = 1;
  }
  return real_write(fd, buf, n);
}

static void count_writes(void) {
  real_write = gs_sys.write;
  gs_sys.write = counting_write;
  recorder = pthread_self();
  log_writes = log_writes_by_recorder = 0;
  log_write_max = 0;
  log_write_partial_line = 0;
}

/* log.c's rule: the buffer is written when the next record's binary form
 * or its reserved text would not fit. Returns the writes records first ..
 * last - 1 cause, with *bin and *text the fill that remains. */
static int predicted_writes(uint64_t first, uint64_t last, size_t *bin, size_t *text) {
  int writes = 0;
  for (uint64_t s = first; s < last; s++) {
    gs_call c = numbered_call(s);
    size_t strings = strlen(c.reason) + strlen(c.backend);
    size_t size = (LOG_REC_HEADER + strings + 7) & ~(size_t)7, reserve = LOG_TEXT_FIXED + 6 * strings;
    if (*bin + size > LOG_BIN_BYTES || *text + reserve > LOG_TEXT_BYTES) writes++, *bin = *text = 0;
    *bin += size, *text += reserve;
  }
  return writes;
}

static void test_one_write_per_flush(void **state) {
  (void)state;
  char path[128];
  start_log("writes.jsonl", GS_LEVEL_WARN, "");
  count_writes();
  for (uint64_t s = 1; s <= 3; s++) {
    gs_call c = numbered_call(s);
    log_record(&c);
  }
  log_flush();
  assert_int_equal(log_writes, 1);
  log_flush(); /* nothing pending: no write */
  assert_int_equal(log_writes, 1);

  /* Past the buffer: one write each time it fills, one for the rest. */
  size_t bin = 0, text = 0;
  int expected = 1 + predicted_writes(4, 2004, &bin, &text);
  for (uint64_t s = 4; s < 2004; s++) {
    gs_call c = numbered_call(s);
    log_record(&c);
  }
  log_flush();
  expected += bin > 0;
  log_shutdown();
  gs_sys.write = real_write;
  assert_true(expected >= 4);
  assert_int_equal(log_writes, expected);
  assert_true(log_write_max <= LOG_TEXT_BYTES);
  assert_false(log_write_partial_line);
  path_in_dir(path, sizeof path, "writes.jsonl");
  size_t len;
  char *got = read_file(path, &len);
  assert_int_equal(count_lines(got), 2003);
  free(got);
}

/* A full buffer is formatted and written by the flusher thread: the
 * recording thread only writes what it flushes itself. */
static void test_full_buffer_written_by_flusher(void **state) {
  (void)state;
  char path[128], line[1024];
  start_log("handoff.jsonl", GS_LEVEL_WARN, "");
  count_writes();
  size_t bin = 0, text = 0;
  int full = predicted_writes(1, 3001, &bin, &text);
  for (uint64_t s = 1; s < 3001; s++) {
    gs_call c = numbered_call(s);
    log_record(&c);
  }
  log_flush();
  log_shutdown();
  gs_sys.write = real_write;
  assert_true(full >= 4);
  assert_int_equal(log_writes, full + 1);
  assert_int_equal(log_writes_by_recorder, 1); /* the log_flush */
  path_in_dir(path, sizeof path, "handoff.jsonl");
  char *got = read_file(path, NULL), *p = got;
  for (uint64_t s = 1; s < 3001; s++) {
    size_t n = format_numbered(s, line, sizeof line);
    assert_memory_equal(p, line, n);
    p += n;
  }
  assert_string_equal(p, "");
  free(got);
}

/* Without a flusher thread the recording thread writes full buffers. */
static void test_full_buffer_without_flusher(void **state) {
  (void)state;
  start_log("nohandoff.jsonl", GS_LEVEL_WARN, "");
  gs_fault_arm(GS_SYS_pthread_create, 1, 1);
  count_writes();
  size_t bin = 0, text = 0;
  int full = predicted_writes(1, 3001, &bin, &text);
  for (uint64_t s = 1; s < 3001; s++) {
    gs_call c = numbered_call(s);
    log_record(&c);
  }
  assert_int_equal(log_writes, full);
  assert_int_equal(log_writes_by_recorder, full);
  log_shutdown();
  gs_sys.write = real_write;
  char path[128];
  path_in_dir(path, sizeof path, "nohandoff.jsonl");
  char *got = read_file(path, NULL);
  assert_int_equal(count_lines(got), 3000);
  free(got);
}

/* The flusher's deadline passes while another thread's write is in flight:
 * the flusher waits for it, and so does a recording thread whose buffer
 * is full. As the write ends, either may go first: the flusher writes the
 * full buffer (the recorder must then not swap out the next, empty one),
 * or the recorder starts the write and hands it to the flusher (which
 * must take it, not wait for it). Which thread waited longer tends to go
 * first: each order is set up once. */
static int slow_writes_left;
static int in_slow_write;
static int recorder_waits_first;

static ssize_t slow_write(int fd, const void *buf, size_t n) {
  if (n >= 8 && memcmp(buf, "{\"seq\":", 7) == 0 && __atomic_load_n(&slow_writes_left, __ATOMIC_SEQ_CST) > 0) {
    __atomic_sub_fetch(&slow_writes_left, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&in_slow_write, 1, __ATOMIC_SEQ_CST);
    sleep_ms(500);
  }
  return real_write(fd, buf, n);
}

#define DEADLINE_RECORDS 1500 /* more than a buffer holds */

static void *record_during_slow_write(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&in_slow_write, __ATOMIC_SEQ_CST)) sleep_ms(1);
  log_numbered(2); /* pending when the flusher's deadline passes */
  if (!recorder_waits_first) sleep_ms(250);
  for (uint64_t s = 3; s < 3 + DEADLINE_RECORDS; s++) log_numbered(s);
  return NULL;
}

static void deadline_during_write(const char *name, int recorder_first) {
  char path[128], line[1024];
  alarm(30); /* a thread waiting on a write nobody makes hangs: fail instead */
  gs_opt.log_wait = 1; /* the hand-offs under test are the waiting ones */
  start_log(name, GS_LEVEL_WARN, "");
  log_numbered(1); /* the flusher's deadline: a second from now */
  sleep_ms(800);
  real_write = gs_sys.write;
  gs_sys.write = slow_write;
  slow_writes_left = 1;
  in_slow_write = 0;
  recorder_waits_first = recorder_first;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, record_during_slow_write, NULL), 0);
  log_flush(); /* record 1, written until ~1.3 s */
  pthread_join(t, NULL);
  log_shutdown();
  gs_sys.write = real_write;
  alarm(0);
  path_in_dir(path, sizeof path, name);
  char *got = read_file(path, NULL), *p = got;
  for (uint64_t s = 1; s < 3 + DEADLINE_RECORDS; s++) {
    size_t n = format_numbered(s, line, sizeof line);
    assert_memory_equal(p, line, n);
    p += n;
  }
  assert_string_equal(p, "");
  free(got);
}

static void test_flusher_deadline_during_write(void **state) {
  (void)state;
  deadline_during_write("deadline1.jsonl", 0);
  deadline_during_write("deadline2.jsonl", 1);
}

/* A long backend name makes the reserved text exceed LOG_RECORD_MAX: the
 * record is written when its text fits, and dropped with one warning and
 * a count at exit when it does not. */
static void test_long_backend(void **state) {
  (void)state;
  static char backend[LOG_RECORD_MAX + 1], want[3 * LOG_RECORD_MAX];
  char path[128], dbg[128];
  start_log("backend.jsonl", GS_LEVEL_WARN, "backend.debug");
  memset(backend, 'b', 600);
  backend[600] = '\0';
  gs_call c = numbered_call(1);
  c.backend = backend;
  log_record(&c);
  assert_int_not_equal(log_format(&c, want, sizeof want), 0);
  memset(backend, 'b', LOG_RECORD_MAX);
  backend[LOG_RECORD_MAX] = '\0';
  c = numbered_call(2);
  c.backend = backend;
  log_record(&c);
  log_record(&c);
  c = numbered_call(3);
  log_record(&c);
  format_numbered(3, want + strlen(want), sizeof want - strlen(want));
  log_shutdown();
  path_in_dir(path, sizeof path, "backend.jsonl");
  char *got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
  path_in_dir(dbg, sizeof dbg, "backend.debug");
  char *warn = read_file(dbg, NULL);
  assert_int_equal(count_lines(warn), 2);
  assert_non_null(strstr(warn, " WARN GEMMSHIM_LOG: record 2 is longer than 4096 bytes and was dropped; later ones "
                               "too, counted at exit\n"));
  assert_non_null(strstr(warn, " WARN GEMMSHIM_LOG: 2 records dropped (longer than a record may be); '"));
  free(warn);
}

static void test_write_failure_disables(void **state) {
  (void)state;
  char path[128], dbg[128];
  start_log("wfail.jsonl", GS_LEVEL_WARN, "wfail.debug");
  gs_call c = numbered_call(1);
  log_record(&c);
  gs_fault_arm(GS_SYS_write, 1, 0); /* the log's flush; the warning's write works */
  log_flush();
  for (uint64_t s = 2; s < 2000; s++) { /* more than a buffer's worth */
    c = numbered_call(s);
    log_record(&c);
  }
  log_flush();
  log_shutdown();
  path_in_dir(path, sizeof path, "wfail.jsonl");
  path_in_dir(dbg, sizeof dbg, "wfail.debug");
  size_t len;
  char *got = read_file(path, &len);
  assert_non_null(got);
  assert_int_equal(len, 0);
  free(got);
  char *warn = read_file(dbg, NULL);
  assert_int_equal(count_lines(warn), 1);
  assert_non_null(strstr(warn, " WARN GEMMSHIM_LOG: cannot write '"));
  assert_non_null(strstr(warn, path));
  assert_non_null(strstr(warn, "(Input/output error); the routing log is off for the rest of this process\n"));
  free(warn);
}

/* write(2) may write less than asked (POSIX: a signal, a full disk at the
 * end); the rest is written next, so the line is whole and nothing is
 * reported. */
static ssize_t short_write(int fd, const void *buf, size_t n) {
  int is_log = n >= 7 && memcmp(buf, "{\"seq\":", 7) == 0;
  return real_write(fd, buf, is_log ? n / 2 : n);
}

static void test_short_write_continues(void **state) {
  (void)state;
  char path[128], dbg[128], want[2048];
  start_log("short.jsonl", GS_LEVEL_WARN, "short.debug");
  gs_call c = numbered_call(1);
  log_record(&c);
  real_write = gs_sys.write;
  gs_sys.write = short_write;
  log_flush();
  gs_sys.write = real_write;
  log_record(&c);
  log_shutdown();
  format_numbered(1, want, sizeof want);
  format_numbered(1, want + strlen(want), sizeof want - strlen(want));
  path_in_dir(path, sizeof path, "short.jsonl");
  char *got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
  path_in_dir(dbg, sizeof dbg, "short.debug");
  assert_false(file_exists(dbg)); /* nothing to say, no file */
}

/* A full disk (POSIX write(2): what fits is written, then ENOSPC): the
 * log's write takes half a buffer, the rest fails. The log goes off with
 * one warning; the file ends inside a line and is never truncated back.
 * The next process to append (log_init again, as a fresh process) finds
 * its first record glued onto that cut line: the cut line stays one bad
 * line, and every record of the new run is a whole line (the first one
 * written again after the rest). */
static int full_disk_writes, full_disk_fd;
static ssize_t full_disk_write(int fd, const void *buf, size_t n) {
  if (full_disk_writes == 0 && n >= 7 && memcmp(buf, "{\"seq\":", 7) == 0) full_disk_fd = fd;
  if (fd != full_disk_fd) return real_write(fd, buf, n); /* the debug file, or not the log yet */
  if (full_disk_writes++ == 0) return real_write(fd, buf, n / 2);
  errno = ENOSPC;
  return -1;
}

static void test_full_disk_cut_line(void **state) {
  (void)state;
  char path[128], dbg[128], rec[3][1024];
  start_log("full.jsonl", GS_LEVEL_WARN, "full.debug");
  for (uint64_t s = 1; s <= 3; s++) log_numbered(s);
  real_write = gs_sys.write;
  gs_sys.write = full_disk_write;
  full_disk_writes = 0;
  full_disk_fd = -1;
  log_flush();
  gs_sys.write = real_write;
  assert_int_equal(full_disk_writes, 2);
  log_numbered(4); /* the log is off */
  log_shutdown();
  path_in_dir(path, sizeof path, "full.jsonl");
  size_t cut_len;
  char *cut = read_file(path, &cut_len);
  size_t whole = 0;
  for (uint64_t s = 1; s <= 3; s++) whole += format_numbered(s, rec[0], sizeof rec[0]);
  assert_int_equal(cut_len, whole / 2);
  assert_int_not_equal(cut[cut_len - 1], '\n');
  path_in_dir(dbg, sizeof dbg, "full.debug");
  char *warn = read_file(dbg, NULL);
  assert_int_equal(count_lines(warn), 1);
  assert_non_null(strstr(warn, "(No space left on device); the routing log is off for the rest of this process\n"));
  free(warn);

  /* Space again, and the next process appends. */
  start_log("full.jsonl", GS_LEVEL_WARN, "full.debug");
  for (uint64_t s = 1; s <= 3; s++) log_numbered(s);
  log_shutdown();
  for (uint64_t s = 1; s <= 3; s++) format_numbered(s, rec[s - 1], sizeof rec[0]);
  char want[8192];
  snprintf(want, sizeof want, "%s%s%s%s%s", cut, rec[0], rec[1], rec[2], rec[0]);
  char *got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
  free(cut);
}

/* The file ends with a whole line: nothing is written twice. */
static void test_whole_last_line_kept(void **state) {
  (void)state;
  char path[128], rec[1024];
  path_in_dir(path, sizeof path, "whole.jsonl");
  FILE *f = fopen(path, "w");
  fputs("{\"earlier\":1}\n", f);
  fclose(f);
  start_log("whole.jsonl", GS_LEVEL_WARN, "");
  log_numbered(1);
  log_shutdown();
  format_numbered(1, rec, sizeof rec);
  char want[2048];
  snprintf(want, sizeof want, "{\"earlier\":1}\n%s", rec);
  char *got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
}

/* A write that makes no progress at all is a failure. */
static ssize_t zero_write(int fd, const void *buf, size_t n) {
  int is_log = n >= 7 && memcmp(buf, "{\"seq\":", 7) == 0;
  return is_log ? 0 : real_write(fd, buf, n);
}

static void test_zero_write_disables(void **state) {
  (void)state;
  char dbg[128];
  start_log("zero.jsonl", GS_LEVEL_WARN, "zero.debug");
  gs_call c = numbered_call(1);
  log_record(&c);
  real_write = gs_sys.write;
  gs_sys.write = zero_write;
  log_flush();
  gs_sys.write = real_write;
  log_record(&c);
  log_shutdown();
  path_in_dir(dbg, sizeof dbg, "zero.debug");
  char *warn = read_file(dbg, NULL);
  assert_non_null(warn);
  assert_int_equal(count_lines(warn), 1);
  assert_non_null(strstr(warn, "(Input/output error); the routing log is off for the rest of this process\n"));
  free(warn);
}

static void test_open_failure_disables(void **state) {
  (void)state;
  char path[128], dbg[128];
  start_log("ofail.jsonl", GS_LEVEL_WARN, "ofail.debug");
  gs_fault_arm(GS_SYS_open, 1, 0);
  for (uint64_t s = 1; s < 10; s++) {
    gs_call c = numbered_call(s);
    log_record(&c);
  }
  log_flush();
  log_shutdown();
  path_in_dir(path, sizeof path, "ofail.jsonl");
  path_in_dir(dbg, sizeof dbg, "ofail.debug");
  assert_false(file_exists(path));
  char *warn = read_file(dbg, NULL);
  assert_int_equal(count_lines(warn), 1);
  assert_non_null(strstr(warn, " WARN GEMMSHIM_LOG: cannot open '"));
  assert_non_null(strstr(warn, path));
  assert_non_null(strstr(warn, "(Input/output error); the routing log is off for the rest of this process\n"));
  free(warn);
}

/* Runs before any other test records: the buffers are allocated once. */
static void test_malloc_failure_disables(void **state) {
  (void)state;
  char dbg[128];
  start_log("mfail.jsonl", GS_LEVEL_WARN, "mfail.debug");
  gs_fault_arm(GS_SYS_malloc, 1, 1);
  gs_call c = numbered_call(1);
  log_record(&c);
  log_record(&c);
  gs_fault_clear();
  log_shutdown();
  path_in_dir(dbg, sizeof dbg, "mfail.debug");
  char *warn = read_file(dbg, NULL);
  assert_int_equal(count_lines(warn), 1);
  char want[128];
  snprintf(want, sizeof want, " WARN GEMMSHIM_LOG: cannot allocate %zu bytes of log buffers; the routing log is off\n",
           2 * (size_t)LOG_BIN_BYTES + LOG_TEXT_BYTES);
  assert_non_null(strstr(warn, want));
  free(warn);
}

static void test_no_flusher_thread_still_flushes(void **state) {
  (void)state;
  char path[128], want[2048] = "", line[1024];
  start_log("nothread.jsonl", GS_LEVEL_WARN, "");
  path_in_dir(path, sizeof path, "nothread.jsonl");
  gs_fault_arm(GS_SYS_pthread_create, 1, 1);
  gs_call c = numbered_call(1);
  log_record(&c);
  char *got = read_file(path, NULL);
  assert_string_equal(got, ""); /* buffered */
  free(got);
  log_format(&c, line, sizeof line), strcat(want, line);
  sleep_ms(1100);
  c = numbered_call(2);
  log_record(&c); /* a second has passed: this call flushes */
  log_format(&c, line, sizeof line), strcat(want, line);
  got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
  c = numbered_call(3);
  log_record(&c);
  log_shutdown();
  log_format(&c, line, sizeof line), strcat(want, line);
  got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
}

static void test_flusher_thread_flushes(void **state) {
  (void)state;
  char path[128], line[1024];
  start_log("flusher.jsonl", GS_LEVEL_WARN, "");
  path_in_dir(path, sizeof path, "flusher.jsonl");
  gs_call c = numbered_call(7);
  log_record(&c);
  log_format(&c, line, sizeof line);
  char *got = NULL;
  for (int i = 0; i < 40; i++) { /* within 1 s, plus slack for slow runs */
    free(got);
    sleep_ms(100);
    got = read_file(path, NULL);
    if (got[0]) break;
  }
  assert_string_equal(got, line);
  free(got);
}

/* Records after log_shutdown (later destructors) are still written. */
static void test_late_records(void **state) {
  (void)state;
  char path[128], want[2048] = "", line[1024];
  start_log("late.jsonl", GS_LEVEL_WARN, "");
  gs_call c = numbered_call(1);
  log_record(&c);
  log_format(&c, line, sizeof line), strcat(want, line);
  log_shutdown();
  c = numbered_call(2);
  log_record(&c);
  log_format(&c, line, sizeof line), strcat(want, line);
  path_in_dir(path, sizeof path, "late.jsonl");
  char *got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
}

/* ---- threads -------------------------------------------------------------- */
#define THREADS 8
#define PER_THREAD 10000
/* Each thread flushes after this many of its records, so at most
 * THREADS * FLUSH_EVERY records (~110 KiB) wait between writes and the
 * buffer never overflows: nothing can be dropped. */
#define FLUSH_EVERY 25

typedef struct producer {
  uintptr_t index;
  int flush_every; /* 0: record as fast as possible */
} producer;

static void *record_many(void *arg) {
  const producer *p = arg;
  uint64_t base = p->index * PER_THREAD;
  for (uint64_t i = 0; i < PER_THREAD; i++) {
    gs_call c = numbered_call(base + i);
    c.tid = (int)p->index;
    log_record(&c);
    if (p->flush_every && (i + 1) % (uint64_t)p->flush_every == 0) log_flush();
  }
  return NULL;
}

static void run_producers(int flush_every) {
  pthread_t t[THREADS];
  producer p[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++) {
    p[i] = (producer){i, flush_every};
    assert_int_equal(pthread_create(&t[i], NULL, record_many, &p[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  log_shutdown();
}


/* Checks every line is whole, no seq appears twice and each thread's seqs
 * appear in the order it recorded them; returns the number of lines. */
static uint64_t check_thread_lines(const char *name) {
  char path[128];
  path_in_dir(path, sizeof path, name);
  char *got = read_file(path, NULL);
  static unsigned char seen[THREADS * PER_THREAD];
  int64_t last[THREADS];
  memset(seen, 0, sizeof seen);
  for (int i = 0; i < THREADS; i++) last[i] = -1;
  uint64_t lines = 0;
  for (char *p = got, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    assert_non_null(nl);
    assert_memory_equal(p, "{\"seq\":", 7);
    assert_memory_equal(nl - 15, "\"dur_ns\":15300}", 15);
    unsigned long long seq = strtoull(p + 7, NULL, 10);
    assert_true(seq < THREADS * PER_THREAD);
    assert_int_equal(seen[seq], 0);
    seen[seq] = 1;
    assert_true((int64_t)seq > last[seq / PER_THREAD]);
    last[seq / PER_THREAD] = (int64_t)seq;
    lines++;
  }
  free(got);
  return lines;
}

static void test_threads_every_seq_once(void **state) {
  (void)state;
  char dbg[128];
  gs_opt.log_wait = 1; /* a loaded machine may stall the writer past the bound */
  start_log("threads.jsonl", GS_LEVEL_WARN, "threads.debug");
  run_producers(FLUSH_EVERY);
  assert_int_equal(check_thread_lines("threads.jsonl"), THREADS * PER_THREAD);
  path_in_dir(dbg, sizeof dbg, "threads.debug");
  assert_false(file_exists(dbg)); /* nothing said, no file */
}

/* Recording flat out outruns the disk: a record that finds both buffers
 * busy waits for the write in flight; nothing is lost, duplicated or torn. */
static void test_threads_overload_waits(void **state) {
  (void)state;
  char dbg[128];
  gs_opt.log_wait = 1; /* GEMMSHIM_LOG_WAIT=1: completeness over pace */
  start_log("overload.jsonl", GS_LEVEL_WARN, "overload.debug");
  run_producers(0);
  uint64_t lines = check_thread_lines("overload.jsonl");
  path_in_dir(dbg, sizeof dbg, "overload.debug");
  assert_int_equal(lines, THREADS * PER_THREAD);
  assert_false(file_exists(dbg));
}

/* ---- a slow reader -------------------------------------------------------- */
/* Reads a FIFO into memory on its own thread, a chunk a millisecond when
 * slow, until told to stop and nothing is left. */
typedef struct drain {
  int fd, slow, stop;
  char *buf;
  size_t len, cap;
  pthread_t thread;
} drain;

static void *drain_main(void *arg) {
  drain *d = arg;
  for (;;) {
    struct pollfd p = {.fd = d->fd, .events = POLLIN};
    poll(&p, 1, 20);
    if (d->cap - d->len < 4096) d->buf = realloc(d->buf, d->cap *= 2);
    ssize_t n = read(d->fd, d->buf + d->len, 4096);
    if (n > 0) {
      d->len += (size_t)n;
      if (d->slow) sleep_ms(1);
    } else if (__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE)) {
      break;
    }
  }
  d->buf[d->len] = '\0';
  return NULL;
}

static void drain_start(drain *d, int fd, int slow) {
  memset(d, 0, sizeof *d);
  d->fd = fd, d->slow = slow, d->cap = 1 << 20;
  d->buf = malloc(d->cap);
  assert_int_equal(pthread_create(&d->thread, NULL, drain_main, d), 0);
}

static void drain_stop(drain *d) {
  __atomic_store_n(&d->stop, 1, __ATOMIC_RELEASE);
  pthread_join(d->thread, NULL);
}

#define SLOW_RECORDS 6000 /* more than both buffers and a full pipe hold */

/* A reader that stops reading (a FIFO read at 200 KB/s held one call for
 * 6.3 s): calls wait at most 50 ms for the write in flight, once, then
 * drop their records. Every lost record is named by a notice at the place
 * it was lost, and counted at exit; no line is torn. */
static void test_stalled_reader_drops(void **state) {
  (void)state;
  char fifo[128], dbg[128];
  alarm(60);
  path_in_dir(fifo, sizeof fifo, "stalled.fifo");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  int rd = open(fifo, O_RDONLY | O_NONBLOCK);
  assert_true(rd >= 0);
  start_log("stalled.fifo", GS_LEVEL_WARN, "stalled.debug");
  for (uint64_t s = 1; s <= SLOW_RECORDS; s++) log_numbered(s);
  drain d;
  drain_start(&d, rd, 0);
  log_shutdown();
  drain_stop(&d);
  close(rd);
  alarm(0);

  static char kept[SLOW_RECORDS + 1], named[SLOW_RECORDS + 1];
  uint64_t last = 0, lost_total = 0, notices = 0;
  for (char *p = d.buf, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    assert_non_null(nl);
    unsigned long long seq, lost, first, last_seq;
    if (sscanf(p, "{\"seq\":%llu,", &seq) == 1) {
      assert_true(seq > last && seq <= SLOW_RECORDS); /* in order, once */
      char line[1024];
      size_t n = format_numbered(seq, line, sizeof line);
      assert_int_equal((size_t)(nl + 1 - p), n);
      assert_memory_equal(p, line, n); /* whole */
      kept[seq] = 1;
      last = seq;
      continue;
    }
    assert_int_equal(sscanf(p, "{\"event\":\"records_lost\",\"lost\":%llu,\"first_seq\":%llu,\"last_seq\":%llu,",
                            &lost, &first, &last_seq), 3);
    assert_non_null(strstr(p, ",\"why\":\"the log writer fell behind; a call waits at most 50 ms for it\"}\n"));
    /* One thread: the lost ones are the run just before the next kept record. */
    assert_int_equal(first, last + 1);
    assert_int_equal(lost, last_seq - first + 1);
    for (uint64_t s = first; s <= last_seq; s++) named[s] = 1;
    lost_total += lost;
    notices++;
  }
  uint64_t missing = 0;
  for (uint64_t s = 1; s <= SLOW_RECORDS; s++) {
    missing += !kept[s];
    assert_int_equal(kept[s] + named[s], 1); /* each seq kept or named lost, never both */
  }
  assert_true(notices >= 1);
  assert_true(missing > 0);
  assert_int_equal(lost_total, missing);
  path_in_dir(dbg, sizeof dbg, "stalled.debug");
  char *warn = read_file(dbg, NULL), want[512];
  assert_non_null(warn);
  assert_int_equal(count_lines(warn), 1);
  snprintf(want, sizeof want,
           " WARN GEMMSHIM_LOG: %llu records lost because the log writer fell behind (a call waits at most 50 ms, "
           "exit at most 1000 ms; GEMMSHIM_LOG_WAIT=1 waits instead); '%s' misses them\n",
           (unsigned long long)missing, fifo);
  assert_non_null(strstr(warn, want));
  free(warn);
  free(d.buf);
}

/* GEMMSHIM_LOG_WAIT=1: completeness over pace. A slow reader gets every
 * record, and nothing is reported. */
static void test_slow_reader_waited_for(void **state) {
  (void)state;
  char fifo[128], dbg[128];
  alarm(60);
  path_in_dir(fifo, sizeof fifo, "slow.fifo");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  int rd = open(fifo, O_RDONLY | O_NONBLOCK);
  assert_true(rd >= 0);
  gs_opt.log_wait = 1;
  start_log("slow.fifo", GS_LEVEL_WARN, "slow.debug");
  drain d;
  drain_start(&d, rd, 1);
  for (uint64_t s = 1; s <= SLOW_RECORDS / 2; s++) log_numbered(s);
  log_shutdown();
  drain_stop(&d);
  close(rd);
  alarm(0);
  uint64_t seq = 0;
  for (char *p = d.buf, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    char line[1024];
    size_t n = format_numbered(++seq, line, sizeof line);
    assert_int_equal((size_t)(nl + 1 - p), n);
    assert_memory_equal(p, line, n);
  }
  assert_int_equal(seq, SLOW_RECORDS / 2);
  path_in_dir(dbg, sizeof dbg, "slow.debug");
  assert_false(file_exists(dbg));
  free(d.buf);
}

/* ---- fork ----------------------------------------------------------------- */
static void child_records(uint64_t first, uint64_t n) {
  for (uint64_t s = first; s < first + n; s++) {
    gs_call c = numbered_call(s);
    log_record(&c);
  }
  log_shutdown();
  _exit(0);
}

static void wait_child(pid_t pid) {
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void append_formatted(char *want, uint64_t seq) {
  char line[1024];
  format_numbered(seq, line, sizeof line);
  strcat(want, line);
}

static void record_seq(uint64_t seq) {
  gs_call c = numbered_call(seq);
  log_record(&c);
}

static void start_fork_log(const char *name) {
  start_log(name, GS_LEVEL_WARN, "");
  if (FORK_WITHOUT_FLUSHER) gs_fault_arm(GS_SYS_pthread_create, 1, 1);
}

static void test_fork_own_file(void **state) {
  (void)state;
  char path[128], want[4096] = "";
  start_fork_log("fork.%p.jsonl");
  record_seq(1);
  record_seq(2); /* still buffered at the fork: the parent's to write */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) child_records(100, 2);
  wait_child(pid);
  record_seq(3);
  log_shutdown();

  snprintf(path, sizeof path, "%s/fork.%d.jsonl", dir, (int)getpid());
  append_formatted(want, 1), append_formatted(want, 2), append_formatted(want, 3);
  char *got = read_file(path, NULL);
  int headers;
  assert_string_equal(without_headers(got, pid, &headers), want);
  assert_int_equal(headers, 0); /* the child's file is its own */
  free(got);
  snprintf(path, sizeof path, "%s/fork.%d.jsonl", dir, (int)pid);
  want[0] = '\0';
  append_formatted(want, 100), append_formatted(want, 101);
  got = read_file(path, NULL);
  assert_non_null(got);
  assert_string_equal(without_headers(got, pid, &headers), want);
  assert_int_equal(headers, 1); /* the child's own, first */
  free(got);
}

/* Same path: the child appends (no truncation) and never writes the
 * parent's buffered record 2. */
static void test_fork_shared_file(void **state) {
  (void)state;
  char path[128], want[4096] = "";
  start_fork_log("shared.jsonl");
  record_seq(1);
  log_flush();
  record_seq(2);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) child_records(100, 1);
  wait_child(pid);
  record_seq(3);
  log_shutdown();
  path_in_dir(path, sizeof path, "shared.jsonl");
  append_formatted(want, 1), append_formatted(want, 100), append_formatted(want, 2), append_formatted(want, 3);
  char *got = read_file(path, NULL);
  int headers;
  assert_string_equal(without_headers(got, pid, &headers), want);
  assert_int_equal(headers, 1); /* the child's header, before its first record */
  free(got);
}

/* GEMMSHIM_LOG=/dev/fd/N is resolved once, by the parent's first record: a
 * forked child that closes N and opens a file of its own under that number
 * gets nothing written into it, and its records still reach the parent's
 * copy (the child used to duplicate N again, its own file by then). */
static void test_fork_named_descriptor_kept(void **state) {
  (void)state;
  char path[128], theirs[128], want[4096] = "";
  path_in_dir(path, sizeof path, "named.jsonl");
  path_in_dir(theirs, sizeof theirs, "childs.bin");
  int n = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  assert_true(n >= 0);
  snprintf(gs_opt.log_path, sizeof gs_opt.log_path, "/dev/fd/%d", n);
  gs_debug_file[0] = '\0';
  gs_debug_level = GS_LEVEL_WARN;
  debug_init();
  log_init();
  if (FORK_WITHOUT_FLUSHER) gs_fault_arm(GS_SYS_pthread_create, 1, 1);
  record_seq(1);
  log_flush();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(n);
    int mine = open(theirs, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (mine != n) _exit(3);
    child_records(100, 1);
  }
  wait_child(pid);
  record_seq(2);
  log_shutdown();
  close(n);
  append_formatted(want, 1), append_formatted(want, 100), append_formatted(want, 2);
  char *got = read_file(path, NULL);
  int headers;
  assert_string_equal(without_headers(got, pid, &headers), want);
  assert_int_equal(headers, 1); /* the child's header, before its first record */
  free(got);
  size_t len;
  got = read_file(theirs, &len);
  assert_int_equal(len, 0);
  free(got);
}

/* A descriptor named by number that is open read-only (/dev/stdin on a
 * file): refused when the log is opened, said as such, not a descriptor
 * the program closed (a write there would be EBADF, write(2)). */
static void test_named_read_only_descriptor(void **state) {
  (void)state;
  char path[128], dbg[128];
  path_in_dir(path, sizeof path, "readonly.jsonl");
  close(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  int n = open(path, O_RDONLY);
  assert_true(n >= 0);
  path_in_dir(gs_debug_file, sizeof gs_debug_file, "readonly.debug");
  snprintf(gs_opt.log_path, sizeof gs_opt.log_path, "/dev/fd/%d", n);
  gs_debug_level = GS_LEVEL_WARN;
  debug_init();
  log_init();
  record_seq(1);
  log_shutdown();
  close(n);
  path_in_dir(dbg, sizeof dbg, "readonly.debug");
  char *warn = read_file(dbg, NULL), want[256];
  snprintf(want, sizeof want, " WARN GEMMSHIM_LOG: cannot open '/dev/fd/%d' (descriptor %d is open for reading only; "
           "expected one open for writing); the routing log is off for the rest of this process\n", n, n);
  assert_int_equal(count_lines(warn), 1);
  assert_non_null(strstr(warn, want));
  free(warn);
}

/* A parent that forks before its first record creates the shared file at
 * the fork, so its own later open cannot truncate the child's records. */
static void test_fork_before_first_record(void **state) {
  (void)state;
  char path[128], want[4096] = "";
  start_fork_log("early.jsonl");
  path_in_dir(path, sizeof path, "early.jsonl");
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) child_records(100, 1);
  wait_child(pid);
  record_seq(1);
  log_shutdown();
  append_formatted(want, 100), append_formatted(want, 1);
  char *got = read_file(path, NULL);
  int headers;
  assert_string_equal(without_headers(got, pid, &headers), want);
  assert_int_equal(headers, 1); /* the child's header, before its first record */
  free(got);
}

/* ---- summary -------------------------------------------------------------- */
static void record_n(int n, gs_api api, gs_route route, const char *reason, uint64_t site) {
  gs_call c = gemm_ex_call();
  c.g.api = api;
  c.route = route;
  c.site = site;
  snprintf(c.reason, sizeof c.reason, "%s", reason);
  for (int i = 0; i < n; i++) log_record(&c);
}

/* ---- records held for their GPU work (GEMMSHIM_LOG_GPU_TIME) ---------------- */
/* Fake events with the CUDA driver API's contract (event management):
 * cuEventQuery answers CUDA_ERROR_NOT_READY until the work the event
 * captured is done, then CUDA_SUCCESS; cuEventElapsedTime gives the
 * milliseconds between two completed events. Here the "GPU" is busy while
 * fake_gpu_busy is set, and every interval is 0.25 ms. */
static int fake_gpu_busy, fake_queries; /* atomic */
static CUresult (*real_query)(CUevent);
static CUresult (*real_elapsed)(float *, CUevent, CUevent);
static CUresult (*real_destroy)(CUevent);

static CUresult fake_query(CUevent e) {
  (void)e;
  __atomic_add_fetch(&fake_queries, 1, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&fake_gpu_busy, __ATOMIC_SEQ_CST) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static CUresult fake_elapsed(float *ms, CUevent a, CUevent b) {
  (void)a, (void)b;
  *ms = 0.25f;
  return CUDA_SUCCESS;
}

static CUresult fake_destroy(CUevent e) {
  (void)e;
  return CUDA_SUCCESS;
}

static void fake_events(int busy) {
  real_query = gs_sys.cuEventQuery, real_elapsed = gs_sys.cuEventElapsedTime_v2, real_destroy = gs_sys.cuEventDestroy_v2;
  gs_sys.cuEventQuery = fake_query, gs_sys.cuEventElapsedTime_v2 = fake_elapsed, gs_sys.cuEventDestroy_v2 = fake_destroy;
  __atomic_store_n(&fake_gpu_busy, busy, __ATOMIC_SEQ_CST);
  __atomic_store_n(&fake_queries, 0, __ATOMIC_SEQ_CST);
  gs_opt.log_gpu_time = 1;
}

static void real_events(void) {
  gs_sys.cuEventQuery = real_query, gs_sys.cuEventElapsedTime_v2 = real_elapsed, gs_sys.cuEventDestroy_v2 = real_destroy;
  gs_opt.log_gpu_time = 0;
}

/* A numbered call whose start and end events were recorded (gpu_time.c's
 * state once the call returned). */
static void log_timed(uint64_t seq) {
  gs_call c = numbered_call(seq);
  c.work_begun = 1;
  c.gpu.on = 1;
  c.gpu.ctx_id = 77;
  c.gpu.ev[GS_GPU_EV_START] = (void *)(uintptr_t)(0x1000 + 16 * seq);
  c.gpu.ev[GS_GPU_EV_END] = (void *)(uintptr_t)(0x1008 + 16 * seq);
  log_record(&c);
}

/* numbered_call(seq)'s line with `tail` in place of its closing brace. */
static void timed_line(uint64_t seq, const char *tail, char *out, size_t len) {
  char plain[1024];
  size_t n = format_numbered(seq, plain, sizeof plain);
  assert_true(n > 2);
  snprintf(out, len, "%.*s%s}\n", (int)(n - 2), plain, tail);
}

/* Until the flusher has queried at least n events (it wrote the buffer and
 * held its records). A wait for an event, not a timing assumption: the
 * bound only keeps a broken build from hanging. */
static void wait_queries(int n) {
  for (int i = 0; i < 20000 && __atomic_load_n(&fake_queries, __ATOMIC_SEQ_CST) < n; i++) sleep_ms(1);
  assert_true(__atomic_load_n(&fake_queries, __ATOMIC_SEQ_CST) >= n);
}

/* Records the flusher held because their GPU work was running, and no
 * record after them: the last flush still writes them, with their GPU
 * time once the work is done. (A log_flush that wrote only the buffer
 * left such a log empty.) */
static void test_gpu_held_written_by_last_flush(void **state) {
  (void)state;
  char path[128], want[4096] = "", line[1024];
  fake_events(1);
  start_log("held.jsonl", GS_LEVEL_WARN, "held.debug");
  for (uint64_t s = 1; s <= 3; s++) log_timed(s);
  wait_queries(3);
  path_in_dir(path, sizeof path, "held.jsonl");
  char *got = read_file(path, NULL);
  assert_string_equal(got, ""); /* held, not written without their time */
  free(got);
  __atomic_store_n(&fake_gpu_busy, 0, __ATOMIC_SEQ_CST);
  log_shutdown();
  real_events();
  for (uint64_t s = 1; s <= 3; s++) timed_line(s, ",\"gpu_ns\":250000", line, sizeof line), strcat(want, line);
  got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
  path_in_dir(path, sizeof path, "held.debug");
  got = read_file(path, NULL);
  assert_true(!got || !got[0]); /* nothing lost, nothing to warn of */
  free(got);
}

/* GPU work that never finishes: the last flush waits for it at most its
 * bound (half the exit's write budget), then writes every record without
 * GPU time, saying so; held ones (older) first. */
static void test_gpu_unfinished_at_exit(void **state) {
  (void)state;
  char path[128], want[4096] = "", line[1024];
  fake_events(1);
  start_log("unfinished.jsonl", GS_LEVEL_WARN, "");
  for (uint64_t s = 1; s <= 2; s++) log_timed(s);
  wait_queries(2);
  log_timed(3); /* still in the buffer at exit */
  log_shutdown();
  real_events();
  for (uint64_t s = 1; s <= 3; s++)
    timed_line(s, ",\"gpu_skipped\":\"not finished when the log closed\"", line, sizeof line), strcat(want, line);
  path_in_dir(path, sizeof path, "unfinished.jsonl");
  char *got = read_file(path, NULL);
  assert_string_equal(got, want);
  free(got);
}

/* More records waiting for the GPU than log.c holds (LOG_HELD_BYTES, 4 MiB
 * of binary records, ~12800 of these): the ones that find no room are
 * written at once without GPU time, saying why; none is lost, and the
 * held ones are all written at exit. */
#define HELD_RECORDS 20000
static void test_gpu_held_bound(void **state) {
  (void)state;
  char path[128], line[1024];
  fake_events(1);
  /* No record dropped for a writer stalled by a loaded machine: then the
   * writer has held all but the last two buffers' records (~800) when the
   * loop ends, well past the bound. */
  gs_opt.log_wait = 1;
  start_log("heldfull.jsonl", GS_LEVEL_WARN, "heldfull.debug");
  for (uint64_t s = 1; s <= HELD_RECORDS; s++) log_timed(s);
  log_shutdown();
  real_events();
  static unsigned char seen[HELD_RECORDS + 1];
  memset(seen, 0, sizeof seen);
  uint64_t full = 0, closed = 0;
  path_in_dir(path, sizeof path, "heldfull.jsonl");
  char *got = read_file(path, NULL);
  for (char *p = got, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    assert_non_null(nl);
    unsigned long long seq;
    assert_int_equal(sscanf(p, "{\"seq\":%llu,", &seq), 1);
    assert_true(seq >= 1 && seq <= HELD_RECORDS && !seen[seq]);
    seen[seq] = 1;
    /* Which of the two it is, by its length; then the whole line. */
    timed_line(seq, ",\"gpu_skipped\":\"not finished, too many records waiting for the GPU\"", line, sizeof line);
    int is_full = (size_t)(nl + 1 - p) == strlen(line);
    if (!is_full) timed_line(seq, ",\"gpu_skipped\":\"not finished when the log closed\"", line, sizeof line);
    assert_int_equal((size_t)(nl + 1 - p), strlen(line));
    assert_memory_equal(p, line, strlen(line));
    full += is_full, closed += !is_full;
  }
  free(got);
  assert_int_equal(full + closed, HELD_RECORDS);
  assert_true(full > 0 && closed > 0);
  path_in_dir(path, sizeof path, "heldfull.debug");
  got = read_file(path, NULL);
  assert_true(!got || !got[0]);
  free(got);
}

/* The debug text with each line's "gemmshim host:pid:tid " prefix cut. */
static char *debug_messages(const char *name) {
  char path[128];
  path_in_dir(path, sizeof path, name);
  char *text = read_file(path, NULL), *out = malloc(strlen(text) + 1), *o = out;
  for (char *p = text, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    char *level = strstr(p, " ");
    level = strstr(level + 1, " ") + 1;
    memcpy(o, level, (size_t)(nl + 1 - level));
    o += nl + 1 - level;
  }
  *o = '\0';
  free(text);
  return out;
}

static void test_summary(void **state) {
  (void)state;
  start_log("", GS_LEVEL_INFO, "summary.debug"); /* log off: counted for INFO */
  record_n(120, GS_API_GEMM_EX, GS_ROUTE_NATIVE, "policy: built-in rule 2 (native)", 0x10);
  record_n(40, GS_API_GEMM_EX, GS_ROUTE_FFMA, "policy: built-in rule 1 (ffma)", 0x20);
  record_n(7, GS_API_LT_MATMUL, GS_ROUTE_NATIVE, "mode native", 0x30);
  record_n(5, GS_API_LT_MATMUL, GS_ROUTE_NATIVE, "nested \"quoted\"", 0x40);
  record_n(3, GS_API_GEMM_STRIDED_BATCHED_EX, GS_ROUTE_FP8, "fp8", 0x50);
  record_n(2, GS_API_GEMM_STRIDED_BATCHED_EX, GS_ROUTE_FP8, "sixth reason", 0x60);
  log_shutdown();
  char *got = debug_messages("summary.debug");
  assert_string_equal(got,
                      "INFO summary: 177 calls: cublasGemmEx native 120, cublasGemmEx ffma 40, "
                      "cublasGemmStridedBatchedEx fp8 5, cublasLtMatmul native 12\n"
                      "INFO summary: reason 120 calls: policy: built-in rule 2 (native)\n"
                      "INFO summary: reason 40 calls: policy: built-in rule 1 (ffma)\n"
                      "INFO summary: reason 7 calls: mode native\n"
                      "INFO summary: reason 5 calls: nested \"quoted\"\n"
                      "INFO summary: reason 3 calls: fp8\n"
                      "INFO summary: site 0000000000000010 120 calls\n"
                      "INFO summary: site 0000000000000020 40 calls\n"
                      "INFO summary: site 0000000000000030 7 calls\n"
                      "INFO summary: site 0000000000000040 5 calls\n"
                      "INFO summary: site 0000000000000050 3 calls\n");
  free(got);
}

/* Runs of one reason are counted without hashing it again: alternate
 * reasons, and one that extends the previous, must still count apart. */
static void test_summary_alternating_reasons(void **state) {
  (void)state;
  start_log("", GS_LEVEL_INFO, "alternate.debug");
  for (int i = 0; i < 10; i++) {
    record_n(1, GS_API_GEMM_EX, GS_ROUTE_NATIVE, "alpha", 0x1);
    record_n(2, GS_API_GEMM_EX, GS_ROUTE_NATIVE, "beta", 0x1);
    record_n(3, GS_API_GEMM_EX, GS_ROUTE_NATIVE, "beta2", 0x1);
    record_n(4, GS_API_GEMM_EX, GS_ROUTE_NATIVE, "bet", 0x1);
  }
  log_shutdown();
  char *got = debug_messages("alternate.debug");
  assert_string_equal(got,
                      "INFO summary: 100 calls: cublasGemmEx native 100\n"
                      "INFO summary: reason 40 calls: bet\n"
                      "INFO summary: reason 30 calls: beta2\n"
                      "INFO summary: reason 20 calls: beta\n"
                      "INFO summary: reason 10 calls: alpha\n"
                      "INFO summary: site 0000000000000001 100 calls\n");
  free(got);
}

static void test_summary_overflow_and_dropped(void **state) {
  (void)state;
  char reason[32];
  start_log("big.jsonl", GS_LEVEL_INFO, "big.debug");
  for (int i = 0; i < 70; i++) { /* 64 reasons fit; 6 go to "other" */
    snprintf(reason, sizeof reason, "reason %02d", i);
    record_n(i < 64 ? 100 + i : 1, GS_API_GEMM_EX, GS_ROUTE_NATIVE, reason, 0x1000 + (uint64_t)i);
  }
  for (int i = 0; i < 300; i++) record_n(1, GS_API_GEMM_EX, GS_ROUTE_NATIVE, "reason 00", 0x5000 + (uint64_t)i);
  log_shutdown();
  char *got = debug_messages("big.debug");
  uint64_t total = 300 + 6;
  for (int i = 0; i < 64; i++) total += 100 + (uint64_t)i;
  char want[256];
  snprintf(want, sizeof want, "INFO summary: %llu calls: cublasGemmEx native %llu\n", (unsigned long long)total,
           (unsigned long long)total);
  assert_non_null(strstr(got, want));
  assert_non_null(strstr(got, "INFO summary: reason 400 calls: reason 00\n"
                              "INFO summary: reason 163 calls: reason 63\n"
                              "INFO summary: reason 162 calls: reason 62\n"
                              "INFO summary: reason 161 calls: reason 61\n"
                              "INFO summary: reason 160 calls: reason 60\n"
                              "INFO summary: reason 6 calls: (other reasons, beyond the first 64)\n"
                              "INFO summary: site 000000000000103f 163 calls\n"));
  /* 70 + 300 distinct sites: the last 114 are "other", 1 call each. */
  assert_non_null(strstr(got, "INFO summary: site other 114 calls (sites beyond the first 256)\n"));
  assert_null(strstr(got, "dropped"));
  free(got);
}

static int group_setup(void **state) {
  (void)state;
  return tmpdir_make(dir, sizeof dir, "log");
}

static int group_teardown(void **state) {
  (void)state;
  return tmpdir_remove(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_format_gemm_ex),
      cmocka_unit_test(test_format_lt_epilogue_bias),
      cmocka_unit_test(test_format_escapes_reason),
      cmocka_unit_test(test_format_unterminated_reason),
      cmocka_unit_test(test_format_unknown_values),
      cmocka_unit_test(test_format_lt_unknown_epilogue),
      cmocka_unit_test(test_format_too_small),
      cmocka_unit_test(test_format_numbers),
      cmocka_unit_test(test_format_hex),
      cmocka_unit_test(test_format_escapes_every_position),
      cmocka_unit_test(test_format_utf8_every_position),
      cmocka_unit_test(test_format_widest_record),
      cmocka_unit_test(test_format_gpu_time),
      cmocka_unit_test(test_format_accuracy),
      cmocka_unit_test(test_format_fp8_stats),
      cmocka_unit_test(test_accuracy_summarise),
      cmocka_unit_test_teardown(test_expand_pid_host, teardown),
      cmocka_unit_test(test_expand_rank),
      cmocka_unit_test(test_expand_literal_percent),
      cmocka_unit_test(test_expand_overflow),
      cmocka_unit_test_teardown(test_malloc_failure_disables, teardown),
      cmocka_unit_test_teardown(test_lazy_open, teardown),
      cmocka_unit_test_teardown(test_records_in_order, teardown),
      cmocka_unit_test_teardown(test_one_write_per_flush, teardown),
      cmocka_unit_test_teardown(test_full_buffer_written_by_flusher, teardown),
      cmocka_unit_test_teardown(test_full_buffer_without_flusher, teardown),
      cmocka_unit_test_teardown(test_long_backend, teardown),
      cmocka_unit_test_teardown(test_flusher_deadline_during_write, teardown),
      cmocka_unit_test_teardown(test_write_failure_disables, teardown),
      cmocka_unit_test_teardown(test_short_write_continues, teardown),
      cmocka_unit_test_teardown(test_full_disk_cut_line, teardown),
      cmocka_unit_test_teardown(test_whole_last_line_kept, teardown),
      cmocka_unit_test_teardown(test_zero_write_disables, teardown),
      cmocka_unit_test_teardown(test_open_failure_disables, teardown),
      cmocka_unit_test_teardown(test_no_flusher_thread_still_flushes, teardown),
      cmocka_unit_test_teardown(test_flusher_thread_flushes, teardown),
      cmocka_unit_test_teardown(test_late_records, teardown),
      cmocka_unit_test_teardown(test_threads_every_seq_once, teardown),
      cmocka_unit_test_teardown(test_threads_overload_waits, teardown),
      cmocka_unit_test_teardown(test_stalled_reader_drops, teardown),
      cmocka_unit_test_teardown(test_slow_reader_waited_for, teardown),
      cmocka_unit_test_teardown(test_fork_own_file, teardown),
      cmocka_unit_test_teardown(test_fork_shared_file, teardown),
      cmocka_unit_test_teardown(test_fork_before_first_record, teardown),
      cmocka_unit_test_teardown(test_fork_named_descriptor_kept, teardown),
      cmocka_unit_test_teardown(test_named_read_only_descriptor, teardown),
      cmocka_unit_test_teardown(test_gpu_held_written_by_last_flush, teardown),
      cmocka_unit_test_teardown(test_gpu_unfinished_at_exit, teardown),
      cmocka_unit_test_teardown(test_gpu_held_bound, teardown),
      cmocka_unit_test_teardown(test_summary, teardown),
      cmocka_unit_test_teardown(test_summary_alternating_reasons, teardown),
      cmocka_unit_test_teardown(test_summary_overflow_and_dropped, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
