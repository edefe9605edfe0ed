/* fp16.cu: the fp16 route's kernels (fp16_kernels.h says what each does).
 *
 * Exactness, step by step. A bf16 value x times 2^shift is computed in fp32
 * as x * 2^s1 * 2^s2 (s1 + s2 = shift, each within fp32's normal powers of
 * two): for every x whose result can be nonzero in fp16, both products
 * are exact, so the one rounding is the final fp32 -> fp16 conversion
 * (convert.h, round to nearest even), and it rounds nothing for results of
 * 2^-14 and above (fp16's normal range holds 11 significant bits, bf16 has
 * 8). Inf and NaN stay Inf and NaN. The fp32 sum of products of scaled
 * operands is 2^(shift_a + shift_b) times the sum of the unscaled ones,
 * rounding for rounding, as long as neither sum leaves fp32's normal
 * range; the native sum is the one that can (its products are the small
 * ones), so the route is as exact as native bf16 wherever native is exact.
 * gs_fp16_out unscales with one multiply by a power of two (exact in the
 * normal range, one rounding into subnormals) when the power is a normal
 * fp32, else in double (exact) and one rounding to fp32; then alpha, beta
 * * C, bias and activation in fp32, in cuBLASLt's order, and one rounding
 * to D's type.
 *
 * The amax and cast kernels need a block-wide maximum: __shared__ memory
 * and two barriers, from fp8_block.h (fibers in the host build). The
 * output kernel's threads are independent (emu.h's plain loop). */
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

/* ---- block maximum -------------------------------------------------------------- */
/* The maximum of every thread's (x, y) over the block (blockDim.x ==
 * GS_FP16_THREADS), in every thread: two barriers; every thread must call. */
static __device__ __forceinline__ void fp16_block_max2(uint32_t *x, uint32_t *y) {
  __shared__ uint32_t all[2][GS_FP16_THREADS];
  __shared__ uint32_t part[2][16];
  const unsigned t = threadIdx.x;
  all[0][t] = *x;
  all[1][t] = *y;
  __syncthreads();
  if (t < 32) {
    const unsigned w = t / 16, i0 = (t % 16) * 16;
    uint32_t m = 0;
    for (unsigned i = 0; i < 16; i++) m = all[w][i0 + i] > m ? all[w][i0 + i] : m;
    part[w][t % 16] = m;
  }
  __syncthreads();
  uint32_t mx = 0, my = 0;
  for (unsigned i = 0; i < 16; i++) {
    mx = part[0][i] > mx ? part[0][i] : mx;
    my = part[1][i] > my ? part[1][i] : my;
  }
  *x = mx;
  *y = my;
}

/* ---- amax ----------------------------------------------------------------------- */
/* |x| of a bf16 as its 15 magnitude bits, 0 for Inf and NaN (they keep
 * their own meaning in fp16; the scale is for the finite values). For
 * non-negative floats the order of the bits is the order of the values. */
static __device__ __forceinline__ uint32_t fp16_finite_mag(uint16_t h) {
  const uint32_t mag = h & 0x7fffu;
  return mag < 0x7f80u ? mag : 0u;
}

static __device__ __forceinline__ uint32_t fp16_operand_amax(const gs_fp16_operand &op, int32_t blocks) {
  uint32_t m = 0;
  const uint64_t step = (uint64_t)blocks * blockDim.x;
  for (uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; g < (uint64_t)op.span.groups; g += step) {
    int64_t r0, col;
    uint64_t b;
    fp16_locate(op.span, g, &r0, &col, &b);
    uint16_t v[GS_FP16_VEC];
    fp16_load4(fp16_column<const uint16_t>(op.src, b, col), op.src.vec, r0, op.span.rows, v);
    for (int i = 0; i < GS_FP16_VEC; i++) m = fp16_finite_mag(v[i]) > m ? fp16_finite_mag(v[i]) : m;
  }
  return m;
}

extern "C" __global__ void __launch_bounds__(GS_FP16_THREADS) gs_fp16_amax(gs_fp16_amax_args a) {
  /* Fixed indices into the parameter block (a computed one would copy it
   * to local memory). A block with no partial to write leaves whole, before
   * any barrier. */
  const int second = blockIdx.y != 0;
  if ((int32_t)blockIdx.x >= (second ? a.blocks[1] : a.blocks[0])) return;
  uint32_t m = second ? fp16_operand_amax(a.op[1], a.blocks[1]) : fp16_operand_amax(a.op[0], a.blocks[0]);
  uint32_t unused = 0;
  fp16_block_max2(&m, &unused);
  if (threadIdx.x == 0) a.partials[(second ? GS_FP16_PARTIALS : 0) + blockIdx.x] = m;
}

/* ---- scales --------------------------------------------------------------------- */
/* floor(log2 |x|) of a finite nonzero float's bits (subnormals too). */
static __device__ __forceinline__ int fp16_ilogb_bits(uint32_t bits) {
  const uint32_t e = (bits >> 23) & 0xffu, man = bits & 0x7fffffu;
  if (e) return (int)e - 127;
  return 31 - __builtin_clz(man) - 149;
}

/* The shift that puts a bf16 magnitude (15 bits) into [2^15, 2^16); 0 for 0. */
static __device__ __forceinline__ int fp16_shift_for(uint32_t mag) {
  if (!mag) return 0;
  return GS_FP16_TOP_EXPONENT - fp16_ilogb_bits(mag << 16);
}

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

