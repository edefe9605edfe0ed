"""The fp8 route end to end: fp8_client_cu13 (a training loop of L Linear
layers, forward on the main thread, backward on a thread named
pt_autograd_0, fresh activation pointers every step) under the preloaded
shim with GEMMSHIM_MODE=fp8, over the stand-in on devices 9.0 (cuBLASLt's
fp8 GEMM) and 6.1 (the shim's own)."""

import json

import pytest

from harness import CLIENT_DIR, parse_fields, read_log, require_built, run, run_ok, standin_counts

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
        d = parse_fields(words[1:])
        out.append({"step": int(d["step"]), "kind": d["kind"], "layer": int(d["layer"]),
                    "status": int(d["status"]), "sqnr": float(d["sqnr"])})
    return out


@pytest.mark.parametrize("cc,backend", [("9.0", "cublaslt-fp8"), ("6.1", "own")])
@pytest.mark.parametrize("fmt", ["e4m3", "hybrid"])
def test_training_loop(fp8_client, standin, tmp_path, cc, backend, fmt):
    log = tmp_path / "gemms.jsonl"
    r = run_ok([fp8_client, f"--layers={LAYERS}", f"--steps={STEPS}"], standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_FP8_FORMAT": fmt,
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
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_LOG": str(log)})
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


def test_context_churn_keeps_stream_workspaces(fp8_client, standin, tmp_path):
    """600 rounds of what cudaDeviceReset and JAX client rebuilds do around
    a GEMM: the primary context retained, a cuBLAS handle and a stream
    made, one bf16 cublasGemmEx run fp8 on cuBLASLt's fp8 GEMM (9.0), the
    handle and stream destroyed, the primary context released to zero (the
    CUDA Driver API, cuDevicePrimaryCtxRelease: "The context is
    automatically reset once the last reference to it is released"). The
    GemmEx family brings no workspace, so each stream gets one of the
    device's ROUTE_LT_WORKSPACES (129); a released context's went with it
    and must not count: every call gets its stream's workspace, whose
    absence its reason would name ("no cuBLASLt workspace on this stream:
    ..."). Counting dead contexts' workspaces, calls from the 141st on had
    none."""
    log = tmp_path / "gemms.jsonl"
    rounds = 600
    r = run_ok([fp8_client, f"--churn={rounds}"], standin[13], shim=True,
               env={"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_LOG": str(log)})
    gemms = gemm_lines(r)
    recs = read_log(log)
    assert len(gemms) == len(recs) == rounds, r.describe()
    for i, (g, rec) in enumerate(zip(gemms, recs)):
        assert (g["step"], g["kind"], g["status"]) == (i, "fwd", 0), g
        assert g["sqnr"] >= 25.0, (g, rec)
        # Each round's context is new: a new site, measured at its first call.
        got = (rec["status"], rec["decided"], rec["route"], rec["backend"], rec["reason"], rec.get("site_event"))
        assert got == (0, "fp8", "fp8", "cublaslt-fp8",
                       "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3; first call: scales from its own amax", "new"), (i, rec)


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
                   env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_FP8_MARGIN": str(margin),
                        "GEMMSHIM_LOG": str(log)})
        recs = read_log(log)
        assert all(rec["route"] == "fp8" and rec["status"] == 0 for rec in recs), recs
        sqnr[margin] = [g["sqnr"] for g in gemm_lines(r)]
        assert len(sqnr[margin]) == STEPS * LAYERS * len(KINDS)
    assert min(sqnr[0]) >= 25.0, sqnr[0]
    for s0, s2 in zip(sqnr[0], sqnr[2]):
        assert s2 >= s0 - 3.0, (s0, s2)


