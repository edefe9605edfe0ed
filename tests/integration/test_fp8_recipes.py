"""The fp8 recipes (GEMMSHIM_FP8_RECIPE) end to end, over the stand-in.

fp8_threads_client_cu13: eight threads, each with its own cuBLAS handle,
stream and buffers, call one cublasGemmEx line (T,N, 32^3, bf16) with data
of amplitude 10^(t-3) in thread t. Nothing but the call site is shared, so
no thread's scale may depend on another's data: under current scaling no
state outlives a call; under delayed scaling each thread's calls must keep
a history of their own.

SQNR floor: torchao's float8 tests hold fp8 casts and GEMMs to 25 dB
against high precision (pytorch/ao test/float8/test_base.py, using
torchao/float8/float8_utils.py compute_error); 20 dB is the floor that
every call of the eight threads must clear, the first included."""

import pytest

from harness import CLIENT_DIR, parse_fields, read_log, require_built, run_ok, standin_counts

THREADS, CALLS = 8, 4


@pytest.fixture(scope="module")
def threads_client(shim):
    path = CLIENT_DIR / "fp8_threads_client_cu13"
    require_built([path])
    return path


def gemm_lines(r):
    out = []
    for words in r.lines("gemm"):
        d = parse_fields(words[1:])
        out.append({"thread": int(d["thread"]), "call": int(d["call"]), "status": int(d["status"]),
                    "sqnr": float(d["sqnr"])})
    return out


# legacy: the handles keep the legacy stream (cuBLAS docs, cublasSetStream:
# a handle without a stream uses the default one), so the threads share a
# stream. shared-a: one weight A for all, B and D each thread's own.
# rotate: the buffer sets move from thread to thread between calls, as a
# caching allocator hands blocks on. Under delayed a site is matched only
# from its own thread or after that thread exited (docs/fp8-sites.md).
# block and mxfp8 keep no state either; each runs on the device that
# has it (RECIPE_CC).
THREAD_CASES = [("current", False, ""), ("delayed", False, ""), ("current", True, ""), ("delayed", True, ""),
                ("delayed", False, "--shared-a"), ("delayed", True, "--shared-a"), ("delayed", False, "--rotate"),
                ("delayed", True, "--rotate"), ("current", True, "--rotate"), ("block", False, ""),
                ("block", True, "--rotate"), ("mxfp8", False, ""), ("mxfp8", True, "--rotate")]
RECIPE_CC = {"current": "9.0", "delayed": "9.0", "block": "9.0", "mxfp8": "10.0"}


@pytest.mark.parametrize("recipe, legacy, variant", THREAD_CASES,
                         ids=[f"{r}-{'legacy-stream' if l else 'own-streams'}{v.replace('--', '-')}"
                              for r, l, v in THREAD_CASES])
def test_threads_sharing_a_call_site_keep_their_own_scales(threads_client, standin, tmp_path, recipe, legacy,
                                                           variant):
    log = tmp_path / "gemms.jsonl"
    r = run_ok([threads_client, f"--threads={THREADS}", f"--calls={CALLS}"] + ["--legacy-stream"] * legacy +
               [variant] * bool(variant),
               standin[13], shim=True,
               env={"STANDIN_CC": RECIPE_CC[recipe], "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_FP8_RECIPE": recipe, "GEMMSHIM_LOG": str(log)})
    gemms = gemm_lines(r)
    assert len(gemms) == THREADS * CALLS, r.describe()
    assert sorted((g["thread"], g["call"]) for g in gemms) == [(t, i) for t in range(THREADS) for i in range(CALLS)]
    low = [g for g in gemms if g["status"] != 0 or g["sqnr"] < 20.0]
    assert not low, (low, r.describe())
    recs = read_log(log)
    assert len(recs) == THREADS * CALLS
    for rec in recs:
        assert (rec["route"], rec["backend"], rec["recipe"], rec["status"]) == (
            "fp8", "cublaslt-fp8", recipe, 0), rec
    if recipe == "delayed":
        # No site has calls of two threads; with its buffers kept, each
        # thread's calls are one site.
        by_tid = {}
        for rec in recs:
            by_tid.setdefault(rec["tid"], set()).add(rec["site"])
        assert len(by_tid) == THREADS, by_tid
        assert sum(len(v) for v in by_tid.values()) == len(set().union(*by_tid.values())), by_tid
        if variant != "--rotate":
            assert all(len(v) == 1 for v in by_tid.values()), by_tid
        assert len({rec["stream"] for rec in recs}) == (1 if legacy else THREADS), recs


