"""When the API server refuses bcd's pods: foreseen by a dry run, seen in the DaemonSet's events.

A DaemonSet is accepted whatever its pods will meet: a ResourceQuota, Pod Security, a
ValidatingAdmissionPolicy, an admission webhook or a LimitRange judge each pod when the DaemonSet
controller creates it, and a refused pod is only a ``FailedCreate`` event on the DaemonSet
(``Error creating: pods "bcd-" is forbidden: exceeded quota: ...``), repeated with back-off. The
DaemonSet's status then counts no pod at all, which a wait on the counts takes for slowness.

Two ways to know, one judgement (:func:`judge`: the kind of refusal, the API server's own words,
and the fix):

* foreseen, before anything exists (:func:`probe`): a server-side dry-run create
  (``dryRun=All``) of one pod from the rendered template, as the DaemonSet controller would
  create it, runs every admission plugin (quota, Pod Security, policies, webhooks without side
  effects) and stores nothing
  (https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run);
* seen, while waiting (:func:`refusals`): the DaemonSet's ``FailedCreate`` events (core/v1, which
  also serves what the events.k8s.io API records; ``involvedObject.uid`` the DaemonSet's),
  counted only when last seen since the wait or the stage began.

The probe runs as the operator, not as the DaemonSet controller, and in one namespace state: a
policy that judges the requesting user, a webhook with side effects (it refuses dry runs), or a
quota that changes afterwards is seen only in the events.
"""

from __future__ import annotations

import copy
import re
import time

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_quantity import QuantityError, value

FIELD_MANAGER = "bcd-ansible"
PROBE_SUFFIX = "-admission-probe"
FAILED_CREATE = "FailedCreate"
# Seconds a refusal must stand, with pods still missing, before a wait fails on it: a quota that
# counts a pod just deleted refuses its replacement until the quota controller catches up, and
# the DaemonSet controller tries again within milliseconds.
REFUSAL_GRACE = 6.0
# Seconds the probe asks again while the answer is one that heals by itself (the namespace's
# default ServiceAccount or a quota's usage not computed yet, right after they were created).
PROBE_SETTLE = 10.0

# The tolerations the DaemonSet controller adds to each pod it creates (k8s.io/kubernetes
# pkg/controller/daemon/util.AddOrUpdateDaemonPodTolerations).
DAEMON_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
HOST_NETWORK_TOLERATION = ("node.kubernetes.io/network-unavailable", "NoSchedule")

# a refusal is Forbidden (403), or Invalid (422) for a ValidatingAdmissionPolicy by default, whose
# message then has an empty field path: 'pods "bcd-" is invalid: : ValidatingAdmissionPolicy ...'
# ... and an event the recorder aggregated (10 alike in 10 minutes) says so first
_PREFIX = re.compile(r"^(?:\(combined from similar events\):\s*)?(?:Error creating:\s*)?(?:pods? \"[^\"]*\" is (?:forbidden|invalid):\s*(?::\s*)?)?")
_QUOTA = re.compile(r"exceeded quota: (?P<name>[^,]+), requested: (?P<requested>\S+), used: (?P<used>\S+), "
                    r"limited: (?P<limited>\S+)")
_QUOTA_PENDING = re.compile(r"status unknown for quota: (?P<name>[^,]+)")
_QUOTA_SCOPES = re.compile(r"insufficient quota to (?:match these scopes|consume): (?P<what>.+)")
_POLICY = re.compile(r"ValidatingAdmissionPolicy '(?P<policy>[^']+)'(?: with binding '(?P<binding>[^']+)')? denied request")
_WEBHOOK_DENIED = re.compile(r"admission webhook \"(?P<name>[^\"]+)\" denied the request")
_WEBHOOK_DRY_RUN = re.compile(r"admission webhook \"(?P<name>[^\"]+)\" does not support dry run")
_WEBHOOK_CALL = re.compile(r"failed calling webhook \"(?P<name>[^\"]+)\"")
_LIMIT_RANGE = re.compile(r"(?:maximum|minimum) \S+ usage per (?:Container|Pod)|max limit to request ratio per")


