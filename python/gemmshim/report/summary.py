"""The summary: every record tallied into cells, and the tables of them.

A cell holds the calls that agree on every field a table groups by, so
reading a record is one dictionary lookup and memory grows with distinct
shapes, sites and reasons, not with the log. Summary.as_json gives the
tables (the --json output); print_summary prints them.
"""

import bisect
import collections
import math

from .read import num, shape_text, types_text


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


def figure(v):
    """An accuracy figure of the log (docs/log-format.md): a number, or the
    strings "inf"/"-inf"; None when absent or not one of these."""
    if v.__class__ in (int, float) and v == v:
        return float(v)
    if v == "inf":
        return math.inf
    if v == "-inf":
        return -math.inf
    return None


def median_element_db(p50):
    """The median element's relative error as dB (the guard's second figure)."""
    if p50 is None:
        return None
    return math.inf if p50 == 0 else -20 * math.log10(p50)


def db_json(x):
    """A dB figure for JSON (which has no infinity): "inf"/"-inf" as the log writes them."""
    if x is None or math.isfinite(x):
        return x
    return "inf" if x > 0 else "-inf"


GUARD_MARK = " off for this site: measured "
# The measured gate's reason (docs/cost-model.md, "The measured gate").
SLOW_MARK = " off for this site: slower than native here, measured "


class Accuracy:
    """The compared calls' accuracy of one (site, route, shape)."""

    __slots__ = ("sqnr", "element_db", "max_rel", "mismatch")

    def __init__(self):
        self.sqnr, self.element_db, self.max_rel, self.mismatch = [], [], [], 0


class Fp8Operand:
    """One operand's fp8 statistics over a site's compared calls
    (docs/log-format.md, "fp8 statistics"): the largest amax, the smallest
    scale, the worst saturated and flushed fractions, and the totals."""

    __slots__ = ("amax", "scale", "sat_worst", "flush_worst", "elems", "sat", "flush", "block_sat", "block_flush")

    def __init__(self):
        self.amax = self.scale = None
        self.sat_worst = self.flush_worst = 0.0
        self.elems = self.sat = self.flush = 0
        # block recipes: the worst block of any call, [fraction, index]
        self.block_sat = self.block_flush = None

    def add_block(self, sat, flush):
        for name, v in (("block_sat", sat), ("block_flush", flush)):
            old = getattr(self, name)
            if v is not None and (old is None or v[0] > old[0]):
                setattr(self, name, v)

    def add(self, amax, scale, elems, sat, flush):
        if amax is not None and (self.amax is None or amax > self.amax or amax != amax) and self.amax == self.amax:
            self.amax = amax  # a NaN amax stays
        if scale is not None and (self.scale is None or scale < self.scale):
            self.scale = scale
        if elems:
            self.sat_worst = max(self.sat_worst, sat / elems)
            self.flush_worst = max(self.flush_worst, flush / elems)
        self.elems += elems
        self.sat += sat
        self.flush += flush


def fp8_operand_fields(r, x):
    """Operand x's ("a", "b") statistics of record r, or None when it has
    none or they are not plain values."""
    elems, sat, flush = r.get(x + "_elems"), r.get(x + "_sat"), r.get(x + "_flush")
    if not all(v.__class__ is int and v >= 0 for v in (elems, sat, flush)):
        return None
    amax = r.get(x + "_amax")
    return math.nan if amax == "nan" else figure(amax), figure(r.get(x + "_scale")), elems, sat, flush


def fp8_block_fields(r, x):
    """Operand x's worst blocks ([fraction, index] by saturated, by
    flushed fraction; None each) of a block recipe's record."""
    out = []
    for kind in ("sat", "flush"):
        frac, idx = figure(r.get(f"{x}_worst_{kind}")), r.get(f"{x}_worst_{kind}_block")
        out.append([frac, idx] if frac is not None and idx.__class__ is int else None)
    return out


