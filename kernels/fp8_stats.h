/* fp8_stats.h: the fp8 statistics of compared calls, counted by the
 * quantize kernels (fp8_quantize.cu, fp8_scaled_quantize.cu) on the way:
 * per operand, how many elements saturated and how many flushed to zero,
 * the operand's amax and the step it was quantized with, and for the
 * block-scaled kernels the worst block of each kind. C and C++ (device
 * and host builds).
 *
 * The kernels take a gs_fp8_op_stats pointer per operand, NULL when the
 * call is not compared (shim/compare.c). The current recipe's quantize
 * kernels count only in their `_stats` variants (fp8_kernels.h), which
 * the launcher runs for compared calls; the ring and block-scaled ones
 * skip the counting on a branch uniform over the launch (register costs:
 * docs/log-format.md, "fp8 statistics"). Counting, for one
 * element x of code c (the encoded byte) and step s (x8 = x / s):
 *   saturated  x is not NaN and |x / s| overflows the format: rounded
 *              with the exponent unbounded, past its largest finite
 *              value (E4M3 448, E5M2 57344: OCP 8-bit Floating Point
 *              Specification v1.0, table 1), so E4M3 above 464, E5M2
 *              from 61440 on (gs_fp8_above_max), which the encoder clamps
 *              (cvt .satfinite; TransformerEngine's cast saturates the
 *              same way); infinities included, though IEEE 754 calls no
 *              conversion of one an overflow;
 *   flushed    x is finite and not zero, and c is +-0.
 * Cost where counted: per element two compares of c (the division again
 * only for an element whose code is the largest, the only ones that can
 * have saturated); per thread block one reduction through shared memory
 * and two 64-bit global atomics. docs/log-format.md, "fp8 statistics". */
#ifndef GEMMSHIM_FP8_STATS_H
#define GEMMSHIM_FP8_STATS_H

#include <stddef.h>
#include <stdint.h>

/* One operand's counters, zeroed before the quantize launch. The ring
 * kernels write amax and step once, by the block that folds the amax;
 * the block-scaled ones take maxima over their blocks, and keep the worst
 * block by saturated and by flushed fraction as a key: the fraction's top
 * 32 bits (floor(count * 2^32 / elements), at most 2^32 - 1) above
 * 2^32 - 1 - the block's index, so the largest key is the worst block,
 * the lowest index among equals; 0: no block. */
typedef struct gs_fp8_op_stats {
  unsigned long long saturated, flushed;
  unsigned long long worst_sat, worst_flush; /* block-scaled only */
  /* step below amax: the block-scaled kernels keep both as one 64-bit
   * word (little-endian: amax the high half), amax << 32 | step, whose
   * maximum is the step of the block holding the amax. */
  uint32_t step; /* bits of the step quantized with (block-scaled: the
                  * step of the block holding the amax, the largest step
                  * among equal amaxes) */
  uint32_t amax; /* bits of max |x| over the operand (NaN's bits win) */
} gs_fp8_op_stats;

typedef struct gs_fp8_stats {
  gs_fp8_op_stats op[2]; /* A, B */
} gs_fp8_stats;

#if defined(__cplusplus)
static_assert(sizeof(gs_fp8_stats) == 80, "gs_fp8_stats has padding");
static_assert(offsetof(gs_fp8_op_stats, step) % 8 == 0 &&
                  offsetof(gs_fp8_op_stats, amax) == offsetof(gs_fp8_op_stats, step) + 4,
              "gs_fp8_op_stats: step and amax are one 64-bit word");
#else
_Static_assert(sizeof(gs_fp8_stats) == 80, "gs_fp8_stats has padding");
_Static_assert(offsetof(gs_fp8_op_stats, step) % 8 == 0 &&
                   offsetof(gs_fp8_op_stats, amax) == offsetof(gs_fp8_op_stats, step) + 4,
               "gs_fp8_op_stats: step and amax are one 64-bit word");
#endif

#if defined(__cplusplus) && (defined(__CUDA__) || defined(GS_EMU))
#include "fp8_block.h"
#include "fp8_convert.h"

/* One thread's counts, in registers until the block's reduction. A
 * thread block's counts fit 32 bits: it quantizes at most its share of
 * an operand of GEMMSHIM_FP8_MAX_BYTES. */
struct gs_fp8_counts {
  uint32_t saturated, flushed;
};

/* Saturated: q overflows the format in IEEE 754's sense (2008, 7.4): its
 * rounding to the format's precision with the exponent unbounded is past
 * the largest finite value. E4M3: past 464, halfway from 448 to 480 (a
 * tie goes to 448, the even code); E5M2: from 61440 on, halfway from
 * 57344 to 65536 (a tie goes to 65536). A value rounding to the largest
 * finite value, from above or below, is rounded, not saturated. An
 * infinity counts too (clamped to the largest finite value; IEEE 754
 * itself calls converting one exact). */
static __device__ __forceinline__ int gs_fp8_above_max(float q, int fmt) {
  return (gs_f32_bits(q) & 0x7FFFFFFFu) > (fmt ? 0x476FFFFFu : 0x43E80000u); /* >= 61440, > 464 */
}

