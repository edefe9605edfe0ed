/* policy.c: the policy table (see policy.h): the built-in rules, the policy
 * file parser, matching, and the one-line descriptions the routing log
 * quotes as reasons.
 *
 * Matching runs on every intercepted GEMM, so a rule is only bit masks and
 * bounds, and policy_match is a loop of compares. The parser runs once at
 * load and is where the care goes: every malformed input is refused with a
 * message that quotes what was found and says what would be accepted. */
#include "policy.h"

#include <library_types.h>
#include <cublas_v2.h> /* not cublas_api.h: CUDA 12's needs CUBLASAPI, which this defines */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SM(major, minor) ((major) * 10 + (minor))
#define SM_LO_OPEN 0    /* policy.h: an unbounded side of an sm range */
#define SM_HI_OPEN 1000
#define ANY_TYPES UINT64_MAX
#define ANY_APIS UINT32_MAX
#define ANY_CALLERS UINT32_MAX
#define APP_CALLER ((uint32_t)1 << GS_CALLER_APP) /* policy.h: no caller key */
#define COMPUTE_BIT_BASE 64 /* policy.h: bit (v - 64) for a compute type */
#define TYPE_BIT(v) ((uint64_t)1 << (v))
#define COMPUTE_BIT(v) ((uint64_t)1 << ((v) - COMPUTE_BIT_BASE))
#define LINE_MAX_CHARS 1024
#define SHOWN_MAX 48 /* found text is cut after this many bytes in messages */

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------ */
/* Built-in rules. GPUs before sm_80 have no bf16 tensor cores, so there a
 * bf16 GEMM with fp32 accumulation leaves cuBLAS's bf16 path: on sm_7.x,
 * whose fp16 tensor cores run 5-18 times its bf16 rate, to the fp16 route;
 * on sm_6.x, which has none, to the ffma route. Everything else stays with
 * cuBLAS. */
static const policy_rule builtin_rules[] = {
    {.route = GS_ROUTE_FP16,
     .has_sm = 1, .sm_lo = SM(7, 0), .sm_hi = SM(7, 5),
     .ab_types = TYPE_BIT(CUDA_R_16BF),
     .c_types = ANY_TYPES,
     .compute_types = COMPUTE_BIT(CUBLAS_COMPUTE_32F),
     .apis = ANY_APIS,
     .callers = APP_CALLER},
    {.route = GS_ROUTE_FFMA,
     .has_sm = 1, .sm_lo = SM(6, 0), .sm_hi = SM(6, 9),
     .ab_types = TYPE_BIT(CUDA_R_16BF),
     .c_types = ANY_TYPES,
     .compute_types = COMPUTE_BIT(CUBLAS_COMPUTE_32F),
     .apis = ANY_APIS,
     .callers = APP_CALLER},
    {.route = GS_ROUTE_NATIVE,
     .has_sm = 0, .sm_lo = SM_LO_OPEN, .sm_hi = SM_HI_OPEN,
     .ab_types = ANY_TYPES,
     .c_types = ANY_TYPES,
     .compute_types = ANY_TYPES,
     .apis = ANY_APIS,
     .callers = APP_CALLER},
};
#define BUILTIN_COUNT ((int)COUNT_OF(builtin_rules))

void policy_builtin(policy_table *t) {
  memcpy(t->rules, builtin_rules, sizeof builtin_rules);
  t->n = BUILTIN_COUNT;
  t->n_file = 0;
  t->has_site_keys = 0;
  t->source[0] = '\0';
}

/* ------------------------------------------------------------------------ */
/* Matching. A value that has no bit (out of range) matches only "any". */
static uint64_t type_bit(int v) {
  return (v >= 0 && v < 64) ? (uint64_t)1 << v : 0;
}

static uint64_t compute_bit(int v) {
  return (v >= COMPUTE_BIT_BASE && v < COMPUTE_BIT_BASE + 64)
             ? (uint64_t)1 << (v - COMPUTE_BIT_BASE) : 0;
}

static uint32_t bit32(int v) {
  return (v >= 0 && v < 32) ? (uint32_t)1 << v : 0;
}

