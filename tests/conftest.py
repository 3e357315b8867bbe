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

# The reliability report: the `reliability` fixture, and docs/reliability.md at the end.
pytest_plugins = ["tests.reliability.plugin"]


# --- sandbox fixture -------------------------------------------------------------------
import os  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def sandbox(request):
    """The session's sandbox (``sandbox.api.Sandbox``): ``$SANDBOX_DIR``, else ``<repo>/.sandbox-test``.

    Brought up when it is not up (``SANDBOX_NODES`` GPU nodes, default 3; a sandbox with a stopped
    component is repaired) and brought down at the end only when this fixture created it. While it
    runs, ``SANDBOX_DIR`` points at it, so subprocesses (``python -m sandbox``, ansible-playbook
    with inventories/sandbox) find it.
    """
    from sandbox.api import Sandbox

    sdir = Path(os.environ.get("SANDBOX_DIR") or ROOT / ".sandbox-test")
    sb = Sandbox(sdir)
    created = sb.state_or_none() is None
    if created or not sb.is_up():
        # Shown live: a cold cache builds the binaries first (minutes, with progress).
        with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
            try:
                sb.up()
            except BaseException:
                if created:
                    sb.down()
                raise
    previous = os.environ.get("SANDBOX_DIR")
    os.environ["SANDBOX_DIR"] = str(sb.dir)
    try:
        yield sb
    finally:
        if previous is None:
            os.environ.pop("SANDBOX_DIR", None)
        else:
            os.environ["SANDBOX_DIR"] = previous
        if created:
            with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
                sb.down()
