"""`gemmshim report` (python/gemmshim/report/): numbers from logs of known
content, the trace checked against the trace event format
(trace_format.py), the plot, bad lines, many logs, and a log the shim
wrote over the stand-in."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from trace_format import check_trace

PYDIR = harness.ROOT / "python"
REPORT = [sys.executable, "-m", "gemmshim.report"]
T0 = 1_700_000_000_000_000_000  # a CLOCK_REALTIME ns value of 2023: where a double loses the ns


def rec(**kw):
    base = {"seq": 0, "t_ns": T0, "tid": 100, "api": "cublasGemmEx", "m": 4096, "n": 4096, "k": 4096, "batch": 1,
            "transa": "T", "transb": "N", "a_type": "bf16", "b_type": "bf16", "c_type": "bf16",
            "compute_type": "32f", "device": 0, "sm": "6.1", "stream": "0x10", "site": "00000000000000aa",
            "decided": "ffma", "route": "ffma", "backend": "sgemm", "reason": "policy: rule 1",
            "status": 0, "status_name": "CUBLAS_STATUS_SUCCESS", "dur_ns": 0}
    base.update(kw)
    return json.dumps(base, separators=(",", ":"))


NATIVE_LT = dict(api="cublasLtMatmul", m=1024, n=1024, k=1024, c_type="fp32", d_type="fp32", decided="native",
                 route="native", backend=None, reason="policy: rule 2", site="00000000000000bb")
FP8 = dict(m=2048, n=2048, k=2048, decided="fp8", route="fp8", backend="own", reason="mode fp8", stream="0x20",
           tid=101, site="00000000000000cc")


def known_logs(tmp_path):
    """Two ranks' logs. Rank 0: two ffma calls of one site (GPU times 2.0
    and 1.8 ms, the first compared with native at 2.6 ms), a native Lt call,
    a line of garbage, an fp8 call on another thread and stream (compared:
    1.4 ms native), and an fp8 call that declined to native during graph
    capture (no GPU time). Rank 1: one ffma call of the same site (2.2 ms,
    native 2.8 ms), then a line cut off by a crash."""
    r0 = "\n".join([
        rec(seq=1, t_ns=T0, dur_ns=50_000, gpu_ns=2_000_000, gpu_ns_kernels=300_000, native_gpu_ns=2_600_000),
        rec(seq=2, t_ns=T0 + 1_000_000, dur_ns=40_000, gpu_ns=1_800_000, gpu_ns_kernels=200_000),
        rec(seq=3, t_ns=T0 + 6_000_000, dur_ns=30_000, gpu_ns=500_000, **NATIVE_LT),
        "this is not json {",
        rec(seq=4, t_ns=T0 + 6_500_000, dur_ns=20_000, gpu_ns=700_000, gpu_ns_kernels=100_000,
            native_gpu_ns=1_400_000, **FP8),
        rec(seq=5, t_ns=T0 + 7_000_000, dur_ns=10_000, gpu_skipped="graph capture",
            **{**FP8, "route": "native", "backend": None, "reason": "mode fp8; fp8 declined: x; ran native"}),
    ]) + "\n"
    r1 = rec(seq=1, t_ns=T0 + 1_000_000, tid=200, dur_ns=60_000, gpu_ns=2_200_000, gpu_ns_kernels=250_000,
             native_gpu_ns=2_800_000) + "\n" + '{"seq":2,"t_ns":17'
    # A record without a backend has none in the log (log.c omits the key).
    r0 = r0.replace(',"backend":null', "")
    p0, p1 = tmp_path / "gs-rank0.jsonl", tmp_path / "gs-rank1.jsonl"
    p0.write_text(r0)
    p1.write_text(r1)
    return p0, p1


def report(*args, check=True, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(PYDIR))
    p = subprocess.run([*REPORT, *map(str, args)], env=env, capture_output=True, text=True, timeout=300, cwd=cwd)
    if check:
        assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert "Traceback" not in p.stderr, p.stderr
    return p


def rows(text, title):
    """The rows of one printed table, each split on runs of spaces."""
    lines = text.splitlines()
    start = lines.index(title) + 2  # title, header
    out = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        out.append(line.split())
    return out


def test_summary_numbers_of_a_known_log(tmp_path):
    p0, p1 = known_logs(tmp_path)
    s = json.loads(report(tmp_path / "gs-rank*.jsonl", "--json", "-").stdout)
    assert s["files"] == [str(p0), str(p1)]
    assert s["calls"] == 6
    assert s["time_sorted_by"] == "gpu_ns"
    assert s["by_api_route_backend"] == [
        {"api": "cublasGemmEx", "route": "ffma", "backend": "sgemm", "calls": 3, "host_ns": 150_000,
         "gpu_calls": 3, "gpu_ns": 6_000_000, "gpu_ns_kernels": 750_000},
        {"api": "cublasGemmEx", "route": "fp8", "backend": "own", "calls": 1, "host_ns": 20_000,
         "gpu_calls": 1, "gpu_ns": 700_000, "gpu_ns_kernels": 100_000},
        {"api": "cublasGemmEx", "route": "native", "backend": None, "calls": 1, "host_ns": 10_000,
         "gpu_calls": 0, "gpu_ns": 0, "gpu_ns_kernels": 0},
        {"api": "cublasLtMatmul", "route": "native", "backend": None, "calls": 1, "host_ns": 30_000,
         "gpu_calls": 1, "gpu_ns": 500_000, "gpu_ns_kernels": 0},
    ]
    assert s["declines"] == [{"api": "cublasGemmEx", "decided": "fp8", "ran": "native",
                              "reason": "mode fp8; fp8 declined: x; ran native", "calls": 1}]
    assert [(d["route"], d["shape"], d["calls"], d["sites"], d["gpu_ns"]) for d in s["shapes"]] == [
        ("ffma", "4096x4096x4096 bf16", 3, 1, 6_000_000),
        ("fp8", "2048x2048x2048 bf16", 1, 1, 700_000),
        ("native", "1024x1024x1024 bf16->fp32", 1, 1, 500_000),
        ("native", "2048x2048x2048 bf16", 1, 1, 0),
    ]
    assert [(d["site"], d["gpu_ns"], d["calls"]) for d in s["top_sites"]] == [
        ("00000000000000aa", 6_000_000, 3), ("00000000000000cc", 700_000, 1),
        ("00000000000000bb", 500_000, 1), ("00000000000000cc", 0, 1)]
    assert s["gpu_not_measured"] == {"graph capture": 1}
    # ffma: the two compared calls (rank 0's first, rank 1's) ran 2.0 and
    # 2.2 ms routed, 2.6 and 2.8 ms native: (2.6 + 2.8) / (2.0 + 2.2).
    assert s["compare"] == [
        {"route": "ffma", "shape": "4096x4096x4096 bf16", "device": 0, "sm": "6.1", "calls": 3, "pairs": 2,
         "route_gpu_ns_mean": 2_100_000, "native_gpu_ns_mean": 2_700_000, "speedup": 2_700_000 / 2_100_000},
        {"route": "fp8", "shape": "2048x2048x2048 bf16", "device": 0, "sm": "6.1", "calls": 1, "pairs": 1,
         "route_gpu_ns_mean": 700_000, "native_gpu_ns_mean": 1_400_000, "speedup": 2.0},
    ]
    assert s["bad_lines"] == {
        str(p0): {"count": 1, "first_line": 4, "why": "not JSON"},
        str(p1): {"count": 1, "first_line": 2, "why": "cut off (no newline at the end)"},
    }
    assert s["statuses"] == {"CUBLAS_STATUS_SUCCESS": 6}
    assert s["sites"] == {"ffma": 1, "native": 2, "fp8": 1}


def test_route_vs_native_pairs_the_same_calls_per_gpu(tmp_path):
    """The report's promise, "the time it would have taken native where both were
    measured": a route's speedup is native over route on the calls that
    ran both (GEMMSHIM_COMPARE: the route, then the same GEMM native; both
    times in one record), per device and GPU, never the route's mean over
    every call against a few native runs, nor pooled across GPUs."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    # a: a GTX 1080 (sm 6.1), ffma calls of 100, 200, 300 us, the first
    # compared at 150 us native: 1.5x (not 150 / mean(100, 200, 300) = 0.75x).
    # One more record with a native time but no route time (the route's
    # was not measured): nothing to pair it with.
    a.write_text("\n".join([
        rec(seq=1, t_ns=T0, gpu_ns=100_000, native_gpu_ns=150_000),
        rec(seq=2, t_ns=T0 + 1000, gpu_ns=200_000),
        rec(seq=3, t_ns=T0 + 2000, gpu_ns=300_000),
        rec(seq=4, t_ns=T0 + 3000, gpu_skipped="not finished when the log closed", native_gpu_ns=1),
        # Device 1 of the same machine: its own row.
        rec(seq=5, t_ns=T0 + 4000, device=1, gpu_ns=100_000, native_gpu_ns=120_000),
    ]) + "\n")
    # b: an H100 (sm 9.0) device 0, the same shape: 10 and 10 us, the first
    # compared at 5 us native: 0.5x.
    b.write_text("\n".join([
        rec(seq=1, t_ns=T0, sm="9.0", gpu_ns=10_000, native_gpu_ns=5_000),
        rec(seq=2, t_ns=T0 + 1000, sm="9.0", gpu_ns=10_000),
    ]) + "\n")
    s = json.loads(report(a, b, "--json", "-").stdout)
    shape = "4096x4096x4096 bf16"
    assert s["compare"] == [
        {"route": "ffma", "shape": shape, "device": 0, "sm": "6.1", "calls": 3, "pairs": 1,
         "route_gpu_ns_mean": 100_000, "native_gpu_ns_mean": 150_000, "speedup": 1.5},
        {"route": "ffma", "shape": shape, "device": 0, "sm": "9.0", "calls": 2, "pairs": 1,
         "route_gpu_ns_mean": 10_000, "native_gpu_ns_mean": 5_000, "speedup": 0.5},
        {"route": "ffma", "shape": shape, "device": 1, "sm": "6.1", "calls": 1, "pairs": 1,
         "route_gpu_ns_mean": 100_000, "native_gpu_ns_mean": 120_000, "speedup": 1.2},
    ]
    assert rows(report(a, b).stdout, "route vs native, the same calls measured both ways (GPU us per call):") == [
        ["ffma", "0", "6.1", "3", "1", "100.0", "150.0", "1.50x", "4096x4096x4096", "bf16"],
        ["ffma", "0", "9.0", "2", "1", "10.0", "5.0", "0.50x", "4096x4096x4096", "bf16"],
        ["ffma", "1", "6.1", "1", "1", "100.0", "120.0", "1.20x", "4096x4096x4096", "bf16"],
    ]


