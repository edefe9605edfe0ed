"""The verdict the report opens with: where the GEMM time went, and what each route gained.

Two lines a reader can act on before the tables: each route's share of
the time (GPU time where the log has gpu_ns, else host time, and which),
and each route's measured speedup over native over the compared calls
(GEMMSHIM_COMPARE), summed from the compare table's rows; or that there
were none to compare.
"""

import collections

from .summary import device_word, ms, speedup_text

NO_COMPARED = "speedup over native: no compared calls (run with --compare, or GEMMSHIM_COMPARE=1, to measure speedup)"


def calls_text(n, what="call"):
    return f"{n} {what}{'' if n == 1 else 's'}"


def time_share_line(s):
    """Each route's share of the time, largest first: 'GPU time by route
    (gpu_ns, all 6 calls): ffma 80.0% (4.000 ms), native 20.0% (1.000 ms)'."""
    routes = collections.defaultdict(lambda: [0, 0, 0, 0])  # calls, host_ns, gpu_calls, gpu_ns
    for d in s["by_api_route_backend"]:
        r = routes[d["route"]]
        r[0] += d["calls"]
        r[1] += d["host_ns"]
        r[2] += d["gpu_calls"]
        r[3] += d["gpu_ns"]
    if s["time_sorted_by"] == "gpu_ns":
        timed = sum(r[2] for r in routes.values())
        which = f"all {s['calls']} calls" if timed == s["calls"] else f"{timed} of {s['calls']} calls"
        what, i = f"{device_word(s)} time by route (gpu_ns, {which})", 3
    else:
        what, i = "host time by route (dur_ns; the log has no gpu_ns)", 1
    total = sum(r[i] for r in routes.values())
    if not total:
        return f"{what}: none recorded; calls by route: " + ", ".join(
            f"{route} {r[0]}" for route, r in sorted(routes.items(), key=lambda kv: (-kv[1][0], kv[0])))
    return f"{what}: " + ", ".join(
        f"{route} {100 * r[i] / total:.1f}% ({ms(r[i])} ms)"
        for route, r in sorted(routes.items(), key=lambda kv: (-kv[1][i], kv[0])))


def speedup_line(compare, standin=False):
    """Each route's speedup over native: the native GPU time of its compared
    calls over the route's, summed over the compare table's rows (shapes),
    per GPU where the logs come from more than one (device and sm), as the
    table is: 'speedup over native (...): ffma 1.29x (2 compared calls)'.
    Over the stand-in (standin) it is a ratio of CPU times, and says so."""
    if not compare:
        return NO_COMPARED
    several = len({(d["device"], d["sm"]) for d in compare}) > 1
    groups = {}  # (route, device, sm) -> [compared calls, route ns, native ns]
    for d in compare:
        key = (d["route"], d["device"], d["sm"]) if several else (d["route"], None, None)
        g = groups.setdefault(key, [0, 0.0, 0.0])
        g[0] += d["pairs"]
        g[1] += d["pairs"] * d["route_gpu_ns_mean"]
        g[2] += d["pairs"] * d["native_gpu_ns_mean"]
    parts = []
    for (route, device, sm), (pairs, route_ns, native_ns) in sorted(groups.items(), key=lambda kv: str(kv[0])):
        where = f" on device {'-' if device is None else device} sm {sm or '-'}" if several else ""
        parts.append(f"{route}{where} {speedup_text(native_ns / route_ns if route_ns else None)} "
                     f"({calls_text(pairs, 'compared call')})")
    if standin:
        return ("stand-in time ratio, native / route (CPU emulation, not a GPU speedup; over the same calls): "
                + ", ".join(parts))
    return "speedup over native (native GPU time / the route's, over the same calls): " + ", ".join(parts)


def verdict_lines(s):
    """The verdict's lines (without the title) for a summary (Summary.as_json
    with the tables' keys)."""
    if not s["calls"]:
        return ["no calls in the log"]
    return [time_share_line(s), speedup_line(s["compare"], s.get("standin", False))]
