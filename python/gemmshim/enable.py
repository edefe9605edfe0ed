"""gemmshim.enable(): the shim inside a running Python process.

A notebook's kernel is started before any code of the user's runs, so there
is no LD_PRELOAD to set. Loading libgemmshim.so with RTLD_GLOBAL before the
framework's CUDA libraries does the same job: the framework library loaded
afterwards (libtorch_cuda.so, dlopen'ed by `import torch`) looks symbols up
in the global scope before its own dependencies (dlopen(3), "symbol
resolution"), so its cublasGemmEx binds to the shim's. Loaded after cuBLAS,
the shim would catch nothing and say nothing: enable() refuses that.

The settings are checked as the launcher checks them (`gemmshim check`)
before anything is loaded; the library reads them once, at load.
"""
import ctypes
import os
import re
import subprocess
import warnings
from pathlib import Path

from .cli import launcher_path, library_path

# What loads cuBLAS or the driver's GEMM libraries (a process that has any
# of them mapped is too late for the shim).
CUDA_LIBS = re.compile(r"/lib(cublas|cublasLt)\.so[.0-9]*$")
SHIM_LIB = re.compile(r"/libgemmshim\.so$")
UNKNOWN = re.compile(r"^gemmshim: warning: (GEMMSHIM_[A-Z0-9_]+) is not a variable the shim reads")


class EnableError(RuntimeError):
    """gemmshim.enable() could not put the shim in this process."""


def _mapped(pattern):
    """Paths of the objects this process has mapped that match pattern."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return []
    return sorted(p for p in paths if pattern.search(p))


def _value(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return str(v)


def settings(mode=None, log=None, **options):
    """The GEMMSHIM_* variables enable(mode, log, **options) sets: each
    keyword is the variable's name after GEMMSHIM_, in lower case
    (fp8_format='hybrid' -> GEMMSHIM_FP8_FORMAT=hybrid); True/False are
    1/0; a relative log path is made absolute, as the launcher does."""
    out = {}
    if mode is not None:
        out["GEMMSHIM_MODE"] = _value(mode)
    if log is not None:
        out["GEMMSHIM_LOG"] = os.path.abspath(_value(log))
    for key, v in options.items():
        if v is not None:
            out["GEMMSHIM_" + key.upper()] = _value(v)
    return out


def check(env, launcher=None):
    """Run `gemmshim check` on env; returns (ok, problems, warnings) as lists
    of the launcher's lines."""
    exe = Path(launcher) if launcher else launcher_path()
    if not os.access(exe, os.X_OK):
        raise EnableError(f"the launcher {exe} is missing; expected it beside the library (a wheel's _native "
                          "folder, or the build folder)")
    r = subprocess.run([str(exe), "check"], env=env, capture_output=True, text=True)
    lines = [l for l in r.stderr.splitlines() if l]
    warned = [l for l in lines if l.startswith("gemmshim: warning: ")]
    problems = [l for l in lines if l not in warned]
    return r.returncode == 0, problems, warned


def enable(mode=None, log=None, *, library=None, launcher=None, **options):
    """Load the shim into this process with these settings (see settings());
    call it before `import torch` (or anything that loads cuBLAS), e.g. in a
    notebook's first cell. Returns the library's path.

    Raises TypeError for an option the shim does not have, ValueError for a
    bad setting or file (the launcher's message), EnableError when cuBLAS is
    already loaded or the shim is loaded with other settings."""
    lib = Path(library) if library else library_path()
    exe = Path(launcher) if launcher else (lib.parent / "gemmshim" if library else None)
    wanted = settings(mode, log, **options)
    loaded = _mapped(SHIM_LIB)
    if loaded:
        same = all(os.environ.get(k) == v for k, v in wanted.items())
        if same:
            return loaded[0]
        raise EnableError(f"the shim is already loaded ({loaded[0]}) with other settings; it reads them once, at "
                          "load: restart the Python process (the notebook's kernel) and call enable() first")
    cublas = _mapped(CUDA_LIBS)
    if cublas:
        raise EnableError(f"cuBLAS is already loaded ({cublas[0]}), so the shim would catch none of its calls; "
                          "restart the process (the notebook's kernel) and call gemmshim.enable() before `import "
                          "torch` (or any library that loads CUDA), or start the program under the launcher: "
                          "gemmshim [options] -- python train.py")
    env = dict(os.environ, **wanted)
    ok, problems, warned = check(env, exe)
    mine = {f"GEMMSHIM_{k.upper()}" for k in options} | set(wanted)
    for line in warned:
        m = UNKNOWN.match(line)
        if m and m.group(1) in mine:
            name = m.group(1)[len("GEMMSHIM_"):].lower()
            raise TypeError(f"enable() got an option the shim does not have: {name!r} "
                            f"({line[len('gemmshim: warning: '):]})")
        warnings.warn(line[len("gemmshim: "):], stacklevel=2)
    if not ok:
        raise ValueError("; ".join(p[len("gemmshim: "):] if p.startswith("gemmshim: ") else p for p in problems))
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        ctypes.CDLL(str(lib), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    except OSError as e:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        raise EnableError(f"cannot load {lib}: {e}") from None
    return str(lib)