def test_tables_of_a_known_log(tmp_path):
    p0, p1 = known_logs(tmp_path)
    out = report(p0, p1).stdout
    assert out.splitlines()[0] == "routing log: 6 calls from 2 file(s)"
    assert f"  {p0}: 1 line(s) skipped, first at line 4 (not JSON)" in out.splitlines()
    assert f"  {p1}: 1 line(s) skipped, first at line 2 (cut off (no newline at the end))" in out.splitlines()
    assert rows(out, "calls by entry point, route, backend:") == [
        ["cublasGemmEx", "ffma", "sgemm", "3", "0.150", "50.0", "6.000", "2000.0"],
        ["cublasGemmEx", "fp8", "own", "1", "0.020", "20.0", "0.700", "700.0"],
        ["cublasGemmEx", "native", "-", "1", "0.010", "10.0", "-", "-"],
        ["cublasLtMatmul", "native", "-", "1", "0.030", "30.0", "0.500", "500.0"],
    ]
    assert rows(out, "top shapes by GPU time:")[0] == [
        "ffma", "3", "1", "0.150", "50.0", "6.000", "2000.0", "0.750", "4096x4096x4096", "bf16"]
    assert rows(out, "route vs native, the same calls measured both ways (GPU us per call):") == [
        ["ffma", "0", "6.1", "3", "2", "2100.0", "2700.0", "1.29x", "4096x4096x4096", "bf16"],
        ["fp8", "0", "6.1", "1", "1", "700.0", "1400.0", "2.00x", "2048x2048x2048", "bf16"],
    ]
    assert "calls without GPU time: 1 graph capture" in out.splitlines()


# ---- the verdict the report opens with ----
NO_COMPARED = "  speedup over native: no compared calls (run with --compare, or GEMMSHIM_COMPARE=1, to measure speedup)"
SPEEDUP = "  speedup over native (native GPU time / the route's, over the same calls): "


def verdict(out):
    """The verdict's lines: its title to the line before the first table."""
    lines = out.splitlines()
    start = lines.index("verdict:")
    end = lines.index("calls by entry point, route, backend:")
    return lines[start:end]


