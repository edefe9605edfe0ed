"""What the preloaded shim must never do to the processes it runs in and the
files around them (README, "Routing log"): truncate or follow a link to a
file, block in open() on a FIFO, kill the host with SIGPIPE, write into a
descriptor the program reused, or hang a forked child. proc_client_cu13
makes bf16 GEMMs on threads while it forks or closes every descriptor;
shells stand for the processes that never make a GEMM call.

Expected behaviour comes from POSIX (open(2) O_NOFOLLOW gives ELOOP on a
final symlink; O_NONBLOCK|O_WRONLY on a FIFO without a reader gives ENXIO;
write(2) to a pipe without a reader raises SIGPIPE, whose default action
ends the process) and from the CUDA documentation on fork (a child must not
be left waiting on its parent's state)."""

import json
import os
import pytest

from harness import CLIENT_DIR, PRELOAD_PREFIX, read_log, require_built, run

UNDER_TSAN = any("tsan" in p for p in PRELOAD_PREFIX)
# ASan's allocator (GCC 12's libasan) takes no lock around fork: a child
# forked while another thread is inside malloc waits forever on the
# allocator's mutex (seen: FutexWait under SizeClassAllocator64::
# GetFromAllocator in the child's first malloc). POSIX allows a child of a
# multi-threaded fork only async-signal-safe calls, and glibc's malloc, not
# ASan's, makes malloc one; so the fork tests run in the plain and TSan builds.
UNDER_ASAN = any("asan" in p for p in PRELOAD_PREFIX)
# ThreadSanitizer cannot follow a forked child that starts a thread: under
# it the shim runs without its flusher thread (records are then written by
# the calls themselves and at exit).
NO_FLUSHER = {"GEMMSHIM_FAULT": "pthread_create:1+"} if UNDER_TSAN else {}

ROUTES = {
    "native": ({"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "native"}, "native", None),
    "ffma": ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_FFMA_MIN_FLOPS": "0"}, "ffma", "sgemm"),
    "fp8-own": ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "fp8"}, "fp8", "own"),
    "fp8-cublaslt": ({"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8"}, "fp8", "cublaslt-fp8"),
}


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "proc_client_cu13"
    require_built([path])
    return path


def run_client(client, standin, args, env, timeout=60, **kw):
    return run([client, *args], standin[13], shim=True, env={**NO_FLUSHER, **env}, timeout=timeout, **kw)


def run_shell(cmd, env, tmp_path):
    """A shell (no GEMM) under the shim; the shell's own children inherit it."""
    return run(["sh", "-c", cmd], tmp_path, shim=True, env=env, timeout=20, cwd=tmp_path)


def shim_warnings(text):
    return [l for l in text.splitlines() if l.startswith("gemmshim ") and " WARN " in l]


