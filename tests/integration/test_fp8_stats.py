"""fp8 statistics of compared calls (docs/log-format.md, "fp8 statistics";
kernels/fp8_stats.h, shim/routes/fp8_stats.c), over the stand-in.

Operands are built from 8 explicit values (ffma_client's apat/bpat: each
value fills an eighth of op(A), op(B)), so the counts are known exactly:

- saturated: |x * scale| overflows the format (IEEE 754-2008 7.4: rounded
  with the exponent unbounded, past the largest finite value, E4M3 448:
  past 464) and the encoder clamps it (OCP 8-bit Floating Point
  Specification v1.0, table 1; TransformerEngine casts with saturation, as
  cvt.satfinite does, PTX ISA);
- flushed: a non-zero x whose code is zero: |x * scale| at most half of
  E4M3's smallest subnormal 2^-9 (round to nearest even), so below
  2^-10 / scale.

The current recipe's scale is TransformerEngine's Float8CurrentScaling one,
compute_scale_from_amax in transformer_engine/common/recipe/
recipe_common.cuh: scale = fp8_max / amax; nothing saturates under it. The
delayed recipe (TransformerEngine's DelayedScaling) quantizes with the scale
of the previous call's amax history, so a call whose values are larger than
the history's saturates."""

import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import harness
from harness import CLIENT_DIR, PRELOAD_PREFIX, ROOT, read_log, require_built, run
from test_fp8_scaled_quantize import BLK128, E4M3, VEC128, Args, Dim3, Launch

ENV = {"STANDIN_CC": "9.0", "GEMMSHIM_MODE": "fp8", "GEMMSHIM_GATE": "off", "GEMMSHIM_COMPARE": "1",
       "GEMMSHIM_COMPARE_EVERY": "1"}
M = N = K = 64
ELEMS = M * K  # op(A) and op(B) (K x N) have as many elements; each value an eighth
TINY = 2.0 ** -17  # bf16-exact
TINIER = 2.0 ** -19


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "ffma_client_cu13"
    require_built([path])
    return path


def gemm(name, apat, bpat):
    return (f"--gemm=name={name},m={M},n={N},k={K},beta=0,ab=bf16,c=fp32,pad=0,"
            f"apat={':'.join(map(repr, apat))},bpat={':'.join(map(repr, bpat))}")


def routed(client, standin, tmp_path, args, env):
    log = tmp_path / "stats.jsonl"
    r = run([client, *args, f"--wait-log={log}"], standin[13], shim=True, env={**ENV, **env, "GEMMSHIM_LOG": str(log)})
    # Saturated and flushed values are wrong by design: the client's
    # accuracy verdict (ok) is not asked for, only that every call ran.
    assert "standin:" not in r.stderr and [c["status"] for c in r.calls] == ["0"] * len(args), r.describe()
    recs = read_log(log)
    assert [x["route"] for x in recs] == ["fp8"] * len(args), recs
    return recs


def report(log, *args):
    """gemmshim report on log."""
    return subprocess.run([sys.executable, "-m", "gemmshim.report", str(log), *args],
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), capture_output=True, text=True)


def f32(x):
    return float(np.float32(x))


def te_scale_step(amax, fmt_max=448.0):
    """The kernels divide by the step amax / fmt_max (fp32); the log's scale
    is its reciprocal rounded to fp32. TE's own scale, fp8_max / amax in
    fp32, is within one fp32 rounding of it."""
    step = np.float32(amax) / np.float32(fmt_max)
    return float(np.float32(1.0 / np.float64(step)))


