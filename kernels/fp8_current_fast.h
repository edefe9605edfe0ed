/* fp8_current_fast.h: the current recipe's fast kernels (fp8_kernels.h's
 * GS_FP8_CUR_FAST_KERNELS), built into the sm_89 module after the general
 * kernels (fp8_quantize_sm89.cu). Same arguments, grid and write-only
 * contract as gs_fp8_amax_part_* and gs_fp8_quantize_cur_*_sm89, the same
 * bytes out, for operands whose columns start on 16 bytes (vec_in) and,
 * quantizing, whose output rows start on 8 (vec_out); fp8_launch.c picks.
 *
 *   amax_part_v   each thread walks 8-element groups down the source's
 *                 columns (any transpose: the maximum does not care), U
 *                 groups a trip, the next trip's 16-byte loads issued
 *                 before this trip's maxima; block maximum, then the
 *                 block's slot, as the general kernel stores it;
 *   quantize_cur_v  every block reduces the slots to the step (the general
 *                 kernel's fp8_current_step_of_slots), then per operand:
 *                 k-contiguous (transpose 0) walks groups as amax_part_v
 *                 does, k padded to dst_ld with zero groups, one 8-byte
 *                 store a group; k-strided (transpose 1) gives each warp
 *                 2V rows x 128 k, a lane 8 columns' 16-byte loads (V
 *                 rows each) and one 8-byte store a row, as
 *                 fp8_scaled_quantize.cu's bq_s_rows: no shared memory.
 *
 * Why the codes are the general kernel's: that kernel encodes a group by
 * the instruction when its largest |x| is below fp8_fast_below(step),
 * else element by element, and both give the same bits there
 * (fp8_convert.h, gs_div_by_rcp). The step comes from the operand's own
 * amax, so where that amax is finite and the step in range every element
 * is below the bound: the whole launch takes the instruction, with no
 * per-group test (the loop perf-report counts). Otherwise (a NaN or
 * infinity in the operand, a step outside [2^-60, 2^60]) a plain loop
 * encodes every element as the general kernel's slow path does
 * (fp8_encode1_slow: x / step with saturation, a NaN as itself), which is
 * the bits the general kernel's per-group choice gives, whichever way a
 * group goes. */

#include <type_traits>

#include "fp8_vec.h"

/* perf-report's count build (kernels.mk, cur_count*.ptx): 1 keeps only the
 * k-contiguous quantize loop, 2 only the k-strided one, each for E4M3 data
 * with a step in range; never loaded. */
#if defined(GS_FP8_CUR_COUNT)
#define CF_HAS_K (GS_FP8_CUR_COUNT == 1)
#define CF_HAS_S (GS_FP8_CUR_COUNT == 2)
#else
#define CF_HAS_K 1
#define CF_HAS_S 1
#endif

/* How a launch's walks encode: the instruction for every group, one
 * format fixed (CF_HW4: E4M3, CF_HW5: E5M2). */
enum { CF_HW4, CF_HW5 };

/* Eight source elements: one 16-byte load of bf16/fp16, two of fp32. */
template <int E> struct cf_group {
  gs_u32x4 h[E == GS_ELEM_F32 ? 2 : 1];
};
/* Groups a thread has in flight a trip (k-contiguous walk): 48 bytes of
 * bf16/fp16, 64 of fp32; four 16-bit groups took ptxas past the 80
 * registers of 3 blocks a SM (spills). */
template <int E> struct cf_trip {
  static constexpr int U = E == GS_ELEM_F32 ? 2 : 3;
};

template <int E> static __device__ __forceinline__ uint32_t cf_raw(const cf_group<E> &g, int q) {
  constexpr int V = fp8v_src<E>::V;
  return fp8v_raw<E>(g.h[q / V], q % V);
}

/* Eight elements' codes by the launch's way (the ENC above). */
template <int E, int ENC, typename F>
static __device__ __forceinline__ uint64_t cf_encode(F raw, int fmt, float scale, float rcp, uint32_t fast_below) {
  float xs[8];
  (void)fmt, (void)fast_below;
GS_FP8_UNROLL
  for (int q = 0; q < 8; q++) xs[q] = fp8v_widen<E>(raw(q));
  return fp8_encode8_hw<ENC == CF_HW4 ? GS_FP8_DEV_E4M3 : GS_FP8_DEV_E5M2>(xs, scale, rcp);
}

/* Member b, element by element, for a launch whose operand holds a NaN or
 * an infinity or whose step is out of range: rare, so one 8-byte output
 * group a thread a trip, no unrolling, no loads ahead. A walk of the fast
 * layouts making the general kernel's choice per group instead, inlined
 * into every trip, made the three quantize kernels 4.2 MB of the module's
 * 7.1 MB of PTX. */
