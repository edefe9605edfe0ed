"""Arguments cuBLAS refuses get cuBLAS's own status on every route.

A catalogue of invalid or unusual argument sets, each taken from a
requirement the cuBLAS documentation states (docs.nvidia.com/cuda/cublas;
the section is named with each entry), is issued by ffma_client_cu13
through every entry point it applies to, without the shim and under the
shim in every mode (native, auto, ffma, fp8) on devices 6.1 and 9.0 (the
fp8 route's own kernel and cuBLASLt's fp8 GEMM). Every call must return
exactly the status it returns without the shim, and a refused call must
leave its output untouched (the client's ok=1). The principle under test:
a route runs only what it knows cuBLAS would accept; everything else is
forwarded so that cuBLAS answers.

Where the expected statuses come from: each entry's last field cites the
cuBLAS documentation (docs.nvidia.com/cuda/cublas) it is taken from — the
Return Values table of cublasGemmEx / cublasGemmStridedBatchedEx /
cublasGemmBatchedEx for the GemmEx family (INVALID_VALUE for negative
sizes, small leading dimensions, bad transposes; NOT_SUPPORTED for type
combinations and algorithms the type table lacks), cublasLtMatmul's
Return Values table and its in-place / out-of-place rules, and the
attribute descriptions of cublasLt.h (cublasLtMatmulDescAttributes_t,
cublasLtMatrixLayoutAttribute_t) for the Lt entries. Where the
documentation names no status (a few Lt configurations), the entry says so
and gives the stand-in's answer, NOT_SUPPORTED, the status cublasLtMatmul
documents for a configuration the implementation does not support. The
stand-in's checks (tests/standin/cublas.c, cublaslt_matmul.c) follow these
readings, and test_the_stand_in_answers_as_documented holds it to them.

The real cuBLAS 13 here cannot confirm these statuses: without a GPU,
cublasCreate and cublasLtCreate fail with NOT_INITIALIZED and a NULL handle
is refused with NOT_INITIALIZED before any argument is looked at (m = -1
included), so every catalogue call would answer 1.
tests/real/test_real_cublas.py holds every route to that answer. What the
real libcublasLt.so.13 does answer without a GPU is its descriptors: the
attribute sizes, defaults and settable values the routes read are checked
against it in tests/unit/test_decode.c."""

import pytest

from harness import CLIENT_DIR, PRELOAD_PREFIX, SHIM, read_log, require_built, run, standin_counts

GEMM_FAMILY = ("ex", "ex64", "strided", "strided64", "batched", "batched64")
BATCHED = ("strided", "strided64", "batched", "batched64")
ALL = GEMM_FAMILY + ("lt",)
LT = ("lt",)
# cublasStatus_t (cublas_api.h)
SUCCESS, INVALID_VALUE, NOT_SUPPORTED = 0, 7, 15

