#!/usr/bin/env python3
"""The tables of a gpu-check run (scripts/gpu-check.sh), from its results folder.

  gpu_report.py train-compare RESULTS   compare the training runs; exit 1 when
                                        a loss is out of tolerance
  gpu_report.py report RESULTS          write RESULTS/results.md (ready to
                                        paste into docs/) and results.json,
                                        print the short table; exit 1 when a
                                        step failed
  gpu_report.py hybrid-floors OUT LOG RECIPE
                                        fp8_client's output OUT under
                                        GEMMSHIM_FP8_FORMAT=hybrid and its
                                        routing log LOG: exit 1 unless every
                                        GEMM ran RECIPE and returned 0 at its
                                        floor (25 dB, 18 for dgrad/wgrad,
                                        whose B is E5M2) and exactly the
                                        dgrad/wgrad GEMMs say "e4m3 x e5m2
                                        (B: gradient)"

Training tolerances (losses are the mean of the last 10 steps, "final", and
the loss of step 0, "first"; relative to the native bf16 run):
  ffma  first within 0.5%: step 0 is one forward pass on identical weights
        and data, so only GEMM rounding differs (fp32-accumulated results
        rounded to bf16 by both routes; at most an ulp of 2^-8 on some
        elements). final within the bf16 noise of this run: the distance
        between the fp32 run and the native bf16 run, at least 0.5% and at
        most 2% (the fp8 bound): ffma keeps bf16 activations and outputs, so
        it may differ from native by rounding, never by more than removing
        bf16 altogether does.
  fp16  as ffma (exact like it: the same fp32-accumulated sums, rounded to
        bf16 alike); absent (no fp16 tensor cores) is not a failure.
  fp8   final within 2%.
"""
import json
import os
import sys

FFMA_FIRST_TOL = 0.005
FFMA_FINAL_FLOOR, FFMA_FINAL_CEIL = 0.005, 0.02
FP8_FINAL_TOL = 0.02
GOAL_FFMA_OVER_SGEMM = 1.10  # at 4096^3
GOAL_CAST_OF_COPY = 0.85
PEAK_BF16, PEAK_FP8 = 989.0, 1979.0
# gpu-check.sh's benchmarks of the recipes other than the default (current):
# bench-fp8-recipe-<recipe>, one for each recipe the device runs.
FP8_RECIPE_PREFIX = "bench-fp8-recipe-"


def load_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return default


def load_jsonl(path):
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except OSError:
        pass
    return out


def rel(a, b):
    return abs(a - b) / abs(b) if b else float("inf")


def pct(x):
    return f"{100.0 * x:.2f}%"


def pct0(x):
    return f"{100.0 * x:.0f}%"


def of_copy(gbs, copy_gbs):
    """A bandwidth as a share of the copy's; '-' where either is missing
    (0 or null: the driver could not time a copy)."""
    return pct0(gbs / copy_gbs) if gbs and copy_gbs and copy_gbs > 0 else "-"


def gbs_str(v):
    return f"{v:.0f}" if v and v > 0 else "-"


def per_step_str(counts):
    """[3, 5, 5, 5] -> 'step 0: 3; steps 1-3: 5 each'; the list when it varies."""
    if len(counts) > 2 and len(set(counts[1:])) == 1:
        return f"step 0: {counts[0]}; steps 1-{len(counts) - 1}: {counts[1]} each"
    return str(counts)


def shape_str(r):
    return f"{r['m']}x{r['n']}x{r['k']}"


