"""What the preloaded shim must never do to the processes it runs in and the
files around them (docs/log.md, "What the log guarantees"): truncate or follow a link to a
file, block in open() on a FIFO, kill the host with SIGPIPE, write into a
descriptor the program reused, or hang a forked child. proc_client_cu13
makes bf16 GEMMs on threads while it forks or closes every descriptor;
shells stand for the processes that never make a GEMM call.

Expected behaviour comes from POSIX (open(2) O_NOFOLLOW gives ELOOP on a
final symlink; O_NONBLOCK|O_WRONLY on a FIFO without a reader gives ENXIO;
write(2) to a pipe without a reader raises SIGPIPE, whose default action
ends the process; signal(7)/setrlimit(2): a write past RLIMIT_FSIZE raises
SIGXFSZ, whose default action ends the process, and fails with EFBIG when
it is blocked; fcntl(2): O_NONBLOCK belongs to the open file description a
duplicate shares, so a blocking terminal or pipe blocks its writer) and from
the CUDA documentation on fork (a child must not be left waiting on its
parent's state)."""

import json
import os
import platform
import pty
import re
import warnings
import pytest

from harness import CLIENT_DIR, PRELOAD_PREFIX, ROOT, read_log, require_built, run

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
    "ffma": ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off"}, "ffma", "sgemm"),
    "fp8-own": ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off"}, "fp8", "own"),
    "fp8-cublaslt": ({"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off"}, "fp8", "cublaslt-fp8"),
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


def records(lines):
    """The records among log lines: each process's header line left out
    (docs/log-format.md)."""
    return [r for r in (json.loads(l) for l in lines) if "header" not in r]


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
    assert [x["seq"] for x in records(lines[1:])] == [1, 2, 3, 1, 2, 3]
    assert sum('"header"' in l for l in lines) == 2  # one per run


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
    link = "a symbolic link, which is not followed; expected a regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg"
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
        assert l.endswith("WARN GEMMSHIM_MODE='bogus': expected auto, native, ffma, fp8 or fp16; "
                          "running pass-through (every GEMM native)")


@pytest.mark.parametrize("dirname", ["a", "100%d"])
def test_relative_names_made_absolute_at_load(client, standin, tmp_path, dirname):
    """A relative GEMMSHIM_LOG or GEMMSHIM_DEBUG_FILE names a file in the
    directory the process started in, even when the program changes
    directory before its first GEMM (both are opened at their first line).
    A '%' in that directory is a directory's character, not a placeholder.
    getcwd(3) gives the directory at load."""
    start, elsewhere = tmp_path / dirname, tmp_path / "elsewhere"
    start.mkdir()
    elsewhere.mkdir()
    env = {**ROUTES["native"][0], "GEMMSHIM_LOG": "rel.jsonl"}
    r = run_client(client, standin, ["--calls=3", f"--chdir={elsewhere}"], env, cwd=start)
    assert r.returncode == 0 and r.stderr == "", r.describe()
    assert [x["seq"] for x in read_log(start / "rel.jsonl")] == [1, 2, 3]
    assert files_in(elsewhere) == []
    # The debug file's first line here comes at the first GEMM (the log, a
    # directory, is refused then), after the change of directory.
    (start / "logdir").mkdir()
    env = {**ROUTES["native"][0], "GEMMSHIM_LOG": "logdir", "GEMMSHIM_DEBUG_FILE": "rel.debug"}
    r = run_client(client, standin, ["--calls=2", f"--chdir={elsewhere}"], env, cwd=start)
    assert r.returncode == 0 and r.stderr == "", r.describe()
    assert files_in(elsewhere) == []
    lines = (start / "rel.debug").read_text().splitlines()
    assert len(lines) == 1 and f"WARN GEMMSHIM_LOG: cannot open '{start}/logdir' (a directory;" in lines[0], lines


