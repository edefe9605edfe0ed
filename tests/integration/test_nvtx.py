"""NVTX ranges (shim/nvtx.c), seen by an NVTX tool of our own
(nvtx_inject.c) loaded as Nsight Systems is, through NVTX_INJECTION64_PATH
(NVTX v3 headers, nvtxDetail/nvtxInit.h). The tool and the stand-in
(STANDIN_TRACE: every kernel launch and GEMM) append to one file, so the
order of ranges and device work is the order they happened in."""

import re
import sys

import pytest

import harness

sys.path.insert(0, str(harness.ROOT / "python"))
from gemmshim.report.read import shape_of  # noqa: E402

INJECT = harness.CLIENT_DIR / "libnvtx_inject.so"
ROUTES = ("native", "ffma", "fp8", "fp16")  # gs_route order: category = index + 1


def run_with_tool(tmp_path, standin, env, *args, tool=True, fp8=False):
    rec = tmp_path / "events.txt"
    log = tmp_path / "gs.jsonl"
    full = {"GEMMSHIM_LOG": str(log), "NVTX_TEST_RECORD": str(rec), "STANDIN_TRACE": str(rec), **env}
    if tool:
        harness.require_built([INJECT])
        full["NVTX_INJECTION64_PATH"] = str(INJECT)
    r = harness.run(harness.client_argv("linked", 13, "--invalid=0", *args), standin[13], shim=True, env=full)
    # fp8 results miss the suite's bf16 tolerances (exit 1, every call
    # still made); anything else must pass.
    assert r.returncode in ((0, 1) if fp8 else (0,)), r.describe()
    events = [line.split(" ", 2) for line in rec.read_text().splitlines()] if rec.exists() else []
    return r, harness.read_log(log), events


def ranges(events):
    """Per thread: (name, category, payload, [device work inside]) for each
    range, checking on the way that pushes and pops pair up, that ranges do
    not nest (one per call), and noting work outside any range."""
    open_by_tid, out, outside = {}, [], []
    for tid, kind, rest in ((e[0], e[1], e[2] if len(e) > 2 else "") for e in events):
        if kind == "push":
            dom, cat, payload, name = rest.split(" ", 3)
            assert tid not in open_by_tid, f"range {name!r} opened inside {open_by_tid[tid][0]!r}"
            open_by_tid[tid] = (name, int(cat), int(payload), [], int(dom))
        elif kind == "pop":
            assert tid in open_by_tid, "pop without a push"
            assert int(rest) == open_by_tid[tid][4], "popped another domain"
            out.append(open_by_tid.pop(tid)[:4])
        elif kind in ("launch", "gemm"):
            if tid in open_by_tid:
                open_by_tid[tid][3].append(f"{kind} {rest}")
            else:
                outside.append(f"{kind} {rest}")
    assert not open_by_tid, f"ranges never closed: {open_by_tid}"
    return out, outside


def expected_name(rec):
    return f"gemmshim {rec['route']} {shape_of(rec)} ({rec['api']})"


def test_one_range_per_call_named_by_route_around_its_work(tmp_path, shim, standin):
    r, log, events = run_with_tool(tmp_path, standin, {"STANDIN_CC": "6.1", "GEMMSHIM_GATE": "off"},
                                   "--api=cublasGemmEx,cublasLtMatmul", "--type=bf16")
    assert events[0][1:] == ["init"]
    # The domain and one named category per route, before any range.
    assert [e[1:] for e in events[1:6]] == [["domain", "1 gemmshim"], ["category", "1 1 native"],
                                            ["category", "1 2 ffma"], ["category", "1 3 fp8"],
                                            ["category", "1 4 fp16"]]
    got, outside = ranges(events)
    assert outside == []  # every launch and GEMM ran inside some call's range
    assert len(got) == len(log) == len(r.calls)
    # The name's form, spelled out once: route, MxNxK, types, entry point.
    assert got[0][0] == "gemmshim ffma 33x17x29 bf16 (cublasGemmEx)"
    for (name, cat, payload, work), rec in zip(got, log):
        assert name == expected_name(rec)
        assert ROUTES[cat - 1] == rec["route"]
        assert payload == rec["seq"]
        if rec["route"] == "ffma":
            # widen A and B (and C when beta != 0), the fp32 GEMM, then the
            # narrowing of a bf16 output (shim/routes/ffma.c): all inside.
            assert [w.split()[0] for w in work].count("gemm") == 1, work
            assert work[0].startswith("launch gs_widen_"), work
            gemm_at = next(i for i, w in enumerate(work) if w.startswith("gemm"))
            assert all(w.startswith("launch gs_widen_") for w in work[:gemm_at]), work
            if rec["c_type"] == "bf16":
                assert work[gemm_at + 1:] == ["launch gs_narrow_bf16"], work
    assert {rec["route"] for rec in log} == {"ffma", "native"}


