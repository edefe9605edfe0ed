"""--plot: a picture of where the time went (matplotlib, imported only here).

Time by shape and route, time per call over the run, and for
GEMMSHIM_COMPARE logs each route's measured speedup over native.
PlotData keeps what the plot needs of every call in compact arrays.
"""

import collections
import os
import sys

from .read import num
from .summary import STANDIN_TITLE, device_word


class PlotData:
    """What the plot needs of every call: its time and route. Kept in
    arrays (20 bytes a call), only when a plot is asked for; the route as an
    index of a C int, so any number of distinct routes fits."""

    def __init__(self):
        import array
        self.t = array.array("d")
        self.cost = array.array("d")
        self.route = array.array("i")
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


def debian_python(executable):
    """Whether `executable` is Debian's own interpreter (/usr/bin/python3),
    whose packages come from apt (python3-matplotlib), not pip."""
    return (os.path.realpath(executable).startswith("/usr/bin/python3") and sys.prefix == "/usr"
            and os.path.exists("/etc/debian_version"))


def install_hint():
    """How to get matplotlib into the interpreter running the report: pip
    inside a virtual environment (sys.prefix is then not sys.base_prefix),
    apt for Debian's /usr/bin/python3, else pip for this interpreter."""
    if sys.prefix != sys.base_prefix:
        return f"in this virtual environment: {sys.executable} -m pip install matplotlib"
    if debian_python(sys.executable):
        return "Debian: apt-get install python3-matplotlib"
    return f"{sys.executable} -m pip install matplotlib"


def speedup_panel(compare, top):
    """The speedup panel's bars, by speedup: of the compare table's rows
    (route, shape, GPU), each route's where it spent the most GPU time
    (every route is shown), then the next most, to `top` rows; each bar's
    label ('n=2': the compared calls its speedup is from); and a title that
    says 'top N of M' when rows are left out."""
    ranked = sorted(compare, key=lambda d: -d["calls"] * d["route_gpu_ns_mean"])
    firsts = {}
    for d in ranked:
        firsts.setdefault(d["route"], d)
    rows = list(firsts.values())
    chosen = {id(d) for d in rows}
    for d in ranked:
        if len(rows) >= top:
            break
        if id(d) not in chosen:
            rows.append(d)
    rows.sort(key=lambda d: d["speedup"] or 0)
    gpus = {(d["device"], d["sm"]) for d in compare}
    labels = [f"{d['route']} {d['shape']}" + (f" (device {d['device']}, sm {d['sm']})" if len(gpus) > 1 else "")
              for d in rows]
    samples = [f"n={d['pairs']}" for d in rows]
    title = "route vs native, the same calls measured both ways"
    if len(rows) < len(compare):
        title += f" (top {len(rows)} of {len(compare)} route/shape rows)"
    return rows, labels, samples, title


ROUTE_COLORS = {"native": "#4c72b0", "ffma": "#dd8452", "fp8": "#55a868", "fp16": "#c44e52"}


def write_plot(path, summary, all_shapes, data, top):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    by_gpu = summary["time_sorted_by"] == "gpu_ns"
    standin = summary.get("standin", False)
    dev = device_word(summary)
    what = f"{dev} time" if by_gpu else "host time (no gpu_ns in the log)"
    compare = summary["compare"]
    accuracy = summary.get("accuracy") or []
    nrows = 2 + bool(compare) + bool(accuracy)
    fig, axes = plt.subplots(nrows, 1, figsize=(11, 4.2 * nrows), constrained_layout=True)
    fig.suptitle(f"gemmshim: {summary['calls']} GEMM calls" + (f" ({STANDIN_TITLE})" if standin else ""))

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
    rix = np.frombuffer(data.route, dtype=np.intc) if len(data.route) else np.zeros(0, dtype=np.intc)
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
    ax.set_ylabel(f"{dev if by_gpu else 'host'} us per call")
    ax.set_title(f"{what} per call over the run")

    # 3. measured speedup per shape (GEMMSHIM_COMPARE=1).
    if compare:
        ax = axes[2]
        rows, labels, samples, title = speedup_panel(compare, top)
        vals = [d["speedup"] or 0 for d in rows]
        bars = ax.barh(labels, vals, color=[ROUTE_COLORS.get(d["route"]) for d in rows])
        ax.bar_label(bars, labels=samples, padding=3, fontsize=8)
        ax.axvline(1.0, color="k", lw=0.8)
        positive = [v for v in vals if v > 0]
        if positive and max(positive + [1.0]) / min(positive + [1.0]) > 20:
            ax.set_xscale("log")
        ax.set_xlabel(f"native {dev} time / route {dev} time (>1: the route is faster"
                      f"{' on the stand-in, not a GPU' if standin else ''}); n: compared calls")
        ax.set_title(title)
    # 4. accuracy of compared calls (GEMMSHIM_COMPARE=1): worst sqnr_db and
    # worst median-element dB per site and shape, lowest first.
    if accuracy:
        ax = axes[-1]
        rows = accuracy[:top][::-1]  # the worst on top
        cap = 150.0  # identical outputs ("inf") drawn at the cap

        def val(x):
            if x is None:
                return 0.0
            if isinstance(x, str):
                return cap if x == "inf" else 0.0
            return max(min(x, cap), 0.0)
        labels = [f"{d['route']} {d['shape']} site {str(d['site'])[:8]}" for d in rows]
        y = np.arange(len(rows))
        ax.barh(y + 0.2, [val(d["sqnr_db_worst"]) for d in rows], height=0.4, label="sqnr_db (worst)",
                color=[ROUTE_COLORS.get(d["route"]) for d in rows])
        ax.barh(y - 0.2, [val(d["element_db_worst"]) for d in rows], height=0.4, label="median element dB (worst)",
                color="#999999")
        ax.set_yticks(y, labels)
        ax.bar_label(ax.containers[0], labels=[f"n={d['compared']}" + (" guarded" if d["guarded"] else "")
                                               for d in rows], padding=3, fontsize=8)
        ax.set_xlabel(f"dB against the native run (higher is better; identical outputs drawn at {cap:g})")
        ax.set_title("accuracy of compared calls, route against native" +
                     (f" (top {len(rows)} of {len(accuracy)} worst)" if len(rows) < len(accuracy) else ""))
        ax.legend()
    fig.savefig(path, dpi=110)
    plt.close(fig)
