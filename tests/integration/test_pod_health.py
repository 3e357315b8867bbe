"""A node's health is both sides: its bcd pod as the cluster shows it and the control plane's state.

On an adopted sandbox, one GPU node's bcd pod crash-loops (the emulator's fault ``crashLoop``:
the bcd container exits 1 with a termination message, then waits in CrashLoopBackOff, restarting
with back-off, as a kubelet shows it) while the control plane still counts the node ``adopting``
(its offline grace, held long by the fault ``offlineGraceSeconds``, as a production control
plane's minutes are): audit.yml, adopt-cluster.yml, the DaemonSet wait and the node wait each
fail naming the pod, its state and bcd's last message, and no token is minted for the node,
within its grace or once it is ``offline``.
"""

from __future__ import annotations

import time

import pytest
import yaml
from kubernetes import client as k8s

from tests.helpers import crash_shown, module_config, run_module, run_playbook

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

NS = "bcd-system"
MESSAGE = "panic: nvml: driver/library version mismatch"


def bcd_pod(sandbox, node: str):
    with sandbox.api_client() as api:
        pods = k8s.CoreV1Api(api).list_namespaced_pod(NS, label_selector="app.kubernetes.io/name=bcd",
                                                      field_selector=f"spec.nodeName={node}").items
    return next((p for p in pods if not p.metadata.deletion_timestamp), None)


def bcd_status(pod):
    return next(c for c in pod.status.container_statuses or [] if c.name == "bcd")


