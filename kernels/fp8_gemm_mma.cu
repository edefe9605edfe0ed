/* fp8_gemm_mma.cu: the shim's own fp8 GEMM on fp8 tensor cores (sm_89+),
 * the opt-in variant of fp8_gemm.cu (GEMMSHIM_FP8_BACKEND=own-mma) with its
 * contract unchanged:
 *
 *   D = epilogue(alpha * scale_a * scale_b * op(A8) op(B8) + beta * C + bias)
 *
 * A8 (k x m) and B8 (k x n) in fp8.h's TN layout, E4M3 or E5M2 each, are
 * multiplied by mma.sync.aligned.m16n8k32.row.col.f32.<a>.<b>.f32 with fp32
 * accumulation; the epilogue and the store are fp8_gemm_epilogue.h's, the
 * FFMA kernel's own. Any m, n, k: codes past the edges are fetched as 0x00
 * (+0 in both formats), so edge tiles multiply zeros and only the store is
 * predicated.
 *
 * Shape: the FFMA kernel's 64 x 64 output tiles, k steps of 32 and 256
 * threads, so the launcher's grid and checks are the same. Each step a
 * thread fetches 16 codes of one A or B row (as fp8_gemm.cu does) and stores
 * them undecoded (the tensor core takes codes) into shared memory, rows of
 * 32 codes padded to 48 bytes: the fragment loads of a warp (8 rows x 4
 * words) then hit 32 distinct banks. The 8 warps split the tile 4 (m) x 2
 * (n), 16 x 32 each: per step one A fragment and four B fragments, four
 * m16n8k32 instructions, 16 accumulators a thread. 6 KB of shared memory.
 *
 * In the host build (GS_EMU) the instruction is emulated as the warp
 * collective it is (fp8_mma below), through the same fragment layout the
 * device code loads, so a misread layout shows as a wrong GEMM on the CPU. */
#include "fp8_gemm_epilogue.h"

/* fp8.h's GS_FP8_E4M3 / GS_FP8_E5M2 (device code cannot include fp8.h). */
enum { FP8_MMA_E4M3 = 0, FP8_MMA_E5M2 = 1 };

/* Shared-memory row: 32 codes in 8 words, padded to 12 words (3 x 16 bytes). */
#define FP8_MMA_ROW_WORDS 12

/* The m16n8k32 fragments of the 8-bit types (.e4m3/.e5m2 share the layout
 * of .s8/.u8), from the PTX ISA's "Matrix Fragments for mma.m16n8k32"
 * (section 9.7.14.5.x, "mma.m16n8k32" with .atype/.btype .e4m3/.e5m2), with
 * group = lane / 4 and tig = lane % 4 (threadID_in_group); element e of a
 * .b32 register is its byte e (bits 8e..8e+7):
 *   A, 16 x 32 row-major, 4 registers: a[r] byte e holds
 *       row = group + 8 * (r % 2), col = 4 * tig + e + 16 * (r / 2)
 *   B, 32 x 8 column-major, 2 registers: b[r] byte e holds
 *       row = 4 * tig + e + 16 * r, col = group
 *   C/D, 16 x 8 fp32, 4 registers: d[r] holds
 *       row = group + 8 * (r / 2), col = 2 * tig + r % 2
 * So with A's rows (m) and B's columns (n) stored k-contiguous, each
 * register is one aligned word of a shared-memory row: a[r] is word
 * tig + 4 * (r / 2) of row group + 8 * (r % 2), b[r] word tig + 4 * r of
 * row (column of B) group. */
#if !defined(GS_EMU)

#define FP8_MMA_ASM(ta, tb)                                                                          \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." ta "." tb ".f32 "                           \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                    \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

/* d += A B for the warp's fragments; every lane of the warp executes it. */
template <int FA, int FB>
static __device__ __forceinline__ void fp8_mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  if (FA == FP8_MMA_E4M3 && FB == FP8_MMA_E4M3) FP8_MMA_ASM("e4m3", "e4m3");
  else if (FA == FP8_MMA_E4M3) FP8_MMA_ASM("e4m3", "e5m2");
  else if (FB == FP8_MMA_E4M3) FP8_MMA_ASM("e5m2", "e4m3");
  else FP8_MMA_ASM("e5m2", "e5m2");
}

