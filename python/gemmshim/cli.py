"""The `gemmshim` console script of the wheel.

The launcher proper is a C program (launcher/ in the source tree) shipped
in this package's _native folder beside libgemmshim.so: it checks the
options and the policy file with the shim's own code and execs the
command, so the command keeps the pid, exit status and signals it would
have had. This script only execs it; `gemmshim report` (gemmshim.report)
runs here, in the interpreter the package is installed in.
"""
import os
import sys
from pathlib import Path

_PKG = Path(__file__).resolve().parent
_NATIVE = _PKG / "_native"


def _layouts():
    """(library, launcher) where each way of installing puts them: the
    wheel's _native folder; `make install`'s PREFIX/lib/gemmshim/ and
    PREFIX/bin/ (this package in PREFIX/lib/gemmshim/python/); the source
    tree's build/ (this package in python/)."""
    yield _NATIVE / "libgemmshim.so", _NATIVE / "gemmshim"
    if len(_PKG.parents) > 3:
        yield _PKG.parents[1] / "libgemmshim.so", _PKG.parents[3] / "bin" / "gemmshim"
    yield _PKG.parents[1] / "build" / "libgemmshim.so", _PKG.parents[1] / "build" / "gemmshim"


def _installed():
    for lib, exe in _layouts():
        if lib.exists():
            return lib, exe
    return next(_layouts())


def launcher_path():
    """The C launcher of this installation."""
    return _installed()[1]


def library_path():
    """libgemmshim.so, for LD_PRELOAD."""
    return _installed()[0]


def report_main(argv):
    """`gemmshim report ARGS...`: gemmshim.report, in this interpreter."""
    from gemmshim import report

    return report.run(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    if argv[:1] == ["jupyter"]:
        from gemmshim import jupyter

        return jupyter.main(argv[1:])
    exe = launcher_path()
    if not os.access(exe, os.X_OK):
        print(f"gemmshim: the launcher {exe} is missing from this installation; expected it in the wheel",
              file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["gemmshim", *argv])


if __name__ == "__main__":
    sys.exit(main())
