/* fp16.cu: the fp16 route's kernels (fp16_kernels.h says what each does).
 *
 * Exactness, step by step. A bf16 value x times 2^shift is computed in fp32
 * as x * 2^s1 * 2^s2 (s1 + s2 = shift, each within fp32's normal powers of
 * two): for every x whose result can be nonzero in fp16, both products
 * are exact, so the one rounding is the final fp32 -> fp16 conversion
 * (convert.h, round to nearest even), and it rounds nothing for results of
 * 2^-14 and above (fp16's normal range holds 11 significant bits, bf16 has
 * 8) and, for a bf16 value's 8 bits, for results of 2^-17 and above (the
 * lowest bit then sits at or above fp16's smallest subnormal, 2^-24). A
 * line (row of op(A), column of op(B)) that is neither lossy nor
 * non-finite converts every value exactly, to 0 or to [2^-17, 2^16): its
 * products with the other operand's are exact in fp32 (at most 11 + 11
 * significant bits) and lie in [2^-34, 2^32), so neither they nor k of
 * them summed can leave fp32's normal range. The fp32 sum for element
 * (i, j) is then 2^(sa_i + sb_j) times native's sum, rounding for
 * rounding, wherever native's stays normal, and gs_fp16_out unscales it
 * with one rounding (none unless it leaves fp32's range, where native's
 * own sum would too). Elements whose row or column holds an Inf or NaN,
 * whose row's and column's amaxes could overflow an fp32 sum of k products
 * (native then gives Inf or NaN, the scaled sum would not), or whose lossy
 * line's loss could reach the result's last bit (fp16_dot), are
 * recomputed from the bf16 operands in fp32, one product and one sum per
 * step, as native's fp32 arithmetic does.
 *
 * Every thread owns the outputs it writes and no kernel needs a barrier
 * (emu.h's plain loop in the host build). */
#include "fp8_gemm_epilogue.h"

#include "convert.h"
#include "divide.h"
#include "fp16_kernels.h"

/* ---- where a group is ----------------------------------------------------------- */
/* Group g of span s: its first row, its column and its member. */
static __device__ __forceinline__ void fp16_locate(const gs_fp16_span &s, uint64_t g, int64_t *r0, int64_t *col,
                                                   uint64_t *b) {
  const uint64_t col_all = gs_div_by(g, s.per_col);
  *r0 = (int64_t)(g - col_all * s.per_col.d) * GS_FP16_VEC;
  *b = gs_div_by(col_all, s.per_member);
  *col = (int64_t)(col_all - *b * s.per_member.d);
}

/* Element (0, col) of member b of m, as T. */
template <typename T>
static __device__ __forceinline__ T *fp16_column(const gs_fp16_matrix &m, uint64_t b, int64_t col) {
  T *base = m.array ? ((T *const *)m.ptr)[b] : (T *)m.ptr + (int64_t)b * m.stride;
  return base + col * m.ld;
}

/* The group's (up to) four 16-bit elements; n of them are inside the column. */
static __device__ __forceinline__ int fp16_load4(const uint16_t *p, int vec, int64_t r0, int64_t rows,
                                                 uint16_t out[GS_FP16_VEC]) {
  const int n = rows - r0 < GS_FP16_VEC ? (int)(rows - r0) : GS_FP16_VEC;
  if (vec && n == GS_FP16_VEC) {
    const uint64_t v = gs_ld8(p + r0);
    for (int i = 0; i < GS_FP16_VEC; i++) out[i] = (uint16_t)(v >> (16 * i));
  } else {
    for (int i = 0; i < GS_FP16_VEC; i++) out[i] = i < n ? p[r0 + i] : (uint16_t)0;
  }
  return n;
}

/* ---- lines ----------------------------------------------------------------------- */
/* floor(log2 |x|) of a finite nonzero float's bits (subnormals too). */
static __device__ __forceinline__ int fp16_ilogb_bits(uint32_t bits) {
  const uint32_t e = (bits >> 23) & 0xffu, man = bits & 0x7fffffu;
  if (e) return (int)e - 127;
  return 31 - __builtin_clz(man) - 149;
}

