"""The ffma route end to end: ffma_client_cu13 (GEMMs described on its
command line, every result checked against float64 with NaN-poisoned
outputs) under the preloaded shim with GEMMSHIM_MODE=ffma, over the
stand-in as an sm 6.1 device. Each test asserts the client's verdicts and
statuses, the routing log's route/backend/reason for every call, and the
stand-in's call counters where they are the proof (allocations, kernel
launches, synchronisations)."""

from collections import Counter

import pytest

import route_client
from harness import CLIENT_DIR, read_log, require_built, run, standin_counts
from route_client import align256, assert_all_ok, gemm

MODE = "GEMMSHIM_MODE=ffma"
BASE_ENV = {"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off"}
NO_POOLS = {"STANDIN_NO_POOLS": "1"}
APIS = {
    "ex": "cublasGemmEx",
    "ex64": "cublasGemmEx_64",
    "strided": "cublasGemmStridedBatchedEx",
    "strided64": "cublasGemmStridedBatchedEx_64",
    "batched": "cublasGemmBatchedEx",
    "batched64": "cublasGemmBatchedEx_64",
    "lt": "cublasLtMatmul",
}
# cublasStatus_t
# (cublas_api.h; shim/base/sys.h says which the fault injection gives each call, after the cuBLAS docs)
EXECUTION_FAILED, ALLOC_FAILED, INVALID_VALUE, NOT_SUPPORTED = 13, 3, 7, 15
# CUDA_ERROR_UNKNOWN: the failure value the shim's fault injection gives driver calls.
CU_UNKNOWN = 999
# cublasMath_t
MATH = {"default": 0, "tensor_op": 1, "pedantic": 2, "tf32": 3, "tensor_op+disallow": 17, "tf32+disallow": 19}


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "ffma_client_cu13"
    require_built([path])
    return path


def run_client(client, standin, tmp_path, args, env=None, shim=True, rc=0, tag="run"):
    return route_client.run_client(client, standin, tmp_path, args, BASE_ENV, env, shim, rc, tag)


def declined(why):
    return f"{MODE}; ffma declined: {why}; ran native"


def assert_ffma(rec, name=""):
    backend = "lt-fp32" if rec["api"] == "cublasLtMatmul" else "sgemm"
    got = (rec["decided"], rec["route"], rec.get("backend"), rec["reason"], rec["status"])
    assert got == ("ffma", "ffma", backend, MODE, 0), (name, rec)


def assert_native(rec, why, status=0, name=""):
    got = (rec["decided"], rec["route"], "backend" in rec, rec["reason"], rec["status"])
    assert got == ("ffma", "native", False, declined(why), status), (name, rec)


def transient_bytes(m, n, k, batch=1, c="bf16", bias_members=0):
    """What one ffma call allocates (docs/ffma.md): A, B and the result in
    fp32, each 256-byte aligned; the result only when C is not fp32; a
    widened bias of m per member."""
    out = 4 * m * n * batch if c != "fp32" else 0
    return align256(4 * m * k * batch) + align256(4 * k * n * batch) + align256(out) + align256(4 * m * bias_members)


# ---- 1. alpha/beta in device memory -----------------------------------------------------
@pytest.mark.parametrize("api", list(APIS))
def test_device_pointer_mode(client, standin, tmp_path, api):
    """Device-resident alpha/beta through every entry point, beta nonzero and
    zero (C then NaN-poisoned: the fp32 GEMM must not consume it), next to
    the same calls in host mode: each runs ffma with a checked result, and
    the log shows the handle's (or descriptor's) pointer mode."""
    args = []
    for pm in ("host", "device"):
        for beta in (0.75, 0):
            args.append(gemm(f"{pm}_b{beta}", api, pm=pm, beta=beta, alpha=1.25))
    if api == "lt":
        args.append(gemm("device_oop", api, pm="device", beta=0.5, oop=1, dpad=2, epi="gelu_bias"))
    res = run_client(client, standin, tmp_path, args)
    assert_all_ok(res)
    for rec, call in zip(res.recs, res.calls):
        assert_ffma(rec, call["name"])
        assert rec["pointer_mode"] == call["name"].split("_")[0], rec


@pytest.mark.parametrize(
    "api,spec,launches",
    [
        # One launch widens A, B, [C] and [the bias]; one narrows the result.
        ("ex", {"pm": "host", "beta": 0}, 2),
        ("ex", {"pm": "host", "beta": 0.75}, 2),
        ("ex", {"pm": "device", "beta": 0}, 2),  # beta unknown on the host: read by the output kernel
        ("ex", {"pm": "device", "beta": 0.75}, 2),
        ("ex", {"pm": "device", "beta": 0.75, "c": "fp32"}, 1),  # the fp32 GEMM writes C itself
        ("batched", {"pm": "device", "beta": 0}, 2),
        ("lt", {"pm": "host", "beta": 0}, 2),
        ("lt", {"pm": "device", "beta": 0}, 2),
        ("lt", {"pm": "device", "beta": 0.5, "oop": 1}, 2),
        ("lt", {"pm": "host", "beta": 0.5, "oop": 1, "epi": "relu"}, 2),  # C widened apart, in the same launch
        ("lt", {"pm": "device", "beta": 0, "epi": "bias"}, 2),  # the bias in the same launch
        ("lt", {"pm": "host", "beta": 0, "c": "fp32", "epi": "bias"}, 1),  # fp32 bias used as it is
    ],
)
def test_which_operands_are_widened(client, standin, tmp_path, api, spec, launches):
    """Exactly the kernels a call needs: one widening launch (A, B, the bias,
    and C only for a cuBLASLt relu/gelu epilogue) and, unless C is fp32,
    one output launch that narrows the result and adds beta * C
    (stand-in launch counter)."""
    res = run_client(client, standin, tmp_path, [gemm("one", api, **spec)])
    assert_all_ok(res)
    assert_ffma(res.recs[0])
    assert res.counts["cuLaunchKernel"] == launches, res.counts


# ---- 1b. what the route computes, bit for bit -------------------------------------------
# Small dyadic operands: every product and partial sum of A B is exact in
# fp32, so the fp32 GEMM's accumulation order cannot matter and the result
# follows from the definition alone. alpha 0.7 and beta 0.3 are not
# dyadic: alpha * AB and the sum with beta * C round.
EXACT = {"apat": "1:-2:0.5:3:-1.5:0.25", "bpat": "2:-1:1.5:-0.5:1", "alpha": 0.7, "beta": 0.3, "exact": 1}


@pytest.mark.parametrize("api,spec", [
    ("ex", {"pm": "host"}),  # C is D: read, then written, by one thread
    ("ex", {"pm": "device"}),  # beta read on the device by the output kernel
    ("ex", {"pm": "host", "ab": "fp16"}),
    ("ex64", {"pm": "host", "alpha": 1}),  # alpha 1: alpha * AB is AB, no rounding
    ("strided", {"pm": "device", "batch": 3}),
    ("batched", {"pm": "host", "batch": 3}),  # pointer arrays for C/D
    ("lt", {"pm": "host", "oop": 1, "dpad": 5, "batch": 2}),  # C apart from D, ldc != ldd
    ("lt", {"pm": "device", "oop": 1, "batch": 2}),
    ("ex", {"pm": "host", "beta": 0}),  # C NaN-poisoned: never read
    ("ex", {"pm": "device", "beta": 0}),  # the kernel reads beta 0 and skips C
    ("lt", {"pm": "device", "beta": 0, "oop": 1}),
], ids=["ex-host", "ex-device", "ex-fp16", "ex64-alpha1", "strided-device", "batched-host", "lt-oop-ldd",
        "lt-oop-device", "ex-beta0-host", "ex-beta0-device", "lt-beta0-device"])
