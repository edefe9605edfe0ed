"""Many threads, each with its own handle and stream, calling different
entry points with different shapes at once, under the shim."""

from collections import Counter

import pytest

from harness import client_argv, read_log, run_ok, stable_lines

THREADS, ITERS = 16, 8


def call_key(c):
    return (c["api"], int(c["m"]), int(c["n"]), int(c["k"]), int(c["batch"]), c["transa"], c["transb"],
            c["a"], c["c"], int(c["lda"]), int(c["ldb"]), int(c["ldc"]))


def record_key(r):
    return (r["api"], r["m"], r["n"], r["k"], r["batch"], r["transa"], r["transb"], r["a_type"], r["c_type"],
            r["lda"], r["ldb"], r["ldc"])


@pytest.mark.parametrize("pattern,cuda,cc", [("linked", 12, "9.0"), ("xla", 13, "9.0"), ("framework", 12, "6.1")])
def test_threads_under_the_shim(shim, standin, tmp_path, pattern, cuda, cc):
    argv = client_argv(pattern, cuda, f"--threads={THREADS}", f"--iters={ITERS}")
    env = {"STANDIN_CC": cc}
    base = run_ok(argv, standin[cuda], env=env)
    log = tmp_path / "gemms.jsonl"
    r = run_ok(argv, standin[cuda], shim=True, env={**env, "GEMMSHIM_LOG": str(log)})
    calls = r.calls
    assert len(calls) == THREADS * ITERS
    assert all(c["ok"] == "1" and c["status"] == "0" for c in calls), r.describe()
    # Small GEMMs run native on either device: the same bytes as without.
    assert stable_lines(r) == stable_lines(base)
    recs = read_log(log)
    assert len(recs) == THREADS * ITERS
    assert len({x["seq"] for x in recs}) == len(recs)
    assert all(x["status"] == 0 and x["sm"] == cc for x in recs)
    by_tid = {}
    for x in recs:
        by_tid.setdefault(x["tid"], []).append(x)
    assert len(by_tid) == THREADS
    for mine in by_tid.values():
        assert len(mine) == ITERS
        # Each thread's records in its call order, all on its own stream (a
        # finished thread's stream address may be reused by a later one).
        assert [x["seq"] for x in mine] == sorted(x["seq"] for x in mine)
        assert len({x["stream"] for x in mine}) == 1 and mine[0]["stream"] != "0x0", mine
    assert Counter(map(record_key, recs)) == Counter(map(call_key, calls))


def test_threads_on_the_ffma_route(shim, standin, tmp_path):
    """Concurrent ffma calls (transient buffers, cast kernels on each
    caller's stream) all produce checked results."""
    log = tmp_path / "gemms.jsonl"
    r = run_ok(client_argv("linked", 13, f"--threads={THREADS}", f"--iters={ITERS}", "--type=bf16"), standin[13],
               shim=True, env={"STANDIN_CC": "6.1", "GEMMSHIM_GATE": "off", "GEMMSHIM_LOG": str(log)})
    assert all(c["ok"] == "1" for c in r.calls), r.describe()
    recs = read_log(log)
    assert len(recs) == THREADS * ITERS
    assert sum(x["route"] == "ffma" for x in recs) > THREADS * ITERS // 2
    by_key = Counter(map(record_key, recs))
    assert by_key == Counter(map(call_key, r.calls))
    for x in recs:
        assert x["decided"] == "ffma", x
