"""The ends of a process's life, under the preloaded shim, over the CPU
stand-in, each with a bound on its time: exit() while 16 threads make
GEMMs on every kind of stream, signals mid-run, a program that closes
every descriptor, and the shim preloaded into programs that never touch
CUDA (checked with strace -f)."""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import harness

CLIENT = harness.CLIENT_DIR / "lifecycle_client_cu13"
# The ffma route on a 6.1 device: the kernels and their per-context state
# are in play, not only the forwarding path.
FFMA = {"STANDIN_CC": "6.1", "GEMMSHIM_GATE": "off"}
# The routing log's flusher writes at least once a second (shim/log.c,
# FLUSH_INTERVAL_NS): what a kill can lose is the records of the last
# second. The margin covers scheduling on a loaded machine.
FLUSH_INTERVAL_S = 1.0
MARGIN_S = 1.0


@pytest.fixture(scope="module")
def client():
    harness.require_built([CLIENT, harness.SHIM, harness.STANDIN[13] / "libcuda.so.1"])
    return CLIENT


def whole_lines(path, killed=False):
    """The log's records; the file must hold whole JSON lines only. With
    killed (the process died by a signal), the last line may be cut: Linux
    stops a write(2) to a regular file between pages once a fatal signal is
    pending and returns what it wrote (mm/filemap.c, generic_perform_write),
    so the write in flight can end mid-record. Only the last line: the
    process is gone, and the next write finds the signal pending before its
    first page."""
    text = Path(path).read_text() if Path(path).exists() else ""
    if killed and text and not text.endswith("\n"):
        cut = text.rfind("\n") + 1
        assert text[cut:].startswith('{"'), f"partial last line is not the start of a record: {text[cut:][:200]!r}"
        text = text[:cut]
    assert text == "" or text.endswith("\n"), f"partial last line: {text[-200:]!r}"
    # Each process's header line (docs/log-format.md) is not a record.
    return [r for r in (json.loads(line) for line in text.splitlines()) if "header" not in r]


def assert_quiet(stderr, may_lose=False):
    """Nothing from the stand-in (where a GPU would fault) or the shim, but
    (may_lose) the one warning at exit that counts the records dropped
    (docs/log.md, "What can be lost, and when"). Returns that count."""
    assert "standin:" not in stderr, stderr
    lines = [l for l in stderr.splitlines() if "gemmshim " in l]
    if not lines:
        return 0
    m = re.search(r"WARN GEMMSHIM_LOG: (\d+) records? lost because the log writer fell behind", lines[0])
    assert may_lose and len(lines) == 1 and m, stderr
    return int(m.group(1))


def split_log(recs):
    """Call records, and the seq numbers the log says it lost: a writer that
    fell behind drops records and writes {"event":"records_lost","lost":N,
    "first_seq":A,"last_seq":B} in their place (docs/log.md)."""
    calls = [x for x in recs if "event" not in x]
    lost, total = set(), 0
    for x in recs:
        if "event" in x:
            assert x["event"] == "records_lost" and x["lost"] >= 1, x
            assert x["last_seq"] - x["first_seq"] + 1 >= x["lost"], x
            lost |= set(range(x["first_seq"], x["last_seq"] + 1))
            total += x["lost"]
    return calls, lost, total


