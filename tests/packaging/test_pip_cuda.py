"""Building without the CUDA toolkit, the way a PyTorch user can: the
headers and ptxas come from PyPI's NVIDIA packages in a venv that holds
nothing else, the kernels from Debian's clang-19. For CUDA 12 and 13:
`make CUDA=/nonexistent CUDA_FROM_PIP=<venv python>` builds the library
and the launcher and passes the PTX check with pip's ptxas; the library
needs only libc and exports what the toolkit build exports; and the
launcher's tests pass over what it built. The packages' cuBLAS libraries
also answer the stand-in's attribute tables without a GPU.

Downloads and venvs stay under $(BUILD)/pip-cuda: a rerun reuses them."""
import json
import re
import subprocess
import sys

import pytest

from harness import BUILD, ROOT, SHIM, STANDIN, run
from pkgtest import clean_env, make, run_launcher_suite

# The packages, pinned to the versions whose contents were read (see
# packaging/pip_cuda.py for which file each ships).
PACKAGES = {
    "12": ["nvidia-cuda-runtime-cu12==12.9.79", "nvidia-cublas-cu12==12.9.3.13", "nvidia-cuda-nvcc-cu12==12.9.86"],
    "13": ["nvidia-cuda-runtime==13.5.37", "nvidia-cublas==13.10.0.20", "nvidia-cuda-nvcc==13.5.37"],
}
# The lowest GPU target each ptxas assembles (REFERENCE facts: ptxas 12.9
# assembles sm_61 PTX to sm_61 SASS; ptxas 13 targets sm_75 and up).
LOWEST_SM = {"12": "sm_61", "13": "sm_75"}
HOME = BUILD / "pip-cuda"


