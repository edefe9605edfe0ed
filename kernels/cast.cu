/* cast.cu: the ffma route's element casts. On sm_60-sm_75 (no bf16 tensor
 * cores) a bf16/fp16 GEMM with fp32 compute runs as an fp32 GEMM: these
 * kernels widen A, B (and C) to fp32 into transient buffers, narrow the fp32
 * result back (round to nearest even, see convert.h), and widen a bias
 * vector. Column-major, any leading dimension, strided or pointer-array
 * batches.
 *
 * The work is pure bandwidth: per element one load, a few integer ops, one
 * store. Each thread moves GS_CAST_VEC = 4 elements at once: the fp32 side as
 * one 16-byte access (the widest a thread has), the 16-bit side as 8 bytes, so
 * a warp touches 512 and 256 contiguous bytes, whole 32-byte sectors. Eight
 * elements would need 16-byte alignment of the 16-bit side and ld a multiple
 * of 8, which fewer matrices meet. A column's first elements are peeled off
 * to a 4-element boundary when source and destination share their offset
 * mod 4 (ld_src == ld_dst, or both 16-byte aligned with ld a multiple of 4);
 * otherwise that column goes element by element, still coalesced.
 *
 * Blocks are 32 x 8 threads: x is one warp along a column, so the
 * vector/scalar choice, made per column, never splits a warp; 8 columns make
 * 256 threads. With 64-bit indexing ptxas gives these kernels 52-64
 * registers, so 4 blocks (1024 threads) share an SM: each thread keeps a
 * 16-byte load in flight, 16 KiB per SM, about twice what Pascal's DRAM
 * needs in flight per SM (bandwidth x latency / SMs). Forcing 8 blocks
 * (launch_bounds(256, 8)) made ptxas spill ~150 bytes a thread instead.
 * Grid-stride loops on all three axes let the launcher cap the grid (65535
 * in y and z is the hardware limit) and still cover any size. */
#include "device.h"

#include "cast.h"
#include "convert.h"

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

/* rows elements of one column, shared by the lanes lane, lane+lanes, ... */
template <int S, int D>
static __device__ __forceinline__ void cast_column(const typename elem<S>::bits *s,
                                                   typename elem<D>::bits *d, int64_t rows,
                                                   int64_t lane, int64_t lanes) {
  typedef typename elem<S>::bits sbits;
  typedef typename elem<D>::bits dbits;
  const int64_t V = GS_CAST_VEC;
  uintptr_t sa = (uintptr_t)s, da = (uintptr_t)d;
  int64_t s_off = (int64_t)(sa / sizeof(sbits) % V), d_off = (int64_t)(da / sizeof(dbits) % V);
  if (sa % sizeof(sbits) == 0 && da % sizeof(dbits) == 0 && s_off == d_off) {
    int64_t head = (V - s_off) % V;
    if (head > rows) head = rows;
    int64_t groups = (rows - head) / V;
    int64_t tail = head + groups * V;
    for (int64_t g = lane; g < groups; g += lanes) {
      sbits in[4];
      dbits out[4];
      load4(s + head + g * V, in);
      for (int i = 0; i < 4; i++) out[i] = convert<S, D>(in[i]);
      store4(d + head + g * V, out);
    }
    for (int64_t r = lane; r < head; r += lanes) d[r] = convert<S, D>(s[r]);
    for (int64_t r = tail + lane; r < rows; r += lanes) d[r] = convert<S, D>(s[r]);
  } else {
    for (int64_t r = lane; r < rows; r += lanes) d[r] = convert<S, D>(s[r]);
  }
}

/* x: lanes along a column; y: columns; z: batch members. */
template <int S, int D, int LAYOUT>
static __device__ __forceinline__ void cast_matrix(const gs_cast_args &a) {
  typedef typename elem<S>::bits sbits;
  typedef typename elem<D>::bits dbits;
  const int64_t lane = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t lanes = (int64_t)gridDim.x * blockDim.x;
  const int64_t col0 = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
  const int64_t col_step = (int64_t)gridDim.y * blockDim.y;
  if (col0 >= a.cols) return;
  for (int64_t b = blockIdx.z; b < a.batch; b += gridDim.z) {
    const sbits *s;
    dbits *d;
    if constexpr (LAYOUT == GS_BATCH_SRC_ARRAY) s = ((const sbits *const *)a.src)[b];
    else s = (const sbits *)a.src + b * a.stride_src;
    if constexpr (LAYOUT == GS_BATCH_DST_ARRAY) d = ((dbits *const *)a.dst)[b];
    else d = (dbits *)a.dst + b * a.stride_dst;
    for (int64_t c = col0; c < a.cols; c += col_step)
      cast_column<S, D>(s + c * a.ld_src, d + c * a.ld_dst, a.rows, lane, lanes);
  }
}

#define GS_CAST_DEFINE(name, S, D, LAYOUT)                                     \
  extern "C" __global__ void __launch_bounds__(GS_CAST_BLOCK_X * GS_CAST_BLOCK_Y) \
      name(gs_cast_args a) {                                                   \
    cast_matrix<S, D, LAYOUT>(a);                                              \
  }
GS_CAST_KERNELS(GS_CAST_DEFINE)

#if defined(GS_EMU)
#define GS_CAST_ENTRY(name, S, D, LAYOUT) GS_EMU_ENTRY(name)
GS_CAST_KERNELS(GS_CAST_ENTRY)
#endif
