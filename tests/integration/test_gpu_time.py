"""GPU time per call (GEMMSHIM_LOG_GPU_TIME=1, shim/gpu_time.c) over the
stand-in, whose events hold the host clock when their inline stream reaches
them: an interval between two events is the host time of the work between
them, and STANDIN_EVENT_LAG makes events read as pending for a while, as on
a GPU behind the host (tests/standin/driver_stream.c).

Expectations from the CUDA driver API reference (event management):
cuEventRecord captures the stream's work so far; cuEventQuery says
CUDA_ERROR_NOT_READY until that work is done; cuEventElapsedTime works on
completed events only; an event recorded while its stream is being
captured becomes part of the graph (so the shim records none then)."""

import pytest

from harness import CLIENT_DIR, read_log, require_built, run, standin_counts
from test_ffma_route import BASE_ENV, gemm

GPU = {**BASE_ENV, "GEMMSHIM_LOG_GPU_TIME": "1"}


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "ffma_client_cu13"
    require_built([path])
    return path


def run_logged(client, standin, tmp_path, args, env, wait=True):
    log = tmp_path / "gs.jsonl"
    counts = tmp_path / "counts"
    extra = [f"--wait-log={log}"] if wait else []
    r = run([client, *args, *extra], standin[13], shim=True,
            env={**env, "GEMMSHIM_LOG": str(log), "STANDIN_COUNTS": str(counts)})
    assert r.returncode == 0, r.describe()
    assert "standin:" not in r.stderr, r.describe()
    return r, read_log(log), standin_counts(counts)


FFMA_CALLS = [gemm("a", m=64, n=48, k=80), gemm("b", m=96, n=32, k=40, c="fp32"), gemm("c", api="lt", m=40, n=56, k=24),
              gemm("d", m=64, n=48, k=80)]


def test_every_call_gets_its_gpu_time_and_the_route_kernels_part(client, standin, tmp_path, shim):
    r, recs, counts = run_logged(client, standin, tmp_path, FFMA_CALLS, GPU)
    assert [x["route"] for x in recs] == ["ffma"] * 4
    for x in recs:
        # The events are recorded inside the call: its GPU interval lies
        # within its host time (both CLOCK_MONOTONIC; +1 for rounding).
        assert 0 < x["gpu_ns"] <= x["dur_ns"] + 1, x
        # widen/narrow kernels around the fp32 GEMM: part of it, not all.
        assert 0 < x["gpu_ns_kernels"] < x["gpu_ns"], x
        assert "gpu_skipped" not in x and "native_gpu_ns" not in x
    # One pool: every call after the first found the events it needs there
    # (the client waits for each record, so the flusher has given them
    # back): 4 events (start, GEMM begin and end, end), never destroyed.
    assert counts["cuEventCreate"] == 4, counts
    assert counts.get("cuEventDestroy_v2", 0) == 0
    assert counts["cuEventRecord"] == 4 * 4
    # Only queries, never a wait on the caller's stream or an event.
    assert counts.get("cuEventSynchronize", 0) == 0
    assert counts["cuStreamSynchronize"] == 4  # the client's own, one per call


def test_native_calls_are_timed_without_kernel_split(client, standin, tmp_path, shim):
    env = {**GPU, "GEMMSHIM_MODE": "native"}
    _, recs, counts = run_logged(client, standin, tmp_path, FFMA_CALLS[:2], env)
    assert [x["route"] for x in recs] == ["native", "native"]
    for x in recs:
        assert 0 < x["gpu_ns"] <= x["dur_ns"] + 1 and "gpu_ns_kernels" not in x, x
    assert counts["cuEventCreate"] == 2


