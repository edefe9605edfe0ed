"""The block-scaled quantize kernels (kernels/fp8_scaled_quantize.cu), host
build, against a NumPy model of what cuBLASLt reads.

The model is written from outside sources, not from the kernel:
  - scale tensor layouts: the cuBLAS documentation, "Narrow precision data
    types usage" (block scaling factors layouts) and cublasLt.h
    (cublasLtMatmulMatrixScale_t): VEC128_32F one fp32 per 128 elements
    along k, element (r, kb) at r + kb * outer; BLK128x128_32F one fp32 per
    128 x 128 tile at kb + rb * roundup(ceil(K/128), 4); VEC32_UE8M0 one
    E8M0 byte per 32 elements in 128 x 4 tiles of 512 bytes, byte (r, kb)
    at ((r//128) * ceil(ceil(K/32)/4) + kb//4) * 512 + (r%32)*16 +
    ((r%128)//32)*4 + kb%4, padding zero-filled;
  - 1x128 and 128x128 scales: TransformerEngine's Float8BlockScaling
    (transformer_engine/common/recipe/__init__.py; power-of-two scales by
    default): scale = 2^floor(log2(fp8_max / amax)), stored as 1 / scale;
  - MXFP8 scales: the OCP Microscaling Formats spec v1.0, section 6.3:
    shared exponent floor(log2(amax)) - emax_elem (E4M3: 8, E5M2: 15),
    E8M0 code exponent + 127, elements x / 2^exponent; MX32_CEIL (what
    the mxfp8 recipe runs) rounds the shared exponent up instead, as
    TransformerEngine's MXFP8 documentation defines it
    (docs/features/low_precision_training/mxfp8/mxfp8.rst: exponent =
    float_to_e8m0(amax / max_norm), rounded up): ceil(log2(amax / fp8_max));
  - fp8 encoding: round to nearest even, saturating to the largest finite
    value (the OCP 8-bit floating point spec's E4M3/E5M2 codes; cuBLASLt's
    and the PTX ISA's cvt.rn.satfinite).
Every data byte and every scale byte is compared, padding included.
"""
import ctypes

import numpy as np
import pytest

from harness import KERNELS_HOST, PRELOAD_PREFIX

# ctypes loads the kernels' host build into this Python. A sanitizer
# build's library needs its runtime first in the process, which an
# uninstrumented Python does not have (it aborts at load): these byte-level
# checks run in the plain build, and tests/unit/test_fp8_kernels.c runs the
# same kernels through their launcher under ASan and TSan.
pytestmark = pytest.mark.skipif(bool(PRELOAD_PREFIX), reason="the sanitizer build's host kernels cannot load into "
                                "an uninstrumented Python (test_fp8_kernels covers them under the sanitizer)")

VEC128, BLK128, MX32, MX32_CEIL = 0, 1, 2, 3
E4M3, E5M2 = 0, 1


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class Launch(ctypes.Structure):  # tests/standin/standin_kernel.h
    _fields_ = [("abi", ctypes.c_uint), ("grid", Dim3), ("block", Dim3),
                ("shared_bytes", ctypes.c_uint), ("shared", ctypes.c_void_p),
                ("params", ctypes.POINTER(ctypes.c_void_p)), ("stream", ctypes.c_void_p),
                ("device", ctypes.c_int), ("cc_major", ctypes.c_int), ("cc_minor", ctypes.c_int)]


class Args(ctypes.Structure):  # kernels/fp8_kernels.h gs_fp8_bq_args
    _fields_ = [("src", ctypes.c_void_p), ("dst", ctypes.c_void_p), ("scales", ctypes.c_void_p),
                ("outer", ctypes.c_int64), ("k", ctypes.c_int64), ("k_pad", ctypes.c_int64),
                ("stride_r", ctypes.c_int64), ("stride_q", ctypes.c_int64),
                ("mode", ctypes.c_int32), ("fmt", ctypes.c_int32), ("stats", ctypes.c_void_p)]


