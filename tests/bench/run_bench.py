#!/usr/bin/env python3
"""Host cost of the shim per intercepted call, over the CPU stand-in.

For each entry point (cublasGemmEx, cublasLtMatmul; cublasGemmEx again in a
process that destroyed 2000 handles first, whose per-call cost must be the
same) and each setting
(without the shim, shim with the log off, shim with the log on, the log
with GEMMSHIM_LOG_GPU_TIME=1, shim with an NVTX tool attached: tests/integration/nvtx_inject.c recording nothing,
so the row is the shim's range naming and NVTX's dispatch) it measures
  * instructions per call with valgrind's callgrind: the difference between
    a run of N2 and a run of N1 calls, divided by N2 - N1, so load-time work
    cancels out (repeatable to the instruction);
  * wall time per call: median of several in-process loops;
  * system calls per call with strace -c (difference of two call counts),
    when strace is installed.
The shim's cost is each number minus the no-shim baseline, measured in the
same run. Usage: run_bench.py [BUILD_DIR]  (default: build)
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GSTEST_BUILD", "build")
CLIENT = os.path.join(BUILD, "tests", "bench", "bench_client")
STANDIN = os.path.join(BUILD, "standin", "cu12")
SHIM = os.path.abspath(os.path.join(BUILD, "libgemmshim.so"))
NVTX_TOOL = os.path.abspath(os.path.join(BUILD, "tests", "integration", "libnvtx_inject.so"))
N1, N2 = 2000, 12000
WALL_CALLS, WALL_REPEATS = 200000, 7


def env_for(setting, tmp):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.abspath(STANDIN)
    env["STANDIN_CC"] = "8.0"
    for k in list(env):
        if k.startswith(("GEMMSHIM_", "NVTX_")):
            del env[k]
    if setting != "no shim":
        env["LD_PRELOAD"] = SHIM
    if setting == "shim, log on":
        env["GEMMSHIM_LOG"] = os.path.join(tmp, "bench-%p.jsonl")
    if setting == "shim, log on, GPU time":
        env["GEMMSHIM_LOG"] = os.path.join(tmp, "bench-%p.jsonl")
        env["GEMMSHIM_LOG_GPU_TIME"] = "1"
    if setting == "shim, NVTX tool":
        env["NVTX_INJECTION64_PATH"] = NVTX_TOOL
    return env


def run(cmd, env):
    return subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)


def instructions(api, calls, env, tmp):
    """Instructions of the whole run."""
    return instructions_by_object(api, calls, env, tmp, split=False)[0]


def instructions_of_main_thread(api, calls, env, tmp):
    """Instructions of the thread that makes the calls (the client's main
    thread; callgrind numbers it 1 with --separate-threads=yes). The log
    writer's thread is left out: how many records it takes a wake-up, and
    so its instructions a record, follows the machine's load."""
    out = os.path.join(tmp, "cg.out")
    run(["valgrind", "--tool=callgrind", "--separate-threads=yes", "--callgrind-out-file=" + out, CLIENT, api,
         str(calls)], env)
    return _callgrind_total(out + "-01")


def instructions_by_object(api, calls, env, tmp, split=True):
    """Instructions of the whole run, and per shared object (callgrind_annotate)."""
    out = os.path.join(tmp, "cg.out")
    run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, CLIENT, api, str(calls)], env)
    per = {}
    if not split:
        return _callgrind_total(out), per
    ann = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", out],
                         capture_output=True, text=True).stdout
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+)\s.*\[(.+?)\]\s*$", line)
        if m:
            obj = os.path.basename(m.group(2))
            per[obj] = per.get(obj, 0) + int(m.group(1).replace(",", ""))
    return _callgrind_total(out), per


def _callgrind_total(out):
    with open(out) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("no callgrind totals")


def syscalls(api, calls, env, tmp):
    out = os.path.join(tmp, "strace.out")
    run(["strace", "-f", "-c", "-o", out, CLIENT, api, str(calls)], env)
    with open(out) as f:
        m = re.search(r"^-+.*\n\s*100\.00\s+\S+\s+\S+\s+(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else None


def wall_ns(api, env):
    times = []
    for _ in range(WALL_REPEATS):
        r = run([CLIENT, api, str(WALL_CALLS)], env)
        times.append(float(re.search(r"ns_per_call=([\d.]+)", r.stdout).group(1)))
    return statistics.median(times)


def main():
    settings = ["no shim", "shim, log off", "shim, log on", "shim, log on, GPU time", "shim, NVTX tool"]
    have_strace = shutil.which("strace") is not None
    rows, split = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for api in ("gemm", "gemm-dead", "lt"):
            base = {}
            for s in settings:
                env = env_for(s, tmp)
                (i2, p2), (i1, p1) = instructions_by_object(api, N2, env, tmp), instructions_by_object(api, N1, env, tmp)
                ins = (i2 - i1) / (N2 - N1)
                objs = {o: (p2.get(o, 0) - p1.get(o, 0)) / (N2 - N1) for o in set(p1) | set(p2)}
                sc = None
                if have_strace:
                    a, b = syscalls(api, N1, env, tmp), syscalls(api, N2, env, tmp)
                    sc = (b - a) / (N2 - N1) if a is not None and b is not None else None
                ns = wall_ns(api, env)
                if s == "no shim":
                    base = {"ins": ins, "ns": ns}
                rows.append((api, s, ins, ins - base["ins"], ns, ns - base["ns"], sc))
                split.append((api, s, objs))
    name = {"gemm": "cublasGemmEx", "gemm-dead": "cublasGemmEx, 2000 handles destroyed before",
            "lt": "cublasLtMatmul"}
    print("| entry point | setting | instructions/call | added by shim | ns/call | added ns | syscalls/call |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for api, s, ins, dins, ns, dns, sc in rows:
        scs = "n/a (no strace)" if sc is None else f"{sc:.3f}"
        print(f"| {name[api]} | {s} | {ins:.0f} | {dins:.0f} | {ns:.1f} | {dns:.1f} | {scs} |")
    print()
    # Where the instructions are: the shim's own, libc's (locks, clocks,
    # formatting), and the driver's (the stand-in's costs, not a GPU driver's).
    print("| entry point | setting | libgemmshim.so | libc | libcuda (stand-in) | NVTX tool |")
    print("|---|---|---:|---:|---:|---:|")
    for api, s, objs in split:
        def g(name):
            return f"{objs.get(name, 0):.0f}"
        print(f"| {name[api]} | {s} | {g('libgemmshim.so')} | {g('libc.so.6')} | {g('libcuda.so.1')} | "
              f"{g('libnvtx_inject.so')} |")
    print()
    print("Goals: log off < 1000 added instructions and < 150 ns added; log on < 1000 ns added; "
          "0 system calls per call (log on: one write per flush, not per call).")


if __name__ == "__main__":
    main()
