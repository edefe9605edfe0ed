"""GEMMSHIM_LOG placeholders: %p (pid), %r (rank from RANK or LOCAL_RANK),
%% (a literal %), and no file from a process that ran no GEMM."""

import pytest

from harness import client_argv, read_log, run_ok

ARGS = ("--case=gemm_bf16_nn,lt_fp32_nt", "--invalid=0")


def files(d):
    return sorted(p.name for p in d.iterdir())


def test_pid_placeholder(shim, standin, tmp_path):
    r = run_ok(client_argv("linked", 12, *ARGS), standin[12], shim=True,
               env={"GEMMSHIM_LOG": str(tmp_path / "gemms.%p.jsonl")})
    assert files(tmp_path) == [f"gemms.{r.pid}.jsonl"]
    assert [x["api"] for x in read_log(tmp_path / f"gemms.{r.pid}.jsonl")] == ["cublasGemmEx", "cublasLtMatmul"]


@pytest.mark.parametrize("env,name", [
    ({"RANK": "3"}, "rank3.jsonl"),
    ({"RANK": "3", "LOCAL_RANK": "1"}, "rank3.jsonl"),
    ({"LOCAL_RANK": "5"}, "rank5.jsonl"),
    ({}, "rank0.jsonl"),
    ({"RANK": "not-a-number"}, "rank0.jsonl"),
])
def test_rank_placeholder(shim, standin, tmp_path, env, name):
    run_ok(client_argv("xla", 13, *ARGS), standin[13], shim=True,
           env={**env, "GEMMSHIM_LOG": str(tmp_path / "rank%r.jsonl")})
    assert files(tmp_path) == [name]
    assert len(read_log(tmp_path / name)) == 2


def test_percent_escape(shim, standin, tmp_path):
    run_ok(client_argv("framework", 12, *ARGS), standin[12], shim=True,
           env={"GEMMSHIM_LOG": str(tmp_path / "100%%.jsonl")})
    assert files(tmp_path) == ["100%.jsonl"]


def test_no_gemm_no_file(shim, standin, tmp_path):
    r = run_ok(client_argv("linked", 13, "--case=gemm_bf16_nn", "--valid=0", "--invalid=0"), standin[13],
               shim=True, env={"GEMMSHIM_LOG": str(tmp_path / "gemms.jsonl")})
    assert r.calls == []
    assert files(tmp_path) == []