# ---- exit() while 16 threads make GEMMs ----------------------------------------------------
@pytest.mark.parametrize("wait", ["0", "1"])
@pytest.mark.parametrize("stream", ["own", "shared", "legacy", "per-thread"])
def test_exit_under_busy_threads(client, tmp_path, stream, wait):
    """exit() runs the shim's shutdown while every other thread is inside a
    GEMM: it returns 0 within the time bound, and every call that returned
    before exit() was called is in the log, in whole lines, or (without
    GEMMSHIM_LOG_WAIT=1, when the writer fell behind) counted as lost where
    it would have been and in the one warning at exit."""
    log = tmp_path / "log.jsonl"
    start = time.monotonic()
    r = harness.run([client, "--mode=exit", "--threads=16", f"--stream={stream}"], harness.STANDIN[13],
                    shim=True, env={**FFMA, "GEMMSHIM_LOG": str(log), "GEMMSHIM_LOG_WAIT": wait}, timeout=60)
    took = time.monotonic() - start
    assert r.returncode == 0, r.describe()
    made = int(re.search(r"^exiting calls=(\d+)$", r.stdout, re.M).group(1))
    # exit_group(2) ends every other thread as a fatal signal does, so a
    # record a busy thread was writing when the process ended can be cut
    # there as by a signal (whole_lines, killed): the last line only.
    lines = whole_lines(log, killed=True)
    recs, lost, lost_noted = split_log(lines)
    # The exit warning counts every record dropped: those noted in the log,
    # and those that missed the last write at exit.
    warned = assert_quiet(r.stderr, may_lose=wait == "0")
    assert warned >= lost_noted
    assert len(recs) + warned >= made >= 32, (len(recs), warned, made)
    # A call has its number from its start: besides those lost, the ones in
    # flight when the process ended (one per thread at most) are the only
    # ones missing.
    seqs = sorted(x["seq"] for x in recs)
    assert len(set(seqs)) == len(seqs)
    # docs/log-format.md: A and B of a records_lost line are the smallest and
    # largest seq among its lost records; records of other threads whose seqs
    # fall between them may have been written.
    present = set(seqs)
    for ev in (x for x in lines if x.get("event") == "records_lost"):
        a, b = ev["first_seq"], ev["last_seq"]
        assert a not in present and b not in present, ev
        assert len(present & set(range(a, b + 1))) <= b - a + 1 - ev["lost"], ev
    missing = set(range(1, seqs[-1] + 1)) - set(seqs) - lost
    assert len(missing) <= 16 + warned - lost_noted, (sorted(missing), warned, lost_noted)
    assert {x["status"] for x in recs} == {0}
    assert {x["route"] for x in recs} == {"ffma"}, {x["reason"] for x in recs}
    assert took < 30, f"exit took {took:.1f}s"