def test_current_recipe_amax_and_scale_exact_nothing_saturates(client, standin, tmp_path):
    # A: amax 3 (not a power of two: the scale 448/3 is inexact); 2^-19
    # flushes (2^-19 * 448/3 < 2^-10), 2^-17 does not (2^-17 * 448/3 >
    # 2^-10 rounds up to the smallest subnormal).
    a = [3.0, -1.5, 0.25, TINIER, 1.0, -2.0, TINY, 0.75]
    b = [1.0, -0.5, 0.25, 0.125, -1.0, 0.5, 0.375, 0.625]
    (rec,) = routed(client, standin, tmp_path, [gemm("c", a, b)], {"GEMMSHIM_FP8_RECIPE": "current"})
    assert rec["recipe"] == "current", rec
    assert (rec["a_amax"], rec["b_amax"]) == (3.0, 1.0), rec
    assert f32(rec["a_scale"]) == te_scale_step(3.0) and abs(rec["a_scale"] - 448 / 3) <= 448 / 3 * 2 ** -23, rec
    assert f32(rec["b_scale"]) == te_scale_step(1.0), rec
    assert (rec["a_elems"], rec["b_elems"]) == (ELEMS, ELEMS), rec
    assert (rec["a_sat"], rec["b_sat"]) == (0, 0), rec
    assert (rec["a_flush"], rec["b_flush"]) == (ELEMS // 8, 0), rec
    assert "a_worst_flush" not in rec and "b_worst_sat" not in rec, rec  # block recipes only


def test_current_recipe_amax_just_past_448_is_rounded_not_saturated(client, standin, tmp_path):
    # The step amax / 448 is rounded in fp32; for these amaxes it rounds
    # down, so amax / step is 448.00003: above 448, yet it rounds to 448.
    # Saturation is overflow as IEEE 754-2008 7.4 defines it (the value
    # rounded with the exponent unbounded is past the largest finite
    # value: for E4M3 past 464), so nothing saturates under current scaling.
    a = [0.51171875, -0.25, 0.125, 0.5, 0.0625, -0.375, 0.25, 0.03125]
    b = [0.88671875, -0.5, 0.25, 0.125, -0.75, 0.5, 0.375, 0.625]
    for amax in (a[0], b[0]):
        step = np.float32(amax) / np.float32(448)
        assert 448 < float(np.float32(amax) / step) < 464, amax
    (rec,) = routed(client, standin, tmp_path, [gemm("p", a, b)], {"GEMMSHIM_FP8_RECIPE": "current"})
    assert (rec["recipe"], rec["a_amax"], rec["b_amax"]) == ("current", a[0], b[0]), rec
    assert (rec["a_sat"], rec["b_sat"], rec["a_flush"], rec["b_flush"]) == (0, 0, 0, 0), rec


def test_delayed_first_call_scales_from_its_own_amax(client, standin, tmp_path):
    # A site's first call runs an amax pass and quantizes with its own
    # scale (TransformerEngine's DelayedScaling with an empty history
    # starts from the call's amax): amax 7 gives the step 7/448 = 1/64
    # exactly, scale 64; 7.0 lands exactly on 448 and does not count;
    # 2^-17 * 64 = 2^-11 < 2^-10 flushes. A step smaller than a later
    # call's amax (saturation) is checked on the kernels themselves:
    # tests/unit/test_fp8_kernels.c, test_quantize_stats.
    a = [7.0, 1.0, -1.0, 0.5, 2.0, -3.0, TINY, 4.0]
    b = [7.0, -1.0, 0.5, 0.25, 1.0, -2.0, 3.0, 0.125]
    (rec,) = routed(client, standin, tmp_path, [gemm("d", a, b)], {"GEMMSHIM_FP8_RECIPE": "delayed"})
    assert rec["recipe"] == "delayed", rec
    assert (rec["a_amax"], rec["a_scale"], rec["a_elems"], rec["a_sat"], rec["a_flush"]) == (
        7.0, 64.0, ELEMS, 0, ELEMS // 8), rec
    assert (rec["b_amax"], rec["b_scale"], rec["b_sat"], rec["b_flush"]) == (7.0, 64.0, 0, 0), rec


def test_calls_not_compared_carry_no_statistics(client, standin, tmp_path):
    a = [7.0, 1.0, -1.0, 0.5, 2.0, -3.0, 0.25, 4.0]
    recs = routed(client, standin, tmp_path, [gemm("x", a, a), gemm("y", a, a)],
                  {"GEMMSHIM_FP8_RECIPE": "current", "GEMMSHIM_COMPARE_EVERY": "2"})
    # The site's first call is compared, its second is not (every 2nd).
    assert "a_amax" in recs[0] and "native_gpu_ns" in recs[0], recs
    assert not any(k.startswith(("a_", "b_")) and k not in ("a_type", "b_type") for k in recs[1]), recs[1]


def test_report_fp8_statistics_per_site(client, standin, tmp_path):
    """gemmshim report: per site, recipe and shape, the compared calls and
    each operand's largest amax, smallest scale, worst fractions (of one
    call) and totals, from the records above; most saturated first."""
    a = [3.0, -1.5, 0.25, TINIER, 1.0, -2.0, TINY, 0.75]
    b = [1.0, -0.5, 0.25, 0.125, -1.0, 0.5, 0.375, 0.625]
    recs = routed(client, standin, tmp_path, [gemm("r1", a, b), gemm("r2", a, b)],
                  {"GEMMSHIM_FP8_RECIPE": "current"})
    assert recs[0]["site"] == recs[1]["site"], recs
    p = report(tmp_path / "stats.jsonl", "--json", "-")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["fp8_stats"] == [{
        "site": recs[0]["site"], "recipe": "current", "shape": "64x64x64 bf16->fp32", "compared": 2,
        "a_amax_max": 3.0, "a_scale_min": recs[0]["a_scale"], "a_sat_worst": 0.0, "a_flush_worst": 0.125,
        "a_elems": 2 * ELEMS, "a_sat": 0, "a_flush": 2 * ELEMS // 8,
        "a_worst_block_sat": None, "a_worst_block_flush": None,  # block recipes only
        "b_amax_max": 1.0, "b_scale_min": recs[0]["b_scale"], "b_sat_worst": 0.0, "b_flush_worst": 0.0,
        "b_elems": 2 * ELEMS, "b_sat": 0, "b_flush": 0, "b_worst_block_sat": None, "b_worst_block_flush": None}]
    text = report(tmp_path / "stats.jsonl").stdout
    assert "fp8 statistics of compared calls" in text and "12.5%" in text, text


def test_block_recipe_worst_block(client, standin, tmp_path):
    """The block recipe (TransformerEngine's Float8BlockScaling, 1 x 128
    blocks along k here, power-of-two scales fp8_max / amax rounded down:
    transformer_engine/common/recipe/__init__.py) counts per block and
    logs the worst one by flushed fraction and its index (row of op(A)
    times the blocks a row has: one, k = 60). A's 7 values repeat along
    its rows, so a row holds 2^-20 eight or nine times: the block scale is
    256 (amax 1), and 2^-20 * 256 = 2^-12 flushes."""
    a = [1.0, -0.5, 0.25, 0.75, -1.0, 0.125, 2.0 ** -20]
    b = [1.0, -0.5, 0.25, 0.125, -1.0, 0.5, 0.375, 0.625]
    k = 60
    arg = (f"--gemm=name=blk,m={M},n={N},k={k},beta=0,ab=bf16,c=fp32,pad=0,"
           f"apat={':'.join(map(repr, a))},bpat={':'.join(map(repr, b))}")
    (rec,) = routed(client, standin, tmp_path, [arg], {"GEMMSHIM_FP8_RECIPE": "block"})
    assert rec["recipe"] == "block", rec
    # op(A)(i, l) = a[(i*k + l) % 7] (ffma_client's apat)
    op_a = np.array([[a[(i * k + l) % len(a)] for l in range(k)] for i in range(M)])
    tiny = (op_a == 2.0 ** -20).sum(axis=1)
    worst = int(np.argmax(tiny))  # the first of the largest: the lowest index
    assert worst == 1 and tiny[worst] == 9 and tiny[0] == 8, tiny
    frac = float("%.6g" % ((int(tiny[worst]) << 32) // k / 2 ** 32))  # the log's 6 digits of the key's fraction
    assert (rec["a_amax"], rec["a_scale"], rec["a_elems"], rec["a_sat"], rec["a_flush"]) == (
        1.0, 256.0, M * k, 0, int(tiny.sum())), rec
    assert (rec["a_worst_flush"], rec["a_worst_flush_block"]) == (frac, worst), rec
    assert (rec["a_worst_sat"], rec["a_worst_sat_block"]) == (0, 0), rec
    assert (rec["b_amax"], rec["b_scale"], rec["b_sat"], rec["b_flush"], rec["b_worst_flush"]) == (
        1.0, 256.0, 0, 0, 0), rec
    # gemmshim report: the worst block of the site's compared calls.
    (row,) = json.loads(report(tmp_path / "stats.jsonl", "--json", "-").stdout)["fp8_stats"]
    assert (row["recipe"], row["a_worst_block_flush"], row["a_worst_block_sat"]) == ("block", [frac, worst], [0.0, 0]), row


class OpStats(ctypes.Structure):  # kernels/fp8_stats.h gs_fp8_op_stats
    _fields_ = [("saturated", ctypes.c_ulonglong), ("flushed", ctypes.c_ulonglong),
                ("worst_sat", ctypes.c_ulonglong), ("worst_flush", ctypes.c_ulonglong),
                ("step", ctypes.c_uint32), ("amax", ctypes.c_uint32)]


def bq_stats(x, mode, k_pad):
    """The host build of the block-scaled quantize kernel on x (outer x k,
    fp32, k contiguous) with a statistics pointer: its counters."""
    lib = ctypes.CDLL(str(harness.KERNELS_HOST))
    outer, k = x.shape
    src = np.ascontiguousarray(x, np.float32)
    dst = np.zeros(((outer + 127) // 128 * 128) * k_pad, np.uint8)
    sc = np.zeros(1 << 16, np.uint8)
    st = OpStats()
    a = Args(src.ctypes.data, dst.ctypes.data, sc.ctypes.data, outer, k, k_pad, k, 1, mode, E4M3,
             ctypes.addressof(st))
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(a), ctypes.c_void_p))
    launch = Launch(1, Dim3(3, 1, 1), Dim3(128, 1, 1), 0, None, params, None, 0, 9, 0)
    fn = getattr(lib, "standin_kernel_gs_fp8_bq_f32")
    fn.argtypes = [ctypes.POINTER(Launch)]
    assert fn(ctypes.byref(launch)) == 0
    return st


def f32_bits(v):
    return int(np.array([v], np.float32).view(np.uint32)[0])


# ctypes loads the kernels' host build into this Python, which a sanitizer
# build's library cannot join (test_fp8_kernels covers the kernels there).
@pytest.mark.skipif(bool(PRELOAD_PREFIX), reason="the sanitizer build's host kernels cannot load into an "
                    "uninstrumented Python")
def test_block_scale_is_the_amax_blocks_not_a_zero_blocks():
    """a_scale of a block recipe is the scale of the block holding a_amax
    (docs/log-format.md). Row 0 holds 0.0625 everywhere: TE's power-of-two
    scale 448 / 0.0625 = 7168 rounded down is 4096 (step 2^-12,
    transformer_engine/common/recipe/__init__.py, Float8BlockScaling);
    the other blocks are all zeros (padding rows, masked tokens), which
    TE's compute_scale_from_amax (transformer_engine/common/recipe/
    recipe_common.cuh) scales by 1: their step 1.0 must not be the
    operand's. 1 x 128 blocks and 128 x 128 blocks alike."""
    require_built([harness.KERNELS_HOST])
    for mode, outer in ((VEC128, 2), (BLK128, 130)):
        xx = np.zeros((outer, 256), np.float32)
        xx[0, :] = 0.0625
        st = bq_stats(xx, mode, 256)
        assert st.amax == f32_bits(0.0625), (mode, hex(st.amax))
        assert st.step == f32_bits(2.0 ** -12), f"mode {mode}: step bits {st.step:#x} (1.0 is 0x3f800000)"
    # All zeros: the amax 0 and TE's scale 1 (step 1.0).
    st = bq_stats(np.zeros((2, 256), np.float32), VEC128, 256)
    assert (st.amax, st.step) == (0, f32_bits(1.0)), (hex(st.amax), hex(st.step))


def test_a_declined_fp8_call_does_not_use_up_the_sites_first_compare(client, standin, tmp_path):
    """docs/profiling.md: compared are the first routed call of each call
    site, then every GEMMSHIM_COMPARE_EVERY-th. The statistics ask whether
    the call is compared before the quantize launch; when the call then
    declines (its first kernel launch fails: GEMMSHIM_FAULT=cuLaunchKernel:1)
    and runs native, it must not count: the site's first routed call (the
    second call) is compared. The same run without the fault compares the
    first call (control)."""
    env = {**ENV, "GEMMSHIM_FP8_RECIPE": "current", "GEMMSHIM_COMPARE_EVERY": "2"}
    args = [f"--gemm=name=c{i},m=64,n=64,k=64,beta=0,ab=bf16,c=fp32,pad=0" for i in range(2)]
    out = {}
    for tag, fault in (("control", {}), ("fault", {"GEMMSHIM_FAULT": "cuLaunchKernel:1"})):
        log = tmp_path / f"{tag}.jsonl"
        r = run([client, *args, "--fp8", f"--wait-log={log}"], standin[13], shim=True,
                env={**env, **fault, "GEMMSHIM_LOG": str(log)})
        assert r.returncode == 0, r.describe()
        out[tag] = read_log(log)
    c, f = out["control"], out["fault"]
    assert [g["route"] for g in c] == ["fp8", "fp8"], c
    assert "native_gpu_ns" in c[0] and "native_gpu_ns" not in c[1], c  # the first, then every 2nd
    assert f[0]["route"] == "native" and f[1]["route"] == "fp8", f
    assert f[0]["site"] == f[1]["site"], f
    assert "native_gpu_ns" not in f[0], f
    assert "native_gpu_ns" in f[1] and "a_amax" in f[1], ("the site's first routed call was not compared", f)
