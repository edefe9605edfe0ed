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


def test_records_pending_at_exit_are_read_by_the_last_flush(client, standin, tmp_path, shim):
    # No waiting in the client: the last records are still in the buffer,
    # their events pending, when the process exits with its context alive.
    env = {**GPU, "STANDIN_EVENT_LAG": "20"}
    _, recs, _ = run_logged(client, standin, tmp_path, [*FFMA_CALLS, "--nosync"], env, wait=False)
    assert len(recs) == 4
    assert all(0 < x["gpu_ns"] <= x["dur_ns"] + 1 for x in recs), recs


def test_graph_capture_records_no_event_and_says_so(client, standin, tmp_path, shim):
    args = [*FFMA_CALLS[:2], gemm("cap1", m=64, n=48, k=80), gemm("cap2", api="lt", m=40, n=56, k=24),
            "--capture-from=2"]
    r, recs, counts = run_logged(client, standin, tmp_path, args, GPU, wait=False)
    # The capture ended cleanly: no event of ours became part of it.
    assert [l for l in r.stdout.splitlines() if l.startswith("capture ")] == ["capture begin=0 end=0 launch=0"]
    assert [x["route"] for x in recs] == ["ffma"] * 4
    assert all("gpu_ns" in x for x in recs[:2])
    for x in recs[2:]:
        assert x["gpu_skipped"] == "graph capture" and "gpu_ns" not in x, x
    assert counts["cuEventRecord"] == 2 * 4


def test_off_by_default(client, standin, tmp_path, shim):
    _, recs, counts = run_logged(client, standin, tmp_path, FFMA_CALLS[:1], BASE_ENV, wait=False)
    assert "gpu_ns" not in recs[0] and "gpu_skipped" not in recs[0]
    assert counts.get("cuEventCreate", 0) == 0
