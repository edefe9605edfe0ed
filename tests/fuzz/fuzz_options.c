/* fuzz_options.c: libFuzzer harness for the option parsers (shim/options.c):
 * the shared number and size parsers, and options_init over an environment
 * of up to fourteen GEMMSHIM_* variables taken from the input (every
 * option but the three paths).
 *
 * Input: records of [selector byte][value bytes][NUL], the last NUL
 * optional. The selector picks the variable (below); each value is also fed
 * to options_parse_u64 and options_parse_size directly.
 *
 * What a value must give is decided here, from the options table of docs/environment.md
 * (names, choices, bounds, "a whole number", "a size ... with K, M, G or T"),
 * not from the shim's code:
 *   - a value the rules accept sets the option to the value they give, and
 *     the shim stays routing (no pass-through, no warning);
 *   - a value they refuse gives one WARN line naming the variable, saying
 *     what was expected, and the shim runs pass-through;
 *   - a number or size the parser accepts prints back to the same value.
 * The debug output is a file of whole lines, each "gemmshim ...", with no
 * control byte but the newlines; a value is escaped and cut in its message
 * so "expected" and "pass-through" always appear, whatever the value (a
 * newline, a blank or sign before a number, 100 KB), and every problem is
 * reported, however many. Paths (GEMMSHIM_POLICY,
 * _LOG, _DEBUG_FILE) are never taken from the input: the harness must not
 * create or read files it was not meant to. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "shim.h"
#include "sys.h"

typedef enum kind { K_ENUM, K_BOOL, K_U64, K_SIZE, K_FAULT } kind;

typedef struct var {
  const char *name;
  kind k;
  const void *field; /* the option's variable; unused for K_FAULT */
  const char *const *choices;
  uint64_t lo, hi;
} var;

static const char *const modes[] = {"auto", "native", "ffma", "fp8", "fp16", NULL};
static const char *const levels[] = {"WARN", "INFO", "TRACE", NULL};
static const char *const formats[] = {"e4m3", "e5m2", "hybrid", NULL};
static const char *const backends[] = {"auto", "own", "cublaslt", "own-mma", NULL};

#define F(x) (&gs_opt.x)
static const var vars[] = {
    {"GEMMSHIM_MODE", K_ENUM, F(mode), modes, 0, 0},
    {"GEMMSHIM_DEBUG", K_ENUM, &gs_debug_level, levels, 0, 0},
    {"GEMMSHIM_FFMA_MAX_BYTES", K_SIZE, F(ffma_max_bytes), NULL, 0, UINT64_MAX},
    {"GEMMSHIM_FFMA_MIN_FLOPS", K_U64, F(ffma_min_flops), NULL, 0, UINT64_MAX},
    {"GEMMSHIM_FP8_FORMAT", K_ENUM, F(fp8_format), formats, 0, 0},
    {"GEMMSHIM_FP8_BACKEND", K_ENUM, F(fp8_backend), backends, 0, 0},
    {"GEMMSHIM_FP8_HISTORY", K_U64, F(fp8_history), NULL, 1, 4096},
    {"GEMMSHIM_FP8_MARGIN", K_U64, F(fp8_margin), NULL, 0, 64},
    {"GEMMSHIM_FP8_MAX_SITES", K_U64, F(fp8_max_sites), NULL, 1, 1048576},
    {"GEMMSHIM_FP8_MAX_BYTES", K_SIZE, F(fp8_max_bytes), NULL, 0, UINT64_MAX},
    {"GEMMSHIM_DLSYM", K_BOOL, F(dlsym_hook), NULL, 0, 1},
    {"GEMMSHIM_FAULT", K_FAULT, NULL, NULL, 0, 0},
    /* Added after the corpus was made: appended, so that its selectors
     * (all below 12) keep naming the same variables. */
    {"GEMMSHIM_LOG_WAIT", K_BOOL, F(log_wait), NULL, 0, 1},
    {"GEMMSHIM_POOL_KEEP_BYTES", K_SIZE, F(pool_keep_bytes), NULL, 0, UINT64_MAX},
    {"GEMMSHIM_GATE", K_BOOL, F(gate), NULL, 0, 1},
};
#define N_VARS (sizeof vars / sizeof vars[0])

static char debug_path[64];

static void die(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_options: invariant broken: %s\n--- detail\n%s\n---\n", what, detail);
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  snprintf(debug_path, sizeof debug_path, "/tmp/gemmshim-fuzz-options-%d.txt", (int)getpid());
  for (size_t i = 0; i < N_VARS; i++) unsetenv(vars[i].name);
  unsetenv("GEMMSHIM_POLICY");
  unsetenv("GEMMSHIM_LOG");
  setenv("GEMMSHIM_DEBUG_FILE", debug_path, 1);
  return 0;
}

