"""Accuracy of compared calls (GEMMSHIM_COMPARE, shim/accuracy.c,
kernels/accuracy.cu) and the accuracy guard (GEMMSHIM_GUARD_SQNR,
shim/guard.c), over the stand-in.

Expected values come from outside the shim: the SQNR is torchao's
compute_error (torchao/float8/float8_utils.py: 20 log10(||x|| / ||x - y||),
x the reference), computed here in float64 with numpy from the two outputs
the client dumps (the routed run's and a run without the shim on the same
seeded data); the relative-error quantiles from the same arrays, to the
histogram's documented resolution (bins of 2^(1/4), docs/log-format.md)."""

import numpy as np
import pytest

from harness import CLIENT_DIR, read_log, require_built, run

FP8 = {"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off"}
FFMA = {"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off"}
COMPARE = {"GEMMSHIM_COMPARE": "1", "GEMMSHIM_COMPARE_EVERY": "1"}
QUARTER = 2 ** 0.25


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "ffma_client_cu13"
    require_built([path])
    return path


def gemm(**kw):
    return "--gemm=" + ",".join(f"{k}={v}" for k, v in kw.items())


def routed(client, standin, tmp_path, args, env, name="shim"):
    log = tmp_path / f"{name}.jsonl"
    out = tmp_path / name
    out.mkdir()
    r = run([client, *args, f"--dump={out}", f"--wait-log={log}"], standin[13], shim=True,
            env={**env, "GEMMSHIM_LOG": str(log)})
    assert "standin:" not in r.stderr, r.describe()
    return r, read_log(log), out


def native(client, standin, tmp_path, args, cc):
    out = tmp_path / "native"
    out.mkdir()
    r = run([client, *args, f"--dump={out}"], standin[13], env={"STANDIN_CC": cc})
    assert r.returncode == 0, r.describe()
    return out


def load(path, typ):
    raw = path.read_bytes()
    if typ == "fp32":
        return np.frombuffer(raw, np.float32).astype(np.float64)
    return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def figures(route, ref):
    d = route - ref
    sqnr = 20 * np.log10(np.linalg.norm(ref) / np.linalg.norm(d))
    rel = np.abs(d) / np.maximum(np.abs(ref), np.float64(np.finfo(np.float32).tiny))
    return sqnr, np.abs(d).max() / np.abs(ref).max(), np.sort(rel)


def nearest_rank(sorted_rel, q):
    return sorted_rel[int(np.ceil(q * len(sorted_rel))) - 1]


# Dense outputs (pad=0, spad=0: the dumped buffer is the output, and
# 16-byte aligned, as cuBLASLt's fp8 GEMM needs), beta=0 (C is not read, so
# the native run after the route is the call's GEMM); k a multiple of 16
# (cuBLASLt's fp8 GEMM: anything else runs native on sm_89+).
CALLS = [("a", "bf16", dict(m=64, n=48, k=80)), ("b", "fp32", dict(api="strided", c="fp32", batch=3, m=40, n=24, k=64)),
         ("c", "bf16", dict(api="lt", m=40, n=56, k=32))]


def test_sqnr_and_quantiles_agree_with_float64_of_both_outputs(client, standin, tmp_path, shim):
    args = [gemm(name=n, pad=0, spad=0, beta=0, **kw) for n, _, kw in CALLS]
    r, recs, out = routed(client, standin, tmp_path, args + ["--fp8"], {**FP8, **COMPARE})
    assert r.returncode == 0, r.describe()
    ref = native(client, standin, tmp_path, args, "9.0")
    assert [x["route"] for x in recs] == ["fp8"] * 3
    for (name, typ, _), rec in zip(CALLS, recs):
        route, nat = load(out / f"{name}.out", typ), load(ref / f"{name}.out", typ)
        sqnr, max_rel, rel = figures(route, nat)
        assert 15 < sqnr < 40, (name, sqnr)  # fp8 e4m3 of uniform data: a real error
        assert abs(rec["sqnr_db"] - sqnr) < 0.1, (name, rec, sqnr)
        assert rec["max_rel"] == pytest.approx(max_rel, rel=1e-3), (name, rec, max_rel)
        assert rec["nonfinite_mismatch"] == 0
        # A quantile is its bin's upper edge: within a factor 2^(1/4) above.
        for key, q in (("rel_err_p50", 0.5), ("rel_err_p99", 0.99)):
            exact = nearest_rank(rel, q)
            assert exact <= rec[key] * (1 + 1e-6) and rec[key] <= exact * QUARTER * (1 + 1e-6), (name, key, rec, exact)


