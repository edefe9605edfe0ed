#!/usr/bin/env python3
"""Host cost of routed calls (ffma, fp8 with the shim's GEMM, fp8 through
cuBLASLt), over the CPU stand-in: the rows `make bench` adds below the
intercept table of run_bench.py.

A routed call runs the shim's kernels and the GEMM on the stand-in's CPU
emulation, whose instructions would drown the shim's own, so two numbers
are kept apart, both from valgrind's callgrind (exact, repeatable, never
timed):
  * instructions per call in the shim's own code: the self cost of
    libgemmshim.so's functions (what it spends in libc, the driver, cuBLAS
    and the emulated kernels is not in it), (Ir of N2 calls - Ir of N1
    calls) / (N2 - N1) at SHAPE, so set-up and the first call's module
    loading and fp8 site creation cancel out;
  * instructions per call of the whole process, for scale.
Library calls per call are scripts/perf_report.py's (the same client and
routes, STANDIN_COUNTS at its 256^3 shape): every exported function of the
stand-in libcuda, libcublas and libcublasLt, against the same call native.
Usage: routed_bench.py [BUILD_DIR]"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import perf_report  # noqa: E402  (ROUTES, counts, per_call)

SHAPE = (64, 64, 64)  # small: the emulated GEMM is most of each call under valgrind
N1, N2 = 4, 20


def env_for(build, cc, extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMMSHIM_", "STANDIN_", "LD_"))}
    env.update(LD_LIBRARY_PATH=os.path.abspath(os.path.join(build, "standin", "cu13")),
               LD_PRELOAD=os.path.abspath(os.path.join(build, "libgemmshim.so")),
               STANDIN_KERNELS=os.path.abspath(os.path.join(build, "kernels", "libgemmshim_kernels_host.so")),
               STANDIN_CC=cc, **extra)
    return env


def self_cost(path, obj_suffix):
    """Ir spent in the functions of objects whose path ends with obj_suffix,
    excluding what they call (callgrind's format: a cost line right after a
    `calls=` line is the called function's inclusive cost)."""
    names, ob, after_call, own, total = {}, None, False, 0, 0
    with open(path) as f:
        for line in f:
            if line.startswith(("ob=", "cob=")):
                # "(id) name" defines a compressed name, "(id)" uses one;
                # cob= lines define them too.
                ref = line.split("=", 1)[1].strip()
                if ref.startswith("("):
                    num, _, name = ref.partition(")")
                    if name.strip():
                        names[num] = name.strip()
                    ref = names.get(num, name.strip())
                if line.startswith("ob="):
                    ob = ref
            elif line.startswith("calls="):
                after_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if after_call:
                    after_call = False
                    continue
                total += cost
                if ob and ob.endswith(obj_suffix):
                    own += cost
    return own, total


def callgrind(client, calls, env, tmp):
    out = os.path.join(tmp, "cg-routed.out")
    subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, client, *map(str, SHAPE),
                    str(calls)], env=env, check=True, capture_output=True, text=True, timeout=1800)
    return self_cost(out, "/libgemmshim.so")


def route_at_shape(client, env, tmp):
    """The route the log gives the last of N1 calls at SHAPE (outside
    valgrind: the log would add its own instructions)."""
    log = os.path.join(tmp, "routed.jsonl")
    if os.path.exists(log):
        os.unlink(log)
    subprocess.run([client, *map(str, SHAPE), str(N1)], env={**env, "GEMMSHIM_LOG": log}, check=True,
                   capture_output=True, text=True, timeout=600)
    routes = [l.split('"route":"', 1)[1].split('"', 1)[0] for l in open(log) if '"route":"' in l]
    return routes[-1] if routes else "?"


def rows(build):
    client = os.path.join(build, "perf", "route_calls")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        calls = {}
        for name, cc, extra in perf_report.ROUTES:
            lo, _ = perf_report.counts(build, client, cc, extra, perf_report.CALLS_LO, tmp)
            hi, routes = perf_report.counts(build, client, cc, extra, perf_report.CALLS_HI, tmp)
            calls[name] = (sum(perf_report.per_call(lo, hi).values()), routes[-1] if routes else "?")
        for name, cc, extra in perf_report.ROUTES:
            env = env_for(build, cc, extra)
            own1, all1 = callgrind(client, N1, env, tmp)
            own2, all2 = callgrind(client, N2, env, tmp)
            native = "native (sm_61)" if cc == "6.1" else "native (sm_90)"
            lib, route = calls[name]
            small = route_at_shape(client, env, tmp)
            ran = route if small == route else \
                f"{small} at {'x'.join(map(str, SHAPE))}, {route} at {'x'.join(map(str, perf_report.SHAPE))}"
            out.append((name, ran, (own2 - own1) / (N2 - N1), (all2 - all1) / (N2 - N1), lib, lib - calls[native][0]))
    return out


def print_rows(build):
    m, n, k = SHAPE
    pm, pn, pk = perf_report.SHAPE
    print(f"Routed calls: bf16 cublasGemmEx (T,N, fp32 compute, beta 0), steady state. Instructions at {m}x{n}x{k} "
          f"(callgrind, ({N2} - {N1} calls) / {N2 - N1}); library calls at {pm}x{pn}x{pk} (STANDIN_COUNTS, "
          f"as docs/perf-static.md).")
    print()
    print("| route | ran as | shim's own instructions/call | all instructions/call (with the emulated GEMM) "
          "| library calls/call | added over native |")
    print("|---|---|---:|---:|---:|---:|")
    for name, route, own, whole, lib, added in rows(build):
        print(f"| {name} | {route} | {own:.0f} | {whole:.0f} | {lib:g} | {added:+g} |")


if __name__ == "__main__":
    print_rows(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GSTEST_BUILD", "build"))
