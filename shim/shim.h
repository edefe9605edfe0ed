/* shim.h: the shim's internal interface, grouped by the file that defines
 * each part. A call flows hook -> decode -> decide -> route -> log:
 *
 *   hooks.c      the exported cuBLAS entry points and dlsym; re-entrancy
 *   resolve.c    finding the real cuBLAS/driver functions at run time
 *   sys.c        the one table of every fallible call the shim makes
 *   options.c    the options table (GEMMSHIM_* environment)
 *   decode.c     arguments and Lt descriptors -> gs_gemm
 *   device.c     stream -> context -> device and compute capability
 *   decide.c     mode + policy table -> route and reason
 *   site.c       call-site ids; which object a call comes from
 *   route_*.c    one file per route
 *   log.c        the per-call routing log (JSON lines): queue, flusher, files
 *   log_format.c the log's record and its JSON (docs/log-format.md)
 *   log_summary.c the exit summary's counters
 *   work.c       the stretch of a call that issues its device work
 *   nvtx.c       one NVTX range per call, when an NVTX tool is attached
 *   gpu_time.c   GPU time per call from events on its stream
 *   compare.c    route versus native in the same run (GEMMSHIM_COMPARE)
 *   debug.c      WARN/INFO/TRACE messages to stderr or GEMMSHIM_DEBUG_FILE
 *   files.c      opening and writing those files safely
 *   cancel.c     thread cancellation disabled while the shim's code runs
 *   exec.c       the exec family: the routing log flushed before the image goes
 */
#ifndef GEMMSHIM_SHIM_H
#define GEMMSHIM_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/kernels.h"
#include "../policy/names.h"
#include "../policy/policy.h"
#include "base/base.h"

/* ------------------------------------------------------------------------ */
/* "decode.c": one GEMM, whichever entry point it came through. Integer
 * fields hold the CUDA enum values (cudaDataType_t, cublasOperation_t, ...);
 * -1 where the entry point has no such thing (e.g. epilogue on GemmEx). */
typedef struct gs_gemm {
  gs_api api;
  int transa, transb;
  int64_t m, n, k, batch;
  int a_type, b_type, c_type, d_type;
  int compute_type, scale_type;
  int64_t lda, ldb, ldc, ldd;
  int64_t stride_a, stride_b, stride_c, stride_d; /* elements; 0 if none */
  int order_a, order_b, order_c, order_d;         /* Lt only; -1 otherwise */
  int pointer_mode;  /* cublasPointerMode_t / Lt pointer mode; -1 unknown */
  int epilogue;      /* Lt only */
  const void *bias;
  int bias_type;
  const void *a_scale, *b_scale, *c_scale, *d_scale, *amax_d;
  int fast_accum;
  int algo;          /* cublasGemmAlgo_t; -1 for Lt */
  const void *alpha, *beta;
  const void *A, *B, *C;
  void *D;           /* == C for the cublasGemm*Ex family */
  void *handle;      /* cublasHandle_t or cublasLtHandle_t */
  void *stream;      /* CUstream; from the handle for the GemmEx family */
  void *workspace;   /* Lt only: the caller's workspace */
  void *lt_desc;     /* Lt only: the descriptors, for decode_lt_rest */
  void *lt_layout[4];
  int lt_full;       /* Lt only: decode_lt_rest has run (1: for the log, 2: for a route) */
  int shape_mismatch; /* Lt only: the A/B/C layouts disagree with D's m, n and A's k */
  int batch_mismatch; /* Lt only: A, B or C has a batch count other than D's */
  const char *lt_unrouted; /* Lt only, for a route: the first descriptor or layout
                            * attribute whose value no route reproduces, or NULL */
  int lt_invariance;  /* Lt only, for a route: BATCH_INVARIANCE_FLAGS as read: 1 UNSET
                       * (defers to CUBLAS_BATCH_INVARIANCE_FLAGS), 0 another value,
                       * -1 refused (INVALID_VALUE: a cuBLASLt without it), -2 not read */
  size_t workspace_size;
  int decoded;       /* 1 when every field above could be read */
  /* Lt only, when not decoded: the first read that failed. undecoded_of is
   * 'A'..'D' for a layout, 0 for the matmul descriptor; undecoded_attr the
   * attribute's (or the NULL argument's) name; undecoded_status cuBLASLt's
   * status, or DECODE_NO_GETTER / DECODE_NO_DESCRIPTOR. */
  char undecoded_of;
  const char *undecoded_attr;
  int undecoded_status;
} gs_gemm;