# ---- per-thread default streams of threads that come and go ----------------------------------
def test_per_thread_streams_of_successive_threads_pass_the_ring_on_in_order(shim, standin, tmp_path):
    """Five threads, each started after the previous one exited, run the
    same GEMM (one call site) on CU_STREAM_PER_THREAD, "an implicit stream
    local to both the thread and the CUcontext" (CUDA Runtime API, stream
    synchronization behavior): a different stream in each thread, on which
    no other thread can record. Each call records its site's event on its
    own stream after its work. A thread's call that takes an earlier
    thread's site (by its pointers: the client's buffers may come back at
    the same addresses, as glibc's allocator gives them, or not, as a
    sanitizer's does) waits on that event (cuStreamWaitEvent: "all future
    work submitted to hStream will wait until hEvent completes") and keeps
    the ring and its history; one that makes a site of its own measures
    and initialises a ring. Either way no call uses a ring unordered."""
    client = CLIENT_DIR / "ffma_client_cu13"
    require_built([client])
    threads = 5
    log, counts = tmp_path / "gemms.jsonl", tmp_path / "counts"
    r = run([client, f"--threads={threads}", "--iters=1", "--one-at-a-time", "--stream=per-thread",
             "--gemm=name=g,api=ex,m=64,n=64,k=64"], standin[13], shim=True,
            env={"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_LOG": str(log),
                 "STANDIN_COUNTS": str(counts)})
    # The client's tolerance is ffma's: fp8 results fail it (exit 1).
    assert r.returncode == 1, r.describe()
    recs = read_log(log)
    assert len(recs) == threads
    seen, taken = set(), 0
    for rec in recs:
        assert (rec["route"], rec["status"], rec["stream"]) == ("fp8", 0, "0x2"), rec
        new = rec["site"] not in seen
        taken += not new
        seen.add(rec["site"])
        first = "first call: scales from its own amax; " if new else ""
        assert rec["reason"] == ("GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3; " + first +
                                 "own kernel: cuBLASLt fp8 needs sm_89 or newer"), rec
        assert rec.get("site_event") == ("new" if new else None), rec
    got = standin_counts(counts)
    # ring_init: one cuMemsetD8Async per ring, two rings a site, once.
    assert got["cuMemsetD8Async"] == 2 * len(seen), got
    # A mark after every call (an event per ring, made once); a wait on it
    # by each call that took an earlier thread's site.
    assert (got["cuEventCreate"], got["cuEventRecord"], got["cuStreamWaitEvent"]) == (len(seen), threads, taken), got


def test_backward_on_a_new_thread_each_step_on_the_per_thread_stream(fp8_client, standin, tmp_path):
    """fp8_client --stream=per-thread: the forward on the main thread's
    per-thread stream, the backward on a new thread each step, on that
    thread's own per-thread stream. Each backward site passes from the
    exited thread to the next one in order (its event, recorded after the
    last use, waited on) and keeps its ring and history: step 0 alone
    measures, every site keeps its id, no ring is made after step 0, and
    with a small GEMMSHIM_FP8_MAX_SITES the ring bound (2 x sites + 32) is
    never reached however many steps run."""
    layers, steps = 2, 24
    log, counts = tmp_path / "gemms.jsonl", tmp_path / "counts"
    r = run_ok([fp8_client, f"--layers={layers}", f"--steps={steps}", "--stream=per-thread"], standin[13], shim=True,
               env={"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_FP8_MAX_SITES": "6", "GEMMSHIM_LOG": str(log),
                    "STANDIN_COUNTS": str(counts)})
    gemms, recs = gemm_lines(r), read_log(log)
    assert len(gemms) == len(recs) == steps * layers * len(KINDS), r.describe()
    sites = {}
    for g, rec in zip(gemms, recs):
        first = g["step"] == 0
        assert (g["status"], rec["status"], rec["route"], rec["backend"]) == (0, 0, "fp8", "cublaslt-fp8"), rec
        assert rec["reason"] == "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3" + ("; first call: scales from its own amax" if first else ""), rec
        assert rec.get("site_event") == ("new" if first else None), rec
        assert g["sqnr"] >= 25.0, g
        key = (g["kind"], g["layer"])
        assert sites.setdefault(key, rec["site"]) == rec["site"], (key, rec)
    assert len(set(sites.values())) == layers * len(KINDS)
    got = standin_counts(counts)
    # Two rings per site, initialised once; one mark per call; one wait per
    # backward site per step after the first.
    assert got["cuMemsetD8Async"] == 2 * layers * len(KINDS), got
    assert got["cuEventRecord"] == steps * layers * len(KINDS), got
    assert got["cuStreamWaitEvent"] == (steps - 1) * layers * 2, got