def one_gemm(threads_client, standin, tmp_path, cc, env):
    log = tmp_path / f"{cc}-{'-'.join(env.values())}.jsonl"
    r = run_ok([threads_client, "--threads=1", "--calls=1"], standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_LOG": str(log), **env})
    (g,) = gemm_lines(r)
    (rec,) = read_log(log)
    return g, rec


def test_current_is_right_on_the_first_call(threads_client, standin, tmp_path):
    """Current scaling needs no history: the first call of a new call site
    is held to torchao's 25 dB for E4M3 GEMMs on normal data."""
    g, rec = one_gemm(threads_client, standin, tmp_path, "9.0", {})
    assert (rec["recipe"], rec["backend"], rec["reason"]) == (
        "current", "cublaslt-fp8", "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3"), rec
    assert "site_event" not in rec, rec
    assert g["status"] == 0 and g["sqnr"] >= 25.0, g


# What each device runs for each GEMMSHIM_FP8_RECIPE, and why not the one
# asked for. The rules are the cuBLAS documentation's ("Narrow precision
# data types usage"): 1x128 and 128x128 block scales (VEC128_32F,
# BLK128x128_32F) on compute capability 9.0 from cuBLAS 12.9, 32-element
# E8M0 block scales (VEC32_UE8M0) on 10.0 and newer. The stand-ins' cuBLAS
# is 13.1 (cu13) and 12.8.4 (cu12). block's reason names its scales: the
# weight rule (fp8_block.c) takes no operand for a weight here (no autograd
# thread seen), so 1x128 on both.
BLOCK_NOTE = "1x128 blocks on A and B"
BLOCK_CUBLAS_12_8 = "block needs cuBLAS 12.9 or newer, the loaded cuBLASLt is 12.8.4"


def block_sm(sm):
    return f"block needs sm_90 (cuBLASLt's 1x128/128x128 scale modes), device is sm_{sm}"


def mxfp8_sm(sm):
    return f"mxfp8 needs sm_100 or newer (cuBLASLt's VEC32_UE8M0 scale mode), device is sm_{sm}"


@pytest.mark.parametrize("cuda,cc,asked,ran,why", [
    (13, "10.0", "auto", "mxfp8", None),
    (13, "9.0", "auto", "current", None),
    (13, "9.0", "block", "block", None),
    (13, "9.0", "mxfp8", "block", mxfp8_sm(90)),
    (13, "10.0", "block", "current", block_sm(100)),
    (13, "8.9", "mxfp8", "current", f"{mxfp8_sm(89)}; {block_sm(89)}"),
    (13, "9.0", "delayed", "delayed", None),
    (12, "9.0", "block", "current", BLOCK_CUBLAS_12_8),
    (12, "9.0", "mxfp8", "current", f"{mxfp8_sm(90)}; {BLOCK_CUBLAS_12_8}"),
])
def test_recipe_falls_back_with_the_reason(threads_client, standin, tmp_path, cuda, cc, asked, ran, why):
    client = threads_client if cuda == 13 else CLIENT_DIR / "fp8_threads_client_cu12"
    require_built([client])
    log = tmp_path / "gemms.jsonl"
    r = run_ok([client, "--threads=1", "--calls=1"], standin[cuda], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_LOG": str(log),
                    "GEMMSHIM_FP8_RECIPE": asked})
    (g,) = gemm_lines(r)
    (rec,) = read_log(log)
    assert g["status"] == 0 and g["sqnr"] >= 25.0, g
    assert (rec["route"], rec["backend"], rec["recipe"]) == ("fp8", "cublaslt-fp8", ran), rec
    want = "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3"
    if ran == "delayed":
        want += "; first call: scales from its own amax"
    if ran == "block":
        want += f"; {BLOCK_NOTE}"
    if why:
        want += f"; recipe {ran} instead: {why}"
    assert rec["reason"] == want, rec


@pytest.mark.parametrize("version,recipe,keyed", [(120803, "mxfp8", 1), (120804, "mxfp8", 0), (130100, "mxfp8", 0),
                                                   (120803, "current", 0)])
def test_mxfp8_descriptor_keyed_for_old_cublaslt(threads_client, standin, tmp_path, version, recipe, keyed):
    """TransformerEngine sets CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE
    (unused for block scaling) on MXFP8 descriptors when the run-time
    cuBLASLt version is at most 120803 ("Workaround for heuristic cache bug
    in cublasLt", transformer_engine/common/gemm/cublaslt_gemm.cu), and the
    shim does the same: the stand-in counts the fp8 GEMMs whose descriptor
    carried it, at the loaded version STANDIN_CUBLASLT_VERSION names.
    Per-tensor descriptors never carry it, old version or not."""
    counts = tmp_path / "counts"
    run_ok([threads_client, "--threads=1", "--calls=1"], standin[13], shim=True,
           env={"STANDIN_CC": "10.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": recipe,
                "STANDIN_CUBLASLT_VERSION": str(version), "STANDIN_COUNTS": str(counts)})
    c = standin_counts(counts)
    assert (c["standin_fp8_gemms"], c["standin_fp8_batch_stride_gemms"]) == (1, keyed), c


