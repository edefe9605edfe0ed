"""Expectations: the checks that turn the report into a test (exit 1 on failure).

--expect and --expect-some are checked as records stream by; --expect-counts
compares the calls with a bench's counts; step_starts reads --steps'
training summary. scripts/gpu-check.sh and the tests rely on them.
"""

import argparse
import collections
import json


def backend_matches(backend, want):
    if want is None:
        return True
    b = (backend or "").lower()
    return b == want.lower() or want.lower() in b


def parse_expectation(text):
    """'API=ROUTE[/BACKEND][:DB]' -> (api, route, backend or None, DB or None).
    DB: every compared call (GEMMSHIM_COMPARE) of API measured sqnr_db >= DB."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected API=ROUTE[/BACKEND][:SQNR_DB], got {text!r}")
    api, rhs = text.split("=", 1)
    rhs, colon, db = rhs.partition(":")
    route, _, backend = rhs.partition("/")
    min_db = None
    if colon:
        try:
            min_db = float(db)
        except ValueError:
            min_db = None
        if min_db is None or min_db != min_db:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number of dB after ':', got {db!r}")
    return api, route, backend or None, min_db


def sqnr_of(r):
    """A record's sqnr_db as a float (the log writes infinities as strings); None without one."""
    v = r.get("sqnr_db")
    if v.__class__ in (int, float):
        return float(v)
    return {"inf": float("inf"), "-inf": float("-inf")}.get(v) if isinstance(v, str) else None


class Expectations:
    """--expect and --expect-some, checked as records stream by."""

    def __init__(self, expect, expect_some, expect_some_recipe=()):
        self.expect = [(e, 0, 0, collections.Counter()) for e in expect]
        self.expect_some = [[e, 0, False] for e in expect_some]
        # --expect-some-recipe: recipe -> calls that ran it.
        self.recipes = {name: 0 for name in expect_some_recipe}
        self.recipes_seen = collections.Counter()
        # Per --expect with a minimum SQNR: [compared calls, below it, worst (db, site, shape)].
        self.sqnr = [[0, 0, None] for _ in expect]

    def add(self, r):
        api, route, backend = r["api"], r["route"], r.get("backend")
        for i, ((want_api, want_route, want_backend, min_db), n, off, why) in enumerate(self.expect):
            if want_api == "*" or api == want_api:
                ok = route == want_route and backend_matches(backend, want_backend)
                self.expect[i] = ((want_api, want_route, want_backend, min_db), n + 1, off + (not ok), why)
                if not ok:
                    why[(route, backend, r.get("reason"))] += 1
                db = sqnr_of(r) if min_db is not None else None
                if db is not None:
                    q = self.sqnr[i]
                    q[0] += 1
                    q[1] += db < min_db
                    if q[2] is None or db < q[2][0]:
                        q[2] = (db, r.get("site"), f"{r.get('m')}x{r.get('n')}x{r.get('k')}")
        if self.recipes:
            recipe = r.get("recipe")
            if recipe in self.recipes:
                self.recipes[recipe] += 1
            elif r.get("route") == "fp8":
                self.recipes_seen[recipe if recipe.__class__ is str else "(none)"] += 1
        for e in self.expect_some:
            want_api, want_route, want_backend, _ = e[0]
            if want_api == "*" or api == want_api:
                e[1] += 1
                if route == want_route and backend_matches(backend, want_backend):
                    e[2] = True

    def failures(self):
        out = []
        for ((api, route, backend, min_db), n, off, why), (compared, low, worst) in zip(self.expect, self.sqnr):
            spec = f"{api}={route}{'/' + backend if backend else ''}{'' if min_db is None else f':{min_db:g}'}"
            if min_db is not None and n and not compared:
                out.append(f"--expect {spec}: no call of {api} has sqnr_db (run with GEMMSHIM_COMPARE=1 and "
                           "GEMMSHIM_LOG)")
            elif low:
                out.append(f"--expect {spec}: {low} of {compared} compared calls measured below {min_db:g} dB; "
                           f"worst {worst[0]:.2f} dB at site {worst[1]} ({worst[2]})")
            if not n:
                out.append(f"--expect {spec}: no call of {api} in the log")
            elif off:
                out.append(f"--expect {spec}: {off} of {n} calls did not; e.g. " +
                           "; ".join(f"{c}x route={r} backend={b} reason={m!r}" for (r, b, m), c in why.most_common(3)))
        for (api, route, backend, _), n, ok in self.expect_some:
            if not ok:
                out.append(f"--expect-some {api}={route}{'/' + backend if backend else ''}: none of {n} calls of {api} did")
        for name, n in self.recipes.items():
            if not n:
                seen = ", ".join(f"{c}x {k}" for k, c in self.recipes_seen.most_common(3)) or "no fp8 call"
                out.append(f"--expect-some-recipe {name}: no call ran it (fp8 calls ran: {seen})")
        return out


def count_failures(path, api_calls):
    """--expect-counts: each {"kind":"calls"} record of a bench's JSON lines
    against the calls the logs hold; a line that is not such a record (not
    JSON, nested too deep, not an object) is a failure, never a crash."""
    out, found = [], False
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if '"kind":"calls"' not in line.replace(" ", ""):
                continue
            found = True
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                rec = None
            if rec.__class__ is not dict:
                out.append(f"{path}: line {lineno} is not a {{\"kind\":\"calls\"}} record")
                continue
            for api, n in rec.items():
                if api in ("kind", "pair"):
                    continue
                if api_calls.get(api, 0) != n:
                    out.append(f"{path}: the program made {n} calls of {api}, the log holds {api_calls.get(api, 0)}")
    if not found:
        out.append(f"{path}: no {{\"kind\":\"calls\"}} record")
    return out


def step_starts(path):
    """The step_start_ns list of the last line holding one (train.py's
    summary); None when no line does. A list that is not of numbers is
    no summary's, and is passed over as a line that is not JSON is."""
    starts = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{") and "step_start_ns" in line:
                try:
                    found = json.loads(line)["step_start_ns"]
                except (ValueError, KeyError, TypeError, RecursionError):
                    continue
                if found.__class__ is list and all(x.__class__ in (int, float) for x in found):
                    starts = found
    return starts