def test_verdict_of_a_known_log(tmp_path):
    # GPU time of the 5 measured calls (7.2 ms): ffma 6.0, fp8 0.7, native
    # 0.5; compared: ffma (2.6 + 2.8) / (2.0 + 2.2) ms, fp8 1.4 / 0.7 ms.
    p0, p1 = known_logs(tmp_path)
    lines = report(p0, p1).stdout.splitlines()
    assert lines[:3] == ["routing log: 6 calls from 2 file(s)",
                         f"  {p0}: 1 line(s) skipped, first at line 4 (not JSON)",
                         f"  {p1}: 1 line(s) skipped, first at line 2 (cut off (no newline at the end))"]
    assert lines[3:7] == [
        "verdict:",
        "  GPU time by route (gpu_ns, 5 of 6 calls): ffma 83.3% (6.000 ms), fp8 9.7% (0.700 ms), "
        "native 6.9% (0.500 ms)",
        SPEEDUP + "ffma 1.29x (2 compared calls), fp8 2.00x (1 compared call)",
        "calls by entry point, route, backend:"]


def test_verdict_of_host_time_without_compared_calls(tmp_path):
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join([
        rec(seq=1, dur_ns=30_000), rec(seq=2, t_ns=T0 + 100_000, dur_ns=10_000),
        rec(seq=3, t_ns=T0 + 200_000, dur_ns=60_000, **NATIVE_LT).replace(',"backend":null', ""),
    ]) + "\n")
    assert verdict(report(p).stdout) == [
        "verdict:",
        "  host time by route (dur_ns; the log has no gpu_ns): native 60.0% (0.060 ms), ffma 40.0% (0.040 ms)",
        NO_COMPARED]


def test_verdict_sums_shapes_and_keeps_gpus_apart(tmp_path):
    # One GPU, two shapes: ffma's speedup is over both shapes' compared
    # calls, (300 + 300) / (100 + 300) us; the uncompared call adds time
    # but no speedup. GPU time measured on every call: "all 4 calls".
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join([
        rec(seq=1, t_ns=T0, gpu_ns=100_000, native_gpu_ns=300_000),
        rec(seq=2, t_ns=T0 + 1_000_000, m=1024, gpu_ns=300_000, native_gpu_ns=300_000),
        rec(seq=3, t_ns=T0 + 2_000_000, gpu_ns=400_000),
        rec(seq=4, t_ns=T0 + 3_000_000, gpu_ns=200_000, **NATIVE_LT).replace(',"backend":null', ""),
    ]) + "\n")
    assert verdict(report(p).stdout) == [
        "verdict:",
        "  GPU time by route (gpu_ns, all 4 calls): ffma 80.0% (0.800 ms), native 20.0% (0.200 ms)",
        SPEEDUP + "ffma 1.50x (2 compared calls)"]
    # Logs of different GPUs: a speedup per device and sm, as the table has.
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(rec(seq=1, gpu_ns=100_000, native_gpu_ns=150_000) + "\n")
    b.write_text(rec(seq=1, sm="9.0", gpu_ns=10_000, native_gpu_ns=5_000) + "\n"
                 + rec(seq=2, t_ns=T0 + 1000, sm="9.0", gpu_ns=10_000, native_gpu_ns=5_000) + "\n")
    assert verdict(report(a, b).stdout)[2] == (
        SPEEDUP + "ffma on device 0 sm 6.1 1.50x (1 compared call), ffma on device 0 sm 9.0 0.50x (2 compared calls)")


