/* options.c: the one table of options. Each GEMMSHIM_* variable is parsed
 * the same way (enums, booleans, numbers, sizes); a bad value gets one line
 * naming the variable, what was expected and what happens instead, and
 * turns the shim into a pass-through: every GEMM native, still logged when
 * GEMMSHIM_LOG names a log. A
 * preloaded library must never abort its host program over configuration. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim.h"
#include "base/sys.h"

#define GS_STR_(x) #x
#define GS_STR(x) GS_STR_(x)

/* Defaults hold before the constructor runs: dlsym can be called earlier. */
gs_options gs_opt = {
    .mode = GS_MODE_AUTO,
    .gate = 1,
    .dlsym_hook = 1,
};
policy_table gs_policy;

typedef enum opt_kind { OPT_ENUM, OPT_BOOL, OPT_U64, OPT_SIZE, OPT_PATH } opt_kind;

typedef struct opt_def {
  const char *name;
  opt_kind kind;
  const char *def;     /* default, as a user would write it */
  const char *meaning; /* one line, printed at INFO and in --help-like docs */
  void *field;
  const char *const *choices; /* OPT_ENUM: NULL-terminated, index = value */
  uint64_t lo, hi;            /* OPT_U64/OPT_SIZE bounds */
} opt_def;

static const char *const mode_names[] = {"auto", "native", "ffma", "fp8", "fp16", NULL};
static const char *const level_names[] = {"WARN", "INFO", "TRACE", NULL};
static const char *const fp8_format_names[] = {"e4m3", "e5m2", "hybrid", NULL};
static const char *const fp8_backend_names[] = {"auto", "own", "cublaslt", "own-mma", NULL};
/* Index = gs_fp8_recipe. */
static const char *const fp8_recipe_names[] = {"auto", "current", "block", "mxfp8", "delayed", NULL};

const char *gs_fp8_recipe_name(int r) { return r > GS_FP8_RECIPE_AUTO && r < GS_FP8_RECIPES ? fp8_recipe_names[r] : NULL; }

/* The options table. Route-specific options live here too, so every
 * variable the shim reads is listed in one place. */