@pytest.mark.parametrize("cc,asked,ran,why,gpu", [
    ("10.0", "block", "current", block_sm(100), "B200"),
    ("9.0", "mxfp8", "block", mxfp8_sm(90), "H100 SXM5"),
])
def test_a_declined_call_names_the_recipe_that_declined_it(threads_client, standin, tmp_path, cc, asked, ran, why,
                                                           gpu):
    """A call the cost gate sends native (one small GEMM: the launches
    alone cost more than the GEMM) after its recipe fell back: the
    estimate is the running recipe's, and the reason says which recipe
    that was, and why, before the decline."""
    log = tmp_path / "gemms.jsonl"
    run_ok([threads_client, "--threads=1", "--calls=1"], standin[13], shim=True,
           env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_LOG": str(log), "GEMMSHIM_FP8_RECIPE": asked})
    (rec,) = read_log(log)
    assert rec["route"] == "native" and "recipe" not in rec, rec
    want = f"GEMMSHIM_MODE=fp8; recipe {ran} instead: {why}; fp8 declined: estimated "
    assert rec["reason"].startswith(want), rec
    assert f"; {gpu} rates x 1, " in rec["reason"], rec  # the device's figures (cost.c)
    assert rec["reason"].endswith("; GEMMSHIM_GATE=off routes it anyway; ran native"), rec


@pytest.mark.parametrize("cc,recipe,nonfinite", [("9.0", "current", 0), ("9.0", "delayed", 0), ("9.0", "block", 0),
                                                  ("10.0", "mxfp8", 48)])
def test_an_infinity_in_an_operand_per_recipe(shim, standin, tmp_path, cc, recipe, nonfinite):
    """A's first element +Inf (row 0 of op(A), read by D's row 0: 48
    outputs, which native makes non-finite). Each recipe does what
    TransformerEngine's does. Per-tensor and 1x128/128x128 scales: an amax
    of Inf gives the scale 1 (compute_scale_from_amax in
    transformer_engine/common/recipe/recipe_common.cuh: "if (isinf(amax)
    ...) return scale" with scale 1; TE's Float8BlockScaling quantizes
    through the same function), and the saturating cast makes Inf 448
    (cvt.rn.satfinite, PTX ISA): every output finite. MXFP8: the block's
    E8M0 scale of an Inf amax is 0xFE, 2^127 (TE's float_to_e8m0,
    transformer_engine/common/util/ptx_arch_spec.cuh: cvt.rp.satfinite on
    Blackwell, 0xFE for Inf otherwise), so the element's 448 x 2^127 is past
    fp32's range in the GEMM: D's row 0 is non-finite, as native's, and no
    other output is."""
    require_built([FFMA_CLIENT])
    import route_client
    args = [route_client.gemm("inf", m=64, n=48, k=64, pad=0, special="inf"), "--fp8"]
    env = {"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": recipe}
    # The client exits 1 when an output is wrong: a finite row 0 is.
    res = route_client.run_client(FFMA_CLIENT, standin, tmp_path, args, env, tag=recipe, rc=0 if nonfinite else 1)
    (call,) = res.calls
    (rec,) = res.recs
    assert (rec["route"], rec.get("recipe"), call["status"]) == ("fp8", recipe, "0"), res.describe()
    assert call["nonfinite"] == str(nonfinite), res.describe()
    # The client's verdict: right only where the non-finite outputs are native's.
    assert call["ok"] == ("1" if nonfinite else "0"), res.describe()


@pytest.mark.parametrize("cc,recipe,weight", [("9.0", "current", False), ("9.0", "delayed", False),
                                              ("9.0", "block", False), ("9.0", "block", True), ("10.0", "mxfp8", False)])
def test_block_scales_keep_outputs_away_from_outliers(threads_client, standin, tmp_path, cc, recipe, weight):
    """One 1e5 value in A (the weight of nn.Linear's (T, N) forward) and one
    in B, among values of amplitude 1e-3, in a 256^3 GEMM. Block scales
    (TransformerEngine's Float8BlockScaling: 1x128, and with weight, A in
    128x128 tiles, as a GEMM known to be a forward one takes it after an
    autograd thread was seen; MXFP8BlockScaling, 32 elements) confine each
    outlier to its own scale block: the outputs D(i, j) with i, j >= 128
    share no block with either and keep torchao's 25 dB (pytorch/ao
    test/float8/test_base.py). One per-tensor scale (current, and delayed,
    whose first call takes its own amax) is set by the outlier: amplitude
    1e-3 over a step of 1e5 / 448 flushes every other value to zero, and
    those outputs are lost (below 1 dB here)."""
    log = tmp_path / "gemms.jsonl"
    r = run_ok([threads_client, "--threads=1", "--calls=1", "--dim=256", "--outlier"] + ["--autograd-first"] * weight,
               standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": recipe,
                    "GEMMSHIM_LOG": str(log)})
    (line,) = r.lines("gemm")
    d = dict(w.split("=", 1) for w in line[1:])
    recs = read_log(log)
    assert len(recs) == 1 + weight, recs
    rec = recs[-1]
    assert (rec["route"], rec["backend"], rec["recipe"], int(d["status"])) == ("fp8", "cublaslt-fp8", recipe, 0), rec
    if recipe == "block":
        blocks = "A: 128x128 blocks (weight), B: 1x128" if weight else "1x128 blocks on A and B"
        assert blocks in rec["reason"], rec
    clean = float(d["sqnr_clean"])
    if recipe in ("current", "delayed"):
        assert clean < 1.0, d
    else:
        assert clean >= 25.0, d