# (name, --gemm keys, entry points, the status the documentation gives, where it says so)
CATALOGUE = [
    ("m_negative", {"call_m": -1}, GEMM_FAMILY, INVALID_VALUE,
     "cublasGemmEx, cublasGemmStridedBatchedEx, cublasGemmBatchedEx: INVALID_VALUE if m, n or k < 0"),
    ("k_negative", {"call_k": -1}, GEMM_FAMILY, INVALID_VALUE, "same: k < 0"),
    ("batch_negative", {"call_batch": -1}, BATCHED, INVALID_VALUE,
     "cublasGemmStridedBatchedEx, cublasGemmBatchedEx: INVALID_VALUE if batchCount < 0"),
    ("transa_conjg", {"ta": "X"}, ALL, INVALID_VALUE,
     "cublasGemmEx: INVALID_VALUE if transa, transb is not CUBLAS_OP_N, CUBLAS_OP_C or CUBLAS_OP_T; "
     "cublasLtMatmul: a descriptor in an impossible configuration is INVALID_VALUE"),
    ("lda_too_small", {"apad": -1}, ALL, INVALID_VALUE,
     "cublasGemmEx: INVALID_VALUE if lda < max(1, m) (transa N) or max(1, k) (otherwise); "
     "cublasLtMatrixLayoutAttribute_t LD: at least the rows of a column-major matrix"),
    ("ldb_too_small", {"bpad": -1}, ALL, INVALID_VALUE, "same for ldb: max(1, k) (transb N) or max(1, n)"),
    ("ldc_too_small", {"cpad": -1}, ALL, INVALID_VALUE, "same for ldc: max(1, m)"),
    ("bf16_fast_16bf", {"compute": "32f_fast_16bf"}, ALL, NOT_SUPPORTED,
     "cublasComputeType_t: CUBLAS_COMPUTE_32F_FAST_16BF is for 32-bit input and output matrices; "
     "cublasGemmEx and cublasLtMatmul type tables list it with CUDA_R_32F A/B/C only"),
    ("bf16_fast_tf32", {"compute": "32f_fast_tf32"}, ALL, NOT_SUPPORTED,
     "same for CUBLAS_COMPUTE_32F_FAST_TF32"),
    ("a_bf16_b_fp16", {"bt": "fp16"}, ALL, NOT_SUPPORTED,
     "cublasGemmEx: NOT_SUPPORTED if the combination of Atype, Btype and Ctype is not supported "
     "(the table has A and B of one type)"),
    ("ab_bf16_c_fp16", {"c": "fp16"}, ALL, NOT_SUPPORTED,
     "same: bf16 A/B take C in bf16 or fp32 only"),
    ("bf16_compute_64f", {"compute": "64f"}, ALL, NOT_SUPPORTED, "same: CUBLAS_COMPUTE_64F takes fp64 only"),
    ("bf16_compute_16f", {"compute": "16f"}, ALL, NOT_SUPPORTED, "same: CUBLAS_COMPUTE_16F takes fp16 only"),
    ("algo_unknown", {"algo": 9999}, GEMM_FAMILY, NOT_SUPPORTED,
     "cublasGemmEx: NOT_SUPPORTED if the algorithm, algo, is not supported (cublasGemmAlgo_t values)"),
    ("inplace_ldd_differs", {"dpad": 2}, LT, INVALID_VALUE,
     "cublasLtMatmul: in-place multiplication is C == D with Cdesc == Ddesc; anything else in conflict "
     "is INVALID_VALUE"),
    ("outofplace_d_type_differs", {"oop": 1, "dt": "fp16"}, LT, INVALID_VALUE,
     "cublasLtMatmul: out of place, C and D must have the same data type, rows, columns, batch size "
     "and order"),
    ("bias_fp32_on_bf16_d", {"epi": "bias", "bias": "fp32"}, LT, NOT_SUPPORTED,
     "cublasLtMatmulDescAttributes_t BIAS_DATA_TYPE and the cublasLtMatmul type table: outside fp8 "
     "the bias is D's type"),
    ("scale_type_bf16", {"scale": "bf16"}, LT, NOT_SUPPORTED,
     "cublasLtMatmul type table: COMPUTE_32F takes scaleType CUDA_R_32F"),
    # Descriptor and layout attributes no route reproduces (cublasLt.h,
    # cublasLtMatmulDescAttributes_t and cublasLtMatrixLayoutAttribute_t):
    # whatever cuBLASLt answers, a route must leave the call to it
    # (test_unrouted_attributes_run_native).
    ("transc_T", {"dattr": "5:1"}, LT, NOT_SUPPORTED,
     "cublasLt.h CUBLASLT_MATMUL_DESC_TRANSC: 'Currently only CUBLAS_OP_N is supported'; cublasLtMatmul: "
     "NOT_SUPPORTED if the current implementation does not support the configured operation"),
    ("fill_upper", {"dattr": "6:1"}, LT, NOT_SUPPORTED,
     "CUBLASLT_MATMUL_DESC_FILL_MODE other than CUBLAS_FILL_MODE_FULL: the stand-in implements full output "
     "only and answers with cublasLtMatmul's NOT_SUPPORTED for an unsupported configuration"),
    ("a_scale_mode_vec16", {"dattr": "31:1"}, LT, NOT_SUPPORTED,
     "CUBLASLT_MATMUL_DESC_A_SCALE_MODE = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 (block scaling, for fp4/fp8 "
     "operands) on a bf16 problem: cublasLtMatmul's NOT_SUPPORTED for an unsupported configuration"),
    ("d_out_scale_mode", {"dattr": "37:3"}, LT, NOT_SUPPORTED, "same for CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE"),
    ("pointer_array_batch", {"lmode": "ptr", "batch": 2}, LT, NOT_SUPPORTED,
     "CUBLASLT_MATRIX_LAYOUT_BATCH_MODE = CUBLASLT_BATCH_MODE_POINTER_ARRAY: 'The address of the matrix of "
     "each instance of the batch are read from arrays of pointers'. The client passes its matrices, not "
     "arrays of pointers; the stand-in does not implement pointer-array batches (tests/standin/README.md) "
     "and answers NOT_SUPPORTED, so its matrices are never read as pointers"),
    ("aux_ld_set", {"dattr": "12:128"}, LT, SUCCESS,
     "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD (used by the AUX epilogues only): cuBLASLt runs the call"),
    # Unusual but valid: cuBLAS runs them; a route must give the same result or decline.
    ("row_major_lt", {"order": "row"}, LT, SUCCESS, "cublasLtOrder_t: CUBLASLT_ORDER_ROW is a layout order"),
    ("bias_per_member", {"epi": "bias", "batch": 3, "bstride": 64}, LT, SUCCESS,
     "cublasLtMatmulDescAttributes_t BIAS_BATCH_STRIDE: one bias vector per batch member"),
    ("c_fp32_ab_bf16", {"c": "fp32"}, ALL, SUCCESS, "cublasGemmEx table: bf16 A/B with fp32 C"),
]

