"""The report's command line: main (the arguments, reading, output) and run.

Reads every log once, feeding the summary, the expectations, the trace
and the plot data as records stream by, then prints or writes them. The
usage text is the package's docstring (gemmshim/report/__init__.py).
"""

import argparse
import glob
import json
import os
import sys

from . import __doc__ as USAGE
from .expect import Expectations, count_failures, parse_expectation, step_starts
from .plot import PlotData, install_hint, write_plot
from .read import BadLines, expand_logs, read_records
from .summary import Summary, print_summary, print_table, standin_devices
from .trace import TraceWriter, trace_origin
from .verdict import verdict_lines

PROG = "gemmshim report"
# Why a log may not exist, said under the missing file's name: log.c creates
# the file at the first record.
NO_LOG = ("a run that made no cuBLAS call (a CPU-only framework, or a GEMM-free program) writes no log; "
          "check GEMMSHIM_LOG's path and its %p/%r placeholders")



def processes(bad):
    """One row per process header the logs hold, in file order."""
    out = []
    for path, b in bad.items():
        for h in b.headers:
            devices = h.get("devices") if isinstance(h.get("devices"), list) else []
            out.append({"file": path, "pid": h.get("pid"), "rank": str(h.get("rank", "")),
                        "host": str(h.get("host", "")), "command": str(h.get("command", "")),
                        "devices": [d for d in devices if isinstance(d, dict)]})
    return out