def test_split_rounding_bit_for_bit(client, standin, tmp_path, api, spec):
    """cuBLAS's definition (cuBLAS documentation, cublasGemmEx with
    CUBLAS_COMPUTE_32F: D = alpha op(A) op(B) + beta C computed in fp32,
    then converted to D's type) as the route splits it (docs/ffma.md,
    "What it computes"): the fp32 GEMM writes r = fp32(alpha * AB) with
    beta 0, the output kernel writes D = round(fp32(r + beta * C)), one
    fp32 rounding for the sum and one to bf16/fp16, nearest even. The
    client's float64 model of exactly that (ffma_client exact=1) must
    match every element bit for bit; where beta is 0, C is NaN and must
    not be read ("if beta == 0 then C does not have to be a valid input",
    cuBLAS documentation, cublas<t>gemm)."""
    res = run_client(client, standin, tmp_path, [gemm("split", api, **{**EXACT, **spec})])
    assert_all_ok(res)
    assert_ffma(res.recs[0])


# ---- 2. the caller's math mode ------------------------------------------------------------
def test_math_mode_left_as_found(client, standin, tmp_path):
    """Every math mode, set on the handle before the call, reads back the
    same just after it. Operands of magnitude 2^17 (beyond fp16's range):
    under CUBLAS_TENSOR_OP_MATH cuBLAS may run an fp32 GEMM with its inputs
    rounded to fp16, so the route leaves those calls native; every other
    mode runs ffma, and every result is right."""
    args = []
    for api in ("ex", "ex64", "strided", "batched64"):
        for mode in MATH:
            args.append(gemm(f"{api}:{mode}", api, math=mode, amp=131072))
    # A call that sets nothing sees the mode the last one left.
    args.append(gemm("ex:unchanged", "ex", amp=131072))
    res = run_client(client, standin, tmp_path, args)
    assert_all_ok(res)
    for rec, call in zip(res.recs, res.calls):
        api, mode = call["name"].split(":")
        want = MATH["tf32+disallow"] if mode == "unchanged" else MATH[mode]
        assert call["math"] == f"{want}/{want}", call
        if mode.startswith("tensor_op"):
            assert_native(rec, "the handle's math mode CUBLAS_TENSOR_OP_MATH would round the fp32 GEMM's "
                               "inputs to fp16", name=call["name"])
        else:
            assert_ffma(rec, call["name"])


# ---- 3. no synchronisation ------------------------------------------------------------------
NOSYNC_CALLS = [
    gemm("ex", "ex"),
    gemm("ex64_dev", "ex64", pm="device"),
    gemm("strided", "strided", beta=0),
    gemm("strided64_f32", "strided64", c="fp32"),
    gemm("lt_bias", "lt", epi="relu_bias"),
    gemm("lt_oop_dev", "lt", oop=1, pm="device", batch=2),
    gemm("ex_big", "ex", m=160, n=96, k=128),  # grows the scratch buffer without pools
]


@pytest.mark.parametrize("pools", [True, False])
def test_no_synchronisation(client, standin, tmp_path, pools):
    """A client that never synchronises, under a driver that turns any
    synchronisation into exit status 86: the shim on the ffma route adds
    none (module loading, allocation, casts, fp32 GEMM, narrowing, log)."""
    env = {"STANDIN_FORBID_SYNC": "1", **({} if pools else NO_POOLS)}
    res = run_client(client, standin, tmp_path, ["--nosync", *NOSYNC_CALLS], env=env)
    assert res.counts["standin_forbidden_syncs"] == 0
    assert all(c["status"] == "0" for c in res.calls)
    for rec in res.recs:
        assert_ffma(rec)


@pytest.mark.parametrize("pools", [True, False])
def test_no_synchronisation_with_checked_results(client, standin, tmp_path, pools):
    """The same calls (and pointer-array batches) with every result checked:
    the client's own synchronisations are the only ones, the same with and
    without the shim."""
    args = [*NOSYNC_CALLS, gemm("batched", "batched"), gemm("batched64_dev", "batched64", pm="device")]
    env = {"STANDIN_FORBID_SYNC": "1", **({} if pools else NO_POOLS)}
    native = run_client(client, standin, tmp_path, args, env=env, shim=False, rc=86, tag="native")
    res = run_client(client, standin, tmp_path, args, env=env, rc=86)
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)
    sync_calls = ("standin_forbidden_syncs", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
                  "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2")
    assert {k: res.counts[k] for k in sync_calls} == {k: native.counts[k] for k in sync_calls}
    forbidden = [l for l in res.run.stderr.splitlines() if "forbidden synchronisation" in l]
    assert forbidden == [l for l in native.run.stderr.splitlines() if "forbidden synchronisation" in l]


# ---- 4. no leak --------------------------------------------------------------------------------
def test_no_leak_with_pools(client, standin, tmp_path):
    """One stream-ordered allocation and one free per ffma call, none for a
    declined call, and no device memory left behind: the live allocations
    at exit are the client's own (those of the same run without the shim)."""
    args = [gemm(f"{api}", api) for api in APIS]
    args += [gemm("lt_bias_strided", "lt", batch=3, epi="bias", bstride=70), gemm("ex_f32", "ex", c="fp32"),
             gemm("declined", "batched", c="fp32")]
    native = run_client(client, standin, tmp_path, args, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args)
    assert_all_ok(res)
    ran = sum(rec["route"] == "ffma" for rec in res.recs)
    assert ran == len(args) - 1
    assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuMemFreeAsync"] == ran
    assert native.counts["cuMemAllocFromPoolAsync"] == 0
    assert res.counts["standin_live_allocations"] == native.counts["standin_live_allocations"]
    assert res.counts["standin_live_bytes"] == native.counts["standin_live_bytes"]
    assert res.counts["cuMemAlloc_v2"] == native.counts["cuMemAlloc_v2"]


# ---- 5. no memory pools: the scratch buffer ------------------------------------------------
def test_no_pools_scratch_is_reused_and_grows(client, standin, tmp_path):
    """Without pools each call runs ffma from one per-stream scratch buffer:
    allocated once, reused by every call that fits, replaced (cuMemFree +
    cuMemAlloc) only by a call bigger than any before, and kept for the
    process. The shim's allocations are counted against the same run
    without the shim."""
    shapes = [(64, 48, 80)] * 12 + [(96, 64, 80)] + [(64, 48, 80)] * 6 + [(128, 96, 112)] + [(32, 16, 24)] * 4
    args = [gemm(f"g{i}", "ex", m=m, n=n, k=k) for i, (m, n, k) in enumerate(shapes)]
    native = run_client(client, standin, tmp_path, args, env=NO_POOLS, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args, env=NO_POOLS)
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)
    grown, biggest = 0, 0
    for m, n, k in shapes:
        if transient_bytes(m, n, k) > biggest:
            grown, biggest = grown + 1, transient_bytes(m, n, k)
    assert grown == 3
    assert res.counts["cuMemAllocFromPoolAsync"] == 0
    assert res.counts["cuMemAlloc_v2"] - native.counts["cuMemAlloc_v2"] == grown
    assert res.counts["cuMemFree_v2"] - native.counts["cuMemFree_v2"] == grown - 1
    assert res.counts["standin_live_allocations"] - native.counts["standin_live_allocations"] == 1
    assert res.counts["standin_live_bytes"] - native.counts["standin_live_bytes"] == biggest


