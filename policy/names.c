/* names.c: the name tables of names.h, one per enum. Every value is the
 * toolkit's own constant, so a renumbering in a new CUDA release changes the
 * number here too and never the meaning of a name. */
#include "names.h"

#include <library_types.h>
#include <cublas_v2.h> /* not cublas_api.h: CUDA 12's needs CUBLASAPI, which this defines */
#include <ctype.h>
#include <string.h>
/* cublasLt.h declares cublasLtLoggerForceDisable() without a prototype, which
 * -Wstrict-prototypes reports against us; only its enums are used here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop

typedef struct named_value {
  int value;
  const char *name;
} named_value;

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The types cuBLAS GEMMs accept for A, B and C: real ones, and the complex
 * ones cublasGemmEx takes (c8i for A and B with c32f C). */
static const named_value type_names[] = {
    {CUDA_R_32F, "fp32"},
    {CUDA_R_16F, "fp16"},
    {CUDA_R_16BF, "bf16"},
    {CUDA_R_64F, "fp64"},
    {CUDA_R_8F_E4M3, "e4m3"},
    {CUDA_R_8F_E5M2, "e5m2"},
    {CUDA_R_8I, "i8"},
    {CUDA_R_8U, "u8"},
    {CUDA_R_32I, "i32"},
    {CUDA_C_16F, "c16f"},
    {CUDA_C_32F, "c32f"},
    {CUDA_C_64F, "c64f"},
    {CUDA_C_8I, "c8i"},
};

/* Compute types newer than the headers a build may use (PyTorch's cu126
 * wheels carry cuBLAS 12.6's): the values cuBLAS 13's cublas_api.h gives
 * them, so a shim built against older headers still names them when it
 * runs over a newer cuBLAS. */
#if CUBLAS_VERSION < 120900
#define CUBLAS_COMPUTE_32F_EMULATED_16BFX9 ((cublasComputeType_t)78)
#endif
#if CUBLAS_VER_MAJOR < 13
#define CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT ((cublasComputeType_t)79)
#endif

static const named_value compute_names[] = {
    {CUBLAS_COMPUTE_16F, "16f"},
    {CUBLAS_COMPUTE_16F_PEDANTIC, "16f_pedantic"},
    {CUBLAS_COMPUTE_32F, "32f"},
    {CUBLAS_COMPUTE_32F_PEDANTIC, "32f_pedantic"},
    {CUBLAS_COMPUTE_32F_FAST_16F, "32f_fast_16f"},
    {CUBLAS_COMPUTE_32F_FAST_16BF, "32f_fast_16bf"},
    {CUBLAS_COMPUTE_32F_FAST_TF32, "32f_fast_tf32"},
    {CUBLAS_COMPUTE_32F_EMULATED_16BFX9, "32f_emulated_16bfx9"},
    {CUBLAS_COMPUTE_64F, "64f"},
    {CUBLAS_COMPUTE_64F_PEDANTIC, "64f_pedantic"},
    {CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT, "64f_emulated_fixedpoint"},
    {CUBLAS_COMPUTE_32I, "32i"},
    {CUBLAS_COMPUTE_32I_PEDANTIC, "32i_pedantic"},
};

static const named_value api_names[] = {
    {GS_API_GEMM_EX, "cublasGemmEx"},
    {GS_API_GEMM_EX_64, "cublasGemmEx_64"},
    {GS_API_GEMM_STRIDED_BATCHED_EX, "cublasGemmStridedBatchedEx"},
    {GS_API_GEMM_STRIDED_BATCHED_EX_64, "cublasGemmStridedBatchedEx_64"},
    {GS_API_GEMM_BATCHED_EX, "cublasGemmBatchedEx"},
    {GS_API_GEMM_BATCHED_EX_64, "cublasGemmBatchedEx_64"},
    {GS_API_LT_MATMUL, "cublasLtMatmul"},
};

static const named_value route_names[] = {
    {GS_ROUTE_NATIVE, "native"},
    {GS_ROUTE_FFMA, "ffma"},
    {GS_ROUTE_FP8, "fp8"},
    {GS_ROUTE_FP16, "fp16"},
};

