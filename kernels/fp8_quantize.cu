/* fp8_quantize.cu: one GEMM operand (bf16, fp16 or fp32, column-major, any
 * ld, strided batch) to fp8 in the TN layout of fp8.h, in one pass: each
 * element is divided by the ring's scale[parity] and encoded with
 * saturation (fp8_convert.h), the amax of the raw values is measured on the
 * way, and the last block to finish folds it into the ring's history and
 * publishes the next scale into scale[parity ^ 1]. The amax kernels run the
 * same pass without writing (a site's first call).
 *
 * The current recipe's kernels (fp8_kernels.h's AMAX_PART, QUANTIZE_CUR)
 * run the same passes with no ring: each amax block stores its maximum in
 * its own slot, and each quantize block reduces the slots to its step
 * itself, block 0 storing the step for the GEMM. Plain stores only, so
 * overlapping graph replays with the same inputs write the same bytes
 * (docs/graphs.md).
 *
 * Bandwidth is the limit: 2 (or 4) bytes in, 1 out per element. A grid
 * of a few blocks per SM (fp8_launch.c) loops over 64 x 64 tiles; for each
 * tile each of a block's 256 threads moves 2 groups of 8 elements along a
 * column (16-byte loads, 8-byte stores, whole sectors per warp),
 * transposing through padded shared memory when k is not the contiguous
 * dimension. The next tile's loads are in flight while the current one is
 * encoded, the one after is prefetched into L2, and a block's amax is
 * reduced and folded once, after all its tiles. The amax fold runs in the
 * last block to finish: no host round trip.
 *
 * Tile, registers and the fold step by step: docs/fp8.md,
 * "fp8_quantize.cu: tiles and the fold". */
#include "fp8_block.h"
#include "fp8_convert.h"
#include "fp8_kernels.h"
#include "fp8_stats.h"

#if !defined(GS_FP8_Q_SM89)
#define GS_FP8_Q_SM89 0
#endif

/* Separate multiply and add, as written: the host build then computes the
 * same bits as the GPU. */
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

#define FP8_Q_GROUPS (GS_FP8_Q_TILE * GS_FP8_Q_TILE / 8) /* 8-element groups in a tile: 512 */
#define FP8_Q_PITCH_WORDS (GS_FP8_Q_TILE / 4 + 1) /* 68 bytes a tile column */
#define FP8_Q_PER_THREAD (FP8_Q_GROUPS / GS_FP8_Q_THREADS) /* 2: launched with exactly 256 threads */
/* The smallest step whose reciprocal is finite: 2^-128 * (1 + 2^-21), the
 * subnormal with bits 0x00200001 (2^-128 itself has the reciprocal 2^128,
 * which overflows). TransformerEngine turns a scale that overflowed to inf
 * into FLT_MAX; in step form that is this step, whose reciprocal is FLT_MAX
 * to within 2^-21. */
#define FP8_MIN_STEP_BITS 0x00200001u

/* A kernel's mode (fp8_kernels.h): its base mode and whether it counts
 * statistics, both fixed at compile time, so a plain kernel has no
 * counting code and a current-recipe kernel no ring fold. */
template <int MODE> struct fp8_mode {
  static constexpr int base = MODE & (GS_FP8_MODE_STATS - 1);
  static constexpr bool stats = (MODE & GS_FP8_MODE_STATS) != 0;
  static constexpr bool quantize = base == GS_FP8_MODE_QUANTIZE || base == GS_FP8_MODE_QUANTIZE_CUR;
  static constexpr bool current = base == GS_FP8_MODE_AMAX_PART || base == GS_FP8_MODE_QUANTIZE_CUR;
};

template <int E> struct fp8_src_elem;
template <> struct fp8_src_elem<GS_ELEM_BF16> { typedef uint16_t bits; };
template <> struct fp8_src_elem<GS_ELEM_F16> { typedef uint16_t bits; };
template <> struct fp8_src_elem<GS_ELEM_F32> { typedef uint32_t bits; };

template <int E> static __device__ __forceinline__ float fp8_widen(uint32_t x) {
  if constexpr (E == GS_ELEM_BF16) return gs_bf16_to_f32((uint16_t)x);
  else if constexpr (E == GS_ELEM_F16) return gs_f16_to_f32((uint16_t)x);
  else return gs_f32_from_bits(x);
}

/* Eight elements' raw bits, packed as stored: 16-bit elements two to a
 * word (element 2i low), fp32 one to a word. Kept packed until each is
 * encoded, which saves registers over eight widened floats. */
