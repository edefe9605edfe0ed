/* accuracy.cu: the route's output against the native one, for compared
 * calls (accuracy_kernels.h says what is measured and how it is binned).
 *
 * The block reductions need __shared__ memory, barriers and 32-bit
 * atomics (the histogram): fp8_block.h (fibers in the host build). Sums
 * are in double so that the SQNR of outputs of millions of elements is
 * not limited by the summation; the fold adds the partials in block order,
 * so a result is the same from run to run. */
#include "fp8_block.h"

#include "accuracy_kernels.h"
#include "convert.h"

static __device__ __forceinline__ float acc_load(const void *p, int elem, int64_t i) {
  if (elem == 0) return ((const float *)p)[i];
  const uint16_t h = ((const uint16_t *)p)[i];
  return elem == 1 ? gs_bf16_to_f32(h) : gs_f16_to_f32(h);
}

static __device__ __forceinline__ int acc_finite(float x) { return (gs_f32_bits(x) & 0x7f800000u) != 0x7f800000u; }

/* The histogram bin of relative error e >= 0 (accuracy_kernels.h). */
static __device__ __forceinline__ unsigned acc_bin(float e) {
  if (e == 0.0f) return 0;
  const uint32_t u = gs_f32_bits(e);
  const int j = (int)((u >> 23) & 0xff) - 127; /* floor(log2 e) for normal e */
  if (j < GS_ACC_LOG2_LO) return 1;            /* subnormal e too */
  if (j >= GS_ACC_LOG2_HI) return GS_ACC_BINS - 1;
  const float m = gs_f32_from_bits((u & 0x007fffffu) | 0x3f800000u); /* e / 2^j, in [1, 2) */
  const unsigned q = (m >= 1.18920712f) + (m >= 1.41421356f) + (m >= 1.68179283f); /* 2^(1/4), 2^(2/4), 2^(3/4) */
  return 2u + 4u * (unsigned)(j - GS_ACC_LOG2_LO) + q;
}

extern "C" __global__ void __launch_bounds__(GS_ACC_THREADS) gs_acc_partial_kernel(gs_acc_args a) {
  __shared__ uint32_t hist[GS_ACC_BINS];
  __shared__ double s_n2[GS_ACC_THREADS], s_d2[GS_ACC_THREADS];
  __shared__ uint64_t s_mis[GS_ACC_THREADS];
  __shared__ uint32_t s_mn[GS_ACC_THREADS], s_md[GS_ACC_THREADS];
  const unsigned t = threadIdx.x;
  for (unsigned i = t; i < GS_ACC_BINS; i += GS_ACC_THREADS) hist[i] = 0;
  __syncthreads();
  double n2 = 0, d2 = 0;
  uint64_t mis = 0;
  uint32_t mn = 0, md = 0;
  const uint64_t per_member = (uint64_t)a.rows * (uint64_t)a.cols;
  const uint64_t total = per_member * (uint64_t)a.batch;
  const uint64_t step = (uint64_t)gridDim.x * GS_ACC_THREADS;
  for (uint64_t i = (uint64_t)blockIdx.x * GS_ACC_THREADS + t; i < total; i += step) {
    const uint64_t b = i / per_member, in = i - b * per_member;
    const uint64_t c = in / (uint64_t)a.rows, r = in - c * (uint64_t)a.rows;
    const int64_t off = (int64_t)b * a.stride + (int64_t)c * a.ld + (int64_t)r;
    const float n = acc_load(a.native, a.elem, off), x = acc_load(a.route, a.elem, off);
    const int fn = acc_finite(n), fx = acc_finite(x);
    if (fn != fx) mis++;
    if (!fn || !fx) continue;
    const float an = n < 0 ? -n : n;
    const float d = x - n, ad = d < 0 ? -d : d; /* ad may be inf when x - n overflows */
    n2 += (double)n * (double)n;
    const double dd = (double)x - (double)n; /* exact: the difference of two floats fits a double */
    d2 += dd * dd;
    if (gs_f32_bits(an) > mn) mn = gs_f32_bits(an);
    /* A d too large for fp32 (x - n overflowed) counts as 0 in the largest
     * difference; its relative error is taken from the exact double dd. */
    const float adf = ad != ad || ad > 3.40282346e38f ? 0.0f : ad;
    if (gs_f32_bits(adf) > md) md = gs_f32_bits(adf);
    const double rel = (dd < 0 ? -dd : dd) / (double)(an > GS_ACC_TINY ? an : GS_ACC_TINY);
    gs_fp8_atomic_add(&hist[acc_bin((float)rel)], 1u);
  }
  s_n2[t] = n2;
  s_d2[t] = d2;
  s_mis[t] = mis;
  s_mn[t] = mn;
  s_md[t] = md;
  __syncthreads();
  for (unsigned half = GS_ACC_THREADS / 2; half; half /= 2) {
    if (t < half) {
      s_n2[t] += s_n2[t + half];
      s_d2[t] += s_d2[t + half];
      s_mis[t] += s_mis[t + half];
      if (s_mn[t + half] > s_mn[t]) s_mn[t] = s_mn[t + half];
      if (s_md[t + half] > s_md[t]) s_md[t] = s_md[t + half];
    }
    __syncthreads();
  }
  gs_acc_partial *p = &a.partials[blockIdx.x];
  for (unsigned i = t; i < GS_ACC_BINS; i += GS_ACC_THREADS) p->hist[i] = hist[i];
  if (t == 0) {
    p->sum_n2 = s_n2[0];
    p->sum_d2 = s_d2[0];
    p->mismatch = s_mis[0];
    p->max_n = s_mn[0];
    p->max_d = s_md[0];
  }
}

/* One block; thread t folds bins t, t + 256, ...; thread 0 the rest. */
extern "C" __global__ void __launch_bounds__(GS_ACC_THREADS) gs_acc_fold_kernel(gs_acc_fold_args a) {
  const unsigned t = threadIdx.x;
  gs_acc_stats *o = a.out;
  for (unsigned i = t; i < GS_ACC_BINS; i += GS_ACC_THREADS) {
    uint64_t s = 0;
    for (uint32_t p = 0; p < a.n; p++) s += a.partials[p].hist[i];
    o->hist[i] = s;
  }
  if (t == 0) {
    double n2 = 0, d2 = 0;
    uint64_t mis = 0;
    uint32_t mn = 0, md = 0;
    for (uint32_t p = 0; p < a.n; p++) {
      const gs_acc_partial *q = &a.partials[p];
      n2 += q->sum_n2;
      d2 += q->sum_d2;
      mis += q->mismatch;
      if (q->max_n > mn) mn = q->max_n;
      if (q->max_d > md) md = q->max_d;
    }
    o->sum_n2 = n2;
    o->sum_d2 = d2;
    o->mismatch = mis;
    o->max_n = gs_f32_from_bits(mn);
    o->max_d = gs_f32_from_bits(md);
  }
  __syncthreads();
  if (t == 0) {
    uint64_t f = 0;
    for (unsigned i = 0; i < GS_ACC_BINS; i++) f += o->hist[i];
    o->finite = f;
  }
}

#if defined(GS_EMU)
GS_FP8_EMU_ENTRY(gs_acc_partial_kernel)
GS_FP8_EMU_ENTRY(gs_acc_fold_kernel)
#endif
