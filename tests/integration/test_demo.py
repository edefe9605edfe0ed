"""`make demo` end to end, with fewer steps: demo/run_demo.py runs
demo/train_demo under the shim over the stand-in, as a GTX 1080 (sm_6.1)
and an H100 (sm_9.0), in native, auto and fp8 modes. Asserts what it
prints (losses, routing summaries, the final lines) and what each run's
routing log holds."""

import re
import subprocess
import sys

import pytest

from harness import BUILD, KERNELS_HOST, PRELOAD_PREFIX, ROOT, SHIM, read_log, require_built

STEPS = 10
GPUS = {"gtx1080-sm61": "6.1", "h100-sm90": "9.0"}
MODES = ("native", "auto", "fp8")
RUNS = [(gpu, mode) for gpu in GPUS for mode in MODES]

# The model's GEMMs, in the order train_demo.c makes them each step, as
# cuBLAS sees them (column-major): api, m, n, k, transa, transb, batch.
# B = 128 samples, F = 64 inputs in G = 4 groups of 16, H = 128 hidden
# (4 x 32), O = 16 outputs.
GEMMS = [
    ("cublasGemmStridedBatchedEx", 32, 128, 16, "T", "N", 4),  # layer 1 forward (bmm)
    ("cublasLtMatmul", 16, 128, 128, "T", "N", 1),  # layer 2 forward (addmm, bias epilogue)
    ("cublasGemmEx", 128, 128, 16, "N", "N", 1),  # layer 2 grad-input
    ("cublasGemmEx", 128, 16, 128, "N", "T", 1),  # layer 2 grad-weight
    ("cublasGemmStridedBatchedEx", 16, 32, 128, "N", "T", 4),  # layer 1 grad-weight (bmm)
]

# The route each run must take for every call, with its backend and reason.
# Built-in policy (docs/policy.md): rule 1 is
# `fp16 sm=7.0-7.5 ab=bf16 compute=32f`, rule 2 `ffma sm=6.0-6.9 ab=bf16
# compute=32f`, rule 3 `native`. The fp8 backend
# (docs/fp8-sites.md, "Backends"): cuBLASLt's fp8 GEMM on sm_89 and newer
# (cuBLASLt documents fp8 matmul for compute capability 8.9+), the shim's
# own kernel below.
FFMA_REASON = "policy: built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)"


def expected(gpu, mode, api):
    """(route, backend, reason) of every call of api in that run; fp8
    reasons are the steady-state ones (the first call of a site adds one
    clause, checked apart)."""
    if mode == "native":
        return "native", None, "GEMMSHIM_MODE=native"
    if mode == "auto":
        if gpu == "gtx1080-sm61":
            # The ffma route runs cublasLtMatmul as an fp32 cuBLASLt matmul
            # and the GemmEx family as fp32 GEMMs (docs/ffma.md).
            return "ffma", "lt-fp32" if api == "cublasLtMatmul" else "sgemm", FFMA_REASON
        return "native", None, "policy: built-in rule 3 (native)"
    if gpu == "gtx1080-sm61":
        return "fp8", "own", "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3; own kernel: cuBLASLt fp8 needs sm_89 or newer"
    return "fp8", "cublaslt-fp8", "GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3"