/* ------------------------------------------------------------------------ */
/* "gpu_time.c": events around a call's work on its stream, read by the log
 * flusher. Event slots, in the order they are recorded: */
enum {
  GS_GPU_EV_START = 0, /* call_work_begin */
  GS_GPU_EV_GEMM_BEGIN, /* a route: its GEMM follows its own kernels */
  GS_GPU_EV_GEMM_END,   /* a route: its own kernels follow the GEMM */
  GS_GPU_EV_END,        /* the call's work is issued */
  GS_GPU_EV_NATIVE_END, /* GEMMSHIM_COMPARE: the native run after END */
  GS_GPU_EV_ACC_END,    /* GEMMSHIM_COMPARE: the accuracy measure's copy (accuracy.c) */
  GS_GPU_EVENTS
};
/* Why a call has no GPU time (the log's gpu_skipped). */
enum {
  GS_GPU_SKIP_NONE = 0,
  GS_GPU_SKIP_CAPTURE,
  GS_GPU_SKIP_NO_DEVICE,
  GS_GPU_SKIP_NO_EVENT,
  GS_GPU_SKIP_RECORD_FAILED,
  GS_GPU_SKIP_QUERY_FAILED,
  GS_GPU_SKIP_UNFINISHED,
  GS_GPU_SKIP_HELD_FULL,
  GS_GPU_SKIP_NO_WORK,
  GS_GPU_SKIP_CTX_GONE
};
typedef struct gs_gpu_time {
  void *ev[GS_GPU_EVENTS];  /* CUevent, NULL where not recorded */
  void *ctx;                /* the events' context (CUcontext) */
  unsigned long long ctx_id; /* its cuCtxGetId */
  uint64_t gpu_ns, kernels_ns, native_ns; /* results, once resolved */
  uint8_t on;               /* events are recorded and owned by this call */
  uint8_t skip;             /* GS_GPU_SKIP_* */
  uint8_t has_gpu_ns, has_kernels_ns, has_native_ns;
  uint8_t has_acc;          /* the acc_* results below are set */
  uint8_t has_acc_quantiles; /* acc_p50/p99 too (some position was finite in both) */
  uint8_t gated;            /* the cost gate applies to the call (cost_gate_applies): measured_observe counts it */
  /* GEMMSHIM_COMPARE (accuracy.c): the host copy of the call's statistics
   * until resolved, then what the log prints of them. */
  void *acc_slot;
  double acc_sqnr_db, acc_max_rel, acc_p50, acc_p99; /* may be +-inf */
  uint64_t acc_mismatch;
  /* GEMMSHIM_COMPARE, fp8 route (routes/fp8_stats.c): the host copy of the
   * quantize kernels' counters until resolved, then what the log prints of
   * them, per operand (A, B); elems is set when the copy is issued. */
  void *fp8_slot;
  uint8_t has_fp8;
  uint8_t fp8_blocks; /* a block-scaled recipe: the worst_* figures are set */
  struct gs_fp8_figures {
    uint64_t elems, saturated, flushed;
    float amax, step;
    double worst_sat, worst_flush;               /* fractions of the worst blocks */
    uint64_t worst_sat_block, worst_flush_block; /* their indices */
  } fp8[2];
} gs_gpu_time;

/* ------------------------------------------------------------------------ */
/* "hooks.c": the state of one top-level intercepted call. */
#define GS_REASON_MAX 384

