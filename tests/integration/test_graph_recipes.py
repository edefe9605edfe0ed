"""CUDA graphs as PyTorch and XLA use them (graph_client_cu13), on every
route, over the stand-in whose captures record work that runs only at
launch (tests/standin/README.md).

PyTorch (torch/cuda/graphs.py, torch.cuda.graph and make_graphed_callables):
warm-up iterations on a side stream, capture on the graph's own stream in
global mode, replays on the program's stream (CUDAGraph.replay launches on
the current stream) interleaved with eager calls of the same layer.
XLA (xla/stream_executor/gpu command buffers): traced cuBLAS work is
captured, embedded as a child graph node and graphs are cloned and
instantiated more than once.

A captured call keeps its route (docs/graphs.md): its kernels are recorded
into the graph and run at every replay, on a buffer the graph owns through
a user object (cuda.h, cuUserObjectCreate and cuGraphRetainUserObject), not
memory alloc/free nodes, which would forbid cloning, child nodes and a
second instantiation (cuda.h, cuGraphAddMemAllocNode: "The graph can only
be used in a child node if the ownership is moved to the parent. Only one
instantiation of the graph may exist at any point in time. The graph
cannot be cloned."). The buffer is freed once the graph and everything
holding its references is gone. Every result is checked against float64."""

import pytest

from harness import CLIENT_DIR, PRELOAD_PREFIX, read_log, require_built, run_ok, standin_counts

# TransformerEngine compares E4M3 GEMM results with rtol 0.125; a bf16
# output is one rounding (2^-8 relative) from an fp32-accumulated result.
E4M3_RTOL = 0.125
BF16_RTOL = 2.0 ** -7
# (mode, device, extra environment, recipe the log names): ffma below
# sm_80, fp16 on sm_75, fp8 with each recipe that runs on the device given
# (tests/integration/test_fp8_recipes.py: block on 9.0, mxfp8 on 10.0,
# current elsewhere; the own kernel below sm_89).
ROUTES = [
    ("ffma", "6.1", {}, None),
    ("fp16", "7.5", {}, None),
    ("fp8", "9.0", {}, "current"),
    ("fp8", "6.1", {}, "current"),
    ("fp8", "9.0", {"GEMMSHIM_FP8_RECIPE": "block"}, "block"),
    ("fp8", "10.0", {}, "mxfp8"),
]
ROUTE_IDS = ["ffma", "fp16", "fp8-current-lt", "fp8-current-own", "fp8-block", "fp8-mxfp8"]
# The client's own device buffers (W, X, Y, X2, Y2).
CLIENT_BUFFERS = 5
WS_NOTE = ("no cuBLASLt workspace on this stream: the call is captured into a CUDA graph, and the stream's "
           "workspace serves its eager calls")


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


def tol(mode):
    return E4M3_RTOL if mode == "fp8" else BF16_RTOL


def run_recipe(graph_client, standin, tmp_path, recipe, mode, cc, env):
    log = tmp_path / "gemms.jsonl"
    counts = tmp_path / "counts"
    r = run_ok([graph_client, f"--recipe={recipe}"], standin[13], shim=True,
               env={"STANDIN_CC": cc, "GEMMSHIM_MODE": mode, "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_LOG": str(log), "STANDIN_COUNTS": str(counts), **env})
    return r, read_log(log), standin_counts(counts)


def assert_results(r, mode, replay_tol=None):
    results = parse(r, "result")
    assert results, r.describe()
    for x in results:
        want = replay_tol if x["kind"] == "replay" and replay_tol else tol(mode)
        assert x["status"] == "0" and float(x["err"]) <= want, (x, r.describe())
    return results


def assert_captured_on_route(rec, mode, cc, recipe):
    """The record of a captured call: on its route, saying so."""
    assert rec.get("captured") == 1 and rec["route"] == mode and rec["status"] == 0, rec
    if recipe:
        assert rec["recipe"] == recipe, rec
    if mode == "fp8" and cc != "6.1":
        assert rec["reason"].endswith(WS_NOTE), rec


