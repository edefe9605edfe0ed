#!/usr/bin/env python3
"""The shim's per-call cost does not grow with the process's history: a
cublasGemmEx in a process that created and destroyed 2000 cuBLAS handles
first (as cuSOLVER users and frameworks rebuilding their state do) costs
the same instructions as one in a process that destroyed one, and at most
LOOKUP more than in a process that destroyed none (the routing log is on:
then every call looks up its device, which checks the handle). Counted
with callgrind (exact and repeatable, never timed) on the calling thread
only: the difference of a run of N2 and a run of N1 calls, divided by
N2 - N1, so set-up work cancels.
Usage: check_costs.py [BUILD_DIR]. Exits 1 when the costs differ by more
than SLACK instructions per call."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_bench  # noqa: E402

N1, N2 = 200, 1200
SLACK = 20    # 2000 destroyed vs 1: the same lookup (a scan of every remembered handle cost ~6000)
LOOKUP = 120  # 1 destroyed vs none: one hash bucket's loads


def per_call(api, env, tmp):
    a = run_bench.instructions_of_main_thread(api, N1, env, tmp)
    b = run_bench.instructions_of_main_thread(api, N2, env, tmp)
    return (b - a) / (N2 - N1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        env = run_bench.env_for("shim, log on", tmp)  # the log asks every call for its device
        fresh = per_call("gemm", env, tmp)
        one = per_call("gemm-dead1", env, tmp)
        many = per_call("gemm-dead", env, tmp)
    print(f"check_costs: cublasGemmEx instructions/call: {fresh:.1f} with no handle destroyed before, "
          f"{one:.1f} after 1, {many:.1f} after 2000")
    bad = 0
    if abs(many - one) > SLACK:
        print(f"check_costs: 2000 destroyed handles cost {many - one:.1f} instructions per call more than one "
              f"(allowed: {SLACK})")
        bad = 1
    if one - fresh > LOOKUP:
        print(f"check_costs: a destroyed handle costs {one - fresh:.1f} instructions per call (allowed: {LOOKUP})")
        bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