typedef struct gs_call {
  gs_gemm g;
  uint64_t seq;
  uint64_t t_ns;       /* CLOCK_REALTIME at the call's start */
  uint64_t dur_ns;     /* host time spent in the call */
  int tid;
  int device;          /* CUdevice ordinal, -1 unknown */
  void *ctx;           /* CUcontext of the call's stream, NULL unknown */
  unsigned long long ctx_id; /* cuCtxGetId of ctx (0: the driver has none); a
                              * new context at an old address has a new id */
  unsigned long long stream_id; /* cuStreamGetId of a created stream; 0 for the
                                 * NULL, legacy and per-thread streams, or unknown */
  int sm;              /* major*10+minor, -1 unknown */
  uint64_t site;
  uint32_t site_flags; /* GS_SITE_NEW, ... (fp8 sites) */
  uint64_t evicted_site; /* with GS_SITE_EVICTED: the site that made room */
  int recipe;          /* fp8 route: the gs_fp8_recipe that ran; 0 (auto) = none */
  gs_route decided;    /* what mode/policy asked for */
  gs_route route;      /* what actually ran */
  const char *backend; /* e.g. "cublas", "sgemm", "own"; NULL = none */
  int status;          /* cublasStatus_t returned to the caller */
  int quiet;           /* nobody reads the call's reason, times or site: neither
                        * the log nor the INFO summary is on (hooks_timing() at
                        * call_begin); 0 in a zeroed gs_call, which explains itself */
  const void *caller;  /* return address of the hooked call */
  int work_begun;      /* call_work_begin ran: the call's device work started */
  int captured;        /* a route found the call's stream being captured
                        * (routes/memory.c): its work was recorded, not run */
  int nvtx_open;       /* an NVTX range is open for the call (nvtx.c) */
  int compare_asked;   /* compare_decide has asked compare_due for this call ... */
  int compare_due;     /* ... and this is its answer */
  char reason[GS_REASON_MAX]; /* call_begin clears only what precedes it */
  /* GEMMSHIM_LOG_GPU_TIME (gpu_time.c): valid once work_begun, and then
   * only .on unless GPU time is wanted (gpu_time_begin sets it all). */
  gs_gpu_time gpu;
} gs_call;

/* site_flags: what happened to the call's fp8 site (fp8_sites.c). NEW: the
 * site was created by this call (its first call, or its first since it was
 * evicted); EVICTED: making room for it evicted the least recently used
 * site, whose id is in evicted_site. */
#define GS_SITE_NEW 0x1u
#define GS_SITE_EVICTED 0x2u

/* ------------------------------------------------------------------------ */
/* "options.c": one table, read once from the environment at load. */
typedef enum gs_mode { GS_MODE_AUTO = 0, GS_MODE_NATIVE, GS_MODE_FFMA, GS_MODE_FP8, GS_MODE_FP16 } gs_mode;
typedef enum gs_fp8_format { GS_FP8_FORMAT_E4M3 = 0, GS_FP8_FORMAT_E5M2, GS_FP8_FORMAT_HYBRID } gs_fp8_format;
/* own-mma: the own kernel on fp8 tensor cores (sm_89+), opt-in until
 * checked on a GPU; auto never picks it. */
typedef enum gs_fp8_backend {
  GS_FP8_BACKEND_AUTO = 0,
  GS_FP8_BACKEND_OWN,
  GS_FP8_BACKEND_CUBLASLT,
  GS_FP8_BACKEND_OWN_MMA
} gs_fp8_backend;

/* GEMMSHIM_FP8_RECIPE (routes/fp8_recipes.c). AUTO is 0 so that a zeroed
 * gs_call's recipe reads "none": a call never runs "auto". */
typedef enum gs_fp8_recipe {
  GS_FP8_RECIPE_AUTO = 0,
  GS_FP8_RECIPE_CURRENT,
  GS_FP8_RECIPE_BLOCK,
  GS_FP8_RECIPE_MXFP8,
  GS_FP8_RECIPE_DELAYED,
  GS_FP8_RECIPES
} gs_fp8_recipe;
const char *gs_fp8_recipe_name(int r); /* "current", ...; NULL for auto and out of range */

