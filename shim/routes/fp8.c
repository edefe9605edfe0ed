/* fp8.c: GEMMs run with fp8 operands, scaled by a recipe (fp8_recipe.h).
 *
 * For a bf16/fp16/fp32 GEMM with fp32 compute, A and B are quantized into
 * transient fp8 buffers (kernels/fp8.h: TN layout, k contiguous) with the
 * scales of the call's recipe (fp8_current.c: this call's own amax;
 * fp8_delayed.c: what its call site's ring published on the previous
 * call), then multiplied in fp32 by cuBLASLt's fp8 GEMM (sm_89+,
 * where its rules allow) or by the shim's own fp8 kernel (its tensor-core
 * variant with GEMMSHIM_FP8_BACKEND=own-mma on sm_89+), writing the
 * caller's D in its own type: D = alpha * scale_a * scale_b * op(A8) op(B8)
 * + beta * C, then the caller's Lt epilogue. The quantize kernels measure
 * amax on the way and publish the next scale on the device: no host round
 * trip, no synchronisation. The caller's tensors keep their types and
 * memory; the fp8 buffers are freed stream-ordered.
 *
 * Anything this file does not handle, and any failure before the caller's
 * output is written, declines: the hook runs the call native and the log
 * says why. Once a GEMM has been enqueued the call is never declined (a
 * native rerun would read a C it already overwrote). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/fp8.h"
#include "../../kernels/fp8_stats.h"
#include "../../kernels/kernels.h"
#include "cost.h"
#include "fp8_recipe.h"
#include "fp8_stats.h"
#include "memory.h"
#include "../resolve.h"
#include "lt.h"
#include "../shim.h"
#include "../work.h"
#include "../base/ctx_table.h"
#include "../base/sys.h"

#define F32 CUDA_R_32F

static int elem_type(int t) { return t == CUDA_R_16BF || t == CUDA_R_16F || t == F32; }

static size_t type_size(int t) { return t == F32 ? 4 : 2; }


/* rows x cols x batch, which plan() has checked fits the transient memory. */
static uint64_t g_elems(int64_t rows, int64_t cols, int64_t batch) {
  return (uint64_t)rows * (uint64_t)cols * (uint64_t)batch;
}

static const char *fmt_name(int fmt) { return fmt == GS_FP8_E5M2 ? "e5m2" : "e4m3"; }

static cudaDataType fmt_type(int fmt) { return fmt == GS_FP8_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; }


/* The plan of one call: operand shapes as stored, buffer offsets, and the
 * epilogue the GEMM applies (DEFAULT for the GemmEx family). */
typedef struct fp8_plan {
  int64_t a_rows, a_cols, b_rows, b_cols;
  int64_t k_pad; /* k of A8 and B8: the recipe's padding (fp8_recipe_k_pad) */
  /* C or D unaligned for cuBLASLt's fp8 GEMM, or m padded: the transient
   * output D' (fp8_recipe_out, fp8_recipe.h). */
  fp8_out out;
  size_t off[5]; /* A8, B8, the recipe's scratch, D', the fp8 statistics' counters */
  size_t bytes;
  int epilogue;
  const void *bias;
  int bias_type;
  char why[GS_COST_WHY]; /* the cost gate's reason */
} fp8_plan;

enum { BUF_A8, BUF_B8, BUF_SCRATCH, BUF_D, BUF_STATS };

/* ---- checks ------------------------------------------------------------------------ */
static const char *check_types(const gs_gemm *g) {
  if (!elem_type(g->a_type) || g->b_type != g->a_type) return "A and B are not both bf16, fp16 or fp32";
  /* The 32F_FAST_* types take fp32 A/B/C only: route_check_arguments
   * forwards the rest for cuBLAS's own error. */
  switch (g->compute_type) {
    case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_FAST_16BF: case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      break;
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      return "compute type 32f_pedantic asks for exact fp32 arithmetic";
    default:
      return "compute type is not fp32";
  }
  if (!elem_type(g->c_type)) return "C is not bf16, fp16 or fp32";
  if (g->d_type != g->c_type) return "D's type differs from C's";
  if (g->api == GS_API_LT_MATMUL && g->scale_type != F32) return "scale type is not fp32";
  return NULL;
}

/* cublasMath_t CUBLAS_PEDANTIC_MATH "uses the prescribed precision and
 * standardized arithmetic for all phases of calculations" (cuBLAS
 * documentation): the per-handle form of COMPUTE_32F_PEDANTIC, and as far
 * from fp8 operands. cuBLASLt has no handle math mode. */