def test_a_declined_route_names_the_route_that_ran(tmp_path, shim, standin):
    # The cost-model gate keeps these small GEMMs native:
    # decided ffma, declined before any work, ran native.
    _, log, events = run_with_tool(tmp_path, standin, {"STANDIN_CC": "6.1"}, "--api=cublasGemmEx", "--type=bf16")
    got, outside = ranges(events)
    assert outside == []
    declined = [(g, rec) for g, rec in zip(got, log) if rec["decided"] == "ffma"]
    assert declined and all(rec["route"] == "native" for _, rec in declined)
    for (name, cat, _, work), rec in declined:
        assert name.startswith("gemmshim native ") and cat == 1
        assert all(w.startswith("gemm ") for w in work)


def test_fp8_ranges_hold_the_quantize_kernels(tmp_path, shim, standin):
    # 6.1: the own fp8 kernel, whose launch the range holds too (on 9.0 the
    # client's shapes, unaligned for cuBLASLt's fp8 GEMM, run native).
    _, log, events = run_with_tool(tmp_path, standin, {"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "fp8"},
                                   "--api=cublasGemmEx", "--type=bf16", fp8=True)
    got, outside = ranges(events)
    assert outside == []
    fp8 = [(g, rec) for g, rec in zip(got, log) if rec["route"] == "fp8"]
    assert fp8
    for (name, cat, _, work), rec in fp8:
        assert name == expected_name(rec) and cat == 3
        # The current recipe's amax pass and quantize kernel (plain: the
        # call is not compared), each one launch for A and B, then the fp8
        # GEMM (shim/routes/fp8.c, kernels/fp8_launch.c; the own backend on
        # 6.1), kernel names less their element type.
        kinds = [re.sub(r"_(bf16|f16|f32)(_sm\d+)?$", "", w) for w in work]
        assert kinds == ["launch gs_fp8_amax_part", "launch gs_fp8_quantize_cur", "launch gs_fp8_gemm"], work


def test_threads_each_get_their_own_ranges(tmp_path, shim, standin):
    _, log, events = run_with_tool(tmp_path, standin, {"STANDIN_CC": "6.1", "GEMMSHIM_GATE": "off"},
                                   "--api=cublasGemmEx", "--type=bf16", "--threads=4", "--iters=3")
    got, outside = ranges(events)  # checks pairing and nesting per thread
    assert outside == []
    assert len(got) == len(log)
    assert sorted(g[2] for g in got) == sorted(rec["seq"] for rec in log)
    by_seq = {rec["seq"]: rec for rec in log}
    assert all(g[0] == expected_name(by_seq[g[2]]) for g in got)


def test_without_a_tool_the_shim_makes_no_nvtx_call(tmp_path, shim, standin):
    # Without NVTX_INJECTION64_PATH no tool is loaded, and the record file,
    # which the tool writes first thing, holds only the stand-in's work.
    _, log, events = run_with_tool(tmp_path, standin, {"STANDIN_CC": "6.1", "GEMMSHIM_GATE": "off"},
                                   "--api=cublasGemmEx", "--type=bf16", tool=False)
    assert log
    assert events and {e[1] for e in events} == {"launch", "gemm"}
