/* fp8_stats.h: the fp8 statistics of compared calls, counted by the
 * quantize kernels (fp8_quantize.cu) on the way: per operand, how many
 * elements saturated and how many flushed to zero, the operand's amax and
 * the step it was quantized with. C and C++ (device and host builds).
 *
 * The kernels take a gs_fp8_op_stats pointer per operand, NULL when the
 * call is not compared (shim/compare.c): then each 8-element group pays
 * one uniform branch on that pointer and nothing else. Counting, for one
 * element x of code c (the encoded byte) and step s (x8 = x / s):
 *   saturated  x is not NaN and |x / s| > the format's largest finite
 *              value (E4M3 448, E5M2 57344: OCP 8-bit Floating Point
 *              Specification v1.0, table 1), before the encoder clamps it
 *              (cvt .satfinite; TransformerEngine's cast saturates the
 *              same way); infinities included;
 *   flushed    x is finite and not zero, and c is +-0.
 * Cost where counted: per element two compares of c (the division again
 * only for an element whose code is the largest, the only ones that can
 * have saturated); per thread block one reduction through shared memory
 * and two 64-bit global atomics. docs/log-format.md, "fp8 statistics". */
#ifndef GEMMSHIM_FP8_STATS_H
#define GEMMSHIM_FP8_STATS_H

#include <stdint.h>

/* One operand's counters, zeroed before the quantize launch. amax and
 * step are written once, by the block that folds the amax. */
typedef struct gs_fp8_op_stats {
  unsigned long long saturated, flushed;
  uint32_t amax; /* bits of max |x| over the operand (NaN's bits win) */
  float step;    /* the step the operand was quantized with */
} gs_fp8_op_stats;

typedef struct gs_fp8_stats {
  gs_fp8_op_stats op[2]; /* A, B */
} gs_fp8_stats;

#if defined(__cplusplus)
static_assert(sizeof(gs_fp8_stats) == 48, "gs_fp8_stats has padding");
#else
_Static_assert(sizeof(gs_fp8_stats) == 48, "gs_fp8_stats has padding");
#endif

#if defined(__cplusplus) && (defined(__CUDA__) || defined(GS_EMU))
#include "fp8_block.h"
#include "fp8_convert.h"

/* One thread's counts, in registers until the block's reduction. */
struct gs_fp8_counts {
  uint32_t saturated, flushed;
};

/* Element x, encoded as code with step s in format fmt (GS_FP8_DEV_*). */
static __device__ __forceinline__ void gs_fp8_count(float x, uint32_t code, float s, int fmt, gs_fp8_counts &n) {
  const uint32_t mag = gs_f32_bits(x) & 0x7FFFFFFFu, cm = code & 0x7Fu;
  if (mag > 0x7F800000u) return; /* NaN: neither */
  if (cm == 0) {
    n.flushed += mag != 0 && mag != 0x7F800000u;
  } else if (cm == (fmt ? GS_E5M2_MAX_CODE : GS_E4M3_MAX_CODE)) {
    const uint32_t q = gs_f32_bits(x / s) & 0x7FFFFFFFu;
    n.saturated += q > (fmt ? 0x47600000u : 0x43E00000u); /* 57344, 448 */
  }
}

static __device__ __forceinline__ void gs_fp8_atomic_add64(unsigned long long *p, unsigned long long v) {
#if defined(GS_EMU)
  __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
#else
  __nvvm_atom_add_gen_ll((long long *)p, (long long)v);
#endif
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