def test_no_pools_every_entry_point(client, standin, tmp_path):
    args = [gemm(api, api) for api in APIS] + [gemm("lt_bias_dev", "lt", epi="gelu_bias", pm="device", oop=1)]
    res = run_client(client, standin, tmp_path, args, env=NO_POOLS)
    assert_all_ok(res)
    for rec, call in zip(res.recs, res.calls):
        assert_ffma(rec, call["name"])


# ---- 6. graph capture ---------------------------------------------------------------------
CAPTURE_CALLS = [gemm("warm_ex", "ex"), gemm("warm_lt", "lt", epi="bias"),
                 gemm("cap_ex", "ex"), gemm("cap_strided", "strided", pm="device"),
                 gemm("cap_lt", "lt", epi="bias", oop=1), gemm("cap_batched", "batched")]


def capture_line(res):
    lines = res.run.lines("capture")
    assert len(lines) == 1, res.describe()
    return " ".join(lines[0][1:])


@pytest.mark.parametrize("pools", [True, False])
def test_capture_keeps_the_route(client, standin, tmp_path, pools):
    """Captured calls run ffma in the graph (docs/graphs.md): each gets a
    buffer of its own from cuMemAlloc, owned by the graph through a user
    object (cuda.h, cuGraphRetainUserObject), never the pool's or a scratch
    slot's memory (memory alloc/free nodes would forbid cloning, child
    nodes and a second instantiation: cuda.h, cuGraphAddMemAllocNode; a
    scratch slot is shared with eager work). The graph, launched by the
    client, gives right results (checked by the client after the launch),
    and destroying it frees the buffers."""
    res = run_client(client, standin, tmp_path, ["--capture-from=2", *CAPTURE_CALLS], env={} if pools else NO_POOLS)
    assert capture_line(res) == "begin=0 end=0 launch=0"
    assert_all_ok(res)
    for rec, call in zip(res.recs, res.calls):
        assert_ffma(rec, call["name"])
        assert rec.get("captured") == (None if call["name"].startswith("warm") else 1), (call["name"], rec)
    if pools:
        assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuMemFreeAsync"] == 2
    assert res.counts["cuUserObjectCreate"] == res.counts["user_object_destroyed"] == 4, res.counts


def test_capture_status_unknown_declines(client, standin, tmp_path):
    """cuStreamIsCapturing failing (its third call: the first inside the
    capture) is not taken for "not capturing": that call runs native, the
    next captured one is recognised again."""
    res = run_client(client, standin, tmp_path, ["--capture-from=2", *CAPTURE_CALLS],
                     env={"GEMMSHIM_FAULT": "cuStreamIsCapturing:3"})
    assert capture_line(res) == "begin=0 end=0 launch=0"
    assert_all_ok(res)
    assert_ffma(res.recs[0])
    assert_ffma(res.recs[1])
    assert_native(res.recs[2], "cuStreamIsCapturing failed")
    for rec in res.recs[3:]:
        assert_ffma(rec)
        assert rec["captured"] == 1, rec


# ---- 7. memory bounds ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "api,spec",
    [
        ("ex", {"m": 64, "n": 48, "k": 80}),
        ("strided64", {"m": 40, "n": 24, "k": 56, "batch": 3, "c": "fp32"}),
        ("lt", {"m": 48, "n": 32, "k": 64, "batch": 2, "epi": "bias", "bstride": 50}),
    ],
)
def test_max_bytes_boundary(client, standin, tmp_path, api, spec):
    """GEMMSHIM_FFMA_MAX_BYTES equal to what the call needs runs ffma; one
    byte less declines with the reason, and the result is right either way."""
    bias_members = spec.get("batch", 1) if spec.get("epi") == "bias" else 0
    need = transient_bytes(spec["m"], spec["n"], spec["k"], spec.get("batch", 1), spec.get("c", "bf16"),
                           bias_members)
    args = [gemm("g", api, **spec)]
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FFMA_MAX_BYTES": str(need)}, tag="fits")
    assert_all_ok(res)
    assert_ffma(res.recs[0])
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FFMA_MAX_BYTES": str(need - 1)}, tag="over")
    assert_all_ok(res)
    assert_native(res.recs[0], "needs more transient memory than GEMMSHIM_FFMA_MAX_BYTES")
    assert res.counts["cuMemAllocFromPoolAsync"] == 0


OVERLAP = "D's batch members overlap (stride below ldd x (n - 1) + m): an element would have two writers"


@pytest.mark.parametrize("mode,cc", [("ffma", "6.1"), ("fp16", "7.5")])
@pytest.mark.parametrize("api", ["strided", "strided64", "lt"])
def test_overlapping_output_members_decline_first(client, standin, tmp_path, api, mode, cc):
    """A strided batch whose D members overlap (batch stride 40 elements
    below one member's span), for which cuBLAS defines no result: the
    routes' output kernels give every element one writer, so each route
    declines before allocating or launching anything, and the call runs
    native (whose result the client's check does not accept: exit 1 either
    way)."""
    res = run_client(client, standin, tmp_path, [gemm("ovl", api, batch=2, spad=-40, beta=0)], rc=1,
                     env={"GEMMSHIM_MODE": mode, "STANDIN_CC": cc})
    rec = res.recs[0]
    assert (rec["decided"], rec["route"], rec["reason"]) == \
        (mode, "native", f"GEMMSHIM_MODE={mode}; {mode} declined: {OVERLAP}; ran native"), rec
    assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuLaunchKernel"] == 0


@pytest.mark.parametrize("mode,cc,option", [("ffma", "6.1", "GEMMSHIM_FFMA_MAX_BYTES"),
                                             ("fp8", "9.0", "GEMMSHIM_FP8_MAX_BYTES")])
@pytest.mark.parametrize("batch", [2**40, 2**40 + 1])
def test_sizes_past_the_arithmetic_decline_first(client, standin, tmp_path, mode, cc, option, batch):
    """cublasGemmStridedBatchedEx_64 at m = n = k = 2048 with A and B
    broadcast (batch stride 0) over 2^40 or 2^40 + 1 members: widened to
    fp32, A alone is 2048 * 2048 * 2^40 * 4 bytes, 2^64 exactly, and one
    member more wraps a 64-bit product to 16 MiB. Every size is checked
    before anything is allocated: the call runs native with the cap's
    reason, having allocated and launched nothing, and returns what cuBLAS
    returns for it (the stand-in's C, stored for one member, is too short
    for 2^40: EXECUTION_FAILED with a "standin:" line saying so, C
    untouched)."""
    args = [client, gemm("huge", "strided64", m=2048, n=2048, k=2048, batch=1, call_batch=batch, call_sab=0)]
    got = {}
    for shim in (False, True):
        log, counts = tmp_path / f"{shim}.jsonl", tmp_path / f"{shim}.counts"
        env = {**BASE_ENV, "STANDIN_CC": cc, "GEMMSHIM_MODE": mode, "GEMMSHIM_LOG": str(log),
               "STANDIN_COUNTS": str(counts)}
        r = run(args, standin[13], shim=shim, env=env)
        assert r.returncode == 0, r.describe()
        assert "C (" in r.stderr and "runs past the end of its device allocation" in r.stderr, r.describe()
        got[shim] = (r.calls, read_log(log) if shim else [], standin_counts(counts))
    (native, _, native_counts), (calls, recs, counts) = got[False], got[True]
    assert [(c["status"], c["ok"]) for c in calls] == [(c["status"], c["ok"]) for c in native] == \
        [(str(EXECUTION_FAILED), "1")]
    want = (mode, "native", f"GEMMSHIM_MODE={mode}; {mode} declined: needs more transient memory than {option}; "
                            "ran native", EXECUTION_FAILED)
    assert [(x["decided"], x["route"], x["reason"], x["status"]) for x in recs] == [want], recs
    assert counts["cuMemAllocFromPoolAsync"] == counts["cuMemAlloc_v2"] - native_counts["cuMemAlloc_v2"] == 0
    assert counts["cuLaunchKernel"] == 0