def process_name(path, index):
    return f"{os.path.basename(path)} (log {index})"


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", metavar="LOG", help="routing log files or globs")
    ap.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace event file (Perfetto, chrome://tracing)")
    ap.add_argument("--plot", metavar="OUT.png", help="write a picture of where the time went (matplotlib)")
    ap.add_argument("--json", metavar="OUT", help="write the summary as JSON to OUT ('-': stdout, no tables)")
    ap.add_argument("--standin", action="store_true",
                    help="the logs come from the CPU stand-in (make demo, the tests) though they have no header line "
                         "saying so: their times are CPU emulation, and the tables and plot say so")
    ap.add_argument("--top", type=int, default=10, help="rows of the shape, site and reason tables (default 10)")
    ap.add_argument("--steps", metavar="TRAIN_JSON", help="train.py output whose summary line has step_start_ns")
    ap.add_argument("--expect", action="append", default=[], type=parse_expectation,
                    metavar="API=ROUTE[/BACKEND][:DB]",
                    help="every call of API ran ROUTE (API may be '*'); with :DB, every compared call of API "
                         "(GEMMSHIM_COMPARE) measured sqnr_db >= DB, and at least one was compared; repeatable")
    ap.add_argument("--expect-some", action="append", default=[], type=parse_expectation,
                    metavar="API=ROUTE[/BACKEND]", help="at least one call of API ran ROUTE; repeatable")
    ap.add_argument("--expect-some-recipe", action="append", default=[], metavar="RECIPE",
                    help="at least one call ran the fp8 recipe RECIPE (its \"recipe\" field); repeatable")
    ap.add_argument("--expect-counts", action="append", default=[], metavar="FILE",
                    help="a bench's JSON lines: the logs hold exactly the calls its {\"kind\":\"calls\"} record counts")
    ap.add_argument("--expect-steady-sites", metavar="ROUTE",
                    help="with --steps: the same number of ROUTE sites in every step after step 0")
    args = ap.parse_args(argv)
    if args.top < 1:
        ap.error(f"--top: expected a positive number of rows, got {args.top}")
    if any(e[3] is not None for e in args.expect_some):
        ap.error("--expect-some: a minimum SQNR (':DB') goes with --expect")
    if args.expect_steady_sites and not args.steps:
        ap.error("--expect-steady-sites needs --steps")

    starts = None
    if args.steps:
        try:
            starts = step_starts(args.steps)
        except OSError as e:
            print(f"{PROG}: {args.steps}: {e.strerror}", file=sys.stderr)
            return 2
        if not starts:
            print(f"{PROG}: {args.steps} has no summary line with step_start_ns", file=sys.stderr)
            return 2

    files = expand_logs(args.logs)
    summary = Summary(starts)
    expectations = Expectations(args.expect, args.expect_some, args.expect_some_recipe)
    checking = bool(args.expect or args.expect_some or args.expect_some_recipe)
    plot = PlotData() if args.plot else None
    trace = None
    if args.trace:
        try:
            trace = TraceWriter(args.trace, trace_origin(files))
        except OSError as e:
            print(f"{PROG}: --trace {args.trace}: {e.strerror}", file=sys.stderr)
            return 2
    bad = {}
    unreadable = []
    missing = False
    for index, path in enumerate(files, 1):
        bad[path] = BadLines()
        if trace:
            trace.process(index, process_name(path, index))
        try:
            for lineno, rec in read_records(path, bad[path]):
                if not summary.add(rec):
                    bad[path].add(lineno, "not a routing record (a field is a list or an object)")
                    continue
                if checking:
                    expectations.add(rec)
                if trace:
                    trace.add(index, rec)
                if plot:
                    plot.add(rec)
        except FileNotFoundError:
            unreadable.append(path)
            missing = True
            what = "no file matches" if glob.has_magic(path) else "no such file:"
            print(f"{PROG}: {what} {path}", file=sys.stderr)
        except OSError as e:
            unreadable.append(path)
            print(f"{PROG}: {path}: {e.strerror}", file=sys.stderr)
    if missing:
        print(f"{PROG}: {NO_LOG}", file=sys.stderr)
    if trace:
        trace.close()
    if len(unreadable) == len(files):
        # Nothing to summarise: no tables of "(none)" under the errors.
        return 2

    s = summary.as_json(args.top)
    s["files"] = files
    s["unreadable_files"] = unreadable
    s["bad_lines"] = {p: {"count": b.count, "first_line": b.first, "why": b.first_why} for p, b in bad.items() if b.count}
    s["records_lost"] = {p: b.lost for p, b in bad.items() if b.lost}
    s["processes"] = processes(bad)
    s["standin"] = args.standin or bool(standin_devices(s["processes"]))
    if starts:
        s["steps"] = summary.steps_json()

    failures = expectations.failures()
    for path in args.expect_counts:
        try:
            failures += count_failures(path, summary.api_calls())
        except (OSError, ValueError) as e:
            failures.append(f"{path}: cannot read the bench's counts ({e})")
    if args.expect_steady_sites:
        route = args.expect_steady_sites
        counts = [st["sites_by_route"].get(route, 0) for st in s["steps"][1:]]
        if not counts or min(counts) == 0 or len(set(counts)) != 1:
            failures.append(f"{route} sites per step are not steady after step 0: {counts}")
    s["failures"] = failures

    out = sys.stderr if args.json == "-" else sys.stdout
    if args.json != "-":
        print_summary(out, s, files, bad, args.top, verdict_lines(s))
        if len(s["processes"]) > 1:
            print_table(out, "processes (the shim's header line of each):",
                        [(p["file"], p["pid"], p["rank"], p["host"], p["command"][:60]) for p in s["processes"]],
                        ("file", "pid", "rank", "host", "command"))
        if starts:
            print_table(out, "per training step:",
                        [(st["step"], st["calls"], " ".join(f"{k}={v}" for k, v in sorted(st["by_route"].items())),
                          " ".join(f"{k}={v}" for k, v in sorted(st["sites_by_route"].items()))) for st in s["steps"]],
                        ("step", "calls", "calls by route", "sites by route"))
    if args.plot:
        try:
            write_plot(args.plot, s, summary.as_json(1 << 30)["shapes"], plot, args.top)
        except ImportError as e:
            failures.append(f"--plot needs matplotlib and numpy ({e}); {install_hint()}")
        except OSError as e:
            failures.append(f"--plot {args.plot}: {e.strerror}")
    if args.json == "-":
        json.dump(s, sys.stdout, indent=1, allow_nan=False)
        print()
    elif args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(s, f, indent=1, allow_nan=False)
    for msg in failures:
        print(f"FAIL {msg}", file=out)
    if (args.expect or args.expect_some or args.expect_some_recipe or args.expect_counts
            or args.expect_steady_sites) and not failures:
        print("expectations: all met", file=out)
    if args.trace and args.json != "-":
        print(f"trace: {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)", file=out)
    if args.plot and args.json != "-" and not any(f.startswith("--plot") for f in failures):
        print(f"plot: {args.plot}", file=out)
    if unreadable and not failures:
        return 2
    return 1 if failures else 0


def run(argv=None):
    """main, for a command line: a reader that stops reading (`| head`)
    ends the report quietly, and a file name that is not UTF-8 (Python
    holds its bytes as surrogates) is printed as its bytes, as the C
    locale does, not refused by a UTF-8 locale's strict stdout."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure and sys.stdout.errors == "strict":
        reconfigure(errors="surrogateescape")
    try:
        return main(argv)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
