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
 *   gpu_ns         number, with GEMMSHIM_LOG_GPU_TIME (or GEMMSHIM_COMPARE):
 *                  GPU time of the call's work, ns, from events on its
 *                  stream (gpu_time.c); omitted when not measured
 *   gpu_ns_kernels number, with gpu_ns, for a route that ran a GEMM between
 *                  kernels of its own: gpu_ns less the GEMM's time
 *   native_gpu_ns  number, GEMMSHIM_COMPARE: GPU time of the native GEMM run
 *                  for comparison after the route's (results discarded)
 *   gpu_skipped    string, instead of gpu_ns when GPU time was asked for
 *                  but not measured: "graph capture", "device unknown",
 *                  "no device work", "not finished when the log closed", ...
 *
 * Every enum-valued string whose value has no name is "unknown(N)", N the
 * decimal value. Strings are JSON-escaped: '"' as \", '\' as \\, and bytes
 * below 0x20 as \u00xx (lowercase hex, newline included); UTF-8 characters
 * (RFC 3629) are copied as they are, and a byte that is not part of one
 * becomes the text \xNN (in JSON \\xNN), so every line is valid UTF-8
 * (RFC 8259 section 8.1). No spaces; each object ends with '\n'.
 *
 * The file is created at the first record (a process that runs no GEMM
 * leaves no file) and only ever appended to, never truncated (files.c):
 * a forked child, whose expanded path is its parent's unless it has %p,
 * opens it again at its own first record and adds its lines; parent and
 * children sharing a file never overwrite each other.
 *
 * Besides call records, the log holds one other kind of line, where
 * records were lost because the writer fell behind (below):
 *
 *   {"event":"records_lost","lost":N,"first_seq":A,"last_seq":B,"why":"..."}
 *
 * A and B the smallest and largest seq among the lost records.
 *
 * A call's record is copied into a buffer under a mutex in binary form:
 * the fields above, and the backend and reason by their length. With GPU
 * time on, the call's events follow the fixed part (gs_gpu_time) and the
 * writer reads them just before formatting: a record whose GPU work has
 * not finished then is held back (writer-owned, bounded) and goes out
 * with a later write, so no thread ever waits on the GPU, except the last
 * flushes at exit, together for at most GPU_TIME_EXIT_WAIT_NS and half of
 * the exit's write budget; they write every record, held ones too. Turning
 * records into JSON is left to whoever writes them, the flusher thread as a
 * rule, so a calling thread pays for a copy of a few hundred bytes and not
 * for the formatting. Records reach the file as text in one write() per
 * flush: when the buffer is full (the flusher thread formats and writes the
 * full one while the other fills), once a second from the flusher thread,
 * and at exit. A record that finds both buffers busy waits for the write in
 * flight at most LOG_WAIT_MS, then is dropped and counted (lost_*); later
 * records drop at once until that write ends, and the first record kept
 * after a loss is preceded by the records_lost line. GEMMSHIM_LOG_WAIT=1
 * waits instead. At exit the writes wait at most LOG_EXIT_WAIT_MS for a
 * pipe's reader. The first failed write turns the log off for the rest of
 * the process with one warning.
 *
 * Structure, for whoever adds a field: a field goes into gs_call (shim.h),
 * log_rec and rec_fill (copied on the calling thread), format_body (JSON,
 * on the writer) and the key list above; LOG_TEXT_FIXED bounds the text. */
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
#include "base/sys.h"

/* Each of the two record buffers: ~500 records of the usual ~260 bytes, a
 * write every few hundred calls. */
#define LOG_BIN_BYTES (128u * 1024)
/* The text of one buffer's records, written in one go. Room is reserved
 * per record for the longest text it could become (rec_text_bound), well
 * above the usual ~600 bytes, so the record buffer fills first as a rule;
 * pages never reached are never touched. */
#define LOG_TEXT_BYTES (1024u * 1024)
/* The longest record the log writes, text and NUL. A fully escaped reason
 * (6 bytes a character) plus every field at its widest stays under this;
 * only an implausibly long backend name could not. */
#define LOG_RECORD_MAX 4096
/* A record's text less its backend and reason: every key, every value at
 * its widest (~1250 bytes), and the slack the unchecked formatter may write
 * past the end before overwriting it (32 bytes) plus the NUL. The unit
 * tests check a record with every field at its widest against it. */
#define LOG_TEXT_FIXED 1536
#define FLUSH_INTERVAL_NS 1000000000ull
/* A call whose record finds both buffers full waits this long at most for
 * the write in flight, then drops the record (counted); at exit, the last
 * writes wait this long at most for a pipe's reader. GEMMSHIM_LOG_WAIT=1
 * waits without bound instead. */
#define LOG_WAIT_MS 50
#define LOG_EXIT_WAIT_MS 1000
/* Records held for unfinished GPU work, at most (bytes of binary records),
 * and written per write, at most; a record that finds no room is written
 * at once, without its GPU time ("too many records waiting for the GPU").
 * A GPU is rarely that far behind. */
#define LOG_HELD_BYTES (4u * 1024 * 1024)
#define LOG_HELD_PER_WRITE 1024
#define GPU_TIME_EXIT_WAIT_NS 2000000000ull
/* With GPU time on, records are written (their events read) every 10 ms
 * rather than every second: a program may destroy its context, and the
 * events with it, soon after its last GEMM. */
#define GPU_TIME_FLUSH_NS 10000000ull

/* ---- binary records ------------------------------------------------------- */
/* What log_format prints of a gs_call, copied field by field: 232 bytes
 * instead of the 848-byte gs_call. The backend's bytes, then the reason's,
 * follow it; size (a multiple of 8, so the next header is aligned) leads
 * to the next record. */
typedef struct log_rec {
  uint64_t seq, t_ns, dur_ns, site, evicted_site, stream;
  int64_t m, n, k, batch, lda, ldb, ldc, ldd, stride_a, stride_b, stride_c;
  uint32_t size, reason_len, backend_len, site_flags;
  int32_t tid, device, sm, status, decided, route;
  int32_t api, transa, transb, a_type, b_type, c_type, d_type, compute_type, scale_type;
  int32_t epilogue, bias_type, pointer_mode, algo;
  uint8_t has_backend, has_bias;
  uint8_t kind; /* LOG_REC_CALL, or LOG_REC_TEXT: a ready line of reason_len bytes follows */
  uint8_t has_gpu; /* LOG_REC_CALL: a gs_gpu_time follows the fixed part */
} log_rec;
enum { LOG_REC_CALL = 0, LOG_REC_TEXT };

/* A record with GPU time carries its events after the fixed part. */
static size_t rec_gpu_bytes(int has_gpu) { return has_gpu ? (sizeof(gs_gpu_time) + 7) & ~(size_t)7 : 0; }

static size_t rec_size_gpu(size_t reason_len, size_t backend_len, int has_gpu) {
  return (sizeof(log_rec) + rec_gpu_bytes(has_gpu) + backend_len + reason_len + 7) & ~(size_t)7;
}

static size_t rec_size(size_t reason_len, size_t backend_len) { return rec_size_gpu(reason_len, backend_len, 0); }

static gs_gpu_time *rec_gpu(const log_rec *r) {
  return r->has_gpu ? (gs_gpu_time *)(void *)((char *)(uintptr_t)r + sizeof(log_rec)) : NULL;
}

static const char *rec_strings(const log_rec *r) { return (const char *)(r + 1) + rec_gpu_bytes(r->has_gpu); }

/* The longest text a record with strings of these lengths can become,
 * with the fast formatter's slack and the NUL. */
static size_t rec_text_bound(size_t reason_len, size_t backend_len) {
  return LOG_TEXT_FIXED + 6 * (reason_len + backend_len);
}

static void rec_fill(log_rec *r, const gs_call *c, size_t reason_len, size_t backend_len) {
  const gs_gemm *g = &c->g;
  r->kind = LOG_REC_CALL;
  r->reason_len = (uint32_t)reason_len;
  r->backend_len = (uint32_t)backend_len;
  r->site_flags = c->site_flags;
  r->has_backend = c->backend != NULL;
  r->has_bias = g->bias != NULL;
  r->seq = c->seq;
  r->t_ns = c->t_ns;
  r->dur_ns = c->dur_ns;
  r->site = c->site;
  r->evicted_site = c->evicted_site;
  r->stream = (uintptr_t)g->stream;
  r->m = g->m, r->n = g->n, r->k = g->k, r->batch = g->batch;
  r->lda = g->lda, r->ldb = g->ldb, r->ldc = g->ldc, r->ldd = g->ldd;
  r->stride_a = g->stride_a, r->stride_b = g->stride_b, r->stride_c = g->stride_c;
  r->tid = c->tid, r->device = c->device, r->sm = c->sm, r->status = c->status;
  r->decided = (int32_t)c->decided, r->route = (int32_t)c->route;
  r->api = (int32_t)g->api, r->transa = g->transa, r->transb = g->transb;
  r->a_type = g->a_type, r->b_type = g->b_type, r->c_type = g->c_type, r->d_type = g->d_type;
  r->compute_type = g->compute_type, r->scale_type = g->scale_type;
  r->epilogue = g->epilogue, r->bias_type = g->bias_type, r->pointer_mode = g->pointer_mode, r->algo = g->algo;
  r->has_gpu = 0;
}

