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
    return _client(cpvars)


def _client(cpvars):
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import Client

    return Client(cpvars["bcd_control_plane_url"], api_key=cpvars["bcd_api_key"], ca_file=cpvars["bcd_control_plane_ca_file"])


# The sandbox as the ``adopted`` fixture last left it, per sandbox directory: what a test that
# changes bcd's objects changes (the DaemonSet's generation, the ConfigMap's and the
# ClusterPolicy's versions), so the next test's fixture finds out without another adoption.
_ADOPTED: dict[str, dict] = {}


def _inventory_image() -> str:
    return yaml.safe_load((ROOT / "inventories" / "sandbox" / "host_vars" / "sandbox.yml").read_text())["bcd_image"]


def restore_baseline(sandbox, cp, cpvars) -> list[str]:
    """``sandbox.baseline.restore`` on the session's sandbox, printing what it put back (and
    forgetting an adoption it may have disturbed); the lines."""
    from sandbox import baseline

    done = baseline.restore(sandbox.dir, cp=cp, tenant=cpvars["bcd_tenant"], pool=cpvars["bcd_pool"])
    if done:
        _ADOPTED.pop(str(sandbox.dir), None)
        print(f"sandbox baseline: {'; '.join(done)}")
    return done


@pytest.fixture(scope="module", autouse=True)
def _sandbox_baseline(request):
    """Each module whose tests use the session's sandbox starts from it as ``up`` made it, whatever
    ran before (``sandbox.baseline.restore``: faults, nodes, leftover objects; not bcd's own
    objects, which ``adopted`` and ``unadopted`` see to)."""
    items = [i for i in request.session.items if getattr(i, "module", None) is request.module]
    if not any("sandbox" in getattr(i, "fixturenames", ()) for i in items):
        yield
        return
    # the session's control plane, not a module's own emulator (some modules start one as ``cp``)
    sandbox = request.getfixturevalue("sandbox")
    cpvars = sandbox.control_plane_vars()
    restore_baseline(sandbox, _client(cpvars), cpvars)
    yield


def _fingerprint(sandbox) -> dict:
    """What a change to bcd's objects or the ClusterPolicy changes: the DaemonSet's generation, the
    ConfigMap's, the Namespace's and the ClusterPolicy's generation or version."""
    from kubernetes import client

    with sandbox.api_client() as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        policy = client.CustomObjectsApi(api).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies",
                                                                        "cluster-policy")
        return {"DaemonSet": apps.read_namespaced_daemon_set("bcd", "bcd-system").metadata.generation,
                "ConfigMap": core.read_namespaced_config_map("bcd-config", "bcd-system").metadata.resource_version,
                "Namespace": core.read_namespace("bcd-system").metadata.resource_version,
                "ClusterPolicy": (policy["metadata"]["generation"], policy["metadata"].get("annotations"))}


def _fleet_drift(sandbox, cp, cpvars, generation: int) -> list[str]:
    """Why the adopted fleet is not all there: a GPU node with no Ready bcd pod of the DaemonSet's
    current template, or that does not report ``adopting`` to the control plane."""
    from kubernetes import client

    with sandbox.api_client() as api:
        pods = client.CoreV1Api(api).list_namespaced_pod("bcd-system", label_selector="app.kubernetes.io/name=bcd").items
    ready = {p.spec.node_name for p in pods if not p.metadata.deletion_timestamp
             and (p.metadata.labels or {}).get("pod-template-generation") == str(generation)
             and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])}
    states = {n["hostname"]: n["state"] for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}
    gpu = sandbox.gpu_node_names()
    return ([f"no Ready bcd pod on {n}" for n in gpu if n not in ready]
            + [f"{n} reports {states.get(n, 'nothing')}" for n in gpu if states.get(n) != "adopting"])


def ensure_adopted(sandbox, cp, cpvars) -> None:
    """The ``adopted`` fixture's work, for a fixture of a wider scope (see ``adopted``)."""
    from sandbox import baseline
    from tests.helpers import run_playbook

    key = str(sandbox.dir)
    restore_baseline(sandbox, cp, cpvars)
    drift = baseline.adoption_drift(sandbox.dir, _inventory_image())
    if not drift and key in _ADOPTED:
        now = _fingerprint(sandbox)
        if now == _ADOPTED[key] and not _fleet_drift(sandbox, cp, cpvars, now["DaemonSet"]):
            return
    _ADOPTED.pop(key, None)
    if drift:
        print(f"sandbox: unadopting first: {'; '.join(drift)}")
        sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    after = baseline.adoption_drift(sandbox.dir, _inventory_image())
    assert not after, f"adopt-cluster.yml left bcd's objects with: {after}"
    _ADOPTED[key] = _fingerprint(sandbox)


def ensure_unadopted(sandbox, cp, cpvars) -> None:
    """The ``unadopted`` fixture's work, for a fixture of a wider scope (see ``unadopted``)."""
    from sandbox import baseline

    _ADOPTED.pop(str(sandbox.dir), None)
    restore_baseline(sandbox, cp, cpvars)
    sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
    baseline.drop_bcd_labels(sandbox.dir)
    baseline.reset_cluster_policy(sandbox.dir)


@pytest.fixture
def adopted(sandbox, cp, cpvars):
    """An adopted cluster, as bcd-ansible alone leaves it (``pytest.mark.usefixtures("adopted")``):
    the inventory's image, bcd-ansible the only field manager of bcd's objects, every GPU node
    reporting ``adopting``, nothing else left over (``sandbox.baseline``). Checked before each test,
    adopted again only when a test changed any of that: a cluster with another image, another
    field manager or a client-side apply is unadopted first (adopt-cluster.yml refuses to change
    a running DaemonSet's image, and takes over only the fields that differ)."""
    ensure_adopted(sandbox, cp, cpvars)


@pytest.fixture
def unadopted(sandbox, cp, cpvars):
    """A cluster not adopted yet, whatever ran before (``pytest.mark.usefixtures("unadopted")``):
    nothing left over (``sandbox.baseline``), no unrevoked token, no bcd namespace (waited until
    gone), no node known to the control plane nor labelled ``bcd.dev/*``, the ClusterPolicy as the
    GPU operator's chart creates it."""
    ensure_unadopted(sandbox, cp, cpvars)
