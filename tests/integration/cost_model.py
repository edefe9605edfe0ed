"""An independent Python statement of the routes' cost model
(docs/cost-model.md), for the tests: the same cited figures, the arithmetic
written again, so a slip in shim/routes/cost.c shows as a difference.

Rates (TFLOP/s) of reference parts, torch square-matmul measurements by
users in zzc0721/torch-performance-test-data (GTX 1080 Ti: issue #60;
V100 SXM2: issue #140; T4: database.md; H100 bf16: issue #79, ~797),
NVIDIA datasheet peaks where no measurement is used (A100 SXM4 all; L40S
all, dense, fp32 accumulation: fp32 91.6, bf16/fp16 362.05, fp8 733,
142 SMs, 2520 MHz, 864 GB/s; H100 fp32), and an assumption for H100 fp8 (2x its bf16, as NVIDIA's dense
peaks 1979/989). SMs and boost clocks: NVIDIA product specifications
(GTX 1080 Ti 3584 cores = 28 SMs of 128, 1582 MHz; V100 80 SMs, 1530 MHz;
T4 2560 cores = 40 SMs of 64, 1590 MHz; A100 108 SMs, 1410 MHz; H100 SXM5
132 SMs, 1980 MHz)."""

RATES = {  # sm: (part, fp32, fp16, bf16, fp8, sms, clock MHz, GB/s)
    61: ("GTX 1080 Ti", 10.09, 9.62, 5.38, 0, 28, 1582, 484),
    70: ("V100 SXM2", 14.51, 97.36, 10.65, 0, 80, 1530, 900),
    75: ("T4", 4.3, 42.0, 2.4, 0, 40, 1590, 320),
    80: ("A100 SXM4", 19.5, 312, 312, 0, 108, 1410, 1555),
    89: ("L40S", 91.6, 362.05, 362.05, 733, 142, 2520, 864),
    90: ("H100 SXM5", 67, 790, 790, 1580, 132, 1980, 3350),
}
LAUNCH_US = 5.0      # per launch: an assumption (docs/perf-static.md)
STREAM_SHARE = 0.8   # of DRAM bandwidth the streaming kernels reach: an assumption
# the fp8 quantize kernels' share, measured on an H200 (docs/gpu-results.md):
# 671 MB in 413 us = 1.62 TB/s of the datasheet's 4.8
FP8_STREAM_SHARE = 0.34

# The stand-in's emulated parts (tests/standin/driver_init.c), what
# cuDeviceGetAttribute reports for them: SMs, clock kHz, memory clock kHz,
# bus width in bits.
DEVICES = {
    "6.1": ("GTX 1080", 61, 20, 1733500, 5005000, 256),
    "7.0": ("V100 SXM2", 70, 80, 1530000, 877000, 4096),
    "7.5": ("T4", 75, 40, 1590000, 5001000, 256),
    "8.9": ("Ada, 58 SMs", 89, 58, 2040000, 6251000, 192),
    "9.0": ("H100 SXM5", 90, 132, 1980000, 2619000, 5120),
}

ROUTE_RATE = {"ffma": 1, "fp16": 2, "fp8": 4}
NATIVE_RATE = {"fp32": 1, "fp16": 2, "bf16": 3}


def rates_for(sm):
    same = [s for s in RATES if s // 10 == sm // 10]
    if same:
        below = [s for s in same if s <= sm]
        return RATES[max(below) if below else min(same)]
    older = [s for s in RATES if s < sm]
    return RATES[max(older)] if older else None


def work(route, m, n, k, batch=1, ab="bf16", c="bf16", beta=0.0, recipe="current"):
    """(flops, pass bytes, launches) of a routed call, as the routes count them."""
    mn = m * n * batch
    ab_elems = (m * k + k * n) * batch
    if route == "ffma":
        # docs/cost-model.md: a bf16/fp16 C that beta may scale is read by
        # the output kernel, 2 bytes an element (the GemmEx calls these
        # tests make; a cuBLASLt relu/gelu epilogue widens it instead: 6)
        own_out = c != "fp32"
        c_bytes = 2.0 if own_out and beta != 0 else 0.0
        return 2.0 * m * n * k * batch, 6.0 * ab_elems + (6.0 * mn if own_out else 0) + c_bytes * mn, \
            1 + (1 if own_out else 0)
    if route == "fp16":
        return 2.0 * m * n * k * batch, 6.0 * ab_elems + (8.0 if c == "fp32" else 6.0) * mn, 3
    # fp8 (docs/fp8.md): the quantize pass reads A and B and writes a byte
    # an element, one launch; current adds an amax pass over A and B, one
    # launch (its per-block amax slots need no memset).
    # block and mxfp8: one launch per operand, scales taken at a byte per 32
    # elements.
    size = 4.0 if ab == "fp32" else 2.0
    if recipe == "delayed":
        return 2.0 * m * n * k * batch, (size + 1.0) * ab_elems, 1
    if recipe in ("block", "mxfp8"):
        return 2.0 * m * n * k * batch, (size + 1.0 + 1.0 / 32) * ab_elems, 2
    return 2.0 * m * n * k * batch, (2 * size + 1.0) * ab_elems, 2


def estimate(cc, route, m, n, k, batch=1, ab="bf16", c="bf16", beta=0.0, sms=None, recipe="current"):
    """sms=0: the SM count query failed (the reference part's rates, unscaled)."""
    _, sm, dev_sms, clock, mem_clock, bus = DEVICES[cc]
    sms = dev_sms if sms is None else sms
    part, *r, ref_sms, ref_mhz, ref_bw = rates_for(sm)
    scale = (sms * clock) / (ref_sms * ref_mhz * 1000.0) if sms > 0 else 1.0
    native = r[NATIVE_RATE[ab] - 1] * scale
    rate = r[ROUTE_RATE[route] - 1 if route != "fp8" else 3] * scale
    bw = 2.0 * mem_clock * 1e3 * (bus / 8.0) / 1e9
    flops, nbytes, launches = work(route, m, n, k, batch, ab, c, beta, recipe)
    e = {"part": part, "scale": scale, "bw": bw, "launches": launches}
    e["native_us"] = flops / (native * 1e12) * 1e6
    e["gemm_us"] = flops / (rate * 1e12) * 1e6
    e["pass_us"] = nbytes / (bw * (FP8_STREAM_SHARE if route == "fp8" else STREAM_SHARE) * 1e9) * 1e6
    e["launch_us"] = launches * LAUNCH_US
    e["route_us"] = e["gemm_us"] + e["pass_us"] + e["launch_us"]
    e["speedup"] = e["native_us"] / e["route_us"]
    return e


def fmt_time(us):
    if us >= 1000:
        return "%.2f ms" % (us / 1000)
    if us >= 1:
        return "%.1f us" % us
    return "%.3f us" % us


def decline_reason(route, e):
    """The gate's reason, inside "<route> declined: ...; ran native"."""
    return ("estimated %.3gx native here: native %s, route %s (%s GEMM %s + passes %s + %d launches %s; "
            "%s rates x %.3g, %.0f GB/s); GEMMSHIM_GATE=off routes it anyway") % (
        e["speedup"], fmt_time(e["native_us"]), fmt_time(e["route_us"]), route, fmt_time(e["gemm_us"]),
        fmt_time(e["pass_us"]), e["launches"], fmt_time(e["launch_us"]), e["part"], e["scale"], e["bw"])