def assert_graph_buffers_returned(c, graphs):
    """Each captured call made one buffer, one user object whose reference
    moved to the graph, and the destructor ran once everything holding the
    graph's references was destroyed; the shim freed the buffer at its next
    call or at exit (docs/graphs.md). Nothing else of the shim's is freed
    by cuMemFree in these runs (transient memory is pooled, cuBLASLt
    workspaces are kept for the process's life). None is freed while the
    thread captures: cudaFree "may perform implicit synchronization" for
    memory not from the stream-ordered allocator (CUDA Runtime API,
    cudaFree), which can invalidate the capture."""
    assert c["cuUserObjectCreate"] == graphs, c
    assert c["cuGraphRetainUserObject"] == graphs, c
    assert c["user_object_destroyed"] == graphs, c
    assert c["cuMemFree_v2"] == graphs, c
    assert c["mem_free_in_own_capture"] == 0, c


@pytest.mark.parametrize("recipe", ["pytorch", "xla"])
@pytest.mark.parametrize("mode,cc,env,fp8_recipe", ROUTES, ids=ROUTE_IDS)
def test_recipe(graph_client, standin, tmp_path, recipe, mode, cc, env, fp8_recipe):
    r, recs, c = run_recipe(graph_client, standin, tmp_path, recipe, mode, cc, env)
    driver = parse(r, "driver")
    # PyTorch destroys the graph right after instantiating it
    # (aten/src/ATen/cuda/CUDAGraph.cpp, capture_end): the executable alone
    # keeps the buffer, through the references it took at instantiation
    want_fns = (["cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags", "cuGraphDestroy"]
                + ["cuGraphLaunch"] * 3 + ["cuGraphExecDestroy"]) if recipe == "pytorch" else (
        ["cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphClone", "cuGraphCreate",
         "cuGraphAddChildGraphNode"] + ["cuGraphInstantiateWithFlags"] * 4 + ["cuGraphLaunch"] * 4
        + ["cuGraphExecDestroy"] * 4 + ["cuGraphDestroy"] * 3)
    assert [d["fn"] for d in driver] == want_fns, r.describe()
    assert all(d["status"] == "0" for d in driver), r.describe()

    # replays (graph, second instantiation, clone, parent of the child
    # node) read the inputs of their launch: right at the route's accuracy
    results = assert_results(r, mode)
    eager = [x for x in results if x["kind"] == "eager"]
    assert len(results) - len(eager) == (3 if recipe == "pytorch" else 4), r.describe()

    captured = 3 if recipe == "pytorch" else 1
    assert len(recs) == len(eager) + 1, recs
    for i, rec in enumerate(recs):
        assert rec["decided"] == mode and rec["status"] == 0, rec
        if i == captured:
            assert_captured_on_route(rec, mode, cc, fp8_recipe)
        else:
            assert rec["route"] == mode and "captured" not in rec, rec
            if fp8_recipe:
                assert rec["recipe"] == fp8_recipe, rec
    assert_graph_buffers_returned(c, 1)


@pytest.mark.parametrize("mode,cc,env,fp8_recipe", ROUTES, ids=ROUTE_IDS)
def test_one_graph_two_executables_on_two_streams(graph_client, standin, tmp_path, mode, cc, env, fp8_recipe):
    """Two instantiations of one graph replayed in turn on two streams, eager
    calls of the layer on a third between them: the executables share the
    graph's buffer (their nodes' parameters are the graph's), the eager
    calls never touch it, and every result is right."""
    r, recs, c = run_recipe(graph_client, standin, tmp_path, "two-streams", mode, cc, env)
    assert [(d["fn"], d["status"]) for d in parse(r, "driver")] == (
        [("cuStreamBeginCapture_v2", "0"), ("cuStreamEndCapture", "0")]
        + [("cuGraphInstantiateWithFlags", "0")] * 2 + [("cuGraphLaunch", "0")] * 4
        + [("cuGraphExecDestroy", "0")] * 2 + [("cuGraphDestroy", "0")]), r.describe()
    results = assert_results(r, mode)
    assert [x["kind"] for x in results] == ["eager"] + ["replay", "eager"] * 4, r.describe()
    assert [rec.get("captured") for rec in recs] == [None, 1, None, None, None, None], recs
    assert_captured_on_route(recs[1], mode, cc, fp8_recipe)
    assert all(rec["route"] == mode for rec in recs), recs
    assert_graph_buffers_returned(c, 1)