template <int E>
static __device__ __forceinline__ void cf_slow_member(const gs_fp8_q_operand &a, unsigned bx, int64_t b, int fmt,
                                                      float scale) {
  constexpr int SZ = fp8v_src<E>::SZ;
  const int64_t outer = a.transpose ? a.rows : a.cols, k = a.transpose ? a.cols : a.rows;
  const int64_t gpr = a.dst_ld / 8, n = outer * gpr, s = (int64_t)a.blocks * GS_FP8_Q_THREADS;
  const char *src = (const char *)a.src + b * a.stride * SZ;
  uint8_t *dst = a.dst + b * a.dst_ld * outer;
GS_FP8_NO_UNROLL
  for (int64_t p = (int64_t)bx * GS_FP8_Q_THREADS + threadIdx.x; p < n; p += s) {
    const int64_t o = p / gpr, q0 = p % gpr * 8;
    const int m = k - q0 < 8 ? (int)(k - q0) : 8; /* elements before k's padding */
    uint64_t codes = 0;
GS_FP8_NO_UNROLL
    for (int i = 0; i < m; i++) {
      /* element (o, q): k runs down the columns (transpose 0) or along the rows */
      const int64_t e = a.transpose ? (q0 + i) * a.ld + o : o * a.ld + q0 + i;
      uint32_t raw;
      if constexpr (E == GS_ELEM_F32) raw = ((const uint32_t *)src)[e];
      else raw = ((const uint16_t *)src)[e];
      codes |= (uint64_t)fp8_encode1_slow(fp8v_widen_exact<E>(raw), scale, fmt) << (8 * i);
    }
    gs_st8(dst + o * a.dst_ld + q0, codes);
  }
}

/* A thread's walk over the groups of one member, p = column * gpl + group,
 * from p0 in steps of s: 32-bit (the launcher takes these kernels for rows
 * and columns below 2^31 only), no division in the loop. */
struct cf_walk {
  uint32_t col, grp;
  __device__ __forceinline__ void init(int64_t p0, uint32_t gpl) {
    col = (uint32_t)(p0 / gpl), grp = (uint32_t)(p0 % gpl);
  }
  __device__ __forceinline__ void step(uint32_t dcol, uint32_t dgrp, uint32_t gpl) {
    grp += dgrp, col += dcol;
    if (grp >= gpl) grp -= gpl, col++;
  }
};

/* Group w of a member at src: its elements inside the matrix, zeros past
 * rows (k's padding when quantizing) and for a walk past the last column. */
template <int E>
static __device__ __forceinline__ void cf_load(const char *src, const gs_fp8_q_operand &a, const cf_walk &w,
                                               cf_group<E> &g) {
  constexpr int V = fp8v_src<E>::V, SZ = fp8v_src<E>::SZ;
  const int64_t r = (int64_t)w.grp * 8;
  /* 32-bit: rows and dst_ld are below 2^31 here */
  const int32_t left = w.col < (uint64_t)a.cols ? (int32_t)a.rows - (int32_t)(w.grp * 8) : 0;
  const char *p = src + ((int64_t)w.col * a.ld + r) * SZ;
GS_FP8_UNROLL
  for (int h = 0; h < (E == GS_ELEM_F32 ? 2 : 1); h++) g.h[h] = fp8v_ld<E>(p + 16 * h, left - h * V);
}