/* Callers, with the file-name stem of each library's objects (after "lib"),
 * the variants its objects add to the stem, and whether its objects come in
 * parts ("_" and a part name). As NVIDIA ships them (CUDA 13 toolkit's
 * lib64, the nvidia-* wheels): libcusolverMg, libcufftw, libcutensorMg are
 * variants; cuDNN 9 (libcudnn_ops, libcudnn_engines_precompiled...),
 * TensorRT (libnvinfer_plugin, libnvinfer_lean, libnvinfer_dispatch) and
 * cuDSS (libcudss_commlayer_nccl, libcudss_mtlayer_gomp) come in parts.
 * The multi-process libraries are their single-process library's variants:
 * cuSOLVERMp and cuBLASMp (packaged as libcusolvermp and libcublasmp; both
 * spellings of the object's "Mp" are taken), and cuQuantum's cuTensorNet
 * (libcutensornet) is cuTENSOR's. cuStateVec (libcustatevec) has no row.
 * Longer stems first where one extends another (cublasLt, cusparseLt). */
static const struct caller_row {
  gs_caller value;
  const char *name;
  const char *stem;
  const char *const *variants; /* NULL-terminated, or NULL */
  int parts;
} caller_rows[] = {
    {GS_CALLER_APP, "app", NULL, NULL, 0},
    {GS_CALLER_CUBLASLT, "cublaslt", "cublasLt", NULL, 0},
    {GS_CALLER_CUBLAS, "cublas", "cublas", (const char *const[]){"Mp", "mp", NULL}, 0},
    {GS_CALLER_CUSOLVER, "cusolver", "cusolver", (const char *const[]){"Mg", "Mp", "mp", NULL}, 0},
    {GS_CALLER_CUSPARSELT, "cusparselt", "cusparseLt", NULL, 0},
    {GS_CALLER_CUSPARSE, "cusparse", "cusparse", NULL, 0},
    {GS_CALLER_CUFFT, "cufft", "cufft", (const char *const[]){"w", NULL}, 0},
    {GS_CALLER_CUDNN, "cudnn", "cudnn", NULL, 1},
    {GS_CALLER_NCCL, "nccl", "nccl", NULL, 0},
    {GS_CALLER_TENSORRT, "tensorrt", "nvinfer", NULL, 1},
    {GS_CALLER_CUTENSOR, "cutensor", "cutensor", (const char *const[]){"Mg", "net", NULL}, 0},
    {GS_CALLER_CUDSS, "cudss", "cudss", NULL, 1},
};

/* CUBLAS_OP_HERMITAN is CUBLAS_OP_C under another name, so it has no row. */
static const named_value op_names[] = {
    {CUBLAS_OP_N, "N"},
    {CUBLAS_OP_T, "T"},
    {CUBLAS_OP_C, "C"},
    {CUBLAS_OP_CONJG, "CONJG"},
};

static const named_value epilogue_names[] = {
    {CUBLASLT_EPILOGUE_DEFAULT, "default"},
    {CUBLASLT_EPILOGUE_RELU, "relu"},
    {CUBLASLT_EPILOGUE_BIAS, "bias"},
    {CUBLASLT_EPILOGUE_RELU_BIAS, "relu_bias"},
    {CUBLASLT_EPILOGUE_GELU, "gelu"},
    {CUBLASLT_EPILOGUE_GELU_BIAS, "gelu_bias"},
    {CUBLASLT_EPILOGUE_RELU_AUX, "relu_aux"},
    {CUBLASLT_EPILOGUE_RELU_AUX_BIAS, "relu_aux_bias"},
    {CUBLASLT_EPILOGUE_GELU_AUX, "gelu_aux"},
    {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "gelu_aux_bias"},
    {CUBLASLT_EPILOGUE_DRELU, "drelu"},
    {CUBLASLT_EPILOGUE_DRELU_BGRAD, "drelu_bgrad"},
    {CUBLASLT_EPILOGUE_DGELU, "dgelu"},
    {CUBLASLT_EPILOGUE_DGELU_BGRAD, "dgelu_bgrad"},
    {CUBLASLT_EPILOGUE_BGRADA, "bgrada"},
    {CUBLASLT_EPILOGUE_BGRADB, "bgradb"},
};

