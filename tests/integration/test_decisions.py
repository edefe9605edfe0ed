"""Route decisions: the built-in policy on a Pascal-class device (sm 6.1)
and a Hopper one (9.0), GEMMSHIM_MODE, policy files, and what bad
configuration does (one clear stderr line, then pass-through)."""

import pytest

import cost_model
from harness import client_argv, read_log, run_ok, stable_lines

FFMA_RULE = "policy: built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)"
NATIVE_RULE = "policy: built-in rule 3 (native)"
PASS_THROUGH = "pass-through: bad configuration (see the shim's first warning)"
NULL_HANDLE = "device unknown: NULL cuBLAS handle"
NOT_DECODED = "arguments could not be decoded"
GEMMEX_NULL_HANDLE = {
    "inv_gemm_null_handle", "inv_gemm64_null_handle", "inv_strided64_null_handle", "inv_batched_null_handle"}
LT_NULL_DESCRIPTORS = {"inv_lt_null_matmul_desc", "inv_lt_null_layouts"}

# Why the ffma route hands a call back (routes/ffma.c), by the client's case.
FORWARDED_NEGATIVE = "negative size (forwarded for cuBLAS's own error)"
FORWARDED_NULL = "NULL handle or pointer (forwarded for cuBLAS's own error)"
DECLINE_BY_CASE = {
    "inv_gemm_neg_m": FORWARDED_NEGATIVE,
    "inv_strided_neg_batch": FORWARDED_NEGATIVE,
    "inv_lt_null_handle": FORWARDED_NULL,
}


def declined(why):
    return f"ffma declined: {why}; ran native"


def is_bf16_32f(call):
    return call["a"] == call["b"] == "bf16" and call["compute"] == "32f"


def expected_on_sm61(call, min_flops_zero):
    """(decided, route, reason) the built-in policy gives a call on sm 6.1."""
    if call["case"] in GEMMEX_NULL_HANDLE:
        # sm unknown: the ffma rule has an sm key and cannot match.
        return "native", "native", f"{NATIVE_RULE}; {NULL_HANDLE}"
    if call["case"] in LT_NULL_DESCRIPTORS:
        # The first NULL argument, by cublasLtMatmul's parameter names (cublasLt.h).
        null = "computeDesc" if call["case"] == "inv_lt_null_matmul_desc" else "Adesc"
        return "native", "native", f"{NATIVE_RULE}; {NOT_DECODED}: {null} is NULL"
    if not is_bf16_32f(call):
        return "native", "native", NATIVE_RULE
    if call["case"] in DECLINE_BY_CASE:
        return "ffma", "native", f"{FFMA_RULE}; {declined(DECLINE_BY_CASE[call['case']])}"
    if call["k"] == "0":
        return "ffma", "native", f"{FFMA_RULE}; {declined('empty GEMM: nothing to cast')}"
    if not min_flops_zero:
        e = cost_model.estimate("6.1", "ffma", int(call["m"]), int(call["n"]), int(call["k"]), int(call["batch"]),
                                call["a"], call["c"], float(call["beta"]))
        assert e["speedup"] < 1, e
        return "ffma", "native", f"{FFMA_RULE}; {declined(cost_model.decline_reason('ffma', e))}"
    return "ffma", "ffma", FFMA_RULE


def backend_of(rec):
    """The ffma route runs an fp32 GEMM: cublas*GemmEx for the GemmEx family,
    cuBLASLt for Lt calls; native records name no backend."""
    if rec["route"] != "ffma":
        return None
    return "lt-fp32" if rec["api"] == "cublasLtMatmul" else "sgemm"


def shim_run(standin, tmp_path, argv, cuda, env):
    """Runs in tmp_path, so a policy file can be named relative to it: the
    rule's description in each reason stays short (reasons are cut at
    GS_REASON_MAX, 160 bytes)."""
    log = tmp_path / "gemms.jsonl"
    r = run_ok(argv, standin[cuda], shim=True, env={**env, "GEMMSHIM_LOG": str(log)}, cwd=tmp_path)
    recs = read_log(log)
    assert [x["api"] for x in recs] == [c["api"] for c in r.calls], r.describe()
    return r, recs


