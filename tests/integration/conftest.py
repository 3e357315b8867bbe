"""Playbooks against the sandbox: the fixtures of the test bed (cp, cpvars, adopted, unadopted, ...)
come from tests/sandbox_fixtures.py, a plugin tests/conftest.py loads."""
