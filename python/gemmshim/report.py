"""gemmshim report: what a routing log (GEMMSHIM_LOG) says about where GEMM time went.

  gemmshim report LOG [LOG ...] [--trace OUT.json] [--plot OUT.png] [--json OUT]
                  [--top N] [--steps TRAIN_JSON] [expectations]

LOG may be a glob ('/tmp/gs-*.jsonl'): one file per process, as `%p` or `%r`
in GEMMSHIM_LOG gives for every rank of a torchrun job. Without options it
prints summary tables: calls, host time (`dur_ns`) and GPU time (`gpu_ns`,
with GEMMSHIM_LOG_GPU_TIME=1) by entry point, route, backend and reason; the
top shapes and call sites by GPU time (host time where the log has no GPU
time); and, for logs written with GEMMSHIM_COMPARE=1, each route's time per
shape and GPU next to native's, over the same calls: those whose record has
both the route's GPU time and the native run's (`native_gpu_ns`).

  --trace OUT.json   the calls in the Chrome trace event format, for
                     ui.perfetto.dev or chrome://tracing: one track per
                     process and thread (host time), one per device and
                     stream (GPU time; the per-thread stream: per thread)
  --plot OUT.png     time by route and shape, and time per call over the run
  --json OUT         the summary as JSON ('-': on stdout, tables not printed)

The logs are read one line at a time: without --plot, memory stays bounded
by the number of distinct shapes, sites and reasons, not by the log's size.
A line that is not a routing record (not JSON, a number that is not finite
or beyond 64 bits, longer than 64 Ki characters) is counted (with the first
such line's number) and skipped.

Expectations turn the report into a check (exit 1 when one fails):

  --expect API=ROUTE[/BACKEND]       every call of API ran ROUTE (and a
                                     backend naming BACKEND); API may be '*'
  --expect-some API=ROUTE[/BACKEND]  at least one call of API did
  --expect-counts FILE               every {"kind":"calls"} record in FILE (a
                                     bench's JSON lines) gives API -> N: the
                                     logs must hold exactly N calls of API
  --expect-steady-sites ROUTE        with --steps: after the first step, every
                                     step used the same number of ROUTE sites

TRAIN_JSON is a file whose last line holding "step_start_ns" is
scripts/train.py's summary; calls are then also counted per training step.
A backend matches when it equals BACKEND or contains it (case-insensitive).
"""

import argparse
import bisect
import collections
import glob
import json
import os
import sys

PROG = "gemmshim report"


# ---- reading ------------------------------------------------------------------
def expand_logs(patterns):
    """Each pattern's matches in name order; a pattern that matches nothing
    is kept as it is, so opening it reports the missing file."""
    files = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        files.extend(found if found else [pattern])
    return files


class BadLines:
    """Lines of one file that are not routing records: how many, and the
    first; and the records the shim's writer said it lost (its
    {"event":"records_lost"} lines)."""

    def __init__(self):
        self.count = 0
        self.first = None
        self.first_why = None
        self.lost = 0

    def add(self, lineno, why):
        self.count += 1
        if self.first is None:
            self.first, self.first_why = lineno, why


class BadNumber(ValueError):
    """A number in a line that no routing record holds (the why of the bad line)."""


# log.c writes integers of at most 64 bits. A number beyond them, or one
# that is not finite (1e400 parses to infinity in Python; NaN and Infinity
# are not JSON at all, RFC 8259 section 6), is no record's: taken, it would
# make the sums and the trace's ts and dur infinite, and the trace and
# --json output, which must be JSON, invalid.
NUMBER_LIMIT = 1 << 64


def _finite_float(text):
    x = float(text)
    if not -NUMBER_LIMIT < x < NUMBER_LIMIT:  # False for NaN too
        raise BadNumber(f"a number out of range ({text[:40]})")
    return x


def _no_constant(name):
    raise BadNumber(f"{name} is not a JSON number")


_raw_decode = json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant).raw_decode
# The fields the report adds up or draws: an integer among them is held to
# log.c's 64 bits as well (floats are, as they are parsed).
SUMMED_FIELDS = ("t_ns", "dur_ns", "gpu_ns", "gpu_ns_kernels", "native_gpu_ns", "gpu_t_ns")
# The longest line read: log.c's longest record is 4 KiB (LOG_RECORD_MAX);
# a longer line is no record, and is skipped to its end without being held,
# so a file with no newline at all (a disk filled with NUL bytes) is read in
# bounded memory.
MAX_LINE = 1 << 16