def test_relative_name_without_working_directory(client, standin, tmp_path):
    """getcwd(3) fails with ENOENT once the working directory is removed:
    the name stays relative, and one warning says so."""
    env = {**ROUTES["native"][0], "GEMMSHIM_LOG": "rel.jsonl"}
    r = run(["sh", "-c", f'mkdir gone && cd gone && rmdir ../gone && exec "$0" --calls=2', client],
            standin[13], shim=True, env={**NO_FLUSHER, **env}, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.describe()
    warns = shim_warnings(r.stderr)
    assert warns[0].endswith(
        "WARN GEMMSHIM_LOG='rel.jsonl': relative, and the working directory cannot be read (No such file or "
        "directory); expected it to be readable at load; the name stays relative to the directory the program "
        "is in when it writes its first line"), r.stderr
    assert files_in(tmp_path) == []


def files_in(d):
    return sorted(p.name for p in d.iterdir())


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
    else:  # refused, not read as an empty policy (fifo(7): no writer reads as the end)
        assert shim_warnings(r.stderr) == [
            l for l in r.stderr.splitlines()
            if l.endswith(f"WARN GEMMSHIM_POLICY='{fifo}': a FIFO or pipe; expected a regular file (a FIFO's text "
                          "reaches only the first process that reads it); running pass-through (every GEMM native)")
        ] and len(r.stderr.splitlines()) == 1, r.describe()


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
    assert [x["seq"] for x in records(text.splitlines())] == [1, 2, 3]


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


def test_named_descriptor_resolved_once(client, standin, tmp_path):
    """GEMMSHIM_LOG=/dev/fd/3 and GEMMSHIM_DEBUG_FILE=/dev/fd/4, and the
    program closes every descriptor and opens its own files, which get 3 and
    4: the shim's copies are gone, and the numbers are not resolved again
    (the log used to be reopened as /dev/fd/3, the program's data0.bin).
    The log goes off, the debug output goes to stderr, each with one
    warning."""
    log, dbg = tmp_path / "log.jsonl", tmp_path / "dbg.txt"
    # env(1) sets the variables for the client alone: the shell, preloaded
    # too, has no descriptor 4 to print its INFO lines to.
    cmd = (f"exec env GEMMSHIM_LOG=/dev/fd/3 GEMMSHIM_DEBUG_FILE=/dev/fd/4 GEMMSHIM_DEBUG=INFO "
           f"{client} --calls=200 --close-fds-at=100 --dir={tmp_path} 3>>{log} 4>>{dbg}")
    r = run(["sh", "-c", cmd], standin[13], shim=True, env={**NO_FLUSHER, **ROUTES["native"][0]}, timeout=60)
    assert r.returncode == 0, r.describe()
    assert r.stdout == "files ok\ncalls 200 failed 0\n", r.describe()
    warns = shim_warnings(r.stderr)
    assert len(warns) == 2, r.stderr
    assert re.search(r"WARN GEMMSHIM_DEBUG_FILE: descriptor \d+, the shim's copy of '/dev/fd/4', was closed by the "
                     r"program; debug output goes to stderr instead$", warns[0]), warns
    assert re.search(r"WARN GEMMSHIM_LOG: descriptor \d+, the shim's copy of '/dev/fd/3', was closed by the "
                     r"program; the routing log is off for the rest of this process \(a descriptor named by number "
                     r"is not opened again: the number may be another file by now\)$", warns[1]), warns
    # The exit summary went to stderr, after the warning.
    assert "INFO summary: 200 calls" in r.stderr
    # What the log got before the close is whole records of those calls.
    text = log.read_text()
    assert text == "" or text.endswith("\n")
    # The process's header line (docs/log-format.md) carries no seq.
    assert all("header" in x or x["seq"] <= 100 for x in map(json.loads, text.splitlines()))
    assert "INFO GEMMSHIM_LOG set by environment to /dev/fd/3" in dbg.read_text()


def quote_ref(b):
    """gs_quote (shim.h) for the bytes used here (ASCII, U+00E9, 0xFF): a
    byte that is not UTF-8 as the text \\xNN, cut after at most 96 bytes
    between two characters, "...(N bytes)" after the cut."""
    out, i = "", 0
    while i < len(b):
        n = 2 if b[i] == 0xC3 else 1
        if i + n > 96:
            return out + f"...({len(b)} bytes)"
        out += "\\xff" if b[i] == 0xFF else b[i:i + n].decode()
        i += n
    return out


def test_records_are_utf8_json(client, standin, tmp_path):
    """A policy file whose name has a byte that is not UTF-8 and runs past
    the 96 bytes a message shows of it, with a two-byte character at the
    cut: the rule's reason names the file. Every record must be UTF-8 JSON
    (RFC 8259 section 8.1) that json.loads takes, and so every line of the
    debug output (the raw byte, and a cut in the middle of a character,
    used to go out as they were)."""
    name = os.fsencode(tmp_path) + b"/pol\xff" + "\u00e9".encode() * 60 + b".txt"
    with open(name, "w") as f:
        f.write("native ab=bf16\n")
    log = tmp_path / "log.jsonl"
    r = run_client(client, standin, ["--calls=3"],
                   {"STANDIN_CC": "9.0", "GEMMSHIM_POLICY": os.fsdecode(name), "GEMMSHIM_LOG": str(log),
                    "GEMMSHIM_DEBUG": "INFO"})
    assert r.returncode == 0, r.describe()  # its stderr decoded as UTF-8 (text=True)
    recs = records(log.read_bytes().decode("utf-8").splitlines())
    assert [x["reason"] for x in recs] == [f"policy: {quote_ref(name)}:1 (native ab=bf16)"] * 3
    assert f"INFO GEMMSHIM_POLICY set by environment to {quote_ref(name)}\n" in r.stderr



def read_all(fd):
    os.set_blocking(fd, False)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, OSError):
            return out
        if not chunk:
            return out
        out += chunk


