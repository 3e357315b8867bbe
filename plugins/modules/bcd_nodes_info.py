#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_nodes_info: which selected Nodes report to the control plane, and why not."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_nodes_info
short_description: Report, per selected Node, its bcd node, and why a Node does not report
version_added: 1.1.0
description:
  - Named C(bcd_nodes) before 1.1.0; that name still works, with a deprecation warning, until 2.0.0.
  - Lists the Nodes C(bcd_node_selector) selects and the pool's nodes (C(nodes.list), every
    page, 500 a page) and matches them by name (a DaemonSet node's C(hostname) is its Kubernetes
    Node name; control-plane-api.md, nodes.list).
  - A Node reports when its bcd node is C(adopting), C(ready) or C(draining).
  - With O(diagnose), says for each Node that does not report why, from what the cluster and
    the control plane show - no bcd pod, the pod not Ready (and its container state), or the
    join refused and its reason (the pod's Warning events; the node's conditions in
    C(nodes.list)).
  - With O(wait) (through the action plugin of the same name) polls until every selected Node
    reports and has a healthy bcd pod (O(pods)) or O(timeout) passes, printing progress (n of N)
    as nodes arrive, then fails naming each Node that did not report or whose pod is not healthy,
    and why. A refused join (see O(refusals)) or a failing pod (a container crash-looping, exited
    non-zero or restarted during the wait) fails the wait within seconds, naming each Node, its
    pod and the reason, instead of waiting out the timeout.
  - Returns RV(to_join), the selected Nodes a join token is for - those with no bcd node in the
    pool (or only a C(removed) one). A Node that joined, in any other state (C(offline) too), keeps
    its identity and joins again without a token.
  - Without O(wait) or O(diagnose), warns about each selected Node whose allocatable CPU or
    memory is below C(bcd_resources.requests) (the scheduler cannot place bcd's pod there).
  - A bcd pod the scheduler cannot place is named with the scheduler's reason (its
    C(PodScheduled) condition); a DaemonSet pod is tied to its Node before it is scheduled by a
    required node affinity C(matchFields) on C(metadata.name).
  - Read-only.
options:
  diagnose:
    description: Say why each Node that does not report does not.
    type: bool
    default: false
  wait:
    description: Poll until every selected Node reports (action plugin).
    type: bool
    default: false
  timeout:
    description: With O(wait), seconds to wait (default C(bcd_join_timeout), else 300 + 2 per Node).
    type: int
  interval:
    description:
      - With O(wait), the base of the spacing between polls of the control plane (one C(nodes.list),
        every page, a poll), in seconds. The spacing follows how many selected Nodes do not report
        yet - O(interval) x missing / 100, at least O(interval) / 4 (a few missing - the last
        ones are seen at once) and at most 2.5 x O(interval) (hundreds missing - they join over
        minutes, and each poll lists the whole pool) - and is at most O(interval) during the
        first 10 seconds of a module run. With the default 2 - 0.5 s up to 25 missing, 2 s at
        100, 5 s from 250.
    type: float
    default: 2
  poll_for:
    description:
      - Internal to the O(wait) action plugin. Seconds this run may keep polling the control plane
        (C(nodes.list) only; the Nodes are listed once per run) before it returns. It returns
        earlier when every selected Node reports, or when the count changed and at least
        O(progress_every) seconds passed, so the action plugin can print progress. Never past
        the wait's own limit (O(timeout), else C(bcd_join_timeout), else 300 + 2 per Node).
      - 0 (the default) polls once.
    type: float
    default: 0
  progress_every:
    description: Internal to the O(wait) action plugin; see O(poll_for). Seconds.
    type: float
    default: 30
  refusals:
    description:
      - Also look for refused joins while polling and return them in RV(refused) - a selected
        Node whose bcd pod's C(join) init container exited non-zero, or whose bcd node does not
        report and carries the condition C(JoinRefused). The bcd pods are listed once a module
        run and then followed by a watch from that list's C(resourceVersion) (listed again on
        C(410 Gone) or a dropped watch), so a pod's refused join is seen when it happens.
        A refusal ends the polling at once (the O(wait) action plugin then fails naming each).
    type: bool
    default: false
  since:
    description:
      - With O(refusals), a pod's failed join run that started before this time (RFC 3339, UTC) or in
        its second does not count.
      - With O(pods), a container restarted at or after this time is a failure (a restart during the run).
    type: str
  pods:
    description:
      - Also judge each selected Node's bcd pod (RV(unhealthy), RV(failing)) - a Node is healthy only
        when both sides say so, its bcd node reporting and its pod Ready, on the DaemonSet's current
        pod template, with no container waiting in C(CrashLoopBackOff) (or another reason that does
        not heal), exited non-zero (C(Error)) or restarted since O(since). The control plane counts
        a node C(adopting) for its offline grace after bcd stopped reporting; the pod shows a crash
        at once.
      - With O(refusals), the pods are those the watch follows (the current pod template is left
        to the DaemonSet wait); a failing pod ends the polling at once, as a refused join does,
        and the O(wait) action plugin fails naming it, its state and its container's last exit.
        The O(wait) action plugin sets this, and waits until every selected Node reports and has
        a healthy pod.
    type: bool
    default: false
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.control_plane
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Wait for every selected Node to report
  bcd.kubernetes.bcd_nodes_info:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
    wait: true