/* What a call's record says of GPU time: its events (owned by the record
 * from here on), or why there are none. */
static void rec_fill_gpu(gs_gpu_time *out, const gs_call *c) {
  if (!c->work_begun) { /* c->gpu was never set */
    memset(out, 0, sizeof *out);
    out->skip = GS_GPU_SKIP_NO_WORK;
    return;
  }
  *out = c->gpu;
}

/* ---- JSON output ---------------------------------------------------------- */
/* One formatter, instantiated twice (always inlined, `ck` a constant): the
 * checked one tests room before every piece and voids a record that does
 * not fit; the fast one runs when the output has room for the record's
 * longest text (rec_text_bound) and tests nothing. The fast one may copy a
 * fixed 32 bytes where fewer are meant (enum names), which what follows
 * overwrites: the bound's slack covers it. */
#define FMT_INLINE static inline __attribute__((always_inline))

typedef struct json_out {
  char *p, *end;
  int full; /* something did not fit: the whole record is void */
} json_out;

FMT_INLINE int room(json_out *o, size_t n, int ck) {
  if (!ck) return 1;
  if (o->full || (size_t)(o->end - o->p) < n) {
    o->full = 1;
    return 0;
  }
  return 1;
}

FMT_INLINE void put_bytes(json_out *o, const char *s, size_t n, int ck) {
  if (!room(o, n, ck)) return;
  memcpy(o->p, s, n);
  o->p += n;
}

static void out_bytes(json_out *o, const char *s, size_t n) { put_bytes(o, s, n, 1); }

#define PUT_LIT(o, lit, ck) put_bytes((o), (lit), sizeof(lit) - 1, (ck))
#define OUT_LIT(o, lit) out_bytes((o), (lit), sizeof(lit) - 1)

/* "00" "01" ... "99": two decimal digits per division. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Decimal digits of v >= 1: log2 scaled by log10(2) (1233/4096) is the
 * count or one less; one comparison tells which. */
static unsigned dec_digits(uint64_t v) {
  static const uint64_t pow10[20] = {1ull,
                                     10ull,
                                     100ull,
                                     1000ull,
                                     10000ull,
                                     100000ull,
                                     1000000ull,
                                     10000000ull,
                                     100000000ull,
                                     1000000000ull,
                                     10000000000ull,
                                     100000000000ull,
                                     1000000000000ull,
                                     10000000000000ull,
                                     100000000000000ull,
                                     1000000000000000ull,
                                     10000000000000000ull,
                                     100000000000000000ull,
                                     1000000000000000000ull,
                                     10000000000000000000ull};
  unsigned t = ((64u - (unsigned)__builtin_clzll(v | 1)) * 1233u) >> 12;
  return t + (v >= pow10[t]);
}

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* The 8 decimal digits of x < 10^8 as ASCII, first digit in the lowest
 * byte: both halves of 4 digits split into pairs, then the pairs into
 * digits, in one register (divisions by 100 and 10 as multiplications
 * that are exact below 10^4 and 100). */
static uint64_t eight_digits(uint32_t x) {
  uint64_t merged = (uint64_t)(x / 10000) | (uint64_t)(x % 10000) << 32;
  uint64_t hundreds = ((merged * 10486) >> 20) & 0x0000007f0000007full;
  uint64_t pairs = ((merged - 100 * hundreds) << 16) + hundreds;
  uint64_t tens = ((pairs * 103) >> 10) & 0x000f000f000f000full;
  return tens + ((pairs - 10 * tens) << 8) + 0x3030303030303030ull;
}
#endif

/* The digits of v, ending just before end. */
static void dec_write(char *end, uint64_t v) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (v >= 100000000) { /* t_ns and other long ones: 8 digits a step */
    uint64_t digits = eight_digits((uint32_t)(v % 100000000));
    v /= 100000000;
    end -= 8;
    memcpy(end, &digits, 8);
  }
#endif
  while (v >= 100) {
    unsigned i = (unsigned)(v % 100) * 2;
    v /= 100;
    end -= 2;
    memcpy(end, digit_pairs + i, 2);
  }
  if (v >= 10) memcpy(end - 2, digit_pairs + v * 2, 2);
  else end[-1] = (char)('0' + v);
}

FMT_INLINE void put_u64(json_out *o, uint64_t v, int ck) {
  if (v < 10) { /* most shapes, flags and statuses */
    if (room(o, 1, ck)) *o->p++ = (char)('0' + v);
    return;
  }
  unsigned n = dec_digits(v);
  if (!room(o, n, ck)) return;
  o->p += n;
  dec_write(o->p, v);
}

FMT_INLINE void put_i64(json_out *o, int64_t v, int ck) {
  if (v < 0) {
    PUT_LIT(o, "-", ck);
    put_u64(o, 0 - (uint64_t)v, ck);
  } else {
    put_u64(o, (uint64_t)v, ck);
  }
}

/* "00" "01" ... "ff", filled once (name_tables_init). */
static char hex_pairs[512];

/* v in lowercase hex, at least min_digits digits. */
FMT_INLINE void put_hex(json_out *o, uint64_t v, unsigned min_digits, int ck) {
  unsigned n = (64u - (unsigned)__builtin_clzll(v | 1) + 3) / 4;
  if (n < min_digits) n = min_digits;
  if (!room(o, n, ck)) return;
  char *end = o->p + n;
  o->p = end;
  for (; n >= 2; n -= 2, v >>= 8) {
    end -= 2;
    memcpy(end, hex_pairs + (v & 0xff) * 2, 2);
  }
  if (n) end[-1] = hex_pairs[(v & 15) * 2 + 1];
}

/* Whether any of the 8 bytes of x is below 0x20, '"', '\\' or 0x80 and
 * above (the usual has-zero-byte tests: exact about whether one is, not
 * which). */
static inline int needs_escape8(uint64_t x) {
  const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  uint64_t quote = x ^ (ones * '"'), bslash = x ^ (ones * '\\');
  uint64_t below = (x - ones * 0x20) & ~x;
  below |= (quote - ones) & ~quote;
  below |= (bslash - ones) & ~bslash;
  return ((below | x) & highs) != 0;
}

/* The escaped form of the character at s (n bytes left) at p; returns the
 * bytes of s it took. A byte that is not UTF-8 becomes the four characters
 * \xNN, written \\xNN (5 bytes): RFC 8259 section 8.1 wants JSON text in
 * UTF-8, and \u00NN would name the character U+00NN, not the byte. */
