/* fp8.h: the fp8 route's device code, seen from the host (fp8_launch.c).
 *
 * Delayed scaling, per call site and operand: a gs_fp8_ring in device memory
 * holds the amax history and a double-buffered scale. Scales are
 * quantization steps: x8 = x / scale. A call quantizes with
 * scale[parity]; the quantize kernel measures amax of the raw values on the
 * way, and the last block to finish folds it into the history and publishes
 * the next step's scale into scale[parity ^ 1] — no host round trip, no
 * synchronisation. The GEMM of the same call reads scale[parity], the step
 * its operand was quantized with. The host flips parity per call.
 *
 * The fold follows TransformerEngine's rules in step form, except that an
 * amax of 0, inf or NaN is not entered. Operands are written in the "TN"
 * layout, the only one cuBLASLt fp8 accepts.
 *
 * Fold rules, the first call and the layout: docs/fp8.md, "fp8.h: the
 * fold and the layout". */
#ifndef GEMMSHIM_FP8_H
#define GEMMSHIM_FP8_H

#include <cuda.h>
#include <stdint.h>

#include "kernels.h" /* kernel_ctx */

enum { GS_FP8_E4M3 = 0, GS_FP8_E5M2 = 1 };
#define GS_FP8_E4M3_MAX 448.0f
#define GS_FP8_E5M2_MAX 57344.0f
/* Partial amax is spread over this many slots: one atomic slot serialises
 * tens of thousands of blocks. */
#define GS_FP8_AMAX_SLOTS 32

/* Device memory, one per (site, operand), followed by `history` floats.
 * Created zeroed with scale[0] = scale[1] = 1 (gs_fp8_ring_bytes gives the
 * size). */
typedef struct gs_fp8_ring {
  float scale[2][4]; /* [parity][0]; 16 bytes apart: cuBLASLt took a scale pointer at
                        * 16 bytes, refused one at 4 (docs/gpu-results.md) */
  float amax_slot[GS_FP8_AMAX_SLOTS]; /* non-negative floats, max by int atomics */
  unsigned int blocks_done;           /* re-armed to 0 by the last block */
  unsigned int pos;                   /* next history slot */
  unsigned int history;               /* length of hist[] */
  unsigned int fmt;                   /* GS_FP8_E4M3 / GS_FP8_E5M2 */
  float margin_pow2;                  /* 2^margin: step = amax * 2^margin / fmt_max */
  float last_amax;                    /* amax of the latest call (for tests) */
  float hist[];                       /* `history` entries, 0 = empty */
} gs_fp8_ring;

static inline uint64_t gs_fp8_ring_bytes(unsigned history) {
  return (uint64_t)sizeof(gs_fp8_ring) + (uint64_t)history * sizeof(float);
}

/* Quantize one operand with per-block scales (fp8_kernels.h's
 * gs_fp8_bq_args, fp8_scaled_quantize.cu) on stream. src_type is the
 * source's cudaDataType. CUDA_ERROR_INVALID_VALUE for bad arguments;
 * CUDA_ERROR_NOT_SUPPORTED below capability 9.0 (the kernels' module is
 * not loaded there). */
struct gs_fp8_bq_args;
CUresult fp8_scaled_quantize(kernel_ctx *kc, CUstream stream, int src_type, const struct gs_fp8_bq_args *a);
/* NULL when fp8_scaled_quantize's kernel for src_type is loaded in kc's
 * context (loading the modules on first use), else why not (a static
 * string naming the failed driver call, or the device's capability). */
const char *fp8_scaled_ready(kernel_ctx *kc, int src_type);

/* Quantize one GEMM operand. src is bf16/fp16/fp32 (type), column-major,
 * `rows x cols` as stored with leading dimension ld and batch stride
 * `stride`; `trans` says whether the GEMM uses it transposed. For A
 * (is_b = 0), op(A) is m x k; for B (is_b = 1), op(B) is k x n. dst gets the
 * TN layout above. ring/parity as described at the top; fmt is the ring's. */
CUresult fp8_quantize(kernel_ctx *kc, CUstream stream, int src_type, const void *src, int64_t rows,
                      int64_t cols, int64_t ld, int64_t stride, int64_t batch, int trans, int is_b,
                      uint8_t *dst, gs_fp8_ring *ring, int parity);

