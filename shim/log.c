/* log.c: the routing log (GEMMSHIM_LOG=path), one JSON object per line and
 * per intercepted call, and the exit summary.
 *
 * Record format. Keys appear in this order; a key marked "omitted" is left
 * out of the object, never printed as null unless stated:
 *
 *   seq            number, the call's sequence number in this process
 *   t_ns           number, CLOCK_REALTIME at the call's start, ns
 *   tid            number, the calling thread's id
 *   api            string, the entry point ("cublasGemmEx" ... "cublasLtMatmul")
 *   m, n, k, batch numbers
 *   transa, transb string, "N" "T" "C" "CONJG"
 *   a_type, b_type, c_type   string, "bf16" "fp32" ... (names.h)
 *   d_type         string; cublasLtMatmul only (the GemmEx family: D is C),
 *                  omitted when -1
 *   compute_type   string, "32f" ... (names.h)
 *   scale_type     string; omitted when -1
 *   lda, ldb, ldc  numbers, printed as they are (-1 included)
 *   ldd            number; cublasLtMatmul only, omitted when -1
 *   stride_a, stride_b, stride_c   numbers in elements; each omitted when
 *                  -1, printed otherwise (0 = no stride, e.g. batch 1)
 *   epilogue       string ("default", "bias", ...); only for cublasLtMatmul
 *   bias_type      string; only when the call has a bias pointer
 *   pointer_mode   string, "host" "device" "device_vector"
 *                  "alpha_device_vector_beta_zero"
 *                  "alpha_device_vector_beta_host"; omitted when -1
 *   algo           number (cublasGemmAlgo_t, -1 is CUBLAS_GEMM_DEFAULT);
 *                  only for the GemmEx family, never for cublasLtMatmul
 *   device         number, the CUdevice ordinal, -1 when unknown
 *   sm             string "major.minor" ("6.1", "9.0", "12.0"); null when
 *                  unknown
 *   stream         string, "0x" and the stream's address in lowercase hex
 *                  without leading zeros; the NULL stream is "0x0"
 *   site           string, the call-site id as 16 lowercase hex digits
 *   site_event     string, what happened to the call's fp8 site
 *                  (fp8_sites.c): "new", "evicted" (it evicted another
 *                  site) or "new,evicted"; omitted when nothing did
 *   evicted_site   string, the evicted site's id as 16 lowercase hex
 *                  digits; only with "evicted"
 *   decided        string, the route mode/policy asked for
 *   route          string, the route that ran ("native" "ffma" "fp8")
 *   backend        string; omitted when there is none
 *   reason         string
 *   status         number, the cublasStatus_t returned to the caller
 *   status_name    string, "CUBLAS_STATUS_SUCCESS" ...; "unknown" for a
 *                  value cublas_api.h does not define
 *   dur_ns         number, host time spent in the call, ns
 *
 * Every enum-valued string whose value has no name is "unknown(N)", N the
 * decimal value. Strings are JSON-escaped: '"' as \", '\' as \\, and bytes
 * below 0x20 as \u00xx (lowercase hex, newline included); other bytes are
 * copied as they are. No spaces; each object ends with '\n'.
 *
 * The file is created at the first record (a process that runs no GEMM
 * leaves no file) with O_TRUNC, or appended to without truncation by a
 * forked child whose expanded path is its parent's. A process that forks
 * while its log is on but not yet open, with a path its children share (no
 * %p), creates the file at the fork: its children then append to this run's
 * file, never to a stale one, and never lose their lines to the parent's
 * later truncation. Every write appends, so parent and children sharing a
 * file never overwrite each other.
 *
 * Records go to a buffer under a mutex and reach the file in one write()
 * per flush: when the buffer is full (the full one is written while the
 * other fills; a record that finds both busy waits for the write in flight), once
 * a second from a flusher thread, and at exit. The first failed or short
 * write turns the log off for the rest of the process with one warning. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"
#include "sys.h"

/* ~400 records at the usual ~600 bytes: a write every few hundred calls. */
#define LOG_BUF_BYTES (256u * 1024)
/* The longest possible record is a fully escaped reason (6 bytes a
 * character) plus ~800 bytes of fields: well under this. */
#define LOG_RECORD_MAX 4096
#define FLUSH_INTERVAL_NS 1000000000ull

/* ---- JSON output ---------------------------------------------------------- */
typedef struct json_out {
  char *p, *end;
  int full; /* something did not fit: the whole record is void */
} json_out;

