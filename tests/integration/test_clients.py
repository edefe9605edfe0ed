"""The clients over the stand-in, without the shim: the baseline every shim
test compares against. If these fail, the clients or the stand-in are wrong,
not the shim."""

import signal

import pytest

from harness import (
    APIS,
    CUBLAS_STATUS_INVALID_VALUE,
    CUBLAS_STATUS_NOT_INITIALIZED,
    CUDA_MAJORS,
    PATTERNS,
    client_argv,
    run,
    run_ok,
)

# cuBLAS documents NOT_INITIALIZED for a NULL handle and INVALID_VALUE for a
# negative size or a leading dimension below max(1, rows); cuBLASLt answers
# INVALID_VALUE for missing layouts (a missing computeDesc kills the
# process: test_null_matmul_desc_dies_as_cublaslt_does).
INVALID_STATUS = {
    "inv_gemm_neg_m": CUBLAS_STATUS_INVALID_VALUE,
    "inv_gemm_lda_small": CUBLAS_STATUS_INVALID_VALUE,
    "inv_gemm_null_handle": CUBLAS_STATUS_NOT_INITIALIZED,
    "inv_gemm64_null_handle": CUBLAS_STATUS_NOT_INITIALIZED,
    "inv_strided_neg_batch": CUBLAS_STATUS_INVALID_VALUE,
    "inv_strided64_null_handle": CUBLAS_STATUS_NOT_INITIALIZED,
    "inv_batched_null_handle": CUBLAS_STATUS_NOT_INITIALIZED,
    "inv_batched64_ldc_small": CUBLAS_STATUS_INVALID_VALUE,
    "inv_lt_null_handle": CUBLAS_STATUS_NOT_INITIALIZED,
    "inv_lt_null_layouts": CUBLAS_STATUS_INVALID_VALUE,
}


def case_names(clients, standin):
    r = run_ok(client_argv("linked", 13, "--list"), standin[13])
    valid = [w[1] for w in r.lines("case")]
    # named-only cases kill the process (cuBLASLt 13.1 did on an H200):
    # a default run leaves them out
    invalid = [w[1] for w in r.lines("invalid") if "named-only" not in w[2:]]
    return valid, invalid


@pytest.mark.parametrize("cuda", CUDA_MAJORS)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_call_checks_out(clients, standin, pattern, cuda):
    r = run_ok(client_argv(pattern, cuda), standin[cuda], env={"STANDIN_CC": "9.0"})
    valid, invalid = case_names(clients, standin)
    calls = r.calls
    assert [c["case"] for c in calls] == valid + invalid, r.describe()
    assert all(c["ok"] == "1" for c in calls), r.describe()
    for c in calls:
        if c["kind"] == "valid":
            assert c["status"] == "0", c
        else:
            assert int(c["status"]) == INVALID_STATUS[c["case"]], c
    # Every entry point, every operand type, transposes, k == 0, beta != 0,
    # batches and the Lt epilogues are covered.
    ran = [c for c in calls if c["kind"] == "valid"]
    assert {c["api"] for c in ran} == set(APIS)
    assert {c["a"] for c in ran} == {"bf16", "fp16", "fp32"}
    assert {(c["transa"], c["transb"]) for c in ran} == {("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")}
    assert any(c["k"] == "0" for c in ran)
    assert any(int(c["batch"]) > 1 for c in ran if c["api"] == "cublasLtMatmul")
    assert {c["epilogue"] for c in ran if c["api"] == "cublasLtMatmul"} == {
        "default", "bias", "relu_bias", "gelu_bias"}
    assert r.lines("summary") == [["summary", f"calls={len(calls)}", "failed=0"]]


@pytest.mark.parametrize("cuda", CUDA_MAJORS)
def test_patterns_compute_the_same(clients, standin, cuda):
    """Same seed, same calls, same bytes, whichever way cuBLAS was loaded."""
    runs = {p: run_ok(client_argv(p, cuda), standin[cuda], env={"STANDIN_CC": "9.0"}) for p in PATTERNS}
    assert runs["linked"].calls == runs["framework"].calls == runs["xla"].calls