def test_identical_outputs_are_written_as_inf_and_zero(client, standin, tmp_path, shim):
    # The stand-in's native bf16 GEMM accumulates in fp32 as the ffma route
    # does: both outputs are the same bits.
    _, recs, _ = routed(client, standin, tmp_path, [gemm(name="a", beta=0)], {**FFMA, **COMPARE})
    rec = recs[0]
    assert rec["route"] == "ffma"
    assert (rec["sqnr_db"], rec["max_rel"], rec["nonfinite_mismatch"], rec["rel_err_p50"], rec["rel_err_p99"]) == \
        ("inf", 0, 0, 0, 0)


FP16 = {"STANDIN_CC": "7.5", "GEMMSHIM_MODE": "fp16", "GEMMSHIM_GATE": "off"}


def load_typed(path, typ):
    if typ == "fp16":
        return np.frombuffer(path.read_bytes(), np.float16).astype(np.float64)
    return load(path, typ)


@pytest.mark.parametrize("env,types,mode", [(FFMA, dict(ab="bf16", c="bf16"), "ffma"),
                                            (FFMA, dict(ab="fp16", c="fp16"), "ffma"),
                                            (FFMA, dict(ab="bf16", c="fp32"), "ffma"),
                                            (FP16, dict(ab="bf16", c="bf16"), "fp16")])
def test_a_corrupted_route_result_gives_the_sqnr_of_its_error(client, standin, tmp_path, shim, env, types, mode):
    # GEMMSHIM_FAULT=route_output:1 zeroes the first column of the first
    # compared call's output: the error is that column, so the SQNR is
    # 10 log10(sum ref^2 / sum ref[:, 0]^2) of the reference alone.
    m, n = 64, 48
    typ = types["c"]
    args = [gemm(name="a", m=m, n=n, k=80, pad=0, beta=0, **types)]
    r, recs, out = routed(client, standin, tmp_path, args, {**env, **COMPARE, "GEMMSHIM_FAULT": "route_output:1"})
    ref = native(client, standin, tmp_path, args, env["STANDIN_CC"])
    nat = load_typed(ref / "a.out", typ).reshape(n, m)  # column-major: one row per column
    want = 10 * np.log10((nat ** 2).sum() / (nat[0] ** 2).sum())
    rec = recs[0]
    assert rec["route"] == mode, rec
    assert rec["reason"].startswith(f"GEMMSHIM_MODE={mode}") and \
        rec["reason"].endswith("GEMMSHIM_FAULT: route output corrupted"), rec
    assert abs(rec["sqnr_db"] - want) < 0.1 and want < 20, (rec, want)
    assert rec["max_rel"] == pytest.approx(np.abs(nat[0]).max() / np.abs(nat).max(), rel=1e-3)
    # m of the m*n elements are wrong by 100%: the median is exact, p99 in 1's bin.
    assert rec["rel_err_p50"] == 0 and rec["rel_err_p99"] == pytest.approx(QUARTER, rel=1e-3)
    # The caller got the corrupted result (a fault of the route's output).
    assert np.array_equal(load_typed(out / "a.out", typ).reshape(n, m)[0], np.zeros(m))