#else /* GS_EMU */

/* The instruction as a warp collective: every lane deposits its fragment
 * registers, a barrier, every lane computes its own D fragment from the
 * warp's deposits, a barrier (before the next deposit overwrites them). The
 * emulation's only barrier is the block's: the kernel executes its mma
 * instructions block-uniformly (every thread the same sequence), as
 * mma.sync.aligned needs a converged warp anyway, and fp8_block.h reports a
 * launch where that does not hold. Products of two decoded fp8 values are
 * exact in fp32; they are added to the accumulator in k order, one rounding
 * each. */
struct fp8_mma_lane {
  uint32_t a[4], b[2];
};
inline thread_local fp8_mma_lane fp8_mma_deposit[1024];

static inline uint8_t fp8_mma_byte(uint32_t w, int e) { return (uint8_t)(w >> (8 * e)); }

template <int FA, int FB> static inline void fp8_mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned lane = tid % 32, warp0 = tid - lane;
  for (int r = 0; r < 4; r++) fp8_mma_deposit[tid].a[r] = a[r];
  for (int r = 0; r < 2; r++) fp8_mma_deposit[tid].b[r] = b[r];
  __syncthreads();
  const fp8_mma_lane *w = &fp8_mma_deposit[warp0];
  const int group = (int)lane / 4, tig = (int)lane % 4;
  for (int r = 0; r < 4; r++) {
    const int row = group + 8 * (r / 2), col = 2 * tig + r % 2;
    float acc = d[r];
    for (int kk = 0; kk < 32; kk++) {
      /* A(row, kk): lane 4 * (row % 8) + (kk % 16) / 4, register
       * (row / 8) + 2 * (kk / 16), byte kk % 4. */
      const fp8_mma_lane *la = &w[4 * (row % 8) + (kk % 16) / 4];
      const uint8_t ca = fp8_mma_byte(la->a[row / 8 + 2 * (kk / 16)], kk % 4);
      /* B(kk, col): lane 4 * col + (kk % 16) / 4, register kk / 16, byte kk % 4. */
      const fp8_mma_lane *lb = &w[4 * col + (kk % 16) / 4];
      const uint8_t cb = fp8_mma_byte(lb->b[kk / 16], kk % 4);
      acc = __builtin_fmaf(gs_fp8_to_f32(ca, FA), gs_fp8_to_f32(cb, FB), acc);
    }
    d[r] = acc;
  }
  __syncthreads();
}

#endif /* GS_EMU */

/* Codes of one fetched row chunk (16 bytes) into shared row `row`. */
static __device__ __forceinline__ void fp8_mma_stage(uint32_t (*s)[FP8_MMA_ROW_WORDS], gs_u32x4 w, int row,
                                                     int chunk) {
  *(gs_u32x4 *)&s[row][chunk * 4] = w;
}

