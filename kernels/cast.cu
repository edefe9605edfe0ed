/* cast.cu: the ffma route's element casts. On sm_60-sm_75 (no bf16 tensor
 * cores) a bf16/fp16 GEMM with fp32 compute runs as an fp32 GEMM: these
 * kernels widen A, B (C for a cuBLASLt activation epilogue) and a bias to
 * fp32 into transient buffers (all of one call's operands in one launch),
 * and narrow the fp32 result back, adding beta * C on the way (round to
 * nearest even, see convert.h): the result buffer is only ever written,
 * so overlapping replays of a captured call cannot disturb each other
 * (docs/graphs.md). Column-major, any leading dimension, strided or
 * pointer-array batches.
 *
 * The work is pure bandwidth: per element one load, a few integer ops, one
 * store. Each thread of a one-dimensional grid takes one chunk of
 * GS_CAST_CHUNK = 8 consecutive elements of a column, so no shape leaves
 * warps idle, moved as two 4-element vector accesses with both loads
 * issued before either store (16 bytes on the fp32 side, 8 on the 16-bit
 * side: whole 32-byte sectors per warp). 6 blocks of 256 threads per SM
 * keep 16-24 KB of loads in flight, above the ~8 KB that a GTX 1080's
 * 320 GB/s at an assumed ~500 ns over 20 SMs asks for.
 *
 * Chunks, alignment and register figures: docs/ffma.md, "cast.cu: chunks,
 * vectors and registers". */
#include "device.h"

#include "cast.h"
#include "convert.h"
#include "divide.h"

/* A float no thread of the launch writes (the device beta). */
#if defined(GS_EMU)
static inline float gs_ldg_f32(const float *p) { return *p; }
#else
static __device__ __forceinline__ float gs_ldg_f32(const float *p) { return __nvvm_ldg_f(p); }
#endif

template <int E> struct elem;
template <> struct elem<GS_ELEM_F32> { typedef uint32_t bits; };
template <> struct elem<GS_ELEM_BF16> { typedef uint16_t bits; };
template <> struct elem<GS_ELEM_F16> { typedef uint16_t bits; };

/* One element, as bits. */
template <int S, int D>
static __device__ __forceinline__ typename elem<D>::bits convert(typename elem<S>::bits x) {
  if constexpr (S == GS_ELEM_BF16) return gs_f32_bits(gs_bf16_to_f32(x));
  else if constexpr (S == GS_ELEM_F16) return gs_f32_bits(gs_f16_to_f32(x));
  else if constexpr (D == GS_ELEM_BF16) return gs_f32_to_bf16_rn(gs_f32_from_bits(x));
  else if constexpr (D == GS_ELEM_F16) return gs_f32_to_f16_rn(gs_f32_from_bits(x));
  else return x;
}

/* Four elements from/to an address aligned to four of them. */
template <typename T> static __device__ __forceinline__ void load4(const T *p, T out[4]) {
  if constexpr (sizeof(T) == 2) {
    uint64_t v = gs_ld8(p);
    for (int i = 0; i < 4; i++) out[i] = (T)(v >> (16 * i));
  } else {
    gs_u32x4 v = gs_ld16(p);
    for (int i = 0; i < 4; i++) out[i] = v.v[i];
  }
}

template <typename T> static __device__ __forceinline__ void store4(T *p, const T in[4]) {
  if constexpr (sizeof(T) == 2) {
    uint64_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint64_t)in[i] << (16 * i);
    gs_st8(p, v);
  } else {
    gs_u32x4 v;
    for (int i = 0; i < 4; i++) v.v[i] = in[i];
    gs_st16(p, v);
  }
}

/* One output element: the source converted, or, when narrowing with C
 * (use_c), narrow(x + beta * c) with the sum rounded once (fma). Values,
 * not pointers, so the chunk's arrays stay in registers. */
template <int S, int D>
static __device__ __forceinline__ typename elem<D>::bits out_elem(typename elem<S>::bits x, typename elem<D>::bits c,
                                                                   float beta, bool use_c) {
  if constexpr (S == GS_ELEM_F32 && D != GS_ELEM_F32) {
    if (use_c) {
      const float cv = gs_f32_from_bits(convert<D, GS_ELEM_F32>(c));
      return convert<S, D>(gs_f32_bits(__builtin_fmaf(beta, cv, gs_f32_from_bits(x))));
    }
  }
  return convert<S, D>(x);
}

/* Chunk c (counted from the operand's first) of operand p; C's column
 * (narrowing with beta != 0) at the same position, from oc. */