static void out_bytes(json_out *o, const char *s, size_t n) {
  if (o->full || (size_t)(o->end - o->p) < n) {
    o->full = 1;
    return;
  }
  memcpy(o->p, s, n);
  o->p += n;
}

#define OUT_LIT(o, lit) out_bytes((o), (lit), sizeof(lit) - 1)
#define OUT_KEY(o, key) OUT_LIT((o), ",\"" key "\":")

static void out_u64(json_out *o, uint64_t v) {
  char digits[20];
  size_t i = sizeof digits;
  do digits[--i] = (char)('0' + v % 10);
  while (v /= 10);
  out_bytes(o, digits + i, sizeof digits - i);
}

static void out_i64(json_out *o, int64_t v) {
  if (v < 0) {
    OUT_LIT(o, "-");
    out_u64(o, 0 - (uint64_t)v);
  } else {
    out_u64(o, (uint64_t)v);
  }
}

static void out_hex(json_out *o, uint64_t v, size_t min_digits) {
  static const char hex[] = "0123456789abcdef";
  char digits[16];
  size_t i = sizeof digits;
  do digits[--i] = hex[v & 15];
  while ((v >>= 4) || sizeof digits - i < min_digits);
  out_bytes(o, digits + i, sizeof digits - i);
}

static void out_string(json_out *o, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  OUT_LIT(o, "\"");
  size_t run = 0; /* bytes copied as they are, written in one go */
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
    out_bytes(o, s + run, i - run);
    run = i + 1;
    if (ch == '"') OUT_LIT(o, "\\\"");
    else if (ch == '\\') OUT_LIT(o, "\\\\");
    else out_bytes(o, (char[]){'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]}, 6);
  }
  out_bytes(o, s + run, n - run);
  OUT_LIT(o, "\"");
}

/* An enum value: its name, or "unknown(N)". */
static void out_enum(json_out *o, const char *name, int value) {
  if (name) {
    /* Names come from the shim's own tables: nothing to escape. */
    OUT_LIT(o, "\"");
    out_bytes(o, name, strlen(name));
    OUT_LIT(o, "\"");
    return;
  }
  OUT_LIT(o, "\"unknown(");
  out_i64(o, value);
  OUT_LIT(o, ")\"");
}

/* cublasLtPointerMode_t; 0 and 1 are cublasPointerMode_t's too. */
static const char *pointer_mode_name(int mode) {
  static const char *const names[] = {"host", "device", "device_vector", "alpha_device_vector_beta_zero",
                                      "alpha_device_vector_beta_host"};
  return mode >= 0 && mode < (int)(sizeof names / sizeof names[0]) ? names[mode] : NULL;
}

/* cublasStatus_t, as cublas_api.h defines it. */
static const char *status_name(int status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown";
  }
}

static void format_shape(json_out *o, const gs_gemm *g) {
  OUT_KEY(o, "m"), out_i64(o, g->m);
  OUT_KEY(o, "n"), out_i64(o, g->n);
  OUT_KEY(o, "k"), out_i64(o, g->k);
  OUT_KEY(o, "batch"), out_i64(o, g->batch);
  OUT_KEY(o, "transa"), out_enum(o, gs_op_name(g->transa), g->transa);
  OUT_KEY(o, "transb"), out_enum(o, gs_op_name(g->transb), g->transb);
}

static void format_types(json_out *o, const gs_gemm *g) {
  OUT_KEY(o, "a_type"), out_enum(o, gs_type_name(g->a_type), g->a_type);
  OUT_KEY(o, "b_type"), out_enum(o, gs_type_name(g->b_type), g->b_type);
  OUT_KEY(o, "c_type"), out_enum(o, gs_type_name(g->c_type), g->c_type);
  int lt = g->api == GS_API_LT_MATMUL;
  if (lt && g->d_type != -1) OUT_KEY(o, "d_type"), out_enum(o, gs_type_name(g->d_type), g->d_type);
  OUT_KEY(o, "compute_type"), out_enum(o, gs_compute_name(g->compute_type), g->compute_type);
  if (g->scale_type != -1) OUT_KEY(o, "scale_type"), out_enum(o, gs_type_name(g->scale_type), g->scale_type);
}