template <int FA, int FB>
static __device__ __forceinline__ void fp8_gemm_mma_body(const gs_fp8_gemm_args &a,
                                                         uint32_t (*s_a)[FP8_MMA_ROW_WORDS],
                                                         uint32_t (*s_b)[FP8_MMA_ROW_WORDS]) {
  const unsigned tid = threadIdx.x;
  const int lane = (int)(tid % 32), warp = (int)(tid / 32);
  const int group = lane / 4, tig = lane % 4;
  const int wm = (warp % 4) * 16, wn = (warp / 4) * 32; /* the warp's 16 x 32 within the tile */
  /* Staging as in fp8_gemm.cu: threads 0-127 fetch A rows, 128-255 B rows,
   * 64 rows x 2 chunks of 16 codes. */
  const int stage_b = tid >= 128;
  const int stage_row = (int)(tid % 64), stage_chunk = (int)((tid % 128) / 64);

  const float alpha = a.alpha_ptr ? gs_fp8_load_const(a.alpha_ptr) : a.alpha;
  const float beta = a.beta_ptr ? gs_fp8_load_const(a.beta_ptr) : a.beta;
  const float scale =
      a.k > 0 ? alpha * (gs_fp8_load_const(a.scale_a) * gs_fp8_load_const(a.scale_b)) : alpha;

  for (int64_t b = blockIdx.z; b < a.batch; b += gridDim.z)
    for (int64_t tn = blockIdx.y; tn < a.tiles_n; tn += gridDim.y)
      for (int64_t tm = blockIdx.x; tm < a.tiles_m; tm += gridDim.x) {
        const int64_t i0 = tm * GS_FP8_G_BM, j0 = tn * GS_FP8_G_BN;
        float acc[4][4];
GS_FP8_UNROLL
        for (int s = 0; s < 4; s++)
GS_FP8_UNROLL
          for (int r = 0; r < 4; r++) acc[s][r] = 0.0f;

        const int64_t g_row = (stage_b ? j0 : i0) + stage_row;
        const int64_t g_rows = stage_b ? a.n : a.m;
        const uint8_t *row_base =
            stage_b ? a.b8 + (b * a.n + g_row) * a.k : a.a8 + (b * a.m + g_row) * a.k;
        const int in_range = g_row < g_rows;
        for (int64_t p0 = 0; p0 < a.k; p0 += GS_FP8_G_BK) {
          fp8_mma_stage(stage_b ? s_b : s_a, fp8_fetch(row_base, in_range, p0 + stage_chunk * 16, a.k, a.vec_k),
                        stage_row, stage_chunk);
          __syncthreads();
          uint32_t fa[4];
GS_FP8_UNROLL
          for (int r = 0; r < 4; r++) fa[r] = s_a[wm + group + 8 * (r % 2)][tig + 4 * (r / 2)];
GS_FP8_UNROLL
          for (int s = 0; s < 4; s++) {
            const int col = wn + s * 8 + group;
            const uint32_t fb[2] = {s_b[col][tig], s_b[col][tig + 4]};
            fp8_mma<FA, FB>(acc[s], fa, fb);
          }
          __syncthreads();
        }

GS_FP8_UNROLL
        for (int s = 0; s < 4; s++)
GS_FP8_UNROLL
          for (int r = 0; r < 4; r++) {
            const int64_t i = i0 + wm + group + 8 * (r / 2), j = j0 + wn + s * 8 + 2 * tig + r % 2;
            if (i < a.m && j < a.n) fp8_epilogue_store(a, b, i, j, acc[s][r], scale, beta);
          }
      }
}

extern "C" __global__ void __launch_bounds__(GS_FP8_G_THREADS) gs_fp8_gemm_mma(gs_fp8_gemm_args a) {
  __shared__ __attribute__((aligned(16))) uint32_t s_a[GS_FP8_G_BM][FP8_MMA_ROW_WORDS];
  __shared__ __attribute__((aligned(16))) uint32_t s_b[GS_FP8_G_BN][FP8_MMA_ROW_WORDS];
  /* One instantiation per format pair: the instruction names both. */
  if (a.fmt_a == FP8_MMA_E4M3 && a.fmt_b == FP8_MMA_E4M3) fp8_gemm_mma_body<FP8_MMA_E4M3, FP8_MMA_E4M3>(a, s_a, s_b);
  else if (a.fmt_a == FP8_MMA_E4M3) fp8_gemm_mma_body<FP8_MMA_E4M3, FP8_MMA_E5M2>(a, s_a, s_b);
  else if (a.fmt_b == FP8_MMA_E4M3) fp8_gemm_mma_body<FP8_MMA_E5M2, FP8_MMA_E4M3>(a, s_a, s_b);
  else fp8_gemm_mma_body<FP8_MMA_E5M2, FP8_MMA_E5M2>(a, s_a, s_b);
}

#if defined(GS_EMU)
GS_FP8_EMU_ENTRY(gs_fp8_gemm_mma)
#endif
