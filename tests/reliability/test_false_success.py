"""False success: no run exits 0 while the cluster is not in the state it reports.

Each scenario is a run that once ended in success (exit 0) with the cluster in another state
than the run printed: a join the control plane refused while the sandbox showed the pod Ready,
a pin nothing checked, an image rolled back without a canary, a health gate that passed in a
fraction of a second. Each now fails, naming the node or variable and the reason, within
seconds, and leaves no unrevoked token.
"""

from __future__ import annotations

import base64
import json
import re
import time

import pytest

from tests.helpers import crash_shown, recap
from tests.reliability.harness import EXTRA_NODE_LABEL, INVENTORY_IMAGE, World, daemonset_image

# Slow (a failing run per scenario); test_control_plane_join covers refused joins in make test.
pytestmark = [pytest.mark.sandbox, pytest.mark.long]

REPO = "registry.example.com/better-compute/bcd"
OTHER = f"{REPO}:0.2.0@sha256:{'b2' * 32}"
CRASH = f"{REPO}:0.8.0@sha256:fa11{'0e' * 30}"  # Ready, then crashes 2 s later (sandbox/kwok/kwok.yaml)
WAIT_TASK = "Wait for the DaemonSet to roll out, or say why it cannot"
STAGES_TASK = "Replace the pods stage by stage, each gated on health"
# The sandbox inventory's resources (the model's defaults) and a pod template change that is not
# the image: more CPU requested, which every GPU Node fits...
RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
MORE_CPU = {"bcd_resources": {**RESOURCES, "requests": {"cpu": "200m", "memory": "128Mi"}}}
# ...and one no Node fits (64 and 208 CPUs): the scheduler leaves the pod Pending, Unschedulable.
TOO_MUCH_CPU = {"bcd_resources": {**RESOURCES, "requests": {"cpu": "1000", "memory": "128Mi"}}}


