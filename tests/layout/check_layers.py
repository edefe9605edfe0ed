"""The library's layering, checked on its sources and objects
(docs/architecture.md says why):

- a module is a source file with its header (work.c + work.h); module A
  depends on B when A includes B's header or calls (links to) a symbol B
  defines, read from the objects with nm;
- no cycle among the library's modules;
- shim/base/ depends on nothing above it; kernels/ on nothing but itself
  and shim/base/; policy/ on nothing but itself;
- no source file of the library or the launcher over 1,000 lines.

Usage: check_layers.py BUILD_DIR   (the objects under BUILD_DIR/obj)
Exit 0 when every rule holds, else 1 with one line per violation.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB_DIRS = ["shim", "shim/base", "shim/routes", "policy", "kernels"]
MAX_LINES = 1000
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(path):
    """'shim/work.h' -> 'shim/work'; the .S of a module joins it."""
    return os.path.splitext(path)[0]


def library_files():
    out = []
    for d in LIB_DIRS:
        for name in sorted(os.listdir(os.path.join(ROOT, d))):
            if name.endswith((".c", ".h", ".S")) and not (d == "kernels" and not name.endswith(("_launch.c", ".h"))):
                out.append(f"{d}/{name}")
    return out


def include_edges(files):
    lib = set(files)
    edges = set()
    for f in files:
        text = open(os.path.join(ROOT, f), encoding="utf-8").read()
        for inc in INCLUDE.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            if target in lib and module_of(target) != module_of(f):
                edges.add((module_of(f), module_of(target), f"includes {target}"))
    return edges


def nm(obj, *flags):
    r = subprocess.run(["nm", *flags, obj], capture_output=True, text=True, check=True)
    return [line.split()[-1] for line in r.stdout.splitlines() if line.strip()]


def call_edges(build, files):
    objs = {}
    for f in files:
        if f.endswith((".c", ".S")):
            o = os.path.join(build, "obj", os.path.splitext(f)[0] + ".o")
            if not os.path.exists(o):
                sys.exit(f"check_layers: {o} is missing; build the library first")
            objs[module_of(f)] = o
    defined = {}
    for mod, o in objs.items():
        for sym in nm(o, "-g", "--defined-only"):
            defined[sym] = mod
    edges = set()
    for mod, o in objs.items():
        for sym in nm(o, "-u"):
            target = defined.get(sym)
            if target and target != mod:
                edges.add((mod, target, f"uses {sym}"))
    return edges


def find_cycle(graph):
    """One cycle as a list of modules, or None (iterative DFS)."""
    state = {}
    for start in sorted(graph):
        if start in state:
            continue
        stack = [(start, iter(sorted(graph.get(start, ()))))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
                path.append(nxt)
    return None


def allowed(src, dst):
    """May module src depend on module dst?"""
    def layer(m):
        if m.startswith("shim/base/"):
            return "base"
        if m.startswith("kernels/"):
            return "kernels"
        if m.startswith("policy/"):
            return "policy"
        return "upper"
    ls, ld = layer(src), layer(dst)
    if ls == "base":
        return ld == "base"
    if ls == "kernels":
        return ld in ("kernels", "base")
    if ls == "policy":
        return ld == "policy"
    return True


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    build = argv[1]
    files = library_files()
    edges = include_edges(files) | call_edges(build, files)
    problems = []
    graph = {}
    for src, dst, why in sorted(edges):
        graph.setdefault(src, set()).add(dst)
        if not allowed(src, dst):
            problems.append(f"{src} -> {dst} ({why}): a lower layer depends on a higher one")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("cycle: " + " -> ".join(cycle))
    for d in LIB_DIRS + ["launcher"]:
        for name in sorted(os.listdir(os.path.join(ROOT, d))):
            if name.endswith((".c", ".h", ".S", ".cu")):
                n = sum(1 for _ in open(os.path.join(ROOT, d, name), encoding="utf-8"))
                if n > MAX_LINES:
                    problems.append(f"{d}/{name}: {n} lines, over {MAX_LINES}")
    for p in problems:
        print(f"check_layers: {p}")
    print(f"check_layers: {len(graph)} modules, {len(edges)} edges, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