MODES = {
    "native": {"GEMMSHIM_MODE": "native"},
    "auto": {},
    "ffma": {"GEMMSHIM_MODE": "ffma", "GEMMSHIM_GATE": "off"},
    "fp8": {"GEMMSHIM_MODE": "fp8"},
    "fp16": {"GEMMSHIM_MODE": "fp16", "GEMMSHIM_GATE": "off"},
}


def catalogue_args():
    args = []
    for name, keys, apis, _, _ in CATALOGUE:
        for api in apis:
            kw = {"name": f"{name}.{api}", "api": api}
            if api in BATCHED:
                kw["batch"] = 3
            kw.update(keys)
            args.append("--gemm=" + ",".join(f"{k}={v}" for k, v in kw.items()))
    return args


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "ffma_client_cu13"
    require_built([path])
    return path


def statuses(r):
    return {c["name"]: (int(c["status"]), c["ok"]) for c in r.calls}


@pytest.fixture(scope="module", params=["6.1", "7.5", "9.0"])
def native(request, client, standin):
    """Every catalogue call without the shim: the statuses to match."""
    cc = request.param
    r = run([client, *catalogue_args()], standin[13], env={"STANDIN_CC": cc})
    got = statuses(r)
    assert len(got) == len(catalogue_args()), r.describe()
    return cc, got, r


def test_the_stand_in_answers_as_documented(native):
    """Without the shim, the stand-in gives each entry the documentation's
    status (its checks follow the same sections), and refused calls write
    nothing."""
    cc, got, r = native
    for name, _, apis, want, source in CATALOGUE:
        for api in apis:
            status, ok = got[f"{name}.{api}"]
            assert (status, ok) == (want, "1"), (cc, name, api, status, ok, source)


@pytest.mark.parametrize("mode", list(MODES))
def test_every_route_gives_the_native_status(native, client, standin, tmp_path, mode):
    cc, want, _ = native
    log = tmp_path / "gemms.jsonl"
    r = run([client, *catalogue_args()], standin[13], shim=True,
            env={"STANDIN_CC": cc, "GEMMSHIM_LOG": str(log), **MODES[mode]})
    got = statuses(r)
    # A refused call must leave its output as it was (ok=1); a call cuBLAS
    # runs is held to its status only: fp8 results are not the client's
    # exact ones (test_fp8_route.py checks their accuracy).
    def same(name):
        if name not in got:
            return False
        return got[name] == want[name] if want[name][0] != SUCCESS else got[name][0] == SUCCESS
    wrong = {name: (got.get(name), want[name]) for name in want if not same(name)}
    assert not wrong, f"{cc} {mode}: (shim, native) differ: {wrong}\n{r.describe()}"
    recs = read_log(log)
    by_name = dict(zip((c["name"] for c in r.calls), recs))
    assert len(recs) == len(want)
    for name, (status, _) in want.items():
        rec = by_name[name]
        assert rec["status"] == status, (name, rec)
        # A refused call ran native: cuBLAS itself answered.
        if status != SUCCESS:
            assert rec["route"] == "native", (name, rec)