static const opt_def options[] = {
    {"GEMMSHIM_MODE", OPT_ENUM, "auto",
     "auto: the policy table decides; native: pass everything through (still logged); ffma, fp16: that route "
     "wherever it applies; fp8: that route for bf16 and fp16 GEMMs. A policy file's rules decide before the mode",
     &gs_opt.mode, mode_names, 0, 0},
    {"GEMMSHIM_POLICY", OPT_PATH, "",
     "policy file whose rules go before the built-in ones and before GEMMSHIM_MODE (docs/policy.md)",
     gs_opt.policy_path, NULL, 0, 0},
    {"GEMMSHIM_LOG", OPT_PATH, "",
     "routing log path, one JSON line per call; %p pid, %h host, %r rank, %% a percent sign", gs_opt.log_path,
     NULL, 0, 0},
    {"GEMMSHIM_LOG_WAIT", OPT_BOOL, "0",
     "1: a call waits for a routing log writer that fell behind, however long; 0: it waits at most 50 ms, then the "
     "record is dropped, counted in the log and at exit",
     &gs_opt.log_wait, NULL, 0, 1},
    {"GEMMSHIM_DEBUG", OPT_ENUM, "WARN",
     "debug output level: WARN, INFO (every effective option once at load, a summary at exit, each transient pool's "
     "peak and what it kept) or TRACE",
     &gs_debug_level, level_names, 0, 0},
    {"GEMMSHIM_DEBUG_FILE", OPT_PATH, "",
     "debug output file instead of stderr; %h host, %p pid, %r rank", gs_debug_file, NULL, 0, 0},
    {"GEMMSHIM_FFMA_MAX_BYTES", OPT_SIZE, "1G",
     "most transient device memory one ffma call may take; a call needing more runs native",
     &gs_opt.ffma_max_bytes, NULL, 0, UINT64_MAX},
    {"GEMMSHIM_GATE", OPT_BOOL, "1",
     "1: the ffma and fp16 routes, and fp8 on sm_89+, take a GEMM only where their cost model estimates them faster "
     "than native on this GPU, and with GEMMSHIM_COMPARE a site measured slower than native runs native "
     "(docs/cost-model.md); 0: wherever they apply, whatever the estimate or measurement",
     &gs_opt.gate, NULL, 0, 1},
    {"GEMMSHIM_FFMA_MIN_FLOPS", OPT_U64, "0",
     "GEMMs of fewer flops (2*m*n*k*batch) stay native on the ffma route, whatever GEMMSHIM_GATE says; 0: no bound",
     &gs_opt.ffma_min_flops, NULL, 0, UINT64_MAX},
    {"GEMMSHIM_FP8_FORMAT", OPT_ENUM, "e4m3",
     "fp8 format: e4m3, e5m2, or hybrid (E5M2 for operands detected as gradients)", &gs_opt.fp8_format,
     fp8_format_names, 0, 0},
    {"GEMMSHIM_FP8_BACKEND", OPT_ENUM, "auto",
     "fp8 GEMM backend: auto (cuBLASLt fp8 on sm_89+ where it applies, else native there; the shim's kernel below sm_89), "
     "own, cublaslt, "
     "own-mma (the shim's kernel on fp8 tensor cores, sm_89+, else own; checked on an H200, 0.14x native there)",
     &gs_opt.fp8_backend, fp8_backend_names, 0, 0},
    {"GEMMSHIM_FP8_RECIPE", OPT_ENUM, "auto",
     "fp8 scaling recipe: current (per-tensor scale from the call's own amax), block (1x128 and 128x128 blocks, "
     "sm_90 with cuBLAS 12.9+), mxfp8 (32-element blocks with E8M0 scales, sm_100+), delayed (amax history per call "
     "site), auto (mxfp8 on sm_100+, current elsewhere); a recipe the GPU or cuBLAS cannot run falls back to the next",
     &gs_opt.fp8_recipe, fp8_recipe_names, 0, 0},
    {"GEMMSHIM_FP8_HISTORY", OPT_U64, "16", "amax history length per call site and operand",
     &gs_opt.fp8_history, NULL, 1, 4096},
    {"GEMMSHIM_FP8_MARGIN", OPT_U64, "0", "headroom in powers of 2, as TransformerEngine's margin: scale = max(amax history) * 2^margin / fp8 max",
     &gs_opt.fp8_margin, NULL, 0, 64},
    {"GEMMSHIM_FP8_MAX_SITES", OPT_U64, "4096",
     "most fp8 call sites kept; the least recently used is evicted", &gs_opt.fp8_max_sites, NULL, 1, 1048576},
    {"GEMMSHIM_FP8_MAX_BYTES", OPT_SIZE, "1G",
     "most transient device memory one fp8 call may take; a call needing more runs native",
     &gs_opt.fp8_max_bytes, NULL, 0, UINT64_MAX},
    {"GEMMSHIM_FP16_MAX_BYTES", OPT_SIZE, "1G",
     "most transient device memory one fp16 call may take; a call needing more runs native",
     &gs_opt.fp16_max_bytes, NULL, 0, UINT64_MAX},
    {"GEMMSHIM_FP16_MIN_FLOPS", OPT_U64, "0",
     "GEMMs of fewer flops (2*m*n*k*batch) stay native on the fp16 route, whatever GEMMSHIM_GATE says; 0: no bound",
     &gs_opt.fp16_min_flops, NULL, 0, UINT64_MAX},
    {"GEMMSHIM_GRAPH_MAX_BYTES", OPT_SIZE, "1G",
     "most device memory the buffers of routed calls captured into CUDA graphs may hold in all, for as long as each "
     "graph (its clones, child nodes and instantiations) lives; a captured call that would pass it runs native "
     "(docs/graphs.md)",
     &gs_opt.graph_max_bytes, NULL, 0, UINT64_MAX},
    {"GEMMSHIM_POOL_KEEP_BYTES", OPT_SIZE, "256M",
     "device memory the shim's transient pool keeps mapped between calls, per device, for the next call; above it the "
     "pool gives memory back at the next synchronisation (memory kept is memory the framework cannot have)",
     &gs_opt.pool_keep_bytes, NULL, 0, UINT64_MAX},
    {"GEMMSHIM_LOG_GPU_TIME", OPT_BOOL, "0",
     "with GEMMSHIM_LOG: each record gets gpu_ns, the GPU time of the call's work, from events on its stream",
     &gs_opt.log_gpu_time, NULL, 0, 1},
    {"GEMMSHIM_COMPARE", OPT_BOOL, "0",
     "with GEMMSHIM_LOG: a routed call also runs native into scratch memory at each site's first call and then "
     "every GEMMSHIM_COMPARE_EVERY calls, timed (native_gpu_ns); once a site has 3 or more compared calls and they "
     "took more GPU time in all routed than native, it runs native from then on (with GEMMSHIM_GATE; fp8 only "
     "where it runs on cuBLASLt); implies GEMMSHIM_LOG_GPU_TIME",
     &gs_opt.compare, NULL, 0, 1},
    {"GEMMSHIM_COMPARE_EVERY", OPT_U64, "100", "GEMMSHIM_COMPARE: native runs of a site after its first, 1 in N calls",
     &gs_opt.compare_every, NULL, 1, UINT64_MAX},
    {"GEMMSHIM_GUARD_SQNR", OPT_U64, "0",
     "with GEMMSHIM_COMPARE: a call site whose compared call measured below this many dB (the lower of sqnr_db and "
     "the median element's, docs/log-format.md) runs native from the call after the log writer read it on; 0: off",
     &gs_opt.guard_sqnr_db, NULL, 0, 1000},
    {"GEMMSHIM_DLSYM", OPT_BOOL, "1",
     "hand out the shim's wrappers for cuBLAS functions looked up with dlsym on a cuBLAS handle (XLA/TensorFlow)",
     &gs_opt.dlsym_hook, NULL, 0, 1},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

static int opt_set_by_env[N_OPTIONS];

/* ---- shared parsers ------------------------------------------------------ */
int options_parse_u64(const char *var, const char *s, uint64_t lo, uint64_t hi,
                      uint64_t *out, char *err, size_t errlen) {
  char *end, q[GS_QUOTE_BUF];
  errno = 0;
  /* A digit first: strtoull would skip leading white space and take a
   * sign, so ' -1' became 2^64-1. */
  if (!s || *s < '0' || *s > '9') goto bad;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) goto bad;
  *out = v;
  return 0;
bad:
  snprintf(err, errlen, "%s='%s': expected a whole number from %" PRIu64 " to %" PRIu64, var, gs_quote(s, q), lo,
           hi);
  return -1;
}