static const char *check_math_mode(const gs_gemm *g) {
  unsigned mode;
  const char *why = route_handle_math(g, &mode);
  if (why) return why;
  if (mode == CUBLAS_PEDANTIC_MATH) return "the handle's math mode CUBLAS_PEDANTIC_MATH asks for exact fp32 arithmetic";
  return NULL;
}

static const char *check_lt(const gs_gemm *g) {
  const char *why = route_check_lt(g);
  if (why) return why;
  if ((g->epilogue & CUBLASLT_EPILOGUE_BIAS) && !elem_type(g->bias_type)) return "bias type is not bf16, fp16 or fp32";
  /* Batches whose layouts agree are quantized and multiplied like strided
   * batches (route_check_lt refused the rest). A bias with a batch stride
   * is one vector per member, which the fp8 GEMMs do not take. */
  if (g->batch > 1 && (g->epilogue & CUBLASLT_EPILOGUE_BIAS)) return "batched cublasLtMatmul with a bias";
  return NULL;
}

static const char *plan(const gs_call *c, const fp8_recipe *rc, fp8_plan *p) {
  const gs_gemm *g = &c->g;
  memset(p, 0, sizeof *p);
  route_operand_shapes(g, &p->a_rows, &p->a_cols, &p->b_rows, &p->b_cols);
  const char *why = check_types(g);
  if (!why) why = route_check_arguments(g);
  if (!why) why = g->api == GS_API_LT_MATMUL ? check_lt(g) : check_math_mode(g);
  if (!why) why = route_check_batch_invariance(g, p->why, sizeof p->why);
  if (why) return why;
  if (g->pointer_mode != CUBLAS_POINTER_MODE_HOST && g->pointer_mode != CUBLAS_POINTER_MODE_DEVICE)
    return g->pointer_mode == -1 ? "the handle's pointer mode is unknown" : "alpha/beta pointer mode is a vector mode";
  /* The device's pointer arrays are never read on the host, and the fp8
   * kernels take strided operands only. */
  if (route_is_ptr_array(g->api)) return "pointer-array batch (the fp8 kernels take strided operands only)";
  if (g->m == 0 || g->n == 0 || g->k == 0 || g->batch == 0) return "empty GEMM: nothing to quantize";
  /* Where cuBLASLt's fp8 GEMM runs (cost_gate_applies: sm_89+, no own
   * kernel named), an unaligned C or D or an m cuBLASLt refuses goes
   * through D'; the cost gate (fp8_recipe_gate) charges its copies. */
  fp8_recipe_out(c, rc, &p->out);
  if (cost_gate_applies(c, GS_ROUTE_FP8)) {
    why = fp8_recipe_gate(c, rc, &p->out, p->why);
    if (why) return why;
  }
  p->k_pad = fp8_recipe_k_pad(rc, c);
  const size_t scratch = fp8_recipe_scratch(rc, c);
  transient_part parts[5] = {{p->out.m_pad, p->k_pad, g->batch, 1}, {p->k_pad, g->n, g->batch, 1}};
  int idx[5] = {BUF_A8, BUF_B8}, n = 2;
  if (scratch) idx[n] = BUF_SCRATCH, parts[n++] = (transient_part){1, 1, 1, scratch};
  if (p->out.out_t) idx[n] = BUF_D, parts[n++] = (transient_part){p->out.ld_t, g->n, g->batch, 4};
  idx[n] = BUF_STATS, parts[n++] = (transient_part){1, 1, 1, fp8_stats_bytes()};
  size_t off[5];
  why = transient_plan(parts, n, gs_opt.fp8_max_bytes, "needs more transient memory than GEMMSHIM_FP8_MAX_BYTES", off,
                       &p->bytes);
  if (why) return why;
  for (int i = 0; i < n; i++) p->off[idx[i]] = off[i];
  if (g->api == GS_API_LT_MATMUL) {
    p->epilogue = g->epilogue;
    p->bias = (g->epilogue & CUBLASLT_EPILOGUE_BIAS) ? g->bias : NULL;
    p->bias_type = g->bias_type;
  } else {
    p->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    p->bias_type = -1;
  }
  return NULL;
}


static CUdeviceptr scale_ptr(const gs_fp8_ring *ring, int parity) {
  return (CUdeviceptr)(uintptr_t)&ring->scale[parity][0];
}

/* ---- an unaligned C/D through D' ------------------------------------------------ */
/* C into D' (fp32, ld_t), widened exactly, when beta may be nonzero:
 * cuBLASLt then reads C from D' and writes D' in place. */