def cdiv(a, b):
    return -(-a // b)


def fp8_table(fmt):
    """Every code's value (OCP 8-bit floating point spec v1.0)."""
    mbits, bias = (3, 7) if fmt == E4M3 else (2, 15)
    vals = np.zeros(256)
    for c in range(256):
        e, m = (c >> mbits) & ((1 << (7 - mbits)) - 1), c & ((1 << mbits) - 1)
        v = (m / (1 << mbits)) * 2.0 ** (1 - bias) if e == 0 else (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
        vals[c] = -v if c & 0x80 else v
    return vals


def encode(x, fmt):
    """Round to nearest even, saturate (x finite)."""
    table = fp8_table(fmt)
    maxcode = 0x7E if fmt == E4M3 else 0x7B
    pos = table[: maxcode + 1]
    a = np.minimum(np.abs(x.astype(np.float64)), pos[maxcode])
    hi = np.clip(np.searchsorted(pos, a), 0, maxcode)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - pos[lo], pos[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def te_pow2_scale(amax, fmt):
    fmax = 448.0 if fmt == E4M3 else 57344.0
    if amax == 0 or not np.isfinite(amax):
        return np.float32(1.0)
    s = np.float32(fmax) / np.float32(amax)
    if not np.isfinite(s):
        s = np.finfo(np.float32).max
    return np.float32(2.0 ** np.floor(np.log2(np.float64(s))))


def model(x, mode, fmt, k_pad):
    """x: outer x k float32. Returns (data bytes outer x k_pad, scale bytes)."""
    outer, k = x.shape
    xp = np.zeros((outer, k_pad), np.float32)
    xp[:, :k] = x
    data = np.zeros((outer, k_pad), np.uint8)
    if mode == VEC128:
        kb_n = cdiv(k_pad, 128)
        sc = np.zeros(outer * kb_n, np.float32)
        for r in range(outer):
            for kb in range(kb_n):
                seg = xp[r, kb * 128:(kb + 1) * 128]
                s = te_pow2_scale(np.abs(seg).max(), fmt)
                data[r, kb * 128:kb * 128 + len(seg)] = encode(seg * s, fmt)
                sc[r + kb * outer] = np.float32(1) / s
        return data, sc.tobytes()
    if mode == BLK128:
        kb_n = cdiv(k_pad, 128)
        ld = cdiv(kb_n, 4) * 4
        sc = np.zeros(cdiv(outer, 128) * ld, np.float32)
        for rb in range(cdiv(outer, 128)):
            for kb in range(kb_n):
                tile = xp[rb * 128:(rb + 1) * 128, kb * 128:(kb + 1) * 128]
                s = te_pow2_scale(np.abs(tile).max(), fmt)
                data[rb * 128:rb * 128 + tile.shape[0], kb * 128:kb * 128 + tile.shape[1]] = encode(tile * s, fmt)
                sc[kb + rb * ld] = np.float32(1) / s
        return data, sc.tobytes()
    emax = 8 if fmt == E4M3 else 15
    kb_n = cdiv(k_pad, 32)
    tiles_k = cdiv(kb_n, 4)
    sc = np.zeros(cdiv(outer, 128) * tiles_k * 512, np.uint8)
    for r in range(outer):
        for kb in range(kb_n):
            blk = xp[r, kb * 32:(kb + 1) * 32]
            amax = np.abs(blk).max()
            if np.isinf(amax):
                # OCP MX v1.0 6.3 via its reference implementation
                # (microsoft/microxcaling mx/mx_ops.py: a shared exponent
                # above 127 is NaN): the NaN scale 0xFF, elements as they
                # are; TransformerEngine's float_to_e8m0 (MX32_CEIL): Inf
                # gives 0xFE, elements x * 2^-127
                e = 127 if mode == MX32_CEIL else 128
                s = np.float32(2.0 ** -127) if e == 127 else np.float32(1)
                data[r, kb * 32:kb * 32 + len(blk)] = encode(blk * s, fmt)
                off = ((r // 128) * tiles_k + kb // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + kb % 4
                sc[off] = e + 127
                continue
            e = max(-127, int(np.floor(np.log2(np.float64(amax)))) - emax) if amax > 0 else -127
            if mode == MX32_CEIL and amax > 0:
                fmax = 448.0 if fmt == E4M3 else 57344.0
                e = max(-127, int(np.ceil(np.log2(np.float64(amax) / fmax))))
            data[r, kb * 32:kb * 32 + len(blk)] = encode(blk * np.float32(2.0 ** -e), fmt)
            off = ((r // 128) * tiles_k + kb // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + kb % 4
            sc[off] = e + 127
    return data, sc.tobytes()


def scale_bytes(mode, outer, k_pad):
    if mode == VEC128:
        return outer * cdiv(k_pad, 128) * 4
    if mode == BLK128:
        return cdiv(outer, 128) * cdiv(cdiv(k_pad, 128), 4) * 4 * 4
    return cdiv(outer, 128) * cdiv(cdiv(k_pad, 32), 4) * 512


def run_kernel(src, elem, transposed, mode, fmt, k_pad, grid):
    """src: outer x k as stored (k contiguous unless transposed)."""
    lib = ctypes.CDLL(str(KERNELS_HOST))
    outer, k = src.shape
    stored = np.ascontiguousarray(src.T if transposed else src)
    if elem == "bf16":
        raw = (stored.view(np.uint32) >> 16).astype(np.uint16)
    elif elem == "f16":
        raw = stored.astype(np.float16)
    else:
        raw = stored
    dst = np.full(outer * k_pad, 0xA5, np.uint8)  # poisoned: every byte must be written
    nsc = scale_bytes(mode, outer, k_pad)
    sc = np.full(nsc, 0xA5, np.uint8)
    a = Args(raw.ctypes.data, dst.ctypes.data, sc.ctypes.data, outer, k, k_pad,
             1 if transposed else k, outer if transposed else 1, mode, fmt)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(a), ctypes.c_void_p))
    launch = Launch(1, Dim3(grid, 1, 1), Dim3(128, 1, 1), 0, None, params, None, 0, 9, 0)
    fn = getattr(lib, "standin_kernel_gs_fp8_bq_" + elem)
    fn.argtypes = [ctypes.POINTER(Launch)]
    assert fn(ctypes.byref(launch)) == 0
    return dst.reshape(outer, k_pad), sc.tobytes()


def source(rng, outer, k, elem):
    x = (rng.standard_normal((outer, k)) * np.exp2(rng.integers(-6, 7, (outer, 1)))).astype(np.float32)
    x[0, 0] = 1e5 if elem != "f16" else 6e4  # an outlier: its blocks alone scale down
    if elem == "bf16":
        x = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
    elif elem == "f16":
        x = x.astype(np.float16).astype(np.float32)
    return x


@pytest.mark.parametrize("mode", [VEC128, BLK128, MX32, MX32_CEIL])
@pytest.mark.parametrize("elem,fmt,transposed", [("bf16", E4M3, False), ("f16", E4M3, True),
                                                 ("f32", E5M2, False), ("bf16", E5M2, True)])
def test_matches_model(mode, elem, fmt, transposed):
    rng = np.random.default_rng(19 + mode * 7 + fmt)
    # 136 rows: a second 128-row tile mostly padding; k = 200 padded to 256
    # (the k-block after the data is all zeros, so its scale is the zero
    # block's; VEC32's tile column is part padding)
    outer, k, k_pad = 136, 200, 256 if mode < MX32 else 224
    x = source(rng, outer, k, elem)
    want_data, want_sc = model(x, mode, fmt, k_pad)
    got_data, got_sc = run_kernel(x, elem, transposed, mode, fmt, k_pad, grid=5)
    bad = np.argwhere(got_data != want_data)
    assert bad.size == 0, f"{len(bad)} data bytes differ, first at {bad[0]}: {got_data[tuple(bad[0])]:#x} vs {want_data[tuple(bad[0])]:#x}"
    g, w = np.frombuffer(got_sc, np.uint8), np.frombuffer(want_sc, np.uint8)
    assert len(g) == len(w)
    diff = np.flatnonzero(g != w)
    assert diff.size == 0, f"{diff.size} scale bytes differ, first at byte {diff[0]}"


def test_outlier_stays_in_its_block():
    """A 1e5 outlier scales only its own block (DeepSeek-V3, arXiv
    2412.19437 section 3.3, the reason for fine-grained scales): every byte
    outside that block is the same as without the outlier."""
    rng = np.random.default_rng(5)
    x = source(rng, 8, 256, "f32")
    calm = x.copy()
    calm[0, 0] = 1.0
    for mode, blk in ((VEC128, 128), (MX32, 32)):
        data, _ = run_kernel(x, "f32", False, mode, E4M3, 256, grid=3)
        ref, _ = run_kernel(calm, "f32", False, mode, E4M3, 256, grid=3)
        same = np.ones(data.shape, bool)
        same[0, :blk] = False
        assert (data[same] == ref[same]).all()
        assert (data[0, 1:blk] != ref[0, 1:blk]).any()  # the outlier's block did move


def test_nan_block_scale_is_one():
    """A VEC128 segment or BLK128 tile holding a NaN gets the scale 1, its
    other elements encoded at that scale; the blocks without it are the
    model's. TransformerEngine's block amax is an fmaxf reduction
    (transformer_engine/common/transpose/quantize_transpose_square_blockwise.cu),
    which passes the NaN over: its scale for the tile is the finite
    elements' (asserted to differ here), a documented difference
    (docs/fp8.md, "Kernels")."""
    rng = np.random.default_rng(11)
    outer, k, k_pad = 130, 256, 256
    x = source(rng, outer, k, "f32") * np.float32(0.01)
    x[1, 5] = np.nan
    for mode in (VEC128, BLK128):
        data, sc = run_kernel(x, "f32", False, mode, E4M3, k_pad, grid=5)
        sc = np.frombuffer(sc, np.float32)
        clean = x.copy()
        clean[1, 5] = 0.0
        want_data, want_sc = model(clean, mode, E4M3, k_pad)
        want_sc = np.frombuffer(want_sc, np.float32)
        nan_scale = 0 if mode == BLK128 else 1  # tile (0, 0); segment (row 1, k-block 0)
        assert sc[nan_scale] == 1.0, sc[nan_scale]
        te = np.float32(1) / te_pow2_scale(np.nanmax(np.abs(x[:128, :128] if mode == BLK128 else x[1, :128])), E4M3)
        assert te != 1.0 and want_sc[nan_scale] == te  # TE's scale for it
        others = np.ones(len(sc), bool)
        others[nan_scale] = False
        assert (sc[others] == want_sc[others]).all()
        rows = slice(0, 128) if mode == BLK128 else slice(1, 2)
        blk = np.nan_to_num(x[rows, :128], nan=0.0)  # the model's encode takes no NaN
        finite = ~np.isnan(x[rows, :128])
        assert (data[rows, :128][finite] == encode(blk, E4M3)[finite]).all()  # scale 1: x itself
        assert data[1, 5] & 0x7F == 0x7F  # the NaN kept (E4M3's NaN, OCP 8-bit spec)
        same = np.ones(data.shape, bool)
        same[rows, :128] = False
        assert (data[same] == want_data[same]).all()


# ---- the fast kernels (fp8_kernels.h: _k_/_kt_ k-contiguous, _s_/_st_
# k-strided), which the launcher picks for aligned layouts: the same model,
# at shapes that cut every vector group, warp unit and tile (odd outer and
# k, a leading dimension wider than the matrix), on a grid smaller than
# the work (each block loops) and one larger (idle warps).

def aligned(n, dtype):
    """A zeroed array of n elements at a 64-byte boundary."""
    raw = np.zeros(n * np.dtype(dtype).itemsize + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + n * np.dtype(dtype).itemsize].view(dtype)


def run_fast(x, elem, transposed, mode, fmt, k_pad, grid, kernel=None):
    """x (outer x k) stored k-contiguous (or transposed) with its leading
    dimension 8 elements past the next multiple of 8, through the fast
    kernel of that layout (or `kernel`, e.g. the general one)."""
    lib = ctypes.CDLL(str(KERNELS_HOST))
    outer, k = x.shape
    stored = x.T if transposed else x
    ld = cdiv(stored.shape[1], 8) * 8 + 8
    if elem == "bf16":
        bits = (np.ascontiguousarray(stored).view(np.uint32) >> 16).astype(np.uint16)
    elif elem == "f16":
        bits = stored.astype(np.float16).view(np.uint16)
    else:
        bits = np.ascontiguousarray(stored).view(np.uint32)
    buf = aligned(stored.shape[0] * ld, bits.dtype)
    buf.reshape(stored.shape[0], ld)[:, :stored.shape[1]] = bits
    dst = aligned(outer * k_pad, np.uint8)
    dst[:] = 0xA5  # poisoned: every byte must be written
    sc = aligned(scale_bytes(mode, outer, k_pad), np.uint8)
    sc[:] = 0xA5
    a = Args(buf.ctypes.data, dst.ctypes.data, sc.ctypes.data, outer, k, k_pad,
             1 if transposed else ld, ld if transposed else 1, mode, fmt)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(a), ctypes.c_void_p))
    launch = Launch(1, Dim3(grid, 1, 1), Dim3(128, 1, 1), 0, None, params, None, 0, 9, 0)
    if kernel is None:
        kernel = ("st_" if transposed else "kt_") if mode == BLK128 else ("s_" if transposed else "k_")
    fn = getattr(lib, "standin_kernel_gs_fp8_bq_" + kernel + elem)
    fn.argtypes = [ctypes.POINTER(Launch)]
    assert fn(ctypes.byref(launch)) == 0
    return dst.reshape(outer, k_pad).copy(), sc.tobytes()


@pytest.mark.parametrize("mode", [VEC128, BLK128, MX32, MX32_CEIL])
@pytest.mark.parametrize("elem,fmt,transposed", [("bf16", E4M3, False), ("bf16", E5M2, True), ("f16", E4M3, False),
                                                 ("f16", E4M3, True), ("f32", E5M2, False), ("f32", E4M3, True)])
def test_fast_kernels_match_model(mode, elem, fmt, transposed):
    rng = np.random.default_rng(23 + mode * 5 + fmt)
    # 131 rows: a second 128-row tile of 3 (and, strided, a partial group
    # of rows); k = 203: a partial 16-byte group, padded to a multiple of
    # 16 (32 for MX, as the routes pad it)
    outer, k = 131, 203
    k_pad = 208 if mode < MX32 else 224
    x = source(rng, outer, k, elem)
    want_data, want_sc = model(x, mode, fmt, k_pad)
    got_data, got_sc = run_fast(x, elem, transposed, mode, fmt, k_pad, grid=3 if mode % 2 else 64)
    bad = np.argwhere(got_data != want_data)
    assert bad.size == 0, f"{len(bad)} data bytes differ, first at {bad[0]}: {got_data[tuple(bad[0])]:#x} vs {want_data[tuple(bad[0])]:#x}"
    g, w = np.frombuffer(got_sc, np.uint8), np.frombuffer(want_sc, np.uint8)
    diff = np.flatnonzero(g != w)
    assert diff.size == 0, f"{diff.size} scale bytes differ, first at byte {diff[0]}"


@pytest.mark.parametrize("elem,fmt", [("bf16", E4M3), ("f16", E5M2), ("f32", E4M3)])
def test_fast_kernels_equal_general_on_specials(elem, fmt):
    """NaN of either sign, infinities, -0, subnormals and the largest finite
    values (which the model above does not take): the fast kernels' bytes
    are the general kernel's in every mode and layout (what cuBLASLt reads
    must not depend on which kernel the launcher picked)."""
    rng = np.random.default_rng(41)
    outer, k = 130, 260
    x = source(rng, outer, k, elem)
    big = {"bf16": 3.3e38, "f16": 65504.0, "f32": 3.4e38}[elem]
    tiny = {"bf16": 1e-39, "f16": 6e-8, "f32": 1e-40}[elem]
    for (r, q), v in {(1, 5): np.nan, (2, 130): -np.nan, (3, 7): np.inf, (4, 40): -np.inf, (5, 9): -0.0,
                      (6, 250): tiny, (7, 33): -big, (128, 259): np.nan, (129, 0): big}.items():
        x[r, q] = v
    if elem == "bf16":
        x = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
    for mode in (VEC128, BLK128, MX32, MX32_CEIL):
        k_pad = 272 if mode < MX32 else 288
        for transposed in (False, True):
            got = run_fast(x, elem, transposed, mode, fmt, k_pad, grid=5)
            want = run_fast(x, elem, transposed, mode, fmt, k_pad, grid=5, kernel="")
            assert (got[0] == want[0]).all(), (mode, transposed, np.argwhere(got[0] != want[0])[:3])
            assert got[1] == want[1], (mode, transposed)


@pytest.mark.parametrize("mode", [MX32, MX32_CEIL])
@pytest.mark.parametrize("elem,fmt,transposed", [("bf16", E4M3, False), ("f16", E5M2, True), ("f32", E4M3, True)])
def test_mx_block_with_inf(mode, elem, fmt, transposed):
    """An MX block holding +-Inf (no NaN). MX32: the OCP Microscaling
    Formats spec v1.0, section 6.3 (shared_exp = floor(log2(max |V_i|)) -
    emax_elem) has no finite exponent for Inf; its reference
    implementation (microsoft/microxcaling, mx/mx_ops.py _quantize_mx)
    sets a shared exponent above the E8M0 maximum 127 to NaN: scale code
    0xFF, the block reads as NaN. MX32_CEIL: TransformerEngine's
    float_to_e8m0 (transformer_engine/common/utils.cuh) maps Inf to 0xFE
    (2^127), and its elements are x * 2^-127 (Inf saturates to the largest
    finite code). Not floor(log2(Inf)) = 128 less emax (code 247 for E4M3).
    The general and the fast kernel, against the model."""
    rng = np.random.default_rng(77 + mode)
    outer, k, k_pad = 130, 96, 96
    x = source(rng, outer, k, elem)
    x[0, 0] = 1.0
    x[3, 5], x[4, 40], x[129, 95] = np.inf, -np.inf, np.inf
    want_data, want_sc = model(x, mode, fmt, k_pad)
    w = np.frombuffer(want_sc, np.uint8)
    want_code = 0xFE if mode == MX32_CEIL else 0xFF
    for r, kb in ((3, 0), (4, 1), (129, 2)):
        off = ((r // 128) * 1 + kb // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + kb % 4
        assert w[off] == want_code, (r, kb, w[off])
    for got_data, got_sc in (run_kernel(x, elem, transposed, mode, fmt, k_pad, grid=3),
                             run_fast(x, elem, transposed, mode, fmt, k_pad, grid=3)):
        bad = np.argwhere(got_data != want_data)
        assert bad.size == 0, f"{len(bad)} data bytes differ, first at {bad[0]}"
        g = np.frombuffer(got_sc, np.uint8)
        diff = np.flatnonzero(g != w)
        assert diff.size == 0, f"{diff.size} scale bytes differ, first at byte {diff[0]}: {g[diff[0]]} vs {w[diff[0]]}"