static size_t escape_one(char **pp, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  char *p = *pp;
  unsigned char ch = (unsigned char)s[0];
  size_t took = 1;
  if (ch >= 0x80) {
    took = gs_utf8_seq(s, n);
    if (took) {
      memcpy(p, s, took);
      p += took;
    } else {
      memcpy(p, (char[]){'\\', '\\', 'x', hex[ch >> 4], hex[ch & 15]}, 5);
      p += 5;
      took = 1;
    }
  } else if (ch >= 0x20 && ch != '"' && ch != '\\') {
    *p++ = (char)ch;
  } else if (ch == '"' || ch == '\\') {
    *p++ = '\\';
    *p++ = (char)ch;
  } else {
    memcpy(p, (char[]){'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]}, 6);
    p += 6;
  }
  *pp = p;
  return took;
}

/* The fast formatter's string body: 8 bytes at a time while none needs
 * escaping. A character escape_one takes may run past the 8. */
static char *escape_fast(char *p, const char *s, size_t n) {
  size_t i = 0;
  while (i + 8 <= n) {
    uint64_t x;
    memcpy(&x, s + i, 8);
    if (!needs_escape8(x)) {
      memcpy(p, &x, 8);
      p += 8;
      i += 8;
      continue;
    }
    for (size_t stop = i + 8; i < stop;) i += escape_one(&p, s + i, n - i);
  }
  while (i < n) i += escape_one(&p, s + i, n - i);
  return p;
}

static void escape_checked(json_out *o, const char *s, size_t n) {
  size_t run = 0; /* bytes copied as they are, written in one go */
  for (size_t i = 0; i < n;) {
    unsigned char ch = (unsigned char)s[i];
    size_t seq = ch >= 0x80 ? gs_utf8_seq(s + i, n - i) : 0;
    if (seq || (ch >= 0x20 && ch < 0x80 && ch != '"' && ch != '\\')) {
      i += seq ? seq : 1;
      continue;
    }
    out_bytes(o, s + run, i - run);
    char esc[8], *e = esc;
    i += escape_one(&e, s + i, n - i);
    out_bytes(o, esc, (size_t)(e - esc));
    run = i;
  }
  out_bytes(o, s + run, n - run);
}

/* A string's escaped body and closing quote (the opening one ends the key). */
FMT_INLINE void put_string(json_out *o, const char *s, size_t n, int ck) {
  if (ck) escape_checked(o, s, n);
  else o->p = escape_fast(o->p, s, n);
  PUT_LIT(o, "\"", ck);
}

/* ---- enum names ----------------------------------------------------------- */
/* Every enum prints as a string: its name, or "unknown(N)". The values an
 * enum usually takes have their text ready, closing quote included, in a
 * table filled once; the rest are looked up when printed. */
typedef struct enum_text {
  char s[31];
  uint8_t len; /* 0: not in the table */
} enum_text;

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

static const char *api_name(int v) { return gs_api_name((gs_api)v); }
static const char *route_name(int v) { return gs_route_name((gs_route)v); }

/* Sized for the values in use: cudaDataType_t is below 64, the compute
 * types 64..79, the common epilogues below 64, cublasStatus_t below 32. */
static enum_text type_text[64], compute_text[128], epilogue_text[64], status_text[32];
static enum_text op_text[8], api_text[8], route_text[8], pointer_mode_text[8];

static void fill_enum_texts(enum_text *t, int n, const char *(*name)(int)) {
  for (int v = 0; v < n; v++) {
    char s[64];
    const char *nm = name(v);
    int len = nm ? snprintf(s, sizeof s, "%s\"", nm) : snprintf(s, sizeof s, "unknown(%d)\"", v);
    if (len <= 0 || len > (int)sizeof t[v].s) continue; /* too long: looked up when printed */
    memcpy(t[v].s, s, (size_t)len);
    t[v].len = (uint8_t)len;
  }
}

#define FILL_ENUM_TEXTS(t, name) fill_enum_texts((t), (int)(sizeof(t) / sizeof((t)[0])), (name))

static pthread_once_t name_tables_once = PTHREAD_ONCE_INIT;
static int name_tables_ready; /* spares each record a call into pthread_once */

static void name_tables_init(void) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 256; i++) hex_pairs[2 * i] = hex[i >> 4], hex_pairs[2 * i + 1] = hex[i & 15];
  FILL_ENUM_TEXTS(type_text, gs_type_name);
  FILL_ENUM_TEXTS(compute_text, gs_compute_name);
  FILL_ENUM_TEXTS(epilogue_text, gs_epilogue_name);
  FILL_ENUM_TEXTS(status_text, status_name);
  FILL_ENUM_TEXTS(op_text, gs_op_name);
  FILL_ENUM_TEXTS(api_text, api_name);
  FILL_ENUM_TEXTS(route_text, route_name);
  FILL_ENUM_TEXTS(pointer_mode_text, pointer_mode_name);
  __atomic_store_n(&name_tables_ready, 1, __ATOMIC_RELEASE);
}

/* A value without a ready text: its name, or unknown(N). */
static void put_enum_lookup(json_out *o, const char *name, int value, int ck) {
  if (name) {
    /* Names come from the shim's own tables: nothing to escape. */
    put_bytes(o, name, strlen(name), ck);
  } else {
    PUT_LIT(o, "unknown(", ck);
    put_i64(o, value, ck);
    PUT_LIT(o, ")", ck);
  }
  PUT_LIT(o, "\"", ck);
}

FMT_INLINE void put_enum(json_out *o, const enum_text *t, unsigned n, const char *(*name)(int), int value, int ck) {
  const enum_text *e = (unsigned)value < n ? &t[value] : NULL;
  if (e && e->len) {
    if (ck) {
      put_bytes(o, e->s, e->len, 1);
    } else {
      memcpy(o->p, e, sizeof *e); /* fixed size: what is past len gets overwritten */
      o->p += e->len;
    }
    return;
  }
  put_enum_lookup(o, name(value), value, ck);
}

#define PUT_ENUM(o, t, name, value, ck) put_enum((o), (t), sizeof(t) / sizeof((t)[0]), (name), (value), (ck))

/* ---- one record ----------------------------------------------------------- */
/* Keys and values in the order the header comment lists them. A key
 * literal ends with the opening quote of a string value. */
FMT_INLINE void format_body(json_out *o, const log_rec *r, const gs_gpu_time *gpu, const char *backend,
                            const char *reason, int ck) {
  int lt = r->api == GS_API_LT_MATMUL;
  PUT_LIT(o, "{\"seq\":", ck), put_u64(o, r->seq, ck);
  PUT_LIT(o, ",\"t_ns\":", ck), put_u64(o, r->t_ns, ck);
  PUT_LIT(o, ",\"tid\":", ck), put_i64(o, r->tid, ck);
  PUT_LIT(o, ",\"api\":\"", ck), PUT_ENUM(o, api_text, api_name, r->api, ck);
  PUT_LIT(o, ",\"m\":", ck), put_i64(o, r->m, ck);
  PUT_LIT(o, ",\"n\":", ck), put_i64(o, r->n, ck);
  PUT_LIT(o, ",\"k\":", ck), put_i64(o, r->k, ck);
  PUT_LIT(o, ",\"batch\":", ck), put_i64(o, r->batch, ck);
  PUT_LIT(o, ",\"transa\":\"", ck), PUT_ENUM(o, op_text, gs_op_name, r->transa, ck);
  PUT_LIT(o, ",\"transb\":\"", ck), PUT_ENUM(o, op_text, gs_op_name, r->transb, ck);

  PUT_LIT(o, ",\"a_type\":\"", ck), PUT_ENUM(o, type_text, gs_type_name, r->a_type, ck);
  PUT_LIT(o, ",\"b_type\":\"", ck), PUT_ENUM(o, type_text, gs_type_name, r->b_type, ck);
  PUT_LIT(o, ",\"c_type\":\"", ck), PUT_ENUM(o, type_text, gs_type_name, r->c_type, ck);
  if (lt && r->d_type != -1) PUT_LIT(o, ",\"d_type\":\"", ck), PUT_ENUM(o, type_text, gs_type_name, r->d_type, ck);
  PUT_LIT(o, ",\"compute_type\":\"", ck), PUT_ENUM(o, compute_text, gs_compute_name, r->compute_type, ck);
  if (r->scale_type != -1)
    PUT_LIT(o, ",\"scale_type\":\"", ck), PUT_ENUM(o, type_text, gs_type_name, r->scale_type, ck);

  PUT_LIT(o, ",\"lda\":", ck), put_i64(o, r->lda, ck);
  PUT_LIT(o, ",\"ldb\":", ck), put_i64(o, r->ldb, ck);
  PUT_LIT(o, ",\"ldc\":", ck), put_i64(o, r->ldc, ck);
  if (lt && r->ldd != -1) PUT_LIT(o, ",\"ldd\":", ck), put_i64(o, r->ldd, ck);
  if (r->stride_a != -1) PUT_LIT(o, ",\"stride_a\":", ck), put_i64(o, r->stride_a, ck);
  if (r->stride_b != -1) PUT_LIT(o, ",\"stride_b\":", ck), put_i64(o, r->stride_b, ck);
  if (r->stride_c != -1) PUT_LIT(o, ",\"stride_c\":", ck), put_i64(o, r->stride_c, ck);

  if (lt) PUT_LIT(o, ",\"epilogue\":\"", ck), PUT_ENUM(o, epilogue_text, gs_epilogue_name, r->epilogue, ck);
  if (r->has_bias) PUT_LIT(o, ",\"bias_type\":\"", ck), PUT_ENUM(o, type_text, gs_type_name, r->bias_type, ck);
  if (r->pointer_mode != -1)
    PUT_LIT(o, ",\"pointer_mode\":\"", ck), PUT_ENUM(o, pointer_mode_text, pointer_mode_name, r->pointer_mode, ck);
  if (!lt) PUT_LIT(o, ",\"algo\":", ck), put_i64(o, r->algo, ck);

  PUT_LIT(o, ",\"device\":", ck), put_i64(o, r->device, ck);
  if (r->sm < 0) {
    PUT_LIT(o, ",\"sm\":null", ck);
  } else {
    PUT_LIT(o, ",\"sm\":\"", ck), put_u64(o, (unsigned)r->sm / 10, ck);
    PUT_LIT(o, ".", ck), put_u64(o, (unsigned)r->sm % 10, ck), PUT_LIT(o, "\"", ck);
  }
  PUT_LIT(o, ",\"stream\":\"0x", ck), put_hex(o, r->stream, 1, ck), PUT_LIT(o, "\"", ck);
  PUT_LIT(o, ",\"site\":\"", ck), put_hex(o, r->site, 16, ck), PUT_LIT(o, "\"", ck);
  switch (r->site_flags & (GS_SITE_NEW | GS_SITE_EVICTED)) {
    case GS_SITE_NEW: PUT_LIT(o, ",\"site_event\":\"new\"", ck); break;
    case GS_SITE_EVICTED: PUT_LIT(o, ",\"site_event\":\"evicted\"", ck); break;
    case GS_SITE_NEW | GS_SITE_EVICTED: PUT_LIT(o, ",\"site_event\":\"new,evicted\"", ck); break;
    default: break;
  }
  if (r->site_flags & GS_SITE_EVICTED)
    PUT_LIT(o, ",\"evicted_site\":\"", ck), put_hex(o, r->evicted_site, 16, ck), PUT_LIT(o, "\"", ck);

  PUT_LIT(o, ",\"decided\":\"", ck), PUT_ENUM(o, route_text, route_name, r->decided, ck);
  PUT_LIT(o, ",\"route\":\"", ck), PUT_ENUM(o, route_text, route_name, r->route, ck);
  if (r->has_backend) PUT_LIT(o, ",\"backend\":\"", ck), put_string(o, backend, r->backend_len, ck);
  PUT_LIT(o, ",\"reason\":\"", ck), put_string(o, reason, r->reason_len, ck);
  PUT_LIT(o, ",\"status\":", ck), put_i64(o, r->status, ck);
  PUT_LIT(o, ",\"status_name\":\"", ck), PUT_ENUM(o, status_text, status_name, r->status, ck);
  PUT_LIT(o, ",\"dur_ns\":", ck), put_u64(o, r->dur_ns, ck);
  if (gpu && gpu->has_gpu_ns) {
    PUT_LIT(o, ",\"gpu_ns\":", ck), put_u64(o, gpu->gpu_ns, ck);
    if (gpu->has_kernels_ns) PUT_LIT(o, ",\"gpu_ns_kernels\":", ck), put_u64(o, gpu->kernels_ns, ck);
    if (gpu->has_native_ns) PUT_LIT(o, ",\"native_gpu_ns\":", ck), put_u64(o, gpu->native_ns, ck);
  } else if (gpu && gpu_time_skip_name(gpu->skip)) {
    const char *why = gpu_time_skip_name(gpu->skip);
    PUT_LIT(o, ",\"gpu_skipped\":\"", ck), put_bytes(o, why, strlen(why), ck), PUT_LIT(o, "\"", ck);
  }
  PUT_LIT(o, "}\n", ck);
}

