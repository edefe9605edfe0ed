"""docs/environment.md is generated from the shim's options table
(scripts/gen_env_doc.py reads shim/options.c): it must be exactly what the
script writes now, and name every GEMMSHIM_* variable the shim reads."""

import importlib.util
import re
import subprocess
import sys

from harness import ROOT

SCRIPT = ROOT / "scripts" / "gen_env_doc.py"
DOC = ROOT / "docs" / "environment.md"


def generator():
    spec = importlib.util.spec_from_file_location("gen_env_doc", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_environment_doc_is_what_the_script_writes():
    want = generator().render((ROOT / "shim" / "options.c").read_text())
    assert DOC.read_text() == want, ("docs/environment.md differs from what scripts/gen_env_doc.py writes from "
                                     "shim/options.c: run python3 scripts/gen_env_doc.py and commit the result")
    # The script's own check agrees (what a contributor runs).
    r = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, ""), r.stdout + r.stderr


def test_every_variable_the_shim_reads_has_a_row():
    # The names the shim looks up with getenv, anywhere in its sources.
    read = set()
    for src in [*(ROOT / "shim").rglob("*.c"), *(ROOT / "policy").rglob("*.c")]:
        read |= set(re.findall(r'getenv\("(GEMMSHIM_[A-Z0-9_]+)"\)', src.read_text()))
    rows = set(re.findall(r"^\| `(GEMMSHIM_[A-Z0-9_]+)` \|", DOC.read_text(), re.M))
    table = set(re.findall(r'^\s*\{"(GEMMSHIM_[A-Z0-9_]+)"', (ROOT / "shim" / "options.c").read_text(), re.M))
    assert table <= rows and read <= rows, (sorted(table - rows), sorted(read - rows))


def test_a_changed_table_changes_the_doc():
    # The text really comes from the table: a meaning edited in options.c
    # shows in the output, so a stale docs/environment.md fails above.
    gen = generator()
    text = (ROOT / "shim" / "options.c").read_text()
    edited = text.replace('"amax history length per call site and operand"', '"amax history, edited"')
    assert edited != text
    out = gen.render(edited)
    assert "| `GEMMSHIM_FP8_HISTORY` | `--fp8-history X` | `16` | whole number, 1 to 4,096 | amax history, edited |" \
        in out.splitlines()
