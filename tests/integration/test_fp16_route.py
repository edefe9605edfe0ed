"""The fp16 route end to end: ffma_client_cu13 (GEMMs described on its
command line, every result checked against float64 with NaN-poisoned
outputs, its SQNR reported) under the preloaded shim with
GEMMSHIM_MODE=fp16, over the stand-in as an sm 7.5 device (Turing: fp16
tensor cores, no bf16 ones). Each test asserts the client's verdicts and
statuses, the routing log's route/backend/reason for every call, and the
stand-in's call counters where they are the proof (kernel launches,
allocations, GEMMs run on fp16 tensor cores, synchronisations).

What the expectations rest on:
  - IEEE 754 binary16: 11 significant bits, largest finite 65504, smallest
    subnormal 2^-24; bfloat16 (the top half of an IEEE binary32): 8
    significant bits and binary32's exponent range. A bf16 value scaled by
    a power of two into binary16's normal range (2^-14 and above) converts
    exactly, so each of the route's dot products is the same
    fp32-accumulated sum as cuBLAS's bf16 GEMM's, scaled: its error against
    float64 must be native's, element by element (unscaled fp16 flushes
    1e-9 to 0 and overflows 1e6); binary32's largest finite value is
    (2 - 2^-23) 2^127, so a product of 2^127 and 2 overflows to Inf, and
    Inf - Inf and Inf x 0 are NaN (IEEE 754, 7.2);
  - the CUDA C++ Programming Guide's features by compute capability: fp16
    tensor cores from 7.0 (Volta, Xavier 7.2, Turing 7.5), none on 6.x;
  - the cuBLAS documentation: cublasGemmEx's type table and return values,
    cublasComputeType_t and cublasMath_t (CUBLAS_PEDANTIC_MATH, "the
    prescribed precision and standardized arithmetic for all phases"),
    beta == 0 not reading C, cublasLtMatmul's epilogues and bias;
  - cuda.h: cuGraphAddMemAllocNode (why captured calls run native).
"""

import math
from array import array

import pytest

import route_client
from harness import CLIENT_DIR, read_log, require_built, run, standin_counts
from route_client import align256, assert_all_ok, gemm

MODE = "GEMMSHIM_MODE=fp16"
BASE_ENV = {"STANDIN_CC": "7.5", "GEMMSHIM_MODE": "fp16", "GEMMSHIM_GATE": "off"}
NO_POOLS = {"STANDIN_NO_POOLS": "1"}
APIS = ("ex", "ex64", "strided", "strided64", "batched", "batched64", "lt")
PTR_ARRAY = {"batched", "batched64"}
# cublasStatus_t (cublas_api.h)
EXECUTION_FAILED, INVALID_VALUE, NOT_SUPPORTED = 13, 7, 15
CU_UNKNOWN = 999  # what the shim's fault injection gives driver calls
MATH = {"default": 0, "tensor_op": 1, "pedantic": 2, "tf32": 3, "tensor_op+disallow": 17, "tf32+disallow": 19}
RECORD = 8  # the device constants 1 and 0 (shim/routes/fp16.c)


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "ffma_client_cu13"
    require_built([path])
    return path


def run_client(client, standin, tmp_path, args, env=None, shim=True, rc=0, tag="run"):
    return route_client.run_client(client, standin, tmp_path, args, BASE_ENV, env, shim, rc, tag)


def declined(why):
    return f"{MODE}; fp16 declined: {why}; ran native"


def assert_fp16(rec, name=""):
    backend = "lt-fp16" if rec["api"] == "cublasLtMatmul" else "cublas-fp16"
    got = (rec["decided"], rec["route"], rec.get("backend"), rec["reason"], rec["status"])
    assert got == ("fp16", "fp16", backend, MODE, 0), (name, rec)


def assert_native(rec, why, status=0, name=""):
    got = (rec["decided"], rec["route"], "backend" in rec, rec["reason"], rec["status"])
    assert got == ("fp16", "native", False, declined(why), status), (name, rec)


def sqnr(call):
    return float(call["sqnr"])


def assert_as_exact_as_native(res, native):
    """Every call within 1 dB of native's SQNR against float64 (or both exact)."""
    for got, want in zip(res.calls, native.calls):
        assert got["name"] == want["name"]
        assert got["ok"] == want["ok"] == "1", (got, want)
        if want["sqnr"] in ("inf", "-"):
            assert got["sqnr"] == "inf", (got, want)
        else:
            assert abs(sqnr(got) - sqnr(want)) <= 1.0, (got, want)


def read_dump(path):
    """The client's dump=: (result, float64 reference, bound) per element."""
    values = array("d")
    values.frombytes(path.read_bytes())
    return [tuple(values[i:i + 3]) for i in range(0, len(values), 3)]


def kind(x):
    return "nan" if math.isnan(x) else "+inf" if x == math.inf else "-inf" if x == -math.inf else "finite"


def run_dumped(client, standin, tmp_path, specs, env=None, rc=0):
    """Each (name, api, kw) run native and under the route with its every
    result element dumped; (native, routed, [(native dump, routed dump)])."""
    runs = []
    for tag, shim in (("native", False), ("fp16", True)):
        args = [gemm(name, api, dump=tmp_path / f"{tag}-{name}.bin", **kw) for name, api, kw in specs]
        runs.append(run_client(client, standin, tmp_path, args, env=env, shim=shim, rc=rc, tag=tag))
    dumps = [(read_dump(tmp_path / f"native-{name}.bin"), read_dump(tmp_path / f"fp16-{name}.bin"))
             for name, _, _ in specs]
    return runs[0], runs[1], dumps