template <int E> struct fp8_group {
  uint32_t w[E == GS_ELEM_F32 ? 8 : 4];
};

/* From an address aligned to 16 bytes: one or two LDG.128. */
template <int E> static __device__ __forceinline__ void fp8_load8(const void *p, fp8_group<E> &g) {
  gs_u32x4 lo = gs_ld16(p);
  for (int i = 0; i < 4; i++) g.w[i] = lo.v[i];
  if constexpr (E == GS_ELEM_F32) {
    gs_u32x4 hi = gs_ld16((const char *)p + 16);
    for (int i = 0; i < 4; i++) g.w[4 + i] = hi.v[i];
  }
}

/* The first n (<= 8) elements one by one (a group that is partial or not
 * 16-byte aligned), zeros after them. */
template <int E, typename T>
static __device__ __forceinline__ void fp8_load_tail(const T *p, int n, fp8_group<E> &g) {
GS_FP8_UNROLL
  for (int q = 0; q < 8; q++) {
    uint32_t x = q < n ? (uint32_t)p[q] : 0u;
    if constexpr (E == GS_ELEM_F32) g.w[q] = x;
    else if (q % 2 == 0) g.w[q / 2] = x;
    else g.w[q / 2] |= x << 16;
  }
}

template <int E> static __device__ __forceinline__ float fp8_group_elem(const fp8_group<E> &g, int q) {
  if constexpr (E == GS_ELEM_F32) return gs_f32_from_bits(g.w[q]);
  else return fp8_widen<E>(q % 2 ? g.w[q / 2] >> 16 : g.w[q / 2] & 0xFFFFu);
}

/* step = max(history) * 2^margin / fmt_max for any finite positive amax:
 * the margin is headroom, the largest value lands on fmt_max / 2^margin.
 * TransformerEngine (transformer_engine/common/recipe/delayed_scaling.cu)
 * computes scale = (fmt_max * 2^-margin) / amax for any finite amax > 0
 * and multiplies by it; this is its inverse in step form, so the error
 * relative to the data's size is the same at every amplitude. TE has no
 * lower bound; where its scale overflows to inf it uses FLT_MAX, and a
 * step too small to have a finite reciprocal (amax/fmt_max underflowing to
 * a subnormal or 0) becomes that one's equivalent, FP8_MIN_STEP_BITS. The
 * product by 2^margin is exact (a power of two) short of overflow; an
 * overflowed step keeps the current one. Correctly rounded division
 * (div.rn.f32, subnormals kept; no fast-math), so the host computes the
 * same bits. */
static __device__ __forceinline__ float fp8_next_scale(float amax, float fmt_max, float margin_pow2,
                                                       float current) {
  float s = amax / fmt_max;
  s = s * margin_pow2;
  if (!(s <= 3.4028234663852886e38f)) return current;
  const float min_step = gs_f32_from_bits(FP8_MIN_STEP_BITS);
  return s < min_step ? min_step : s;
}

/* sm_89+ (fp8_quantize_sm89.cu builds this file with GS_FP8_Q_SM89 = 1):
 * eight elements encoded by the hardware's conversion, two per
 * cvt.rn.satfinite.<fmt>x2.f32 (a into the high byte of the 16-bit result;
 * sm_89 with PTX ISA 8.1), each element's quotient x / step taken as
 * gs_div_by_rcp: a multiply by the block's reciprocal step and one fused
 * correction, which gives the division's bits in the range the caller
 * checked (fast_below). On the CPU the instruction is its ISA model
 * (fp8_convert.h). */