/* ---- the rules, as docs/environment.md states them ---------------------------------- */
static int all_digits(const char *s, const char **end) {
  const char *p = s;
  while (*p >= '0' && *p <= '9') p++;
  *end = p;
  return p > s;
}

/* The value of the digits s..end, or -1 on overflow. */
static int digits_value(const char *s, const char *end, uint64_t *v) {
  uint64_t x = 0;
  for (const char *p = s; p < end; p++) {
    if (x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return -1;
    x = x * 10 + (uint64_t)(*p - '0');
  }
  *v = x;
  return 0;
}

/* Decimal digits only, no sign, no blank, no overflow. */
static int ref_u64(const char *s, uint64_t *v) {
  const char *end;
  if (!all_digits(s, &end) || digits_value(s, end, v) != 0) return -1;
  return *end ? 1 : 0; /* 1: digits followed by more text */
}

static int ref_size(const char *s, uint64_t *v) {
  const char *end;
  uint64_t x;
  if (!all_digits(s, &end) || digits_value(s, end, &x) != 0) return -1;
  int shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
  }
  if (shift) {
    end++;
    if (!strcmp(end, "iB") || !strcmp(end, "B")) end += strlen(end);
  } else if (!strcmp(end, "B")) {
    end++;
  }
  if (*end || (shift && x > (UINT64_MAX >> shift))) return -1;
  *v = x << shift;
  return 0;
}

static int ref_fault(const char *s) {
  const char *p = s;
  char named[GS_SYS_COUNT] = {0}; /* each call at most once */
  if (!*p) return 0; /* empty: nothing armed */
  for (;;) {
    const char *colon = strchr(p, ':'), *comma = strchr(p, ',');
    const char *end = comma ? comma : p + strlen(p);
    if (!colon || colon > end) return -1;
    int known = -1;
    for (int i = 0; i < GS_SYS_COUNT; i++)
      if (strlen(gs_sys_names[i]) == (size_t)(colon - p) && !strncmp(gs_sys_names[i], p, (size_t)(colon - p)))
        known = i;
    if (known < 0 || named[known]) return -1;
    named[known] = 1;
    const char *q = colon + 1, *dend;
    if (!all_digits(q, &dend)) return -1;
    uint64_t n = 0;
    for (const char *d = q; d < dend; d++) {
      n = n * 10 + (uint64_t)(*d - '0');
      if (n > 1000000000u) return -1;
    }
    if (n == 0) return -1;
    if (dend < end && *dend == '+') dend++;
    if (dend != end) return -1;
    if (!comma) return 0;
    p = comma + 1; /* an empty entry after it (a trailing comma) is refused: docs/environment.md's form is name:N[+],... */
  }
}

/* 0 and *out set when the rules accept s for v; -1 when they refuse it. */
static int ref_value(const var *v, const char *s, uint64_t *out) {
  switch (v->k) {
    case K_ENUM:
      for (int i = 0; v->choices[i]; i++)
        if (!strcasecmp(s, v->choices[i])) { *out = (uint64_t)i; return 0; }
      return -1;
    case K_BOOL: {
      static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
      for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) { *out = 1; return 0; }
        if (!strcasecmp(s, no[i])) { *out = 0; return 0; }
      }
      return -1;
    }
    case K_U64:
      return ref_u64(s, out) == 0 && *out >= v->lo && *out <= v->hi ? 0 : -1;
    case K_SIZE:
      return ref_size(s, out) == 0 && *out >= v->lo && *out <= v->hi ? 0 : -1;
    case K_FAULT:
      return ref_fault(s);
  }
  return -1;
}

static uint64_t field_value(const var *v) {
  const char *base = (const char *)v->field;
  if (v->k == K_U64 || v->k == K_SIZE) return *(const uint64_t *)base;
  return (uint64_t)*(const int *)base;
}

/* ---- checks ------------------------------------------------------------------ */
/* A message names what was wrong, what was expected and what happens now. */
static void check_message_text(const char *msg, const char *detail) {
  if (!strstr(msg, "expected")) die("message does not say what was expected", detail);
  for (const char *p = msg; *p; p++)
    if ((unsigned char)*p < 0x20) die("message has a control byte", detail);
}