@pytest.mark.parametrize("fault,why", [
    ("cuLaunchKernel:2", "narrowing kernel launch failed (CUresult 999)"),
    ("cublasGemmEx:1", "fp32 GEMM returned status 13"),  # CUBLAS_STATUS_EXECUTION_FAILED, as injected
])
def test_a_route_declined_after_its_first_launch_is_timed_as_native(client, standin, tmp_path, shim, fault, why):
    # The ffma route widened the operands (and ran its fp32 GEMM) before
    # the failure; then native ran. The call's GPU time covers all of it,
    # and there is no kernels' share: the GEMM the route marked is not the
    # one that gave the result. The next call runs ffma, split as usual.
    env = {**GPU, "GEMMSHIM_FAULT": fault}
    _, recs, _ = run_logged(client, standin, tmp_path, FFMA_CALLS[:1] * 2, env)
    assert (recs[0]["route"], recs[0]["reason"]) == ("native", f"GEMMSHIM_MODE=ffma; ffma declined: {why}; ran native")
    assert 0 < recs[0]["gpu_ns"] <= recs[0]["dur_ns"] + 1 and "gpu_ns_kernels" not in recs[0], recs[0]
    assert recs[1]["route"] == "ffma" and 0 < recs[1]["gpu_ns_kernels"] < recs[1]["gpu_ns"], recs[1]


def test_gpu_behind_the_host_records_are_held_not_waited_for(client, standin, tmp_path, shim):
    # Each event reads "not ready" to its first 3 queries (the client never
    # synchronises, which would complete them): the flusher holds the
    # records and writes them once their work is done.
    env = {**GPU, "STANDIN_EVENT_LAG": "3"}
    _, recs, counts = run_logged(client, standin, tmp_path, [*FFMA_CALLS, "--nosync"], env)
    assert all(0 < x["gpu_ns"] <= x["dur_ns"] + 1 for x in recs), recs
    assert [x["seq"] for x in recs] == [1, 2, 3, 4]
    assert counts["cuEventQuery"] >= 4 * 4  # 3 "not ready" and 1 done, per record
    assert counts.get("cuEventSynchronize", 0) == 0


def test_work_done_before_exit_is_timed_by_the_last_flush(client, standin, tmp_path, shim):
    # The client synchronises after each call (which completes the events,
    # lag or not) but does not wait for the log: the records are still in
    # the buffer at exit, and the first query of each finds it done.
    env = {**GPU, "STANDIN_EVENT_LAG": "20"}
    _, recs, counts = run_logged(client, standin, tmp_path, FFMA_CALLS, env, wait=False)
    assert [x["seq"] for x in recs] == [1, 2, 3, 4]
    assert all(0 < x["gpu_ns"] <= x["dur_ns"] + 1 for x in recs), recs
    assert counts["cuStreamSynchronize"] == 4 and counts.get("cuEventSynchronize", 0) == 0


def test_records_pending_at_exit_are_all_written(client, standin, tmp_path, shim):
    # No synchronisation, no waiting: at exit the records are in the buffer
    # or held, their events pending. The last flush polls them for at most
    # half the exit's write budget (docs/profiling.md, "Costs"), so whether a
    # record gets its time depends on the machine's pace; what is
    # guaranteed: every record is written, once, in order, each with its
    # GPU time or saying it had none when the log closed.
    env = {**GPU, "STANDIN_EVENT_LAG": "20"}
    _, recs, _ = run_logged(client, standin, tmp_path, [*FFMA_CALLS, "--nosync"], env, wait=False)
    assert [x["seq"] for x in recs] == [1, 2, 3, 4]
    for x in recs:
        if "gpu_ns" in x:
            assert 0 < x["gpu_ns"] <= x["dur_ns"] + 1 and "gpu_skipped" not in x, x
        else:
            assert x["gpu_skipped"] == "not finished when the log closed", x


def test_work_never_done_at_exit_is_written_without_time(client, standin, tmp_path, shim):
    # Events that never complete (a GPU far behind at exit): polled at most
    # the bounded exit wait (0.2 ms apart, far fewer than 10^9 queries),
    # then every record is written saying so, none lost.
    env = {**GPU, "STANDIN_EVENT_LAG": "1000000000"}
    _, recs, _ = run_logged(client, standin, tmp_path, [*FFMA_CALLS, "--nosync"], env, wait=False)
    assert [x["seq"] for x in recs] == [1, 2, 3, 4]
    for x in recs:
        assert x["gpu_skipped"] == "not finished when the log closed" and "gpu_ns" not in x, x


