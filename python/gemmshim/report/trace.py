"""--trace: the calls as a Chrome trace event file (Perfetto, chrome://tracing).

One track per process and thread for host time, one per device and stream
for GPU time. Written as records stream by, after one pass that finds the
origin (the earliest start), so memory stays bounded on big logs.
"""

import json

from .read import BadLines, num, read_records, shape_of, types_of
from .summary import tallied


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
