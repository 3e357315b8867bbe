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


def owned(name: str, node: str, created: str, **meta) -> dict:
    return {"metadata": {"name": name, "uid": name, "creationTimestamp": created, "ownerReferences": [{"uid": "u1"}],
                         "labels": {"pod-template-generation": "3"}, **meta},
            "spec": {"nodeName": node}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_look_judges_only_the_pods_that_changed_since_the_last_one():
    from ansible_collections.bcd.kubernetes.plugins.modules.bcd_daemonset_wait import Judge

    judge = Judge("2026-01-01T00:00:00Z")
    pods = [owned("a", "n1", "t1"), owned("b", "n2", "t1")]
    first = judge.by_node(pods, ds("3"))
    assert judge.judged == 2 and all(v.ready and v.updated for _, v in first.values())
    judge.by_node(pods, ds("3"))
    assert judge.judged == 2  # the same objects: nothing judged again
    # a watch replaces a changed pod's object: that pod alone is judged again
    crashed = owned("b", "n2", "t1")
    crashed["status"] = {"phase": "Running", "containerStatuses": [CRASH]}
    again = judge.by_node([pods[0], crashed], ds("3"))
    assert judge.judged == 3 and not again["n2"][1].ready and again["n2"][1].fatal
    assert [b["node"] for b in cannot_start({n: p for n, (p, _) in again.items()}, judge.since, ds("3"), judge=judge)] == ["n2"]
    assert judge.judged == 3
    # a new template generation: every verdict is judged again (updated or not)
    later = judge.by_node([pods[0], crashed], ds("4"))
    assert judge.judged == 5 and not later["n1"][1].updated


def test_a_look_picks_the_pods_as_pods_by_node_does():
    from ansible_collections.bcd.kubernetes.plugins.modules.bcd_daemonset_wait import Judge

    pods = [owned("old", "n1", "2026-01-01T00:00:01Z"), owned("new", "n1", "2026-01-01T00:00:02Z"),
            owned("going", "n2", "2026-01-01T00:00:03Z", deletionTimestamp="2026-01-01T00:00:04Z"),
            {**owned("foreign", "n3", "t"), "metadata": {"name": "foreign", "uid": "f", "ownerReferences": [{"uid": "x"}]}}]
    picked = Judge("2026-01-01T00:00:00Z").by_node(pods, ds("3"))
    assert {n: p["metadata"]["name"] for n, (p, _) in picked.items()} == {"n1": "new"}


def test_verdicts_of_pods_gone_are_forgotten():
    from ansible_collections.bcd.kubernetes.plugins.modules.bcd_daemonset_wait import Judge

    judge = Judge("2026-01-01T00:00:00Z")
    for i in range(200):
        judge.by_node([owned(f"p{i}", "n1", "t")], ds("3"))
    assert len(judge._kept) <= 2 + 64
