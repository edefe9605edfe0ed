"""The gemmshim launcher: options become the shim's variables, the shim's
own parser checks them (and the policy file) before anything runs, the
command is exec'ed under LD_PRELOAD with its own pid, exit status and
signals, ranked children keep their logs apart through %r, and `policy
check|explain` agree with the routing log.

The launcher under test is build/gemmshim unless GSTEST_LAUNCHER
names another (an installed copy, the wheel's console script); the library
it must preload is GSTEST_LAUNCHER_LIB (default build/libgemmshim.so), the
Python package its `report` runs GSTEST_PYTHON_PACKAGE (default python/gemmshim).
The same tests run over all three (packaging/install.mk, wheel.mk)."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness import CLIENT_DIR, ROOT, read_log, require_built, run

LAUNCHER = Path(os.environ.get("GSTEST_LAUNCHER", harness.BUILD / "gemmshim"))
LIB = Path(os.environ.get("GSTEST_LAUNCHER_LIB", harness.SHIM)).resolve()
# The Python package that launcher's `report` runs.
PACKAGE = Path(os.environ.get("GSTEST_PYTHON_PACKAGE", ROOT / "python" / "gemmshim"))
FP8_CLIENT = CLIENT_DIR / "fp8_client_cu13"
# The client's layers are far too small for fp8 to pay on an H100
# (docs/cost-model.md): the gate is off where a test needs them in fp8.
FP8_ENV = {"STANDIN_CC": "9.0", "GEMMSHIM_GATE": "off"}
RANKED = Path(__file__).resolve().parent / "ranked_launcher.py"
PYTHON = sys.executable

NO_LOG = "gemmshim: routing log: none (--log PATH writes one; %p pid, %h host, %r rank)"
# The shim's own wording for a bad setting (options.c: go_passthrough).
SHIM_WARNING = re.compile(r"^gemmshim \S+ WARN (.*); running pass-through \(every GEMM native(, still logged)?\)$")
USAGE = (
    "usage: gemmshim [options] [--] command [args...]\n"
    "       gemmshim policy check FILE\n"
    "       gemmshim policy explain --sm X.Y --ab TYPE --c TYPE --compute TYPE --api NAME [--shape MxNxK] [--policy FILE] ...\n"
    "       gemmshim report [args...]\n"
    "       gemmshim check [options]\n"
    "       gemmshim jupyter install [--name NAME] [--display-name TEXT] [--prefix DIR] [options]\n"
    "       gemmshim --version | --help | --print-lib\n"
)
FP16_RULE = "built-in rule 1 (fp16 sm=7.0-7.5 ab=bf16 compute=32f)"
FFMA_RULE = "built-in rule 2 (ffma sm=6.0-6.9 ab=bf16 compute=32f)"
NATIVE_RULE = "built-in rule 3 (native)"
TYPE_KEYS = ("a_type", "b_type", "c_type", "compute_type")


def shim_options():
    """Every variable of the shim's options table, in table order."""
    text = (ROOT / "shim" / "options.c").read_text()
    table = text[text.index("static const opt_def options[]"):]
    return re.findall(r'^\s*\{"(GEMMSHIM_[A-Z0-9_]+)"', table, re.M)


def shim_bool_options():
    """The table's 1/0 variables."""
    text = (ROOT / "shim" / "options.c").read_text()
    table = text[text.index("static const opt_def options[]"):]
    return set(re.findall(r'^\s*\{"(GEMMSHIM_[A-Z0-9_]+)", OPT_BOOL', table, re.M))


def flag_of(var):
    return "--" + var[len("GEMMSHIM_"):].lower().replace("_", "-")


@pytest.fixture(scope="module")
def launcher(standin):
    require_built([LAUNCHER, LIB, FP8_CLIENT])
    return LAUNCHER


def launch(args, standin, env=None, cwd=None):
    """The launcher with args, in the integration environment (no LD_PRELOAD
    of its own, no inherited GEMMSHIM_*), over the cuBLAS 13 stand-in."""
    return run([LAUNCHER, *args], standin[13], shim=False, env=env, cwd=cwd)


def env_dump():
    """A command that prints the environment it got as JSON."""
    return [PYTHON, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]


# ---- --version, --print-lib, --help ---------------------------------------------------------------
def test_print_lib_and_version(launcher, standin):
    r = launch(["--print-lib"], standin)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{LIB}\n", ""), r.describe()
    version = re.search(r'gemmshim_version\[\] = "([^"]+)"', (ROOT / "shim" / "resolve.c").read_text()).group(1)
    r = launch(["--version"], standin)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{version}\nlibrary: {LIB}\n", ""), r.describe()
    assert launch(["-V"], standin).stdout == r.stdout


def test_help_lists_every_option_of_the_shims_table(launcher, standin):
    r = launch(["--help"], standin)
    assert r.returncode == 0 and r.stderr == "", r.describe()
    assert r.stdout.startswith(USAGE)
    assert launch(["-h"], standin).stdout == r.stdout
    listed = re.findall(r"^  (--[a-z0-9-]+)(\[=0\]| X) +(GEMMSHIM_[A-Z0-9_]+), default '", r.stdout, re.M)
    # A 1/0 option (OPT_BOOL in the table) is shown as a bare flag.
    assert listed == [(flag_of(v), "[=0]" if v in shim_bool_options() else " X", v) for v in shim_options()]
    listed = [(flag, var) for flag, _, var in listed]
    assert ("--mode", "GEMMSHIM_MODE") in listed and ("--fp8-format", "GEMMSHIM_FP8_FORMAT") in listed