def quoted(message: str) -> str:
    """The API server's reason, without the event's ``Error creating:`` and ``pods "x" is forbidden:``
    (or ``is invalid: :``)."""
    return _PREFIX.sub("", (message or "").strip(), count=1).strip() or (message or "").strip()


def judge(message: str, namespace: str, nodes: int | None = None, priority_class: str | None = None) -> dict | None:
    """What refused a pod, from the API server's message: ``{kind, fatal, reason, fix}``, or None
    when the message is no refusal (a timeout, a conflict: the controller tries again).

    ``fatal`` False: it heals by itself (a quota's usage or the default ServiceAccount not there
    yet). ``nodes``: the selected Nodes (one pod each), for the quota's fix; ``priority_class``:
    the pods' (``bcd_priority_class_name``).
    """
    text = (message or "").strip()
    reason = quoted(text)
    need = f"{nodes} pods, one per selected Node" if nodes else "one pod per selected Node"
    pc = priority_class or "(none)"

    def out(kind: str, fix: str, fatal: bool = True) -> dict:
        return {"kind": kind, "fatal": fatal, "reason": reason, "fix": fix}

    m = _QUOTA.search(text)
    if m:
        return out("quota", f"raise the spec.hard of ResourceQuota {m['name']} in namespace {namespace} (limited: "
                            f"{m['limited']}, used: {m['used']}) so that it admits bcd's {need} (kubectl edit "
                            f"resourcequota {m['name']} -n {namespace}), or remove it (kubectl delete resourcequota "
                            f"{m['name']} -n {namespace})")
    m = _QUOTA_SCOPES.search(text)
    if m:
        return out("quota", f"add a ResourceQuota in namespace {namespace} that covers bcd's pods ({m['what'].strip()}): "
                            f"spec.scopeSelector.matchExpressions [{{scopeName: PriorityClass, operator: In, values: [{pc}]}}] "
                            f"and spec.hard.pods of at least {nodes or 'the number of selected Nodes'} (the API server admits "
                            f"pods of a limited priority class only under a quota that covers them, as GKE does for "
                            f"system-node-critical outside kube-system), or set bcd_priority_class_name to a class it does not limit")
    m = _QUOTA_PENDING.search(text)
    if m:
        return out("quota", f"the quota controller (kube-controller-manager) has not counted ResourceQuota {m['name']}'s "
                            f"usage in namespace {namespace} yet; if this lasts, check kube-controller-manager", fatal=False)
    if "violates PodSecurity" in text:
        return out("pod-security", f"label namespace {namespace} pod-security.kubernetes.io/enforce=privileged (kubectl label "
                                   f"namespace {namespace} pod-security.kubernetes.io/enforce=privileged --overwrite; "
                                   "adopt-cluster.yml sets it on the namespace it applies), or exempt the namespace in the API "
                                   "server's PodSecurity admission configuration: bcd's pod runs privileged with host paths")
    m = _POLICY.search(text)
    if m:
        binding = f" (binding {m['binding']})" if m["binding"] else ""
        return out("admission-policy", f"ValidatingAdmissionPolicy {m['policy']}{binding} refuses bcd's pod: exclude namespace "
                                       f"{namespace} in its binding's spec.matchResources.namespaceSelector (or in the policy's "
                                       f"matchConditions), or change the policy (kubectl get validatingadmissionpolicy "
                                       f"{m['policy']} -o yaml)")
    m = _WEBHOOK_DENIED.search(text)
    if m:
        return out("webhook", f"the admission webhook {m['name']} refuses bcd's pod: add an exception for namespace {namespace} "
                              "to the policy it enforces, or exclude the namespace in the webhook's namespaceSelector (kubectl get "
                              "validatingwebhookconfigurations,mutatingwebhookconfigurations names it)")
    m = _WEBHOOK_DRY_RUN.search(text)
    if m:
        return out("webhook-no-dry-run", f"the admission webhook {m['name']} declares side effects, so a dry run cannot ask it; "
                                         "it judges the pods when the DaemonSet creates them", fatal=False)
    m = _WEBHOOK_CALL.search(text)
    if m:
        return out("webhook", f"the admission webhook {m['name']} cannot be called and refuses every pod meanwhile (its "
                              "failurePolicy is Fail): bring its service back, or fix its configuration")
    if _LIMIT_RANGE.search(text):
        return out("limit-range", f"a LimitRange in namespace {namespace} refuses bcd's resources: change it (kubectl get "
                                  f"limitrange -n {namespace} -o yaml) or bcd_resources")
    if "no PriorityClass with name" in text:
        return out("priority-class", f"create PriorityClass {pc}, or set bcd_priority_class_name to one that exists")
    if "because it is being terminated" in text:
        return out("namespace-terminating", f"namespace {namespace} is being deleted: wait until it is gone, then run again")
    if "error looking up service account" in text:
        return out("service-account", f"the namespace's ServiceAccount does not exist yet (kube-controller-manager's serviceaccount "
                                      f"controller creates default in each namespace); if this lasts, create it in {namespace}",
                   fatal=False)
    if "cannot create resource" in text and "User " in text:
        return out("rbac", "the operator may not create pods in the namespace (RBAC), so a dry run cannot ask the API "
                           f"server; grant create on pods in {namespace} to let the preflight foresee refusals", fatal=False)
    if " is forbidden: " in text:
        return out("forbidden", "an admission plugin of the API server refuses bcd's pod for the reason above: change the "
                                "policy it names, or ask the cluster's administrators")
    if " is invalid: " in text:
        return out("invalid", "the API server finds bcd's pod invalid: check the bcd_* variables the field above comes from")
    return None