# Every captured route, for the overlap test: (id, recipe, mode, device,
# environment, fp8 recipe). ffma twice: with a bf16 C that beta scales
# (cublasLtMatmul out of place: D = W^T X + 0.5 C) and with beta 0.
OVERLAP = [("ffma-beta", "overlap-beta", *ROUTES[0])] + [
    (rid, "overlap", *route) for rid, route in zip(ROUTE_IDS, ROUTES)]
# Before the current recipe's amax passes were write-only (docs/graphs.md)
# its cases failed here: a second replay's memset reset the ring inside
# the first's use of it (shifts 2 to 9 of 11 operations, both backends).


@pytest.mark.parametrize("rid,recipe,mode,cc,env,fp8_recipe", OVERLAP, ids=[o[0] for o in OVERLAP])
def test_overlapping_replays_of_two_executables(graph_client, standin, tmp_path, rid, recipe, mode, cc, env,
                                                fp8_recipe):
    """One captured call, its graph instantiated twice ("To execute a graph
    concurrently, it must be instantiated multiple times", cuda.h,
    cuGraphInstantiate), both executables launched on two streams with
    nothing ordering them, run interleaved by the stand-in
    (STANDIN_GRAPH_OVERLAP=s: the second's operations s steps behind the
    first's) for every s from 0 to the graph's node count: both share the
    graph's buffer, and each replay must still leave D exactly as an eager
    call of the same route does (the first's D read by a copy enqueued
    behind it on its stream, the second's after both), and the inputs as
    they were."""
    r, recs, c = run_recipe(graph_client, standin, tmp_path, recipe, mode, cc, env)
    nodes = int(parse(r, "graph")[0]["nodes"])
    assert nodes >= 2, r.describe()
    overlaps = parse(r, "overlap")
    assert [int(x["shift"]) for x in overlaps] == list(range(nodes + 1)), r.describe()
    bad = [x for x in overlaps if (x["first"], x["second"], x["inputs"]) != ("1", "1", "1")]
    assert not bad, (bad, r.describe())
    assert all(d["status"] == "0" for d in parse(r, "driver")), r.describe()
    assert [rec.get("captured") for rec in recs] == [None, 1], recs
    assert_captured_on_route(recs[1], mode, cc, fp8_recipe)
    assert recs[0]["route"] == mode, recs
    assert_graph_buffers_returned(c, 1)


def test_delayed_recipe_declines_in_capture(graph_client, standin, tmp_path):
    """The delayed recipe keeps each site's amax history parity and site
    matching on the host (docs/fp8-sites.md); a replay would not advance
    them, so that recipe alone runs native in a capture, with the reason.
    Nothing is allocated for the graph; eager calls keep fp8."""
    r, recs, c = run_recipe(graph_client, standin, tmp_path, "pytorch", "fp8", "9.0",
                            {"GEMMSHIM_FP8_RECIPE": "delayed"})
    assert all(d["status"] == "0" for d in parse(r, "driver")), r.describe()
    assert_results(r, "fp8", replay_tol=BF16_RTOL)  # the replays are cuBLAS's bf16 GEMM
    assert recs[3]["route"] == "native" and recs[3]["captured"] == 1, recs[3]
    assert recs[3]["reason"] == (
        "GEMMSHIM_MODE=fp8; fp8 declined: the delayed recipe is not captured into CUDA graphs: its per-site state "
        "(amax history parity, site matching) is kept on the host, and replays would not advance it; ran native")
    assert [rec["route"] for rec in recs[:3] + recs[4:]] == ["fp8"] * 6, recs
    assert c["cuUserObjectCreate"] == 0, c


