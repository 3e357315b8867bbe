"""The pod side of a node's health (module_utils/bcd_health.py): each kubelet state a bcd pod can
show, as the API returns it, and the judgement audit, adopt, the waits and the gates make of it."""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_health import (
    container_failure,
    failing_pods,
    healthy_text,
    pod_failure,
    pod_health,
    pod_updated,
    unhealthy_pods,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import pod_state, slim_pod
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import fatal

IMAGE = "registry.example.com/better-compute/bcd@sha256:" + "a" * 64
MESSAGE = "panic: nvml: driver/library version mismatch"
JOINED = {"name": "join", "ready": True, "restartCount": 0,
          "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-01-01T00:00:05Z"}}}


def ds(generation="3"):
    return {"metadata": {"name": "bcd", "uid": "u1", "annotations": {"deprecated.daemonset.template.generation": generation}},
            "spec": {"updateStrategy": {"type": "RollingUpdate"}}}


def pod(bcd: dict, ready: bool = False, rev="h3", generation="3", phase="Running", init=(JOINED,)):
    return {"metadata": {"name": "bcd-x7k2p", "namespace": "bcd-system", "uid": "p1",
                         "labels": {"controller-revision-hash": rev, "pod-template-generation": generation},
                         "ownerReferences": [{"uid": "u1", "kind": "DaemonSet", "name": "bcd"}]},
            "spec": {"nodeName": "gpu-node-6", "containers": [{"name": "bcd", "image": IMAGE}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "initContainerStatuses": list(init), "containerStatuses": [{"name": "bcd", "image": IMAGE, **bcd}]}}


RUNNING = {"ready": True, "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:06Z"}}}
LAST = {"terminated": {"exitCode": 1, "reason": "Error", "message": MESSAGE + "\n",
                       "startedAt": "2026-01-01T00:01:00Z", "finishedAt": "2026-01-01T00:01:01Z"}}
