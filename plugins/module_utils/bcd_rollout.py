"""The staged rollout of bcd's DaemonSet (the bcd DaemonSet specification, section Upgrades): plans, health, rollback.

Pure functions over the API's JSON, so the bcd_rollout module stays a thin loop and the rules
are unit-tested without a cluster.

A DaemonSet has no partition (unlike a StatefulSet), so a staged rollout holds the new template
with ``updateStrategy: OnDelete`` between stages: the canary's pods are deleted by name, and a
batch is the DaemonSet controller's own rolling update (``RollingUpdate`` with ``maxUnavailable``
the batch's size, back to ``OnDelete`` once it has taken the batch's Nodes); the controller
replaces each pod with one of the new template
(https://kubernetes.io/docs/tasks/manage-daemon/update-daemon-set/). Which template a pod runs
is its ``controller-revision-hash`` label, the hash of the DaemonSet's newest ControllerRevision.

Rollback re-applies "the previous render": the objects as they were before the run, read before
anything changed, reduced to the fields some field manager set (:func:`applied_config`), so
server-side apply restores exactly those values and leaves the server's defaults alone.
"""

from __future__ import annotations

import copy
import json
import math

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_health import pod_failure
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import (
    join_failure,
    node_ready,
    path,
    pod_ready,
    pod_state,
    selector,
    slim_pod,
    target_node,
)

REVISION_LABEL = "controller-revision-hash"
BCD_CONTAINER = "bcd"
# Node conditions (nodes.list) that say nothing is wrong while "True".
INFORMATIONAL_CONDITIONS = frozenset({"HostManagedExternally"})
# Node conditions that say something is wrong while not "True".
POSITIVE_CONDITIONS = frozenset({"Ready", "Reporting"})


# --- the previous render ----------------------------------------------------------------------

def merge_fields(a: dict, b: dict) -> dict:
    """The union of two ``fieldsV1`` tries (managedFields)."""
    out = copy.deepcopy(a)
    for key, sub in b.items():
        out[key] = merge_fields(out[key], sub) if key in out else copy.deepcopy(sub)
    return out


def _match_key(item: object, key: dict) -> bool:
    return isinstance(item, dict) and all(item.get(k) == v for k, v in key.items())


def extract(value: object, fields: dict) -> object:
    """The part of ``value`` that the ``fieldsV1`` trie ``fields`` owns.

    Keys: ``f:<name>`` a map field, ``k:<json>`` a list item by its keys, ``v:<json>`` a set
    item, ``i:<n>`` a list item by index, ``.`` the node itself. An empty trie owns the whole
    value (an atomic field or list). https://kubernetes.io/docs/reference/using-api/server-side-apply/
    """
    owned = {k: v for k, v in fields.items() if k != "."}
    if not owned:
        if isinstance(value, dict) and "." in fields:
            return {}
        return copy.deepcopy(value)
    if isinstance(value, dict):
        out = {}
        for key, sub in owned.items():
            if key.startswith("f:") and key[2:] in value:
                out[key[2:]] = extract(value[key[2:]], sub)
        return out
    if isinstance(value, list):
        keep = []
        for index, item in enumerate(value):
            for key, sub in owned.items():
                if key.startswith("k:"):
                    ident = json.loads(key[2:])
                    if _match_key(item, ident):
                        part = extract(item, sub)
                        keep.append({**ident, **part} if isinstance(part, dict) else part)
                        break
                elif key.startswith("v:"):
                    if item == json.loads(key[2:]):
                        keep.append(copy.deepcopy(item))
                        break
                elif key.startswith("i:") and key[2:].isdigit() and int(key[2:]) == index:
                    keep.append(extract(item, sub))
                    break
        return keep
    return copy.deepcopy(value)


