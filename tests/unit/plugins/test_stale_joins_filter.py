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