/* floor(log2) of a nonzero finite bf16 magnitude (15 bits). */
static __device__ __forceinline__ int fp16_ilogb_bf16(uint32_t mag) { return fp16_ilogb_bits(mag << 16); }

/* The shift that puts a line's amax (its word's magnitude bits) into
 * [2^15, 2^16); 0 for a line of zeros. */
static __device__ __forceinline__ int fp16_shift_of(uint32_t word) {
  const uint32_t mag = word & GS_FP16_AMAX_BITS;
  return mag ? GS_FP16_TOP_EXPONENT - fp16_ilogb_bf16(mag) : 0;
}

/* Member b's line i as stored: its first element. */
static __device__ __forceinline__ const uint16_t *fp16_line(const gs_fp16_lines &L, uint64_t b, int64_t i) {
  return fp16_column<const uint16_t>(L.src, b, 0) + i * L.line_step;
}

/* ---- amax ----------------------------------------------------------------------- */
/* One line: its largest finite magnitude; whether it holds an Inf or NaN
 * (the scaled GEMM would give NaN where native gives Inf, or the reverse,
 * against values it flushed); whether a nonzero value lies more than
 * GS_FP16_EXACT_SPAN binades below the largest (scaled, it loses bits or
 * becomes 0). Magnitudes compare as their bits. */
static __device__ __forceinline__ void fp16_line_take(uint32_t h, uint32_t *hi, uint32_t *lo, uint32_t *special) {
  const uint32_t mag = h & 0x7fffu;
  if (mag >= 0x7f80u) *special = 1;
  else if (mag) {
    *hi = mag > *hi ? mag : *hi;
    *lo = mag < *lo ? mag : *lo;
  }
}

static __device__ __forceinline__ uint32_t fp16_line_word(const gs_fp16_lines &L, uint64_t b, int64_t i) {
  const uint16_t *p = fp16_line(L, b, i);
  uint32_t hi = 0, lo = 0x7f80u, special = 0;
  int64_t l = 0;
  /* A stored column whose start is 8-byte aligned (the matrix's vec:
   * aligned base, ld and stride multiples of 4): four values a load. */
  if (L.elem_step == 1 && L.src.vec)
    for (; l + GS_FP16_VEC <= L.length; l += GS_FP16_VEC) {
      const uint64_t v = gs_ld8(p + l);
      for (int q = 0; q < GS_FP16_VEC; q++) fp16_line_take((uint32_t)(v >> (16 * q)) & 0xffffu, &hi, &lo, &special);
    }
  for (; l < L.length; l++) fp16_line_take(p[l * L.elem_step], &hi, &lo, &special);
  const int lossy = hi && fp16_ilogb_bf16(lo) < fp16_ilogb_bf16(hi) - GS_FP16_EXACT_SPAN;
  return hi | (special ? GS_FP16_NONFINITE : 0u) | (lossy ? GS_FP16_LOSSY : 0u);
}

extern "C" __global__ void __launch_bounds__(GS_FP16_THREADS) gs_fp16_amax(gs_fp16_amax_args a) {
  const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)(a.line[0].lines * a.line[0].members);
  for (uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; g < (uint64_t)a.total; g += step) {
    /* Fixed indices into the parameter block (a computed one would copy it
     * to local memory). */
    if (g < first) {
      const uint64_t b = g / (uint64_t)a.line[0].lines, i = g - b * (uint64_t)a.line[0].lines;
      a.line[0].info[g] = fp16_line_word(a.line[0], b, (int64_t)i);
    } else {
      const uint64_t h = g - first, b = h / (uint64_t)a.line[1].lines, i = h - b * (uint64_t)a.line[1].lines;
      a.line[1].info[h] = fp16_line_word(a.line[1], b, (int64_t)i);
    }
  }
}