def terminal_lines(data):
    """The records a terminal got: the line discipline turns each '\\n'
    into '\\r\\n' (termios(3), ONLCR); the last line may be cut."""
    lines = data.split(b"\r\n")
    return records(lines[:-1])


@pytest.mark.parametrize("own", ["own", "shared"])
def test_unread_terminal_never_hangs(client, standin, tmp_path, own):
    """GEMMSHIM_LOG=/dev/fd/N on a pseudo-terminal nobody reads. poll()
    says a terminal is writable with any room at all, and a blocking write
    then waits for every byte: the program used to hang for good (the
    flusher in write(), the exit joining it). The shim writes through a
    description of its own, O_NONBLOCK ("own"); where it cannot have one
    (the open through /proc failed: "shared", the program's blocking
    description), the exit waits for a stuck write at most its budget.
    Either way the calls wait at most 50 ms, the program exits 0, and the
    lost records are counted."""
    if own == "shared" and NO_FLUSHER:
        pytest.skip("without a flusher thread the calls write a shared blocking description themselves")
    master, slave = pty.openpty()
    env = {**ROUTES["native"][0], "GEMMSHIM_LOG": f"/dev/fd/{slave}"}
    if own == "shared":
        env["GEMMSHIM_FAULT"] = "open:1"  # the open of /proc/self/fd/N: the shim's only open here
    try:
        r = run_client(client, standin, ["--threads=2", "--calls=1000"], env, timeout=60, pass_fds=(slave,))
        data = read_all(master)
    finally:
        os.close(slave)
        os.close(master)
    assert r.returncode == 0, r.describe()
    assert r.stdout == "calls 2000 failed 0\n", r.describe()
    warns = shim_warnings(r.stderr)
    if own == "shared":
        assert any(f"WARN GEMMSHIM_LOG: a write to '/dev/fd/{slave}' did not end within 1100 ms of the exit "
                   "(a terminal or pipe that stopped reading); the records it held and those after it are lost"
                   in w for w in warns), r.stderr
    assert re.search(r"WARN GEMMSHIM_LOG: \d+ records lost because the log writer fell behind", warns[-1]), warns
    recs = terminal_lines(data)
    assert len(recs) < 2000
    assert all("seq" in x or x.get("event") == "records_lost" for x in recs)


def test_unread_socket_never_hangs(client, standin, tmp_path):
    """GEMMSHIM_LOG=/dev/fd/N on a socket nobody reads: send(MSG_DONTWAIT)
    never blocks, whatever the program's description says."""
    import socket
    a, b = socket.socketpair()
    try:
        r = run_client(client, standin, ["--threads=2", "--calls=1000"],
                       {**ROUTES["native"][0], "GEMMSHIM_LOG": f"/dev/fd/{a.fileno()}"}, timeout=60,
                       pass_fds=(a.fileno(),))
        data = read_all(b.fileno())
    finally:
        a.close()
        b.close()
    assert r.returncode == 0, r.describe()
    assert r.stdout == "calls 2000 failed 0\n", r.describe()
    assert re.search(r"WARN GEMMSHIM_LOG: \d+ records lost because the log writer fell behind",
                     shim_warnings(r.stderr)[-1]), r.stderr
    lines = data.split(b"\n")
    assert 0 < len(lines) - 1 < 2000
    assert all("seq" in x or x["event"] == "records_lost" for x in records(lines[:-1]))


