/* fp8_launch.c: the launchers of the fp8 kernels (fp8.h; fp8_quantize.cu,
 * fp8_quantize_sm89.cu, fp8_gemm.cu, fp8_gemm_mma.cu).
 *
 * Each checks its arguments before touching the driver (bad ones:
 * CUDA_ERROR_INVALID_VALUE, an epilogue it does not implement:
 * CUDA_ERROR_NOT_SUPPORTED), sizes the grid within the hardware's limits
 * (the kernels' grid-stride loops cover the rest) and launches one kernel of
 * GS_FP8_KERNELS on the caller's stream, never synchronising.
 *
 * kernels.mk embeds each kernel file's PTX (gs_ptx_fp8_quantize,
 * gs_ptx_fp8_gemm, ...); module.h's GS_KERNEL_FILES lists them, so they
 * load with the cast kernels, once per context (module_launch.c). Launches
 * go through kernels_launch (module.h), which makes the caller's context
 * (kernel_ctx, kernels.h) current. */
#include <library_types.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../shim/base/sys.h"
#include "fp8.h"
#include "fp8_kernels.h"
#include "module.h"

/* The device-side ring must be fp8.h's, byte for byte. */
#define RING_SAME(f) _Static_assert(offsetof(gs_fp8_ring, f) == offsetof(gs_fp8_ring_dev, f), \
                                    "gs_fp8_ring_dev." #f " is not where gs_fp8_ring." #f " is")
RING_SAME(scale);
RING_SAME(amax_slot);
RING_SAME(blocks_done);
RING_SAME(pos);
RING_SAME(history);
RING_SAME(fmt);
RING_SAME(margin_pow2);
RING_SAME(last_amax);
RING_SAME(hist);
#undef RING_SAME
_Static_assert(sizeof(gs_fp8_ring) == sizeof(gs_fp8_ring_dev), "ring sizes differ");
_Static_assert(GS_FP8_AMAX_SLOTS == GS_FP8_DEV_AMAX_SLOTS, "amax slot counts differ");

/* The fp8 kernels live in the shim's module cache with the cast kernels
 * (module.h): one load per context for all of them. */
static CUresult fp8_launch_either(kernel_ctx *kc, CUstream stream, gs_kernel_id preferred, gs_kernel_id id,
                                  const unsigned grid[3], unsigned threads, void *args) {
  if (!kc->ctx) return CUDA_ERROR_INVALID_CONTEXT;
  CUfunction f;
  const char *why = NULL;
  /* An optional file's kernel that this context has not loaded (older
   * device, or its driver refused the PTX): the base kernel does the same. */
  CUresult r = kernels_function(kc, preferred, &f, &why);
  if (r == CUDA_ERROR_NOT_SUPPORTED && preferred != id) r = kernels_function(kc, id, &f, &why);
  if (r != CUDA_SUCCESS) return r;
  const unsigned block[3] = {threads, 1, 1};
  void *params[] = {args};
  return kernels_launch(kc, f, grid, block, stream, params);
}

static CUresult fp8_launch(kernel_ctx *kc, CUstream stream, gs_kernel_id id, const unsigned grid[3],
                           unsigned threads, void *args) {
  return fp8_launch_either(kc, stream, id, id, grid, threads, args);
}

/* ---- argument checks ----------------------------------------------------- */