def cp_state(cp, cpvars, node: str) -> str | None:
    return next((n["state"] for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"]) if n["hostname"] == node), None)


def until(what: str, probe, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        assert time.monotonic() < deadline, f"waited {timeout:.0f}s for {what}"
        time.sleep(1)


def token_ids(cp, cpvars) -> set[str]:
    return {t["id"] for t in cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])}


@pytest.fixture
def crash_looping(sandbox, cp, cpvars):
    """The second GPU node's bcd pod crash-loops, its node ``adopting`` (grace 600 s); yields
    (node, pod name); afterwards the fault is lifted and the pod Ready, the node reporting, again."""
    from sandbox.control_plane.admin import Admin

    admin = Admin.for_sandbox(sandbox.dir)
    node = sandbox.gpu_node_names()[1]
    admin.patch_faults({"crashLoop": {node: MESSAGE}, "offlineGraceSeconds": 600})
    try:
        pod = until(f"{node}'s bcd pod to crash-loop", lambda: (
            (p := bcd_pod(sandbox, node)) and p.status.container_statuses and bcd_status(p).restart_count >= 1
            and bcd_status(p).state.waiting and bcd_status(p).state.waiting.reason == "CrashLoopBackOff" and p))
        yield node, pod.metadata.name
    finally:
        admin.clear_faults()
        until(f"{node}'s bcd pod Ready again", lambda: (p := bcd_pod(sandbox, node)) and any(
            c.type == "Ready" and c.status == "True" for c in p.status.conditions or []))
        until(f"{node} reporting again", lambda: cp_state(cp, cpvars, node) in ("adopting", "ready"))


def test_a_crash_looping_pod_within_the_offline_grace_fails_audit_adopt_and_the_waits(sandbox, cp, cpvars, tmp_path,
                                                                                       crash_looping):
    node, name = crash_looping

    # the sandbox shows it as a kubelet does: the exit and its message, restarts growing
    status = bcd_status(bcd_pod(sandbox, node))
    assert status.last_state.terminated.exit_code == 1 and status.last_state.terminated.message == MESSAGE
    assert status.last_state.terminated.reason == "Error" and not status.ready
    until("another restart", lambda: bcd_status(bcd_pod(sandbox, node)).restart_count > status.restart_count)
    assert cp_state(cp, cpvars, node) == "adopting", "the control plane still counts it, within its grace"

    # audit: the pod check fails, naming the pod, its state and bcd's last message, while the
    # control plane's side (reporting) passes
    report = tmp_path / "audit.json"
    audit = run_playbook("audit.yml", "-e", f"bcd_report_out={report}")
    assert audit.returncode != 0, audit.stdout[-3000:]
    results = yaml.safe_load(report.read_text())["clusters"]["sandbox"]["results"]
    failed = {(r["check"], r["node"]): r["message"] for r in results if not r["ok"]}
    assert set(failed) == {("pod", node)}, failed
    assert crash_shown(failed[("pod", node)], None, name), failed[("pod", node)]
    assert "last exit 1 (Error)" in failed[("pod", node)] and MESSAGE in failed[("pod", node)]
    assert f"logs {name} -c bcd --previous" in failed[("pod", node)], "the fix"
    assert next(r for r in results if r["check"] == "reporting" and r["node"] == node)["ok"]
    flat = " ".join(audit.stdout.split())
    assert f"FAILED pod {node}: {node}: pod {name} not Ready" in flat, audit.stdout[-3000:]

    # the DaemonSet wait fails without waiting out its timeout, naming the pod
    config = module_config(cpvars)
    code, waited = run_module("bcd_daemonset_wait", {"config": config, "kubeconfig": str(sandbox.kubeconfig),
                                                     "timeout": 300})
    assert code == 1, waited
    assert [(f["node"], f["pod"]) for f in waited["failed_nodes"]] == [(node, name)], waited
    assert "cannot start, so the rollout cannot complete (not waiting out the 300s timeout)" in waited["msg"]
    assert crash_shown(waited["msg"], node, name), waited["msg"]
    assert MESSAGE in waited["msg"]

    # the node wait (one slice) ends at once on the failing pod, whatever the control plane says
    code, nodes = run_module("bcd_nodes_info", {"config": config, "api_key": cpvars["bcd_api_key"],
                                           "kubeconfig": str(sandbox.kubeconfig), "refusals": True, "pods": True,
                                           "poll_for": 20, "since": "2000-01-01T00:00:00Z"})
    assert code == 0, nodes
    assert nodes["reporting"] == nodes["selected"], "the control plane counts every node"
    assert list(nodes["failing"]) == [node] and f"pod {name} not Ready" in nodes["failing"][node]
    assert MESSAGE in nodes["failing"][node] and nodes["to_join"] == []

    # adopt: not "nothing to do"; it applies, the wait fails naming the pod; no token minted
    before = token_ids(cp, cpvars)
    adopt = run_playbook("adopt-cluster.yml")
    out = " ".join(adopt.stdout.split())
    assert adopt.returncode != 0, adopt.stdout[-4000:]
    assert "nothing to do" not in out
    assert f"report to the control plane but their bcd pod is not healthy: {node}: pod {name} not Ready" in out
    assert crash_shown(out, node, name), adopt.stdout[-4000:]
    assert MESSAGE in out
    assert "Minted join token" not in out
    assert token_ids(cp, cpvars) == before, "no token for a node that has joined"
    assert f"{node}" in out and "with a bcd pod that is not healthy" in out, "the per-node report says it"
    assert cp_state(cp, cpvars, node) == "adopting"


def test_no_token_is_minted_for_an_offline_node_that_has_joined(sandbox, cp, cpvars, crash_looping):
    """The same crash loop past the control plane's grace: the node is ``offline`` and does not
    report, but it has an identity (it rejoins without a token): adopt mints nothing and fails
    naming the pod, as within the grace."""
    from sandbox.control_plane.admin import Admin

    node, name = crash_looping
    Admin.for_sandbox(sandbox.dir).patch_faults({"offlineGraceSeconds": 1})
    until(f"{node} offline", lambda: cp_state(cp, cpvars, node) == "offline")
    before = token_ids(cp, cpvars)
    adopt = run_playbook("adopt-cluster.yml")
    out = " ".join(adopt.stdout.split())
    assert adopt.returncode != 0, adopt.stdout[-4000:]
    n = len(sandbox.gpu_node_names())
    assert f"selects {n} Node(s); {n - 1} already report to the control plane" in out, adopt.stdout[-4000:]
    assert "Minted join token" not in out and token_ids(cp, cpvars) == before, "no token for a node that has joined"
    assert crash_shown(out, node, name), adopt.stdout[-4000:]
    assert MESSAGE in out