static void format_layout(json_out *o, const gs_gemm *g) {
  OUT_KEY(o, "lda"), out_i64(o, g->lda);
  OUT_KEY(o, "ldb"), out_i64(o, g->ldb);
  OUT_KEY(o, "ldc"), out_i64(o, g->ldc);
  if (g->api == GS_API_LT_MATMUL && g->ldd != -1) OUT_KEY(o, "ldd"), out_i64(o, g->ldd);
  if (g->stride_a != -1) OUT_KEY(o, "stride_a"), out_i64(o, g->stride_a);
  if (g->stride_b != -1) OUT_KEY(o, "stride_b"), out_i64(o, g->stride_b);
  if (g->stride_c != -1) OUT_KEY(o, "stride_c"), out_i64(o, g->stride_c);
}

static void format_options(json_out *o, const gs_gemm *g) {
  if (g->api == GS_API_LT_MATMUL) OUT_KEY(o, "epilogue"), out_enum(o, gs_epilogue_name(g->epilogue), g->epilogue);
  if (g->bias) OUT_KEY(o, "bias_type"), out_enum(o, gs_type_name(g->bias_type), g->bias_type);
  if (g->pointer_mode != -1)
    OUT_KEY(o, "pointer_mode"), out_enum(o, pointer_mode_name(g->pointer_mode), g->pointer_mode);
  if (g->api != GS_API_LT_MATMUL) OUT_KEY(o, "algo"), out_i64(o, g->algo);
}

static void format_place(json_out *o, const gs_call *c) {
  OUT_KEY(o, "device"), out_i64(o, c->device);
  OUT_KEY(o, "sm");
  if (c->sm < 0) {
    OUT_LIT(o, "null");
  } else {
    OUT_LIT(o, "\""), out_u64(o, (unsigned)c->sm / 10), OUT_LIT(o, "."), out_u64(o, (unsigned)c->sm % 10);
    OUT_LIT(o, "\"");
  }
  OUT_KEY(o, "stream"), OUT_LIT(o, "\"0x"), out_hex(o, (uintptr_t)c->g.stream, 1), OUT_LIT(o, "\"");
  OUT_KEY(o, "site"), OUT_LIT(o, "\""), out_hex(o, c->site, 16), OUT_LIT(o, "\"");
  static const char *const site_events[4] = {NULL, "new", "evicted", "new,evicted"};
  const char *event = site_events[c->site_flags & (GS_SITE_NEW | GS_SITE_EVICTED)];
  if (event) OUT_KEY(o, "site_event"), out_string(o, event, strlen(event));
  if (c->site_flags & GS_SITE_EVICTED)
    OUT_KEY(o, "evicted_site"), OUT_LIT(o, "\""), out_hex(o, c->evicted_site, 16), OUT_LIT(o, "\"");
}

static void format_outcome(json_out *o, const gs_call *c) {
  OUT_KEY(o, "decided"), out_enum(o, gs_route_name(c->decided), (int)c->decided);
  OUT_KEY(o, "route"), out_enum(o, gs_route_name(c->route), (int)c->route);
  if (c->backend) OUT_KEY(o, "backend"), out_string(o, c->backend, strlen(c->backend));
  OUT_KEY(o, "reason"), out_string(o, c->reason, strnlen(c->reason, sizeof c->reason));
  OUT_KEY(o, "status"), out_i64(o, c->status);
  OUT_KEY(o, "status_name"), out_enum(o, status_name(c->status), c->status);
  OUT_KEY(o, "dur_ns"), out_u64(o, c->dur_ns);
}

size_t log_format(const gs_call *c, char *buf, size_t len) {
  if (len == 0) return 0;
  json_out o = {buf, buf + len - 1, 0}; /* the last byte is for the NUL */
  OUT_LIT(&o, "{\"seq\":"), out_u64(&o, c->seq);
  OUT_KEY(&o, "t_ns"), out_u64(&o, c->t_ns);
  OUT_KEY(&o, "tid"), out_i64(&o, c->tid);
  OUT_KEY(&o, "api"), out_enum(&o, gs_api_name(c->g.api), (int)c->g.api);
  format_shape(&o, &c->g);
  format_types(&o, &c->g);
  format_layout(&o, &c->g);
  format_options(&o, &c->g);
  format_place(&o, c);
  format_outcome(&o, c);
  OUT_LIT(&o, "}\n");
  if (o.full) {
    buf[0] = '\0';
    return 0;
  }
  *o.p = '\0';
  return (size_t)(o.p - buf);
}