def applied_config(obj: dict) -> dict:
    """``obj`` (as read from the API) reduced to what its field managers set, ready to re-apply.

    Every managedFields entry but those of a subresource (``status``, ``scale``) counts, so a
    field someone else changed (``kubectl set image``) comes back with the value it had. Server
    defaults that no manager set are left out; they stay as the server keeps them. An object
    without managedFields comes back whole (spec, data, labels and annotations).
    """
    meta = obj.get("metadata") or {}
    fields: dict = {}
    for entry in meta.get("managedFields") or []:
        if entry.get("subresource") or entry.get("fieldsType") != "FieldsV1":
            continue
        fields = merge_fields(fields, entry.get("fieldsV1") or {})
    if fields:
        out = extract(obj, fields)
    else:
        out = {k: copy.deepcopy(v) for k, v in obj.items() if k not in ("metadata", "status")}
        out["metadata"] = {k: copy.deepcopy(meta[k]) for k in ("labels", "annotations") if k in meta}
    out.pop("status", None)
    out_meta = out.get("metadata") or {}
    out["metadata"] = {"name": meta.get("name"), **({"namespace": meta["namespace"]} if meta.get("namespace") else {}),
                       **{k: out_meta[k] for k in ("labels", "annotations") if k in out_meta}}
    out["apiVersion"] = obj.get("apiVersion")
    out["kind"] = obj.get("kind")
    return out


def with_strategy(daemonset: dict, strategy: dict) -> dict:
    """A copy of ``daemonset`` whose ``spec.updateStrategy`` is ``strategy``."""
    out = copy.deepcopy(daemonset)
    out.setdefault("spec", {})["updateStrategy"] = copy.deepcopy(strategy)
    return out


ON_DELETE = {"type": "OnDelete"}


# --- what runs where --------------------------------------------------------------------------

def container_image(obj: dict, name: str = BCD_CONTAINER) -> str | None:
    """The image of container ``name`` of a DaemonSet (its template) or a Pod."""
    spec = obj.get("spec") or {}
    if "template" in spec:
        spec = (spec["template"] or {}).get("spec") or {}
    for container in spec.get("containers") or []:
        if container.get("name") == name:
            return container.get("image")
    return None


def digest(image: str | None) -> str | None:
    """``sha256:<hex>`` of an image reference pinned by digest, else None."""
    if not image or "@" not in image:
        return None
    return image.rsplit("@", 1)[1]


def short(image: str | None, length: int = 12) -> str:
    """A short form of an image's digest for tables: the first ``length`` hex digits."""
    d = digest(image)
    if not d:
        return image or "-"
    return d.split(":", 1)[-1][:length]


def short_ref(image: str | None, length: int = 12) -> str:
    """An image as progress lines name it: its last path component, a digest cut to ``length`` hex
    digits as ``docker images`` and ``kubectl`` users know it (``bcd:0.1.0@sha256:0123456789ab``).
    The full reference stays in the reports and the plan."""
    if not image:
        return "?"
    name = image.rsplit("/", 1)[-1]
    if "@" not in name:
        return name
    ref, dig = name.rsplit("@", 1)
    algo, colon, hexes = dig.partition(":")
    return f"{ref}@{algo}{colon}{hexes[:length]}" if hexes else name


def newest_revision(revisions: list[dict], owner_uid: str) -> dict | None:
    """The ControllerRevision of the DaemonSet with uid ``owner_uid`` with the highest ``revision``."""
    mine = [r for r in revisions if any(o.get("uid") == owner_uid for o in (r.get("metadata") or {}).get("ownerReferences") or [])]
    return max(mine, key=lambda r: int(r.get("revision") or 0), default=None)


def revision_hash(revision: dict | None) -> str | None:
    """The hash pods of ``revision`` carry in their ``controller-revision-hash`` label."""
    if not revision:
        return None
    meta = revision.get("metadata") or {}
    label = (meta.get("labels") or {}).get(REVISION_LABEL)
    if label:
        return label
    name, owner = meta.get("name") or "", next(iter(meta.get("ownerReferences") or []), {}).get("name") or ""
    return name[len(owner) + 1:] if owner and name.startswith(owner + "-") else None


