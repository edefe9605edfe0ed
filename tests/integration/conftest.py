"""Fixtures shared by the integration tests. The helpers themselves live in
harness.py so that tests/real can import them too."""

import pytest

import harness


@pytest.fixture(scope="session")
def clients():
    """The client programs, built."""
    d = harness.CLIENT_DIR
    harness.require_built(
        [
            d / "client_linked_cu12",
            d / "client_linked_cu13",
            d / "cu12" / "libfakeframework.so",
            d / "cu13" / "libfakeframework.so",
            d / "client_framework",
            d / "client_xla",
            d / "dlsym_probe",
        ]
    )
    return d


@pytest.fixture(scope="session")
def standin(clients):
    """cuBLAS major -> the stand-in's library folder (libcuda, libcublas,
    libcublasLt of that soname)."""
    harness.require_built(
        [harness.STANDIN[v] / name for v in harness.CUDA_MAJORS
         for name in ("libcuda.so.1", f"libcublas.so.{v}", f"libcublasLt.so.{v}")]
    )
    return harness.STANDIN


@pytest.fixture(scope="session")
def shim(standin):
    harness.require_built([harness.SHIM])
    return harness.SHIM