def describe(refusal: dict) -> str:
    """One line: the reason quoted, then the fix."""
    return f"{refusal['reason']}. Fix: {refusal['fix']}"


def refused_message(namespace: str, found: dict) -> str:
    """The failure message of a dry-run create (:func:`probe`) the API server refused."""
    on = f" for Node {found['node']}" if found.get("node") else ""
    return (f"the API server refuses bcd's pods in namespace {namespace} (a dry-run create of pod {found['pod']}{on}; "
            f"nothing was created): {describe(found['refusal'])}. The DaemonSet was not applied and no token minted.")


# -- foreseen: a dry-run create ------------------------------------------------------------------

def probe_pod(daemonset: dict, node: str | None = None, owner_uid: str | None = None) -> dict:
    """The pod the DaemonSet controller would create from ``daemonset``'s template (the rendered
    one): its labels, annotations and spec, the controller's tolerations, the node affinity that
    ties it to ``node`` (when given) and, with ``owner_uid`` (the live DaemonSet's), its owner.
    Named ``<name>-admission-probe``: the dry run stores nothing."""
    meta = daemonset.get("metadata") or {}
    template = (daemonset.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    spec = copy.deepcopy(template.get("spec") or {})
    tolerations = spec.setdefault("tolerations", [])
    wanted = list(DAEMON_TOLERATIONS) + ([HOST_NETWORK_TOLERATION] if spec.get("hostNetwork") else [])
    for key, effect in wanted:
        if not any(t.get("key") == key and t.get("effect") == effect for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})
    if node:
        spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    pod_meta = {"name": f"{meta.get('name')}{PROBE_SUFFIX}", "namespace": meta.get("namespace")}
    for key in ("labels", "annotations"):
        if tmeta.get(key):
            pod_meta[key] = copy.deepcopy(tmeta[key])
    if owner_uid:
        pod_meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta.get("name"),
                                        "uid": owner_uid, "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def pod_usage(pod_spec: dict) -> dict[str, object]:
    """What one pod of ``pod_spec`` counts in a ResourceQuota, per quota resource name: ``pods``
    1, and each request and limit (the sum over containers, or the largest init container's if
    more, as the quota counts it)."""
    usage: dict[str, object] = {"pods": 1, "count/pods": 1}
    for kind in ("requests", "limits"):
        for res in ("cpu", "memory", "ephemeral-storage"):
            total = 0
            init_max = 0
            try:
                for c in pod_spec.get("containers") or []:
                    total += value(str(((c.get("resources") or {}).get(kind) or {}).get(res, "0")))
                for c in pod_spec.get("initContainers") or []:
                    init_max = max(init_max, value(str(((c.get("resources") or {}).get(kind) or {}).get(res, "0"))))
            except QuantityError:
                continue
            usage[f"{kind}.{res}"] = max(total, init_max)
            if kind == "requests":
                usage[res] = max(total, init_max)
    return usage


