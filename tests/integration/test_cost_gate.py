"""The routes' cost-model gate through the library (docs/cost-model.md):
a GEMM too small to pay declines with the estimate in its reason, exactly
as an independent statement of the model (cost_model.py) computes it from
the cited rates and the emulated GPU's attributes; GEMMSHIM_GATE=off routes
the same call; a shape the model says pays is routed with the gate on.
ffma_client_cu13 checks every result against float64 either way."""

import pytest

import cost_model
import route_client
from harness import CLIENT_DIR, require_built
from route_client import assert_all_ok, gemm


@pytest.fixture(scope="module")
def client(shim):
    path = CLIENT_DIR / "ffma_client_cu13"
    require_built([path])
    return path


def run_client(client, standin, tmp_path, cc, mode, args, env=None, tag="run"):
    base = {"STANDIN_CC": cc, "GEMMSHIM_MODE": mode}
    return route_client.run_client(client, standin, tmp_path, args, base, env, True, 0, tag)


# (emulated GPU, route): the client's default GEMM pays on none of them.
SMALL = [("6.1", "ffma"), ("7.5", "ffma"), ("7.0", "fp16"), ("7.5", "fp16")]


@pytest.mark.parametrize("cc,route", SMALL)
def test_small_gemm_declines_with_the_estimate_and_gate_off_routes_it(client, standin, tmp_path, cc, route):
    m, n, k = 64, 48, 80  # the client's default shape: bf16 A, B and C, beta 0.75
    args = [gemm("small", "ex", m=m, n=n, k=k)]
    res = run_client(client, standin, tmp_path, cc, route, args, tag="on")
    assert_all_ok(res)
    e = cost_model.estimate(cc, route, m, n, k, 1, "bf16", "bf16", 0.75)
    assert e["speedup"] < 1, e
    rec = res.recs[0]
    want = f"GEMMSHIM_MODE={route}; {route} declined: {cost_model.decline_reason(route, e)}; ran native"
    assert (rec["decided"], rec["route"], rec["reason"]) == (route, "native", want), rec
    res = run_client(client, standin, tmp_path, cc, route, args, env={"GEMMSHIM_GATE": "off"}, tag="off")
    assert_all_ok(res)
    rec = res.recs[0]
    assert (rec["decided"], rec["route"], rec["reason"]) == (route, route, f"GEMMSHIM_MODE={route}"), rec


# The smallest cubes the model routes (speedups from cost_model: ffma on a
# GTX 1080 at 512^3 ~1.13x, fp16 on a T4 at 384^3 ~1.9x), beta 0.
@pytest.mark.parametrize("cc,route,size", [("6.1", "ffma", 512), ("7.5", "fp16", 384)])
def test_a_gemm_that_pays_is_routed(client, standin, tmp_path, cc, route, size):
    e = cost_model.estimate(cc, route, size, size, size)
    assert e["speedup"] > 1, e
    res = run_client(client, standin, tmp_path, cc, route, [gemm("cube", "ex", m=size, n=size, k=size, beta=0)])
    assert_all_ok(res)
    rec = res.recs[0]
    assert (rec["decided"], rec["route"], rec["reason"]) == (route, route, f"GEMMSHIM_MODE={route}"), rec


def test_flop_floor_holds_with_the_gate_off(client, standin, tmp_path):
    """GEMMSHIM_FFMA_MIN_FLOPS stays a floor of its own, whatever the gate."""
    args = [gemm("small", "ex")]
    env = {"GEMMSHIM_GATE": "off", "GEMMSHIM_FFMA_MIN_FLOPS": str(2 * 64 * 48 * 80 + 1)}
    res = run_client(client, standin, tmp_path, "6.1", "ffma", args, env=env)
    assert_all_ok(res)
    assert res.recs[0]["reason"] == \
        "GEMMSHIM_MODE=ffma; ffma declined: GEMM smaller than GEMMSHIM_FFMA_MIN_FLOPS; ran native"


def test_a_failed_figure_query_takes_the_reference_part(client, standin, tmp_path):
    """The third cuDeviceGetAttribute (the gate's SM count, after the device
    lookup's two) fails once: that call's estimate takes the reference part's
    rates unscaled, and the next call asks again and scales them."""
    args = [gemm("first", "ex"), gemm("second", "ex")]
    res = run_client(client, standin, tmp_path, "6.1", "ffma", args, env={"GEMMSHIM_FAULT": "cuDeviceGetAttribute:3"})
    assert_all_ok(res)
    for rec, sms in zip(res.recs, (0, None)):
        e = cost_model.estimate("6.1", "ffma", 64, 48, 80, 1, "bf16", "bf16", 0.75, sms=sms)
        want = f"GEMMSHIM_MODE=ffma; ffma declined: {cost_model.decline_reason('ffma', e)}; ran native"
        assert (rec["route"], rec["reason"]) == ("native", want), rec
    assert "GTX 1080 Ti rates x 1," in res.recs[0]["reason"]


# fp8 (docs/cost-model.md, docs/fp8.md): the gate runs where the GEMM would
# be cuBLASLt's fp8 one (sm_89+). The client's default shape is far below
# what pays; pad=0 keeps C and D 16-byte aligned, as cuBLASLt's fp8 GEMM
# needs, so GEMMSHIM_GATE=off takes it there.
FP8_SMALL = dict(m=64, n=48, k=80, pad=0, spad=0)


@pytest.mark.parametrize("cc,recipe", [("9.0", "current"), ("8.9", "current"), ("9.0", "delayed")])
def test_fp8_small_gemm_declines_with_the_estimate_on_sm89_up(client, standin, tmp_path, cc, recipe):
    args = [gemm("small", "ex", **FP8_SMALL)]
    env = {"GEMMSHIM_FP8_RECIPE": recipe}
    res = run_client(client, standin, tmp_path, cc, "fp8", args + ["--fp8"], env=env, tag="on")
    assert_all_ok(res)
    e = cost_model.estimate(cc, "fp8", 64, 48, 80, 1, "bf16", "bf16", 0.75, recipe=recipe)
    assert e["speedup"] < 1, e
    rec = res.recs[0]
    want = f"GEMMSHIM_MODE=fp8; fp8 declined: {cost_model.decline_reason('fp8', e)}; ran native"
    assert (rec["decided"], rec["route"], rec["reason"]) == ("fp8", "native", want), rec
    res = run_client(client, standin, tmp_path, cc, "fp8", args + ["--fp8"], env={**env, "GEMMSHIM_GATE": "off"},
                     tag="off")
    assert_all_ok(res)
    rec = res.recs[0]
    assert (rec["route"], rec["backend"]) == ("fp8", "cublaslt-fp8"), rec


@pytest.mark.parametrize("cc,backend,used", [("6.1", "auto", "own"), ("9.0", "own", "own")])
def test_fp8_gate_leaves_the_numerics_backends_alone(client, standin, tmp_path, cc, backend, used):
    """Below sm_89 the fp8 route is a numerics check on the own kernel, and
    on sm_89+ the own kernel runs only when named: the gate, which would
    decline every call there, is not asked (docs/cost-model.md)."""
    args = [gemm("small", "ex", **FP8_SMALL), "--fp8"]
    res = run_client(client, standin, tmp_path, cc, "fp8", args, env={"GEMMSHIM_FP8_BACKEND": backend})
    assert_all_ok(res)
    rec = res.recs[0]
    assert (rec["route"], rec["backend"]) == ("fp8", used), rec