/* ---- path placeholders ---------------------------------------------------- */
static int all_digits(const char *s) {
  if (!s || !*s) return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

/* Launchers set RANK (torchrun, most MPI wrappers through it) or only
 * LOCAL_RANK; anything that is not a plain number is ignored. */
static const char *rank_string(void) {
  const char *r = getenv("RANK");
  if (all_digits(r)) return r;
  r = getenv("LOCAL_RANK");
  return all_digits(r) ? r : "0";
}

/* The short host name, as NCCL_DEBUG_FILE's %h: up to the first dot. */
static void host_string(char *host, size_t len) {
  if (GS_CALL(gethostname, host, len) != 0) snprintf(host, len, "unknown");
  host[len - 1] = '\0';
  char *dot = strchr(host, '.');
  if (dot && dot != host) *dot = '\0';
}

static void out_cstr(json_out *o, const char *s) { out_bytes(o, s, strlen(s)); }

/* Expands pattern for process pid; *uses_pid tells whether the result
 * depends on the pid (a forked child's path then differs). */
static int expand_path(const char *pattern, long pid, char *out, size_t len, int *uses_pid) {
  if (len == 0) return -1;
  json_out o = {out, out + len - 1, 0};
  char num[24], host[256];
  if (uses_pid) *uses_pid = 0;
  for (const char *p = pattern; *p; p++) {
    if (p[0] != '%' || p[1] == '\0') {
      out_bytes(&o, p, 1);
      continue;
    }
    switch (*++p) {
      case 'p':
        snprintf(num, sizeof num, "%ld", pid);
        out_cstr(&o, num);
        if (uses_pid) *uses_pid = 1;
        break;
      case 'h': host_string(host, sizeof host), out_cstr(&o, host); break;
      case 'r': out_cstr(&o, rank_string()); break;
      case '%': OUT_LIT(&o, "%"); break;
      default: out_bytes(&o, p - 1, 2); break; /* not ours: keep "%x" */
    }
  }
  if (o.full) {
    out[0] = '\0';
    return -1;
  }
  *o.p = '\0';
  return 0;
}

int log_expand_path(const char *pattern, char *out, size_t len) {
  return expand_path(pattern, (long)getpid(), out, len, NULL);
}

/* ---- summary counters ----------------------------------------------------- */
#define REASONS_MAX 64
#define REASON_SLOTS 128 /* open addressing, at most half full */
#define SITES_MAX 256
#define SITE_SLOTS 512

typedef struct reason_count {
  uint64_t count; /* 0: free slot */
  uint32_t hash;
  char text[GS_REASON_MAX];
} reason_count;

typedef struct site_count {
  uint64_t count; /* 0: free slot */
  uint64_t site;
} site_count;

typedef struct log_stats {
  uint64_t calls;
  uint64_t by_api_route[GS_API_COUNT + 1][GS_ROUTE_COUNT + 1]; /* last: out of range */
  reason_count reasons[REASON_SLOTS];
  int n_reasons;
  uint64_t other_reasons;
  site_count sites[SITE_SLOTS];
  int n_sites;
  uint64_t other_sites;
} log_stats;

static log_stats stats; /* under state.mu */

static uint32_t fnv1a(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static void count_reason(const char *reason) {
  size_t n = strnlen(reason, GS_REASON_MAX - 1);
  uint32_t h = fnv1a(reason, n);
  for (uint32_t i = 0; i < REASON_SLOTS; i++) {
    reason_count *r = &stats.reasons[(h + i) % REASON_SLOTS];
    if (r->count == 0) {
      if (stats.n_reasons == REASONS_MAX) break;
      stats.n_reasons++;
      r->hash = h;
      memcpy(r->text, reason, n);
      r->text[n] = '\0';
    } else if (r->hash != h || strncmp(r->text, reason, n) != 0 || r->text[n] != '\0') {
      continue;
    }
    r->count++;
    return;
  }
  stats.other_reasons++;
}

static void count_site(uint64_t site) {
  uint32_t start = (uint32_t)((site * 0x9e3779b97f4a7c15ull) >> 40) % SITE_SLOTS;
  for (uint32_t i = 0; i < SITE_SLOTS; i++) {
    site_count *s = &stats.sites[(start + i) % SITE_SLOTS];
    if (s->count == 0) {
      if (stats.n_sites == SITES_MAX) break;
      stats.n_sites++;
      s->site = site;
    } else if (s->site != site) {
      continue;
    }
    s->count++;
    return;
  }
  stats.other_sites++;
}

static void count_call(const gs_call *c) {
  unsigned api = (unsigned)c->g.api < GS_API_COUNT ? (unsigned)c->g.api : GS_API_COUNT;
  unsigned route = (unsigned)c->route < GS_ROUTE_COUNT ? (unsigned)c->route : GS_ROUTE_COUNT;
  stats.calls++;
  stats.by_api_route[api][route]++;
  count_reason(c->reason);
  count_site(c->site);
}

/* ---- state ---------------------------------------------------------------- */
enum { FLUSHER_NONE = 0, FLUSHER_RUNNING, FLUSHER_STOPPING, FLUSHER_FAILED };

static struct {
  pthread_mutex_t mu;
  pthread_cond_t write_done;   /* the write in flight has ended */
  pthread_cond_t flusher_wake; /* on CLOCK_MONOTONIC; log_shutdown's stop */
  char pattern[sizeof gs_opt.log_path];
  char path[sizeof gs_opt.log_path + 512]; /* expanded; "" until opened */
  char parent_path[sizeof gs_opt.log_path + 512];
  int on;           /* GEMMSHIM_LOG was set */
  int disabled;     /* an error turned the log off; atomic for log_record */
  int fd;
  int forked_child; /* opens parent_path appending, without truncating */
  int late;         /* after log_shutdown: every record written at once */
  char *buf[2];     /* LOG_BUF_BYTES each, one allocation at first use */
  int cur;          /* the buffer records go into */
  size_t fill;
  int writing;      /* the other buffer is being written, outside mu */
  int waiters;      /* threads waiting on write_done for the write to end */
  uint64_t last_flush_ns;
  int flusher_state;
  int flusher_stop;
  pthread_t flusher;
  uint64_t dropped;
  int warned_too_long;
} state = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* The per-call test: log on, or counting for the INFO summary. */
static int log_wanted;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static void log_setup_once(void);
static pthread_condattr_t monotonic_attr;

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int is_disabled(void) { return __atomic_load_n(&state.disabled, __ATOMIC_RELAXED); }

static void init_conds(void) {
  pthread_cond_init(&state.write_done, NULL);
  pthread_cond_init(&state.flusher_wake, &monotonic_attr);
}

/* ---- opening and writing -------------------------------------------------- */
static void disable_locked(void) {
  __atomic_store_n(&state.disabled, 1, __ATOMIC_RELAXED);
  state.fill = 0;
  if (state.fd >= 0) GS_CALL(close, state.fd);
  state.fd = -1;
}

/* Warnings here run under state.mu: rare, and gs_debug never takes it. */
static int open_locked(void) {
  if (is_disabled()) return 0;
  if (expand_path(state.pattern, (long)getpid(), state.path, sizeof state.path, NULL) != 0) {
    disable_locked();
    GS_WARN("GEMMSHIM_LOG='%s': longer than %zu bytes once %%p/%%h/%%r are expanded; the routing log is off",
            state.pattern, sizeof state.path - 1);
    return 0;
  }
  int append = state.forked_child && strcmp(state.path, state.parent_path) == 0;
  int flags = O_CREAT | O_WRONLY | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC);
  state.fd = GS_CALL(open, state.path, flags, 0644);
  if (state.fd < 0) {
    char ebuf[128];
    const char *why = strerror_r(errno, ebuf, sizeof ebuf);
    disable_locked();
    GS_WARN("GEMMSHIM_LOG: cannot open '%s' (%s); the routing log is off for the rest of this process", state.path,
            why);
    return 0;
  }
  state.last_flush_ns = monotonic_ns();
  return 1;
}

static int alloc_locked(void) {
  char *mem = GS_CALL(malloc, 2 * (size_t)LOG_BUF_BYTES);
  if (!mem) {
    disable_locked();
    GS_WARN("GEMMSHIM_LOG: cannot allocate %u bytes of log buffers; the routing log is off", 2 * LOG_BUF_BYTES);
    return 0;
  }
  state.buf[0] = mem;
  state.buf[1] = mem + LOG_BUF_BYTES;
  return 1;
}

/* Hand the current buffer to the caller for writing outside the lock. */
static int swap_locked(size_t *len) {
  int full = state.cur;
  *len = state.fill;
  state.cur ^= 1;
  state.fill = 0;
  __atomic_store_n(&state.writing, 1, __ATOMIC_SEQ_CST);
  state.last_flush_ns = monotonic_ns();
  return full;
}

static int write_in_flight(void) { return __atomic_load_n(&state.writing, __ATOMIC_SEQ_CST); }

/* The common end of a write takes no lock: under contention the writer
 * would queue behind every recording thread, which then wait for it.
 * Waiters announce themselves before
 * testing write_in_flight(), so one side always sees the other. */
static void end_write(void) {
  __atomic_store_n(&state.writing, 0, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&state.waiters, __ATOMIC_SEQ_CST) == 0) return;
  pthread_mutex_lock(&state.mu);
  pthread_cond_broadcast(&state.write_done);
  pthread_mutex_unlock(&state.mu);
}

