"""The playbooks on the kind test bed's real nodes, with the stand-in bcd image (sandbox/kind/bcd).

Against real kubelets, containerd and runc (``python -m sandbox kind up --attach``), where the
join, the reports and the Node's labels are done by bcd in its pod, through the emulator's node
side, not by the join simulator:

- adopt-cluster.yml joins both workers (the ``join`` init container exits 0, the identity lands
  0600 in the node's /var/lib/bcd, bcd labels its Node as the kubelet), a second run changes
  nothing and mints no token;
- a refused join (the control plane turns one worker away) is the kubelet's own restarts with
  back-off (``Init:CrashLoopBackOff``; kubelet 1.36 shows ``Init:Error`` between the restarts)
  with bcd's reason as the termination message, and adopt-cluster.yml fails fast naming the
  node and the reason, the token revoked and the Secret gone;
- a rollout to the stand-in's bad build (its ``bcd node`` exits after five seconds) is caught by
  the canary's soak and rolled back; every pod ends on the good digest;
- a worker whose kubelet is stopped (``systemctl stop kubelet`` in its container) is NotReady by
  the node lifecycle controller's own word; a rollout to the next good build leaves it behind,
  naming it and that word, rolls the other worker and exits 0; once the kubelet is back, the
  next run leaves both on the new digest;
- a worker whose containerd lacks the ``nvidia`` handler is ``not-ready`` in doctor.yml (the
  workers' own files, collected into ``bcd_node_roots``), and bcd's pod there fails with the
  kubelet's own ``FailedCreatePodSandBox`` error until the handler is back.

Skipped, with the reason, where the test bed cannot run (see sandbox/tests/test_kind.py). A
cluster that was up before is left up (its bcd objects and node state reset); one the test
started is deleted afterwards.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from sandbox import kind
from sandbox.control_plane.admin import Admin
from sandbox.tests.test_control_plane import Emulator
from sandbox.tests.test_kind import kind_bed
from tests.helpers import recap, run_playbook

pytestmark = pytest.mark.long

NS = "bcd-system"


@pytest.fixture(scope="module")
def bed():
    from kubernetes import client

    from sandbox.kind import standin

    with kind_bed(attach=True) as api:
        yield {"core": client.CoreV1Api(api), "apps": client.AppsV1Api(api), "cp": Emulator(kind.attach_dir()),
               "admin": Admin.for_sandbox(kind.attach_dir()), "images": standin.refs(),
               "workers": kind.node_names()[1:]}


def play(playbook: str, *args: str):
    return run_playbook(playbook, "-i", "inventories/kind", *args,
                        env={"KIND_DIR": str(kind.kind_dir()), "KIND_CLUSTER_NAME": kind.cluster_name()})


def reset(bed) -> None:
    """No bcd DaemonSet, no node identity, the control plane forgets the workers, no fault."""
    from kubernetes.client.rest import ApiException

    bed["admin"].clear_faults()
    try:
        bed["apps"].delete_namespaced_daemon_set("bcd", NS, propagation_policy="Foreground")
    except ApiException as exc:
        if exc.status != 404:
            raise
    deadline = time.monotonic() + 120
    while bed["core"].list_namespaced_pod(NS).items if _ns_exists(bed) else []:
        assert time.monotonic() < deadline, "bcd's pods did not go away"
        time.sleep(1)
    for node in bed["workers"]:
        kind.node_exec(node, "rm -rf /var/lib/bcd")
        bed["core"].patch_node(node, {"metadata": {"labels": {"bcd.dev/node-id": None, "bcd.dev/site": None}}})
    bed["admin"].forget_nodes()


def _ns_exists(bed) -> bool:
    return any(n.metadata.name == NS for n in bed["core"].list_namespace().items)


def pods(bed) -> dict[str, object]:
    return {p.spec.node_name: p for p in bed["core"].list_namespaced_pod(NS, label_selector="app.kubernetes.io/name=bcd").items}


def cp_nodes(bed) -> dict[str, dict]:
    cp = bed["cp"]
    return {n["hostname"]: n for n in cp.ok("nodes.list", {"tenant": cp.tenant, "limit": 500})["items"]}


def tokens(bed) -> list[dict]:
    cp = bed["cp"]
    return cp.ok("joinTokens.list", {"tenant": cp.tenant, "limit": 500})["items"]


def test_adopt_joins_each_worker_through_bcd_on_the_node(bed):
    reset(bed)
    before = bed["admin"].counters()["requests"].get("node.join", 0)
    run = play("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-4000:]
    running = pods(bed)
    assert sorted(running) == bed["workers"]
    ids = {}
    for node, pod in running.items():
        init = pod.status.init_container_statuses[0]
        assert init.name == "join" and init.state.terminated.exit_code == 0, init
        assert pod.status.phase == "Running" and pod.status.container_statuses[0].ready
        assert pod.spec.containers[0].image == bed["images"]["bcd_image"]
        ident = json.loads(kind.node_exec(node, "cat /var/lib/bcd/node.json").stdout)
        assert kind.node_exec(node, "stat -c %a /var/lib/bcd/node.json").stdout.strip() == "600"
        ids[node] = ident["id"]
        labels = bed["core"].read_node(node).metadata.labels
        assert labels["bcd.dev/node-id"] == ident["id"]
    listed = cp_nodes(bed)
    assert {n: listed[n]["id"] for n in bed["workers"]} == ids
    assert {listed[n]["state"] for n in bed["workers"]} == {"adopting"}
    # bcd joined them itself, through the gateway; the join simulator left the real nodes alone
    assert bed["admin"].counters()["requests"].get("node.join", 0) - before == 2
    assert not [j for j in bed["admin"].joins() if j["node"] in bed["workers"]]
    assert all(t["revokedAt"] for t in tokens(bed))

    n_tokens = len(tokens(bed))
    again = play("adopt-cluster.yml")
    assert again.returncode == 0, again.stdout[-4000:]
    assert recap(again.stdout)["kind"]["changed"] == 0
    assert len(tokens(bed)) == n_tokens


def test_a_refused_join_is_init_crashloop_and_adopt_fails_fast_naming_node_and_reason(bed):
    reset(bed)
    refused = bed["workers"][1]
    bed["admin"].patch_faults({"refuseJoin": {refused: "maintenance window"}})
    try:
        run = play("adopt-cluster.yml", "-e", "bcd_join_timeout=240")
        out = run.stdout + run.stderr
        assert run.returncode != 0, out[-4000:]
        assert f"{refused}:" in out and "Refused: maintenance window" in out, out[-4000:]
        # the wait's own verdict: it failed on the refusal, not at the end of the join timeout
        assert "(not waiting out the " in out, out[-4000:]
        pod = pods(bed)[refused]
        init = pod.status.init_container_statuses[0]
        term = init.last_state.terminated or init.state.terminated
        assert term is not None and term.exit_code == 1, init
        assert term.message.startswith("Refused: maintenance window"), term.message
        assert pod.status.phase == "Pending"
        # The kubelet restarts it with back-off. kubectl shows Init:CrashLoopBackOff while the
        # kubelet reports it waiting; kubelet 1.36 reports the last exit (Init:Error) instead.
        deadline = time.monotonic() + 90
        while (init.restart_count or 0) < 2:
            assert time.monotonic() < deadline, init
            time.sleep(3)
            init = pods(bed)[refused].status.init_container_statuses[0]
        waiting = init.state.waiting.reason if init.state.waiting else None
        term = init.state.terminated or init.last_state.terminated
        assert waiting in (None, "CrashLoopBackOff", "PodInitializing"), init
        assert term is not None and term.exit_code == 1, init
        assert not pods(bed)[refused].status.container_statuses[0].ready
        assert all(t["revokedAt"] for t in tokens(bed))
        assert bed["core"].list_namespaced_secret(NS, field_selector="metadata.name=bcd-join").items == []
        # the other worker joined
        assert cp_nodes(bed)[bed["workers"][0]]["state"] == "adopting"
    finally:
        bed["admin"].patch_faults({"refuseJoin": None})
    run = play("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-4000:]
    assert cp_nodes(bed)[refused]["state"] == "adopting"


def test_a_rollout_to_the_bad_build_fails_the_canary_and_is_rolled_back(bed, tmp_path):
    ensure_adopted(bed)
    good, bad = bed["images"]["bcd_image"], bed["images"]["bcd_image_bad"]
    report = tmp_path / "rollout.json"
    run = play("rollout.yml", "-e", f"bcd_image={bad}", "-e", "bcd_rollout_soak=20", "-e", f"bcd_report_out={report}")
    assert run.returncode != 0, run.stdout[-4000:]
    summary = json.loads(report.read_text())
    assert summary["result"] == "rolled_back", summary
    assert len(summary["failed_nodes"]) == 1 and summary["failed_nodes"][0]["node"] in bed["workers"], summary
    assert [s["outcome"] for s in summary["stages"]][:1] == ["failed"]
    deadline = time.monotonic() + 180
    while True:
        running = pods(bed)
        state = {n: (p.spec.containers[0].image, bool(p.status.container_statuses and p.status.container_statuses[0].ready))
                 for n, p in running.items()}
        if state == {n: (good, True) for n in bed["workers"]}:
            break
        assert time.monotonic() < deadline, state
        time.sleep(3)
    assert {cp_nodes(bed)[n]["state"] for n in bed["workers"]} == {"adopting"}


def _node_ready(bed, node: str) -> str:
    cond = next(c for c in bed["core"].read_node_status(node).status.conditions if c.type == "Ready")
    return cond.status


def _wait_node(bed, node: str, ready: bool, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while (_node_ready(bed, node) == "True") != ready:
        assert time.monotonic() < deadline, f"{node} did not turn {'Ready' if ready else 'NotReady'} in {timeout:g} s"
        time.sleep(2)


def _on(bed) -> dict[str, tuple[str, bool]]:
    """Each worker's bcd pod: (image, Ready)."""
    return {n: (p.spec.containers[0].image, bool(p.status.container_statuses and p.status.container_statuses[0].ready))
            for n, p in pods(bed).items()}


