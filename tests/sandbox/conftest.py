"""Fixtures shared by the sandbox tests (the session's ``sandbox`` fixture is in tests/conftest.py)."""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import Client

from tests.helpers import run_playbook


@pytest.fixture(scope="module")
def cpvars(sandbox):
    """The sandbox's control-plane variables (bcd_control_plane_url, bcd_api_key, ...)."""
    return sandbox.control_plane_vars()


@pytest.fixture(scope="module")
def cp(cpvars):
    """A control-plane client with the sandbox's API key."""
    return Client(cpvars["bcd_control_plane_url"], api_key=cpvars["bcd_api_key"], ca_file=cpvars["bcd_control_plane_ca_file"])


@pytest.fixture(scope="module")
def adopted(sandbox):
    """An adopted cluster on the inventory's digest, every node reporting, no fault set
    (``pytest.mark.usefixtures("adopted")``)."""
    from sandbox.control_plane.admin import Admin

    Admin.for_sandbox(sandbox.dir).clear_faults()
    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]


@pytest.fixture(scope="module")
def unadopted(sandbox, cp, cpvars):
    """A cluster not adopted yet, whatever ran before (``pytest.mark.usefixtures("unadopted")``):
    no fault set, no unrevoked token, no bcd namespace (waited until gone), no node known to the
    control plane."""
    sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