# ---- the handle's math mode --------------------------------------------------------------------
PEDANTIC = "the handle's math mode CUBLAS_PEDANTIC_MATH asks for exact fp32 arithmetic"


@pytest.mark.parametrize("cc", ["6.1", "9.0"])
def test_pedantic_math_mode_runs_native(shim, standin, tmp_path, cc):
    """cublasMath_t (cuBLAS documentation): CUBLAS_PEDANTIC_MATH "uses the
    prescribed precision and standardized arithmetic for all phases of
    calculations", the per-handle form of CUBLAS_COMPUTE_32F_PEDANTIC,
    which the route already leaves native: a handle in that mode (with or
    without CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) keeps its
    GEMMs exact, every entry point of the GemmEx family; the other modes
    are quantized."""
    client = CLIENT_DIR / "ffma_client_cu13"
    require_built([client])
    modes = ["pedantic", "pedantic+disallow", "default", "tf32", "tf32+disallow"]
    apis = ["ex", "ex64", "strided", "strided64"]
    # pad=0: leading dimensions cuBLASLt's fp8 GEMM takes (16-byte aligned),
    # so on 9.0 the quantized calls run fp8 rather than native.
    args = [f"--gemm=name={api}:{mode},api={api},math={mode},pad=0,spad=0" + (",batch=2" if "strided" in api else "")
            for api in apis for mode in modes]
    args.append("--gemm=name=compute:pedantic,api=ex,compute=32f_pedantic")
    log = tmp_path / "gemms.jsonl"
    r = run([client, *args], standin[13], shim=True,
            env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_LOG": str(log)})
    recs = read_log(log)
    assert len(recs) == len(r.calls) == len(args), r.describe()
    for call, rec in zip(r.calls, recs):
        api, mode = call["name"].split(":")
        assert (rec["decided"], rec["status"]) == ("fp8", 0), rec
        if api == "compute":
            assert rec["route"] == "native", rec
            assert rec["reason"] == ("GEMMSHIM_MODE=fp8; fp8 declined: compute type 32f_pedantic asks for exact "
                                     "fp32 arithmetic; ran native"), rec
        elif mode.startswith("pedantic"):
            # Native: cuBLAS's own exact result.
            assert (rec["route"], call["ok"]) == ("native", "1"), (call, rec)
            assert rec["reason"] == f"GEMMSHIM_MODE=fp8; fp8 declined: {PEDANTIC}; ran native", rec
        else:
            assert rec["route"] == "fp8", rec


# ---- the fold at every amplitude ----------------------------------------------------------------
@pytest.mark.parametrize("cc,backend,recipe", [("6.1", "own", "delayed"), ("9.0", "cublaslt", "delayed"),
                                               ("9.0", "own", "delayed"), ("9.0", "cublaslt", "current"),
                                               ("9.0", "cublaslt", "block"), ("10.0", "cublaslt", "mxfp8")])
def test_error_relative_to_the_data_is_the_same_at_every_amplitude(shim, standin, tmp_path, cc, backend, recipe):
    """TransformerEngine's delayed scaling (transformer_engine/common/
    recipe/delayed_scaling.cu) sets scale = fp8_max * 2^-margin / amax for
    any finite amax > 0, with no lower bound: quantization follows the data
    down to any size, so the error relative to the result is the same at
    every amplitude. A's elements scaled by 2^-e (e = 0 .. 100, down to
    about 1e-30; B's stay of size 1) scale every step, code and product by
    exactly 2^-e, so a site's second call (the step from its history) and
    its first (from its own amax) have maxerr / 2^-e equal at every e, to
    the client's four printed digits. A lower bound on the step (1e-12, as
    this route once had) made the result all zeros below amax ~ 4.5e-10.
    The recipes that keep no history hold the same, each call from its own
    data: current (TE's Float8CurrentScaling, fp8_max / amax), block (TE's
    Float8BlockScaling, powers of two per 1 x 128 segment) and mxfp8 (E8M0
    per 32 elements, which reaches 2^-127 (OCP Microscaling Formats v1.0,
    E8M0): far below what 2^-100 data asks)."""
    client = CLIENT_DIR / "ffma_client_cu13"
    require_built([client])
    exps = [0, 20, 40, 60, 80, 100]
    ratios = {}
    for e in exps:
        amp = 2.0 ** -e
        args = [f"--gemm=name={name},api=ex,amp={amp!r},ampb=1,beta=0,seed=5,pad=0" for name in ("first", "second")]
        log = tmp_path / f"e{e}.jsonl"
        r = run([client, *args], standin[13], shim=True,
                env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_BACKEND": backend,
                     "GEMMSHIM_FP8_RECIPE": recipe, "GEMMSHIM_LOG": str(log)})
        recs = read_log(log)
        assert [(rec["route"], rec["recipe"], rec["status"]) for rec in recs] == [("fp8", recipe, 0)] * 2, (
            recs, r.describe())
        assert [int(c["status"]) for c in r.calls] == [0, 0]
        ratios[e] = [float(c["maxerr"]) / amp for c in r.calls]
        assert all(x > 0 for x in ratios[e]), (e, r.describe())
    for e in exps:
        for call in (0, 1):
            assert ratios[e][call] == pytest.approx(ratios[0][call], rel=1e-3), (e, call, ratios)