# The entries above whose descriptor or layout carries an attribute no
# route reproduces, and the attribute the routing log's reason must name.
UNROUTED = {
    "transc_T": "CUBLASLT_MATMUL_DESC_TRANSC",
    "fill_upper": "CUBLASLT_MATMUL_DESC_FILL_MODE",
    "a_scale_mode_vec16": "CUBLASLT_MATMUL_DESC_A_SCALE_MODE",
    "d_out_scale_mode": "CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE",
    "pointer_array_batch": "CUBLASLT_BATCH_MODE_POINTER_ARRAY",
    "aux_ld_set": "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD",
}


@pytest.mark.parametrize("mode", ["ffma", "fp8", "fp16"])
def test_unrouted_attributes_run_native(native, client, standin, tmp_path, mode):
    """A route rebuilds the GEMM from the fields it reads; an attribute it
    does not reproduce would be dropped (a transposed C written untransposed,
    a pointer array overwritten with results). Such calls run native, with
    cuBLASLt's own status and output, and the log names the attribute."""
    cc, want, _ = native
    names = [f"{name}.lt" for name in UNROUTED]
    args = [a for a in catalogue_args() if any(f"name={n}," in a for n in names)]
    assert len(args) == len(UNROUTED)
    log = tmp_path / "gemms.jsonl"
    r = run([client, *args], standin[13], shim=True,
            env={"STANDIN_CC": cc, "GEMMSHIM_LOG": str(log), **MODES[mode]})
    got = statuses(r)
    recs = dict(zip((c["name"] for c in r.calls), read_log(log)))
    for name, attr in UNROUTED.items():
        key = f"{name}.lt"
        assert got[key] == want[key], (cc, mode, key, got[key], want[key])
        rec = recs[key]
        assert rec["route"] == "native" and rec["decided"] == mode, (key, rec)
        assert attr in rec["reason"], (key, rec["reason"])



def check_attribute_calls_run_native(client, libdir, env, mode, attributes, tmp_path, routed=()):
    """attributes: name -> (ID:VALUE, the attribute's name, cuBLASLt's
    status). One plain batched Lt call, one per attribute setting it, and
    one per ID:VALUE in routed: without the shim each gets its status;
    under the shim the same, the plain and routed calls take the route and
    the others run native naming their attribute."""
    plain = {"plain": ""} | {f"routed{i}": f",dattr={attr}" for i, attr in enumerate(routed)}
    args = [f"--gemm=name={name},api=lt,batch=2{extra}" for name, extra in plain.items()]
    args += [f"--gemm=name={name},api=lt,batch=2,dattr={attr}" for name, (attr, _, _) in attributes.items()]
    base = statuses(run([client, *args], libdir, env=env))
    assert base == {**{n: (SUCCESS, "1") for n in plain}, **{n: (st, "1") for n, (_, _, st) in attributes.items()}}, base
    log = tmp_path / "gemms.jsonl"
    # --fp8: the client checks fp8 results at fp8's tolerance.
    r = run([client, *(["--fp8"] if mode == "fp8" else []), *args], libdir, shim=True,
            env={**env, "GEMMSHIM_LOG": str(log), "GEMMSHIM_MODE": mode, "GEMMSHIM_GATE": "off"})
    assert statuses(r) == base
    recs = dict(zip((c["name"] for c in r.calls), read_log(log)))
    for name in plain:
        assert recs[name]["route"] == mode, recs[name]
    for name, (_, attr, status) in attributes.items():
        rec = recs[name]
        assert (rec["route"], rec["decided"], rec["status"]) == ("native", mode, status), (name, rec)
        want = f"{mode} declined: the descriptor sets {attr}, which no route reproduces; ran native"
        assert rec["reason"].endswith(want), (name, rec)


MODE_DEVICE = {"ffma": "6.1", "fp8": "9.0", "fp16": "7.5"}

# cuBLAS 12's atomic synchronization: cublasLtMatmulDescAttributes_t ids 27
# to 30 in its cublasLt.h (12.9), not in CUDA 13's.
CU12_ATOMIC_SYNC = {
    "atomic_rows": ("27:4", "CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_NUM_CHUNKS_D_ROWS", NOT_SUPPORTED),
    "atomic_cols": ("28:2", "CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_NUM_CHUNKS_D_COLS", NOT_SUPPORTED),
    "atomic_in": ("29:4096", "CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_IN_COUNTERS_POINTER", NOT_SUPPORTED),
    "atomic_out": ("30:4096", "CUBLASLT_MATMUL_DESC_ATOMIC_SYNC_OUT_COUNTERS_POINTER", NOT_SUPPORTED),
    # id 38: undeclared in cuBLAS 12.9's header, 4 bytes in its library (CUDA
    # 13's EMULATION_DESCRIPTOR is 8); the stand-in keeps it and runs the call
    "id38": ("38:1", "CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR", SUCCESS),
}