def test_verdict_without_calls_or_time(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not a record\n")
    assert verdict(report(empty).stdout) == ["verdict:", "  no calls in the log"]
    zero = tmp_path / "zero.jsonl"
    zero.write_text(rec(seq=1) + "\n" + rec(seq=2, t_ns=T0 + 1, route="native") + "\n")  # dur_ns 0
    assert verdict(report(zero).stdout) == [
        "verdict:", "  host time by route (dur_ns; the log has no gpu_ns): none recorded; calls by route: ffma 1, "
        "native 1", NO_COMPARED]


def test_speedup_panel_shows_every_route_or_says_top_n_of_m(monkeypatch):
    monkeypatch.syspath_prepend(str(PYDIR))
    from gemmshim.report.plot import speedup_panel

    def row(route, shape, calls, route_ns, native_ns, pairs):
        return {"route": route, "shape": shape, "device": 0, "sm": "6.1", "calls": calls, "pairs": pairs,
                "route_gpu_ns_mean": route_ns, "native_gpu_ns_mean": native_ns, "speedup": native_ns / route_ns}
    compare = [row("ffma", "a", 100, 1000, 1500, 3), row("ffma", "b", 50, 1000, 500, 2),
               row("ffma", "c", 10, 1000, 1200, 1), row("fp8", "d", 1, 1000, 2000, 1)]
    # Two rows: ffma's and fp8's largest (fp8's is the smallest of all).
    rows, labels, samples, title = speedup_panel(compare, 2)
    assert labels == ["ffma a", "fp8 d"] and samples == ["n=3", "n=1"]
    assert title == "route vs native, the same calls measured both ways (top 2 of 4 route/shape rows)"
    # Three: then the next by time (ffma b), all by speedup.
    rows, labels, samples, title = speedup_panel(compare, 3)
    assert labels == ["ffma b", "ffma a", "fp8 d"] and samples == ["n=2", "n=3", "n=1"]
    assert title.endswith("(top 3 of 4 route/shape rows)")
    rows, labels, samples, title = speedup_panel(compare, 10)
    assert labels == ["ffma b", "ffma c", "ffma a", "fp8 d"] and samples == ["n=2", "n=1", "n=3", "n=1"]
    assert title == "route vs native, the same calls measured both ways"


def test_trace_is_valid_and_has_one_track_per_thread_and_stream(tmp_path):
    p0, p1 = known_logs(tmp_path)
    out = tmp_path / "trace.json"
    report(p0, p1, "--trace", out)
    text = out.read_text()
    assert check_trace(text) == []
    doc = json.loads(text)
    assert doc["otherData"]["t0_ns"] == T0
    assert doc["displayTimeUnit"] == "ns"
    ev = doc["traceEvents"]
    host = [e for e in ev if e["ph"] == "X" and e["cat"].startswith("host,")]
    gpu = [e for e in ev if e["ph"] == "X" and e["cat"].startswith("gpu,")]
    assert len(host) == 6 and len(gpu) == 5
    meta = {(e["pid"], e["tid"], e["name"]): e["args"] for e in ev if e["ph"] == "M"}
    assert meta[(1, 0, "process_name")] == {"name": "gs-rank0.jsonl (log 1)"}
    assert meta[(2, 0, "process_name")] == {"name": "gs-rank1.jsonl (log 2)"}
    # Host tracks: a process's threads; GPU tracks: its streams.
    assert {(e["pid"], e["tid"]) for e in host} == {(1, 100), (1, 101), (2, 200)}
    streams = {(e["pid"], e["tid"]) for e in gpu}
    assert {meta[(p, t, "thread_name")]["name"] for p, t in streams} == {"GPU 0 stream 0x10", "GPU 0 stream 0x20"}
    assert len(streams) == 3  # rank 0: 0x10 and 0x20; rank 1: 0x10
    first = host[0]
    assert first["name"] == "ffma 4096x4096x4096 bf16 (cublasGemmEx)"
    assert first["ts"] == 0.0 and first["dur"] == 50.0
    for key, want in {"shape": "4096x4096x4096 bf16", "types": "bf16", "route": "ffma", "reason": "policy: rule 1",
                      "site": "00000000000000aa", "backend": "sgemm", "gpu_ns": 2_000_000}.items():
        assert first["args"][key] == want, key
    # Rank 0, stream 0x10: the second ffma call was launched at 1.0 ms
    # while the first ran until 2.0 ms: a stream runs in order, so it starts
    # at 2.0 ms and lasts its 1.8 ms; the native call launched at 6.0 ms.
    s10 = sorted((e["ts"], e["dur"]) for e in gpu if (e["pid"], meta[(e["pid"], e["tid"], "thread_name")]["name"])
                 == (1, "GPU 0 stream 0x10"))
    assert s10 == [(0.0, 2000.0), (2000.0, 1800.0), (6000.0, 500.0)]
    assert all(e["args"]["gpu_start"].startswith("placed after") for e in gpu)


def test_trace_uses_the_gpu_start_when_the_log_has_it(tmp_path):
    p = tmp_path / "log.jsonl"
    p.write_text(rec(seq=1, t_ns=T0, dur_ns=1000, gpu_ns=5000, gpu_t_ns=T0 + 7000) + "\n")
    out = tmp_path / "t.json"
    report(p, "--trace", out)
    gpu = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat", "").startswith("gpu,")]
    assert [(e["ts"], e["dur"]) for e in gpu] == [(7.0, 5.0)]
    assert "gpu_start" not in gpu[0]["args"]


def gpu_tracks(doc):
    """{track name: [(ts, dur, seq), ...] in time order} of the GPU slices."""
    ev = doc["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    out = {}
    for e in ev:
        if e["ph"] == "X" and e["cat"].startswith("gpu,"):
            out.setdefault(names[(e["pid"], e["tid"])], []).append((e["ts"], e["dur"], e["args"]["seq"]))
    return {k: sorted(v) for k, v in out.items()}


def test_trace_origin_is_the_earliest_call_of_a_log_written_out_of_order(tmp_path):
    # log.c writes a record when its call ends: with two threads, a call
    # that began first can be written after calls that began later (seq 1
    # here). Every ts is from the earliest start, none negative (Perfetto
    # drops negative timestamps: google/perfetto pull request 1544).
    # Both threads use CU_STREAM_PER_THREAD, "0x2": cuda.h, "an implicit
    # stream with per-thread synchronization behavior", a stream of each
    # thread's own, so one GPU track per thread, each in its own order.
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join([
        rec(seq=2, t_ns=T0 + 1_000_000, tid=100, dur_ns=500_000, stream="0x2", gpu_ns=400_000),
        rec(seq=1, t_ns=T0, tid=101, dur_ns=2_000_000, stream="0x2", gpu_ns=1_500_000),
        rec(seq=3, t_ns=T0 + 2_500_000, tid=100, dur_ns=100_000, stream="0x2", gpu_ns=300_000),
    ]) + "\n")
    out = tmp_path / "t.json"
    report(p, "--trace", out)
    text = out.read_text()
    assert check_trace(text) == []
    doc = json.loads(text)
    assert doc["otherData"]["t0_ns"] == T0
    host = sorted((e["ts"], e["dur"], e["tid"], e["args"]["seq"]) for e in doc["traceEvents"]
                  if e["ph"] == "X" and e["cat"].startswith("host,"))
    assert host == [(0.0, 2000.0, 101, 1), (1000.0, 500.0, 100, 2), (2500.0, 100.0, 100, 3)]
    # Thread 100's seq 3 launched at 2.5 ms, after its seq 2 ended (1.4 ms).
    assert gpu_tracks(doc) == {"GPU 0 stream 0x2 (thread 100)": [(1000.0, 400.0, 2), (2500.0, 300.0, 3)],
                               "GPU 0 stream 0x2 (thread 101)": [(0.0, 1500.0, 1)]}


def test_trace_origin_includes_a_gpu_start_before_every_call(tmp_path):
    p = tmp_path / "log.jsonl"
    p.write_text(rec(seq=1, t_ns=T0, dur_ns=1000, gpu_ns=5000, gpu_t_ns=T0 - 3000) + "\n")
    out = tmp_path / "t.json"
    report(p, "--trace", out)
    doc = json.loads(out.read_text())
    assert check_trace(out.read_text()) == []
    assert doc["otherData"]["t0_ns"] == T0 - 3000
    assert gpu_tracks(doc) == {"GPU 0 stream 0x10": [(0.0, 5.0, 1)]}
    assert [(e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("cat", "").startswith("host,")] == [(3.0, 1.0)]


def test_gpu_tracks_are_per_device(tmp_path):
    # The special handles name a stream of the current context (cuda.h:
    # CU_STREAM_LEGACY, CU_STREAM_PER_THREAD; the NULL stream): "0x0" on
    # two devices is two streams; two threads on device 0's "0x0" share it.
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join([
        rec(seq=1, t_ns=T0, tid=100, device=0, stream="0x0", dur_ns=10_000, gpu_ns=2_000_000),
        rec(seq=2, t_ns=T0 + 1_000_000, tid=101, device=1, stream="0x0", dur_ns=10_000, gpu_ns=1_000_000),
        rec(seq=3, t_ns=T0 + 1_000_000, tid=102, device=0, stream="0x0", dur_ns=10_000, gpu_ns=1_000_000),
    ]) + "\n")
    out = tmp_path / "t.json"
    report(p, "--trace", out)
    assert check_trace(out.read_text()) == []
    # Device 0's stream runs in order: seq 3 after seq 1's 2 ms.
    assert gpu_tracks(json.loads(out.read_text())) == {
        "GPU 0 stream 0x0": [(0.0, 2000.0, 1), (2000.0, 1000.0, 3)],
        "GPU 1 stream 0x0": [(1000.0, 1000.0, 2)]}


def test_the_trace_checker_finds_what_the_format_forbids():
    # The checker must fail on what it exists to catch.
    ok = {"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1}
    assert check_trace(json.dumps({"traceEvents": [ok]})) == []
    assert check_trace(json.dumps([ok]))  # the array form is not what we write
    assert check_trace(json.dumps({"traceEvents": [dict(ok, dur=-1)]}))
    assert check_trace(json.dumps({"traceEvents": [dict(ok, ts=-1)]}))  # Perfetto drops it
    assert check_trace(json.dumps({"traceEvents": [{"ph": "i", "name": "a", "ts": -0.5, "pid": 1, "tid": 1}]}))
    assert check_trace(json.dumps({"traceEvents": [dict(ok, ph="Q")]}))
    assert check_trace(json.dumps({"traceEvents": [dict(ok, tid="main")]}))
    assert check_trace('{"traceEvents":[{"ph":"X","name":"a","ts":NaN,"dur":1,"pid":1,"tid":1}]}')
    assert check_trace(json.dumps({"traceEvents": [ok, dict(ok, ts=5)]}))  # overlap without nesting
    assert check_trace(json.dumps({"traceEvents": [ok, dict(ok, ts=2, dur=3)]})) == []  # nested
    assert check_trace(json.dumps({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
                                                    "args": {}}]}))


