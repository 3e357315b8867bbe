"""Which pods fail the DaemonSet wait at once (bcd_daemonset_wait.cannot_start): a failing pod
of the DaemonSet's current template, by its template generation or, after an edit undone or a
rollback, by its revision's hash; never one of an older template, which the controller replaces."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.modules.bcd_daemonset_wait import cannot_start

CRASH = {"name": "bcd", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": "panic: x"}}}


def ds(generation: str) -> dict:
    return {"metadata": {"uid": "u1", "annotations": {"deprecated.daemonset.template.generation": generation}}}


def pod(generation: str, rev: str) -> dict:
    return {"metadata": {"name": "bcd-a", "labels": {"pod-template-generation": generation, "controller-revision-hash": rev}},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Running", "containerStatuses": [CRASH]}}


def test_a_crash_looping_pod_of_the_current_generation_cannot_start():
    (bad,) = cannot_start({"n1": pod("3", "h3")}, "2026-01-01T00:00:00Z", ds("3"))
    assert bad["node"] == "n1" and bad["pod"] == "bcd-a"
    assert bad["why"].startswith("pod bcd-a not Ready: container bcd waiting: CrashLoopBackOff") and "panic: x" in bad["why"]


def test_one_of_an_older_template_is_left_to_the_controller_unless_its_hash_is_current():
    old = {"n1": pod("1", "h1")}
    assert cannot_start(old, "2026-01-01T00:00:00Z", ds("3")) == []
    assert cannot_start(old, "2026-01-01T00:00:00Z", ds("3"), revision="h3") == []
    # the template edited and put back: generation 3, but revision h1's template again
    assert [b["node"] for b in cannot_start(old, "2026-01-01T00:00:00Z", ds("3"), revision="h1")] == ["n1"]
