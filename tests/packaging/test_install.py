"""make install PREFIX=... / make uninstall: what goes where, that the
installed launcher passes the launcher's tests over the stand-in, and that
uninstall leaves the prefix as it found it."""
import filecmp
import stat
import subprocess

from harness import BUILD, ROOT, SHIM
from pkgtest import make, run_launcher_suite, tree

# The package's modules, its subpackage report/ included (paths under gemmshim/).
_PKG = ROOT / "python" / "gemmshim"
PACKAGE = sorted(p.relative_to(_PKG).as_posix() for p in _PKG.rglob("*.py"))
DOCS = sorted(["README.md", *(p.name for p in (ROOT / "docs").glob("*.md"))])


def expected_tree():
    files = ["bin/", "bin/gemmshim", "lib/", "lib/gemmshim/", "lib/gemmshim/install-manifest.txt",
             "lib/gemmshim/libgemmshim.so", "lib/gemmshim/python/", "lib/gemmshim/python/gemmshim/",
             "lib/gemmshim/python/gemmshim/report/",
             *(f"lib/gemmshim/python/gemmshim/{n}" for n in PACKAGE),
             "share/", "share/doc/", "share/doc/gemmshim/", *(f"share/doc/gemmshim/{n}" for n in DOCS)]
    return sorted(files)


def test_install_run_uninstall(tmp_path):
    prefix = tmp_path / "opt" / "gemmshim"  # neither folder exists yet
    r = make("install", f"PREFIX={prefix}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == (f"gemmshim: installed under {prefix} (launcher {prefix}/bin/gemmshim, "
                                         f"library {prefix}/lib/gemmshim/libgemmshim.so)")
    assert tree(prefix) == expected_tree()
    assert filecmp.cmp(prefix / "bin" / "gemmshim", BUILD / "gemmshim", shallow=False)
    assert filecmp.cmp(prefix / "lib" / "gemmshim" / "libgemmshim.so", SHIM, shallow=False)
    assert stat.S_IMODE((prefix / "bin" / "gemmshim").stat().st_mode) == 0o755
    assert stat.S_IMODE((prefix / "share/doc/gemmshim/README.md").stat().st_mode) == 0o644

    lib = prefix / "lib" / "gemmshim" / "libgemmshim.so"
    out = subprocess.run([prefix / "bin" / "gemmshim", "--print-lib"], capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, f"{lib}\n")
    run_launcher_suite(prefix / "bin" / "gemmshim", lib, prefix / "lib/gemmshim/python/gemmshim")

    # Installing again over it changes nothing in the layout.
    assert make("install", f"PREFIX={prefix}").returncode == 0
    assert tree(prefix) == expected_tree()

    r = make("uninstall", f"PREFIX={prefix}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == f"gemmshim: uninstalled from {prefix}"
    assert tree(tmp_path) == []  # the folders install made went too

    r = make("uninstall", f"PREFIX={prefix}")
    assert r.returncode != 0
    assert (f"gemmshim: nothing to uninstall: no {prefix}/lib/gemmshim/install-manifest.txt "
            "(installed with a different PREFIX or DESTDIR?)") in r.stderr


def test_uninstall_keeps_what_install_did_not_create(tmp_path):
    prefix = tmp_path / "usr"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "other-tool").write_text("#!/bin/sh\n")
    (prefix / "share" / "doc").mkdir(parents=True)
    assert make("install", f"PREFIX={prefix}").returncode == 0
    assert make("uninstall", f"PREFIX={prefix}").returncode == 0
    assert tree(tmp_path) == ["usr/", "usr/bin/", "usr/bin/other-tool", "usr/share/", "usr/share/doc/"]


def test_destdir_staging(tmp_path):
    """A packager's DESTDIR: files land under DESTDIR/PREFIX, and the staged
    launcher finds the staged library (it looks relative to itself)."""
    stage = tmp_path / "stage"
    assert make("install", "PREFIX=/opt/gs", f"DESTDIR={stage}").returncode == 0
    assert tree(stage / "opt" / "gs") == expected_tree()
    out = subprocess.run([stage / "opt/gs/bin/gemmshim", "--print-lib"], capture_output=True, text=True)
    assert out.stdout == f"{stage}/opt/gs/lib/gemmshim/libgemmshim.so\n"
    assert make("uninstall", "PREFIX=/opt/gs", f"DESTDIR={stage}").returncode == 0
    assert tree(tmp_path) == []
