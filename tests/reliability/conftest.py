"""Fixtures of the reliability scenarios: the sandbox as a `World`, a playbook `Runner`, and a
known starting point for each scenario (`ready`).

The scenarios share the session's sandbox with sandbox/tests. Each starts from an adopted
cluster with nothing left over (no fault, every GPU node reporting, the DaemonSet as the
inventory renders it, no unrevoked token of this cluster, no join-token Secret, no lock), which
`ready` arranges with an ordinary adopt-cluster.yml run when needed; after the scenario it
clears the faults, brings a stopped API server back and, when the API server restarted, restarts
the controller manager and the scheduler (their informers would lag it). When the package ends, the cluster is
put back as a fresh sandbox has it (no bcd namespace, no node known to the control plane), for
the tests that follow.
"""

from __future__ import annotations

import time

import pytest

from tests.reliability.harness import (
    EXTRA_NODE_LABEL,
    INVENTORY_IMAGE,
    Runner,
    World,
    apiserver_up,
    baseline_ok,
    controllers_afresh,
    daemonset_image,
)
from tests.sandbox_fixtures import restore_baseline


@pytest.fixture(scope="package")
def world(sandbox):
    w = World(sandbox)
    w.admin.clear_faults()
    yield w
    _fresh(w)


def _fresh(w: World) -> None:
    """Back to a fresh sandbox for the tests after this package: no faults, no extra Node, no
    bcd namespace, no node known to the control plane, no unrevoked token."""
    for node in w.core.list_node(label_selector=EXTRA_NODE_LABEL).items:
        w.core.delete_node(node.metadata.name)
    w.sandbox.unadopt(w.cp, w.vars["bcd_tenant"], w.vars["bcd_pool"], namespace=w.namespace, admin=w.admin)


def _ready(sandbox, world, image: bool):
    from pathlib import Path

    from sandbox import cluster, proc

    if not cluster.status(sandbox.dir)[0]:
        apiserver_up(sandbox)
    apiserver = proc.pid_of(Path(sandbox.dir), "kube-apiserver")
    # whatever an earlier scenario left (faults, Nodes it added, held statuses, taints, tokens, the
    # lock): gone, so a scenario's result does not depend on the ones before it
    restore_baseline(sandbox, world.cp, world.vars)
    if world.namespace_exists() and world.all_joined():
        # a pod an earlier scenario left crash-looping backs off for a while after its fault goes:
        # a new one (the DaemonSet's, on a node the control plane knows) is Ready in seconds;
        # baseline_ok below says if not, and adopt-cluster.yml then sets it up
        stuck = list(filter(None, world.unready_pods().values()))
        for pod in stuck:
            world.core.delete_namespaced_pod(pod, world.namespace, grace_period_seconds=0)
        deadline = time.monotonic() + 60
        while stuck and world.unready_pods() and time.monotonic() < deadline:
            time.sleep(1)
    ok, why = baseline_ok(world, image=image)
    if not ok:
        if daemonset_image(world) not in (None, INVENTORY_IMAGE):
            # adopt-cluster.yml refuses to change the image of a running DaemonSet (only
            # rollout.yml does): start over from an unadopted cluster
            world.sandbox.unadopt(world.cp, world.vars["bcd_tenant"], world.vars["bcd_pool"], namespace=world.namespace,
                                  admin=world.admin)
        run = Runner().run("adopt-cluster.yml")
        assert run.returncode == 0, f"setting up the scenario ({why}): adopt-cluster.yml failed:\n{run.tail()}"
        ok, why = baseline_ok(world, image=image)
        assert ok, f"setting up the scenario: {why}"
    world.admin.reset_counters()
    yield world
    world.admin.clear_faults()
    if not cluster.status(sandbox.dir)[0]:
        apiserver_up(sandbox)
    if proc.pid_of(Path(sandbox.dir), "kube-apiserver") != apiserver:
        # the scenario restarted the API server: the next one starts with controllers in step
        controllers_afresh(sandbox)


@pytest.fixture
def ready(sandbox, world):
    """An adopted cluster with nothing left over (``sandbox.baseline.restore``, then adopt-cluster.yml
    when it is not adopted as the inventory says); afterwards, no faults and the API server up."""
    yield from _ready(sandbox, world, image=True)


@pytest.fixture
def ready_any_image(sandbox, world):
    """As ``ready``, but the DaemonSet may run another image (rollout.yml scenarios)."""
    yield from _ready(sandbox, world, image=False)


@pytest.fixture
def runner(reliability):
    return Runner(reliability)