/* Sizes: bytes, or a number with K, M, G or T (powers of 1024, optional
 * "iB"/"B"), e.g. 512M, 2GiB. */
int options_parse_size(const char *var, const char *s, uint64_t *out, char *err, size_t errlen) {
  char *end, q[GS_QUOTE_BUF];
  errno = 0;
  if (!s || *s < '0' || *s > '9') goto bad; /* no white space, no sign (as above) */
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) goto bad;
  int shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
  }
  if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)) end += strlen(end);
  else if (!shift && strcmp(end, "B") == 0) end++;
  if (*end || (shift && v > (UINT64_MAX >> shift))) goto bad;
  *out = (uint64_t)v << shift;
  return 0;
bad:
  snprintf(err, errlen, "%s='%s': expected a size in bytes, optionally with K, M, G or T (e.g. 512M)", var,
           gs_quote(s, q));
  return -1;
}

static int parse_enum(const opt_def *o, const char *s, char *err, size_t errlen) {
  for (int i = 0; o->choices[i]; i++) {
    if (strcasecmp(s, o->choices[i]) == 0) {
      *(int *)o->field = i;
      return 0;
    }
  }
  char q[GS_QUOTE_BUF];
  int n = snprintf(err, errlen, "%s='%s': expected ", o->name, gs_quote(s, q));
  for (int i = 0; o->choices[i] && n > 0 && (size_t)n < errlen; i++)
    n += snprintf(err + n, errlen - (size_t)n, "%s%s", i ? (o->choices[i + 1] ? ", " : " or ") : "",
                  o->choices[i]);
  return -1;
}