static CUresult out_in(const gs_call *c, kernel_ctx *kc, const fp8_plan *p, char *base) {
  const gs_gemm *g = &c->g;
  const kernel_cast_operand op = {g->c_type, g->C,       0,       g->ldc, g->batch > 1 ? g->stride_c : 0,
                                  base + p->off[BUF_D], 0, p->out.ld_t, p->out.ld_t * g->n, g->m, g->n, g->batch};
  return kernel_widen_operands(kc, (CUstream)g->stream, &op, 1);
}

/* D' into the caller's D: rounded to bf16/fp16 as cuBLASLt rounds its
 * fp32 result, or copied (fp32). Stream-ordered after the GEMM. */
static CUresult out_out(const gs_call *c, kernel_ctx *kc, const fp8_plan *p, char *base) {
  const gs_gemm *g = &c->g;
  const float *src = (const float *)(uintptr_t)(base + p->off[BUF_D]);
  const int64_t sd = g->batch > 1 ? g->stride_d : 0;
  if (g->d_type != F32)
    return kernel_narrow(kc, (CUstream)g->stream, g->d_type, src, p->out.ld_t, p->out.ld_t * g->n, g->D, g->ldd, sd, g->m,
                         g->n, g->batch);
  const kernel_cast_operand op = {F32, src, 0, p->out.ld_t, p->out.ld_t * g->n, g->D, 0, g->ldd, sd, g->m, g->n, g->batch};
  return kernel_widen_operands(kc, (CUstream)g->stream, &op, 1);
}

/* ---- quantization ------------------------------------------------------------------- */
static CUresult quantize_operands(const gs_call *c, const fp8_recipe *rc, kernel_ctx *kc, const fp8_plan *p,
                                  const fp8_scales *u, char *base, unsigned *ran) {
  const gs_gemm *g = &c->g;
  if (u->scaled) { /* block-scaled recipes: their own kernels, no rings */
    CUresult r = rc->quantize(c, kc, u, (uint8_t *)(base + p->off[BUF_A8]), (uint8_t *)(base + p->off[BUF_B8]));
    if (r == CUDA_SUCCESS) *ran |= FP8_RAN_QUANTIZE;
    return r;
  }
  CUstream s = (CUstream)g->stream;
  /* A and B in one launch, each with its own ring. */
  const fp8_operand ops[2] = {
      {g->a_type, g->A, p->a_rows, p->a_cols, g->lda, g->stride_a, g->batch, g->transa != CUBLAS_OP_N, 0,
       (uint8_t *)(base + p->off[BUF_A8]), u->ring[0], u->stats ? &u->stats->op[0] : NULL, p->k_pad, u->partial[0],
       u->fmt[0]},
      {g->b_type, g->B, p->b_rows, p->b_cols, g->ldb, g->stride_b, g->batch, g->transb != CUBLAS_OP_N, 1,
       (uint8_t *)(base + p->off[BUF_B8]), u->ring[1], u->stats ? &u->stats->op[1] : NULL, p->k_pad, u->partial[1],
       u->fmt[1]},
  };
  CUresult r = CUDA_SUCCESS;
  if (u->partial[0]) { /* the current recipe: write-only passes, no ring (docs/graphs.md) */
    r = fp8_current_amax(kc, s, ops, 2);
    if (r != CUDA_SUCCESS) return r;
    *ran |= FP8_RAN_AMAX_INIT;
    r = fp8_current_quantize(kc, s, ops, 2);
    if (r == CUDA_SUCCESS) *ran |= FP8_RAN_QUANTIZE;
    return r;
  }
  if (u->needs_amax_init) {
    r = fp8_amax_init_operands(kc, s, ops, 2, u->parity);
    if (r != CUDA_SUCCESS) return r;
    *ran |= FP8_RAN_AMAX_INIT;
  }
  r = fp8_quantize_operands(kc, s, ops, 2, u->parity);
  if (r == CUDA_SUCCESS) *ran |= FP8_RAN_QUANTIZE;
  return r;
}

/* ---- cuBLASLt's fp8 GEMM -------------------------------------------------------------- */
/* One cuBLASLt handle per context for the GemmEx family, which brings no
 * handle of its own; made outside capture (creation may allocate) and kept
 * for the process (../base/ctx_table.h): a new context at the old address
 * after a reset gets its own. A replaced entry and its handle are
 * abandoned: a reader may hold the entry, and destroying a handle of a dead
 * context could touch what went with it. */