@pytest.mark.parametrize("pattern,cuda", [("linked", 12), ("framework", 12), ("xla", 13)])
def test_builtin_policy_on_sm61_small_gemms_stay_native(shim, standin, tmp_path, pattern, cuda):
    """bf16 x bf16 with compute 32F is decided ffma on sm 6.1; these GEMMs
    are far too small for the ffma route to pay (its cost model, docs/cost-model.md,
    estimates each), so the route declines and each runs
    native, byte for byte what cuBLAS alone computes."""
    argv = client_argv(pattern, cuda)
    env = {"STANDIN_CC": "6.1"}
    base = run_ok(argv, standin[cuda], env=env)
    r, recs = shim_run(standin, tmp_path, argv, cuda, env)
    assert stable_lines(r) == stable_lines(base)
    assert r.stderr == ""
    for rec, call in zip(recs, r.calls):
        assert (rec["decided"], rec["route"], rec["reason"]) == expected_on_sm61(call, False), (rec, call)
        assert "backend" not in rec, rec
        if call["case"] not in GEMMEX_NULL_HANDLE:
            assert (rec["device"], rec["sm"]) == (0, "6.1"), rec
    assert {rec["decided"] for rec in recs} == {"ffma", "native"}


@pytest.mark.parametrize("pattern,cuda", [("linked", 13), ("framework", 13), ("xla", 12)])
def test_builtin_policy_on_sm61_runs_bf16_through_ffma(shim, standin, tmp_path, pattern, cuda):
    """With no size floor the bf16 GEMMs take the ffma route; the client's
    float64 check still passes for every one (ok=1), statuses unchanged."""
    argv = client_argv(pattern, cuda)
    env = {"STANDIN_CC": "6.1", "GEMMSHIM_GATE": "off"}
    base = run_ok(argv, standin[cuda], env=env)
    r, recs = shim_run(standin, tmp_path, argv, cuda, env)
    assert r.stderr == ""
    calls = r.calls
    assert [(c["case"], c["status"], c["ok"]) for c in calls] == [(c["case"], c["status"], "1") for c in base.calls]
    for rec, call in zip(recs, calls):
        assert (rec["decided"], rec["route"], rec["reason"]) == expected_on_sm61(call, True), (rec, call)
        assert rec.get("backend") == backend_of(rec), rec
    ran_ffma = {c["api"] for rec, c in zip(recs, calls) if rec["route"] == "ffma"}
    assert ran_ffma == {"cublasGemmEx", "cublasGemmEx_64", "cublasGemmStridedBatchedEx",
                        "cublasGemmStridedBatchedEx_64", "cublasGemmBatchedEx", "cublasGemmBatchedEx_64",
                        "cublasLtMatmul"}
    # Natively routed calls still compute exactly what cuBLAS alone does.
    for rec, call, b in zip(recs, calls, base.calls):
        if rec["route"] == "native":
            assert call == b, (call, b)


def test_sm90_is_all_native(shim, standin, tmp_path):
    r, recs = shim_run(standin, tmp_path, client_argv("linked", 12, "--invalid=0"), 12, {"STANDIN_CC": "9.0"})
    assert {(x["decided"], x["route"], x["reason"], x["sm"]) for x in recs} == {
        ("native", "native", NATIVE_RULE, "9.0")}
    assert any(is_bf16_32f(c) for c in r.calls)