/* For a GEMM whose alpha is alpha_eff = alpha * 2^-(sa + sb): keep it a
 * normal fp32 (so it is exact) by scaling less where the operands' shifts
 * would make it too small; the larger shift gives way first. Scaling less
 * never makes a value overflow fp16. An alpha_eff too large for fp32 has no
 * such remedy (scaling more would overflow fp16): it happens only where
 * |alpha| amax(A) amax(B) is past about 2^158, where the largest products
 * overflow fp32 natively too; docs/fp16.md says what then differs. */
static __device__ __forceinline__ void fp16_keep_alpha_normal(float alpha, int *sa, int *sb) {
  const uint32_t bits = gs_f32_bits(alpha) & 0x7fffffffu;
  if (bits == 0 || bits >= 0x7f800000u) return;
  int over = *sa + *sb - (fp16_ilogb_bits(bits) + 126);
  if (over <= 0) return;
  const int diff = *sa >= *sb ? *sa - *sb : *sb - *sa;
  const int d = over < diff ? over : diff;
  if (*sa >= *sb) *sa -= d;
  else *sb -= d;
  over -= d;
  *sa -= (over + 1) / 2;
  *sb -= over / 2;
}

/* x * 2^shift, computed exactly (see the top), as fp16 bits. */
static __device__ __forceinline__ uint16_t fp16_scaled(uint16_t x, int shift) {
  const int s1 = shift / 2, s2 = shift - s1;
  return gs_f32_to_f16_rn(gs_bf16_to_f32(x) * fp16_pow2(s1) * fp16_pow2(s2));
}

static __device__ __forceinline__ void fp16_cast_group(const gs_fp16_operand &op, uint64_t g, int shift) {
  int64_t r0, col;
  uint64_t b;
  fp16_locate(op.span, g, &r0, &col, &b);
  uint16_t v[GS_FP16_VEC];
  const int n = fp16_load4(fp16_column<const uint16_t>(op.src, b, col), op.src.vec, r0, op.span.rows, v);
  uint16_t *d = (uint16_t *)op.dst + (int64_t)b * op.span.rows * (int64_t)op.span.per_member.d + col * op.span.rows;
  if (op.dst_vec && n == GS_FP16_VEC) {
    uint64_t w = 0;
    GS_FP8_UNROLL
    for (int i = 0; i < GS_FP16_VEC; i++) w |= (uint64_t)fp16_scaled(v[i], shift) << (16 * i);
    gs_st8(d + r0, w);
  } else {
    GS_FP8_UNROLL
    for (int i = 0; i < GS_FP16_VEC; i++)
      if (i < n) d[r0 + i] = fp16_scaled(v[i], shift);
  }
}

extern "C" __global__ void __launch_bounds__(GS_FP16_THREADS) gs_fp16_cast(gs_fp16_cast_args a) {
  const unsigned t = threadIdx.x;
  uint32_t ma = (int32_t)t < a.blocks[0] ? a.partials[t] : 0u;
  uint32_t mb = (int32_t)t < a.blocks[1] ? a.partials[GS_FP16_PARTIALS + t] : 0u;
  fp16_block_max2(&ma, &mb);
  int sa = fp16_shift_for(ma), sb = fp16_shift_for(mb);
  const float alpha = a.alpha_ptr ? gs_fp8_load_const(a.alpha_ptr) : a.alpha;
  if (a.direct) fp16_keep_alpha_normal(alpha, &sa, &sb);
  if (blockIdx.x == 0 && t == 0) {
    gs_fp16_scales s;
    s.shift[0] = sa;
    s.shift[1] = sb;
    s.alpha_eff = fp16_unscale(alpha, -(sa + sb));
    s.beta = a.beta_ptr ? gs_fp8_load_const(a.beta_ptr) : a.beta;
    s.one = 1.0f;
    s.zero = 0.0f;
    s.amax[0] = gs_f32_from_bits(ma << 16);
    s.amax[1] = gs_f32_from_bits(mb << 16);
    *a.scales = s;
  }
  const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t g = (uint64_t)blockIdx.x * blockDim.x + t; g < (uint64_t)a.groups; g += step) {
    if (g < (uint64_t)a.op[1].span.first) fp16_cast_group(a.op[0], g, sa);
    else fp16_cast_group(a.op[1], g - (uint64_t)a.op[1].span.first, sb);
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

static __device__ __forceinline__ float fp16_out_value(const gs_fp16_out_args &a, float t, int e, float alpha,
                                                       float beta, const void *c_col, int64_t r, uint64_t b) {
  float v = alpha * fp16_unscale(t, e);
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
  const int e = -(a.scales->shift[0] + a.scales->shift[1]);
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
    void *dc = (void *)fp16_elem_column(a.d, a.d_elem, b, col);
    GS_FP8_UNROLL
    for (int i = 0; i < GS_FP16_VEC; i++)
      if (i < n) fp8_store_elem(dc, r0 + i, a.d_elem, fp16_out_value(a, tv[i], e, alpha, beta, cc, r0 + i, b));
  }
}

#if defined(GS_EMU)
GS_FP8_EMU_ENTRY(gs_fp16_amax)
GS_FP8_EMU_ENTRY(gs_fp16_cast)
GS_EMU_ENTRY(gs_fp16_out)
#endif
