/* accuracy_kernels.h: what the accuracy kernels (accuracy.cu) and their
 * launcher (accuracy_launch.c) share. C and C++.
 *
 * A compared call (GEMMSHIM_COMPARE) has two outputs of one GEMM: the
 * route's, in the caller's C/D, and the native one, in scratch memory with
 * the same layout. Two launches measure one against the other:
 *
 *   gs_acc_partial  each block folds its elements (grid-stride) into one
 *                   gs_acc_partial record: sums in double, maxima, counts
 *                   and a histogram of per-element relative errors;
 *   gs_acc_fold     one block folds the partials, in block order (so the
 *                   result does not depend on scheduling), into the call's
 *                   gs_acc_stats.
 *
 * Over the positions where both outputs are finite (n native, r route,
 * d = r - n): sum n^2, sum d^2 (in double), max |n|, max |d|; over all
 * positions: the count where exactly one of n, r is finite; the histogram
 * of e = |d| / max(|n|, 2^-126) over the positions where both are finite:
 *   bin 0                    e == 0 exactly
 *   bin 1                    0 < e < 2^GS_ACC_LOG2_LO
 *   bin 2 + 4*(j - LO) + q   2^(j + q/4) <= e < 2^(j + (q+1)/4),
 *                            LO <= j < GS_ACC_LOG2_HI, q = 0..3
 *   bin GS_ACC_BINS - 1      e >= 2^GS_ACC_LOG2_HI (an infinite e too)
 * so a quantile read from it is known within a factor 2^(1/4) (19%).
 * docs/log-format.md gives what the log makes of them. */
#ifndef GEMMSHIM_ACCURACY_KERNELS_H
#define GEMMSHIM_ACCURACY_KERNELS_H

#include <stdint.h>

#define GS_ACC_THREADS 256
/* Blocks of gs_acc_partial at most (its grid-stride loop covers the rest). */
#define GS_ACC_PARTIALS 256
#define GS_ACC_LOG2_LO (-32)
#define GS_ACC_LOG2_HI 8
#define GS_ACC_BINS (3 + 4 * (GS_ACC_LOG2_HI - GS_ACC_LOG2_LO))
/* The smallest divisor: fp32's smallest normal. */
#define GS_ACC_TINY 1.17549435e-38f

typedef struct gs_acc_partial {
  double sum_n2, sum_d2;
  uint64_t mismatch;         /* positions where exactly one is finite */
  uint32_t max_n, max_d;     /* bits of max |n|, max |d| (non-negative floats order as integers) */
  uint32_t hist[GS_ACC_BINS];
  uint32_t pad;
} gs_acc_partial;

/* One call's result, as gs_acc_fold writes it and the log reads it. */
typedef struct gs_acc_stats {
  double sum_n2, sum_d2;
  uint64_t mismatch, finite; /* finite: positions where both are finite */
  float max_n, max_d;
  uint64_t hist[GS_ACC_BINS];
} gs_acc_stats;

/* The two outputs: element (r, c) of member b at ptr + b*stride + c*ld + r,
 * both of elem kind `elem` (cast.h: GS_ELEM_BF16/F16/F32). */
typedef struct gs_acc_args {
  const void *route, *native;
  int64_t ld, stride;
  int64_t rows, cols, batch;
  int32_t elem, pad;
  gs_acc_partial *partials;
} gs_acc_args;

typedef struct gs_acc_fold_args {
  const gs_acc_partial *partials;
  uint32_t n;
  uint32_t pad;
  gs_acc_stats *out;
} gs_acc_fold_args;

#define GS_ACC_KERNELS(X) \
  X(gs_acc_partial_kernel) \
  X(gs_acc_fold_kernel)

#endif
