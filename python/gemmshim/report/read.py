"""Reading routing logs: the records of each file, one line at a time.

A line that is not a routing record is counted (BadLines) and skipped, so
one bad line never ends a report: JSON the parser refuses (nested too
deep included), a value that is not an object, a field of another type
than log.c writes (FIELD_TYPES), a number no record holds (not finite,
beyond 64 bits). Past the reader every field has its type. Also the
accessors of a record's fields the whole report shares (num, shape_of).
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
        self.headers = []  # the shim's {"header": ...} lines, one per process that wrote here

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
# The type of each field log.c writes (its record format, at the top of
# log.c), checked once as a line is read: a record whose field has another
# type (status_name null or a number, m a string, dur_ns a string, ...) is
# no record of the shim's, and is a bad line, so that nothing past the
# reader meets a value it cannot add, sort or print. Fields the report does
# not know are left as they are. backend may also be null (as if omitted:
# no backend), sm too (log.c writes null for an unknown GPU).
_STR, _INT, _NUM = ((str,), "a string"), ((int,), "an integer"), ((int, float), "a number")
_STR_OR_NULL = ((str, type(None)), "a string")
FIELD_TYPES = {
    **dict.fromkeys(("seq", "tid", "m", "n", "k", "batch", "lda", "ldb", "ldc", "ldd", "stride_a", "stride_b",
                     "stride_c", "algo", "device", "status", "captured"), _INT),
    **dict.fromkeys(("t_ns", "dur_ns", "gpu_ns", "gpu_ns_kernels", "native_gpu_ns", "gpu_t_ns"), _NUM),
    **dict.fromkeys(("api", "route", "decided", "reason", "status_name", "site", "stream", "transa", "transb",
                     "a_type", "b_type", "c_type", "d_type", "compute_type", "scale_type", "epilogue",
                     "bias_type", "pointer_mode", "site_event", "evicted_site", "gpu_skipped", "recipe"), _STR),
    **dict.fromkeys(("backend", "sm"), _STR_OR_NULL),
}
_JSON_KIND = {type(None): "null", bool: "true or false", int: "a number", float: "a number", str: "a string",
              list: "an array", dict: "an object"}


def wrong_field(rec):
    """Why the record's known fields are not of the types log.c writes
    ('status_name is null, not a string'); None when they are."""
    types = FIELD_TYPES
    for key, v in rec.items():
        want = types.get(key)
        if want is not None and v.__class__ not in want[0]:
            return f"{key} is {_JSON_KIND.get(v.__class__, 'a value')}, not {want[1]}"
    return None


def lone_surrogate(rec):
    """The first known field whose string is no Unicode text: a lone
    surrogate such as \\ud800, which JSON lets through but no output can
    print (UnicodeEncodeError); None when there is none."""
    for key, v in rec.items():
        if key in FIELD_TYPES and v.__class__ is str and not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return key
    return None


class FieldCheck:
    """wrong_field, once per set of keys and value types: records of one
    log come in a few such sets, so most records cost two tuples and a
    lookup. Held to SIGNATURES sets, then started afresh (bounded memory
    on a log of ever new keys)."""

    SIGNATURES = 4096

    def __init__(self):
        self.seen = {}

    def why(self, rec, line):
        sig = (*rec, *map(type, rec.values()))
        why = self.seen.get(sig, False)
        if why is False:
            if len(self.seen) >= self.SIGNATURES:
                self.seen.clear()
            why = self.seen[sig] = wrong_field(rec)
        # A surrogate comes only from a \\uXXXX escape (the file is decoded
        # with errors="replace"); log.c escapes only bytes below 0x20 so.
        if why is None and "\\u" in line:
            key = lone_surrogate(rec)
            if key:
                why = f"{key} is not Unicode text (a lone surrogate)"
        return why


# The longest line read: log.c's longest record is 4 KiB (LOG_RECORD_MAX);
# a longer line is no record, and is skipped to its end without being held,
# so a file with no newline at all (a disk filled with NUL bytes) is read in
# bounded memory.
MAX_LINE = 1 << 16


def read_records(path, bad):
    """Yield the routing records of one file, one line at a time. A record
    is a JSON object with at least "api" and "route" strings, every field
    log.c writes of the type it writes (FIELD_TYPES) and no number out of
    range; anything else is counted in `bad` and skipped. Nothing the
    parser raises on a line (RecursionError on deep nesting, ValueError)
    ends the reading."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        readline = f.readline
        check = FieldCheck()
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
            except RecursionError:  # '[[[[...': json recurses once per level
                bad.add(lineno, "not JSON (nested too deep)")
                continue
            except Exception:  # ValueError, and whatever else the parser may raise
                if not line.strip():
                    continue
                bad.add(lineno, "not JSON" if line.endswith("\n") else "cut off (no newline at the end)")
                continue
            if rec.__class__ is not dict:
                bad.add(lineno, "not a routing record (not a JSON object)")
                continue
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
            if g("event") == "records_lost" and g("lost").__class__ is int and rec["lost"] >= 0:
                bad.lost += rec["lost"]
                continue
            if g("header").__class__ is str:  # a process's first line (docs/log-format.md)
                bad.headers.append(rec)
                continue
            if g("api").__class__ is not str or g("route").__class__ is not str:
                bad.add(lineno, "not a routing record (no api or route)")
                continue
            why = check.why(rec, line)
            if why:
                bad.add(lineno, f"not a routing record ({why})")
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