def test_file_size_limit_never_kills(client, standin, tmp_path):
    """Under `ulimit -f 16` the log reaches the limit: the write fails with
    EFBIG instead of SIGXFSZ ending the program (it exited 153, 128 +
    SIGXFSZ, its output lost); the log goes off with one warning."""
    log = tmp_path / "log.jsonl"
    r = run(["sh", "-c", f"ulimit -f 16 && exec {client} --calls=200"], standin[13], shim=True,
            env={**NO_FLUSHER, **ROUTES["native"][0], "GEMMSHIM_LOG": str(log)}, timeout=60)
    assert r.returncode == 0, r.describe()
    assert r.stdout == "calls 200 failed 0\n", r.describe()
    warns = shim_warnings(r.stderr)
    assert len(warns) == 1, r.stderr
    assert warns[0].endswith(f"WARN GEMMSHIM_LOG: cannot write '{log}' (File too large: the process's file size "
                             "limit, ulimit -f); the routing log is off for the rest of this process"), warns
    assert 0 < log.stat().st_size <= 16 * 1024


def test_cut_line_never_glued(client, standin, tmp_path):
    """An earlier process's last write was cut short by a full disk (POSIX
    write(2): what fits is written, then ENOSPC), so the log ends inside a
    line, and it is never truncated back. The next process's first record
    lands glued onto it: that is one bad line, which the report reader
    counts, and the record is written again, whole; every other line is a
    whole record."""
    import sys
    sys.path.insert(0, str(ROOT / "python"))
    from gemmshim.report.read import BadLines, read_records
    log = tmp_path / "log.jsonl"
    cut = '{"seq":7,"t_ns":1,"api":"cublasGemmEx","m":64,"n":64,"k":6'
    log.write_text(cut)
    r = run_client(client, standin, ["--calls=3"], {**ROUTES["native"][0], "GEMMSHIM_LOG": str(log)})
    assert r.returncode == 0 and r.stderr == "", r.describe()
    lines = log.read_text().split("\n")
    # The process's first line is its header (docs/log-format.md): that is
    # the one glued on, and written again whole after its write.
    assert lines[0].startswith(cut + '{"header":') and lines[-1] == ""
    assert lines[1] == lines[0][len(cut):]
    assert [json.loads(l)["seq"] for l in lines[2:-1]] == [1, 2, 3]
    bad = BadLines()
    assert [rec["seq"] for _, rec in read_records(log, bad)] == [1, 2, 3]
    assert (bad.count, bad.first, bad.first_why) == (1, 1, "not JSON")
    assert len(bad.headers) == 1


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
# futex(2)'s number: Linux's syscall tables (arch/x86/entry/syscalls/
# syscall_64.tbl; include/uapi/asm-generic/unistd.h for arm64).
FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
VFORK = {"x86_64": 58}.get(platform.machine())  # arm64 has none: glibc's vfork is clone there
HUNG_THREAD = re.compile(r"proc_client: hung thread (\d+): (?:syscall (\d+) pc (\S+) arg0 (\S+)|(.*))$")
HUNG_STOP = re.compile(r"proc_client: hung thread (\d+) stopped in (\S+)(?: at syscall (\d+))?$")
HUNG_STUCK = re.compile(r"proc_client: hung thread (\d+) did not stop within 1 s$")
TSAN_RUNTIME = [os.path.realpath(p) for p in PRELOAD_PREFIX if "tsan" in p]


def hung_threads(stderr):
    """proc_client's lines on a hung child's threads (describe_hang): tid ->
    {"syscall": the call it is blocked in (None: in none), "pc" and "arg0":
    the objects of that call's pc and first argument, "state": the text
    otherwise, "stops": [(object of the pc, system call or None)] at its
    stops, each place once; ("?", None) for a stop that did not come}."""
    out = {}
    for line in stderr.splitlines():
        m = HUNG_THREAD.match(line)
        if m:
            out[int(m[1])] = {"syscall": int(m[2]) if m[2] else None, "pc": m[3], "arg0": m[4], "state": m[5],
                              "stops": []}
            continue
        m = HUNG_STOP.match(line)
        if m:
            out[int(m[1])]["stops"].append((m[2], int(m[3]) if m[3] else None))
            continue
        m = HUNG_STUCK.match(line)
        if m:
            out[int(m[1])]["stops"].append(("?", None))
    return out


