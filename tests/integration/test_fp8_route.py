"""The fp8 route end to end: fp8_client_cu13 (a training loop of L Linear
layers, forward on the main thread, backward on a thread named
pt_autograd_0, fresh activation pointers every step) under the preloaded
shim with GEMMSHIM_MODE=fp8, over the stand-in on devices 9.0 (cuBLASLt's
fp8 GEMM) and 6.1 (the shim's own)."""

import pytest

from harness import CLIENT_DIR, read_log, require_built, run_ok

LAYERS, STEPS = 4, 3
KINDS = ("fwd", "dgrad", "wgrad")


@pytest.fixture(scope="module")
def fp8_client(shim):
    path = CLIENT_DIR / "fp8_client_cu13"
    require_built([path])
    return path


def gemm_lines(r):
    out = []
    for words in r.lines("gemm"):
        d = dict(w.split("=", 1) for w in words[1:])
        out.append({"step": int(d["step"]), "kind": d["kind"], "layer": int(d["layer"]),
                    "status": int(d["status"]), "sqnr": float(d["sqnr"])})
    return out


@pytest.mark.parametrize("cc,backend", [("9.0", "cublaslt-fp8"), ("6.1", "own")])
@pytest.mark.parametrize("fmt", ["e4m3", "hybrid"])
def test_training_loop(fp8_client, standin, tmp_path, cc, backend, fmt):
    log = tmp_path / "gemms.jsonl"
    r = run_ok([fp8_client, f"--layers={LAYERS}", f"--steps={STEPS}"], standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_FP8_FORMAT": fmt,
                    "GEMMSHIM_LOG": str(log)})
    gemms = gemm_lines(r)
    recs = read_log(log)
    assert len(gemms) == len(recs) == STEPS * LAYERS * len(KINDS), r.describe()

    sites = {}
    for g, rec in zip(gemms, recs):
        assert g["status"] == 0 and rec["status"] == 0, rec
        assert rec["decided"] == "fp8" and rec["route"] == "fp8" and rec["backend"] == backend, rec
        gradient = fmt == "hybrid" and g["kind"] != "fwd"
        formats = "fp8 e4m3 x e5m2 (B: gradient)" if gradient else "fp8 e4m3 x e4m3"
        first = g["step"] == 0
        want = f"GEMMSHIM_MODE=fp8; {formats}"
        if first:
            want += "; first call: scales from its own amax"
        if backend == "own":
            want += "; own kernel: cuBLASLt fp8 needs sm_89 or newer"
        assert rec["reason"] == want, rec
        # E4M3 x E4M3 at >= 25 dB; an E5M2 gradient costs one mantissa bit.
        assert g["sqnr"] >= (18.0 if gradient else 25.0), g
        # New on a site's first call only; never an eviction here.
        assert rec.get("site_event") == ("new" if first else None), rec
        assert "evicted_site" not in rec
        key = (g["kind"], g["layer"])
        if first:
            sites[key] = rec["site"]
        else:
            assert rec["site"] == sites[key], (key, rec)
    # One site per layer and GEMM: 3L, all different, the same every step.
    assert len(sites) == len(set(sites.values())) == LAYERS * len(KINDS)


# ---- a context torn down and made again ------------------------------------------------------
@pytest.mark.parametrize("cc,backend", [("9.0", "cublaslt-fp8"), ("6.1", "own")])
@pytest.mark.parametrize("reset", ["primary", "device", "created"])
def test_context_reset(fp8_client, standin, tmp_path, cc, backend, reset):
    """The context goes away between two steps and a new one takes its
    address: the primary context released to zero and retained again (the
    CUDA Driver API, cuDevicePrimaryCtxRelease: "The context is
    automatically reset once the last reference to it is released"), the
    primary context reset as cudaDeviceReset does (cuDevicePrimaryCtxReset:
    "Destroy all allocations and reset all state on the primary context"), or a
    created context destroyed and another created (the stand-in, like a
    driver's allocator, hands out the old address). cuCtxGetId's id "is
    unique for the life of the program", so the shim's per-context state
    (fp8 sites and rings, cuBLASLt handles, device cache) must start over:
    every site is new again, with a first-call amax, results are as good as
    before the reset, and the route keeps running fp8."""
    log = tmp_path / "gemms.jsonl"
    steps = 3
    r = run_ok([fp8_client, f"--layers={LAYERS}", f"--steps={steps}", "--reset-before=1", f"--reset={reset}"],
               standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_LOG": str(log)})
    # The hazard is real only when the address comes back.
    assert r.lines("reset") == [["reset", "step=1", "same_address=1"]], r.describe()
    gemms = gemm_lines(r)
    recs = read_log(log)
    assert len(gemms) == len(recs) == steps * LAYERS * len(KINDS), r.describe()
    sites = {}
    for g, rec in zip(gemms, recs):
        assert g["status"] == 0 and rec["status"] == 0, rec
        assert rec["route"] == "fp8" and rec["backend"] == backend, rec
        assert g["sqnr"] >= 25.0, (g, rec)
        fresh = g["step"] in (0, 1)  # the first step, and the first after the reset
        assert rec.get("site_event") == ("new" if fresh else None), rec
        assert ("first call: scales from its own amax" in rec["reason"]) == fresh, rec
        # Site ids come from the program's structure: the same after the reset.
        sites.setdefault((g["kind"], g["layer"]), set()).add(rec["site"])
    assert all(len(ids) == 1 for ids in sites.values()), sites


# ---- the margin ----------------------------------------------------------------------------
@pytest.mark.parametrize("cc", ["9.0", "6.1"])
def test_margin_is_headroom(fp8_client, standin, tmp_path, cc):
    """GEMMSHIM_FP8_MARGIN is TransformerEngine's margin: headroom
    (transformer_engine/common/recipe/delayed_scaling.cu: scaled_max =
    fp8_max * 2^-margin, scale = scaled_max / amax). With margin 2 the
    largest values land on 448 / 4 and nothing saturates; E4M3 keeps its 3
    mantissa bits over that range, so every GEMM's SQNR stays within 3 dB of
    margin 0's (a margin that divided the step by 2^margin instead saturated
    everything above amax / 4: about 1 dB)."""
    sqnr = {}
    for margin in (0, 2):
        log = tmp_path / f"gemms{margin}.jsonl"
        r = run_ok([fp8_client, f"--layers={LAYERS}", f"--steps={STEPS}"], standin[13], shim=True,
                   env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_FP8_MARGIN": str(margin),
                        "GEMMSHIM_LOG": str(log)})
        recs = read_log(log)
        assert all(rec["route"] == "fp8" and rec["status"] == 0 for rec in recs), recs
        sqnr[margin] = [g["sqnr"] for g in gemm_lines(r)]
        assert len(sqnr[margin]) == STEPS * LAYERS * len(KINDS)
    assert min(sqnr[0]) >= 25.0, sqnr[0]
    for s0, s2 in zip(sqnr[0], sqnr[2]):
        assert s2 >= s0 - 3.0, (s0, s2)
