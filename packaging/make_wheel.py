#!/usr/bin/env python3
"""Build the gemmshim wheel: the Python package (python/gemmshim), the
prebuilt launcher and libgemmshim.so in gemmshim/_native/, and the
`gemmshim` console script. Standard library only, so `make wheel` needs no
build backend from PyPI.

    make_wheel.py --launcher build/gemmshim --library build/libgemmshim.so --out dist

The wheel holds no Python extension, so its tags are py3-none-<platform>.
The platform is the manylinux tag of the newest glibc symbol version the
two binaries use (PEP 600: manylinux_<glibc major>_<minor>_<arch>; neither
links anything but libc); `auditwheel show` confirms it in the tests.
Prints the wheel's path.
"""
import argparse
import base64
import hashlib
import os
import platform
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "gemmshim"


def version():
    """The shim's own version string (shim/resolve.c: "gemmshim X.Y")."""
    text = (ROOT / "shim" / "resolve.c").read_text()
    m = re.search(r'gemmshim_version\[\] = "gemmshim ([0-9][0-9A-Za-z.]*)"', text)
    if not m:
        sys.exit("make_wheel: no version in shim/resolve.c; expected gemmshim_version[] = \"gemmshim X.Y\"")
    return m.group(1)


def glibc_needed(paths):
    """(major, minor) of the newest GLIBC_x.y symbol version any of paths needs."""
    newest = (2, 17)  # manylinux2014's floor: nothing older is worth claiming
    for p in paths:
        out = subprocess.run(["objdump", "-T", str(p)], capture_output=True, text=True, check=True).stdout
        for major, minor in re.findall(r"\bGLIBC_(\d+)\.(\d+)", out):
            newest = max(newest, (int(major), int(minor)))
    return newest


def record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launcher", required=True, type=Path)
    ap.add_argument("--library", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)

    ver = version()
    major, minor = glibc_needed([args.launcher, args.library])
    plat = f"manylinux_{major}_{minor}_{platform.machine()}"
    tag = f"py3-none-{plat}"
    dist_info = f"{NAME}-{ver}.dist-info"

    # (name in the wheel, bytes, executable)
    files = []
    pkg = ROOT / "python" / NAME
    for src in sorted(pkg.rglob("*.py")):  # the package and its subpackages (report/)
        files.append((f"{NAME}/{src.relative_to(pkg).as_posix()}", src.read_bytes(), False))
    files.append((f"{NAME}/_native/gemmshim", args.launcher.read_bytes(), True))
    files.append((f"{NAME}/_native/libgemmshim.so", args.library.read_bytes(), True))

    readme = (ROOT / "README.md").read_text()
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {ver}\n"
        "Summary: Route cuBLAS GEMMs (bf16 on old GPUs through fp32, fp8 with delayed scaling) under LD_PRELOAD\n"
        "Requires-Python: >=3.8\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme
    )
    files.append((f"{dist_info}/METADATA", metadata.encode(), False))
    files.append((f"{dist_info}/WHEEL", (
        "Wheel-Version: 1.0\n"
        "Generator: gemmshim packaging/make_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n").encode(), False))
    files.append((f"{dist_info}/entry_points.txt", b"[console_scripts]\ngemmshim = gemmshim.cli:main\n", False))

    args.out.mkdir(parents=True, exist_ok=True)
    wheel = args.out / f"{NAME}-{ver}-{tag}.whl"
    tmp = wheel.with_suffix(".tmp")
    records = []
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for arcname, data, executable in files:
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            mode = 0o755 if executable else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            records.append(record_line(arcname, data))
        records.append(f"{dist_info}/RECORD,,")
        info = zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        z.writestr(info, "\n".join(records) + "\n")
    os.replace(tmp, wheel)
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
