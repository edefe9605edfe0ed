"""python -m gemmshim.report: the same as `gemmshim report`."""
import sys

from .cli import run

sys.exit(run())