def assert_element_by_element(name, native, routed):
    """Element by element: non-finite where native is, of native's kind
    (+Inf, -Inf or NaN); finite where native is, and then within the
    fp32-accumulation bound of the float64 reference (ffma_client.c's
    bound: 4 (k + 2) 2^-24 sum |alpha a_il b_lj| + |beta c| + |bias|, plus
    the rounding of D's type, per element)."""
    assert len(native) == len(routed) > 0, name
    for e, ((want, _, _), (got, ref, bound)) in enumerate(zip(native, routed)):
        assert kind(got) == kind(want), (name, e, got, want, ref)
        if kind(got) == "finite" and not math.isnan(bound):
            assert abs(got - ref) <= bound, (name, e, got, ref, bound, want)


def transient_bytes(m, n, k, batch=1, a_members=None, b_members=None):
    """What one fp16 call allocates (docs/fp16.md): the record, one 4-byte
    word per row of op(A) and per column of op(B) and member, A and B in
    fp16 and the fp32 product; each part 256-byte aligned."""
    a_members = batch if a_members is None else a_members
    b_members = batch if b_members is None else b_members
    return (align256(RECORD) + align256(4 * m * a_members) + align256(4 * n * b_members)
            + align256(2 * m * k * a_members) + align256(2 * k * n * b_members) + align256(4 * m * n * batch))


# ---- 1. every entry point, both outputs, both pointer modes -----------------------------------
ENTRY_CASES = [(api, c, pm, beta) for api in APIS for c in ("bf16", "fp32") for pm in ("host", "device")
               for beta in (0.75, 0)]


@pytest.mark.parametrize("api", APIS)
def test_every_entry_point_routes_exactly(client, standin, tmp_path, api):
    """Each entry point with bf16 and fp32 C, alpha/beta on the host and on
    the device, beta nonzero and zero (C then NaN-poisoned: it must not be
    read): every call runs fp16, with native's statuses and an SQNR
    within 1 dB of native's. Three launches each: amax, cast, and the
    output kernel (every D: each element has its own unscale). Every
    routed GEMM ran on fp16 tensor cores (the stand-in's counter); native
    bf16 ran none."""
    cases = [(c, pm, beta) for a, c, pm, beta in ENTRY_CASES if a == api]
    args = [gemm(f"{c}_{pm}_b{beta}", api, c=c, pm=pm, beta=beta, alpha=1.25) for c, pm, beta in cases]
    native = run_client(client, standin, tmp_path, args, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args)
    assert_as_exact_as_native(res, native)
    for rec, call in zip(res.recs, res.calls):
        assert_fp16(rec, call["name"])
        assert rec["pointer_mode"] == call["name"].split("_")[1], rec
    assert res.counts["cuLaunchKernel"] == 3 * len(cases), res.counts
    assert res.counts["standin_fp16_tensor_core_gemms"] == len(args)
    assert native.counts["standin_fp16_tensor_core_gemms"] == 0


@pytest.mark.parametrize("api", ["ex", "strided64", "batched", "lt"])
def test_one_by_one_calls(client, standin, tmp_path, api):
    """Each call alone: exactly three launches, one transient allocation
    and its free, one GEMM on fp16 tensor cores."""
    for c, pm in (("bf16", "host"), ("fp32", "device"), ("fp32", "host")):
        res = run_client(client, standin, tmp_path, [gemm("one", api, c=c, pm=pm)], tag=f"{c}{pm}")
        assert_all_ok(res)
        assert_fp16(res.recs[0])
        assert res.counts["cuLaunchKernel"] == 3
        assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuMemFreeAsync"] == 1
        assert res.counts["standin_fp16_tensor_core_gemms"] == 1


# ---- 2. exactness at every amplitude -----------------------------------------------------------
AMPLITUDES = [
    ("amp1", {"amp": 1}),
    ("amp1e-9", {"amp": 1e-9}),  # below binary16's smallest subnormal, 5.96e-8
    ("amp1e6", {"amp": 1e6}),  # above binary16's largest finite, 65504
    ("span1e-6_1e4", {"span": "1e-6:1e4", "k": 256}),  # one tensor over ten decades
    ("grads", {"amp": 1e-12, "ampb": 1e-6}),  # gradient-sized A and B
    ("mixed", {"amp": 1e-30, "ampb": 1e30}),  # products near 1
]


@pytest.mark.parametrize("api,c", [("ex", "bf16"), ("strided", "fp32"), ("lt", "fp32"), ("batched64", "bf16")])
def test_as_exact_as_native_at_every_amplitude(client, standin, tmp_path, api, c):
    """Exactness against float64 equal to cuBLAS's own bf16 GEMM, element
    by element within the fp32-accumulation bound and within 1 dB of SQNR,
    at amplitudes 1, 1e-9 and 1e6, for a tensor spanning 1e-6 to 1e4, and
    for A and B of very different sizes: each line's power of two takes it
    to the top of binary16's range, which neither overflows (1e6) nor
    flushes (1e-9)."""
    specs = [(name, api, {"c": c, **kw}) for name, kw in AMPLITUDES]
    native, res, dumps = run_dumped(client, standin, tmp_path, specs)
    assert_as_exact_as_native(res, native)
    for rec, call, (name, _, _), (want, got) in zip(res.recs, res.calls, specs, dumps):
        assert_fp16(rec, call["name"])
        assert sqnr(call) > 40, call
        assert_element_by_element(name, want, got)