typedef struct lt_handle_entry {
  ctx_entry head;
  cublasLtHandle_t handle;
} lt_handle_entry;
CTX_TABLE_DEFINE(lt_handles, 64, NULL);

/* The table's lock is held across cublasLtCreate: a child of a fork made
 * while another thread held it gets a fresh one (each entry is made whole,
 * then published by one atomic store). Registered at load, never inside a
 * fork handler. */
static void lt_handles_after_fork_child(void) { ctx_table_after_fork_child(&lt_handles, 0); }

__attribute__((constructor)) static void lt_handles_register_fork(void) {
  pthread_atfork(NULL, NULL, lt_handles_after_fork_child);
}

static cublasLtHandle_t lt_handle_find(const gs_call *c) {
  const lt_handle_entry *e = (const lt_handle_entry *)ctx_table_find(&lt_handles, c->ctx, c->ctx_id);
  return e ? e->handle : NULL;
}

static cublasLtHandle_t lt_handle_for(const gs_call *c, const char **why) {
  if (c->g.api == GS_API_LT_MATMUL) return (cublasLtHandle_t)c->g.handle;
  cublasLtHandle_t h = lt_handle_find(c);
  if (h) return h;
  if (!gs_sys.cublasLtCreate) {
    *why = "cublasLtCreate not found";
    return NULL;
  }
  ctx_table_lock(&lt_handles);
  h = lt_handle_find(c);
  ctx_entry *old;
  int slot = h ? -1 : ctx_table_place(&lt_handles, c->ctx, &old);
  lt_handle_entry *n = h || slot < 0 ? NULL : GS_CALL(calloc, 1, sizeof *n);
  if (!h && slot < 0) *why = "more live contexts than cuBLASLt handles kept (64)";
  else if (!h && !n) *why = "out of host memory for a cuBLASLt handle";
  if (n) {
    CUcontext popped;
    if (GS_CALL(cuCtxPushCurrent_v2, (CUcontext)c->ctx) != CUDA_SUCCESS) {
      *why = "cuCtxPushCurrent failed";
    } else {
      if (GS_CALL(cublasLtCreate, &h) != CUBLAS_STATUS_SUCCESS) {
        h = NULL;
        *why = "cublasLtCreate failed";
      }
      GS_CALL(cuCtxPopCurrent_v2, &popped);
    }
    if (h) {
      n->handle = h;
      ctx_table_publish(&lt_handles, slot, &n->head, c->ctx, c->ctx_id);
    } else {
      free(n);
    }
  }
  ctx_table_unlock(&lt_handles);
  return h;
}


/* Why this call cannot take cuBLASLt's fp8 GEMM, or NULL. Its rules: sm_89
 * or newer, TN (our buffers are), k a multiple of 16, m of 8, 16-byte
 * aligned pointers and leading dimensions, no E5M2 x E5M2, fp32 compute
 * and scale, and a bias in bf16 (fp32 D) or D's type. */
static const char *lt_unfit(const gs_call *c, const fp8_plan *p, const fp8_scales *u) {
  const gs_gemm *g = &c->g;
  if (gs_opt.fp8_backend == GS_FP8_BACKEND_OWN) return "GEMMSHIM_FP8_BACKEND=own";
  if (gs_opt.fp8_backend == GS_FP8_BACKEND_OWN_MMA) return "GEMMSHIM_FP8_BACKEND=own-mma";
  if (c->sm < 89) return "cuBLASLt fp8 needs sm_89 or newer";
  if (u->fmt[0] == GS_FP8_E5M2 && u->fmt[1] == GS_FP8_E5M2) return "cuBLASLt fp8 has no E5M2 x E5M2";
  if (p->k_pad % 16) return "k is not a multiple of 16 (cuBLASLt fp8 leading dimensions)";
  if (!p->out.out_t && !fp8_lt_c_d_aligned(g)) return "C or D is not 16-byte aligned (cuBLASLt fp8)";
  /* Not in cuBLAS's docs: an H200 with cuBLAS 13.1 refused m = 100 and 260
   * and took 200 and 256 (docs/gpu-results.md). */
  if (p->out.m_pad % 8) return "m is not a multiple of 8 (cuBLASLt fp8 refuses it)";
  if (p->bias && p->bias_type != (g->d_type == F32 || p->out.out_t ? CUDA_R_16BF : g->d_type))
    return "bias type is not cuBLASLt's fp8 bias type";
  if (!resolve_hooked(GS_SYS_cublasLtMatmul) || !route_lt_available())
    return "cuBLASLt not loaded";
  return NULL;
}