def read_records(path, bad):
    """Yield the routing records of one file, one line at a time. A record
    is a JSON object with at least "api" and "route" strings and no number
    out of range; anything else is counted in `bad` and skipped."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        readline = f.readline
        lineno = 0
        while True:
            line = readline(MAX_LINE)
            if not line:
                return
            lineno += 1
            if len(line) == MAX_LINE and line[-1] != "\n":
                while True:  # the rest of the line, MAX_LINE at a time
                    rest = readline(MAX_LINE)
                    if not rest or rest[-1] == "\n":
                        break
                bad.add(lineno, f"longer than {MAX_LINE} characters")
                continue
            try:
                rec, end = _raw_decode(line)
                if end < len(line) - 1 and line[end:].strip():
                    raise ValueError("more after the object")
            except BadNumber as e:
                bad.add(lineno, str(e))
                continue
            except ValueError:
                if not line.strip():
                    continue
                bad.add(lineno, "not JSON" if line.endswith("\n") else "cut off (no newline at the end)")
                continue
            if rec.__class__ is dict:
                g = rec.get
                big = None
                for k in SUMMED_FIELDS:
                    v = g(k)
                    if v.__class__ is int and (v >= NUMBER_LIMIT or v <= -NUMBER_LIMIT):
                        big = k
                        break
                if big:
                    bad.add(lineno, f"a number out of range ({big})")
                    continue
            if rec.__class__ is dict and rec.get("event") == "records_lost" and isinstance(rec.get("lost"), int):
                bad.lost += rec["lost"]
                continue
            if rec.__class__ is not dict or rec.get("api").__class__ is not str \
                    or rec.get("route").__class__ is not str:
                bad.add(lineno, "not a routing record (no api or route)")
                continue
            yield lineno, rec


# ---- what a record is ---------------------------------------------------------
def num(rec, key):
    """A non-negative number field, else None (absent, null, or not a number)."""
    v = rec.get(key)
    if v.__class__ is int and v >= 0:
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
        return v
    return None


def types_text(a, b, c, d):
    """'bf16' when A, B, C (and D) agree, else 'A,B->C' ('->C->D' for a
    separate D of another type)."""
    if d is None:
        d = c
    if a == b == c == d:
        return str(a)
    ab = a if a == b else f"{a},{b}"
    out = c if c == d else f"{c}->{d}"
    return f"{ab}->{out}"


def types_of(rec):
    return types_text(rec.get("a_type", "?"), rec.get("b_type", "?"), rec.get("c_type", "?"), rec.get("d_type"))


def shape_text(m, n, k, batch, types):
    """'4096x4096x4096 bf16', 'MxNxK batch B types' for batched calls: the
    same text the shim names its NVTX ranges with."""
    s = f"{m}x{n}x{k}"
    if batch not in (1, None):
        s += f" batch {batch}"
    return f"{s} {types}"


def shape_of(rec):
    return shape_text(rec.get("m", "?"), rec.get("n", "?"), rec.get("k", "?"), rec.get("batch", 1), types_of(rec))


class Tally:
    """Calls, host time, GPU time where measured (and the shim's kernels'
    part of it), and the compared calls (GEMMSHIM_COMPARE): those whose
    record has both the route's GPU time and the native run's, summed
    each, so that route and native are compared over the same calls."""

    __slots__ = ("calls", "host_ns", "gpu_calls", "gpu_ns", "kern_ns", "pairs", "pair_route_ns", "pair_native_ns")

    def __init__(self):
        self.calls = self.host_ns = self.gpu_calls = self.gpu_ns = self.kern_ns = 0
        self.pairs = self.pair_route_ns = self.pair_native_ns = 0

    def merge(self, t):
        self.calls += t.calls
        self.host_ns += t.host_ns
        self.gpu_calls += t.gpu_calls
        self.gpu_ns += t.gpu_ns
        self.kern_ns += t.kern_ns
        self.pairs += t.pairs
        self.pair_route_ns += t.pair_route_ns
        self.pair_native_ns += t.pair_native_ns

    def as_json(self):
        return {"calls": self.calls, "host_ns": self.host_ns, "gpu_calls": self.gpu_calls,
                "gpu_ns": self.gpu_ns, "gpu_ns_kernels": self.kern_ns}


# ---- the summary --------------------------------------------------------------
# Fields of a cell's key: every record that agrees on these is tallied in
# one cell; the tables are sums of cells. Reading a record is then one
# dictionary lookup, and memory grows with distinct sites and reasons only.
CELL_FIELDS = ("api", "route", "backend", "reason", "decided", "status_name", "site",
               "m", "n", "k", "batch", "a_type", "b_type", "c_type", "d_type", "gpu_skipped", "device", "sm")
(C_API, C_ROUTE, C_BACKEND, C_REASON, C_DECIDED, C_STATUS, C_SITE, C_M, C_N, C_K, C_BATCH,
 C_A, C_B, C_C, C_D, C_SKIP, C_DEVICE, C_SM) = range(len(CELL_FIELDS))


def cell_key(r):
    """The record's cell (CELL_FIELDS); unhashable when a field that keys
    the tables is a list or an object (such a record is a bad line)."""
    g = r.get
    return (r["api"], r["route"], g("backend"), g("reason", ""), g("decided", r["route"]),
            g("status_name", str(g("status"))), g("site"), g("m"), g("n"), g("k"), g("batch", 1),
            g("a_type"), g("b_type"), g("c_type"), g("d_type"),
            None if g("gpu_ns") is not None else g("gpu_skipped"), g("device"), g("sm"))


def tallied(r):
    """Whether Summary.add tallies the record (and the trace draws it)."""
    try:
        hash(cell_key(r))
    except TypeError:
        return False
    return True


class Summary:
    def __init__(self, step_starts=None):
        self.calls = 0
        self.cells = {}
        self.step_starts = step_starts
        self.steps = [collections.Counter() for _ in step_starts or ()]
        self.step_sites = [collections.defaultdict(set) for _ in step_starts or ()]

    def add(self, r):
        """Tally one record; False (nothing tallied) when a field that
        keys the tables is not a plain value."""
        g = r.get
        gpu = g("gpu_ns")
        key = cell_key(r)
        try:
            t = self.cells.get(key)
        except TypeError:  # a list or object where a value belongs
            return False
        if t is None:
            t = self.cells[key] = Tally()
        self.calls += 1
        t.calls += 1
        host = g("dur_ns")
        if host.__class__ is not int or host < 0:
            host = num(r, "dur_ns")
        if host is not None:
            t.host_ns += host
        if gpu is not None:
            if gpu.__class__ is not int or gpu < 0:
                gpu = num(r, "gpu_ns")
            if gpu is not None:
                t.gpu_calls += 1
                t.gpu_ns += gpu
                kern = num(r, "gpu_ns_kernels")
                if kern is not None:
                    t.kern_ns += kern
                # A native time without the route's own in the same record
                # (the route's was not measured) has nothing to pair with.
                native = g("native_gpu_ns")
                if native is not None:
                    native = num(r, "native_gpu_ns")
                    if native is not None:
                        t.pairs += 1
                        t.pair_route_ns += gpu
                        t.pair_native_ns += native
        if self.step_starts:
            ts = g("t_ns")
            if isinstance(ts, (int, float)):
                i = bisect.bisect_right(self.step_starts, ts) - 1
                if i >= 0:
                    self.steps[i][key[C_ROUTE]] += 1
                    self.step_sites[i][key[C_ROUTE]].add(key[C_SITE])
        return True

    def group(self, fields):
        """Cells summed over everything but `fields` (a function of the key)."""
        out = collections.defaultdict(Tally)
        for key, t in self.cells.items():
            out[fields(key)].merge(t)
        return out

    def api_calls(self):
        return collections.Counter({a: t.calls for (a,), t in self.group(lambda k: (k[C_API],)).items()})

    def steps_json(self):
        return [{"step": i, "calls": sum(c.values()), "by_route": dict(c),
                 "sites_by_route": {route: len(s) for route, s in self.step_sites[i].items()}}
                for i, c in enumerate(self.steps)]

    def as_json(self, top):
        by_gpu = any(t.gpu_calls for t in self.cells.values())
        sort_key = (lambda t: t.gpu_ns) if by_gpu else (lambda t: t.host_ns)

        def shape(k):
            return shape_text(k[C_M], k[C_N], k[C_K], k[C_BATCH], types_text(k[C_A], k[C_B], k[C_C], k[C_D]))

        route_sites = collections.defaultdict(set)
        shape_sites = collections.defaultdict(set)
        declines = collections.Counter()
        statuses = collections.Counter()
        skipped = collections.Counter()
        for k, t in self.cells.items():
            route_sites[k[C_ROUTE]].add(k[C_SITE])
            shape_sites[(k[C_ROUTE], shape(k))].add(k[C_SITE])
            if k[C_DECIDED] != k[C_ROUTE]:
                declines[(k[C_API], k[C_DECIDED], k[C_ROUTE], k[C_REASON])] += t.calls
            statuses[k[C_STATUS]] += t.calls
            if t.calls > t.gpu_calls:
                skipped[k[C_SKIP] or "not asked for"] += t.calls - t.gpu_calls
        shapes = self.group(lambda k: (k[C_ROUTE], shape(k)))
        sites = self.group(lambda k: (k[C_SITE], k[C_ROUTE], k[C_API], shape(k)))
        # Route versus native "where both were measured": over the calls
        # whose record has both times (a compared call runs the route,
        # then the same GEMM native), never the route's mean over all its
        # calls against the native runs of a few; and per device and GPU
        # (sm), never pooled over logs of different GPUs.
        compare = []
        per_device = self.group(lambda k: (k[C_ROUTE], shape(k), k[C_DEVICE], k[C_SM]))
        for (route, sh, device, sm), t in sorted(per_device.items(), key=_none_last):
            if route == "native" or not t.pairs:
                continue
            rm, nm = t.pair_route_ns / t.pairs, t.pair_native_ns / t.pairs
            compare.append({"route": route, "shape": sh, "device": device, "sm": sm, "calls": t.gpu_calls,
                            "pairs": t.pairs, "route_gpu_ns_mean": rm, "native_gpu_ns_mean": nm,
                            "speedup": nm / rm if rm else None})
        return {
            "calls": self.calls,
            "time_sorted_by": "gpu_ns" if by_gpu else "host_ns",
            "by_api_route_backend": [
                {"api": a, "route": r, "backend": b, **t.as_json()} for (a, r, b), t in
                sorted(self.group(lambda k: (k[C_API], k[C_ROUTE], k[C_BACKEND])).items(), key=_none_last)],
            "by_route_reason": [
                {"route": r, "backend": b, "reason": m, **t.as_json()} for (r, b, m), t in
                sorted(self.group(lambda k: (k[C_ROUTE], k[C_BACKEND], k[C_REASON])).items(),
                       key=lambda kv: (-kv[1].calls, _none_last(kv)))],
            "declines": [{"api": a, "decided": d, "ran": ran, "reason": reason, "calls": n}
                         for (a, d, ran, reason), n in sorted(declines.items(), key=lambda kv: (-kv[1], str(kv[0])))],
            "statuses": dict(statuses),
            "sites": {r: len(s) for r, s in route_sites.items()},
            "shapes": [{"route": r, "shape": s, "sites": len(shape_sites[(r, s)]), **t.as_json()}
                       for (r, s), t in sorted(shapes.items(), key=lambda kv: (-sort_key(kv[1]), str(kv[0])))[:top]],
            "top_sites": [{"site": site, "route": r, "api": a, "shape": s, **t.as_json()}
                          for (site, r, a, s), t in sorted(sites.items(),
                                                           key=lambda kv: (-sort_key(kv[1]), str(kv[0])))[:top]],
            "gpu_not_measured": dict(skipped),
            "compare": compare,
        }


def _none_last(kv):
    """Sort key for tuples that may hold None (a call without a backend)."""
    return tuple((x is None, "" if x is None else str(x)) for x in kv[0])


# ---- text tables --------------------------------------------------------------
def ms(ns):
    return f"{ns / 1e6:.3f}"


def us(ns, n):
    return f"{ns / n / 1e3:.1f}" if n else "-"


def print_table(out, title, rows, header):
    print(title, file=out)
    if not rows:
        print("  (none)", file=out)
        return
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    # The last column (a reason, a shape) is left unpadded.
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    print(fmt.format(*header).rstrip(), file=out)
    for row in rows:
        print(fmt.format(*[str(x) for x in row]).rstrip(), file=out)


def speedup_text(x):
    if not x:
        return "-"
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def time_cols(d):
    """ms and us/call of host time, and of GPU time over the calls that have it."""
    return (ms(d["host_ns"]), us(d["host_ns"], d["calls"]),
            ms(d["gpu_ns"]) if d["gpu_calls"] else "-", us(d["gpu_ns"], d["gpu_calls"]))


TIME_HDR = ("host ms", "host us/call", "gpu ms", "gpu us/call")


def print_summary(out, s, files, bad, top):
    print(f"routing log: {s['calls']} calls from {len(files)} file(s)", file=out)
    for path, b in bad.items():
        if b.count:
            print(f"  {path}: {b.count} line(s) skipped, first at line {b.first} ({b.first_why})", file=out)
        if b.lost:
            print(f"  {path}: the shim's log writer lost {b.lost} record(s) (records_lost lines)", file=out)
    by = "GPU" if s["time_sorted_by"] == "gpu_ns" else "host"
    print_table(out, "calls by entry point, route, backend:",
                [(d["api"], d["route"], d["backend"] or "-", d["calls"], *time_cols(d))
                 for d in s["by_api_route_backend"]],
                ("api", "route", "backend", "calls", *TIME_HDR))
    print_table(out, "reasons (route that ran, and why):",
                [(d["route"], d["backend"] or "-", d["calls"], *time_cols(d), d["reason"])
                 for d in s["by_route_reason"][:top]],
                ("route", "backend", "calls", *TIME_HDR, "reason"))
    print_table(out, "declined (decided one route, ran another):",
                [(d["api"], d["decided"], d["ran"], d["calls"], d["reason"]) for d in s["declines"][:top]],
                ("api", "decided", "ran", "calls", "reason"))
    print_table(out, "statuses:", sorted(s["statuses"].items()), ("status", "calls"))
    print_table(out, "call sites per route:", sorted(s["sites"].items()), ("route", "sites"))
    print_table(out, f"top shapes by {by} time:",
                [(d["route"], d["calls"], d["sites"], *time_cols(d),
                  ms(d["gpu_ns_kernels"]) if d["gpu_calls"] else "-", d["shape"]) for d in s["shapes"]],
                ("route", "calls", "sites", *TIME_HDR, "shim kernels ms", "shape"))
    print_table(out, f"top call sites by {by} time:",
                [(d["site"], d["route"], d["api"], d["calls"], *time_cols(d), d["shape"]) for d in s["top_sites"]],
                ("site", "route", "api", "calls", *TIME_HDR, "shape"))
    if s["time_sorted_by"] != "gpu_ns":
        print("GPU time: not in the log (run with GEMMSHIM_LOG_GPU_TIME=1)", file=out)
    elif s["gpu_not_measured"]:
        print("calls without GPU time: " + ", ".join(f"{n} {why}" for why, n in sorted(s["gpu_not_measured"].items())),
              file=out)
    if s["compare"]:
        print_table(out, "route vs native, the same calls measured both ways (GPU us per call):",
                    [(d["route"], "-" if d["device"] is None else d["device"], d["sm"] or "-", d["calls"], d["pairs"],
                      f"{d['route_gpu_ns_mean'] / 1e3:.1f}", f"{d['native_gpu_ns_mean'] / 1e3:.1f}",
                      speedup_text(d["speedup"]), d["shape"]) for d in s["compare"]],
                    ("route", "device", "sm", "calls", "compared", "route us", "native us", "speedup", "shape"))
    elif s["time_sorted_by"] == "gpu_ns":
        print("route vs native: no native measurements in the log (run with GEMMSHIM_COMPARE=1)", file=out)


# ---- trace ----------------------------------------------------------------------
# Chrome trace event format ("Trace Event Format", the Google document linked
# from catapult's docs/trace-event-format.md): the JSON object form,
# {"traceEvents": [...]} with complete events (ph "X", ts and dur in
# microseconds) and metadata events (ph "M": process_name, thread_name,
# *_sort_index). Timestamps are written relative to an origin so that a
# double keeps their nanoseconds; otherData.t0_ns holds the origin. The
# origin is the earliest start of any event the trace holds (host call or
# GPU work), found by a pass over the logs before the trace is written: a
# log is written in the order calls end, not begin (threads), so its first
# line need not be the earliest, and Perfetto does not take negative
# timestamps (google/perfetto issue 107: not supported in trace_processor;
# pull request 1544: such events are dropped).
STREAM_TID_BASE = 1 << 30  # above any Linux thread id (pid_max <= 2^22)
# cuda.h: CU_STREAM_PER_THREAD ((CUstream)0x2) is "an implicit stream with
# per-thread synchronization behavior": one handle, a different stream for
# each thread that uses it. The special handles (0x0 NULL, 0x1 legacy, 0x2)
# name a stream of the current context, so a device's own.
PER_THREAD_STREAM = "0x2"


def gpu_track(pid, r):
    """The GPU track of a record: the process, the device, the stream, and
    for the per-thread stream the thread."""
    stream = str(r.get("stream", "?"))
    device = r.get("device")
    device = device if device.__class__ is int else "?"
    tid = r.get("tid") if r.get("tid").__class__ is int else 0
    key = (pid, device, stream, tid if stream == PER_THREAD_STREAM else None)
    name = f"GPU {device} stream {stream}" + (f" (thread {tid})" if stream == PER_THREAD_STREAM else "")
    return key, name


class TraceWriter:
    def __init__(self, path, t0_ns):
        self.f = open(path, "w", encoding="utf-8")
        self.t0 = t0_ns
        self.first = True
        self.meta = []
        self.threads = set()
        self.streams = {}      # gpu_track key -> tid
        self.stream_end = {}   # gpu_track key -> end of the last GPU slice, ns
        self.f.write('{"displayTimeUnit":"ns","traceEvents":[\n')

    def _emit(self, ev):
        self._write(json.dumps(ev, separators=(",", ":"), allow_nan=False))

    def _write(self, text):
        if not self.first:
            self.f.write(",\n")
        self.first = False
        self.f.write(text)

    def process(self, pid, name):
        self.meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        self.meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})

    ARG_KEYS = ("seq", "api", "route", "decided", "backend", "reason", "site", "stream", "status_name", "device",
                "sm", "transa", "transb", "a_type", "b_type", "c_type", "d_type", "compute_type", "epilogue",
                "dur_ns", "gpu_ns", "gpu_ns_kernels", "native_gpu_ns", "gpu_skipped")

    def add(self, pid, r):
        t = r.get("t_ns")
        if not isinstance(t, (int, float)):
            return
        host = num(r, "dur_ns") or 0
        route, api, shape = r["route"], r["api"], shape_of(r)
        args = {k: r[k] for k in self.ARG_KEYS if k in r}
        args["shape"] = shape
        args["types"] = types_of(r)
        # The event is assembled as text: the name and the args are
        # encoded once for both of a call's events (json.dumps of whole
        # events was most of the time on big logs).
        name = json.dumps(f"{route} {shape} ({api})")
        args_text = json.dumps(args, separators=(",", ":"), allow_nan=False)
        cat = json.dumps(route)[1:-1]
        tid = r.get("tid") if r.get("tid").__class__ is int else 0
        if (pid, tid) not in self.threads:
            self.threads.add((pid, tid))
            self.meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                              "args": {"name": f"host thread {tid}"}})
        self._write(f'{{"name":{name},"cat":"host,{cat}","ph":"X","ts":{(t - self.t0) / 1e3!r},'
                    f'"dur":{host / 1e3!r},"pid":{pid},"tid":{tid},"args":{args_text}}}')
        gpu = num(r, "gpu_ns")
        if gpu is None:
            return
        key, track_name = gpu_track(pid, r)
        stid = self.streams.get(key)
        if stid is None:
            stid = self.streams[key] = STREAM_TID_BASE + len(self.streams)
            self.meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": stid,
                              "args": {"name": track_name}})
            self.meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": stid,
                              "args": {"sort_index": stid}})
        # Where the GPU started is in the record (gpu_t_ns) when the shim
        # knew it; otherwise the work is drawn from the later of its launch
        # and the end of the stream's previous work (a stream runs in
        # order), and the event says it is placed so.
        start = num(r, "gpu_t_ns")
        if start is None:
            start = max(t, self.stream_end.get(key, 0))
            args_text = args_text[:-1] + ',"gpu_start":"placed after the launch and the stream\'s previous call"}'
        self.stream_end[key] = start + gpu
        self._write(f'{{"name":{name},"cat":"gpu,{cat}","ph":"X","ts":{(start - self.t0) / 1e3!r},'
                    f'"dur":{gpu / 1e3!r},"pid":{pid},"tid":{stid},"args":{args_text}}}')

    def close(self):
        for ev in self.meta:
            self._emit(ev)
        self.f.write(f'\n],"otherData":{{"t0_ns":{json.dumps(self.t0)},"source":"gemmshim routing log"}}}}\n')
        self.f.close()


def trace_origin(files):
    """The earliest start of any event the trace will hold: the smallest
    t_ns (a call's host slice) and gpu_t_ns (its GPU slice, where the log
    has it; a GPU slice placed by the report starts at its call's t_ns or
    later) over every record TraceWriter.add draws. One pass over the
    logs, at reading speed, in bounded memory."""
    t0 = None
    for path in files:
        try:
            for _, rec in read_records(path, BadLines()):
                t = rec.get("t_ns")
                if not isinstance(t, (int, float)):
                    continue
                if "gpu_t_ns" in rec and num(rec, "gpu_ns") is not None:
                    g = num(rec, "gpu_t_ns")
                    if g is not None and g < t:
                        t = g
                if (t0 is None or t < t0) and tallied(rec):
                    t0 = t
        except OSError:
            pass
    return 0 if t0 is None else t0


# ---- plot -------------------------------------------------------------------------
class PlotData:
    """What the plot needs of every call: its time and route. Kept in
    arrays (24 bytes a call), only when a plot is asked for."""

    def __init__(self):
        import array
        self.t = array.array("d")
        self.cost = array.array("d")
        self.route = array.array("b")
        self.routes = {}

    def add(self, r):
        t = r.get("t_ns")
        gpu, host = num(r, "gpu_ns"), num(r, "dur_ns")
        if not isinstance(t, (int, float)) or (gpu is None and host is None):
            return
        ri = self.routes.setdefault(r["route"], len(self.routes))
        self.t.append(t)
        self.cost.append(gpu if gpu is not None else -(host or 0))  # negative: host time
        self.route.append(ri)


ROUTE_COLORS = {"native": "#4c72b0", "ffma": "#dd8452", "fp8": "#55a868", "fp16": "#c44e52"}


def write_plot(path, summary, all_shapes, data, top):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    by_gpu = summary["time_sorted_by"] == "gpu_ns"
    what = "GPU time" if by_gpu else "host time (no gpu_ns in the log)"
    compare = summary["compare"]
    nrows = 3 if compare else 2
    fig, axes = plt.subplots(nrows, 1, figsize=(11, 4.2 * nrows), constrained_layout=True)
    fig.suptitle(f"gemmshim: {summary['calls']} GEMM calls")

    # 1. time by shape, one bar segment per route.
    ax = axes[0]
    key = "gpu_ns" if by_gpu else "host_ns"
    per_shape = collections.defaultdict(dict)
    for d in all_shapes:  # every (route, shape), not only the table's top rows
        per_shape[d["shape"]][d["route"]] = d[key]
    shapes = sorted(per_shape, key=lambda s: sum(per_shape[s].values()), reverse=True)[:top]
    shapes.reverse()  # largest on top
    routes = sorted({r for s in shapes for r in per_shape[s]})
    left = np.zeros(len(shapes))
    for route in routes:
        vals = np.array([per_shape[s].get(route, 0) / 1e6 for s in shapes])
        ax.barh(shapes, vals, left=left, label=route, color=ROUTE_COLORS.get(route))
        left += vals
    ax.set_xlabel(f"{what}, ms (total over the run)")
    ax.set_title(f"{what} by shape and route (top {len(shapes)} shapes)")
    if routes:
        ax.legend(title="route")

    # 2. time per call over the run, per route (binned when there are many calls).
    ax = axes[1]
    t = np.frombuffer(data.t, dtype=np.float64) if len(data.t) else np.zeros(0)
    cost = np.frombuffer(data.cost, dtype=np.float64) if len(data.cost) else np.zeros(0)
    rix = np.frombuffer(data.route, dtype=np.int8) if len(data.route) else np.zeros(0, dtype=np.int8)
    if len(t):
        gpu_mask = cost >= 0
        use = gpu_mask if by_gpu else ~gpu_mask
        tsec = (t - t.min()) / 1e9
        vals = np.abs(cost) / 1e3
        for route, i in sorted(data.routes.items()):
            sel = use & (rix == i)
            if not sel.any():
                continue
            x, y = tsec[sel], vals[sel]
            if len(x) > 4000:  # the median of each of 400 time bins
                edges = np.linspace(x.min(), x.max() + 1e-9, 401)
                idx = np.digitize(x, edges) - 1
                order = np.argsort(idx, kind="stable")
                idx, y_sorted = idx[order], y[order]
                bounds = np.searchsorted(idx, np.arange(401))
                xs, ys = [], []
                for b in range(400):
                    lo, hi = bounds[b], bounds[b + 1]
                    if hi > lo:
                        xs.append((edges[b] + edges[b + 1]) / 2)
                        ys.append(np.median(y_sorted[lo:hi]))
                ax.plot(xs, ys, ".-", ms=3, lw=0.8, label=f"{route} (median per bin)", color=ROUTE_COLORS.get(route))
            else:
                ax.plot(x, y, ".", ms=4, label=route, color=ROUTE_COLORS.get(route))
        ax.set_yscale("log")
        ax.legend(title="route")
    ax.set_xlabel("seconds since the first call")
    ax.set_ylabel(f"{'GPU' if by_gpu else 'host'} us per call")
    ax.set_title(f"{what} per call over the run")

    # 3. measured speedup per shape (GEMMSHIM_COMPARE=1).
    if compare:
        ax = axes[2]
        # The shapes where the route spent the most time, by speedup.
        rows = sorted(compare, key=lambda d: d["calls"] * d["route_gpu_ns_mean"])[-top:]
        rows = sorted(rows, key=lambda d: d["speedup"] or 0)
        gpus = {(d["device"], d["sm"]) for d in compare}
        labels = [f"{d['route']} {d['shape']}" + (f" (device {d['device']}, sm {d['sm']})" if len(gpus) > 1 else "")
                  for d in rows]
        vals = [d["speedup"] or 0 for d in rows]
        ax.barh(labels, vals, color=[ROUTE_COLORS.get(d["route"]) for d in rows])
        ax.axvline(1.0, color="k", lw=0.8)
        positive = [v for v in vals if v > 0]
        if positive and max(positive + [1.0]) / min(positive + [1.0]) > 20:
            ax.set_xscale("log")
        ax.set_xlabel("native GPU time / route GPU time (>1: the route is faster)")
        ax.set_title("route vs native, the same calls measured both ways")
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- expectations (for scripts/gpu-check.sh and tests) ----------------------------
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


class Expectations:
    """--expect and --expect-some, checked as records stream by."""

    def __init__(self, expect, expect_some):
        self.expect = [(e, 0, 0, collections.Counter()) for e in expect]
        self.expect_some = [[e, 0, False] for e in expect_some]

    def add(self, r):
        api, route, backend = r["api"], r["route"], r.get("backend")
        for i, ((want_api, want_route, want_backend), n, off, why) in enumerate(self.expect):
            if want_api == "*" or api == want_api:
                ok = route == want_route and backend_matches(backend, want_backend)
                self.expect[i] = ((want_api, want_route, want_backend), n + 1, off + (not ok), why)
                if not ok:
                    why[(route, backend, r.get("reason"))] += 1
        for e in self.expect_some:
            want_api, want_route, want_backend = e[0]
            if want_api == "*" or api == want_api:
                e[1] += 1
                if route == want_route and backend_matches(backend, want_backend):
                    e[2] = True

    def failures(self):
        out = []
        for (api, route, backend), n, off, why in self.expect:
            spec = f"{api}={route}{'/' + backend if backend else ''}"
            if not n:
                out.append(f"--expect {spec}: no call of {api} in the log")
            elif off:
                out.append(f"--expect {spec}: {off} of {n} calls did not; e.g. " +
                           "; ".join(f"{c}x route={r} backend={b} reason={m!r}" for (r, b, m), c in why.most_common(3)))
        for (api, route, backend), n, ok in self.expect_some:
            if not ok:
                out.append(f"--expect-some {api}={route}{'/' + backend if backend else ''}: none of {n} calls of {api} did")
        return out


def count_failures(path, api_calls):
    out, found = [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if '"kind":"calls"' not in line.replace(" ", ""):
                continue
            found = True
            rec = json.loads(line)
            for api, n in rec.items():
                if api in ("kind", "pair"):
                    continue
                if api_calls.get(api, 0) != n:
                    out.append(f"{path}: the program made {n} calls of {api}, the log holds {api_calls.get(api, 0)}")
    if not found:
        out.append(f"{path}: no {{\"kind\":\"calls\"}} record")
    return out


def step_starts(path):
    starts = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{") and "step_start_ns" in line:
                try:
                    starts = json.loads(line)["step_start_ns"]
                except (ValueError, KeyError):
                    pass
    return starts


# ---- main -----------------------------------------------------------------------
def process_name(path, index):
    return f"{os.path.basename(path)} (log {index})"


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", metavar="LOG", help="routing log files or globs")
    ap.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace event file (Perfetto, chrome://tracing)")
    ap.add_argument("--plot", metavar="OUT.png", help="write a picture of where the time went (matplotlib)")
    ap.add_argument("--json", metavar="OUT", help="write the summary as JSON to OUT ('-': stdout, no tables)")
    ap.add_argument("--top", type=int, default=10, help="rows of the shape, site and reason tables (default 10)")
    ap.add_argument("--steps", metavar="TRAIN_JSON", help="train.py output whose summary line has step_start_ns")
    ap.add_argument("--expect", action="append", default=[], type=parse_expectation, metavar="API=ROUTE[/BACKEND]",
                    help="every call of API ran ROUTE (API may be '*'); repeatable")
    ap.add_argument("--expect-some", action="append", default=[], type=parse_expectation,
                    metavar="API=ROUTE[/BACKEND]", help="at least one call of API ran ROUTE; repeatable")
    ap.add_argument("--expect-counts", action="append", default=[], metavar="FILE",
                    help="a bench's JSON lines: the logs hold exactly the calls its {\"kind\":\"calls\"} record counts")
    ap.add_argument("--expect-steady-sites", metavar="ROUTE",
                    help="with --steps: the same number of ROUTE sites in every step after step 0")
    args = ap.parse_args(argv)
    if args.top < 1:
        ap.error(f"--top: expected a positive number of rows, got {args.top}")
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
    expectations = Expectations(args.expect, args.expect_some)
    checking = bool(args.expect or args.expect_some)
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
        except OSError as e:
            unreadable.append(path)
            print(f"{PROG}: {path}: {e.strerror}", file=sys.stderr)
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
        print_summary(out, s, files, bad, args.top)
        if starts:
            print_table(out, "per training step:",
                        [(st["step"], st["calls"], " ".join(f"{k}={v}" for k, v in sorted(st["by_route"].items())),
                          " ".join(f"{k}={v}" for k, v in sorted(st["sites_by_route"].items()))) for st in s["steps"]],
                        ("step", "calls", "calls by route", "sites by route"))
    if args.plot:
        try:
            write_plot(args.plot, s, summary.as_json(1 << 30)["shapes"], plot, args.top)
        except ImportError as e:
            failures.append(f"--plot needs matplotlib and numpy ({e}); Debian: apt-get install python3-matplotlib")
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
    if (args.expect or args.expect_some or args.expect_counts or args.expect_steady_sites) and not failures:
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
    ends the report quietly."""
    try:
        return main(argv)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(run())
