"""scripts/setup.sh, the one set-up that `make test`, `make demo` and CI
run: its decisions, with dpkg-query, apt-get and id replaced by recorders
on PATH (nothing is installed; the real toolkit and interpreter are used
where a case needs them present)."""

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest

from harness import ROOT

SETUP = ROOT / "scripts" / "setup.sh"
TOOLKIT = Path("/usr/local/cuda")
DEBIAN_PYTHON = "/usr/bin/python3"
TOOLKIT_FILES = ("include/cuda.h include/cublas_api.h include/cublasLt.h include/library_types.h "
                 "bin/ptxas lib64/libcublas.so.13 lib64/libcublasLt.so.13")

# dpkg-query prints the status and exits 0 for an installed package, exits
# 1 for an unknown one (dpkg-query(1)). FAKE_MISSING names the absent ones.
FAKES = {
    "dpkg-query": """#!/bin/sh
for p; do :; done
echo "$p" >> "$FAKE_LOG.dpkg"
case " $FAKE_MISSING " in *" $p "*) echo "dpkg-query: no packages found matching $p" >&2; exit 1 ;; esac
printf 'install ok installed'
""",
    "apt-get": """#!/bin/sh
echo "$*" >> "$FAKE_LOG.apt"
""",
    "id": """#!/bin/sh
echo "${FAKE_UID:-0}"
""",
    "python-without-pytest": """#!/bin/sh
exit 1
""",
    # Imports pytest, not xdist (`-c "import xdist"` is its last argument).
    "python-without-xdist": """#!/bin/sh
for a; do :; done
[ "$a" = "import pytest" ]
""",
}


@pytest.fixture
def fake(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in FAKES.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    build = tmp_path / "build"

    def run(*args, missing="", uid=0, cuda=TOOLKIT, python=DEBIAN_PYTHON):
        env = {k: v for k, v in os.environ.items() if k not in ("BUILD", "CUDA", "PYTHON")}
        env.update(PATH=f"{bindir}:{os.environ['PATH']}", FAKE_LOG=str(tmp_path / "log"), FAKE_MISSING=missing,
                   FAKE_UID=str(uid), BUILD=str(build), CUDA=str(cuda), PYTHON=str(python))
        for suffix in ("dpkg", "apt"):
            (tmp_path / f"log.{suffix}").unlink(missing_ok=True)
        r = subprocess.run([str(SETUP), *args], env=env, capture_output=True, text=True, timeout=60)

        def logged(suffix):
            p = tmp_path / f"log.{suffix}"
            return p.read_text().splitlines() if p.exists() else []

        return r, logged("dpkg"), logged("apt")

    run.stamp = build / "setup.stamp"
    run.bindir = bindir
    return run


def documented_packages():
    """The packages docs/setup-and-tests.md ("Set-up") says the set-up installs."""
    text = (ROOT / "docs" / "setup-and-tests.md").read_text()
    m = re.search(r"installs the Debian packages that are missing\n\(`([^`]*)`\)", text)
    assert m, "docs/setup-and-tests.md: the set-up's package list is not where its Set-up section names it"
    return m[1].split()


def stamp_text(cuda=TOOLKIT, python=DEBIAN_PYTHON):
    return f"{hashlib.sha256(SETUP.read_bytes()).hexdigest()} CUDA={cuda} PYTHON={python}\n"


@pytest.fixture(scope="module", autouse=True)
def toolkit_present():
    missing = [f for f in TOOLKIT_FILES.split() if not (TOOLKIT / f).exists()]
    assert not missing, f"the CUDA 13 toolkit the build uses lacks {missing}"


def test_everything_present(fake):
    r, queried, apt = fake()
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r
    # Every package is checked once, and docs/setup-and-tests.md names the same ones.
    assert len(set(queried)) == len(queried)
    assert sorted(queried) == sorted(documented_packages())
    assert apt == []
    assert fake.stamp.read_text() == stamp_text()


def test_stamp_skips_the_checks(fake):
    assert fake()[0].returncode == 0
    r, queried, apt = fake(missing="clang-19")
    assert (r.returncode, r.stdout, r.stderr, queried, apt) == (0, "", "", [], [])
    # --force checks again: as root, apt-get update, then install only what is missing.
    r, queried, apt = fake("--force", missing="clang-19")
    assert r.returncode == 0, r
    assert r.stdout == "setup: installing clang-19\n"
    assert apt == ["-q -o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0 update -qq",
                   "-q -o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0 install -y -qq --no-install-recommends clang-19"]


def test_stamp_is_per_interpreter(fake):
    assert fake()[0].returncode == 0
    # Another interpreter: checked again (and refused: it lacks pytest).
    r, queried, _ = fake(python=fake.bindir / "python-without-pytest")
    assert r.returncode == 1 and sorted(queried) == sorted(documented_packages())


def test_not_root_prints_the_command(fake):
    r, _, apt = fake(missing="clang-19 valgrind", uid=1000)
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr == ("setup: missing Debian packages; install them, then start again:\n"
                        "  sudo apt-get install --no-install-recommends clang-19 valgrind\n")
    assert apt == []
    assert not fake.stamp.exists()


def test_no_toolkit(fake, tmp_path):
    empty = tmp_path / "no-cuda"
    empty.mkdir()
    r, queried, apt = fake(cuda=empty, missing="clang-19")
    assert r.returncode == 1
    assert r.stderr == (f"setup: no CUDA 13 toolkit at {empty} (missing {TOOLKIT_FILES}); gemmshim builds and tests "
                        "against one: install the CUDA 13 toolkit there, or name its folder with CUDA=/path\n")
    # Nothing installed before the one thing that cannot be installed here.
    assert (queried, apt) == ([], [])
    assert not fake.stamp.exists()


# The integration and lifecycle steps run under pytest-xdist (-n): both
# modules are checked, each named in the message.
@pytest.mark.parametrize("module", ["pytest", "xdist"])
def test_python_without_a_test_module(fake, module):
    python = fake.bindir / f"python-without-{module}"
    r, _, apt = fake(python=python)
    assert r.returncode == 1
    assert r.stderr == (f"setup: PYTHON={python} cannot import {module}; the tests need it (leave PYTHON unset to use "
                        "Debian's /usr/bin/python3 with python3-pytest and python3-pytest-xdist)\n")
    assert not fake.stamp.exists()


def test_bad_argument(fake):
    r, queried, _ = fake("--frce")
    assert (r.returncode, r.stderr, queried) == (2, "setup: unknown argument '--frce'; expected --force or --help\n", [])