/* op(A) = A8^T with A8 k x m (ld k), op(B) = B8 k x n (ld k): TN. The
 * plan (routes/lt.c) is made on first use and kept: its key holds every
 * attribute; for delayed scaling the scale pointers of this call's parity
 * too (two plans per site), for scales in the call's own transient memory
 * (current) none, the pointers being set per call. The GemmEx family
 * lends the stream's persistent workspace; an Lt call lends its own. */
static cublasStatus_t lt_fp8(const gs_call *c, const fp8_plan *p, const fp8_scales *u, cublasLtHandle_t h,
                             const char *base, const char **why, const char **ws_why) {
  const gs_gemm *g = &c->g;
  route_lt_key k;
  route_lt_key_init(&k, c);
  k.compute = CUBLAS_COMPUTE_32F;
  k.scale = F32;
  k.transa = CUBLAS_OP_T;
  k.transb = CUBLAS_OP_N;
  k.pointer_mode = g->pointer_mode;
  k.epilogue = (uint32_t)p->epilogue;
  const void *sa = (const void *)(uintptr_t)(u->scaled ? u->scales[0] : scale_ptr(u->ring[0], u->parity));
  const void *sb = (const void *)(uintptr_t)(u->scaled ? u->scales[1] : scale_ptr(u->ring[1], u->parity));
  k.a_scale_mode = u->scaled ? u->scale_mode[0] : 0;
  k.b_scale_mode = u->scaled ? u->scale_mode[1] : 0;
  /* Scales in the call's own transient memory move every call: one plan
   * for them all, with the pointers set per call. */
  k.scales_per_call = u->per_call;
  k.a_scale = u->per_call ? NULL : sa;
  k.b_scale = u->per_call ? NULL : sb;
  /* Fast accumulation (no periodic promotion of the fp8 partial sums) only
   * for a GEMM known to be a forward one: TransformerEngine's
   * Float8CurrentScaling and torchao (Float8LinearConfig: use_fast_accum on
   * gemm_config_output only) keep split accumulation for grad-input and
   * grad-weight. */
  k.fast_accum = u->forward;
  if (p->bias) {
    k.has_bias = 1;
    k.bias_type = p->bias_type;
  }
  const char *a8 = base + p->off[BUF_A8], *b8 = base + p->off[BUF_B8];
  const int64_t kp = p->k_pad; /* zeros past g->k add nothing */
  route_lt_key_layout(&k, 0, fmt_type(u->fmt[0]), kp, p->out.m_pad, kp, g->batch, kp * p->out.m_pad);
  route_lt_key_layout(&k, 1, fmt_type(u->fmt[1]), kp, g->n, kp, g->batch, kp * g->n);
  /* D' (out_t) is C and D both: C was widened into it. */
  void *d = p->out.out_t ? (void *)(uintptr_t)(base + p->off[BUF_D]) : g->D;
  const void *cm = p->out.out_t ? d : g->C;
  if (p->out.out_t) {
    route_lt_key_layout(&k, 2, F32, p->out.m_pad, g->n, p->out.ld_t, g->batch, p->out.ld_t * g->n);
    route_lt_key_layout(&k, 3, F32, p->out.m_pad, g->n, p->out.ld_t, g->batch, p->out.ld_t * g->n);
  } else {
    route_lt_key_layout(&k, 2, g->c_type, g->m, g->n, g->ldc, g->batch, g->stride_c);
    route_lt_key_layout(&k, 3, g->d_type, g->m, g->n, g->ldd, g->batch, g->stride_d);
  }
  k.align[0] = route_lt_alignment(a8);
  k.align[1] = route_lt_alignment(b8);
  k.align[2] = route_lt_alignment(cm);
  k.align[3] = route_lt_alignment(d);
  void *ws = g->workspace;
  size_t wss = g->workspace_size;
  if (g->api != GS_API_LT_MATMUL) *ws_why = route_lt_workspace(c, &ws, &wss);
  k.workspace_size = wss;
  cublasStatus_t s;
  const route_lt_plan *plan = route_lt_plan_get(h, &k, p->bias, &s, why);
  if (!plan) return s;
  if (u->per_call) s = route_lt_set_scales(plan, sa, sb);
  if (s == CUBLAS_STATUS_SUCCESS) s = route_lt_matmul(h, plan, g->alpha, a8, b8, g->beta, cm, d, p->bias, ws, wss, g->stream);
  route_lt_plan_put(plan);
  return s;
}

