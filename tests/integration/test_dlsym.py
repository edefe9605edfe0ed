"""The shim's dlsym wrapper must not change what dlsym answers: RTLD_NEXT
depends on the calling object, RTLD_DEFAULT on the global scope, a missing
name gives NULL and an error text, and dlerror() keeps its state. Only a
lookup of a hooked cuBLAS name on a cuBLAS handle (the XLA pattern) is
answered with the shim's wrapper, and GEMMSHIM_DLSYM=0 turns that off.
tests/real runs the same probe over the real cuBLAS 13."""

from harness import check_dlsym_probe, client_argv, read_log, run_ok


def test_dlsym_answers_unchanged_over_the_standin(shim, standin):
    check_dlsym_probe(standin[13])


def test_xla_pattern_is_only_caught_through_dlsym(shim, standin, tmp_path):
    """The client's own calls in pattern 3 reach the shim only through the
    dlsym wrapper: with it off, its cublasLtMatmul calls (which cuBLASLt
    makes no nested calls for) leave no record, so no log file; with it on,
    one record each."""
    argv = client_argv("xla", 12, "--api=cublasLtMatmul")
    base = run_ok(argv, standin[12])
    off_log, on_log = tmp_path / "off.jsonl", tmp_path / "on.jsonl"
    off = run_ok(argv, standin[12], shim=True, env={"GEMMSHIM_DLSYM": "0", "GEMMSHIM_LOG": str(off_log)})
    assert off.stdout == base.stdout
    assert not off_log.exists()
    on = run_ok(argv, standin[12], shim=True, env={"GEMMSHIM_LOG": str(on_log)})
    assert on.stdout == base.stdout
    assert [(r["api"], r["status"]) for r in read_log(on_log)] == [
        (c["api"], int(c["status"])) for c in on.calls]
    assert len(on.calls) == 8  # the NULL-computeDesc case runs only when named