def test_a_context_reset_before_the_events_are_read_is_named(client, standin, tmp_path, shim):
    # The first call's events never complete (the GPU far behind, no
    # synchronisation); then the primary context is released, which destroys
    # everything in it (CUDA driver API, cuDevicePrimaryCtxRelease: "the
    # context is destroyed" with the last reference; cuCtxDestroy: "all
    # resources allocated in the context are destroyed"), and retained again:
    # same handle, new context id. The old events' handles are dead (the
    # stand-in frees them, and may hand the memory to the new context's
    # events): the record names the reset, and the shim neither queries nor
    # destroys them. The second call, in the new context, gets a pool of its
    # own and is still pending at exit.
    env = {**GPU, "STANDIN_EVENT_LAG": "1000000000"}
    args = ["--stream=legacy", "--reset-after=1", *FFMA_CALLS[:2], "--nosync"]
    r, recs, counts = run_logged(client, standin, tmp_path, args, env, wait=False)
    assert [l for l in r.stdout.splitlines() if l.startswith("reset ")] == ["reset before=1"]
    assert [x["seq"] for x in recs] == [1, 2] and [x["route"] for x in recs] == ["ffma", "ffma"]
    assert recs[0]["gpu_skipped"] == "context destroyed before its events were read" and "gpu_ns" not in recs[0]
    assert recs[1]["gpu_skipped"] == "not finished when the log closed" and "gpu_ns" not in recs[1]
    assert counts["cuEventCreate"] == 2 * 4  # one pool per context
    assert counts.get("cuEventDestroy_v2", 0) == 0


def test_graph_capture_records_no_event_and_says_so(client, standin, tmp_path, shim):
    args = [*FFMA_CALLS[:2], gemm("cap1", m=64, n=48, k=80), gemm("cap2", api="lt", m=40, n=56, k=24),
            "--capture-from=2"]
    r, recs, counts = run_logged(client, standin, tmp_path, args, GPU, wait=False)
    # The capture ended cleanly: no event of ours became part of it.
    assert [l for l in r.stdout.splitlines() if l.startswith("capture ")] == ["capture begin=0 end=0 launch=0"]
    # The captured calls keep the ffma route (docs/graphs.md); their work
    # runs at replays, so they are not timed.
    assert [x["route"] for x in recs] == ["ffma"] * 4
    assert [x.get("captured") for x in recs] == [None, None, 1, 1]
    assert all("gpu_ns" in x for x in recs[:2])
    for x in recs[2:]:
        assert x["gpu_skipped"] == "graph capture" and "gpu_ns" not in x, x
    assert counts["cuEventRecord"] == 2 * 4