# ---- 3. NaN and Inf ------------------------------------------------------------------------------
SPECIALS = [
    ("inf_a", {"special": "inf"}),
    ("ninf_a", {"special": "ninf"}),
    ("nan_a", {"special": "nan"}),
    ("inf_b", {"specialb": "inf"}),
    ("inf_a_ninf_b", {"special": "inf", "specialb": "ninf"}),
    ("nan_b_tiny", {"specialb": "nan", "amp": 1e-9}),
    ("inf_a_huge", {"special": "inf", "amp": 1e6}),
]


@pytest.mark.parametrize("api,c,pm", [("ex", "bf16", "host"), ("ex64", "fp32", "device"), ("lt", "fp32", "host"),
                                      ("strided", "bf16", "device")])
def test_nan_and_inf_as_native(client, standin, tmp_path, api, c, pm):
    """An Inf or NaN in A or B: the amax leaves it out (the scale is for
    the finite values), the cast keeps it, and the GEMM propagates it as
    cuBLAS's does: Inf where float64 has that Inf, NaN where float64 has
    NaN (Inf - Inf, Inf x 0), never a finite number; as many non-finite
    outputs as native, each of native's kind (+Inf, -Inf, NaN) element by
    element, and the finite ones as exact as native's."""
    specs = [(name, api, {"c": c, "pm": pm, **kw}) for name, kw in SPECIALS]
    native, res, dumps = run_dumped(client, standin, tmp_path, specs)
    assert_as_exact_as_native(res, native)
    for rec, got, want, (name, _, _), (nd, rd) in zip(res.recs, res.calls, native.calls, specs, dumps):
        assert_fp16(rec, got["name"])
        assert got["nonfinite"] == want["nonfinite"] != "0", (got, want)
        assert_element_by_element(name, nd, rd)


# ---- 3b. operands whose lines differ widely, and the cases one scale per tensor got wrong -------
# Where each expectation comes from: IEEE 754 binary16 (smallest normal
# 2^-14, smallest subnormal 2^-24: a bf16 value scaled below 2^-14 loses
# significand bits, and below 2^-25 it rounds to 0) and binary32 (largest
# finite (2 - 2^-23) 2^127); cublasGemmEx computes D = alpha op(A) op(B) +
# beta C (cuBLAS documentation, cublasGemmEx), so every element is compared
# with native's, kind for kind, and with float64 within its bound.
ROUTE_SHAPES = [("ex", "bf16", "host"), ("ex64", "fp32", "device"), ("strided", "fp32", "host"),
                ("strided64", "bf16", "device"), ("batched", "bf16", "host"), ("batched64", "fp32", "device"),
                ("lt", "fp32", "host"), ("lt", "bf16", "device")]
DEFECTS = [
    # A = diag(2^80, 1), B = diag(1, 2^80): D = diag(2^80, 2^80). One
    # alpha * 2^-(shifts) is 2^130, Inf in fp32 (Inf x 0 = NaN); one shift
    # per tensor flushes the 1s to 0.
    ("diag_2e80", {"m": 4, "n": 4, "k": 2, "apat": "0x1p80:0:0:1", "bpat": "1:0:0:0x1p80"}),
    # Rows of op(A) [1, 2^-40] and columns of op(B) [0, 2^40]: every dot
    # product is exactly 1; the 2^-40 scaled into its row's range is 2^-25,
    # which binary16 rounds to 0 (a tie, to even).
    ("tiny_pair", {"m": 6, "n": 5, "k": 2, "apat": "1:0x1p-40", "bpat": "0:0x1p40"}),
    # Rows [2^127, 2^127] against columns [2, -2]: native's fp32 products
    # overflow to +Inf and -Inf, whose sum is NaN; scaled products cancel.
    ("cancel_overflow", {"m": 4, "n": 3, "k": 2, "apat": "0x1p127:0x1p127", "bpat": "2:-2"}),
    # A row [Inf, 1] against a column [2^-40, 1]: native Inf x 2^-40 + 1 =
    # Inf; with 2^-40 flushed to 0, Inf x 0 = NaN.
    ("inf_times_flushed", {"m": 4, "n": 4, "k": 2, "apat": "inf:1", "bpat": "0x1p-40:1"}),
    # tiny_pair with the operands' roles swapped: the flushed 2^-40 is in
    # op(B)'s columns, so only op(B)'s flag can make the element right.
    ("tiny_pair_b", {"m": 6, "n": 5, "k": 2, "apat": "0:0x1p40", "bpat": "1:0x1p-40"}),
    # A value of several bits more than 32 binades below its row's largest:
    # 0x1.02p-33 scaled is 0x1.02p-18, whose lowest bit (2^-25) is below
    # binary16's smallest subnormal (2^-24, IEEE 754): it would round to
    # 2^-18, and the dot product 1.0078125 (0x1.02) to 1.
    ("multibit_tiny", {"m": 4, "n": 3, "k": 2, "apat": "1:0x1.02p-33", "bpat": "0:0x1p33"}),
    # 32 binades below, 0x1.fep-32 scales to 0x1.fep-17: its lowest bit is
    # 2^-24, still exact in binary16; the dot product is 0x1.fe.
    ("exact_at_32", {"m": 4, "n": 3, "k": 2, "apat": "1:0x1.fep-32", "bpat": "0:0x1p32"}),
    # Rows 0x1.fep126 against columns [0x1.fep0, 0x1.fep0, -0x1.fep0]: each
    # product is 0x1.fc04p127, finite; native's fp32 sum of the first two
    # overflows to +Inf (IEEE 754) and stays +Inf; the exact sum is finite.
    # Amax exponents 126 + 0, ceil(log2 3) = 2: 126 + 0 + 2 + 2 = 130 > 127.
    # alpha 1 and beta 0, so that nothing else overflows.
    ("partial_overflow", {"m": 4, "n": 3, "k": 3, "apat": "0x1.fep126", "bpat": "0x1.fep0:0x1.fep0:-0x1.fep0",
                          "alpha": 1, "beta": 0}),
    # A lossy row against columns [2^15, 2^33]: dot = 2^15 + 0x1.02 =
    # 32769.0078125, exact in fp32 (its ulp there is 2^-8); with the lost
    # bit (2^-40 x 2^33 = 2^-7) it would be 32769. The scaled product is
    # 2^12 + 2^-3, below 2^(ceil(log2 2) + 17): recomputed.
    ("lossy_small_dot", {"m": 4, "n": 3, "k": 2, "apat": "1:0x1.02p-33", "bpat": "0x1p15:0x1p33",
                         "alpha": 1, "beta": 0}),
    # A row spanning 2^-40 to 1 (lossy) whose dot products are large: the
    # loss (below 2^-25 of the result) cannot reach the result's last bit.
    ("lossy_large_dot", {"m": 4, "n": 3, "k": 4, "apat": "1:0x1p-40:0.5:0.25", "bpat": "1:1:1:1"}),
]
# The rows of op(A) and the columns of op(B) 2^41 to 2^46 apart, k small
# (so no dot product holds the large terms that would hide the small ones'
# errors): per-line scales keep every line exact. Random values, a new
# seed per call; every member of a batch alike; beta 0, so that no C
# hides a small element's error inside its bound.
SPANS = [
    ("rows_2e44", {"k": 8, "rowexp": "44:0:20", "beta": 0}),
    ("cols_2e-46", {"k": 8, "colexp": "0:-46:-3", "beta": 0}),
    ("both", {"k": 6, "rowexp": "-20:25", "colexp": "21:-20:0", "beta": 0}),
    ("big_rows_big_cols", {"k": 4, "rowexp": "40:0", "colexp": "0:41", "beta": 0}),
]


