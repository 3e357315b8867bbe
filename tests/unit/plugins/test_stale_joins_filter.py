"""The pods restarted before the DaemonSet wait (filter bcd_stale_joins, module_utils
bcd_kube.stale_joins): a join that failed before the read and a pod still Pending; never a join
that failed after it, one that completed, or a pod that runs."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.filter.bcd import bcd_stale_joins
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import JOIN_CONTAINER

SINCE = "2026-12-02T04:00:00Z"


def pod(name: str, phase: str, join: dict) -> dict:
    return {"metadata": {"name": name, "namespace": "bcd-system", "uid": f"uid-{name}"},
            "status": {"phase": phase, "initContainerStatuses": [{"name": JOIN_CONTAINER, **join}]}}


def failed(at: str) -> dict:
    return {"terminated": {"exitCode": 1, "reason": "Error", "message": "no join token", "finishedAt": at}}


def test_only_joins_that_failed_before_the_read_and_pods_still_pending():
    pods = [
        # failed before the read, now backing off: restarted
        pod("backing-off", "Pending", {"state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                        "lastState": failed("2026-12-02T03:59:00Z")}),
        # failed before the read, shown as terminated: restarted
        pod("terminated", "Pending", {"state": failed("2026-12-02T03:58:00Z")}),
        # failed after the read: the wait's to judge (a refusal), not restarted
        pod("after", "Pending", {"state": failed("2026-12-02T04:00:05Z")}),
        # joined since (exit 0): not restarted, whatever its earlier runs did
        pod("joined", "Pending", {"state": {"terminated": {"exitCode": 0, "finishedAt": "2026-12-02T03:59:30Z"}},
                                  "lastState": failed("2026-12-02T03:58:00Z")}),
        # runs: not restarted
        pod("running", "Running", {"lastState": failed("2026-12-02T03:58:00Z")}),
    ]
    assert bcd_stale_joins(pods, SINCE) == [
        {"name": "backing-off", "namespace": "bcd-system", "uid": "uid-backing-off"},
        {"name": "terminated", "namespace": "bcd-system", "uid": "uid-terminated"},
    ]


def test_no_pods():
    assert bcd_stale_joins(None, SINCE) == [] == bcd_stale_joins([], SINCE)


def test_a_run_in_the_same_second_or_started_before_is_stale_and_never_a_refusal():
    """Status times are whole seconds, and ``since`` is taken once the token exists: a run that
    failed in the same second may have read its mounts just before, and a run that started before
    it (a slow join, its failure stamped later) read them before. Such a pod is restarted and the
    wait never counts it as refused; the filter and the wait's judgement split the failures
    exactly in two."""
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import join_failure

    def run(started: str | None, finished: str) -> dict:
        term = failed(finished)
        if started:
            term["terminated"]["startedAt"] = started
        return {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": term}

    pods = [
        pod("same-second", "Pending", run(None, SINCE)),
        pod("started-before", "Pending", run("2026-12-02T03:59:59Z", "2026-12-02T04:00:03Z")),
        pod("started-after", "Pending", run("2026-12-02T04:00:01Z", "2026-12-02T04:00:01Z")),
        pod("finished-after", "Pending", run(None, "2026-12-02T04:00:01Z")),
    ]
    stale = [p["name"] for p in bcd_stale_joins(pods, SINCE)]
    refused = [p["metadata"]["name"] for p in pods if join_failure(p, since=SINCE)]
    assert stale == ["same-second", "started-before"]
    assert refused == ["started-after", "finished-after"]
