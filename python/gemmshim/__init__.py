"""gemmshim: cuBLAS GEMM routing for PyTorch and other frameworks, as an
LD_PRELOAD library (libgemmshim.so) started by the `gemmshim` launcher.

    gemmshim --mode fp8 --log run-%r.jsonl -- python train.py

In a notebook, or wherever the process is already running, call
`gemmshim.enable(mode=..., log=...)` before `import torch`.
`library_path()` gives the installed library, for those who set
LD_PRELOAD themselves.
"""
from .cli import library_path, launcher_path  # noqa: F401
from .enable import EnableError, enable  # noqa: F401

__all__ = ["library_path", "launcher_path", "enable", "EnableError"]