static void wait_write_locked(void) {
  __atomic_add_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
  while (write_in_flight()) pthread_cond_wait(&state.write_done, &state.mu);
  __atomic_sub_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
}

/* One write of buffer b; never under state.mu. Only one write is ever in
 * flight (state.writing), so lines reach the file in the order recorded. */
static void write_buffer(int b, int fd, size_t len) {
  ssize_t n;
  do n = GS_CALL(write, fd, state.buf[b], len);
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)len) {
    end_write();
    return;
  }
  char ebuf[128], why[160];
  if (n < 0) snprintf(why, sizeof why, "%s", strerror_r(errno, ebuf, sizeof ebuf));
  else snprintf(why, sizeof why, "short write: %zd of %zu bytes", n, len);
  pthread_mutex_lock(&state.mu);
  int first = !is_disabled();
  if (first) disable_locked();
  __atomic_store_n(&state.writing, 0, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&state.write_done);
  pthread_mutex_unlock(&state.mu);
  if (first)
    GS_WARN("GEMMSHIM_LOG: cannot write '%s' (%s); the routing log is off for the rest of this process", state.path,
            why);
}

/* ---- flusher thread ------------------------------------------------------- */
/* Sleeps until a record is pending, then writes it out a second later: an
 * idle process is never woken. */