# ---- what the command gets -------------------------------------------------------------------------
def test_options_become_the_shims_variables(launcher, standin, tmp_path):
    (tmp_path / "logs").mkdir()
    # An LD_PRELOAD already set keeps its entries after the shim, and the
    # shim appears once (ld.so(8): entries separated by spaces or colons).
    r = launch(["--mode", "fp8", "--fp8-format=hybrid", "--log", "logs/gs-%r.jsonl", "--debug", "INFO",
                "--policy", "p.txt", "--", *env_dump()], standin, cwd=tmp_path,
               env={"LD_PRELOAD": f"libm.so.6 {LIB}", "GEMMSHIM_FP8_HISTORY": "32"})
    (tmp_path / "p.txt").write_text("")  # after the run: a missing policy file must have been refused
    assert r.returncode == 1, r.describe()
    assert r.stderr == (f"gemmshim: GEMMSHIM_POLICY='{tmp_path}/p.txt': cannot open (No such file or directory); "
                        "expected a readable policy file\n"
                        "gemmshim: not running '" + PYTHON + "': 1 problem above; the shim would run every GEMM native\n")

    r = launch(["--mode", "fp8", "--fp8-format=hybrid", "--log", "logs/gs-%r.jsonl", "--debug", "INFO",
                "--policy", "p.txt", "--", *env_dump()], standin, cwd=tmp_path,
               env={"LD_PRELOAD": f"libm.so.6 {LIB}", "GEMMSHIM_FP8_HISTORY": "32"})
    assert r.returncode == 0, r.describe()
    child = json.loads(r.stdout)
    assert {k: v for k, v in child.items() if k.startswith("GEMMSHIM_")} == {
        "GEMMSHIM_MODE": "fp8",
        "GEMMSHIM_FP8_FORMAT": "hybrid",
        "GEMMSHIM_LOG": f"{tmp_path}/logs/gs-%r.jsonl",  # made absolute
        "GEMMSHIM_DEBUG": "INFO",
        "GEMMSHIM_POLICY": f"{tmp_path}/p.txt",
        "GEMMSHIM_FP8_HISTORY": "32",  # inherited, checked, passed on
    }
    assert child["LD_PRELOAD"] == f"{LIB}:libm.so.6"
    # One line from the launcher, first; the rest is the shim's INFO output
    # in the child (the launcher itself never loads the shim).
    lines = r.stderr.splitlines()
    assert lines[0] == (f"gemmshim: routing log: {tmp_path}/logs/gs-%r.jsonl (this process: {tmp_path}/logs/gs-0.jsonl;"
                        " each process fills in %p, %h and %r itself)")
    assert [l for l in lines if l.startswith("gemmshim: ")] == [lines[0]]
    assert any(" INFO GEMMSHIM_MODE set by environment to fp8" in l for l in lines[1:]), r.describe()


def test_no_log_is_said_once_and_preload_starts_empty(launcher, standin):
    r = launch(env_dump(), standin)
    assert r.returncode == 0, r.describe()
    assert r.stderr == NO_LOG + "\n"
    child = json.loads(r.stdout)
    assert child["LD_PRELOAD"] == str(LIB)
    assert not [k for k in child if k.startswith("GEMMSHIM_")]


def test_exec_keeps_pid_and_exit_status(launcher, standin):
    # exec(3): the command replaces the launcher, so its pid is the one the
    # caller started and its exit status reaches the caller unchanged.
    r = launch(["--", "sh", "-c", "echo $$; exit 42"], standin)
    assert (r.returncode, r.stdout) == (42, f"{r.pid}\n"), r.describe()
    r = launch(["sh", "-c", "exit 0"], standin)
    assert r.returncode == 0, r.describe()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGABRT])
def test_a_signal_that_kills_the_command_is_the_callers_to_see(launcher, standin, sig):
    # Python's Popen.returncode is -N for a child killed by signal N.
    r = launch(["sh", "-c", f"kill -{sig.name[3:]} $$"], standin)
    assert r.returncode == -sig, r.describe()
    assert r.stderr == NO_LOG + "\n"


def test_command_not_found_or_not_runnable(launcher, standin, tmp_path):
    r = launch(["no-such-command-gemmshim"], standin)
    assert r.returncode == 127, r.describe()
    assert r.stderr == NO_LOG + "\ngemmshim: cannot run 'no-such-command-gemmshim': No such file or directory\n"
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    r = launch([str(script)], standin)
    assert r.returncode == 126, r.describe()
    assert r.stderr == NO_LOG + f"\ngemmshim: cannot run '{script}': Permission denied\n"


# ---- checked before anything runs ------------------------------------------------------------------
def test_bad_value_stops_before_the_command_runs(launcher, standin, tmp_path):
    marker = tmp_path / "ran"
    r = launch(["--mode", "bogus", "--", "touch", str(marker)], standin)
    assert r.returncode == 1, r.describe()
    assert r.stderr == ("gemmshim: GEMMSHIM_MODE='bogus': expected auto, native, ffma, fp8 or fp16\n"
                        "gemmshim: not running 'touch': 1 problem above; the shim would run every GEMM native\n")
    assert not marker.exists()


def test_inherited_bad_variables_are_checked_too(launcher, standin, tmp_path):
    r = launch(["touch", str(tmp_path / "ran")], standin,
               env={"GEMMSHIM_FP8_HISTORY": "0", "GEMMSHIM_DLSYM": "maybe"})
    assert r.returncode == 1, r.describe()
    assert r.stderr == ("gemmshim: GEMMSHIM_FP8_HISTORY='0': expected a whole number from 1 to 4096\n"
                        "gemmshim: GEMMSHIM_DLSYM='maybe': expected 1/0, true/false, yes/no or on/off\n"
                        "gemmshim: not running 'touch': 2 problems above; the shim would run every GEMM native\n")
    assert not (tmp_path / "ran").exists()


BAD_SETTINGS = {
    "mode": {"GEMMSHIM_MODE": "fast"},
    "size": {"GEMMSHIM_FP8_MAX_BYTES": "12Q"},
    "policy_syntax": {"GEMMSHIM_POLICY": "{tmp}/bad.txt"},
    "policy_missing": {"GEMMSHIM_POLICY": "{tmp}/missing.txt"},
}


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_the_launcher_says_what_the_preloaded_shim_says(launcher, standin, tmp_path, case):
    """Same parser, same message: the shim's warning in a program it is
    preloaded into, and the launcher's refusal, quote the same text."""
    (tmp_path / "bad.txt").write_text("ffma sm=6.1\nfp8 ab=bf16 sm=9.0-8.0\n")
    env = {k: v.format(tmp=tmp_path) for k, v in BAD_SETTINGS[case].items()}
    shim_run = run([FP8_CLIENT, "--layers=1", "--steps=1"], standin[13], shim=True, env=env)
    assert shim_run.returncode == 0, shim_run.describe()
    said = [m.group(1) for m in map(SHIM_WARNING.match, shim_run.stderr.splitlines()) if m]
    assert len(said) == 1, shim_run.describe()
    r = launch([FP8_CLIENT, "--layers=1", "--steps=1"], standin, env=env)
    assert r.returncode == 1, r.describe()
    assert r.stderr == (f"gemmshim: {said[0]}\ngemmshim: not running '{FP8_CLIENT}': 1 problem above; "
                        "the shim would run every GEMM native\n")
    assert r.stdout == ""