class Summary:
    def __init__(self, step_starts=None):
        self.calls = 0
        self.accuracy = {}
        self.fp8 = {}
        self.guarded = {}
        self.slower = {}
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
        sqnr = figure(g("sqnr_db"))
        if sqnr is not None:
            acc_key = (key[C_SITE], key[C_ROUTE], _shape_of(key))
            a = self.accuracy.get(acc_key)
            if a is None:
                a = self.accuracy[acc_key] = Accuracy()
            a.sqnr.append(sqnr)
            e = median_element_db(figure(g("rel_err_p50")))
            if e is not None:
                a.element_db.append(e)
            mr = figure(g("max_rel"))
            if mr is not None:
                a.max_rel.append(mr)
            mm = g("nonfinite_mismatch")
            if mm.__class__ is int:
                a.mismatch += mm
        ops = [fp8_operand_fields(r, x) for x in ("a", "b")]
        if None not in ops:
            fk = (key[C_SITE], g("recipe") if g("recipe").__class__ is str else "-", _shape_of(key))
            f = self.fp8.get(fk)
            if f is None:
                f = self.fp8[fk] = [0, Fp8Operand(), Fp8Operand()]
            f[0] += 1
            for o, x in ((f[1], "a"), (f[2], "b")):
                o.add(*ops[0 if x == "a" else 1])
                o.add_block(*fp8_block_fields(r, x))
        reason = key[C_REASON]
        if reason.__class__ is str and GUARD_MARK in reason:
            gk = (key[C_SITE], key[C_DECIDED], _shape_of(key))
            if gk not in self.guarded:
                self.guarded[gk] = [0, reason]
            self.guarded[gk][0] += 1
        if reason.__class__ is str and SLOW_MARK in reason:
            gk = (key[C_SITE], key[C_DECIDED], _shape_of(key))
            if gk not in self.slower:
                self.slower[gk] = [0, reason]
            self.slower[gk][0] += 1
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
            "accuracy": [{**d, **{k: db_json(d[k]) for k in ("sqnr_db_worst", "sqnr_db_median", "element_db_worst",
                                                             "max_rel_worst")}}
                         for d in accuracy_rows(self.accuracy, self.guarded)],
            "fp8_stats": fp8_rows(self.fp8),
            "guarded": [{"site": site, "route": route, "shape": shape, "native_calls": n, "reason": reason}
                        for (site, route, shape), (n, reason) in sorted(self.guarded.items(), key=lambda kv: str(kv[0]))],
            "slower": [{"site": site, "route": route, "shape": shape, "native_calls": n, "reason": reason}
                       for (site, route, shape), (n, reason) in sorted(self.slower.items(), key=lambda kv: str(kv[0]))],
        }



