"""CUDA graphs as PyTorch and XLA use them (graph_client_cu13), on the ffma
and fp8 routes, over the stand-in whose captures record work that runs only
at launch (tests/standin/README.md).

PyTorch (torch/cuda/graphs.py, torch.cuda.graph and make_graphed_callables):
warm-up iterations on a side stream, capture on the graph's own stream in
global mode, replays on the program's stream (CUDAGraph.replay launches on
the current stream) interleaved with eager calls of the same layer.
XLA (xla/stream_executor/gpu command buffers): traced cuBLAS work is
captured, embedded as a child graph node and graphs are cloned and
instantiated more than once.

A graph holding memory alloc/free nodes can be neither cloned nor embedded
as a child nor instantiated twice (cuda.h, cuGraphAddMemAllocNode: "The
graph can only be used in a child node if the ownership is moved to the
parent. Only one instantiation of the graph may exist at any point in time.
The graph cannot be cloned."). A routed call therefore runs native while
its stream is captured, leaving the graph what cuBLAS alone would, and the
layer's eager calls keep their route with valid state before and after
every replay. Every result is checked against float64."""

import pytest

from harness import CLIENT_DIR, read_log, require_built, run_ok, standin_counts

CAPTURE_DECLINE = ("stream is being captured (a graph holding the call's buffers could not be cloned, "
                   "used as a child or instantiated twice)")
# TransformerEngine compares E4M3 GEMM results with rtol 0.125; a bf16
# output is one rounding (2^-8 relative) from an fp32-accumulated result.
E4M3_RTOL = 0.125
BF16_RTOL = 2.0 ** -7
ROUTES = [("ffma", "6.1"), ("fp8", "9.0"), ("fp8", "6.1")]


@pytest.fixture(scope="module")
def graph_client(shim):
    path = CLIENT_DIR / "graph_client_cu13"
    require_built([path])
    return path


def parse(r, first):
    out = []
    for words in r.lines(first):
        out.append(dict(w.split("=", 1) for w in words[1:]))
    return out