def test_usage_errors(launcher, standin):
    cases = {
        ("--modee", "fp8", "true"): "gemmshim: unknown option '--modee'; expected an option from gemmshim --help, "
                                   "or -- before a command whose name starts with -",
        ("-m", "true"): "gemmshim: unknown option '-m'; expected an option from gemmshim --help, "
                        "or -- before a command whose name starts with -",
        ("--mode",): "gemmshim: --mode needs a value; expected --mode VALUE or --mode=VALUE",
        ("--mode", "fp8"): "gemmshim: no command to run; expected gemmshim [options] [--] command [args...]",
        (): "gemmshim: no command to run; expected gemmshim [options] [--] command [args...]",
        ("--",): "gemmshim: no command to run; expected gemmshim [options] [--] command [args...]",
    }
    for args, first in cases.items():
        r = launch(list(args), standin)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", first + "\n" + USAGE), (args, r.describe())


def test_a_log_folder_that_does_not_exist_is_refused(launcher, standin, tmp_path):
    r = launch(["--log", f"{tmp_path}/nope/gs.jsonl", "true"], standin)
    assert r.returncode == 1, r.describe()
    assert r.stderr == (f"gemmshim: GEMMSHIM_LOG='{tmp_path}/nope/gs.jsonl': folder '{tmp_path}/nope' is not "
                        "writable (No such file or directory); expected an existing folder\n")


EXPECTED_FILE = "expected a regular file, a FIFO, a terminal, /dev/null, /dev/full or /dev/kmsg"


def test_a_log_the_shim_would_refuse_is_refused_before_the_run(launcher, standin, tmp_path):
    # The shim opens only those kinds of file (shim/base/files.c); the
    # launcher says so before the command runs, not at its first GEMM.
    (tmp_path / "target").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    cases = {str(tmp_path): "a directory",
             str(tmp_path / "link"): "a symbolic link, which is not followed"}
    for path, what in cases.items():
        for opt, var in (("--log", "GEMMSHIM_LOG"), ("--debug-file", "GEMMSHIM_DEBUG_FILE")):
            r = launch([opt, path, "true"], standin)
            assert (r.returncode, r.stdout) == (1, ""), r.describe()
            assert r.stderr == f"gemmshim: {var}='{path}': '{path}' is {what}; {EXPECTED_FILE}\n", r.describe()


def test_check_subcommand(launcher, standin, tmp_path):
    # What the launcher checks before a run, without a run (gemmshim.enable()
    # and jupyter install call it): options given, then the environment's.
    r = launch(["check", "--mode", "fp8", "--compare"], standin, env={"GEMMSHIM_FP8_FORMAT": "hybrid"})
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r.describe()
    r = launch(["check", "--mode", "fast", "--log", str(tmp_path)], standin, env={"GEMMSHIM_MDOE": "fp8"})
    assert r.returncode == 1, r.describe()
    assert r.stderr.splitlines() == [
        "gemmshim: warning: GEMMSHIM_MDOE is not a variable the shim reads (did you mean GEMMSHIM_MODE?); it is "
        "ignored",
        "gemmshim: GEMMSHIM_MODE='fast': expected auto, native, ffma, fp8 or fp16",
        f"gemmshim: GEMMSHIM_LOG='{tmp_path}': '{tmp_path}' is a directory; {EXPECTED_FILE}"], r.describe()
    r = launch(["check", "extra"], standin)
    assert r.returncode == 2 and r.stderr.startswith(
        "gemmshim: check: unknown argument 'extra'; expected options from gemmshim --help\n"), r.describe()


def test_boolean_options_are_bare_flags(launcher, standin):
    # `--compare -- cmd` must not read '--' as the value of --compare.
    r = launch(["--compare", "--log-gpu-time", "--log-wait=0", "--", *env_dump()], standin)
    assert r.returncode == 0, r.describe()
    child = json.loads(r.stdout)
    assert (child["GEMMSHIM_COMPARE"], child["GEMMSHIM_LOG_GPU_TIME"], child["GEMMSHIM_LOG_WAIT"]) == ("1", "1", "0")
    r = launch(["--compare", "maybe", "--", "true"], standin)  # 'maybe' is the command, not a value
    assert r.returncode == 127 and "gemmshim: cannot run 'maybe': No such file or directory" in r.stderr, r.describe()


def test_unknown_variables_are_warned_once_each(launcher, standin, tmp_path):
    log = tmp_path / "gs.jsonl"
    # GEMMSHIM_GATE=off: the client's layers are too small for fp8 to pay (docs/cost-model.md).
    env = {"GEMMSHIM_MDOE": "fp8", "GEMMSHIM_LOG_GPU_TIMES": "1", "GEMMSHIM_WHATEVER_ELSE": "x", "STANDIN_CC": "9.0",
           "GEMMSHIM_GATE": "off"}
    r = launch(["--log", str(log), "--mode", "fp8", "--", FP8_CLIENT, "--layers=2", "--steps=1"], standin, env=env)
    assert r.returncode == 0, r.describe()
    texts = {"GEMMSHIM_MDOE": "(did you mean GEMMSHIM_MODE?)",
             "GEMMSHIM_LOG_GPU_TIMES": "(did you mean GEMMSHIM_LOG_GPU_TIME?)",
             "GEMMSHIM_WHATEVER_ELSE": "(expected one that `gemmshim --help` lists)"}
    lines = r.stderr.splitlines()
    for var, hint in texts.items():
        message = f"{var} is not a variable the shim reads {hint}; it is ignored"
        # Once from the launcher, before the run ...
        assert lines.count(f"gemmshim: warning: {message}") == 1, r.describe()
        # ... and once from the library, at its load in the command.
        assert len([l for l in lines if re.fullmatch(r"gemmshim \S+ WARN " + re.escape(message), l)]) == 1, r.describe()
    # Nothing else changes: the run is the fp8 run it would have been.
    fp8_records(log, 2, 1)