/* ---- scales --------------------------------------------------------------------- */
/* 2^e as a float, e in [-126, 127]. */
static __device__ __forceinline__ float fp16_pow2(int e) { return gs_f32_from_bits((uint32_t)(e + 127) << 23); }

/* 2^e as a double, e in [-1022, 1023]. */
static __device__ __forceinline__ double fp16_pow2_double(int e) {
  const uint64_t bits = (uint64_t)(e + 1023) << 52;
  double d;
  __builtin_memcpy(&d, &bits, sizeof d);
  return d;
}

/* v * 2^e with one rounding: a single multiply when 2^e is a normal fp32
 * (exact unless the result is subnormal, then rounded once), else exactly
 * in double (|e| stays below 300) and rounded once to fp32. */
static __device__ __forceinline__ float fp16_unscale(float v, int e) {
  if (e >= -126 && e <= 127) return v * fp16_pow2(e);
  return (float)((double)v * fp16_pow2_double(e));
}

/* x * 2^shift, computed exactly (see the top), as fp16 bits. */
static __device__ __forceinline__ uint16_t fp16_scaled(uint16_t x, int shift) {
  const int s1 = shift / 2, s2 = shift - s1;
  return gs_f32_to_f16_rn(gs_bf16_to_f32(x) * fp16_pow2(s1) * fp16_pow2(s2));
}

/* The shift of stored element (r, col) of member b: its line's. */
static __device__ __forceinline__ int fp16_shift_at(const gs_fp16_lines &L, uint64_t b, int64_t r, int64_t col) {
  return fp16_shift_of(L.info[(int64_t)b * L.lines + (L.by_row ? r : col)]);
}

static __device__ __forceinline__ void fp16_cast_group(const gs_fp16_operand &op, const gs_fp16_lines &L,
                                                       uint64_t g) {
  int64_t r0, col;
  uint64_t b;
  fp16_locate(op.span, g, &r0, &col, &b);
  uint16_t v[GS_FP16_VEC];
  const int n = fp16_load4(fp16_column<const uint16_t>(op.src, b, col), op.src.vec, r0, op.span.rows, v);
  uint16_t *d = (uint16_t *)op.dst + (int64_t)b * op.span.rows * (int64_t)op.span.per_member.d + col * op.span.rows;
  int shift[GS_FP16_VEC];
  GS_FP8_UNROLL
  for (int i = 0; i < GS_FP16_VEC; i++) shift[i] = i < n ? fp16_shift_at(L, b, r0 + i, col) : 0;
  if (op.dst_vec && n == GS_FP16_VEC) {
    uint64_t w = 0;
    GS_FP8_UNROLL
    for (int i = 0; i < GS_FP16_VEC; i++) w |= (uint64_t)fp16_scaled(v[i], shift[i]) << (16 * i);
    gs_st8(d + r0, w);
  } else {
    GS_FP8_UNROLL
    for (int i = 0; i < GS_FP16_VEC; i++)
      if (i < n) d[r0 + i] = fp16_scaled(v[i], shift[i]);
  }
}

extern "C" __global__ void __launch_bounds__(GS_FP16_THREADS) gs_fp16_cast(gs_fp16_cast_args a) {
  const unsigned t = threadIdx.x;
  if (blockIdx.x == 0 && t == 0) {
    gs_fp16_record r;
    r.one = 1.0f;
    r.zero = 0.0f;
    *a.record = r;
  }
  const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t g = (uint64_t)blockIdx.x * blockDim.x + t; g < (uint64_t)a.groups; g += step) {
    if (g < (uint64_t)a.op[1].span.first) fp16_cast_group(a.op[0], a.line[0], g);
    else fp16_cast_group(a.op[1], a.line[1], g - (uint64_t)a.op[1].span.first);
  }
}

/* ---- the caller's D --------------------------------------------------------------- */
/* cuBLASLt's GELU, 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3))), with
 * fp8_gemm_epilogue.h's tanh, except that tanh is exactly 1 where fp32's
 * is (|u| past about 9.01): there the fp8 one stops at 1 - 2^-24, and GELU
 * of a large negative x would be 3e-8 x instead of 0. */
