#!/usr/bin/env python3
"""Systematic fault injection, as SQLite tests its I/O layer: for every entry
of the shim's call table (shim/base/sys.h) and every route, run one operation
with GEMMSHIM_FAULT=<entry>:N (the Nth call fails once) and <entry>:N+ (it
and every later one fail), for N = 1, 2, ... until a run completes without
reaching the injected call (the shim's exit report says "0 failed").

The operation is ffma_client_cu13 with one GEMM through each of the seven
hooked entry points, and a second cublasGemmEx at the same call site (an
fp8 site's steady state; route "ffma graph" captures that last call into
a CUDA graph), under the preloaded shim with a policy file, a
routing log whose name holds %h and INFO debug output, over the CPU
stand-in. Every result is
checked by the client against float64 (--fp8: fp8 tolerance and SQNR).

Each run must end in one of:
  - the call ran as it would without the fault, with a right result;
  - native, with a right result and a reason naming the failed call
    (its name, or the failure value the injection gives it);
  - the fp8 route under another recipe (the one it falls back to), with a
    right result and a reason naming the failed call the same way (never
    on another backend: cuBLASLt's fp8 GEMM is not traded for the own
    kernel, nor back, over a fault);
  - cuBLAS's own status from the failed call returned to the caller, who
    sees its output untouched (the failed call was cuBLAS itself);
and never crash, hang, leak device memory (the stand-in's counters:
allocations minus frees no more than without the fault), leave a partial
log line, or draw a complaint from the stand-in (where a GPU would fault).
Routing-log records may go missing only when the failed call is one the
log itself makes.

  fault_loop.py --table OUT.md [--routes a;b] [--jobs J] [--json OUT.json]
                [--doc docs/reliability.md (--update | --check)]
writes the generated table and exits 1 listing every run that broke a
rule. --update puts the table into the doc's generated section (every
route must have run); --check fails unless the doc's rows for the routes
that ran are the ones just generated.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import harness  # noqa: E402

CLIENT = harness.CLIENT_DIR / "ffma_client_cu13"
TIMEOUT_S = 60
N_MAX = 500  # an entry called more often than this in one operation is a bug in the operation

# The operation: one small GEMM per entry point (the kernels run under CPU
# emulation: size is time), operands 16-byte aligned (what
# cuBLASLt's fp8 GEMM needs), then cublasGemmEx again at the same site.
SHAPE = "m=32,n=16,k=32,pad=0,spad=0"
GEMMS = [
    f"--gemm=name=ex,api=ex,{SHAPE}",
    f"--gemm=name=ex64,api=ex64,{SHAPE}",
    f"--gemm=name=strided,api=strided,batch=2,{SHAPE}",
    f"--gemm=name=strided64,api=strided64,batch=2,{SHAPE}",
    f"--gemm=name=batched,api=batched,batch=2,{SHAPE}",
    f"--gemm=name=batched64,api=batched64,batch=2,{SHAPE}",
    f"--gemm=name=lt,api=lt,epi=bias,{SHAPE}",
    f"--gemm=name=ex_again,api=ex,{SHAPE}",
]

# route -> (environment, client flags). Devices: 8.0 native (bf16 has
# tensor cores there), 6.1 for ffma and the own fp8 kernel, 9.0 for
# cuBLASLt's fp8 GEMM, 10.0 for MXFP8, 7.5 for fp16.
ROUTES = OrderedDict(
    [
        ("native", ({"STANDIN_CC": "8.0", "GEMMSHIM_MODE": "native"}, [])),
        ("ffma", ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off"}, [])),
        # the last call captured into a CUDA graph (global mode), the graph
        # launched and destroyed (docs/graphs.md: the call's buffer owned by
        # the graph through a user object, freed at exit)
        ("ffma graph", ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off"},
                        ["--capture-from=7"])),
        ("ffma no-pools", ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off",
                             "STANDIN_NO_POOLS": "1"}, [])),
        ("fp8 own", ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "fp8"}, ["--fp8"])),
        ("fp8 cublaslt", ({"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_FP8_BACKEND": "cublaslt",
                           "GEMMSHIM_GATE": "off"}, ["--fp8"])),
        # block scales (fp8_block.c): the scaled quantize kernels and the
        # scale-mode attributes; the batched calls fall back to current.
        ("fp8 block", ({"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_FP8_BACKEND": "cublaslt",
                        "GEMMSHIM_FP8_RECIPE": "block", "GEMMSHIM_GATE": "off"}, ["--fp8"])),
        # MXFP8 (fp8_mx.c) on 10.0: 32-element E8M0 scales in cuBLASLt's
        # 128x4 tiles, VEC32_UE8M0; the batched calls fall back to current.
        ("fp8 mxfp8", ({"STANDIN_CC": "10.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_FP8_BACKEND": "cublaslt",
                        "GEMMSHIM_FP8_RECIPE": "mxfp8", "GEMMSHIM_GATE": "off"}, ["--fp8"])),
        # delayed scaling (fp8_sites.c): the site table, its ring memory and
        # their initialising memsets, the thread numbers and their exit key
        # (shim/base/threads.c); ex_again is the site's second call.
        ("fp8 delayed", ({"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_FP8_BACKEND": "cublaslt",
                          "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_GATE": "off"}, ["--fp8"])),
        # The same on the per-thread default stream: each call also records
        # its site's event there after its work (made at the slot's first
        # such use), for a later thread taking the site.
        ("fp8 delayed per-thread", ({"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_FP8_BACKEND": "cublaslt",
                                     "GEMMSHIM_FP8_RECIPE": "delayed", "GEMMSHIM_GATE": "off"},
                                    ["--fp8", "--stream=per-thread"])),
        # One more GEMM whose k (40) and m (33, ldc 33) cuBLASLt's fp8 GEMM
        # refuses as given: k padded by the quantize kernel, A8's extra
        # columns zeroed (cuMemsetD8Async), C widened into an aligned
        # transient D' and D' cast into D (fp8.c).
        ("fp8 padded", ({"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_FP8_BACKEND": "cublaslt",
                         "GEMMSHIM_GATE": "off"}, ["--fp8", "--gemm=name=odd,api=ex,m=33,n=16,k=40,pad=0,spad=0"])),
        # sm 7.5: fp16 tensor cores, no bf16 ones. CUBLAS_BATCH_INVARIANCE_FLAGS
        # set: the routes ask whether cuBLASLt knows BATCH_INVARIANCE_FLAGS
        # (the Lt call's descriptor, a descriptor of the shim's own for the
        # GemmEx family, cublasLtGetVersion to confirm a refusal); the
        # stand-in's 13.1 does not know it, so the calls are routed.
        ("fp16", ({"STANDIN_CC": "7.5", "GEMMSHIM_MODE": "fp16", "GEMMSHIM_GATE": "off",
                   "CUBLAS_BATCH_INVARIANCE_FLAGS": "4"}, [])),
        # The same variable where cuBLASLt answers as 13.10, which knows the
        # attribute: every call runs native (routes/checks.c), and a failed
        # read of it must not route one.
        ("ffma invariant", ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off",
                             "STANDIN_CUBLASLT_VERSION": "131000", "CUBLAS_BATCH_INVARIANCE_FLAGS": "4"}, [])),
        # GPU time and the native comparison: events from the pool around
        # each call, read by the log's writer; every routed call compared
        # (each is its own site), native into scratch memory. The first
        # call (beta 0, a site of its own) is also measured for accuracy
        # (shim/accuracy.c: page-locked slots, a copy into them); the others
        # read C in place, which the measure declines.
        ("ffma gpu-time", ({"STANDIN_CC": "6.1", "GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off",
                             "GEMMSHIM_LOG_GPU_TIME": "1", "GEMMSHIM_COMPARE": "1"},
                            ["--gemm=name=acc,api=ex,beta=0,m=32,n=16,k=48,pad=0,spad=0"])),
    ]
)

# With GPU time on, a call takes its events from a pool the log's writer
# refills as it reads them (shim/gpu_time.c): how many events a run creates,
# and so how many contexts it pushes and pops to create them, depends on
# when the writer ran. So does how many batches the writer writes the
# records in (a record waits for its events), and each batch to the log
# file checks where it landed (shim/base/files.c: fstat, lseek, pread);
# a loaded machine showed those counts one or two apart between runs. For
# these entries on that route the count is not fixed: the loop checks every
# fault it reaches, and the table names the outcomes without counting them.
POOL_TIMED = {("ffma gpu-time", name) for name in ("cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuEventCreate",
                                                   "write", "fstat", "lseek", "pread")}

# The calls the routing log itself makes (looking at its name, opening and
# checking its file, its buffers, its flusher thread, %h, writing): failing
# them may lose records.
LOG_ENTRIES = {"open", "lstat", "fstat", "fcntl", "poll", "write", "close", "malloc", "calloc", "pthread_create", "gethostname"}

# cuda.h / cublas_api.h values of the failure values sys.h gives (sys.h
# says which document names each one for its call).
FAIL_VALUES = {
    "CUDA_ERROR_UNKNOWN": 999,
    "CUDA_ERROR_OUT_OF_MEMORY": 2,
    "CUBLAS_STATUS_NOT_INITIALIZED": 1,
    "CUBLAS_STATUS_ALLOC_FAILED": 3,
    "CUBLAS_STATUS_INVALID_VALUE": 7,
    "CUBLAS_STATUS_EXECUTION_FAILED": 13,
    "CUBLAS_STATUS_INTERNAL_ERROR": 14,
}
POLICY = "# a policy file, so that reading one is part of the operation\nnative sm=1.0\n"
REPORT = re.compile(r"GEMMSHIM_FAULT (\w+):(\d+)(\+?): (\d+) calls while armed, (\d+) failed$")


def call_table():
    """(name, section, failure value) for every entry, from shim/base/sys.h."""
    text = (ROOT / "shim" / "base" / "sys.h").read_text()
    out = []
    for section in ("LIBC", "DRIVER", "CUBLAS", "CUBLASLT", "HOOKED"):
        body = re.search(r"#define GS_SYS_%s\(X\)(.*?)(?:\n\n|\n/\*)" % section, text, re.S).group(1)
        for name, fail in re.findall(r"X\((\w+),\s*[\w *]+?,\s*([\w-]+),", body):
            out.append((name, section.lower(), fail))
    return out


class Failure(Exception):
    pass


# Reasons that say what failed without naming the call: the only call
# behind each (the handle's pointer mode, dlopen of the driver).
REASON_OF = {
    "cublasGetPointerMode_v2": ["the handle's pointer mode is unknown"],
    "dlopen": ["libcuda.so.1 could not be loaded"],
}
# Frees that fail leave their memory allocated: the driver refused them.
FREES = {"cuMemFree_v2", "cuMemFreeAsync"}


def signatures(name, section, fail):
    """Texts one of which a decline reason caused by this entry must hold."""
    sig = [name, re.sub(r"_v2$", "", name), *REASON_OF.get(name, [])]
    if section == "driver":
        sig.append(f"CUresult {FAIL_VALUES.get(fail, fail)}")
        if fail == "CUDA_ERROR_OUT_OF_MEMORY":
            sig.append("out of device memory")
    elif section != "libc":
        sig.append(f"status {FAIL_VALUES.get(fail, fail)}")
    else:
        sig += ["out of memory", "out of host memory", "Input/output error"]
    return sig


class Loop:
    def __init__(self, workdir, jobs):
        self.work = Path(workdir)
        self.jobs = jobs
        self.policy = self.work / "policy.txt"
        self.policy.write_text(POLICY)
        self.table = call_table()
        self.baselines = {}

    def run(self, route, tag, fault):
        env, flags = ROUTES[route]
        d = self.work / re.sub(r"[^\w]+", "_", f"{route}-{tag}")
        d.mkdir(parents=True, exist_ok=True)
        for f in d.iterdir():
            f.unlink()
        # INFO: the options, the policy and the exit summary go to the
        # debug output, so its writes are part of the operation too; and
        # the fault report at exit is an INFO line.
        full = {**env, "GEMMSHIM_POLICY": str(self.policy), "GEMMSHIM_LOG": str(d / "log.%h.jsonl"),
                "GEMMSHIM_DEBUG": "INFO",
                "STANDIN_COUNTS": str(d / "counts")}
        if fault:
            full["GEMMSHIM_FAULT"] = fault
        try:
            r = harness.run([CLIENT, *flags, *GEMMS], harness.STANDIN[13], shim=True, env=full, timeout=TIMEOUT_S)
        except AssertionError as e:  # the harness's timeout
            raise Failure(f"hang: {e}")
        logs = list(d.glob("log.*.jsonl"))
        log_text = logs[0].read_text() if logs else ""
        counts = harness.standin_counts(d / "counts") if (d / "counts").exists() else {}
        return r, log_text, counts

    def baseline(self, route):
        """The operation without a fault; also the number of calls of each entry."""
        armed = ",".join(f"{n}:1000000000" for n, _, _ in self.table)
        r, log_text, counts = self.run(route, "baseline", armed)
        if r.returncode != 0:
            raise Failure(f"{route}: baseline failed\n{r.describe()}")
        calls = {}
        for line in r.stderr.splitlines():
            m = REPORT.search(line)
            if m:
                calls[m.group(1)] = int(m.group(4))
        recs = [x for x in (json.loads(l) for l in log_text.splitlines()) if "header" not in x]
        self.baselines[route] = (r, recs, counts, calls)
        return calls

    def check(self, route, entry, n, persistent):
        """One run; returns (reached, outcomes) or raises Failure."""
        name, section, fail = entry
        spec = f"{name}:{n}{'+' if persistent else ''}"
        r, log_text, counts = self.run(route, spec, spec)
        base_r, base_recs, base_counts, _ = self.baselines[route]
        where = f"[{route}] GEMMSHIM_FAULT={spec}"

        def bad(why):
            raise Failure(f"{where}: {why}\n{r.describe()}\n--- log\n{log_text}")

        if r.returncode < 0 or r.returncode not in (0, 1, 2):
            bad(f"exit status {r.returncode}")
        if "standin:" in r.stderr:
            bad("the stand-in complained (a GPU would have faulted)")
        for line in r.stderr.splitlines():
            if not line.startswith(("gemmshim ", "ffma_client: ")):
                bad(f"stray stderr line {line!r}")
        reports = [REPORT.search(l) for l in r.stderr.splitlines()]
        reports = [m for m in reports if m]
        if len(reports) != 1 or reports[0].group(1) != name:
            bad("no fault report at exit")
        failed = int(reports[0].group(5))
        reached = failed > 0
        # Device memory: nothing more left allocated than without the fault,
        # but for the one scratch buffer a context keeps when it is not known
        # to have memory pools (docs/ffma.md), and what a failed free leaves.
        extra = 1 + (failed if name in FREES else 0)
        live, base_live = counts.get("standin_live_allocations", 0), base_counts.get("standin_live_allocations", 0)
        if live > base_live + extra:
            bad(f"{live} device allocations left, {base_live} without the fault")
        def async_left(c):  # stream-ordered allocations (the default pool's or the shim's own) not freed
            return c.get("cuMemAllocAsync", 0) + c.get("cuMemAllocFromPoolAsync", 0) - c.get("cuMemFreeAsync", 0)
        if async_left(counts) > async_left(base_counts) + (failed if name == "cuMemFreeAsync" else 0):
            bad("stream-ordered allocations not freed")
        leak_note = "device memory left by the failed free" if name in FREES and live > base_live else None
        if log_text and not log_text.endswith("\n"):
            bad("partial last log line")
        recs = [x for x in (json.loads(l) for l in log_text.splitlines()) if "header" not in x]

        outcomes = [leak_note] if leak_note else []
        if r.returncode == 2:
            # Set-up failed: the failed call must be the client's own cuBLAS
            # handle creation or destruction, with cuBLAS's status.
            m = re.search(r"ffma_client: (cublas\w+)\(.*\) failed \((\d+)\)", r.stderr)
            if not m or section != "hooked" or m.group(1) + "_v2" != name or int(m.group(2)) != FAIL_VALUES[fail]:
                bad("the client's set-up failed")
            return reached, [f"{name} returned status {m.group(2)} to the caller"]
        calls = r.calls
        if len(calls) != len(GEMMS) + sum(f.startswith("--gemm=") for f in ROUTES[route][1]):
            bad("the client did not report every call")
        if len(recs) != len(calls) and name not in LOG_ENTRIES:
            bad(f"{len(recs)} log records for {len(calls)} calls")
        if len(recs) < len(calls):
            # Said once, unless every write fails (the warning's own too).
            warned = re.search(r"^gemmshim \S+ WARN GEMMSHIM_LOG: .*; the routing log is off", r.stderr, re.M)
            if not warned and not (name == "write" and persistent):
                bad("log records lost without a warning")
            outcomes.append("log records lost" + (", said why" if warned else ""))
        by_seq = {i: rec for i, rec in enumerate(recs)} if len(recs) == len(calls) else {}
        for i, call in enumerate(calls):
            if call["ok"] != "1":
                bad(f"call {call['name']}: wrong result")
            status = int(call["status"])
            rec = by_seq.get(i)
            base = base_recs[i]
            if status != 0:
                if section not in ("hooked", "cublas", "cublaslt") or status != FAIL_VALUES[fail]:
                    bad(f"call {call['name']}: status {status}")
                if rec is not None and rec["status"] != status:
                    bad(f"call {call['name']}: logged status {rec['status']}")
                outcomes.append(f"status {status} to the caller")
                continue
            if rec is None:
                continue
            if rec["api"] != base["api"]:
                bad(f"record {i} is for {rec['api']}")
            if rec["route"] == base["route"] and rec.get("backend") != base.get("backend"):
                # The fp8 route never trades cuBLASLt for its own kernel (or
                # back) over a fault: a refusal on sm_89+ runs native.
                bad(f"call {call['name']}: backend {rec.get('backend')} instead of {base.get('backend')}")
            if rec["route"] == base["route"] and rec.get("recipe") == base.get("recipe"):
                outcomes.append("ran as without the fault")
                continue
            reason = rec["reason"]
            if rec["route"] == base["route"]:
                # Another fp8 recipe took the call (fp8_recipes.c): its
                # reason must name the failed call.
                m = re.search(r"recipe \w+ instead: ([^;]*)", reason)
                if not m or not any(x in m.group(1) for x in signatures(name, section, fail)):
                    bad(f"call {call['name']}: recipe {rec.get('recipe')} instead of {base.get('recipe')} without "
                        f"naming the failed call: {reason!r}")
                outcomes.append(f"recipe {rec.get('recipe')} instead: " + (m.group(1) if m else "?"))
                continue
            if rec["route"] != "native":
                bad(f"call {call['name']}: route {rec['route']}")
            sig = signatures(name, section, fail)
            if reason == "pass-through: bad configuration (see the shim's first warning)":
                # The policy file could not be read: pass-through, said once.
                m = re.search(r"^gemmshim \S+ WARN GEMMSHIM_POLICY='[^']*': (cannot \w+) \(([^)]*)\)", r.stderr, re.M)
                if not m or not any(x in m.group(2) for x in sig):
                    bad("pass-through without a warning naming the policy file and the failure")
                outcomes.append(f"native: pass-through, the policy file: {m.group(1)} ({m.group(2)})")
                continue
            mode = base["reason"].split(";")[0] + "; "
            if not reason.startswith(mode):
                bad(f"call {call['name']}: reason {reason!r}")
            why = reason[len(mode):]
            if why.endswith("; ran native"):
                why = why[:-len("; ran native")]
            if not any(x in why for x in sig):
                bad(f"call {call['name']}: the reason {why!r} does not name the failed call")
            # One outcome per failed getter, not per attribute it was reading.
            outcomes.append("native: " + re.sub(r"\((?:[A-D]'s )?CUBLASLT_\w+\)", "(...)", why))
        return reached, outcomes

    def entry_route(self, route, entry, calls):
        """The loop for one entry on one route: both kinds of fault."""
        result = {"calls": calls, "runs": 0, "outcomes": Counter(), "errors": []}
        for persistent in (False, True):
            n = 1
            while True:
                try:
                    reached, outcomes = self.check(route, entry, n, persistent)
                except Failure as e:
                    result["errors"].append(str(e))
                    break
                result["runs"] += 1
                if not reached:
                    break
                for o in sorted(set(outcomes)):
                    result["outcomes"][o] += 1
                n += 1
                if n > N_MAX:
                    result["errors"].append(f"[{route}] {entry[0]}: still reached at N={n}")
                    break
            if (route, entry[0]) in POOL_TIMED:
                if n - 1 > calls + N_POOL_SLACK and not result["errors"]:
                    result["errors"].append(f"[{route}] {entry[0]}: reached up to N={n - 1}, far past the "
                                            f"{calls} calls of the baseline")
            elif n - 1 != calls and not result["errors"]:
                result["errors"].append(f"[{route}] {entry[0]}{'+' if persistent else ''}: "
                                        f"reached up to N={n - 1}, but the operation makes {calls} calls")
        return result

    def all(self, routes):
        results = OrderedDict()
        work = []
        for route in routes:
            calls = self.baseline(route)
            for entry in self.table:
                work.append((route, entry, calls.get(entry[0], 0)))
        with ThreadPoolExecutor(self.jobs) as pool:
            done = pool.map(lambda w: (w, self.entry_route(*w)), work)
            for (route, entry, calls), res in done:
                results[(entry[0], route)] = res
        return results


N_POOL_SLACK = 64


def markdown(results, routes, table):
    out = ["| call | route | calls made | faults tried | outcomes (runs) |", "|---|---|---|---|---|"]
    unreached = OrderedDict((route, []) for route in routes)
    for name, _, _ in table:
        for route in routes:
            res = results[(name, route)]
            if res["calls"] == 0:
                unreached[route].append(f"`{name}`")
                continue
            if (route, name) in POOL_TIMED:  # counts vary with the log writer's timing (above)
                outs = "; ".join(sorted(res["outcomes"]))
                out.append(f"| `{name}` | {route} | varies | varies | {outs.replace('|', '/')} |")
                continue
            outs = "; ".join(f"{o} ({c})" for o, c in sorted(res["outcomes"].items(), key=lambda x: (-x[1], x[0])))
            out.append(f"| `{name}` | {route} | {res['calls']} | {res['runs']} | {outs.replace('|', '/')} |")
    out.append("")
    out.append("Not called by the operation (one run each, fault not reached):")
    out.append("")
    for route, names in unreached.items():
        out.append(f"- {route}: {', '.join(names) if names else 'none'}")
    total = sum(res["runs"] for (name, route), res in results.items() if (route, name) not in POOL_TIMED)
    out.append("")
    out.append(f"{total} runs in all, besides those of the entries marked varies.")
    return "\n".join(out) + "\n"


BEGIN = "<!-- fault table: generated by tests/faults/fault_loop.py (make faults); do not edit -->"
END = "<!-- end of fault table -->"


def doc_section(doc):
    text = Path(doc).read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"fault loop: {doc} has no generated fault section ({BEGIN})")
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    return head, body, tail


def rows_for(section, routes):
    """The lines of a generated section that belong to the given routes."""
    out = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[2] in routes:
            out.append(line)
        elif any(line.startswith(f"- {r}: ") for r in routes):
            out.append(line)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--routes", default=";".join(ROUTES))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--doc")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    routes = [r.strip() for r in args.routes.split(";")]
    unknown = [r for r in routes if r not in ROUTES]
    if unknown:
        raise SystemExit(f"fault loop: unknown route(s) {unknown}; expected some of {list(ROUTES)}")
    harness.require_built([CLIENT, harness.SHIM])
    with tempfile.TemporaryDirectory(prefix="gemmshim-faults-") as tmp:
        loop = Loop(tmp, args.jobs)
        try:
            results = loop.all(routes)
        except Failure as e:
            print(f"fault loop: {e}", file=sys.stderr)
            return 1
    errors = [e for res in results.values() for e in res["errors"]]
    table = markdown(results, routes, loop.table)
    Path(args.table).parent.mkdir(parents=True, exist_ok=True)
    Path(args.table).write_text(table)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {f"{k[0]} | {k[1]}": {**v, "outcomes": dict(v["outcomes"])} for k, v in results.items()}, indent=1))
    runs = sum(res["runs"] for res in results.values())
    if args.doc and args.update and not errors:
        if routes != list(ROUTES):
            raise SystemExit("fault loop: --update needs every route")
        head, _, tail = doc_section(args.doc)
        Path(args.doc).write_text(head + BEGIN + "\n" + table + END + tail)
        print(f"fault loop: {args.doc} updated")
    if args.doc and args.check:
        _, body, _ = doc_section(args.doc)
        want, got = rows_for(body, routes), rows_for(table, routes)
        if want != got:
            import difflib
            diff = "\n".join(difflib.unified_diff(want, got, "committed", "generated", lineterm=""))
            errors.append(f"{args.doc}'s fault table is not what the loop gives now "
                          f"(run `make faults` to regenerate it):\n{diff}")
    if errors:
        for e in errors:
            print(f"fault loop: FAILED: {e}\n", file=sys.stderr)
        print(f"fault loop: {len(errors)} failures in {runs} runs", file=sys.stderr)
        return 1
    print(f"fault loop: {runs} runs over {len(routes)} routes and {len(loop.table)} calls: every rule held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