static int sm_allowed(const policy_rule *r, int sm) {
  if (!r->has_sm) return 1;
  return sm != POLICY_SM_UNKNOWN && sm >= r->sm_lo && sm <= r->sm_hi;
}

/* One predicate per key, shared by matching and by policy_rule_misses. */
static int ab_fits(const policy_rule *r, uint64_t a, uint64_t b) {
  return r->ab_types == ANY_TYPES || ((r->ab_types & a) && (r->ab_types & b));
}
static int c_fits(const policy_rule *r, uint64_t c) { return r->c_types == ANY_TYPES || (r->c_types & c); }
static int compute_fits(const policy_rule *r, uint64_t compute) {
  return r->compute_types == ANY_TYPES || (r->compute_types & compute);
}
static int api_fits(const policy_rule *r, uint32_t api) { return r->apis == ANY_APIS || (r->apis & api); }
static int caller_fits(const policy_rule *r, uint32_t caller) {
  return r->callers == ANY_CALLERS || (r->callers & caller) != 0;
}

static int64_t key_dim(const policy_key *k, int d) {
  return d == POLICY_DIM_M ? k->m : d == POLICY_DIM_N ? k->n : d == POLICY_DIM_K ? k->k : k->batch;
}
static int dim_fits(const policy_rule *r, const policy_key *k, int d) {
  if (!(r->has_dim & (1u << d))) return 1;
  int64_t v = key_dim(k, d);
  return v >= r->dim_lo[d] && v <= r->dim_hi[d];
}
static int dims_fit(const policy_rule *r, const policy_key *k) {
  if (!r->has_dim) return 1;
  for (int d = 0; d < POLICY_DIMS; d++)
    if (!dim_fits(r, k, d)) return 0;
  return 1;
}
static int site_fits(const policy_rule *r, const policy_key *k) {
  if (!r->n_sites) return 1;
  for (int i = 0; i < r->n_sites; i++)
    if (r->sites[i] == k->site) return 1;
  return 0;
}

/* Everything but the device: the types, compute type, entry point,
 * caller, sizes and site. */
static int rule_fits(const policy_rule *r, uint64_t a, uint64_t b, uint64_t c, uint64_t compute, uint32_t api,
                     uint32_t caller, const policy_key *k) {
  return ab_fits(r, a, b) && c_fits(r, c) && compute_fits(r, compute) && api_fits(r, api) &&
         caller_fits(r, caller) && dims_fit(r, k) && site_fits(r, k);
}

unsigned policy_rule_misses(const policy_table *t, int i, const policy_key *k) {
  const policy_rule *r = &t->rules[i];
  unsigned misses = 0;
  if (!sm_allowed(r, k->sm)) misses |= POLICY_MISS_SM;
  if (!ab_fits(r, type_bit(k->a_type), type_bit(k->b_type))) misses |= POLICY_MISS_AB;
  if (!c_fits(r, type_bit(k->c_type))) misses |= POLICY_MISS_C;
  if (!compute_fits(r, compute_bit(k->compute_type))) misses |= POLICY_MISS_COMPUTE;
  if (!api_fits(r, bit32((int)k->api))) misses |= POLICY_MISS_API;
  if (!caller_fits(r, bit32((int)k->caller))) misses |= POLICY_MISS_CALLER;
  for (int d = 0; d < POLICY_DIMS; d++)
    if (!dim_fits(r, k, d)) misses |= POLICY_MISS_DIM(d);
  if (!site_fits(r, k)) misses |= POLICY_MISS_SITE;
  return misses;
}

int policy_match_in(const policy_table *t, const policy_key *k, int first, int end) {
  uint64_t a = type_bit(k->a_type), b = type_bit(k->b_type), c = type_bit(k->c_type);
  uint64_t compute = compute_bit(k->compute_type);
  uint32_t api = bit32((int)k->api), caller = bit32((int)k->caller);
  if (end > t->n) end = t->n;
  for (int i = first < 0 ? 0 : first; i < end; i++) {
    const policy_rule *r = &t->rules[i];
    if (sm_allowed(r, k->sm) && rule_fits(r, a, b, c, compute, api, caller, k)) return i;
  }
  return -1;
}