@pytest.mark.parametrize("pattern", ["framework", "xla"])
def test_dlopen_patterns_keep_cublas_out_of_the_global_scope(clients, standin, pattern):
    """What makes patterns 2 and 3 hard for an interposer: cuBLAS is loaded
    but a global lookup (RTLD_DEFAULT, RTLD_NEXT) cannot see it."""
    r = run_ok(client_argv(pattern, 12, "--valid=0", "--invalid=0"), standin[12])
    assert r.lines("global_scope") == [["global_scope", "cublasLtCreate=absent"]]


@pytest.mark.parametrize("cc", ["6.1", "9.0"])
def test_standin_reports_the_capability_asked_for(clients, standin, cc):
    r = run_ok(client_argv("linked", 12, "--case=gemm_fp32_nt", "--invalid=0"), standin[12],
               env={"STANDIN_CC": cc})
    assert r.device == {"ordinal": "0", "sm": cc}


def test_operands_are_random_per_seed(clients, standin):
    """Outputs depend on the data: two seeds give different bytes for every
    call that writes something (so equal hashes elsewhere mean something)."""
    a = run_ok(client_argv("linked", 13, "--seed=1", "--invalid=0"), standin[13]).calls
    b = run_ok(client_argv("linked", 13, "--seed=2", "--invalid=0"), standin[13]).calls
    assert [c["case"] for c in a] == [c["case"] for c in b]
    for x, y in zip(a, b):
        # k == 0 with beta == 0 writes zeros whatever the data.
        if x["k"] == "0" and float(x["beta"]) == 0.0:
            assert x["hash"] == y["hash"], (x, y)
        else:
            assert x["hash"] != y["hash"], (x, y)


def test_filters_select_entry_points_types_and_shapes(clients, standin):
    r = run_ok(client_argv("xla", 12, "--api=cublasGemmEx,cublasGemmStridedBatchedEx", "--type=fp32",
                           "--shape=40x30x50", "--invalid=0"), standin[12])
    got = [(c["api"], c["case"], c["m"], c["n"], c["k"], c["ok"]) for c in r.calls]
    assert got == [
        ("cublasGemmEx", "gemm_fp32_nt", "40", "30", "50", "1"),
        ("cublasGemmEx", "gemm_fp32_k0_beta", "40", "30", "0", "1"),
        ("cublasGemmStridedBatchedEx", "strided_fp32_tn", "40", "30", "50", "1"),
    ]


def test_bad_arguments_are_usage_errors(clients, standin):
    r = run(client_argv("linked", 12, "--api=cublasNothing"), standin[12])
    assert r.returncode == 2 and r.calls == []
    r = run(client_argv("framework", 14), standin[12])
    assert r.returncode == 2 and "--cuda must be 12 or 13" in r.stderr


def test_threads_each_with_own_handle(clients, standin):
    r = run_ok(client_argv("linked", 12, "--threads=16", "--iters=6"), standin[12], env={"STANDIN_CC": "9.0"})
    calls = r.calls
    assert [c["index"] for c in calls] == [f"{t}.{j}" for t in range(16) for j in range(6)]
    assert all(c["ok"] == "1" and c["status"] == "0" for c in calls)
    assert {c["api"] for c in calls} == set(APIS)


@pytest.mark.parametrize("shim", [False, True], ids=["native", "shim"])
def test_null_matmul_desc_dies_as_cublaslt_does(clients, standin, shim):
    """cuBLAS's docs promise INVALID_VALUE for NULL parameters, but cuBLASLt
    13.1 on an H200 dereferenced a NULL computeDesc: the process died of
    SIGSEGV (docs/gpu-results.md). The stand-in does the same, and the shim
    passes the call through unchanged: it neither hides nor adds the crash."""
    argv = client_argv("linked", 13, "--case=inv_lt_null_matmul_desc", "--valid=0")
    r = run(argv, standin[13], shim=shim, timeout=60)
    # Under ASan or TSan the sanitizer catches the SIGSEGV, reports it and
    # exits with its own status.
    assert r.returncode == -signal.SIGSEGV or (r.returncode > 0 and "SEGV on unknown address" in r.stderr), \
        r.describe()
    assert "computeDesc is NULL: the real cuBLASLt dereferences it" in r.stderr
