"""python -m gemmshim.report: the same as `gemmshim report`.

For a checkout without the launcher installed (PYTHONPATH=python), and for
scripts that run the report in a given interpreter (sys.executable -m).
"""
import sys

from .cli import run

sys.exit(run())
