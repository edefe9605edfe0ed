/* log_format.c: a log record (log_format.h) as one line of JSON, in the
 * format docs/log-format.md gives. The writer runs this for every record,
 * so it is written for speed: one formatter, always inlined into two
 * instances, a checked one that tests room before each piece and an
 * unchecked one for output known to have room for the record's longest
 * text; numbers without division where it can, enum names from tables made
 * once, strings escaped 8 bytes at a time when nothing in them needs it.
 * log_format is the same formatter on a gs_call, for the unit tests and
 * for the one place (log.c's text_fits) that must know a record's length
 * before it is copied.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h> /* not cublas_api.h: CUDA 12's needs CUBLASAPI, which this defines */

#include "log_format.h"

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

/* The enums a record prints by name: X(names, count, name), a table
 * names_text of count ready texts (values 0..count-1) and the function that
 * names every value. Sized for the values in use: cudaDataType_t is below
 * 64, the compute types 64..79, the common epilogues below 64,
 * cublasStatus_t below 32. */
#define LOG_ENUMS(X)                \
  X(type, 64, gs_type_name)         \
  X(compute, 128, gs_compute_name)  \
  X(epilogue, 64, gs_epilogue_name) \
  X(status, 32, status_name)        \
  X(op, 8, gs_op_name)              \
  X(api, 8, api_name)               \
  X(route, 8, route_name)           \
  X(pointer_mode, 8, pointer_mode_name) \
  X(recipe, 8, gs_fp8_recipe_name)

#define ENUM_TABLE(names, count, name) static enum_text names##_text[count];
LOG_ENUMS(ENUM_TABLE)

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

#define FILL_ENUM_TEXTS(names, count, name) fill_enum_texts(names##_text, (count), (name));

static pthread_once_t name_tables_once = PTHREAD_ONCE_INIT;
static int name_tables_ready; /* spares each record a call into pthread_once */

static void name_tables_init(void) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 256; i++) hex_pairs[2 * i] = hex[i >> 4], hex_pairs[2 * i + 1] = hex[i & 15];
  LOG_ENUMS(FILL_ENUM_TEXTS)
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

/* put_enum_type(o, value, ck) and the like: ENUM(type) in GS_LOG_FIELDS. */
#define PUT_ENUM_OF(names, count, name)                              \
  FMT_INLINE void put_enum_##names(json_out *o, int value, int ck) { \
    put_enum(o, names##_text, (count), (name), value, ck);           \
  }
LOG_ENUMS(PUT_ENUM_OF)

/* ---- one record ----------------------------------------------------------- */
/* The values GS_LOG_FIELDS prints with OWN(name), each its own way. A
 * stored field's handler gets its value, one without a member (none) the
 * record and its GPU block. */
FMT_INLINE void fmt_sm(json_out *o, int sm, int ck) {
  if (sm < 0) {
    PUT_LIT(o, "null", ck);
  } else {
    PUT_LIT(o, "\"", ck), put_u64(o, (unsigned)sm / 10, ck);
    PUT_LIT(o, ".", ck), put_u64(o, (unsigned)sm % 10, ck), PUT_LIT(o, "\"", ck);
  }
}

FMT_INLINE void fmt_site_event(json_out *o, uint32_t flags, int ck) {
  switch (flags & (GS_SITE_NEW | GS_SITE_EVICTED)) {
    case GS_SITE_NEW: PUT_LIT(o, "\"new\"", ck); break;
    case GS_SITE_EVICTED: PUT_LIT(o, "\"evicted\"", ck); break;
    default: PUT_LIT(o, "\"new,evicted\"", ck); break;
  }
}

FMT_INLINE void fmt_status_name(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  PUT_LIT(o, "\"", ck), put_enum_status(o, r->status, ck);
}

FMT_INLINE void fmt_gpu_ns(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  put_u64(o, gpu->gpu_ns, ck);
}

FMT_INLINE void fmt_gpu_ns_kernels(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  put_u64(o, gpu->kernels_ns, ck);
}

FMT_INLINE void fmt_native_gpu_ns(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  put_u64(o, gpu->native_ns, ck);
}

