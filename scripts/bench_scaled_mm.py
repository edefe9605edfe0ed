#!/usr/bin/env python3
"""fp8 GEMM the usual PyTorch way, for comparison with the shim's fp8 route.

For each shape (m x n x k, nn.Linear's forward: activations m x k, weight
n x k) this times, in one process on one stream:

  bf16       torch.mm(a, w.t()) in bf16 (the native baseline)
  gemm       torch._scaled_mm on operands already in fp8 (E4M3, tensorwise
             scales), bf16 output: the fp8 GEMM alone
  gemm_fast  the same with use_fast_accum=True
  quant+gemm amax, scale, cast of both operands in PyTorch, then _scaled_mm:
             what a framework without delayed scaling pays per call
  quant      the two quantizations alone, with their bandwidth (one read of
             bf16, one write of fp8 per element) against a device copy of
             the same bytes

Timing: CUDA events, warm-up, then --reps samples of about --target-ms each,
median. TFLOP/s = 2mnk / time. Run without the shim preloaded.

Usage: bench_scaled_mm.py [--shapes 4096x4096x4096,...] [--json OUT]
"""
import argparse
import json
import math
import statistics
import sys

PEAK_BF16_TFLOPS = 989.0  # NVIDIA H100/H200 datasheet: dense bf16 peak
PEAK_FP8_TFLOPS = 1979.0
ESTIMATED_COPY_TBS = 4.3  # estimate: ~90% of an H200's 4.8 TB/s nominal (datasheet), read+write
E4M3_MAX = 448.0

DEFAULT_SHAPES = "4096x4096x4096,8192x8192x8192,4096x4096x11008,16384x4096x4096"


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        m, n, k = (int(x) for x in item.lower().split("x"))
        if min(m, n, k) < 1 or m % 16 or n % 16 or k % 16:
            raise SystemExit(f"bench_scaled_mm: {item}: _scaled_mm needs every dimension a positive multiple of 16")
        shapes.append((m, n, k))
    return shapes


def time_ms(torch, fn, reps, warmup, target_ms):
    """Median milliseconds per call of fn."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    inner = max(1, min(1000, int(target_ms / max(start.elapsed_time(end), 1e-3))))
    samples = []
    for _ in range(reps):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / inner)
    return statistics.median(samples)


def quantize(torch, x):
    """Tensorwise E4M3: the step is amax / 448, x8 = x / step (saturating)."""
    amax = x.abs().amax().float()
    step = torch.clamp(amax / E4M3_MAX, min=1e-12)
    x8 = (x.float() / step).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, step


def bench_shape(torch, dev, gen, m, n, k, args):
    """Every timing of one shape, as a JSON-ready record."""
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=gen)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen)
    a8, sa = quantize(torch, a)
    w8, sw = quantize(torch, w)
    elems = m * k + n * k
    # A copy moving the same bytes as one quantization pass: reads and writes
    # 1.5 bytes per element, as quantizing reads 2 and writes 1.
    src = torch.empty(3 * elems // 2, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)

    def bf16():
        return torch.mm(a, w.t())

    def gemm():
        # mat2 must be column-major: w8 is n x k row-major, so w8.t() is.
        return torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)

    def gemm_fast():
        return torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True)

    def quant_gemm():
        qa, qsa = quantize(torch, a)
        qw, qsw = quantize(torch, w)
        return torch._scaled_mm(qa, qw.t(), scale_a=qsa, scale_b=qsw, out_dtype=torch.bfloat16)

    def quant():
        quantize(torch, a)
        quantize(torch, w)

    def copy():
        dst.copy_(src)

    ms = {f.__name__: time_ms(torch, f, args.reps, args.warmup, args.target_ms)
          for f in (bf16, gemm, gemm_fast, quant_gemm, quant, copy)}
    # Sanity: the fp8 result tracks the bf16 one (SQNR in dB).
    ref = bf16().float()
    err = float((gemm().float() - ref).pow(2).sum())
    sqnr = 10.0 * math.log10(float(ref.pow(2).sum()) / err) if err > 0 else float("inf")
    flop = 2.0 * m * n * k
    tf = {key: flop / (v * 1e-3) / 1e12 for key, v in ms.items() if key not in ("quant", "copy")}
    return {
        "kind": "scaled_mm", "m": m, "n": n, "k": k, "ms": ms, "tflops": tf,
        "quant_gbs": 3.0 * elems / (ms["quant"] * 1e-3) / 1e9,  # bf16 read + fp8 write, one pass
        "copy_gbs": 2.0 * src.numel() / (ms["copy"] * 1e-3) / 1e9,
        "sqnr_db": sqnr,
        "speedup_quant_gemm_vs_bf16": ms["bf16"] / ms["quant_gemm"],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--target-ms", type=float, default=20.0)
    ap.add_argument("--json", help="append one JSON record per shape to this file")
    args = ap.parse_args(argv)
    shapes = parse_shapes(args.shapes)

    import torch

    if not torch.cuda.is_available():
        print("bench_scaled_mm: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        print(f"bench_scaled_mm: torch {torch.__version__} has no _scaled_mm / float8_e4m3fn", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    cap = torch.cuda.get_device_capability(dev)
    print(f"bench_scaled_mm: {name} sm_{cap[0]}{cap[1]}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"napkin: bf16 dense peak {PEAK_BF16_TFLOPS:.0f} TFLOP/s, fp8 {PEAK_FP8_TFLOPS:.0f}, "
          f"copy ~{ESTIMATED_COPY_TBS} TB/s")
    out = open(args.json, "a", encoding="utf-8") if args.json else None
    gen = torch.Generator(device=dev).manual_seed(1234)
    failed = 0
    for m, n, k in shapes:
        try:
            rec = bench_shape(torch, dev, gen, m, n, k, args)
        except RuntimeError as e:
            print(f"{m}x{n}x{k}: failed: {e}")
            failed += 1
            rec = {"kind": "scaled_mm", "m": m, "n": n, "k": k, "error": str(e)}
        else:
            ms, tf = rec["ms"], rec["tflops"]
            print(f"scaled_mm {m}x{n}x{k}: bf16 {tf['bf16']:.0f} TFLOP/s ({100 * tf['bf16'] / PEAK_BF16_TFLOPS:.0f}% "
                  f"of {PEAK_BF16_TFLOPS:.0f}) | fp8 gemm {tf['gemm']:.0f} ({100 * tf['gemm'] / PEAK_FP8_TFLOPS:.0f}% "
                  f"of {PEAK_FP8_TFLOPS:.0f}), fast-accum {tf['gemm_fast']:.0f} | quant+gemm {tf['quant_gemm']:.0f} "
                  f"({rec['speedup_quant_gemm_vs_bf16']:.2f}x bf16) | quant {ms['quant'] * 1e3:.0f} us "
                  f"{rec['quant_gbs']:.0f} GB/s vs copy {rec['copy_gbs']:.0f} GB/s | sqnr {rec['sqnr_db']:.1f} dB")
            rec.update({"device": name, "torch": torch.__version__})
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()
        # Each shape's tensors are gone with bench_shape's frame; give the
        # memory back before the next, larger one.
        torch.cuda.empty_cache()
    if out:
        out.close()
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
