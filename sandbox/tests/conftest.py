"""The sandbox's own tests: its cluster, the control-plane emulator, the kind test bed.

They run from a bcd-ansible checkout (``make test`` collects them with tests/, by the same
markers) and share the session's sandbox and cluster fixtures with the collection's tests
(tests/sandbox_fixtures.py).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
pytest_plugins = ["tests.sandbox_fixtures"]
# The kind test bed's directory as `python -m sandbox kind` defaults it in a checkout, for the
# tests that call sandbox.kind in process.
os.environ.setdefault("KIND_DIR", str(ROOT / ".kind"))
