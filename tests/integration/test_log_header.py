"""The routing log's header line (docs/log-format.md): one per process, at
its first write, before its records, naming the process, its options and
the devices the driver reports; and the report's use of it (runs appended
to one file told apart, the CPU stand-in's times called what they are).
The stand-in names its devices as cuDeviceGetName would a GPU's:
"Standin GPU sm_XY" (tests/standin/driver_init.c)."""

import json
import os
import subprocess
import sys

import pytest

from harness import CLIENT_DIR, PRELOAD_PREFIX, ROOT, read_log_lines, require_built, run

UNDER_ASAN = any("asan" in p for p in PRELOAD_PREFIX)  # no fork tests under ASan (test_processes.py says why)
UNDER_TSAN = any("tsan" in p for p in PRELOAD_PREFIX)
NO_FLUSHER = {"GEMMSHIM_FAULT": "pthread_create:1+"} if UNDER_TSAN else {}
PYDIR = ROOT / "python"
HEADER_KEYS = ["header", "pid", "t_ns", "host", "rank", "command", "options", "devices"]


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "proc_client_cu13"
    require_built([path])
    return path


def run_client(client, standin, args, env):
    return run([client, *args], standin[13], shim=True, env={**NO_FLUSHER, "STANDIN_CC": "9.0", **env}, timeout=60)


def test_each_run_appended_starts_with_its_header(client, standin, tmp_path):
    log = tmp_path / "gs.jsonl"
    pids = []
    for rank in ("0", "3"):
        r = run_client(client, standin, ["--calls=2"], {"GEMMSHIM_LOG": str(log), "GEMMSHIM_MODE": "native",
                                                        "RANK": rank})
        assert r.returncode == 0, r.describe()
        pids.append(r.pid)
    lines = read_log_lines(log)
    assert ["header" in l for l in lines] == [True, False, False, True, False, False], lines
    for h, pid, rank in zip((lines[0], lines[3]), pids, ("0", "3")):
        assert list(h) == HEADER_KEYS, h
        assert (h["pid"], h["rank"]) == (pid, rank), h
        assert h["header"].startswith("gemmshim "), h
        assert h["command"].startswith(f"{client} --calls=2"), h
        assert h["devices"] == [{"device": 0, "name": "Standin GPU sm_90", "sm": "9.0"}], h
        assert h["options"]["GEMMSHIM_MODE"] == "native" and h["options"]["GEMMSHIM_LOG"] == str(log), h
        assert len(json.dumps(h, separators=(",", ":"))) < 4096
    assert [l["seq"] for l in lines if "seq" in l] == [1, 2, 1, 2]


@pytest.mark.skipif(UNDER_ASAN, reason="fork tests do not run under ASan (test_processes.py)")
def test_a_forked_child_writes_its_own_header(client, standin, tmp_path):
    log = tmp_path / "gs.jsonl"
    r = run_client(client, standin, ["--calls=4", "--fork-at=2"], {"GEMMSHIM_LOG": str(log), "GEMMSHIM_MODE": "native"})
    assert r.returncode == 0, r.describe()
    lines = read_log_lines(log)
    headers = [l for l in lines if "header" in l]
    assert len(headers) == 2 and headers[0]["pid"] != headers[1]["pid"], lines
    assert "header" in lines[0] and r.pid in {h["pid"] for h in headers}, lines
    assert [l["seq"] for l in lines if "seq" in l and l["seq"] > 2] != [], lines


def test_header_without_a_driver_answer_keeps_the_records(client, standin, tmp_path):
    # A failing cuDeviceGetCount leaves the devices out, never the records.
    log = tmp_path / "gs.jsonl"
    r = run_client(client, standin, ["--calls=2"], {"GEMMSHIM_LOG": str(log), "GEMMSHIM_MODE": "native",
                                                    "GEMMSHIM_FAULT": "cuDeviceGetCount:1+"})
    assert r.returncode == 0, r.describe()
    lines = read_log_lines(log)
    assert lines[0]["devices"] == [] and [l["seq"] for l in lines[1:]] == [1, 2], lines


def report(*args):
    env = dict(os.environ, PYTHONPATH=str(PYDIR))
    p = subprocess.run([sys.executable, "-m", "gemmshim.report", *map(str, args)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p
    return p.stdout


def test_report_tells_runs_and_the_stand_in_apart(client, standin, tmp_path):
    log = tmp_path / "gs.jsonl"
    pids = []
    for rank in ("0", "1"):
        r = run_client(client, standin, ["--calls=2"], {"GEMMSHIM_LOG": str(log), "GEMMSHIM_MODE": "native",
                                                        "RANK": rank})
        assert r.returncode == 0, r.describe()
        pids.append(r.pid)
    out = report(log).splitlines()
    assert out[0] == "routing log: 4 calls from 1 file(s)", out
    assert out[1] == ("  warning: these times come from the CPU stand-in (Standin GPU sm_90), not a GPU: they check "
                      "the machinery, not speed"), out
    assert out[2] == (f"  {log}: records of 2 processes (pid {pids[0]}, {pids[1]}): appended runs, or processes "
                      "sharing the file; the tables pool them"), out
    assert "processes (the shim's header line of each):" in out, out
    s = json.loads(subprocess.run([sys.executable, "-m", "gemmshim.report", str(log), "--json", "-"],
                                  env=dict(os.environ, PYTHONPATH=str(PYDIR)), capture_output=True,
                                  text=True).stdout)
    assert [(p["pid"], p["rank"]) for p in s["processes"]] == [(pids[0], "0"), (pids[1], "1")]
    assert s.get("bad_lines") == {}, s["bad_lines"]  # headers are not bad lines