# ---- files ----------------------------------------------------------------------------
def test_fork_without_gemm_keeps_log(tmp_path):
    """A shell that forks and never makes a GEMM call neither truncates an
    existing log nor creates one (it was emptied at every fork)."""
    old = tmp_path / "x.jsonl"
    old.write_text('{"old":1}\n')
    r = run_shell("ls / | cat >/dev/null", {"GEMMSHIM_LOG": str(old)}, tmp_path)
    assert r.returncode == 0, r.describe()
    assert old.read_text() == '{"old":1}\n'
    r = run_shell("ls / | cat >/dev/null", {"GEMMSHIM_LOG": str(tmp_path / "new.jsonl"),
                                            "GEMMSHIM_DEBUG_FILE": str(tmp_path / "new.debug")}, tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.describe()
    assert not (tmp_path / "new.jsonl").exists()
    assert not (tmp_path / "new.debug").exists()  # nothing to say at WARN, no file


def test_log_appends_whole_lines(client, standin, tmp_path):
    """A shared name is appended to, never truncated: a second run adds its
    records after the first's."""
    log = tmp_path / "shared.jsonl"
    log.write_text('{"earlier":1}\n')
    for _ in range(2):
        r = run_client(client, standin, ["--calls=3"], {**ROUTES["native"][0], "GEMMSHIM_LOG": str(log)})
        assert r.returncode == 0, r.describe()
    lines = log.read_text().splitlines()
    assert lines[0] == '{"earlier":1}'
    assert [json.loads(l)["seq"] for l in lines[1:]] == [1, 2, 3, 1, 2, 3]


@pytest.mark.parametrize("dangling", [False, True])
def test_symlinks_not_followed(client, standin, tmp_path, dangling):
    target = tmp_path / "precious.txt"
    if not dangling:
        target.write_text("precious\n")
    (tmp_path / "l.jsonl").symlink_to(target)
    (tmp_path / "d.txt").symlink_to(target)
    env = {**ROUTES["native"][0], "GEMMSHIM_LOG": str(tmp_path / "l.jsonl"),
           "GEMMSHIM_DEBUG_FILE": str(tmp_path / "d.txt"), "GEMMSHIM_MODE": "bogus"}
    r = run_client(client, standin, ["--calls=2"], env)
    assert r.returncode == 0, r.describe()
    if dangling:
        assert not target.exists()
    else:
        assert target.read_text() == "precious\n"
    link = "a symbolic link, which is not followed; expected a regular file, a FIFO or a device"
    warns = shim_warnings(r.stderr)
    assert f"WARN GEMMSHIM_DEBUG_FILE='{tmp_path}/d.txt': cannot open '{tmp_path}/d.txt' ({link}); " \
           "debug output goes to stderr instead" in warns[0]
    assert any(f"WARN GEMMSHIM_LOG: cannot open '{tmp_path}/l.jsonl' ({link}); the routing log is off" in w
               for w in warns), r.stderr


def test_debug_file_appended_by_every_process(tmp_path):
    """Each preloaded process appends its own line; none wipes another's
    (the file was truncated at every load)."""
    d = tmp_path / "d.txt"
    d.write_text("earlier line\n")
    r = run_shell("sh -c true; sh -c true; true", {"GEMMSHIM_DEBUG_FILE": str(d), "GEMMSHIM_MODE": "bogus"},
                  tmp_path)
    assert r.returncode == 0, r.describe()
    lines = d.read_text().splitlines()
    assert lines[0] == "earlier line"
    assert len(lines) == 4, lines  # the outer shell and its two children
    assert len({l.split()[1] for l in lines[1:]}) == 3  # host:pid:tid, one pid each
    for l in lines[1:]:
        assert l.endswith("WARN GEMMSHIM_MODE='bogus': expected auto, native, ffma or fp8; "
                          "running pass-through (every GEMM native, still logged)")


@pytest.mark.parametrize("var", ["GEMMSHIM_POLICY", "GEMMSHIM_DEBUG_FILE"])
def test_fifo_never_blocks_open(tmp_path, var):
    """A FIFO nobody opens at the other end: /bin/true hung in open()."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    env = {var: str(fifo)}
    if var == "GEMMSHIM_DEBUG_FILE":
        env["GEMMSHIM_MODE"] = "bogus"  # something to say
    r = run(["/bin/true"], tmp_path, shim=True, env=env, timeout=20)
    assert r.returncode == 0, r.describe()
    if var == "GEMMSHIM_DEBUG_FILE":
        warns = shim_warnings(r.stderr)
        assert f"WARN GEMMSHIM_DEBUG_FILE='{fifo}': cannot open '{fifo}' (a FIFO with no reader); " \
               "debug output goes to stderr instead" in warns[0], r.stderr
    else:
        assert r.stderr == "", r.describe()  # no writer: an empty policy


def test_fifo_log(client, standin, tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    r = run_client(client, standin, ["--calls=3"], {**ROUTES["native"][0], "GEMMSHIM_LOG": str(fifo)})
    assert r.returncode == 0, r.describe()
    assert f"WARN GEMMSHIM_LOG: cannot open '{fifo}' (a FIFO with no reader); the routing log is off" in r.stderr
    # With a reader, the FIFO gets every record.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        r = run_client(client, standin, ["--calls=3"], {**ROUTES["native"][0], "GEMMSHIM_LOG": str(fifo)})
        assert r.returncode == 0 and r.stderr == "", r.describe()
        text = os.read(reader, 1 << 20).decode()
    finally:
        os.close(reader)
    assert [json.loads(l)["seq"] for l in text.splitlines()] == [1, 2, 3]


def test_named_descriptor_without_reader_no_sigpipe(client, standin, tmp_path):
    """GEMMSHIM_LOG=/dev/fd/3 on a pipe whose reader is gone: the write gets
    EPIPE, the process exits 0 with its output, one warning. (SIGPIPE used to
    end it with status 141 and lose its buffered stdout.)"""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        r = run_client(client, standin, ["--calls=3"], {**ROUTES["native"][0], "GEMMSHIM_LOG": f"/dev/fd/{wr}"},
                       pass_fds=(wr,))
    finally:
        os.close(wr)
    assert r.returncode == 0, r.describe()
    assert r.stdout == "calls 3 failed 0\n"
    warns = shim_warnings(r.stderr)
    assert len(warns) == 1, r.stderr
    assert warns[0].endswith(f"WARN GEMMSHIM_LOG: cannot write '/dev/fd/{wr}' (Broken pipe); "
                             "the routing log is off for the rest of this process")


def test_closed_descriptors_not_written(client, standin, tmp_path):
    """A program closes descriptors 3..1023 mid-run and opens its own files:
    they get none of the log (100 records used to land in its data0.bin);
    the log is opened again and keeps every record."""
    log = tmp_path / "log.jsonl"
    r = run_client(client, standin, ["--calls=200", "--close-fds-at=100", f"--dir={tmp_path}"],
                   {**ROUTES["native"][0], "GEMMSHIM_LOG": str(log)})
    assert r.returncode == 0, r.describe()
    assert "files ok" in r.stdout
    assert [x["seq"] for x in read_log(log)] == list(range(1, 201))
    warns = shim_warnings(r.stderr)
    assert len(warns) == 1 and f"no longer is '{log}' (the program closed it); reopened" in warns[0], r.stderr


def test_write_fault_still_warns(client, standin, tmp_path):
    """GEMMSHIM_FAULT=write:1+ fails every routing-log write; the warning
    still reaches the debug output, which has its own entry (debug_write)."""
    log = tmp_path / "log.jsonl"
    r = run_client(client, standin, ["--calls=3"],
                   {**ROUTES["native"][0], "GEMMSHIM_LOG": str(log), "GEMMSHIM_FAULT": "write:1+"})
    assert r.returncode == 0, r.describe()
    warns = shim_warnings(r.stderr)
    assert len(warns) == 1, r.stderr
    assert warns[0].endswith(f"WARN GEMMSHIM_LOG: cannot write '{log}' (Input/output error); "
                             "the routing log is off for the rest of this process")
    assert log.read_text() == ""
    r = run_client(client, standin, ["--calls=3"],
                   {**ROUTES["native"][0], "GEMMSHIM_MODE": "bogus", "GEMMSHIM_FAULT": "debug_write:1+"})
    assert r.returncode == 0 and r.stdout == "calls 3 failed 0\n", r.describe()


# ---- fork -----------------------------------------------------------------------------
# Where the fork lands: the share of the parent's calls made before it.
# Under a sanitizer every run costs ten times more: two points.
FORK_POINTS = (0.01, 0.15, 0.4, 0.7, 0.95) if not PRELOAD_PREFIX else (0.15, 0.7)
# Calls per thread: the fp8 routes run the shim's kernels on the CPU.
CALLS = {"fp8-own": 10, "fp8-cublaslt": 16}


@pytest.mark.parametrize("pools", ["pools", "no-pools"])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_fork_child_never_hangs(client, standin, tmp_path, route, pools):
    """Six threads make GEMMs on the route while the main thread forks; the
    child makes GEMMs of its own, all on the legacy stream (one scratch slot
    for all without memory pools). A lock another thread held at the fork
    used to hang the child (the scratch slot, the module cache, an fp8
    site). The client kills a child that takes more than 20 s and fails;
    the parent's and the child's records are all in their own logs, and
    with a shared name (threads on their own streams) all in the one file."""
    if UNDER_ASAN:
        pytest.skip("ASan's allocator is not fork-safe in a multi-threaded process (see UNDER_ASAN)")
    env, want_route, want_backend = ROUTES[route]
    env = dict(env)
    if pools == "no-pools":
        env["STANDIN_NO_POOLS"] = "1"
    calls = CALLS.get(route, 40)
    total = 6 * calls
    for i, share in enumerate(FORK_POINTS):
        own = tmp_path / f"own{i}.%p.jsonl"
        r = run_client(client, standin,
                       ["--threads=6", f"--calls={calls}", f"--fork-at={int(share * total)}", "--child-calls=5",
                        "--stream=legacy"],
                       {**env, "GEMMSHIM_LOG": str(own)})
        assert r.returncode == 0, r.describe()
        assert sorted(r.stdout.splitlines()) == [f"calls {total} failed 0", "child calls 5 failed 0"], r.describe()
        logs = sorted(tmp_path.glob(f"own{i}.*.jsonl"))
        assert len(logs) == 2, logs
        parent = read_log(tmp_path / f"own{i}.{r.pid}.jsonl")
        (child_log,) = [p for p in logs if p.name != f"own{i}.{r.pid}.jsonl"]
        child = read_log(child_log)
        assert len(parent) == total and len(child) == 5
        assert {(x["route"], x.get("backend")) for x in parent + child} == {(want_route, want_backend)}
        assert len({x["seq"] for x in parent}) == total
    shared = tmp_path / "shared.jsonl"
    r = run_client(client, standin, ["--threads=6", f"--calls={calls}", f"--fork-at={total // 4}", "--child-calls=5"],
                   {**env, "GEMMSHIM_LOG": str(shared)})
    assert r.returncode == 0, r.describe()
    assert len(read_log(shared)) == total + 5
