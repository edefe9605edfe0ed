"""The stand-in's cuBLAS 13 against the toolkit's own, where the toolkit's
answers without a GPU: cuBLASLt's attribute tables (every attribute
number up to 15 past the largest one cublasLt.h declares for descriptors,
layouts and preferences, declared or not: size, default, the statuses of
wrong sizes and NULL buffers, values set and read back), descriptor and
layout creation over valid and invalid arguments, status names and
strings, properties and versions. The stand-in's README says its
attribute get/set "behave as the real library's"; this holds it to the
real library itself, for the attributes the shim sets on its fp8 plans
(scale modes, fast accumulation, the alpha-vector batch stride) and reads
(cuBLAS 12's atomic synchronization ids, which cuBLASLt 13 refuses) as for
every other. The stand-in answers as one release, the toolkit's 13.1.0:
another toolkit fails here first on the versions."""

import json
import re
import sys
from pathlib import Path

import pytest

from harness import REAL_CUBLAS, STANDIN, run

PROBE = Path(__file__).resolve().parent / "lt_tables_probe.py"
HEADER = REAL_CUBLAS.parent / "include" / "cublasLt.h"

# The descriptor attributes the fp8 route sets (shim/routes/lt.c).
FP8_ATTRIBUTES = ("FAST_ACCUM", "ALPHA_VECTOR_BATCH_STRIDE", "A_SCALE_POINTER", "B_SCALE_POINTER", "A_SCALE_MODE",
                  "B_SCALE_MODE", "BIAS_POINTER", "BIAS_DATA_TYPE")


def probe(libdir):
    r = run([sys.executable, PROBE, libdir, HEADER], libdir, timeout=60)
    assert r.returncode == 0, r.describe()
    return json.loads(r.stdout)


def test_the_standins_tables_are_the_toolkits(real_cublas):
    assert HEADER.exists(), f"{HEADER}: the toolkit's cublasLt.h, beside {REAL_CUBLAS}"
    text = HEADER.read_text()
    values = dict(re.findall(r"CUBLASLT_MATMUL_DESC_(\w+) = (\d+),", text))
    fp8 = {f"desc attribute {values[n]}" for n in FP8_ATTRIBUTES}
    real, standin = probe(real_cublas), probe(STANDIN[13])
    declared = [f"{kind} attribute {a}" for kind in ("desc", "layout", "pref") for a in real[f"{kind} declared"]]
    assert len(declared) >= 50 and fp8 <= set(declared), (fp8, declared)
    assert all(real[k]["query"] == 0 for k in declared), [k for k in declared if real[k]["query"]]
    # The stand-in answers as one cuBLAS release (tests/standin/cublas_status.h):
    # a toolkit of another release needs that file, and this test, looked at.
    versions = ["cublasLtGetVersion", "cublasLtGetCudartVersion"] + [
        f"{lib}GetProperty {p}" for lib in ("cublas", "cublasLt") for p in range(3)]
    assert [standin[v] for v in versions] == [real[v] for v in versions], (
        "the stand-in answers as another cuBLAS release than the toolkit's", versions,
        [standin[v] for v in versions], [real[v] for v in versions])
    assert sorted(standin) == sorted(real)
    differ = {k: (real[k], standin[k]) for k in real if real[k] != standin[k]}
    assert not differ, differ