@pytest.mark.parametrize("mode", list(MODE_DEVICE))
def test_cublas12_atomic_sync_runs_native(standin, tmp_path, mode):
    """cuBLAS 12's EXPERIMENTAL atomic synchronization (its cublasLt.h: the
    chunk counts, "default 0 (atomic synchronization disabled)", and the
    counter arrays "consumed" and "produced by a matmul") makes the GEMM
    wait on and signal counters another kernel watches. A route would do
    neither, and the watcher would wait for ever: such a call runs native
    with cuBLASLt's own status (the stand-in's: NOT_SUPPORTED, it has no
    such kernels) and the log names the attribute. The same call without
    it takes the route. CUDA 13's cuBLASLt refuses the ids when they are
    set (tests/real/test_real_tables.py), so nobody can set them there."""
    client = CLIENT_DIR / "ffma_client_cu12"
    require_built([client])
    check_attribute_calls_run_native(client, standin[12], {"STANDIN_CC": MODE_DEVICE[mode]}, mode, CU12_ATOMIC_SYNC,
                                     tmp_path)


# cuBLAS 13.10's cublasLt.h (PyPI nvidia-cublas 13.10.0.20), newer than the
# toolkit's 13.1: cublasLtMatmulDescAttributes_t ids 39 to 41.
CU1310_ATTRIBUTES = {
    "alpha_batch_stride": ("39:1", "CUBLASLT_MATMUL_DESC_ALPHA_BATCH_STRIDE", NOT_SUPPORTED),
    "beta_batch_stride": ("40:1", "CUBLASLT_MATMUL_DESC_BETA_BATCH_STRIDE", NOT_SUPPORTED),
    "batch_invariance_auto": ("41:8", "CUBLASLT_MATMUL_DESC_BATCH_INVARIANCE_FLAGS", SUCCESS),
    "batch_invariance_align16": ("41:4", "CUBLASLT_MATMUL_DESC_BATCH_INVARIANCE_FLAGS", SUCCESS),
}


@pytest.mark.parametrize("mode", list(MODE_DEVICE))
def test_cublas1310_batch_attributes_run_native(client, standin, tmp_path, mode):
    """cuBLAS 13.10's ALPHA_BATCH_STRIDE and BETA_BATCH_STRIDE ("Used when
    matrix D's CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT > 1": strides a route
    would not apply) and BATCH_INVARIANCE_FLAGS
    (default CUBLASLT_BATCH_INVARIANCE_UNSET; results that do not depend on
    the batch, which an fp8 scale taken over the whole batch breaks): a
    call that sets any of them runs native with cuBLASLt's status, and the
    log names the attribute; CUBLASLT_BATCH_INVARIANCE_DISABLED (0) asks
    for nothing and is routed. The stand-in answers as 13.10
    (STANDIN_CUBLASLT_VERSION=131000): it takes the ids, refuses alpha and
    beta batch strides as 13.10's library does outside grouped GEMMs ("A
    batch stride for alpha is only supported for grouped operations"; the
    stand-in has no grouped ones) and keeps batch invariance (one summation
    order); as 13.1 it refuses the ids, as the toolkit's does."""
    env = {"STANDIN_CC": MODE_DEVICE[mode], "STANDIN_CUBLASLT_VERSION": "131000"}
    check_attribute_calls_run_native(client, standin[13], env, mode, CU1310_ATTRIBUTES, tmp_path, routed=["41:0"])


def test_cublas131_refuses_the_1310_attributes(client, standin):
    """The stand-in answering as the toolkit's 13.1 refuses ids 39 to 41 at
    set time, as the toolkit's library does (tests/real/test_real_tables.py
    compares every id): the client's set fails before any GEMM."""
    r = run([client, "--gemm=name=a,api=lt,dattr=41:8"], standin[13], env={"STANDIN_CC": "9.0"})
    assert r.returncode != 0 and "cublasLtMatmulDescSetAttribute" in r.stdout + r.stderr, r.describe()


