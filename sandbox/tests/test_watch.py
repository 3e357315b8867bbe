"""The waits follow a watch (plugins/module_utils/bcd_watch.py), against the sandbox's API server.

The DaemonSet wait lists the DaemonSet and its pods once, then learns of each change from a
watch: it returns within a second or two of the rollout completing, never lists the pods again,
and lists them again only when the server answers 410 Gone (forced here with a resourceVersion
the server no longer keeps). The rollout's health gate lists the pods once for the whole run.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from tests.helpers import run_module, run_playbook

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE, NAME = "bcd-system", "bcd"
NEXT_IMAGE = f"registry.example.com/better-compute/bcd:0.7.0@sha256:{'a7' * 32}"


def _config(cpvars) -> dict:
    inventory = yaml.safe_load((ROOT / "inventories" / "sandbox" / "host_vars" / "sandbox.yml").read_text())
    out = {k: v for k, v in cpvars.items() if k != "bcd_api_key"}
    out.update(bcd_image=inventory["bcd_image"], bcd_node_selector=inventory["bcd_node_selector"],
               bcd_rollout_soak=inventory["bcd_rollout_soak"])
    return out


def _rolled_out(ds) -> bool:
    st = ds.status
    want = st.desired_number_scheduled or 0
    return ((st.observed_generation or 0) >= (ds.metadata.generation or 0)
            and (st.updated_number_scheduled or 0) >= want and (st.number_available or 0) >= want)


def _unavailable_one_pod(sandbox) -> None:
    """Delete one bcd pod and wait until the DaemonSet counts it unavailable (the replacement
    stays so for minReadySeconds, the soak: seconds)."""
    with sandbox.api_client() as api:
        core, apps = k8s.CoreV1Api(api), k8s.AppsV1Api(api)
        pod = core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=bcd").items[0]
        core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        deadline = time.monotonic() + 30
        while _rolled_out(apps.read_namespaced_daemon_set(NAME, NAMESPACE)):
            assert time.monotonic() < deadline, "the DaemonSet never counted the deleted pod"
            time.sleep(0.1)


class RolloutSeen(threading.Thread):
    """Watches the DaemonSet (the kubernetes client's own watch) and notes when it first is rolled out."""

    def __init__(self, sandbox):
        super().__init__(daemon=True)
        self.sandbox = sandbox
        self.at: float | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        with self.sandbox.api_client() as api:
            apps = k8s.AppsV1Api(api)
            w = k8s_watch.Watch()
            self.ready.set()
            for event in w.stream(apps.list_namespaced_daemon_set, NAMESPACE, field_selector=f"metadata.name={NAME}",
                                  timeout_seconds=120):
                if _rolled_out(event["object"]):
                    self.at = time.monotonic()
                    w.stop()


@pytest.mark.long  # slow: make test-long keeps make test within its budget
@pytest.mark.usefixtures("adopted")
def test_the_daemonset_wait_lists_once_and_returns_as_the_rollout_completes(sandbox, cpvars):
    _unavailable_one_pod(sandbox)
    seen = RolloutSeen(sandbox)
    seen.start()
    seen.ready.wait(10)
    # interval 2: without a change, the wait would next look at the DaemonSet 60 s (30 intervals) on
    code, result = run_module("bcd_daemonset_wait", {"config": _config(cpvars), "kubeconfig": str(sandbox.kubeconfig),
                                                     "timeout": 120, "interval": 2})
    returned = time.monotonic()
    seen.join(10)
    assert code == 0 and result["done"], result
    watched = result["watch"]
    # the DaemonSet, its pods and its FailedCreate events listed once each, then only watched
    assert watched["lists"] == 3 and watched["relists"] == 0, watched
    assert watched["watches"] >= 2 and watched["events"] >= 1, watched
    # the change woke it, not its 60 s fallback look: a mechanism, not a speed (make bench has those)
    assert seen.at is not None
    assert returned - seen.at < 30, (returned - seen.at, watched)


@pytest.mark.long  # slow: make test-long keeps make test within its budget
@pytest.mark.usefixtures("adopted")
def test_the_daemonset_wait_lists_the_pods_again_after_410_gone(sandbox, cpvars):
    from sandbox import cluster

    _unavailable_one_pod(sandbox)
    # resourceVersion 1, long gone on a cluster that has run for a while: the server answers 410.
    # A young sandbox still keeps that history (etcd and the watch cache) and replays it: let it go.
    cluster.expire_pod_watch_history(sandbox.dir)
    code, result = run_module("bcd_daemonset_wait", {"config": _config(cpvars), "kubeconfig": str(sandbox.kubeconfig),
                                                     "timeout": 120, "watch_from": "1"})
    assert code == 0 and result["done"], result
    watched = result["watch"]
    assert watched["relists"] == 1 and watched["lists"] == 4, watched


def _task_result(stdout: str, key: str) -> dict:
    """The result of the (one) task whose result has ``key``, from the json callback's output."""
    doc = json.loads(stdout[stdout.index("{"):])
    for play in doc["plays"]:
        for task in play["tasks"]:
            for res in task["hosts"].values():
                if key in res:
                    return res
    raise AssertionError(f"no task result with {key!r}")


@pytest.mark.long
@pytest.mark.usefixtures("adopted")
def test_the_rollout_gate_lists_the_pods_once_for_the_whole_run(sandbox):
    run = run_playbook("rollout.yml", "-e", f"bcd_image={NEXT_IMAGE}", "-e", "bcd_rollout_max_unavailable=50%",
                       env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    result = _task_result(run.stdout, "watch")
    watched = result["watch"]
    stages = [s for s in result["summary"]["stages"] if s.get("outcome") == "passed"]
    assert len(stages) >= 2, result["summary"]
    # one list of the pods however many stages and full checks; each pod change came by the watch
    assert watched["pod_lists"] == 1 + watched["pod_relists"], watched
    assert watched["events"] >= len(stages), watched


def test_a_parked_follow_goes_on_watching_for_the_next_slice_of_the_same_wait(sandbox):
    """In the controller's worker, a wait's slice parks its watches and the next slice takes them
    over (one list for the whole wait); a module process stops them (nothing would take them)."""
    from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_watch
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import Kube, api_client, path

    kube = Kube(api_client(str(sandbox.kubeconfig), None))
    where = path("configmaps", namespace="default")
    query = {"labelSelector": f"bcd-test-park={time.time_ns()}"}
    first = bcd_watch.Follow(kube, where, query).start(time.monotonic() + 5)
    try:
        bcd_watch.IN_WORKER = False
        assert not bcd_watch.park(first)  # a module process: stopped, nothing parked
        assert bcd_watch.resume(kube, where, query, threading.Event()) is None

        follow = bcd_watch.Follow(kube, where, query).start(time.monotonic() + 5)
        bcd_watch.IN_WORKER = True
        assert bcd_watch.park(follow, grace=30)
        changed = threading.Event()
        again = bcd_watch.resume(kube, where, query, changed)
        assert again is follow and again.lists == 1 and changed.is_set()
        changed.clear()
        # past the first run's limit (5 s), the parked watch still sees a change
        time.sleep(6)
        name = f"park-{time.time_ns()}"
        with sandbox.api_client() as api:
            k8s.CoreV1Api(api).create_namespaced_config_map("default", k8s.V1ConfigMap(
                metadata=k8s.V1ObjectMeta(name=name, labels={"bcd-test-park": query["labelSelector"].split("=")[1]})))
            try:
                assert changed.wait(20), "the parked watch missed the change"
                assert {o["metadata"]["name"] for o in again.objects().values()} == {name}
                assert again.lists == 1 and again.relists == 0
            finally:
                k8s.CoreV1Api(api).delete_namespaced_config_map(name, "default")
        # parked again past its grace, the thread ends and the next slice lists anew
        assert bcd_watch.park(again, grace=0.1)
        time.sleep(2)
        assert bcd_watch.resume(kube, where, query, threading.Event()) is None
    finally:
        bcd_watch.IN_WORKER = False
        bcd_watch.stop_parked()
        first.stop()


@pytest.mark.usefixtures("adopted")
def test_the_daemonset_wait_in_several_runs_lists_the_pods_once(sandbox, tmp_path):
    """Through its action plugin (in the controller's worker) a wait longer than one progress
    slice takes the DaemonSet's, pods' and events' watches over from slice to slice: one list of
    each for the whole wait, however many progress lines."""
    with sandbox.api_client() as api:
        apps = k8s.AppsV1Api(api)
        before = apps.read_namespaced_daemon_set(NAME, NAMESPACE).spec.min_ready_seconds
        # a replaced pod counts available 45 s after it is Ready: the wait outlasts its first slice
        apps.patch_namespaced_daemon_set(NAME, NAMESPACE, {"spec": {"minReadySeconds": 45}})
        try:
            _unavailable_one_pod(sandbox)
            play = tmp_path / "wait.yml"
            play.write_text(yaml.safe_dump([{"name": "Wait", "hosts": "sandbox", "gather_facts": False, "tasks": [
                {"name": "Wait for the DaemonSet", "bcd.kubernetes.bcd_daemonset_wait": {"timeout": 240},
                 "register": "waited"},
                {"name": "Keep what it watched", "ansible.builtin.copy": {
                    "content": "{{ waited.watch | to_json }}", "dest": str(tmp_path / "watched.json"), "mode": "0600"}}]}]))
            run = run_playbook(str(play))
        finally:
            apps.patch_namespaced_daemon_set(NAME, NAMESPACE, {"spec": {"minReadySeconds": before}})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "waiting for the DaemonSet to roll out" in run.stdout + run.stderr, run.stdout[-3000:]  # several runs
    watched = json.loads((tmp_path / "watched.json").read_text())
    # the last run took the DaemonSet's, the pods' and the events' follows over: listed once each
    assert watched["resumed"] == 3, watched
    assert watched["lists"] == 3 + watched["relists"], watched
