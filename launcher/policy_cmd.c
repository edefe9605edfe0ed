/* policy_cmd.c: `gemmshim policy check FILE` and `gemmshim policy explain`.
 * Both run the shim's own code: the file is read and parsed by
 * options_read_policy/policy_parse, the GEMM is matched by policy_match,
 * and the reason printed is the one the routing log records
 * ("policy: <rule>", decide.c). policy_rule_misses says why each earlier
 * rule did not match, with the same per-key tests the matcher uses. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <library_types.h>
#include <stdio.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>

#include "../shim/shim.h"
#include "../shim/base/sys.h"
#include "../shim/routes/cost.h"
#include "../shim/routes/fp8_recipe.h"
#include "launcher.h"

#define CMD "gemmshim policy"

static void usage(FILE *f) {
  fprintf(f, "usage: " CMD " check FILE\n"
             "       " CMD " explain --sm X.Y|unknown --ab TYPE [--a TYPE --b TYPE] --c TYPE --compute TYPE\n"
             "                              --api NAME [--caller NAME] [--shape MxNxK] [--batch N] [--site ID]\n"
             "                              [--mode MODE] [--policy FILE] [--cublas X.Y[.Z]]\n"
             "  --caller: who makes the GEMM, app (the default: the program) or an NVIDIA library.\n"
             "  --shape, --batch, --site: for rules with m, n, k, batch or site keys (the log's values).\n"
             "  --mode: GEMMSHIM_MODE's value (default: the environment's); the file's rules come before it.\n"
             "  --cublas: the cuBLAS version the program loads, for fp8 recipes that need one (block, mxfp8).\n"
             "  explain reads GEMMSHIM_POLICY when --policy is not given; without either, the built-in rules.\n");
}

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, CMD ": ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  usage(stderr);
  return LAUNCH_EXIT_USAGE;
}

static policy_table table; /* 256 rules: too big for the stack of a small tool */

/* The table from path, or the built-in one for NULL. Prints the shim's
 * message on failure. */
static int load(const char *path) {
  char err[1024];
  if (!path) {
    policy_builtin(&table);
    return 0;
  }
  if (options_read_policy(path, &table, err, sizeof err) != 0) {
    fprintf(stderr, "gemmshim: %s\n", err);
    return -1;
  }
  return 0;
}

static void print_rules(int upto) {
  char rule[512];
  for (int i = 0; i < table.n && i <= upto; i++) {
    policy_rule_describe(&table, i, rule, sizeof rule);
    printf("  %d. %s\n", i + 1, rule);
  }
}

static int check(int argc, char **argv) {
  if (argc != 2) return usage_error("check takes one FILE; got %d arguments", argc - 1);
  if (load(argv[1]) != 0) return LAUNCH_EXIT_BAD_CHECK;
  int from_file = 0;
  for (int i = 0; i < table.n; i++) from_file += table.rules[i].line != 0;
  printf("%s: OK: %d rule%s from the file, %d built-in; matched in this order:\n", argv[1], from_file,
         from_file == 1 ? "" : "s", table.n - from_file);
  print_rules(table.n);
  return 0;
}

/* "a, b or c": every name f gives for values [first, first + count). */
static void print_names(const char *(*name)(int), int first, int count) {
  int total = 0, shown = 0;
  for (int v = first; v < first + count; v++) total += name(v) != NULL;
  for (int v = first; v < first + count; v++) {
    if (!name(v)) continue;
    fprintf(stderr, "%s%s", shown == 0 ? "" : (shown == total - 1 ? " or " : ", "), name(v));
    shown++;
  }
}

static const char *api_name_of(int v) { return gs_api_name((gs_api)v); }
static const char *caller_name_of(int v) { return gs_caller_name((gs_caller)v); }

static int parse_named(const char *flag, const char *value, int (*parse)(const char *, size_t),
                       const char *(*name)(int), int first, int count, int *out) {
  int v = parse(value, strlen(value));
  if (v >= 0) {
    *out = v;
    return 0;
  }
  fprintf(stderr, CMD " explain: %s '%s': expected ", flag, value);
  print_names(name, first, count);
  fprintf(stderr, "\n");
  return -1;
}

