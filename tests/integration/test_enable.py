"""gemmshim.enable(): the shim loaded into a running Python process with
RTLD_GLOBAL, as a notebook's first cell does, then a framework library
loaded with ctypes (RTLD_LOCAL, as Python imports an extension) whose
cuBLAS calls the shim must catch (dlopen(3): a library loaded later looks
symbols up in the global scope before its own dependencies). Loaded after
cuBLAS, enable() refuses with the reason. Over the cuBLAS 13 stand-in."""

import json
import subprocess
import sys

import pytest

import harness
from harness import CLIENT_DIR, ROOT, SHIM, read_log

FRAMEWORK = CLIENT_DIR / "cu13" / "libfakeframework.so"
LAUNCHER = harness.BUILD / "gemmshim"
PACKAGE_DIR = ROOT / "python"
BF16_CASE = ["--api=cublasGemmEx", "--type=bf16", "--shape=64x48x32", "--invalid=0"]

# A Python program: enable() as given, then the framework's suite.
PROGRAM = r"""
import ctypes, json, os, sys
sys.path.insert(0, {package!r})
import gemmshim
before = {before!r}
if before:
    ctypes.CDLL(before, mode=os.RTLD_LOCAL)   # cuBLAS loaded first: too late for the shim
try:
    got = gemmshim.enable(library={lib!r}, **json.loads({kwargs!r}))
    print("enabled", got)
except Exception as e:
    print("raised", type(e).__name__, str(e).replace("\n", " "))
    sys.exit(3)
fw = ctypes.CDLL({framework!r}, mode=os.RTLD_LOCAL)
args = [b"suite"] + [a.encode() for a in {suite!r}]
argv = (ctypes.c_char_p * len(args))(*args)
sys.stdout.flush()
sys.exit(fw.fakeframework_main(len(args), argv))
"""


def program(tmp_path, kwargs, before=""):
    text = PROGRAM.format(package=str(PACKAGE_DIR), before=before, lib=str(SHIM.resolve()),
                          kwargs=json.dumps(kwargs), framework=str(FRAMEWORK), suite=BF16_CASE)
    path = tmp_path / "prog.py"
    path.write_text(text)
    return [sys.executable, str(path)]


@pytest.fixture(scope="module")
def built(standin):
    harness.require_built([SHIM, LAUNCHER, FRAMEWORK])


def test_enable_before_the_framework_routes_its_calls(built, standin, tmp_path):
    log = tmp_path / "gs.jsonl"
    r = harness.run(program(tmp_path, {"mode": "ffma", "log": str(log), "gate": 0}), standin[13],
                    env={"STANDIN_CC": "6.1"})
    assert r.returncode == 0, r.describe()
    assert r.stdout.splitlines()[0] == f"enabled {SHIM.resolve()}", r.describe()
    calls = r.calls
    assert [c["case"] for c in calls] and all(c["ok"] == "1" and c["status"] == "0" for c in calls), r.describe()
    recs = read_log(log)
    assert len(recs) == len(calls), (recs, calls)
    for rec in recs:
        # GEMMSHIM_MODE=ffma forces the route (options table) but a GEMM
        # with k = 0 (the suite's beta-only case) has nothing to cast.
        route = "ffma" if rec["k"] else "native"
        assert (rec["api"], rec["decided"], rec["route"], rec["sm"]) == ("cublasGemmEx", "ffma", route, "6.1"), \
            rec["reason"]
        assert rec["reason"].startswith("GEMMSHIM_MODE=ffma"), rec
    assert sum(rec["route"] == "ffma" for rec in recs) >= 1


def test_enable_after_cublas_is_loaded_refuses(built, standin, tmp_path):
    log = tmp_path / "gs.jsonl"
    cublas = str(harness.STANDIN[13] / "libcublas.so.13")
    r = harness.run(program(tmp_path, {"mode": "ffma", "log": str(log)}, before=cublas), standin[13])
    assert r.returncode == 3, r.describe()
    assert r.stdout == (f"raised EnableError cuBLAS is already loaded ({cublas}), so the shim would catch none of its "
                        "calls; restart the process (the notebook's kernel) and call gemmshim.enable() before "
                        "`import torch` (or any library that loads CUDA), or start the program under the launcher: "
                        "gemmshim [options] -- python train.py\n"), r.describe()
    assert not log.exists()


@pytest.mark.parametrize("kwargs, want", [
    ({"mdoe": "fp8"}, "raised TypeError enable() got an option the shim does not have: 'mdoe' (GEMMSHIM_MDOE is not "
                      "a variable the shim reads (did you mean GEMMSHIM_MODE?); it is ignored)"),
    ({"mode": "fast"}, "raised ValueError GEMMSHIM_MODE='fast': expected auto, native, ffma, fp8 or fp16"),
    ({"fp8_history": 0}, "raised ValueError GEMMSHIM_FP8_HISTORY='0': expected a whole number from 1 to 4096"),
])
def test_bad_options_raise_before_anything_is_loaded(built, standin, tmp_path, kwargs, want):
    r = harness.run(program(tmp_path, kwargs), standin[13])
    assert (r.returncode, r.stdout) == (3, want + "\n"), r.describe()


def test_enable_twice(built, standin, tmp_path):
    code = (f"import sys; sys.path.insert(0, {str(PACKAGE_DIR)!r}); import gemmshim\n"
            f"lib = {str(SHIM.resolve())!r}\n"
            "print(gemmshim.enable(mode='ffma', library=lib) == lib)\n"
            "print(gemmshim.enable(mode='ffma', library=lib) == lib)\n"
            "try:\n    gemmshim.enable(mode='fp8', library=lib)\n"
            "except gemmshim.EnableError as e:\n    print(e)\n")
    r = harness.run([sys.executable, "-c", code], standin[13])
    assert r.returncode == 0, r.describe()
    assert r.stdout.splitlines() == ["True", "True",
                                     f"the shim is already loaded ({SHIM.resolve()}) with other settings; it reads "
                                     "them once, at load: restart the Python process (the notebook's kernel) and "
                                     "call enable() first"], r.describe()


def test_jupyter_kernel_spec(built, standin, tmp_path):
    # The launcher runs the package's Python: without a sanitizer runtime
    # preloaded (an uninstrumented interpreter under one crashes; a
    # sanitizer build's launcher links its own).
    bare = {"LD_PRELOAD": ""}
    r = harness.run([LAUNCHER, "jupyter", "install", "--prefix", str(tmp_path), "--name", "gs-test", "--mode", "fp8",
                     "--log", "gs-%p.jsonl"], standin[13], env=bare)
    assert r.returncode == 0, r.describe()
    spec_path = tmp_path / "share" / "jupyter" / "kernels" / "gs-test" / "kernel.json"
    assert r.stdout == f"gemmshim: kernel 'gs-test' installed in {spec_path.parent}\n", r.describe()
    spec = json.loads(spec_path.read_text())
    python = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                            env=r.env).stdout.strip()
    # Jupyter's kernel spec format: argv with {connection_file}, display_name, language.
    assert spec == {"argv": [str(LAUNCHER.resolve()), "--mode", "fp8", "--log", "gs-%p.jsonl", "--", python, "-m",
                             "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "Python 3 (gemmshim --mode fp8 --log gs-%p.jsonl)", "language": "python"}
    # Options are the launcher's, checked as before a run.
    r = harness.run([LAUNCHER, "jupyter", "install", "--prefix", str(tmp_path), "--mode", "fast"], standin[13], env=bare)
    assert r.returncode == 1 and "GEMMSHIM_MODE='fast': expected auto, native, ffma, fp8 or fp16" in r.stderr, r.describe()
