"""Faults, from the control plane and from the Kubernetes side, in the middle of adopt-cluster.yml.

Faults are set through the emulator's admin endpoint when the run reaches a task (the trigger
fires on the task's banner; a fault meant for a call is set one task early, with the run stopped
meanwhile, so it is in place when the call is made; a trigger that never fires fails the test).
Each run ends in success, or in a failure that names its cause with the token revoked and the
Secret deleted; where the cleanup itself could not reach the control plane or the cluster, the
next run revokes what is left, deletes the Secret and completes.

The figures come from the emulator's counters (requests and answers per procedure) and from its
access log (when each answer was sent), so the retries are counted and their spacing measured.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import threading
import time

import pytest

from tests.reliability.harness import (
    EXTRA_NODE_LABEL,
    Trigger,
    World,
    apiserver_down,
    apiserver_up,
    paused,
)

pytestmark = pytest.mark.sandbox


def fault(world: World, spec: dict):
    """A trigger action that sets the emulator's faults, the run stopped meanwhile (its next
    request meets them, however slow the machine)."""
    return paused(lambda run: world.admin.set_faults(spec))


def new_tokens(world: World, before: set[str]) -> list[dict]:
    return [t for t in world.ours() if t["id"] not in before]


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in itertools.pairwise(times)]


def assert_clean_and_joined(world: World) -> None:
    world.wait(world.all_joined, timeout=90, why="every GPU node to report")
    assert world.clean(), world.state()


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_bursts_of_503_and_429_are_retried_with_backoff_and_retry_after(ready, runner, reliability):
    """503 on discovery, 429 (Retry-After 2) on the mint, 503 on the node wait, 429 (Retry-After
    1) on the revoke: the run succeeds, mints one token, and each retry waits as told."""
    world = ready
    reliability.describe("Faults", "control plane 503 and 429 bursts (discovery, mint, node wait, revoke)")
    world.forget()
    before = {t["id"] for t in world.ours()}
    world.admin.set_faults({"errorCount": 2, "errorStatus": 503, "procedures": ["discovery"]})
    since = time.time()
    run = runner.run("adopt-cluster.yml", triggers=[
        Trigger("Mint the join token into its Secret", fault(world, {"errorCount": 2, "errorStatus": 429, "retryAfter": 2,
                                                        "procedures": ["joinTokens.create"]})),
        Trigger("Apply the ConfigMap and the DaemonSet", fault(world, {"errorCount": 3, "errorStatus": 503,
                                                                       "procedures": ["nodes.list"]})),
        Trigger("Revoke the token and delete the Secret", fault(world, {"errorCount": 2, "errorStatus": 429,
                                                                        "retryAfter": 1, "procedures": ["joinTokens.revoke"]})),
    ])
    assert run.returncode == 0, run.tail()
    assert_clean_and_joined(world)
    minted = new_tokens(world, before)
    assert len(minted) == 1 and minted[0]["revokedAt"], minted  # retried with one idempotency key: one token

    answers = world.counters()["responses"]
    assert answers["discovery"].get("503") == 2
    assert answers["joinTokens.create"] == {"429": 2, "200": 1}
    assert answers["nodes.list"].get("503") == 3
    assert answers["joinTokens.revoke"] == {"429": 2, "200": 1}
    create = [t for t, _, _ in world.access(since, "joinTokens.create")]
    revoke = [t for t, _, _ in world.access(since, "joinTokens.revoke")]
    assert len(create) == 3 and all(g >= 1.95 for g in gaps(create)), gaps(create)  # Retry-After: 2
    assert len(revoke) == 3 and all(g >= 0.95 for g in gaps(revoke)), gaps(revoke)  # Retry-After: 1
    listed = world.access(since, "nodes.list")
    first_503 = next(i for i, (_, _, s) in enumerate(listed) if s == 503)
    burst = [t for t, _, _ in listed[first_503:first_503 + 4]]
    # full jitter: each wait is drawn from [0, 0.5), [0, 1), [0, 2) seconds (plus the request)
    assert all(g < cap + 1.0 for g, cap in zip(gaps(burst), (0.5, 1, 2), strict=False)), gaps(burst)

    reliability.result = "succeeded; one token minted, revoked; every burst retried"
    reliability.figures.update({
        "faulted answers": world.counters()["faulted"],
        "mint retry gaps s (Retry-After 2)": gaps(create), "revoke retry gaps s (Retry-After 1)": gaps(revoke),
        "node-list 503 retry gaps s (jitter, caps 0.5/1/2)": gaps(burst), "seconds": round(run.seconds, 1),
    })


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_control_plane_down_for_a_while_is_waited_out(ready, runner, reliability):
    """The control plane stops answering (connections reset) for 15 s just before the mint."""
    world = ready
    reliability.describe("Faults", "control plane down for 15 s (connections reset) at the mint")
    world.forget()
    before = {t["id"] for t in world.ours()}
    run = runner.run("adopt-cluster.yml", triggers=[
        Trigger("Mint the join token into its Secret", fault(world, {"outageSeconds": 15, "outageMode": "reset"}))])
    assert run.returncode == 0, run.tail()
    assert_clean_and_joined(world)
    minted = new_tokens(world, before)
    assert len(minted) == 1 and minted[0]["revokedAt"], minted
    resets = world.counters()["requests"].get("(reset)", 0)
    assert resets >= 2, world.counters()
    mint_s = run.task_seconds("Mint a hosted join token into its Secret")
    assert mint_s >= 10, mint_s
    reliability.result = "succeeded after the outage; one token minted, revoked"
    reliability.figures.update({"connections reset": resets, "mint task s": round(mint_s, 1),
                                "seconds": round(run.seconds, 1)})


@pytest.mark.long  # minutes: make test-long (see docs/reliability.md)
def test_control_plane_down_for_good_fails_naming_it_and_the_next_run_cleans_up(ready, runner, reliability):
    """The control plane goes away for good after the mint (bcd_control_plane_timeout=20s): the
    wait for the nodes and the revoke give up naming the control plane; the Secret is deleted
    anyway. Once it is back, the next run revokes the token the failed run could not."""
    world = ready
    reliability.describe("Faults", "control plane down for good after the mint (bcd_control_plane_timeout=20s)")
    world.forget()
    before = {t["id"] for t in world.ours()}
    down = Trigger("Apply the ConfigMap and the DaemonSet", fault(world, {"outageSeconds": 3600, "outageMode": "reset"}))
    run = runner.run("adopt-cluster.yml", "-e", "bcd_control_plane_timeout=20", triggers=[down])
    world.admin.clear_faults()
    assert run.returncode != 0
    text = run.text
    assert "UNREACHABLE" in text and "gave up after 20s of retries" in text, run.tail()
    assert "cleaning up the join token failed" in text, run.tail()
    assert "Traceback" not in run.output
    minted = new_tokens(world, before)
    assert len(minted) == 1 and not minted[0]["revokedAt"], minted  # the control plane could not be told
    assert not world.secret_exists(), "the Secret is deleted even so"
    assert world.lease_holder() is None, "the lock is released"
    # the retries end: "gave up after 20s of retries" above says the budget was spent; from the
    # outage to the end of the node wait (the DaemonSet wait looks at the joins too) is bounded
    names = [name for _, name in run.tasks]
    node_wait = next(i for i, name in enumerate(names) if "Wait for every selected node to report" in name)
    wait_s = run.tasks[node_wait + 1][0] - down.fired_at
    assert wait_s <= 90, (wait_s, run.tail())

    again = runner.run("adopt-cluster.yml")
    assert again.returncode == 0, again.tail()
    assert "Revoked 1 stale token(s)" in again.text, again.tail()
    assert_clean_and_joined(world)
    reliability.result = ("failed naming the control plane (UNREACHABLE, gave up after 20s); Secret deleted, lock "
                          "released; the next run revoked the stale token and completed")
    reliability.figures.update({"from the outage to the node wait's end s": round(wait_s, 1),
                                "connections reset": world.counters()["requests"].get("(reset)", 0)})


@pytest.mark.long  # minutes: make test-long (see docs/reliability.md)
def test_kubernetes_api_unreachable_mid_run(sandbox, ready, runner, reliability):
    """The API server stops while the run waits for the nodes, and comes back 20 s later. The run
    fails naming the Kubernetes API (its cleanup cannot delete the Secret or release the lock
    while it is down); the next run deletes the Secret, takes the lock over and completes."""
    world = ready
    reliability.describe("Faults", "Kubernetes API server down for 20 s while waiting for the nodes")
    world.forget()
    before = {t["id"] for t in world.ours()}
    outage = {}

    def down_for_a_while(run):
        outage["down"] = time.monotonic()
        apiserver_down(sandbox)

        def up():
            time.sleep(20)
            apiserver_up(sandbox)
            outage["up"] = time.monotonic()

        outage["thread"] = threading.Thread(target=up)
        outage["thread"].start()

    run = runner.run("adopt-cluster.yml", triggers=[Trigger("Wait for every selected node to report", down_for_a_while,
                                                            delay=0.5)])
    outage["thread"].join()
    if run.returncode == 0:
        outcome = "succeeded (the API was back in time)"
    else:
        assert "cannot reach the Kubernetes API" in run.text or "Connection refused" in run.text, run.tail()
        assert "Traceback" not in run.output
        outcome = "failed naming the Kubernetes API"
    minted = new_tokens(world, before)
    assert len(minted) == 1 and minted[0]["revokedAt"], minted  # the control plane was there: revoked
    left = world.state()

    again = runner.run("adopt-cluster.yml")
    assert again.returncode == 0, again.tail()
    assert_clean_and_joined(world)
    reliability.result = (f"{outcome}; token revoked; left {'the Secret' if left['secret'] else 'no Secret'} and "
                          f"{'the lock' if left['lease'] else 'no lock'}; the next run cleaned up and completed")
    reliability.figures.update({"API down s": round(outage["up"] - outage["down"], 1),
                                "failed run s": round(run.seconds, 1)})


NEXT_IMAGE = "registry.example.com/better-compute/bcd:0.3.0@sha256:" + "c3" * 32


@pytest.mark.long  # minutes: make test-long (see docs/reliability.md)
def test_kubernetes_api_unreachable_mid_rollout_says_what_rolled_and_the_next_run_rolls_the_rest(
        sandbox, ready, runner, reliability):
    """The API server stops as soon as the canary's new pod exists, and stays down until the
    run ends: the rollout fails naming the Kubernetes API, the node that took the new pod, the
    DaemonSet left OnDelete and the way on; once it is back, the next run with the same
    bcd_image and bcd_rollout_force (a rollout left incomplete is refused without it) rolls the
    rest and exits 0 with every pod on the new digest."""
    world = ready
    reliability.describe("Faults", "Kubernetes API server down from the canary's new pod to the end of a rollout")
    stop = threading.Event()
    downed: list[float] = []

    def down_at_the_canary() -> None:
        while not stop.is_set():
            pods = world.core.list_namespaced_pod(world.namespace, label_selector="app.kubernetes.io/name=bcd").items
            if any(p.spec.containers[0].image == NEXT_IMAGE for p in pods):
                apiserver_down(sandbox)
                downed.append(time.monotonic())
                return
            time.sleep(0.1)

    watcher = threading.Thread(target=down_at_the_canary, daemon=True)
    watcher.start()
    try:
        run = runner.run("rollout.yml", "-e", f"bcd_image={NEXT_IMAGE}", "-e", "bcd_rollout_gate_timeout=60")
    finally:
        stop.set()
        watcher.join(5)
        apiserver_up(sandbox)
    assert downed, "the canary's pod never took the new image"
    assert run.returncode != 0, run.tail()
    assert "Traceback" not in run.output
    text = run.text
    assert "cannot reach the Kubernetes API" in text, run.tail()
    # the API may fail the canary's gate (then the rollback, which cannot reach it either) or a
    # step of the rollout itself (it stops there): either way the canary is named, and the way on
    if "rollback incomplete" in text:
        assert "the canary health gate failed on gpu-node-1" in text, run.tail()
    else:
        assert "stopped:" in text and "1 node(s) took the new pod before it stopped (gpu-node-1)" in text, run.tail()
        assert "is left with updateStrategy OnDelete" in text, run.tail()
    assert "rollout.yml again with -e bcd_rollout_force=true" in text, run.tail()

    again = runner.run("rollout.yml", "-e", f"bcd_image={NEXT_IMAGE}", "-e", "bcd_rollout_force=true")
    assert again.returncode == 0, again.tail()
    images = {p.spec.node_name: p.spec.containers[0].image for p in world.core.list_namespaced_pod(
        world.namespace, label_selector="app.kubernetes.io/name=bcd").items if not p.metadata.deletion_timestamp}
    assert images == dict.fromkeys(world.gpu_nodes(), NEXT_IMAGE), images
    reliability.result = ("failed naming the Kubernetes API, the node that took the new pod and the way on; the next "
                          "run rolled the rest")
    reliability.figures.update({"failed run s": round(run.seconds, 1), "next run s": round(again.seconds, 1)})


@contextlib.contextmanager
def stuck_node(world: World, name: str):
    """A GPU Node that stays Ready but runs no pod: no KWOK plays it, and a stand-in for its
    kubelet only renews its Lease (every 5 s) while the block runs, as a kubelet that heartbeats
    but never starts a container does. Without the Lease the node lifecycle controller would mark
    it NotReady after its grace period and taint it, and the DaemonSet controller would then want
    no pod there: a different scenario, reached or not by the run depending on the machine's pace.
    The block starts once the DaemonSet counts the node; the Node and its pods are removed
    afterwards."""
    from kubernetes import client

    from sandbox import cluster

    coord = client.CoordinationV1Api(world.core.api_client)
    body = cluster.node_body(name, True, "v" + world.sandbox.kube_version())
    body["metadata"]["annotations"] = {}
    body["metadata"]["labels"][EXTRA_NODE_LABEL] = "true"
    status = body.pop("status")
    node = world.core.create_node(body)

    def now() -> str:
        return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    since = now()[:19] + "Z"  # conditions take whole seconds
    status["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "set by a test",
                             "lastHeartbeatTime": since, "lastTransitionTime": since}]
    world.core.patch_node_status(name, {"status": status})
    owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.metadata.uid}
    coord.create_namespaced_lease("kube-node-lease", {
        "metadata": {"name": name, "ownerReferences": [owner]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now()}})
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(5):
            coord.patch_namespaced_lease(name, "kube-node-lease", {"spec": {"renewTime": now()}})

    beat = threading.Thread(target=renew, daemon=True)
    beat.start()

    def counted() -> bool:
        # the scenario is a pod that exists and never turns Ready: until the DaemonSet controller
        # counts the node (it may still be catching up after an earlier test), a run's rollout
        # wait sees a complete rollout and only the node wait fails, minutes later
        ds = world.apps.read_namespaced_daemon_set("bcd", world.namespace)
        gpu = len(world.core.list_node(label_selector="nvidia.com/gpu.present=true").items)
        return (ds.status.observed_generation == ds.metadata.generation
                and (ds.status.desired_number_scheduled or 0) == gpu)

    try:
        world.wait(counted, timeout=120, why=f"the DaemonSet to count {name}")
        yield
    finally:
        stop.set()
        beat.join()
        world.core.delete_node(name)
        for pod in world.core.list_namespaced_pod(world.namespace, field_selector=f"spec.nodeName={name}").items:
            world.core.delete_namespaced_pod(pod.metadata.name, world.namespace, grace_period_seconds=0)


@pytest.mark.long  # minutes: make test-long (see docs/reliability.md)
def test_a_node_whose_pod_never_turns_ready(ready, runner, reliability):
    world = ready
    reliability.describe("Faults", "a node whose bcd pod never turns Ready (bcd_rollout_timeout=20s)")
    name = "gpu-node-stuck"
    with stuck_node(world, name):
        before = {t["id"] for t in world.ours()}
        run = runner.run("adopt-cluster.yml", "-e", "bcd_rollout_timeout=20")
        assert run.returncode != 0
        text = run.text
        # every GPU node's pod but the stuck one's (earlier tests may have added GPU nodes)
        gpu = len(world.core.list_node(label_selector="nvidia.com/gpu.present=true").items)
        said = f"did not roll out within 20s: {gpu - 1} of {gpu} pods available"
        assert said in text, run.tail()
        assert f"{name} - - - <- " in text, run.tail()  # the report names the node and why (its pod not Ready)
        minted = new_tokens(world, before)
        assert len(minted) == 1 and minted[0]["maxUses"] == 1 and minted[0]["revokedAt"], minted
        assert world.clean(), world.state()
    reliability.result = (f"failed: '{said}', the report naming the node; "
                          "token (1 use) revoked, Secret deleted, lock released")
    reliability.figures.update({"seconds": round(run.seconds, 1)})


# --- make test-long -------------------------------------------------------------------------


@pytest.mark.long
def test_latency_slows_but_does_not_break_the_run(ready, runner, reliability):
    world = ready
    reliability.describe("Faults", "control plane latency: 1.5 s added to every answer, nodes to join")
    world.forget()
    world.admin.set_faults({"latencySeconds": 1.5})
    since = time.time()
    run = runner.run("adopt-cluster.yml")
    world.admin.clear_faults()
    assert run.returncode == 0, run.tail()
    assert_clean_and_joined(world)
    answers = world.access(since)
    assert answers and all(status == 200 for _, _, status in answers), answers
    assert world.counters()["faulted"] == 0
    reliability.result = "succeeded; no retry (every answer 200), only slower"
    reliability.figures.update({"requests": len(answers), "seconds": round(run.seconds, 1)})


@pytest.mark.long
@pytest.mark.parametrize("mode", ["hang", "reset"])
@pytest.mark.parametrize("at", ["Mint the join token into its Secret", "Apply the ConfigMap and the DaemonSet",
                                "Revoke the token and delete the Secret"])
def test_control_plane_down_for_a_while_at_each_call(mode, at, ready, runner, reliability):
    """Outages of 20 s (requests held unanswered, or connections reset) before the mint, the
    node wait and the revoke: each is waited out (bcd_control_plane_timeout is 120 s)."""
    world = ready
    reliability.describe("Faults", f"control plane down for 20 s ({mode}) from '{at}'")
    world.forget()
    before = {t["id"] for t in world.ours()}
    run = runner.run("adopt-cluster.yml", triggers=[Trigger(at, fault(world, {"outageSeconds": 20, "outageMode": mode}))])
    assert run.returncode == 0, run.tail()
    assert_clean_and_joined(world)
    minted = new_tokens(world, before)
    assert len(minted) == 1 and minted[0]["revokedAt"], minted
    reliability.result = "succeeded after the outage; one token minted, revoked"
    reliability.figures.update({"connections reset": world.counters()["requests"].get("(reset)", 0),
                                "seconds": round(run.seconds, 1)})


@pytest.mark.long
def test_retries_are_jittered_and_capped(ready, runner, reliability):
    """Five runs, each meeting four 503s on pools.get in the preflight (the runs stop after the
    preflight on purpose: a selector that selects nothing): the waits between attempts vary from
    run to run and stay under the backoff caps 0.5, 1, 2 and 4 s."""
    world = ready
    reliability.describe("Faults", "retry spacing over 5 runs x 4 consecutive 503s (jitter, backoff caps)")
    spacing = []
    for _ in range(5):
        world.admin.set_faults({"errorCount": 4, "errorStatus": 503, "procedures": ["pools.get"]})
        since = time.time()
        run = runner.run("adopt-cluster.yml", "-e", '{"bcd_node_selector": {"bcd-reliability/none": "x"}}')
        assert run.returncode != 0 and "selects no Node" in run.text, run.tail()
        times = [t for t, _, _ in world.access(since, "pools.get")]
        assert len(times) == 5, times
        spacing.append(gaps(times))
    world.admin.clear_faults()
    for k, cap in enumerate((0.5, 1, 2, 4)):
        column = [g[k] for g in spacing]
        assert all(g < cap + 0.5 for g in column), (k, column)
        assert len({round(g, 2) for g in column}) > 1, f"attempt {k + 2}: the same wait every run: {column}"
    reliability.result = "every wait under its cap; the waits differ from run to run (full jitter)"
    reliability.figures.update({f"waits before attempt {k + 2} s": [g[k] for g in spacing] for k in range(4)})


@pytest.mark.long
@pytest.mark.parametrize("at", ["Mint a hosted join token into its Secret", "Apply the objects with server-side apply",
                                "bcd_daemonset : Wait for the DaemonSet to roll out",
                                "Revoke this run's join token and delete its Secret"])
def test_kubernetes_api_unreachable_at_each_step(at, sandbox, ready, runner, reliability):
    world = ready
    reliability.describe("Faults", f"Kubernetes API server down for 20 s from '{at}'")
    world.forget()
    before = {t["id"] for t in world.ours()}
    done = threading.Event()

    def down_for_a_while(run):
        apiserver_down(sandbox)

        def up():
            time.sleep(20)
            apiserver_up(sandbox)
            done.set()

        threading.Thread(target=up).start()

    nth = 2 if at == "Apply the objects with server-side apply" else 1  # the ConfigMap and DaemonSet, not the Namespace
    run = runner.run("adopt-cluster.yml", triggers=[Trigger(at, down_for_a_while, delay=0.2, nth=nth)])
    done.wait(120)
    if run.returncode != 0:
        assert "Kubernetes API" in run.text or "Connection refused" in run.text or "connection refused" in run.text, \
            run.tail()
        assert "Traceback" not in run.output
    for tok in new_tokens(world, before):
        assert tok["revokedAt"], tok  # the control plane was there all along
    again = runner.run("adopt-cluster.yml")
    assert again.returncode == 0, again.tail()
    assert_clean_and_joined(world)
    reliability.result = (("succeeded" if run.returncode == 0 else "failed naming the Kubernetes API") +
                          "; its token revoked; the next run cleaned up and completed")