def generation_seen(ds: dict) -> bool:
    """Whether the DaemonSet controller has seen the DaemonSet's latest generation."""
    return int((ds.get("status") or {}).get("observedGeneration") or 0) >= int(ds["metadata"].get("generation") or 0)


def rolled_out(ds: dict, at_most: int | None = None) -> bool:
    """Whether the DaemonSet is rolled out as ``kubectl rollout status`` says it: its controller
    has seen the latest generation and counts every desired pod (or ``at_most`` pods, if fewer)
    updated and available."""
    status = ds.get("status") or {}
    want = int(status.get("desiredNumberScheduled") or 0)
    if at_most is not None:
        want = min(want, at_most)
    return (generation_seen(ds) and int(status.get("updatedNumberScheduled") or 0) >= want
            and int(status.get("numberAvailable") or 0) >= want)


def pod_node(pod: dict, owner_uid: str | None = None) -> str | None:
    """The Node ``pod`` counts for (:func:`target_node`), or None when it is terminating or,
    with ``owner_uid``, not that DaemonSet's."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    if owner_uid and not any(o.get("uid") == owner_uid for o in meta.get("ownerReferences") or []):
        return None
    return target_node(pod)


def pods_by_node(pods: list[dict], owner_uid: str | None = None) -> dict[str, dict]:
    """Node name -> the DaemonSet's pod there that is not terminating (the newest if several).
    A pod the scheduler has not placed yet counts for the Node it is for (:func:`target_node`):
    a pod no Node fits must show as that Node's pod, Pending, not as no pod at all."""
    out: dict[str, dict] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = pod_node(pod, owner_uid)
        if not node:
            continue
        if node not in out or (meta.get("creationTimestamp") or "") > (out[node]["metadata"].get("creationTimestamp") or ""):
            out[node] = pod
    return out