static CUresult own_fp8(const gs_call *c, kernel_ctx *kc, const fp8_plan *p, const fp8_scales *u, const char *base,
                        int mma) {
  const gs_gemm *g = &c->g;
  return (mma ? fp8_gemm_mma : fp8_gemm)(kc, (CUstream)g->stream, g->m, g->n, g->k, g->batch,
                  (const uint8_t *)(base + p->off[BUF_A8]), u->fmt[0], (const uint8_t *)(base + p->off[BUF_B8]),
                  u->fmt[1], &u->ring[0]->scale[u->parity][0], &u->ring[1]->scale[u->parity][0], g->alpha, g->beta,
                  g->pointer_mode, g->c_type, g->C, g->ldc, g->stride_c, g->d_type, g->D, g->ldd, g->stride_d,
                  p->epilogue, p->bias, p->bias_type);
}

/* ---- the route ---------------------------------------------------------------------- */
/* Every decline of this route reads "fp8 declined: <why>; ran native". */
/* A decline after fp8_stats_begin asked compare_decide gives the count back. */
#define FP8_DECLINE(c, ...) (compare_forgo(c), ROUTE_DECLINE((c), "fp8", __VA_ARGS__))

/* A decline after the quantize kernels were asked for: the statistics
 * slot, the transient buffers and the recipe's per-call state go back, in
 * that order (FP8_DECLINE then gives compare's count back). */
static void undo(gs_call *c, void *stats_slot, gs_transient *t, const fp8_recipe *rc, fp8_scales *u, unsigned ran) {
  fp8_stats_abandon(c, stats_slot);
  transient_release(t);
  rc->release(u, ran);
}

/* The recipe that ran, or whose rules and estimate declined the call,
 * where it is not the one asked for. */
static void recipe_note(gs_call *c, int recipe, const char *recipe_why) {
  if (recipe_why[0]) call_note(c, "recipe %s instead: %s", gs_fp8_recipe_name(recipe), recipe_why);
}

/* A decline once the recipe is chosen: the recipe in use first, where it
 * is not the one asked for (a cost gate's estimate is that recipe's), then
 * "fp8 declined: <why>; ran native", whether or not why is the recipe's. */
#define FP8_DECLINE_AS(c, recipe, recipe_why, ...) \
  (recipe_note((c), (recipe), (recipe_why)), FP8_DECLINE((c), __VA_ARGS__))

static void describe_formats(gs_call *c, const fp8_scales *u, const char *recipe_why) {
  static const char *const grad[4] = {"", " (A: gradient)", " (B: gradient)", ""};
  call_note(c, "fp8 %s x %s%s%s%s", fmt_name(u->fmt[0]), fmt_name(u->fmt[1]),
            grad[u->gradient[0] | u->gradient[1] << 1], u->note ? "; " : "", u->note ? u->note : "");
  recipe_note(c, c->recipe, recipe_why);
}