# ---- train-compare ------------------------------------------------------------
def train_compare(results):
    runs = {name: load_json(os.path.join(results, "train", f"{name}.json")) for name in ("native", "ffma", "fp16", "fp8", "fp32")}
    checks, rows = [], []

    def check(name, ok, detail):
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    native = runs["native"]
    if not native:
        check("native run", False, "no summary (train-native failed)")
    else:
        check("native run learns", native["finite"] and native["final_window_loss"] < 0.9 * native["first_loss"],
              f"first {native['first_loss']:.4f} -> final {native['final_window_loss']:.4f} (must fall by 10%)")
    noise = None
    if native and runs["fp32"]:
        noise = rel(runs["fp32"]["final_window_loss"], native["final_window_loss"])
    ffma_tol = FFMA_FINAL_CEIL if noise is None else min(max(noise, FFMA_FINAL_FLOOR), FFMA_FINAL_CEIL)
    for name in ("ffma", "fp16", "fp8", "fp32"):
        r = runs[name]
        if not r:
            if name not in ("fp32", "fp16"):
                check(f"{name} run", False, f"no summary (train-{name} failed)")
            continue
        row = {"run": name, "first": r["first_loss"], "final": r["final_window_loss"], "finite": r["finite"],
               "step_ms": r["mean_step_ms"]}
        if native:
            row["d_first"] = rel(r["first_loss"], native["first_loss"])
            row["d_final"] = rel(r["final_window_loss"], native["final_window_loss"])
            row["time_ratio"] = r["mean_step_ms"] / native["mean_step_ms"]
            if name in ("ffma", "fp16"):
                check(f"{name} first loss", r["finite"] and row["d_first"] <= FFMA_FIRST_TOL,
                      f"{pct(row['d_first'])} from native (tolerance {pct(FFMA_FIRST_TOL)})")
                check(f"{name} final loss", r["finite"] and row["d_final"] <= ffma_tol,
                      f"{pct(row['d_final'])} from native (tolerance {pct(ffma_tol)}"
                      + (f": the fp32 run is {pct(noise)} away)" if noise is not None else ", no fp32 run)"))
            if name == "fp8":
                check("fp8 final loss", r["finite"] and row["d_final"] <= FP8_FINAL_TOL,
                      f"{pct(row['d_final'])} from native bf16 (tolerance {pct(FP8_FINAL_TOL)})")
        rows.append(row)
    if native:
        rows.insert(0, {"run": "native", "first": native["first_loss"], "final": native["final_window_loss"],
                        "finite": native["finite"], "step_ms": native["mean_step_ms"], "d_first": 0.0,
                        "d_final": 0.0, "time_ratio": 1.0})

    sites = None
    fp8_log = load_json(os.path.join(results, "routing", "train-fp8.summary.json"))
    if fp8_log and runs["fp8"] and "steps" in fp8_log:
        per_step = [s["sites_by_route"].get("fp8", 0) for s in fp8_log["steps"]]
        calls = [s["by_route"].get("fp8", 0) for s in fp8_log["steps"]]
        n_lin = runs["fp8"]["n_linear"]
        n_shapes = len(runs["fp8"]["linear_shapes"])
        sites = {"fp8_sites_per_step": per_step, "fp8_calls_per_step": calls, "n_linear": n_lin,
                 "distinct_linear_shapes": n_shapes, "calls_expected_per_step": 3 * n_lin,
                 "sites_expected_if_per_module": 3 * n_lin, "sites_expected_if_per_shape": 3 * n_shapes}

    for c in checks:
        print(f"{'PASS' if c['ok'] else 'FAIL'} {c['check']}: {c['detail']}")
    print("run     first loss  final loss  d(first)  d(final)  step ms  time vs native")
    for r in rows:
        print(f"{r['run']:<7} {r['first']:>10.4f}  {r['final']:>10.4f}  {pct(r.get('d_first', float('nan'))):>8}  "
              f"{pct(r.get('d_final', float('nan'))):>8}  {r['step_ms']:>7.2f}  {r.get('time_ratio', float('nan')):.3f}")
    if sites:
        print(f"fp8 sites per step: {per_step_str(sites['fp8_sites_per_step'])} (nn.Linear modules {sites['n_linear']}, "
              f"distinct Linear shapes {sites['distinct_linear_shapes']}: 3 per module would be "
              f"{sites['sites_expected_if_per_module']}, 3 per shape {sites['sites_expected_if_per_shape']})")
        print(f"fp8 calls per step: {per_step_str(sites['fp8_calls_per_step'])} (3 per Linear would be "
              f"{sites['calls_expected_per_step']})")
    out = {"checks": checks, "runs": rows, "ffma_final_tolerance": ffma_tol, "bf16_noise": noise, "fp8_sites": sites}
    with open(os.path.join(results, "train_compare.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    ok = all(c["ok"] for c in checks)
    print("summary train-compare " + ("all within tolerance" if ok else "a check failed"))
    return 0 if ok else 1


# ---- report ---------------------------------------------------------------------
def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def read_steps(results):
    steps = []
    try:
        with open(os.path.join(results, "steps.tsv"), encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3:
                    steps.append({"step": parts[0], "status": parts[1], "seconds": parts[2],
                                  "note": parts[3] if len(parts) > 3 else ""})
    except OSError:
        pass
    return steps


def gemm_rows(records, pair):
    return [r for r in records if r.get("kind") == "gemm" and r.get("pair") == pair and r.get("status") == 0]


def trace_rows(records):
    return [r for r in records if r.get("kind") == "trace" and r.get("available")]


def report(results):
    env = load_json(os.path.join(results, "env.json"), {})
    steps = read_steps(results)
    try:
        recipe_benches = sorted(f[:-len(".jsonl")] for f in os.listdir(os.path.join(results, "bench"))
                                if f.startswith(FP8_RECIPE_PREFIX) and f.endswith(".jsonl"))
    except OSError:
        recipe_benches = []
    # (bench step, what its table is, its headline's name)
    fp8_benches = [("bench-fp8-own", "backend own", "own"), ("bench-fp8-own-mma", "backend own-mma", "own-mma"),
                   ("bench-fp8-cublaslt", "backend cublaslt, recipe current", "cublaslt")]
    fp8_benches += [(step, f"backend cublaslt, recipe {step[len(FP8_RECIPE_PREFIX):]}",
                     f"recipe {step[len(FP8_RECIPE_PREFIX):]}") for step in recipe_benches]
    bench = {name: load_jsonl(os.path.join(results, "bench", f"{name}.jsonl"))
             for name in ("cast-bench", "bench-ffma-bf16", "bench-ffma-sgemm", *(b[0] for b in fp8_benches),
                          "bench-fp16-bf16", "scaled-mm")}
    train = load_json(os.path.join(results, "train_compare.json"))
    md, headline = [], []
    device = next((r for recs in bench.values() for r in recs if r.get("kind") == "device"), {})
    status = {s["step"]: s["status"] for s in steps}

    def section_error(name, e):
        # One malformed record must not cost the rest of the report.
        md.append(f"**report: the {name} section could not be built ({type(e).__name__}: {e})**")
        md.append("")
        headline.append((f"report: {name}", "error", f"{type(e).__name__}: {e}"))

    def route_warning(step):
        # A table is only the route's when its routing log said so.
        if status.get(f"{step}:routes") != "PASS":
            md.append(f"**{step}: the routing-log check did not pass ({status.get(step + ':routes', 'not run')}); "
                      "these numbers may not be the route's. See logs/" + step + ":routes.log.**")
            md.append("")

    md.append(f"### gpu-check, {env.get('date', '?')}")
    md.append("")
    dv = device.get("driver_version")
    api = f"CUDA {dv // 1000}.{dv % 1000 // 10}" if isinstance(dv, int) else "CUDA ?"
    md.append(f"- GPU: {env.get('gpu') or device.get('name', '?')} (compute capability "
              f"{env.get('compute_cap') or device.get('sm', '?')}), driver {env.get('driver') or '?'} ({api}), "
              f"{env.get('memory', '')}".rstrip(", "))
    md.append(f"- cuBLAS: {device.get('libcublas') or env.get('cublas_dir', '?')}; PyTorch: {env.get('torch') or 'none'}")
    md.append(f"- command: `{env.get('command', '?')}`; commit {env.get('commit', '?')}; build {env.get('build', '?')}"
              f"; libgemmshim.so sha256 {env.get('shim_sha256_16', '?')}...")
    md.append("")

    md.append("#### Steps")
    md += md_table(("step", "result", "s", "note"),
                   [(s["step"], s["status"], s["seconds"], s["note"].replace("|", "/")) for s in steps])
    md.append("")

    try:
        rows = gemm_rows(bench["bench-fp16-bf16"], "fp16-bf16")
        if rows:
            cc = str(env.get("compute_cap") or device.get("sm", ""))
            md.append("#### fp16 route vs native bf16 (cublasGemmEx vs cublasGemmEx_64, one process)")
            if not cc.startswith("7."):
                md.append(f"Compute capability {cc or '?'}: the route ran forced for its numerics; its speed counts "
                          "on sm_70-75 only, where native bf16 has no tensor cores.")
            route_warning("bench-fp16-bf16")
            md += md_table(("m x n x k", "fp16 ms", "fp16 TFLOP/s", "native ms", "native TFLOP/s", "fp16/native time"),
                           [(shape_str(r), f"{r['a']['ms']:.3f}", f"{r['a']['tflops']:.1f}", f"{r['b']['ms']:.3f}",
                             f"{r['b']['tflops']:.1f}", f"{r['ratio_a_over_b']:.2f}") for r in rows])
            md.append("")
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        section_error("fp16 vs native bf16", e)

    try:
        rows = gemm_rows(bench["bench-ffma-bf16"], "ffma-bf16")
        if rows:
            md.append("#### ffma route vs native bf16 (cublasGemmEx vs cublasGemmEx_64, one process)")
            route_warning("bench-ffma-bf16")
            md += md_table(("m x n x k", "ffma ms", "ffma TFLOP/s", "native ms", "native TFLOP/s", "of 989 peak",
                            "ffma/native time"),
                           [(shape_str(r), f"{r['a']['ms']:.3f}", f"{r['a']['tflops']:.1f}", f"{r['b']['ms']:.3f}",
                             f"{r['b']['tflops']:.1f}", pct0(r['b']['tflops'] / PEAK_BF16), f"{r['ratio_a_over_b']:.2f}")
                            for r in rows])
            md.append("")
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        section_error("ffma vs native bf16", e)

    try:
        rows = gemm_rows(bench["bench-ffma-sgemm"], "ffma-sgemm")
        if rows:
            md.append(f"#### ffma route vs fp32 sgemm on fp32 data (cost of the casts; goal <= {GOAL_FFMA_OVER_SGEMM} at 4096^3)")
            route_warning("bench-ffma-sgemm")
            md += md_table(("m x n x k", "ffma ms", "sgemm ms", "sgemm TFLOP/s", "ffma/sgemm"),
                           [(shape_str(r), f"{r['a']['ms']:.3f}", f"{r['b']['ms']:.3f}", f"{r['b']['tflops']:.1f}",
                             f"{r['ratio_a_over_b']:.3f}") for r in rows])
            md.append("")
            at = [r for r in rows if (r["m"], r["n"], r["k"]) == (4096, 4096, 4096)]
            if at:
                ratio = at[0]["ratio_a_over_b"]
                headline.append(("ffma/sgemm time at 4096^3", f"{ratio:.3f}",
                                 f"goal <= {GOAL_FFMA_OVER_SGEMM}: {'met' if ratio <= GOAL_FFMA_OVER_SGEMM else 'NOT met'}"
                                 + ("" if status.get("bench-ffma-sgemm:routes") == "PASS" else "; route check FAILED")))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        section_error("ffma vs sgemm", e)

    try:
        casts = [r for r in bench["cast-bench"] if r.get("kind") == "cast"]
        traces = trace_rows(bench["bench-ffma-bf16"] + bench["bench-ffma-sgemm"])
        if casts or traces:
            md.append(f"#### Cast kernels vs device copy of the same bytes (goal >= {pct0(GOAL_CAST_OF_COPY)})")
            if casts:
                md += md_table(("matrix", "exact", "widen GB/s", "narrow GB/s", "copy GB/s", "widen/copy", "narrow/copy"),
                               [(f"{r['rows']}x{r['cols']}", "yes" if r["ok"] else "NO", gbs_str(r["widen_gbs"]),
                                 gbs_str(r["narrow_gbs"]), gbs_str(r["copy_gbs"]), of_copy(r["widen_gbs"], r["copy_gbs"]),
                                 of_copy(r["narrow_gbs"], r["copy_gbs"])) for r in casts])
                big = max(casts, key=lambda r: r["rows"] * r["cols"])
                if big["copy_gbs"]:
                    worst = min(big["widen_of_copy"], big["narrow_of_copy"])
                    headline.append((f"cast kernels / copy ({big['rows']}x{big['cols']})", pct0(worst),
                                     f"goal >= {pct0(GOAL_CAST_OF_COPY)}: {'met' if worst >= GOAL_CAST_OF_COPY else 'NOT met'}"))
            if traces:
                md.append("")
                md.append("In the ffma route (CUPTI trace of the shim's own kernels, `gs_*`):")
                md += md_table(("pair", "m x n x k", "cast kernels us/call", "GB/s", "of copy", "other kernels us/call"),
                               [(r["pair"], shape_str(r), f"{r['shim_cast_us']:.1f}", gbs_str(r["cast_gbs"]),
                                 of_copy(r["cast_gbs"], r.get("copy_gbs")), f"{r['other_us']:.1f}") for r in traces])
            md.append("")
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        section_error("cast kernels", e)

    try:
        for step, what, name in fp8_benches:
            recs = bench[step]
            rows = gemm_rows(recs, "fp8-bf16")
            if not rows:
                continue
            md.append(f"#### fp8 route ({what}, quantization included) vs native bf16")
            route_warning(step)
            md += md_table(("m x n x k", "fp8 ms", "fp8 TFLOP/s", "of 1979 peak", "bf16 ms", "bf16 TFLOP/s",
                            "speedup (bf16 time / fp8 time)"),
                           [(shape_str(r), f"{r['a']['ms']:.3f}", f"{r['a']['tflops']:.0f}", pct0(r['a']['tflops'] / PEAK_FP8),
                             f"{r['b']['ms']:.3f}", f"{r['b']['tflops']:.0f}", f"{1.0 / r['ratio_a_over_b']:.2f}")
                            for r in rows])
            tr = trace_rows(recs)
            if tr:
                md.append("")
                md.append("Quantize kernels (CUPTI trace, `gs_fp8_*` without the GEMM):")
                md += md_table(("m x n x k", "quantize us/call", "GB/s", "of copy", "shim GEMM us/call", "other us/call"),
                               [(shape_str(r), f"{r['shim_cast_us']:.1f}", gbs_str(r["cast_gbs"]),
                                 of_copy(r["cast_gbs"], r.get("copy_gbs")), f"{r['shim_gemm_us']:.1f}",
                                 f"{r['other_us']:.1f}") for r in tr])
            at = [r for r in rows if (r["m"], r["n"], r["k"]) == (8192, 8192, 8192)] or rows[-1:]
            headline.append((f"fp8 {name} speedup at {shape_str(at[0])}", f"{1.0 / at[0]['ratio_a_over_b']:.2f}x",
                             f"{at[0]['a']['tflops']:.0f} TFLOP/s fp8 vs {at[0]['b']['tflops']:.0f} bf16"
                             + ("" if status.get(f"{step}:routes") == "PASS" else "; route check FAILED")))
            md.append("")
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        section_error("fp8 route", e)

    try:
        sm = [r for r in bench["scaled-mm"] if r.get("kind") == "scaled_mm" and "ms" in r]
        if sm:
            md.append("#### torch._scaled_mm (E4M3, tensorwise, bf16 out; quantization in eager PyTorch)")
            md += md_table(("m x n x k", "bf16 TFLOP/s", "fp8 GEMM", "fast accum", "quant+GEMM", "speedup of quant+GEMM",
                            "quant GB/s", "copy GB/s", "SQNR dB"),
                           [(shape_str(r), f"{r['tflops']['bf16']:.0f}", f"{r['tflops']['gemm']:.0f}",
                             f"{r['tflops']['gemm_fast']:.0f}", f"{r['tflops']['quant_gemm']:.0f}",
                             f"{r['speedup_quant_gemm_vs_bf16']:.2f}", gbs_str(r["quant_gbs"]), gbs_str(r["copy_gbs"]),
                             f"{r['sqnr_db']:.1f}") for r in sm])
            md.append("")
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        section_error("torch._scaled_mm", e)

    try:
        if train:
            md.append("#### Training (scripts/train.py, same seed and steps; losses relative to native bf16)")
            md += md_table(("run", "first loss", "final loss (last 10)", "d first", "d final", "step ms", "time vs native"),
                           [(r["run"], f"{r['first']:.4f}", f"{r['final']:.4f}", pct(r.get("d_first", 0.0)),
                             pct(r.get("d_final", 0.0)), f"{r['step_ms']:.2f}", f"{r.get('time_ratio', 0.0):.3f}")
                            for r in train["runs"]])
            for c in train["checks"]:
                md.append(f"- {'PASS' if c['ok'] else 'FAIL'} {c['check']}: {c['detail']}")
            s = train.get("fp8_sites")
            if s:
                md.append(f"- fp8 call sites per step: {per_step_str(s['fp8_sites_per_step'])}; fp8 calls per step: "
                          f"{per_step_str(s['fp8_calls_per_step'])} ({s['n_linear']} nn.Linear modules of "
                          f"{s['distinct_linear_shapes']} distinct shapes: 3 GEMMs per module is "
                          f"{s['calls_expected_per_step']} calls; sites are keyed on caller and shape, so 3 per distinct "
                          f"shape, {s['sites_expected_if_per_shape']}, is what one site per GEMM of each shape gives)")
            for r in train["runs"]:
                if r["run"] in ("ffma", "fp16", "fp8"):
                    headline.append((f"train {r['run']} vs native", f"final {pct(r['d_final'])}",
                                     f"step time x{r['time_ratio']:.2f}"))
            md.append("")
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        section_error("training", e)

    failed = [s for s in steps if s["status"] == "FAIL"]
    with open(os.path.join(results, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(results, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"env": env, "steps": steps, "headline": headline, "train": train}, f, indent=1)

    # The short table, last on the screen.
    print()
    print(f"gpu-check {env.get('date', '')}: {env.get('gpu') or device.get('name', '?')}, driver {env.get('driver', '?')}")
    width = max([len(s["step"]) for s in steps] + [len(h[0]) for h in headline] + [10])
    for s in steps:
        print(f"  {s['step']:<{width}}  {s['status']:<4} {s['seconds']:>4}s  {s['note'][:90]}")
    # Over the CPU stand-in (its devices are named "Standin GPU sm_XY") the
    # figures check the script, not a GPU: no goal is judged on them.
    standin = str(env.get("gpu") or device.get("name", "")).startswith("Standin")
    for name, value, detail in headline:
        if standin and value != "error":
            detail = "stand-in figure (CPU emulation): no goal is judged"
        print(f"  {name:<{width}}  {value:<10} {detail}")
    print(f"results: {os.path.join(results, 'results.md')} (markdown), logs in {os.path.join(results, 'logs')}")
    passed = sum(s["status"] == "PASS" for s in steps)
    skipped = sum(s["status"] == "SKIP" for s in steps)
    print(f"{passed} passed, {len(failed)} failed, {skipped} skipped")
    return 1 if failed else 0


HYBRID_E5M2_B = "e4m3 x e5m2 (B: gradient)"


def hybrid_floors(out_path, log_path, recipe):
    """torchao's 25 dB floor for fp8 GEMMs (test/float8/test_base.py), 18 dB
    for its Linear outputs, here for a GEMM with an E5M2 operand (one
    mantissa bit less); tests/integration/test_fp8_recipes.py holds the
    same floors over the stand-in."""
    gemms = []
    with open(out_path) as f:
        for line in f:
            words = line.split()
            if words[:1] == ["gemm"]:
                gemms.append(dict(w.split("=", 1) for w in words[1:] if "=" in w))
    with open(log_path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    recs = [r for r in recs if "reason" in r]
    bad = 0
    for g in gemms:
        floor = 18.0 if g.get("kind") in ("dgrad", "wgrad") else 25.0
        if g.get("status") != "0" or float(g.get("sqnr", "-1")) < floor:
            print("FAIL below floor", g)
            bad += 1
    # The log's records come in the calls' order (one thread at a time).
    wrong = [(g, r["reason"]) for g, r in zip(gemms, recs)
             if (HYBRID_E5M2_B in r["reason"]) != (g.get("kind") in ("dgrad", "wgrad"))]
    for w in wrong:
        print("FAIL formats", *w)
    other = [r.get("recipe") for r in recs if r.get("recipe") != recipe]
    if other:
        print(f"FAIL recipe: {len(other)} calls ran {sorted(set(map(str, other)))}, not {recipe}")
    backward = sum(g.get("kind") in ("dgrad", "wgrad") for g in gemms)
    e5m2_b = sum(HYBRID_E5M2_B in r["reason"] for r in recs)
    ok = gemms and not bad and not wrong and not other and len(recs) == len(gemms)
    print(f"summary hybrid gemms={len(gemms)} logged={len(recs)} below_floor={bad} "
          f"backward={backward} e5m2_b={e5m2_b}")
    return 0 if ok else 1


def main(argv):
    if len(argv) == 5 and argv[1] == "hybrid-floors":
        return hybrid_floors(argv[2], argv[3], argv[4])
    if len(argv) != 3 or argv[1] not in ("train-compare", "report"):
        print(__doc__, file=sys.stderr)
        return 2
    return train_compare(argv[2]) if argv[1] == "train-compare" else report(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