def test_mode_native_overrides_the_policy(shim, standin, tmp_path):
    argv = client_argv("framework", 12)
    env = {"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "native", "GEMMSHIM_GATE": "off"}
    base = run_ok(argv, standin[12], env=env)
    r, recs = shim_run(standin, tmp_path, argv, 12, env)
    assert stable_lines(r) == stable_lines(base)
    assert r.stderr == ""
    for rec, call in zip(recs, r.calls):
        assert (rec["decided"], rec["route"], rec["reason"]) == ("native", "native", "GEMMSHIM_MODE=native")
        # The log still says where each call ran.
        want = (-1, None) if call["case"] in GEMMEX_NULL_HANDLE else (0, "6.1")
        assert (rec["device"], rec["sm"]) == want, rec


def test_policy_file_rules_go_first(shim, standin, tmp_path):
    policy = tmp_path / "p.txt"
    policy.write_text("# keep bf16 native on this Pascal\n\nnative ab=bf16\n")
    r, recs = shim_run(standin, tmp_path, client_argv("linked", 13, "--invalid=0"), 13,
                       {"STANDIN_CC": "6.1", "GEMMSHIM_POLICY": policy.name})
    assert r.stderr == ""
    for rec, call in zip(recs, r.calls):
        rule = "policy: p.txt:3 (native ab=bf16)" if call["a"] == "bf16" else NATIVE_RULE
        assert (rec["decided"], rec["route"], rec["reason"]) == ("native", "native", rule), rec


def test_policy_file_sends_fp16_to_ffma_on_sm90(shim, standin, tmp_path):
    policy = tmp_path / "p.txt"
    policy.write_text("ffma sm=9.0 ab=fp16 compute=32f\n")
    argv = client_argv("xla", 13, "--invalid=0")
    env = {"STANDIN_CC": "9.0", "GEMMSHIM_POLICY": policy.name, "GEMMSHIM_GATE": "off"}
    r, recs = shim_run(standin, tmp_path, argv, 13, env)
    assert r.stderr == ""
    assert all(c["ok"] == "1" for c in r.calls)
    rule = "policy: p.txt:1 (ffma sm=9.0 ab=fp16 compute=32f)"
    for rec, call in zip(recs, r.calls):
        if call["a"] != "fp16":
            want = ("native", "native", NATIVE_RULE)
        elif call["api"] in ("cublasGemmBatchedEx", "cublasGemmBatchedEx_64") and call["c"] == "fp32":
            want = ("ffma", "native", f"{rule}; {declined('pointer-array batch with fp32 C')}")
        else:
            want = ("ffma", "ffma", rule)
        assert (rec["decided"], rec["route"], rec["reason"]) == want, rec
        assert rec.get("backend") == backend_of(rec), rec
    assert {c["api"] for rec, c in zip(recs, r.calls) if rec["route"] == "ffma"} == {
        "cublasGemmEx", "cublasGemmStridedBatchedEx_64", "cublasLtMatmul"}


def test_policy_builtin_off_leaves_unmatched_calls_native(shim, standin, tmp_path):
    policy = tmp_path / "p.txt"
    policy.write_text("builtin off\nnative ab=bf16\n")
    r, recs = shim_run(standin, tmp_path, client_argv("linked", 12, "--invalid=0"), 12,
                       {"STANDIN_CC": "6.1", "GEMMSHIM_POLICY": policy.name})
    for rec, call in zip(recs, r.calls):
        reason = "policy: p.txt:2 (native ab=bf16)" if call["a"] == "bf16" else "policy: no rule matched"
        assert (rec["decided"], rec["route"], rec["reason"]) == ("native", "native", reason), rec


def assert_pass_through(standin, tmp_path, env, cuda=12):
    """Bad configuration: exactly one stderr line, then every call native and
    unchanged, exit status 0."""
    argv = client_argv("linked", cuda)
    base = run_ok(argv, standin[cuda], env={"STANDIN_CC": "6.1"})
    r, recs = shim_run(standin, tmp_path, argv, cuda, {"STANDIN_CC": "6.1", **env})
    assert stable_lines(r) == stable_lines(base)
    assert len(recs) == len(r.calls)
    for rec in recs:
        assert (rec["decided"], rec["route"], rec["reason"]) == ("native", "native", PASS_THROUGH), rec
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].endswith("; running pass-through (every GEMM native, still logged)"), lines[0]
    return lines[0]


def test_bad_mode_is_reported_once_and_passes_through(shim, standin, tmp_path):
    line = assert_pass_through(standin, tmp_path, {"GEMMSHIM_MODE": "turbo"})
    assert " GEMMSHIM_MODE='turbo': expected auto, native, ffma, fp8 or fp16;" in line, line


def test_malformed_policy_names_file_and_line(shim, standin, tmp_path):
    policy = tmp_path / "p.txt"
    policy.write_text("native ab=fp32\nturbo ab=bf16\n")
    line = assert_pass_through(standin, tmp_path, {"GEMMSHIM_POLICY": str(policy)})
    assert f" {policy}:2: unknown route 'turbo'; expected native, ffma, fp8 or fp16;" in line, line


def test_missing_policy_file_is_named(shim, standin, tmp_path):
    policy = tmp_path / "absent.txt"
    line = assert_pass_through(standin, tmp_path, {"GEMMSHIM_POLICY": str(policy)})
    assert f" GEMMSHIM_POLICY='{policy}': cannot open (No such file or directory);" in line, line
