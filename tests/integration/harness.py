"""Running the integration clients, with and without the shim, and reading
what they print and what the shim logs. Shared by tests/integration and
tests/real.

Locations come from the environment the Makefile's `integration` target
sets (GSTEST_BUILD, GSTEST_STANDIN_CU12/13, GSTEST_KERNELS,
GSTEST_PRELOAD_PREFIX); run by hand, the defaults match a plain
`make` build. GSTEST_REAL_CUBLAS_DIR names the toolkit's cuBLAS 13.
"""

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _repo_path(var, default):
    p = Path(os.environ.get(var, default))
    return p if p.is_absolute() else ROOT / p


BUILD = _repo_path("GSTEST_BUILD", "build")
CLIENT_DIR = BUILD / "tests" / "integration"
SHIM = BUILD / "libgemmshim.so"
STANDIN = {
    12: _repo_path("GSTEST_STANDIN_CU12", BUILD / "standin" / "cu12"),
    13: _repo_path("GSTEST_STANDIN_CU13", BUILD / "standin" / "cu13"),
}
# The shim's kernels built for the CPU, which the stand-in libcuda runs
# (STANDIN_KERNELS; tests/standin/standin_kernel.h).
KERNELS_HOST = _repo_path("GSTEST_KERNELS", BUILD / "kernels" / "libgemmshim_kernels_host.so")
# The toolkit's own cuBLAS 13 (tests/real).
REAL_CUBLAS = Path(os.environ.get("GSTEST_REAL_CUBLAS_DIR", "/usr/local/cuda/lib64"))
# A sanitizer runtime that must precede the shim in LD_PRELOAD (make asan).
PRELOAD_PREFIX = [p for p in os.environ.get("GSTEST_PRELOAD_PREFIX", "").split(":") if p]

PATTERNS = ("linked", "framework", "xla")
CUDA_MAJORS = (12, 13)
APIS = (
    "cublasGemmEx",
    "cublasGemmEx_64",
    "cublasGemmStridedBatchedEx",
    "cublasGemmStridedBatchedEx_64",
    "cublasGemmBatchedEx",
    "cublasGemmBatchedEx_64",
    "cublasLtMatmul",
)

# cublasStatus_t values cuBLAS documents for the invalid calls.
CUBLAS_STATUS_NOT_INITIALIZED = 1
CUBLAS_STATUS_INVALID_VALUE = 7

# Variables a child must not inherit from the developer's shell: they would
# change what the shim or the stand-in does behind a test's back.
_INHERITED_NEVER = ("LD_PRELOAD", "LD_LIBRARY_PATH", "RANK", "LOCAL_RANK", "CUBLAS_BATCH_INVARIANCE_FLAGS")
_INHERITED_NEVER_PREFIXES = ("GEMMSHIM_", "STANDIN_", "CUBLAS_LOG", "CUBLASLT_LOG")


def client_argv(pattern, cuda, *args):
    """The command line of the suite under one loading pattern."""
    if pattern == "linked":
        return [str(CLIENT_DIR / f"client_linked_cu{cuda}"), *args]
    if pattern == "framework":
        return [str(CLIENT_DIR / "client_framework"), f"--cuda={cuda}", *args]
    if pattern == "xla":
        return [str(CLIENT_DIR / "client_xla"), f"--cuda={cuda}", *args]
    raise ValueError(pattern)


def child_env(libdir, shim, extra=None):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _INHERITED_NEVER and not k.startswith(_INHERITED_NEVER_PREFIXES)
    }
    env["LD_LIBRARY_PATH"] = str(libdir)
    env["STANDIN_KERNELS"] = str(KERNELS_HOST)
    preload = list(PRELOAD_PREFIX)
    if shim:
        preload.append(str(SHIM))
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    env.update(extra or {})
    return env


def parse_fields(words):
    """'key=value' words into a dict (values stay strings)."""
    out = {}
    for w in words:
        key, sep, value = w.partition("=")
        assert sep, f"not key=value: {w!r}"
        out[key] = value
    return out


