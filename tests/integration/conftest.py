"""Playbooks against the sandbox: the fixtures of the test bed (tests/sandbox/conftest.py)."""

from tests.sandbox.conftest import *  # noqa: F403 - its fixtures (cp, cpvars, adopted, unadopted, ...)