def test_in_place_c_read_is_not_measured_and_says_why(client, standin, tmp_path, shim):
    _, recs, _ = routed(client, standin, tmp_path, [gemm(name="a", beta=0.5)], {**FFMA, **COMPARE})
    rec = recs[0]
    assert rec["reason"] == ("GEMMSHIM_MODE=ffma; accuracy not measured: C is read (beta may be nonzero) "
                             "and the route wrote over it")
    assert "native_gpu_ns" in rec and "sqnr_db" not in rec


def test_guard_turns_one_site_native_after_one_bad_measurement(client, standin, tmp_path, shim):
    bad = gemm(name="bad", m=64, n=48, k=80, beta=0)
    good = gemm(name="good", m=32, n=48, k=80, beta=0)
    env = {**FFMA, **COMPARE, "GEMMSHIM_GUARD_SQNR": "20", "GEMMSHIM_FAULT": "route_output:1",
           "GEMMSHIM_DEBUG": "INFO"}
    r, recs, _ = routed(client, standin, tmp_path, [bad, bad, good, good, bad], env)
    assert [x["route"] for x in recs] == ["ffma", "native", "ffma", "ffma", "native"]
    assert recs[0]["site"] == recs[1]["site"] == recs[4]["site"] != recs[2]["site"]
    db = recs[0]["sqnr_db"]
    want = f"GEMMSHIM_MODE=ffma; ffma off for this site: measured {db:.1f} dB < GEMMSHIM_GUARD_SQNR 20 dB"
    assert recs[1]["reason"] == recs[4]["reason"] == want
    assert recs[2]["reason"] == recs[3]["reason"] == "GEMMSHIM_MODE=ffma"
    assert (f"summary: guarded site {recs[0]['site']} ffma off: measured {db:.1f} dB < GEMMSHIM_GUARD_SQNR 20 dB"
            in r.stderr), r.describe()
    assert r.stderr.count("summary: guarded site") == 1


def test_guard_without_compare_says_it_does_nothing(client, standin, tmp_path, shim):
    bad = gemm(name="bad", m=64, n=48, k=80, beta=0)
    r, recs, _ = routed(client, standin, tmp_path, [bad, bad],
                        {**FFMA, "GEMMSHIM_GUARD_SQNR": "20", "GEMMSHIM_FAULT": "route_output:1"})
    assert [x["route"] for x in recs] == ["ffma", "ffma"]
    assert r.stderr.count("GEMMSHIM_GUARD_SQNR=20: expected GEMMSHIM_COMPARE=1 and GEMMSHIM_LOG with it (only "
                          "compared calls are measured); no site will be guarded") == 1, r.describe()


def test_guard_off_by_default(client, standin, tmp_path, shim):
    bad = gemm(name="bad", m=64, n=48, k=80, beta=0)
    _, recs, _ = routed(client, standin, tmp_path, [bad, bad], {**FFMA, **COMPARE, "GEMMSHIM_FAULT": "route_output:1"})
    assert [x["route"] for x in recs] == ["ffma", "ffma"]


def test_outlier_heavy_fp8_is_guarded_by_the_median_a_normal_one_is_not(client, standin, tmp_path, shim):
    # One 1e5 among A's uniform [-1, 1] values: per-tensor e4m3 scales A by
    # 448 / 1e5, so the rest land at or below e4m3's smallest subnormals
    # (2^-9) and lose most of their bits. The outlier's row carries nearly
    # all the output's energy and is right, so the global SQNR stays high;
    # the median element's error does not.
    outlier = gemm(name="o", m=64, n=48, k=80, beta=0, pad=0, special="1e5")
    normal = gemm(name="n", m=32, n=48, k=80, beta=0, pad=0)
    env = {**FP8, **COMPARE, "GEMMSHIM_GUARD_SQNR": "20", "GEMMSHIM_DEBUG": "INFO"}
    r, recs, out = routed(client, standin, tmp_path, [outlier, normal, "--fp8"], env)
    o, n = recs
    assert o["route"] == n["route"] == "fp8"
    assert o["sqnr_db"] > 25  # blind to it
    assert -20 * np.log10(o["rel_err_p50"]) < 20
    assert n["sqnr_db"] > 25 and -20 * np.log10(n["rel_err_p50"]) > 20
    guarded = [line for line in r.stderr.splitlines() if "summary: guarded site" in line]
    assert len(guarded) == 1 and o["site"] in guarded[0], r.describe()
    import re
    m = re.search(r"fp8 off: measured (-?[0-9.]+) dB < GEMMSHIM_GUARD_SQNR 20 dB$", guarded[0])
    assert m and abs(float(m.group(1)) - min(o["sqnr_db"], -20 * np.log10(o["rel_err_p50"]))) < 0.06, guarded