def pip(*args, python=sys.executable):
    return subprocess.run([python, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                          text=True, env=clean_env())


def venv_with_only(version):
    """A venv holding exactly PACKAGES[version]; made once."""
    wheels, venv = HOME / f"wheels-cu{version}", HOME / f"venv-cu{version}"
    stamp = venv / "gemmshim-packages.txt"
    want = "\n".join(PACKAGES[version]) + "\n"
    if stamp.is_file() and stamp.read_text() == want:
        return venv
    if not (wheels / "complete.txt").is_file() or (wheels / "complete.txt").read_text() != want:
        subprocess.run(["rm", "-rf", str(wheels)], check=True)
        r = pip("download", "-q", "--no-deps", "-d", str(wheels), *PACKAGES[version])
        assert r.returncode == 0, "pip download (needs PyPI):\n" + r.stdout + r.stderr
        (wheels / "complete.txt").write_text(want)
    subprocess.run(["rm", "-rf", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    r = pip("--python", str(venv / "bin" / "python"), "install", "-q", "--no-index", "--no-deps",
            *map(str, sorted(wheels.glob("*.whl"))))
    assert r.returncode == 0, r.stdout + r.stderr
    stamp.write_text(want)
    return venv


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


@pytest.mark.parametrize("version", ["12", "13"])
def test_build_from_pip_headers(version):
    venv = venv_with_only(version)
    py = venv / "bin" / "python"
    listed = json.loads(pip("--python", str(py), "list", "--format=json").stdout)
    assert sorted(f"{p['name']}=={p['version']}" for p in listed) == sorted(PACKAGES[version])

    build = HOME / f"build-cu{version}"
    # The PTX check on the lowest target this ptxas reaches and on Hopper
    # (the full check runs with the toolkit's ptxas in its own step), at
    # -O0 for both: whether ptxas takes the PTX does not depend on the level
    # (kernels.mk), and -O3 nearly doubles the time of the quantize files.
    archs = f"{LOWEST_SM[version]} sm_90"
    r = make("-j2", f"BUILD={build}", "CUDA=/nonexistent", f"CUDA_FROM_PIP={py}", "all", "kernels-ptx-check",
             f"KERNELS_PTX_CHECK_ARCHS={archs}", "KERNELS_PTX_CHECK_O3=")
    assert r.returncode == 0, r.stdout + r.stderr
    # Every compile saw pip's headers and nothing of a toolkit.
    site = venv.resolve() / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    want_dirs = ([site / "nvidia/cuda_runtime/include", site / "nvidia/cublas/include"] if version == "12"
                 else [site / "nvidia/cu13/include"])
    compiles = [l for l in r.stdout.splitlines() if " -c shim/options.c " in l]
    if compiles:  # a rerun compiles nothing
        assert all(f"-isystem {d}" in compiles[0] for d in want_dirs), compiles[0]
    assert "/usr/local/cuda" not in r.stdout
    ptxas = f"{site}/nvidia/cuda_nvcc/bin/ptxas" if version == "12" else f"{site}/nvidia/cu13/bin/ptxas"
    check = [l for l in r.stdout.splitlines() if l.startswith("kernels-ptx-check: ")]
    # One line per kernel file; each is assembled for the asked targets at
    # or above its own .target.
    kernels = sorted(p.stem for p in (ROOT / "kernels").glob("*.cu"))
    assert [re.search(r"/kernels/(\w+)\.ptx ", l).group(1) for l in check] == kernels, r.stdout
    for line in check:
        target = re.search(r"\.target (sm_\d+)\)", line).group(1)
        want = " ".join(a for a in archs.split() if int(a[3:]) >= int(target[3:]))
        assert line.endswith(f") assembles for {want}"), line
    r2 = make(f"BUILD={build}", "CUDA=/nonexistent", f"CUDA_FROM_PIP={py}", "-pn")
    assert f"PTXAS := {ptxas}" in r2.stdout or f"PTXAS = {ptxas}" in r2.stdout, "PTXAS not from pip"

    lib = build / "libgemmshim.so"
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", needed) == ["libc.so.6"]
    assert exported(lib) == exported(SHIM)
    run_launcher_suite(build / "gemmshim", lib, ROOT / "python" / "gemmshim")


# cuBLAS 13.10's grouped GEMM attributes, which the stand-in does not
# model: the layout's device arrays of rows, columns and leading dimensions
# and their integer widths (cublasLt.h's CUBLASLT_GROUPED_MATRIX_LAYOUT_*,
# 9 to 13), and the preference's average sizes (CUBLASLT_MATMUL_PREF_GROUPED_*,
# 13 to 15). A layout holding them outgrows the 64-byte
# cublasLtMatrixLayoutOpaque_t of the 13.1 headers the stand-in is built
# with (13.10's is 112 bytes), and no route reads them: the GROUPED batch
# mode they serve runs native (shim/decode.c).
UNMODELLED = {"12": set(), "13": {*(f"layout attribute {i}" for i in range(9, 14)),
                                   *(f"pref attribute {i}" for i in range(13, 16))}}


@pytest.mark.parametrize("version", ["12", "13"])
def test_standin_tables_are_the_wheels(version):
    """The stand-in's cuBLASLt tables, answering as the release PACKAGES
    pins (STANDIN_CUBLASLT_VERSION), against that release's own libraries,
    which answer without a GPU: every attribute id up to 15 past the
    largest its cublasLt.h declares for descriptors, layouts and
    preferences (size, default, wrong sizes, NULL buffers, values read
    back), creation, status names and strings, properties and versions
    (tests/real/lt_tables_probe.py; tests/real/test_real_tables.py does the
    same against the toolkit's 13.1). Only UNMODELLED may differ, and only
    as ids the stand-in refuses."""
    venv = venv_with_only(version)
    site = venv.resolve() / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    real = site / ("nvidia/cublas" if version == "12" else "nvidia/cu13")
    blas = next(p for p in PACKAGES[version] if p.startswith("nvidia-cublas"))
    major, minor, patch = (int(x) for x in blas.split("==")[1].split(".")[:3])
    env = {"STANDIN_CUBLASLT_VERSION": str(major * 10000 + minor * 100 + patch)}
    probe = ROOT / "tests" / "real" / "lt_tables_probe.py"
    got = {}
    for who, libdir, extra in (("real", real / "lib", {}), ("standin", STANDIN[int(version)], env)):
        r = run([sys.executable, probe, libdir, real / "include" / "cublasLt.h"], libdir, env=extra, timeout=120)
        assert r.returncode == 0, r.describe()
        got[who] = json.loads(r.stdout)
    assert len(got["real"]) > 200 and sorted(got["real"]) == sorted(got["standin"])
    differ = {k for k in got["real"] if got["real"][k] != got["standin"][k]}
    assert differ == UNMODELLED[version], {k: (got["real"][k], got["standin"][k]) for k in differ ^ UNMODELLED[version]}
    for k in differ:
        assert got["real"][k]["query"] == 0 and got["standin"][k] == {"query": 7}, (k, got["real"][k], got["standin"][k])


def test_missing_packages_are_named():
    """A venv without the NVIDIA packages: make stops and says what to install."""
    venv = HOME / "venv-empty"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    r = make(f"BUILD={HOME / 'build-empty'}", "CUDA=/nonexistent", f"CUDA_FROM_PIP={venv / 'bin' / 'python'}", "all")
    assert r.returncode != 0
    assert (f"pip_cuda: cuda.h, library_types.h, cublas_api.h, cublasLt.h not found in {venv} for CUDA 12; expected "
            "from nvidia-cublas-cu12 and nvidia-cuda-runtime-cu12: python -m pip install nvidia-cublas-cu12 "
            "nvidia-cuda-runtime-cu12") in r.stderr, r.stderr
    assert "no CUDA headers found (see the line above)" in r.stderr
