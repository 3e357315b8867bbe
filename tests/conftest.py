"""Shared pytest set-up: make the collection importable as Ansible imports it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `make setup` links this checkout as collections/ansible_collections/bcd/kubernetes, so the
# collection's Python imports (ansible_collections.bcd.kubernetes...) resolve to these files.
COLLECTIONS = ROOT / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The reliability report: the `reliability` fixture, and docs/reliability.md at the end; the
# session's sandbox and the cluster fixtures, shared with sandbox/tests (tests/sandbox_fixtures.py).
pytest_plugins = ["tests.reliability.plugin", "tests.sandbox_fixtures"]
