#!/usr/bin/env python3
"""`make demo`: the shim's main job, on the CPU, with no GPU.

Runs build/demo/train_demo (a bf16 training loop that calls cuBLAS as
PyTorch does: strided-batched and cuBLASLt-with-bias forward, GemmEx and
strided-batched backward) with libgemmshim.so preloaded, over the CPU
stand-in of libcuda/libcublas/libcublasLt, on two emulated devices (a
GTX 1080, sm_6.1, and an H100, sm_9.0) in three modes each:

  native  every GEMM forwarded to cuBLAS untouched (still logged)
  auto    the built-in policy: ffma (fp32 GEMMs) on sm_6.1, native on sm_9.0
  fp8     every GEMM quantized to fp8 (current scaling: each tensor's own amax)

It prints the losses side by side, each run's routing summary (`gemmshim
report`, python/gemmshim/report/), and one final line per run:

  final <gpu> <mode> loss <X>  vs native <+D>  (<route> <calls>, ...)

where D is the difference from the native run on the same device. The
runs log GPU time per call and compare routed calls with native
(GEMMSHIM_LOG_GPU_TIME=1, GEMMSHIM_COMPARE=1; on the stand-in a "GPU" time is
the CPU time of the work inline on the stream: the report knows the stand-in
from each log's header line and calls those times stand-in times). It ends with one report of
all six runs, written with a Perfetto trace and a plot. Everything stays in
OUT (default BUILD/demo): the routing logs <gpu>-<mode>.jsonl, report.json,
trace.json, profile.png. Exit 1 when a run fails.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (log name, label, STANDIN_CC): the stand-in reports this compute capability.
GPUS = (("gtx1080-sm61", "GTX 1080 (sm_6.1)", "6.1"), ("h100-sm90", "H100 (sm_9.0)", "9.0"))
MODES = ("native", "auto", "fp8")

# Variables of the caller's shell that would change what the shim or the
# stand-in does behind the demo's back.
SCRUB = ("LD_PRELOAD", "LD_LIBRARY_PATH", "RANK", "LOCAL_RANK")
SCRUB_PREFIXES = ("GEMMSHIM_", "STANDIN_", "CUBLAS_LOG", "CUBLASLT_LOG")


def repo_path(p):
    p = Path(p)
    return p if p.is_absolute() else ROOT / p


def routes(log):
    """'ffma 200' or 'fp8 195, native 5': calls per route in a routing log."""
    counts = collections.Counter()
    with open(log, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if "header" not in rec:  # each process's first line
                counts[rec.get("route", "?")] += 1
    return ", ".join(f"{route} {n}" for route, n in counts.most_common())


def run_one(args, build, gpu, cc, mode, log):
    env = {k: v for k, v in os.environ.items() if k not in SCRUB and not k.startswith(SCRUB_PREFIXES)}
    env.update({
        "LD_PRELOAD": ":".join([*args.preload_first, str(build / "libgemmshim.so")]),
        "LD_LIBRARY_PATH": str(build / "standin" / "cu13"),
        "STANDIN_CC": cc,
        # The stand-in libcuda runs the shim's kernels from their CPU build.
        "STANDIN_KERNELS": str(build / "kernels" / "libgemmshim_kernels_host.so"),
        "GEMMSHIM_MODE": mode,
        "GEMMSHIM_LOG": str(log),
        # The demo's GEMMs are small (a few MFLOP): the routes' cost model
        # (docs/cost-model.md) would leave them all native.
        "GEMMSHIM_GATE": "off",
        # The profiling pipeline (docs/profiling.md): GPU time per call and
        # native runs of the routed GEMMs to compare with.
        "GEMMSHIM_LOG_GPU_TIME": "1",
        "GEMMSHIM_COMPARE": "1",
    })
    if log.exists():
        log.unlink()
    t0 = time.monotonic()
    r = subprocess.run([str(build / "demo" / "train_demo"), f"--steps={args.steps}"], env=env,
                       capture_output=True, text=True, timeout=600)
    secs = time.monotonic() - t0
    losses = [float(w[3]) for w in (line.split() for line in r.stdout.splitlines())
              if len(w) == 4 and w[0] == "step" and w[2] == "loss"]
    final = [line for line in r.stdout.splitlines() if line.startswith("final loss ")]
    ok = r.returncode == 0 and len(losses) == args.steps and len(final) == 1 and log.exists()
    if not ok:
        print(f"demo: {gpu} {mode} failed (exit {r.returncode}, {len(losses)} of {args.steps} steps,"
              f" log {'written' if log.exists() else 'missing'}):", file=sys.stderr)
        sys.stderr.write(r.stdout[-2000:] + r.stderr[-4000:])
    # train_demo's first line: "device NAME (sm_M.m); model ...".
    head = r.stdout.splitlines()[0] if r.stdout else ""
    return ok, losses, float(final[0].split()[2]) if final else None, secs, head


def profile(runs, out):
    """One report of every run's log, with a trace and a plot; False if it failed."""
    argv = [sys.executable, "-m", "gemmshim.report", "--top", "6", *(str(r["log"]) for r in runs),
            "--json", str(out / "report.json"), "--trace", str(out / "trace.json")]
    try:
        import matplotlib  # noqa: F401  (the plot needs it; Debian python3-matplotlib)
        argv += ["--plot", str(out / "profile.png")]
        plot_note = None
    except ImportError:
        plot_note = f"no plot: {sys.executable} cannot import matplotlib (Debian: python3-matplotlib)"
    print("profile of all six runs (stand-in times: the CPU time of each call's inline work, not a GPU's):")
    s = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    sys.stdout.write("".join("  " + line + "\n" for line in (s.stdout + s.stderr).splitlines()))
    if plot_note:
        print("  " + plot_note)
    print(f"  open {os.path.relpath(out / 'trace.json')} at https://ui.perfetto.dev (Open trace file)\n")
    return s.returncode == 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the build folder (default build)")
    ap.add_argument("--steps", type=int, default=40, help="training steps per run (default 40)")
    ap.add_argument("--out", help="folder for the routing logs (default BUILD/demo)")
    ap.add_argument("--preload-first", action="append", default=[], metavar="LIB",
                    help="a library to preload ahead of the shim (a sanitizer runtime); repeatable")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    build = repo_path(args.build)
    out = repo_path(args.out) if args.out else build / "demo"
    out.mkdir(parents=True, exist_ok=True)

    print("gemmshim demo: a bf16 training loop (demo/train_demo.c) under libgemmshim.so, over the CPU")
    print("stand-in of the CUDA libraries (tests/standin): no GPU is used, the devices are emulated.")
    print("  forward:  cublasGemmStridedBatchedEx (grouped layer), cublasLtMatmul with a bias epilogue")
    print("  backward: cublasGemmEx (grad-input, grad-weight), cublasGemmStridedBatchedEx (grad-weight)")
    print("  GEMMSHIM_GATE=off, since the demo's GEMMs are far too small for a route to pay")
    print("The stand-in computes a native bf16 GEMM and the ffma route's fp32 GEMM alike (exact products,")
    print("fp32 accumulation in k order, one rounding), so their losses agree to the bit here.")
    print("stand-in times (CPU emulation): they check the machinery, not GPU speed. Every time and")
    print("ratio below is the CPU's; what to expect on a GPU: README, \"Which GPU gets which route\".\n")

    runs = []
    failed = False
    t_start = time.monotonic()
    for gpu, label, cc in GPUS:
        for mode in MODES:
            log = out / f"{gpu}-{mode}.jsonl"
            ok, losses, final, secs, head = run_one(args, build, gpu, cc, mode, log)
            failed |= not ok
            runs.append({"gpu": gpu, "label": label, "mode": mode, "log": log, "losses": losses,
                         "final": final, "secs": secs})
            if len(runs) == 1:
                model = head.partition("; ")[2]
                print(model[:1].upper() + model[1:] + ".")
            print(f"ran {label:<18} {mode:<6} in {secs:4.1f} s   device reported: {head.partition(';')[0][len('device '):]}")
    print(f"6 runs in {time.monotonic() - t_start:.1f} s\n")

    print("loss per step:")
    names = [f"{r['gpu'].split('-')[0]} {r['mode']}" for r in runs]
    width = max(11, *(len(n) for n in names))
    print("  step " + " ".join(f"{n:>{width}}" for n in names))
    for i in range(args.steps):
        cells = [f"{r['losses'][i]:>{width}.6f}" if i < len(r["losses"]) else " " * width for r in runs]
        print(f"  {i:>4} " + " ".join(cells))
    print()

    for r in runs:
        print(f"routing, {r['label']} {r['mode']} ({os.path.relpath(r['log'])}):")
        s = subprocess.run([sys.executable, "-m", "gemmshim.report", "--top", "4", str(r["log"])],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
        failed |= s.returncode != 0
        sys.stdout.write("".join("  " + line + "\n" for line in (s.stdout + s.stderr).splitlines()))
        print()

    failed |= not profile(runs, out)

    native = {r["gpu"]: r["final"] for r in runs if r["mode"] == "native"}
    print("Each run: the last loss, its difference from native on the same device, the calls per route:")
    for r in runs:
        if r["final"] is None or native.get(r["gpu"]) is None:
            print(f"final {r['gpu']:<12} {r['mode']:<6} FAILED")
            continue
        print(f"final {r['gpu']:<12} {r['mode']:<6} loss {r['final']:.6f}  vs native {r['final'] - native[r['gpu']]:+.6f}"
              f"  ({routes(r['log'])})")
    if failed:
        print("demo: FAILED (see above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
