"""What the install and wheel tests share: running make, listing a tree,
and running the launcher's own test suite over an installed launcher."""
import os
import re
import subprocess
import sys
from pathlib import Path

from harness import BUILD, ROOT


def clean_env(**extra):
    """The environment without make's jobserver (a nested make must not
    join the outer one) and without variables that steer the shim."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "LD_PRELOAD") and not k.startswith("GSTEST_LAUNCHER")}
    env.update(extra)
    return env


def make(*args):
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), f"BUILD={BUILD}", *args],
                          env=clean_env(), capture_output=True, text=True)


def tree(root):
    """Every file and folder under root, relative, folders ending in '/'."""
    root = Path(root)
    return sorted(str(p.relative_to(root)) + ("/" if p.is_dir() else "") for p in root.rglob("*"))


def run_launcher_suite(launcher, library, package):
    """tests/launcher over an installed launcher; returns its summary line."""
    env = clean_env(GSTEST_LAUNCHER=str(launcher), GSTEST_LAUNCHER_LIB=str(library),
                    GSTEST_PYTHON_PACKAGE=str(package))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "launcher")],
                       env=env, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed in [0-9.]+s", last), r.stdout
    return last