def test_a_worker_whose_kubelet_stopped_is_left_behind_and_rolled_once_back(bed, tmp_path):
    ensure_adopted(bed)
    good, nxt = bed["images"]["bcd_image"], bed["images"]["bcd_image_next"]
    up, down = bed["workers"]
    kind.node_exec(down, "systemctl stop kubelet")
    try:
        # the node lifecycle controller's grace period (40 s by default) before it says so
        _wait_node(bed, down, ready=False)
        report = tmp_path / "down.json"
        run = play("rollout.yml", "-e", f"bcd_image={nxt}", "-e", f"bcd_report_out={report}")
        assert run.returncode == 0, run.stdout[-4000:]
        summary = json.loads(report.read_text())
        assert summary["result"] == "succeeded", summary["headline"]
        assert [b["node"] for b in summary["left_behind"]] == [down], summary["left_behind"]
        assert "Kubelet stopped posting node status" in summary["left_behind"][0]["why"], summary["left_behind"]
        assert [n for s in summary["stages"] for n in s["nodes"]] == [up], summary["stages"]
        assert _on(bed)[up] == (nxt, True)
        assert pods(bed)[down].spec.containers[0].image == good
    finally:
        kind.node_exec(down, "systemctl start kubelet")
    _wait_node(bed, down, ready=True)
    again = play("rollout.yml", "-e", f"bcd_image={nxt}")
    assert again.returncode == 0, again.stdout[-4000:]
    deadline = time.monotonic() + 180
    while _on(bed) != {n: (nxt, True) for n in bed["workers"]}:
        assert time.monotonic() < deadline, _on(bed)
        time.sleep(3)
    assert {cp_nodes(bed)[n]["state"] for n in bed["workers"]} == {"adopting"}
    # back to the good build, where the other tests start
    back = play("rollout.yml", "-e", f"bcd_image={good}")
    assert back.returncode == 0, back.stdout[-4000:]