/* ---- amax pass --------------------------------------------------------- */
template <int E> static __device__ __forceinline__ void cf_amax(const gs_fp8_q_operand &a, unsigned bx) {
  constexpr int U = cf_trip<E>::U, SZ = fp8v_src<E>::SZ;
  __shared__ unsigned s_amax;
  const unsigned tid = threadIdx.x;
  if (tid == 0) s_amax = 0;
  /* 16-bit sources: the high halves' keys in place and the low halves'
   * (each |x| bits shifted to fp32's place, so unsigned order is |x|'s);
   * fp32: |x| bits. */
  uint32_t m_hi = 0, m_lo = 0;
  const int64_t t0 = (int64_t)bx * GS_FP8_Q_THREADS + tid, s = (int64_t)a.blocks * GS_FP8_Q_THREADS;
  const uint32_t gpl = (uint32_t)((a.rows + 7) / 8);
  const uint32_t dcol = (uint32_t)(U * s / (gpl ? gpl : 1)), dgrp = (uint32_t)(U * s % (gpl ? gpl : 1));
  for (int64_t b = 0; gpl && b < a.batch; b++) {
    const char *src = (const char *)a.src + b * a.stride * SZ;
    const int64_t n = a.cols * (int64_t)gpl;
    cf_walk w[U];
    cf_group<E> cur[U], nxt[U];
GS_FP8_UNROLL
    for (int j = 0; j < U; j++) w[j].init(t0 + j * s, gpl), cf_load<E>(src, a, w[j], cur[j]);
    for (int64_t p = t0; p < n; p += U * s) {
GS_FP8_UNROLL
      for (int j = 0; j < U; j++) w[j].step(dcol, dgrp, gpl), cf_load<E>(src, a, w[j], nxt[j]);
GS_FP8_UNROLL
      for (int j = 0; j < U; j++)
GS_FP8_UNROLL
        for (int h = 0; h < (E == GS_ELEM_F32 ? 2 : 1); h++)
GS_FP8_UNROLL
          for (int i = 0; i < 4; i++) {
            const uint32_t v = cur[j].h[h].v[i];
            if constexpr (E == GS_ELEM_F32) {
              m_hi = (v & 0x7FFFFFFFu) > m_hi ? v & 0x7FFFFFFFu : m_hi;
            } else {
              m_hi = (v & 0x7FFF0000u) > m_hi ? v & 0x7FFF0000u : m_hi;
              m_lo = (v & 0x7FFFu) > m_lo ? v & 0x7FFFu : m_lo;
            }
          }
GS_FP8_UNROLL
      for (int j = 0; j < U; j++) cur[j] = nxt[j];
    }
  }
  uint32_t amax = m_hi;
  if constexpr (E != GS_ELEM_F32) {
    const uint32_t key = (m_hi >> 16) > m_lo ? m_hi >> 16 : m_lo;
    amax = fp8v_key_amax<E>(key);
  }
  __syncthreads(); /* s_amax's zero is seen */
  if (amax != 0) gs_fp8_atomic_max(&s_amax, amax);
  __syncthreads();
  /* every block stores its slot, 0 included (write-only) */
  if (tid == 0) a.partial[bx] = s_amax;
}

/* ---- quantize pass ----------------------------------------------------- */
/* The k-contiguous walk's first trip, loaded before the step is known. */
template <int E> struct cf_k_state {
  cf_walk w[cf_trip<E>::U];
  cf_group<E> cur[cf_trip<E>::U];
};

template <int E>
static __device__ __forceinline__ void cf_k_first(const gs_fp8_q_operand &a, unsigned bx, int64_t b,
                                                  cf_k_state<E> &st) {
  constexpr int U = cf_trip<E>::U, SZ = fp8v_src<E>::SZ;
  const int64_t t0 = (int64_t)bx * GS_FP8_Q_THREADS + threadIdx.x, s = (int64_t)a.blocks * GS_FP8_Q_THREADS;
  const char *src = (const char *)a.src + b * a.stride * SZ;
GS_FP8_UNROLL
  for (int j = 0; j < U; j++) st.w[j].init(t0 + j * s, (uint32_t)(a.dst_ld / 8)), cf_load<E>(src, a, st.w[j], st.cur[j]);
}

/* Member b of a k-contiguous operand: column c's groups go to dst row c,
 * groups from rows to dst_ld (a multiple of 8) encode zeros. */
template <int E, int ENC>
static __device__ __forceinline__ void cf_k_member(const gs_fp8_q_operand &a, unsigned bx, int64_t b,
                                                   cf_k_state<E> &st, int fmt, float scale, float rcp,
                                                   uint32_t fast_below) {
  constexpr int U = cf_trip<E>::U, SZ = fp8v_src<E>::SZ;
  const int64_t t0 = (int64_t)bx * GS_FP8_Q_THREADS + threadIdx.x, s = (int64_t)a.blocks * GS_FP8_Q_THREADS;
  const uint32_t gpl = (uint32_t)(a.dst_ld / 8);
  const uint32_t dcol = (uint32_t)(U * s / gpl), dgrp = (uint32_t)(U * s % gpl);
  const char *src = (const char *)a.src + b * a.stride * SZ;
  uint8_t *dst = a.dst + b * a.dst_ld * a.cols;
  const int64_t n = a.cols * (int64_t)gpl;
  for (int64_t p = t0; p < n; p += U * s) {
    cf_walk nw[U];
    cf_group<E> nxt[U];
GS_FP8_UNROLL
    for (int j = 0; j < U; j++) nw[j] = st.w[j], nw[j].step(dcol, dgrp, gpl), cf_load<E>(src, a, nw[j], nxt[j]);
GS_FP8_UNROLL
    for (int j = 0; j < U; j++) {
      const cf_group<E> g = st.cur[j];
      const uint64_t codes = cf_encode<E, ENC>([&](int q) __attribute__((always_inline)) { return cf_raw<E>(g, q); },
                                               fmt, scale, rcp, fast_below);
      if (st.w[j].col < (uint64_t)a.cols) gs_st8(dst + (int64_t)st.w[j].col * a.dst_ld + st.w[j].grp * 8, codes);
    }
GS_FP8_UNROLL
    for (int j = 0; j < U; j++) st.cur[j] = nxt[j], st.w[j] = nw[j];
  }
}

