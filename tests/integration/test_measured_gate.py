"""The measured gate (docs/cost-model.md, "The measured gate",
shim/measured_gate.c): with GEMMSHIM_COMPARE, once a site's first three
compared calls took more GPU time in the route than in the native run beside
them, the site runs native, with the measurement in its reason; only that
site; GEMMSHIM_GATE=off keeps the route.

The stand-in's STANDIN_KERNEL_NS makes each kernel the shim launches take
that much more GPU time (tests/standin/driver_init.c), as the fp8 quantize
kernels did on an H200 (docs/gpu-results.md): the fp16 route's three
kernels then put it far behind native's stand-in GEMM. --wait-log makes the
client wait for each record before its next call, so the log's writer has
read every measurement before the next call asks."""

import json
import os
import subprocess
import sys

import pytest

from harness import CLIENT_DIR, ROOT, read_log, require_built, run
from route_client import gemm

KERNEL_NS = 1_000_000_000  # 1 s a kernel: far above any host time here
# fp16 on the emulated T4 (sm_75): 384^3 is the smallest cube
# test_cost_gate.py has the cost model route there (~1.9x estimated).
ENV = {"STANDIN_CC": "7.5", "GEMMSHIM_MODE": "fp16", "GEMMSHIM_COMPARE": "1", "GEMMSHIM_COMPARE_EVERY": "1",
       "STANDIN_KERNEL_NS": str(KERNEL_NS), "GEMMSHIM_DEBUG": "INFO"}
SLOW = dict(m=384, n=384, k=384, beta=0)
OTHER = dict(m=384, n=384, k=400, beta=0)  # another shape: another site


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "ffma_client_cu13"
    require_built([path])
    return path


def run_sites(client, standin, tmp_path, env, tag):
    log = tmp_path / f"{tag}.jsonl"
    args = [gemm("s1", **SLOW), gemm("s2", **SLOW), gemm("o1", **OTHER), gemm("s3", **SLOW), gemm("o2", **OTHER),
            gemm("s4", **SLOW), gemm("s5", **SLOW)]
    r = run([client, *args, f"--wait-log={log}"], standin[13], shim=True, env={**env, "GEMMSHIM_LOG": str(log)},
            timeout=300)
    assert r.returncode == 0 and "standin:" not in r.stderr, r.describe()
    assert all(c["ok"] == "1" for c in r.calls), r.describe()
    return r, read_log(log)


def test_a_slower_site_runs_native_after_three_compared_calls(client, standin, tmp_path):
    r, recs = run_sites(client, standin, tmp_path, ENV, "on")
    assert len(recs) == 7
    s = [recs[i] for i in (0, 1, 3, 5, 6)]
    o = [recs[i] for i in (2, 4)]
    assert len({x["site"] for x in s}) == 1 and len({x["site"] for x in o}) == 1 and s[0]["site"] != o[0]["site"]
    # The first three: routed and compared, the route's three kernels 1 s each.
    for x in s[:3]:
        assert (x["route"], x["reason"]) == ("fp16", "GEMMSHIM_MODE=fp16"), x
        assert x["gpu_ns"] >= 3 * KERNEL_NS > x["native_gpu_ns"], x
    route_ns = sum(x["gpu_ns"] for x in s[:3])
    native_ns = sum(x["native_gpu_ns"] for x in s[:3])
    want = ("fp16 off for this site: slower than native here, measured %.3gx native's GPU time over 3 compared "
            "calls (route %.1f us, native %.1f us a call); GEMMSHIM_GATE=off routes it anyway") % (
        route_ns / native_ns, route_ns / 3 / 1e3, native_ns / 3 / 1e3)
    for x in s[3:]:
        assert (x["route"], x["reason"]) == ("native", "GEMMSHIM_MODE=fp16; " + want), x
    # The other site has two compared calls: fewer than three, still routed.
    assert [x["route"] for x in o] == ["fp16", "fp16"], o
    lines = [line for line in r.stderr.splitlines() if "summary: slower site" in line]
    assert len(lines) == 1 and lines[0].endswith(f"summary: slower site {s[0]['site']} {want}"), r.describe()
    # gemmshim report lists the site, with how many calls ran native.
    p = report(tmp_path / "on.jsonl", "--json", "-")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["slower"] == [{"site": s[0]["site"], "route": "fp16", "shape": "384x384x384 bf16",
                                               "native_calls": 2, "reason": s[3]["reason"]}]
    text = report(tmp_path / "on.jsonl").stdout
    assert "sites slower than native" in text and want.split("; ")[0] in text, text


def report(*args):
    return subprocess.run([sys.executable, "-m", "gemmshim.report", *map(str, args)],
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), capture_output=True, text=True)


def test_gate_off_keeps_the_route(client, standin, tmp_path):
    r, recs = run_sites(client, standin, tmp_path, {**ENV, "GEMMSHIM_GATE": "off"}, "off")
    assert [x["route"] for x in recs] == ["fp16"] * 7, recs
    assert "summary: slower site" not in r.stderr, r.describe()