def ensure_adopted(bed) -> None:
    """Adopted on the good build, every worker adopting (else reset and adopted again)."""
    if sorted(pods(bed)) != bed["workers"] or any(p.spec.containers[0].image != bed["images"]["bcd_image"]
                                                  for p in pods(bed).values()) or any(
            cp_nodes(bed).get(n, {}).get("state") != "adopting" for n in bed["workers"]):
        reset(bed)
        run = play("adopt-cluster.yml")
        assert run.returncode == 0, run.stdout[-4000:]


# What the GPU isolation gate reads on a node (seed: GPU isolation), copied out of a node container.
NODE_FILES = ("etc/containerd", "etc/nvidia-container-runtime", "usr/local/nvidia/toolkit/.config", "etc/cdi",
              "var/run/cdi", "var/lib/kubelet/plugins_registry")


def collect_roots(bed, tmp_path) -> dict[str, str]:
    roots = {}
    for node in bed["workers"]:
        root = tmp_path / "roots" / node
        root.mkdir(parents=True)
        script = f"cd / && tar -cf - $(for p in {' '.join(NODE_FILES)}; do [ -e $p ] && echo $p; done)"
        tar = subprocess.run(["podman", "exec", node, "sh", "-c", script], env=kind.podman_env(), capture_output=True,
                             check=True, timeout=60)
        subprocess.run(["tar", "-C", str(root), "-xf", "-"], input=tar.stdout, check=True, timeout=60)
        roots[node] = str(root)
    return roots


