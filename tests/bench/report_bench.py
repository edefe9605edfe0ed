#!/usr/bin/env python3
"""How long `gemmshim report` takes over a big routing log, and how much
memory it holds: writes a log of N records (default 1,000,000) of the kind
log.c writes (a training step's mix of shapes, sites, routes and threads,
with gpu_ns), then times the report with and without --trace and --plot.

  python3 tests/bench/report_bench.py [N] [DIR]

Prints one line per run: seconds and peak resident memory (ru_maxrss of the
child). Timings are measured, never asserted."""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_log(path, n):
    shapes = [(4096, 4096, 4096), (4096, 1024, 4096), (1024, 4096, 4096), (768, 3072, 768), (64, 64, 64)]
    routes = [("ffma", "ffma", "sgemm"), ("fp8", "fp8", "own"), ("native", "native", None), ("fp8", "native", None)]
    t = 1_764_480_000_000_000_000
    with open(path, "w") as f:
        for i in range(n):
            m, nn, k = shapes[i % len(shapes)]
            decided, route, backend = routes[(i // 7) % len(routes)]
            rec = {"seq": i + 1, "t_ns": t, "tid": 4242 + i % 4, "api": "cublasGemmEx" if i % 3 else "cublasLtMatmul",
                   "m": m, "n": nn, "k": k, "batch": 1, "transa": "T", "transb": "N", "a_type": "bf16",
                   "b_type": "bf16", "c_type": "bf16", "compute_type": "32f", "lda": k, "ldb": k, "ldc": m,
                   "stride_a": 0, "stride_b": 0, "stride_c": 0, "pointer_mode": "host", "algo": 99, "device": 0,
                   "sm": "6.1", "stream": "0x%x" % (0x7f0000 + i % 4), "site": "%016x" % (0x5f0c2a9e81d3b7a4 + i % 96),
                   "decided": decided, "route": route, "backend": backend,
                   "reason": "policy: built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)",
                   "status": 0, "status_name": "CUBLAS_STATUS_SUCCESS", "dur_ns": 20_000 + i % 997,
                   "gpu_ns": 1_000_000 + (i % 1013) * 100}
            if backend is None:
                del rec["backend"]
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            t += 30_000


def run(args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "gemmshim.report", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    took = time.monotonic() - start
    return took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    d = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="gs-report-bench-")
    log = os.path.join(d, "big.jsonl")
    write_log(log, n)
    print(f"log: {n} records, {os.path.getsize(log) / 2**20:.0f} MiB ({log})")
    # ru_maxrss of children is the largest so far: the runs go from the
    # smallest expected footprint up.
    for label, args in (("summary", [log]), ("summary + trace", [log, "--trace", os.path.join(d, "t.json")]),
                        ("summary + plot", [log, "--plot", os.path.join(d, "p.png")])):
        took, rss = run(args)
        print(f"{label}: {took:.1f} s, peak RSS so far {rss:.0f} MiB")


if __name__ == "__main__":
    main()