POOL_OOM = "cuMemAllocFromPoolAsync: out of device memory, after the pool gave back what it held unused"


@pytest.mark.parametrize("pools,why", [(True, POOL_OOM),
                                       (False, "cuMemAlloc of the scratch buffer failed")])
def test_device_out_of_memory(client, standin, tmp_path, pools, why):
    """A device too small for the transient buffers (the client's own
    allocations fit, 1 MiB workspace included): the allocation fails, the
    call runs native and right; a smaller call after it runs ffma."""
    big, small = (256, 256, 256), (64, 48, 80)
    assert transient_bytes(*big) == 768 << 10
    args = [gemm("big", "ex", m=big[0], n=big[1], k=big[2]), gemm("small", "ex", m=small[0], n=small[1], k=small[2])]
    env = {"STANDIN_MEM_LIMIT": "2m", **({} if pools else NO_POOLS)}
    run_client(client, standin, tmp_path, args, env=env, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args, env=env)
    assert_all_ok(res)
    assert_native(res.recs[0], why)
    assert_ffma(res.recs[1])
    if pools:
        assert res.counts["cuMemPoolTrimTo"] == 1


# ---- 7b. the transient pool across training steps ------------------------------------------
# What a pool keeps and gives back: "When more than the release threshold
# bytes of memory are held by the memory pool, the allocator will try to
# release memory back to the OS on the next call to stream, event or
# context synchronize" (cuda.h, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD); the
# device's default pool has threshold 0. The stand-in maps a pool block of
# exactly the size asked when no free block holds it, and unmaps free
# blocks down to the threshold at each synchronisation
# (tests/standin/driver_pool.c): standin_pool_maps / standin_pool_unmaps
# count those. The client synchronises after every call, as a training
# loop's loss.item() does after each step, only more often.
STEP = [(96, 64, 80), (64, 48, 80), (32, 16, 24)]  # largest first: one block serves them all
STEPS = 4
KEEP_DEFAULT = 256 << 20


def pool_lines(res):
    """The exit report's pool lines, as dicts of their key=value fields."""
    out = []
    for line in res.run.stderr.splitlines():
        if " INFO transient pool " in line:
            fields = line.split(" INFO transient pool ", 1)[1].split()
            out.append(dict(f.split("=", 1) for f in fields))
    return out


def step_args(steps, **kw):
    return [gemm(f"s{i}_{j}", "ex", m=m, n=n, k=k, **kw) for i in range(steps) for j, (m, n, k) in enumerate(STEP)]


@pytest.mark.parametrize("keep", [None, "biggest", "biggest-1", "0"])
def test_pool_across_steps(client, standin, tmp_path, keep):
    """With the default GEMMSHIM_POOL_KEEP_BYTES (256 MiB) or exactly the
    largest call's buffers, the pool maps memory once, in the first call, and
    never gives it back between calls: every later call of every step reuses
    it. Keeping one byte less, the synchronisation after each step's largest
    call gives its block back, the next call maps a block of its own (kept:
    it fits the limit) and the next step's largest call maps again, the
    kept block going at the synchronisation after it: two maps a step.
    Keeping nothing, every synchronisation gives the block back and every
    call maps it again: what the default pool (threshold 0) does. The exit
    report (INFO) gives the peak, what was kept and the limit."""
    sizes = [transient_bytes(*shape) for shape in STEP]
    biggest = sizes[0]
    assert sizes == sorted(sizes, reverse=True)
    calls = STEPS * len(STEP)
    limit, maps, unmaps, kept = {
        None: (KEEP_DEFAULT, 1, 0, biggest),
        "biggest": (biggest, 1, 0, biggest),
        "biggest-1": (biggest - 1, 2 * STEPS, 2 * STEPS - 1, sizes[1]),
        "0": (0, calls, calls, 0),
    }[keep]
    env = {"GEMMSHIM_DEBUG": "INFO", **({} if keep is None else {"GEMMSHIM_POOL_KEEP_BYTES": str(limit)})}
    res = run_client(client, standin, tmp_path, step_args(STEPS), env=env)
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)
    assert res.counts["cuMemPoolCreate"] == 1
    assert res.counts["cuMemPoolSetAttribute"] == 1
    assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuMemFreeAsync"] == calls
    assert res.counts["cuMemPoolTrimTo"] == 0
    assert res.counts["cuStreamSynchronize"] >= calls
    assert (res.counts["standin_pool_maps"], res.counts["standin_pool_unmaps"]) == (maps, unmaps)
    peak = biggest + (sizes[1] if keep == "biggest-1" else 0)  # the big block mapped while the kept one is held
    want = {"device": "0", "peak_mapped": str(peak), "peak_used": str(biggest), "kept_at_exit": str(kept),
            "keep_limit": str(limit), "give_backs": "0"}
    assert pool_lines(res) == [want], res.describe()


def test_pool_counts_do_not_grow_with_steps(client, standin, tmp_path):
    """One step or four: the same single mapping, and the driver's allocator
    is not asked for memory again (the client's own allocations aside)."""
    one = run_client(client, standin, tmp_path, step_args(1), tag="one")
    four = run_client(client, standin, tmp_path, step_args(STEPS), tag="four")
    for res in (one, four):
        assert_all_ok(res)
        assert (res.counts["standin_pool_maps"], res.counts["standin_pool_unmaps"]) == (1, 0)
    native = run_client(client, standin, tmp_path, step_args(STEPS), shim=False, tag="native")
    assert native.counts["standin_pool_maps"] == 0
    assert four.counts["cuMemAlloc_v2"] == native.counts["cuMemAlloc_v2"]


def test_pool_gives_back_before_declining(client, standin, tmp_path):
    """A device just large enough for the client and the second call's
    buffers, but not for those and the first call's buffers the pool kept:
    the second call's allocation fails, the pool gives back what it holds
    unused (cuMemPoolTrimTo to 0) and the retry succeeds, so both calls run
    ffma; the exit report counts the give-back. The limit is the client's own
    memory (1 MiB cuBLASLt workspace, A, B, C in bf16 with no padding, the
    device alpha/beta) plus the second call's buffers plus half the first's."""
    small, big = (32, 16, 24), (96, 64, 80)
    s1, s2 = transient_bytes(*small), transient_bytes(*big)
    assert s1 < s2
    m, n, k = big
    r4 = lambda b: (b + 3) // 4 * 4
    client_bytes = (1 << 20) + r4(2 * m * k) + r4(2 * k * n) + r4(2 * m * n) + 8
    limit = client_bytes + s2 + s1 // 2
    args = [gemm("small", "ex", m=small[0], n=small[1], k=small[2], pad=0, spad=0),
            gemm("big", "ex", m=m, n=n, k=k, pad=0, spad=0)]
    env = {"GEMMSHIM_DEBUG": "INFO", "STANDIN_MEM_LIMIT": str(limit)}
    res = run_client(client, standin, tmp_path, args, env=env)
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)
    assert res.counts["cuMemAllocFromPoolAsync"] == 3  # small; big failing; big again
    assert res.counts["cuMemPoolTrimTo"] == 1
    assert (res.counts["standin_pool_maps"], res.counts["standin_pool_unmaps"]) == (2, 1)
    want = {"device": "0", "peak_mapped": str(s2), "peak_used": str(s2), "kept_at_exit": str(s2),
            "keep_limit": str(KEEP_DEFAULT), "give_backs": "1"}
    assert pool_lines(res) == [want], res.describe()
    # One byte less and even the given-back pool cannot hold the call: it
    # runs native with the reason, after the give-back.
    res = run_client(client, standin, tmp_path, args, env={**env, "STANDIN_MEM_LIMIT": str(client_bytes + s2 - 1)},
                     tag="short")
    assert_all_ok(res)
    assert_ffma(res.recs[0])
    assert_native(res.recs[1], POOL_OOM)
    assert res.counts["cuMemPoolTrimTo"] == 1