# ---- gemmshim report ------------------------------------------------------------
def report(*args):
    import os
    import subprocess
    import sys
    from harness import ROOT
    return subprocess.run([sys.executable, "-m", "gemmshim.report", *map(str, args)],
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), capture_output=True, text=True)


def test_report_accuracy_table_guarded_sites_and_expect(client, standin, tmp_path, shim):
    import json
    bad = gemm(name="bad", m=64, n=48, k=80, beta=0)
    good = gemm(name="good", m=32, n=48, k=80, beta=0)
    env = {**FFMA, **COMPARE, "GEMMSHIM_GUARD_SQNR": "20", "GEMMSHIM_FAULT": "route_output:1"}
    _, recs, _ = routed(client, standin, tmp_path, [bad, bad, good, good], env)
    log = tmp_path / "shim.jsonl"
    p = report(log, "--json", "-")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    bad_site, good_site = recs[0]["site"], recs[2]["site"]
    assert s["accuracy"] == [
        {"site": bad_site, "route": "ffma", "shape": "64x48x80 bf16", "compared": 1,
         "sqnr_db_worst": recs[0]["sqnr_db"], "sqnr_db_median": recs[0]["sqnr_db"], "element_db_worst": "inf",
         "max_rel_worst": recs[0]["max_rel"], "nonfinite_mismatch": 0, "guarded": True},
        {"site": good_site, "route": "ffma", "shape": "32x48x80 bf16", "compared": 2, "sqnr_db_worst": "inf",
         "sqnr_db_median": "inf", "element_db_worst": "inf", "max_rel_worst": 0.0, "nonfinite_mismatch": 0,
         "guarded": False}]
    assert s["guarded"] == [{"site": bad_site, "route": "ffma", "shape": "64x48x80 bf16", "native_calls": 1,
                             "reason": recs[1]["reason"]}]
    text = report(log).stdout
    assert "accuracy of compared calls" in text and "guarded sites" in text
    # --expect API=ROUTE:DB: every compared call at DB or better.
    p = report(log, "--expect", "cublasGemmEx=ffma:15")
    assert p.returncode == 1  # the guarded call ran native
    assert "below" not in p.stdout, p.stdout
    p = report(log, "--expect", "cublasGemmEx=ffma:20")
    assert p.returncode == 1
    assert (f"FAIL --expect cublasGemmEx=ffma:20: 1 of 3 compared calls measured below 20 dB; worst "
            f"{recs[0]['sqnr_db']:.2f} dB at site {bad_site} (64x48x80)") in p.stdout, p.stdout