def defect_runs(client, standin, tmp_path, cases):
    """Each case on every entry point shape; the client fails a call whose
    result is not within float64's bound, which native's overflow is not:
    those runs exit 1 on both sides."""
    specs = [(f"{name}-{api}-{c}-{pm}", api, {"c": c, "pm": pm, "alpha": 1.5, **kw})
             for name, kw in cases for api, c, pm in ROUTE_SHAPES]
    rc = 1 if any(name in ("cancel_overflow", "partial_overflow") for name, _ in cases) else 0
    native, res, dumps = run_dumped(client, standin, tmp_path, specs, rc=rc)
    for rec, got, want, (name, _, _), (nd, rd) in zip(res.recs, res.calls, native.calls, specs, dumps):
        assert_fp16(rec, name)
        assert got["ok"] == want["ok"], (got, want)
        assert_element_by_element(name, nd, rd)
    return native, res, dumps


@pytest.mark.parametrize("case", [name for name, _ in DEFECTS])
def test_cases_one_scale_per_tensor_got_wrong(client, standin, tmp_path, case):
    """Each of these made the route differ from native with one scale per
    operand (D's elements 0, NaN or finite where native's are 2^80, 1, NaN
    or Inf): now every element is native's kind and within float64's
    bound, on every entry point, bf16 and fp32 D, both pointer modes."""
    native, _, dumps = defect_runs(client, standin, tmp_path, [c for c in DEFECTS if c[0] == case])
    kinds = {kind(x[0]) for nd, _ in dumps for x in nd}
    # The cases are what they claim: native gives 2^80 (diag), NaN (the
    # overflow) and Inf (the Inf row) somewhere.
    want = {"diag_2e80": "finite", "tiny_pair": "finite", "cancel_overflow": "nan", "inf_times_flushed": "+inf",
            "tiny_pair_b": "finite", "multibit_tiny": "finite", "exact_at_32": "finite", "partial_overflow": "+inf",
            "lossy_large_dot": "finite", "lossy_small_dot": "finite"}
    assert want[case] in kinds, kinds
    # Dot products exact in fp32 (1, 1, 0x1.02, 0x1.fe, 32769.0078125), so
    # D = alpha dot + beta C rounds the same on both sides: the route's D is
    # native's, bit for bit.
    if case in ("tiny_pair", "tiny_pair_b", "multibit_tiny", "exact_at_32", "lossy_small_dot"):
        for nd, rd in dumps:
            assert all(math.isfinite(x[0]) and x[0] == y[0] for x, y in zip(nd, rd)), (case, nd[:3], rd[:3])
    if case == "diag_2e80":  # D(0,0) = 1.5 x 2^80 + 0.75 C(0,0), |C| <= 1
        assert all(abs(rd[0][1] - 1.5 * 2.0 ** 80) <= 1 for _, rd in dumps)


@pytest.mark.parametrize("case", [name for name, _ in SPANS])
def test_lines_far_apart(client, standin, tmp_path, case):
    """Rows of op(A) and columns of op(B) whose magnitudes differ by 2^40
    and more, k small: every element within float64's bound and of
    native's kind, on every entry point (strided, pointer-array batches,
    cuBLASLt)."""
    defect_runs(client, standin, tmp_path, [c for c in SPANS if c[0] == case])