def test_bound_on_graph_memory(graph_client, standin, tmp_path):
    """GEMMSHIM_GRAPH_MAX_BYTES below one call's buffer: the captured call
    runs native with the figures, the capture stays valid, and the graph
    replays cuBLAS's GEMM."""
    r, recs, c = run_recipe(graph_client, standin, tmp_path, "pytorch", "ffma", "6.1",
                            {"GEMMSHIM_GRAPH_MAX_BYTES": "1K"})
    assert all(d["status"] == "0" for d in parse(r, "driver")), r.describe()
    assert_results(r, "ffma")
    rec = recs[3]
    assert rec["route"] == "native" and rec["captured"] == 1, rec
    assert rec["reason"].startswith(
        "GEMMSHIM_MODE=ffma; ffma declined: CUDA graphs' buffers would pass GEMMSHIM_GRAPH_MAX_BYTES=1024 "
        "(they hold 0, this call needs "), rec
    assert rec["reason"].endswith("); ran native"), rec
    assert c["cuUserObjectCreate"] == 0 and c["cuMemAlloc_v2"] == CLIENT_BUFFERS, c


def test_captured_call_is_neither_timed_nor_compared(graph_client, standin, tmp_path):
    """GEMMSHIM_COMPARE (GPU time on): the captured call's work runs at
    replays, where the shim is not called, so it has no GPU time (events
    recorded in a capture would become nodes of the program's graph) and
    is not compared; the record says both. The first eager call is
    compared as before."""
    r, recs, c = run_recipe(graph_client, standin, tmp_path, "pytorch", "ffma", "6.1", {"GEMMSHIM_COMPARE": "1"})
    assert_results(r, "ffma")
    rec = recs[3]
    assert rec["captured"] == 1 and rec["route"] == "ffma", rec
    assert rec["reason"] == "GEMMSHIM_MODE=ffma; compare skipped: captured into a CUDA graph", rec
    assert rec["gpu_skipped"] == "graph capture" and "gpu_ns" not in rec and "native_gpu_ns" not in rec, rec
    assert "native_gpu_ns" in recs[0] and all("gpu_ns" in x for x in recs[:3] + recs[4:]), recs


def test_context_reset_takes_the_graphs_buffer_with_it(graph_client, standin, tmp_path):
    """The primary context reset (cudaDeviceReset) while a graph holding a
    captured call's buffer is alive: the reset destroys the graph, its
    executable and every allocation of the context (CUDA driver API,
    cuDevicePrimaryCtxReset: "Destroy all allocations and reset all state
    on the primary context"), and the user object's destructor runs. The
    shim sees the context's new id (cuCtxGetId) and only forgets the
    buffer: no cuMemFree of memory that is gone, no warning."""
    r, recs, c = run_recipe(graph_client, standin, tmp_path, "ctx-reset", "ffma", "6.1", {})
    assert [(d["fn"], d["status"]) for d in parse(r, "driver")] == [
        ("cuStreamBeginCapture_v2", "0"), ("cuStreamEndCapture", "0"), ("cuGraphInstantiateWithFlags", "0"),
        ("cuGraphLaunch", "0"), ("cuDevicePrimaryCtxReset_v2", "0")], r.describe()
    assert_results(r, "ffma")
    assert recs[1]["captured"] == 1 and recs[1]["route"] == "ffma", recs
    assert c["user_object_destroyed"] == 1 and c["cuMemFree_v2"] == 0, c
    assert "WARN" not in r.stderr and "standin:" not in r.stderr, r.describe()


def test_capture_destroy_cycles_bounded_memory(graph_client, standin, tmp_path):
    """2000 cycles in PyTorch's order (torch/cuda/graphs.py warms up
    eagerly before each capture; CUDAGraph.cpp capture_end destroys the
    graph after instantiation): a framework re-capturing per shape. Each
    cycle's buffer is freed at the next eager call (the next cycle's
    warm-up), never by the captured call, so the device memory in use
    never grows by more than one buffer, and every buffer is freed by the
    end."""
    n = 2000
    r, recs, c = run_recipe(graph_client, standin, tmp_path, f"cycles={n}", "ffma", "6.1", {})
    cyc = parse(r, "cycles")
    assert len(cyc) == 1 and cyc[0]["n"] == str(n) and cyc[0]["status"] == "0", r.describe()
    assert_results(r, "ffma")
    captured = [rec for rec in recs if rec.get("captured")]
    assert len(captured) == n and all(rec["route"] == "ffma" for rec in captured), recs[:3]
    # one buffer: H x T fp32 operands and output (graph_client: H=64, T=32)
    one_buffer = 64 * 64 * 4 + 2 * 64 * 32 * 4
    assert 0 < int(cyc[0]["grew"]) <= one_buffer + 1024, cyc
    assert c["user_object_destroyed"] == n and c["cuMemFree_v2"] == n, c
    assert c["cuMemAlloc_v2"] == CLIENT_BUFFERS + n, c
    assert c["mem_free_in_own_capture"] == 0, c