/* The k-strided walk: warp unit (chunk of 128 k, tile of 2V rows); lane
 * l takes k indices chunk * 128 + (l % 16) * 8 + j (its 8 loads, j = 0..7)
 * of the V rows tile * 2V + (l / 16) * V + i. */
template <int E> struct cf_s_state {
  fp8v_walk at;
  gs_u32x4 g[8];
};

template <int E>
static __device__ __forceinline__ void cf_s_load(const gs_fp8_q_operand &a, int64_t b, cf_s_state<E> &st) {
  constexpr int V = fp8v_src<E>::V, SZ = fp8v_src<E>::SZ;
  const unsigned l = threadIdx.x % 32;
  const int64_t q0 = st.at.major * 128 + (l % 16) * 8, r0 = st.at.minor * (2 * V) + (l / 16) * V;
  const char *src = (const char *)a.src + (b * a.stride + q0 * a.ld + r0) * SZ;
GS_FP8_UNROLL
  for (int j = 0; j < 8; j++) {
    st.g[j] = gs_u32x4{{0, 0, 0, 0}};
    if (q0 + j < a.cols && r0 < a.rows) st.g[j] = fp8v_ld<E>(src + j * a.ld * SZ, a.rows - r0);
  }
}

template <int E>
static __device__ __forceinline__ void cf_s_first(const gs_fp8_q_operand &a, unsigned bx, int64_t b,
                                                  cf_s_state<E> &st) {
  constexpr int V = fp8v_src<E>::V;
  const int64_t rtiles = (a.rows + 2 * V - 1) / (2 * V);
  st.at.init((int64_t)bx * (GS_FP8_Q_THREADS / 32) + threadIdx.x / 32, (int64_t)a.blocks * (GS_FP8_Q_THREADS / 32),
             rtiles);
  cf_s_load<E>(a, b, st);
}

/* Member b of a k-strided operand: dst row r holds k = the source's
 * columns, zeros from cols to dst_ld. */
template <int E, int ENC>
static __device__ __forceinline__ void cf_s_member(const gs_fp8_q_operand &a, unsigned bx, int64_t b,
                                                   cf_s_state<E> &st, int fmt, float scale, float rcp,
                                                   uint32_t fast_below) {
  constexpr int V = fp8v_src<E>::V;
  const unsigned l = threadIdx.x % 32;
  const int64_t rtiles = (a.rows + 2 * V - 1) / (2 * V), chunks = (a.dst_ld + 127) / 128;
  const int64_t units = rtiles * chunks, warps = (int64_t)a.blocks * (GS_FP8_Q_THREADS / 32);
  uint8_t *dst = a.dst + b * a.dst_ld * a.rows;
  for (int64_t u = (int64_t)bx * (GS_FP8_Q_THREADS / 32) + threadIdx.x / 32; u < units; u += warps) {
    const int64_t q0 = st.at.major * 128 + (l % 16) * 8, r0 = st.at.minor * (2 * V) + (l / 16) * V;
GS_FP8_UNROLL
    for (int i = 0; i < V; i++) {
      const uint64_t codes =
          cf_encode<E, ENC>([&](int j) __attribute__((always_inline)) { return fp8v_raw<E>(st.g[j], i); }, fmt,
                            scale, rcp, fast_below);
      if (r0 + i < a.rows && q0 < a.dst_ld) gs_st8(dst + (r0 + i) * a.dst_ld + q0, codes);
    }
    st.at.step();
    if (u + warps < units) cf_s_load<E>(a, b, st);
  }
}

/* The walk of layout S (1: k-strided, 0: k-contiguous): member b's first
 * loads, and member b. */
template <int E, int S, typename St>
static __device__ __forceinline__ void cf_first(const gs_fp8_q_operand &a, unsigned bx, int64_t b, St &st) {
  if constexpr (S) cf_s_first<E>(a, bx, b, st);
  else cf_k_first<E>(a, bx, b, st);
}
template <int E, int S, int ENC, typename St>
static __device__ __forceinline__ void cf_member(const gs_fp8_q_operand &a, unsigned bx, int64_t b, St &st, int fmt,
                                                 float scale, float rcp, uint32_t fast_below) {
  if constexpr (S) cf_s_member<E, ENC>(a, bx, b, st, fmt, scale, rcp, fast_below);
  else cf_k_member<E, ENC>(a, bx, b, st, fmt, scale, rcp, fast_below);
}