static int parse_bool(const opt_def *o, const char *s, char *err, size_t errlen) {
  static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) { *(int *)o->field = 1; return 0; }
    if (strcasecmp(s, no[i]) == 0) { *(int *)o->field = 0; return 0; }
  }
  char q[GS_QUOTE_BUF];
  snprintf(err, errlen, "%s='%s': expected 1/0, true/false, yes/no or on/off", o->name, gs_quote(s, q));
  return -1;
}

static int parse_one(const opt_def *o, const char *s, char *err, size_t errlen) {
  uint64_t v;
  char q[GS_QUOTE_BUF];
  switch (o->kind) {
    case OPT_ENUM: return parse_enum(o, s, err, errlen);
    case OPT_BOOL: return parse_bool(o, s, err, errlen);
    case OPT_U64:
      if (options_parse_u64(o->name, s, o->lo, o->hi, &v, err, errlen)) return -1;
      *(uint64_t *)o->field = v;
      return 0;
    case OPT_SIZE:
      if (options_parse_size(o->name, s, &v, err, errlen)) return -1;
      if (v < o->lo || v > o->hi) {
        snprintf(err, errlen, "%s='%s': expected a size from %" PRIu64 " to %" PRIu64 " bytes", o->name,
                 gs_quote(s, q), o->lo, o->hi);
        return -1;
      }
      *(uint64_t *)o->field = v;
      return 0;
    case OPT_PATH:
      if (strlen(s) >= sizeof gs_opt.log_path) {
        snprintf(err, errlen, "%s: path of %zu bytes; expected at most %zu", o->name, strlen(s),
                 sizeof gs_opt.log_path - 1);
        return -1;
      }
      strcpy((char *)o->field, s);
      return 0;
  }
  return -1;
}

/* Problems found before the debug output is open are held back, so they
 * reach GEMMSHIM_DEBUG_FILE like every later message: room for one per
 * option and then some; past that, how many more there were. */
#define MAX_HELD 32
static char held[MAX_HELD][1024];
static int n_held, n_held_lost, debug_open;

/* options_check's receiver: while set, problems go to it, not the debug output. */
static options_problem_fn problem_sink;
static void *problem_arg;
static int n_problems;

/* What pass-through leaves: the routing log, only when there is one (a
 * GEMMSHIM_LOG that was itself rejected is none). */
static const char *passthrough_note(void) { return gs_opt.log_path[0] ? ", still logged" : ""; }

static void go_passthrough(const char *why) {
  gs_opt.passthrough = 1;
  n_problems++;
  if (problem_sink)
    problem_sink(why, problem_arg);
  else if (debug_open)
    GS_WARN("%s; running pass-through (every GEMM native%s)", why, passthrough_note());
  else if (n_held < MAX_HELD)
    snprintf(held[n_held++], sizeof held[0], "%s", why);
  else
    n_held_lost++;
}

/* ---- the policy file ------------------------------------------------------- */
#define POLICY_MAX_BYTES (1u << 20)
/* A terminal or other character device named as the policy file gets this
 * long to reach its end; opening it never blocks (O_NONBLOCK). */
#define POLICY_WAIT_MS 1000

/* The whole of fd into text (POLICY_MAX_BYTES + 1 at most, to tell a file
 * too large); -1 with errno on a read error, ETIMEDOUT past the wait. */
static ssize_t read_policy(int fd, char *text) {
  uint64_t deadline = gs_monotonic_ns() + POLICY_WAIT_MS * 1000000ull;
  size_t len = 0;
  while (len <= POLICY_MAX_BYTES) {
    ssize_t r = GS_CALL(read, fd, text + len, POLICY_MAX_BYTES + 1 - len);
    if (r == 0) break;
    if (r > 0) {
      len += (size_t)r;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (file_wait(fd, POLLIN, &deadline) != 0) return -1;
    } else if (errno != EINTR) {
      return -1;
    }
  }
  return (ssize_t)len;
}

/* A policy is a regular file (or a terminal, read within POLICY_WAIT_MS).
 * A FIFO or pipe is refused: its text reaches only the first process that
 * reads it (every process a job starts loads the policy), and with
 * O_NONBLOCK a reader cannot tell a writer still to come from none
 * (fifo(7): a FIFO with no writer reads as its end), so it would run with
 * no rules of its own and say nothing. 0, or -1 with the message in err. */