static void describe_misses(unsigned misses, const policy_key *k) {
  const char *sep = "";
  printf(": no, the rule does not take");
  if (misses & POLICY_MISS_SM) {
    if (k->sm == POLICY_SM_UNKNOWN) printf(" an unknown device (sm)");
    else printf(" sm=%d.%d", k->sm / 10, k->sm % 10);
    sep = ",";
  }
  if (misses & POLICY_MISS_AB) {
    if (k->a_type == k->b_type) printf("%s ab=%s", sep, gs_type_name(k->a_type));
    else printf("%s a=%s b=%s", sep, gs_type_name(k->a_type), gs_type_name(k->b_type));
    sep = ",";
  }
  if (misses & POLICY_MISS_C) printf("%s c=%s", sep, gs_type_name(k->c_type)), sep = ",";
  if (misses & POLICY_MISS_COMPUTE) printf("%s compute=%s", sep, gs_compute_name(k->compute_type)), sep = ",";
  if (misses & POLICY_MISS_API) printf("%s api=%s", sep, gs_api_name(k->api)), sep = ",";
  if (misses & POLICY_MISS_CALLER) printf("%s caller=%s", sep, gs_caller_name(k->caller)), sep = ",";
  static const char *const dims[POLICY_DIMS] = {"m", "n", "k", "batch"};
  const int64_t values[POLICY_DIMS] = {k->m, k->n, k->k, k->batch};
  for (int d = 0; d < POLICY_DIMS; d++) {
    if (!(misses & POLICY_MISS_DIM(d))) continue;
    if (values[d] < 0) printf("%s an unknown %s (give --%s)", sep, dims[d], d == POLICY_DIM_BATCH ? "batch" : "shape");
    else printf("%s %s=%lld", sep, dims[d], (long long)values[d]);
    sep = ",";
  }
  if (misses & POLICY_MISS_SITE) {
    if (k->site) printf("%s site=%016llx", sep, (unsigned long long)k->site);
    else printf("%s an unknown site (give --site)", sep);
  }
  printf("\n");
}

/* What the cost gate (shim/routes/cost.c) decides for a call the policy
 * sends to `route`: the functions the routes call, on a gs_call of the
 * GEMM given, with the options read from the environment as the library
 * reads them (explain: GEMMSHIM_GATE, GEMMSHIM_FP8_BACKEND,
 * GEMMSHIM_FP8_RECIPE, the MIN_FLOPS floors). No device is queried: the
 * architecture's reference part's SMs and clocks stand for it (the
 * library reads the device's), and beta is taken as possibly nonzero.
 * Printed as the routing log words it. */

/* explain loads no cuBLAS. The recipes that need a version ask
 * cublasLtGetVersion through the call table, after checking that
 * cublasLtMatmul resolved (fp8_scaled.c): explain fills both slots, the
 * version from --cublas (none given: no version entry, so the recipe says
 * it could not tell), and a matmul that is never called, so that nothing
 * searches the process for a cuBLAS it does not have. */
