"""What libgemmshim.so itself is: a library whose only run-time dependency
is libc (cuBLAS and the driver are found at run time), exporting exactly the
hooked entry points, the handle hooks, dlsym, the exec family and the
version marker."""

import re
import subprocess

from harness import PRELOAD_PREFIX

EXPORTS = {
    "cublasGemmEx", "cublasGemmEx_64", "cublasGemmStridedBatchedEx", "cublasGemmStridedBatchedEx_64",
    "cublasGemmBatchedEx", "cublasGemmBatchedEx_64", "cublasLtMatmul", "cublasCreate_v2", "cublasDestroy_v2",
    "dlsym", "gemmshim_version",
    # exec.c: the routing log is flushed before the process image is replaced.
    "execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve", "execveat",
}
# Since glibc 2.34 these are empty placeholders of libc.so.6, kept for old links.
# ld-linux-x86-64.so.2 is not among them: it only becomes NEEDED through
# __tls_get_addr, i.e. a __thread variable without the initial-exec model,
# which a preloaded library never needs.
LIBC_EMPTY_LIBS = {"libdl.so.2", "libpthread.so.0"}


def readelf(*args):
    return subprocess.run(["readelf", *args], check=True, capture_output=True, text=True).stdout


def glibc_version():
    out = subprocess.run(["ldd", "--version"], check=True, capture_output=True, text=True).stdout
    return tuple(int(x) for x in re.search(r"(\d+)\.(\d+)\s*$", out.splitlines()[0]).groups())


def test_needs_nothing_but_libc(shim):
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf("-d", str(shim))))
    assert "libc.so.6" in needed
    extra = needed - {"libc.so.6"}
    if PRELOAD_PREFIX:
        # A sanitizer build links its runtime too.
        extra = {n for n in extra if not re.match(r"lib(asan|ubsan|tsan)\.so", n)}
    if extra & LIBC_EMPTY_LIBS:
        assert glibc_version() >= (2, 34), needed
    assert extra <= LIBC_EMPTY_LIBS, needed
    assert not any("cuda" in n or "cublas" in n for n in needed), needed


def test_exports_exactly_the_hooks(shim):
    exported = set()
    for line in readelf("--dyn-syms", "-W", str(shim)).splitlines():
        w = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(w) >= 8 and w[4] in ("GLOBAL", "WEAK") and w[6] != "UND":
            exported.add(w[7].split("@")[0])
    assert exported == EXPORTS