INVARIANCE_WHY = "asks cuBLAS for batch-invariant results, which no route promises"


def invariance_run(client, libdir, env, mode, tmp_path, calls, extra=()):
    """calls: name -> --gemm keys. Runs them under the shim in mode; returns
    name -> (route, decided, status, ok, reason)."""
    log = tmp_path / f"inv{len(list(tmp_path.iterdir()))}.jsonl"
    args = [f"--gemm=name={name},{keys}" for name, keys in calls.items()]
    r = run([client, *(["--fp8"] if mode == "fp8" else []), *extra, *args], libdir, shim=True,
            env={**env, "GEMMSHIM_LOG": str(log), "GEMMSHIM_MODE": mode, "GEMMSHIM_GATE": "off"})
    assert r.returncode == 0, r.describe()
    st = statuses(r)
    recs = dict(zip((c["name"] for c in r.calls), read_log(log)))
    return {n: (rec["route"], rec["decided"], rec["status"], st[n][1], rec["reason"]) for n, rec in recs.items()}


@pytest.mark.parametrize("mode", list(MODE_DEVICE))
def test_cublas_batch_invariance_variable_runs_native(client, standin, tmp_path, mode):
    """cuBLAS 13.10's cublasLt.h: BATCH_INVARIANCE_FLAGS defaults to
    CUBLASLT_BATCH_INVARIANCE_UNSET, "not set through the attribute; batch
    invariance is controlled by the CUBLAS_BATCH_INVARIANCE_FLAGS
    environment variable instead", and "An explicitly set descriptor
    attribute value takes precedence over the environment variable". While
    the variable asks for invariance (any value but 0, DISABLED), a call
    that defers to it runs native, the log naming the variable: an Lt call
    left UNSET, and a GemmEx call (libcublas.so.13 runs its GEMMs in
    libcublasLt, which reads the variable). An Lt call set to DISABLED is
    routed. A cuBLASLt that does not know the attribute (13.1, the
    toolkit's: it refuses id 41) reads no such variable: everything is
    routed. The variable is read at the first routed call, so a program
    may set it after the shim loaded."""
    dev = {"STANDIN_CC": MODE_DEVICE[mode]}
    v1310 = {**dev, "STANDIN_CUBLASLT_VERSION": "131000"}
    calls = {"lt": "api=lt", "ex": "api=ex", "lt_disabled": "api=lt,dattr=41:0"}
    native = f"{mode} declined: CUBLAS_BATCH_INVARIANCE_FLAGS=4 {INVARIANCE_WHY}; ran native"

    def expect(got, native_names, reason=native):
        for name, (route, decided, status, ok, why) in got.items():
            assert (decided, status, ok) == (mode, SUCCESS, "1"), (name, got[name])
            if name in native_names:
                assert route == "native" and why.endswith(reason), (name, got[name])
            else:
                assert route == mode and INVARIANCE_WHY not in why, (name, got[name])

    expect(invariance_run(client, standin[13], {**v1310, "CUBLAS_BATCH_INVARIANCE_FLAGS": "4"}, mode, tmp_path,
                          calls), {"lt", "ex"})
    # set by the program after the shim's constructor ran
    expect(invariance_run(client, standin[13], v1310, mode, tmp_path, calls,
                          ["--setenv=CUBLAS_BATCH_INVARIANCE_FLAGS=4"]), {"lt", "ex"})
    for off in ("0", "0x0", ""):
        expect(invariance_run(client, standin[13], {**v1310, "CUBLAS_BATCH_INVARIANCE_FLAGS": off}, mode, tmp_path,
                              calls), set())
    expect(invariance_run(client, standin[13], v1310, mode, tmp_path, calls), set())
    # a value cuBLAS would ignore as invalid still counts as asking; the
    # reason shows at most 40 characters of it
    long = "x" * 45
    expect(invariance_run(client, standin[13], {**v1310, "CUBLAS_BATCH_INVARIANCE_FLAGS": long}, mode, tmp_path,
                          {"ex": "api=ex"}), {"ex"},
           f"{mode} declined: CUBLAS_BATCH_INVARIANCE_FLAGS={'x' * 40}... {INVARIANCE_WHY}; ran native")
    # cuBLASLt 13.1 does not know id 41: the variable means nothing to it
    expect(invariance_run(client, standin[13], {**dev, "CUBLAS_BATCH_INVARIANCE_FLAGS": "4"}, mode, tmp_path,
                          {"lt": "api=lt", "ex": "api=ex"}), set())