static int policy_file_type(const char *path, mode_t mode, char *err, size_t errlen) {
  const char *what = S_ISFIFO(mode)  ? "a FIFO or pipe"
                     : S_ISDIR(mode) ? "a directory"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISBLK(mode)  ? "a block device"
                                      : NULL;
  if (!what) return 0;
  snprintf(err, errlen, "GEMMSHIM_POLICY='%s': %s; expected a regular file%s", path, what,
           S_ISFIFO(mode) ? " (a FIFO's text reaches only the first process that reads it)" : "");
  return -1;
}

int options_read_policy(const char *file, policy_table *t, char *err, size_t errlen) {
  policy_builtin(t);
  char path[GS_QUOTE_BUF];
  gs_quote(file, path); /* for messages */
  /* Looked at before it is opened: opening a FIFO would let a writer
   * waiting in open() go on, to find no reader once this one closes. */
  struct stat st;
  if (GS_CALL(stat, file, &st) == 0 && policy_file_type(path, st.st_mode, err, errlen) != 0) return -1;
  int fd = GS_CALL(open, file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0); /* a terminal never becomes ours */
  if (fd < 0) {
    snprintf(err, errlen, "GEMMSHIM_POLICY='%s': cannot open (%s); expected a readable policy file", path,
             strerror(errno));
    return -1;
  }
  /* Again on what was opened: the name may have changed in between. */
  if (GS_CALL(fstat, fd, &st) == 0 && policy_file_type(path, st.st_mode, err, errlen) != 0) {
    GS_CALL(close, fd);
    return -1;
  }
  char *text = GS_CALL(malloc, POLICY_MAX_BYTES + 1);
  ssize_t len = text ? read_policy(fd, text) : -1;
  int read_errno = errno;
  GS_CALL(close, fd);
  int rc = -1;
  if (len < 0)
    snprintf(err, errlen, "GEMMSHIM_POLICY='%s': cannot read (%s)", path,
             !text ? "out of memory"
             : read_errno == ETIMEDOUT ? "no end of input within " GS_STR(POLICY_WAIT_MS) " ms"
                                       : strerror(read_errno));
  else if ((size_t)len > POLICY_MAX_BYTES)
    snprintf(err, errlen, "GEMMSHIM_POLICY='%s': larger than %u bytes; expected a policy file", path,
             POLICY_MAX_BYTES);
  else
    rc = policy_parse(t, text, (size_t)len,
                      /* the path names rules in the log too: whole, unless it would break a line */
                      strcmp(path, file) == 0 ? file : path, err, errlen);
  free(text);
  return rc;
}

static void load_policy(void) {
  char err[1024];
  policy_builtin(&gs_policy);
  if (gs_opt.policy_path[0] && options_read_policy(gs_opt.policy_path, &gs_policy, err, sizeof err) != 0)
    go_passthrough(err);
}

/* ---- relative names ---------------------------------------------------------- */
/* The routing log and the debug file are opened at their first line, which
 * may come after the program changed directory (os.chdir, a DataLoader
 * worker's set-up): a relative name then lands in another directory than
 * the one it was given in. So it is made absolute here, at load, against
 * the working directory then. Each process does so at its own load: an
 * exec'd child inherits the variable, not the absolute name, and its
 * directory at exec is where its relative name points. A '%' in the
 * directory is doubled, or it would read as a placeholder. When the
 * directory cannot be read (removed, no permission on a parent) or the
 * name would not fit, the name stays relative, with one warning. */
static char relative_note[2][1024];