def test_bad_recipe_is_named_and_runs_native(threads_client, standin, tmp_path):
    log = tmp_path / "gemms.jsonl"
    r = run_ok([threads_client, "--threads=1", "--calls=1"], standin[13], shim=True,
               env={"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "fast",
                    "GEMMSHIM_LOG": str(log)})
    assert ("GEMMSHIM_FP8_RECIPE='fast': expected auto, current, block, mxfp8 or delayed; "
            "running pass-through (every GEMM native, still logged)") in r.stderr, r.describe()
    (rec,) = read_log(log)
    assert rec["route"] == "native" and "recipe" not in rec, rec


@pytest.mark.parametrize("recipe, cc", [("current", "9.0"), ("delayed", "9.0"), ("mxfp8", "10.0")])
def test_fast_accumulation_on_known_forward_gemms_only(shim, standin, tmp_path, recipe, cc):
    """CUBLASLT_MATMUL_DESC_FAST_ACCUM (cublasLt.h: no periodic promotion of
    the fp8 partial sums) on forward GEMMs only, split accumulation for
    grad-input and grad-weight, as torchao's Float8LinearConfig
    (use_fast_accum on gemm_config_output alone, torchao/float8/config.py)
    and TransformerEngine's Float8CurrentScaling recipe do; TE's
    MXFP8BlockScaling has no GEMM parameters of its own, so its forward
    GEMM takes _2X_ACC_FPROP = False (transformer_engine/pytorch/module/
    base.py, linear.py: split accumulation off, FAST_ACCUM set by
    cublaslt_gemm.cu) and its backward ones _2X_ACC_DGRAD/WGRAD = True.
    mxfp8 runs on 10.0, the others on 9.0. A forward GEMM
    is known once PyTorch's autograd thread (pt_autograd_0 in
    fp8_client.c) has run a backward: every GEMM of another thread is then
    a forward one. Before that (step 0), and in a program without autograd
    threads, no call gets it. The stand-in counts the fp8 GEMMs whose
    descriptor had the attribute set."""
    client = CLIENT_DIR / "fp8_client_cu13"
    require_built([client])
    layers, steps = 2, 3
    counts = tmp_path / "counts"
    run_ok([client, f"--layers={layers}", f"--steps={steps}"], standin[13], shim=True,
           env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": recipe,
                "STANDIN_COUNTS": str(counts)})
    c = standin_counts(counts)
    assert c["standin_fp8_gemms"] == steps * layers * 3, c
    assert c["standin_fp8_fast_accum_gemms"] == (steps - 1) * layers, c

    counts = tmp_path / "threads-counts"
    threads_client = CLIENT_DIR / "fp8_threads_client_cu13"
    run_ok([threads_client, "--threads=2", "--calls=2"], standin[13], shim=True,
           env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": recipe,
                "STANDIN_COUNTS": str(counts)})
    c = standin_counts(counts)
    assert (c["standin_fp8_gemms"], c["standin_fp8_fast_accum_gemms"]) == (4, 0), c


def test_block_recipe_never_sets_fast_accumulation(shim, standin, tmp_path):
    """TransformerEngine's Float8BlockScaling requires split accumulation
    on every GEMM (transformer_engine/common/recipe/__init__.py): the
    block recipe knows the forward GEMMs (for the weight rule) but never
    sets CUBLASLT_MATMUL_DESC_FAST_ACCUM."""
    client = CLIENT_DIR / "fp8_client_cu13"
    require_built([client])
    counts = tmp_path / "counts"
    run_ok([client, "--layers=2", "--steps=3"], standin[13], shim=True,
           env={"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "block",
                "STANDIN_COUNTS": str(counts)})
    c = standin_counts(counts)
    assert (c["standin_fp8_gemms"], c["standin_fp8_fast_accum_gemms"]) == (18, 0), c