def test_cublas_batch_invariance_probe_failure_runs_native(client, standin, tmp_path):
    """A GemmEx call cannot show whether the loaded cuBLASLt reads the
    variable: the shim asks a descriptor of its own, once a process. When
    the probe fails the call runs native naming the failed call, and the
    next call asks again; only an answer is kept. INVALID_VALUE for the
    attribute is cublasLt.h's answer for an id the library does not know,
    and also the fault table's for a failed getter, so it is believed only
    from a cuBLASLt older than 13.10 (cublasLtGetVersion). Faults are the
    fault table's (shim/base/sys.h): cublasLtMatmulDescCreate ALLOC_FAILED
    (3), cublasLtMatmulDescGetAttribute INVALID_VALUE (7),
    cublasLtGetVersion 0. The probe's descriptor is destroyed (the
    stand-in's counts)."""
    probing = "probing whether cuBLASLt reads CUBLAS_BATCH_INVARIANCE_FLAGS; ran native"
    asks = f"ffma declined: CUBLAS_BATCH_INVARIANCE_FLAGS=1 {INVARIANCE_WHY}; ran native"
    calls = {"ex": "api=ex", "ex2": "api=ex", "ex3": "api=ex"}
    v1310 = {"STANDIN_CC": "6.1", "STANDIN_CUBLASLT_VERSION": "131000", "CUBLAS_BATCH_INVARIANCE_FLAGS": "1"}
    v131 = {"STANDIN_CC": "6.1", "CUBLAS_BATCH_INVARIANCE_FLAGS": "1"}
    cases = [
        (v1310, "cublasLtMatmulDescCreate:1", f"cublasLtMatmulDescCreate failed (status 3) {probing}", "native"),
        (v1310, "cublasLtMatmulDescGetAttribute:1",
         f"cublasLtMatmulDescGetAttribute refused BATCH_INVARIANCE_FLAGS on cuBLASLt 13.10.0, which has it, {probing}",
         "native"),
        (v131, "cublasLtGetVersion:1", f"cublasLtGetVersion returned 0 {probing}", "ffma"),
    ]
    for env, fault, first, later in cases:
        counts = tmp_path / "counts"
        got = invariance_run(client, standin[13], {**env, "GEMMSHIM_FAULT": fault, "STANDIN_COUNTS": str(counts)},
                             "ffma", tmp_path, calls)
        assert got["ex"][:4] == ("native", "ffma", SUCCESS, "1"), (fault, got)
        assert got["ex"][4].endswith(f"ffma declined: {first}"), (fault, got)
        for name in ("ex2", "ex3"):
            assert got[name][:4] == (later, "ffma", SUCCESS, "1"), (fault, got)
            assert (got[name][4].endswith(asks)) == (later == "native"), (fault, got)
        c = standin_counts(counts)
        assert c["cublasLtMatmulDescCreate"] == c["cublasLtMatmulDescDestroy"] > 0, (fault, c)


def test_cublas_batch_invariance_two_cublas_majors_run_native(client, standin, tmp_path):
    """The GemmEx family runs in the cuBLASLt its libcublas loaded; the
    shim's probe asks the one its cuBLASLt hooks resolved. With cuBLAS 12's
    libcublasLt.so.12 preloaded beside cuBLAS 13's libcublas.so.13 they
    differ, and the answer would be another library's: the call runs
    native, naming both."""
    preload = ":".join([*PRELOAD_PREFIX, str(SHIM), str(standin[12] / "libcublasLt.so.12")])
    env = {"STANDIN_CC": "6.1", "STANDIN_CUBLASLT_VERSION": "131000", "CUBLAS_BATCH_INVARIANCE_FLAGS": "4",
           "LD_PRELOAD": preload}
    got = invariance_run(client, standin[13], env, "ffma", tmp_path, {"ex": "api=ex"})
    assert got["ex"][:4] == ("native", "ffma", SUCCESS, "1"), got
    assert got["ex"][4].endswith("ffma declined: CUBLAS_BATCH_INVARIANCE_FLAGS is set and libcublas.so.13 runs beside "
                                 "libcublasLt.so.12: cannot tell whether its GEMMs read it; ran native"), got