def test_plot_is_a_png(tmp_path):
    p0, p1 = known_logs(tmp_path)
    out = tmp_path / "plot.png"
    r = report(p0, p1, "--plot", out)
    assert f"plot: {out}" in r.stdout.splitlines()
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"  # PNG signature (RFC 2083, section 3.1)
    assert len(data) > 10_000


STANDIN_WARNING = ("  warning: these times come from the CPU stand-in, not a GPU: they check the machinery, "
                   "not speed")


def test_standin_times_are_never_called_gpu_times(tmp_path):
    # --standin (a log without header lines, written over the CPU stand-in):
    # its gpu_ns are the stand-in's CPU time for each call's work. The
    # report says so first and calls them stand-in times in every table;
    # the speedup is a ratio of CPU times. (A log whose header names a
    # stand-in device gets the same without the flag: test_log_header.py.)
    p0, p1 = known_logs(tmp_path)
    out = report(p0, p1, "--standin").stdout
    lines = out.splitlines()
    assert lines[:2] == ["routing log: 6 calls from 2 file(s)", STANDIN_WARNING]
    assert lines[4:7] == [
        "verdict:",
        "  stand-in time by route (gpu_ns, 5 of 6 calls): ffma 83.3% (6.000 ms), fp8 9.7% (0.700 ms), "
        "native 6.9% (0.500 ms)",
        "  stand-in time ratio, native / route (CPU emulation, not a GPU speedup; over the same calls): "
        "ffma 1.29x (2 compared calls), fp8 2.00x (1 compared call)"]
    assert lines[lines.index("calls by entry point, route, backend:") + 1].split() == [
        "api", "route", "backend", "calls", "host", "ms", "host", "us/call", "stand-in", "ms", "stand-in", "us/call"]
    assert rows(out, "route vs native, the same calls measured both ways (stand-in us per call):")[0] == [
        "ffma", "0", "6.1", "3", "2", "2100.0", "2700.0", "1.29x", "4096x4096x4096", "bf16"]
    assert "calls without stand-in time: 1 graph capture" in lines
    rest = out.replace(STANDIN_WARNING, "").replace("not a GPU speedup", "")
    assert "GPU" not in rest and "gpu ms" not in rest and "gpu us" not in rest, out
    # Without --standin (and no header naming the stand-in) nothing changes.
    assert STANDIN_WARNING not in report(p0, p1).stdout


def test_standin_plot_never_says_gpu(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.syspath_prepend(str(PYDIR))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from gemmshim import report as gemmshim_report
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to read its words
    p0, p1 = known_logs(tmp_path)
    assert gemmshim_report.main([str(p0), str(p1), "--standin", "--plot", str(tmp_path / "p.png")]) == 0
    (fig,) = [f for f in figures if getattr(f, "_suptitle", None) is not None]
    title = fig._suptitle.get_text()
    labels = [text for ax in fig.axes for text in (ax.get_title(), ax.get_xlabel(), ax.get_ylabel())]
    assert title == "gemmshim: 6 GEMM calls (times from the CPU stand-in, not a GPU)", title
    assert "stand-in us per call" in labels and "stand-in time, ms (total over the run)" in labels, labels
    assert not any("GPU" in text.replace("not a GPU", "") for text in labels), labels
    plt.close(fig)


@pytest.mark.parametrize("prefix, base_prefix, executable, hint", [
    # A virtual environment (sys.prefix is not sys.base_prefix): its own pip.
    ("/tmp/venv", "/usr", "/tmp/venv/bin/python", "in this virtual environment: /tmp/venv/bin/python -m pip install "
                                                   "matplotlib"),
    # Debian's /usr/bin/python3: its packages come from apt.
    pytest.param("/usr", "/usr", "/usr/bin/python3", "Debian: apt-get install python3-matplotlib",
                 marks=pytest.mark.skipif(not Path("/etc/debian_version").exists(), reason="not Debian")),
    # Any other interpreter: pip, for that interpreter.
    ("/opt/py", "/opt/py", "/opt/py/bin/python3", "/opt/py/bin/python3 -m pip install matplotlib"),
])
def test_plot_without_matplotlib_says_how_to_get_it(tmp_path, monkeypatch, capsys, prefix, base_prefix, executable,
                                                     hint):
    monkeypatch.syspath_prepend(str(PYDIR))
    from gemmshim import report as gemmshim_report
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    monkeypatch.setattr(sys, "prefix", prefix)
    monkeypatch.setattr(sys, "base_prefix", base_prefix)
    monkeypatch.setattr(sys, "executable", executable)
    p0, _ = known_logs(tmp_path)
    assert gemmshim_report.main([str(p0), "--plot", str(tmp_path / "p.png")]) == 1
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("FAIL")] == [
        f"FAIL --plot needs matplotlib and numpy (import of matplotlib halted; None in sys.modules); {hint}"]
    assert not (tmp_path / "p.png").exists()