int policy_match(const policy_table *t, const policy_key *k) { return policy_match_in(t, k, 0, t->n); }

int policy_route_without_sm(const policy_table *t, const policy_key *k) {
  uint64_t a = type_bit(k->a_type), b = type_bit(k->b_type), c = type_bit(k->c_type);
  uint64_t compute = compute_bit(k->compute_type);
  uint32_t api = bit32((int)k->api), caller = bit32((int)k->caller);
  int route_of_sm_rules = -1; /* the one route every earlier sm-keyed fit names */
  for (int i = 0; i < t->n; i++) {
    const policy_rule *r = &t->rules[i];
    if (!rule_fits(r, a, b, c, compute, api, caller, k)) continue;
    if (r->has_sm) {
      if (route_of_sm_rules == -1) route_of_sm_rules = (int)r->route;
      else if (route_of_sm_rules != (int)r->route) return -1;
      continue;
    }
    /* The first rule without an sm key ends the search whatever the device. */
    return route_of_sm_rules == -1 || route_of_sm_rules == (int)r->route ? (int)r->route : -1;
  }
  return -1;
}

/* ------------------------------------------------------------------------ */
/* Text output with snprintf semantics: total counts what would have been
 * written, buf always ends in a NUL when len > 0. */
typedef struct text_out {
  char *buf;
  size_t len;
  size_t total;
} text_out;

__attribute__((format(printf, 2, 3)))
static void out_printf(text_out *o, const char *fmt, ...) {
  size_t room = o->total < o->len ? o->len - o->total : 0;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(room ? o->buf + o->total : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) o->total += (size_t)n;
}

typedef const char *(*name_at_fn)(int value);

/* The names a list key accepts: bit b of a rule's mask stands for value
 * first + b, and a mask has width bits. */
typedef struct list_kind {
  const char *noun;
  int (*parse)(const char *s, size_t len);
  name_at_fn name_at;
  int first;
  int width;
} list_kind;

static const char *api_name_at(int v) { return gs_api_name((gs_api)v); }
static const char *route_name_at(int v) { return gs_route_name((gs_route)v); }

static const list_kind type_list = {"type", gs_type_parse, gs_type_name, 0, 64};
static const list_kind compute_list = {"compute type", gs_compute_parse, gs_compute_name,
                                       COMPUTE_BIT_BASE, 64};
static const list_kind api_list = {"entry point", gs_api_parse, api_name_at, 0, 32};
static const char *caller_name_at(int v) { return gs_caller_name((gs_caller)v); }
static const list_kind caller_list = {"caller", gs_caller_parse, caller_name_at, 0, GS_CALLER_COUNT};

/* "a, b or c" over every named value in [first, first+count), then extra. */
static void out_alternatives(text_out *o, name_at_fn name_at, int first, int count,
                             const char *extra) {
  const char *pending = NULL;
  int printed = 0;
  for (int v = first; v < first + count; v++) {
    const char *name = name_at(v);
    if (!name) continue;
    if (pending) out_printf(o, "%s%s", printed++ ? ", " : "", pending);
    pending = name;
  }
  if (extra) {
    if (pending) out_printf(o, "%s%s", printed++ ? ", " : "", pending);
    pending = extra;
  }
  if (pending) out_printf(o, "%s%s", printed ? " or " : "", pending);
}

/* ------------------------------------------------------------------------ */
/* Describing a rule in the file's own syntax. */
static const char *const dim_names[POLICY_DIMS] = {"m", "n", "k", "batch"};

static void out_sm_value(text_out *o, int sm) {
  out_printf(o, "%d.%d", sm / 10, sm % 10);
}

static void out_sm(text_out *o, const policy_rule *r) {
  out_printf(o, " sm=");
  if (r->sm_lo == r->sm_hi) {
    out_sm_value(o, r->sm_lo);
    return;
  }
  if (r->sm_lo != SM_LO_OPEN) out_sm_value(o, r->sm_lo);
  out_printf(o, "-");
  if (r->sm_hi != SM_HI_OPEN) out_sm_value(o, r->sm_hi);
}

