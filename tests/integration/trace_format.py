"""A checker of the Chrome trace event format, written from its definition
("Trace Event Format", the Google document that catapult's
docs/trace-event-format.md points to), for the parts gemmshim writes:

- JSON Object Format: an object whose "traceEvents" is an array of events;
  "displayTimeUnit", when present, is "ms" or "ns"; "otherData" is an object.
- Every event has "ph" (the phase, one character), "pid" and "tid"
  (process and thread ids), and "ts", the timestamp in microseconds.
  The document sets no lower bound on ts, but Perfetto, which the trace is
  written for, does not take negative timestamps (google/perfetto issue 107:
  trace_processor does not support them; pull request 1544: events with
  negative timestamps are dropped), so a negative ts is a problem here.
- Complete events (ph "X") have a "name", a "dur" in microseconds, and may
  have "cat" (comma-separated categories) and "args" (an object).
- Metadata events (ph "M"): "process_name" / "thread_name" with
  args.name a string, "process_sort_index" / "thread_sort_index" with
  args.sort_index a number.
- A complete event stands for a begin/end pair, and the definition requires
  duration events on one thread to nest properly: two slices of one track
  are disjoint or one contains the other.

It returns a list of problems (empty: valid), so a test can assert it is
empty and show every problem when it is not.
"""

import json
import math

METADATA_NAMES = {
    "process_name": "name",
    "thread_name": "name",
    "process_labels": "labels",
    "process_sort_index": "sort_index",
    "thread_sort_index": "sort_index",
}
# Phases the definition lists (duration, complete, instant, counter, async,
# flow, sample, object, metadata, memory dump, mark, clock sync, context).
KNOWN_PHASES = set("BEXiICbnestfPNODMVvRc()") | {"I"}


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _strict_json(text):
    def no_constant(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=no_constant)


def check_trace(text, nest_slack_us=0.0):
    problems = []
    try:
        doc = _strict_json(text)
    except ValueError as e:
        return [f"not strict JSON: {e}"]
    if not isinstance(doc, dict):
        return ["the JSON Object Format is an object"]
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return ["traceEvents is not an array"]
    if "displayTimeUnit" in doc and doc["displayTimeUnit"] not in ("ms", "ns"):
        problems.append(f"displayTimeUnit {doc['displayTimeUnit']!r} is neither 'ms' nor 'ns'")
    if "otherData" in doc and not isinstance(doc["otherData"], dict):
        problems.append("otherData is not an object")
    slices = {}
    for i, ev in enumerate(events):
        where = f"event {i}"
        if not isinstance(ev, dict):
            problems.append(f"{where}: not an object")
            continue
        ph = ev.get("ph")
        if not isinstance(ph, str) or len(ph) != 1 or ph not in KNOWN_PHASES:
            problems.append(f"{where}: ph {ph!r} is not a phase of the format")
            continue
        for key in ("pid", "tid"):
            if not isinstance(ev.get(key), int) or isinstance(ev.get(key), bool):
                problems.append(f"{where}: {key} {ev.get(key)!r} is not an integer")
        if "args" in ev and not isinstance(ev["args"], dict):
            problems.append(f"{where}: args is not an object")
        if ph == "X":
            if not isinstance(ev.get("name"), str):
                problems.append(f"{where}: complete event without a name")
            if "cat" in ev and not isinstance(ev["cat"], str):
                problems.append(f"{where}: cat is not a string")
            if not _is_num(ev.get("ts")):
                problems.append(f"{where}: ts {ev.get('ts')!r} is not a number")
                continue
            if ev["ts"] < 0:
                problems.append(f"{where}: ts {ev['ts']!r} is negative (Perfetto drops the event)")
            if not _is_num(ev.get("dur")) or ev["dur"] < 0:
                problems.append(f"{where}: dur {ev.get('dur')!r} is not a non-negative number")
                continue
            slices.setdefault((ev.get("pid"), ev.get("tid")), []).append((ev["ts"], ev["ts"] + ev["dur"], i))
        elif ph == "M":
            name = ev.get("name")
            if name not in METADATA_NAMES:
                problems.append(f"{where}: metadata event {name!r} is not one the format defines")
                continue
            arg = (ev.get("args") or {}).get(METADATA_NAMES[name])
            if name.endswith("sort_index") and not _is_num(arg):
                problems.append(f"{where}: {name} without a numeric args.sort_index")
            if name.endswith("_name") and not isinstance(arg, str):
                problems.append(f"{where}: {name} without a string args.name")
        elif not _is_num(ev.get("ts")):
            problems.append(f"{where}: ts is not a number")
        elif ev["ts"] < 0:
            problems.append(f"{where}: ts {ev['ts']!r} is negative (Perfetto drops the event)")
    for track, spans in slices.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends = []
        for start, end, i in spans:
            while open_ends and open_ends[-1][0] <= start + nest_slack_us:
                open_ends.pop()
            if open_ends and end > open_ends[-1][0] + nest_slack_us:
                problems.append(f"track {track}: event {i} [{start}, {end}] overlaps event {open_ends[-1][1]} "
                                f"(ends {open_ends[-1][0]}) without nesting in it")
            open_ends.append((end, i))
    return problems