def test_steps_and_expectations(tmp_path):
    p0, p1 = known_logs(tmp_path)
    steps = tmp_path / "train.out"
    steps.write_text("step 0 loss 1\n" + json.dumps({"step_start_ns": [T0, T0 + 5_000_000]}) + "\n")
    s = json.loads(report(p0, p1, "--steps", steps, "--json", "-").stdout)
    assert s["steps"] == [
        {"step": 0, "calls": 3, "by_route": {"ffma": 3}, "sites_by_route": {"ffma": 1}},
        {"step": 1, "calls": 3, "by_route": {"native": 2, "fp8": 1}, "sites_by_route": {"native": 2, "fp8": 1}},
    ]
    r = report(p0, p1, "--expect", "cublasGemmEx=ffma/sgemm", "--expect-some", "cublasLtMatmul=native", check=False)
    assert r.returncode == 1
    fails = [l for l in r.stdout.splitlines() if l.startswith("FAIL")]
    assert fails == ["FAIL --expect cublasGemmEx=ffma/sgemm: 2 of 5 calls did not; e.g. "
                     "1x route=fp8 backend=own reason='mode fp8'; "
                     "1x route=native backend=None reason='mode fp8; fp8 declined: x; ran native'"]
    r = report(p0, p1, "--expect", "cublasLtMatmul=native", "--expect-some", "cublasGemmEx=fp8/own")
    assert "expectations: all met" in r.stdout.splitlines()


def test_expect_some_recipe(tmp_path):
    # The "recipe" field of an fp8 record (docs/log.md); scripts/gpu-check.sh
    # checks that each recipe step ran its recipe.
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join([rec(seq=1, **dict(FP8, recipe="current")), rec(seq=2, **dict(FP8, recipe="current")),
                             rec(seq=3, **dict(FP8, recipe="block")), rec(seq=4)]) + "\n")
    r = report(p, "--expect-some-recipe", "block", "--expect-some-recipe", "current")
    assert "expectations: all met" in r.stdout.splitlines()
    r = report(p, "--expect-some-recipe", "mxfp8", "--expect-some-recipe", "block", check=False)
    assert r.returncode == 1
    assert [l for l in r.stdout.splitlines() if l.startswith("FAIL")] == [
        "FAIL --expect-some-recipe mxfp8: no call ran it (fp8 calls ran: 2x current)"]


def test_records_lost_notices_are_counted_not_bad(tmp_path):
    # log.c writes {"event":"records_lost",...} where a writer that fell
    # behind dropped records (docs/log.md, "What can be lost, and when").
    p = tmp_path / "log.jsonl"
    p.write_text(rec(seq=1, dur_ns=5) + "\n" +
                 '{"event":"records_lost","lost":7,"first_seq":2,"last_seq":8,"why":"x"}\n' + rec(seq=9, dur_ns=5) + "\n")
    s = json.loads(report(p, "--json", "-").stdout)
    assert s["calls"] == 2 and s["bad_lines"] == {} and s["records_lost"] == {str(p): 7}
    assert f"  {p}: the shim's log writer lost 7 record(s) (records_lost lines)" in report(p).stdout.splitlines()


def strict_json(text):
    """json.loads that takes only JSON (RFC 8259: no NaN, Infinity)."""
    def no_constant(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=no_constant)


def test_numbers_no_record_holds_are_bad_lines_and_the_output_stays_json(tmp_path):
    # 1e400 parses to infinity in Python; NaN and -Infinity are not JSON
    # (RFC 8259 section 6) though Python's parser takes them; log.c writes
    # integers of at most 64 bits. None of these lines is a record.
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join([
        rec(seq=1, dur_ns=10, gpu_ns=1000),
        rec(seq=2, dur_ns=10).replace('"dur_ns":10', '"dur_ns":10,"gpu_ns":1e400'),
        rec(seq=3, dur_ns=10).replace('"dur_ns":10', '"dur_ns":NaN'),
        rec(seq=4, t_ns=T0 + 5).replace(f'"t_ns":{T0 + 5}', '"t_ns":-Infinity'),
        rec(seq=5, dur_ns=10 ** 30),
        rec(seq=6, dur_ns=10, gpu_ns=2**64),
        rec(seq=7, dur_ns=10, gpu_ns=2**64 - 1, native_gpu_ns=1.5e19),
    ]) + "\n")
    trace, summary = tmp_path / "t.json", tmp_path / "s.json"
    out = report(p, "--trace", trace, "--json", summary).stdout
    s = strict_json(summary.read_text())
    assert s["calls"] == 2
    assert s["bad_lines"] == {str(p): {"count": 5, "first_line": 2, "why": "a number out of range (1e400)"}}
    assert f"  {p}: 5 line(s) skipped, first at line 2 (a number out of range (1e400))" in out.splitlines()
    assert check_trace(trace.read_text()) == []
    assert s["by_api_route_backend"][0]["gpu_ns"] == 1000 + 2**64 - 1
    for why, line in (("NaN is not a JSON number", 3), ("-Infinity is not a JSON number", 4),
                      ("a number out of range (dur_ns)", 5), ("a number out of range (gpu_ns)", 6)):
        only = tmp_path / f"only{line}.jsonl"
        only.write_text(p.read_text().splitlines()[line - 1] + "\n")
        assert strict_json(report(only, "--json", "-").stdout)["bad_lines"] == {
            str(only): {"count": 1, "first_line": 1, "why": why}}


def peak_rss_kib(log):
    """ru_maxrss of a process that ran the report over `log` (Linux: KiB)."""
    code = ("import resource, sys; from gemmshim import report; report.main([sys.argv[1], '--json', sys.argv[2]]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", code, str(log), str(log) + ".json"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(PYDIR)), timeout=300)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.split()[-1]), json.loads(Path(str(log) + ".json").read_text())


def test_a_line_without_end_is_read_in_bounded_memory(tmp_path):
    # A log whose disk filled (NUL bytes, no newline) or any huge line: the
    # report promises memory bounded by the shapes and sites, not the file.
    small = tmp_path / "small.jsonl"
    small.write_text(rec(seq=1, dur_ns=10) + "\n")
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.write((rec(seq=1, dur_ns=10) + "\n").encode())
        chunk = bytes(1 << 20)
        for _ in range(64):
            f.write(chunk)
    base, _ = peak_rss_kib(small)
    peak, s = peak_rss_kib(big)
    assert s["calls"] == 1
    assert s["bad_lines"] == {str(big): {"count": 1, "first_line": 2, "why": "longer than 65536 characters"}}
    # Reading the 64 MiB line whole took over 64 MiB more; chunks of 64 Ki
    # characters take well under 8 MiB.
    assert peak - base < 8 * 1024, (base, peak)