static void out_list(text_out *o, const char *key, uint64_t bits, const list_kind *kind) {
  out_printf(o, " %s=", key);
  const char *sep = "";
  for (int b = 0; b < kind->width; b++) {
    if (!(bits & ((uint64_t)1 << b))) continue;
    const char *name = kind->name_at(kind->first + b);
    if (name) out_printf(o, "%s%s", sep, name);
    else out_printf(o, "%sunknown(%d)", sep, kind->first + b);
    sep = ",";
  }
}

static void out_rule(text_out *o, const policy_rule *r) {
  const char *route = gs_route_name(r->route);
  if (route) out_printf(o, "%s", route);
  else out_printf(o, "unknown(%d)", (int)r->route);
  if (r->has_sm) out_sm(o, r);
  if (r->ab_types != ANY_TYPES) out_list(o, "ab", r->ab_types, &type_list);
  if (r->c_types != ANY_TYPES) out_list(o, "c", r->c_types, &type_list);
  if (r->compute_types != ANY_TYPES) out_list(o, "compute", r->compute_types, &compute_list);
  if (r->apis != ANY_APIS) out_list(o, "api", r->apis, &api_list);
  if (r->callers == ANY_CALLERS) out_printf(o, " caller=any");
  else if (r->callers != APP_CALLER) out_list(o, "caller", r->callers, &caller_list);
  for (int d = 0; d < POLICY_DIMS; d++) {
    if (!(r->has_dim & (1u << d))) continue;
    out_printf(o, " %s=", dim_names[d]);
    if (r->dim_lo[d] == r->dim_hi[d]) {
      out_printf(o, "%lld", (long long)r->dim_lo[d]);
      continue;
    }
    /* 0- (every size) keeps its 0: a lone "-" would not parse again */
    if (r->dim_lo[d] != 0 || r->dim_hi[d] == INT64_MAX) out_printf(o, "%lld", (long long)r->dim_lo[d]);
    out_printf(o, "-");
    if (r->dim_hi[d] != INT64_MAX) out_printf(o, "%lld", (long long)r->dim_hi[d]);
  }
  for (int i = 0; i < r->n_sites; i++)
    out_printf(o, "%s%016llx", i ? "," : " site=", (unsigned long long)r->sites[i]);
}

/* Built-in rules have no line, so they are numbered among themselves. */
static int builtin_number(const policy_table *t, int i) {
  int number = 0;
  for (int j = 0; j <= i; j++)
    if (t->rules[j].line == 0) number++;
  return number;
}

int policy_rule_describe(const policy_table *t, int i, char *buf, size_t len) {
  text_out o = {buf, len, 0};
  if (len > 0) buf[0] = '\0';
  if (i < 0 || i >= t->n) {
    out_printf(&o, "no rule %d", i);
    return (int)o.total;
  }
  const policy_rule *r = &t->rules[i];
  if (r->line == 0) out_printf(&o, "built-in rule %d (", builtin_number(t, i));
  else out_printf(&o, "%s:%d (", t->source, r->line);
  out_rule(&o, r);
  out_printf(&o, ")");
  return (int)o.total;
}

/* ------------------------------------------------------------------------ */
/* Parsing. The file is never copied: lines and tokens are spans of it. */
typedef struct span {
  const char *s;
  size_t len;
} span;

typedef struct parser {
  policy_table *t;
  const char *path;
  int line;
  char *err;
  size_t errlen;
  int builtin_on;
} parser;

/* Found text quoted in a message: escaped and cut short, so a control byte
 * or a 1000-byte token cannot garble the message or push out its
 * "expected" part. Returned by value so a call can sit in fail()'s
 * argument list. */
typedef struct shown {
  char s[SHOWN_MAX * 4 + 4];
} shown;

static shown show(span text) {
  shown out;
  text_out o = {out.s, sizeof out.s, 0};
  out.s[0] = '\0';
  for (size_t i = 0; i < text.len; i++) {
    unsigned char c = (unsigned char)text.s[i];
    if (i == SHOWN_MAX) {
      out_printf(&o, "...");
      break;
    }
    if (c >= 0x20 && c < 0x7f) out_printf(&o, "%c", c);
    else out_printf(&o, "\\x%02x", c);
  }
  return out;
}