def pod_side(kube, namespace: str, name: str) -> tuple[dict | None, str | None, dict[str, dict]]:
    """What the cluster shows of bcd's pods, read now: the DaemonSet (None when absent), the hash
    of its newest ControllerRevision (its current pod template) and Node name -> its pod
    (:func:`pods_by_node`, slim). Three requests through ``kube`` (bcd_kube.Kube); raises KubeError."""
    ds = kube.get(path("daemonsets", name, namespace))
    if ds is None:
        return None, None, {}
    labels = (ds.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
    query = {"labelSelector": selector(labels) or None}
    revisions = kube.list(path("controllerrevisions", namespace=namespace), query)
    revision = revision_hash(newest_revision(revisions, ds["metadata"]["uid"]))
    pods = kube.list(path("pods", namespace=namespace), query, keep=slim_pod)
    return ds, revision, pods_by_node(pods, ds["metadata"]["uid"])


def pod_revision(pod: dict | None) -> str | None:
    return ((pod or {}).get("metadata") or {}).get("labels", {}).get(REVISION_LABEL)


def fatal(pod: dict, since: str | None = None) -> str | None:
    """Why waiting for ``pod`` to turn Ready is pointless, or None: a failed pod, its ``bcd join``
    init container exited non-zero (the control plane refused the node), or a container failing
    (:func:`bcd_health.pod_failure`: crash-looping from its first restart, a non-zero exit, a
    waiting reason that does not heal, or with ``since`` a restart since then), named with its
    last exit and termination message."""
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return f"pod {pod['metadata']['name']} failed ({status.get('reason') or pod_state(pod)})"
    refused = join_failure(pod)
    if refused:
        return f"pod {pod['metadata']['name']}: {refused}"
    return pod_failure(pod, since)


# --- the control plane's view -------------------------------------------------------------------

def conditions(cp_node: dict | None) -> list[dict]:
    """A node's conditions from nodes.list as a list (the API's list, or a mapping type -> condition)."""
    raw = (cp_node or {}).get("conditions") or []
    if isinstance(raw, dict):
        return [{"type": k, **(v if isinstance(v, dict) else {"status": v})} for k, v in sorted(raw.items())]
    return [c for c in raw if isinstance(c, dict)]


def failing(cp_node: dict | None) -> dict[str, str]:
    """Condition type -> "reason: message" of each condition that says something is wrong:
    ``Ready``/``Reporting`` not "True", any other (but informational ones) "True"."""
    out = {}
    for c in conditions(cp_node):
        ctype, status = c.get("type"), str(c.get("status"))
        bad = status != "True" if ctype in POSITIVE_CONDITIONS else (status == "True" and ctype not in INFORMATIONAL_CONDITIONS)
        if bad:
            out[ctype] = ": ".join(str(x) for x in (c.get("reason"), c.get("message")) if x) or status
    return out


# --- down nodes --------------------------------------------------------------------------------

# The taint the node lifecycle controller sets on a Node whose kubelet stopped reporting.
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


def node_down(node: dict | None) -> str | None:
    """Why a selected Node is down - no rollout stage rolls it or waits for it - or None.

    ``node``: a Node as the API returns it (or :func:`bcd_kube.slim_node`'s), None when it is
    gone. Down is: gone, NotReady (its Ready condition not "True"; the reason and message
    quoted), cordoned (``spec.unschedulable``) or tainted ``node.kubernetes.io/unreachable``.
    Returns a phrase such as ``"the Node is NotReady (KubeletNotReady: runtime is down)"``."""
    if node is None:
        return "the Node is gone (or no longer matches bcd_node_selector)"
    if not node_ready(node):
        ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
        detail = ": ".join(str(x) for x in (ready.get("reason"), ready.get("message")) if x)
        return f"the Node is NotReady ({detail})" if detail else "the Node is NotReady (no Ready condition)"
    spec = node.get("spec") or {}
    if any(t.get("key") == UNREACHABLE_TAINT for t in spec.get("taints") or []):
        return f"the Node is tainted {UNREACHABLE_TAINT} (its kubelet stopped reporting)"
    if spec.get("unschedulable"):
        return "the Node is cordoned (spec.unschedulable)"
    return None


def node_dark(node: dict | None) -> bool:
    """Whether a down Node's pod cannot count as available: the Node is gone, NotReady or
    tainted ``node.kubernetes.io/unreachable``. A cordoned Node (:func:`node_down` says down) runs
    its pod on, and the DaemonSet controller still counts it available."""
    if node is None or not node_ready(node):
        return True
    return any(t.get("key") == UNREACHABLE_TAINT for t in (node.get("spec") or {}).get("taints") or [])


def down_budget(max_down: int | str, total: int) -> int:
    """How many of ``total`` selected Nodes may be down for a rollout to start: ``max_down`` a
    count, or a percentage of ``total`` rounded up (as bcd_rollout_max_unavailable); 0 or more."""
    if isinstance(max_down, str) and max_down.endswith("%"):
        return math.ceil(total * int(max_down[:-1]) / 100)
    return max(0, int(max_down))


def over_budget(down: dict[str, str], max_down: int | str, total: int) -> str | None:
    """The refusal of a rollout with more down Nodes than bcd_rollout_max_down allows, naming each
    and why (``down``: Node -> :func:`node_down`'s phrase; ``total``: the selected Nodes), or None."""
    allowed = down_budget(max_down, total)
    if len(down) <= allowed:
        return None
    names = "; ".join(f"{n}: {why}" for n, why in down.items())
    return (f"{len(down)} of {total} selected node(s) are down, more than bcd_rollout_max_down {max_down} allows "
            f"({allowed}): {names}")


def left_behind(why: str) -> str:
    """A down Node's outcome in the plan and the report: why, and what happens to it. No stage
    rolls it or waits for it; the render's own update strategy (RollingUpdate, applied once the
    stages passed) has the DaemonSet controller replace its pod when its kubelet can - at once on a
    cordoned Node, once a NotReady one is back - without a gate; the next run judges it."""
    return (f"left behind: {why}; no stage rolls it or waits for it: the DaemonSet controller replaces its pod when "
            "its kubelet can (the render's RollingUpdate, without a gate: a NotReady Node once it is back), and the next "
            "rollout.yml or audit.yml run checks it")


def pod_column(pod: dict | None, node: dict | None = None) -> str:
    """The report's POD column: ``none`` without a pod, ``unknown (Node NotReady)`` when the Node
    (given, as the API returns it) is not Ready - its pod's Ready condition is stale then, the
    kubelet that would update it being down - else ``Ready`` or ``NotReady``."""
    if pod is None:
        return "none"
    if node is not None and not node_ready(node):
        return "unknown (Node NotReady)"
    return "Ready" if pod_ready(pod) else "NotReady"


def went(why: str) -> str:
    """:func:`node_down`'s phrase for a Node that went down while its stage ran: "the Node is
    NotReady (...)" -> "the Node went NotReady (...)"."""
    for now, then in (("the Node is NotReady", "the Node went NotReady"), ("the Node is cordoned", "the Node was cordoned"),
                      ("the Node is tainted", "the Node was tainted"), ("the Node is gone", "the Node went away")):
        if why.startswith(now):
            return then + why[len(now):]
    return why


# --- the plan ---------------------------------------------------------------------------------

def batch_size(max_unavailable: int | str, total: int) -> int:
    """Nodes per batch: a count, or a percentage of ``total`` rounded up (as the DaemonSet
    controller rounds maxUnavailable), at least 1."""
    if isinstance(max_unavailable, str) and max_unavailable.endswith("%"):
        return max(1, math.ceil(total * int(max_unavailable[:-1]) / 100))
    return max(1, int(max_unavailable))


def plan(nodes: list[str], canary: int, max_unavailable: int | str, total: int) -> list[dict]:
    """The stages: ``canary`` nodes first (none when 0), then batches of ``max_unavailable``.

    ``nodes``: the nodes to roll, in order; ``total``: the selected nodes (percentages are of it).
    Returns ``[{"name": "canary"|"batch N", "nodes": [...]}]``; no stage is empty.
    """
    stages = []
    rest = list(nodes)
    if canary > 0 and rest:
        stages.append({"name": "canary", "nodes": rest[:canary]})
        rest = rest[canary:]
    size = batch_size(max_unavailable, total)
    for i in range(0, len(rest), size):
        stages.append({"name": f"batch {i // size + 1}", "nodes": rest[i:i + size]})
    return stages


# --- the report -------------------------------------------------------------------------------

def table(summary: dict) -> list[str]:
    """The printed report: a headline, one row per node (stage, image digest before the run and
    now, pod, bcd node state, outcome), the failures and the notes."""
    rows = summary.get("nodes") or []
    head = {"name": "NODE", "stage": "STAGE", "from": "BEFORE", "to": "NOW", "pod": "POD", "state": "BCD NODE", "outcome": "OUTCOME"}
    cols = ("name", "stage", "from", "to", "pod", "state")
    width = {c: max([len(str(head[c]))] + [len(str(r.get(c) or "-")) for r in rows]) for c in cols}
    lines = [summary.get("headline") or f"rollout: {summary.get('result')}"]
    for r in [head, *rows]:
        lines.append("  ".join(f"{r.get(c) or '-'!s:<{width[c]}}" for c in cols) + "  " + str(r.get("outcome") or "-"))
    for f in summary.get("failed_nodes") or []:
        lines.append(f"FAILED {f['node']}: {f['why']}")
    for note in summary.get("notes") or []:
        lines.append(note)
    return lines