static __device__ __forceinline__ float fp16_gelu(float x) {
  if (!(x == x)) return x;
  const float u = 0.7978845608f * (x + 0.044715f * (x * x * x));
  const float a = u < 0.0f ? -u : u;
  const float t = a >= 9.5f ? 1.0f : fp8_tanhf(a);
  return 0.5f * x * (1.0f + (u < 0.0f ? -t : t));
}

/* One element of op(A) op(B), recomputed from the bf16 operands (row x,
 * column y, k values each, x_step and y_step apart) in fp32: one product
 * and one sum per step, in order of l, as native's fp32 arithmetic. The
 * device build contracts them into FFMA (clang's default for CUDA, and what
 * cuBLAS's fp32 kernels run: fma.rn.f32 in build/kernels/fp16.ptx); the
 * host build keeps them apart (x86-64 without -mfma has no fused
 * multiply-add), as the stand-in's reference GEMM does. Not inlined:
 * inlined, the rare path's loop sits four times in the output kernel's
 * unrolled group and costs every thread registers (ptxas for sm_75: 100 a
 * thread inlined, 80 not; docs/perf-static.md has every target's). */
static __device__ __attribute__((noinline)) float fp16_recompute(const uint16_t *x, int64_t x_step,
                                                                 const uint16_t *y, int64_t y_step, int64_t k) {
  float acc = 0.0f;
  for (int64_t l = 0; l < k; l++) acc = acc + gs_bf16_to_f32(x[l * x_step]) * gs_bf16_to_f32(y[l * y_step]);
  return acc;
}

/* A column of op(B) as the output kernel needs it once per group: its
 * word's flag, shift and amax exponent (-1000 for a column of zeros). */
typedef struct fp16_col {
  const uint16_t *y;
  uint32_t flags;
  int shift, e;
} fp16_col;

static __device__ __forceinline__ int fp16_line_e(uint32_t w) {
  return (w & GS_FP16_AMAX_BITS) ? fp16_ilogb_bf16(w & GS_FP16_AMAX_BITS) : -1000;
}

static __device__ __forceinline__ fp16_col fp16_col_of(const gs_fp16_out_args &a, uint64_t b, int64_t j) {
  const gs_fp16_lines &LB = a.line[1];
  const uint64_t mb = LB.members > 1 ? b : 0;
  const uint32_t w = LB.info[(int64_t)mb * LB.lines + j];
  fp16_col c;
  c.y = fp16_line(LB, mb, j);
  c.flags = w & (GS_FP16_NONFINITE | GS_FP16_LOSSY);
  c.shift = fp16_shift_of(w);
  c.e = fp16_line_e(w);
  return c;
}

/* op(A) op(B) at (i, col) of member b from the scaled product t: unscaled
 * by the row's and column's shifts, or recomputed where the scaled GEMM
 * could not get it right (see the top).
 * - Amaxes below 2^(ea+1) and 2^(eb+1): k products sum below
 *   2^(ea + eb + 2 + k_log2), which stays below 2^127 (finite: native
 *   cannot overflow) unless the test says otherwise.
 * - A lossy line's values were rounded to fp16's subnormal grid (2^-24),
 *   each by at most 2^-25, against a partner below 2^16: each scaled
 *   product is off by less than 2^-8 (both lines lossy), k of them by less
 *   than 2^(k_log2 - 8). Where |t| >= 2^(k_log2 + 17) that is below
 *   2^-25 |t|, under half an fp32 ulp of the result: unscaled; below,
 *   recomputed. */
