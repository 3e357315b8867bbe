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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """A failed run names the order it ran in (pytest-randomly's seed, picked by the commit in
    ``make test``), so the failure can be repeated in that order."""
    seed = getattr(config.option, "randomly_seed", None)
    if exitstatus not in (0, 5) and isinstance(seed, int) and config.getoption("randomly_reorganize", True):
        terminalreporter.write_line(f"test order: seed {seed}; `TEST_SEED={seed} make test-...` (or pytest "
                                    f"-p randomly --randomly-seed={seed}) runs the tests in this order again")
