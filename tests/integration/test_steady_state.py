"""Library calls per routed call in steady state, exactly.

scripts/perf/route_calls makes N identical 256x256x256 bf16 cublasGemmEx
calls (T,N, bf16 C, fp32 compute, beta 0, as a PyTorch Linear forward) on
one handle, stream and set of buffers; run with N = 2 and N = 3 over the
stand-in (STANDIN_COUNTS counts every exported function of libcuda,
libcublas and libcublasLt), the difference is one call in steady state:
the figures docs/perf-static.md reports (scripts/perf_report.py). Each
route's calls are held to the exact set it makes over the same call run
native on the same device, so a call that creeps back into the hot path
(a descriptor rebuilt, a context id asked again) fails here.
"""

import pytest

import harness

ROUTE_CALLS = harness.BUILD / "perf" / "route_calls"


@pytest.fixture(scope="module")
def client(standin):
    harness.require_built([ROUTE_CALLS, harness.SHIM, harness.KERNELS_HOST])
    return ROUTE_CALLS


def one_call(client, standin, tmp_path, cc, env, shim=True):
    """Per-call counts in steady state, and the last call's log record."""
    got = {}
    for n in (2, 3):
        tag = f"{cc}-{n}-{'-'.join(f'{k}={v}' for k, v in sorted(env.items()))}"
        counts, log = tmp_path / f"{tag}.counts", tmp_path / f"{tag}.jsonl"
        harness.run_ok([client, 256, 256, 256, n], standin[13], shim=shim,
                       env={"STANDIN_CC": cc, "STANDIN_COUNTS": str(counts), "GEMMSHIM_LOG": str(log), **env})
        got[n] = (harness.standin_counts(counts), harness.read_log(log) if shim else [{}] * n)
    (lo, _), (hi, recs) = got[2], got[3]
    assert len(recs) == 3
    per = {k: hi.get(k, 0) - lo.get(k, 0) for k in set(lo) | set(hi) if not k.startswith("standin_")}
    return {k: v for k, v in per.items() if v}, recs[-1]


def added(route, native):
    d = {k: route.get(k, 0) - native.get(k, 0) for k in set(route) | set(native)}
    return {k: v for k, v in sorted(d.items()) if v}


NATIVE = {"GEMMSHIM_MODE": "native"}


def test_native_lookup_steady_state(client, standin, tmp_path):
    """A call the shim runs native costs, over no shim at all, the handle's
    stream and pointer mode and one cuStreamGetId: the stream's context and
    that context's id come from the per-stream cache (device.c), not from
    cuStreamGetCtx and cuCtxGetId."""
    bare, _ = one_call(client, standin, tmp_path, "9.0", {}, shim=False)
    native, rec = one_call(client, standin, tmp_path, "9.0", NATIVE)
    assert rec["route"] == "native"
    assert added(native, bare) == {"cuStreamGetId": 1, "cublasGetPointerMode_v2": 1, "cublasGetStream_v2": 1}


def test_ffma_steady_state(client, standin, tmp_path):
    """sm_61: two launches (widen A and B in one, narrow D), the transient
    buffer's stream-ordered alloc (from the shim's pool) and free, the
    capture check, the handle's math mode, and the current context once for
    both launches; no context id (the device lookup's serves the launches),
    no cuBLASLt."""
    native, rec = one_call(client, standin, tmp_path, "6.1", NATIVE)
    assert rec["route"] == "native"
    ffma, rec = one_call(client, standin, tmp_path, "6.1", {"GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off"})
    assert (rec["route"], rec["backend"]) == ("ffma", "sgemm")
    assert added(ffma, native) == {"cuCtxGetCurrent": 1, "cuLaunchKernel": 2, "cuMemAllocFromPoolAsync": 1,
                                   "cuMemFreeAsync": 1, "cuStreamIsCapturing": 1, "cublasGetMathMode": 1}
    assert sum(added(ffma, native).values()) == 7