def test_lines_far_apart_lt_bias(client, standin, tmp_path):
    """cublasLtMatmul with a bias (and relu, and a strided batch of
    biases) over rows 2^44 apart: the bias is added after the unscale,
    element by element right."""
    specs = [(f"{epi}-{c}", "lt", {"c": c, "epi": epi, "k": 8, "rowexp": "44:0", "colexp": "0:3", "batch": 2,
                                   "bstride": 70, "beta": 0})
             for epi in ("bias", "relu_bias", "gelu_bias") for c in ("bf16", "fp32")]
    native, res, dumps = run_dumped(client, standin, tmp_path, specs)
    assert_all_ok(res)
    for rec, (name, _, _), (nd, rd) in zip(res.recs, specs, dumps):
        assert_fp16(rec, name)
        assert_element_by_element(name, nd, rd)


# ---- 4. what the route leaves to native -----------------------------------------------------------
FAST = ("a 32f_fast compute type takes fp32 A and B only (forwarded for cuBLAS's own error)", NOT_SUPPORTED)
DECLINE_CASES = [
    ("fp16_ab", "ex", {"ab": "fp16"}, ("A and B are not both bf16", 0)),
    ("fp16_ab_lt", "lt", {"ab": "fp16", "c": "fp32"}, ("A and B are not both bf16", 0)),
    ("fp32_ab", "strided", {"ab": "fp32"}, ("A and B are not both bf16", 0)),
    ("pedantic", "ex", {"compute": "32f_pedantic"},
     ("compute type 32f_pedantic asks for cuBLAS's own bf16 arithmetic", 0)),
    ("pedantic_lt", "lt", {"compute": "32f_pedantic", "epi": "bias"},
     ("compute type 32f_pedantic asks for cuBLAS's own bf16 arithmetic", 0)),
    ("fast_16bf", "strided", {"compute": "32f_fast_16bf"}, FAST),
    ("fast_16f", "lt", {"compute": "32f_fast_16f"}, FAST),
    ("fast_tf32", "ex64", {"compute": "32f_fast_tf32"}, FAST),
    ("k_zero", "ex", {"call_k": 0}, ("empty GEMM: nothing to scale", 0)),
    ("m_zero", "ex64", {"call_m": 0}, ("empty GEMM: nothing to scale", 0)),
    ("batch_zero", "strided", {"call_batch": 0}, ("empty GEMM: nothing to scale", 0)),
    ("m_negative", "ex", {"call_m": -1}, ("negative size (forwarded for cuBLAS's own error)", INVALID_VALUE)),
    ("lda_small", "strided64", {"apad": -1},
     ("leading dimension too small (forwarded for cuBLAS's own error)", INVALID_VALUE)),
    ("mixed_ab", "ex", {"bt": "fp16"}, ("A and B are not both bf16", NOT_SUPPORTED)),
    ("row_major", "lt", {"order": "row"}, ("a layout is not column-major", 0)),
    ("bias_type", "lt", {"epi": "bias", "bias": "fp32"},
     ("bias type is not D's type (forwarded for cuBLAS's own error)", NOT_SUPPORTED)),
]


def test_what_runs_native(client, standin, tmp_path):
    """fp16 A and B are cuBLAS's own fp16 tensor-core GEMM (not this
    route's business); a pedantic compute type asks for cuBLAS's own bf16
    arithmetic; the 32F_FAST types take fp32 data only (cuBLAS's
    cublasComputeType_t); empty GEMMs have nothing to scale (k = 0 is C =
    beta C, which native does); arguments cuBLAS refuses keep cuBLAS's
    status (cublasGemmEx's return values). Each runs native with the
    reason and native's status and result."""
    args = [gemm(name, api, **kw) for name, api, kw, _ in DECLINE_CASES]
    native = run_client(client, standin, tmp_path, args, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args)
    assert_all_ok(res)
    assert [c["status"] for c in res.calls] == [c["status"] for c in native.calls]
    for rec, (name, _, _, (why, status)) in zip(res.recs, DECLINE_CASES):
        assert_native(rec, why, status, name)
    assert res.counts["cuLaunchKernel"] == res.counts["cuMemAllocFromPoolAsync"] == 0


def test_math_modes(client, standin, tmp_path):
    """The handle's math mode, set before each call, reads back the same
    after it. CUBLAS_PEDANTIC_MATH asks for cuBLAS's own arithmetic: native,
    with the reason. Every other mode leaves an fp16 GEMM with fp32 compute
    as it is (TF32 concerns fp32 inputs; tensor-op math is what fp16 uses):
    fp16."""
    args = [gemm(f"{api}:{mode}", api, math=mode) for api in ("ex", "strided64", "batched") for mode in MATH]
    native = run_client(client, standin, tmp_path, args, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args)
    assert_as_exact_as_native(res, native)
    for rec, call in zip(res.recs, res.calls):
        mode = call["name"].split(":")[1]
        assert call["math"] == f"{MATH[mode]}/{MATH[mode]}", call
        if mode == "pedantic":
            assert_native(rec, "the handle's math mode CUBLAS_PEDANTIC_MATH asks for cuBLAS's own bf16 arithmetic",
                          name=call["name"])
        else:
            assert_fp16(rec, call["name"])


