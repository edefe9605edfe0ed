/* test_names.c: every name in names.h against the toolkit header value it
 * stands for, in both directions, and the parse rules (case-insensitive,
 * exact, explicit length). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <library_types.h>
#include <cublas_api.h>
/* cublasLt.h has a declaration without a prototype; only its enums are used. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop

#include "names.h"

typedef struct expected_name {
  int value;
  const char *name;
} expected_name;

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static const expected_name types[] = {
    {CUDA_R_32F, "fp32"}, {CUDA_R_16F, "fp16"}, {CUDA_R_16BF, "bf16"},
    {CUDA_R_64F, "fp64"}, {CUDA_R_8F_E4M3, "e4m3"}, {CUDA_R_8F_E5M2, "e5m2"},
    {CUDA_R_8I, "i8"}, {CUDA_R_8U, "u8"}, {CUDA_R_32I, "i32"},
    {CUDA_C_16F, "c16f"}, {CUDA_C_32F, "c32f"}, {CUDA_C_64F, "c64f"},
    {CUDA_C_8I, "c8i"},
};

static const expected_name computes[] = {
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

static const expected_name apis[] = {
    {GS_API_GEMM_EX, "cublasGemmEx"},
    {GS_API_GEMM_EX_64, "cublasGemmEx_64"},
    {GS_API_GEMM_STRIDED_BATCHED_EX, "cublasGemmStridedBatchedEx"},
    {GS_API_GEMM_STRIDED_BATCHED_EX_64, "cublasGemmStridedBatchedEx_64"},
    {GS_API_GEMM_BATCHED_EX, "cublasGemmBatchedEx"},
    {GS_API_GEMM_BATCHED_EX_64, "cublasGemmBatchedEx_64"},
    {GS_API_LT_MATMUL, "cublasLtMatmul"},
};

static const expected_name routes[] = {
    {GS_ROUTE_NATIVE, "native"}, {GS_ROUTE_FFMA, "ffma"}, {GS_ROUTE_FP8, "fp8"}, {GS_ROUTE_FP16, "fp16"},
};

static const expected_name ops[] = {
    {CUBLAS_OP_N, "N"}, {CUBLAS_OP_T, "T"}, {CUBLAS_OP_C, "C"}, {CUBLAS_OP_CONJG, "CONJG"},
};

static const expected_name epilogues[] = {
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

static const expected_name orders[] = {
    {CUBLASLT_ORDER_COL, "col"},
    {CUBLASLT_ORDER_ROW, "row"},
    {CUBLASLT_ORDER_COL32, "col32"},
    {CUBLASLT_ORDER_COL4_4R2_8C, "col4_4r2_8c"},
    {CUBLASLT_ORDER_COL32_2R_4R4, "col32_2r_4r4"},
};

typedef const char *(*name_fn)(int value);
typedef int (*parse_fn)(const char *s, size_t len);

static const char *api_name(int v) { return gs_api_name((gs_api)v); }
static const char *route_name(int v) { return gs_route_name((gs_route)v); }

static void upper_case(char *out, const char *name) {
  size_t i = 0;
  for (; name[i]; i++)
    out[i] = (name[i] >= 'a' && name[i] <= 'z') ? (char)(name[i] - 'a' + 'A') : name[i];
  out[i] = '\0';
}

/* name(value) is the name, and parse(name) gives the value back, in any
 * case, from a buffer that goes on past the name. */
static void assert_round_trip(const expected_name *want, size_t n, name_fn name, parse_fn parse) {
  for (size_t i = 0; i < n; i++) {
    assert_non_null(name(want[i].value));
    assert_string_equal(name(want[i].value), want[i].name);
    if (parse == NULL) continue;
    size_t len = strlen(want[i].name);
    assert_int_equal(parse(want[i].name, len), want[i].value);
    char upper[64];
    upper_case(upper, want[i].name);
    assert_int_equal(parse(upper, len), want[i].value);
    char followed[80];
    memcpy(followed, want[i].name, len);
    memcpy(followed + len, ",more", 6);
    assert_int_equal(parse(followed, len), want[i].value);
    assert_int_equal(parse(followed, len + 1), -1);
    assert_int_equal(parse(want[i].name, len - 1), -1);
  }
}

/* Exactly the expected values have names: nothing unlisted sneaks in. */
static void assert_only_these_named(const expected_name *want, size_t n, name_fn name, int lo,
                                    int hi) {
  size_t named = 0;
  for (int v = lo; v <= hi; v++) {
    if (name(v) == NULL) continue;
    named++;
    size_t i = 0;
    while (i < n && want[i].value != v) i++;
    assert_in_range(i, 0, n - 1);
  }
  assert_int_equal(named, n);
}