int route_fp8(gs_call *c) {
  /* Recipes and kernels are chosen by the device's compute capability. */
  if (!c->ctx || c->sm < 0) return FP8_DECLINE(c, "the call's device is unknown");
  char recipe_why[320];
  int recipe = fp8_recipe_choose(c, recipe_why, sizeof recipe_why);
  const fp8_recipe *rc = fp8_recipe_get(recipe);
  fp8_plan p;
  const char *why = plan(c, rc, &p);
  if (why) return FP8_DECLINE_AS(c, recipe, recipe_why, "%s", why);
  /* In capture, before any state is touched: a captured call's buffers
   * are its graph's (memory.h). The delayed recipe's per-site state lives
   * on the host (ring parity, site matching, docs/graphs.md): a replay
   * would not advance it. */
  why = transient_capture_why(c);
  if (why) return FP8_DECLINE_AS(c, recipe, recipe_why, "%s", why);
  if (c->captured && recipe == GS_FP8_RECIPE_DELAYED)
    return FP8_DECLINE_AS(c, recipe, recipe_why,
                          "the delayed recipe is not captured into CUDA graphs: its per-site state (amax history "
                          "parity, site matching) is kept on the host, and replays would not advance it");
  kernel_ctx kc = route_kernel_ctx(c);
  kc.sms = cost_device_sms(c->device, c->sm); /* the quantize grid: a wave of the device's SMs */
  why = route_kernels_ready(&kc);
  if (why) return FP8_DECLINE_AS(c, recipe, recipe_why, "kernels not loaded (%s)", why);

  gs_transient t;
  why = transient_alloc(c, p.bytes, &t);
  if (why) return FP8_DECLINE_AS(c, recipe, recipe_why, "%s", why);
  char *base = (char *)(uintptr_t)t.ptr;
  fp8_scales u;
  memset(&u, 0, sizeof u);
  const uint64_t checked_site = c->site;
  why = rc->acquire(c, fp8_recipe_scratch(rc, c) ? t.ptr + (CUdeviceptr)p.off[BUF_SCRATCH] : 0, &u);
  if (why) {
    transient_release(&t);
    return FP8_DECLINE_AS(c, recipe, recipe_why, "%s", why);
  }
  /* A recipe with per-layer sites (delayed) has just named the call's
   * site: the guard and the measured gate are asked again for that one. */
  char guarded[GS_REASON_MAX];
  if (c->site != checked_site && (guard_reason(c->site, "fp8", guarded, sizeof guarded) ||
                                  (cost_gate_applies(c, GS_ROUTE_FP8) &&
                                   measured_reason(c->site, "fp8", guarded, sizeof guarded)))) {
    transient_release(&t);
    rc->release(&u, 0);
    recipe_note(c, recipe, recipe_why);
    call_decline(c, "%s", guarded);
    return GS_DECLINED;
  }
  /* On sm_89+ the own kernel (CUDA cores, or fp8 mma without cuBLASLt's
   * tuning) is slower than native bf16 on tensor cores: a call cuBLASLt's
   * fp8 GEMM cannot take runs native there, unless the own kernel was asked
   * for by name. */
  const char *own_why = lt_unfit(c, &p, &u);
  if (own_why && fp8_lt_path(c)) {
    transient_release(&t);
    rc->release(&u, 0);
    return FP8_DECLINE_AS(c, recipe, recipe_why, "%s; the own fp8 kernel is slower than native bf16 on sm_89+",
                          own_why);
  }
  call_work_begin(c, GS_ROUTE_FP8);
  /* A compared call's statistics (fp8_stats.c), counted by every
   * recipe's quantize kernels. */
  const CUdeviceptr stats_dev = fp8_stats_bytes() ? t.ptr + (CUdeviceptr)p.off[BUF_STATS] : 0;
  void *stats_slot = fp8_stats_begin(c, stats_dev);
  u.stats = stats_slot ? (gs_fp8_stats *)(uintptr_t)stats_dev : NULL;
  unsigned ran = 0;
  CUresult r = quantize_operands(c, rc, &kc, &p, &u, base, &ran);
  if (r != CUDA_SUCCESS) {
    undo(c, stats_slot, &t, rc, &u, ran);
    return FP8_DECLINE_AS(c, recipe, recipe_why, "quantize kernel launch failed (CUresult %d)", (int)r);
  }

  /* Nothing of the caller's is written until a GEMM succeeds: a cuBLASLt
   * call that returns an error has launched nothing, and neither has a
   * failed launch of the own kernel. */
  /* A8's columns past m (m padded): zeros, one memset of
   * (m_pad - m) x k_pad bytes after A8's m columns. Row i of D' reads row i
   * of op(A) only, and rows past m are never copied out, so the result does
   * not need them; they are zeroed so that the GEMM never reads memory
   * nothing wrote (compute-sanitizer's initcheck reports such reads). */
  if (!own_why && p.out.m_pad != c->g.m) {
    char *tail = base + p.off[BUF_A8] + c->g.m * p.k_pad;
    r = gs_sys.cuMemsetD8Async ? GS_CALL(cuMemsetD8Async, (CUdeviceptr)(uintptr_t)tail, 0,
                                         (size_t)((p.out.m_pad - c->g.m) * p.k_pad), (CUstream)c->g.stream)
                               : CUDA_ERROR_NOT_FOUND;
    if (r != CUDA_SUCCESS) {
      undo(c, stats_slot, &t, rc, &u, ran);
      return FP8_DECLINE_AS(c, recipe, recipe_why, "cuMemsetD8Async failed (CUresult %d)", (int)r);
    }
  }
  if (!own_why && p.out.cast_c) {
    r = out_in(c, &kc, &p, base);
    if (r != CUDA_SUCCESS) {
      undo(c, stats_slot, &t, rc, &u, ran);
      return FP8_DECLINE_AS(c, recipe, recipe_why, "C copy kernel launch failed (CUresult %d)", (int)r);
    }
  }
  if (c->gpu.on) gpu_time_mark(c, GS_GPU_EV_GEMM_BEGIN);
  cublasLtHandle_t lt = NULL;
  if (!own_why) lt = lt_handle_for(c, &own_why);
  cublasStatus_t lt_status = CUBLAS_STATUS_SUCCESS;
  const char *plan_why = NULL, *ws_why = NULL;
  if (lt) {
    lt_status = lt_fp8(c, &p, &u, lt, base, &plan_why, &ws_why);
    if (lt_status != CUBLAS_STATUS_SUCCESS) lt = NULL;
  }
  /* The GEMM wrote D' only: if its copy out cannot be launched, nothing of
   * the caller's was written and the call runs native. */
  if (lt && p.out.out_t) {
    r = out_out(c, &kc, &p, base);
    if (r != CUDA_SUCCESS) {
      undo(c, stats_slot, &t, rc, &u, ran);
      return FP8_DECLINE_AS(c, recipe, recipe_why, "output copy kernel launch failed (CUresult %d)", (int)r);
    }
  }
  /* sm_89+: what cuBLASLt refuses at run time runs native, never the own
   * kernel (slower than native bf16 there: docs/fp8.md). A refused
   * cublasLtMatmul launched nothing, so nothing of the caller's is written.
   * Seen on an H200 (docs/gpu-results.md): shapes the static rules let
   * through and scale pointers it would not take. */
  if (!lt && fp8_lt_path(c)) {
    undo(c, stats_slot, &t, rc, &u, ran);
    if (plan_why) return FP8_DECLINE_AS(c, recipe, recipe_why, "cuBLASLt fp8: %s", plan_why);
    if (lt_status != CUBLAS_STATUS_SUCCESS)
      return FP8_DECLINE_AS(c, recipe, recipe_why, "cuBLASLt fp8 refused this call (status %d)", (int)lt_status);
    return FP8_DECLINE_AS(c, recipe, recipe_why, "cuBLASLt fp8: %s", own_why ? own_why : "no handle");
  }
  /* GEMMSHIM_FP8_BACKEND=own-mma: the tensor-core kernel where the device
   * has fp8 mma (sm_89+) and its module loaded; otherwise, and if its launch
   * fails (nothing written then), the FFMA kernel, with the reason. */
  int mma = 0;
  char mma_why[96] = "";
  if (!lt && gs_opt.fp8_backend == GS_FP8_BACKEND_OWN_MMA) {
    if (c->sm < 89) {
      snprintf(mma_why, sizeof mma_why, "own-mma needs sm_89 or newer (device is sm_%d)", c->sm);
    } else {
      r = own_fp8(c, &kc, &p, &u, base, 1);
      if (r == CUDA_SUCCESS) mma = 1;
      else snprintf(mma_why, sizeof mma_why, "own-mma kernel launch failed (CUresult %d)", (int)r);
    }
  }
  if (!lt && !mma) {
    r = own_fp8(c, &kc, &p, &u, base, 0);
    if (r != CUDA_SUCCESS) {
      undo(c, stats_slot, &t, rc, &u, ran);
      return FP8_DECLINE_AS(c, recipe, recipe_why, "fp8 GEMM kernel launch failed (CUresult %d)", (int)r);
    }
  }
  if (c->gpu.on) gpu_time_mark(c, GS_GPU_EV_GEMM_END);
  fp8_stats_finish(c, stats_dev, stats_slot, g_elems(c->g.m, c->g.k, c->g.batch), g_elems(c->g.k, c->g.n, c->g.batch),
                   u.scaled);
  transient_release(&t);
  c->recipe = recipe;
  describe_formats(c, &u, recipe_why);
  rc->release(&u, ran);

  c->route = GS_ROUTE_FP8;
  c->backend = lt ? "cublaslt-fp8" : mma ? "own-mma" : "own";
  if (lt && ws_why)
    call_note(c, "%s", ws_why);
  else if (!lt && plan_why)
    call_note(c, "cuBLASLt fp8: %s, ran the own kernel", plan_why);
  else if (!lt && lt_status != CUBLAS_STATUS_SUCCESS)
    call_note(c, "cuBLASLt fp8 returned status %d, ran the own kernel", (int)lt_status);
  else if (mma_why[0])
    call_note(c, "%s; ran the own kernel", mma_why);
  else if (!lt && gs_opt.fp8_backend != GS_FP8_BACKEND_OWN && gs_opt.fp8_backend != GS_FP8_BACKEND_OWN_MMA)
    call_note(c, "own kernel: %s", own_why);
  return CUBLAS_STATUS_SUCCESS;
}