@pytest.mark.parametrize("cc,route,reason", [
    ("6.1", "native", "the device (sm_6.1) has no fp16 tensor cores (7.0 or newer)"),
    ("5.2", "native", "the device (sm_5.2) has no fp16 tensor cores (7.0 or newer)"),
    ("7.0", "fp16", None), ("7.2", "fp16", None), ("8.0", "fp16", None), ("9.0", "fp16", None)])
def test_forced_on_any_device_with_fp16_tensor_cores(client, standin, tmp_path, cc, route, reason):
    """GEMMSHIM_MODE=fp16 runs the route wherever there are fp16 tensor
    cores (7.0 and newer, so a data-centre GPU can check it); below, it
    declines with the reason and nothing is launched."""
    args = [gemm("ex", "ex"), gemm("lt", "lt", c="fp32", epi="gelu_bias")]
    res = run_client(client, standin, tmp_path, args, env={"STANDIN_CC": cc})
    assert_all_ok(res)
    for rec in res.recs:
        if route == "fp16":
            assert_fp16(rec)
        else:
            assert_native(rec, reason)
    assert res.counts["cuLaunchKernel"] == (6 if route == "fp16" else 0)


@pytest.mark.parametrize("cc,route,rule", [
    ("7.0", "fp16", "built-in rule 1 (fp16 sm=7.0-7.5 ab=bf16 compute=32f)"),
    ("7.2", "fp16", "built-in rule 1 (fp16 sm=7.0-7.5 ab=bf16 compute=32f)"),
    ("7.5", "fp16", "built-in rule 1 (fp16 sm=7.0-7.5 ab=bf16 compute=32f)"),
    ("6.1", "ffma", "built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)"),
    ("8.0", "native", "built-in rule 3 (native)"),
])
def test_builtin_policy(client, standin, tmp_path, cc, route, rule):
    """Without GEMMSHIM_MODE: bf16 GEMMs with fp32 compute go to fp16 on
    Volta/Xavier/Turing (fp16 tensor cores, no bf16 ones), to ffma on
    Pascal (no tensor cores), and stay native from Ampere (bf16 tensor
    cores). fp16 GEMMs stay native everywhere."""
    args = [gemm("bf16", "ex"), gemm("bf16_lt", "lt", c="fp32"), gemm("fp16", "ex", ab="fp16")]
    env = {"GEMMSHIM_MODE": "auto", "GEMMSHIM_GATE": "off", "STANDIN_CC": cc}
    res = run_client(client, standin, tmp_path, args, env=env)
    assert_all_ok(res)
    for rec in res.recs[:2]:
        assert (rec["decided"], rec["route"], rec["reason"]) == (route, route, f"policy: {rule}"), rec
    assert (res.recs[2]["route"], res.recs[2]["reason"]) == ("native", "policy: built-in rule 3 (native)")


# ---- 5. cuBLASLt: epilogues, bias, in place and out of place -----------------------------------------
LT_CASES = [
    ("relu", {"epi": "relu"}),
    ("gelu", {"epi": "gelu", "ta": "N", "tb": "T"}),
    ("bias", {"epi": "bias"}),
    ("relu_bias", {"epi": "relu_bias", "bias": "D"}),  # BIAS_DATA_TYPE set, to D's type
    ("gelu_bias", {"epi": "gelu_bias", "pm": "device"}),
    ("bias_strided", {"epi": "relu_bias", "batch": 3, "bstride": 70}),
    ("oop", {"oop": 1, "beta": 0.5, "dpad": 5, "batch": 3}),
    ("oop_bias_dev", {"oop": 1, "epi": "gelu_bias", "pm": "device", "beta": 0.5}),
    ("nn_padded", {"ta": "N", "tb": "N", "pad": 9}),
    ("tt_unpadded", {"ta": "T", "tb": "T", "pad": 0, "spad": 0, "batch": 2}),
    ("batched_bias", {"batch": 3, "epi": "bias"}),
]


@pytest.mark.parametrize("c", ["bf16", "fp32"])
def test_lt_epilogues_and_layouts(client, standin, tmp_path, c):
    """Every epilogue the ffma route takes (cuBLASLt's RELU, GELU, BIAS and
    their combinations), a bias per batch member, in place and out of
    place (D's leading dimension its own), each transpose pair: the
    output kernel applies them to every D. Results as exact as native's."""
    args = [gemm(name, "lt", c=c, **{k: c if v == "D" else v for k, v in kw.items()}) for name, kw in LT_CASES]
    native = run_client(client, standin, tmp_path, args, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args)
    assert_as_exact_as_native(res, native)
    for rec, call in zip(res.recs, res.calls):
        assert_fp16(rec, call["name"])
    assert res.counts["cuLaunchKernel"] == len(args) * 3


def test_broadcast_operands_cast_once(client, standin, tmp_path):
    """A strided batch whose A and B have stride 0 is one A and one B for
    every member (cuBLAS reads the same matrix each time): the route casts
    each once, and the GEMM reads them with stride 0."""
    m, n, k, batch = 64, 48, 80, 3
    args = [gemm("broadcast", "strided64", m=m, n=n, k=k, batch=batch, call_sab=0)]
    need = transient_bytes(m, n, k, batch, a_members=1, b_members=1)
    env = {"GEMMSHIM_FP16_MAX_BYTES": str(need)}
    native = run_client(client, standin, tmp_path, args, env=env, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args, env=env)
    assert_as_exact_as_native(res, native)
    assert_fp16(res.recs[0])
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FP16_MAX_BYTES": str(need - 1)}, tag="over")
    assert_native(res.recs[0], "needs more transient memory than GEMMSHIM_FP16_MAX_BYTES")


