"""The launcher's tests reuse the integration harness and its fixtures
(clients, stand-in, shim), loaded from tests/integration."""
import importlib.util
import sys
from pathlib import Path

_INTEG = Path(__file__).resolve().parents[1] / "integration"
sys.path.insert(0, str(_INTEG))

_spec = importlib.util.spec_from_file_location("integration_conftest", _INTEG / "conftest.py")
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
clients, standin, shim = _fixtures.clients, _fixtures.standin, _fixtures.shim
