/* policy.h: the device-capability policy table. Given what a GEMM is (its
 * device's compute capability, operand types, compute type, entry point),
 * the first rule that matches names the route. Pure C: no CUDA calls, no
 * allocation on the matching path, no global state; the shim owns one table.
 *
 * Why a table: which route is right for a GEMM depends on its device (an
 * sm_60-sm_75 GPU has no bf16 tensor cores) and on the GEMM itself, and a
 * user changes that choice per GPU, shape, caller or call site with a
 * policy file (GEMMSHIM_POLICY=path), without rebuilding. GEMMs inside
 * NVIDIA libraries match only rules that name them.
 *
 * File format, keys and built-in rules: docs/policy.md, "policy.h: the
 * file format". */
#ifndef GEMMSHIM_POLICY_H
#define GEMMSHIM_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "names.h"

#define POLICY_SM_UNKNOWN (-1)

/* What the table is matched on. sm is major*10+minor (61 for 6.1), or
 * POLICY_SM_UNKNOWN when the device could not be found: then only rules
 * without an sm key match. */
typedef struct policy_key {
  int sm;
  int a_type, b_type, c_type; /* cudaDataType_t */
  int compute_type;           /* cublasComputeType_t */
  gs_api api;
  gs_caller caller;           /* GS_CALLER_APP for the program's own calls */
  int64_t m, n, k, batch;     /* sizes; only rules with such keys look */
  uint64_t site;              /* call-site id (site.c); only rules with a site key look */
} policy_key;

/* The size keys, in the order of a rule's dim_lo/dim_hi. */
enum { POLICY_DIM_M = 0, POLICY_DIM_N, POLICY_DIM_K, POLICY_DIM_BATCH, POLICY_DIMS };
#define POLICY_SITES_MAX 8

typedef struct policy_rule {
  gs_route route;
  int sm_lo, sm_hi;      /* inclusive; 0 and 1000 when unbounded */
  int has_sm;            /* 0: the rule has no sm key and matches any device */
  uint64_t ab_types;     /* bit t set: cudaDataType t allowed; ~0 = any */
  uint64_t c_types;      /* likewise */
  uint64_t compute_types;/* bit (v - 64) for cublasComputeType_t v; ~0 = any */
  uint32_t apis;         /* bit gs_api; ~0 = any */
  uint32_t callers;      /* bit gs_caller; ~0 = any; default the app's bit */
  unsigned has_dim;      /* bit POLICY_DIM_*: the rule bounds that size */
  int64_t dim_lo[POLICY_DIMS], dim_hi[POLICY_DIMS]; /* inclusive */
  int n_sites;           /* 0: any site */
  uint64_t sites[POLICY_SITES_MAX];
  int line;              /* line in the policy file; 0 for a built-in rule */
} policy_rule;

#define POLICY_MAX_RULES 256

typedef struct policy_table {
  policy_rule rules[POLICY_MAX_RULES];
  int n;
  int n_file;       /* the file's rules: the first n_file of rules[] */
  int has_site_keys; /* some rule has a site key: the caller must fill policy_key.site */
  char source[256]; /* the policy file's path, "" when built-in only */
} policy_table;

/* Fill t with the built-in rules only. */
void policy_builtin(policy_table *t);

/* Parse a policy file's text (len bytes, need not be NUL-terminated) into t:
 * the file's rules first, then the built-in ones unless "builtin off".
 * path names the file in messages. Returns 0 on success. On the first error
 * returns -1 and writes one message to err (errlen bytes, always
 * NUL-terminated) of the form
 *     "<path>:<line>: <what was found>; expected <what is allowed>"
 * and leaves t as the built-in table. More than POLICY_MAX_RULES rules is an
 * error too. */
int policy_parse(policy_table *t, const char *text, size_t len,
                 const char *path, char *err, size_t errlen);

/* Index of the first rule matching k, or -1 when none does;
 * policy_match_in looks at rules [first, end) only (the file's rules are
 * [0, n_file), the built-in ones after them). */
int policy_match(const policy_table *t, const policy_key *k);
int policy_match_in(const policy_table *t, const policy_key *k, int first, int end);

/* Which keys of rule i k fails, as POLICY_MISS_* bits; 0 when it matches.
 * The same tests as policy_match, one key at a time: for explaining a
 * match (gemmshim policy explain). */
#define POLICY_MISS_SM 0x1u
#define POLICY_MISS_AB 0x2u
#define POLICY_MISS_C 0x4u
#define POLICY_MISS_COMPUTE 0x8u
#define POLICY_MISS_API 0x10u
#define POLICY_MISS_CALLER 0x20u
#define POLICY_MISS_DIM(d) (0x40u << (d)) /* POLICY_DIM_* */
#define POLICY_MISS_SITE 0x400u
unsigned policy_rule_misses(const policy_table *t, int i, const policy_key *k);

/* A compute capability as the policy file writes it ("6.1", "12.0") ->
 * major*10+minor, or -1 when s (len bytes) is not one. */
int policy_sm_parse(const char *s, size_t len);

/* The route k gets whatever its device (k->sm is not looked at), or -1 when
 * the device could change it. Lets a caller skip finding the device for
 * GEMMs no device-specific rule can claim. */
int policy_route_without_sm(const policy_table *t, const policy_key *k);

/* One-line description of rule i for logs and reasons, e.g.
 * "built-in rule 1 (ffma sm=6.0-7.5 ab=bf16 compute=32f)" or
 * "/etc/p.txt:3 (fp8 sm=8.9- ab=fp16,bf16)" (caller= only where it is
 * not the default, app); list items come in value
 * order, whatever order the file gave them. Returns the length written
 * (snprintf semantics). */
int policy_rule_describe(const policy_table *t, int i, char *buf, size_t len);

#endif