static __device__ __forceinline__ float fp16_dot(const gs_fp16_out_args &a, float t, uint64_t b, int64_t i,
                                                 const fp16_col &c) {
  const gs_fp16_lines &LA = a.line[0];
  const uint64_t ma = LA.members > 1 ? b : 0;
  const uint32_t w = LA.info[(int64_t)ma * LA.lines + i];
  const uint32_t flags = c.flags | (w & (GS_FP16_NONFINITE | GS_FP16_LOSSY));
  if ((flags & GS_FP16_NONFINITE) || fp16_line_e(w) + c.e + 2 + a.k_log2 > 127 ||
      ((flags & GS_FP16_LOSSY) && !(__builtin_fabsf(t) >= fp16_pow2(a.k_log2 + 17))))
    return fp16_recompute(fp16_line(LA, ma, i), LA.elem_step, c.y, a.line[1].elem_step, LA.length);
  return fp16_unscale(t, -(fp16_shift_of(w) + c.shift));
}

static __device__ __forceinline__ float fp16_out_value(const gs_fp16_out_args &a, float dot, float alpha,
                                                       float beta, const void *c_col, int64_t r, uint64_t b) {
  float v = alpha * dot;
  if (beta != 0.0f) v = v + beta * fp8_load_elem(c_col, r, a.c_elem);
  if (a.epilogue & GS_FP16_EPI_BIAS)
    v = v + fp8_load_elem(a.bias, (int64_t)b * a.bias_stride + r, a.bias_elem);
  /* cuBLASLt's relu is max(v, 0), which takes 0 over a NaN (CUDA's fmaxf
   * returns the argument that is not NaN). */
  if ((a.epilogue & GS_FP16_EPI_RELU) && !(v > 0.0f)) v = 0.0f;
  if (a.epilogue & GS_FP16_EPI_GELU) v = fp16_gelu(v);
  return v;
}

static __device__ __forceinline__ const void *fp16_elem_column(const gs_fp16_matrix &m, int elem, uint64_t b,
                                                               int64_t col) {
  return elem == GS_ELEM_F32 ? (const void *)fp16_column<const float>(m, b, col)
                             : (const void *)fp16_column<const uint16_t>(m, b, col);
}

extern "C" __global__ void __launch_bounds__(GS_FP16_THREADS) gs_fp16_out(gs_fp16_out_args a) {
  const float alpha = a.alpha_ptr ? gs_fp8_load_const(a.alpha_ptr) : a.alpha;
  /* beta == 0 never reads C, as cuBLAS's documentation has it. */
  const float beta = !a.read_c ? 0.0f : a.beta_ptr ? gs_fp8_load_const(a.beta_ptr) : a.beta;
  const int64_t m = a.span.rows;
  const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; g < (uint64_t)a.span.groups; g += step) {
    int64_t r0, col;
    uint64_t b;
    fp16_locate(a.span, g, &r0, &col, &b);
    const float *tc = a.t + ((int64_t)b * (int64_t)a.span.per_member.d + col) * m;
    const int n = m - r0 < GS_FP16_VEC ? (int)(m - r0) : GS_FP16_VEC;
    float tv[GS_FP16_VEC];
    if (a.t_vec && n == GS_FP16_VEC) {
      const gs_u32x4 w = gs_ld16(tc + r0);
      for (int i = 0; i < GS_FP16_VEC; i++) tv[i] = gs_f32_from_bits(w.v[i]);
    } else {
      for (int i = 0; i < GS_FP16_VEC; i++) tv[i] = i < n ? tc[r0 + i] : 0.0f;
    }
    const void *cc = beta != 0.0f ? fp16_elem_column(a.c, a.c_elem, b, col) : (const void *)0;
    const fp16_col bc = fp16_col_of(a, b, col);
    void *dc = (void *)fp16_elem_column(a.d, a.d_elem, b, col);
    GS_FP8_UNROLL
    for (int i = 0; i < GS_FP16_VEC; i++)
      if (i < n)
        fp8_store_elem(dc, r0 + i, a.d_elem, fp16_out_value(a, fp16_dot(a, tv[i], b, r0 + i, bc), alpha, beta, cc,
                                                            r0 + i, b));
  }
}

#if defined(GS_EMU)
GS_EMU_ENTRY(gs_fp16_amax)
GS_EMU_ENTRY(gs_fp16_cast)
GS_EMU_ENTRY(gs_fp16_out)
#endif