def test_trace_of_two_threads_on_the_per_thread_stream(client, standin, tmp_path, shim):
    """Two threads, each on CU_STREAM_PER_THREAD: one handle (0x2), a
    different stream in each thread (cuda.h), so one GPU track per thread;
    the trace is valid, no ts negative (trace_format.py)."""
    import json
    import os
    import subprocess
    import sys
    from harness import ROOT
    from trace_format import check_trace
    args = ["--threads=2", "--iters=3", "--stream=per-thread", gemm("a", m=64, n=48, k=80)]
    _, recs, _ = run_logged(client, standin, tmp_path, args, GPU, wait=False)
    assert len(recs) == 6 and {x["stream"] for x in recs} == {"0x2"} and len({x["tid"] for x in recs}) == 2
    out = tmp_path / "trace.json"
    subprocess.run([sys.executable, "-m", "gemmshim.report", str(tmp_path / "gs.jsonl"), "--trace", str(out)],
                   env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), capture_output=True, check=True)
    assert check_trace(out.read_text()) == []
    ev = json.loads(out.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {n for n in names if n.startswith("GPU")} == {f"GPU 0 stream 0x2 (thread {t})" for t in
                                                         {x["tid"] for x in recs}}
    assert sum(e["ph"] == "X" and e["cat"].startswith("gpu,") for e in ev) == 6


def test_reading_events_does_not_break_a_capture_on_another_thread(client, standin, tmp_path, shim):
    """cuda.h, cuThreadExchangeStreamCaptureMode: while any other thread has
    a capture begun in GLOBAL mode, a thread in GLOBAL mode (every thread's
    default) "is prohibited from potentially unsafe API calls", cuEventQuery
    among them (PyTorch's NCCL watchdog broke captures so: pytorch pull
    requests 104487, 105182); made, it fails and invalidates the capture.
    The client keeps a global-mode capture open until the log has every
    call's record, so the shim's writer thread reads their events during
    it: in RELAXED mode, which "is not prohibited", set once for that
    thread; the capture ends cleanly and every call has its GPU time."""
    log = tmp_path / "gs.jsonl"
    r, recs, counts = run_logged(client, standin, tmp_path, [*FFMA_CALLS[:2], f"--side-capture={log}"], GPU,
                                 wait=False)
    assert [l for l in r.stdout.splitlines() if l.startswith("side capture ")] == ["side capture begin=0 end=0"]
    assert [x["route"] for x in recs] == ["ffma", "ffma"]
    assert all("gpu_ns" in x and "gpu_skipped" not in x for x in recs), recs
    assert counts["standin_prohibited_event_queries"] == 0
    assert counts["cuEventQuery"] >= 2
    # The writer thread, once; no other thread read events.
    assert counts["cuThreadExchangeStreamCaptureMode"] == 1


def test_off_by_default(client, standin, tmp_path, shim):
    _, recs, counts = run_logged(client, standin, tmp_path, FFMA_CALLS[:1], BASE_ENV, wait=False)
    assert "gpu_ns" not in recs[0] and "gpu_skipped" not in recs[0]
    assert counts.get("cuEventCreate", 0) == 0


# ---- GEMMSHIM_COMPARE -----------------------------------------------------------
def test_compare_runs_native_at_each_sites_first_call_then_every_nth(client, standin, tmp_path, shim):
    same = gemm("s", m=64, n=48, k=80)
    args = [same] * 5 + [gemm("other", m=96, n=32, k=40, c="fp32"), gemm("batched", api="batched", batch=2)]
    env = {**BASE_ENV, "GEMMSHIM_COMPARE": "1", "GEMMSHIM_COMPARE_EVERY": "2"}
    r, recs, counts = run_logged(client, standin, tmp_path, args, env)
    assert all(c["ok"] == "1" for c in r.calls), r.describe()
    assert [x["route"] for x in recs] == ["ffma"] * 7
    # One call site (the client's issuing line) and shape: calls 1, 3, 5
    # are compared; the other shape is another site: its first call.
    compared = [("native_gpu_ns" in x) for x in recs]
    assert compared == [True, False, True, False, True, True, False]
    for x in recs:
        if "native_gpu_ns" in x:
            assert 0 < x["native_gpu_ns"] <= x["dur_ns"] + 1 and 0 < x["gpu_ns"], x
    # A pointer-array batch is never compared: its native run would need
    # the caller's pointer arrays rewritten.
    assert recs[6]["reason"] == "GEMMSHIM_MODE=ffma; compare skipped: pointer-array batch"
    assert "native_gpu_ns" not in recs[6]
    # COMPARE implies GPU time: every record timed.
    assert all("gpu_ns" in x for x in recs)


def test_compare_leaves_the_callers_results_exactly_the_routes(standin, tmp_path, shim):
    # The integration suite prints an FNV-1a hash of every output buffer.
    from harness import client_argv
    env = {"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off"}
    argv = client_argv("linked", 13, "--api=cublasGemmEx,cublasGemmStridedBatchedEx,cublasLtMatmul", "--invalid=0")
    plain = run(argv, standin[13], shim=True, env={**env, "GEMMSHIM_LOG": str(tmp_path / "a.jsonl"),
                                                  "STANDIN_TRACE": str(tmp_path / "a.trace")})
    cmp = run(argv, standin[13], shim=True,
              env={**env, "GEMMSHIM_COMPARE": "1", "GEMMSHIM_LOG": str(tmp_path / "b.jsonl"),
                   "STANDIN_TRACE": str(tmp_path / "b.trace")})
    assert plain.returncode == cmp.returncode == 0, cmp.describe()
    assert [c["hash"] for c in cmp.calls] == [c["hash"] for c in plain.calls]
    recs = read_log(tmp_path / "b.jsonl")
    assert [x["route"] for x in recs] == [x["route"] for x in read_log(tmp_path / "a.jsonl")]
    # The native runs happened (one per routed call: each is its own site),
    # on top of the route's own GEMMs: one more GEMM computed each
    # (STANDIN_TRACE's "gemm" lines).
    routed = sum(x["route"] == "ffma" for x in recs)

    def gemms(path):
        return sum(line.split()[1] == "gemm" for line in path.read_text().splitlines())

    assert routed > 0 and gemms(tmp_path / "b.trace") == gemms(tmp_path / "a.trace") + routed


def test_report_shows_the_measured_speedup(client, standin, tmp_path, shim):
    import json
    import os
    import subprocess
    import sys
    from harness import ROOT
    same = gemm("s", m=64, n=48, k=80)
    env = {**BASE_ENV, "GEMMSHIM_COMPARE": "1", "GEMMSHIM_COMPARE_EVERY": "1"}
    _, recs, _ = run_logged(client, standin, tmp_path, [same] * 3, env)
    p = subprocess.run([sys.executable, "-m", "gemmshim.report", str(tmp_path / "gs.jsonl"), "--json", "-"],
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), capture_output=True, text=True,
                       check=True)
    s = json.loads(p.stdout)
    route = sum(x["gpu_ns"] for x in recs) / 3
    native = sum(x["native_gpu_ns"] for x in recs) / 3
    assert s["compare"] == [{"route": "ffma", "shape": "64x48x80 bf16", "device": 0, "sm": "6.1", "calls": 3,
                             "pairs": 3, "route_gpu_ns_mean": route, "native_gpu_ns_mean": native,
                             "speedup": native / route}]