/* An accuracy figure (accuracy.c): a JSON number, or the strings "inf" and
 * "-inf" (JSON has no infinity). fmt: "%.2f" for dB, "%.4g" for ratios. */
static void put_figure(json_out *o, double v, const char *fmt, int ck) {
  char t[48];
  int n;
  if (v != v) n = snprintf(t, sizeof t, "\"nan\"");
  else if (v > 1e300) n = snprintf(t, sizeof t, "\"inf\"");
  else if (v < -1e300) n = snprintf(t, sizeof t, "\"-inf\"");
  else n = snprintf(t, sizeof t, fmt, v);
  if (n > 0 && (size_t)n < sizeof t) put_bytes(o, t, (size_t)n, ck);
}

FMT_INLINE void fmt_sqnr_db(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  put_figure(o, gpu->acc_sqnr_db, "%.2f", ck);
}

FMT_INLINE void fmt_max_rel(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  put_figure(o, gpu->acc_max_rel, "%.4g", ck);
}

FMT_INLINE void fmt_nonfinite_mismatch(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  put_u64(o, gpu->acc_mismatch, ck);
}

FMT_INLINE void fmt_rel_err_p50(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  put_figure(o, gpu->acc_p50, "%.4g", ck);
}

FMT_INLINE void fmt_rel_err_p99(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  put_figure(o, gpu->acc_p99, "%.4g", ck);
}

/* The fp8 statistics (routes/fp8_stats.c): amax as the fp32 it is (9
 * significant digits give its bits back), the scale as TransformerEngine
 * writes it (x8 = x * scale) from the step the kernels divide by, rounded
 * to fp32; counts as integers. */
static void put_fp8_scale(json_out *o, float step, int ck) {
  put_figure(o, step > 0 ? (double)(float)(1.0 / (double)step) : __builtin_inf(), "%.9g", ck);
}
#define FMT_FP8_OPERAND(x, i)                                                                              \
  FMT_INLINE void fmt_##x##_amax(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {          \
    put_figure(o, (double)gpu->fp8[i].amax, "%.9g", ck);                                                  \
  }                                                                                                        \
  FMT_INLINE void fmt_##x##_scale(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {         \
    put_fp8_scale(o, gpu->fp8[i].step, ck);                                                                \
  }                                                                                                        \
  FMT_INLINE void fmt_##x##_elems(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {         \
    put_u64(o, gpu->fp8[i].elems, ck);                                                                     \
  }                                                                                                        \
  FMT_INLINE void fmt_##x##_sat(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {           \
    put_u64(o, gpu->fp8[i].saturated, ck);                                                                 \
  }                                                                                                        \
  FMT_INLINE void fmt_##x##_flush(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {         \
    put_u64(o, gpu->fp8[i].flushed, ck);                                                                   \
  }                                                                                                        \
  FMT_INLINE void fmt_##x##_worst_sat(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {     \
    put_figure(o, gpu->fp8[i].worst_sat, "%.6g", ck);                                                     \
  }                                                                                                        \
  FMT_INLINE void fmt_##x##_worst_sat_block(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) { \
    put_u64(o, gpu->fp8[i].worst_sat_block, ck);                                                           \
  }                                                                                                        \
  FMT_INLINE void fmt_##x##_worst_flush(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {   \
    put_figure(o, gpu->fp8[i].worst_flush, "%.6g", ck);                                                   \
  }                                                                                                        \
  FMT_INLINE void fmt_##x##_worst_flush_block(json_out *o, const log_rec *r, const gs_gpu_time *gpu,       \
                                               int ck) {                                                   \
    put_u64(o, gpu->fp8[i].worst_flush_block, ck);                                                         \
  }
FMT_FP8_OPERAND(a, 0)
FMT_FP8_OPERAND(b, 1)

FMT_INLINE void fmt_gpu_skipped(json_out *o, const log_rec *r, const gs_gpu_time *gpu, int ck) {
  const char *why = gpu_time_skip_name(gpu->skip);
  PUT_LIT(o, "\"", ck), put_bytes(o, why, strlen(why), ck), PUT_LIT(o, "\"", ck);
}