typedef struct gs_options {
  gs_mode mode;
  int passthrough;        /* 1 after bad configuration: everything native */
  char policy_path[GS_PATH_MAX];
  char log_path[GS_PATH_MAX];     /* raw, with %p %h %r placeholders */
  int log_wait;           /* GEMMSHIM_LOG_WAIT: wait for a slow log rather than drop records */
  int dlsym_hook;         /* GEMMSHIM_DLSYM: wrap dlsym for pattern 3 */
  uint64_t ffma_max_bytes;  /* transient memory one ffma call may take */
  int gate;                 /* GEMMSHIM_GATE: routes only where their estimate pays */
  uint64_t ffma_min_flops;  /* smaller GEMMs stay native */
  int fp8_format;            /* GS_FP8_FORMAT_* */
  int fp8_backend;           /* GS_FP8_BACKEND_* */
  int fp8_recipe;            /* GS_FP8_RECIPE_* */
  uint64_t fp8_history;      /* amax history length per site and operand */
  uint64_t fp8_margin;       /* headroom: scale = max(history) * 2^margin / fmt_max */
  uint64_t fp8_max_sites;    /* site table bound; least recently used evicted */
  uint64_t fp8_max_bytes;    /* transient memory one fp8 call may take */
  uint64_t fp16_max_bytes;   /* transient memory one fp16 call may take */
  uint64_t fp16_min_flops;   /* smaller GEMMs stay native on the fp16 route */
  uint64_t pool_keep_bytes;  /* transient pool memory kept mapped between calls, per device */
  uint64_t graph_max_bytes;  /* what captured calls' buffers may hold in all (routes/graph_mem.c) */
  int log_gpu_time;          /* GEMMSHIM_LOG_GPU_TIME: gpu_ns in the log */
  int compare;               /* GEMMSHIM_COMPARE: routed shapes also run native now and then */
  uint64_t compare_every;    /* ... at each site's first call, then every Nth */
  uint64_t guard_sqnr_db;    /* GEMMSHIM_GUARD_SQNR: 0 off; else sites measured below it run native */
} gs_options;

extern gs_options gs_opt;
extern policy_table gs_policy;

void options_init(void);          /* reads the environment; never fails */
void options_print(void);         /* INFO: every effective option */
/* What options_init would complain about, without opening any output:
 * each problem (the same one-line message) goes to report, and the count
 * is returned. Leaves gs_opt and gs_policy as options_init would. For the
 * launcher, which refuses to start a program the shim would run
 * pass-through. */
typedef void (*options_problem_fn)(const char *message, void *arg);
int options_check(options_problem_fn report, void *arg);
/* Each GEMMSHIM_* variable of the environment the shim does not read, as
 * one message to report naming it and the nearest name it does read (a
 * typo: GEMMSHIM_MDOE); returns how many. options_init warns with it. */
int options_unknown(options_problem_fn report, void *arg);
/* Read and parse the policy file at path into t (built-in rules only when
 * it fails). Returns 0, or -1 with the message in err. */
int options_read_policy(const char *path, policy_table *t, char *err, size_t errlen);
/* Option i of the table: its name, and its default, one-line meaning and
 * whether it is a path (each pointer may be NULL); NULL past the end. */
const char *options_describe(size_t i, const char **def, const char **meaning, int *is_path);
int options_is_bool(size_t i); /* option i takes 1/0 (a bare flag in the launcher) */
/* Option i's effective value as options_print shows it; -1 past the end. */
int options_value(size_t i, char *buf, size_t len);
/* Parse helpers shared by every option (and by tests). Each returns 0 on
 * success, -1 with a message in err naming var, what was expected and the
 * value used instead. */
int options_parse_u64(const char *var, const char *s, uint64_t lo, uint64_t hi,
                      uint64_t *out, char *err, size_t errlen);