def test_pool_give_back_frees_nothing_unobserved(client, standin, tmp_path):
    """The same device as above, but a program that never synchronises
    (--nosync): the first call's block was freed stream-ordered and no
    synchronisation has observed it, so it "can count as outstanding"
    (cuda.h, cuMemPoolTrimTo) and the give-back releases nothing (the
    stand-in models it). The retry fails too: the second call runs native
    with the reason (--nosync reads no results) after the give-back."""
    small, big = (32, 16, 24), (96, 64, 80)
    s1, s2 = transient_bytes(*small), transient_bytes(*big)
    m, n, k = big
    r4 = lambda b: (b + 3) // 4 * 4
    client_bytes = (1 << 20) + r4(2 * m * k) + r4(2 * k * n) + r4(2 * m * n) + 8
    limit = client_bytes + s2 + s1 // 2
    args = ["--nosync", gemm("small", "ex", m=small[0], n=small[1], k=small[2], pad=0, spad=0),
            gemm("big", "ex", m=m, n=n, k=k, pad=0, spad=0)]
    env = {"GEMMSHIM_DEBUG": "INFO", "STANDIN_MEM_LIMIT": str(limit)}
    res = run_client(client, standin, tmp_path, args, env=env)
    assert_all_ok(res)
    assert_ffma(res.recs[0])
    assert_native(res.recs[1], POOL_OOM)
    assert res.counts["cuMemAllocFromPoolAsync"] == 3  # small; big failing; big again, failing
    assert res.counts["cuMemPoolTrimTo"] == 1
    assert res.counts["cuStreamSynchronize"] == 0
    assert (res.counts["standin_pool_maps"], res.counts["standin_pool_unmaps"]) == (1, 0)
    assert [l["give_backs"] for l in pool_lines(res)] == ["1"]


def test_pool_injected_failure_retried(client, standin, tmp_path):
    """The second call's allocation failing once (injected): the pool gives
    back the first call's block, the retry maps a new one, the call runs
    ffma."""
    args = [gemm("a", "ex"), gemm("b", "ex")]
    res = run_client(client, standin, tmp_path, args,
                     env={"GEMMSHIM_DEBUG": "INFO", "GEMMSHIM_FAULT": "cuMemAllocFromPoolAsync:2"})
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)
    assert res.counts["cuMemPoolTrimTo"] == 1
    assert (res.counts["standin_pool_maps"], res.counts["standin_pool_unmaps"]) == (2, 1)
    assert [l["give_backs"] for l in pool_lines(res)] == ["1"]


# ---- 8. the flop threshold -------------------------------------------------------------------
@pytest.mark.parametrize(
    "api,spec",
    [("ex", {"m": 64, "n": 48, "k": 80}), ("strided", {"m": 24, "n": 40, "k": 32, "batch": 3}),
     ("lt", {"m": 33, "n": 17, "k": 29, "batch": 2}), ("batched64", {"m": 16, "n": 16, "k": 16, "batch": 5})],
)
def test_min_flops_boundary(client, standin, tmp_path, api, spec):
    """2*m*n*k*batch equal to GEMMSHIM_FFMA_MIN_FLOPS runs ffma; a threshold
    one flop higher declines."""
    flops = 2 * spec["m"] * spec["n"] * spec["k"] * spec.get("batch", 1)
    args = [gemm("g", api, **spec)]
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FFMA_MIN_FLOPS": str(flops)}, tag="at")
    assert_all_ok(res)
    assert_ffma(res.recs[0])
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FFMA_MIN_FLOPS": str(flops + 1)}, tag="above")
    assert_all_ok(res)
    assert_native(res.recs[0], "GEMM smaller than GEMMSHIM_FFMA_MIN_FLOPS")


# ---- 9. every fallible call failing -------------------------------------------------------
KERNELS = "kernels not loaded ({})"
LOAD_FAILED = "cuModuleLoadData failed: the driver did not take the shim's sm_61 PTX"
CAST = f"cast kernel launch failed (CUresult {CU_UNKNOWN})"
NARROW = f"narrowing kernel launch failed (CUresult {CU_UNKNOWN})"
EX = {"api": "ex"}  # T,N 64x48x80, beta 0.75: widen A, B, C (one launch); narrow
EX_B0 = {"api": "ex", "beta": 0}  # widen A, B; narrow
LT = {"api": "lt", "epi": "bias"}  # widen A, B, C, bias (one launch); narrow
FAULTS = [
    # (GEMMSHIM_FAULT, the call, no pools, why the first call declined)
    # The shim's pool, made at the first call: a failure there is retried
    # at the next call. An allocation failing is retried once after the
    # pool gives back what it holds; failing to give back ends the call.
    ("cuMemPoolCreate:1", EX, False, "cuMemPoolCreate failed"),
    ("cuMemPoolSetAttribute:1", EX, False, "cuMemPoolSetAttribute(RELEASE_THRESHOLD) failed"),
    ("cuMemAllocFromPoolAsync:1,cuMemPoolTrimTo:1", EX, False,
     "cuMemAllocFromPoolAsync: out of device memory, and cuMemPoolTrimTo failed"),
    # Attribute queries: the device lookup's two (compute capability), the
    # cost gate's four (asked with the gate off too, docs/cost-model.md),
    # then the pool's.
    ("cuDeviceGetAttribute:7", EX, False, "cuDeviceGetAttribute(MEMORY_POOLS_SUPPORTED) failed"),
    ("cuModuleLoadData:1", EX, False, KERNELS.format(LOAD_FAILED)),
    ("cuModuleLoadData:3", LT, False, KERNELS.format(LOAD_FAILED)),
    ("cuModuleGetFunction:1", EX, False,
     KERNELS.format("cuModuleGetFunction failed: a kernel is missing from the shim's PTX")),
    # cuCtxGetId 1 is the device lookup's (test_context_id_unknown); the
    # kernels take the id from it (test_no_context_id_asked_again).
    ("cuCtxGetCurrent:1", EX, False, KERNELS.format("cuCtxGetCurrent failed")),
    ("cuCtxGetCurrent:2", EX, False, CAST),
    ("cuLaunchKernel:1", EX, False, CAST),
    ("cuLaunchKernel:2", EX, False, NARROW),
    ("cuLaunchKernel:1", EX_B0, False, CAST),
    ("cuLaunchKernel:2", EX_B0, False, NARROW),
    ("cuLaunchKernel:1", LT, False, CAST),
    ("cuLaunchKernel:2", LT, False, NARROW),
    ("cublasGetMathMode:1", EX, False, "cublasGetMathMode failed"),
    ("cublasGemmEx:1", EX, False, f"fp32 GEMM returned status {EXECUTION_FAILED}"),
    ("cublasGemmStridedBatchedEx:1", {"api": "batched", "batch": 3}, False,
     f"fp32 GEMM returned status {EXECUTION_FAILED}"),
    ("cublasGemmStridedBatchedEx_64:1", {"api": "strided64", "batch": 2}, False,
     f"fp32 GEMM returned status {EXECUTION_FAILED}"),
    ("cublasGemmEx_64:1", {"api": "ex64"}, False, f"fp32 GEMM returned status {EXECUTION_FAILED}"),
    ("cublasLtMatmulDescCreate:1", LT, False, f"fp32 GEMM returned status {ALLOC_FAILED}"),
    *[(f"cublasLtMatmulDescSetAttribute:{n}", LT, False, f"fp32 GEMM returned status {INVALID_VALUE}")
      for n in range(1, 7)],
    *[(f"cublasLtMatrixLayoutCreate:{n}", LT, False, f"fp32 GEMM returned status {ALLOC_FAILED}")
      for n in range(1, 5)],
    *[(f"cublasLtMatrixLayoutSetAttribute:{n}", LT, False, f"fp32 GEMM returned status {INVALID_VALUE}")
      for n in (1, 4, 8)],
    ("cublasLtMatmul:1", LT, False, f"fp32 GEMM returned status {EXECUTION_FAILED}"),
    # Without pools: the scratch buffer. The device lookup pushes the
    # context once before the route does.
    ("cuMemAlloc_v2:1", EX, True, "cuMemAlloc of the scratch buffer failed"),
    ("cuCtxPushCurrent_v2:2", EX, True, "cuCtxPushCurrent failed"),
    ("cuStreamIsCapturing:1", EX, True, "cuStreamIsCapturing failed"),
    ("cuStreamIsCapturing:1", EX, False, "cuStreamIsCapturing failed"),
    ("cuCtxGetId:2", EX, True, "cuCtxGetId failed"),
]


