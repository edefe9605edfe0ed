#!/usr/bin/env python3
"""The current recipe's plain fp8 kernels (gs_fp8_quantize_cur_* without the
_stats suffix, the fast gs_fp8_quantize_cur_v_* and gs_fp8_amax_part_v_*,
fp8_kernels.h) carry no statistics counting, and their bf16/fp16 builds do
not spill on sm_89 and sm_90 (ptxas -v: 0 bytes spill stores and loads);
the fast ones must be present. The
counting code (fp8_stats.h) is the only user of 64-bit global atomics in
these files (atom.global.add.u64, the per-block flush), so a plain kernel
holding one has counting in it. Run by kernels-ptx-check.
Usage: check_quantize_ptx.py PTXAS PTX...  Exits 1 on a finding."""
import re
import subprocess
import sys

NO_SPILL = re.compile(r"^gs_fp8_(quantize_cur|quantize_cur_v|amax_part_v)_(bf16|f16)(_sm89)?$")
PLAIN = re.compile(r"^gs_fp8_(quantize_cur|amax_part_v)_")
FAST = {f"gs_fp8_{k}_{t}_sm89" for k in ("quantize_cur_v", "amax_part_v") for t in ("bf16", "f16")}
ARCHS = ("sm_89", "sm_90")


def entries(ptx):
    """{name: body} of each .entry in the PTX text."""
    out = {}
    for m in re.finditer(r"\.entry (\w+)\((.*?)\n\}", ptx, re.S):
        out[m.group(1)] = m.group(2)
    return out


def spills(ptxas, path, arch):
    """{name: (store bytes, load bytes)} from ptxas -v."""
    r = subprocess.run([ptxas, "-v", f"-arch={arch}", "-o", "/dev/null", path], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"check_quantize_ptx: FAILED: {ptxas} -arch={arch} {path}: {r.stderr.strip()}")
    out, name = {}, None
    for line in r.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            name = m.group(1)
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            out[name] = (int(m.group(1)), int(m.group(2)))
    return out


def main(argv):
    ptxas, paths = argv[1], argv[2:]
    bad, checked, seen = 0, 0, set()
    for path in paths:
        with open(path) as f:
            ptx = f.read()
        for name, body in entries(ptx).items():
            if not PLAIN.match(name) or name.endswith("_stats"):
                continue
            if "atom.global.add.u64" in body:
                print(f"check_quantize_ptx: FAILED: {name} ({path}) is a plain kernel but holds the statistics "
                      "flush (atom.global.add.u64): counting code is in it")
                bad = 1
        for arch in ARCHS:
            for name, (st, ld) in spills(ptxas, path, arch).items():
                if not NO_SPILL.match(name):
                    continue
                checked += 1
                seen.add(name)
                if st or ld:
                    print(f"check_quantize_ptx: FAILED: {name} spills on {arch}: {st} bytes stored, {ld} loaded "
                          "(plain kernels must not)")
                    bad = 1
    if not checked:
        print("check_quantize_ptx: FAILED: no current-recipe quantize kernel found to check")
        bad = 1
    for name in sorted(FAST - seen):
        print(f"check_quantize_ptx: FAILED: the fast kernel {name} was not found to check")
        bad = 1
    if not bad:
        print(f"check_quantize_ptx: the current recipe's plain kernels (general and fast) hold no counting; "
              f"{checked} bf16/fp16 builds of them ({', '.join(ARCHS)}) spill nothing")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv))