FINAL = re.compile(r"^final (gtx1080-sm61|h100-sm90) +(native|auto|fp8) +loss (\d+\.\d{6}) +vs native ([+-]\d+\.\d{6})"
                   r" +\((.+)\)$")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    # What run_demo.py runs, under --build: the shim, the stand-in, the host kernels.
    require_built([BUILD / "demo" / "train_demo", SHIM, KERNELS_HOST, BUILD / "standin" / "cu13" / "libcublas.so.13"])
    out = tmp_path_factory.mktemp("demo")
    argv = [sys.executable, str(ROOT / "demo" / "run_demo.py"), "--build", str(BUILD), "--steps", str(STEPS),
            "--out", str(out)]
    for lib in PRELOAD_PREFIX:
        argv += ["--preload-first", lib]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(argv)}\nexit {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert r.stderr == "", r.stderr
    return out, r.stdout


def loss_table(stdout):
    """The side-by-side table: one row of losses per step, a column per run."""
    lines = stdout.splitlines()
    start = lines.index("loss per step:")
    header = lines[start + 1].split()
    assert header[0] == "step" and header[1:] == [w for gpu, mode in RUNS for w in (gpu.split("-")[0], mode)]
    rows = [lines[start + 2 + i].split() for i in range(STEPS)]
    assert [int(r[0]) for r in rows] == list(range(STEPS))
    return {run: [float(r[1 + j]) for r in rows] for j, run in enumerate(RUNS)}


def test_losses_fall(demo):
    table = loss_table(demo[1])
    for run, losses in table.items():
        # Full-batch Adam on a fixed seeded problem: every step lowers the loss.
        assert all(b < a for a, b in zip(losses, losses[1:])), (run, losses)
        assert losses[-1] < losses[0] / 3, (run, losses)
    native = table[("gtx1080-sm61", "native")]
    # The stand-in's GEMMs do not depend on the capability, and auto on sm_9.0
    # runs native: the same losses to the bit.
    assert table[("h100-sm90", "native")] == native
    assert table[("h100-sm90", "auto")] == native
    # ffma widens bf16 exactly, multiplies in fp32 and rounds once; the
    # stand-in's bf16 GEMM computes exactly that (tests/standin/README.md,
    # "Numerics": inputs convert exactly, fp32 accumulation in k order, one
    # rounding, bias in fp32), so the ffma run matches native to the bit.
    assert table[("gtx1080-sm61", "auto")] == native
    # fp8 changes the numbers (E4M3 keeps 3 mantissa bits) but not the outcome.
    for gpu in GPUS:
        fp8 = table[(gpu, "fp8")]
        assert fp8 != native
        assert abs(fp8[-1] - native[-1]) <= 0.1 * native[-1], (gpu, fp8, native)


def test_times_are_called_the_stand_ins(demo):
    out, stdout = demo
    lines = stdout.splitlines()
    assert "stand-in times (CPU emulation): they check the machinery, not GPU speed. Every time and" in lines
    start = next(i for i, line in enumerate(lines) if line.startswith("profile of all six runs"))
    block = lines[start:lines.index("", start)]
    assert block[0] == ("profile of all six runs (stand-in times: the CPU time of each call's inline work, "
                        "not a GPU's):")
    assert block[2] == ("    warning: these times come from the CPU stand-in (Standin GPU sm_61, Standin GPU sm_90), "
                        "not a GPU: they check the machinery, not speed"), block
    assert not any("GPU time" in line or "gpu ms" in line or "GPU us" in line for line in block), block


def test_final_lines(demo):
    out, stdout = demo
    finals = [FINAL.match(line) for line in stdout.splitlines() if line.startswith("final ")]
    assert all(finals), [line for line in stdout.splitlines() if line.startswith("final ")]
    assert [(m[1], m[2]) for m in finals] == RUNS
    table = loss_table(stdout)
    for m in finals:
        gpu, mode, loss, diff = m[1], m[2], float(m[3]), float(m[4])
        assert loss == table[(gpu, mode)][-1]
        assert diff == pytest.approx(loss - table[(gpu, "native")][-1], abs=1.5e-6)
        route = expected(gpu, mode, "cublasGemmEx")[0]
        assert m[5] == f"{route} {STEPS * len(GEMMS)}", m[0]


@pytest.mark.parametrize("gpu,mode", RUNS)
def test_routing_log(demo, gpu, mode):
    out, stdout = demo
    recs = read_log(out / f"{gpu}-{mode}.jsonl")
    assert len(recs) == STEPS * len(GEMMS)
    sites = set()
    for i, rec in enumerate(recs):
        api, m, n, k, ta, tb, batch = GEMMS[i % len(GEMMS)]
        got = {key: rec.get(key) for key in ("api", "m", "n", "k", "transa", "transb", "batch")}
        assert got == dict(api=api, m=m, n=n, k=k, transa=ta, transb=tb, batch=batch), rec
        assert (rec["a_type"], rec["b_type"], rec["c_type"], rec["compute_type"]) == ("bf16", "bf16", "bf16", "32f")
        assert rec["sm"] == GPUS[gpu] and rec["status"] == 0, rec
        if api == "cublasLtMatmul":
            # addmm's bias epilogue, the bias in D's type (bf16).
            assert (rec["epilogue"], rec["bias_type"], rec["d_type"]) == ("bias", "bf16", "bf16"), rec
        route, backend, reason = expected(gpu, mode, api)
        assert (rec["decided"], rec["route"], rec.get("backend")) == (route, route, backend), rec
        # The default recipe, current scaling, keeps no per-site state: no
        # site is ever new, every call measures its own amax.
        assert rec["reason"] == reason, rec
        assert "site_event" not in rec, rec
        assert rec.get("recipe") == ("current" if mode == "fp8" else None), rec
        sites.add(rec["site"])
    assert len(sites) == len(GEMMS)

    # The routing summary printed for this run counts the same calls.
    label = {"gtx1080-sm61": "GTX 1080 (sm_6.1)", "h100-sm90": "H100 (sm_9.0)"}[gpu]
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"routing, {label} {mode} ("))
    block = lines[start:lines.index("", start)]
    assert f"  routing log: {STEPS * len(GEMMS)} calls from 1 file(s)" in block
    # The stand-in's times are the CPU's: every report says so, from the
    # log's header line (its device is the stand-in's), and never calls
    # them GPU times.
    assert block[2] == (f"    warning: these times come from the CPU stand-in (Standin GPU sm_{GPUS[gpu].replace('.', '')}), "
                        "not a GPU: they check the machinery, not speed"), block
    assert not any("GPU time" in line or "gpu ms" in line or "GPU us" in line for line in block), block
    for api, calls in (("cublasGemmEx", 2), ("cublasGemmStridedBatchedEx", 2), ("cublasLtMatmul", 1)):
        _, backend, _ = expected(gpu, mode, api)
        row = [api, expected(gpu, mode, api)[0], backend or "-", str(calls * STEPS)]
        # api, route, backend, calls; then the report's timing columns.
        assert any(line.split()[:4] == row for line in block), (row, block)