/* r's text into buf: its length, or 0 (buf "") if it did not fit. */
static size_t format_rec(const log_rec *r, const gs_gpu_time *gpu, const char *backend, const char *reason, char *buf,
                         size_t len) {
  if (!__atomic_load_n(&name_tables_ready, __ATOMIC_ACQUIRE)) pthread_once(&name_tables_once, name_tables_init);
  if (len == 0) return 0;
  json_out o = {buf, buf + len - 1, 0}; /* the last byte is for the NUL */
  if (len >= rec_text_bound(r->reason_len, r->backend_len)) {
    format_body(&o, r, gpu, backend, reason, 0);
  } else {
    format_body(&o, r, gpu, backend, reason, 1);
    if (o.full) {
      buf[0] = '\0';
      return 0;
    }
  }
  *o.p = '\0';
  return (size_t)(o.p - buf);
}

size_t log_format(const gs_call *c, char *buf, size_t len) {
  log_rec r;
  size_t reason_len = strnlen(c->reason, sizeof c->reason);
  size_t backend_len = c->backend ? strlen(c->backend) : 0;
  rec_fill(&r, c, reason_len, backend_len);
  gs_gpu_time gpu;
  int has_gpu = gpu_time_wanted();
  if (has_gpu) rec_fill_gpu(&gpu, c);
  return format_rec(&r, has_gpu ? &gpu : NULL, c->backend, c->reason, buf, len);
}

/* ---- summary counters ----------------------------------------------------- */
/* Kept only for the INFO summary (state.counting): at WARN a call costs
 * nothing here. */
#define REASONS_MAX 64
#define REASON_SLOTS 128 /* open addressing, at most half full */
#define SITES_MAX 256
#define SITE_SLOTS 512

typedef struct reason_count {
  uint64_t count; /* 0: free slot */
  uint32_t hash;
  uint32_t len;
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
  int last_reason; /* the slot the previous call counted in; -1 none */
  uint64_t other_reasons;
  site_count sites[SITE_SLOTS];
  int n_sites;
  uint64_t other_sites;
} log_stats;

static log_stats stats = {.last_reason = -1}; /* under state.mu */

static void reset_stats(void) {
  memset(&stats, 0, sizeof stats);
  stats.last_reason = -1;
}