def test_a_rank_that_is_not_a_number_is_warned(launcher, standin, tmp_path):
    for env, warned in (({"RANK": "abc"}, ["RANK='abc'"]), ({"RANK": "x", "LOCAL_RANK": "3"}, ["RANK='x'"]),
                        ({"RANK": "7"}, []), ({"LOCAL_RANK": "a\nb"}, ["LOCAL_RANK='a\\nb'"])):
        r = launch(["--log", "gs-%r.jsonl", "true"], standin, env=env, cwd=tmp_path)
        assert r.returncode == 0, r.describe()
        got = [l for l in r.stderr.splitlines() if "warning" in l]
        assert got == [f"gemmshim: warning: {w} is not a number; %r in file names ignores it (expected digits)"
                       for w in warned], (env, r.describe())
    # Without %r in a file name nothing depends on it.
    r = launch(["--log", "gs.jsonl", "true"], standin, env={"RANK": "abc"}, cwd=tmp_path)
    assert "warning" not in r.stderr, r.describe()


def test_control_characters_are_escaped_in_what_the_launcher_prints(launcher, standin, tmp_path):
    r = launch(["--bad\noption", "true"], standin)
    assert r.stderr.splitlines()[0] == ("gemmshim: unknown option '--bad\\noption'; expected an option from "
                                        "gemmshim --help, or -- before a command whose name starts with -"), r.describe()
    r = launch(["--", "no\rsuch\x1bcommand"], standin)
    assert r.stderr == "gemmshim: routing log: none (--log PATH writes one; %p pid, %h host, %r rank)\n" \
                       "gemmshim: cannot run 'no\\rsuch\\x1bcommand': No such file or directory\n", r.describe()
    r = launch(["--log", f"{tmp_path}/new\nline/gs.jsonl", "true"], standin)
    assert r.stderr == (f"gemmshim: GEMMSHIM_LOG='{tmp_path}/new\\nline/gs.jsonl': folder '{tmp_path}/new\\nline' "
                        "is not writable (No such file or directory); expected an existing folder\n"), r.describe()


# ---- a program over the stand-in ------------------------------------------------------------------
def fp8_records(log, layers, steps):
    recs = read_log(log)
    assert len(recs) == layers * steps * 3, recs  # forward, dgrad, wgrad per layer and step
    for rec in recs:
        assert (rec["decided"], rec["route"], rec["backend"], rec["status"]) == ("fp8", "fp8", "cublaslt-fp8", 0), rec
        assert rec["reason"].startswith("GEMMSHIM_MODE=fp8; fp8 e4m3 x e4m3"), rec
    return recs


def test_fp8_training_loop_through_the_launcher(launcher, standin, tmp_path):
    log = tmp_path / "gs.jsonl"
    r = launch(["--mode", "fp8", "--log", str(log), "--", FP8_CLIENT, "--layers=2", "--steps=2"], standin,
               env=FP8_ENV)
    assert r.returncode == 0, r.describe()
    assert r.stderr == f"gemmshim: routing log: {log}\n"
    fp8_records(log, 2, 2)


def test_ranked_children_write_their_own_logs(launcher, standin, tmp_path):
    """torchrun/mpirun style: the launcher starts the rank launcher, which
    starts N workers; each inherits the environment and fills in %r from
    its RANK."""
    r = launch(["--mode", "fp8", "--log", f"{tmp_path}/gs-%r.jsonl", "--", PYTHON, str(RANKED), "--nproc", "3",
                "--", str(FP8_CLIENT), "--layers=1", "--steps=2"], standin, env=FP8_ENV)
    assert r.returncode == 0, r.describe()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gs-0.jsonl", "gs-1.jsonl", "gs-2.jsonl"]
    for rank in range(3):
        fp8_records(tmp_path / f"gs-{rank}.jsonl", 1, 2)
    assert r.stderr == (f"gemmshim: routing log: {tmp_path}/gs-%r.jsonl (this process: {tmp_path}/gs-0.jsonl; "
                        "each process fills in %p, %h and %r itself)\n")


def test_a_failing_rank_fails_the_run(launcher, standin, tmp_path):
    r = launch(["--", PYTHON, str(RANKED), "--nproc", "2", "--", "sh", "-c", 'exit $((RANK + 3))'], standin)
    assert r.returncode == 3, r.describe()