def test_context_id_unknown(client, standin, tmp_path):
    """The device lookup cannot tell the call's context by its id (a
    destroyed context): the call runs native and says so; the next run ffma."""
    res = run_client(client, standin, tmp_path, [gemm(f"call{i}", **EX) for i in range(3)],
                     env={"GEMMSHIM_FAULT": "cuCtxGetId:1"})
    assert_all_ok(res)
    rec = res.recs[0]
    got = (rec["decided"], rec["route"], "backend" in rec, rec["reason"], rec["status"])
    assert got == ("ffma", "native", False, f"{MODE}; device unknown: cuCtxGetId failed (destroyed context?); "
                   "ffma declined: kernels not loaded (no context); ran native", 0), rec
    for r in res.recs[1:]:
        assert_ffma(r)


def fault_id(f):
    fault, spec, no_pools, _ = f
    return "-".join([fault, spec["api"], *(["beta0"] if spec.get("beta") == 0 else []),
                     *(["nopools"] if no_pools else [])])


@pytest.mark.parametrize("fault,spec,no_pools,why", FAULTS, ids=[fault_id(f) for f in FAULTS])
def test_each_fallible_call_failing(client, standin, tmp_path, fault, spec, no_pools, why):
    """The first of three identical calls meets the failure: it runs native
    with the exact reason and the caller gets status 0 and a right result;
    the next two run ffma."""
    args = [gemm(f"call{i}", **spec) for i in range(3)]
    env = {"GEMMSHIM_FAULT": fault, **(NO_POOLS if no_pools else {})}
    res = run_client(client, standin, tmp_path, args, env=env)
    assert_all_ok(res)
    assert all(c["status"] == "0" for c in res.calls)
    assert_native(res.recs[0], why)
    for rec in res.recs[1:]:
        assert_ffma(rec)
    if not no_pools:
        # A declined call frees what it allocated (an injected failure
        # never reaches the driver, so it is not counted there).
        assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuMemFreeAsync"]


def test_no_context_id_asked_again(client, standin, tmp_path):
    """A run's only cuCtxGetId is its first call's device lookup (with
    pools): the kernel cache and the launches take the context's id from
    the lookup, and later lookups find the stream's context and id by the
    stream's cuStreamGetId (device.c). So every cuCtxGetId after the first
    failing changes nothing: all three calls run ffma."""
    args = [gemm(f"call{i}", **EX) for i in range(3)]
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FAULT": "cuCtxGetId:2+"})
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)
    res = run_client(client, standin, tmp_path, args, tag="clean")
    assert [r["route"] for r in res.recs] == ["ffma"] * 3
    assert (res.counts["cuCtxGetId"], res.counts["cuStreamGetId"]) == (1, 3)


# The plan's algorithm comes from cuBLASLt's heuristic (routes/lt.c); a
# failure there costs the plan its algorithm, never the call: cublasLtMatmul
# then gets NULL and chooses itself.
HEURISTIC_FAULTS = ["", "cublasLtMatmulPreferenceCreate:1", "cublasLtMatmulAlgoGetHeuristic:1",
                    *[f"cublasLtMatmulPreferenceSetAttribute:{n}" for n in range(1, 6)]]


@pytest.mark.parametrize("fault", HEURISTIC_FAULTS, ids=lambda f: f or "no-fault")
def test_heuristic_failing_costs_only_the_algorithm(client, standin, tmp_path, fault):
    """Three identical Lt calls: all run ffma and are right; their plan is
    made once (one descriptor for the three, beside the client's own three)
    and the heuristic asked once, its preference's five attributes set (it
    is reached only when they all were), or, after a failure, not tried
    again (a faulted call never reaches the stand-in, so it counts 0)."""
    args = [gemm(f"call{i}", **LT) for i in range(3)]
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FAULT": fault} if fault else None)
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)
    created = 0 if fault.startswith("cublasLtMatmulPreferenceCreate") else 1
    assert (res.counts["cublasLtMatmulDescCreate"], res.counts["cublasLtMatmulPreferenceCreate"],
            res.counts["cublasLtMatmulPreferenceDestroy"], res.counts["cublasLtMatmulAlgoGetHeuristic"],
            res.counts["cublasLtMatmul"]) == (3 + 1, created, created, 0 if fault else 1, 3)


def test_launches_failing_for_good(client, standin, tmp_path):
    """Every launch failing: every call runs native, right, nothing leaked."""
    args = [gemm(f"call{i}", api) for i, api in enumerate(APIS)]
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FAULT": "cuLaunchKernel:1+"})
    assert_all_ok(res)
    for rec in res.recs:
        assert_native(rec, CAST)
    assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuMemFreeAsync"] == len(APIS)


@pytest.mark.parametrize("fault", ["cublasLtMatmulPreferenceDestroy:1", "cuMemFreeAsync:1", "cuMemFree_v2:1"])
def test_failures_after_the_result(client, standin, tmp_path, fault):
    """Failures in releasing (the heuristic's preference, the transient
    buffer, the old scratch buffer when it grows) come after the result is
    written: the call still runs ffma and its result is right, and so are
    later calls. (The plans' descriptors are kept, not destroyed per call.)"""
    no_pools = fault == "cuMemFree_v2:1"
    args = [gemm("small", "lt", m=32, n=16, k=24), gemm("grows", "lt", epi="bias"), gemm("again", "ex")]
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FAULT": fault, **(NO_POOLS if no_pools else {})})
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)