/* ADDR and ID values; the opening quote (and "0x") end the key. */
FMT_INLINE void put_addr(json_out *o, uint64_t v, int ck) { put_hex(o, v, 1, ck), PUT_LIT(o, "\"", ck); }
FMT_INLINE void put_id(json_out *o, uint64_t v, int ck) { put_hex(o, v, 16, ck), PUT_LIT(o, "\"", ck); }

/* One GS_LOG_FIELDS line as formatter code: when the key is there, the
 * key (with what opens its value) and the value. */
#define FMT_FIELD(key, type, kind, when, from) \
  if (WHEN_##when(key)) PUT_LIT(o, ",\"" #key "\":" OPEN_##kind, ck), PUT_##kind(o, VALUE_##type(key), ck);

#define WHEN_ALWAYS(key) 1
#define WHEN_SET(key) (r->key != -1)
#define WHEN_LT(key) lt
#define WHEN_LT_SET(key) (lt && r->key != -1)
#define WHEN_GEMM_EX(key) (!lt)
#define WHEN_BIAS(key) r->has_bias
#define WHEN_BACKEND(key) r->has_backend
#define WHEN_RECIPE(key) (r->key != 0)
#define WHEN_CAPTURED(key) (r->key != 0)
#define WHEN_SITE_EVENT(key) (r->key & (GS_SITE_NEW | GS_SITE_EVICTED))
#define WHEN_EVICTED(key) (r->site_event & GS_SITE_EVICTED)
#define WHEN_GPU_NS(key) (gpu && gpu->has_gpu_ns)
#define WHEN_GPU_KERNELS(key) (gpu && gpu->has_gpu_ns && gpu->has_kernels_ns)
#define WHEN_GPU_NATIVE(key) (gpu && gpu->has_gpu_ns && gpu->has_native_ns)
#define WHEN_GPU_ACC(key) (gpu && gpu->has_gpu_ns && gpu->has_acc)
#define WHEN_GPU_ACC_Q(key) (gpu && gpu->has_gpu_ns && gpu->has_acc && gpu->has_acc_quantiles)
#define WHEN_GPU_FP8(key) (gpu && gpu->has_gpu_ns && gpu->has_fp8)
#define WHEN_GPU_FP8_BLOCKS(key) (gpu && gpu->has_gpu_ns && gpu->has_fp8 && gpu->fp8_blocks)
#define WHEN_GPU_SKIPPED(key) (gpu && !gpu->has_gpu_ns && gpu_time_skip_name(gpu->skip))

#define OPEN_U64 ""
#define OPEN_I64 ""
#define OPEN_ENUM(names) "\""
#define OPEN_ADDR "\"0x"
#define OPEN_ID "\""
#define OPEN_STRING "\""
#define OPEN_OWN(name) ""

#define PUT_U64 put_u64
#define PUT_I64 put_i64
#define PUT_ENUM(names) put_enum_##names
#define PUT_ADDR put_addr
#define PUT_ID put_id
#define PUT_STRING put_string
#define PUT_OWN(name) fmt_##name

#define VALUE_u64(key) r->key
#define VALUE_i64(key) r->key
#define VALUE_i32(key) r->key
#define VALUE_u32(key) r->key
#define VALUE_str(key) key, r->key##_len /* format_body's argument of that name */
#define VALUE_none(key) r, gpu

/* Keys and values in GS_LOG_FIELDS's order. Every key is written with the
 * comma that separates it from the one before; the first one's becomes
 * the opening brace (the first key, seq, is always there). */
FMT_INLINE void format_body(json_out *o, const log_rec *r, const gs_gpu_time *gpu, const char *backend,
                            const char *reason, int ck) {
  int lt = r->api == GS_API_LT_MATMUL;
  char *first = o->p;
  GS_LOG_FIELDS(FMT_FIELD)
  PUT_LIT(o, "}\n", ck);
  *first = '{';
}

size_t log_rec_format(const log_rec *r, const gs_gpu_time *gpu, const char *backend, const char *reason, char *buf,
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
  log_rec_fill(&r, c, reason_len, backend_len);
  gs_gpu_time gpu;
  int has_gpu = gpu_time_wanted();
  if (has_gpu) log_rec_fill_gpu(&gpu, c);
  return log_rec_format(&r, has_gpu ? &gpu : NULL, c->backend, c->reason, buf, len);
}