static void check_parsers(const char *s) {
  char err[512];
  uint64_t v = 0, w = 0;
  char printed[32];
  static const uint64_t bounds[][2] = {{0, UINT64_MAX}, {1, 4096}, {7, 7}};
  for (size_t b = 0; b < 3; b++) {
    memset(err, 0, sizeof err);
    uint64_t lo = bounds[b][0], hi = bounds[b][1], r;
    int rc = options_parse_u64("V", s, lo, hi, &v, err, sizeof err);
    int want = ref_u64(s, &r) == 0 && r >= lo && r <= hi ? 0 : -1;
    if (rc == 0) {
      if (v < lo || v > hi) die("options_parse_u64 accepted a number out of bounds", s);
      snprintf(printed, sizeof printed, "%llu", (unsigned long long)v);
      if (options_parse_u64("V", printed, lo, hi, &w, err, sizeof err) != 0 || w != v)
        die("a number does not parse back to itself", printed);
    } else {
      if (strncmp(err, "V=", 2) != 0) die("options_parse_u64's message does not name the variable", err);
      check_message_text(err, err);
    }
    if (want == 0 && (rc != 0 || v != r)) die("options_parse_u64 refused or misread a plain number", s);
    if (want != 0 && rc == 0) die("options_parse_u64 accepted what is not a plain number in range", s);
  }
  memset(err, 0, sizeof err);
  uint64_t r;
  int rc = options_parse_size("V", s, &v, err, sizeof err);
  int want = ref_size(s, &r);
  if (rc == 0) {
    snprintf(printed, sizeof printed, "%llu", (unsigned long long)v);
    if (options_parse_size("V", printed, &w, err, sizeof err) != 0 || w != v)
      die("a size does not parse back to itself", printed);
  } else {
    if (strncmp(err, "V=", 2) != 0) die("options_parse_size's message does not name the variable", err);
    check_message_text(err, err);
  }
  if (want == 0 && (rc != 0 || v != r)) die("options_parse_size refused or misread a plain size", s);
  if (want != 0 && rc == 0) die("options_parse_size accepted what is not a size", s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *copy = malloc(size + 1);
  memcpy(copy, data, size);
  copy[size] = '\0';
  const var *set[N_VARS];
  const char *value[N_VARS];
  int n = 0;
  size_t pos = 0;
  while (pos < size && n < (int)N_VARS) {
    const var *v = &vars[data[pos] % N_VARS];
    const char *s = copy + pos + 1;
    if (pos + 1 > size) s = copy + size;
    pos += 2 + strlen(s);
    int dup = 0;
    for (int i = 0; i < n; i++) dup |= set[i] == v;
    if (dup) continue; /* the environment holds one value per name */
    set[n] = v, value[n] = s, n++;
    check_parsers(s);
  }

  FILE *f = fopen(debug_path, "w");
  if (f) fclose(f);
  for (int i = 0; i < n; i++) setenv(set[i]->name, value[i], 1);
  options_init();
  gs_fault_clear();
  for (int i = 0; i < n; i++) unsetenv(set[i]->name);

  static char out[1 << 16];
  f = fopen(debug_path, "r");
  size_t len = f ? fread(out, 1, sizeof out - 1, f) : 0;
  if (f) fclose(f);
  out[len] = '\0';

  int bad = 0, warns = 0;
  uint64_t want[N_VARS];
  for (int i = 0; i < n; i++) bad += ref_value(set[i], value[i], &want[i]) != 0;
  for (char *line = out, *next; *line; line = next) {
    char *nl = strchr(line, '\n');
    next = nl ? nl + 1 : line + strlen(line);
    if (nl) *nl = '\0';
    if (!strstr(line, " WARN ")) continue;
    warns++;
    if (!nl) die("debug output ends in a partial line", line);
    if (strncmp(line, "gemmshim ", 9) != 0) die("a debug line does not start with 'gemmshim '", line);
    check_message_text(line, line);
    if (!strstr(line, "pass-through")) die("warning does not say what happens instead", line);
    int named = 0;
    for (int i = 0; i < n; i++) named |= strstr(line, set[i]->name) != NULL;
    if (!named) die("warning names none of the variables set", line);
  }
  if (!!warns != !!gs_opt.passthrough) die("a warning without pass-through, or pass-through without one", out);
  if (bad == 0) {
    if (gs_opt.passthrough) die("values the rules accept turned the shim pass-through", out);
    for (int i = 0; i < n; i++)
      if (set[i]->k != K_FAULT && field_value(set[i]) != want[i]) die("an option took another value", value[i]);
  }
  if (bad != warns) die("each refused value must give exactly one warning", out);
  free(copy);
  return 0;
}