# ---- 10. types, batches, Lt forms ------------------------------------------------------------
FAST = ("a 32f_fast compute type takes fp32 A and B only (forwarded for cuBLAS's own error)", NOT_SUPPORTED)
TYPE_CASES = [
    # (name, api, spec, None for ffma or (why, status))
    ("fp16_ex", "ex", {"ab": "fp16"}, None),
    ("fp16_strided_dev", "strided", {"ab": "fp16", "pm": "device"}, None),
    ("fp16_lt_bias", "lt", {"ab": "fp16", "epi": "relu_bias"}, None),
    ("bf16_f32_ex", "ex", {"c": "fp32"}, None),
    ("bf16_f32_ex64_b0", "ex64", {"c": "fp32", "beta": 0}, None),
    ("bf16_f32_strided64", "strided64", {"c": "fp32"}, None),
    ("fp16_f32_lt_oop", "lt", {"ab": "fp16", "c": "fp32", "oop": 1, "dpad": 2, "batch": 2}, None),
    ("ptrarray_f32", "batched", {"c": "fp32"}, ("pointer-array batch with fp32 C", 0)),
    ("ptrarray64_f32", "batched64", {"c": "fp32", "ab": "fp16"}, ("pointer-array batch with fp32 C", 0)),
    ("ptrarray_bf16_tt", "batched", {"ta": "T", "tb": "T", "pad": 0}, None),
    ("lt_oop_beta", "lt", {"oop": 1, "beta": 0.5}, None),
    ("lt_oop_ldd", "lt", {"oop": 1, "beta": 0.5, "dpad": 5, "batch": 3}, None),
    ("lt_bias_bf16", "lt", {"epi": "bias", "bias": "bf16"}, None),
    ("lt_bias_default", "lt", {"epi": "gelu_bias"}, None),
    ("lt_bias_fp32", "lt", {"c": "fp32", "epi": "bias", "bias": "fp32"}, None),
    ("lt_bias_fp16", "lt", {"ab": "fp16", "epi": "bias", "bias": "fp16", "pm": "device"}, None),
    ("lt_bias_strided_bf16", "lt", {"epi": "relu_bias", "batch": 3, "bstride": 70}, None),
    ("lt_bias_strided_fp32", "lt", {"c": "fp32", "epi": "bias", "batch": 3, "bstride": 64, "oop": 1}, None),
    ("lt_relu", "lt", {"epi": "relu"}, None),
    ("lt_gelu_nt", "lt", {"epi": "gelu", "ta": "N", "tb": "T"}, None),
    ("lt_row_major", "lt", {"order": "row"}, ("a layout is not column-major", 0)),
    ("lt_bias_fp32_for_bf16", "lt", {"epi": "bias", "bias": "fp32"},
     ("bias type is not D's type (forwarded for cuBLAS's own error)", NOT_SUPPORTED)),
    ("lt_bias_bf16_for_fp32", "lt", {"c": "fp32", "epi": "bias", "bias": "bf16"},
     ("bias type is not D's type (forwarded for cuBLAS's own error)", NOT_SUPPORTED)),
    ("lt_scale_bf16", "lt", {"scale": "bf16"}, ("scale type is not fp32 (forwarded for cuBLAS's own error)",
                                                NOT_SUPPORTED)),
    ("lt_in_place_two_layouts", "lt", {"dpad": 4},
     ("C and D are the same memory with different layouts (forwarded for cuBLAS's own error)", INVALID_VALUE)),
    ("pedantic", "ex", {"compute": "32f_pedantic"}, None),
    ("pedantic_lt", "lt", {"compute": "32f_pedantic", "ab": "fp16", "epi": "bias"}, None),
    # cuBLAS takes the fast compute types with fp32 data only.
    ("fast_16bf", "strided", {"compute": "32f_fast_16bf"}, FAST),
    ("fast_16f", "lt", {"compute": "32f_fast_16f", "ab": "fp16"}, FAST),
    ("fast_tf32", "ex64", {"compute": "32f_fast_tf32"}, FAST),
    ("nn_padded", "ex", {"ta": "N", "tb": "N", "pad": 9}, None),
    ("tt_strided_unpadded", "strided64", {"ta": "T", "tb": "T", "pad": 0, "spad": 0}, None),
]


def test_types_batches_and_lt_forms(client, standin, tmp_path):
    """Each case's route, reason and status, and its result checked (or,
    where cuBLAS refuses the call, its output untouched): statuses equal
    those of the same run without the shim."""
    args = [gemm(name, api, **spec) for name, api, spec, _ in TYPE_CASES]
    native = run_client(client, standin, tmp_path, args, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args)
    assert_all_ok(res)
    assert [c["status"] for c in res.calls] == [c["status"] for c in native.calls]
    for rec, (name, _, _, want) in zip(res.recs, TYPE_CASES):
        if want is None:
            assert_ffma(rec, name)
        else:
            assert_native(rec, want[0], want[1], name)


# ---- 11. threads ---------------------------------------------------------------------------
THREADS, ITERS = 8, 3
THREAD_CALLS = [gemm("small", "ex", m=48, n=32, k=40), gemm("lt", "lt", epi="bias", pm="device"),
                gemm("big", "strided", m=96, n=64, k=72, batch=2)]


@pytest.mark.parametrize("stream", ["own", "shared", "per-thread", "legacy"])
@pytest.mark.parametrize("pools", [True, False])
def test_threads(client, standin, tmp_path, stream, pools):
    """THREADS threads, each with its own cuBLAS and cuBLASLt handles, on
    their own streams, one stream they share, their per-thread default
    streams or the legacy stream: every call runs ffma with a right result.
    Without pools a scratch buffer belongs to one stream: threads sharing a
    stream share one (taking turns), per-thread default streams are one
    stream per thread."""
    args = [f"--threads={THREADS}", f"--iters={ITERS}", f"--stream={stream}", *THREAD_CALLS]
    env = {} if pools else NO_POOLS
    native = run_client(client, standin, tmp_path, args, env=env, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args, env=env)
    assert len(res.calls) == THREADS * ITERS * len(THREAD_CALLS)
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)
    streams = {rec["stream"] for rec in res.recs}
    tids = {rec["tid"] for rec in res.recs}
    assert len(tids) == THREADS
    want_streams = {"own": THREADS, "shared": 1, "per-thread": 1, "legacy": 1}[stream]
    assert len(streams) == want_streams, streams
    extra_live = res.counts["standin_live_allocations"] - native.counts["standin_live_allocations"]
    extra_allocs = res.counts["cuMemAlloc_v2"] - native.counts["cuMemAlloc_v2"]
    if pools:
        assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuMemFreeAsync"] == len(res.recs)
        assert extra_live == 0 and extra_allocs == 0
    else:
        # One scratch buffer per stream, left for the process; each grows
        # at most once per call size.
        buffers = 1 if stream in ("shared", "legacy") else THREADS
        assert extra_live == buffers, res.counts
        assert buffers <= extra_allocs <= buffers * len(THREAD_CALLS), res.counts