# ---- policy check / explain ------------------------------------------------------------------------
def test_policy_check(launcher, standin, tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("# Hopper: fp8 for bf16\nfp8 sm=9.0- ab=bf16,fp16\n\nnative api=cublasLtMatmul\n")
    r = launch(["policy", "check", str(good)], standin)
    assert (r.returncode, r.stderr) == (0, ""), r.describe()
    assert r.stdout == (f"{good}: OK: 2 rules from the file, 3 built-in; matched in this order:\n"
                        f"  1. {good}:2 (fp8 sm=9.0- ab=fp16,bf16)\n"
                        f"  2. {good}:4 (native api=cublasLtMatmul)\n"
                        f"  3. {FP16_RULE}\n"
                        f"  4. {FFMA_RULE}\n"
                        f"  5. {NATIVE_RULE}\n")
    off = tmp_path / "off.txt"
    off.write_text("builtin off\nnative\n")
    r = launch(["policy", "check", str(off)], standin)
    assert r.stdout == f"{off}: OK: 1 rule from the file, 0 built-in; matched in this order:\n  1. {off}:2 (native)\n"

    bad = tmp_path / "bad.txt"
    bad.write_text("fp8 sm=9.0\nffma ab=bf17\n")
    r = launch(["policy", "check", str(bad)], standin)
    assert (r.returncode, r.stdout) == (1, ""), r.describe()
    assert r.stderr == (f"gemmshim: {bad}:2: unknown type 'bf17' in ab; expected fp32, fp64, fp16, i8, c32f, c64f, "
                        "c16f, c8i, u8, i32, bf16, e4m3, e5m2 or any\n")
    r = launch(["policy", "check"], standin)
    assert r.returncode == 2 and r.stderr.startswith("gemmshim policy: check takes one FILE; got 0 arguments\n")


def test_policy_explain(launcher, standin, tmp_path):
    r = launch(["policy", "explain", "--sm", "6.1", "--ab", "bf16", "--c", "bf16", "--compute", "32f",
                "--api", "cublasGemmEx"], standin)
    assert (r.returncode, r.stderr) == (0, ""), r.describe()
    assert r.stdout == ("GEMM: sm=6.1 a=bf16 b=bf16 c=bf16 compute=32f api=cublasGemmEx caller=app\n"
                        "rules: built-in only\n"
                        f"  1. {FP16_RULE}: no, the rule does not take sm=6.1\n"
                        f"  2. {FFMA_RULE}: matches\n"
                        f"route: ffma (policy: {FFMA_RULE})\n")
    r = launch(["policy", "explain", "--sm", "7.5", "--ab", "bf16", "--c", "fp32", "--compute", "32f",
                "--api", "cublasLtMatmul"], standin)
    assert (r.returncode, r.stderr) == (0, ""), r.describe()
    assert r.stdout == ("GEMM: sm=7.5 a=bf16 b=bf16 c=fp32 compute=32f api=cublasLtMatmul caller=app\n"
                        "rules: built-in only\n"
                        f"  1. {FP16_RULE}: matches\n"
                        f"route: fp16 (policy: {FP16_RULE})\n")
    policy = tmp_path / "p.txt"
    policy.write_text("fp8 sm=8.9- ab=fp16\nnative api=cublasLtMatmul\n")
    r = launch(["policy", "explain", "--sm", "9.0", "--a", "bf16", "--b", "e4m3", "--c", "bf16", "--compute", "64f",
                "--api", "cublasGemmEx"], standin, env={"GEMMSHIM_POLICY": str(policy)})
    assert (r.returncode, r.stderr) == (0, ""), r.describe()
    assert r.stdout == ("GEMM: sm=9.0 a=bf16 b=e4m3 c=bf16 compute=64f api=cublasGemmEx caller=app\n"
                        f"rules: {policy}\n"
                        f"  1. {policy}:1 (fp8 sm=8.9- ab=fp16): no, the rule does not take a=bf16 b=e4m3\n"
                        f"  2. {policy}:2 (native api=cublasLtMatmul): no, the rule does not take api=cublasGemmEx\n"
                        f"  3. {FP16_RULE}: no, the rule does not take sm=9.0, a=bf16 b=e4m3, compute=64f\n"
                        f"  4. {FFMA_RULE}: no, the rule does not take sm=9.0, a=bf16 b=e4m3, compute=64f\n"
                        f"  5. {NATIVE_RULE}: matches\n"
                        f"route: native (policy: {NATIVE_RULE})\n")
    off = tmp_path / "off.txt"
    off.write_text("builtin off\nffma sm=6.1\n")
    r = launch(["policy", "explain", "--sm", "unknown", "--ab", "fp16", "--c", "fp16", "--compute", "32f",
                "--api", "cublasLtMatmul", "--policy", str(off)], standin)
    assert r.stdout == ("GEMM: sm=unknown a=fp16 b=fp16 c=fp16 compute=32f api=cublasLtMatmul caller=app\n"
                        f"rules: {off}\n"
                        f"  1. {off}:2 (ffma sm=6.1): no, the rule does not take an unknown device (sm)\n"
                        "route: native (policy: no rule matched)\n"
                        "note: with the device unknown, only rules without an sm key match\n")


def test_policy_explain_caller(launcher, standin, tmp_path):
    """GEMMs an NVIDIA library makes inside itself match only rules that
    name their caller (policy.h: caller= absent means the program)."""
    args = ["policy", "explain", "--sm", "9.0", "--ab", "bf16", "--c", "bf16", "--compute", "32f",
            "--api", "cublasGemmEx", "--caller", "cusolver"]
    r = launch(args, standin)
    assert (r.returncode, r.stderr) == (0, ""), r.describe()
    assert r.stdout == ("GEMM: sm=9.0 a=bf16 b=bf16 c=bf16 compute=32f api=cublasGemmEx caller=cusolver\n"
                        "rules: built-in only\n"
                        f"  1. {FP16_RULE}: no, the rule does not take sm=9.0, caller=cusolver\n"
                        f"  2. {FFMA_RULE}: no, the rule does not take sm=9.0, caller=cusolver\n"
                        f"  3. {NATIVE_RULE}: no, the rule does not take caller=cusolver\n"
                        "route: native (no rule names caller=cusolver: GEMMs inside NVIDIA libraries run native)\n")
    policy = tmp_path / "p.txt"
    policy.write_text("fp8 caller=cusolver\n")
    r = launch([*args, "--policy", str(policy)], standin)
    assert r.stdout.endswith(f"  1. {policy}:1 (fp8 caller=cusolver): matches\n"
                             f"route: fp8 (policy: {policy}:1 (fp8 caller=cusolver))\n"), r.stdout
    r = launch([*args[:-1], "cusolverr"], standin)
    assert r.returncode == 2
    assert r.stderr.startswith("gemmshim policy explain: --caller 'cusolverr': expected app, cublas, "), r.stderr


def test_policy_explain_errors(launcher, standin):
    base = ["policy", "explain", "--sm", "9.0", "--ab", "bf16", "--c", "bf16", "--compute", "32f",
            "--api", "cublasGemmEx"]
    cases = {
        ("--sm", "9.x"): "gemmshim policy explain: --sm '9.x': expected major.minor like 6.1 or 9.0, or unknown\n",
        ("--compute", "32"): "gemmshim policy explain: --compute '32': expected 16f, 16f_pedantic, 32f, 32f_pedantic, "
                             "64f, 64f_pedantic, 32i, 32i_pedantic, 32f_fast_16f, 32f_fast_16bf, 32f_fast_tf32, "
                             "32f_emulated_16bfx9 or 64f_emulated_fixedpoint\n",
        ("--api", "gemm"): "gemmshim policy explain: --api 'gemm': expected cublasGemmEx, cublasGemmEx_64, "
                           "cublasGemmStridedBatchedEx, cublasGemmStridedBatchedEx_64, cublasGemmBatchedEx, "
                           "cublasGemmBatchedEx_64 or cublasLtMatmul\n",
    }
    for (flag, value), message in cases.items():
        args = list(base)
        args[args.index(flag) + 1] = value
        r = launch(args, standin)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", message), r.describe()
    r = launch(base[:4], standin)
    assert r.returncode == 2
    assert r.stderr.startswith("gemmshim policy: explain: --ab (or --a), --c, --compute, --api missing; expected "
                               "every key the policy is matched on\n")
    # The type named as the user typed it; --flag=value as the launcher's options take it.
    args = list(base)
    args[args.index("--ab") + 1] = "bf17"
    r = launch(args, standin)
    assert r.returncode == 2 and r.stderr.startswith("gemmshim policy explain: --ab 'bf17': expected "), r.stderr
    r = launch(["policy", "explain", "--sm=9.0", "--ab=bf16", "--c=bf16", "--compute=32f", "--api=cublasGemmEx"],
               standin)
    assert r.returncode == 0 and r.stdout.endswith("route: native (policy: built-in rule 3 (native))\n"), r.stdout
    r = launch(["policy", "explain", "--size", "1"], standin)
    assert r.returncode == 2 and r.stderr.startswith(
        "gemmshim policy: explain: unknown argument '--size'; expected --sm, --ab (or --a and --b), --c, --compute,"
        " --api, --caller, --shape, --batch, --site, --mode, --policy or --cublas\n"), r.stderr


@pytest.mark.parametrize("policy_text", [None, "ffma sm=6.1 ab=fp16\nnative api=cublasGemmStridedBatchedEx\n"])
def test_explain_agrees_with_the_routing_log(launcher, standin, tmp_path, policy_text):
    """For every kind of GEMM the suite makes on sm 6.1, explain names the
    route the shim decided and the rule the log quotes as its reason."""
    log = tmp_path / "gs.jsonl"
    args = ["--log", str(log)]
    if policy_text:
        (tmp_path / "p.txt").write_text(policy_text)
        args += ["--policy", str(tmp_path / "p.txt")]
    r = launch([*args, "--", CLIENT_DIR / "client_linked_cu13"], standin, env={"STANDIN_CC": "6.1"})
    assert r.returncode == 0, r.describe()
    keys = {}
    for rec in read_log(log):
        # Calls whose device or arguments could not be read are not policy
        # questions (the reason says so after the rule).
        if rec.get("sm") != "6.1" or "unknown(" in " ".join(str(rec[k]) for k in TYPE_KEYS):
            continue
        assert rec["reason"].startswith("policy: "), rec
        key = (rec["api"], *(rec[k] for k in TYPE_KEYS))
        keys.setdefault(key, set()).add((rec["decided"], rec["reason"]))
    assert len(keys) >= 8, keys  # the suite covers every entry point and several type mixes
    rules = set()
    for (api, a, b, c, compute), seen in sorted(keys.items()):
        e = launch(["policy", "explain", "--sm", "6.1", "--a", a, "--b", b, "--c", c, "--compute", compute,
                    "--api", api, *(["--policy", str(tmp_path / "p.txt")] if policy_text else [])], standin)
        assert e.returncode == 0, e.describe()
        m = re.fullmatch(r"route: (\w+) \((policy: .*)\)", e.stdout.splitlines()[-1])
        assert m, e.stdout
        for decided, reason in seen:
            assert decided == m.group(1), (api, a, b, c, compute, seen, e.stdout)
            assert reason == m.group(2) or reason.startswith(m.group(2) + "; "), (reason, e.stdout)
        rules.add(m.group(2))
    want = {f"policy: {FFMA_RULE}", f"policy: {NATIVE_RULE}"}
    if policy_text:
        p = tmp_path / "p.txt"
        want |= {f"policy: {p}:1 (ffma sm=6.1 ab=fp16)", f"policy: {p}:2 (native api=cublasGemmStridedBatchedEx)"}
    assert rules == want


def test_the_files_rules_decide_before_the_mode(launcher, standin, tmp_path):
    """A policy file's rules come before GEMMSHIM_MODE (the mode replaces
    the built-in rules only): under --mode fp8 a size rule keeps those GEMMs
    native, a type rule routes fp32 ones, and explain, given the mode and
    each call's shape, names the route and the reason the log gives."""
    log, policy = tmp_path / "gs.jsonl", tmp_path / "p.txt"
    policy.write_text("native k=1-48\nffma ab=fp32 api=cublasGemmEx\n")
    r = launch(["--log", str(log), "--policy", str(policy), "--mode", "fp8", "--", CLIENT_DIR / "client_linked_cu13"],
               standin, env={"STANDIN_CC": "9.0"})
    assert r.returncode == 0, r.describe()
    by_file = {"native": 0, "ffma": 0, "fp8": 0}
    for rec in read_log(log):
        if (rec.get("sm") != "9.0" or "unknown(" in " ".join(str(rec[k]) for k in TYPE_KEYS)
                or min(rec["m"], rec["n"], rec["k"], rec["batch"]) < 0):
            continue  # not policy questions: the device or arguments could not be read, or cuBLAS refuses them
        e = launch(["policy", "explain", "--mode", "fp8", "--sm", "9.0", "--a", rec["a_type"], "--b", rec["b_type"],
                    "--c", rec["c_type"], "--compute", rec["compute_type"], "--api", rec["api"],
                    "--shape", f"{rec['m']}x{rec['n']}x{rec['k']}", "--batch", str(rec["batch"]),
                    "--policy", str(policy)], standin)
        assert e.returncode == 0, e.describe()
        (route_line,) = [x for x in e.stdout.splitlines() if x.startswith("route: ")]
        m = re.fullmatch(r"route: (\w+) \((.*)\)", route_line)
        assert m, e.stdout
        assert rec["decided"] == m.group(1), (rec, e.stdout)
        assert rec["reason"] == m.group(2) or rec["reason"].startswith(m.group(2) + "; "), (rec["reason"], e.stdout)
        if 1 <= rec["k"] <= 48:
            assert (rec["decided"], m.group(2)) == ("native", f"policy: {policy}:1 (native k=1-48)"), rec
            by_file["native"] += 1
        elif rec["api"] == "cublasGemmEx" and rec["a_type"] == rec["b_type"] == "fp32":
            assert (rec["decided"], m.group(2)) == ("ffma", f"policy: {policy}:2 (ffma ab=fp32 api=cublasGemmEx)"), rec
            by_file["ffma"] += 1
        elif rec["a_type"] == rec["b_type"] and rec["a_type"] in ("bf16", "fp16"):
            assert (rec["decided"], m.group(2)) == ("fp8", "GEMMSHIM_MODE=fp8"), rec
            by_file["fp8"] += 1
    assert all(by_file.values()), by_file  # each kind of decision was seen


def test_policy_size_and_site_keys(launcher, standin, tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("native m=50257\nnative k=-64 batch=2-\nfp8 n=1024- site=00000000000000ab,CD\n")
    r = launch(["policy", "check", str(p)], standin)
    assert r.returncode == 0, r.describe()
    assert r.stdout.splitlines()[1:4] == [f"  1. {p}:1 (native m=50257)", f"  2. {p}:2 (native k=-64 batch=2-)",
                                          f"  3. {p}:3 (fp8 n=1024- site=00000000000000ab,00000000000000cd)"]
    base = ["policy", "explain", "--sm", "9.0", "--ab", "bf16", "--c", "bf16", "--compute", "32f",
            "--api", "cublasGemmEx", "--policy", str(p)]
    r = launch([*base, "--shape", "50257x4096x768"], standin)
    assert r.stdout.splitlines()[-1] == f"route: native (policy: {p}:1 (native m=50257))", r.describe()
    r = launch([*base, "--shape", "512x2048x768", "--site", "cd"], standin)
    assert r.stdout.splitlines()[-5:-1] == [
        f"  1. {p}:1 (native m=50257): no, the rule does not take m=512",
        f"  2. {p}:2 (native k=-64 batch=2-): no, the rule does not take k=768, batch=1",
        f"  3. {p}:3 (fp8 n=1024- site=00000000000000ab,00000000000000cd): matches",
        f"route: fp8 (policy: {p}:3 (fp8 n=1024- site=00000000000000ab,00000000000000cd))"], r.describe()
    assert r.stdout.splitlines()[-1].startswith("gate: fp8 "), r.describe()  # the cost gate's word on the shape
    r = launch([*base], standin)  # no shape: size rules cannot match, and say why
    assert f"  1. {p}:1 (native m=50257): no, the rule does not take an unknown m (give --shape)" in r.stdout
    for bad, msg in (("m=1-2-3", "bad m '1-2-3'; expected a size like 1024, a range like 1-4096, an open range "
                                 "1024- or -64, or any"),
                     ("k=64-8", "inverted k range '64-8'; expected the lower bound first, like 1-4096"),
                     ("site=xyz", "bad site 'xyz' in 'site=xyz'; expected call-site ids as the routing log prints "
                                  "them (16 hex digits), comma-separated, or any"),
                     ("batch=", "'batch=' has an empty value; expected a size like 1024, a range like 1-4096, an "
                                "open range 1024- or -64, or any")):
        p.write_text(f"# a comment\nnative {bad}\n")
        r = launch(["policy", "check", str(p)], standin)
        assert (r.returncode, r.stderr) == (1, f"gemmshim: {p}:2: {msg}\n"), r.describe()


# ---- report --------------------------------------------------------------------------------------
def test_report_summarizes_a_log(launcher, standin, tmp_path):
    log = tmp_path / "gs.jsonl"
    r = launch(["--mode", "fp8", "--log", str(log), "--", FP8_CLIENT, "--layers=1", "--steps=1"], standin,
               env=FP8_ENV)
    assert r.returncode == 0, r.describe()
    r = launch(["report", str(log), "--expect", "cublasGemmEx=fp8/cublaslt-fp8"], standin)
    assert (r.returncode, r.stderr) == (0, ""), r.describe()
    # The same report as the module run directly (gemmshim.report), line
    # for line but for nothing: the launcher adds nothing of its own.
    direct = subprocess.run([sys.executable, "-m", "gemmshim.report", str(log), "--expect",
                             "cublasGemmEx=fp8/cublaslt-fp8"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert direct.returncode == 0, direct.stderr
    assert r.stdout == direct.stdout
    assert "expectations: all met" in r.stdout
    bad = launch(["report", str(tmp_path / "nope.jsonl")], standin)
    assert bad.returncode == 2 and bad.stderr == (
        f"gemmshim report: no such file: {tmp_path / 'nope.jsonl'}\n"
        "gemmshim report: a run that made no cuBLAS call (a CPU-only framework, or a GEMM-free program) writes no "
        "log; check GEMMSHIM_LOG's path and its %p/%r placeholders\n")


def test_explain_runs_the_library_cost_gate(launcher, standin, tmp_path):
    """With --shape, explain asks the library's cost gate (shim/routes/cost.c,
    the functions the routes call) what it decides on the architecture
    named: the decision the library logged for the same GEMMs on the
    stand-in, and for a declined one the reason word for word but for the
    bandwidth, which explain takes from the reference part (docs/cost-model.md's
    table: no device is queried) and the library from the device (the
    stand-in's 9.0 board: 3352 GB/s from its memory clock and bus width)."""
    client = CLIENT_DIR / "ffma_client_cu13"
    require_built([client])
    cases = [("9.0", "fp8", "64x64x64"), ("7.5", "fp16", "64x64x64"), ("7.5", "fp16", "384x384x384")]
    for sm, mode, shape in cases:
        m, n, k = shape.split("x")
        log = tmp_path / f"{sm}-{shape}.jsonl"
        r = launch(["--log", str(log), "--mode", mode, "--", client,
                    f"--gemm=m={m},n={n},k={k},beta=0,pad=0,spad=0,c=bf16"], standin, env={"STANDIN_CC": sm})
        assert r.returncode == 0, r.describe()
        (rec,) = read_log(log)
        e = launch(["policy", "explain", "--mode", mode, "--sm", sm, "--ab", "bf16", "--c", "bf16", "--compute", "32f",
                    "--api", "cublasGemmEx", "--shape", shape], standin)
        assert e.returncode == 0 and e.stderr == "", e.describe()
        lines = e.stdout.splitlines()
        assert lines[-2] == f"route: {mode} (GEMMSHIM_MODE={mode})", e.stdout
        gate = lines[-1]
        if rec["route"] == "native":
            want = rec["reason"][len(f"GEMMSHIM_MODE={mode}; "):]
            assert want.startswith(f"{mode} declined: estimated "), rec
            assert re.sub(r"\d+ GB/s", "B GB/s", gate) == "gate: " + re.sub(r"\d+ GB/s", "B GB/s", want), (gate, want)
            # the route time differs only by the passes at the other bandwidth
            ratio = lambda t: float(re.search(r"estimated ([0-9.e+-]+)x", t).group(1))
            assert abs(ratio(gate) / ratio(want) - 1) < 0.01, (gate, want)
        else:
            assert rec["route"] == mode, rec
            assert gate == f"gate: {mode} estimated faster than native on the sm_{sm.replace('.', '')} reference part" + (
                ", recipe current" if mode == "fp8" else ""), gate
    # No shape: no estimate (the route line ends the output); a device
    # unknown: none, and it says so.
    base = ["policy", "explain", "--mode", "fp8", "--ab", "bf16", "--c", "bf16", "--compute", "32f",
            "--api", "cublasGemmEx"]
    e = launch([*base, "--sm", "9.0"], standin)
    assert e.stdout.splitlines()[-1] == "route: fp8 (GEMMSHIM_MODE=fp8)", e.stdout
    e = launch([*base, "--sm", "unknown", "--shape", "64x64x64"], standin)
    assert e.stdout.splitlines()[-2:] == ["route: fp8 (GEMMSHIM_MODE=fp8)",
                                          "gate: not estimated (the cost gate needs the device's architecture)"], e.stdout


def test_explain_gate_line_follows_the_environment_as_the_library_does(launcher, standin, tmp_path):
    """explain reads the options table from the environment as the library
    does (GEMMSHIM_GATE, GEMMSHIM_FP8_BACKEND, GEMMSHIM_FP8_RECIPE, the
    MIN_FLOPS floors: docs/environment.md) and its gate line says what the
    library did with the same GEMM and environment on the stand-in."""
    client = CLIENT_DIR / "ffma_client_cu13"
    require_built([client])

    def both(sm, mode, shape, env):
        m, n, k = shape.split("x")
        log = tmp_path / "lib.jsonl"
        log.unlink(missing_ok=True)
        r = launch(["--log", str(log), "--mode", mode, "--", client,
                    f"--gemm=m={m},n={n},k={k},beta=0,pad=0,spad=0,c=bf16", *(["--fp8"] if mode == "fp8" else [])],
                   standin, env={"STANDIN_CC": sm, **env})
        assert r.returncode == 0, r.describe()
        (rec,) = read_log(log)
        e = launch(["policy", "explain", "--mode", mode, "--sm", sm, "--ab", "bf16", "--c", "bf16", "--compute",
                    "32f", "--api", "cublasGemmEx", "--shape", shape], standin, env=env)
        assert e.returncode == 0 and e.stderr == "", e.describe()
        return rec, e.stdout.splitlines()

    # The gate off: the library routes a 64^3 GEMM the gate declines.
    rec, out = both("9.0", "fp8", "64x64x64", {"GEMMSHIM_GATE": "off"})
    assert rec["route"] == "fp8", rec
    assert out[-1] == "gate: off (GEMMSHIM_GATE=off): fp8 runs whatever the estimate, recipe current", out
    # The own fp8 kernel on sm_90: no cost gate (a numerics check), routed.
    rec, out = both("9.0", "fp8", "64x64x64", {"GEMMSHIM_FP8_BACKEND": "own"})
    assert rec["route"] == "fp8", rec
    assert out[-1] == ("gate: none for fp8 on sm_90 (GEMMSHIM_FP8_BACKEND names the own kernel: the own fp8 "
                       "kernel runs, a numerics check)"), out
    # A floor above the GEMM: declined before any estimate, the same words.
    rec, out = both("8.0", "ffma", "64x64x64", {"GEMMSHIM_GATE": "off", "GEMMSHIM_FFMA_MIN_FLOPS": "1000000"})
    assert rec["route"] == "native", rec
    assert rec["reason"] == "GEMMSHIM_MODE=ffma; ffma declined: GEMM smaller than GEMMSHIM_FFMA_MIN_FLOPS; ran native"
    assert out[-1] == "gate: ffma declined: GEMM smaller than GEMMSHIM_FFMA_MIN_FLOPS; ran native", out
    # The recipe asked for is the one explain weighs: block, which needs
    # cuBLAS 12.9 (cuBLASLt's VEC128/BLK128 scale modes: the cuBLAS 12.9
    # release notes and cublasLt.h's cublasLtMatmulMatrixScale_t). explain
    # loads no cuBLAS: without --cublas it says the version is unknown and
    # weighs the recipe the library falls back to; with it, what the
    # library does under a cuBLASLt of that version (the stand-in's
    # STANDIN_CUBLASLT_VERSION). Nothing is searched for: stderr is empty.
    def explain_block(*extra):
        e = launch(["policy", "explain", "--mode", "fp8", "--sm", "9.0", "--ab", "bf16", "--c", "bf16", "--compute",
                    "32f", "--api", "cublasGemmEx", "--shape", "64x64x64", *extra], standin,
                   env={"GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "block"})
        assert e.returncode == 0 and e.stderr == "", e.describe()
        return e.stdout.splitlines()

    out = explain_block()
    assert out[-2:] == ["gate: off (GEMMSHIM_GATE=off): fp8 runs whatever the estimate, recipe current",
                        "note: block needs cuBLAS 12.9 or newer, and cublasLtGetVersion was not found (explain loads "
                        "no cuBLAS: give --cublas X.Y with the version the program loads)"], out
    for version, number in (("12.8.4", "120804"), ("12.9", "120900"), ("13.1.0", "130100")):
        rec, _ = both("9.0", "fp8", "64x64x64", {"GEMMSHIM_GATE": "off", "GEMMSHIM_FP8_RECIPE": "block",
                                                 "STANDIN_CUBLASLT_VERSION": number})
        out = explain_block("--cublas", version)
        recipe = "current" if version == "12.8.4" else "block"
        assert rec["route"] == "fp8" and rec["recipe"] == recipe, rec
        assert out[-1 if recipe == "block" else -2] == (
            f"gate: off (GEMMSHIM_GATE=off): fp8 runs whatever the estimate, recipe {recipe}"), out
        if recipe == "current":
            assert out[-1] == "note: block needs cuBLAS 12.9 or newer, the loaded cuBLASLt is 12.8.4", out
            assert "block needs cuBLAS 12.9 or newer, the loaded cuBLASLt is 12.8.4" in rec["reason"] + str(
                rec.get("notes", "")), rec
    for bad in ("12", "12.9.1.2", "x", "-12.9", "12.100"):
        e = launch(["policy", "explain", "--mode", "fp8", "--sm", "9.0", "--ab", "bf16", "--c", "bf16", "--compute",
                    "32f", "--api", "cublasGemmEx", "--cublas", bad], standin)
        assert e.returncode == 2 and e.stdout == "", e.describe()
        assert e.stderr == (f"gemmshim policy explain: --cublas '{bad}': expected the cuBLAS version the program "
                            "loads, like 12.9 or 12.8.4\n"), e.describe()