@pytest.mark.parametrize("recipe", ["pytorch", "xla"])
@pytest.mark.parametrize("mode,cc", ROUTES)
def test_recipe(graph_client, standin, tmp_path, recipe, mode, cc):
    log = tmp_path / "gemms.jsonl"
    r = run_ok([graph_client, f"--recipe={recipe}"], standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": mode, "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_LOG": str(log)})
    driver = parse(r, "driver")
    want_fns = (["cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags"]
                + ["cuGraphLaunch"] * 3 + ["cuGraphExecDestroy", "cuGraphDestroy"]) if recipe == "pytorch" else (
        ["cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphClone", "cuGraphCreate",
         "cuGraphAddChildGraphNode"] + ["cuGraphInstantiateWithFlags"] * 4 + ["cuGraphLaunch"] * 4
        + ["cuGraphExecDestroy"] * 4 + ["cuGraphDestroy"] * 3)
    assert [d["fn"] for d in driver] == want_fns, r.describe()
    assert all(d["status"] == "0" for d in driver), r.describe()

    results = parse(r, "result")
    eager = [x for x in results if x["kind"] == "eager"]
    replays = [x for x in results if x["kind"] == "replay"]
    assert len(replays) == (3 if recipe == "pytorch" else 4), r.describe()
    eager_tol = E4M3_RTOL if mode == "fp8" else BF16_RTOL
    for x in eager:
        assert x["status"] == "0" and float(x["err"]) <= eager_tol, x
    for x in replays:  # the captured call ran as cuBLAS's own GEMM
        assert float(x["err"]) <= BF16_RTOL, x

    recs = read_log(log)
    captured = 3 if recipe == "pytorch" else 1
    assert len(recs) == len(eager) + 1, recs
    for i, rec in enumerate(recs):
        assert rec["decided"] == mode and rec["status"] == 0, rec
        if i == captured:
            assert rec["route"] == "native", rec
            assert rec["reason"] == f"GEMMSHIM_MODE={mode}; {mode} declined: {CAPTURE_DECLINE}; ran native", rec
        else:
            assert rec["route"] == mode, rec


@pytest.mark.parametrize("mode,cc", ROUTES)
def test_eager_call_beside_a_capture(graph_client, standin, tmp_path, mode, cc):
    """The layer's site last ran on stream S; the program begins a relaxed
    capture on S and calls the layer eagerly on stream T. Ordering T after
    S's earlier work must not record into S's capture: a stream that waits
    on an event recorded in a capturing stream is put in capture mode (CUDA
    C++ Programming Guide, "Cross-stream Dependencies and Events"), so T's
    GEMM would be recorded instead of run and cuStreamEndCapture on S would
    fail (CUDA_ERROR_STREAM_CAPTURE_UNJOINED, cuda.h). The eager call keeps
    its route, on fresh ring state."""
    log = tmp_path / "gemms.jsonl"
    r = run_ok([graph_client, "--recipe=fork"], standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": mode, "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_LOG": str(log)})
    driver = parse(r, "driver")
    assert [(d["fn"], d["status"]) for d in driver] == [
        ("cuStreamBeginCapture_v2", "0"), ("cuStreamIsCapturing", "0"), ("cuStreamEndCapture", "0"),
        ("cuGraphDestroy", "0")], r.describe()
    assert parse(r, "capture") == [{"stream": "t", "status": "0"}], r.describe()
    results = parse(r, "result")
    assert [x["status"] for x in results] == ["0", "0"], r.describe()
    tol = E4M3_RTOL if mode == "fp8" else BF16_RTOL
    for x in results:
        assert float(x["err"]) <= tol, x
    recs = read_log(log)
    assert [(rec["route"], rec["status"]) for rec in recs] == [(mode, 0), (mode, 0)], recs


@pytest.mark.parametrize("mode,cc,env", [
    ("ffma", "6.1", {}), ("ffma", "6.1", {"STANDIN_NO_POOLS": "1"}),
    # delayed: the recipe that allocates ring memory outside the stream
    ("fp8", "9.0", {"GEMMSHIM_FP8_BACKEND": "cublaslt", "GEMMSHIM_FP8_RECIPE": "delayed"}),
    ("fp8", "6.1", {"GEMMSHIM_FP8_RECIPE": "delayed"})])
def test_calls_beside_another_threads_global_capture(graph_client, standin, tmp_path, mode, cc, env):
    """torch.cuda.graph captures in global mode by default; meanwhile another
    thread makes the program's first routed calls, on a stream never used
    before. cuda.h (cuThreadExchangeStreamCaptureMode): a thread in the
    default global mode "is prohibited from potentially unsafe API calls"
    while "any other thread has a concurrent capture sequence initiated with
    CU_STREAM_CAPTURE_MODE_GLOBAL", cudaMalloc being the example, and the
    attempt invalidates the capture (the stand-in models both). The shim's
    own allocations (fp8 rings, the stream's cuBLASLt workspace, the scratch
    buffer without memory pools) are made in relaxed mode, as PyTorch makes
    its own (c10/cuda/CUDACachingAllocator.cpp, cudaMallocMaybeCapturing):
    both calls keep their route with no reason added, and the capture ends
    with a graph. Each allocation is made once."""
    log = tmp_path / "gemms.jsonl"
    counts = tmp_path / "counts"
    r = run_ok([graph_client, "--recipe=other-thread"], standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": mode, "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_LOG": str(log), "STANDIN_COUNTS": str(counts), **env})
    assert [(d["fn"], d["status"]) for d in parse(r, "driver")] == [
        ("cuStreamBeginCapture_v2", "0"), ("cuStreamEndCapture", "0")], r.describe()
    results = parse(r, "result")
    tol = E4M3_RTOL if mode == "fp8" else BF16_RTOL
    assert [x["status"] for x in results] == ["0", "0"], r.describe()
    for x in results:
        assert float(x["err"]) <= tol, x
    recs = read_log(log)
    assert [(rec["route"], rec["status"]) for rec in recs] == [(mode, 0), (mode, 0)], recs
    if mode == "fp8":
        own = "; own kernel: cuBLASLt fp8 needs sm_89 or newer" if cc == "6.1" else ""
        assert [rec["reason"] for rec in recs] == [
            "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3; first call: scales from its own amax" + own,
            "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3" + own], recs
        assert [rec["backend"] for rec in recs] == [
            "cublaslt-fp8" if cc == "9.0" else "own"] * 2, recs
    c = standin_counts(counts)
    # the client's five buffers, plus: fp8 one ring slab (and on 9.0 the
    # stream's workspace); ffma without pools one scratch buffer
    extra = {"fp8": 2 if cc == "9.0" else 1, "ffma": 1 if env else 0}[mode]
    assert c["cuMemAlloc_v2"] == 5 + extra, c
    assert c["cuThreadExchangeStreamCaptureMode"] == 2 * extra, c
