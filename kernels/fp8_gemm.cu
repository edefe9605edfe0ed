/* fp8_gemm.cu: the shim's own fp8 GEMM, for GPUs (or shapes) that cuBLASLt
 * fp8 does not serve:
 *
 *   D = epilogue(alpha * scale_a * scale_b * op(A8) op(B8) + beta * C + bias)
 *
 * with A8 (k x m) and B8 (k x n) in the TN layout of fp8.h, E4M3 or E5M2
 * each, decoded exactly to fp32 and multiplied with fp32 FFMA accumulation
 * (no tensor cores: it runs from sm_61 on). C and D are column-major bf16,
 * fp16 or fp32 with their own ld and batch stride, C may be D, C is not read
 * when beta is zero; bias has m elements (bf16, fp16, fp32); relu and
 * cuBLASLt's tanh GELU. Any m, n, k (k = 0 included: beta*C + bias),
 * batches over gridDim.z with a grid-stride loop past 65535.
 *
 * Shape: 64 x 64 output tiles, k in steps of 32, 256 threads, each owning a
 * 4 x 4 micro-tile. Each step a thread loads 16 fp8 bytes (one LDG.128 when
 * k is a multiple of 16) of one A or B row, decodes them and stores the 16
 * floats k-major into shared memory (2 x 32 x 68 floats, 17 KB; a warp's
 * stores hit 32 consecutive words), so the inner loop is 2 conflict-free
 * LDS.128 and 16 FFMA per k. 17 KB and the 75-80 registers ptxas gives (sm_90,
 * sm_75) allow 3 blocks (768 threads) per SM. Decoding costs about 10
 * integer ops per code, 16 codes per 512 FFMA per thread and step, some 30%
 * of the FFMA count but on other pipes; each code, decoded once, is reused
 * 64 times from shared memory. */
#include "fp8_gemm_epilogue.h"

/* Multiply-adds are explicit __builtin_fmaf; nothing else may be fused, so
 * the host build computes the same bits as the GPU. */
#if defined(__clang__)
#pragma clang fp contract(off)
#endif


/* Four floats moved as one 16-byte shared-memory access. */
typedef struct __attribute__((aligned(16))) fp8_f4 {
  float v[4];
} fp8_f4;

/* The fetched codes, decoded, into column `row` of the k-major tile s. */
static __device__ __forceinline__ void fp8_stage(fp8_f4 (*s)[GS_FP8_G_BM / 4 + 1], gs_u32x4 w, int fmt,
                                                 int row, int chunk) {
GS_FP8_UNROLL
  for (int q = 0; q < 16; q++) {
    uint8_t code = (uint8_t)(w.v[q / 4] >> (8 * (q % 4)));
    s[chunk * 16 + q][row / 4].v[row % 4] = gs_fp8_to_f32(code, fmt);
  }
}

extern "C" __global__ void __launch_bounds__(GS_FP8_G_THREADS) gs_fp8_gemm(gs_fp8_gemm_args a) {
  __shared__ fp8_f4 s_a[GS_FP8_G_BK][GS_FP8_G_BM / 4 + 1];
  __shared__ fp8_f4 s_b[GS_FP8_G_BK][GS_FP8_G_BN / 4 + 1];

  const unsigned tid = threadIdx.x;
  const int tx = (int)(tid % 16), ty = (int)(tid / 16); /* rows tx*4.., cols ty*4.. */
  /* Staging: threads 0-127 load A rows, 128-255 B rows; 64 rows x 2 chunks
   * of 16 bytes each; a warp covers 32 consecutive rows of one chunk, so its
   * shared-memory stores hit 32 consecutive words. */
  const int stage_b = tid >= 128;
  const int stage_row = (int)(tid % 64), stage_chunk = (int)((tid % 128) / 64);

  const float alpha = a.alpha_ptr ? gs_fp8_load_const(a.alpha_ptr) : a.alpha;
  const float beta = a.beta_ptr ? gs_fp8_load_const(a.beta_ptr) : a.beta;
  /* The step each operand was quantized with; k = 0 reads neither. */
  const float scale =
      a.k > 0 ? alpha * (gs_fp8_load_const(a.scale_a) * gs_fp8_load_const(a.scale_b)) : alpha;
  const int fmt = stage_b ? a.fmt_b : a.fmt_a;

  for (int64_t b = blockIdx.z; b < a.batch; b += gridDim.z)
    for (int64_t tn = blockIdx.y; tn < a.tiles_n; tn += gridDim.y)
      for (int64_t tm = blockIdx.x; tm < a.tiles_m; tm += gridDim.x) {
        const int64_t i0 = tm * GS_FP8_G_BM, j0 = tn * GS_FP8_G_BN;
        float acc[4][4];
GS_FP8_UNROLL
        for (int r = 0; r < 4; r++)
GS_FP8_UNROLL
          for (int c = 0; c < 4; c++) acc[r][c] = 0.0f;

        const int64_t g_row = (stage_b ? j0 : i0) + stage_row;
        const int64_t g_rows = stage_b ? a.n : a.m;
        const uint8_t *row_base =
            stage_b ? a.b8 + (b * a.n + g_row) * a.k : a.a8 + (b * a.m + g_row) * a.k;
        const int in_range = g_row < g_rows;
        /* Fetching the next step's codes before this step's FFMAs (to
         * overlap the load) took 127 registers on sm_75 against 80: the
         * other blocks of the SM hide the latency instead. */
        for (int64_t p0 = 0; p0 < a.k; p0 += GS_FP8_G_BK) {
          fp8_stage(stage_b ? s_b : s_a, fp8_fetch(row_base, in_range, p0 + stage_chunk * 16, a.k, a.vec_k), fmt,
                    stage_row, stage_chunk);
          __syncthreads();
GS_FP8_UNROLL_8
          for (int kk = 0; kk < GS_FP8_G_BK; kk++) {
            const fp8_f4 av = s_a[kk][tx], bv = s_b[kk][ty];
GS_FP8_UNROLL
            for (int r = 0; r < 4; r++)
GS_FP8_UNROLL
              for (int c = 0; c < 4; c++) acc[r][c] = __builtin_fmaf(av.v[r], bv.v[c], acc[r][c]);
          }
          __syncthreads();
        }

        /* Epilogue: a warp writes 64 consecutive rows of 2 columns. */
GS_FP8_UNROLL
        for (int c = 0; c < 4; c++) {
          const int64_t j = j0 + ty * 4 + c;
          if (j >= a.n) continue;
GS_FP8_UNROLL
          for (int r = 0; r < 4; r++) {
            const int64_t i = i0 + tx * 4 + r;
            if (i >= a.m) continue;
            fp8_epilogue_store(a, b, i, j, acc[r][c], scale, beta);
          }
        }
      }
}

#if defined(GS_EMU)
GS_FP8_EMU_ENTRY(gs_fp8_gemm)
#endif