"""

RETURN = r"""
nodes:
  description: One entry per selected Node, sorted by name.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The Kubernetes Node name.
      type: str
    id:
      description: The bcd node id (or null).
      type: str
    state:
      description: The bcd node's state (adopting, ready, draining, offline) or null.
      type: str
    trust:
      description: The bcd node's trust or null.
      type: str
    reporting:
      description: Whether it reports (adopting, ready or draining).
      type: bool
    why:
      description:
        - With diagnose, why it does not report (or, for a node that reports, that its current pod's join was refused);
          with O(pods), why its bcd pod is not healthy.
      type: str
    conditions:
      description: The bcd node's conditions in nodes.list.
      type: str
selected:
  description: How many Nodes the selector selects.
  returned: success
  type: int
reporting:
  description: How many of them report.
  returned: success
  type: int
missing:
  description: The Nodes that do not report (names).
  returned: success
  type: list
  elements: str
refused:
  description: With O(refusals), Node name -> why its join was refused.
  returned: success
  type: dict
to_join:
  description:
    - The selected Nodes that have no bcd node in the pool, or only one that left it (C(removed)) - those
      a join token is for (names). A subset of RV(missing).
  returned: success
  type: list
  elements: str
unhealthy:
  description:
    - With O(pods), C([{node, pod, why}]) for each selected Node whose bcd pod is not healthy (no pod,
      not Ready, an older pod template, a failing container), whatever the control plane says;
      C(pod) is null when there is none.
  returned: success
  type: list
  elements: dict
failing:
  description:
    - With O(pods), Node name -> why, for each selected Node whose bcd pod fails in a way waiting does
      not heal (crash-looping, exited non-zero, restarted since O(since), failed) - the pod, its
      state and the container's last exit.
  returned: success
  type: dict
cluster:
  description: Where the cluster was reached - the kubeconfig file(s), the context and its server.
  returned: success
  type: str
  sample: kubeconfig /home/ops/.kube/gpu-east.yaml, context gpu-east, server https://10.0.0.1:6443
polls:
  description: How many times this run listed the pool's nodes (1 unless O(poll_for) is set).
  returned: success
  type: int
"""

import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import (
    NODE_STATES_REPORTING,
    ControlPlaneError,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_health import failing_pods, unhealthy_pods
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import (
    Kube,
    KubeError,
    join_failure,
    node_ready,
    path,
    pod_ready,
    pod_state,
    selector,
    slim_node,
    slim_pod,
    target_node,
    unschedulable,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    control_plane,
    inventory,
    kube,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_preflight import (
    by_hostname,
    node_rows,
    short_of_requests,
    to_join,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import pod_side, pods_by_node
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_watch import Follow, wait_for_change

# Poll spacing (poll_spacing): interval x missing/100, within these factors of interval.
POLL_MIN_FACTOR = 0.25
POLL_MAX_FACTOR = 2.5
POLL_EAGER = 10.0  # seconds: a run's first polls come at most interval apart
POLL_MIN = 0.5  # seconds: a run with less than this left polls no more


def diagnose(kube: Kube, inv, names: list[str], known: dict, nodes: dict[str, dict]) -> dict[str, str]:
    pods = kube.list(path("pods", namespace=inv.bcd_namespace),
                     {"labelSelector": selector({"app.kubernetes.io/name": "bcd", "app.kubernetes.io/instance": inv.bcd_name})},
                     keep=slim_pod)
    by_node = {}
    for pod in pods:
        node_name = target_node(pod)  # a pending DaemonSet pod names its Node in its affinity
        if node_name and not pod["metadata"].get("deletionTimestamp"):
            by_node[node_name] = pod
    events = {}
    for ev in kube.list(path("events", namespace=inv.bcd_namespace), {"fieldSelector": "involvedObject.kind=Pod,type=Warning"}):
        key = ev["involvedObject"].get("name")
        when = ev.get("lastTimestamp") or ev.get("eventTime") or ev["metadata"].get("creationTimestamp") or ""
        if key not in events or when >= events[key][0]:
            events[key] = (when, f"{ev.get('reason')}: {ev.get('message')}")
    why = {}
    for name in names:
        cp_node = known.get(name) or {}
        refused = [c for c in (cp_node.get("conditions") or []) if str(c.get("status")) == "True" and c.get("type") not in ("Ready",)]
        pod = by_node.get(name)
        node = nodes.get(name)
        failed_join = join_failure(pod)
        if cp_node.get("state") == "offline":
            # say why when anything says why: the join's exit, the refusal, the latest Warning
            said = (failed_join or (f"join refused: {refused[-1].get('reason')}: {refused[-1].get('message')}" if refused else None)
                    or (events[pod["metadata"]["name"]][1] if pod is not None and pod["metadata"]["name"] in events else None)
                    or next((f"{c.get('reason')}: {c.get('message')}" for c in cp_node.get("conditions") or []
                             if c.get("type") == "Reporting"), None))
            reason = "its bcd node is offline (the pod does not report)" + (f": {said}" if said else "")
        elif failed_join:
            reason = f"join refused: {failed_join}"
        elif refused:
            c = refused[-1]
            reason = f"join refused: {c.get('reason')}: {c.get('message')}"
        elif pod is not None and not pod["spec"].get("nodeName"):
            why_not = unschedulable(pod)
            reason = (f"pod {pod['metadata']['name']} cannot be scheduled on this Node: {why_not}" if why_not
                      else f"pod {pod['metadata']['name']} is not scheduled yet")
        elif pod is not None and pod["metadata"]["name"] in events:
            reason = f"join refused or failing: {events[pod['metadata']['name']][1]}"
        elif node is not None and not node_ready(node):
            reason = "the Node is NotReady"
        elif pod is None:
            reason = (f"no bcd pod on this Node (DaemonSet {inv.bcd_namespace}/{inv.bcd_name} missing, not scheduled there, "
                      "or the Node does not match bcd_node_selector)")
        elif not pod_ready(pod):
            reason = f"pod {pod['metadata']['name']} not Ready ({pod_state(pod)})"
        else:
            reason = f"pod {pod['metadata']['name']} is Ready but the node has not reported to the control plane (no join seen yet)"
        why[name] = reason
    return why


def pod_query(inv) -> dict:
    """The query that lists bcd's pods."""
    return {"labelSelector": selector({"app.kubernetes.io/name": "bcd", "app.kubernetes.io/instance": inv.bcd_name})}


def poll_spacing(interval: float, missing: int, elapsed: float) -> float:
    """Seconds until the next poll of the control plane: ``interval`` times ``missing / 100``,
    between a quarter of ``interval`` (few nodes missing: the last ones are seen at once) and
    2.5 times ``interval`` (hundreds missing: each poll is a full ``nodes.list``, and the nodes
    join over minutes), and at most ``interval`` during the first ``POLL_EAGER`` seconds of a run."""
    spacing = interval * min(max(missing / 100, POLL_MIN_FACTOR), POLL_MAX_FACTOR)
    return min(spacing, interval) if elapsed < POLL_EAGER else spacing


def refusals(kube: Kube, inv, names: list[str], known: dict, since: str | None = None) -> dict[str, str]:
    """:func:`refused_joins` of the bcd pods, listed now."""
    return refused_joins(kube.list(path("pods", namespace=inv.bcd_namespace), pod_query(inv), keep=slim_pod),
                         names, known, since)


def refused_joins(pods: list[dict], names: list[str], known: dict, since: str | None = None) -> dict[str, str]:
    """Node name -> why, for each of ``names`` whose join was refused: its bcd pod's ``join``
    init container exited non-zero (the termination message says why), or its bcd node carries
    the condition ``JoinRefused`` in nodes.list. A refusal does not heal by waiting. A pod's
    failed run that started before ``since`` (RFC 3339) or in its second does not count: it may
    predate the token (bcd_kube.join_failure)."""
    newest = pods_by_node(pods)
    out = {}
    for name in names:
        pod = newest.get(name)
        failed = join_failure(pod, since=since)
        cond = next((c for c in (known.get(name) or {}).get("conditions") or []
                     if c.get("type") == "JoinRefused" and str(c.get("status")) == "True"), None)
        if failed:
            # the pod's name too, as the DaemonSet wait says it: the operator's next command reads it
            out[name] = f"pod {pod['metadata']['name']}: join refused: {failed}"
        elif cond and (known.get(name) or {}).get("state") not in NODE_STATES_REPORTING:
            out[name] = f"join refused: {cond.get('reason')}: {cond.get('message')}"
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": CONFIG_OPTION,
            "api_key": API_KEY_OPTION,
            **KUBE_OPTIONS,
            "diagnose": {"type": "bool", "default": False},
            "wait": {"type": "bool", "default": False},
            "timeout": {"type": "int"},
            "interval": {"type": "float", "default": 2},
            "poll_for": {"type": "float", "default": 0},
            "progress_every": {"type": "float", "default": 30},
            "refusals": {"type": "bool", "default": False},
            "since": {"type": "str"},
            "pods": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    inv = inventory(module, ("bcd_control_plane_url", "bcd_tenant", "bcd_pool"))
    cp = control_plane(module, inv)
    kube_api = kube(module, inv)
    try:
        k8s_nodes = {n["metadata"]["name"]: n for n in kube_api.list(path("nodes"), {"labelSelector": selector(inv.bcd_node_selector) or None},
                                                                     keep=slim_node)}
    except KubeError as exc:
        module.fail_json(msg=f"listing the selected Nodes: {exc}")
    names = sorted(k8s_nodes)
    if not (module.params["wait"] or module.params["diagnose"] or module.params["poll_for"]):
        for line in short_of_requests(inv, k8s_nodes):
            module.warn(line)
    wanted = set(names)
    started = time.monotonic()
    first = None
    polls = 0
    interval = max(module.params["interval"], 0.1)
    limit = module.params["timeout"] or inv.bcd_join_timeout or (300 + 2 * len(names))
    poll_for = min(module.params["poll_for"], limit - interval)
    refused: dict[str, str] = {}
    judge_pods = module.params["pods"] and bool(names)
    unhealthy: list[dict] = []
    failing: dict[str, str] = {}
    # The bcd pods (for refused joins) are listed once, then followed by a watch: a refusal is
    # seen when the pod's join fails, without listing every pod again.
    changed = threading.Event()
    pod_follow = None
    if module.params["refusals"] and names:
        try:
            pod_follow = Follow(kube_api, path("pods", namespace=inv.bcd_namespace), pod_query(inv), keep=slim_pod,
                                changed=changed).start(started + poll_for + 1, thread=poll_for > 0)
        except KubeError as exc:
            module.fail_json(msg=f"listing the bcd pods: {exc}")

    def finished(elapsed: float) -> bool:
        return bool((have == len(names) and not unhealthy) or refused or failing
                    or elapsed + min(interval, POLL_MIN) > poll_for
                    or (have != first and elapsed >= module.params["progress_every"]))

    try:
        while True:
            try:
                known = by_hostname(cp.list_nodes(inv.bcd_tenant, inv.bcd_pool), wanted)
            except ControlPlaneError as exc:
                module.fail_json(msg=f"listing the pool's nodes: {exc}")
            polls += 1
            have = sum(1 for name in names if (known.get(name) or {}).get("state") in NODE_STATES_REPORTING)
            first = have if first is None else first
            next_poll = time.monotonic() + poll_spacing(interval, len(names) - have, time.monotonic() - started)
            while True:
                looked = time.monotonic()
                if pod_follow is not None:
                    try:
                        pod_follow.check()
                    except KubeError as exc:
                        module.fail_json(msg=f"listing the bcd pods: {exc}")
                    followed = list(pod_follow.objects().values())
                    refused = refused_joins(followed, names, known, module.params["since"])
                    if judge_pods:
                        by_node = pods_by_node(followed)
                        unhealthy = unhealthy_pods(names, by_node, since=module.params["since"])
                        failing = failing_pods([n for n in names if n not in refused], by_node, module.params["since"])
                if finished(time.monotonic() - started):
                    break
                left = min(next_poll, started + poll_for) - time.monotonic()
                if left <= 0:
                    break
                # woken by a change of a bcd pod (a refused join), else at the next poll
                wait_for_change(changed, left, spent=time.monotonic() - looked)
            if finished(time.monotonic() - started):
                break
    finally:
        if pod_follow is not None:
            pod_follow.stop()
    out = node_rows(k8s_nodes, known)
    missing = [o["name"] for o in out if not o["reporting"]]
    if judge_pods and pod_follow is None:
        # read now, with the DaemonSet's current pod template (its newest ControllerRevision)
        try:
            ds, revision, by_node = pod_side(kube_api, inv.bcd_namespace, inv.bcd_name)
        except KubeError as exc:
            module.fail_json(msg=f"listing the bcd pods: {exc}")
        unhealthy = unhealthy_pods(names, by_node, ds, revision, module.params["since"])
        failing = failing_pods(names, by_node, module.params["since"])
    if module.params["diagnose"]:
        # a node that still reports, though the join of its current pod was refused: it goes
        # offline soon; the report says so rather than show it as fine
        try:
            late = refusals(kube_api, inv, [o["name"] for o in out if o["reporting"]], known)
        except KubeError:
            late = {}
        for o in out:
            if o["name"] in late:
                o["why"] = f"reports for now, but {late[o['name']]}"
    if module.params["diagnose"] and missing:
        try:
            why = diagnose(kube_api, inv, missing, known, k8s_nodes)
        except KubeError as exc:
            why = dict.fromkeys(missing, f"could not diagnose: {exc}")
        for o in out:
            if o["name"] in why:
                o["why"] = why[o["name"]]
    for o in out:
        if o["name"] in refused:
            o["why"] = refused[o["name"]]
    # a Node whose pod is not healthy is not, whatever the control plane says (its offline grace)
    rows = {o["name"]: o for o in out}  # a search of `out` per pod would be O(N^2) at 5,000 nodes
    for u in unhealthy:
        row = rows[u["node"]]
        if not row.get("why"):
            row["why"] = (f"reports for now, but {u['why']}" if row["reporting"] else u["why"])
    module.exit_json(changed=False, nodes=out, selected=len(names), reporting=len(names) - len(missing), missing=missing,
                     to_join=to_join(out), unhealthy=unhealthy, failing=failing, refused=refused,
                     join_timeout=inv.bcd_join_timeout, polls=polls, cluster=kube_api.source,
                     cp_requests=cp.requests, kube_requests=kube_api.requests)


if __name__ == "__main__":
    main()
