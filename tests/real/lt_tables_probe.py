#!/usr/bin/env python3
"""What a cuBLAS 12 or 13 answers without a GPU, as JSON on stdout, for
test_real_tables.py to hold the stand-in's answers against the toolkit's
(and tests/packaging/test_pip_cuda.py against PyPI's):

  lt_tables_probe.py LIBDIR CUBLASLT_H

LIBDIR holds libcublas.so.13 and libcublasLt.so.13, or the .so.12 pair
when it has no .so.13 one. For every attribute
number from 0 to 15 past the largest value of the three attribute enums
cublasLt.h declares (matmul descriptor, matrix layout, matmul preference),
declared or not: the size query, and where it answers, the default, get
and set with a size one too large or too small or a NULL buffer, and two
values set and read back. Then descriptor and layout creation over valid
and invalid types and sizes, both libraries' status names and strings,
their properties and cuBLASLt's versions. Every one of these works with no
driver."""

import ctypes
import json
import os
import re
import sys

libdir, header = sys.argv[1], sys.argv[2]
major = 13 if os.path.exists(f"{libdir}/libcublas.so.13") else 12
blas = ctypes.CDLL(f"{libdir}/libcublas.so.{major}")
lt = ctypes.CDLL(f"{libdir}/libcublasLt.so.{major}")
hdr = open(header).read()
out = {}

u64, i64, size_t = ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t


def declared(prefix):
    """The values of the enumerators cublasLt.h names with prefix, each on
    a line of its own (decimal or hex literals: what the header uses;
    anything else fails here)."""
    values = re.findall(r"^\s*%s\w+\s*=\s*([^,\n}]+)" % prefix, hdr, re.M)
    assert values and all(re.fullmatch(r"\d+|0x[0-9a-fA-F]+", v.strip()) for v in values), (prefix, values)
    return {int(v.strip(), 0) for v in values}


def created(fn, *args):
    obj = ctypes.c_void_p()
    status = fn(ctypes.byref(obj), *args)
    assert status == 0, (fn.__name__, args, status)
    return obj


# cublasLt.h: COMPUTE_32F 68, CUDA_R_32F 0, CUDA_R_8F_E4M3 28.
OBJECTS = {
    "desc": (created(lt.cublasLtMatmulDescCreate, 68, 0), lt.cublasLtMatmulDescSetAttribute,
             lt.cublasLtMatmulDescGetAttribute, "CUBLASLT_MATMUL_DESC_"),
    "layout": (created(lt.cublasLtMatrixLayoutCreate, 28, u64(32), u64(16), i64(32)),
               lt.cublasLtMatrixLayoutSetAttribute, lt.cublasLtMatrixLayoutGetAttribute, "CUBLASLT_MATRIX_LAYOUT_"),
    "pref": (created(lt.cublasLtMatmulPreferenceCreate), lt.cublasLtMatmulPreferenceSetAttribute,
             lt.cublasLtMatmulPreferenceGetAttribute, "CUBLASLT_MATMUL_PREF_"),
}
for kind, (obj, set_attr, get_attr, prefix) in OBJECTS.items():
    names = declared(prefix)
    out[f"{kind} declared"] = sorted(names)
    for a in range(max(names) + 16):
        n = size_t(999)
        rec = {"query": get_attr(obj, a, None, size_t(0), ctypes.byref(n))}
        out[f"{kind} attribute {a}"] = rec
        if rec["query"] != 0:
            continue
        size = n.value
        buf = (ctypes.c_ubyte * 64)()
        rec.update(size=size, get=get_attr(obj, a, buf, size_t(size), ctypes.byref(n)), default=bytes(buf[:size]).hex())
        rec["get_too_large"] = get_attr(obj, a, (ctypes.c_ubyte * 64)(), size_t(size + 1), ctypes.byref(n))
        rec["get_too_small"] = get_attr(obj, a, (ctypes.c_ubyte * 64)(), size_t(size - 1), ctypes.byref(n))
        rec["get_null"] = get_attr(obj, a, None, size_t(size), ctypes.byref(n))
        zero = (ctypes.c_ubyte * 64)()
        rec["set_too_large"] = set_attr(obj, a, zero, size_t(size + 1))
        rec["set_too_small"] = set_attr(obj, a, zero, size_t(size - 1)) if size > 1 else None
        rec["set_null"] = set_attr(obj, a, None, size_t(size))
        for name, first in (("one", 1), ("0x7f", 0x7F)):
            value = (ctypes.c_ubyte * 64)(first)
            rec[f"set_{name}"] = set_attr(obj, a, value, size_t(size))
            back = (ctypes.c_ubyte * 64)()
            get_attr(obj, a, back, size_t(size), ctypes.byref(n))
            rec[f"read_back_{name}"] = bytes(back[:size]).hex()
        set_attr(obj, a, buf, size_t(size))  # the default again

# Creation: compute x scale types, then layouts (type, rows, cols, ld),
# invalid ones included; cublasLt.h / library_types.h values.
for ct, st in [(68, 0), (64, 2), (77, 0), (70, 0), (74, 0), (75, 0), (76, 0), (68, 2), (68, 14), (68, 999),
               (999, 0), (72, 0), (66, 2), (69, 0)]:
    d = ctypes.c_void_p()
    out[f"desc create {ct} {st}"] = lt.cublasLtMatmulDescCreate(ctypes.byref(d), ct, st)
for t, rows, cols, ld in [(14, 16, 16, 16), (28, 16, 16, 16), (29, 16, 16, 16), (14, 16, 16, 8), (14, 0, 16, 16),
                          (14, 16, 0, 16), (14, 16, 16, 0), (14, 16, 16, -16), (0, 3, 5, 2), (999, 16, 16, 16),
                          (28, 17, 16, 17), (33, 16, 16, 16), (14, 1 << 40, 2, 1 << 40)]:
    lay = ctypes.c_void_p()
    out[f"layout create {t} {rows} {cols} {ld}"] = lt.cublasLtMatrixLayoutCreate(ctypes.byref(lay), t, u64(rows),
                                                                                  u64(cols), i64(ld))

for lib, pre in ((blas, "cublas"), (lt, "cublasLt")):
    for fn in ("GetStatusName", "GetStatusString"):
        f = getattr(lib, pre + fn)
        f.restype = ctypes.c_char_p
        for s in list(range(20)) + [-1, 1000]:
            v = f(s)
            out[f"{pre}{fn} {s}"] = v.decode() if v is not None else None
    for p in range(4):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL, and one past
        v = ctypes.c_int(-7)
        out[f"{pre}GetProperty {p}"] = [getattr(lib, pre + "GetProperty")(p, ctypes.byref(v)), v.value]
for fn in ("cublasLtGetVersion", "cublasLtGetCudartVersion"):
    getattr(lt, fn).restype = size_t
    out[fn] = getattr(lt, fn)()
print(json.dumps(out, sort_keys=True))
