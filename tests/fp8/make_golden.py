#!/usr/bin/env python3
"""Golden vectors for the fp8 conversions of kernels/fp8_convert.h.

Run from the repository root (needs `pip install ml_dtypes numpy`):

    python3 tests/fp8/make_golden.py

It writes, next to itself:

  golden_codes.h    every one of the 256 codes of E4M3 ("fn") and E5M2,
                    decoded to fp32 bits by ml_dtypes;
  golden_random.bin random and hand-picked fp32 inputs with their expected
                    saturating E4M3 and E5M2 codes.

The outputs are committed so the tests need no Python package.

What "expected" means, and where it is not ml_dtypes' plain cast:

  * ml_dtypes casts out-of-range values to NaN (float8_e4m3fn, which has no
    infinity) or to inf (float8_e5m2) -- cvt.rn without .satfinite. The shim
    saturates, as cvt.rn.satfinite does: every non-NaN input is clipped to
    [-max, +max] first (448 for E4M3, 57344 for E5M2; infinities included)
    and then cast with ml_dtypes' round-to-nearest-even. Clipping is exact
    and only touches values whose saturated code is +-max, so the rounding
    of every in-range value is ml_dtypes' own.
  * NaN inputs keep ml_dtypes' result: the sign is kept, E4M3 gives 0x7F,
    E5M2 the quiet NaN 0x7E (payload dropped).
  * Decoding a NaN code gives some NaN; the C side returns the canonical
    0x7FFFFFFF and the test only requires NaN there.

Every expected code is also checked here against an independent exact
rounding in rational arithmetic (fractions.Fraction), so a change in
ml_dtypes' behaviour would stop this script instead of changing the data.

golden_random.bin format (little endian):
  "GSF8" magic, uint32 version (1), uint32 count,
  then count records of 8 bytes: uint32 fp32 bits, uint8 e4m3 code,
  uint8 e5m2 code, 2 bytes zero.
"""

import bisect
import os
import struct
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20240607
COUNT_RANDOM = 17000  # plus about 3000 hand-picked ones

FORMATS = {
    # name: (ml_dtypes type, exponent bias, mantissa bits, max, max code)
    "e4m3": (ml_dtypes.float8_e4m3fn, 7, 3, 448.0, 0x7E),
    "e5m2": (ml_dtypes.float8_e5m2, 15, 2, 57344.0, 0x7B),
}