template <int S, int D>
static __device__ __forceinline__ void cast_chunk(const gs_cast_operand &p, uint64_t c, const gs_cast_out_c &oc,
                                                  float beta) {
  typedef typename elem<S>::bits sbits;
  typedef typename elem<D>::bits dbits;
  const uint64_t col_all = gs_div_by(c, p.per_col);
  const int64_t j = (int64_t)(c - col_all * p.per_col.d);
  const uint64_t b = gs_div_by(col_all, p.per_member);
  const int64_t col = (int64_t)(col_all - b * p.per_member.d);
  const sbits *s = p.src_array ? ((const sbits *const *)p.src)[b]
                               : (const sbits *)p.src + (int64_t)b * p.stride_src;
  dbits *d = p.dst_array ? ((dbits *const *)p.dst)[b] : (dbits *)p.dst + (int64_t)b * p.stride_dst;
  s += col * p.ld_src;
  d += col * p.ld_dst;
  const dbits *cc = 0;
  if constexpr (S == GS_ELEM_F32 && D != GS_ELEM_F32) {
    if (beta != 0.0f) {
      cc = oc.c_array ? ((const dbits *const *)oc.c)[b] : (const dbits *)oc.c + (int64_t)b * oc.stride_c;
      cc += col * oc.ld_c;
    }
  }
  const int64_t rows = p.rows;
  /* Chunks start where the source's address is a multiple of 4 elements;
   * a column is vector-capable iff the destination's (and C's) is too. */
  const uintptr_t sa = (uintptr_t)s, da = (uintptr_t)d, ca = (uintptr_t)cc;
  const int64_t s_off = (int64_t)(sa / sizeof(sbits) % GS_CAST_VEC);
  const int vec = sa % sizeof(sbits) == 0 && da % sizeof(dbits) == 0 &&
                  s_off == (int64_t)(da / sizeof(dbits) % GS_CAST_VEC) &&
                  (!cc || (ca % sizeof(dbits) == 0 && s_off == (int64_t)(ca / sizeof(dbits) % GS_CAST_VEC)));
  const int64_t r0 = j * GS_CAST_CHUNK - (vec ? s_off : 0);
  if (vec && r0 >= 0 && r0 + GS_CAST_CHUNK <= rows) {
    sbits in[GS_CAST_CHUNK];
    dbits out[GS_CAST_CHUNK], cin[GS_CAST_CHUNK] = {};
    load4(s + r0, in);
    load4(s + r0 + GS_CAST_VEC, in + GS_CAST_VEC);
    if (cc) {
      load4(cc + r0, cin);
      load4(cc + r0 + GS_CAST_VEC, cin + GS_CAST_VEC);
    }
    for (int i = 0; i < GS_CAST_CHUNK; i++) out[i] = out_elem<S, D>(in[i], cin[i], beta, cc != 0);
    store4(d + r0, out);
    store4(d + r0 + GS_CAST_VEC, out + GS_CAST_VEC);
    return;
  }
  /* A column's ends: whole aligned groups still go as vectors. */
  for (int64_t g = r0; g < r0 + GS_CAST_CHUNK; g += GS_CAST_VEC) {
    if (vec && g >= 0 && g + GS_CAST_VEC <= rows) {
      sbits in[GS_CAST_VEC];
      dbits out[GS_CAST_VEC], cin[GS_CAST_VEC] = {};
      load4(s + g, in);
      if (cc) load4(cc + g, cin);
      for (int i = 0; i < GS_CAST_VEC; i++) out[i] = out_elem<S, D>(in[i], cin[i], beta, cc != 0);
      store4(d + g, out);
    } else {
      for (int64_t r = g < 0 ? 0 : g; r < g + GS_CAST_VEC && r < rows; r++)
        d[r] = out_elem<S, D>(s[r], cc ? cc[r] : (dbits)0, beta, cc != 0);
    }
  }
}

template <int S, int D> static __device__ __forceinline__ void cast_operands(const gs_cast_args &a) {
  const uint64_t u = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= (uint64_t)a.chunks) return;
  float beta = 0.0f;
  if constexpr (S == GS_ELEM_F32 && D != GS_ELEM_F32) {
    /* Read once a thread; no thread of the launch writes it. (Not as
     * p ? *p : v, which clang turns into a load through a select of two
     * pointers, one of them to a local copy of the parameter.) */
    if (a.out_c.c) {
      beta = a.out_c.beta;
      if (a.out_c.beta_ptr) beta = gs_ldg_f32(a.out_c.beta_ptr);
    }
  } else {
    if (u == 0 && a.out_c.zero) *a.out_c.zero = 0.0f;
  }
  /* Fixed indices into the parameter block (a computed index would copy
   * it to local memory). */
  if (u < (uint64_t)a.op[1].first) cast_chunk<S, D>(a.op[0], u, a.out_c, beta);
  else if (u < (uint64_t)a.op[2].first) cast_chunk<S, D>(a.op[1], u - a.op[1].first, a.out_c, beta);
  else if (u < (uint64_t)a.op[3].first) cast_chunk<S, D>(a.op[2], u - a.op[2].first, a.out_c, beta);
  else cast_chunk<S, D>(a.op[3], u - a.op[3].first, a.out_c, beta);
}

#define GS_CAST_DEFINE(name, S, D)                                             \
  extern "C" __global__ void __launch_bounds__(GS_CAST_THREADS) name(gs_cast_args a) { \
    cast_operands<S, D>(a);                                                    \
  }
GS_CAST_KERNELS(GS_CAST_DEFINE)

#if defined(GS_EMU)
#define GS_CAST_ENTRY(name, S, D) GS_EMU_ENTRY(name)
GS_CAST_KERNELS(GS_CAST_ENTRY)
#endif