def test_report_hints_name_the_options_that_add_what_is_missing(client, standin, tmp_path, shim):
    """Where the log lacks GPU time or native measurements, the report says
    which option adds them; a run with the option it names has them."""
    import json
    import os
    import re
    import subprocess
    import sys
    from harness import ROOT

    def run_and_report(name, env):
        d = tmp_path / name
        d.mkdir()
        run_logged(client, standin, d, FFMA_CALLS[:2], env)
        p = subprocess.run([sys.executable, "-m", "gemmshim.report", str(d / "gs.jsonl"), "--json", str(d / "s.json")],
                           env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), capture_output=True, text=True,
                           check=True)
        return p.stdout.splitlines(), json.loads((d / "s.json").read_text())

    def hint(lines, prefix):
        found = [line for line in lines if line.startswith(prefix)]
        assert len(found) == 1, lines
        m = re.fullmatch(r".*\(run with (GEMMSHIM_[A-Z_]+)=(\S+)\)", found[0])
        assert m, found[0]
        return {m.group(1): m.group(2)}

    lines, s = run_and_report("plain", BASE_ENV)
    assert s["time_sorted_by"] == "host_ns"
    gpu_opt = hint(lines, "GPU time: not in the log")
    assert gpu_opt == {"GEMMSHIM_LOG_GPU_TIME": "1"}
    lines, s = run_and_report("gpu", {**BASE_ENV, **gpu_opt})
    assert s["time_sorted_by"] == "gpu_ns" and s["compare"] == []
    cmp_opt = hint(lines, "route vs native: no native measurements in the log")
    assert cmp_opt == {"GEMMSHIM_COMPARE": "1"}
    lines, s = run_and_report("compare", {**BASE_ENV, **cmp_opt})
    assert [(d["route"], d["pairs"]) for d in s["compare"]] == [("ffma", 1), ("ffma", 1)]
    assert not [line for line in lines if "(run with" in line]