typedef struct name_list {
  char s[512];
} name_list;

static name_list alternatives(name_at_fn name_at, int first, int count, const char *extra) {
  name_list out;
  text_out o = {out.s, sizeof out.s, 0};
  out.s[0] = '\0';
  out_alternatives(&o, name_at, first, count, extra);
  return out;
}

__attribute__((format(printf, 2, 3)))
static int fail(parser *p, const char *fmt, ...) {
  if (p->err == NULL || p->errlen == 0) return -1;
  text_out o = {p->err, p->errlen, 0};
  out_printf(&o, "%s:%d: ", p->path, p->line);
  size_t room = o.total < o.len ? o.len - o.total : 0;
  if (room > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + o.total, room, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int ascii_lower(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

/* Case-insensitive, ASCII only: the host program's locale must not change
 * how a policy file reads. */
static int span_is(span text, const char *word) {
  size_t n = strlen(word);
  if (text.len != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (ascii_lower((unsigned char)text.s[i]) != ascii_lower((unsigned char)word[i])) return 0;
  return 1;
}

static int is_any(span text) { return span_is(text, "any") || span_is(text, "*"); }

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* The next blank-separated token of *rest into *token; 0 when none is left. */
static int next_token(span *rest, span *token) {
  while (rest->len > 0 && is_blank(*rest->s)) rest->s++, rest->len--;
  if (rest->len == 0) return 0;
  token->s = rest->s;
  while (rest->len > 0 && !is_blank(*rest->s)) rest->s++, rest->len--;
  token->len = (size_t)(rest->s - token->s);
  return 1;
}

enum { KEY_SM, KEY_AB, KEY_C, KEY_COMPUTE, KEY_API, KEY_CALLER, KEY_M, KEY_N, KEY_K, KEY_BATCH, KEY_SITE, KEY_COUNT };

static const char *const key_names[KEY_COUNT] = {"sm", "ab", "c", "compute", "api", "caller",
                                                 "m", "n", "k", "batch", "site"};

static const char *key_name_at(int id) {
  return (id >= 0 && id < KEY_COUNT) ? key_names[id] : NULL;
}

static int key_id(span key) {
  for (int id = 0; id < KEY_COUNT; id++)
    if (span_is(key, key_names[id])) return id;
  return -1;
}

static const char sm_expected[] =
    "major.minor, a range like 6.0-7.5, an open range 8.9- or -7.5, or any";

/* "6.1" -> 61, "12.0" -> 120: a major of one or two digits, a one-digit
 * minor, as compute capabilities are written. */
static int parse_sm_value(span text, int *sm) {
  if (text.len < 3 || text.len > 4 || text.s[text.len - 2] != '.') return -1;
  int major = 0;
  for (size_t i = 0; i < text.len - 2; i++) {
    if (text.s[i] < '0' || text.s[i] > '9') return -1;
    major = major * 10 + (text.s[i] - '0');
  }
  char minor = text.s[text.len - 1];
  if (major == 0 || minor < '0' || minor > '9') return -1;
  *sm = SM(major, minor - '0');
  return 0;
}

int policy_sm_parse(const char *s, size_t len) {
  int sm;
  return parse_sm_value((span){s, len}, &sm) == 0 ? sm : -1;
}

/* sm=any is the same as no sm key: it matches an unknown device too. */
static int parse_sm(parser *p, span value, policy_rule *rule) {
  if (is_any(value)) return 0;
  int lo, hi;
  const char *dash = memchr(value.s, '-', value.len);
  if (dash == NULL) {
    if (parse_sm_value(value, &lo) != 0) goto bad;
    hi = lo;
  } else {
    span below = {value.s, (size_t)(dash - value.s)};
    span above = {dash + 1, value.len - below.len - 1};
    lo = SM_LO_OPEN;
    hi = SM_HI_OPEN;
    if (below.len == 0 && above.len == 0) goto bad;
    if (below.len > 0 && parse_sm_value(below, &lo) != 0) goto bad;
    if (above.len > 0 && parse_sm_value(above, &hi) != 0) goto bad;
    if (lo > hi)
      return fail(p, "inverted sm range '%s'; expected the lower bound first, like 6.0-7.5",
                  show(value).s);
  }
  rule->has_sm = 1;
  rule->sm_lo = lo;
  rule->sm_hi = hi;
  return 0;
bad:
  return fail(p, "bad sm '%s'; expected %s", show(value).s, sm_expected);
}

/* "bf16,fp16" -> a mask with a bit per name; "any" alone -> every bit. */
static int parse_list(parser *p, span token, const char *key, span value,
                      const list_kind *kind, uint64_t *mask) {
  if (is_any(value)) {
    *mask = ANY_TYPES;
    return 0;
  }
  uint64_t bits = 0;
  span rest = value;
  for (;;) {
    const char *comma = memchr(rest.s, ',', rest.len);
    span item = {rest.s, comma ? (size_t)(comma - rest.s) : rest.len};
    if (item.len == 0)
      return fail(p, "empty %s in '%s'; expected a comma-separated list of %ss, or any",
                  kind->noun, show(token).s, kind->noun);
    if (is_any(item))
      return fail(p, "'%s' inside the list '%s'; expected %s=any alone or a list without it",
                  show(item).s, show(token).s, key);
    int v = kind->parse(item.s, item.len);
    if (v < kind->first || v - kind->first >= kind->width)
      return fail(p, "unknown %s '%s' in %s; expected %s", kind->noun, show(item).s, key,
                  alternatives(kind->name_at, kind->first, kind->width, "any").s);
    bits |= (uint64_t)1 << (v - kind->first);
    if (comma == NULL) break;
    rest.s = comma + 1;
    rest.len -= item.len + 1;
  }
  *mask = bits;
  return 0;
}

static const char dim_expected[] = "a size like 1024, a range like 1-4096, an open range 1024- or -64, or any";

/* A size: decimal digits only, at most 2^63 - 1. */
static int parse_size_value(span text, int64_t *v) {
  if (text.len == 0 || text.len > 19) return -1;
  uint64_t x = 0;
  for (size_t i = 0; i < text.len; i++) {
    if (text.s[i] < '0' || text.s[i] > '9') return -1;
    x = x * 10 + (uint64_t)(text.s[i] - '0');
  }
  if (x > (uint64_t)INT64_MAX) return -1;
  *v = (int64_t)x;
  return 0;
}

/* m=, n=, k=, batch=: a value or a range, as sm= takes them. */
static int parse_dim(parser *p, int d, span value, policy_rule *rule) {
  if (is_any(value)) return 0;
  int64_t lo, hi;
  const char *dash = memchr(value.s, '-', value.len);
  if (dash == NULL) {
    if (parse_size_value(value, &lo) != 0) goto bad;
    hi = lo;
  } else {
    span below = {value.s, (size_t)(dash - value.s)};
    span above = {dash + 1, value.len - below.len - 1};
    lo = 0;
    hi = INT64_MAX;
    if (below.len == 0 && above.len == 0) goto bad;
    if (below.len > 0 && parse_size_value(below, &lo) != 0) goto bad;
    if (above.len > 0 && parse_size_value(above, &hi) != 0) goto bad;
    if (lo > hi)
      return fail(p, "inverted %s range '%s'; expected the lower bound first, like 1-4096", dim_names[d],
                  show(value).s);
  }
  rule->has_dim |= 1u << d;
  rule->dim_lo[d] = lo;
  rule->dim_hi[d] = hi;
  return 0;
bad:
  return fail(p, "bad %s '%s'; expected %s", dim_names[d], show(value).s, dim_expected);
}

/* site=: ids as the routing log prints them, 1 to 16 hex digits each. */
static int parse_sites(parser *p, span token, span value, policy_rule *rule) {
  if (is_any(value)) return 0;
  span rest = value;
  for (;;) {
    const char *comma = memchr(rest.s, ',', rest.len);
    span item = {rest.s, comma ? (size_t)(comma - rest.s) : rest.len};
    uint64_t id = 0;
    int ok = item.len >= 1 && item.len <= 16;
    for (size_t i = 0; ok && i < item.len; i++) {
      int c = ascii_lower((unsigned char)item.s[i]);
      int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      ok = digit >= 0;
      id = id << 4 | (uint64_t)(digit & 15);
    }
    if (!ok)
      return fail(p, "bad site '%s' in '%s'; expected call-site ids as the routing log prints them "
                  "(16 hex digits), comma-separated, or any", show(item).s, show(token).s);
    if (rule->n_sites == POLICY_SITES_MAX)
      return fail(p, "more than %d sites in '%s'; expected at most %d per rule (write more rules)",
                  POLICY_SITES_MAX, show(token).s, POLICY_SITES_MAX);
    rule->sites[rule->n_sites++] = id;
    if (comma == NULL) break;
    rest.s = comma + 1;
    rest.len -= item.len + 1;
  }
  p->t->has_site_keys = 1;
  return 0;
}

static int parse_value(parser *p, int id, span token, span value, policy_rule *rule) {
  uint64_t apis, callers;
  switch (id) {
  case KEY_SM: return parse_sm(p, value, rule);
  case KEY_AB: return parse_list(p, token, key_names[id], value, &type_list, &rule->ab_types);
  case KEY_C: return parse_list(p, token, key_names[id], value, &type_list, &rule->c_types);
  case KEY_COMPUTE:
    return parse_list(p, token, key_names[id], value, &compute_list, &rule->compute_types);
  case KEY_CALLER:
    if (parse_list(p, token, key_names[id], value, &caller_list, &callers) != 0) return -1;
    rule->callers = (uint32_t)callers;
    return 0;
  case KEY_M: return parse_dim(p, POLICY_DIM_M, value, rule);
  case KEY_N: return parse_dim(p, POLICY_DIM_N, value, rule);
  case KEY_K: return parse_dim(p, POLICY_DIM_K, value, rule);
  case KEY_BATCH: return parse_dim(p, POLICY_DIM_BATCH, value, rule);
  case KEY_SITE: return parse_sites(p, token, value, rule);
  default:
    if (parse_list(p, token, key_names[id], value, &api_list, &apis) != 0) return -1;
    rule->apis = (uint32_t)apis;
    return 0;
  }
}

static const char *empty_value_expected(int id) {
  switch (id) {
  case KEY_SM: return sm_expected;
  case KEY_COMPUTE: return "a comma-separated list of compute types, or any";
  case KEY_API: return "a comma-separated list of entry points, or any";
  case KEY_CALLER: return "a comma-separated list of callers, or any";
  case KEY_M: case KEY_N: case KEY_K: case KEY_BATCH: return dim_expected;
  case KEY_SITE: return "call-site ids as the routing log prints them, comma-separated, or any";
  default: return "a comma-separated list of types, or any";
  }
}

/* One key=value token; *seen has a bit per key already on the line. */
static int parse_key_value(parser *p, span token, policy_rule *rule, unsigned *seen) {
  const char *eq = memchr(token.s, '=', token.len);
  if (eq == NULL) return fail(p, "'%s' has no value; expected key=value", show(token).s);
  span key = {token.s, (size_t)(eq - token.s)};
  span value = {eq + 1, token.len - key.len - 1};
  if (key.len == 0) return fail(p, "'%s' has no key; expected key=value", show(token).s);
  int id = key_id(key);
  if (id < 0)
    return fail(p, "unknown key '%s'; expected %s", show(key).s,
                alternatives(key_name_at, 0, KEY_COUNT, NULL).s);
  if (*seen & (1u << id))
    return fail(p, "duplicate key '%s'; expected each key at most once per rule", show(key).s);
  *seen |= 1u << id;
  if (value.len == 0)
    return fail(p, "'%s' has an empty value; expected %s", show(token).s,
                empty_value_expected(id));
  return parse_value(p, id, token, value, rule);
}

static policy_rule any_rule(gs_route route, int line) {
  policy_rule rule = {
      .route = route,
      .has_sm = 0, .sm_lo = SM_LO_OPEN, .sm_hi = SM_HI_OPEN,
      .ab_types = ANY_TYPES, .c_types = ANY_TYPES, .compute_types = ANY_TYPES,
      .apis = ANY_APIS,
      .callers = APP_CALLER,
      .line = line,
  };
  return rule;
}

static int parse_rule(parser *p, span first, span rest) {
  int route = gs_route_parse(first.s, first.len);
  if (route < 0) {
    name_list routes = alternatives(route_name_at, 0, GS_ROUTE_COUNT, NULL);
    if (memchr(first.s, '=', first.len))
      return fail(p, "'%s' before a route; expected a route first: %s", show(first).s,
                  routes.s);
    return fail(p, "unknown route '%s'; expected %s", show(first).s, routes.s);
  }
  if (p->t->n == POLICY_MAX_RULES)
    return fail(p, "rule %d is over the limit; expected at most %d rules",
                POLICY_MAX_RULES + 1, POLICY_MAX_RULES);
  policy_rule rule = any_rule((gs_route)route, p->line);
  unsigned seen = 0;
  span token;
  while (next_token(&rest, &token))
    if (parse_key_value(p, token, &rule, &seen) != 0) return -1;
  p->t->rules[p->t->n++] = rule;
  return 0;
}

static int parse_builtin(parser *p, span rest) {
  span arg, extra;
  if (!next_token(&rest, &arg))
    return fail(p, "'builtin' alone; expected builtin off or builtin on");
  int on;
  if (span_is(arg, "off")) on = 0;
  else if (span_is(arg, "on")) on = 1;
  else return fail(p, "builtin '%s'; expected builtin off or builtin on", show(arg).s);
  if (next_token(&rest, &extra))
    return fail(p, "'%s' after builtin %s; expected nothing more on the line", show(extra).s,
                on ? "on" : "off");
  p->builtin_on = on;
  return 0;
}

static int parse_line(parser *p, span line) {
  if (line.len > LINE_MAX_CHARS)
    return fail(p, "line of %zu characters; expected at most %d", line.len, LINE_MAX_CHARS);
  const char *nul = memchr(line.s, '\0', line.len);
  if (nul) return fail(p, "NUL byte at column %zu; expected text", (size_t)(nul - line.s) + 1);
  const char *comment = memchr(line.s, '#', line.len);
  if (comment) line.len = (size_t)(comment - line.s);
  span first;
  if (!next_token(&line, &first)) return 0;
  if (span_is(first, "builtin")) return parse_builtin(p, line);
  return parse_rule(p, first, line);
}

/* The built-in rules share the table's room; when they do not fit, blame
 * the first file rule that took their place. */
static int append_builtins(parser *p) {
  policy_table *t = p->t;
  if (!p->builtin_on) return 0;
  if (t->n + BUILTIN_COUNT > POLICY_MAX_RULES) {
    int first_over = POLICY_MAX_RULES - BUILTIN_COUNT;
    p->line = t->rules[first_over].line;
    return fail(p, "rule %d leaves no room for the %d built-in rules; expected at most %d rules,"
                " or builtin off", first_over + 1, BUILTIN_COUNT, first_over);
  }
  memcpy(&t->rules[t->n], builtin_rules, sizeof builtin_rules);
  t->n += BUILTIN_COUNT;
  return 0;
}

int policy_parse(policy_table *t, const char *text, size_t len, const char *path, char *err,
                 size_t errlen) {
  parser p = {.t = t, .path = path ? path : "policy", .err = err, .errlen = errlen,
              .builtin_on = 1};
  if (err && errlen) err[0] = '\0';
  t->n = 0;
  t->has_site_keys = 0;
  int rc = 0;
  size_t pos = 0;
  while (rc == 0 && pos < len) {
    const char *start = text + pos;
    const char *newline = memchr(start, '\n', len - pos);
    size_t line_len = newline ? (size_t)(newline - start) : len - pos;
    pos += line_len + (newline != NULL);
    p.line++;
    if (line_len > 0 && start[line_len - 1] == '\r') line_len--;
    rc = parse_line(&p, (span){start, line_len});
  }
  t->n_file = t->n;
  if (rc == 0) rc = append_builtins(&p);
  if (rc != 0) {
    policy_builtin(t);
    return -1;
  }
  snprintf(t->source, sizeof t->source, "%s", p.path);
  return 0;
}