def test_context_churn_keeps_accuracy_slots(fp8_client, standin, tmp_path):
    """GEMMSHIM_COMPARE on every call under the churn above: each round's
    compared call takes page-locked accuracy slots from its context's pool
    (shim/accuracy_read.c, 16 pools). A released context is gone (the CUDA
    Driver API: cuCtxGetId on a destroyed context fails), so its pool is
    taken back for the next context: no call says "accuracy not measured:
    more live contexts than the accuracy slots serve" (before, every call
    from the 17th context on did). The contexts go before the log reads
    their events, so most of these calls print no figure (gpu_skipped says
    why); one whose events were read first prints its figures."""
    log = tmp_path / "gemms.jsonl"
    rounds = 40
    r = run_ok([fp8_client, f"--churn={rounds}"], standin[13], shim=True,
               env={"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_COMPARE": "1",
                    "GEMMSHIM_COMPARE_EVERY": "1", "GEMMSHIM_LOG": str(log)})
    recs = read_log(log)
    assert len(recs) == rounds, r.describe()
    for i, rec in enumerate(recs):
        assert (rec["route"], rec["reason"]) == ("fp8", "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3"), (i, rec)
        assert "accuracy slots" not in json.dumps(rec), (i, rec)
        # Whether the writer read a call's events before its context went
        # is a race: either a figure or this reason, never another.
        if "gpu_skipped" in rec:
            assert rec["gpu_skipped"] == "context destroyed before its events were read", (i, rec)
        else:
            assert "gpu_ns" in rec, (i, rec)


def test_delayed_compare_counts_each_layer(fp8_client, standin, tmp_path):
    """GEMMSHIM_COMPARE's "a site's first call, then every Nth" counts the
    record's site (docs/profiling.md): for the delayed recipe the per-layer
    one. 2 layers x 3 steps with GEMMSHIM_COMPARE_EVERY=2: each layer's
    GEMMs are compared at their 1st and 3rd calls. Counted on the call site
    that the layers share, every 2nd call fell on layer 0 (calls 1, 3, 5:
    layer 0 in every step) and layer 1 was never measured."""
    log = tmp_path / "gemms.jsonl"
    r = run_ok([fp8_client, "--layers=2", "--steps=3"], standin[13], shim=True,
               env={"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_COMPARE": "1", "GEMMSHIM_COMPARE_EVERY": "2",
                    "GEMMSHIM_LOG": str(log)})
    recs = read_log(log)
    assert len(recs) == 18 and all(x["route"] == "fp8" for x in recs), r.describe()
    by_site = {}
    for x in recs:
        by_site.setdefault(x["site"], []).append("native_gpu_ns" in x)
    assert len(by_site) == 6, by_site
    assert all(v == [True, False, True] for v in by_site.values()), by_site