static void test_type_names(void **state) {
  (void)state;
  assert_round_trip(types, COUNT_OF(types), gs_type_name, gs_type_parse);
  assert_only_these_named(types, COUNT_OF(types), gs_type_name, -4, 1024);
  assert_null(gs_type_name(CUDA_R_4I));
  assert_null(gs_type_name(CUDA_R_4F_E2M1));
  assert_null(gs_type_name(-1));
  assert_string_equal(gs_type_name(CUDA_R_8F_UE4M3), "e4m3"); /* an alias in the header */
}

/* policy.h keeps type sets in a 64-bit mask, compute sets as bit v - 64. */
static void test_values_fit_policy_masks(void **state) {
  (void)state;
  for (size_t i = 0; i < COUNT_OF(types); i++) assert_in_range(types[i].value, 0, 63);
  for (size_t i = 0; i < COUNT_OF(computes); i++) assert_in_range(computes[i].value, 64, 127);
  assert_in_range(GS_API_COUNT, 1, 32);
}

static void test_compute_names(void **state) {
  (void)state;
  assert_round_trip(computes, COUNT_OF(computes), gs_compute_name, gs_compute_parse);
  assert_only_these_named(computes, COUNT_OF(computes), gs_compute_name, -4, 1024);
  assert_null(gs_compute_name(CUDA_R_32F));
}

static void test_api_names(void **state) {
  (void)state;
  assert_int_equal(COUNT_OF(apis), GS_API_COUNT);
  assert_round_trip(apis, COUNT_OF(apis), api_name, gs_api_parse);
  assert_null(gs_api_name(GS_API_COUNT));
  assert_int_equal(gs_api_parse("cublasSgemm", 11), -1);
}

static void test_route_names(void **state) {
  (void)state;
  assert_int_equal(COUNT_OF(routes), GS_ROUTE_COUNT);
  assert_round_trip(routes, COUNT_OF(routes), route_name, gs_route_parse);
  assert_null(gs_route_name(GS_ROUTE_COUNT));
}

static void test_op_names(void **state) {
  (void)state;
  assert_round_trip(ops, COUNT_OF(ops), gs_op_name, NULL);
  assert_only_these_named(ops, COUNT_OF(ops), gs_op_name, -4, 1024);
  assert_string_equal(gs_op_name(CUBLAS_OP_HERMITAN), "C");
}

static void test_epilogue_names(void **state) {
  (void)state;
  assert_round_trip(epilogues, COUNT_OF(epilogues), gs_epilogue_name, NULL);
  assert_only_these_named(epilogues, COUNT_OF(epilogues), gs_epilogue_name, -4, 4096);
}

static void test_order_names(void **state) {
  (void)state;
  assert_round_trip(orders, COUNT_OF(orders), gs_order_name, NULL);
  assert_only_these_named(orders, COUNT_OF(orders), gs_order_name, -4, 1024);
}

static void test_parse_is_exact(void **state) {
  (void)state;
  assert_int_equal(gs_type_parse("", 0), -1);
  assert_int_equal(gs_type_parse(NULL, 0), -1);
  assert_int_equal(gs_type_parse("fp32 ", 5), -1);
  assert_int_equal(gs_type_parse(" fp32", 5), -1);
  assert_int_equal(gs_type_parse("fp32\0", 5), -1);
  assert_int_equal(gs_type_parse("Bf16", 4), CUDA_R_16BF);
  assert_int_equal(gs_compute_parse("32F_FAST_TF32", 13), CUBLAS_COMPUTE_32F_FAST_TF32);
  assert_int_equal(gs_compute_parse("32f_fast", 8), -1);
  assert_int_equal(gs_route_parse("FFMA", 4), GS_ROUTE_FFMA);
}

/* Object file names as the CUDA 13 toolkit (ls /usr/local/cuda/lib64) and
 * PyPI's nvidia-* wheels name them, and the names of frameworks and of
 * gemmshim itself, which are the program's. */