#if GS_FP8_Q_SM89
template <int FMT> static __device__ __forceinline__ uint32_t fp8_cvt_x2(float hi, float lo) {
#if defined(GS_EMU)
  return gs_cvt_rn_satfinite_x2_model(hi, lo, FMT);
#else
  unsigned short d;
  if constexpr (FMT == GS_FP8_DEV_E4M3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
#endif
}

template <int FMT>
static __device__ __forceinline__ uint64_t fp8_encode8_hw(const float x[8], float scale, float rcp) {
  uint64_t codes = 0;
GS_FP8_UNROLL
  for (int p = 0; p < 4; p++)
    codes |= (uint64_t)fp8_cvt_x2<FMT>(gs_div_by_rcp(x[2 * p + 1], scale, rcp), gs_div_by_rcp(x[2 * p], scale, rcp))
             << (16 * p);
  return codes;
}

/* One element by the sm_61 encoder: x / step with saturation; a NaN
 * skips the division (its sign kept). */
static __device__ __forceinline__ uint8_t fp8_encode1_slow(float x, float scale, int fmt) {
  const uint32_t mag = gs_f32_bits(x) & 0x7FFFFFFFu;
  return gs_f32_to_fp8_sat(mag > 0x7F800000u ? x : x / scale, fmt);
}

/* Eight elements x (widened exactly, NaNs kept) whose largest |x| bits are
 * group_max: by the instruction where group_max < fast_below (the bound
 * fp8_quantize_body sets from the step), else element by element by the
 * sm_61 encoder (a NaN keeps its sign, skipping the division). */
static __device__ __forceinline__ uint64_t fp8_encode8_sm89(const float xs[8], uint32_t group_max, int fmt,
                                                            float scale, float rcp, uint32_t fast_below) {
  uint64_t codes = 0;
  if (group_max < fast_below) {
    codes = fmt ? fp8_encode8_hw<GS_FP8_DEV_E5M2>(xs, scale, rcp) : fp8_encode8_hw<GS_FP8_DEV_E4M3>(xs, scale, rcp);
  } else {
GS_FP8_UNROLL
    for (int q = 0; q < 8; q++) codes |= (uint64_t)fp8_encode1_slow(xs[q], scale, fmt) << (8 * q);
  }
  return codes;
}

/* The bound below which a group's |x| bits take the instruction: where
 * its largest |x| is below 2^64 * step (so no quotient overflows the
 * correction) and the step is in [2^-60, 2^60] (so 1/step and the residual
 * stay normal): every step the fold makes from finite amax values but the
 * most extreme. NaN and infinity are above the bound too: such groups (and
 * any other) take the sm_61 encoder, whose NaN codes keep the sign, which
 * the instruction's NaN result is not promised to. 0: none. */
static __device__ __forceinline__ uint32_t fp8_fast_below(float scale) {
  return scale >= 0x1p-60f && scale <= 0x1p60f ? gs_f32_bits(scale * 0x1p64f) : 0u;
}
#endif

/* The last block's fold, by one thread. amax_bits: this launch's amax;
 * others_bits: max of the history without the entry the new amax replaces. */
template <int MODE>
static __device__ __forceinline__ void fp8_fold(gs_fp8_ring_dev *ring, int parity, uint32_t amax_bits,
                                                uint32_t others_bits, uint32_t pos) {
  const float amax = gs_f32_from_bits(amax_bits);
  const float fmt_max = ring->fmt ? 57344.0f : 448.0f;
  const uint32_t hlen = ring->history;
  const float current = ring->scale[parity][0];
  const int valid = amax_bits != 0 && amax_bits < 0x7F800000u && hlen != 0;
  ring->last_amax = amax;
  /* The amax pass of a first call only publishes its step: the quantize
   * that follows in the same call measures the same values and enters them. */
  if (valid && MODE != GS_FP8_MODE_AMAX_INIT) {
    ring->hist[pos] = amax;
    ring->pos = pos + 1 == hlen ? 0 : pos + 1;
  }
  if constexpr (MODE == GS_FP8_MODE_AMAX_INIT) {
    if (valid) ring->scale[parity][0] = fp8_next_scale(amax, fmt_max, ring->margin_pow2, current);
  } else {
    float next = current;
    if (valid) {
      uint32_t m = others_bits > amax_bits ? others_bits : amax_bits;
      next = fp8_next_scale(gs_f32_from_bits(m), fmt_max, ring->margin_pow2, current);
    }
    ring->scale[parity ^ 1][0] = next;
  }
  ring->blocks_done = 0;
}

/* Where tile t of an operand lies: its batch member and first row and
 * column (tiles run down a member's columns, then member by member). */
struct fp8_tile_pos {
  int64_t b, r0, c0;
};
/* A tile index as its digits: batch member, tile column, tile row. */
struct fp8_tile_digits {
  int64_t b, tc, tr;
  __device__ __forceinline__ fp8_tile_pos pos() const { return fp8_tile_pos{b, tr * GS_FP8_Q_TILE, tc * GS_FP8_Q_TILE}; }
};
static __device__ __forceinline__ fp8_tile_digits fp8_tile_split(const gs_fp8_q_operand &a, int64_t t) {
  const int64_t per_member = a.tiles_r * a.tiles_c;
  const int64_t b = t / per_member, in_member = t - b * per_member;
  const int64_t tc = in_member / a.tiles_r;
  return fp8_tile_digits{b, tc, in_member - tc * a.tiles_r};
}
static __device__ __forceinline__ fp8_tile_pos fp8_tile_at(const gs_fp8_q_operand &a, int64_t t) {
  return fp8_tile_split(a, t).pos();
}

/* Tiles t0, t0 + s, t0 + 2s, ... walked without dividing: the position
 * of t0 and the stride's digits (batch member, tile column, tile row) once,
 * then a digit-wise add with carries per step (each digit of s is below
 * its radix, so one carry a digit). fp8_tile_at divides twice in 64 bits,
 * which the tile loop did for the next tile and again for the prefetch's;
 * the loop keeps one walk, its position the next tile's before a step and
 * the prefetch's after. */
struct fp8_tile_walk {
  fp8_tile_digits at, d;
  __device__ __forceinline__ void init(const gs_fp8_q_operand &a, int64_t t0, int64_t s) {
    at = fp8_tile_split(a, t0);
    d = fp8_tile_split(a, s);
  }
  __device__ __forceinline__ void step(const gs_fp8_q_operand &a) {
    at.tr += d.tr;
    at.tc += d.tc;
    at.b += d.b;
    if (at.tr >= a.tiles_r) at.tr -= a.tiles_r, at.tc++;
    if (at.tc >= a.tiles_c) at.tc -= a.tiles_c, at.b++;
  }
  __device__ __forceinline__ fp8_tile_pos pos() const { return at.pos(); }
};

/* One tile's loads: the thread's FP8_Q_PER_THREAD groups of the tile at
 * at (group g: column g / 8, rows (g % 8) * 8 on), len[u] = the elements
 * of group u inside the matrix (0: none, also for a tile past the last,
 * live false); pos becomes at. */
template <int E>
static __device__ __forceinline__ void fp8_tile_load(const gs_fp8_q_operand &a, bool live, const fp8_tile_pos &at,
                                                     fp8_tile_pos &pos, fp8_group<E> grp[FP8_Q_PER_THREAD],
                                                     int len[FP8_Q_PER_THREAD]) {
  typedef typename fp8_src_elem<E>::bits sbits;
  const unsigned tid = threadIdx.x;
GS_FP8_UNROLL
  for (int u = 0; u < FP8_Q_PER_THREAD; u++) {
    len[u] = 0;
    for (int i = 0; i < (E == GS_ELEM_F32 ? 8 : 4); i++) grp[u].w[i] = 0;
  }
  if (!live) return;
  pos = at;
  const int64_t r0 = pos.r0, c0 = pos.c0;
  const sbits *src = (const sbits *)a.src + pos.b * a.stride;
GS_FP8_UNROLL
  for (int u = 0; u < FP8_Q_PER_THREAD; u++) {
    const unsigned g = tid + u * GS_FP8_Q_THREADS;
    const int64_t c = c0 + g / 8, r = r0 + (g % 8) * 8;
    len[u] = c < a.cols && r < a.rows ? (a.rows - r < 8 ? (int)(a.rows - r) : 8) : 0;
    if (len[u] == 0) continue;
    const sbits *p = src + c * a.ld + r;
    if (a.vec_in && len[u] == 8) fp8_load8<E>(p, grp[u]);
    else fp8_load_tail<E>(p, len[u], grp[u]);
  }
}

/* Tile t's lines brought into L2 (PTX ISA, "prefetch": the cache line
 * holding the address, sm_20 on; no state space: the operand pointer is a
 * generic address; nothing in the host build), one address
 * per group inside the matrix: DRAM reads in flight that hold no register
 * until fp8_tile_load reads them from L2. */
template <int E>
static __device__ __forceinline__ void fp8_tile_prefetch(const gs_fp8_q_operand &a, bool live, const fp8_tile_pos &pos) {
#if defined(GS_EMU)
  (void)a, (void)live, (void)pos;
#else
  typedef typename fp8_src_elem<E>::bits sbits;
  if (!live) return;
  const sbits *src = (const sbits *)a.src + pos.b * a.stride;
GS_FP8_UNROLL
  for (int u = 0; u < FP8_Q_PER_THREAD; u++) {
    const unsigned g = threadIdx.x + u * GS_FP8_Q_THREADS;
    const int64_t c = pos.c0 + g / 8, r = pos.r0 + (g % 8) * 8;
    if (c < a.cols && r < a.rows) asm volatile("prefetch.L2 [%0];" : : "l"(src + c * a.ld + r));
  }
#endif
}

/* The tile at pos, its groups loaded by fp8_tile_load: their |x| into amax and, for
 * the quantize kernels, their codes stored (through s_tile when
 * transposing). Every thread of the block calls it for the same tile. */
template <int E, int MODE>
static __device__ __forceinline__ void fp8_tile_encode(const gs_fp8_q_operand &a, const fp8_tile_pos &pos,
                                                       const fp8_group<E> grp[FP8_Q_PER_THREAD],
                                                       const int len[FP8_Q_PER_THREAD], int fmt, float scale,
#if GS_FP8_Q_SM89
                                                       float rcp, uint32_t fast_below,
#endif
                                                       uint32_t s_tile[GS_FP8_Q_TILE][FP8_Q_PITCH_WORDS],
                                                       uint32_t &amax, int counting, gs_fp8_counts &counts) {
  constexpr bool quantize = fp8_mode<MODE>::quantize;
  const unsigned tid = threadIdx.x;
  const int64_t rows = a.rows, cols = a.cols;
  const int64_t r0 = pos.r0, c0 = pos.c0;
  /* dst: k x outer per member, k stride dst_ld (k padded with zeros) */
  const int64_t dld = a.dst_ld;
  uint8_t *dst = quantize ? a.dst + pos.b * dld * (a.transpose ? rows : cols) : a.dst; /* NULL for amax */
  (void)fmt, (void)scale, (void)s_tile, (void)dst, (void)counting, (void)counts;

GS_FP8_UNROLL
  for (int u = 0; u < FP8_Q_PER_THREAD; u++) {
    const unsigned g = tid + u * GS_FP8_Q_THREADS;
    const int64_t cl = g / 8, rg = g % 8;
    const int64_t c = c0 + cl, r = r0 + rg * 8;
    if (len[u] == 0) {
      /* k's zero padding (rows..dld-1, within the last tile: k pads to
       * less than a tile) for the copying path; the transposing one pads
       * its rows below. */
      if constexpr (quantize)
        if (!a.transpose && c < cols && r >= rows && r < dld)
          for (int64_t q = r; q < dld && q < r + 8; q++) dst[c * dld + q] = 0;
      continue;
    }
    /* Fixed trip counts, so the group stays in registers. */
    uint64_t codes = 0;
#if GS_FP8_Q_SM89
    /* Elements past len are +0 (fp8_load_tail): no effect on the max,
     * and their codes are not stored. */
    float xs[8];
    uint32_t group_max = 0;
GS_FP8_UNROLL
    for (int q = 0; q < 8; q++) {
      xs[q] = fp8_group_elem<E>(grp[u], q);
      const uint32_t mag = gs_f32_bits(xs[q]) & 0x7FFFFFFFu;
      group_max = mag > group_max ? mag : group_max;
    }
    amax = group_max > amax ? group_max : amax;
    /* fp8_encode8_sm89's choice, written out: through the helper, ptxas
     * lays the slow path before the instruction's (perf-report's group
     * count then spans it) */
    if (group_max < fast_below) {
      codes = fmt ? fp8_encode8_hw<GS_FP8_DEV_E5M2>(xs, scale, rcp) : fp8_encode8_hw<GS_FP8_DEV_E4M3>(xs, scale, rcp);
    } else {
GS_FP8_UNROLL
      for (int q = 0; q < 8; q++) codes |= (uint64_t)fp8_encode1_slow(xs[q], scale, fmt) << (8 * q);
    }
    /* fp8_stats.h: compared calls only (counting is uniform over the
     * launch, and 0 at compile time in the plain current-recipe kernels),
     * from the values and codes at hand; fixed trip count. */
    if (counting) {
GS_FP8_UNROLL
      for (int q = 0; q < 8; q++)
        if (q < len[u]) gs_fp8_count(xs[q], (uint32_t)(codes >> (8 * q)), scale, fmt, counts);
    }
#else
GS_FP8_UNROLL
    for (int q = 0; q < 8; q++) {
      if (q >= len[u]) continue;
      const float x = fp8_group_elem<E>(grp[u], q);
      const uint32_t mag = gs_f32_bits(x) & 0x7FFFFFFFu;
      amax = mag > amax ? mag : amax;
      /* A NaN skips the division: GPUs return the canonical (positive)
       * NaN from arithmetic, the host keeps the operand's; encoding the
       * input keeps its sign on both. */
      if constexpr (quantize) {
        const uint8_t code = gs_f32_to_fp8_sat(mag > 0x7F800000u ? x : x / scale, fmt);
        codes |= (uint64_t)code << (8 * q);
        if (counting) gs_fp8_count(x, code, scale, fmt, counts); /* fp8_stats.h: compared calls only */
      }
    }
#endif
    if constexpr (quantize) {
      if (a.transpose) {
        s_tile[cl][rg * 2] = (uint32_t)codes;
        s_tile[cl][rg * 2 + 1] = (uint32_t)(codes >> 32);
      } else if (a.vec_out && len[u] == 8) {
        gs_st8(dst + c * dld + r, codes);
      } else {
        /* A partial group's codes past len are 0 (+0 or not set): they
         * pad k up to dld. */
        const int n = dld - r < 8 ? (int)(dld - r) : 8;
        for (int q = 0; q < n; q++) dst[c * dld + r + q] = q < len[u] ? (uint8_t)(codes >> (8 * q)) : 0;
      }
    }
  }

  if constexpr (quantize) {
    if (a.transpose) {
      __syncthreads();
      /* A warp writes 4 rows of 64 contiguous bytes each. */
      for (unsigned g = tid; g < FP8_Q_GROUPS; g += GS_FP8_Q_THREADS) {
        const int64_t rl = g / 8, cg = g % 8;
        const int64_t r = r0 + rl, c = c0 + cg * 8;
        if (r >= rows || c >= dld) continue;
        /* Codes for c < cols, zeros from cols to dld (k's padding). */
        const int valid = cols - c < 8 ? (int)(cols - c) : 8;
        const int n = dld - c < 8 ? (int)(dld - c) : 8;
        uint64_t codes = 0;
        for (int q = 0; q < valid; q++) {
          uint32_t word = s_tile[cg * 8 + q][rl >> 2];
          codes |= (uint64_t)((word >> (8 * (rl & 3))) & 0xFFu) << (8 * q);
        }
        if (a.vec_out && n == 8) {
          gs_st8(dst + r * dld + c, codes);
        } else {
          for (int q = 0; q < n; q++) dst[r * dld + c + q] = (uint8_t)(codes >> (8 * q));
        }
      }
      __syncthreads(); /* the tile buffer is refilled by the next tile */
    }
  }
}

/* The current recipe's step from its amax (bits): amax / fmt_max, as the
 * ring kernels' first fold computes it for a fresh ring of one entry with
 * no margin and scale 1 (fp8_fold<AMAX_INIT>; what fp8_ring_init made
 * before this recipe stopped using rings): 1 for an amax of 0, inf or NaN. */
static __device__ __forceinline__ float fp8_current_step(uint32_t amax_bits, int fmt) {
  if (amax_bits == 0 || amax_bits >= 0x7F800000u) return 1.0f;
  return fp8_next_scale(gs_f32_from_bits(amax_bits), fmt ? 57344.0f : 448.0f, 1.0f, 1.0f);
}

/* The quantize pass's step, the same in every block: the block reduces its
 * operand's amax slots (at most GS_FP8_CUR_SLOTS words, one or two loads a
 * thread from L2) into *s_max (shared, zeroed by the caller before a
 * barrier), and block 0 alone stores the step where the GEMM reads it, so
 * within one launch nothing is written twice (docs/graphs.md). */
static __device__ __forceinline__ float fp8_current_step_of_slots(const gs_fp8_q_operand &a, unsigned bx,
                                                                  unsigned *s_max) {
  uint32_t m = 0;
  for (unsigned i = threadIdx.x; i < (unsigned)a.blocks; i += GS_FP8_Q_THREADS) {
    const uint32_t v = a.partial[i];
    m = v > m ? v : m;
  }
  if (m != 0) gs_fp8_atomic_max(s_max, m);
  __syncthreads();
  const float step = fp8_current_step(*s_max, a.fmt);
  if (bx == 0 && threadIdx.x == 0) a.ring->scale[0][0] = step;
  return step;
}

template <int E, int MODE>
static __device__ __forceinline__ void fp8_quantize_body(const gs_fp8_q_operand &a, const unsigned bx,
                                                         const int parity, gs_fp8_op_stats *stats) {
  typedef fp8_mode<MODE> M;
  __shared__ uint32_t s_tile[GS_FP8_Q_TILE][FP8_Q_PITCH_WORDS];
  __shared__ unsigned s_block_amax, s_slots_amax, s_others_amax, s_last;

  const unsigned nb = (unsigned)a.blocks;
  const unsigned tid = threadIdx.x;
  const int64_t tiles = a.tiles_r * a.tiles_c * a.batch;

  /* Block bx takes tiles bx, bx + nb, ... (a grid of a few blocks per SM:
   * fp8_launch.c). The next tile's loads are issued before the current
   * one is encoded and stored, and the first tile's before anything else
   * (the ring's scale, or the current recipe's slots, included) is waited
   * on: one tile's groups, 32 bytes
   * of bf16 (64 of fp32) a thread, are in flight in registers while the
   * current one is encoded, and the tile after that is prefetched into L2. */
  fp8_group<E> cur[FP8_Q_PER_THREAD], nxt[FP8_Q_PER_THREAD];
  int cur_len[FP8_Q_PER_THREAD], nxt_len[FP8_Q_PER_THREAD];
  fp8_tile_pos cur_pos = {0, 0, 0}, nxt_pos = {0, 0, 0};
  const bool live0 = (int64_t)bx < tiles;
  if (live0) fp8_tile_load<E>(a, true, fp8_tile_at(a, (int64_t)bx), cur_pos, cur, cur_len);
  else fp8_tile_load<E>(a, false, cur_pos, cur_pos, cur, cur_len);

  if (tid == 0) {
    s_block_amax = 0;
    s_slots_amax = 0;
    s_others_amax = 0;
    s_last = 0;
  }
  __syncthreads();

  gs_fp8_ring_dev *ring = a.ring;
  int fmt;
  float scale;
  if constexpr (M::current) {
    fmt = a.fmt;
    scale = 1.0f;
    if constexpr (M::quantize) {
      /* every block the same step; block 0 stores it */
      scale = fp8_current_step_of_slots(a, bx, &s_slots_amax);
      if (bx == 0 && tid == 0) {
        if constexpr (M::stats)
          if (stats) {
            stats->amax = s_slots_amax;
            stats->step = gs_f32_bits(scale);
          }
      }
    }
  } else {
    fmt = (int)ring->fmt;
    scale = ring->scale[parity][0];
  }
#if GS_FP8_Q_SM89
  /* fp8_fast_below: which groups take the instruction. */
  const float rcp = 1.0f / scale;
  const uint32_t fast_below = fp8_fast_below(scale);
#endif
  uint32_t amax = 0; /* |x| bits: unsigned order is float order, NaN on top */
  gs_fp8_counts counts = {0, 0};
  /* The current recipe counts in its _stats kernels only (a constant:
   * the plain ones carry no counting code); the ring kernels wherever
   * they are given counters. */
  constexpr bool ring_quantize = M::base == GS_FP8_MODE_QUANTIZE;
  const int counting = M::stats || (ring_quantize && stats != nullptr);

  /* The next tile's position, stepped by nb a tile; one step ahead it is
   * the prefetch's (initialised only where the loop runs: tiles_r and
   * tiles_c are at least 1 there). Only in the current recipe's 16-bit
   * kernels: elsewhere the walk's six 64-bit words raised ptxas's spills
   * on sm_90 (bytes stored/loaded: current fp32 16/32 -> 88/80, delayed
   * bf16 20/28 -> 92/104), which cost more than the divisions it saves. */
  constexpr bool walk = M::current && E != GS_ELEM_F32;
  fp8_tile_walk next = {};
  if (walk && live0) next.init(a, (int64_t)bx + nb, nb);
  for (int64_t t = bx; t < tiles; t += nb) {
    const bool live1 = t + nb < tiles, live2 = t + 2 * (int64_t)nb < tiles;
    if constexpr (walk) {
      fp8_tile_load<E>(a, live1, next.pos(), nxt_pos, nxt, nxt_len);
      next.step(a); /* now the prefetch's tile, and the next iteration's load */
      fp8_tile_prefetch<E>(a, live2, next.pos());
    } else {
      fp8_tile_load<E>(a, live1, fp8_tile_at(a, t + nb), nxt_pos, nxt, nxt_len);
      fp8_tile_prefetch<E>(a, live2, fp8_tile_at(a, t + 2 * (int64_t)nb));
    }
    fp8_tile_encode<E, MODE>(a, cur_pos, cur, cur_len, fmt, scale,
#if GS_FP8_Q_SM89
                             rcp, fast_below,
#endif
                             s_tile, amax, counting, counts);
GS_FP8_UNROLL
    for (int u = 0; u < FP8_Q_PER_THREAD; u++) {
      cur[u] = nxt[u];
      cur_len[u] = nxt_len[u];
    }
    cur_pos = nxt_pos;
  }

  if constexpr (M::stats || ring_quantize) gs_fp8_counts_flush(stats, counts);
  if constexpr (M::base == GS_FP8_MODE_QUANTIZE_CUR) return; /* its amax is the amax pass's */

  /* Block amax -> one slot. */
  if (amax != 0) gs_fp8_atomic_max(&s_block_amax, amax);
  __syncthreads();
  if constexpr (M::base == GS_FP8_MODE_AMAX_PART) {
    /* Every block stores its slot, 0 included (an empty block's), so
     * nothing needs resetting between calls: write-only. */
    if (tid == 0) a.partial[bx] = s_block_amax;
    return;
  }
  /* Ring kernels: the last block to count itself folds. Each block's
   * slot write, fence, then count is the PTX memory model's release
   * pattern; the last block's count, then fence, in the same thread, is
   * its acquire pattern, and the barrier after it orders the block's
   * other threads (PTX ISA, "Memory Consistency Model": release and
   * acquire patterns, causality order through bar.sync). */
  if (tid == 0) {
    if (s_block_amax != 0)
      gs_fp8_atomic_max(&ring->amax_slot[bx % GS_FP8_DEV_AMAX_SLOTS], s_block_amax);
    gs_fp8_threadfence();
    s_last = gs_fp8_atomic_add(&ring->blocks_done, 1) == nb - 1;
    if (s_last) gs_fp8_threadfence();
  }
  __syncthreads();
  if (!s_last) return;

  const uint32_t hlen = ring->history;
  const uint32_t pos = hlen ? ring->pos % hlen : 0;
  uint32_t slots = 0, others = 0;
  for (unsigned i = tid; i < GS_FP8_DEV_AMAX_SLOTS; i += GS_FP8_Q_THREADS) {
    uint32_t s = gs_fp8_atomic_exch(&ring->amax_slot[i], 0);
    slots = s > slots ? s : slots;
  }
  if constexpr (M::base == GS_FP8_MODE_QUANTIZE) {
    for (uint32_t i = tid; i < hlen; i += GS_FP8_Q_THREADS) {
      uint32_t h = gs_f32_bits(ring->hist[i]);
      if (i != pos && h > others) others = h;
    }
  }
  if (slots != 0) gs_fp8_atomic_max(&s_slots_amax, slots);
  if (others != 0) gs_fp8_atomic_max(&s_others_amax, others);
  __syncthreads();
  if (tid == 0) fp8_fold<M::base>(ring, parity, s_slots_amax, s_others_amax, pos);
  if (tid == 0 && stats) {
    stats->amax = s_slots_amax;
    stats->step = gs_f32_bits(scale);
  }
}

/* The grid's first op[0].blocks blocks take A, the rest B: each operand is
 * a grid of its own (block bx of op.blocks) with its own ring and fold. Two
 * inlined bodies, each reading its operand's fields at fixed offsets: one
 * body picking fields at run time took ~30 more registers (ptxas). */
template <int E, int MODE> static __device__ __forceinline__ void fp8_quantize_operands(const gs_fp8_quantize_args &args) {
  if (args.operands > 1 && blockIdx.x >= (unsigned)args.op[0].blocks)
    fp8_quantize_body<E, MODE>(args.op[1], blockIdx.x - (unsigned)args.op[0].blocks, args.parity, args.stats[1]);
  else
    fp8_quantize_body<E, MODE>(args.op[0], blockIdx.x, args.parity, args.stats[0]);
}

#define GS_FP8_Q_DEFINE(name, E, MODE)                                         \
  extern "C" __global__ void __launch_bounds__(GS_FP8_Q_THREADS, 3)            \
      name(gs_fp8_quantize_args args) {                                        \
    fp8_quantize_operands<E, MODE>(args);                                      \
  }
#if GS_FP8_Q_SM89
#define FP8_Q_LIST GS_FP8_QUANTIZE_SM89_KERNELS
#else
#define FP8_Q_LIST GS_FP8_QUANTIZE_KERNELS
#endif
FP8_Q_LIST(GS_FP8_Q_DEFINE)

#if defined(GS_EMU)
#define GS_FP8_Q_ENTRY(name, E, MODE) GS_FP8_EMU_ENTRY(name)
FP8_Q_LIST(GS_FP8_Q_ENTRY)
#endif