static int64_t elem_size(int elem) { return elem == GS_ELEM_F32 ? 4 : 2; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int aligned(const void *p, size_t n) { return (uintptr_t)p % n == 0; }

/* The extent of one batch member, ld*(cols-1) + rows elements; -1 on overflow. */
static int64_t member_span(int64_t ld, int64_t rows, int64_t cols) {
  int64_t span;
  if (__builtin_mul_overflow(ld, cols - 1, &span) || __builtin_add_overflow(span, rows, &span))
    return -1;
  return span;
}

/* A strided batch of non-empty members: offsets fit int64, and a written
 * matrix's members do not overlap (two threads would write one element).
 * A stride of 0 on a read matrix is a broadcast. */
static int batch_ok(int64_t stride, int64_t batch, int64_t span, int written) {
  if (batch <= 1) return 1;
  int64_t end;
  if (stride < 0 || (written && stride < span)) return 0;
  return !__builtin_mul_overflow(stride, batch - 1, &end) && !__builtin_add_overflow(end, span, &end);
}

/* rows*cols*batch fits int64 (the fp8 buffer's size in bytes). */
static int volume_ok(int64_t a, int64_t b, int64_t c) {
  int64_t v;
  return !__builtin_mul_overflow(a, b, &v) && !__builtin_mul_overflow(v, c, &v);
}

/* ---- quantize and amax ---------------------------------------------------- */
/* What a quantize launch runs: the ring kernels' quantize or amax pass, or
 * the current recipe's. */
enum { Q_RING = 0, Q_RING_AMAX, Q_CUR, Q_CUR_AMAX };
#define IDS3(pre, post) {[GS_ELEM_F32] = GS_K_##pre##_f32##post, [GS_ELEM_BF16] = GS_K_##pre##_bf16##post, \
                         [GS_ELEM_F16] = GS_K_##pre##_f16##post}
/* [kind][counting statistics][element]: the current recipe's quantize
 * pass has a counting variant; the ring kernels count where given
 * counters, and the amax passes never count. */
static const gs_kernel_id quantize_ids[4][2][3] = {
    [Q_RING] = {IDS3(gs_fp8_quantize, ), IDS3(gs_fp8_quantize, )},
    [Q_RING_AMAX] = {IDS3(gs_fp8_amax_init, ), IDS3(gs_fp8_amax_init, )},
    [Q_CUR] = {IDS3(gs_fp8_quantize_cur, ), IDS3(gs_fp8_quantize_cur, _stats)},
    [Q_CUR_AMAX] = {IDS3(gs_fp8_amax_part, ), IDS3(gs_fp8_amax_part, )},
};
/* Where the device runs them (sm_89+): the hardware conversion. The amax
 * passes have no conversion: the sm_61 kernels everywhere. */
static const gs_kernel_id quantize_sm89_ids[4][2][3] = {
    [Q_RING] = {IDS3(gs_fp8_quantize, _sm89), IDS3(gs_fp8_quantize, _sm89)},
    [Q_RING_AMAX] = {IDS3(gs_fp8_amax_init, ), IDS3(gs_fp8_amax_init, )},
    [Q_CUR] = {IDS3(gs_fp8_quantize_cur, _sm89), IDS3(gs_fp8_quantize_cur, _sm89_stats)},
    [Q_CUR_AMAX] = {IDS3(gs_fp8_amax_part, ), IDS3(gs_fp8_amax_part, )},
};
/* The current recipe's fast kernels (fp8_current_fast.h, the sm_89
 * module), where every operand of the launch takes them (cur_fast_ok);
 * their fallback where that module is not loaded is the general kernel
 * of quantize_ids, on the same grid. */
static const gs_kernel_id cur_fast_ids[2][3] = {
    [0] = IDS3(gs_fp8_quantize_cur_v, _sm89),
    [1] = IDS3(gs_fp8_amax_part_v, _sm89),
};
#undef IDS3

/* An operand's 64 x 64 tiles (<= rows*cols*batch: fits int64); 0 when empty. */
static int64_t operand_tiles(const gs_fp8_q_operand *q) { return q->tiles_r * q->tiles_c * q->batch; }

/* Checks one operand, shared by quantize and amax, and fills q. An empty
 * source still gets one block: it measures nothing, so the fold keeps the
 * scale, and the ring's parity contract (scale[parity ^ 1] is published by
 * every call) holds for every call. */
static CUresult operand_args(const fp8_operand *o, int kind, int64_t grid_max, gs_fp8_q_operand *q) {
  const int quantize = kind == Q_RING || kind == Q_CUR, current = kind == Q_CUR || kind == Q_CUR_AMAX;
  int e = elem_of(o->src_type);
  if (e < 0 || !o->ring) return CUDA_ERROR_INVALID_VALUE;
  if (current && (!o->partial || (o->fmt != GS_FP8_E4M3 && o->fmt != GS_FP8_E5M2) || !aligned(o->partial, 4)))
    return CUDA_ERROR_INVALID_VALUE;
  if (o->rows < 0 || o->cols < 0 || o->batch < 0 || o->ld < max64(1, o->rows)) return CUDA_ERROR_INVALID_VALUE;
  memset(q, 0, sizeof *q);
  q->ring = (gs_fp8_ring_dev *)o->ring;
  q->blocks = 1;
  if (current) {
    q->partial = o->partial;
    q->fmt = o->fmt == GS_FP8_E5M2 ? GS_FP8_DEV_E5M2 : GS_FP8_DEV_E4M3;
  }
  if (o->rows == 0 || o->cols == 0 || o->batch == 0) return CUDA_SUCCESS; /* tiles stay 0 */
  int64_t span = member_span(o->ld, o->rows, o->cols);
  if (span < 0 || !batch_ok(o->stride, o->batch, span, 0) || !volume_ok(o->rows, o->cols, o->batch))
    return CUDA_ERROR_INVALID_VALUE;
  if (!o->src || !aligned(o->src, (size_t)elem_size(e))) return CUDA_ERROR_INVALID_VALUE;
  int64_t es = elem_size(e);
  q->src = o->src;
  q->rows = o->rows;
  q->cols = o->cols;
  q->ld = o->ld;
  q->stride = o->batch > 1 ? o->stride : 0;
  q->batch = o->batch;
  q->tiles_r = ceil_div(o->rows, GS_FP8_Q_TILE);
  q->tiles_c = ceil_div(o->cols, GS_FP8_Q_TILE);
  /* 16-byte loads need every column start 16-byte aligned. */
  q->vec_in = aligned(o->src, 16) && (o->ld * es) % 16 == 0 && (o->batch == 1 || (q->stride * es) % 16 == 0);
  q->blocks = (int32_t)min64(operand_tiles(q), grid_max); /* quantize_launch shares the grid out */
  if (quantize) {
    if (!o->dst) return CUDA_ERROR_INVALID_VALUE;
    /* op(A) is m x k, op(B) k x n; k must end up contiguous. Stored
     * untransposed A (m x k) and transposed B (n x k) have it across
     * columns. */
    q->transpose = (o->trans != 0) == (o->is_b != 0);
    q->dst = o->dst;
    const int64_t k = q->transpose ? o->cols : o->rows;
    q->dst_ld = o->dst_ld ? o->dst_ld : k;
    /* The kernel zeroes k's padding within k's last tile only. */
    if (q->dst_ld < k || q->dst_ld > ceil_div(k, GS_FP8_Q_TILE) * GS_FP8_Q_TILE) return CUDA_ERROR_INVALID_VALUE;
    q->vec_out = aligned(o->dst, 8) && q->dst_ld % 8 == 0;
  }
  return CUDA_SUCCESS;
}

/* Whether operand q (filled by operand_args) suits the current recipe's
 * fast kernels: empty, or its columns on 16 bytes (vec_in) and, to be
 * quantized, its output rows on 8 (vec_out), with rows, columns and the
 * output's k stride below 2^31 (their 32-bit walks). */
static int cur_fast_ok(const gs_fp8_q_operand *q, int quantize) {
  if (operand_tiles(q) == 0) return 1;
  const int64_t lim = (int64_t)1 << 31;
  return q->vec_in && (!quantize || q->vec_out) && q->rows < lim && q->cols < lim && q->dst_ld < lim;
}

/* n operands (1 or 2), each with its own ring, in one launch when they
 * share their source type (a GEMM's A and B do), else one each. Everything
 * is checked before anything is launched. */
static CUresult quantize_launch(kernel_ctx *kc, CUstream stream, const fp8_operand *ops, int n, int parity,
                                int kind) {
  if (n < 1 || n > 2 || !ops || (parity != 0 && parity != 1)) return CUDA_ERROR_INVALID_VALUE;
  const int quantize = kind == Q_RING || kind == Q_CUR, current = kind == Q_CUR || kind == Q_CUR_AMAX;
  gs_fp8_quantize_args q;
  memset(&q, 0, sizeof q);
  q.parity = parity;
  /* One wave of GS_FP8_Q_BLOCKS_PER_SM blocks on each of the device's SMs
   * (fp8_kernels.h); at least 2, so that two operands get a block each.
   * The current recipe's passes: at most GS_FP8_CUR_SLOTS blocks an
   * operand, one slot each (both passes size the grid alike, so the
   * quantize pass reduces exactly the slots the amax pass stored). */
  int64_t grid_max =
      kc->sms > 0 ? max64(2, min64((int64_t)kc->sms * GS_FP8_Q_BLOCKS_PER_SM, GRID_MAX)) : GS_FP8_Q_GRID;
  if (current) grid_max = min64(grid_max, GS_FP8_CUR_SLOTS);
  for (int i = 0; i < n; i++) {
    CUresult r = operand_args(&ops[i], kind, grid_max, &q.op[i]);
    if (r != CUDA_SUCCESS) return r;
    q.stats[i] = quantize ? ops[i].stats : NULL;
  }
  /* Two folds into one ring would race for its counter; two current
   * operands sharing slots or a step would overwrite each other's. */
  if (n == 2 && ops[0].ring == ops[1].ring) return CUDA_ERROR_INVALID_VALUE;
  if (n == 2 && current && ops[0].partial + GS_FP8_CUR_SLOTS > ops[1].partial &&
      ops[1].partial + GS_FP8_CUR_SLOTS > ops[0].partial)
    return CUDA_ERROR_INVALID_VALUE;
  if (n == 2 && ops[0].src_type != ops[1].src_type) {
    CUresult r = quantize_launch(kc, stream, &ops[0], 1, parity, kind);
    return r == CUDA_SUCCESS ? quantize_launch(kc, stream, &ops[1], 1, parity, kind) : r;
  }
  q.operands = n;
  /* Two operands share grid_max blocks in proportion to their tiles,
   * so each block has about the same number of tiles to do; each gets at
   * least one block (an empty one still folds). */
  if (n == 2) {
    const int64_t t0 = operand_tiles(&q.op[0]), t1 = operand_tiles(&q.op[1]);
    if (t0 + t1 > grid_max) {
      int64_t b0 = max64(1, min64(t0, grid_max * t0 / (t0 + t1)));
      int64_t b1 = max64(1, min64(t1, grid_max - b0));
      if (b0 + b1 > grid_max) b0 = grid_max - b1;
      q.op[0].blocks = (int32_t)b0;
      q.op[1].blocks = (int32_t)b1;
    }
  }
  const unsigned grid[3] = {(unsigned)q.op[0].blocks + (n == 2 ? (unsigned)q.op[1].blocks : 0u), 1, 1};
  const int e = elem_of(ops[0].src_type);
  /* The current recipe's counting kernels only where a compared call
   * asked for statistics (fp8_stats.h): the plain ones carry no counting
   * code. */
  const int stats = q.stats[0] != NULL || q.stats[1] != NULL;
  /* The current recipe's passes on the fast kernels where the layouts
   * allow (the grid and the slots are the same as the general kernels':
   * either may run either pass); compared calls count on the general one. */
  if (current && !stats && cur_fast_ok(&q.op[0], quantize) && (n == 1 || cur_fast_ok(&q.op[1], quantize)))
    return fp8_launch_either(kc, stream, cur_fast_ids[kind == Q_CUR_AMAX][e], quantize_ids[kind][0][e], grid,
                             GS_FP8_Q_THREADS, &q);
  return fp8_launch_either(kc, stream, quantize_sm89_ids[kind][stats][e], quantize_ids[kind][stats][e], grid,
                           GS_FP8_Q_THREADS, &q);
}

CUresult fp8_quantize_operands(kernel_ctx *kc, CUstream stream, const fp8_operand *ops, int n, int parity) {
  return quantize_launch(kc, stream, ops, n, parity, Q_RING);
}

CUresult fp8_amax_init_operands(kernel_ctx *kc, CUstream stream, const fp8_operand *ops, int n, int parity) {
  return quantize_launch(kc, stream, ops, n, parity, Q_RING_AMAX);
}

CUresult fp8_current_amax(kernel_ctx *kc, CUstream stream, const fp8_operand *ops, int n) {
  return quantize_launch(kc, stream, ops, n, 0, Q_CUR_AMAX);
}

CUresult fp8_current_quantize(kernel_ctx *kc, CUstream stream, const fp8_operand *ops, int n) {
  return quantize_launch(kc, stream, ops, n, 0, Q_CUR);
}

CUresult fp8_quantize(kernel_ctx *kc, CUstream stream, int src_type, const void *src, int64_t rows,
                      int64_t cols, int64_t ld, int64_t stride, int64_t batch, int trans, int is_b,
                      uint8_t *dst, gs_fp8_ring *ring, int parity) {
  const fp8_operand o = {src_type, src, rows, cols, ld, stride, batch, trans, is_b, dst, ring, NULL, 0, NULL, 0};
  return quantize_launch(kc, stream, &o, 1, parity, Q_RING);
}

CUresult fp8_amax_init(kernel_ctx *kc, CUstream stream, int src_type, const void *src, int64_t rows,
                       int64_t cols, int64_t ld, int64_t stride, int64_t batch, gs_fp8_ring *ring,
                       int parity) {
  const fp8_operand o = {src_type, src, rows, cols, ld, stride, batch, 0, 0, NULL, ring, NULL, 0, NULL, 0};
  return quantize_launch(kc, stream, &o, 1, parity, Q_RING_AMAX);
}

/* ---- GEMM ------------------------------------------------------------------ */
/* cuBLASLt's epilogues (the GemmEx family has none: -1) as kernel flags;
 * -1 for one the kernel does not implement. */
static int epilogue_flags(int epilogue) {
  switch (epilogue) {
  case -1: case 0: case CUBLASLT_EPILOGUE_DEFAULT: return 0;
  case CUBLASLT_EPILOGUE_RELU: return GS_FP8_EPI_RELU;
  case CUBLASLT_EPILOGUE_BIAS: return GS_FP8_EPI_BIAS;
  case CUBLASLT_EPILOGUE_RELU_BIAS: return GS_FP8_EPI_BIAS | GS_FP8_EPI_RELU;
  case CUBLASLT_EPILOGUE_GELU: return GS_FP8_EPI_GELU;
  case CUBLASLT_EPILOGUE_GELU_BIAS: return GS_FP8_EPI_BIAS | GS_FP8_EPI_GELU;
  default: return -1;
  }
}

/* fp8_gemm and fp8_gemm_mma: one contract, one argument block, one grid;
 * only the kernel differs. */
static CUresult gemm_launch(gs_kernel_id kernel, kernel_ctx *kc, CUstream stream, int64_t m, int64_t n, int64_t k,
                            int64_t batch, const uint8_t *A8, int fmt_a, const uint8_t *B8, int fmt_b,
                            const float *scale_a, const float *scale_b, const void *alpha, const void *beta,
                            int pointer_mode, int c_type, const void *C, int64_t ldc, int64_t stride_c, int d_type,
                            void *D, int64_t ldd, int64_t stride_d, int epilogue, const void *bias, int bias_type) {
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUDA_ERROR_INVALID_VALUE;
  if ((fmt_a != GS_FP8_E4M3 && fmt_a != GS_FP8_E5M2) || (fmt_b != GS_FP8_E4M3 && fmt_b != GS_FP8_E5M2))
    return CUDA_ERROR_INVALID_VALUE;
  if ((pointer_mode != 0 && pointer_mode != 1) || !alpha || !beta) return CUDA_ERROR_INVALID_VALUE;
  const int flags = epilogue_flags(epilogue);
  if (flags < 0) return CUDA_ERROR_NOT_SUPPORTED;
  const int d_elem = elem_of(d_type);
  if (d_elem < 0 || ldd < max64(1, m)) return CUDA_ERROR_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUDA_SUCCESS; /* an empty grid is illegal */

  gs_fp8_gemm_args g;
  memset(&g, 0, sizeof g);
  /* Host pointer mode: the values are read now, as cuBLAS reads them at the
   * call; beta == 0 means C is not read at all. */
  const int host = pointer_mode == 0;
  if (host) {
    memcpy(&g.alpha, alpha, sizeof g.alpha);
    memcpy(&g.beta, beta, sizeof g.beta);
  } else {
    if (!aligned(alpha, 4) || !aligned(beta, 4)) return CUDA_ERROR_INVALID_VALUE;
    g.alpha_ptr = (const float *)alpha;
    g.beta_ptr = (const float *)beta;
  }
  const int may_read_c = !host || g.beta != 0.0f;

  int64_t span_d = member_span(ldd, m, n);
  if (!D || span_d < 0 || !batch_ok(stride_d, batch, span_d, 1) || !aligned(D, (size_t)elem_size(d_elem)))
    return CUDA_ERROR_INVALID_VALUE;
  int c_elem = d_elem;
  if (may_read_c) {
    c_elem = elem_of(c_type);
    int64_t span_c = c_elem < 0 ? -1 : member_span(ldc, m, n);
    if (c_elem < 0 || !C || ldc < max64(1, m) || span_c < 0 || !batch_ok(stride_c, batch, span_c, 0) ||
        !aligned(C, (size_t)elem_size(c_elem)))
      return CUDA_ERROR_INVALID_VALUE;
  }
  int bias_elem = GS_ELEM_F32;
  if (flags & GS_FP8_EPI_BIAS) {
    bias_elem = elem_of(bias_type);
    if (bias_elem < 0 || !bias || !aligned(bias, (size_t)elem_size(bias_elem))) return CUDA_ERROR_INVALID_VALUE;
  }
  if (k > 0) {
    if (!A8 || !B8 || !scale_a || !scale_b || !aligned(scale_a, 4) || !aligned(scale_b, 4))
      return CUDA_ERROR_INVALID_VALUE;
    if (!volume_ok(k, m, batch) || !volume_ok(k, n, batch)) return CUDA_ERROR_INVALID_VALUE;
  }

  g.a8 = A8;
  g.b8 = B8;
  g.scale_a = scale_a;
  g.scale_b = scale_b;
  g.c = may_read_c ? C : NULL;
  g.d = D;
  g.bias = (flags & GS_FP8_EPI_BIAS) ? bias : NULL;
  g.m = m;
  g.n = n;
  g.k = k;
  g.batch = batch;
  g.ldc = may_read_c ? ldc : 0;
  g.stride_c = may_read_c && batch > 1 ? stride_c : 0;
  g.ldd = ldd;
  g.stride_d = batch > 1 ? stride_d : 0;
  g.tiles_m = ceil_div(m, GS_FP8_G_BM);
  g.tiles_n = ceil_div(n, GS_FP8_G_BN);
  g.fmt_a = fmt_a;
  g.fmt_b = fmt_b;
  g.c_type = c_elem;
  g.d_type = d_elem;
  g.bias_type = bias_elem;
  g.epilogue = flags;
  g.vec_k = k % 16 == 0 && aligned(A8, 16) && aligned(B8, 16);

  const unsigned grid[3] = {(unsigned)min64(g.tiles_m, GRID_MAX), (unsigned)min64(g.tiles_n, GRID_MAX),
                            (unsigned)min64(batch, GRID_MAX)};
  return fp8_launch(kc, stream, kernel, grid, GS_FP8_G_THREADS, &g);
}

CUresult fp8_gemm(kernel_ctx *kc, CUstream stream, int64_t m, int64_t n, int64_t k, int64_t batch,
                  const uint8_t *A8, int fmt_a, const uint8_t *B8, int fmt_b, const float *scale_a,
                  const float *scale_b, const void *alpha, const void *beta, int pointer_mode,
                  int c_type, const void *C, int64_t ldc, int64_t stride_c, int d_type, void *D,
                  int64_t ldd, int64_t stride_d, int epilogue, const void *bias, int bias_type) {
  return gemm_launch(GS_K_gs_fp8_gemm, kc, stream, m, n, k, batch, A8, fmt_a, B8, fmt_b, scale_a, scale_b, alpha,
                     beta, pointer_mode, c_type, C, ldc, stride_c, d_type, D, ldd, stride_d, epilogue, bias,
                     bias_type);
}

CUresult fp8_gemm_mma(kernel_ctx *kc, CUstream stream, int64_t m, int64_t n, int64_t k, int64_t batch,
                      const uint8_t *A8, int fmt_a, const uint8_t *B8, int fmt_b, const float *scale_a,
                      const float *scale_b, const void *alpha, const void *beta, int pointer_mode,
                      int c_type, const void *C, int64_t ldc, int64_t stride_c, int d_type, void *D,
                      int64_t ldd, int64_t stride_d, int epilogue, const void *bias, int bias_type) {
  return gemm_launch(GS_K_gs_fp8_gemm_mma, kc, stream, m, n, k, batch, A8, fmt_a, B8, fmt_b, scale_a, scale_b,
                     alpha, beta, pointer_mode, c_type, C, ldc, stride_c, d_type, D, ldd, stride_d, epilogue, bias,
                     bias_type);
}
