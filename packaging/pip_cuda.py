#!/usr/bin/env python3
"""Find the CUDA headers and ptxas that PyPI's NVIDIA packages installed
into this interpreter's environment, for building gemmshim without the
CUDA toolkit (docs/build-from-pip.md). Run it with the environment's own
interpreter (the one PyTorch is installed in):

    pip_cuda.py include [--cuda 12|13]   the folders to put on the include path
    pip_cuda.py ptxas   [--cuda 12|13]   ptxas, for the PTX check

Which package ships what (read from the wheels themselves):

    CUDA 12  nvidia-cuda-runtime-cu12  cuda.h, library_types.h  nvidia/cuda_runtime/include
             nvidia-cublas-cu12        cublas_api.h, cublasLt.h nvidia/cublas/include
             nvidia-cuda-nvcc-cu12     ptxas                    nvidia/cuda_nvcc/bin
    CUDA 13  nvidia-cuda-runtime       cuda.h, library_types.h  nvidia/cu13/include
             nvidia-cublas             cublas_api.h, cublasLt.h nvidia/cu13/include
             nvidia-cuda-nvcc          ptxas                    nvidia/cu13/bin

PyTorch's CUDA wheels depend on the runtime and cuBLAS packages already;
only the nvcc package (for ptxas) is extra. Prints one answer on stdout, or
says on stderr what is missing and which package brings it, and exits 1.
"""
import argparse
import importlib.util
import sys
from pathlib import Path

HEADERS = ("cuda.h", "library_types.h", "cublas_api.h", "cublasLt.h")
LAYOUT = {
    "12": {"dirs": ("cuda_runtime/include", "cublas/include"), "ptxas": "cuda_nvcc/bin/ptxas",
           "packages": {"cuda.h": "nvidia-cuda-runtime-cu12", "library_types.h": "nvidia-cuda-runtime-cu12",
                        "cublas_api.h": "nvidia-cublas-cu12", "cublasLt.h": "nvidia-cublas-cu12",
                        "ptxas": "nvidia-cuda-nvcc-cu12"}},
    "13": {"dirs": ("cu13/include",), "ptxas": "cu13/bin/ptxas",
           "packages": {"cuda.h": "nvidia-cuda-runtime", "library_types.h": "nvidia-cuda-runtime",
                        "cublas_api.h": "nvidia-cublas", "cublasLt.h": "nvidia-cublas",
                        "ptxas": "nvidia-cuda-nvcc"}},
}


def nvidia_roots():
    """The folders of the `nvidia` namespace package (one per site dir)."""
    spec = importlib.util.find_spec("nvidia")
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def find(version):
    """{header or 'ptxas': path} for one CUDA major version."""
    found = {}
    for root in nvidia_roots():
        for d in LAYOUT[version]["dirs"]:
            for h in HEADERS:
                if h not in found and (root / d / h).is_file():
                    found[h] = root / d / h
        p = root / LAYOUT[version]["ptxas"]
        if "ptxas" not in found and p.is_file():
            found["ptxas"] = p
    return found


def choose(wanted):
    """The CUDA version to use: the one asked for, or the only one whose
    four headers are all there."""
    if wanted:
        return wanted
    complete = [v for v in LAYOUT if all(h in find(v) for h in HEADERS)]
    if len(complete) == 1:
        return complete[0]
    if len(complete) > 1:
        sys.exit("pip_cuda: both CUDA 12 and 13 headers are installed here; expected --cuda 12 or --cuda 13 "
                 "(make CUDA_FROM_PIP_VERSION=12 or 13)")
    return "12" if any(find("12")) or not any(find("13")) else "13"


def missing_message(version, missing):
    pkgs = sorted({LAYOUT[version]["packages"][m] for m in missing})
    return (f"pip_cuda: {', '.join(missing)} not found in {sys.prefix} for CUDA {version}; "
            f"expected from {' and '.join(pkgs)}: {Path(sys.executable).name} -m pip install {' '.join(pkgs)}")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("include", "ptxas"))
    ap.add_argument("--cuda", choices=sorted(LAYOUT))
    args = ap.parse_args(argv)
    version = choose(args.cuda)
    found = find(version)
    if args.what == "include":
        missing = [h for h in HEADERS if h not in found]
        if missing:
            print(missing_message(version, missing), file=sys.stderr)
            return 1
        dirs = []
        for h in HEADERS:
            if found[h].parent not in dirs:
                dirs.append(found[h].parent)
        print(" ".join(str(d) for d in dirs))
        return 0
    if "ptxas" not in found:
        print(missing_message(version, ["ptxas"]), file=sys.stderr)
        return 1
    print(found["ptxas"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