def _amounts(text: str) -> dict[str, object] | None:
    out = {}
    for part in text.split(","):
        name, sep, amount = part.partition("=")
        if not sep:
            return None
        try:
            out[name.strip()] = value(amount.strip())
        except QuantityError:
            return None
    return out


def replaced_pod_makes_room(message: str, live_pod_spec: dict) -> bool:
    """Whether an ``exceeded quota`` refusal would admit the pod once one of bcd's running pods
    (``live_pod_spec``) is gone: a rollout deletes a pod before the DaemonSet controller creates
    its replacement, so a quota exactly as large as the running pods refuses the dry run's extra
    pod but not the rollout. False for any other message."""
    m = _QUOTA.search(message or "")
    if not m:
        return False
    requested, used, limited = (_amounts(m[k]) for k in ("requested", "used", "limited"))
    if requested is None or used is None or limited is None:
        return False
    own = pod_usage(live_pod_spec)
    for res, want in requested.items():
        if res not in own or res not in used or res not in limited:
            return False
        # a pod frees no more than the quota counts (a quota that counts none of bcd's pods frees nothing)
        if used[res] - min(own[res], used[res]) + want > limited[res]:
            return False
    return True


def probe(kube, daemonset: dict, node: str | None = None, live: dict | None = None, nodes: int | None = None,
          priority_class: str | None = None, settle: float = PROBE_SETTLE) -> dict:
    """Ask the API server whether it admits one pod of ``daemonset`` (the rendered DaemonSet), in
    its namespace, with a dry-run create. ``live``: the DaemonSet as the cluster has it, or None.

    Returns ``{probed, admitted, pod, node, refusal, note}``: ``probed`` False when the namespace
    does not exist (``note`` says so); ``refusal`` (:func:`judge`) when it refused, ``fatal`` False
    when the refusal cannot be judged by a dry run (a webhook with side effects) or did not heal
    within ``settle`` seconds though it usually does. A quota refusal that a replaced pod would
    leave room for (:func:`replaced_pod_makes_room`), while the live DaemonSet has a pod on each
    of its Nodes, is admitted with a ``note``. Raises :class:`KubeError` when the API cannot be
    reached or refuses the request itself (401, 403 on pods).
    """
    meta = daemonset.get("metadata") or {}
    ns = meta.get("namespace")
    live_uid = ((live or {}).get("metadata") or {}).get("uid")
    body = probe_pod(daemonset, node, live_uid)
    out = {"probed": False, "admitted": False, "pod": body["metadata"]["name"], "node": node, "refusal": None, "note": None}
    deadline = time.monotonic() + settle
    while True:
        try:
            kube.request("POST", path("pods", namespace=ns), {"dryRun": "All", "fieldManager": FIELD_MANAGER}, body)
            return {**out, "probed": True, "admitted": True}
        except KubeError as exc:
            if exc.status is None:
                raise
            message = getattr(exc, "detail", None) or str(exc)
            if exc.status == 404 and "namespaces" in message:
                return {**out, "note": f"namespace {ns} does not exist yet: the API server can judge a pod only in it"}
            if exc.status == 409:  # a pod by that name exists: the create passed admission
                return {**out, "probed": True, "admitted": True}
            refusal = judge(message, ns, nodes, priority_class)
            if refusal is None or (not refusal["fatal"] and refusal["kind"] != "webhook-no-dry-run"):
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                refusal = refusal or {"kind": "error", "reason": quoted(message),
                                      "fix": "the API server answered the dry run with an error: run again"}
                refusal = {**refusal, "fatal": False}
            if refusal["kind"] == "quota" and refusal["fatal"] and live and every_node_has_a_pod(live):
                live_spec = ((live.get("spec") or {}).get("template") or {}).get("spec") or {}
                if replaced_pod_makes_room(message, live_spec):
                    return {**out, "probed": True, "admitted": True,
                            "note": (f"{refusal['reason']}: the quota is full, but each pod a rollout replaces leaves room "
                                     "for its replacement; a pod for a new Node would be refused")}
            return {**out, "probed": True, "refusal": refusal}


