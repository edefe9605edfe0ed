/* names.h: the one place where CUDA and cuBLAS enum values get the short
 * names that the policy file, the routing log and the debug output use.
 * Pure C: the values come from the toolkit's own headers, so a name can never
 * drift from the number cuBLAS sees. */
#ifndef GEMMSHIM_NAMES_H
#define GEMMSHIM_NAMES_H

#include <stddef.h>

/* The intercepted entry points, in the order the hooks are defined. */
typedef enum gs_api {
  GS_API_GEMM_EX = 0,
  GS_API_GEMM_EX_64,
  GS_API_GEMM_STRIDED_BATCHED_EX,
  GS_API_GEMM_STRIDED_BATCHED_EX_64,
  GS_API_GEMM_BATCHED_EX,
  GS_API_GEMM_BATCHED_EX_64,
  GS_API_LT_MATMUL,
  GS_API_COUNT
} gs_api;

typedef enum gs_route {
  GS_ROUTE_NATIVE = 0,
  GS_ROUTE_FFMA,
  GS_ROUTE_FP8,
  GS_ROUTE_FP16,
  GS_ROUTE_COUNT
} gs_route;

/* Who made a GEMM call: the program (with its own libraries, frameworks
 * included), or an NVIDIA library making GEMMs inside itself (cuSOLVER
 * imports cublasGemmEx, libcublas imports cublasLtMatmul: `nm -D`). */
typedef enum gs_caller {
  GS_CALLER_APP = 0,
  GS_CALLER_CUBLAS,
  GS_CALLER_CUBLASLT,
  GS_CALLER_CUSOLVER,
  GS_CALLER_CUSPARSE,
  GS_CALLER_CUSPARSELT,
  GS_CALLER_CUFFT,
  GS_CALLER_CUDNN,
  GS_CALLER_NCCL,
  GS_CALLER_TENSORRT,
  GS_CALLER_CUTENSOR,
  GS_CALLER_CUDSS,
  GS_CALLER_COUNT
} gs_caller;

/* Each *_name returns a static string, or NULL for a value it does not know
 * (callers print "unknown(N)" then). Each *_parse takes a string of length
 * len (not necessarily NUL-terminated), matches it exactly (case-insensitive),
 * and returns the value, or -1 when it is not a known name. */

/* cudaDataType_t: "fp32", "fp16", "bf16", "fp64", "e4m3", "e5m2", "i8", "u8",
 * "i32", and the complex "c16f", "c32f", "c64f", "c8i"; "tf32"-less: exactly
 * the types cuBLAS GEMMs take. */
const char *gs_type_name(int cuda_data_type);
int gs_type_parse(const char *s, size_t len);

/* cublasComputeType_t: "16f", "16f_pedantic", "32f", "32f_pedantic",
 * "32f_fast_16f", "32f_fast_16bf", "32f_fast_tf32", "32f_emulated_16bfx9",
 * "64f", "64f_pedantic", "64f_emulated_fixedpoint", "32i", "32i_pedantic". */
const char *gs_compute_name(int compute_type);
int gs_compute_parse(const char *s, size_t len);

/* gs_api: the real function names, "cublasGemmEx" ... "cublasLtMatmul". */
const char *gs_api_name(gs_api api);
int gs_api_parse(const char *s, size_t len);

/* gs_route: "native", "ffma", "fp8", "fp16". */
const char *gs_route_name(gs_route route);
int gs_route_parse(const char *s, size_t len);

/* gs_caller: "app", "cublas", "cublaslt", "cusolver", "cusparse",
 * "cusparselt", "cufft", "cudnn", "nccl", "tensorrt", "cutensor", "cudss". */
const char *gs_caller_name(gs_caller caller);
int gs_caller_parse(const char *s, size_t len);
/* The caller an object's file name (no directory) stands for: the NVIDIA
 * library whose name it has (libcusolver.so.12, libcusolverMg.so.12,
 * libcudnn_ops.so.9, libnvinfer_plugin.so.10, ...), else GS_CALLER_APP. */
gs_caller gs_caller_of_object(const char *file_name);

/* cublasOperation_t: "N", "T", "C", "CONJG" (conjugate, not transposed). */
const char *gs_op_name(int op);

/* cublasLtEpilogue_t: "default", "relu", "bias", "relu_bias", "gelu",
 * "gelu_bias", "relu_aux", "relu_aux_bias", "gelu_aux", "gelu_aux_bias",
 * "drelu", "drelu_bgrad", "dgelu", "dgelu_bgrad", "bgrada", "bgradb". */
const char *gs_epilogue_name(int epilogue);

/* cublasLtOrder_t: "col", "row", "col32", "col4_4r2_8c", "col32_2r_4r4". */
const char *gs_order_name(int order);

#endif