static const named_value order_names[] = {
    {CUBLASLT_ORDER_COL, "col"},
    {CUBLASLT_ORDER_ROW, "row"},
    {CUBLASLT_ORDER_COL32, "col32"},
    {CUBLASLT_ORDER_COL4_4R2_8C, "col4_4r2_8c"},
    {CUBLASLT_ORDER_COL32_2R_4R4, "col32_2r_4r4"},
};

static const char *name_of(const named_value *table, size_t n, int value) {
  for (size_t i = 0; i < n; i++)
    if (table[i].value == value) return table[i].name;
  return NULL;
}

/* ASCII only: tolower() would follow the process locale, which the program
 * we are preloaded into may have set to anything. */
static int ascii_lower(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

/* s need not be NUL-terminated and may contain NUL bytes; name is. */
static int name_equals(const char *name, const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (name[i] == '\0' || ascii_lower((unsigned char)name[i]) != ascii_lower((unsigned char)s[i]))
      return 0;
  return name[len] == '\0';
}

static int value_of(const named_value *table, size_t n, const char *s, size_t len) {
  if (s == NULL) return -1;
  for (size_t i = 0; i < n; i++)
    if (name_equals(table[i].name, s, len)) return table[i].value;
  return -1;
}

const char *gs_type_name(int cuda_data_type) {
  return name_of(type_names, COUNT_OF(type_names), cuda_data_type);
}

int gs_type_parse(const char *s, size_t len) {
  return value_of(type_names, COUNT_OF(type_names), s, len);
}

const char *gs_compute_name(int compute_type) {
  return name_of(compute_names, COUNT_OF(compute_names), compute_type);
}

int gs_compute_parse(const char *s, size_t len) {
  return value_of(compute_names, COUNT_OF(compute_names), s, len);
}

const char *gs_api_name(gs_api api) {
  return name_of(api_names, COUNT_OF(api_names), (int)api);
}

int gs_api_parse(const char *s, size_t len) {
  return value_of(api_names, COUNT_OF(api_names), s, len);
}

const char *gs_route_name(gs_route route) {
  return name_of(route_names, COUNT_OF(route_names), (int)route);
}

int gs_route_parse(const char *s, size_t len) {
  return value_of(route_names, COUNT_OF(route_names), s, len);
}

const char *gs_op_name(int op) {
  return name_of(op_names, COUNT_OF(op_names), op);
}

const char *gs_epilogue_name(int epilogue) {
  return name_of(epilogue_names, COUNT_OF(epilogue_names), epilogue);
}

const char *gs_order_name(int order) {
  return name_of(order_names, COUNT_OF(order_names), order);
}

const char *gs_caller_name(gs_caller caller) {
  for (size_t i = 0; i < COUNT_OF(caller_rows); i++)
    if (caller_rows[i].value == caller) return caller_rows[i].name;
  return NULL;
}

int gs_caller_parse(const char *s, size_t len) {
  if (s == NULL) return -1;
  for (size_t i = 0; i < COUNT_OF(caller_rows); i++)
    if (name_equals(caller_rows[i].name, s, len)) return (int)caller_rows[i].value;
  return -1;
}

/* The end of the name, or a version (".so", ".so.12"). */
static int name_ends(const char *p) { return *p == '\0' || *p == '.'; }

/* "lib" + stem, then the end, a version ("."), a part ("_ops", for a
 * library whose objects come in parts) or one of its variants ("Mg", "w")
 * and then the end or a version: libcusolverMg and libcufftw are their
 * library's, libcusolverwrap and libncclient are not. The stem compares
 * exactly (case matters in file names). */
gs_caller gs_caller_of_object(const char *file_name) {
  if (!file_name || strncmp(file_name, "lib", 3) != 0) return GS_CALLER_APP;
  const char *rest = file_name + 3;
  for (size_t i = 0; i < COUNT_OF(caller_rows); i++) {
    const struct caller_row *row = &caller_rows[i];
    size_t n = row->stem ? strlen(row->stem) : 0;
    if (!row->stem || strncmp(rest, row->stem, n) != 0) continue;
    const char *after = rest + n;
    if (name_ends(after)) return row->value;
    if (row->parts && after[0] == '_' && isalnum((unsigned char)after[1])) return row->value;
    for (const char *const *v = row->variants; v && *v; v++)
      if (strncmp(after, *v, strlen(*v)) == 0 && name_ends(after + strlen(*v))) return row->value;
  }
  return GS_CALLER_APP;
}