def test_long_lines_are_skipped_to_their_end(tmp_path):
    # The longest line read is 65536 characters with its newline (log.c's
    # longest record is 4 KiB); the line after a longer one is read as it is.
    def padded(seq, length):
        r = rec(seq=seq, dur_ns=10, reason="")
        return r.replace('"reason":""', '"reason":"' + "r" * (length - len(r)) + '"')
    p = tmp_path / "log.jsonl"
    lines = [padded(1, 65535), padded(2, 65536), "x" * 200_000, padded(4, 400)]
    assert [len(line) for line in lines] == [65535, 65536, 200_000, 400]
    p.write_text("\n".join(lines) + "\n")
    s = strict_json(report(p, "--json", "-").stdout)
    assert s["calls"] == 2
    assert s["bad_lines"] == {str(p): {"count": 2, "first_line": 2, "why": "longer than 65536 characters"}}
    assert [d["calls"] for d in s["by_route_reason"]] == [1, 1]


# ---- lines that are no routing record (the report never crashes on one) ----
# Two good records around each bad line: the bad one is counted with its
# line number, and the summary is exactly the two good records'.
GOOD = [rec(seq=1, dur_ns=10_000, gpu_ns=1_000_000), rec(seq=3, t_ns=T0 + 1_000_000, dur_ns=30_000, gpu_ns=3_000_000)]
GOOD_ROWS = [["cublasGemmEx", "ffma", "sgemm", "2", "0.040", "20.0", "4.000", "2000.0"]]


def typed(**kw):
    """A record with fields replaced by raw JSON text: rec() with
    typed(m='"x"') gives "m":"x"."""
    r = json.loads(rec(seq=2))
    r.update({k: json.loads(v) for k, v in kw.items()})
    return json.dumps(r, separators=(",", ":"))


BAD_LINES = {
    # json recurses once per '[' and raises RecursionError (not ValueError)
    # long before the line limit (65536).
    "nested": ("[" * 60_000, "not JSON (nested too deep)"),
    "nested objects": ('{"a":' * 10_000, "not JSON (nested too deep)"),
    "status_name null": (typed(status_name="null"), "not a routing record (status_name is null, not a string)"),
    "status_name number": (typed(status_name="0"), "not a routing record (status_name is a number, not a string)"),
    "m string": (typed(m='"4096"'), "not a routing record (m is a string, not an integer)"),
    "k float": (typed(k="4096.0"), "not a routing record (k is a number, not an integer)"),
    "batch bool": (typed(batch="true"), "not a routing record (batch is true or false, not an integer)"),
    "dur_ns string": (typed(dur_ns='"10"'), "not a routing record (dur_ns is a string, not a number)"),
    "gpu_ns list": (typed(gpu_ns="[1]"), "not a routing record (gpu_ns is an array, not a number)"),
    "native_gpu_ns object": (typed(gpu_ns="1", native_gpu_ns='{"a":1}'),
                             "not a routing record (native_gpu_ns is an object, not a number)"),
    "t_ns bool": (typed(t_ns="false"), "not a routing record (t_ns is true or false, not a number)"),
    "backend number": (typed(backend="3"), "not a routing record (backend is a number, not a string)"),
    "reason null": (typed(reason="null"), "not a routing record (reason is null, not a string)"),
    "decided list": (typed(decided='["ffma"]'), "not a routing record (decided is an array, not a string)"),
    "site number": (typed(site="170"), "not a routing record (site is a number, not a string)"),
    "device string": (typed(device='"0"'), "not a routing record (device is a string, not an integer)"),
    "sm number": (typed(sm="6.1"), "not a routing record (sm is a number, not a string)"),
    "stream number": (typed(stream="16"), "not a routing record (stream is a number, not a string)"),
    "tid null": (typed(tid="null"), "not a routing record (tid is null, not an integer)"),
    "a_type null": (typed(a_type="null"), "not a routing record (a_type is null, not a string)"),
    "gpu_skipped number": (typed(gpu_skipped="1"), "not a routing record (gpu_skipped is a number, not a string)"),
    "api number": (typed(api="1"), "not a routing record (no api or route)"),
    "route null": (typed(route="null"), "not a routing record (no api or route)"),
    "lone surrogate": (typed(reason='"\\ud800"'), "not a routing record (reason is not Unicode text (a lone surrogate))"),
    "array": ("[]", "not a routing record (not a JSON object)"),
    "number": ("3", "not a routing record (not a JSON object)"),
    "string": ('"cublasGemmEx"', "not a routing record (not a JSON object)"),
    "null": ("null", "not a routing record (not a JSON object)"),
}


@pytest.mark.parametrize("name", BAD_LINES)
def test_a_bad_line_is_counted_and_the_rest_summarised(tmp_path, name):
    line, why = BAD_LINES[name]
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join([GOOD[0], line, GOOD[1]]) + "\n")
    s = strict_json(report(p, "--json", "-").stdout)
    assert s["calls"] == 2
    assert s["bad_lines"] == {str(p): {"count": 1, "first_line": 2, "why": why}}
    assert [(d["calls"], d["host_ns"], d["gpu_calls"], d["gpu_ns"]) for d in s["by_api_route_backend"]] == [
        (2, 40_000, 2, 4_000_000)]
    assert s["statuses"] == {"CUBLAS_STATUS_SUCCESS": 2}
    out = report(p).stdout
    assert out.splitlines()[:2] == ["routing log: 2 calls from 1 file(s)",
                                    f"  {p}: 1 line(s) skipped, first at line 2 ({why})"]
    assert rows(out, "calls by entry point, route, backend:") == GOOD_ROWS