def hung_in_tsan_runtime(r):
    """Whether a child hung with every thread waiting in ThreadSanitizer's
    own runtime, while the parent's calls all succeeded: each thread stopped
    only in the runtime's code, at least once in a system call made from it
    (a futex wait, the sched_yield of its spin locks), and a thread blocked
    in a call made it from there. GCC 12's runtime takes none of its
    allocator's or stack depot's locks around fork (LLVM added that in
    2024, pull request 96600, "[tsan] Lock/Unlock allocator and stacks on
    fork", for "known deadlocks"), and its pthread_once, unlike glibc's,
    never runs a routine again in a child forked while another thread ran
    it: such a child waits there for ever, where glibc alone would not. A
    lock of the shim's or the program's waits in libc's code; a spin loop
    of theirs makes no system call from the runtime, even where TSan's
    atomics run its loads."""
    threads = hung_threads(r.stderr)
    parent_ok = any(re.fullmatch(r"calls \d+ failed 0", l) for l in r.stdout.splitlines())

    def in_runtime(t):
        stops = t["stops"]
        return bool(stops) and all(obj in TSAN_RUNTIME for obj, _ in stops) and \
            any(nr is not None for _, nr in stops) and (t["syscall"] is None or t["pc"] in TSAN_RUNTIME)
    return r.returncode == 3 and parent_ok and bool(TSAN_RUNTIME) and bool(threads) and \
        all(in_runtime(t) for t in threads.values())


def run_fork_client(client, standin, args, env, remove):
    """run_client for a client that forks. Under ThreadSanitizer a child
    that hung inside the runtime (hung_in_tsan_runtime) is run again, twice
    at most, after remove() took that run's files, with a warning in the
    test report; any other hang fails, as does a third."""
    for attempt in range(3):
        r = run_client(client, standin, args, env)
        if attempt == 2 or not hung_in_tsan_runtime(r):
            return r
        warnings.warn(f"a forked child hung inside ThreadSanitizer's runtime; run again: {r.stderr.strip()}")
        remove()


HANG_ARGS = ["--threads=1", "--calls=4", "--fork-at=4", "--timeout=2"]


def hang_described(r):
    """The hung child's one thread, after the line that says it hung."""
    lines = r.stderr.splitlines()
    m = re.fullmatch(r"proc_client: child (\d+) hung for 2 s", lines[0])
    assert r.returncode == 3 and m, r.describe()
    assert r.stdout.splitlines() == ["child calls 5 failed 0", "calls 4 failed 0"], r.describe()
    threads = hung_threads(r.stderr)
    assert list(threads) == [int(m[1])], r.describe()
    assert len(lines) == 2 + len(threads[int(m[1])]["stops"]), r.describe()
    return threads[int(m[1])]


def test_hung_child_on_a_lock_is_described(client, standin):
    """A child that waits for ever on a mutex a parent's thread held at the
    fork (the program's own, as POSIX warns): the parent names the wait,
    futex(2) made from libc's code, where every stop finds it, not from a
    sanitizer's runtime. The fork comes after the parent's calls, when no
    thread is inside an allocator (the test runs under ASan too)."""
    r = run_client(client, standin, [*HANG_ARGS, "--child-hang=lock"], ROUTES["native"][0])
    t = hang_described(r)
    assert t["syscall"] == FUTEX and re.fullmatch(r"/\S+/libc\.so\.6", t["pc"]), r.describe()
    assert t["stops"] == [(t["pc"], FUTEX)], r.describe()
    assert not hung_in_tsan_runtime(r)


def test_spinning_child_is_described(client, standin):
    """A child that spins for ever on a flag a parent's thread set at the
    fork, in no system call (/proc shows "running", without a pc): the
    parent stops it to read its pc, in the program's own code, at no system
    call (under TSan also in the runtime's atomic load, never in a call)."""
    r = run_client(client, standin, [*HANG_ARGS, "--child-hang=spin"], ROUTES["native"][0])
    t = hang_described(r)
    assert t["syscall"] is None and t["state"] == "running", r.describe()
    own = os.path.realpath(client)
    if TSAN_RUNTIME:
        assert set(t["stops"]) <= {(own, None), (TSAN_RUNTIME[0], None)}, r.describe()
    else:
        assert t["stops"] == [(own, None)], r.describe()
    assert not hung_in_tsan_runtime(r)