/* The step, once member 0's first loads are in flight (S: the k-strided
 * walk, else the k-contiguous one). */
template <int E, int S, typename St>
static __device__ __forceinline__ float cf_first_then_step(const gs_fp8_q_operand &a, unsigned bx, St &st,
                                                           unsigned &slots_amax) {
  __shared__ unsigned s_slots;
  if (threadIdx.x == 0) s_slots = 0;
  if (a.rows != 0 && a.cols != 0 && a.batch != 0) cf_first<E, S>(a, bx, 0, st);
  __syncthreads(); /* s_slots' zero is seen */
  const float step = fp8_current_step_of_slots(a, bx, &s_slots);
  slots_amax = s_slots;
  return step;
}

/* One operand: the step, then each member with the launch's encoding. The
 * operand's amax bounds every element: all are below fast_below unless the
 * amax is NaN or infinite or the step out of range (above). */
template <int E, int S> static __device__ __forceinline__ void cf_quantize_as(const gs_fp8_q_operand &a, unsigned bx) {
  typename std::conditional<S != 0, cf_s_state<E>, cf_k_state<E>>::type st = {};
  unsigned slots_amax;
  const float scale = cf_first_then_step<E, S>(a, bx, st, slots_amax);
  if (a.rows == 0 || a.cols == 0 || a.batch == 0) return;
  const float rcp = 1.0f / scale;
  const uint32_t fast_below = fp8_fast_below(scale);
  const bool all_fast = slots_amax < 0x7F800000u && fast_below != 0;
  const int fmt = a.fmt;
#if !defined(GS_FP8_CUR_COUNT)
  if (!all_fast) {
    for (int64_t b = 0; b < a.batch; b++) cf_slow_member<E>(a, bx, b, fmt, scale);
    return;
  }
#endif
  for (int64_t b = 0; b < a.batch; b++) {
    if (b) cf_first<E, S>(a, bx, b, st);
#if defined(GS_FP8_CUR_COUNT)
    (void)all_fast;
    cf_member<E, S, CF_HW4>(a, bx, b, st, fmt, scale, rcp, fast_below);
#else
    if (fmt == GS_FP8_DEV_E4M3) cf_member<E, S, CF_HW4>(a, bx, b, st, fmt, scale, rcp, fast_below);
    else cf_member<E, S, CF_HW5>(a, bx, b, st, fmt, scale, rcp, fast_below);
#endif
  }
}

/* The layout is the operand's, the same for its every block. */
template <int E> static __device__ __forceinline__ void cf_quantize(const gs_fp8_q_operand &a, unsigned bx) {
  if (CF_HAS_K && !a.transpose) cf_quantize_as<E, 0>(a, bx);
  if (CF_HAS_S && a.transpose) cf_quantize_as<E, 1>(a, bx);
}

/* The grid's first op[0].blocks blocks take A, the rest B (as
 * fp8_quantize_operands). */
template <int E, int PASS> static __device__ __forceinline__ void cf_operand(const gs_fp8_q_operand &a, unsigned bx) {
  if constexpr (PASS == GS_FP8_CUR_AMAX_V) cf_amax<E>(a, bx);
  else cf_quantize<E>(a, bx);
}
template <int E, int PASS> static __device__ __forceinline__ void cf_operands(const gs_fp8_quantize_args &args) {
  if (args.operands > 1 && blockIdx.x >= (unsigned)args.op[0].blocks)
    cf_operand<E, PASS>(args.op[1], blockIdx.x - (unsigned)args.op[0].blocks);
  else
    cf_operand<E, PASS>(args.op[0], blockIdx.x);
}

#define GS_FP8_CF_DEFINE(name, E, PASS)                                        \
  extern "C" __global__ void __launch_bounds__(GS_FP8_Q_THREADS, GS_FP8_Q_BLOCKS_PER_SM) \
      name(gs_fp8_quantize_args args) {                                        \
    cf_operands<E, PASS>(args);                                                \
  }
GS_FP8_CUR_FAST_KERNELS(GS_FP8_CF_DEFINE)

#if defined(GS_EMU)
#define GS_FP8_CF_ENTRY(name, E, PASS) GS_FP8_EMU_ENTRY(name)
GS_FP8_CUR_FAST_KERNELS(GS_FP8_CF_ENTRY)
#endif
