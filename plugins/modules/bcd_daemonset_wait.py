#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_daemonset_wait: wait for bcd's DaemonSet to roll out; fail at once on a refused join."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_daemonset_wait
version_added: 1.0.0
short_description: Wait for bcd's DaemonSet to roll out, failing within seconds when a pod cannot start
description:
  - Waits as C(kubectl rollout status) does - the DaemonSet controller has seen the latest
    generation, and C(updatedNumberScheduled) and C(numberAvailable) reach
    C(desiredNumberScheduled).
  - It lists the DaemonSet and its pods (label C(app.kubernetes.io/instance=<bcd_name>)) once
    per wait (once per module run when each runs in a process of its own), then follows both
    with a watch from that list's C(resourceVersion)
    (C(allowWatchBookmarks), C(timeoutSeconds) bounded by the time left), so it sees each change
    when it happens and never lists the pods again to find one; it lists again only when the
    server answers C(410 Gone) (the resourceVersion is too old) or the watch drops
    (U(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes)).
  - It reads the DaemonSet's counts at each change, and looks at the pods at most every 0.2 ms
    per pod (once a second at 5,000 pods) and 4 times as long as its last look took, judging
    again only the pods that changed since - so it takes little of the CPU the API server
    and the controllers it waits for need.
  - While it waits it fails at once, naming each Node and its pod, when a pod cannot start -
    its C(bcd join) init container exited non-zero (the control plane refused the node, or the
    config is wrong; the termination message says why; the bcd DaemonSet specification, section Apply), or a pod of the
    DaemonSet's current template cannot turn Ready or fails - the pod failed, a container waits in
    C(CrashLoopBackOff) (from its first restart) or for another reason that does not heal (an
    invalid image), exited non-zero (C(Error)), or restarted since the wait began. The failure
    quotes the container's last exit (C(lastState.terminated) - exit code, reason and termination
    message). Neither heals by waiting, so neither is waited out. A failing pod of an older
    template is left to the DaemonSet controller, which replaces it (the new template may be the
    repair).
  - It also follows the DaemonSet's C(FailedCreate) events (core/v1 events of the DaemonSet's uid,
    which include those recorded through events.k8s.io) by a watch, and fails within seconds when
    the API server refuses its pods - a ResourceQuota, Pod Security, a ValidatingAdmissionPolicy, an
    admission webhook, a LimitRange - quoting the API server's reason and naming the fix. Only
    events last seen since the wait began count (older ones are an earlier run's), and only once
    the refusal has stood for 6 seconds with pods still missing (a quota that has not yet counted a
    deleted pod refuses its replacement for a moment). A refusal that heals by itself (a quota's
    usage or the namespace's ServiceAccount not there yet) is waited out.
  - A join whose failed run started before the wait began, or in the same second (O(since); status
    times are whole seconds), is not a refusal - a Node added before its join token existed fails
    for want of a token. The wait changes nothing; the role's step before it
    (role C(bcd_daemonset), C(restart_stale)) deletes those pods (C(kubernetes.core.k8s),
    C(state=absent)) so that the DaemonSet controller replaces them and they join now rather than
    after the kubelet's back-off (up to 5 minutes); filter C(bcd.kubernetes.bcd_stale_joins) names them.
  - Fails at O(timeout) with the counts, each Node whose pod is not Ready and its state, and the
    DaemonSet's latest C(FailedCreate) refusal, however old, with its time.
  - Through the action plugin of the same name, prints a progress line (pods updated and
    available of desired, the time waited, the limit and the variable that sets it) when the
    counts changed (at most every O(progress_every) seconds - each line ends a module run, and a
    run costs a Python start) and at least every 25 seconds, so a long wait is never silent.
  - Changes nothing (only reads and watches), in check mode as otherwise.
options:
  timeout:
    description: Seconds to wait (default C(bcd_rollout_timeout), else 120 + 2 per node of O(nodes)).
    type: int
  nodes:
    description: The number of selected Nodes (for the default timeout; default the DaemonSet's desired pods).
    type: int
  left_behind:
    description:
      - Nodes a staged rollout left behind because they are down (NotReady, cordoned, unreachable; rollout.yml's
        C(bcd_rollout_max_down)), rolled without verifying because they went down, or that joined the cluster
        while it rolled (their bcd needs a join token - add-nodes.yml's). The wait is done once every
        other pod is updated and available (C(desiredNumberScheduled) less those of these that still exist and match
        the DaemonSet's nodeSelector - one GET per Node, once the rest is rolled out); their pods are neither waited for
        nor named (a down Node's kubelet cannot replace or run its pod).
    type: list
    elements: str
    default: []
  poll_for:
    description:
      - Internal to the action plugin. Seconds this run waits before it returns with RV(done) false
        (it returns sooner when the counts changed and O(progress_every) passed); unset, it waits
        until done or O(timeout).
    type: float
  since:
    description:
      - When the wait began (RFC 3339, UTC; default now); a failed join run that started before it or in
        its second is stale, and so is a C(FailedCreate) event last seen before. The role passes the time
        it read the pods it restarted, taken once the token existed.
    type: str
  refused_at:
    description: Internal to the action plugin. Seconds into the wait when the refusals of RV(refused) were first seen.
    type: float
  elapsed:
    description: Internal to the action plugin. Seconds waited by earlier runs of the same wait.
    type: float
    default: 0
  interval:
    description: Without O(poll_for), at most this many times 30 seconds pass between two looks at what the watches saw.
    type: float
    default: 1
  progress_every:
    description: Internal to the action plugin; see O(poll_for). Seconds.
    type: float
    default: 20
  watch_from:
    description:
      - For tests. The resourceVersion the first watch of the pods starts from, instead of their
        list's; one the server no longer keeps (C(1)) makes it answer C(410 Gone), and the wait
        lists the pods again.
    type: str
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.api_key_unused
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Wait for the DaemonSet's rollout
  bcd.kubernetes.bcd_daemonset_wait:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
"""

RETURN = r"""
status:
  description: The DaemonSet's status counts when it returned (desiredNumberScheduled, updatedNumberScheduled, numberAvailable, numberReady).
  returned: always
  type: dict
failed_nodes:
  description: C([{node, pod, why}]), each Node whose pod cannot start or is not Ready (on failure).
  returned: always
  type: list
  elements: dict
refused:
  description:
    - The API server's refusals of the DaemonSet's pods, from its C(FailedCreate) events since the wait
      began, latest first - C(kind) (C(quota), C(pod-security), C(admission-policy), C(webhook),
      C(limit-range), C(priority-class), C(namespace-terminating), C(forbidden), C(invalid), ...),
      C(fatal), C(reason) (the API server's words), C(fix), C(at) (when last seen) and C(count).
  returned: always
  type: list
  elements: dict
refused_at:
  description: Seconds into the wait when the refusals in RV(refused) were first seen (null when none).
  returned: success
  type: float
restarted:
  description:
    - Always empty since 1.1.0 - the wait deletes no pod; the role's step before it restarts the pods
      whose join failed before the wait.
  returned: always
  type: list
  elements: str
waited:
  description: Seconds waited.
  returned: always
  type: float
done:
  description: Whether the DaemonSet rolled out (false only when O(poll_for) ended this run first).
  returned: success
  type: bool
desired:
  description: C(status.desiredNumberScheduled).
  returned: success
  type: int
updated:
  description: C(status.updatedNumberScheduled).
  returned: success
  type: int
available:
  description: C(status.numberAvailable).
  returned: success
  type: int
timeout:
  description: The wait's limit in seconds.
  returned: success
  type: int
since:
  description: When the wait began (RFC 3339), for the next run of the same wait.
  returned: success
  type: str
watch:
  description:
    - What this module run's lists and watches did - C(lists) (the DaemonSet's, the pods' and the
      DaemonSet's FailedCreate events', one each, plus C(relists)), C(relists) (after C(410 Gone)
      or a dropped watch), C(watches) (watch requests), C(events) (changes seen), C(requests)
      (Kubernetes API requests in all) and C(resumed) (how many of the DaemonSet's, the pods' and
      the events' follows this run took over from the wait's previous run).
    - A follow taken over counts what it did since the wait's first run - run in the controller's
      worker (the action plugin's default), a wait in several runs lists the DaemonSet, the pods and
      the events once; in a module process of its own, each run lists them.
  returned: always
  type: dict
"""

import datetime
import threading
import time
from typing import NamedTuple

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_admission import (
    Standing,
    describe,
    events_query,
    latest,
    refusals,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_health import (
    pod_updated,
    template_generation,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import (
    KubeError,
    join_failure,
    path,
    pod_ready,
    pod_state,
    selector,
    slim_pod,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    inventory,
    kube,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import (
    fatal,
    generation_seen,
    newest_revision,
    pod_node,
    revision_hash,
    rolled_out,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_watch import (
    PACE,
    Follow,
    park,
    resume,
    wait_for_change,
)

# Seconds to keep looking for other pods that cannot start once one is found.
BAD_GRACE = 6.0
COUNTS = ("desiredNumberScheduled", "updatedNumberScheduled", "numberAvailable", "numberReady")
# Seconds per pod between two looks at the pods (a look at most once a second at 5,000 pods,
# every few milliseconds at 10): while N pods start, changes come faster than anyone needs them
# judged. The DaemonSet's counts are read at each change, so a rollout's end is seen at once.
LOOK_SPACING_PER_POD = 0.0002


class Verdict(NamedTuple):
    """What one look of the wait needs to know of one pod (see :class:`Judge`)."""

    node: str | None  # the Node it is for; None when terminating or not the DaemonSet's
    created: str  # metadata.creationTimestamp (the newest pod of a Node counts)
    ready: bool  # bcd_kube.pod_ready
    updated: bool  # of the DaemonSet's current template generation (bcd_health.pod_updated)
    fatal: str | None  # bcd_rollout.fatal since the wait began
    refused_since: str | None  # its join failed in a run that started since the wait began
    refused_any: str | None  # its join failed, at any time


class Judge:
    """The wait's verdict on each pod, worked out once per version of the pod.

    A watch replaces a pod's object at each change it sees (bcd_watch.Follow), so a verdict is
    kept while the pod is the same object and the DaemonSet's uid and template generation are
    the same: a look at N pods then judges only the pods that changed since the last look, and
    at 5,000 pods a look costs a few milliseconds instead of half a second of CPU the cluster
    being waited for needs. Each verdict holds a reference to its pod, so an id is never reused
    while it is kept."""

    def __init__(self, since: str):
        self.since = since
        self.judged = 0  # pods judged afresh, in all
        self._kept: dict[int, tuple[dict, tuple, Verdict]] = {}
        self._ds: dict | None = None  # the DaemonSet object the context below is of
        self._context: tuple = (None, None)

    def __call__(self, pod: dict, ds: dict | None) -> Verdict:
        if ds is not self._ds:  # once per look, not once per pod
            self._ds, self._context = ds, (((ds or {}).get("metadata") or {}).get("uid"), template_generation(ds))
        context = self._context
        hit = self._kept.get(id(pod))
        if hit is not None and hit[0] is pod and hit[1] == context:
            return hit[2]
        verdict = self._judge(pod, ds, context[0])
        self._kept[id(pod)] = (pod, context, verdict)
        self.judged += 1
        return verdict

    def _judge(self, pod: dict, ds: dict | None, owner_uid: str | None) -> Verdict:
        return Verdict(pod_node(pod, owner_uid), (pod.get("metadata") or {}).get("creationTimestamp") or "", pod_ready(pod), pod_updated(pod, ds),
                       fatal(pod, self.since), join_failure(pod, since=self.since), join_failure(pod))

    def by_node(self, pods: list[dict], ds: dict | None) -> dict[str, tuple[dict, Verdict]]:
        """Node name -> (the DaemonSet's pod there that is not terminating, the newest if several;
        its verdict), as bcd_rollout.pods_by_node picks it. Forgets the pods no longer there."""
        out: dict[str, tuple[dict, Verdict]] = {}
        for pod in pods:
            verdict = self(pod, ds)
            if verdict.node is None:
                continue
            held = out.get(verdict.node)
            if held is None or verdict.created > held[1].created:
                out[verdict.node] = (pod, verdict)
        if len(self._kept) > 2 * len(pods) + 64:
            live = {id(p) for p in pods}
            self._kept = {k: v for k, v in self._kept.items() if k in live}
        return out


def cannot_start(pods: dict[str, dict], since: str, ds: dict | None = None, revision: str | None = None,
                 judge: Judge | None = None) -> list[dict]:
    """``[{node, pod, why}]`` for each pod whose join failed since ``since`` or that cannot turn
    Ready (a join that failed before is stale: see bcd_kube.stale_joins), sorted by node. A pod of
    an older template than ``ds``'s (its template generation, or ``revision``, the newest
    ControllerRevision's hash) is left to the DaemonSet controller, which replaces it: a crash
    there may be what the new template repairs. ``judge`` (of the same ``since``) keeps the
    verdicts from one look to the next."""
    judge = judge or Judge(since)
    out = []
    for node, pod in pods.items():
        verdict = judge(pod, ds)
        why = verdict.refused_since
        if why is None and verdict.refused_any is None and verdict.fatal and (
                verdict.updated if revision is None else pod_updated(pod, ds, revision)):
            why = verdict.fatal
        if why:
            out.append({"node": node, "pod": pod["metadata"]["name"], "why": f"join refused: {why}" if "bcd join" in why else why})
    return sorted(out, key=lambda b: b["node"])


def fix_text(bad: list[dict], namespace: str) -> str:
    """The fix for ``bad`` (:func:`cannot_start`), naming only the causes that are there."""
    fixes = []
    if any(b["why"].startswith("join refused") for b in bad):
        fixes.append("a refused join names the control plane's reason: fix the pins, site or gateway in the inventory, "
                     "or the token")
    crashed = [b["pod"] for b in bad if not b["why"].startswith("join refused")]
    if crashed:
        fixes.append(f"a failing container's last exit quotes what bcd wrote before it exited; kubectl -n {namespace} logs "
                     f"{crashed[0]} -c bcd --previous shows more")
    return "Fix the cause (" + "; ".join(fixes) + ") and run again."


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": CONFIG_OPTION,
            "api_key": API_KEY_OPTION,  # the action group's module_defaults; not used
            **KUBE_OPTIONS,
            "timeout": {"type": "int"},
            "nodes": {"type": "int"},
            "left_behind": {"type": "list", "elements": "str", "default": []},
            "interval": {"type": "float", "default": 1},
            "progress_every": {"type": "float", "default": 20},
            "poll_for": {"type": "float"},
            "since": {"type": "str"},
            "elapsed": {"type": "float", "default": 0},
            "watch_from": {"type": "str"},
            "refused_at": {"type": "float"},
        },
        supports_check_mode=True,
    )
    inv = inventory(module)
    api = kube(module, inv)
    where = f"DaemonSet {inv.bcd_namespace}/{inv.bcd_name}"
    run_started = time.monotonic()
    started = run_started - module.params["elapsed"]
    poll_for = module.params["poll_for"]
    interval = max(module.params["interval"], 0.2)
    timeout = None
    ds: dict = {}
    pods: dict[str, dict] = {}
    since = module.params["since"] or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    first_counts = None
    first_bad = None
    judge = Judge(since)
    next_look = 0.0  # monotonic time before which the pods are not looked at again
    revisions: dict[tuple, str | None] = {}  # (DaemonSet uid, generation) -> its newest revision's hash
    changed = threading.Event()
    follows: list[Follow] = []
    event_follow: Follow | None = None
    ds_follow: Follow | None = None
    parking = False
    resumed = 0
    refused: list[dict] = []
    standing = Standing()
    if module.params["refused_at"] is not None:
        standing.first = started + module.params["refused_at"]
    left = set(module.params["left_behind"] or [])

    def complete(ds: dict) -> bool:
        """Rolled out, but for the pods of the Nodes left behind (down) that the DaemonSet still
        counts: a left Node that is gone, or no longer matches its nodeSelector, is not in
        desiredNumberScheduled, and subtracting it would call the rollout done one pod early."""
        desired = int((ds.get("status") or {}).get("desiredNumberScheduled") or 0)
        if not left:
            return rolled_out(ds)
        if not rolled_out(ds, max(0, desired - len(left))):
            return False
        wanted = ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeSelector") or {}
        counted = 0
        for name in left:
            node = api.get(path("nodes", name=name))
            labels = ((node or {}).get("metadata") or {}).get("labels") or {}
            counted += node is not None and all(labels.get(k) == v for k, v in wanted.items())
        return rolled_out(ds, max(0, desired - counted))

    def watched() -> dict:
        return {"lists": sum(f.lists for f in follows), "relists": sum(f.relists for f in follows),
                "watches": sum(f.watches for f in follows), "events": sum(f.events for f in follows),
                "requests": api.requests + sum(f.kube.requests for f in follows if f.kube is not api),
                "resumed": resumed}

    def done(finished: bool = True, **kw):
        status = {k: int((ds.get("status") or {}).get(k) or 0) for k in COUNTS}
        module.exit_json(changed=False, status=status, waited=round(time.monotonic() - started, 1),
                         restarted=[], done=finished, desired=status["desiredNumberScheduled"],
                         updated=status["updatedNumberScheduled"], available=status["numberAvailable"],
                         timeout=timeout, since=since, watch=watched(), refused=refused,
                         refused_at=None if standing.first is None else round(standing.first - started, 1), **kw)

    def take_over(where_path: str, query: dict, **kw) -> tuple[Follow, bool]:
        """The follow of ``where_path`` that the previous slice of this wait parked, or a new one
        (not started); and whether it was taken over."""
        follow = resume(api, where_path, query, changed)
        taken = follow is not None
        if follow is None:
            follow = Follow(api, where_path, query, changed=changed, **kw)
        follows.append(follow)
        return follow, taken

    try:
        # The DaemonSet and its pods are listed once, then followed by a watch each (bcd_watch):
        # the wait wakes on each change and never lists the pods again to find one.
        # In the controller's worker, the previous slice of this wait left its follows watching
        # (bcd_watch.park): they are taken over, not listed again.
        ds_follow, ds_resumed = take_over(path("daemonsets", namespace=inv.bcd_namespace),
                                          {"fieldSelector": f"metadata.name={inv.bcd_name}"})
        if not ds_resumed:
            ds_follow.start(run_started, thread=False)  # followed once the limit is known
        ds = next(iter(ds_follow.objects().values()), {})
        if not ds:
            module.fail_json(msg=f"{where} does not exist", status={}, failed_nodes=[], refused=[], waited=0.0)
        want = module.params["nodes"] or int((ds.get("status") or {}).get("desiredNumberScheduled") or 0)
        timeout = module.params["timeout"] or inv.bcd_rollout_timeout or (120 + 2 * want)
        until = started + timeout
        if poll_for is not None:
            until = min(until, run_started + poll_for)
        if complete(ds):
            done(failed_nodes=[])
        pod_query = {"labelSelector": selector({"app.kubernetes.io/name": "bcd", "app.kubernetes.io/instance": inv.bcd_name})}
        pod_follow, pod_resumed = take_over(path("pods", namespace=inv.bcd_namespace), pod_query, keep=slim_pod)
        if not pod_resumed:
            pod_follow.first_version = module.params["watch_from"]
        # the pods the API server refuses never exist: only the DaemonSet's events say so
        event_follow, event_resumed = take_over(path("events", namespace=inv.bcd_namespace),
                                                events_query(ds["metadata"]["uid"]))
        ds_follow.extend(until + 1)
        if not ds_resumed:
            ds_follow.start_thread()
        resumed = int(ds_resumed) + int(pod_resumed) + int(event_resumed)
        for follow, taken_over in ((pod_follow, pod_resumed), (event_follow, event_resumed)):
            if taken_over:
                follow.extend(until + 1)
            else:
                follow.start(until + 1)
        while True:
            for f in follows:
                f.check()
            ds = next(iter(ds_follow.objects().values()), {})
            if not ds:
                module.fail_json(msg=f"{where} does not exist", status={}, failed_nodes=[], refused=refused,
                                 waited=round(time.monotonic() - started, 1))
            if complete(ds):
                done(failed_nodes=[])
            now = time.monotonic()
            late = now - started >= timeout
            if now < next_look and not late:
                # the pods were looked at a moment ago: only the DaemonSet's counts until then
                wake = [next_look, started + timeout]
                if poll_for is not None:
                    wake.append(run_started + poll_for)
                wait_for_change(changed, max(0.0, min(wake) - now) + 0.01)
                continue
            looked = now
            objects = list(pod_follow.objects().values())
            judged = {node: held for node, held in judge.by_node(objects, ds).items() if node not in left}
            pods = {node: held[0] for node, held in judged.items()}
            desired = int((ds.get("status") or {}).get("desiredNumberScheduled") or 0)
            refused = refusals(list(event_follow.objects().values()), ds["metadata"].get("uid"), since, inv.bcd_namespace,
                               want, inv.bcd_priority_class_name)
            standing_refusals = standing.update(refused, missing=len(pods) < desired - len(left), now=now)
            if standing_refusals:
                lines = "\n".join(f"FailedCreate ({r['count']}x, last at {r['at']}): {describe(r)}" for r in standing_refusals)
                module.fail_json(
                    msg=f"{where}: the API server refuses its pods ({len(pods)} of {desired} exist), so the rollout cannot "
                        f"complete (not waiting out the {timeout}s timeout):\n{lines}",
                    failed_nodes=[], refused=refused, status={k: int((ds.get("status") or {}).get(k) or 0) for k in COUNTS},
                    waited=round(time.monotonic() - started, 1), watch=watched())
            revision = None
            if generation_seen(ds) and any(not held[1].updated and held[1].fatal for held in judged.values()):
                # a failing pod of another template generation may still be current by its hash
                # (an edit undone, a rollback): the controller has made the newest revision once
                # it has seen the DaemonSet's generation
                key = (ds["metadata"].get("uid"), ds["metadata"].get("generation"))
                if key not in revisions:
                    labels = (ds.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
                    listed = api.list(path("controllerrevisions", namespace=inv.bcd_namespace),
                                      {"labelSelector": selector(labels) or None})
                    revisions[key] = revision_hash(newest_revision(listed, key[0]))
                revision = revisions[key]
            bad = cannot_start(pods, since, ds, revision, judge)
            if bad:
                first_bad = first_bad or now
            # A refusal rarely comes alone (the same pin or token for every node): give the
            # other pods that are not Ready a few seconds to say so too, then name them all.
            named = {b["node"] for b in bad}
            waiting_on = [n for n, held in judged.items() if n not in named and not held[1].ready]
            if bad and not (waiting_on and now - first_bad < BAD_GRACE and not late):
                lines = "\n".join(
                    f"{b['node']}: {b['why']}" if b["why"].startswith(f"pod {b['pod']} ")
                    else f"{b['node']}: pod {b['pod']}: {b['why']}" for b in bad)
                module.fail_json(
                    msg=f"{where}: {len(bad)} pod(s) cannot start, so the rollout cannot complete (not waiting "
                        f"out the {timeout}s timeout):\n{lines}\n{fix_text(bad, inv.bcd_namespace)}",
                    failed_nodes=bad, status={k: int((ds.get("status") or {}).get(k) or 0) for k in COUNTS},
                    waited=round(time.monotonic() - started, 1), watch=watched())
            if late:
                status = ds.get("status") or {}
                slow = [{"node": n, "pod": p["metadata"]["name"], "why": pod_state(p)}
                        for n, p in sorted(pods.items()) if not pod_ready(p)]
                lines = "".join(f"\n{s['node']}: pod {s['pod']} not Ready ({s['why']})" for s in slow)
                last = latest(list(event_follow.objects().values()), ds["metadata"].get("uid"), inv.bcd_namespace, want,
                              inv.bcd_priority_class_name)
                if last:
                    lines += f"\nthe DaemonSet's latest FailedCreate ({last['count']}x, last at {last['at']}): {describe(last)}"
                module.fail_json(
                    msg=f"{where} did not roll out within {timeout}s: {status.get('numberAvailable') or 0} of "
                        f"{status.get('desiredNumberScheduled') or 0} pods available, "
                        f"{status.get('updatedNumberScheduled') or 0} updated (bcd_rollout_timeout sets the wait){lines}",
                    failed_nodes=slow, refused=refused, status={k: int(status.get(k) or 0) for k in COUNTS},
                    waited=round(time.monotonic() - started, 1), watch=watched())
            counts = tuple(int((ds.get("status") or {}).get(k) or 0) for k in COUNTS)
            first_counts = first_counts or counts
            in_slice = time.monotonic() - run_started
            # under the action plugin, return to it in time for its next progress line, and when
            # the counts changed once progress_every passed (a run costs a Python start: ~1 s)
            if poll_for is not None and (in_slice >= poll_for or (
                    counts != first_counts and in_slice >= module.params["progress_every"])):
                parking = True  # the next slice takes the watches over
                done(finished=False, failed_nodes=[])
            wake = [started + timeout, run_started + poll_for if poll_for is not None else now + interval * 30]
            if bad:
                wake.append(first_bad + BAD_GRACE)
            if standing.due() is not None:
                wake.append(standing.due())
            if counts != first_counts and poll_for is not None:
                wake.append(run_started + module.params["progress_every"])
            spent = time.monotonic() - looked
            next_look = looked + max(PACE * spent, LOOK_SPACING_PER_POD * len(objects))
            wait_for_change(changed, max(0.0, min(wake) - time.monotonic()) + 0.01)
    except KubeError as exc:
        module.fail_json(msg=f"waiting for {where}: {exc}", status={}, failed_nodes=[], refused=refused,
                         waited=round(time.monotonic() - started, 1), watch=watched())
    finally:
        for f in follows:
            if parking:
                park(f)
            else:
                f.stop()


if __name__ == "__main__":
    main()