static uint32_t fnv1a(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static void count_reason(const char *reason) {
  size_t n = strnlen(reason, GS_REASON_MAX - 1);
  /* Calls come in runs with one reason (a layer's GEMMs, a training
   * step's): comparing with the previous call's slot spares the hash. */
  if (stats.last_reason >= 0) {
    reason_count *r = &stats.reasons[stats.last_reason];
    if (r->len == n && memcmp(r->text, reason, n) == 0) {
      r->count++;
      return;
    }
  }
  uint32_t h = fnv1a(reason, n);
  for (uint32_t i = 0; i < REASON_SLOTS; i++) {
    uint32_t slot = (h + i) % REASON_SLOTS;
    reason_count *r = &stats.reasons[slot];
    if (r->count == 0) {
      if (stats.n_reasons == REASONS_MAX) break;
      stats.n_reasons++;
      r->hash = h;
      r->len = (uint32_t)n;
      memcpy(r->text, reason, n);
      r->text[n] = '\0';
    } else if (r->hash != h || r->len != n || memcmp(r->text, reason, n) != 0) {
      continue;
    }
    r->count++;
    stats.last_reason = (int)slot;
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
  pthread_cond_t write_done;   /* on CLOCK_MONOTONIC; the write in flight has ended */
  pthread_cond_t flusher_wake; /* on CLOCK_MONOTONIC; a record, a hand-off, log_shutdown's stop */
  char pattern[sizeof gs_opt.log_path];
  char path[sizeof gs_opt.log_path + 512]; /* expanded; "" until opened */
  int on;           /* GEMMSHIM_LOG was set */
  int counting;     /* the INFO summary is wanted: count every call */
  int disabled;     /* an error turned the log off; atomic for log_record */
  gs_file out;      /* the file; out.fd -1 until the first record */
  int late;         /* after log_shutdown: every record written at once */
  char *buf[2];     /* binary records, LOG_BIN_BYTES each; one allocation at first use */
  char *text;       /* LOG_TEXT_BYTES, the writer's (one write in flight at a time) */
  int cur;          /* the buffer records go into */
  size_t fill;      /* bytes of buf[cur] in use */
  size_t text_fill; /* the sum of rec_text_bound over buf[cur]'s records */
  int writing;      /* the other buffer is being written, outside mu */
  int waiters;      /* threads waiting on write_done for the write to end */
  uint64_t write_gen;   /* counts writes started (swap_locked) */
  uint64_t gave_up_gen; /* a caller stopped waiting for this write: later ones drop at once */
  uint64_t give_up_ns;  /* set at exit: writes stop waiting for a pipe then (0: never) */
  uint64_t last_flush_ns;
  int flusher_state;
  int flusher_stop;
  int flusher_idle; /* waiting for a first record, without a deadline */
  size_t handoff_len; /* >0: a full buffer the flusher is to write */
  int handoff_buf;
  pthread_t flusher;
  /* Records lost because the writer fell behind: in all, and those the
   * next notice in the log (lost_notice_locked) will name. */
  uint64_t lost, lost_pending, lost_first_seq, lost_last_seq;
  /* The unwritten end of a line a pipe took only part of before the
   * deadline: written first next time, so that no line is torn. */
  char carry[LOG_RECORD_MAX];
  size_t carry_len;
  uint64_t dropped; /* records longer than LOG_RECORD_MAX */
  int warned_too_long;
  int warned_reopened;
} state = {.mu = PTHREAD_MUTEX_INITIALIZER, .out = GS_FILE_NONE};

/* The per-call test: log on, or counting for the INFO summary. */
static int log_wanted;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static void log_setup_once(void);
static pthread_condattr_t monotonic_attr;

static uint64_t monotonic_ns(void) { return gs_monotonic_ns(); }

static int is_disabled(void) { return __atomic_load_n(&state.disabled, __ATOMIC_RELAXED); }

static void init_conds(void) {
  pthread_cond_init(&state.write_done, &monotonic_attr);
  pthread_cond_init(&state.flusher_wake, &monotonic_attr);
}

/* ---- opening and writing -------------------------------------------------- */
static void disable_locked(void) {
  __atomic_store_n(&state.disabled, 1, __ATOMIC_RELAXED);
  state.fill = 0;
  state.text_fill = 0;
  file_close(&state.out);
}

/* Warnings here run under state.mu: rare, and gs_debug never takes it. */
static int open_locked(void) {
  if (is_disabled()) return 0;
  if (path_expand(state.pattern, (long)getpid(), state.path, sizeof state.path, NULL) != 0) {
    char q[GS_QUOTE_BUF];
    disable_locked();
    GS_WARN("GEMMSHIM_LOG='%s': longer than %zu bytes once %%p/%%h/%%r are expanded; the routing log is off",
            gs_quote(state.pattern, q), sizeof state.path - 1);
    return 0;
  }
  char why[256], q[GS_QUOTE_BUF];
  if (file_open_append(state.path, 0, &state.out, why, sizeof why) != 0) {
    disable_locked();
    GS_WARN("GEMMSHIM_LOG: cannot open '%s' (%s); the routing log is off for the rest of this process",
            gs_quote(state.path, q), why);
    return 0;
  }
  state.last_flush_ns = monotonic_ns();
  return 1;
}

/* The writer found its descriptor is no longer the log (the program closed
 * it, and may have opened a file of its own under the number): open the
 * log again by its name. A log named by a descriptor (/dev/fd/N,
 * /dev/stdout) is not: that number may be the program's own file by now,
 * so the log is off instead. 0 when the log is off. */
static int reopen_locked(void) {
  int old_fd = state.out.fd;
  int named = state.out.named;
  state.out.fd = -1; /* the program's now: never closed or written by us */
  char q[GS_QUOTE_BUF];
  if (named) {
    disable_locked();
    GS_WARN("GEMMSHIM_LOG: descriptor %d, the shim's copy of '%s', was closed by the program; the routing log is "
            "off for the rest of this process (a descriptor named by number is not opened again: the number may be "
            "another file by now)",
            old_fd, gs_quote(state.path, q));
    return 0;
  }
  if (!open_locked()) return 0;
  if (!state.warned_reopened++)
    GS_WARN("GEMMSHIM_LOG: descriptor %d no longer is '%s' (the program closed it); reopened", old_fd,
            gs_quote(state.path, q));
  return 1;
}

#define LOG_ALLOC_BYTES (2 * (size_t)LOG_BIN_BYTES + LOG_TEXT_BYTES)

static int alloc_locked(void) {
  char *mem = GS_CALL(malloc, LOG_ALLOC_BYTES);
  if (!mem) {
    disable_locked();
    GS_WARN("GEMMSHIM_LOG: cannot allocate %zu bytes of log buffers; the routing log is off", LOG_ALLOC_BYTES);
    return 0;
  }
  state.buf[0] = mem;
  state.buf[1] = mem + LOG_BIN_BYTES;
  state.text = mem + 2 * (size_t)LOG_BIN_BYTES;
  return 1;
}

/* Hand the current buffer to the caller for writing outside the lock. */
static int swap_locked(size_t *len) {
  int full = state.cur;
  *len = state.fill;
  state.cur ^= 1;
  state.fill = 0;
  state.text_fill = 0;
  state.write_gen++;
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

/* Waits for the write in flight until the monotonic deadline; 0 when it
 * was still in flight then. */
static int wait_write_until_locked(uint64_t deadline) {
  struct timespec ts = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
  __atomic_add_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
  while (write_in_flight() && pthread_cond_timedwait(&state.write_done, &state.mu, &ts) != ETIMEDOUT) {}
  __atomic_sub_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
  return !write_in_flight();
}

static void count_lost_locked(uint64_t seq) {
  if (!state.lost_pending || seq < state.lost_first_seq) state.lost_first_seq = seq;
  if (!state.lost_pending || seq > state.lost_last_seq) state.lost_last_seq = seq;
  state.lost_pending++;
  state.lost++;
}

/* ---- records waiting for their GPU work ------------------------------------ */
/* Binary records whose events had not completed when their buffer was
 * written. Owned by whoever writes (one write in flight at a time), so it
 * needs no lock; held_count is read by the flusher, which comes back for
 * them even when no new record arrives. */
static struct {
  char *buf;
  size_t len, cap;
} held;
static size_t held_count; /* atomic */
/* Of state.lost, the records that could neither be written nor held: no
 * room in the text after held ones, and none to hold them (the exit
 * summary says so apart). Under state.mu. */
static uint64_t lost_held;
/* Until when the last flushes poll unfinished GPU work: set by the first
 * of them, so that all of them together wait that long at most. */
static uint64_t gpu_exit_deadline;

/* The record each line of state.text is, after a carried line end (seq;
 * LINE_NOT_A_RECORD for a ready line such as a loss notice), so a write
 * cut short counts the right records lost (lost_after_locked) although
 * held records change the order. Writer-owned, like state.text. */
#define LINE_NOT_A_RECORD UINT64_MAX
#define LINES_MAX (LOG_BIN_BYTES / sizeof(log_rec) + LOG_HELD_PER_WRITE + 1)
static uint64_t line_seq[LINES_MAX];
static size_t line_count;

static int hold(const log_rec *r) {
  if (held.len + r->size > LOG_HELD_BYTES) return 0;
  if (held.len + r->size > held.cap) {
    size_t cap = held.cap ? held.cap * 2 : 64 * 1024;
    while (cap < held.len + r->size) cap *= 2;
    char *grown = GS_CALL(malloc, cap);
    if (!grown) return 0;
    if (held.len) memcpy(grown, held.buf, held.len);
    free(held.buf);
    held.buf = grown;
    held.cap = cap;
  }
  memcpy(held.buf + held.len, r, r->size);
  held.len += r->size;
  __atomic_add_fetch(&held_count, 1, __ATOMIC_RELAXED);
  return 1;
}

/* Whether r's GPU work is done (or it has none). At the last flush
 * (deadline set) it is given until the deadline, polled, never waited on
 * through the driver. */
static int gpu_done(log_rec *r, uint64_t deadline) {
  gs_gpu_time *gpu = rec_gpu(r);
  if (!gpu || !gpu->on) return 1;
  for (;;) {
    if (gpu_time_resolve(gpu)) return 1;
    if (!deadline || monotonic_ns() >= deadline) return 0;
    struct timespec pause = {0, 200000}; /* 0.2 ms */
    nanosleep(&pause, NULL);
  }
}

/* r's line at state.text + *out. Its GPU work must be done, or it is
 * written without: its events go back and it says it was not finished
 * (final: when the log closed; else there was no room to hold it).
 * checked: r's room was not reserved in state.text (a held record, or
 * after one); returns 0, nothing written, when it does not fit now. */
static int format_one(log_rec *r, size_t *out, int checked, int final) {
  const char *strings = rec_strings(r);
  size_t room = LOG_TEXT_BYTES - *out;
  if (r->kind == LOG_REC_TEXT) {
    if (room < r->reason_len) return 0;
    memcpy(state.text + *out, strings, r->reason_len);
    *out += r->reason_len;
    line_seq[line_count++] = LINE_NOT_A_RECORD;
    return 1;
  }
  gs_gpu_time *gpu = rec_gpu(r);
  if (checked && room < rec_text_bound(r->reason_len, r->backend_len)) return 0;
  if (gpu && gpu->on) {
    gpu_time_discard(gpu);
    gpu->skip = final ? GS_GPU_SKIP_UNFINISHED : GS_GPU_SKIP_HELD_FULL;
  }
  *out += format_rec(r, gpu, strings, strings + r->backend_len, state.text + *out, room);
  line_seq[line_count++] = r->seq;
  return 1;
}

/* The held records that are done now, written first (they are older), at
 * most LOG_HELD_PER_WRITE; the others stay, in order. */
static size_t format_held(size_t out, uint64_t deadline) {
  size_t keep = 0, kept = 0, written = 0;
  for (size_t at = 0; at < held.len;) {
    log_rec *r = (log_rec *)(void *)(held.buf + at);
    size_t size = r->size;
    int ready = written < LOG_HELD_PER_WRITE && (gpu_done(r, deadline) || deadline);
    if (ready && format_one(r, &out, 1, deadline != 0)) {
      written++;
    } else {
      if (keep != at) memmove(held.buf + keep, r, size);
      keep += size;
      kept++;
    }
    at += size;
  }
  held.len = keep;
  __atomic_store_n(&held_count, kept, __ATOMIC_RELAXED);
  return out;
}

/* The text of len bytes of records into state.text: the carried end of a
 * torn line, the held records now done, then these, each formatted unless
 * its GPU work is still running (then held, when there is room). Each of
 * these had room for its longest text reserved (text_fill) and is
 * formatted unchecked when nothing held went first; checked otherwise.
 * final: the last flush, which gives unfinished GPU work a bounded wait. */
static size_t format_records(char *recs, size_t len, int final) {
  if (final && !gpu_exit_deadline) {
    uint64_t now = monotonic_ns(), deadline = now + GPU_TIME_EXIT_WAIT_NS;
    /* Never past half of what is left of the exit's own write budget: the
     * write that follows must still have time to go out. */
    uint64_t give_up = __atomic_load_n(&state.give_up_ns, __ATOMIC_ACQUIRE);
    if (give_up && deadline > now + (give_up > now ? (give_up - now) / 2 : 0))
      deadline = give_up > now ? now + (give_up - now) / 2 : now;
    gpu_exit_deadline = deadline ? deadline : 1;
  }
  uint64_t deadline = final ? gpu_exit_deadline : 0;
  size_t out = state.carry_len;
  memcpy(state.text, state.carry, state.carry_len);
  line_count = 0;
  if (held.len) out = format_held(out, deadline);
  int checked = line_count > 0;
  for (size_t at = 0; at < len;) {
    log_rec *r = (log_rec *)(void *)(recs + at);
    at += r->size;
    if (!gpu_done(r, deadline) && !final && hold(r)) continue;
    if (!format_one(r, &out, checked, final) && !hold(r)) {
      /* No room and nowhere to wait: lost, counted as any lost record
       * (the next records_lost notice names it). */
      gs_gpu_time *gpu = rec_gpu(r);
      if (gpu && gpu->on) gpu_time_discard(gpu);
      pthread_mutex_lock(&state.mu);
      count_lost_locked(r->seq);
      lost_held++;
      pthread_mutex_unlock(&state.mu);
    }
  }
  return out;
}

/* A write that ran out of time on a pipe (files.c) took `written` bytes of
 * the text, whose first `carried` bytes were the end of an earlier torn
 * line. Lines are that end (if any), then one per record (line_seq). A line the write
 * stopped in is finished first next time (state.carry); the records after
 * it count as lost. Pipes take whole lines of up to PIPE_BUF bytes or
 * nothing, so a line is torn only on a terminal or socket. */
static void lost_after_locked(size_t text_len, size_t written, size_t carried) {
  const char *text = state.text;
  size_t lines = 0;
  for (size_t i = 0; i < written; i++) lines += text[i] == '\n';
  if (written > 0 && text[written - 1] != '\n') {
    const char *nl = memchr(text + written, '\n', text_len - written);
    size_t end = nl ? (size_t)(nl - text) + 1 : text_len;
    state.carry_len = end - written;
    memmove(state.carry, text + written, state.carry_len);
    lines++;
  } else if (written == 0 && carried) {
    state.carry_len = carried; /* still in state.carry: not a byte of it went */
    lines++;
  }
  size_t line = carried ? 1 : 0;
  for (size_t i = 0; i < line_count; i++, line++)
    if (line >= lines && line_seq[i] != LINE_NOT_A_RECORD) count_lost_locked(line_seq[i]);
}

/* Formats buffer b and writes it; never under state.mu. Only one write is
 * ever in flight (state.writing): it owns buffer b, state.text and the
 * file, and lines reach the file in the order recorded. The write waits
 * for room in a pipe until *deadline (monotonic ns; 0 no bound). */
static void write_buffer(int b, size_t len, const volatile uint64_t *deadline) {
  if (!file_is_ours(&state.out)) {
    pthread_mutex_lock(&state.mu);
    int ok = !is_disabled() && reopen_locked();
    if (!ok) {
      __atomic_store_n(&state.writing, 0, __ATOMIC_SEQ_CST);
      pthread_cond_broadcast(&state.write_done);
    }
    pthread_mutex_unlock(&state.mu);
    if (!ok) return;
  }
  size_t carried = state.carry_len;
  size_t text_len = format_records(state.buf[b], len, __atomic_load_n(&state.late, __ATOMIC_RELAXED));
  state.carry_len = 0;
  if (text_len == 0) { /* only held records, none done yet */
    end_write();
    return;
  }
  size_t n = file_write(&state.out, state.text, text_len, deadline);
  if (n == 0 && errno == EBADF && !file_is_ours(&state.out)) {
    /* Closed by the program since the check above: open it again, once.
     * (Still ours, EBADF is a description not open for writing, such as
     * /dev/stdin named as the log: a write error like any.) */
    pthread_mutex_lock(&state.mu);
    int ok = !is_disabled() && reopen_locked();
    pthread_mutex_unlock(&state.mu);
    if (ok) n = file_write(&state.out, state.text, text_len, deadline);
    else errno = EBADF;
  }
  if (n == text_len) {
    end_write();
    return;
  }
  int err = errno;
  if (err == ETIMEDOUT) {
    /* A reader too slow for the deadline (exit, or a caller's own write):
     * what did not fit is lost, counted, and the log stays on. */
    pthread_mutex_lock(&state.mu);
    lost_after_locked(text_len, n, carried);
    __atomic_store_n(&state.writing, 0, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&state.write_done);
    pthread_mutex_unlock(&state.mu);
    return;
  }
  char ebuf[128], why[160];
  if (err == EFBIG) snprintf(why, sizeof why, "%s: the process's file size limit, ulimit -f", strerror_r(err, ebuf, sizeof ebuf));
  else if (err != 0) snprintf(why, sizeof why, "%s", strerror_r(err, ebuf, sizeof ebuf));
  else snprintf(why, sizeof why, "short write: %zu of %zu bytes", n, text_len);
  pthread_mutex_lock(&state.mu);
  int first = !is_disabled();
  if (first) disable_locked();
  __atomic_store_n(&state.writing, 0, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&state.write_done);
  pthread_mutex_unlock(&state.mu);
  char q[GS_QUOTE_BUF];
  if (first)
    GS_WARN("GEMMSHIM_LOG: cannot write '%s' (%s); the routing log is off for the rest of this process",
            gs_quote(state.path, q), why);
}

/* ---- flusher thread ------------------------------------------------------- */
/* Writes the full buffers recording threads hand it, and the records
 * pending a second after it saw the first of them. Sleeps without a
 * deadline while nothing is pending: an idle process is never woken. */
static void flush_pending(void);
static void flush_pending_until(const volatile uint64_t *deadline, uint64_t wait_until);

static void *flusher_main(void *arg) {
  (void)arg;
  uint64_t due = 0; /* when the pending records are to be written; 0 none seen */
  /* This thread reads the calls' events: never as a call that another
   * thread's graph capture prohibits (gpu_time.c). */
  if (gpu_time_wanted()) gpu_time_reader_thread();
  pthread_mutex_lock(&state.mu);
  for (;;) {
    /* A hand-off first, even when told to stop: its write is in flight
     * (state.writing) and everyone else waits for it. */
    if (state.handoff_len) {
      int b = state.handoff_buf;
      size_t len = state.handoff_len;
      state.handoff_len = 0;
      pthread_mutex_unlock(&state.mu);
      write_buffer(b, len, &state.give_up_ns);
      pthread_mutex_lock(&state.mu);
      continue;
    }
    if (state.flusher_stop) {
      /* At exit (log_shutdown) the last records are written here, not on
       * the exiting thread: a write that blocks (a terminal that stopped
       * reading) then holds up this thread, which the exit waits for at
       * most its budget, never the program's. */
      if (state.late) {
        pthread_mutex_unlock(&state.mu);
        flush_pending();
        pthread_mutex_lock(&state.mu);
      }
      break;
    }
    if ((state.fill == 0 && !__atomic_load_n(&held_count, __ATOMIC_RELAXED)) || state.out.fd < 0) {
      due = 0;
      state.flusher_idle = 1;
      pthread_cond_wait(&state.flusher_wake, &state.mu);
      state.flusher_idle = 0;
      continue;
    }
    uint64_t now = monotonic_ns();
    if (!due) due = now + (gpu_time_wanted() ? GPU_TIME_FLUSH_NS : FLUSH_INTERVAL_NS);
    if (now < due) {
      struct timespec deadline = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
      pthread_cond_timedwait(&state.flusher_wake, &state.mu, &deadline);
      continue;
    }
    if (write_in_flight()) {
      /* Someone else's (log_flush); once it ends, a recording thread may
       * start another and hand it here: stop waiting then. */
      __atomic_add_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
      while (write_in_flight() && !state.handoff_len) pthread_cond_wait(&state.write_done, &state.mu);
      __atomic_sub_fetch(&state.waiters, 1, __ATOMIC_SEQ_CST);
      continue;
    }
    due = 0;
    size_t len;
    int b = swap_locked(&len);
    pthread_mutex_unlock(&state.mu);
    write_buffer(b, len, &state.give_up_ns);
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

/* Once stopping, nothing more is handed to the flusher; what was is
 * written before it ends. At exit the wait for it ends LOG_JOIN_SLACK_MS
 * after the exit's deadline (state.give_up_ns), when every write that
 * waits for room has given up: a thread still not done then is blocked in
 * a write (a description shared with the program, files.c) and is left to
 * the process's end. Returns 0 then, 1 once it has ended. */
#define LOG_JOIN_SLACK_MS 100

static int stop_flusher(void) {
  pthread_mutex_lock(&state.mu);
  int running = state.flusher_state == FLUSHER_RUNNING;
  if (running) {
    state.flusher_state = FLUSHER_STOPPING;
    state.flusher_stop = 1;
    pthread_cond_signal(&state.flusher_wake);
  }
  pthread_t t = running ? state.flusher : (pthread_t)0;
  uint64_t until = state.give_up_ns ? state.give_up_ns + LOG_JOIN_SLACK_MS * 1000000ull : 0;
  pthread_mutex_unlock(&state.mu);
  if (!running) return 1;
  if (until) {
    /* pthread_timedjoin_np takes CLOCK_REALTIME: the monotonic time left. */
    uint64_t now = monotonic_ns(), left = until > now ? until - now : 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + left % 1000000000u;
    ts.tv_sec += (time_t)(left / 1000000000u + ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    if (pthread_timedjoin_np(t, NULL, &ts) != 0) return 0;
  } else {
    pthread_join(t, NULL);
  }
  pthread_mutex_lock(&state.mu);
  state.flusher_state = FLUSHER_NONE;
  state.flusher_stop = 0;
  state.flusher_idle = 0;
  pthread_mutex_unlock(&state.mu);
  return 1;
}

/* ---- recording ------------------------------------------------------------ */
/* Whether the caller must flush now: after log_shutdown every record, and
 * without a flusher thread once a second. */
static int flush_due_locked(void) {
  if (write_in_flight()) return 0;
  if (state.late) return 1;
  return state.flusher_state == FLUSHER_FAILED && monotonic_ns() - state.last_flush_ns >= FLUSH_INTERVAL_NS;
}

/* A full buffer goes to the flusher thread when there is one running:
 * formatting it is the flusher's work, not the recording thread's. */
static int hand_off_locked(int b, size_t len) {
  if (state.flusher_state != FLUSHER_RUNNING) return 0;
  state.handoff_buf = b;
  state.handoff_len = len;
  state.flusher_idle = 0;
  pthread_cond_signal(&state.flusher_wake);
  return 1;
}

static int fits_locked(size_t size, size_t text) {
  return state.fill + size <= LOG_BIN_BYTES && state.text_fill + text <= LOG_TEXT_BYTES;
}

/* Both buffers are busy: 1 once the write in flight has ended, 0 when the
 * record is to be dropped. A call waits at most LOG_WAIT_MS for one write;
 * once a call has waited that long, later ones drop at once until that
 * write ends, so a stalled reader costs the program one wait, not one per
 * call. GEMMSHIM_LOG_WAIT=1 waits however long it takes. */
static int wait_for_room_locked(void) {
  if (gs_opt.log_wait || state.late) {
    wait_write_locked();
    return 1;
  }
  if (state.gave_up_gen == state.write_gen) return 0;
  if (wait_write_until_locked(monotonic_ns() + LOG_WAIT_MS * 1000000ull)) return 1;
  state.gave_up_gen = state.write_gen;
  return 0;
}

/* A line saying which records were lost, ready-made (LOG_REC_TEXT), put
 * where they were lost: before the next record that is kept. It waits for
 * a buffer with room for it and the next record (room_after, text_after). */
static void lost_notice_locked(size_t room_after, size_t text_after) {
  char line[320];
  int n = snprintf(line, sizeof line,
                   "{\"event\":\"records_lost\",\"lost\":%" PRIu64 ",\"first_seq\":%" PRIu64
                   ",\"last_seq\":%" PRIu64
                   ",\"why\":\"the log writer fell behind; a call waits at most %d ms for it\"}\n",
                   state.lost_pending, state.lost_first_seq, state.lost_last_seq, LOG_WAIT_MS);
  if (n <= 0 || (size_t)n >= sizeof line) return;
  size_t size = rec_size((size_t)n, 0);
  if (!fits_locked(size + room_after, (size_t)n + text_after)) return;
  log_rec *r = (log_rec *)(void *)(state.buf[state.cur] + state.fill);
  memset(r, 0, sizeof *r);
  r->kind = LOG_REC_TEXT;
  r->size = (uint32_t)size;
  r->reason_len = (uint32_t)n;
  memcpy(r + 1, line, (size_t)n);
  state.fill += size;
  state.text_fill += (size_t)n;
  state.lost_pending = 0;
}

/* Copy one record into the current buffer; returns the buffer the caller
 * must write, or -1. */
static int append_locked(gs_call *c, size_t reason_len, size_t backend_len, size_t *len) {
  if (state.out.fd < 0 && !open_locked()) return -1;
  if (!state.buf[0] && !alloc_locked()) return -1;
  if (state.late) wait_write_locked();
  if (is_disabled()) return -1; /* the write waited for failed */
  int has_gpu = gpu_time_wanted();
  size_t size = rec_size_gpu(reason_len, backend_len, has_gpu);
  size_t text = rec_text_bound(reason_len, backend_len);
  if (text > LOG_RECORD_MAX) text = LOG_RECORD_MAX; /* log_record checked its text fits */
  int b = -1;
  while (!fits_locked(size, text)) {
    if (write_in_flight()) {
      /* Meanwhile the flusher may have written this buffer too: test
       * again, never swapping out an empty one. */
      if (!wait_for_room_locked()) {
        count_lost_locked(c->seq);
        return b;
      }
      if (is_disabled()) return -1;
      continue;
    }
    b = swap_locked(len); /* the record fits the empty buffer: once */
  }
  if (state.lost_pending) lost_notice_locked(size, text);
  log_rec *r = (log_rec *)(void *)(state.buf[state.cur] + state.fill);
  rec_fill(r, c, reason_len, backend_len);
  r->size = (uint32_t)size;
  r->has_gpu = (uint8_t)has_gpu;
  if (has_gpu) rec_fill_gpu(rec_gpu(r), c);
  if (c->work_begun) c->gpu.on = 0; /* the record owns the events now */
  char *strings = (char *)rec_strings(r);
  if (backend_len) memcpy(strings, c->backend, backend_len);
  memcpy(strings + backend_len, c->reason, reason_len);
  state.fill += size;
  state.text_fill += text;
  if (b < 0 && flush_due_locked()) b = swap_locked(len);
  if (b >= 0 && hand_off_locked(b, *len)) b = -1;
  if (state.flusher_state == FLUSHER_NONE && !state.late) {
    start_flusher_locked();
  } else if (state.flusher_idle) { /* the first record since the flusher went idle */
    state.flusher_idle = 0;
    pthread_cond_signal(&state.flusher_wake);
  }
  return b;
}

/* How long a calling thread's own write may wait for a pipe's reader. */
static uint64_t caller_deadline(void) {
  uint64_t exit_deadline = __atomic_load_n(&state.give_up_ns, __ATOMIC_ACQUIRE);
  if (gs_opt.log_wait) return exit_deadline;
  uint64_t mine = monotonic_ns() + LOG_WAIT_MS * 1000000ull;
  return exit_deadline && exit_deadline < mine ? exit_deadline : mine;
}

/* Whether c's text fits LOG_RECORD_MAX. Only asked when the bound says it
 * might not: a backend name of many tens of bytes. */
static __attribute__((noinline)) int text_fits(const gs_call *c) {
  char rec[LOG_RECORD_MAX];
  return log_format(c, rec, sizeof rec) != 0;
}

void log_record(gs_call *c) {
  if (__builtin_expect(!__atomic_load_n(&log_wanted, __ATOMIC_RELAXED), 1)) {
    if (c->work_begun && c->gpu.on) gpu_time_discard(&c->gpu);
    return;
  }
  int to_file = __atomic_load_n(&state.on, __ATOMIC_RELAXED) && !is_disabled();
  size_t reason_len = 0, backend_len = 0;
  int fits = 1;
  if (to_file) {
    reason_len = strnlen(c->reason, sizeof c->reason);
    backend_len = c->backend ? strlen(c->backend) : 0;
    if (rec_text_bound(reason_len, backend_len) > LOG_RECORD_MAX) fits = text_fits(c);
  }
  pthread_mutex_lock(&state.mu);
  if (state.counting) count_call(c);
  int b = -1;
  size_t len = 0;
  if (to_file && !fits) {
    state.dropped++;
    if (!state.warned_too_long++)
      GS_WARN("GEMMSHIM_LOG: record %" PRIu64 " is longer than %d bytes and was dropped; later ones too, counted at exit",
              c->seq, LOG_RECORD_MAX);
  } else if (to_file && !is_disabled()) {
    b = append_locked(c, reason_len, backend_len, &len);
  }
  pthread_mutex_unlock(&state.mu);
  /* Not recorded (append_locked takes them when it copies the record):
   * the events go back unread. */
  if (c->work_begun && c->gpu.on) gpu_time_discard(&c->gpu);
  if (b >= 0) {
    uint64_t deadline = caller_deadline();
    write_buffer(b, len, &deadline);
  }
}

/* What is buffered and what is held for its GPU work, then the notice of
 * records lost after it, which a full buffer had no room for. After
 * log_shutdown (state.late) every held record is written, done or not:
 * each write takes at most LOG_HELD_PER_WRITE of them and at least one
 * record, so the rounds end. */
static void flush_pending(void) { flush_pending_until(&state.give_up_ns, 0); }

/* flush_pending, its writes waiting for a pipe's reader until *deadline
 * (0: no bound); wait_until (monotonic ns), when not 0, bounds the wait for
 * a write already in flight too: nothing is written if it has not ended by
 * then. */
static void flush_pending_until(const volatile uint64_t *deadline, uint64_t wait_until) {
  for (int notice_again = 0;;) {
    pthread_mutex_lock(&state.mu);
    if (!wait_until) {
      wait_write_locked();
    } else if (!wait_write_until_locked(wait_until)) {
      pthread_mutex_unlock(&state.mu);
      return;
    }
    int b = -1;
    size_t len = 0;
    int open = state.out.fd >= 0 && state.buf[0] && !is_disabled();
    if (open && state.lost_pending) lost_notice_locked(0, 0);
    if (open && (state.fill > 0 || __atomic_load_n(&held_count, __ATOMIC_RELAXED))) b = swap_locked(&len);
    int again = open && state.lost_pending, final = state.late;
    pthread_mutex_unlock(&state.mu);
    if (b >= 0) write_buffer(b, len, deadline);
    if (final && b >= 0 && __atomic_load_n(&held_count, __ATOMIC_RELAXED)) continue;
    if (!again || notice_again++) break;
  }
}

void log_flush(void) {
  pthread_once(&log_once, log_setup_once);
  flush_pending();
}

/* Before the process image is replaced (exec.c), which runs no exit
 * handler: what is buffered is written now. The wait for a write in flight
 * and for a pipe's reader is bounded as at exit (LOG_EXIT_WAIT_MS; none
 * with GEMMSHIM_LOG_WAIT=1), so an exec is never held up for good by a
 * reader that stopped: what does not go out then is lost with the image,
 * as without this. Records held for unfinished GPU work stay held (the
 * exec may fail, and the process go on). */
void log_flush_before_exec(void) {
  if (!__atomic_load_n(&state.on, __ATOMIC_RELAXED) || is_disabled()) return;
  pthread_once(&log_once, log_setup_once);
  uint64_t deadline = gs_opt.log_wait ? 0 : monotonic_ns() + LOG_EXIT_WAIT_MS * 1000000ull;
  flush_pending_until(&deadline, deadline);
}

/* ---- fork ----------------------------------------------------------------- */
/* state.mu is never held across a write or a wait on one, so taking it
 * here delays a fork by a memcpy at most; the child then gets it in a
 * known state. From here to the parent's or the child's handler the
 * forking thread holds it, through the other libraries' prepare handlers
 * and the child's close below, with cancellation off (cancel.c): a
 * cancellation point there must not unwind the thread with state.mu held. */
static void atfork_prepare(void) {
  cancel_enter();
  pthread_mutex_lock(&state.mu);
}

static void atfork_parent(void) {
  pthread_mutex_unlock(&state.mu);
  cancel_leave();
}

/* The child's only thread runs this holding state.mu (from prepare). The
 * parent's buffered records stay the parent's to write; its flusher thread,
 * a buffer handed to it and any write in flight do not exist here. The
 * child opens its own path at its first record, appending like anyone
 * (a shared name is shared, %p gives it its own file). */
static void atfork_child(void) {
  /* A log named by a descriptor was resolved once, in the parent: the child
   * keeps its copy of the parent's duplicate (or the log off), since the
   * number may name another file by now. */
  if (!state.path[0] || file_names_descriptor(state.path) < 0) {
    file_close(&state.out);
    state.path[0] = '\0';
    __atomic_store_n(&state.disabled, 0, __ATOMIC_RELAXED);
  }
  state.late = 0;
  state.fill = 0;
  state.text_fill = 0;
  state.writing = 0;
  state.waiters = 0;
  state.gave_up_gen = 0;
  state.give_up_ns = 0;
  state.flusher_state = FLUSHER_NONE;
  state.flusher_stop = 0;
  state.flusher_idle = 0;
  state.handoff_len = 0;
  state.lost = state.lost_pending = 0;
  state.carry_len = 0;
  state.dropped = 0;
  state.warned_too_long = 0;
  state.warned_reopened = 0;
  state.last_flush_ns = monotonic_ns();
  held.len = 0; /* the parent's records, as the buffers above; their events are the parent's */
  __atomic_store_n(&held_count, 0, __ATOMIC_RELAXED);
  lost_held = 0;
  gpu_exit_deadline = 0;
  reset_stats();
  init_conds();
  pthread_mutex_unlock(&state.mu);
  cancel_leave(); /* atfork_prepare's, on this thread's copy */
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
  __atomic_store_n(&state.give_up_ns, 0, __ATOMIC_RELEASE); /* a previous run's exit deadline */
  stop_flusher();
  pthread_mutex_lock(&state.mu);
  wait_write_locked();
  file_close(&state.out);
  snprintf(state.pattern, sizeof state.pattern, "%s", gs_opt.log_path);
  __atomic_store_n(&state.on, state.pattern[0] != '\0', __ATOMIC_RELAXED);
  state.counting = gs_debug_level >= GS_LEVEL_INFO;
  state.path[0] = '\0';
  __atomic_store_n(&state.disabled, 0, __ATOMIC_RELAXED);
  state.late = 0;
  state.cur = 0;
  state.fill = 0;
  state.text_fill = 0;
  state.gave_up_gen = 0;
  __atomic_store_n(&state.give_up_ns, 0, __ATOMIC_RELEASE);
  state.lost = state.lost_pending = 0;
  state.carry_len = 0;
  state.dropped = 0;
  state.warned_too_long = 0;
  state.warned_reopened = 0;
  state.flusher_state = FLUSHER_NONE; /* a failed start is retried */
  for (size_t at = 0; at < held.len; at += ((log_rec *)(void *)(held.buf + at))->size) {
    gs_gpu_time *gpu = rec_gpu((log_rec *)(void *)(held.buf + at));
    if (gpu && gpu->on) gpu_time_discard(gpu);
  }
  held.len = 0;
  __atomic_store_n(&held_count, 0, __ATOMIC_RELAXED);
  lost_held = 0;
  gpu_exit_deadline = 0;
  reset_stats();
  __atomic_store_n(&log_wanted, state.on || state.counting, __ATOMIC_RELAXED);
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
  char q[GS_QUOTE_BUF];
  pthread_mutex_lock(&state.mu);
  gs_quote(state.path, q);
  if (gs_debug_level >= GS_LEVEL_INFO) {
    summary_routes_locked();
    summary_top_locked();
  }
  if (state.dropped)
    GS_WARN("GEMMSHIM_LOG: %" PRIu64 " records dropped (longer than a record may be); '%s' misses them",
            state.dropped, q);
  if (state.lost)
    GS_WARN("GEMMSHIM_LOG: %" PRIu64 " records lost because the log writer fell behind (a call waits at most %d ms, "
            "exit at most %d ms; GEMMSHIM_LOG_WAIT=1 waits instead); '%s' misses them",
            state.lost, LOG_WAIT_MS, LOG_EXIT_WAIT_MS, q);
  if (lost_held)
    GS_WARN("GEMMSHIM_LOG: of those, %" PRIu64 " found more than %u bytes of records waiting for their GPU work",
            lost_held, LOG_HELD_BYTES);
  pthread_mutex_unlock(&state.mu);
}

void log_shutdown(void) {
  pthread_once(&log_once, log_setup_once);
  pthread_mutex_lock(&state.mu);
  __atomic_store_n(&state.late, 1, __ATOMIC_RELAXED); /* calls from later destructors are still written */
  if (!gs_opt.log_wait)
    __atomic_store_n(&state.give_up_ns, monotonic_ns() + LOG_EXIT_WAIT_MS * 1000000ull, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&state.mu);
  if (!stop_flusher()) {
    /* Its write never ended: the log is off, and what it still held is
     * lost (the buffer in its hands, and what came after). The descriptor
     * and buffers stay as they are: that write still uses them. */
    char q[GS_QUOTE_BUF];
    pthread_mutex_lock(&state.mu);
    __atomic_store_n(&state.disabled, 1, __ATOMIC_RELAXED);
    for (size_t at = 0; at < state.fill;) {
      const log_rec *r = (const log_rec *)(const void *)(state.buf[state.cur] + at);
      if (r->kind != LOG_REC_TEXT) count_lost_locked(r->seq);
      at += r->size;
    }
    gs_quote(state.path, q);
    pthread_mutex_unlock(&state.mu);
    GS_WARN("GEMMSHIM_LOG: a write to '%s' did not end within %d ms of the exit (a terminal or pipe that stopped "
            "reading); the records it held and those after it are lost",
            q, LOG_EXIT_WAIT_MS + LOG_JOIN_SLACK_MS);
  } else {
    log_flush();
  }
  print_summary();
}