def f32_from_bits(bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def saturating_codes(x, name):
    """Expected codes of the float32 array x: NaN as ml_dtypes casts it,
    everything else clipped to +-max, then cast (round to nearest even)."""
    t, _, _, fmax, _ = FORMATS[name]
    nan = np.isnan(x)
    with np.errstate(invalid="ignore", over="ignore"):
        clipped = np.where(nan, x, np.clip(x, -fmax, fmax)).astype(np.float32)
        return clipped.astype(t).view(np.uint8)


def exact_values(name):
    """Every finite non-negative value of the format, by code, as Fractions."""
    _, bias, mbits, _, maxcode = FORMATS[name]
    vals = []
    for code in range(maxcode + 1):
        e, m = code >> mbits, code & ((1 << mbits) - 1)
        frac = Fraction(m, 1 << mbits)
        vals.append(frac * Fraction(2) ** (1 - bias) if e == 0 else (1 + frac) * Fraction(2) ** (e - bias))
    return vals


EXACT = {name: exact_values(name) for name in FORMATS}


def exact_code(xf, name):
    """Independent reference: the saturating RNE code of one finite or
    infinite float (not NaN), by exact rational arithmetic."""
    fmax, maxcode = FORMATS[name][3], FORMATS[name][4]
    sign = 0x80 if np.signbit(xf) else 0
    if np.isinf(xf) or abs(float(xf)) >= fmax:
        return sign | maxcode
    v = abs(Fraction(float(xf)))
    vals = EXACT[name]
    hi = bisect.bisect_left(vals, v)  # vals[hi - 1] < v <= vals[hi]
    if vals[hi] == v or hi == 0:
        return sign | hi
    lo = hi - 1
    d_lo, d_hi = v - vals[lo], vals[hi] - v
    if d_lo < d_hi or (d_lo == d_hi and lo % 2 == 0):
        return sign | lo
    return sign | hi


def decoded_bits(name):
    t = FORMATS[name][0]
    vals = np.arange(256, dtype=np.uint8).view(t).astype(np.float32)
    return vals.view(np.uint32)


def code_values(name):
    """Every finite non-negative value of the format, ascending, as float64."""
    t, _, _, _, maxcode = FORMATS[name]
    return np.arange(maxcode + 1, dtype=np.uint8).view(t).astype(np.float64)


def hand_picked():
    """Inputs that probe the rounding: every code value, every midpoint
    between neighbours (the ties), one fp32 ulp either side of them, values
    around and past the max, zeros, infinities, NaNs with payloads, fp32
    subnormals and values below half the smallest fp8 subnormal."""
    vals = []
    for name in FORMATS:
        v = code_values(name)
        mids = (v[:-1] + v[1:]) / 2  # exact in float64, and in float32 too
        for arr in (v, mids):
            a = arr.astype(np.float32)
            vals += [a, np.nextafter(a, np.float32(np.inf)), np.nextafter(a, np.float32(0))]
        fmax = np.float32(FORMATS[name][3])
        step = np.float32(v[-1] - v[-2])
        # Past the max: the would-be tie with the next binade's first value,
        # and far beyond; half the smallest subnormal (ties to zero).
        extra = [fmax + step / 2, fmax + step, fmax * 2, fmax * 1000, np.float32(3.0e38),
                 np.float32(v[1] / 2), np.float32(v[1] / 4)]
        vals.append(np.array(extra, dtype=np.float32))
    specials = f32_from_bits([
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # zeros, infinities
        0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFFA00000,  # NaNs
        0x00000001, 0x007FFFFF, 0x80400000, 0x00800000,  # fp32 subnormals, min normal
        0x7F7FFFFF, 0xFF7FFFFF,  # fp32 max
    ])
    vals.append(specials)
    out = np.concatenate(vals).astype(np.float32)
    return np.concatenate([out, -out])


def random_inputs(rng):
    """Random fp32 values: uniformly random bit patterns (every exponent,
    NaN and inf included), and magnitudes spread log-uniformly over the two
    formats' ranges and a little beyond."""
    n_bits = COUNT_RANDOM // 3
    bits = rng.integers(0, 1 << 32, size=n_bits, dtype=np.uint64).astype(np.uint32)
    n_log = COUNT_RANDOM - n_bits
    mag = np.exp2(rng.uniform(-22.0, 18.0, size=n_log))
    sign = np.where(rng.integers(0, 2, size=n_log) == 1, -1.0, 1.0)
    return np.concatenate([f32_from_bits(bits), (sign * mag).astype(np.float32)])


def check_against_exact(x, codes, name):
    nan = np.isnan(x)
    for xf, c in zip(x[~nan], codes[~nan]):
        want = exact_code(xf, name)
        if want != int(c):
            sys.exit(f"make_golden: {name}: ml_dtypes gives 0x{int(c):02x} for {float(xf)!r}, "
                     f"exact rounding 0x{want:02x}")
    nan_want = {"e4m3": 0x7F, "e5m2": 0x7E}[name]
    for xf, c in zip(x[nan], codes[nan]):
        sign = 0x80 if np.signbit(xf) else 0
        if int(c) != sign | nan_want:
            sys.exit(f"make_golden: {name}: NaN became 0x{int(c):02x}")


def write_codes_header(path):
    lines = [
        "/* golden_codes.h: generated by tests/fp8/make_golden.py with ml_dtypes",
        f" * {ml_dtypes.__version__}; do not edit. fp32 bits of each of the 256",
        " * codes decoded (NaN codes decode to some NaN). */",
        "#ifndef GS_FP8_GOLDEN_CODES_H",
        "#define GS_FP8_GOLDEN_CODES_H",
        "#include <stdint.h>",
    ]
    for name in FORMATS:
        bits = decoded_bits(name)
        lines.append(f"static const uint32_t golden_{name}_decoded[256] = {{")
        for i in range(0, 256, 8):
            lines.append("    " + ", ".join(f"0x{int(b):08x}" for b in bits[i:i + 8]) + ",")
        lines.append("};")
    lines.append("#endif")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_random_bin(path, x, e4m3, e5m2):
    with open(path, "wb") as f:
        f.write(b"GSF8" + struct.pack("<II", 1, len(x)))
        bits = x.view(np.uint32)
        for b, c4, c5 in zip(bits, e4m3, e5m2):
            f.write(struct.pack("<IBBxx", int(b), int(c4), int(c5)))


def main():
    rng = np.random.default_rng(SEED)
    x = np.concatenate([hand_picked(), random_inputs(rng)]).astype(np.float32)
    codes = {}
    for name in FORMATS:
        codes[name] = saturating_codes(x, name)
        check_against_exact(x, codes[name], name)
    write_codes_header(os.path.join(HERE, "golden_codes.h"))
    write_random_bin(os.path.join(HERE, "golden_random.bin"), x, codes["e4m3"], codes["e5m2"])
    print(f"make_golden: {len(x)} inputs, seed {SEED}, ml_dtypes {ml_dtypes.__version__}")


if __name__ == "__main__":
    main()