static void make_absolute(int which, const char *name, char *field, size_t size) {
  relative_note[which][0] = '\0';
  if (!field[0] || field[0] == '/') return;
  char cwd[4096], ebuf[128], q[GS_QUOTE_BUF];
  if (!GS_CALL(getcwd, cwd, sizeof cwd)) {
    snprintf(relative_note[which], sizeof relative_note[which],
             "%s='%s': relative, and the working directory cannot be read (%s); expected it to be readable at "
             "load; the name stays relative to the directory the program is in when it writes its first line",
             name, gs_quote(field, q), strerror_r(errno, ebuf, sizeof ebuf));
    return;
  }
  /* The directory as it goes in front: each '%' doubled, a '/' after it. */
  size_t dlen = 0;
  for (const char *c = cwd; *c; c++) dlen += *c == '%' ? 2 : 1;
  int slash = dlen == 0 || cwd[strlen(cwd) - 1] != '/';
  size_t flen = strlen(field), total = dlen + (size_t)slash + flen;
  if (total >= size) {
    snprintf(relative_note[which], sizeof relative_note[which],
             "%s='%s': relative, and %zu bytes once the working directory is put before it; expected at most "
             "%zu; the name stays relative to the directory the program is in when it writes its first line",
             name, gs_quote(field, q), total, size - 1);
    return;
  }
  char out[sizeof gs_opt.log_path];
  size_t o = 0;
  for (const char *c = cwd; *c; c++) {
    if (*c == '%') out[o++] = '%';
    out[o++] = *c;
  }
  if (slash) out[o++] = '/';
  memcpy(out + o, field, flen + 1);
  memcpy(field, out, total + 1);
}

/* ---- load ----------------------------------------------------------------- */
/* Every variable from the environment over its default; problems go to
 * go_passthrough. */
static void read_environment(void) {
  char err[1024];
  gs_opt.passthrough = 0;
  memset(opt_set_by_env, 0, sizeof opt_set_by_env);
  for (size_t i = 0; i < N_OPTIONS; i++) {
    const char *env = getenv(options[i].name);
    if (parse_one(&options[i], options[i].def, err, sizeof err) != 0) continue; /* defaults are valid */
    if (!env) continue;
    opt_set_by_env[i] = 1;
    if (parse_one(&options[i], env, err, sizeof err) != 0) {
      parse_one(&options[i], options[i].def, err, sizeof err);
      go_passthrough(err);
    }
  }
  make_absolute(0, "GEMMSHIM_LOG", gs_opt.log_path, sizeof gs_opt.log_path);
  make_absolute(1, "GEMMSHIM_DEBUG_FILE", gs_debug_file, sizeof gs_debug_file);
}

/* ---- names the shim does not know ---------------------------------------- */
/* Edit distance of a and b counting a swap of two neighbours as one edit
 * (the optimal string alignment distance), as typos make them; both at
 * most OPTION_NAME_MAX bytes. */
#define OPTION_NAME_MAX 40
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb) {
  size_t d[OPTION_NAME_MAX + 1][OPTION_NAME_MAX + 1];
  for (size_t i = 0; i <= la; i++) d[i][0] = i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[la][lb];
}

/* GEMMSHIM_FAULT is read apart from the table (fault_spec.c). */
static const char *known_name(size_t i) { return i < N_OPTIONS ? options[i].name : i == N_OPTIONS ? "GEMMSHIM_FAULT" : NULL; }

/* The known name nearest to name (len bytes), or NULL when none is near
 * enough to be what was meant: two edits, or a third of the letters after
 * GEMMSHIM_ where there are more. */
static const char *nearest_name(const char *name, size_t len) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  if (len > OPTION_NAME_MAX) return NULL;
  for (size_t i = 0; known_name(i); i++) {
    const char *k = known_name(i);
    if (strlen(k) > OPTION_NAME_MAX) continue;
    size_t d = edit_distance(name, len, k, strlen(k));
    if (d < best_d) best_d = d, best = k;
  }
  size_t letters = len - strlen("GEMMSHIM_"), bound = letters / 3 > 2 ? letters / 3 : 2;
  return best && best_d <= bound ? best : NULL;
}

int options_unknown(options_problem_fn report, void *arg) {
  extern char **environ;
  int n = 0;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "GEMMSHIM_", 9) != 0) continue;
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    int known = 0;
    for (size_t i = 0; known_name(i) && !known; i++)
      known = strlen(known_name(i)) == len && strncmp(known_name(i), *e, len) == 0;
    if (known) continue;
    char q[GS_QUOTE_BUF], msg[GS_QUOTE_BUF + 160];
    const char *near = nearest_name(*e, len);
    snprintf(msg, sizeof msg, "%s is not a variable the shim reads (%s%s%s); it is ignored", gs_quote_n(*e, len, q),
             near ? "did you mean " : "expected one that `gemmshim --help` lists", near ? near : "", near ? "?" : "");
    report(msg, arg);
    n++;
  }
  return n;
}

