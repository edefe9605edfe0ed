"""Reading routing logs: the records of each file, one line at a time.

A line that is not a routing record is counted (BadLines) and skipped, so
one bad line never ends a report; a number no record holds (not finite,
beyond 64 bits) is such a line too, since it would make the sums, the
trace and the JSON output invalid. Also the accessors of a record's
fields that every part of the report shares (num, shape_of).
"""

import glob
import json


def expand_logs(patterns):
    """Each pattern's matches in name order; a pattern that matches nothing
    is kept as it is, so opening it reports the missing file."""
    files = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        files.extend(found if found else [pattern])
    return files


class BadLines:
    """Lines of one file that are not routing records: how many, and the
    first; and the records the shim's writer said it lost (its
    {"event":"records_lost"} lines)."""

    def __init__(self):
        self.count = 0
        self.first = None
        self.first_why = None
        self.lost = 0

    def add(self, lineno, why):
        self.count += 1
        if self.first is None:
            self.first, self.first_why = lineno, why


class BadNumber(ValueError):
    """A number in a line that no routing record holds (the why of the bad line)."""


# log.c writes integers of at most 64 bits. A number beyond them, or one
# that is not finite (1e400 parses to infinity in Python; NaN and Infinity
# are not JSON at all, RFC 8259 section 6), is no record's: taken, it would
# make the sums and the trace's ts and dur infinite, and the trace and
# --json output, which must be JSON, invalid.
NUMBER_LIMIT = 1 << 64


def _finite_float(text):
    x = float(text)
    if not -NUMBER_LIMIT < x < NUMBER_LIMIT:  # False for NaN too
        raise BadNumber(f"a number out of range ({text[:40]})")
    return x


def _no_constant(name):
    raise BadNumber(f"{name} is not a JSON number")


_raw_decode = json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant).raw_decode
# The fields the report adds up or draws: an integer among them is held to
# log.c's 64 bits as well (floats are, as they are parsed).
SUMMED_FIELDS = ("t_ns", "dur_ns", "gpu_ns", "gpu_ns_kernels", "native_gpu_ns", "gpu_t_ns")
# The longest line read: log.c's longest record is 4 KiB (LOG_RECORD_MAX);
# a longer line is no record, and is skipped to its end without being held,
# so a file with no newline at all (a disk filled with NUL bytes) is read in
# bounded memory.
MAX_LINE = 1 << 16


def read_records(path, bad):
    """Yield the routing records of one file, one line at a time. A record
    is a JSON object with at least "api" and "route" strings and no number
    out of range; anything else is counted in `bad` and skipped."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        readline = f.readline
        lineno = 0
        while True:
            line = readline(MAX_LINE)
            if not line:
                return
            lineno += 1
            if len(line) == MAX_LINE and line[-1] != "\n":
                while True:  # the rest of the line, MAX_LINE at a time
                    rest = readline(MAX_LINE)
                    if not rest or rest[-1] == "\n":
                        break
                bad.add(lineno, f"longer than {MAX_LINE} characters")
                continue
            try:
                rec, end = _raw_decode(line)
                if end < len(line) - 1 and line[end:].strip():
                    raise ValueError("more after the object")
            except BadNumber as e:
                bad.add(lineno, str(e))
                continue
            except ValueError:
                if not line.strip():
                    continue
                bad.add(lineno, "not JSON" if line.endswith("\n") else "cut off (no newline at the end)")
                continue
            if rec.__class__ is dict:
                g = rec.get
                big = None
                for k in SUMMED_FIELDS:
                    v = g(k)
                    if v.__class__ is int and (v >= NUMBER_LIMIT or v <= -NUMBER_LIMIT):
                        big = k
                        break
                if big:
                    bad.add(lineno, f"a number out of range ({big})")
                    continue
            if rec.__class__ is dict and rec.get("event") == "records_lost" and isinstance(rec.get("lost"), int):
                bad.lost += rec["lost"]
                continue
            if rec.__class__ is not dict or rec.get("api").__class__ is not str \
                    or rec.get("route").__class__ is not str:
                bad.add(lineno, "not a routing record (no api or route)")
                continue
            yield lineno, rec


# ---- what a record is ---------------------------------------------------------
def num(rec, key):
    """A non-negative number field, else None (absent, null, or not a number)."""
    v = rec.get(key)
    if v.__class__ is int and v >= 0:
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
        return v
    return None


def types_text(a, b, c, d):
    """'bf16' when A, B, C (and D) agree, else 'A,B->C' ('->C->D' for a
    separate D of another type)."""
    if d is None:
        d = c
    if a == b == c == d:
        return str(a)
    ab = a if a == b else f"{a},{b}"
    out = c if c == d else f"{c}->{d}"
    return f"{ab}->{out}"


def types_of(rec):
    return types_text(rec.get("a_type", "?"), rec.get("b_type", "?"), rec.get("c_type", "?"), rec.get("d_type"))


def shape_text(m, n, k, batch, types):
    """'4096x4096x4096 bf16', 'MxNxK batch B types' for batched calls: the
    same text the shim names its NVTX ranges with."""
    s = f"{m}x{n}x{k}"
    if batch not in (1, None):
        s += f" batch {batch}"
    return f"{s} {types}"


def shape_of(rec):
    return shape_text(rec.get("m", "?"), rec.get("n", "?"), rec.get("k", "?"), rec.get("batch", 1), types_of(rec))