static void *flusher_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&state.mu);
  while (!state.flusher_stop) {
    if (state.fill == 0) {
      pthread_cond_wait(&state.flusher_wake, &state.mu);
      continue;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += FLUSH_INTERVAL_NS / 1000000000u;
    while (!state.flusher_stop && pthread_cond_timedwait(&state.flusher_wake, &state.mu, &deadline) != ETIMEDOUT) {}
    if (state.flusher_stop || state.fill == 0 || write_in_flight() || state.fd < 0) continue;
    int fd = state.fd;
    size_t len;
    int b = swap_locked(&len);
    pthread_mutex_unlock(&state.mu);
    write_buffer(b, fd, len);
    pthread_mutex_lock(&state.mu);
  }
  pthread_mutex_unlock(&state.mu);
  return NULL;
}

/* The flusher must not take the application's signals (a Python SIGINT, a
 * sigwait thread's SIGUSR1): it starts with all of them blocked. */
static void start_flusher_locked(void) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = GS_CALL(pthread_create, &state.flusher, NULL, flusher_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  state.flusher_state = rc == 0 ? FLUSHER_RUNNING : FLUSHER_FAILED;
  char ebuf[128];
  if (rc != 0)
    GS_INFO("GEMMSHIM_LOG: no flusher thread (%s); records are flushed by the calls themselves",
            strerror_r(rc, ebuf, sizeof ebuf));
}

static void stop_flusher(void) {
  pthread_mutex_lock(&state.mu);
  int running = state.flusher_state == FLUSHER_RUNNING;
  if (running) {
    state.flusher_state = FLUSHER_STOPPING;
    state.flusher_stop = 1;
    pthread_cond_signal(&state.flusher_wake);
  }
  pthread_t t = running ? state.flusher : (pthread_t)0;
  pthread_mutex_unlock(&state.mu);
  if (!running) return;
  pthread_join(t, NULL);
  pthread_mutex_lock(&state.mu);
  state.flusher_state = FLUSHER_NONE;
  state.flusher_stop = 0;
  pthread_mutex_unlock(&state.mu);
}

/* ---- recording ------------------------------------------------------------ */
/* Whether the caller must flush now: after log_shutdown every record, and
 * without a flusher thread once a second. */