static void warn_unknown(const char *message, void *arg) {
  (void)arg;
  GS_WARN("%s", message);
}

static void read_fault(void) {
  char err[1024];
  const char *fault = getenv("GEMMSHIM_FAULT");
  if (fault && *fault && gs_fault_parse(fault, err, sizeof err) != 0) go_passthrough(err);
}

void options_init(void) {
  /* Safe to call again (tests do): every field is set from scratch. */
  debug_open = 0;
  read_environment();
  debug_init();
  debug_open = 1;
  for (int i = 0; i < n_held; i++)
    GS_WARN("%s; running pass-through (every GEMM native%s)", held[i], passthrough_note());
  if (n_held_lost) GS_WARN("%d more configuration problems, not shown", n_held_lost);
  n_held = n_held_lost = 0;
  for (int i = 0; i < 2; i++)
    if (relative_note[i][0]) GS_WARN("%s", relative_note[i]);
  options_unknown(warn_unknown, NULL);
  /* The guard acts on compared calls' measurements (guard.c): alone, it
   * would do nothing without a word. */
  if (gs_opt.guard_sqnr_db && (!gs_opt.compare || !gs_opt.log_path[0]))
    GS_WARN("GEMMSHIM_GUARD_SQNR=%llu: expected GEMMSHIM_COMPARE=1 and GEMMSHIM_LOG with it (only compared calls are "
            "measured); no site will be guarded", (unsigned long long)gs_opt.guard_sqnr_db);
  read_fault();
  load_policy();
  options_print();
}

int options_check(options_problem_fn report, void *arg) {
  problem_sink = report;
  problem_arg = arg;
  n_problems = 0;
  read_environment();
  read_fault();
  gs_fault_clear(); /* checked, not armed: the checker's own reads must not fail */
  load_policy();
  problem_sink = NULL;
  return n_problems;
}

int options_is_bool(size_t i) { return i < N_OPTIONS && options[i].kind == OPT_BOOL; }

const char *options_describe(size_t i, const char **def, const char **meaning, int *is_path) {
  if (i >= N_OPTIONS) return NULL;
  if (is_path) *is_path = options[i].kind == OPT_PATH;
  if (def) *def = options[i].def;
  if (meaning) *meaning = options[i].meaning;
  return options[i].name;
}

static void format_value(const opt_def *o, char *buf, size_t len) {
  switch (o->kind) {
    case OPT_ENUM: snprintf(buf, len, "%s", o->choices[*(int *)o->field]); break;
    case OPT_BOOL: snprintf(buf, len, "%d", *(int *)o->field); break;
    case OPT_U64:
    case OPT_SIZE: snprintf(buf, len, "%" PRIu64, *(uint64_t *)o->field); break;
    case OPT_PATH: {
      /* A user's text: escaped as in every message, or a newline in it
       * would forge a line of its own. */
      char q[GS_QUOTE_BUF];
      snprintf(buf, len, "%s", *(char *)o->field ? gs_quote((char *)o->field, q) : "(none)");
      break;
    }
  }
}

int options_value(size_t i, char *buf, size_t len) {
  if (i >= N_OPTIONS) return -1;
  format_value(&options[i], buf, len);
  return 0;
}

void options_print(void) {
  if (gs_debug_level < GS_LEVEL_INFO) return;
  char v[600];
  for (size_t i = 0; i < N_OPTIONS; i++) {
    format_value(&options[i], v, sizeof v);
    if (opt_set_by_env[i])
      GS_INFO("%s set by environment to %s", options[i].name, v);
    else
      GS_INFO("%s=%s (default): %s", options[i].name, v, options[i].meaning);
  }
  char rule[256];
  for (int i = 0; i < gs_policy.n; i++) {
    policy_rule_describe(&gs_policy, i, rule, sizeof rule);
    GS_INFO("policy rule %d: %s", i + 1, rule);
  }
  if (gs_opt.passthrough) GS_INFO("pass-through: bad configuration above, every GEMM runs native");
}