int options_parse_size(const char *var, const char *s, uint64_t *out,
                       char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------ */
/* "exec.c": the exec family's wrappers; exec_init, at load, finds libc's
 * functions and notes the process's pid (a vfork child has another). */
void exec_init(void);

/* ------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------ */
/* "log.c" */
void log_init(void);                  /* opens GEMMSHIM_LOG lazily later */
void log_record(gs_call *c);          /* buffer one JSON line; waits at most 50 ms (log.c); takes c->gpu's events */
void log_flush(void);                 /* one write of what is buffered */
void log_flush_before_exec(void);     /* log_flush, bounded as at exit (log.c) */
void log_shutdown(void);              /* flush, summary to debug output */
/* "log_format.c": c as one JSON object plus '\n' into buf; returns the
 * length, or 0 if it did not fit. Exposed for the unit tests. */
size_t log_format(const gs_call *c, char *buf, size_t len);

/* ------------------------------------------------------------------------ */
/* "gpu_time.c" (types above). gpu_time_begin records START (or says in
 * c->gpu.skip why not); _mark records another slot; _end records END.
 * gpu_time_resolve, in the log flusher: 0 while the work is not finished,
 * else 1 with the results filled and the events back in the pool.
 * gpu_time_discard gives the events back unread. */
static inline int gpu_time_wanted(void) { return (gs_opt.log_gpu_time || gs_opt.compare) && gs_opt.log_path[0]; }
void gpu_time_begin(gs_call *c);
void gpu_time_mark(gs_call *c, int slot);
void gpu_time_end(gs_call *c);
void gpu_time_unmark_gemm(gs_call *c); /* a declined route's GEMM marks, given back */
int gpu_time_resolve(gs_gpu_time *t);
void gpu_time_reader_thread(void); /* this thread reads events in RELAXED capture mode from now on */
void gpu_time_discard(gs_gpu_time *t);
const char *gpu_time_skip_name(int skip); /* NULL for GS_GPU_SKIP_NONE */

/* "compare.c": GEMMSHIM_COMPARE: after a routed call, now and then the same
 * GEMM native into scratch memory, timed (native_gpu_ns). */
void compare_after_route(gs_call *c);
int compare_due(uint64_t site);      /* this call of the site is one to compare */
/* compare_due for call c's site (c->site, else its call site), asked once
 * per call: a route that must know before its work (fp8's statistics,
 * routes/fp8_stats.c) and compare_after_route get the same answer. */
int compare_decide(gs_call *c);
/* The route asked compare_decide and then declined (the call runs native,
 * not compared): the site's count as before the call, so that only routed
 * calls count. */
void compare_forgo(gs_call *c);
unsigned compare_set_of(uint64_t site); /* the set of compare_due's table a site's count lives in */

/* "accuracy.c": a compared call's route output against the native one, on
 * the device (kernels/accuracy.cu), read by the log's writer. */
typedef struct accuracy_output {
  int type;                         /* CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F */
  const void *route;                /* the caller's output, as the route wrote it */
  int64_t ld, stride, rows, cols, batch;
} accuracy_output;
struct gs_acc_stats;
/* The call's output as the measure reads it; NULL, or why it cannot. */
const char *accuracy_plan(const gs_call *c, accuracy_output *o);
size_t accuracy_scratch_bytes(void); /* device scratch the measure needs (256-byte aligned) */
/* Enqueue the measure of o against native (same layout) on the call's
 * stream, and ACC_END after it; a failure is a note, nothing else. */
void accuracy_measure(gs_call *c, const accuracy_output *o, const void *native, void *scratch);
void accuracy_summarise(const struct gs_acc_stats *s, gs_gpu_time *t); /* the acc_* results */
void accuracy_resolve(gs_gpu_time *t);                /* once ACC_END completed: read, slot back */
void accuracy_release(gs_gpu_time *t, int ctx_alive); /* unread: slot back (if its context lives) */
struct gs_fp8_stats;
/* The fp8 statistics' figures (has_fp8, fp8[i]) from the counters read back. */
void fp8_stats_summarise(const struct gs_fp8_stats *s, gs_gpu_time *t);
void fp8_stats_resolve(gs_gpu_time *t); /* once the call's last event completed: read, slot back */
double gs_log10(double x); /* x > 0 and finite; without libm */

/* "guard.c": GEMMSHIM_GUARD_SQNR, sites whose measured accuracy fell below
 * it run native. guard_observe: the log's writer, per compared record;
 * guard_reason: a route before it runs (1: decline it with that reason). */
double guard_figure(const gs_gpu_time *t); /* min(sqnr_db, -20 log10(rel_err_p50)); -inf on a mismatch */
void guard_observe(uint64_t site, int route, const gs_gpu_time *t);
int guard_reason(uint64_t site, const char *route, char *why, size_t len); /* 1: guarded, why set */
unsigned guard_list(uint64_t *sites, double *db, int *routes, unsigned most);
void guard_forget_for_tests(void);
void compare_forget_for_tests(void); /* an empty table */

/* "measured_gate.c": with GEMMSHIM_COMPARE (and GEMMSHIM_GATE on), a site
 * whose first MEASURED_GATE_CALLS compared calls (or more) took more GPU
 * time in the route than native runs native from then on.
 * measured_observe: the log's writer, per compared record; measured_reason:
 * a route before it runs (1: decline it with that reason). */
#define MEASURED_GATE_CALLS 3
void measured_observe(uint64_t site, int route, const gs_gpu_time *t);
int measured_reason(uint64_t site, const char *route, char *why, size_t len);
/* The sites marked (at most `most`), each with its route and reason. */
unsigned measured_list(uint64_t *sites, int *routes, char (*why)[GS_REASON_MAX], unsigned most);
void measured_forget_for_tests(void);

/* ------------------------------------------------------------------------ */
/* "nvtx.c": NVTX ranges. gs_nvtx_on: NVTX_INJECTION64_PATH was set at load. */
extern int gs_nvtx_on;
void nvtx_init(void);
void nvtx_call_begin(gs_call *c, gs_route route);
void nvtx_call_end(gs_call *c);
/* The range's name, e.g. "gemmshim ffma 4096x4096x4096 bf16 (cublasGemmEx)";
 * returns its length (truncated to len - 1). */
size_t nvtx_range_name(const gs_call *c, gs_route route, char *out, size_t len);

/* ------------------------------------------------------------------------ */
/* "decode.c": fill g from the arguments. Strides are in elements; batch is 1
 * for the non-batched calls. Lt descriptors are read through the real
 * cuBLASLt getters; a getter that fails leaves g->decoded 0 and the fields it
 * could not read at -1. */
void decode_gemm(gs_gemm *g, void *handle, int ta, int tb, int64_t m, int64_t n,
                 int64_t k, const void *alpha, const void *A, int at, int64_t lda,
                 long long sa, const void *B, int bt, int64_t ldb, long long sb,
                 const void *beta, void *C, int ct, int64_t ldc, long long sc,
                 int64_t batch, int comp, int algo);
void decode_lt(gs_gemm *g, void *handle, void *desc, const void *alpha,
               const void *A, void *adesc, const void *B, void *bdesc,
               const void *beta, const void *C, void *cdesc, void *D,
               void *ddesc, void *stream);
/* decode_lt reads only what the policy is keyed on (compute type, A/B/C
 * types); this reads the rest, once, for the log, and with for_route also
 * the caller's scale pointers and fast-accumulation flag, which only a
 * route needs. */
void decode_lt_rest(gs_gemm *g, int for_route);
enum { DECODE_NO_GETTER = -1, DECODE_NO_DESCRIPTOR = -2 };
/* "arguments could not be decoded[: what failed]", for the reason. */
void decode_failure(const gs_gemm *g, char *buf, size_t len);

/* ------------------------------------------------------------------------ */
/* "device.c": the device of a call, from the handle's stream and context,
 * cached per context. Never synchronises. Returns NULL when found (c->device
 * and c->sm set), else a static string saying why not (both left -1). */
const char *device_of_call(gs_call *c);
void device_handle_created(void *handle);
void device_handle_destroyed(void *handle);

/* ------------------------------------------------------------------------ */
/* "decide.c": mode and policy table -> c->decided and c->reason. */
void decide_policy_loaded(void); /* gs_policy changed: prepare its reasons */
void call_decide(gs_call *c);
/* A route declined the call, which runs native: c->route is native, and
 * why is appended to the reason. */
void call_decline(gs_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A route's own decline helper: "<route> declined: <why>; ran native",
 * route and fmt string literals; evaluates to GS_DECLINED. */
#define ROUTE_DECLINE(c, route, fmt, ...) \
  (call_decline((c), route " declined: " fmt "; ran native", ##__VA_ARGS__), GS_DECLINED)
/* Something the reader of the log should know about the call (what the
 * route that ran did, what went wrong around it): appended to the reason,
 * the route unchanged. */
void call_note(gs_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Site id and routing log, once the call returned. */
void call_finish(gs_call *c);
/* Per-call timing and bookkeeping are only paid for when someone reads them. */
static inline int hooks_timing(void) {
  return gs_opt.log_path[0] != 0 || gs_debug_level >= GS_LEVEL_INFO;
}
static inline int hooks_dlsym_enabled(void) { return gs_opt.dlsym_hook; }

/* ------------------------------------------------------------------------ */
/* "route.c": run a non-native route. Returns the cublasStatus_t the caller
 * gets, or GS_DECLINED (reason recorded) when the GEMM must run native. */
#define GS_DECLINED (-1)
int route_run(gs_call *c);

/* "routes/checks.c": what every route asks first; NULL or the reason. */
void route_operand_shapes(const gs_gemm *g, int64_t *a_rows, int64_t *a_cols, int64_t *b_rows, int64_t *b_cols);
const char *route_check_arguments(const gs_gemm *g);
/* CUBLAS_BATCH_INVARIANCE_FLAGS asks the loaded cuBLAS (13.10 and newer)
 * for batch-invariant results and the call defers to it: the reason, else
 * NULL; buf holds a failed probe's reason. */
const char *route_check_batch_invariance(const gs_gemm *g, char *buf, size_t len);
/* A strided batch whose D members overlap: the reason, else NULL. */
const char *route_check_output_members(const gs_gemm *g);
/* A GEMM under the route's GEMMSHIM_*_MIN_FLOPS floor (ffma, fp16; fp8 has
 * none): the reason, else NULL. policy explain asks it too. */
const char *route_check_min_flops(const gs_gemm *g, int route);
int route_is_ptr_array(gs_api api); /* cublasGemmBatchedEx(_64): device arrays of member pointers */
const char *route_check_lt(const gs_gemm *g); /* attributes, orders, epilogue, scales, bias, batch */
/* route_check_lt, and alpha/beta as scalars by value or pointer: for a
 * route that builds descriptors of its own (vector pointer modes are not
 * reproduced; what cuBLASLt refuses in the caller's is forwarded by
 * route_check_arguments for cuBLASLt's own error). */
const char *route_check_lt_scalars(const gs_gemm *g);
/* The GemmEx family's handle math mode (cublasMath_t without its flag
 * bits) into *mode; NULL, or why it could not be read. */
const char *route_handle_math(const gs_gemm *g, unsigned *mode);
/* What the kernels need of call c's context (kernels.h), from its device
 * lookup; a route makes one per call and passes it to every load and
 * launch the call makes. */
kernel_ctx route_kernel_ctx(const gs_call *c);
/* beta is only known on the host in host pointer mode (an fp32 scalar for
 * the routes' compute types); otherwise C is taken to be read. */
int route_beta_may_be_nonzero(const gs_gemm *g);
/* alpha and beta are device pointers (cuBLAS's or cuBLASLt's device
 * pointer mode, as the call's api names it). */
int route_device_scalars(const gs_gemm *g);
/* The call's kernels loaded in its context: NULL, or why not (the driver
 * not found, or kernels_ready's reason). */
const char *route_kernels_ready(kernel_ctx *kc);
/* An Lt call's bias batch stride (elements; 0 without a bias or a batch)
 * into *stride; NULL, or why it could not be read. */
const char *route_lt_bias_stride(const gs_gemm *g, int64_t *stride);

/* "routes/ffma.c": bf16/fp16 GEMMs as fp32 GEMMs through the cast kernels. */
int route_ffma(gs_call *c);

/* "routes/fp8.c": bf16/fp16/fp32 GEMMs with fp8 operands and delayed scaling
 * per call site (fp8_sites.c), on cuBLASLt's fp8 GEMM or the shim's own. */
int route_fp8(gs_call *c);

/* "routes/fp16.c": bf16 GEMMs on fp16 tensor cores (sm_70+), each operand
 * scaled by a power of two from its own amax. */
int route_fp16(gs_call *c);

/* ------------------------------------------------------------------------ */
/* "site.c" */
uint64_t site_id(const void *caller, const gs_gemm *g);
/* Who made the call whose return address is caller: GS_CALLER_APP, or the
 * NVIDIA library it lies in, with *object set to that object's file name
 * (e.g. "libcusolver.so.12"; static storage). Cached per thread and
 * caller: no loader call after the first. */
gs_caller site_caller(const void *caller, const char **object);
/* For tests: take (1: trylock, its result) or give back (0) the lock that
 * guards the library object names. */
int site_objects_lock_for_tests(int take);

#endif
