"""A program that closes every descriptor from 3 up mid-run, as daemons
do, then opens its own files: the shim must never write into them (its
log and debug descriptors are now the program's), and either carries on
logging into its own files or stops with one warning."""

import re

import harness
from test_lifecycle import FFMA, assert_quiet, whole_lines  # noqa: F401

CALLS = 50


def test_program_closes_every_descriptor(tmp_path):
    client = harness.CLIENT_DIR / "lifecycle_client_cu13"
    harness.require_built([client, harness.SHIM])
    log, debug = tmp_path / "log.jsonl", tmp_path / "debug.txt"
    r = harness.run([client, "--mode=closefds", f"--calls={CALLS}"], harness.STANDIN[13], shim=True, cwd=tmp_path,
                    env={**FFMA, "GEMMSHIM_LOG": str(log), "GEMMSHIM_DEBUG": "INFO",
                         "GEMMSHIM_DEBUG_FILE": str(debug)}, timeout=60)
    assert r.returncode == 0 and "files written" in r.stdout, r.describe()
    # Each file holds exactly the bytes the client wrote (lifecycle_client.c).
    for f in range(4):
        want = bytes((f * 37 + i * 11 + 5) & 0xFF for i in range(4096))
        got = (tmp_path / f"data{f}.bin").read_bytes()
        assert got == want, f"data{f}.bin: {len(got)} bytes, starting {got[4096:4196]!r}"
    assert "standin:" not in r.stderr, r.stderr
    recs = whole_lines(log)
    assert [x["seq"] for x in recs] == list(range(1, len(recs) + 1))
    text = debug.read_text() if debug.exists() else ""
    warnings = [l for l in (text + r.stderr).splitlines() if re.match(r"gemmshim \S+ WARN ", l)]
    if len(recs) < 2 * CALLS:
        # Records stopped: said once, naming the log.
        assert len([w for w in warnings if "GEMMSHIM_LOG" in w]) == 1, (len(recs), warnings)