@pytest.mark.parametrize("where", ["vfork", "thread-vfork"])
def test_child_in_the_kernel_is_described(client, standin, where):
    """A child that vforks while its vfork child waits 4 s for a mutex the
    fork left held: the vforking thread waits in the kernel (vfork(2):
    "the calling thread is suspended until the child terminates"), where no
    ptrace stop reaches it. Its description ends anyway, saying so after a
    second, and the run ends once the vfork child gives up. thread-vfork:
    a second thread of the child vforks while the first waits for the
    mutex; that thread, left seized, is waited for after the kill (a
    traced zombie holds its process until its tracer's wait, ptrace(2))."""
    if TSAN_RUNTIME:
        pytest.skip("ThreadSanitizer's vfork interceptor makes a fork: no thread waits in vfork")
    if VFORK is None:
        pytest.skip(f"no vfork system call on {platform.machine()}")
    r = run_client(client, standin, [*HANG_ARGS, f"--child-hang={where}"], ROUTES["native"][0])
    lines = r.stderr.splitlines()
    m = re.fullmatch(r"proc_client: child (\d+) hung for 2 s", lines[0])
    assert r.returncode == 3 and m, r.describe()
    assert r.stdout.splitlines() == ["child calls 5 failed 0", "calls 4 failed 0"], r.describe()
    threads = hung_threads(r.stderr)
    pid = int(m[1])
    libc = re.compile(r"/\S+/libc\.so\.6")
    if where == "vfork":
        assert list(threads) == [pid], r.describe()
    else:
        assert len(threads) == 2 and pid in threads, r.describe()
        first = threads.pop(pid)
        assert first["syscall"] == FUTEX and libc.fullmatch(first["pc"]), r.describe()
        assert first["stops"] == [(first["pc"], FUTEX)], r.describe()
    (t,) = threads.values()
    assert t["syscall"] == VFORK and libc.fullmatch(t["pc"]), r.describe()
    assert t["stops"] == [("?", None)], r.describe()
    assert lines[-1].endswith(" did not stop within 1 s"), r.describe()


def test_once_routine_interrupted_by_fork(client, standin, tmp_path):
    """A parent's thread is inside a pthread_once routine at the fork and
    the child then calls pthread_once on the same control. glibc runs the
    routine again in the child (its _Fork advances the fork generation in
    the child, "See __pthread_once"; nptl/pthread_once.c runs again a
    routine marked in progress in an older generation), so the child ends.
    ThreadSanitizer's own pthread_once waits for ever: the child is
    described waiting on futex(2) from the runtime's code, the hang counts
    as the runtime's, and run_fork_client runs it three times, with two
    warnings."""
    args = [*HANG_ARGS, "--child-hang=once"]
    if not TSAN_RUNTIME:
        r = run_client(client, standin, args, ROUTES["native"][0])
        assert r.returncode == 0 and sorted(r.stdout.splitlines()) == ["calls 4 failed 0", "child calls 5 failed 0"], \
            r.describe()
        return
    removed = []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        r = run_fork_client(client, standin, args, ROUTES["native"][0], lambda: removed.append(1))
    t = hang_described(r)
    assert (t["syscall"], t["pc"]) == (FUTEX, TSAN_RUNTIME[0]), r.describe()
    assert t["stops"] == [(TSAN_RUNTIME[0], FUTEX)], r.describe()
    assert hung_in_tsan_runtime(r)
    assert removed == [1, 1] and len(said) == 2, (removed, [str(w.message) for w in said])


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
        r = run_fork_client(client, standin,
                            ["--threads=6", f"--calls={calls}", f"--fork-at={int(share * total)}", "--child-calls=5",
                             "--stream=legacy"],
                            {**env, "GEMMSHIM_LOG": str(own)},
                            lambda: [p.unlink() for p in tmp_path.glob(f"own{i}.*.jsonl")])
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
    r = run_fork_client(client, standin,
                        ["--threads=6", f"--calls={calls}", f"--fork-at={total // 4}", "--child-calls=5"],
                        {**env, "GEMMSHIM_LOG": str(shared)}, lambda: shared.unlink(missing_ok=True))
    assert r.returncode == 0, r.describe()
    assert len(read_log(shared)) == total + 5