# ---- signals ---------------------------------------------------------------------------
def run_until_signal(client, tmp_path, sig, extra_args=(), run_s=3.0, extra_env=None):
    log = tmp_path / "log.jsonl"
    env = harness.child_env(harness.STANDIN[13], True, {**FFMA, "GEMMSHIM_LOG": str(log), **(extra_env or {})})
    p = subprocess.Popen([str(client), "--mode=loop", *extra_args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    calls = {}  # call index -> CLOCK_REALTIME at its start
    # Every read below waits on the process: one that stops writing, or that
    # the signal does not end, is killed 30 s after it should have ended, so
    # the test fails instead of hanging. (communicate() cannot take over
    # after readline(): it reads the descriptors afresh and would drop what
    # readline() has buffered.)
    fired = threading.Event()

    def kill():
        fired.set()
        p.kill()

    watchdog = threading.Timer(run_s + 30, kill)
    watchdog.start()

    def take(line):
        words = line.split()
        if words[:1] == ["call"] and len(words) == 3:
            calls[int(words[1])] = int(words[2])

    try:
        start = time.monotonic()
        while time.monotonic() - start < run_s:
            line = p.stdout.readline()
            if not line:
                break
            take(line)
        sent_ns = time.time_ns()
        p.send_signal(sig)
        out = p.stdout.read()
        err = p.stderr.read()
        p.wait()
    finally:
        watchdog.cancel()
    if fired.is_set():
        raise AssertionError(f"the process did not end within 30 s of signal {sig}")
    for line in out.splitlines():
        take(line)
    return p.returncode, out, err, calls, sent_ns, whole_lines(log, killed=p.returncode < 0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_killed_mid_run(client, tmp_path, sig):
    """A signal that kills the process runs none of the shim's shutdown: the
    log keeps what was written, in order, in whole lines but for the write
    the kernel cut (its last line), and loses at most the records of the
    last flush interval."""
    rc, out, err, calls, sent_ns, recs = run_until_signal(client, tmp_path, sig)
    assert rc == -sig, (rc, err)
    assert len(calls) >= 20 and sorted(calls) == list(range(len(calls)))
    recs, lost, lost_total = split_log(recs)
    # In order, with no hole but what the log says it lost.
    seqs = [x["seq"] for x in recs]
    assert seqs == sorted(seqs) and set(range(1, len(recs) + lost_total + 1)) == set(seqs) | lost, seqs[-5:]
    assert len(recs) <= len(calls) + 1  # the call in flight may have been recorded
    bound_ns = sent_ns - int((FLUSH_INTERVAL_S + MARGIN_S) * 1e9)
    old = [i for i, t in calls.items() if t < bound_ns]
    assert old, "no call older than the bound: the run was too short"
    assert len(recs) + lost_total >= len(old), (len(recs), len(old), len(calls))
    for rec in recs:
        if rec["seq"] - 1 in calls:
            assert rec["t_ns"] >= calls[rec["seq"] - 1], rec


def test_sigint_handled_loses_nothing(client, tmp_path):
    """A program that handles SIGINT and returns from main (as Python's
    KeyboardInterrupt does) runs the shim's shutdown: with
    GEMMSHIM_LOG_WAIT=1, every call is logged."""
    rc, out, err, calls, sent_ns, recs = run_until_signal(client, tmp_path, signal.SIGINT, ["--sigint-exit"],
                                                          run_s=1.0, extra_env={"GEMMSHIM_LOG_WAIT": "1"})
    assert rc == 0, err
    assert_quiet(err)
    made = int(re.search(r"^stopped calls=(\d+)$", out, re.M).group(1))
    assert made == len(calls) and len(recs) == made, (made, len(calls), len(recs))
    assert [x["seq"] for x in recs] == list(range(1, made + 1))


# ---- preloaded into programs that never touch CUDA -----------------------------------------
STRACE = shutil.which("strace")
PROGRAMS = {
    "bash": ["bash", "-c", "echo hello; true"],
    "python3": ["/usr/bin/python3", "-c", "import sys; print(sys.version_info[0])"],
    "ls": ["ls", "/"],
    "fork-exec-chain": ["sh", "-c", "sh -c 'ls / | cat' | wc -l; bash -c '/usr/bin/python3 -c \"print(2)\"'"],
}


def strace_run(argv, tmp_path, tag, preload, env):
    trace = tmp_path / f"{tag}.strace"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GEMMSHIM_", "LD_PRELOAD"))}
    full.update(env)
    cmd = [STRACE, "-f", "-qq", "-o", str(trace), "-e", "trace=open,openat,openat2,creat,clone,clone3,fork,vfork"]
    # A sanitizer build's runtime goes first, with and without the shim, so
    # that what differs is the shim's.
    preloads = [*harness.PRELOAD_PREFIX, *([str(harness.SHIM)] if preload else [])]
    if preloads:
        cmd += ["-E", "LD_PRELOAD=" + ":".join(preloads)]
    p = subprocess.run(cmd + argv, env=full, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    opened, threads = set(), 0
    for line in trace.read_text().splitlines():
        m = re.search(r'\b(?:open|openat|openat2|creat)\((?:AT_FDCWD, |\d+, )?"([^"]*)"', line)
        if m:
            opened.add(m.group(1))
        if re.search(r"\bclone3?\(.*CLONE_THREAD", line):
            threads += 1
    return p, opened, threads


def shim_and_its_libraries():
    """The shim and what it links (ldd): libc alone in a plain build (as
    test_shim_library checks), the sanitizer runtimes' own in a sanitizer
    build. The only files the shim may add to a program's."""
    out = subprocess.run(["ldd", str(harness.SHIM)], capture_output=True, text=True, check=True).stdout
    return {str(harness.SHIM)} | set(re.findall(r"=> (/\S+)", out))


# The environment of a training job: a routing log (with and without %p)
# and a debug file named; or nothing but the preload.
ENVS = {
    "bare": lambda d: {},
    "log": lambda d: {"GEMMSHIM_LOG": str(d / "gemms.jsonl")},
    "log-per-pid": lambda d: {"GEMMSHIM_LOG": str(d / "gemms.%p.jsonl")},
    "debug-file": lambda d: {"GEMMSHIM_DEBUG_FILE": str(d / "debug.txt")},
}


# ThreadSanitizer's runtime, preloaded alone into bash under strace -f,
# crashes it (SIGSEGV) before any shim is involved: these cases run in the
# plain and ASan builds.
UNDER_TSAN = any("libtsan" in p for p in harness.PRELOAD_PREFIX)


@pytest.mark.skipif(UNDER_TSAN, reason="the TSan runtime alone crashes bash under strace")
@pytest.mark.parametrize("env_name", list(ENVS))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_preloaded_into_a_program_without_cuda(tmp_path, name, env_name):
    """Preloaded into bash, python3, ls and a fork+exec chain: the program
    prints exactly what it prints without the shim, the shim says nothing,
    starts no thread and opens nothing but itself (and what it links), and
    no log or debug file
    appears (a process that makes no GEMM call creates no file)."""
    harness.require_built([harness.SHIM])
    assert STRACE, "strace is not installed (scripts/setup.sh installs it)"
    env = ENVS[env_name](tmp_path)
    base, base_opened, base_threads = strace_run(PROGRAMS[name], tmp_path, "without", False, env)
    got, opened, threads = strace_run(PROGRAMS[name], tmp_path, "with", True, env)
    assert base.returncode == 0, base.stderr
    assert (got.returncode, got.stdout, got.stderr) == (base.returncode, base.stdout, base.stderr)
    assert threads == base_threads
    assert str(harness.SHIM) in opened and opened - base_opened <= shim_and_its_libraries(), opened - base_opened
    assert sorted(p.name for p in tmp_path.iterdir()) == ["with.strace", "without.strace"]
