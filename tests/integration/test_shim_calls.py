"""The shim over the stand-in, on a device where everything runs native
(STANDIN_CC=9.0): the program cannot tell it is there, and the routing log
has exactly one record per top-level call, with the arguments the client
passed, under every loading pattern and both cuBLAS majors."""

import pytest

from harness import (
    CUDA_MAJORS,
    PATTERNS,
    assert_record_matches_call,
    client_argv,
    read_log,
    run_ok,
    stable_lines,
    standin_counts,
)

NATIVE_RULE = "policy: built-in rule 3 (native)"
STATUS_NAMES = {0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 7: "CUBLAS_STATUS_INVALID_VALUE"}
GEMMEX_FAMILY_NULL_HANDLE = {
    "inv_gemm_null_handle", "inv_gemm64_null_handle", "inv_strided64_null_handle", "inv_batched_null_handle"}
LT_NULL_DESCRIPTORS = {"inv_lt_null_matmul_desc", "inv_lt_null_layouts"}


def run_with_and_without(standin, tmp_path, argv, cuda, env):
    base = run_ok(argv, standin[cuda], env=env)
    log = tmp_path / "gemms.jsonl"
    shimmed = run_ok(argv, standin[cuda], shim=True, env={**env, "GEMMSHIM_LOG": str(log)})
    return base, shimmed, read_log(log)


def assert_seq_increasing(recs):
    seqs = [r["seq"] for r in recs]
    assert all(a < b for a, b in zip(seqs, seqs[1:])), seqs


@pytest.mark.parametrize("cuda", CUDA_MAJORS)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_native_shim_is_invisible_and_logs_every_call(shim, standin, tmp_path, pattern, cuda):
    base, shimmed, recs = run_with_and_without(standin, tmp_path, client_argv(pattern, cuda), cuda,
                                               {"STANDIN_CC": "9.0"})
    # Same statuses, same output bytes (hashes), nothing on stderr.
    assert stable_lines(shimmed) == stable_lines(base)
    assert shimmed.stderr == base.stderr == ""
    calls = shimmed.calls
    assert len(recs) == len(calls), shimmed.describe()
    assert_seq_increasing(recs)
    streams = set()
    for rec, call in zip(recs, calls):
        assert rec["decided"] == rec["route"] == "native", rec
        assert rec["status_name"] == STATUS_NAMES[rec["status"]], rec
        if call["case"] in LT_NULL_DESCRIPTORS:
            assert_partly_decoded(rec, call)
            # The first NULL argument, by cublasLtMatmul's parameter names (cublasLt.h).
            null = "computeDesc" if call["case"] == "inv_lt_null_matmul_desc" else "Adesc"
            assert rec["reason"] == f"{NATIVE_RULE}; arguments could not be decoded: {null} is NULL", rec
            assert (rec["device"], rec["sm"]) == (0, "9.0"), rec
            continue
        assert_record_matches_call(rec, call)
        if call["case"] in GEMMEX_FAMILY_NULL_HANDLE:
            # No handle, no stream: the device cannot be known, and no rule
            # with an sm key can match.
            assert (rec["device"], rec["sm"], rec["stream"]) == (-1, None, "0x0"), rec
            assert rec["reason"] == NATIVE_RULE + "; device unknown: NULL cuBLAS handle", rec
            assert "pointer_mode" not in rec, rec
        else:
            assert (rec["device"], rec["sm"]) == (0, "9.0"), rec
            assert rec["reason"] == NATIVE_RULE, rec
            assert rec["pointer_mode"] == "host", rec
            streams.add(rec["stream"])
    # One handle, one stream: the GemmEx family's (asked of the handle) and
    # the Lt calls' (an argument) are the same non-NULL stream.
    assert len(streams) == 1 and streams != {"0x0"}, streams


def assert_partly_decoded(rec, call):
    """An Lt call missing descriptors: forwarded as it came, with what the
    descriptors that were there say, and -1 / unknown(-1) for the rest."""
    assert (rec["api"], rec["status"]) == (call["api"], int(call["status"]))
    unknown = "unknown(-1)"
    if call["case"] == "inv_lt_null_matmul_desc":
        # The layouts give the shape and types, not op(A): no k, no transposes.
        assert (rec["m"], rec["n"], rec["k"], rec["batch"]) == (int(call["m"]), int(call["n"]), -1, 1), rec
        assert (rec["transa"], rec["transb"], rec["compute_type"], rec["epilogue"]) == (unknown,) * 4, rec
        assert (rec["a_type"], rec["lda"], rec["ldd"]) == (call["a"], int(call["lda"]), int(call["ldc"])), rec
    else:
        # The matmul descriptor alone: transposes and epilogue, no shape.
        assert (rec["m"], rec["n"], rec["k"], rec["batch"]) == (-1, -1, -1, -1), rec
        assert (rec["transa"], rec["transb"], rec["compute_type"], rec["epilogue"]) == (
            call["transa"], call["transb"], "32f", call["epilogue"]), rec
        assert (rec["a_type"], rec["lda"]) == (unknown, -1), rec


@pytest.mark.parametrize("cuda", CUDA_MAJORS)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_nested_calls_are_not_logged(shim, standin, tmp_path, pattern, cuda):
    """The stand-in's GemmEx family runs through its own cublasLtMatmul,
    called through the PLT, so the shim's cublasLtMatmul sees those calls
    too. Only the program's own calls become records."""
    counts = tmp_path / "counts.txt"
    argv = client_argv(pattern, cuda, "--invalid=0")
    base, shimmed, recs = run_with_and_without(
        standin, tmp_path, argv, cuda, {"STANDIN_CC": "9.0", "STANDIN_COUNTS": str(counts)})
    assert stable_lines(shimmed) == stable_lines(base)
    calls = shimmed.calls
    client_lt = sum(c["api"] == "cublasLtMatmul" for c in calls)
    # counts holds the shimmed run's numbers (the file is emptied at load).
    lt_calls = standin_counts(counts)["cublasLtMatmul"]
    assert lt_calls > client_lt, (lt_calls, client_lt)
    assert [r["api"] for r in recs] == [c["api"] for c in calls]


@pytest.mark.parametrize("cuda", CUDA_MAJORS)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_invalid_calls_are_forwarded(shim, standin, tmp_path, pattern, cuda):
    """cuBLAS answers invalid arguments; the shim passes its answer on."""
    base, shimmed, recs = run_with_and_without(standin, tmp_path, client_argv(pattern, cuda, "--valid=0"),
                                               cuda, {"STANDIN_CC": "9.0"})
    want = [(c["case"], c["status"]) for c in base.calls]
    assert [(c["case"], c["status"]) for c in shimmed.calls] == want
    assert all(c["status"] != "0" and c["ok"] == "1" for c in shimmed.calls)
    assert [(r["api"], r["status"]) for r in recs] == [(c["api"], int(c["status"])) for c in shimmed.calls]