def test_recapture_frees_nothing_in_the_capture(graph_client, standin, tmp_path):
    """Two capture / instantiate / destroy graph / launch / destroy cycles
    with no eager call between them: the second captured call finds the
    first graph's buffer released, and leaves it on the list, since
    cudaFree "may perform implicit synchronization" for memory not from
    the stream-ordered allocator (CUDA Runtime API, cudaFree) and a
    synchronisation can invalidate the capture. The eager call after the
    last cycle frees both buffers: in between both were held."""
    r, recs, c = run_recipe(graph_client, standin, tmp_path, "recapture=2", "ffma", "6.1", {})
    cyc = parse(r, "cycles")
    assert len(cyc) == 1 and cyc[0]["status"] == "0", r.describe()
    assert_results(r, "ffma")
    assert [rec.get("captured") for rec in recs] == [None, 1, 1, None], recs
    one_buffer = 64 * 64 * 4 + 2 * 64 * 32 * 4
    assert 2 * one_buffer <= int(cyc[0]["grew"]) <= 2 * one_buffer + 1024, cyc
    assert c["user_object_destroyed"] == 2 and c["cuMemFree_v2"] == 2, c
    assert c["mem_free_in_own_capture"] == 0, c


@pytest.mark.skipif(any("tsan" in p for p in PRELOAD_PREFIX),
                    reason="ThreadSanitizer stops a child of a multi-threaded fork that starts a thread "
                    "(die_after_fork), as the child's log writer does; the plain and ASan builds run it")
def test_forked_child_leaves_the_parents_graph_buffers(graph_client, standin, tmp_path):
    """fork() while one graph's buffer waits on the released list and
    another graph holds its own. CUDA does not duplicate its state into a
    forked child ("CUDA does not support the fork() system call",
    NVIDIA/cuda-python pull request 1309): the parent's buffers are not
    the child's to free, neither at its calls nor at its exit. The
    stand-in serves a child's calls (tests/standin/driver_init.c), so the
    child's eager call routes, frees nothing, and the child exits 0; the
    parent then replays its live graph, and its next eager call frees
    both buffers."""
    log = tmp_path / "gemms.jsonl"
    r = run_ok([graph_client, "--recipe=fork-child"], standin[13], shim=True,
               env={"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off",
                    "GEMMSHIM_LOG": str(log), "STANDIN_COUNTS": str(tmp_path / "counts.%p")})
    child = parse(r, "child")
    assert len(child) == 1 and child[0]["status"] == "0", r.describe()
    assert [x["kind"] for x in assert_results(r, "ffma")] == ["eager", "eager", "replay", "eager"], r.describe()
    capture = ["cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags", "cuGraphDestroy",
               "cuGraphLaunch"]
    assert [(d["fn"], d["status"]) for d in parse(r, "driver")] == [
        (fn, "0") for fn in capture + ["cuGraphExecDestroy"] + capture + ["cuGraphLaunch", "cuGraphExecDestroy"]], \
        r.describe()
    counts = {p.name.split(".", 1)[1]: standin_counts(p) for p in tmp_path.glob("counts.*")}
    c_child = counts.pop(child[0]["pid"])
    assert len(counts) == 1, counts
    c = counts.popitem()[1]
    assert c_child["cuMemFree_v2"] == 0 and c_child["cuMemAlloc_v2"] == CLIENT_BUFFERS + 2, c_child
    assert c["user_object_destroyed"] == 2 and c["cuMemFree_v2"] == 2, c
    assert c["mem_free_in_own_capture"] == 0, c
    assert all(rec["route"] == "ffma" and rec["status"] == 0 for rec in read_log(log)), read_log(log)