def every_node_has_a_pod(daemonset: dict) -> bool:
    """Whether the DaemonSet controller counts a pod on every Node it schedules."""
    st = daemonset.get("status") or {}
    desired = int(st.get("desiredNumberScheduled") or 0)
    return desired > 0 and int(st.get("currentNumberScheduled") or 0) >= desired


# -- seen: the DaemonSet's FailedCreate events ---------------------------------------------------

def events_query(owner_uid: str) -> dict:
    """The field selector of the FailedCreate events of the object with uid ``owner_uid``."""
    return {"fieldSelector": f"involvedObject.uid={owner_uid},reason={FAILED_CREATE}"}


def _second(ts: str | None) -> str:
    """An RFC 3339 time to the second, UTC (``2024-05-01T10:00:05Z``), or ""."""
    if not ts:
        return ""
    return ts[:19] + "Z" if len(ts) >= 19 else ts


def last_seen(event: dict) -> str:
    """When an event last happened (to the second): its series' last observation, its
    ``lastTimestamp``, ``eventTime`` or ``firstTimestamp``, whichever is latest (core/v1 events
    and those written through events.k8s.io fill different fields)."""
    series = event.get("series") or {}
    times = [series.get("lastObservedTime"), event.get("lastTimestamp"), event.get("eventTime"),
             event.get("firstTimestamp"), (event.get("metadata") or {}).get("creationTimestamp")]
    return max((_second(t) for t in times if t), default="")


def refusals(events: list[dict], owner_uid: str | None, since: str | None, namespace: str, nodes: int | None = None,
             priority_class: str | None = None) -> list[dict]:
    """The refusals among ``events`` (FailedCreate of the object with uid ``owner_uid``, last seen
    at or after ``since``, RFC 3339), latest first, one per reason: ``{kind, fatal, reason, fix,
    at, count}`` (``at`` the latest, ``count`` the sum over its events). Older events are an
    earlier run's: stale."""
    since = _second(since)
    seen: dict[str, dict] = {}
    for ev in events:
        involved = ev.get("involvedObject") or ev.get("regarding") or {}
        if ev.get("reason") != FAILED_CREATE or (owner_uid and involved.get("uid") != owner_uid):
            continue
        at = last_seen(ev)
        if since and at < since:
            continue
        refusal = judge(ev.get("message") or ev.get("note") or "", namespace, nodes, priority_class)
        if refusal is None:
            continue
        count = int(ev.get("count") or (ev.get("series") or {}).get("count") or 1)
        # one per reason: each refused pod has its own name, hence its own event (10 alike, then
        # one "combined from similar events")
        key = refusal["reason"]
        if key in seen:
            count += seen[key]["count"]
            at = max(at, seen[key]["at"])
        seen[key] = {**refusal, "at": at, "count": count}
    return sorted(seen.values(), key=lambda r: r["at"], reverse=True)


def latest(events: list[dict], owner_uid: str | None, namespace: str, nodes: int | None = None,
           priority_class: str | None = None) -> dict | None:
    """The latest refusal among ``events`` however old (for a timeout's message), or None."""
    found = refusals(events, owner_uid, None, namespace, nodes, priority_class)
    return found[0] if found else None


class Standing:
    """Refusals that stand: a fatal refusal counts once it has been seen for ``grace`` seconds
    while pods were still missing (a quota that has not counted a deleted pod yet refuses its
    replacement for a moment, then admits it)."""

    def __init__(self, grace: float = REFUSAL_GRACE):
        self.grace = grace
        self.first: float | None = None

    def update(self, found: list[dict], missing: bool, now: float | None = None) -> list[dict]:
        """``found``: the current refusals (:func:`refusals`); ``missing``: whether pods are still
        missing. The fatal refusals once they stood ``grace`` seconds, else []."""
        now = time.monotonic() if now is None else now
        fatal = [r for r in found if r["fatal"]]
        if not fatal or not missing:
            self.first = None
            return []
        if self.first is None:
            self.first = now
        return fatal if now - self.first >= self.grace else []

    def due(self) -> float | None:
        """When (``time.monotonic()``) the refusals seen will have stood long enough, or None."""
        return None if self.first is None else self.first + self.grace