/* Element x, encoded as code with step s in format fmt (GS_FP8_DEV_*). */
static __device__ __forceinline__ void gs_fp8_count(float x, uint32_t code, float s, int fmt, gs_fp8_counts &n) {
  const uint32_t mag = gs_f32_bits(x) & 0x7FFFFFFFu, cm = code & 0x7Fu;
  if (mag > 0x7F800000u) return; /* NaN: neither */
  if (cm == 0) n.flushed += mag != 0 && mag != 0x7F800000u;
  else if (cm == (fmt ? GS_E5M2_MAX_CODE : GS_E4M3_MAX_CODE)) n.saturated += gs_fp8_above_max(x / s, fmt);
}

/* The same where the scaled value q (x * scale) is at hand. */
static __device__ __forceinline__ void gs_fp8_count_scaled(float x, float q, uint32_t code, int fmt, gs_fp8_counts &n) {
  const uint32_t mag = gs_f32_bits(x) & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return;
  n.flushed += (code & 0x7Fu) == 0 && mag != 0 && mag != 0x7F800000u;
  n.saturated += gs_fp8_above_max(q, fmt);
}

static __device__ __forceinline__ void gs_fp8_atomic_add64(unsigned long long *p, unsigned long long v) {
#if defined(GS_EMU)
  __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
#else
  __nvvm_atom_add_gen_ll((long long *)p, (long long)v);
#endif
}

static __device__ __forceinline__ void gs_fp8_atomic_max64(unsigned long long *p, unsigned long long v) {
#if defined(GS_EMU)
  unsigned long long old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
#else
  __nvvm_atom_max_gen_ull(p, v);
#endif
}

/* Sum of v over the `width` threads (32 or 128) of t's group, through s
 * (one word a thread); every thread of the block calls it. */
static __device__ __forceinline__ uint32_t gs_fp8_group_sum(uint32_t *s, unsigned t, unsigned width, uint32_t v) {
  s[t] = v;
  __syncthreads();
  for (unsigned h = width / 2; h; h /= 2) {
    if (t % width < h) s[t] += s[t + h];
    __syncthreads();
  }
  uint32_t r = s[t - t % width];
  __syncthreads();
  return r;
}

/* One scale block of a block-scaled kernel (fp8_scaled_quantize.cu): the
 * `width` threads of t's group hold its counts; elems its elements inside
 * the matrix (0: a padding block, not counted), index its number,
 * amax_bits and scale its amax and scale. Every thread of the block calls
 * it (barriers), st the same for all; NULL: nothing. */
static __device__ __forceinline__ void gs_fp8_block_stats(gs_fp8_op_stats *st, uint32_t *s, unsigned t, unsigned width,
                                                          const gs_fp8_counts &n, uint32_t elems, uint64_t index,
                                                          uint32_t amax_bits, float scale) {
  if (!st) return;
  const uint32_t sat = gs_fp8_group_sum(s, t, width, n.saturated);
  const uint32_t flush = gs_fp8_group_sum(s, t, width, n.flushed);
  if (t % width || !elems) return;
  if (sat) gs_fp8_atomic_add64(&st->saturated, sat);
  if (flush) gs_fp8_atomic_add64(&st->flushed, flush);
  /* One maximum over amax << 32 | step: the step of the block holding the
   * amax. Separate maxima would let a block of amax 0, Inf or NaN (scale
   * 1, TransformerEngine's compute_scale_from_amax) set step 1 whatever
   * the other blocks hold. */
  gs_fp8_atomic_max64((unsigned long long *)&st->step,
                      (unsigned long long)amax_bits << 32 | (gs_f32_bits(1.0f / scale) & 0x7FFFFFFFu));
  const unsigned long long low = 0xFFFFFFFFull - (index < 0xFFFFFFFEull ? index : 0xFFFFFFFEull);
  const unsigned long long fs = ((unsigned long long)sat << 32) / elems, ff = ((unsigned long long)flush << 32) / elems;
  gs_fp8_atomic_max64(&st->worst_sat, (fs < 0xFFFFFFFFull ? fs : 0xFFFFFFFFull) << 32 | low);
  gs_fp8_atomic_max64(&st->worst_flush, (ff < 0xFFFFFFFFull ? ff : 0xFFFFFFFFull) << 32 | low);
}

/* The block's counts into *st; every thread of the block calls it (it
 * has barriers), st the same for all, NULL: nothing. */
static __device__ __forceinline__ void gs_fp8_counts_flush(gs_fp8_op_stats *st, const gs_fp8_counts &n) {
  if (!st) return;
  __shared__ unsigned s_sat, s_flush;
  if (threadIdx.x == 0) s_sat = s_flush = 0;
  __syncthreads();
  if (n.saturated) gs_fp8_atomic_add(&s_sat, n.saturated);
  if (n.flushed) gs_fp8_atomic_add(&s_flush, n.flushed);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (s_sat) gs_fp8_atomic_add64(&st->saturated, s_sat);
    if (s_flush) gs_fp8_atomic_add64(&st->flushed, s_flush);
  }
}
#endif

#endif