@pytest.mark.parametrize("mode,cc,env,fp8_recipe", [ROUTES[0], ROUTES[2]], ids=["ffma", "fp8-current-lt"])
def test_capture_beside_another_threads_global_capture(graph_client, standin, tmp_path, mode, cc, env,
                                                       fp8_recipe):
    """This thread captures the layer in global mode while another thread
    holds a global-mode capture. cuda.h (cuThreadExchangeStreamCaptureMode):
    a thread in global mode may not make "potentially unsafe" calls
    (cuMemAlloc among them) while any thread has a global-mode capture, or
    while it captures itself, and the attempt invalidates the captures. The
    shim allocates the graph's buffer in relaxed mode, so both captures end
    with a graph, and the replay is right."""
    r, recs, c = run_recipe(graph_client, standin, tmp_path, "beside-global", mode, cc, env)
    assert [(d["fn"], d["status"]) for d in parse(r, "driver")] == [
        ("cuStreamBeginCapture_v2", "0"), ("cuStreamBeginCapture_v2", "0"), ("cuStreamEndCapture", "0"),
        ("cuStreamEndCapture", "0"), ("cuGraphInstantiateWithFlags", "0"), ("cuGraphLaunch", "0"),
        ("cuGraphExecDestroy", "0"), ("cuGraphDestroy", "0")], r.describe()
    assert_results(r, mode)
    assert_captured_on_route(recs[1], mode, cc, fp8_recipe)
    assert c["standin_prohibited_event_queries"] == 0, c


# Each driver call the captured path adds, failing (GEMMSHIM_FAULT, the
# shim's call table): the captured call runs native with the reason, the
# capture stays valid (every driver call of the client returns 0), the
# graph replays cuBLAS's GEMM, and no buffer is left behind.
FAULTS = [
    ("cuStreamGetCaptureInfo_v2:1", "cuStreamGetCaptureInfo failed"),
    ("cuThreadExchangeStreamCaptureMode:1",
     "cuThreadExchangeStreamCaptureMode failed before allocating the graph's buffer"),
    # the table's failure value for cuMemAlloc is CUDA_ERROR_OUT_OF_MEMORY
    ("cuMemAlloc_v2:1", "cuMemAlloc: out of device memory for the graph's buffer"),
    ("cuUserObjectCreate:1", "cuUserObjectCreate failed"),
    ("cuGraphRetainUserObject:1", "cuGraphRetainUserObject failed"),
    ("cuGraphRetainUserObject:1,cuUserObjectRelease:1", "cuGraphRetainUserObject failed"),
]


@pytest.mark.parametrize("fault,why", FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_in_capture(graph_client, standin, tmp_path, fault, why):
    r, recs, c = run_recipe(graph_client, standin, tmp_path, "pytorch", "ffma", "6.1", {"GEMMSHIM_FAULT": fault})
    assert all(d["status"] == "0" for d in parse(r, "driver")), r.describe()
    assert_results(r, "ffma")
    rec = recs[3]
    assert rec["route"] == "native" and rec["captured"] == 1, rec
    assert rec["reason"] == f"GEMMSHIM_MODE=ffma; ffma declined: {why}; ran native", rec
    assert [x["route"] for x in recs[:3] + recs[4:]] == ["ffma"] * 6, recs
    assert c["cuMemAlloc_v2"] - c["cuMemFree_v2"] == CLIENT_BUFFERS, c
    # the failed call's buffer is freed by a later eager call, not in the
    # capture (cudaFree may synchronise: CUDA Runtime API, cudaFree)
    assert c["mem_free_in_own_capture"] == 0, c


@pytest.mark.parametrize("mode,cc", [("ffma", "6.1"), ("fp8", "9.0"), ("fp8", "6.1")])
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
    for x in results:
        assert float(x["err"]) <= tol(mode), x
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
    assert [x["status"] for x in results] == ["0", "0"], r.describe()
    for x in results:
        assert float(x["err"]) <= tol(mode), x
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