static size_t explain_lt_version;
static size_t explain_get_version(void) { return explain_lt_version; }
static cublasStatus_t explain_no_matmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                                        const void *A, cublasLtMatrixLayout_t ad, const void *B,
                                        cublasLtMatrixLayout_t bd, const void *beta, const void *C,
                                        cublasLtMatrixLayout_t cd, void *D, cublasLtMatrixLayout_t dd,
                                        const cublasLtMatmulAlgo_t *algo, void *ws, size_t wss, cudaStream_t s) {
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

static void explain_gate(int route, const policy_key *k) {
  const char *name = gs_route_name((gs_route)route);
  if (route != GS_ROUTE_FFMA && route != GS_ROUTE_FP16 && route != GS_ROUTE_FP8) return;
  if (k->m < 0) return; /* no shape: nothing to estimate */
  if (k->sm == POLICY_SM_UNKNOWN) {
    printf("gate: not estimated (the cost gate needs the device's architecture)\n");
    return;
  }
  gs_call c;
  memset(&c, 0, sizeof c);
  c.device = -1;
  c.sm = k->sm;
  c.decided = (gs_route)route;
  gs_gemm *g = &c.g;
  g->api = k->api;
  g->m = k->m, g->n = k->n, g->k = k->k, g->batch = k->batch > 0 ? k->batch : 1;
  g->a_type = k->a_type, g->b_type = k->b_type, g->c_type = g->d_type = k->c_type;
  g->compute_type = k->compute_type;
  if (g->m == 0 || g->n == 0 || g->k == 0) {
    printf("gate: not estimated (an empty GEMM runs native)\n");
    return;
  }
  const double a = (double)g->m * (double)g->k * (double)g->batch, b = (double)g->k * (double)g->n * (double)g->batch;
  char why[GS_COST_WHY], recipe_why[320] = "", recipe[96] = "";
  const char *no = route_check_min_flops(g, route);
  if (no) {
    printf("gate: %s declined: %s; ran native\n", name, no);
    return;
  }
  if (route == GS_ROUTE_FFMA) {
    no = cost_gate_ffma(&c, a, b, g->c_type != CUDA_R_32F, g->c_type != CUDA_R_32F ? GS_COST_FFMA_C_READ : GS_COST_FFMA_C_NONE,
                        why);
  } else if (route == GS_ROUTE_FP16) {
    no = cost_gate_fp16(&c, a, b, why);
  } else if (!cost_gate_applies(&c, GS_ROUTE_FP8)) {
    printf("gate: none for fp8 on sm_%d (%s: the own fp8 kernel runs, a numerics check)\n", k->sm,
           k->sm < 89 ? "below sm_89" : "GEMMSHIM_FP8_BACKEND names the own kernel");
    return;
  } else {
    gs_sys.cublasLtMatmul = explain_no_matmul;
    gs_sys.cublasLtGetVersion = explain_lt_version ? explain_get_version : NULL;
    const int r = fp8_recipe_choose(&c, recipe_why, sizeof recipe_why);
    fp8_out out;
    fp8_recipe_out(&c, fp8_recipe_get(r), &out);
    no = fp8_recipe_gate(&c, fp8_recipe_get(r), &out, why);
    snprintf(recipe, sizeof recipe, ", recipe %s", gs_fp8_recipe_name(r));
  }
  if (no) printf("gate: %s declined: %s; ran native\n", name, no);
  else if (!gs_opt.gate) printf("gate: off (GEMMSHIM_GATE=off): %s runs whatever the estimate%s\n", name, recipe);
  else printf("gate: %s estimated faster than native on the sm_%d reference part%s\n", name, k->sm, recipe);
  if (recipe_why[0])
    printf("note: %s%s\n", recipe_why,
           explain_lt_version ? "" : " (explain loads no cuBLAS: give --cublas X.Y with the version the program loads)");
}

static void explain_problem(const char *message, void *arg) {
  (void)arg;
  fprintf(stderr, "gemmshim: policy explain: %s\n", message);
}

static int explain(int argc, char **argv) {
  /* The options table (shim/options.c) over the environment, as the
   * library reads it: the gate line then follows what the routes do. A
   * bad value is said, and its default stands, as in the library. */
  options_check(explain_problem, NULL);
  const char *policy = getenv("GEMMSHIM_POLICY");
  if (policy && !*policy) policy = NULL;
  const char *sm = NULL, *ab = NULL, *a = NULL, *b = NULL, *c = NULL, *compute = NULL, *api = NULL,
             *caller = "app", *shape = NULL, *batch = NULL, *site = NULL, *mode = getenv("GEMMSHIM_MODE"),
             *cublas = NULL;
  struct {
    const char *flag;
    const char **value;
  } flags[] = {{"--sm", &sm},           {"--ab", &ab},   {"--a", &a},          {"--b", &b},
               {"--c", &c},             {"--compute", &compute}, {"--api", &api}, {"--caller", &caller},
               {"--policy", &policy},   {"--shape", &shape}, {"--batch", &batch}, {"--site", &site},
               {"--mode", &mode},       {"--cublas", &cublas}};
  for (int i = 1; i < argc; i++) {
    /* --flag VALUE or --flag=VALUE, as the launcher's own options take. */
    const char *eq = strchr(argv[i], '=');
    size_t name_len = eq ? (size_t)(eq - argv[i]) : strlen(argv[i]);
    size_t f = 0;
    for (; f < sizeof flags / sizeof flags[0]; f++)
      if (strlen(flags[f].flag) == name_len && strncmp(argv[i], flags[f].flag, name_len) == 0) break;
    if (f == sizeof flags / sizeof flags[0])
      return usage_error("explain: unknown argument '%s'; expected --sm, --ab (or --a and --b), --c, --compute,"
                         " --api, --caller, --shape, --batch, --site, --mode, --policy or --cublas", argv[i]);
    if (eq) {
      *flags[f].value = eq + 1;
      continue;
    }
    if (i + 1 >= argc) return usage_error("explain: %s needs a value", argv[i]);
    *flags[f].value = argv[++i];
  }
  if (ab && (a || b)) return usage_error("explain: --ab with --a or --b; expected --ab TYPE, or --a TYPE --b TYPE");
  const char *a_flag = ab ? "--ab" : "--a", *b_flag = ab ? "--ab" : "--b";
  if (ab) a = b = ab;
  char missing[128] = "";
  const struct {
    const char *value, *flag;
  } needed[] = {{sm, "--sm"}, {a, "--ab (or --a)"}, {b, "--b"}, {c, "--c"}, {compute, "--compute"}, {api, "--api"}};
  for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
    if (!needed[i].value && !(i == 2 && !a))  /* a missing --ab is named once */
      snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s", *missing ? ", " : "",
               needed[i].flag);
  if (*missing) return usage_error("explain: %s missing; expected every key the policy is matched on", missing);

  policy_key k;
  int v;
  if (strcmp(sm, "unknown") == 0) {
    k.sm = POLICY_SM_UNKNOWN;
  } else if ((k.sm = policy_sm_parse(sm, strlen(sm))) < 0) {
    fprintf(stderr, CMD " explain: --sm '%s': expected major.minor like 6.1 or 9.0, or unknown\n", sm);
    return LAUNCH_EXIT_USAGE;
  }
  if (parse_named(a_flag, a, gs_type_parse, gs_type_name, 0, 64, &k.a_type) ||
      parse_named(b_flag, b, gs_type_parse, gs_type_name, 0, 64, &k.b_type) ||
      parse_named("--c", c, gs_type_parse, gs_type_name, 0, 64, &k.c_type) ||
      parse_named("--compute", compute, gs_compute_parse, gs_compute_name, 64, 64, &k.compute_type) ||
      parse_named("--api", api, gs_api_parse, api_name_of, 0, GS_API_COUNT, &v))
    return LAUNCH_EXIT_USAGE;
  k.api = (gs_api)v;
  if (parse_named("--caller", caller, gs_caller_parse, caller_name_of, 0, GS_CALLER_COUNT, &v))
    return LAUNCH_EXIT_USAGE;
  k.caller = (gs_caller)v;
  /* Sizes and site are optional: a rule keyed on one the command did not
   * give does not match, and says so. */
  k.m = k.n = k.k = k.batch = -1;
  k.site = 0;
  if (shape) {
    long long m, n, kk;
    int used = 0;
    if (sscanf(shape, "%lldx%lldx%lld%n", &m, &n, &kk, &used) != 3 || shape[used] || m < 0 || n < 0 || kk < 0) {
      fprintf(stderr, CMD " explain: --shape '%s': expected MxNxK as cuBLAS takes them, like 4096x768x3072\n", shape);
      return LAUNCH_EXIT_USAGE;
    }
    k.m = m, k.n = n, k.k = kk;
    k.batch = 1;
  }
  if (batch) {
    char *end;
    long long bb = strtoll(batch, &end, 10);
    if (*batch < '0' || *batch > '9' || *end || bb < 1) {
      fprintf(stderr, CMD " explain: --batch '%s': expected a count from 1\n", batch);
      return LAUNCH_EXIT_USAGE;
    }
    k.batch = bb;
  }
  if (site) {
    char *end;
    unsigned long long id = strtoull(site, &end, 16);
    if (!*site || *end || strlen(site) > 16) {
      fprintf(stderr, CMD " explain: --site '%s': expected a call-site id as the routing log prints it\n", site);
      return LAUNCH_EXIT_USAGE;
    }
    k.site = id;
  }
  if (cublas) {
    /* As cublasLtGetVersion numbers it: major * 10000 + minor * 100 + patch
     * (cublasLt.h, CUBLASLT_VERSION). */
    unsigned maj, min, patch = 0;
    int used = 0;
    int got = sscanf(cublas, "%u.%u%n.%u%n", &maj, &min, &used, &patch, &used);
    if (got < 2 || cublas[used] || maj < 1 || maj > 99 || min > 99 || patch > 99 || *cublas < '0' || *cublas > '9') {
      fprintf(stderr, CMD " explain: --cublas '%s': expected the cuBLAS version the program loads, like 12.9 or 12.8.4\n",
              cublas);
      return LAUNCH_EXIT_USAGE;
    }
    explain_lt_version = (size_t)maj * 10000 + min * 100 + patch;
  }
  int mode_id = 0; /* auto; the options table's names */
  static const char *const modes[] = {"auto", "native", "ffma", "fp8", "fp16"};
  if (mode && *mode) {
    for (mode_id = 0; mode_id < 5 && strcasecmp(mode, modes[mode_id]) != 0; mode_id++) {}
    if (mode_id == 5) {
      fprintf(stderr, CMD " explain: --mode '%s': expected auto, native, ffma, fp8 or fp16\n", mode);
      return LAUNCH_EXIT_USAGE;
    }
  }
  if (load(policy) != 0) return LAUNCH_EXIT_BAD_CHECK;

  printf("GEMM: sm=%s a=%s b=%s c=%s compute=%s api=%s caller=%s", k.sm == POLICY_SM_UNKNOWN ? "unknown" : sm,
         gs_type_name(k.a_type), gs_type_name(k.b_type), gs_type_name(k.c_type), gs_compute_name(k.compute_type),
         gs_api_name(k.api), gs_caller_name(k.caller));
  if (k.m >= 0) printf(" m=%lld n=%lld k=%lld", (long long)k.m, (long long)k.n, (long long)k.k);
  if (k.batch >= 0) printf(" batch=%lld", (long long)k.batch);
  if (k.site) printf(" site=%016llx", (unsigned long long)k.site);
  printf("\n");
  printf("rules: %s\n", policy ? policy : "built-in only");
  /* As decide.c: under GEMMSHIM_MODE=native nothing is routed; under ffma
   * or fp8 the file's rules come first, then the mode, which replaces the
   * built-in rules, for the program's own calls (fp8 takes bf16 and fp16
   * GEMMs only). */
  int app = k.caller == GS_CALLER_APP;
  if (mode_id == 1) {
    printf("route: native (GEMMSHIM_MODE=native)\n");
    return 0;
  }
  int mode_takes = app && (mode_id == 2 || mode_id == 4 || (mode_id == 3 && (k.a_type == CUDA_R_16BF || k.a_type == CUDA_R_16F) &&
                                                           k.b_type == k.a_type));
  int end = mode_takes ? table.n_file : table.n;
  int match = policy_match_in(&table, &k, 0, end);
  char rule[512];
  for (int i = 0; i < end && (match < 0 || i <= match); i++) {
    policy_rule_describe(&table, i, rule, sizeof rule);
    printf("  %d. %s", i + 1, rule);
    unsigned misses = policy_rule_misses(&table, i, &k);
    if (i == match) printf(": matches\n");
    else describe_misses(misses, &k);
  }
  /* The reason the routing log gives, word for word (decide.c), for the
   * program's own calls; the log names a library's calls by its file. */
  if (match < 0 && mode_takes) {
    printf("note: no rule of the file matched; GEMMSHIM_MODE=%s replaces the built-in rules\n", modes[mode_id]);
    printf("route: %s (GEMMSHIM_MODE=%s)\n", modes[mode_id], modes[mode_id]);
    explain_gate(mode_id == 2 ? GS_ROUTE_FFMA : mode_id == 3 ? GS_ROUTE_FP8 : GS_ROUTE_FP16, &k);
    return 0;
  }
  char before[160] = "";
  if (mode_id == 3 && app && (match < 0 || match >= table.n_file))
    snprintf(before, sizeof before, "GEMMSHIM_MODE=fp8 takes bf16 and fp16 GEMMs, not %s x %s ones; ",
             gs_type_name(k.a_type), gs_type_name(k.b_type));
  if (match < 0 && k.caller != GS_CALLER_APP) {
    printf("route: native (no rule names caller=%s: GEMMs inside NVIDIA libraries run native)\n",
           gs_caller_name(k.caller));
  } else if (match < 0) {
    printf("route: native (%spolicy: no rule matched)\n", before);
  } else {
    policy_rule_describe(&table, match, rule, sizeof rule);
    printf("route: %s (%spolicy: %s)\n", gs_route_name(table.rules[match].route), before, rule);
    explain_gate(table.rules[match].route, &k);
  }
  if (k.sm == POLICY_SM_UNKNOWN) printf("note: with the device unknown, only rules without an sm key match\n");
  return 0;
}

int policy_command(int argc, char **argv) {
  if (argc < 2) return usage_error("expected check or explain");
  if (strcmp(argv[1], "check") == 0) return check(argc - 1, argv + 1);
  if (strcmp(argv[1], "explain") == 0) return explain(argc - 1, argv + 1);
  if (strcmp(argv[1], "--help") == 0) {
    usage(stdout);
    return 0;
  }
  return usage_error("unknown subcommand '%s'; expected check or explain", argv[1]);
}