@pytest.mark.parametrize("name,shape,why", [
    # cuBLASLt's 1x128/128x128 modes refuse N not a multiple of 4 (an H200
    # refused n = 258, docs/gpu-results.md; the stand-in refuses it too).
    ("n6", dict(m=64, n=6, k=64),
     "block needs m and n multiples of 4 (cuBLASLt's 1x128/128x128 scale modes), the call is 64x6"),
    # cuBLASLt's fp8 GEMM refuses m not a multiple of 8 (an H200 refused m =
    # 100 and 260, docs/gpu-results.md); current pads m through its
    # transient output, block cannot (its 1x128 scales have m for their
    # stride): an m of 36 is a multiple of 4, which the scale modes accept.
    ("m36", dict(m=36, n=64, k=64), "block needs m a multiple of 8 (cuBLASLt's fp8 GEMM; its 1x128 scales "
                                    "cannot be padded in m), the call has m = 36"),
    # 1x128 scales on B need n a multiple of 8: TransformerEngine checks it
    # before every block-scaled GEMM whose B is 1D-quantized ("Outer
    # dimension requirement on B for NVTE_BLOCK_SCALING GEMM", observed of
    # cuBLASLt: transformer_engine/common/gemm/cublaslt_gemm.cu), and the
    # stand-in refuses it; block always gives B 1x128 scales.
    ("n12", dict(m=64, n=12, k=256), "block needs n a multiple of 8 (cuBLASLt's 1x128 scales on B), the call has "
                                     "n = 12"),
    # TransformerEngine runs block-scaled GEMMs with the DEFAULT, BIAS and
    # DGELU epilogues only: "Epilogue requested outside of the available
    # and tested cuBLAS functionality for float8 block scaled GEMM"
    # (cublaslt_gemm.cu). A bias stays on block (test_block_takes_a_bias).
    ("gelu", dict(m=64, n=48, k=64, api="lt", epi="gelu"),
     "block takes no gelu epilogue (TransformerEngine runs block-scaled GEMMs with DEFAULT, BIAS and DGELU only)"),
    ("relu_bias", dict(m=64, n=48, k=64, api="lt", epi="relu_bias"),
     "block takes no relu_bias epilogue (TransformerEngine runs block-scaled GEMMs with DEFAULT, BIAS and DGELU "
     "only)"),
])
def test_block_unfit_shape_goes_to_current(shim, standin, tmp_path, name, shape, why):
    """A call the block recipe cannot give cuBLASLt goes to current with
    the reason, before anything is quantized, and runs fp8 there."""
    require_built([FFMA_CLIENT])
    import route_client
    args = [route_client.gemm(name, pad=0, **shape), "--fp8"]
    env = {"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "block"}
    res = route_client.run_client(FFMA_CLIENT, standin, tmp_path, args, env, tag=name)
    route_client.assert_all_ok(res)
    (rec,) = res.recs
    assert (rec["route"], rec.get("backend"), rec.get("recipe")) == ("fp8", "cublaslt-fp8", "current"), rec
    assert f"recipe current instead: {why}" in rec["reason"], rec
    assert res.counts["standin_fp8_gemms"] == 1, res.counts


def test_block_takes_a_bias(shim, standin, tmp_path):
    """cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS, an epilogue
    TransformerEngine runs block-scaled GEMMs with (cublaslt_gemm.cu), runs
    the block recipe on cuBLASLt; the client holds D to 25 dB against
    float64 of op(A) op(B) + bias."""
    require_built([FFMA_CLIENT])
    import route_client
    args = [route_client.gemm("bias", "lt", m=64, n=48, k=64, pad=0, epi="bias"), "--fp8"]
    env = {"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "block"}
    res = route_client.run_client(FFMA_CLIENT, standin, tmp_path, args, env, tag="bias")
    route_client.assert_all_ok(res)
    (rec,) = res.recs
    assert (rec["route"], rec.get("backend"), rec.get("recipe"), rec["epilogue"]) == (
        "fp8", "cublaslt-fp8", "block", "bias"), rec
    assert rec["reason"] == f"GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3; {BLOCK_NOTE}", rec


FFMA_CLIENT = CLIENT_DIR / "ffma_client_cu13"
SLOWER = "the own fp8 kernel is slower than native bf16 on sm_89+"


@pytest.mark.parametrize("cc,recipe", [("8.9", "current"), ("8.9", "delayed"), ("9.0", "current"), ("9.0", "delayed"),
                                       ("9.0", "block"), ("10.0", "mxfp8")])
def test_no_shape_runs_the_own_kernel_on_sm89_and_newer(shim, standin, tmp_path, cc, recipe):
    """On sm_89+ every fp8 call runs cuBLASLt's fp8 GEMM or native bf16,
    never the shim's own kernel, which would be slower than native there.
    cuBLASLt's fp8 rules (cuBLAS documentation, cublasLtMatmul: fp8 needs
    16-byte aligned pointers and leading dimensions, which for our K x M
    fp8 buffers means k a multiple of 16, and has no E5M2 x E5M2; the
    stand-in refuses the same). Shapes: aligned (cuBLASLt), odd k, odd m
    with ldc = m, D's leading dimension unaligned (cublasLtMatmul out of
    place), E5M2 operands. Every recipe lays its fp8 buffers out itself,
    k padded with zeros to a multiple of 16 (current, delayed, block) or
    32 (mxfp8: whole E8M0 blocks), so odd k runs on cuBLASLt: two
    cublasLtMatmul calls of the stand-in for the aligned and odd-k GEMMs,
    each held to 25 dB against float64 by the client's --fp8. An odd m
    (cuBLASLt refuses m % 8, docs/gpu-results.md) and an unaligned C/D
    run through an aligned transient output (fp8.c); the client checks
    the caller's D, its padding untouched."""
    require_built([FFMA_CLIENT])
    import route_client
    args = [route_client.gemm("aligned", m=64, n=48, k=64, pad=0),
            route_client.gemm("odd_k", m=64, n=48, k=40, pad=0),
            route_client.gemm("odd_m", m=33, n=16, k=64, pad=0),
            route_client.gemm("unaligned_d", "lt", m=64, n=48, k=64, pad=0, oop=1, dpad=1),
            "--fp8"]
    env = {"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": recipe}
    res = route_client.run_client(FFMA_CLIENT, standin, tmp_path, args, env, tag=recipe)
    route_client.assert_all_ok(res)
    got = [(r["route"], r.get("backend"), r["reason"]) for r in res.recs]
    first = {"delayed": "; first call: scales from its own amax", "block": f"; {BLOCK_NOTE}"}.get(recipe, "")
    ran = ("fp8", "cublaslt-fp8", f"GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3{first}")
    # odd m (33, ldc 33) and an unaligned D (ldd 65) go through an aligned
    # fp32 transient D', m padded to 40 for the first; block's scale modes
    # want m and n multiples of 4, so it hands odd m to current.
    odd_m = ran if recipe != "block" else (
        "fp8", "cublaslt-fp8", "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3; recipe current instead: block needs m and n "
                               "multiples of 4 (cuBLASLt's 1x128/128x128 scale modes), the call is 33x16")
    assert got == [ran, ran, odd_m, ran], got
    # The stand-in's cuBLASLt ran an fp8 GEMM for each call.
    assert res.counts["standin_fp8_gemms"] == 4, res.counts

    env["GEMMSHIM_FP8_FORMAT"] = "e5m2"
    res = route_client.run_client(FFMA_CLIENT, standin, tmp_path, args[:1] + ["--fp8"], env, tag=recipe + "-e5m2")
    route_client.assert_all_ok(res)
    (rec,) = res.recs
    assert (rec["route"], rec.get("backend"), rec["reason"]) == (
        "native", None, f"GEMMSHIM_MODE=fp8; fp8 declined: cuBLASLt fp8 has no E5M2 x E5M2; {SLOWER}; ran native"), rec


def test_block_takes_a_for_a_weight_on_known_forward_gemms(shim, standin, tmp_path):
    """block's weight rule (fp8_block.c): 128x128 blocks (BLK128x128_32F)
    for A only on a GEMM known to be a forward one with A transposed,
    nn.Linear's forward y = x W^T as PyTorch calls it (T, N, A = W); 1x128
    (VEC128_32F) on both operands everywhere else, which is always valid
    (TransformerEngine's Float8BlockScaling: 128x128 for weights, 1x128 for
    activations and gradients; cuBLAS documentation: never 128x128 on both).
    fp8_client runs forwards on the main thread and backwards on
    pt_autograd_0: step 0's forwards come before any backward, so only the
    later steps' forwards are known ones."""
    client = CLIENT_DIR / "fp8_client_cu13"
    require_built([client])
    layers, steps = 2, 3
    log = tmp_path / "gemms.jsonl"
    counts = tmp_path / "counts"
    r = run_ok([client, f"--layers={layers}", f"--steps={steps}"], standin[13], shim=True,
               env={"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "block",
                    "GEMMSHIM_LOG": str(log), "STANDIN_COUNTS": str(counts)})
    # What cuBLASLt was given, not what the log says: A's scale mode
    # BLK128x128_32F on exactly the known forward GEMMs.
    c = standin_counts(counts)
    assert (c["standin_fp8_gemms"], c["standin_fp8_blk128_a_gemms"]) == (steps * layers * 3, (steps - 1) * layers), c
    lines = [dict(w.split("=", 1) for w in words[1:]) for words in r.lines("gemm")]
    assert len(lines) == steps * layers * 3, r.describe()
    assert all(int(d["status"]) == 0 and float(d["sqnr"]) >= 25.0 for d in lines), lines
    recs = read_log(log)
    assert len(recs) == steps * layers * 3
    notes = [rec["reason"].split("; ")[-1] for rec in recs]
    assert all((rec["route"], rec["backend"], rec["recipe"]) == ("fp8", "cublaslt-fp8", "block") for rec in recs), recs
    weight = "A: 128x128 blocks (weight), B: 1x128"
    assert notes.count(weight) == (steps - 1) * layers, notes
    assert notes.count(BLOCK_NOTE) == steps * layers * 3 - (steps - 1) * layers, notes
    # The log's order is the calls' order: step 0's forwards are not known ones.
    assert weight not in notes[:layers], notes


@pytest.mark.parametrize("cc,recipe,why", [
    ("9.0", "block", "block scales one matrix per operand, the call has a batch of 2"),
    ("10.0", "mxfp8", "mxfp8 scales one matrix per operand, the call has a batch of 2; " + block_sm(100)),
])
def test_block_recipes_leave_batches_to_current(shim, standin, tmp_path, cc, recipe, why):
    """A strided batch: the block-scaled recipes quantize one matrix per
    operand (one scale tensor each), so the call falls back to current,
    which scales the batch as one tensor, with the reason."""
    require_built([FFMA_CLIENT])
    import route_client
    args = [route_client.gemm("strided", "strided", m=64, n=48, k=64, pad=0, spad=0, batch=2), "--fp8"]
    env = {"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": recipe}
    res = route_client.run_client(FFMA_CLIENT, standin, tmp_path, args, env, tag=recipe)
    route_client.assert_all_ok(res)
    (rec,) = res.recs
    assert (rec["route"], rec.get("backend"), rec.get("recipe"), rec["reason"]) == (
        "fp8", "cublaslt-fp8", "current", f"GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3; recipe current instead: {why}"), rec


def grids(path):
    """STANDIN_GRIDS lines: (kernel, X) of each launch that ran."""
    return [(w[1], int(w[2])) for w in (line.split() for line in path.read_text().splitlines())]


@pytest.mark.parametrize("cc,sms", [("8.9", 58), ("9.0", 132), ("10.0", 148)])
def test_quantize_grid_is_a_wave_of_the_devices_sms(shim, standin, tmp_path, cc, sms):
    """The current recipe's quantize launch has 3 blocks per SM of the
    device (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: the stand-in's boards
    have NVIDIA's SM counts, 58 for an L40-class sm_89, 132 for an H100
    SXM, 148 for a B200), capped by the operands' 64 x 64 tiles: k = 16384
    gives A 256 tiles and B 256. The codes do not depend on the grid (each
    element is encoded on its own, the amax is a max): the output is the
    same bytes on every device."""
    require_built([FFMA_CLIENT])
    import route_client
    dump = tmp_path / f"dump-{cc}"
    dump.mkdir()
    trace = tmp_path / f"grids-{cc}"
    args = [route_client.gemm("deep_k", m=64, n=64, k=16384, pad=0), "--fp8", f"--dump={dump}"]
    env = {"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "current",
           "STANDIN_GRIDS": str(trace)}
    res = route_client.run_client(FFMA_CLIENT, standin, tmp_path, args, env, tag=cc)
    route_client.assert_all_ok(res)
    (rec,) = res.recs
    assert (rec["route"], rec["backend"], rec["recipe"]) == ("fp8", "cublaslt-fp8", "current"), rec
    quantize = [x for k, x in grids(trace) if k.startswith("gs_fp8_quantize_")]
    assert quantize == [min(3 * sms, 512)], grids(trace)
    out = (dump / "deep_k.out").read_bytes()
    ref = tmp_path / "dump-ref"
    if cc == "9.0":
        return
    # Against the 9.0 run's bytes (run here too, so each case stands alone).
    ref.mkdir(exist_ok=True)
    env90 = {**env, "STANDIN_CC": "9.0", "STANDIN_GRIDS": str(tmp_path / "grids-ref")}
    route_client.run_client(FFMA_CLIENT, standin, tmp_path, args[:-1] + [f"--dump={ref}"], env90, tag="ref")
    assert (ref / "deep_k.out").read_bytes() == out


MXFP8_CUBLAS_12_7 = "mxfp8 needs cuBLAS 12.8 or newer, the loaded cuBLASLt is 12.7.9"


@pytest.mark.parametrize("version,ran,why", [
    ("120800", "mxfp8", None),
    ("120709", "current", f"{MXFP8_CUBLAS_12_7}; {block_sm(100)}"),
])
def test_mxfp8_checks_the_cublas_version(threads_client, standin, tmp_path, version, ran, why):
    """VEC32_UE8M0 came with cuBLAS 12.8, the first with Blackwell (CUDA
    12.8 release notes, "cuBLAS: Release 12.8"): an older cuBLASLt (the
    stand-in's STANDIN_CUBLASLT_VERSION) sends mxfp8 to the next recipe
    with the version named, as block does below 12.9."""
    g, rec = one_gemm(threads_client, standin, tmp_path, "10.0",
                      {"GEMMSHIM_FP8_RECIPE": "mxfp8", "STANDIN_CUBLASLT_VERSION": version})
    assert g["status"] == 0 and g["sqnr"] >= 25.0, g
    assert (rec["route"], rec["backend"], rec["recipe"]) == ("fp8", "cublaslt-fp8", ran), rec
    want = "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3"
    if why:
        want += f"; recipe {ran} instead: {why}"
    assert rec["reason"] == want, rec


@pytest.mark.parametrize("cc, recipe", [("9.0", "current"), ("9.0", "block"), ("10.0", "mxfp8")])
def test_hybrid_keeps_recomputed_forwards_in_e4m3(shim, standin, tmp_path, cc, recipe):
    """Activation checkpointing (torch.utils.checkpoint) recomputes a
    layer's forward during backward, on the autograd thread: a (T,N) GEMM
    there, nn.Linear's forward layout, whose B is an activation, not a
    gradient, so it stays E4M3 x E4M3; dgrad and wgrad keep B in E5M2
    (the stand-in's count of GEMMs given an E5M2 B: those alone)."""
    client = CLIENT_DIR / "fp8_client_cu13"
    require_built([client])
    log = tmp_path / "gemms.jsonl"
    counts = tmp_path / "counts.txt"
    r = run_ok([client, "--layers=2", "--steps=2", "--checkpoint=1"], standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_FP8_RECIPE": recipe, "GEMMSHIM_FP8_FORMAT": "hybrid", "GEMMSHIM_LOG": str(log),
                    "STANDIN_COUNTS": str(counts)})
    lines = [parse_fields(w[1:]) for w in r.lines("gemm")]
    recs = read_log(log)
    assert len(lines) == len(recs) == 2 * 2 * 4, r.describe()
    kinds = [g["kind"] for g in lines]
    assert kinds.count("recompute") == 4, kinds
    for g, rec in zip(lines, recs):
        gradient = g["kind"] in ("dgrad", "wgrad")
        formats = "fp8 e4m3 x e5m2 (B: gradient)" if gradient else "fp8 e4m3 x e4m3"
        assert rec["recipe"] == recipe, rec
        # A recompute runs on the autograd thread: it has been seen, no note.
        want = f"GEMMSHIM_MODE=fp8; {formats}" + hybrid_note(recipe, g["kind"] != "fwd", int(g["step"]))
        assert rec["reason"] == want, (g, rec)
        assert int(g["status"]) == 0 and float(g["sqnr"]) >= (18.0 if gradient else 25.0), g
    c = standin_counts(counts)
    assert (c["standin_fp8_gemms"], c["standin_fp8_e5m2_b_gemms"]) == (16, 8), c


UNTOLD = "hybrid asked for, but no autograd thread has been seen to tell backward GEMMs apart: e4m3 for both"


def hybrid_note(recipe, backward, step):
    """The recipe's words after the formats in a hybrid call's reason.
    Before the first backward GEMM no autograd thread has been seen: the
    first step's forward cannot be told from a backward one (and block
    cannot tell the weight)."""
    untold = not backward and step == 0
    if recipe == "block":
        if not backward and not untold:
            return "; A: 128x128 blocks (weight), B: 1x128"
        return "; 1x128 blocks on A and B" + ("; " + UNTOLD if untold else "")
    return "; " + UNTOLD if untold else ""


@pytest.mark.parametrize("cc, recipe", [("9.0", "current"), ("9.0", "block"), ("10.0", "mxfp8")])
def test_hybrid_puts_backward_gradients_in_e5m2(shim, standin, tmp_path, cc, recipe):
    """GEMMSHIM_FP8_FORMAT=hybrid as TE's Format.HYBRID defines it
    (transformer_engine/common/recipe/__init__.py: E4M3 in the forward
    pass, E5M2 in the backward pass; accepted by Float8CurrentScaling,
    Float8BlockScaling and MXFP8BlockScaling alike): fp8_client_cu13's
    backward GEMMs run on a thread named pt_autograd_0, and both (dgrad,
    wgrad) pass grad_output as B, as PyTorch's nn.Linear backward reaches
    cuBLAS; B is E5M2 there, the forward stays E4M3 x E4M3. The stand-in
    counts the cuBLASLt GEMMs given an E5M2 B: one per backward GEMM. An
    E5M2 operand has one mantissa bit less: 18 dB for those, 25 for the
    rest. E4M3 x E5M2 block-scaled is a pair cuBLASLt takes (TE's
    tests/pytorch/test_float8_blockwise_gemm_exact.py runs it; only E5M2 x
    E5M2 is skipped)."""
    client = CLIENT_DIR / "fp8_client_cu13"
    require_built([client])
    log = tmp_path / "gemms.jsonl"
    counts = tmp_path / "counts.txt"
    r = run_ok([client, "--layers=2", "--steps=2"], standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_FP8_RECIPE": recipe, "GEMMSHIM_FP8_FORMAT": "hybrid", "GEMMSHIM_LOG": str(log),
                    "STANDIN_COUNTS": str(counts)})
    lines = [parse_fields(w[1:]) for w in r.lines("gemm")]
    recs = read_log(log)
    assert len(lines) == len(recs) == 2 * 2 * 3, r.describe()
    for g, rec in zip(lines, recs):
        backward = g["kind"] != "fwd"
        formats = "fp8 e4m3 x e5m2 (B: gradient)" if backward else "fp8 e4m3 x e4m3"
        assert (rec["route"], rec["backend"], rec["recipe"]) == ("fp8", "cublaslt-fp8", recipe), rec
        assert rec["reason"] == f"GEMMSHIM_MODE=fp8; {formats}" + hybrid_note(recipe, backward, int(g["step"])), rec
        assert int(g["status"]) == 0 and float(g["sqnr"]) >= (18.0 if backward else 25.0), g
    c = standin_counts(counts)
    assert (c["standin_fp8_gemms"], c["standin_fp8_e5m2_b_gemms"]) == (12, 8), c
