#!/usr/bin/env python3
"""The routing-log summary, now `gemmshim report` (python/gemmshim/report/):
same arguments, same output. Kept so existing command lines keep working."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))

from gemmshim.report import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run())