def test_every_kind_of_bad_line_in_one_log(tmp_path):
    """All of them in one log, with --trace and --plot too (each reads every
    record): counted, the first one's line number given, nothing else
    tallied or drawn."""
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join([GOOD[0], *(line for line, _ in BAD_LINES.values()), GOOD[1]]) + "\n")
    trace, plot = tmp_path / "t.json", tmp_path / "p.png"
    out = report(p, "--trace", trace, "--plot", plot).stdout
    assert out.splitlines()[:2] == ["routing log: 2 calls from 1 file(s)",
                                    f"  {p}: {len(BAD_LINES)} line(s) skipped, first at line 2 (not JSON (nested too deep))"]
    assert rows(out, "calls by entry point, route, backend:") == GOOD_ROWS
    assert check_trace(trace.read_text()) == []
    assert [e["args"]["seq"] for e in json.loads(trace.read_text())["traceEvents"]
            if e.get("cat", "").startswith("host,")] == [1, 3]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_null_backend_and_sm_are_none(tmp_path):
    # log.c omits a missing backend and writes "sm":null for an unknown GPU:
    # null backend reads as no backend, and neither is a bad line.
    p = tmp_path / "log.jsonl"
    p.write_text(typed(backend="null", sm="null", dur_ns="7") + "\n")
    s = strict_json(report(p, "--json", "-").stdout)
    assert s["bad_lines"] == {} and s["calls"] == 1
    assert s["by_api_route_backend"][0]["backend"] is None


def test_many_routes_plot(tmp_path):
    # The plot keeps each call's route as an index: more routes than a byte
    # holds (hostile, or a future log) still draw.
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join(rec(seq=i, t_ns=T0 + i, route=f"r{i}", dur_ns=100 + i) for i in range(300)) + "\n")
    out = tmp_path / "p.png"
    r = report(p, "--plot", out)
    assert f"plot: {out}" in r.stdout.splitlines()


def test_a_log_name_that_is_not_utf8(tmp_path):
    # Python holds the name's bytes as surrogates; a UTF-8 locale's stdout
    # is strict (PYTHONIOENCODING here): the name is printed as its bytes.
    p0, _ = known_logs(tmp_path)
    name = os.fsencode(tmp_path) + b"/gs-\xff.jsonl"
    os.rename(p0, name)
    env = dict(os.environ, PYTHONPATH=str(PYDIR), PYTHONIOENCODING="utf-8:strict")
    r = subprocess.run([*REPORT, name], env=env, capture_output=True, timeout=300)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert r.stdout.splitlines()[1] == b"  " + name + b": 1 line(s) skipped, first at line 4 (not JSON)"


def test_steps_and_counts_files_with_bad_lines(tmp_path):
    p0, p1 = known_logs(tmp_path)
    steps = tmp_path / "train.out"
    steps.write_text("\n".join([json.dumps({"step_start_ns": [T0, T0 + 5_000_000]}),
                                '{"step_start_ns": ' + "[" * 60_000, '{"step_start_ns": 5}',
                                '{"step_start_ns": ["a"]}', '{"step_start_ns": null}']) + "\n")
    s = json.loads(report(p0, p1, "--steps", steps, "--json", "-").stdout)
    assert [st["calls"] for st in s["steps"]] == [3, 3]
    counts = tmp_path / "bench.jsonl"
    counts.write_text('["kind":"calls"]\n' + '{"kind":"calls","x":' + "[" * 60_000 + "\n"
                      + json.dumps({"kind": "calls", "cublasGemmEx": 5, "cublasLtMatmul": 1}) + "\n")
    r = report(p0, p1, "--expect-counts", counts, check=False)
    assert r.returncode == 1
    assert [line for line in r.stdout.splitlines() if line.startswith("FAIL")] == [
        f"FAIL {counts}: line 1 is not a {{\"kind\":\"calls\"}} record",
        f"FAIL {counts}: line 2 is not a {{\"kind\":\"calls\"}} record"]


NO_LOG = ("gemmshim report: a run that made no cuBLAS call (a CPU-only framework, or a GEMM-free program) "
          "writes no log; check GEMMSHIM_LOG's path and its %p/%r placeholders")


def test_missing_log_and_bad_arguments_are_one_message(tmp_path):
    r = report(tmp_path / "nope.jsonl", check=False)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"gemmshim report: no such file: {tmp_path / 'nope.jsonl'}", NO_LOG]
    assert r.stdout == ""  # no empty tables when no log could be read
    # A pattern that matched nothing, and a missing file among readable ones:
    # the others are summarised, the exit status is still 2.
    p0, p1 = known_logs(tmp_path)
    r = report(tmp_path / "gs-*.json", p0, tmp_path / "gs-rank9.jsonl", check=False)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"gemmshim report: no file matches {tmp_path / 'gs-*.json'}",
                                     f"gemmshim report: no such file: {tmp_path / 'gs-rank9.jsonl'}", NO_LOG]
    assert r.stdout.splitlines()[0] == "routing log: 5 calls from 3 file(s)"
    r = report(tmp_path / "nope.jsonl", "--top", "0", check=False)
    assert r.returncode == 2 and "--top: expected a positive number of rows, got 0" in r.stderr


def test_summarize_log_script_is_the_report(tmp_path):
    p0, p1 = known_logs(tmp_path)
    script = subprocess.run([sys.executable, str(harness.ROOT / "scripts" / "summarize_log.py"), p0, p1],
                            capture_output=True, text=True, timeout=120)
    assert script.returncode == 0, script.stderr
    assert script.stdout == report(p0, p1).stdout


def test_report_of_a_log_the_shim_wrote(tmp_path, shim, standin, clients):
    """The keys the report reads are the ones log.c writes: a run of the
    ffma route on the stand-in (sm_61), checked call for call."""
    log = tmp_path / "gs-%p.jsonl"
    r = harness.run_ok(harness.client_argv("linked", 13, "--api=cublasGemmEx,cublasLtMatmul", "--type=bf16",
                                           "--invalid=0"),
                       standin[13], shim=True,
                       env={"GEMMSHIM_LOG": str(log), "STANDIN_CC": "6.1", "GEMMSHIM_GATE": "off"})
    path = tmp_path / f"gs-{r.pid}.jsonl"
    records = harness.read_log(path)
    assert len(records) == len(r.calls) > 0
    s = json.loads(report(path, "--json", "-").stdout)
    assert s["calls"] == len(records)
    assert s["bad_lines"] == {}
    want = {}
    for x in records:
        key = (x["api"], x["route"], x.get("backend"))
        calls, host = want.get(key, (0, 0))
        want[key] = (calls + 1, host + x["dur_ns"])
    got = {(d["api"], d["route"], d["backend"]): (d["calls"], d["host_ns"]) for d in s["by_api_route_backend"]}
    assert got == want
    assert any(route == "ffma" for _, route, _ in got)
    assert s["time_sorted_by"] == "host_ns"
