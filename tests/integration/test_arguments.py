"""Arguments cuBLAS refuses get cuBLAS's own status on every route.

A catalogue of invalid or unusual argument sets, each taken from a
requirement the cuBLAS documentation states (docs.nvidia.com/cuda/cublas;
the section is named with each entry), is issued by ffma_client_cu13
through every entry point it applies to, without the shim and under the
shim in every mode (native, auto, ffma, fp8) on devices 6.1 and 9.0 (the
fp8 route's own kernel and cuBLASLt's fp8 GEMM). Every call must return
exactly the status it returns without the shim, and a refused call must
leave its output untouched (the client's ok=1). The principle under test:
a route runs only what it knows cuBLAS would accept; everything else is
forwarded so that cuBLAS answers.

The stand-in's own checks (tests/standin/cublas.c, cublaslt_matmul.c)
follow the same documentation; the real cuBLAS 13 answers these calls only
without a handle (no GPU here): tests/real/test_real_cublas.py runs the
same catalogue there."""

import pytest

from harness import CLIENT_DIR, read_log, require_built, run

GEMM_FAMILY = ("ex", "ex64", "strided", "strided64", "batched", "batched64")
BATCHED = ("strided", "strided64", "batched", "batched64")
ALL = GEMM_FAMILY + ("lt",)
LT = ("lt",)
# cublasStatus_t (cublas_api.h)
SUCCESS, INVALID_VALUE, NOT_SUPPORTED = 0, 7, 15

# (name, --gemm keys, entry points, the status the documentation gives, where it says so)
CATALOGUE = [
    ("m_negative", {"call_m": -1}, GEMM_FAMILY, INVALID_VALUE,
     "cublasGemmEx, cublasGemmStridedBatchedEx, cublasGemmBatchedEx: INVALID_VALUE if m, n or k < 0"),
    ("k_negative", {"call_k": -1}, GEMM_FAMILY, INVALID_VALUE, "same: k < 0"),
    ("batch_negative", {"call_batch": -1}, BATCHED, INVALID_VALUE,
     "cublasGemmStridedBatchedEx, cublasGemmBatchedEx: INVALID_VALUE if batchCount < 0"),
    ("transa_conjg", {"ta": "X"}, ALL, INVALID_VALUE,
     "cublasGemmEx: INVALID_VALUE if transa, transb is not CUBLAS_OP_N, CUBLAS_OP_C or CUBLAS_OP_T; "
     "cublasLtMatmul: a descriptor in an impossible configuration is INVALID_VALUE"),
    ("lda_too_small", {"apad": -1}, ALL, INVALID_VALUE,
     "cublasGemmEx: INVALID_VALUE if lda < max(1, m) (transa N) or max(1, k) (otherwise); "
     "cublasLtMatrixLayoutAttribute_t LD: at least the rows of a column-major matrix"),
    ("ldb_too_small", {"bpad": -1}, ALL, INVALID_VALUE, "same for ldb: max(1, k) (transb N) or max(1, n)"),
    ("ldc_too_small", {"cpad": -1}, ALL, INVALID_VALUE, "same for ldc: max(1, m)"),
    ("bf16_fast_16bf", {"compute": "32f_fast_16bf"}, ALL, NOT_SUPPORTED,
     "cublasComputeType_t: CUBLAS_COMPUTE_32F_FAST_16BF is for 32-bit input and output matrices; "
     "cublasGemmEx and cublasLtMatmul type tables list it with CUDA_R_32F A/B/C only"),
    ("bf16_fast_tf32", {"compute": "32f_fast_tf32"}, ALL, NOT_SUPPORTED,
     "same for CUBLAS_COMPUTE_32F_FAST_TF32"),
    ("a_bf16_b_fp16", {"bt": "fp16"}, ALL, NOT_SUPPORTED,
     "cublasGemmEx: NOT_SUPPORTED if the combination of Atype, Btype and Ctype is not supported "
     "(the table has A and B of one type)"),
    ("ab_bf16_c_fp16", {"c": "fp16"}, ALL, NOT_SUPPORTED,
     "same: bf16 A/B take C in bf16 or fp32 only"),
    ("bf16_compute_64f", {"compute": "64f"}, ALL, NOT_SUPPORTED, "same: CUBLAS_COMPUTE_64F takes fp64 only"),
    ("bf16_compute_16f", {"compute": "16f"}, ALL, NOT_SUPPORTED, "same: CUBLAS_COMPUTE_16F takes fp16 only"),
    ("algo_unknown", {"algo": 9999}, GEMM_FAMILY, NOT_SUPPORTED,
     "cublasGemmEx: NOT_SUPPORTED if the algorithm, algo, is not supported (cublasGemmAlgo_t values)"),
    ("inplace_ldd_differs", {"dpad": 2}, LT, INVALID_VALUE,
     "cublasLtMatmul: in-place multiplication is C == D with Cdesc == Ddesc; anything else in conflict "
     "is INVALID_VALUE"),
    ("outofplace_d_type_differs", {"oop": 1, "dt": "fp16"}, LT, INVALID_VALUE,
     "cublasLtMatmul: out of place, C and D must have the same data type, rows, columns, batch size "
     "and order"),
    ("bias_fp32_on_bf16_d", {"epi": "bias", "bias": "fp32"}, LT, NOT_SUPPORTED,
     "cublasLtMatmulDescAttributes_t BIAS_DATA_TYPE and the cublasLtMatmul type table: outside fp8 "
     "the bias is D's type"),
    ("scale_type_bf16", {"scale": "bf16"}, LT, NOT_SUPPORTED,
     "cublasLtMatmul type table: COMPUTE_32F takes scaleType CUDA_R_32F"),
    # Unusual but valid: cuBLAS runs them; a route must give the same result or decline.
    ("row_major_lt", {"order": "row"}, LT, SUCCESS, "cublasLtOrder_t: CUBLASLT_ORDER_ROW is a layout order"),
    ("bias_per_member", {"epi": "bias", "batch": 3, "bstride": 64}, LT, SUCCESS,
     "cublasLtMatmulDescAttributes_t BIAS_BATCH_STRIDE: one bias vector per batch member"),
    ("c_fp32_ab_bf16", {"c": "fp32"}, ALL, SUCCESS, "cublasGemmEx table: bf16 A/B with fp32 C"),
]