def test_a_worker_without_the_nvidia_handler_is_not_ready_and_its_pod_fails(bed, tmp_path):
    ensure_adopted(bed)
    worker, other = bed["workers"][1], bed["workers"][0]
    kind.set_nvidia_handler(worker, False)
    try:
        report = tmp_path / "doctor.json"
        run = play("doctor.yml", "-e", json.dumps({"bcd_node_roots": collect_roots(bed, tmp_path),
                                                   "bcd_report_out": str(report)}))
        data = json.loads(report.read_text())
        by = {n["name"]: n for n in data["nodes"]}
        assert run.returncode != 0 and not data["passed"], run.stdout[-3000:]
        assert by[worker]["ready"] == "not-ready", by[worker]
        assert "runtime-handler" in {f["check"] for f in by[worker]["readiness"]}, by[worker]["readiness"]
        assert "runtime-handler" not in {f["check"] for f in by[other]["readiness"]}, by[other]["readiness"]
        assert f"{worker}" in run.stdout and "is not-ready" in run.stdout

        # bcd's pod there, started again, fails with the kubelet's own error
        old = pods(bed)[worker]
        bed["core"].delete_namespaced_pod(old.metadata.name, NS, grace_period_seconds=0)
        deadline = time.monotonic() + 120
        while True:
            new = pods(bed).get(worker)
            events = [] if new is None or new.metadata.uid == old.metadata.uid else bed["core"].list_namespaced_event(
                NS, field_selector=f"involvedObject.uid={new.metadata.uid},reason=FailedCreatePodSandBox").items
            if events:
                break
            assert time.monotonic() < deadline, "no FailedCreatePodSandBox event on the new pod"
            time.sleep(2)
        assert 'no runtime for "nvidia" is configured' in events[0].message, events[0].message
        assert pods(bed)[worker].status.phase == "Pending"
    finally:
        kind.set_nvidia_handler(worker, True)
    deadline = time.monotonic() + 180
    while not (pods(bed).get(worker) and pods(bed)[worker].status.phase == "Running"):
        assert time.monotonic() < deadline, "bcd's pod did not start once the handler was back"
        time.sleep(3)
