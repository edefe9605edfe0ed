"""make wheel: the wheel's contents and tag (confirmed by auditwheel), and
the installed wheel: `pip install dist/gemmshim-*.whl` into a fresh venv,
then the launcher's tests through its `gemmshim` console script, `gemmshim
report` in the venv's interpreter, and a clean `pip uninstall`."""
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness import BUILD, ROOT, SHIM
from pkgtest import clean_env, run_launcher_suite

WHEEL_DIR = Path(os.environ.get("GSTEST_WHEEL_DIR", ROOT / "dist"))
WHEEL_DIR = WHEEL_DIR if WHEEL_DIR.is_absolute() else ROOT / WHEEL_DIR
AUDITWHEEL = Path(os.environ.get("GSTEST_AUDITWHEEL", BUILD / "tools-venv" / "bin" / "auditwheel"))
AUDITWHEEL = AUDITWHEEL if AUDITWHEEL.is_absolute() else ROOT / AUDITWHEEL
VERSION = re.search(r'gemmshim_version\[\] = "gemmshim ([^"]+)"', (ROOT / "shim" / "resolve.c").read_text()).group(1)


@pytest.fixture(scope="module")
def wheel():
    found = sorted(WHEEL_DIR.glob("gemmshim-*.whl"))
    assert len(found) == 1, f"expected one wheel in {WHEEL_DIR} (run `make wheel`): {found}"
    return found[0]


def platform_tag(wheel):
    m = re.fullmatch(rf"gemmshim-{re.escape(VERSION)}-py3-none-(manylinux_\d+_\d+_x86_64)\.whl", wheel.name)
    assert m, wheel.name
    return m.group(1)


def test_wheel_contents(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = sorted(z.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}
        entry_points = z.read(f"gemmshim-{VERSION}.dist-info/entry_points.txt").decode()
        wheel_meta = z.read(f"gemmshim-{VERSION}.dist-info/WHEEL").decode()
        native_lib = z.read("gemmshim/_native/libgemmshim.so")
    pkg = ROOT / "python" / "gemmshim"
    package = sorted(f"gemmshim/{p.relative_to(pkg).as_posix()}" for p in pkg.rglob("*.py"))
    assert "gemmshim/report/__init__.py" in package
    dist = [f"gemmshim-{VERSION}.dist-info/{n}" for n in ("METADATA", "RECORD", "WHEEL", "entry_points.txt")]
    assert names == sorted([*package, "gemmshim/_native/gemmshim",
                            "gemmshim/_native/libgemmshim.so", *dist])
    assert modes["gemmshim/_native/gemmshim"] == 0o755 and modes["gemmshim/cli.py"] == 0o644
    assert entry_points == "[console_scripts]\ngemmshim = gemmshim.cli:main\n"
    assert f"Tag: py3-none-{platform_tag(wheel)}\n" in wheel_meta and "Root-Is-Purelib: false\n" in wheel_meta
    assert native_lib == SHIM.read_bytes()


def test_auditwheel_confirms_the_platform_tag(wheel):
    """The tag the wheel claims is the one auditwheel finds it consistent
    with, and the only system library it references is libc."""
    r = subprocess.run([AUDITWHEEL, "show", wheel], capture_output=True, text=True, env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    text = " ".join(r.stdout.split())
    assert f'is consistent with the following platform tag: "{platform_tag(wheel)}"' in text, r.stdout
    assert "system-provided shared libraries: libc.so.6 with versions" in text, r.stdout
    m = re.search(r"system-provided shared libraries: (.*?) This constrains", text)
    assert m and re.findall(r"(\S+\.so\.\d+) with versions", m.group(1)) == ["libc.so.6"], r.stdout


def test_pip_install_then_the_console_script(wheel, tmp_path):
    venv = BUILD / "wheel-test" / "venv"
    subprocess.run(["rm", "-rf", str(venv)], check=True)
    # A venv without its own pip (fast to make); this interpreter's pip
    # installs into it (pip --python, pip 22.3 and later).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(py), "--disable-pip-version-check"]
    r = subprocess.run([*pip, "install", "-q", "--no-index", str(wheel)], capture_output=True, text=True,
                       env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    site = Path(subprocess.run([py, "-c", "import gemmshim, os; print(os.path.dirname(gemmshim.__file__))"],
                               capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip())
    assert site == venv.resolve() / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
        "site-packages" / "gemmshim"
    lib = site / "_native" / "libgemmshim.so"
    out = subprocess.run([py, "-c", "import gemmshim; print(gemmshim.library_path())"], capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.stdout == f"{lib}\n"
    script = venv / "bin" / "gemmshim"
    out = subprocess.run([script, "--print-lib"], capture_output=True, text=True, env=clean_env())
    assert (out.returncode, out.stdout, out.stderr) == (0, f"{lib}\n", "")

    # The whole launcher suite through the console script (Python execs the
    # C launcher, which execs the command: one pid throughout).
    run_launcher_suite(script, lib, site)

    r = subprocess.run([*pip, "uninstall", "-y", "-q", "gemmshim"], capture_output=True, text=True, env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    left = [p.name for p in site.parent.iterdir() if p.name.startswith("gemmshim")]
    assert left == [] and not script.exists(), left