MODES = {
    "native": {"GEMMSHIM_MODE": "native"},
    "auto": {},
    "ffma": {"GEMMSHIM_MODE": "ffma", "GEMMSHIM_FFMA_MIN_FLOPS": "0"},
    "fp8": {"GEMMSHIM_MODE": "fp8"},
}


def catalogue_args():
    args = []
    for name, keys, apis, _, _ in CATALOGUE:
        for api in apis:
            kw = {"name": f"{name}.{api}", "api": api}
            if api in BATCHED:
                kw["batch"] = 3
            kw.update(keys)
            args.append("--gemm=" + ",".join(f"{k}={v}" for k, v in kw.items()))
    return args


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "ffma_client_cu13"
    require_built([path])
    return path


def statuses(r):
    return {c["name"]: (int(c["status"]), c["ok"]) for c in r.calls}


@pytest.fixture(scope="module", params=["6.1", "9.0"])
def native(request, client, standin):
    """Every catalogue call without the shim: the statuses to match."""
    cc = request.param
    r = run([client, *catalogue_args()], standin[13], env={"STANDIN_CC": cc})
    got = statuses(r)
    assert len(got) == len(catalogue_args()), r.describe()
    return cc, got, r


def test_the_stand_in_answers_as_documented(native):
    """Without the shim, the stand-in gives each entry the documentation's
    status (its checks follow the same sections), and refused calls write
    nothing."""
    cc, got, r = native
    for name, _, apis, want, source in CATALOGUE:
        for api in apis:
            status, ok = got[f"{name}.{api}"]
            assert (status, ok) == (want, "1"), (cc, name, api, status, ok, source)


@pytest.mark.parametrize("mode", list(MODES))
def test_every_route_gives_the_native_status(native, client, standin, tmp_path, mode):
    cc, want, _ = native
    log = tmp_path / "gemms.jsonl"
    r = run([client, *catalogue_args()], standin[13], shim=True,
            env={"STANDIN_CC": cc, "GEMMSHIM_LOG": str(log), **MODES[mode]})
    got = statuses(r)
    # A refused call must leave its output as it was (ok=1); a call cuBLAS
    # runs is held to its status only: fp8 results are not the client's
    # exact ones (test_fp8_route.py checks their accuracy).
    def same(name):
        if name not in got:
            return False
        return got[name] == want[name] if want[name][0] != SUCCESS else got[name][0] == SUCCESS
    wrong = {name: (got.get(name), want[name]) for name in want if not same(name)}
    assert not wrong, f"{cc} {mode}: (shim, native) differ: {wrong}\n{r.describe()}"
    recs = read_log(log)
    by_name = dict(zip((c["name"] for c in r.calls), recs))
    assert len(recs) == len(want)
    for name, (status, _) in want.items():
        rec = by_name[name]
        assert rec["status"] == status, (name, rec)
        # A refused call ran native: cuBLAS itself answered.
        if status != SUCCESS:
            assert rec["route"] == "native", (name, rec)