@dataclass
class Run:
    argv: list
    returncode: int
    stdout: str
    stderr: str
    pid: int
    env: dict = field(repr=False, default_factory=dict)

    def lines(self, first_word):
        return [l.split() for l in self.stdout.splitlines() if l.split()[:1] == [first_word]]

    @property
    def calls(self):
        """Every `call <index> key=value...` line as a dict, with 'index'."""
        out = []
        for words in self.lines("call"):
            d = parse_fields(words[2:])
            d["index"] = words[1]
            out.append(d)
        return out

    @property
    def device(self):
        found = self.lines("device")
        return parse_fields(found[0][1:]) if found else None

    def describe(self):
        return (
            f"argv: {' '.join(self.argv)}\nexit: {self.returncode}\n"
            f"LD_PRELOAD={self.env.get('LD_PRELOAD', '')} LD_LIBRARY_PATH={self.env.get('LD_LIBRARY_PATH', '')}\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )


def run(argv, libdir, shim=False, env=None, timeout=300, cwd=None, pass_fds=()):
    """Runs argv in a session of its own: at the timeout (or when the test
    is interrupted) the whole group is killed, so that no descendant left
    holding its pipes keeps the test waiting."""
    full_env = child_env(libdir, shim, env)
    p = subprocess.Popen(
        [str(a) for a in argv],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        pass_fds=pass_fds,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired as e:  # a descendant that left the group holds the pipes
            p.wait()
            p.stdout.close()
            p.stderr.close()
            def text(b):  # what communicate read before this timeout: bytes, even in text mode
                return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
            out = f"{text(e.output)}(the rest unread: a descendant outside the process group holds the pipes)"
            err = text(e.stderr)
        raise AssertionError(f"timed out after {timeout}s: {argv}\n{out}\n{err}")
    except BaseException:  # Ctrl-C reaches pytest, not the program's own session
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    return Run([str(a) for a in argv], p.returncode, out, err, p.pid, full_env)


def run_ok(argv, libdir, shim=False, env=None, **kw):
    """Run and require exit status 0."""
    r = run(argv, libdir, shim, env, **kw)
    assert r.returncode == 0, r.describe()
    return r


def read_log(path):
    """The routing log's records: one JSON object per line, every line
    terminated; each process's header line (docs/log-format.md) left out."""
    return [r for r in read_log_lines(path) if "header" not in r]


def read_log_lines(path):
    """Every line of the routing log, headers included."""
    text = Path(path).read_text()
    assert text.endswith("\n"), f"{path}: last record not terminated"
    return [json.loads(line) for line in text.splitlines()]


def read_log_headers(path):
    """The header line of each process that wrote to the log, in order."""
    return [r for r in read_log_lines(path) if "header" in r]


def stable_lines(r):
    """What a pass-through shim must leave unchanged: everything the client
    prints (statuses, errors, output hashes)."""
    return r.stdout.splitlines()


def assert_record_matches_call(rec, call):
    """The fields the shim decoded are the arguments the client passed."""
    api = call["api"]
    expect = {
        "api": api,
        "m": int(call["m"]),
        "n": int(call["n"]),
        "k": int(call["k"]),
        "batch": int(call["batch"]),
        "transa": call["transa"],
        "transb": call["transb"],
        "a_type": call["a"],
        "b_type": call["b"],
        "c_type": call["c"],
        "compute_type": call["compute"],
        "lda": int(call["lda"]),
        "ldb": int(call["ldb"]),
        "ldc": int(call["ldc"]),
        "stride_a": int(call["stride_a"]),
        "stride_b": int(call["stride_b"]),
        "stride_c": int(call["stride_c"]),
        "status": int(call["status"]),
    }
    if api == "cublasLtMatmul":
        # D has its own descriptor (the same layout as C in these calls).
        expect["d_type"] = call["c"]
        expect["ldd"] = int(call["ldc"])
        expect["epilogue"] = call["epilogue"]
        expect["scale_type"] = "fp32"
        # cuBLASLt's bias defaults to D's type; no bias pointer, no key.
        expect["bias_type"] = call["c"] if "bias" in call["epilogue"] else None
        assert "algo" not in rec, rec
    else:
        # The GemmEx family writes C: no separate D (docs/log.md: "d_type only
        # where D is separate", "ldd for Lt"), no epilogue, bias or scale type.
        for key in ("d_type", "ldd", "epilogue", "scale_type", "bias_type"):
            assert key not in rec, (key, rec)
        # What the client passes (PyTorch's choice): DEFAULT for fp32, else
        # DEFAULT_TENSOR_OP.
        expect["algo"] = -1 if call["a"] == "fp32" else 99
    got = {key: rec.get(key) for key in expect}
    assert got == expect, f"record {rec}\ncall {call}"


def standin_counts(path):
    """STANDIN_COUNTS file: 'name count' lines, summed per name."""
    counts = {}
    for line in Path(path).read_text().splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            counts[words[0]] = counts.get(words[0], 0) + int(words[1])
    return counts


def require_built(paths):
    missing = [str(p) for p in paths if not Path(p).exists()]
    assert not missing, "not built (run `make test` or `make integration`): " + ", ".join(missing)


# ---- dlsym probe --------------------------------------------------------------
PROBE = CLIENT_DIR / "dlsym_probe"
PROBE_SAME_LINES = 18


def probe(libdir, shim, env=None):
    """dlsym_probe's answers: label -> (same|hooked, 'result=... error=...')."""
    r = run_ok([PROBE, "libcublas.so.13"], libdir, shim=shim, env=env)
    assert r.stderr == "", r.describe()
    return {w[2]: (w[1], " ".join(w[3:])) for w in r.lines("probe")}


def check_dlsym_probe(libdir):
    """The probe's answers with the shim equal those without, except the
    one lookup of a hooked name on a cuBLAS handle, which GEMMSHIM_DLSYM=0
    restores too."""
    without = probe(libdir, False)
    with_shim = probe(libdir, True)
    off = probe(libdir, True, {"GEMMSHIM_DLSYM": "0"})
    same = {k: v for k, v in without.items() if v[0] == "same"}
    assert len(same) == PROBE_SAME_LINES, without
    assert {k: with_shim[k] for k in same} == same
    assert {k: off[k] for k in same} == same
    # What the answers are, so that "same" cannot mean "equally wrong".
    assert same["main_next_probe_target"][1] == "result=libprobe_first.so:probe_target error=NULL"
    assert same["first_next_probe_target"][1] == "result=libprobe_second.so:probe_target error=NULL"
    assert same["second_next_probe_target"][1].startswith("result=NULL error=")
    assert "libprobe_second.so: undefined symbol: probe_target" in same["second_next_probe_target"][1]
    assert same["main_default_probe_target"][1] == "result=dlsym_probe:probe_target error=NULL"
    assert same["first_default_probe_target"][1] == "result=dlsym_probe:probe_target error=NULL"
    assert "libprobe_first.so: undefined symbol: probe_no_such_symbol" in same["first_next_missing"][1]
    assert "libprobe_second.so: undefined symbol: probe_no_such_symbol" in same["handle_second_missing"][1]
    assert same["first_next_cublasGemmEx"][1] == "result=libcublas.so.13:cublasGemmEx error=NULL"
    assert same["first_next_cublasLtMatmul"][1] == "result=libcublasLt.so.13:cublasLtMatmul error=NULL"
    assert same["main_default_cublasGemmEx_is_direct"][1] == "result=1"
    assert same["dlerror_after_success"][1] == "result=NULL"
    assert same["dlerror_read_twice"][1] == "result=set,NULL"
    hooked = "handle_cublas_cublasGemmEx"
    assert without[hooked] == ("hooked", "result=libcublas.so.13:cublasGemmEx error=NULL")
    assert with_shim[hooked] == ("hooked", f"result={SHIM.name}:cublasGemmEx error=NULL")
    assert off[hooked] == without[hooked]