# ---- 6. memory -------------------------------------------------------------------------------------
@pytest.mark.parametrize("api,spec", [
    ("ex", {"m": 64, "n": 48, "k": 80}),
    ("strided64", {"m": 40, "n": 24, "k": 56, "batch": 3, "c": "fp32", "pm": "device"}),
    ("lt", {"m": 48, "n": 32, "k": 64, "batch": 2, "c": "fp32", "epi": "bias", "bstride": 50}),
    ("batched", {"m": 40, "n": 24, "k": 56, "batch": 3, "c": "fp32"}),
])
def test_max_bytes_boundary(client, standin, tmp_path, api, spec):
    """GEMMSHIM_FP16_MAX_BYTES equal to what the call needs runs fp16; one
    byte less declines with the reason before anything is allocated or
    launched, and the result is right either way."""
    need = transient_bytes(spec["m"], spec["n"], spec["k"], spec.get("batch", 1))
    args = [gemm("g", api, **spec)]
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FP16_MAX_BYTES": str(need)}, tag="fits")
    assert_all_ok(res)
    assert_fp16(res.recs[0])
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FP16_MAX_BYTES": str(need - 1)}, tag="over")
    assert_all_ok(res)
    assert_native(res.recs[0], "needs more transient memory than GEMMSHIM_FP16_MAX_BYTES")
    assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuLaunchKernel"] == 0


@pytest.mark.parametrize("batch", [2**40, 2**40 + 1])
def test_sizes_past_the_arithmetic_decline_first(client, standin, tmp_path, batch):
    """The hostile size for every route: cublasGemmStridedBatchedEx_64 at
    2048^3 over 2^40 (+1) members. A and B broadcast (stride 0) are cast
    once, but the fp32 product of 2^40 members is 2^66 bytes: refused with
    the cap's reason before anything is allocated, native's status kept."""
    args = [client, gemm("huge", "strided64", m=2048, n=2048, k=2048, batch=1, call_batch=batch, call_sab=0)]
    log, counts = tmp_path / "huge.jsonl", tmp_path / "huge.counts"
    r = run(args, standin[13], shim=True, env={**BASE_ENV, "GEMMSHIM_LOG": str(log), "STANDIN_COUNTS": str(counts)})
    assert r.returncode == 0, r.describe()
    assert [(c["status"], c["ok"]) for c in r.calls] == [(str(EXECUTION_FAILED), "1")], r.describe()
    assert_native(read_log(log)[0], "needs more transient memory than GEMMSHIM_FP16_MAX_BYTES", EXECUTION_FAILED)
    got = standin_counts(counts)
    assert got["cuMemAllocFromPoolAsync"] == got["cuLaunchKernel"] == 0


def test_min_flops(client, standin, tmp_path):
    """GEMMs smaller than GEMMSHIM_FP16_MIN_FLOPS (2 m n k batch) stay
    native: 2*64*48*80 = 491520 flops."""
    args = [gemm("g", "ex", m=64, n=48, k=80)]
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FP16_MIN_FLOPS": "491521"})
    assert_native(res.recs[0], "GEMM smaller than GEMMSHIM_FP16_MIN_FLOPS")
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FP16_MIN_FLOPS": "491520"}, tag="at")
    assert_fp16(res.recs[0])


def test_no_leak(client, standin, tmp_path):
    """One stream-ordered allocation and free per routed call, none for a
    declined one; the live allocations at exit are the client's own."""
    args = [gemm(api, api) for api in APIS] + [gemm("dev_f32", "ex", c="fp32", pm="device"),
                                                 gemm("declined", "ex", compute="32f_pedantic")]
    native = run_client(client, standin, tmp_path, args, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args)
    assert_all_ok(res)
    ran = sum(rec["route"] == "fp16" for rec in res.recs)
    assert ran == len(args) - 1
    assert res.counts["cuMemAllocFromPoolAsync"] == res.counts["cuMemFreeAsync"] == ran
    assert res.counts["standin_live_allocations"] == native.counts["standin_live_allocations"]
    assert res.counts["standin_live_bytes"] == native.counts["standin_live_bytes"]


def test_no_pools_every_entry_point(client, standin, tmp_path):
    """Without stream-ordered pools the per-stream scratch buffer serves."""
    args = [gemm(api, api) for api in APIS] + [gemm("lt_f32", "lt", c="fp32", epi="gelu_bias", pm="device")]
    native = run_client(client, standin, tmp_path, args, env=NO_POOLS, shim=False, tag="native")
    res = run_client(client, standin, tmp_path, args, env=NO_POOLS)
    assert_as_exact_as_native(res, native)
    for rec in res.recs:
        assert_fp16(rec)


# ---- 7. no synchronisation, graph capture, threads -----------------------------------------------
NOSYNC_CALLS = [gemm("ex", "ex"), gemm("ex64_dev", "ex64", pm="device", c="fp32"), gemm("strided", "strided", beta=0),
                gemm("lt_bias", "lt", epi="relu_bias"), gemm("lt_f32", "lt", c="fp32", epi="gelu_bias", oop=1)]


@pytest.mark.parametrize("pools", [True, False])
def test_no_synchronisation(client, standin, tmp_path, pools):
    """A client that never synchronises, under a driver that turns any
    synchronisation into exit status 86: the route adds none (the scales
    go from one kernel to the next on the device: no host round trip)."""
    env = {"STANDIN_FORBID_SYNC": "1", **({} if pools else NO_POOLS)}
    res = run_client(client, standin, tmp_path, ["--nosync", *NOSYNC_CALLS], env=env)
    assert res.counts["standin_forbidden_syncs"] == 0
    assert all(c["status"] == "0" for c in res.calls)
    for rec in res.recs:
        assert_fp16(rec)


