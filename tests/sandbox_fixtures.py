"""The session's sandbox and a cluster in a known state, as pytest fixtures for every test that
needs them (tests/integration, tests/reliability, sandbox/tests): ``sandbox``, ``cpvars``, ``cp``,
``adopted`` and ``unadopted``.

A plugin, not a conftest, so the sandbox's own tests (sandbox/tests/conftest.py) and the
collection's (tests/conftest.py) share one session-scoped ``sandbox``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# The collection's Python imports (ansible_collections.bcd.kubernetes...) as tests/conftest.py
# sets them up, for a run of sandbox/tests alone.
if str(ROOT / "collections") not in sys.path:
    sys.path.insert(0, str(ROOT / "collections"))


@pytest.fixture(scope="session")
def sandbox(request):
    """The session's sandbox (``sandbox.api.Sandbox``): ``$SANDBOX_DIR``, else ``<repo>/.sandbox-test``;
    in a pytest-xdist worker (``make test`` runs the sandbox tests in two) that path with the
    worker's name appended (``.sandbox-test-gw0``), so each worker has a cluster of its own.

    Brought up when it is not up (``SANDBOX_NODES`` GPU nodes, default 3; a sandbox with a stopped
    component is repaired) and brought down at the end only when this fixture created it. While it
    runs, ``SANDBOX_DIR`` points at it, so subprocesses (``python -m sandbox``, ansible-playbook
    with inventories/sandbox) find it.
    """
    from sandbox.api import Sandbox

    sdir = Path(os.environ.get("SANDBOX_DIR") or ROOT / ".sandbox-test")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # tests change the whole cluster (adopt, unadopt, faults): workers never share one
        sdir = sdir.with_name(f"{sdir.name}-{worker}")
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


@pytest.fixture(scope="module")
def cpvars(sandbox):
    """The sandbox's control-plane variables (bcd_control_plane_url, bcd_api_key, ...)."""
    return sandbox.control_plane_vars()


@pytest.fixture(scope="module")
def cp(cpvars):
    """A control-plane client with the sandbox's API key."""
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import Client

    return Client(cpvars["bcd_control_plane_url"], api_key=cpvars["bcd_api_key"], ca_file=cpvars["bcd_control_plane_ca_file"])


@pytest.fixture(scope="module")
def adopted(sandbox, cp, cpvars):
    """An adopted cluster on the inventory's digest, every node reporting, no fault set
    (``pytest.mark.usefixtures("adopted")``). A cluster an earlier test rolled to another image
    is unadopted first: adopt-cluster.yml refuses to change the image of a running DaemonSet."""
    from kubernetes import client

    from sandbox.control_plane.admin import Admin
    from tests.helpers import run_playbook

    Admin.for_sandbox(sandbox.dir).clear_faults()
    inventory = yaml.safe_load((ROOT / "inventories" / "sandbox" / "host_vars" / "sandbox.yml").read_text())
    with sandbox.api_client() as api:
        found = client.AppsV1Api(api).list_namespaced_daemon_set("bcd-system", field_selector="metadata.name=bcd").items
    if found and any(c.image != inventory["bcd_image"] for c in found[0].spec.template.spec.containers):
        sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]


@pytest.fixture(scope="module")
def unadopted(sandbox, cp, cpvars):
    """A cluster not adopted yet, whatever ran before (``pytest.mark.usefixtures("unadopted")``):
    no fault set, no unrevoked token, no bcd namespace (waited until gone), no node known to the
    control plane."""
    sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
