"""What the route tests (test_ffma_route.py, test_fp16_route.py) share:
ffma_client_cu13's --gemm options and one run of it under the shim or
without, with its calls, the routing log and the stand-in's counters."""

from collections import Counter

from harness import read_log, run, standin_counts

BATCHED = {"strided", "strided64", "batched", "batched64"}


def gemm(name, api="ex", **kw):
    """One --gemm option; batched entry points get 3 members by default."""
    if api in BATCHED:
        kw.setdefault("batch", 3)
    return "--gemm=" + ",".join(f"{k}={v}" for k, v in {"name": name, "api": api, **kw}.items())


class Result:
    def __init__(self, r, recs, counts):
        self.run, self.recs, self.counts = r, recs, counts
        self.calls = r.calls

    def describe(self):
        return self.run.describe()


def run_client(client, standin, tmp_path, args, base_env, env=None, shim=True, rc=0, tag="run"):
    """Run the client with base_env and env; returns its calls, the routing
    log (shim runs) and the stand-in's counters. rc: the exit status
    required."""
    log = tmp_path / f"{tag}.jsonl"
    counts = tmp_path / f"{tag}.counts"
    full = {**base_env, **(env or {}), "STANDIN_COUNTS": str(counts)}
    if shim:
        full["GEMMSHIM_LOG"] = str(log)
    r = run([client, *args], standin[13], shim=shim, env=full)
    assert r.returncode == rc, r.describe()
    assert "standin:" not in r.stderr or rc == 86, r.describe()
    recs = read_log(log) if shim and log.exists() else []
    res = Result(r, recs, standin_counts(counts))
    if shim:
        # One record per call; threads' records interleave.
        apis, want = [x["api"] for x in recs], [c["api"] for c in res.calls]
        if any("." in c["index"] for c in res.calls):
            apis, want = Counter(apis), Counter(want)
        assert apis == want, res.describe()
    return res


def assert_all_ok(res):
    bad = [c for c in res.calls if c["ok"] != "1"]
    assert not bad, res.describe()


def align256(n):
    return (n + 255) // 256 * 256