/* One operand of fp8_quantize_operands, as fp8_quantize takes it. */
typedef struct fp8_operand {
  int src_type;
  const void *src;
  int64_t rows, cols, ld, stride, batch;
  int trans, is_b;
  uint8_t *dst; /* unused by the amax pass */
  gs_fp8_ring *ring;
  struct gs_fp8_op_stats *stats; /* device counters (fp8_stats.h) of a compared call; NULL: none, and
                                  * always for the amax pass */
  int64_t dst_ld; /* dst's k stride (>= k; padding zeroed); 0: k */
  /* The current recipe's launchers only (fp8_current_*): GS_FP8_CUR_SLOTS
   * words of device memory for the per-block amax (fp8_kernels.h), and the
   * format (GS_FP8_E4M3 / E5M2); ring then only receives the step in
   * scale[0][0], and is otherwise neither read nor written. */
  uint32_t *partial;
  int fmt;
} fp8_operand;

/* A GEMM's A and B (n = 2; or one operand) quantized in one launch, each
 * with its own ring and fold, exactly as fp8_quantize would each; the rings
 * must differ. Operands of different source types take a launch each. */
CUresult fp8_quantize_operands(kernel_ctx *kc, CUstream stream, const fp8_operand *ops, int n, int parity);

/* The same for fp8_amax_init. */
CUresult fp8_amax_init_operands(kernel_ctx *kc, CUstream stream, const fp8_operand *ops, int n, int parity);

/* The current recipe, write-only (docs/graphs.md): fp8_current_amax stores
 * each block's amax of each operand in its partial slots; then
 * fp8_current_quantize, on the same stream with the same ops, has every
 * block reduce those slots to the step (amax / fmt_max; 1 for an amax of 0,
 * inf or NaN), quantize with it, and block 0 store it in ring->scale[0][0].
 * No memset, atomic or counter on anything outside the launch's blocks:
 * the codes and step are the ring kernels' for a fresh ring of one entry
 * (fp8_ring_init(.., 1, 0, ..) then fp8_amax_init_operands and
 * fp8_quantize_operands with parity 0), bit for bit. */
CUresult fp8_current_amax(kernel_ctx *kc, CUstream stream, const fp8_operand *ops, int n);
CUresult fp8_current_quantize(kernel_ctx *kc, CUstream stream, const fp8_operand *ops, int n);

/* First call of a site: amax of src, and scale[parity] published from it
 * (the history is left alone: the call's quantize enters the amax). */
CUresult fp8_amax_init(kernel_ctx *kc, CUstream stream, int src_type, const void *src, int64_t rows,
                       int64_t cols, int64_t ld, int64_t stride, int64_t batch, gs_fp8_ring *ring,
                       int parity);

/* The shim's own fp8 GEMM: D = alpha * scale_a * scale_b * op(A8) op(B8)
 * + beta * C, then the epilogue (bias of m elements in bias_type, relu,
 * gelu as cuBLASLt defines them), written in d_type (bf16, fp16, fp32).
 * A8/B8 in the TN layout above with formats fmt_a/fmt_b; scale_a/scale_b are
 * device pointers (the rings' scale[parity]); alpha/beta are host or device
 * floats per pointer_mode (cuBLAS's values). C/D column-major with their ld
 * and batch strides; C may equal D; C is not read when beta is zero on the
 * host. fp32 accumulation; any shape, edges predicated. */
CUresult fp8_gemm(kernel_ctx *kc, CUstream stream, int64_t m, int64_t n, int64_t k, int64_t batch,
                  const uint8_t *A8, int fmt_a, const uint8_t *B8, int fmt_b, const float *scale_a,
                  const float *scale_b, const void *alpha, const void *beta, int pointer_mode,
                  int c_type, const void *C, int64_t ldc, int64_t stride_c, int d_type, void *D,
                  int64_t ldd, int64_t stride_d, int epilogue, const void *bias, int bias_type);

/* fp8_gemm's contract and checks on fp8 tensor cores (mma.sync m16n8k32,
 * fp32 accumulation; fp8_gemm_mma.cu). Its module is loaded only on sm_89+
 * devices whose driver takes PTX ISA 8.4: elsewhere it launches nothing and
 * returns CUDA_ERROR_NOT_SUPPORTED, and the caller runs fp8_gemm. Opt-in
 * (GEMMSHIM_FP8_BACKEND=own-mma) until checked on a GPU. */
CUresult fp8_gemm_mma(kernel_ctx *kc, CUstream stream, int64_t m, int64_t n, int64_t k, int64_t batch,
                      const uint8_t *A8, int fmt_a, const uint8_t *B8, int fmt_b, const float *scale_a,
                      const float *scale_b, const void *alpha, const void *beta, int pointer_mode,
                      int c_type, const void *C, int64_t ldc, int64_t stride_c, int d_type, void *D,
                      int64_t ldd, int64_t stride_d, int epilogue, const void *bias, int bias_type);

#endif