static int flush_due_locked(void) {
  if (write_in_flight()) return 0;
  if (state.late) return 1;
  return state.flusher_state == FLUSHER_FAILED && monotonic_ns() - state.last_flush_ns >= FLUSH_INTERVAL_NS;
}

/* Append one record; returns the buffer the caller must write, or -1. */
static int append_locked(const char *rec, size_t n, size_t *len) {
  if (state.fd < 0 && !open_locked()) return -1;
  if (!state.buf[0] && !alloc_locked()) return -1;
  if (state.late) wait_write_locked();
  int b = -1;
  if (state.fill + n > LOG_BUF_BYTES) {
    /* Both buffers busy: wait for the write in flight rather than lose a
     * record. Only a producer faster than the disk ever waits here. */
    if (write_in_flight()) wait_write_locked();
    if (is_disabled()) return -1;
    b = swap_locked(len);
  }
  memcpy(state.buf[state.cur] + state.fill, rec, n);
  state.fill += n;
  if (b < 0 && flush_due_locked()) b = swap_locked(len);
  if (state.flusher_state == FLUSHER_NONE && !state.late) start_flusher_locked();
  else if (state.fill == n && state.flusher_state == FLUSHER_RUNNING) pthread_cond_signal(&state.flusher_wake);
  return b;
}

void log_record(const gs_call *c) {
  if (__builtin_expect(!__atomic_load_n(&log_wanted, __ATOMIC_RELAXED), 1)) return;
  char rec[LOG_RECORD_MAX];
  size_t n = 0;
  int to_file = __atomic_load_n(&state.on, __ATOMIC_RELAXED) && !is_disabled();
  if (to_file) n = log_format(c, rec, sizeof rec);
  pthread_mutex_lock(&state.mu);
  count_call(c);
  int b = -1, fd = -1;
  size_t len = 0;
  if (to_file && n == 0) {
    state.dropped++;
    if (!state.warned_too_long++)
      GS_WARN("GEMMSHIM_LOG: record %" PRIu64 " is longer than %d bytes and was dropped; later ones too, counted at exit",
              c->seq, LOG_RECORD_MAX);
  } else if (to_file && !is_disabled()) {
    b = append_locked(rec, n, &len);
    fd = state.fd;
  }
  pthread_mutex_unlock(&state.mu);
  if (b >= 0) write_buffer(b, fd, len);
}

void log_flush(void) {
  pthread_once(&log_once, log_setup_once);
  pthread_mutex_lock(&state.mu);
  wait_write_locked();
  int b = -1, fd = state.fd;
  size_t len = 0;
  if (state.fill > 0 && fd >= 0 && !is_disabled()) b = swap_locked(&len);
  pthread_mutex_unlock(&state.mu);
  if (b >= 0) write_buffer(b, fd, len);
}

/* ---- fork ----------------------------------------------------------------- */
static void atfork_prepare(void) {
  pthread_mutex_lock(&state.mu);
  int uses_pid = 1;
  char probe[sizeof state.path];
  if (state.on && state.fd < 0 && !is_disabled() &&
      expand_path(state.pattern, 0, probe, sizeof probe, &uses_pid) == 0 && !uses_pid)
    open_locked();
}

static void atfork_parent(void) { pthread_mutex_unlock(&state.mu); }

/* The child's only thread runs this holding state.mu (from prepare). The
 * parent's buffered records stay the parent's to write; its flusher thread
 * and any write in flight do not exist here. */
static void atfork_child(void) {
  if (state.fd >= 0) GS_CALL(close, state.fd);
  state.fd = -1;
  memcpy(state.parent_path, state.path, sizeof state.path);
  state.path[0] = '\0';
  state.forked_child = 1;
  __atomic_store_n(&state.disabled, 0, __ATOMIC_RELAXED);
  state.late = 0;
  state.fill = 0;
  state.writing = 0;
  state.waiters = 0;
  state.flusher_state = FLUSHER_NONE;
  state.flusher_stop = 0;
  state.dropped = 0;
  state.warned_too_long = 0;
  state.last_flush_ns = monotonic_ns();
  memset(&stats, 0, sizeof stats);
  init_conds();
  pthread_mutex_unlock(&state.mu);
}

