"""Packaging tests reuse the integration harness (build locations, the
stand-in environment)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
