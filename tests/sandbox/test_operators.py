"""What operators meet on a real cluster (the sandbox), in file order on one sandbox:

check mode before adoption shows the objects; a GPU Node too small for bcd's requests is named
with the scheduler's reason (and warned about in preflight); the report names the kubeconfig and
the context; diffs hide the server's bookkeeping; a Node that goes NotReady during a rollout
stage fails the gate.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from kubernetes import client as k8s

from tests.helpers import run_playbook

pytestmark = [pytest.mark.sandbox]

REPO = "registry.example.com/better-compute/bcd"
NEXT = f"{REPO}:0.5.0@sha256:{'e5' * 32}"
BOOKKEEPING = re.compile(r'"?(managedFields|resourceVersion|creationTimestamp|uid)"?\s*:')


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_check_diff_before_adoption_shows_the_objects_that_would_be_created(sandbox, unadopted):
    run = run_playbook("adopt-cluster.yml", "--check", "--diff")
    out = run.stdout
    assert run.returncode == 0, out[-3000:]
    assert "ConfigMap bcd-system/bcd-config (would be created)" in out, out[-4000:]
    assert "DaemonSet bcd-system/bcd (would be created)" in out
    assert "+  config.toml: |" in out and "+kind: DaemonSet" in out
    assert "would be created as rendered" not in out
    core = k8s.CoreV1Api(sandbox.api_client())
    assert "bcd-system" not in [ns.metadata.name for ns in core.list_namespace().items], "check mode created nothing"


def test_a_node_too_small_for_bcd_is_warned_about_and_named_with_the_schedulers_reason(sandbox, cp, cpvars):
    small = sandbox.gpu_node_names()[-1]
    before = sandbox.set_node_allocatable(small, memory="64Mi")
    try:
        run = run_playbook("adopt-cluster.yml", "-e", "bcd_rollout_timeout=20", "-e", "bcd_join_timeout=20")
    finally:
        sandbox.set_node_allocatable(small, **before)
    out = _flat(run.stdout + run.stderr)
    assert run.returncode != 0, out[-3000:]
    assert f"Node {small}: allocatable memory 64Mi < request 128Mi" in out, out[-5000:]
    m = re.search(rf"{re.escape(small)}: pod (bcd-\S+) cannot be scheduled on this Node: Unschedulable: [^|]*Insufficient memory", out)
    assert m, out[-5000:]
    assert "no bcd pod on this Node" not in out


def test_adoption_report_names_the_kubeconfig_and_the_context(sandbox):
    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    kubeconfig = str(sandbox.kubeconfig)
    out = _flat(run.stdout)
    m = re.search(r"Cluster sandbox: kubeconfig (\S+), context (\S+), server (https://\S+?)['\",]", out)
    assert m, out[-3000:]
    assert m.group(1) == kubeconfig and m.group(3).rstrip("/") == sandbox.server.rstrip("/")


def test_check_diff_of_an_adopted_cluster_hides_the_servers_bookkeeping(sandbox):
    run = run_playbook("adopt-cluster.yml", "--check", "--diff", "-e", "bcd_log_level=debug")
    assert run.returncode == 0, run.stdout[-3000:]
    assert 'log_level = "debug"' in run.stdout
    diffs = "\n".join(line for line in run.stdout.splitlines() if line.startswith(("+", "-")))
    assert diffs and not BOOKKEEPING.search(diffs), BOOKKEEPING.search(diffs)


def test_a_node_that_goes_not_ready_during_its_stage_fails_the_gate(sandbox):
    """The Node goes NotReady as soon as its new pod exists; the pod itself turns Ready."""
    api = sandbox.api_client()
    core = k8s.CoreV1Api(api)
    marked: list[str] = []
    stop = threading.Event()

    def mark_first_rolled_node():
        while not stop.is_set():
            for pod in core.list_namespaced_pod("bcd-system", label_selector="app.kubernetes.io/name=bcd").items:
                if pod.spec.node_name and pod.spec.containers[0].image == NEXT:
                    sandbox.set_node_not_ready(pod.spec.node_name)
                    marked.append(pod.spec.node_name)
                    return
            time.sleep(0.1)

    watcher = threading.Thread(target=mark_first_rolled_node, daemon=True)
    watcher.start()
    try:
        run = run_playbook("rollout.yml", "-e", f"bcd_image={NEXT}", "-e", "bcd_rollout_gate_timeout=30")
    finally:
        stop.set()
        watcher.join(5)
        for name in marked:
            sandbox.release_node(name)
    out = _flat(run.stdout + run.stderr)
    assert marked, "the rollout replaced no pod"
    assert run.returncode != 0, out[-4000:]
    assert f"{marked[0]}: the Node is NotReady (KubeletNotReady" in out, out[-4000:]
    assert "rolled, healthy" not in out.split("Roll back")[0] or "rolled back" in out
    ds = json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] != NEXT, "rolled back to the previous render"