# a kubelet's container that exits at once: CrashLoopBackOff with the exit in lastState ...
CRASHLOOP = {"ready": False, "restartCount": 2, "lastState": LAST,
             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container=bcd"}}}
# ... and, between the back-offs, the exit itself (kubectl: Error)
EXITED = {"ready": False, "restartCount": 1, "state": LAST}
# a crash-looping container that runs again, between two crashes
RESTARTED = {"ready": True, "restartCount": 3, "lastState": LAST, "state": {"running": {"startedAt": "2026-01-01T00:01:21Z"}}}


def test_a_ready_pod_on_the_current_template_is_healthy():
    healthy = pod(RUNNING, ready=True)
    assert pod_health(healthy, ds(), "h3", since="2026-01-01T00:00:00Z") is None
    assert pod_failure(healthy) is None and fatal(healthy) is None
    assert healthy_text(healthy) == "pod bcd-x7k2p Ready, revision h3, 0 restarts"


def test_a_crash_looping_pod_fails_at_once_naming_the_pod_its_state_and_its_last_exit():
    crashing = pod(CRASHLOOP)
    why = pod_health(crashing, ds(), "h3")
    assert why == ("pod bcd-x7k2p not Ready: container bcd waiting: CrashLoopBackOff, 2 restarts; last exit 1 (Error) "
                   f"at 2026-01-01T00:01:01Z: {MESSAGE}")
    assert pod_failure(crashing) == why
    # the gates and the DaemonSet wait: from the first restart, not the third
    assert fatal(pod({**CRASHLOOP, "restartCount": 0})).startswith("pod bcd-x7k2p not Ready: container bcd waiting: "
                                                                   "CrashLoopBackOff, 0 restarts; last exit 1 (Error)")
    # what a wait that times out says of it quotes the last exit too
    assert f"bcd waiting: CrashLoopBackOff - back-off 20s restarting failed container=bcd (last exit 1 (Error) " \
           f"at 2026-01-01T00:01:01Z: {MESSAGE})" in pod_state(crashing)


def test_an_exited_container_fails_as_kubectl_shows_error():
    why = pod_failure(pod(EXITED))
    assert why == f"pod bcd-x7k2p not Ready: container bcd terminated, 1 restart; last exit 1 (Error) at 2026-01-01T00:01:01Z: {MESSAGE}"


def test_a_restart_during_the_run_fails_even_when_the_pod_is_ready_again():
    again = pod(RESTARTED, ready=True)
    assert pod_health(again, ds(), "h3", since="2026-01-01T00:00:00Z") == (
        "pod bcd-x7k2p not Ready: container bcd restarted during this run (3 restarts); last exit 1 (Error) at "
        f"2026-01-01T00:01:01Z: {MESSAGE}")
    assert fatal(again, "2026-01-01T00:01:01Z") is not None, "a run that began the second it exited"
    # a restart before the run began is the past: the pod is healthy now
    assert pod_health(again, ds(), "h3", since="2026-01-01T00:05:00Z") is None
    assert pod_health(again, ds(), "h3") is None


@pytest.mark.parametrize("reason,heals", [("InvalidImageName", False), ("CreateContainerConfigError", False),
                                          ("RunContainerError", False), ("ImagePullBackOff", True),
                                          ("ContainerCreating", True), ("PodInitializing", True)])
def test_only_waiting_reasons_that_do_not_heal_fail_at_once(reason, heals):
    waiting = pod({"ready": False, "restartCount": 0, "state": {"waiting": {"reason": reason, "message": "m"}}})
    assert (pod_failure(waiting) is None) is heals
    assert pod_health(waiting, ds(), "h3") is not None, "not Ready either way"


def test_a_refused_join_is_the_join_checks_own_not_a_container_failure():
    """The join init container has its own judgement (a stale failure, the refusal's reason):
    container_failure leaves it alone; fatal names it as a refused join."""
    refused = pod({"ready": False, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}, phase="Pending",
                  init=({"name": "join", "restartCount": 1, "lastState": {"terminated": {
                      "exitCode": 1, "reason": "Error", "message": "Refused: maintenance", "finishedAt": "2026-01-01T00:00:09Z"}},
                         "state": {"waiting": {"reason": "CrashLoopBackOff"}}},))
    assert container_failure(refused) is None and pod_failure(refused) is None
    assert pod_health(refused, ds(), "h3") == ("pod bcd-x7k2p not Ready: bcd join exited 1: Refused: maintenance "
                                               "(CrashLoopBackOff, 1 restart(s))")
    assert fatal(refused) == "pod bcd-x7k2p: bcd join exited 1: Refused: maintenance (CrashLoopBackOff, 1 restart(s))"


def test_an_older_template_is_not_healthy_unless_the_revision_says_it_is_current():
    old = pod(RUNNING, ready=True, rev="h2", generation="2")
    assert pod_updated(old, ds("3"), "h3") is False
    assert pod_health(old, ds("3"), "h3") == ("pod bcd-x7k2p runs an older pod template (revision h2), not the DaemonSet's "
                                              "current one (h3): its rollout is not complete")
    # after a rollback the DaemonSet's template is revision h2's again: its pods are current by hash
    assert pod_updated(old, ds("4"), "h2") is True and pod_health(old, ds("4"), "h2") is None
    # without the revision, the template generation decides (the DaemonSet wait)
    assert pod_updated(old, ds("2")) is True and pod_updated(old, ds("3")) is False
    assert pod_updated(old, None) is True


def test_no_pod_a_failed_pod_and_a_pod_not_ready_yet():
    assert pod_health(None, ds(), "h3") == "no bcd pod on the Node"
    evicted = pod(RUNNING, phase="Failed")
    evicted["status"]["reason"] = "Evicted"
    assert pod_failure(evicted) == "pod bcd-x7k2p failed (Evicted)"
    starting = pod({"ready": False, "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:06Z"}}})
    assert pod_failure(starting) is None
    assert pod_health(starting, ds(), "h3") == "pod bcd-x7k2p not Ready (phase Running; bcd running, not ready)"


def test_the_judgement_reads_a_slim_pod_as_the_whole_pod():
    for status in (RUNNING, CRASHLOOP, EXITED, RESTARTED):
        whole = pod(status, ready=status is RUNNING)
        assert pod_health(slim_pod(whole), ds(), "h3", "2026-01-01T00:00:00Z") == pod_health(whole, ds(), "h3", "2026-01-01T00:00:00Z")


def test_per_node_lists():
    by_node = {"gpu-node-1": pod(RUNNING, ready=True), "gpu-node-6": pod(CRASHLOOP)}
    names = ["gpu-node-1", "gpu-node-2", "gpu-node-6"]
    assert [(u["node"], u["pod"]) for u in unhealthy_pods(names, by_node, ds(), "h3")] == [
        ("gpu-node-2", None), ("gpu-node-6", "bcd-x7k2p")]
    assert list(failing_pods(names, by_node)) == ["gpu-node-6"], "no pod yet is waited for, not a failure"
