"""A rollout's stage plan's own limit, from its report and the pods' timestamps.

A staged rollout judges each stage whole before the next starts: every node of the stage runs
the new pod, Ready, then the soak (``bcd_rollout_soak``, the DaemonSet's ``minReadySeconds``).
So no rollout with that plan can be faster than ``stages x (slowest pod + soak)``, whatever runs
it: that is the limit ``make bench`` reports ours beside, as well as beside the floor
(``kubectl rollout status``, which has no canary and no stages).

- stages: the stages of the report (``bcd_report_out`` of rollout.yml) that rolled a node;
- slowest pod: over the pods running the rolled-to image on a node a stage rolled, the longest
  time from its stage's start (``stages[].started_at``) to the pod's Ready condition
  (``status.conditions[type=Ready].lastTransitionTime``): the old pod's deletion, the new pod's
  creation, scheduling and start, as the cluster did them. Both timestamps are whole seconds.
"""

from __future__ import annotations

import datetime as dt


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _ready_at(pod: dict) -> dt.datetime | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True" and cond.get("lastTransitionTime"):
            return _time(cond["lastTransitionTime"])
    return None


def _image(pod: dict) -> str | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    return containers[0].get("image") if containers else None


def stage_limit(report: dict, pods: list[dict], image: str, soak_s: float) -> dict:
    """The limit of one rollout's stage plan.

    ``report``: rollout.yml's JSON report (``stages``: ``name``, ``nodes``, ``started_at``);
    ``pods``: the bcd pods after the rollout (Kubernetes Pod objects as JSON);
    ``image``: the image rolled to; ``soak_s``: ``bcd_rollout_soak`` in seconds.

    Returns ``{"stages", "slowest_pod_s", "slowest": {"node", "stage"}, "soak_s", "limit_s"}``
    (seconds). Raises ``ValueError`` when a rolled node has no Ready pod on ``image``: the
    rollout did not do what it reported, so there is no limit to compare it with.
    """
    stages = [s for s in report.get("stages") or [] if s.get("nodes")]
    on_node = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and _image(pod) == image and _ready_at(pod):
            on_node[node] = pod
    slowest, where = 0.0, None
    for stage in stages:
        start = _time(stage["started_at"])
        for node in stage["nodes"]:
            pod = on_node.get(node)
            if pod is None:
                raise ValueError(f"{node} ({stage['name']}) has no Ready pod on {image}")
            took = max(0.0, (_ready_at(pod) - start).total_seconds())
            if where is None or took > slowest:
                slowest, where = took, {"node": node, "stage": stage["name"]}
    return {"stages": len(stages), "slowest_pod_s": slowest, "slowest": where, "soak_s": soak_s,
            "limit_s": round(len(stages) * (slowest + soak_s), 1)}
