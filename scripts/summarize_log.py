#!/usr/bin/env python3
"""Summarize a gemmshim routing log (GEMMSHIM_LOG: one JSON object per call).

Prints calls per entry point, route and backend; why calls did not take the
route that was decided (declines) or were decided native; call sites per
route; and, given the step start times of a training run, calls and sites
per step. Optional expectations turn it into a check (exit 1 when one fails):

  --expect API=ROUTE[/BACKEND]       every call of API ran ROUTE (and a
                                     backend naming BACKEND); API may be '*'
  --expect-some API=ROUTE[/BACKEND]  at least one call of API did
  --expect-counts FILE               every {"kind":"calls"} record in FILE (a
                                     bench's JSON lines) gives API -> N: the
                                     log must hold exactly N calls of API
  --expect-steady-sites ROUTE        with --steps: after the first step, every
                                     step used the same number of ROUTE sites

Usage:
  summarize_log.py LOG [LOG ...] [--steps TRAIN_JSON] [--json OUT] [expectations]

LOG may be a glob ('/tmp/gs-*.jsonl'). TRAIN_JSON is a file whose last line
holding "step_start_ns" is scripts/train.py's summary. A backend matches when
it equals BACKEND or contains it (case-insensitive).
"""
import argparse
import collections
import glob
import json
import os
import sys


def read_records(patterns):
    records, bad = [], 0
    files = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        files.extend(found if found else [pattern])
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError:
                        bad += 1
        except OSError as e:
            print(f"summarize_log: {path}: {e.strerror}", file=sys.stderr)
    return files, records, bad


def backend_matches(backend, want):
    if want is None:
        return True
    b = (backend or "").lower()
    return b == want.lower() or want.lower() in b


def parse_expectation(text):
    """'API=ROUTE[/BACKEND]' -> (api, route, backend or None)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected API=ROUTE[/BACKEND], got {text!r}")
    api, rhs = text.split("=", 1)
    route, _, backend = rhs.partition("/")
    return api, route, backend or None


def api_matches(rec, api):
    return api == "*" or rec.get("api") == api


def step_starts(path):
    starts = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{") and "step_start_ns" in line:
                try:
                    starts = json.loads(line)["step_start_ns"]
                except (json.JSONDecodeError, KeyError):
                    pass
    if not starts:
        raise SystemExit(f"summarize_log: {path} has no summary line with step_start_ns")
    return starts


def per_step(records, starts):
    """Records bucketed by training step: step i holds the calls made from
    its start to the next step's start (train.py synchronises each step)."""
    buckets = [[] for _ in starts]
    for rec in records:
        t = rec.get("t_ns", 0)
        idx = None
        for i, s in enumerate(starts):
            if t >= s:
                idx = i
            else:
                break
        if idx is not None:
            buckets[idx].append(rec)
    return buckets


def summarize(records):
    by_route = collections.Counter()
    declines = collections.Counter()
    reasons = collections.Counter()
    statuses = collections.Counter()
    sites = collections.defaultdict(set)
    for r in records:
        api, route, backend = r.get("api", "?"), r.get("route", "?"), r.get("backend") or "-"
        by_route[(api, route, backend)] += 1
        if r.get("decided") != route:
            declines[(api, r.get("decided", "?"), route, r.get("reason", ""))] += 1
        else:
            reasons[(route, backend, r.get("reason", ""))] += 1
        statuses[r.get("status_name", str(r.get("status")))] += 1
        sites[route].add(r.get("site"))
    return by_route, declines, reasons, statuses, sites