def test_report_expect_sqnr_needs_compared_calls(client, standin, tmp_path, shim):
    _, recs, _ = routed(client, standin, tmp_path, [gemm(name="a", beta=0)], FFMA)
    log = tmp_path / "shim.jsonl"
    p = report(log, "--expect", "cublasGemmEx=ffma:20")
    assert p.returncode == 1 and ("FAIL --expect cublasGemmEx=ffma:20: no call of cublasGemmEx has sqnr_db "
                                  "(run with GEMMSHIM_COMPARE=1 and GEMMSHIM_LOG)") in p.stdout, p.stdout
    assert report(log, "--expect", "cublasGemmEx=ffma").returncode == 0
    p = report(log, "--expect", "cublasGemmEx=ffma:x")
    assert p.returncode == 2 and "expected a number of dB after ':', got 'x'" in p.stderr
    p = report(log, "--expect-some", "cublasGemmEx=ffma:20")
    assert p.returncode == 2 and "a minimum SQNR (':DB') goes with --expect" in p.stderr


def test_guard_turns_one_fp8_layer_native(standin, tmp_path, shim):
    # The delayed recipe's fp8 sites are per layer (fp8_sites.c): a training
    # loop of 2 layers, 2 steps, 3 GEMMs a layer; the first call (layer 0's
    # forward) is corrupted, so that site alone runs native in step 1. The
    # guard acts from the call after the log writer read the measurement
    # (guard_observe runs as the writer formats the record): the client
    # waits between steps until the log file holds step 0's six records.
    path = CLIENT_DIR / "fp8_client_cu13"
    require_built([path])
    log = tmp_path / "gs.jsonl"
    r = run([path, "--layers=2", "--steps=2", "--wait-log=1"], standin[13], shim=True,
            env={**FP8, **COMPARE, "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_GUARD_SQNR": "20",
                 "GEMMSHIM_FAULT": "route_output:1",
                 "GEMMSHIM_LOG": str(log)})
    assert r.returncode == 0, r.describe()
    recs = read_log(log)
    assert len(recs) == 12
    first = recs[0]
    assert first["route"] == "fp8" and first["sqnr_db"] < 20
    assert all(x["sqnr_db"] > 20 for x in recs[1:6] + recs[7:]), recs
    assert [x["route"] for x in recs] == ["fp8"] * 6 + ["native"] + ["fp8"] * 5
    assert recs[6]["site"] == first["site"]
    assert len({x["site"] for x in recs[:6]}) == 6
    assert recs[6]["reason"] == (f"GEMMSHIM_MODE=fp8; fp8 off for this site: measured {first['sqnr_db']:.1f} dB "
                                 "< GEMMSHIM_GUARD_SQNR 20 dB")


@pytest.mark.parametrize("special", ["inf", "1e39"])
def test_a_lost_inf_guards_the_site(client, standin, tmp_path, shim, special):
    # A's first element Inf (or 1e39, which bf16 rounds to Inf: IEEE 754
    # round to nearest, bf16's largest finite is about 3.39e38): native's
    # first output row is Inf or NaN (cublasGemmEx, D = alpha op(A) op(B)),
    # the route's per-tensor fp8 scale keeps it finite (an amax of Inf keeps
    # scale 1: TransformerEngine's recipe). SQNR and the median over the
    # positions finite in both can still look fine; the mismatch count
    # cannot, and it alone guards the site.
    a = gemm(name="a", m=64, n=48, k=80, beta=0, pad=0, special=special)
    b = gemm(name="b", m=64, n=48, k=80, beta=0, pad=0, special=special)  # the same site: a's dump stays a's
    env = {**FP8, **COMPARE, "GEMMSHIM_GUARD_SQNR": "20"}
    r, recs, out = routed(client, standin, tmp_path, [a, b, "--fp8"], env)
    ref = native(client, standin, tmp_path, [a], "9.0")
    route, nat = load(out / "a.out", "bf16"), load(ref / "a.out", "bf16")
    mismatch = int((np.isfinite(route) != np.isfinite(nat)).sum())
    assert mismatch > 0 and recs[0]["nonfinite_mismatch"] == mismatch, recs[0]
    assert recs[0]["route"] == "fp8" and recs[1]["route"] == "native", recs
    assert "fp8 off for this site: measured -inf dB < GEMMSHIM_GUARD_SQNR 20 dB" in recs[1]["reason"], recs[1]