def test_fp16_steady_state(client, standin, tmp_path):
    """sm_75: three launches (amax, cast, the output kernel that unscales
    into the bf16 D) with the current context asked once for all of them,
    the transient buffer's alloc and free, the capture check and the
    handle's math mode (CUBLAS_PEDANTIC_MATH keeps bf16 native): 8 calls
    over native, the route's budget. Its fp16 cublasGemmEx stands where
    native's bf16 one was (cuBLAS's own descriptors alike), and runs on fp16
    tensor cores."""
    native, rec = one_call(client, standin, tmp_path, "7.5", NATIVE)
    assert rec["route"] == "native"
    fp16, rec = one_call(client, standin, tmp_path, "7.5", {"GEMMSHIM_MODE": "fp16", "GEMMSHIM_GATE": "off"})
    assert (rec["route"], rec["backend"]) == ("fp16", "cublas-fp16")
    assert added(fp16, native) == {"cuCtxGetCurrent": 1, "cuLaunchKernel": 3, "cuMemAllocFromPoolAsync": 1,
                                   "cuMemFreeAsync": 1, "cuStreamIsCapturing": 1, "cublasGetMathMode": 1}
    assert sum(added(fp16, native).values()) == 8


def test_fp8_cublaslt_steady_state(client, standin, tmp_path):
    """sm_90, cuBLASLt backend, delayed recipe: the kept plan leaves cublasLtMatmul as the
    call's only cuBLASLt call (where native cuBLAS's GemmEx builds and
    destroys its own descriptors each call); the quantize launch with the
    current context asked once, the fp8 buffers' alloc and free and the
    capture check (the stream's workspace is found by the stream id the
    device lookup already has), and the handle's math mode: fp8 runs native
    under CUBLAS_PEDANTIC_MATH (the cuBLAS guide, cublasSetMathMode: that
    mode asks for no reduced precision anywhere). The stand-in's
    cublasLtMatmul checks each pointer it is given (cuPointerGetAttribute):
    the workspace and the two scale pointers add 6 over native's."""
    native, rec = one_call(client, standin, tmp_path, "9.0", NATIVE)
    fp8, rec = one_call(client, standin, tmp_path, "9.0", {"GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_BACKEND": "cublaslt",
                                                          "GEMMSHIM_FP8_RECIPE": "delayed"})
    assert (rec["route"], rec["backend"], rec["recipe"]) == ("fp8", "cublaslt-fp8", "delayed")
    assert {k: v for k, v in fp8.items() if k.startswith("cublasLt")} == {"cublasLtMatmul": 1}
    assert added(fp8, native) == {
        "cuCtxGetCurrent": 1, "cuLaunchKernel": 1, "cuMemAllocFromPoolAsync": 1, "cuMemFreeAsync": 1,
        "cuPointerGetAttribute": 6, "cuStreamIsCapturing": 1, "cublasGetMathMode": 1,
        # native cuBLAS's own work this call no longer does
        "cublasGemmEx": -1, "cublasLtMatmulDescCreate": -1, "cublasLtMatmulDescDestroy": -1,
        "cublasLtMatmulDescSetAttribute": -3, "cublasLtMatrixLayoutCreate": -3, "cublasLtMatrixLayoutDestroy": -3}
    assert sum(added(fp8, native).values()) == 0


def test_fp8_current_recipe_per_call_cost(client, standin, tmp_path):
    """sm_90, cuBLASLt backend, the default current recipe: over the delayed
    recipe's steady state (test above), each call runs the amax pass before
    the quantize pass (a second launch) and sets the two scale pointers on
    the kept plan's descriptor, which holds no pointer of its own for them.
    Nothing else: its passes are write-only (each amax block stores its own
    slot, docs/graphs.md), so no memset renews anything and no context is
    pushed for one."""
    delayed, _ = one_call(client, standin, tmp_path, "9.0", {"GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_BACKEND": "cublaslt",
                                                            "GEMMSHIM_FP8_RECIPE": "delayed"})
    current, rec = one_call(client, standin, tmp_path, "9.0", {"GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off",
                                                              "GEMMSHIM_FP8_BACKEND": "cublaslt"})
    assert (rec["route"], rec["backend"], rec["recipe"]) == ("fp8", "cublaslt-fp8", "current")
    assert added(current, delayed) == {
        "cuLaunchKernel": 1, "cublasLtMatmulDescSetAttribute": 2}