def _shape_of(k):
    return shape_text(k[C_M], k[C_N], k[C_K], k[C_BATCH], types_text(k[C_A], k[C_B], k[C_C], k[C_D]))


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return None
    if n % 2:
        return xs[n // 2]
    lo, hi = xs[n // 2 - 1], xs[n // 2]
    # The mean of -inf and inf is no figure: the lower one is.
    return lo if math.isinf(lo) or math.isinf(hi) else (lo + hi) / 2


def accuracy_rows(accuracy, guarded):
    """The accuracy table: per (site, route, shape) the compared calls, the
    worst (lowest) and median sqnr_db, the worst median-element dB and
    max_rel; worst first."""
    rows = []
    for (site, route, shape), a in accuracy.items():
        worst = min(a.sqnr)
        rows.append({"site": site, "route": route, "shape": shape, "compared": len(a.sqnr),
                     "sqnr_db_worst": worst, "sqnr_db_median": _median(a.sqnr),
                     "element_db_worst": min(a.element_db) if a.element_db else None,
                     "max_rel_worst": max(a.max_rel) if a.max_rel else None,
                     "nonfinite_mismatch": a.mismatch,
                     "guarded": any(g[0] == site and g[1] == route for g in guarded)})
    rows.sort(key=lambda d: (min(d["sqnr_db_worst"], d["element_db_worst"] if d["element_db_worst"] is not None
                                 else math.inf), str(d["site"]), d["shape"]))
    return rows


def fig_json(x):
    """amax or scale for JSON: "nan", "inf" as the log writes them."""
    return "nan" if x is not None and x != x else db_json(x)


def fp8_rows(fp8):
    """The fp8 statistics table: per (site, recipe, shape) the compared
    calls that counted, and per operand the largest amax, the smallest
    scale, the worst saturated and flushed fractions of one call and the
    totals; most saturated first, then most flushed."""
    rows = []
    for (site, recipe, shape), (n, a, b) in fp8.items():
        d = {"site": site, "recipe": recipe, "shape": shape, "compared": n}
        for x, o in (("a", a), ("b", b)):
            d.update({f"{x}_amax_max": fig_json(o.amax), f"{x}_scale_min": fig_json(o.scale),
                      f"{x}_sat_worst": o.sat_worst, f"{x}_flush_worst": o.flush_worst,
                      f"{x}_elems": o.elems, f"{x}_sat": o.sat, f"{x}_flush": o.flush,
                      f"{x}_worst_block_sat": o.block_sat, f"{x}_worst_block_flush": o.block_flush})
        rows.append(d)
    rows.sort(key=lambda d: (-max(d["a_sat_worst"], d["b_sat_worst"]), -max(d["a_flush_worst"], d["b_flush_worst"]),
                             str(d["site"]), d["shape"]))
    return rows


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
# Logs written over the CPU stand-in (make demo, the tests): their "GPU"
# times are the CPU's time for each call's work. The report says so first,
# and no table or axis calls them GPU times. Known from the header line of
# the process that wrote them (a device named "Standin GPU ..."), or said
# with --standin for a log without headers.
STANDIN_TITLE = "times from the CPU stand-in, not a GPU"
STANDIN_TIME_HDR = ("host ms", "host us/call", "stand-in ms", "stand-in us/call")


def standin_devices(processes):
    """The stand-in's device names in the processes' header lines."""
    return sorted({str(d.get("name")) for p in processes for d in p["devices"]
                   if str(d.get("name", "")).startswith("Standin")})


def device_word(s):
    """What the report calls the time in gpu_ns: 'GPU', or 'stand-in'."""
    return "stand-in" if s.get("standin") else "GPU"


def print_summary(out, s, files, bad, top, verdict=()):
    """The header, the notes on each file's bad and lost lines, the verdict
    (its lines, verdict.py's), then the tables."""
    print(f"routing log: {s['calls']} calls from {len(files)} file(s)", file=out)
    standin = standin_devices(s.get("processes", ()))
    if standin or s.get("standin"):
        names = f" ({', '.join(standin)})" if standin else ""
        print(f"  warning: these times come from the CPU stand-in{names}, not a GPU: they check "
              "the machinery, not speed", file=out)
    per_file = collections.Counter(p["file"] for p in s.get("processes", ()))
    for path, n in per_file.items():
        if n > 1:
            pids = ", ".join(str(p["pid"]) for p in s["processes"] if p["file"] == path)
            print(f"  {path}: records of {n} processes (pid {pids}): appended runs, or processes sharing the "
                  "file; the tables pool them", file=out)
    for path, b in bad.items():
        if b.count:
            print(f"  {path}: {b.count} line(s) skipped, first at line {b.first} ({b.first_why})", file=out)
        if b.lost:
            print(f"  {path}: the shim's log writer lost {b.lost} record(s) (records_lost lines)", file=out)
    if verdict:
        print("verdict:", file=out)
        for line in verdict:
            print(f"  {line}", file=out)
    dev = device_word(s)
    hdr = STANDIN_TIME_HDR if s.get("standin") else TIME_HDR
    by = dev if s["time_sorted_by"] == "gpu_ns" else "host"
    print_table(out, "calls by entry point, route, backend:",
                [(d["api"], d["route"], d["backend"] or "-", d["calls"], *time_cols(d))
                 for d in s["by_api_route_backend"]],
                ("api", "route", "backend", "calls", *hdr))
    print_table(out, "reasons (route that ran, and why):",
                [(d["route"], d["backend"] or "-", d["calls"], *time_cols(d), d["reason"])
                 for d in s["by_route_reason"][:top]],
                ("route", "backend", "calls", *hdr, "reason"))
    print_table(out, "declined (decided one route, ran another):",
                [(d["api"], d["decided"], d["ran"], d["calls"], d["reason"]) for d in s["declines"][:top]],
                ("api", "decided", "ran", "calls", "reason"))
    print_table(out, "statuses:", sorted(s["statuses"].items()), ("status", "calls"))
    print_table(out, "call sites per route:", sorted(s["sites"].items()), ("route", "sites"))
    print_table(out, f"top shapes by {by} time:",
                [(d["route"], d["calls"], d["sites"], *time_cols(d),
                  ms(d["gpu_ns_kernels"]) if d["gpu_calls"] else "-", d["shape"]) for d in s["shapes"]],
                ("route", "calls", "sites", *hdr, "shim kernels ms", "shape"))
    print_table(out, f"top call sites by {by} time:",
                [(d["site"], d["route"], d["api"], d["calls"], *time_cols(d), d["shape"]) for d in s["top_sites"]],
                ("site", "route", "api", "calls", *hdr, "shape"))
    if s["time_sorted_by"] != "gpu_ns":
        print("GPU time: not in the log (run with GEMMSHIM_LOG_GPU_TIME=1)", file=out)
    elif s["gpu_not_measured"]:
        print(f"calls without {dev} time: " + ", ".join(f"{n} {why}"
                                                        for why, n in sorted(s["gpu_not_measured"].items())),
              file=out)
    if s["compare"]:
        print_table(out, f"route vs native, the same calls measured both ways ({dev} us per call):",
                    [(d["route"], "-" if d["device"] is None else d["device"], d["sm"] or "-", d["calls"], d["pairs"],
                      f"{d['route_gpu_ns_mean'] / 1e3:.1f}", f"{d['native_gpu_ns_mean'] / 1e3:.1f}",
                      speedup_text(d["speedup"]), d["shape"]) for d in s["compare"]],
                    ("route", "device", "sm", "calls", "compared", "route us", "native us",
                     "ratio" if s.get("standin") else "speedup", "shape"))
    elif s["time_sorted_by"] == "gpu_ns":
        print("route vs native: no native measurements in the log (run with GEMMSHIM_COMPARE=1)", file=out)
    if s["accuracy"]:
        print_table(out, "accuracy of compared calls, route against native (worst first; dB: higher is better):",
                    [(d["site"], d["route"], d["compared"], db_text(d["sqnr_db_worst"]), db_text(d["sqnr_db_median"]),
                      db_text(d["element_db_worst"]), "-" if d["max_rel_worst"] is None else
                      (d["max_rel_worst"] if isinstance(d["max_rel_worst"], str) else f"{d['max_rel_worst']:.3g}"),
                      d["nonfinite_mismatch"], "yes" if d["guarded"] else "-", d["shape"])
                     for d in s["accuracy"][:top]],
                    ("site", "route", "compared", "sqnr worst", "sqnr median", "median element worst", "max_rel worst",
                     "nonfinite", "guarded", "shape"))
    if s.get("fp8_stats"):
        print_table(out, "fp8 statistics of compared calls, per operand (worst call's fractions; docs/log-format.md):",
                    [(d["site"], d["recipe"], d["compared"],
                      *(v for x in ("a", "b") for v in (fig_text(d[f"{x}_amax_max"]), fig_text(d[f"{x}_scale_min"]),
                                                        pct_text(d[f"{x}_sat_worst"]),
                                                        pct_text(d[f"{x}_flush_worst"]),
                                                        block_text(d[f"{x}_worst_block_sat"],
                                                                   d[f"{x}_worst_block_flush"]))),
                      d["shape"]) for d in s["fp8_stats"][:top]],
                    ("site", "recipe", "compared", "A amax", "A scale", "A sat", "A flush", "A worst block",
                     "B amax", "B scale", "B sat", "B flush", "B worst block", "shape"))
    if s["guarded"]:
        print_table(out, "guarded sites (GEMMSHIM_GUARD_SQNR: native from the call after the measurement):",
                    [(d["site"], d["route"], d["native_calls"], d["shape"], d["reason"].split("; ")[-1])
                     for d in s["guarded"]],
                    ("site", "route", "native calls", "shape", "reason"))
    if s.get("slower"):
        print_table(out, "sites slower than native (GEMMSHIM_COMPARE's measured gate: native from the call after "
                    "the measurement):",
                    [(d["site"], d["route"], d["native_calls"], d["shape"], d["reason"].split("; ")[-2])
                     for d in s["slower"]],
                    ("site", "route", "native calls", "shape", "measured"))


def fig_text(x):
    """amax or scale: a number (4 significant digits), or its string."""
    return "-" if x is None else x if isinstance(x, str) else f"{x:.4g}"


def block_text(sat, flush):
    """A block recipe's worst blocks: "sat F% @I, flush F% @I"; "-" for
    the others."""
    parts = [f"{name} {pct_text(v[0])} @{v[1]}" for name, v in (("sat", sat), ("flush", flush)) if v is not None]
    return ", ".join(parts) or "-"


def pct_text(x):
    """A fraction as a percentage; a nonzero one never shows as 0."""
    return "0" if x == 0 else f"{100 * x:.3g}%"


def db_text(x):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.1f}"
