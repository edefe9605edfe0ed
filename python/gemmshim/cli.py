"""The `gemmshim` console script of the wheel.

The launcher proper is a C program (launcher/ in the source tree) shipped
in this package's _native folder beside libgemmshim.so: it checks the
options and the policy file with the shim's own code and execs the
command, so the command keeps the pid, exit status and signals it would
have had. This script only execs it; `gemmshim report` runs here, in the
interpreter the package is installed in.
"""
import importlib
import importlib.util
import os
import sys
from pathlib import Path

_NATIVE = Path(__file__).resolve().parent / "_native"


def launcher_path():
    """The C launcher shipped with this package."""
    return _NATIVE / "gemmshim"


def library_path():
    """libgemmshim.so, for LD_PRELOAD."""
    return _NATIVE / "libgemmshim.so"


def _summarize_log():
    """The routing-log summary that `report` falls back on: shipped in the
    wheel and the install as gemmshim._summarize_log, or the source tree's
    scripts/summarize_log.py."""
    try:
        return importlib.import_module("gemmshim._summarize_log")
    except ModuleNotFoundError as e:
        if e.name != "gemmshim._summarize_log":
            raise
    script = Path(__file__).resolve().parents[2] / "scripts" / "summarize_log.py"
    if not script.is_file():
        return None
    spec = importlib.util.spec_from_file_location("gemmshim_summarize_log", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def report_main(argv):
    """`gemmshim report ARGS...`: gemmshim.report.main(argv) where that
    module exists; until then the routing-log summary."""
    try:
        report = importlib.import_module("gemmshim.report")
    except ModuleNotFoundError as e:
        if e.name != "gemmshim.report":
            raise
        report = None
    sys.argv[0] = "gemmshim report"  # what argparse names in usage lines
    if report is not None:
        return report.main(argv)
    fallback = _summarize_log()
    if fallback is None:
        print("gemmshim report: unavailable: this installation has neither the gemmshim.report module "
              "nor summarize_log.py", file=sys.stderr)
        return 2
    print("gemmshim report: gemmshim.report is not in this installation; summarizing with summarize_log.py",
          file=sys.stderr)
    return fallback.main(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
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