def gpu_nodes(world: World) -> list[str]:
    """The GPU Nodes in the rollout's order (gpu-node-2 before gpu-node-10): the first is the canary."""
    return sorted(world.gpu_nodes(), key=lambda n: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", n)])


def tokens_left(world: World) -> int:
    return len(world.unrevoked())


def bcd_pods(world: World) -> dict[str, object]:
    """Node -> its bcd pod (not being deleted)."""
    pods = world.core.list_namespaced_pod(world.namespace, label_selector="app.kubernetes.io/name=bcd").items
    return {p.spec.node_name or "-": p for p in pods if not p.metadata.deletion_timestamp}


def cpu_request(obj) -> str:
    """The bcd container's CPU request of a pod or of the DaemonSet's template."""
    spec = obj.spec.template.spec if hasattr(obj.spec, "template") else obj.spec
    return next(c for c in spec.containers if c.name == "bcd").resources.requests["cpu"]


def ready_pod(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_a_refused_join_fails_within_seconds(ready, runner, reliability):
    """The control plane refuses every GPU node's join (fault refuseJoin) and a config change
    replaces the canary's pod (adopt rolls a new pod template in stages): its join container
    exits 1 (Init:CrashLoopBackOff), and the canary's gate fails at once naming the node and the
    reason instead of waiting out its timeout; no other pod is replaced."""
    world = ready
    reliability.describe("False success", "the control plane refuses the join of a replaced pod (adopt-cluster.yml, "
                                          "a config change rolled in stages)")
    untouched = {n: p.metadata.uid for n, p in bcd_pods(world).items()}
    world.admin.set_faults({"refuseJoin": dict.fromkeys(world.gpu_nodes(), "maintenance window")})
    try:
        run = runner.run("adopt-cluster.yml", "-e", "bcd_log_level=debug")
    finally:
        world.admin.clear_faults()
    assert run.returncode != 0, run.tail()
    assert "Refused: maintenance window" in run.text and "canary health gate failed on" in run.text, run.tail()
    refused = [n for n in gpu_nodes(world) if f"{n} - pod " in run.text]
    assert refused == gpu_nodes(world)[:1], run.tail()
    # the later stages never started: their pods are the ones the run found
    later = {n: p.metadata.uid for n, p in bcd_pods(world).items() if n in gpu_nodes(world)[1:]}
    assert later == {n: untouched[n] for n in later}, "only the canary's pod was replaced"
    waited = run.task_seconds(STAGES_TASK)
    timeout = world.vars.get("bcd_rollout_gate_timeout", 300)
    assert waited < 60, f"the gate took {waited:.0f}s"
    assert tokens_left(world) == 0 and not world.secret_exists()
    back = runner.run("adopt-cluster.yml")
    assert back.returncode == 0, back.tail()
    reliability.result = (f"failed after {waited:.0f}s of the staged rollout (gate timeout: {timeout}s), naming "
                          f"{', '.join(refused)}: 'bcd join exited 1: Refused: maintenance window'; the later stages "
                          "never started; the next run (fault lifted) completed")
    reliability.figures.update({"time to the failure s": round(waited, 1), "gate timeout s": timeout,
                                "run s": round(run.seconds, 1), "tokens left": tokens_left(world)})


def test_adopt_rolls_a_new_pod_template_in_stages(ready, runner, reliability):
    """A pod template change that is not the image (more CPU requested) on a running DaemonSet:
    adopt-cluster.yml prints the plan and rolls it as rollout.yml does, canary first, one stage
    at a time behind the health gate; every pod runs the change; a second run changes nothing."""
    world = ready
    reliability.describe("False success", "a new pod template, not the image (bcd_resources), on a running "
                                          "DaemonSet (adopt-cluster.yml, soak 5 s)")
    gpu = gpu_nodes(world)
    assert cpu_request(world.apps.read_namespaced_daemon_set("bcd", world.namespace)) == "100m", "the inventory's template"
    before = {n: p.metadata.uid for n, p in bcd_pods(world).items()}
    args = ("-e", json.dumps(MORE_CPU), "-e", "bcd_rollout_soak=5")
    try:
        run = runner.run("adopt-cluster.yml", *args)
        assert run.returncode == 0, run.tail()
        assert f"rollout of a new pod template (image {INVENTORY_IMAGE.split(':')[-1][:12]}): {len(gpu)} of {len(gpu)} " \
               f"selected node(s) roll in {len(gpu)} stage(s)" in run.text, run.tail()
        assert f"rolled a new pod template (image {INVENTORY_IMAGE.split(':')[-1][:12]}) on {len(gpu)} node(s)" in run.text
        assert f"{gpu[0]} canary" in run.text, "the first node is the canary"
        assert "'-            cpu: 100m'" in run.output and "'+            cpu: 200m'" in run.output, "the diff is shown"
        ds = world.apps.read_namespaced_daemon_set("bcd", world.namespace)
        assert cpu_request(ds) == "200m" and ds.spec.update_strategy.type == "RollingUpdate"
        assert daemonset_image(world) == INVENTORY_IMAGE
        pods = bcd_pods(world)
        assert sorted(n for n in pods if n in gpu) == gpu
        for node in gpu:
            assert pods[node].metadata.uid != before[node], f"{node}'s pod was replaced"
            assert cpu_request(pods[node]) == "200m" and ready_pod(pods[node]), node
        assert tokens_left(world) == 0 and not world.secret_exists()
        again = runner.run("adopt-cluster.yml", *args)
        assert again.returncode == 0, again.tail()
        assert recap(again.output)["sandbox"]["changed"] == 0, again.tail()
        assert "nothing to do, no token minted" in again.text
        assert {n: p.metadata.uid for n, p in bcd_pods(world).items()} == {n: p.metadata.uid for n, p in pods.items()}
        reliability.result = (f"rolled in {len(gpu)} stages (canary {gpu[0]} first), each soaked 5 s behind the gate; "
                              "every pod runs the change; the second run changed nothing and minted no token")
        reliability.figures.update({"rollout s": round(run.task_seconds(STAGES_TASK), 1), "run s": round(run.seconds, 1),
                                    "second run changed": 0, "tokens left": tokens_left(world)})
    finally:
        # back to the inventory's template, for the scenarios that follow (2 stages, default soak)
        restore = runner.run("adopt-cluster.yml", "-e", "bcd_rollout_max_unavailable=100%")
        assert restore.returncode == 0, restore.tail()


def test_adopt_rolls_back_a_new_pod_template_whose_pods_fail(ready, runner, reliability):
    """A pod template change that is not the image and whose pods cannot run (a CPU request no
    Node fits: the scheduler leaves the pod Pending): the canary's gate fails, adopt-cluster.yml
    rolls back to the previous template and fails naming the node and why; no token left."""
    world = ready
    reliability.describe("False success", "a new pod template, not the image, whose pods cannot be scheduled "
                                          "(adopt-cluster.yml, gate timeout 20 s)")
    gpu = gpu_nodes(world)
    before = {n: p.metadata.uid for n, p in bcd_pods(world).items()}
    run = runner.run("adopt-cluster.yml", "-e", json.dumps(TOO_MUCH_CPU), "-e", "bcd_rollout_gate_timeout=20",
                     "-e", "bcd_rollout_soak=5")
    assert run.returncode != 0, run.tail()
    assert f"the canary health gate failed on {gpu[0]} - pod " in run.text, run.tail()
    assert "not scheduled: Unschedulable" in run.text and "Insufficient cpu" in run.text, run.tail()
    assert "FAILED and was rolled back" in run.text and "rolled back to the previous pod template" in run.text
    ds = world.apps.read_namespaced_daemon_set("bcd", world.namespace)
    assert cpu_request(ds) == "100m" and ds.spec.update_strategy.type == "RollingUpdate", "the previous template"
    pods = bcd_pods(world)
    for node in gpu:
        assert cpu_request(pods[node]) == "100m" and ready_pod(pods[node]), node
    assert all(pods[n].metadata.uid == before[n] for n in gpu[1:]), "the later stages never started"
    assert tokens_left(world) == 0 and not world.secret_exists()
    failed_after = run.task_seconds(STAGES_TASK)
    reliability.result = (f"the canary's gate failed on {gpu[0]} (pod Pending, not scheduled: Insufficient cpu) after the "
                          "20 s gate timeout; rolled back to the previous template, every pod Ready on it; the run failed "
                          "naming the node and why")
    reliability.figures.update({"gate and rollback s": round(failed_after, 1), "run s": round(run.seconds, 1),
                                "tokens left": tokens_left(world)})


@pytest.mark.parametrize("pin", ["serving_ca", "join_signing"])
def test_a_wrong_pin_is_refused_before_anything_is_applied(ready, runner, reliability, pin):
    world = ready
    reliability.describe("False success", f"another valid bcd_pins.{pin} than the control plane's (adopt-cluster.yml)")
    pins = {**world.vars["bcd_pins"], pin: "sha256/" + base64.b64encode(bytes(range(32))).decode()}
    rv = world.apps.read_namespaced_daemon_set("bcd", world.namespace).metadata.resource_version
    run = runner.run("adopt-cluster.yml", "-e", json.dumps({"bcd_pins": pins}))
    assert run.returncode != 0, run.tail()
    assert f"bcd_pins.{pin}" in run.text and "refusing it before any token is minted" in run.text, run.tail()
    assert world.apps.read_namespaced_daemon_set("bcd", world.namespace).metadata.resource_version == rv
    assert tokens_left(world) == 0
    reliability.result = ("refused in preflight, naming the pin and what the "
                          + ("gateway presented (its chain's pins)" if pin == "serving_ca" else "discovery published")
                          + "; nothing applied, no token minted")
    reliability.figures.update({"time to the failure s": round(run.seconds, 1), "tokens left": tokens_left(world)})


def test_adopt_never_rolls_the_image_back(ready_any_image, runner, reliability):
    """The DaemonSet runs another digest than the inventory's (as after rollout.yml -e bcd_image):
    adopt-cluster.yml refuses, naming both and rollout.yml, and changes nothing."""
    world = ready_any_image
    reliability.describe("False success", "the DaemonSet runs another digest than the inventory's bcd_image (adopt-cluster.yml)")
    if daemonset_image(world) == INVENTORY_IMAGE:
        rolled = runner.run("rollout.yml", "-e", f"bcd_image={OTHER}", "-e", "bcd_rollout_max_unavailable=100%")
        assert rolled.returncode == 0, rolled.tail()
    running = daemonset_image(world)
    run = runner.run("adopt-cluster.yml")
    assert run.returncode != 0, run.tail()
    assert f"runs {running}, but bcd_image in the inventory is {INVENTORY_IMAGE}" in run.text, run.tail()
    assert "rollout.yml" in run.text
    assert daemonset_image(world) == running
    assert tokens_left(world) == 0
    reliability.result = "refused before anything changed, naming both digests and rollout.yml; every pod kept its image"
    reliability.figures.update({"time to the failure s": round(run.seconds, 1), "tokens left": tokens_left(world)})


def test_a_pod_that_crashes_after_turning_ready_fails_the_canary_soak(ready_any_image, runner, reliability, tmp_path):
    """Pods that turn Ready and crash 2 s later: the canary's gate, soaking 15 s, sees it and
    rolls back."""
    world = ready_any_image
    reliability.describe("False success", "a digest whose pods crash 2 s after turning Ready (rollout.yml, soak 15 s)")
    before = daemonset_image(world)
    report = tmp_path / "rollout.json"
    run = runner.run("rollout.yml", "-e", f"bcd_image={CRASH}", "-e", "bcd_rollout_soak=15",
                     "-e", f"bcd_report_out={report}")
    assert run.returncode != 0, run.tail()
    summary = json.loads(report.read_text())
    assert summary["result"] == "rolled_back", summary
    assert "soak" in summary["failed_nodes"][0]["why"]
    assert daemonset_image(world) == before
    canary = summary["stages"][0]
    reliability.result = (f"the canary's gate failed on {summary['failed_nodes'][0]['node']} "
                          f"({summary['failed_nodes'][0]['why']}); rolled back to the previous image")
    reliability.figures.update({"time to the failure s": canary.get("seconds"), "tokens left": tokens_left(world)})


def test_a_token_for_too_few_nodes_is_refused_before_minting(ready, runner, reliability):
    """Two new Nodes and a token for one (bcd_token_max_uses=1): known before minting, so
    add-nodes.yml refuses then, naming the variable; no token, no Secret; the next run joins both."""
    from sandbox import cluster

    world = ready
    reliability.describe("False success", "two new Nodes, a token for one (add-nodes.yml, bcd_token_max_uses=1)")
    # two KWOK GPU Nodes outside the sandbox's own count, deleted when the package ends
    new = ["gpu-node-extra-1", "gpu-node-extra-2"]
    for name in new:
        body = cluster.node_body(name, True, "v" + world.sandbox.kube_version())
        body["metadata"]["labels"][EXTRA_NODE_LABEL] = "true"
        world.core.create_node(body)
    cluster.wait_nodes_ready(world.sandbox.dir, new)
    run = runner.run("add-nodes.yml", "-e", "bcd_token_max_uses=1")
    assert run.returncode != 0, run.tail()
    assert "bcd_token_max_uses is 1, below the 2 node(s) to join" in run.text and "no token was minted" in run.text, run.tail()
    assert tokens_left(world) == 0 and not world.secret_exists()
    back = runner.run("add-nodes.yml")
    assert back.returncode == 0, back.tail()
    reliability.result = ("refused before minting, naming bcd_token_max_uses and the 2 nodes to join; no token, no "
                          "Secret; the next run joined both")
    reliability.figures.update({"run s": round(run.seconds, 1), "tokens left": tokens_left(world)})


def seconds_between(run, first: str, last: str) -> float:
    """Seconds from the banner of the first task containing ``first`` to the end of the first
    task containing ``last`` (the next banner)."""
    start = next(t for t, task in run.tasks if first in task)
    for i, (_t, task) in enumerate(run.tasks):
        if last in task:
            return (run.tasks[i + 1][0] if i + 1 < len(run.tasks) else run.ended) - start
    raise KeyError(last)


def test_a_crash_looping_pod_within_the_offline_grace_fails_within_seconds(ready, runner, reliability):
    """One bcd pod crash-loops (fault crashLoop: exit 1 with a message, CrashLoopBackOff, restarts
    with back-off) while the control plane counts its node adopting, within its offline grace
    (600 s here, as a production control plane's minutes): adopt-cluster.yml does not say
    "nothing to do", mints no token (every node has joined), applies, and the DaemonSet wait fails
    at once naming the pod and bcd's last message."""
    world = ready
    reliability.describe("False success", "one bcd pod crash-loops while the control plane counts its node adopting, "
                                          "within its offline grace (adopt-cluster.yml)")
    node = gpu_nodes(world)[1]
    message = "panic: nvml: driver/library version mismatch"
    before = {t["id"] for t in world.ours()}
    world.admin.patch_faults({"crashLoop": {node: message}, "offlineGraceSeconds": 600})
    try:
        deadline = time.monotonic() + 60
        while True:
            pod = bcd_pods(world).get(node)
            bcd = next((c for c in (pod.status.container_statuses or []) if c.name == "bcd"), None) if pod else None
            if bcd and bcd.state.waiting and bcd.state.waiting.reason == "CrashLoopBackOff":
                break
            assert time.monotonic() < deadline, f"{node}'s pod did not crash-loop"
            time.sleep(1)
        state = next(n["state"] for n in world.cp.list_nodes(world.vars["bcd_tenant"], world.vars["bcd_pool"])
                     if n["hostname"] == node)
        assert state == "adopting", state
        run = runner.run("adopt-cluster.yml")
    finally:
        world.admin.clear_faults()
    assert run.returncode != 0, run.tail()
    assert "nothing to do" not in run.text
    # said by the DaemonSet wait itself (the preflight's note names the pod too)
    assert "1 pod(s) cannot start, so the rollout cannot complete (not waiting out the" in run.text, run.tail()
    assert crash_shown(run.text, node, pod.metadata.name) and message in run.text, run.tail()
    assert {t["id"] for t in world.ours()} == before, "no token minted"
    assert tokens_left(world) == 0 and not world.secret_exists()
    failed_after = seconds_between(run, "Apply the ConfigMap and the DaemonSet", WAIT_TASK)
    reliability.result = (f"refused to say nothing to do; no token minted; the DaemonSet wait failed {failed_after:.0f}s "
                          f"after the apply began (target 30 s), naming {node}'s pod, 'CrashLoopBackOff' and bcd's "
                          "last message, while the control plane still counted the node adopting")
    reliability.figures.update({"time to the failure from the apply s": round(failed_after, 1),
                                "run s": round(run.seconds, 1), "tokens minted": 0, "tokens left": tokens_left(world)})