# ---- a context torn down and made again ------------------------------------------------------
@pytest.mark.parametrize("pools", [True, False])
def test_context_reset(client, standin, tmp_path, pools):
    """The primary context released (its memory freed with it) and retained
    again: same context handle, same legacy stream. The next calls run ffma
    in the new context, never on the old context's memory."""
    args = ["--stream=legacy", "--reset-after=2", gemm("before", "ex"), gemm("before_lt", "lt"),
            gemm("after", "ex"), gemm("after_small", "ex", m=16, n=16, k=16), gemm("after_lt", "lt", epi="bias")]
    env = {} if pools else NO_POOLS
    native = run_client(client, standin, tmp_path, args, env=env, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args, env=env)
    assert res.run.lines("reset") == [["reset", "before=2"]]
    assert_all_ok(res)
    for rec in res.recs:
        assert_ffma(rec)
    extra_live = res.counts["standin_live_allocations"] - native.counts["standin_live_allocations"]
    assert extra_live == (0 if pools else 1)


@pytest.mark.parametrize("mode,cc", [("ffma", "6.1"), ("fp8", "9.0")])
def test_hundreds_of_context_resets_keep_routing(client, standin, tmp_path, mode, cc):
    """A program that rebuilds its CUDA state again and again (a test suite
    resetting the device per case, JAX rebuilding its client): the primary
    context released to zero and retained 300 times, one GEMM in each. The
    driver resets the context on its last release
    (cuDevicePrimaryCtxRelease: "The context is automatically reset once the
    last reference to it is released") and gives each new context a new id
    (cuCtxGetId: "unique for the life of the program"), at the old address
    in the stand-in as on real drivers. The shim's kernels must be loaded
    into every new context, however many there have been: every call
    routes, and every result is right."""
    calls = 300
    # The same data in every call: each runs in a context of its own, so
    # each result is the same, to the bit (fp8: a new site each time, its
    # first scale from its own amax).
    # pad=0: on 9.0, leading dimensions cuBLASLt's fp8 GEMM takes.
    args = ["--stream=legacy", "--reset-every=1"] + [gemm(f"g{i}", "ex", m=16, n=16, k=16, seed=7, pad=0)
                                                      for i in range(calls)]
    env = {"STANDIN_CC": cc, "GEMMSHIM_MODE": mode}
    if mode == "fp8":
        env["GEMMSHIM_FP8_RECIPE"] = "delayed"  # the recipe with per-context state
    # The client's tolerance is ffma's: fp8 results fail it (exit 1).
    res = run_client(client, standin, tmp_path, args, env=env, rc=0 if mode == "ffma" else 1)
    assert len(res.run.lines("reset")) == calls - 1
    assert len(res.calls) == len(res.recs) == calls
    routes = Counter((rec["route"], rec["status"]) for rec in res.recs)
    assert routes == {(mode, 0): calls}, (routes, [r["reason"] for r in res.recs if r["route"] != mode][:3])
    assert {c["maxerr"] for c in res.calls} == {res.calls[0]["maxerr"]}
    if mode == "ffma":
        assert_all_ok(res)
    else:
        assert {rec.get("site_event") for rec in res.recs} == {"new"}
    # Each new context loaded the kernels once (a cuModuleLoadData per
    # kernel file): nothing cached from a dead context was reused.
    files = res.counts["cuModuleLoadData"] // calls
    assert files >= 3 and res.counts["cuModuleLoadData"] == files * calls, res.counts


SCRATCH_SLOTS = 32  # shim/routes/memory.c


def test_no_pools_scratch_slots_pass_between_streams(client, standin, tmp_path):
    """Without pools each stream gets a scratch buffer from 32 slots; a
    program that uses more streams, one at a time, runs every call routed.
    40 live streams take turns twice: the first 32 calls fill the slots
    (one cuMemAlloc each), every later call takes the slot used longest
    ago, and before its first kernel its stream waits for the event the
    slot's last call recorded (cuStreamWaitEvent: the device orders the new
    stream's work after the old stream's; cuStreamDestroy "will return
    immediately" while the stream's work completes, so an idle stream's work
    may still be running). Every call after a slot's first waits so. Nothing
    synchronises, nothing runs native."""
    streams, calls = 40, 80
    args = [f"--streams={streams}"] + [gemm(f"g{i}", "ex", m=32, n=16, k=24) for i in range(calls)]
    native = run_client(client, standin, tmp_path, args, env=NO_POOLS, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args, env=NO_POOLS)
    assert_all_ok(res)
    assert len(res.recs) == calls
    for rec in res.recs:
        assert_ffma(rec)
    extra = {k: res.counts[k] - native.counts[k]
             for k in ("cuMemAlloc_v2", "cuEventCreate", "cuEventRecord", "cuStreamWaitEvent",
                       "standin_live_allocations")}
    assert extra == {"cuMemAlloc_v2": SCRATCH_SLOTS, "cuEventCreate": SCRATCH_SLOTS, "cuEventRecord": calls,
                     "cuStreamWaitEvent": calls - SCRATCH_SLOTS, "standin_live_allocations": SCRATCH_SLOTS}, res.counts


@pytest.mark.parametrize("stream", ["per-thread", "own"])
def test_no_pools_threads_one_after_another(client, standin, tmp_path, stream):
    """40 threads, each started after the previous one exited, on its
    per-thread default stream (CU_STREAM_PER_THREAD is a different stream
    in each thread) or a stream of its own it destroys before exiting (at
    an address no earlier stream had: STANDIN_FRESH_STREAMS): an exited
    thread's slot passes to the next thread's stream, ordered after its
    last work. Every call routes."""
    threads = 40
    args = [f"--threads={threads}", "--iters=1", "--one-at-a-time", f"--stream={stream}",
            gemm("g", "ex", m=32, n=16, k=24)]
    res = run_client(client, standin, tmp_path, args, env={**NO_POOLS, "STANDIN_FRESH_STREAMS": "1"})
    assert_all_ok(res)
    assert len(res.recs) == threads
    for rec in res.recs:
        assert_ffma(rec)
    assert res.counts["cuStreamWaitEvent"] == threads - SCRATCH_SLOTS, res.counts


def test_no_pools_context_resets_free_the_slots(client, standin, tmp_path):
    """100 context resets, each new context's stream at an address no
    earlier stream had (STANDIN_FRESH_STREAMS: the driver promises nothing
    about reuse), one live stream at a time: the slots of a context whose
    address now has another id (cuCtxGetId) belong to a dead context and are
    free again, their buffers gone with it. Every call routes, each in a
    fresh slot: no call waits on a dead context's event."""
    calls = 100
    args = ["--reset-every=1"] + [gemm(f"g{i}", "ex", m=32, n=16, k=24) for i in range(calls)]
    res = run_client(client, standin, tmp_path, args, env={**NO_POOLS, "STANDIN_FRESH_STREAMS": "1"})
    assert_all_ok(res)
    assert len(res.recs) == calls
    for rec in res.recs:
        assert_ffma(rec)
    assert len({rec["stream"] for rec in res.recs}) == calls
    assert res.counts["cuStreamWaitEvent"] == 0, res.counts


def test_no_pools_many_threads_at_once(client, standin, tmp_path):
    """34 threads on 34 live streams at once, two more than there are
    slots: a call finds a slot unless all 32 are held by calls in flight
    at that moment, and then runs native with the reason; every result is
    right either way."""
    threads = 34
    args = [f"--threads={threads}", "--iters=1", "--stream=own", gemm("g", "ex", m=32, n=16, k=24)]
    res = run_client(client, standin, tmp_path, args, env=NO_POOLS)
    assert_all_ok(res)
    assert len(res.recs) == threads
    for rec in res.recs:
        if rec["route"] == "native":
            assert_native(rec, "no stream-ordered allocator and every scratch slot is in use by a call or "
                               "another context")
        else:
            assert_ffma(rec)
