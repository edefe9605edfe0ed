#!/usr/bin/env bash
# scripts/setup.sh: install what building, testing and the demo need on a
# Debian 12 machine, once. `make test`, `make demo`, `make setup` and CI
# (.ci/run) all start here, so a fresh clone needs no other step.
#
#   - The CUDA 13 toolkit must already be at $CUDA (default /usr/local/cuda):
#     headers, ptxas and the real libcublasLt.so.13 (tests run against it).
#     It is not a Debian package; without it this stops with one message.
#   - Debian packages (PACKAGES below, the one list): those missing are
#     installed with apt-get when running as root (apt-get update only then);
#     otherwise the exact `sudo apt-get install ...` line is printed and this
#     exits 1.
#   - Python: the tests run on $PYTHON (the Makefile's default is Debian's
#     /usr/bin/python3, whose pytest comes from python3-pytest), never on
#     whichever python3 is first on PATH (pyenv, conda, a venv).
#
# When everything was in place, $BUILD/setup.stamp records it; later runs
# with the same script, toolkit and interpreter return at once. Delete the
# stamp (or pass --force) to check again.
#
# Environment: BUILD (build), CUDA (/usr/local/cuda), PYTHON (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Every Debian package any part of the build, the tests or the tools uses.
# Add to this list; nothing else installs packages.
PACKAGES=(
  gcc g++ make binutils # the library, unit tests, stand-ins
  libcmocka-dev         # unit tests
  clang-19              # device code -> PTX
  libclang-rt-19-dev    # clang's sanitizer and profile runtimes; libFuzzer (tests/fuzz)
  valgrind              # callgrind instruction counts (make bench); memcheck (make valgrind)
  strace                # system calls per call (make bench)
  python3 python3-pytest python3-venv # integration tests; venvs for packaging tests
  python3-pytest-xdist  # the long pytest steps run two tests at a time (PYTEST_JOBS)
  python3-pip           # installs into the packaging tests' venvs (pip --python)
  python3-matplotlib    # plots of logs and benchmarks
)

BUILD=${BUILD:-build}
CUDA=${CUDA:-/usr/local/cuda}
PYTHON=${PYTHON:-/usr/bin/python3}
STAMP=$BUILD/setup.stamp

force=0
case "${1:-}" in
  "") ;;
  --force) force=1 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup: unknown argument '$1'; expected --force or --help" >&2; exit 2 ;;
esac

# What the stamp vouches for: this script (so a longer list checks again),
# the toolkit and the interpreter it checked.
want_stamp="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1) CUDA=$CUDA PYTHON=$PYTHON"
if [ $force = 0 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ]; then
  exit 0
fi

# 1. The toolkit: every file the build and tests read from it.
toolkit_files=(include/cuda.h include/cublas_api.h include/cublasLt.h include/library_types.h
               bin/ptxas lib64/libcublas.so.13 lib64/libcublasLt.so.13)
absent=()
for f in "${toolkit_files[@]}"; do
  [ -e "$CUDA/$f" ] || absent+=("$f")
done
if [ ${#absent[@]} -gt 0 ]; then
  echo "setup: no CUDA 13 toolkit at $CUDA (missing ${absent[*]}); gemmshim builds and tests" \
       "against one: install the CUDA 13 toolkit there, or name its folder with CUDA=/path" >&2
  exit 1
fi

# 2. Debian packages.
missing=()
for p in "${PACKAGES[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: missing ${missing[*]}, and there is no apt-get here: install the equivalents" \
         "of these Debian 12 packages by hand" >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages; install them, then start again:" >&2
    echo "  sudo apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  # Waits for another apt or dpkg that holds the lock instead of failing.
  apt=(apt-get -q -o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0)
  "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}"
fi

# 3. The tests' interpreter.
for mod in pytest xdist; do
  if ! "$PYTHON" -c "import $mod" >/dev/null 2>&1; then
    if [ "$PYTHON" = /usr/bin/python3 ]; then
      echo "setup: /usr/bin/python3 cannot import $mod although python3-pytest and" \
           "python3-pytest-xdist are installed" >&2
    else
      echo "setup: PYTHON=$PYTHON cannot import $mod; the tests need it (leave PYTHON unset to use" \
           "Debian's /usr/bin/python3 with python3-pytest and python3-pytest-xdist)" >&2
    fi
    exit 1
  fi
done

mkdir -p "$BUILD"
echo "$want_stamp" > "$STAMP"