def print_table(title, rows, header):
    print(title)
    if not rows:
        print("  (none)")
        return
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths)
    print(fmt.format(*header))
    for row in rows:
        print(fmt.format(*[str(x) for x in row]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", help="routing log files or globs")
    ap.add_argument("--steps", help="train.py output whose summary line has step_start_ns")
    ap.add_argument("--json", help="write the summary as JSON to this file")
    ap.add_argument("--expect", action="append", default=[], type=parse_expectation, metavar="API=ROUTE[/BACKEND]",
                    help="every call of API ran ROUTE (API may be '*'); repeatable")
    ap.add_argument("--expect-some", action="append", default=[], type=parse_expectation,
                    metavar="API=ROUTE[/BACKEND]", help="at least one call of API ran ROUTE; repeatable")
    ap.add_argument("--expect-counts", action="append", default=[], metavar="FILE",
                    help="a bench's JSON lines: the log holds exactly the calls its {\"kind\":\"calls\"} record counts")
    ap.add_argument("--expect-steady-sites", metavar="ROUTE",
                    help="with --steps: the same number of ROUTE sites in every step after step 0")
    ap.add_argument("--top", type=int, default=8, help="reasons shown per table (default 8)")
    args = ap.parse_args(argv)

    files, records, bad = read_records(args.logs)
    print(f"routing log: {len(records)} calls from {len(files)} file(s)" + (f", {bad} unreadable lines" if bad else ""))
    by_route, declines, reasons, statuses, sites = summarize(records)
    print_table("calls by entry point, route, backend:",
                [(a, r, b, n) for (a, r, b), n in sorted(by_route.items())], ("api", "route", "backend", "calls"))
    print_table("declined (decided one route, ran another):",
                [(a, d, ran, n, reason) for (a, d, ran, reason), n in declines.most_common(args.top)],
                ("api", "decided", "ran", "calls", "reason"))
    print_table("ran as decided, reasons:",
                [(route, b, n, reason) for (route, b, reason), n in reasons.most_common(args.top)],
                ("route", "backend", "calls", "reason"))
    print_table("statuses:", sorted(statuses.items()), ("status", "calls"))
    print_table("call sites per route:", [(r, len(s)) for r, s in sorted(sites.items())], ("route", "sites"))

    summary = {
        "calls": len(records),
        "by_api_route_backend": [
            {"api": a, "route": r, "backend": None if b == "-" else b, "calls": n} for (a, r, b), n in sorted(by_route.items())
        ],
        "declines": [{"api": a, "decided": d, "ran": ran, "reason": reason, "calls": n}
                     for (a, d, ran, reason), n in declines.items()],
        "sites": {r: len(s) for r, s in sites.items()},
        "statuses": dict(statuses),
    }

    failures = []
    if args.steps:
        starts = step_starts(args.steps)
        buckets = per_step(records, starts)
        rows, steps_json = [], []
        for i, recs in enumerate(buckets):
            calls = collections.Counter(r.get("route") for r in recs)
            nsites = {route: len({r.get("site") for r in recs if r.get("route") == route}) for route in calls}
            rows.append((i, len(recs), " ".join(f"{k}={v}" for k, v in sorted(calls.items())),
                         " ".join(f"{k}={v}" for k, v in sorted(nsites.items()))))
            steps_json.append({"step": i, "calls": len(recs), "by_route": dict(calls), "sites_by_route": nsites})
        print_table("per training step:", rows, ("step", "calls", "calls by route", "sites by route"))
        summary["steps"] = steps_json
        if args.expect_steady_sites:
            route = args.expect_steady_sites
            counts = [s["sites_by_route"].get(route, 0) for s in steps_json[1:]]
            if not counts or min(counts) == 0 or len(set(counts)) != 1:
                failures.append(f"{route} sites per step are not steady after step 0: {counts}")

    for api, route, backend in args.expect:
        recs = [r for r in records if api_matches(r, api)]
        off = [r for r in recs if r.get("route") != route or not backend_matches(r.get("backend"), backend)]
        if not recs:
            failures.append(f"--expect {api}={route}: no call of {api} in the log")
        elif off:
            why = collections.Counter((r.get("route"), r.get("backend"), r.get("reason")) for r in off).most_common(3)
            failures.append(f"--expect {api}={route}{'/' + backend if backend else ''}: {len(off)} of {len(recs)} "
                            f"calls did not; e.g. " + "; ".join(f"{n}x route={r} backend={b} reason={m!r}"
                                                                for (r, b, m), n in why))
    for api, route, backend in args.expect_some:
        recs = [r for r in records if api_matches(r, api)]
        if not any(r.get("route") == route and backend_matches(r.get("backend"), backend) for r in recs):
            failures.append(f"--expect-some {api}={route}{'/' + backend if backend else ''}: none of {len(recs)} "
                            f"calls of {api} did")
    for path in args.expect_counts:
        logged = collections.Counter(r.get("api") for r in records)
        found = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if '"kind":"calls"' not in line.replace(" ", ""):
                    continue
                found = True
                rec = json.loads(line)
                for api, n in rec.items():
                    if api in ("kind", "pair"):
                        continue
                    if logged.get(api, 0) != n:
                        failures.append(f"{path}: the program made {n} calls of {api}, the log holds {logged.get(api, 0)}")
        if not found:
            failures.append(f"{path}: no {{\"kind\":\"calls\"}} record")

    summary["failures"] = failures
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    for msg in failures:
        print(f"FAIL {msg}")
    if (args.expect or args.expect_some or args.expect_counts or args.expect_steady_sites) and not failures:
        print("expectations: all met")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into head: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