static void log_setup_once(void) {
  pthread_condattr_init(&monotonic_attr);
  pthread_condattr_setclock(&monotonic_attr, CLOCK_MONOTONIC);
  init_conds();
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ---- init and exit -------------------------------------------------------- */
/* Also resets a previous run's state, so tests can start over. */
void log_init(void) {
  pthread_once(&log_once, log_setup_once);
  stop_flusher();
  pthread_mutex_lock(&state.mu);
  wait_write_locked();
  if (state.fd >= 0) GS_CALL(close, state.fd);
  state.fd = -1;
  snprintf(state.pattern, sizeof state.pattern, "%s", gs_opt.log_path);
  __atomic_store_n(&state.on, state.pattern[0] != '\0', __ATOMIC_RELAXED);
  state.path[0] = state.parent_path[0] = '\0';
  state.forked_child = 0;
  __atomic_store_n(&state.disabled, 0, __ATOMIC_RELAXED);
  state.late = 0;
  state.cur = 0;
  state.fill = 0;
  state.dropped = 0;
  state.warned_too_long = 0;
  state.flusher_state = FLUSHER_NONE; /* a failed start is retried */
  memset(&stats, 0, sizeof stats);
  __atomic_store_n(&log_wanted, state.on || gs_opt.debug_level >= GS_LEVEL_INFO, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&state.mu);
}

/* Index of the largest nonzero count, which is then cleared; -1 when none. */
static int take_top(uint64_t *counts, int n) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (counts[i] && (best < 0 || counts[i] > counts[best])) best = i;
  if (best >= 0) counts[best] = 0;
  return best;
}

static void summary_routes_locked(void) {
  char line[768];
  size_t used = 0;
  line[0] = '\0';
  for (int a = 0; a <= GS_API_COUNT; a++)
    for (int r = 0; r <= GS_ROUTE_COUNT; r++) {
      uint64_t n = stats.by_api_route[a][r];
      if (!n || used >= sizeof line) continue;
      const char *api = a < GS_API_COUNT ? gs_api_name((gs_api)a) : NULL;
      const char *route = r < GS_ROUTE_COUNT ? gs_route_name((gs_route)r) : NULL;
      int w = snprintf(line + used, sizeof line - used, "%s%s %s %" PRIu64, used ? ", " : "",
                       api ? api : "unknown", route ? route : "unknown", n);
      used += w > 0 ? (size_t)w : 0;
    }
  GS_INFO("summary: %" PRIu64 " calls%s%s", stats.calls, used ? ": " : "", line);
}

static void summary_top_locked(void) {
  uint64_t counts[SITE_SLOTS];
  for (int i = 0; i < REASON_SLOTS; i++) counts[i] = stats.reasons[i].count;
  for (int i = 0, r; i < 5 && (r = take_top(counts, REASON_SLOTS)) >= 0; i++)
    GS_INFO("summary: reason %" PRIu64 " calls: %s", stats.reasons[r].count, stats.reasons[r].text);
  if (stats.other_reasons)
    GS_INFO("summary: reason %" PRIu64 " calls: (other reasons, beyond the first %d)", stats.other_reasons,
            REASONS_MAX);
  for (int i = 0; i < SITE_SLOTS; i++) counts[i] = stats.sites[i].count;
  for (int i = 0, s; i < 5 && (s = take_top(counts, SITE_SLOTS)) >= 0; i++)
    GS_INFO("summary: site %016" PRIx64 " %" PRIu64 " calls", stats.sites[s].site, stats.sites[s].count);
  if (stats.other_sites)
    GS_INFO("summary: site other %" PRIu64 " calls (sites beyond the first %d)", stats.other_sites, SITES_MAX);
}

/* Printed under state.mu (gs_debug never takes it): a late record cannot
 * change the counters halfway through. */
static void print_summary(void) {
  pthread_mutex_lock(&state.mu);
  if (gs_opt.debug_level >= GS_LEVEL_INFO) {
    summary_routes_locked();
    summary_top_locked();
  }
  if (state.dropped)
    GS_WARN("GEMMSHIM_LOG: %" PRIu64 " records dropped (longer than a record may be); '%s' misses them",
            state.dropped, state.path);
  pthread_mutex_unlock(&state.mu);
}

void log_shutdown(void) {
  pthread_once(&log_once, log_setup_once);
  pthread_mutex_lock(&state.mu);
  state.late = 1; /* calls from later destructors are still written */
  pthread_mutex_unlock(&state.mu);
  stop_flusher();
  log_flush();
  print_summary();
}