# ---- thread cancellation --------------------------------------------------------------
def fill_pipe():
    """A pipe whose buffer is full: a write to it waits for a reader
    (pipe(7)). Returns (read end, write end, bytes in it: '#' each)."""
    rd, wr = os.pipe()
    os.set_blocking(wr, False)
    filled = 0
    for size in (65536, 4096, 1):
        while True:
            try:
                filled += os.write(wr, b"#" * size)
            except BlockingIOError:
                break
    os.set_blocking(wr, True)
    return rd, wr, filled


def run_on_full_pipe(client, standin, args, env, marker, timeout=60):
    """The client with GEMMSHIM_LOG=/dev/fd/N on a full pipe that nobody
    reads, GEMMSHIM_LOG_WAIT=1 (a call waits for the log however long it
    takes: no record is lost); once the client prints `marker`, the pipe is
    read to its end. A client that does not print it, or does not exit, in
    `timeout` seconds hung: the test fails. Returns (returncode, stdout,
    stderr, the log's records)."""
    import select
    import subprocess
    import threading
    import time
    from harness import child_env
    rd, wr, filled = fill_pipe()
    full_env = child_env(standin[13], True, {**NO_FLUSHER, **env, "GEMMSHIM_LOG": f"/dev/fd/{wr}",
                                             "GEMMSHIM_LOG_WAIT": "1"})
    p = subprocess.Popen([str(client), *args], env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         pass_fds=(wr,))
    os.close(wr)
    data = bytearray()
    reader = None
    try:
        out = b""
        deadline = time.monotonic() + timeout
        while marker.encode() + b"\n" not in out:
            left = deadline - time.monotonic()
            assert left > 0, f"hung before {marker!r}: {out!r}"
            if select.select([p.stdout], [], [], min(left, 1.0))[0]:
                chunk = os.read(p.stdout.fileno(), 65536)
                assert chunk, f"exited before {marker!r}: {out!r} {p.stderr.read()!r}"
                out += chunk

        def drain():
            while True:
                chunk = os.read(rd, 1 << 16)
                if not chunk:
                    return
                data.extend(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            rest, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            rest, err = p.communicate()
            raise AssertionError(f"hung after {marker!r}: {(out + rest)!r} {err!r}")
        reader.join(timeout=10)
        assert not reader.is_alive(), "the log pipe stayed open after the client exited"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(rd)
    assert data[:filled] == b"#" * filled
    recs = records(bytes(data[filled:]).decode().splitlines())
    return p.returncode, (out + rest).decode(), err.decode(), recs


def test_cancelled_thread_leaves_no_lock(client, standin):
    """A thread of the program cancelled (pthread_cancel, deferred: the
    default) while a GEMM of its waits inside the shim: the call waits for
    the log's writer (GEMMSHIM_LOG_WAIT=1), which waits for a reader of its
    pipe, that is, in pthread_cond_wait or poll, both cancellation points
    (pthreads(7)). The thread used to unwind there with the log's mutex held
    (pthread_cond_wait re-acquires it first, POSIX) or a write marked in
    flight: the main thread's next GEMM, or its exit, then waited forever.
    POSIX (pthread_setcancelstate): with cancellation disabled a request
    stays pending; the shim disables it while its code runs, so the request
    acts at the thread's next cancellation point after the GEMM returned
    (pthread_testcancel in the client). The pipe is read once the cancel is
    made; then the thread ends, and the main thread makes 20 GEMMs and
    exits. Every call is in the log, once, in order."""
    rc, out, err, recs = run_on_full_pipe(client, standin, ["--cancel", "--calls=20"], ROUTES["native"][0],
                                          "cancelled")
    assert rc == 0, (out, err)
    worker = int(re.search(r"^worker calls (\d+)$", out, re.M).group(1))
    assert worker > 0
    assert out.splitlines()[-1] == f"calls {worker + 20} failed 0", out
    assert [x["seq"] for x in recs] == list(range(1, worker + 21))


# ---- exec -----------------------------------------------------------------------------
EXEC_VARIANTS = ["execv", "execve", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve", "execveat"]
# Those given an environment: the new image gets it alone (execve(2)); the
# others pass on environ (exec(3)).
EXEC_WITH_ENVP = {"execve", "execvpe", "execle", "fexecve", "execveat"}


@pytest.mark.parametrize("variant", EXEC_VARIANTS)
def test_exec_keeps_buffered_records(client, standin, tmp_path, variant):
    """20 GEMMs, then at once an exec of sh. execve(2) replaces the image
    without running exit handlers or destructors, and the log's records,
    buffered for up to a second, used to go with it (the log was empty).
    Each of the exec family now flushes them first: the log has all 20,
    once; the new image got exactly the arguments and environment given
    (exec(3): the p variants search PATH for a name without a slash)."""
    log = tmp_path / "log.jsonl"
    file = "sh" if variant in ("execvp", "execvpe", "execlp") else "/bin/sh"
    r = run_client(client, standin, [f"--exec={variant}", f"--exec-file={file}", "--calls=20"],
                   {**ROUTES["native"][0], "GEMMSHIM_LOG": str(log), "GS_EXEC_PROBE": "inherited"})
    assert r.returncode == 0, r.describe()
    probe = "from-envp" if variant in EXEC_WITH_ENVP else "inherited"
    assert r.stdout == f"zero|one|{probe}\n", r.describe()
    text = log.read_text() if log.exists() else ""
    assert text.count("\n") == 21, f"{text.count(chr(10)) - 1} records of 20 in the log (and its header)"
    assert [x["seq"] for x in read_log(log)] == list(range(1, 21))


@pytest.mark.parametrize("variant", EXEC_VARIANTS)
def test_failed_exec_returns_as_without_the_shim(client, standin, tmp_path, variant):
    """An exec that fails returns -1 with errno as without the shim, and the
    program goes on: execve(2) gives ENOENT for a file that does not exist
    and EACCES for one without execute permission (fexecve's descriptor is
    of such a file). The log has the calls before and after, each once."""
    missing = tmp_path / "no-such-program"
    plain = tmp_path / "not-executable.txt"
    plain.write_text("echo never\n")
    cases = [(str(plain), 13)] if variant == "fexecve" else [(str(missing), 2), (str(plain), 13)]
    for i, (file, want_errno) in enumerate(cases):
        log = tmp_path / f"log{i}.jsonl"
        args = [f"--exec={variant}", f"--exec-file={file}", "--calls=5", "--calls-after=7"]
        env = {**ROUTES["native"][0], "GEMMSHIM_LOG": str(log)}
        bare = run([client, *args], standin[13], shim=False, env=env, timeout=60)
        r = run_client(client, standin, args, env)
        assert r.returncode == 0, r.describe()
        assert r.stdout == bare.stdout == f"exec failed -1 {want_errno}\ncalls 12 failed 0\n", (r.describe(), bare.stdout)
        assert [x["seq"] for x in read_log(log)] == list(range(1, 13))


@pytest.mark.parametrize("target", ["/bin/true", "/nonexistent/program"])
def test_vfork_child_exec_takes_no_lock(client, standin, target):
    """A vfork child shares its parent's memory and runs no fork handler
    (vfork(2)): it must not take the shim's locks or write. The parent has
    made 10 GEMMs and its log's writer has taken their records and waits
    for a reader of its full pipe (GEMMSHIM_LOG_WAIT=1): a child that tried
    to flush the log before its execv would wait for that write, holding up
    the parent (suspended until the child execs or exits) for good. The
    child goes straight to execv; the pipe is read once the parent runs
    again; the child exits 0 (/bin/true) or 127 (its exec failed, ENOENT);
    every one of the parent's 15 calls is in the log once."""
    if UNDER_TSAN:
        pytest.skip("ThreadSanitizer turns vfork into fork, and runs no log writer thread here")
    rc, out, err, recs = run_on_full_pipe(client, standin, [f"--vfork-exec={target}", "--calls=10",
                                                            "--calls-after=5"], ROUTES["native"][0], "vforked")
    assert rc == 0, (out, err)
    status = 0 if target == "/bin/true" else 127
    assert out.splitlines() == ["vforked", f"child status {status}", "calls 15 failed 0"], out
    assert [x["seq"] for x in recs] == list(range(1, 16))