static void test_caller_of_object(void **state) {
  (void)state;
  static const struct {
    const char *file;
    gs_caller caller;
  } cases[] = {
      {"libcusolver.so.12", GS_CALLER_CUSOLVER}, {"libcusolver.so.11", GS_CALLER_CUSOLVER},
      {"libcusolverMg.so.12", GS_CALLER_CUSOLVER}, {"libcublas.so.13", GS_CALLER_CUBLAS},
      {"libcublasLt.so.13", GS_CALLER_CUBLASLT}, {"libcusparse.so.12", GS_CALLER_CUSPARSE},
      {"libcusparseLt.so.0", GS_CALLER_CUSPARSELT}, {"libcufft.so.12", GS_CALLER_CUFFT},
      {"libcufftw.so.12", GS_CALLER_CUFFT}, {"libcudnn.so.9", GS_CALLER_CUDNN},
      {"libcudnn_ops.so.9", GS_CALLER_CUDNN}, {"libcudnn_engines_precompiled.so.9", GS_CALLER_CUDNN},
      {"libnccl.so.2", GS_CALLER_NCCL}, {"libnvinfer.so.10", GS_CALLER_TENSORRT},
      {"libnvinfer_plugin.so.10", GS_CALLER_TENSORRT}, {"libcutensor.so.2", GS_CALLER_CUTENSOR},
      {"libcudss.so.0", GS_CALLER_CUDSS},
      {"libtorch_cuda.so", GS_CALLER_APP}, {"libc10_cuda.so", GS_CALLER_APP},
      {"xla_extension.so", GS_CALLER_APP}, {"libtransformer_engine.so", GS_CALLER_APP},
      {"libgemmshim.so", GS_CALLER_APP}, {"python3.12", GS_CALLER_APP}, {"", GS_CALLER_APP},
      {"cusolver.so", GS_CALLER_APP}, {"libCUSOLVER.so", GS_CALLER_APP},
      /* more of the toolkit's and the wheels' own objects */
      {"libcusolver.so", GS_CALLER_CUSOLVER}, {"libcusolverMg.so", GS_CALLER_CUSOLVER},
      {"libcudnn_adv.so.9", GS_CALLER_CUDNN}, {"libcudnn_engines_runtime_compiled.so.9", GS_CALLER_CUDNN},
      {"libcufftw.so", GS_CALLER_CUFFT}, {"libnvinfer_lean.so.10", GS_CALLER_TENSORRT},
      {"libnvinfer_dispatch.so.10", GS_CALLER_TENSORRT}, {"libcutensorMg.so.2", GS_CALLER_CUTENSOR},
      {"libcudss_commlayer_nccl.so", GS_CALLER_CUDSS}, {"libnccl.so", GS_CALLER_NCCL},
      /* the multi-process and cuQuantum libraries (their packages:
       * libcusolvermp, libcublasmp, cuquantum's libcutensornet) */
      {"libcusolverMp.so.0", GS_CALLER_CUSOLVER}, {"libcusolvermp.so.0", GS_CALLER_CUSOLVER},
      {"libcublasMp.so.0", GS_CALLER_CUBLAS}, {"libcublasmp.so.0", GS_CALLER_CUBLAS},
      {"libcutensornet.so.2", GS_CALLER_CUTENSOR}, {"libcublasmpx.so", GS_CALLER_APP},
      /* names that only begin with a library's stem are the program's */
      {"libncclient.so", GS_CALLER_APP}, {"libcublas_helpers.so", GS_CALLER_APP},
      {"libcufftools.so", GS_CALLER_APP}, {"libnvinferencer.so", GS_CALLER_APP},
      {"libcusolverwrap.so", GS_CALLER_APP}, {"libcudnnx.so", GS_CALLER_APP},
      {"libcusolverMgx.so", GS_CALLER_APP}, {"libcufftw2.so", GS_CALLER_APP},
      {"libcudnn_.so", GS_CALLER_APP}, {"libcublasLtx.so", GS_CALLER_APP},
  };
  for (size_t i = 0; i < COUNT_OF(cases); i++) {
    if (gs_caller_of_object(cases[i].file) != cases[i].caller)
      fail_msg("%s: caller %d, expected %d", cases[i].file, (int)gs_caller_of_object(cases[i].file),
               (int)cases[i].caller);
  }
  assert_int_equal(gs_caller_of_object(NULL), GS_CALLER_APP);
  for (int v = 0; v < GS_CALLER_COUNT; v++) {
    const char *name = gs_caller_name((gs_caller)v);
    assert_non_null(name);
    assert_int_equal(gs_caller_parse(name, strlen(name)), v);
  }
  assert_null(gs_caller_name(GS_CALLER_COUNT));
  assert_int_equal(gs_caller_parse("TensorRT", 8), GS_CALLER_TENSORRT);
  assert_int_equal(gs_caller_parse("nvinfer", 7), -1);
  assert_int_equal(gs_caller_parse(NULL, 0), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_type_names),
      cmocka_unit_test(test_values_fit_policy_masks),
      cmocka_unit_test(test_compute_names),
      cmocka_unit_test(test_api_names),
      cmocka_unit_test(test_route_names),
      cmocka_unit_test(test_op_names),
      cmocka_unit_test(test_epilogue_names),
      cmocka_unit_test(test_order_names),
      cmocka_unit_test(test_parse_is_exact),
      cmocka_unit_test(test_caller_of_object),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
