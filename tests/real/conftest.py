"""tests/real shares the integration harness (tests/integration/harness.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

import harness  # noqa: E402


@pytest.fixture(scope="session")
def real_cublas():
    """The toolkit's cuBLAS 13, on a machine without a CUDA driver: what
    these tests are about. With a driver installed, cublasCreate would work
    and every expectation below would be wrong, so say so plainly."""
    d = harness.REAL_CUBLAS
    missing = [str(d / n) for n in ("libcublas.so.13", "libcublasLt.so.13") if not (d / n).exists()]
    assert not missing, f"the CUDA 13 toolkit's cuBLAS is missing: {missing} (GSTEST_REAL_CUBLAS_DIR)"
    # Asked in a child with the clients' library path, not in this process,
    # whose LD_LIBRARY_PATH may point at the stand-in.
    probe = subprocess.run(
        [sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"],
        env={"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": str(d)},
        capture_output=True,
    )
    assert probe.returncode != 0, (
        "libcuda.so.1 is loadable on this machine; tests/real expects a machine without a driver")
    harness.require_built([harness.CLIENT_DIR / n for n in (
        "client_linked_cu13", "cu13/libfakeframework.so", "client_framework", "client_xla", "dlsym_probe")])
    harness.require_built([harness.SHIM])
    return d