def test_capture_keeps_the_route(client, standin, tmp_path):
    """Captured calls run fp16 in the graph, on buffers the graph owns
    (docs/graphs.md; memory nodes would forbid cloning and a second
    instantiation: cuda.h, cuGraphAddMemAllocNode); the graph, launched by
    the client, gives right results; eager calls before it run fp16."""
    calls = [gemm("warm_ex", "ex"), gemm("warm_lt", "lt", epi="bias"), gemm("cap_ex", "ex"),
             gemm("cap_lt", "lt", c="fp32", epi="bias", oop=1), gemm("cap_batched", "batched")]
    res = run_client(client, standin, tmp_path, ["--capture-from=2", *calls])
    assert [l[1:] for l in res.run.lines("capture")] == [["begin=0", "end=0", "launch=0"]]
    assert_all_ok(res)
    for rec, call in zip(res.recs, res.calls):
        assert_fp16(rec, call["name"])
        assert rec.get("captured") == (None if call["name"].startswith("warm") else 1), (call["name"], rec)
    assert res.counts["cuUserObjectCreate"] == res.counts["user_object_destroyed"] == 3, res.counts


@pytest.mark.parametrize("stream", ["own", "shared"])
def test_threads(client, standin, tmp_path, stream):
    """Eight threads, each with its own handles, on their own streams or
    one shared: every call runs fp16 with a right result."""
    calls = [gemm("small", "ex", m=48, n=32, k=40), gemm("lt", "lt", epi="bias", pm="device"),
             gemm("f32", "strided", c="fp32", pm="device", batch=2)]
    res = run_client(client, standin, tmp_path, ["--threads=8", "--iters=2", f"--stream={stream}", *calls])
    assert len(res.calls) == 8 * 2 * len(calls)
    assert_all_ok(res)
    for rec in res.recs:
        assert_fp16(rec)


def test_context_reset(client, standin, tmp_path):
    """The primary context released and retained again: the kernels load
    into the new context; every call runs fp16."""
    args = ["--stream=legacy", "--reset-after=2", gemm("before", "ex"), gemm("before_lt", "lt"),
            gemm("after", "ex"), gemm("after_lt", "lt", c="fp32", epi="bias")]
    res = run_client(client, standin, tmp_path, args)
    assert_all_ok(res)
    for rec in res.recs:
        assert_fp16(rec)


# ---- 8. faults: every call the route adds, failing --------------------------------------------------
CAST_FAIL = f"scale kernel launch failed (CUresult {CU_UNKNOWN})"
OUT_FAIL = f"output kernel launch failed (CUresult {CU_UNKNOWN})"


@pytest.mark.parametrize("fault,api,spec,why", [
    ("cuLaunchKernel:1", "ex", {}, CAST_FAIL),  # the amax kernel
    ("cuLaunchKernel:2", "ex", {}, CAST_FAIL),  # the cast kernel
    ("cuLaunchKernel:3", "ex", {}, OUT_FAIL),  # the output kernel
    ("cuLaunchKernel:3", "batched64", {}, OUT_FAIL),
    ("cuLaunchKernel:3", "lt", {"epi": "gelu_bias"}, OUT_FAIL),
    ("cuLaunchKernel:2", "lt", {"c": "fp32", "epi": "bias"}, CAST_FAIL),
    ("cublasGemmEx:1", "ex", {}, f"fp16 GEMM returned status {EXECUTION_FAILED}"),
    ("cublasGemmEx:1", "ex", {"c": "fp32", "pm": "device"}, f"fp16 GEMM returned status {EXECUTION_FAILED}"),
    ("cublasGemmStridedBatchedEx_64:1", "batched64", {}, f"fp16 GEMM returned status {EXECUTION_FAILED}"),
    ("cublasLtMatmul:1", "lt", {"c": "fp32", "epi": "bias"}, f"fp16 GEMM returned status {EXECUTION_FAILED}"),
    ("cuMemAllocFromPoolAsync:1+", "ex", {},
     "cuMemAllocFromPoolAsync: out of device memory, after the pool gave back what it held unused"),
    ("cuStreamIsCapturing:1", "ex", {}, "cuStreamIsCapturing failed"),
    ("cublasGetMathMode:1", "ex", {}, "cublasGetMathMode failed"),
    ("cuModuleLoadData:1+", "ex", {}, None),
])
def test_each_added_call_failing_runs_native(client, standin, tmp_path, fault, api, spec, why):
    """Each library call the route adds, failing: the call runs native with
    the reason, its result right (the caller's output untouched until the
    route's last step, so native runs on the caller's own C), and the
    transient buffer freed."""
    args = [gemm("g", api, **spec), gemm("after", "ex")]
    res = run_client(client, standin, tmp_path, args, env={"GEMMSHIM_FAULT": fault})
    assert_all_ok(res)
    if why is None:
        assert res.recs[0]["route"] == "native" and "kernels not loaded" in res.recs[0]["reason"], res.recs[0]
    else:
        assert_native(res.recs[0], why)
    if not fault.endswith("+"):
        assert_fp16(res.recs[1])
    assert res.counts["standin_live_allocations"] == run_client(client, standin, tmp_path, args, shim=False,
                                                                tag="native").counts["standin_live_allocations"]
