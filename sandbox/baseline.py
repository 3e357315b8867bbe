"""The sandbox's known state between tests: what ``up`` makes, found by listing and put back only
where it differs, so that a test starts from the same cluster whatever ran before it.

What a test may leave and :func:`restore` takes away:

- faults set in the control-plane emulator, and join tokens left unrevoked;
- Nodes a test added (``gpu-node-K`` above the count the sandbox was brought up with: gone, and
  forgotten by the emulator), and on the others taints, cordons, held NotReady statuses (and their
  pods' node-down marks), labels and allocatable resources that ``cluster.node_body`` does not
  give them (``bcd.dev/*`` labels, which adoption sets, are kept);
- cluster-wide objects a fresh sandbox has none of: ValidatingAdmissionPolicies and their
  bindings (but the sandbox's own, labelled ``sandbox.bcd.dev/own``, that keeps a held Node
  NotReady: put back when missing), admission webhooks, ResourceSlices, ClusterPolicies other than ``cluster-policy`` (and
  that one, with its status, when it is missing);
- namespaces a fresh sandbox has not (``bcd-system`` aside, which is bcd's), Leases and
  ConfigMaps in ``default``, Pod Security labels on ``default``;
- in ``bcd-system``: ResourceQuotas, LimitRanges, the join Secret and the run lock's Lease.

What is bcd's (its namespace, ConfigMap and DaemonSet, the ClusterPolicy's configuration) is the
business of :func:`adoption_drift` and of the test fixtures that adopt or unadopt.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sandbox import cluster

NAMESPACE = "bcd-system"
BASE_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", NAMESPACE})
# labels the API server adds (beta.kubernetes.io/*) and adoption sets (bcd.dev/*)
KEPT_LABEL_PREFIXES = ("bcd.dev/", "beta.kubernetes.io/")
HOLD = "sandbox.bcd.dev/hold-status"
HOLD_POLICY = "sandbox-held-node-stays-not-ready"  # manifests/node-hold-policy.yaml, the policy and its binding
POLICY = ("nvidia.com", "v1", "clusterpolicies")
POLICY_NAME = "cluster-policy"
PREVIOUS = "bcd.dev/gpu-stack-previous"
# cluster-wide kinds a fresh sandbox has no object of but its own (labelled OWN): (group, version, plural)
OWN = ("sandbox.bcd.dev/own", "true")
FOREIGN_KINDS = (
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings"),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"),
    ("resource.k8s.io", "v1", "resourceslices"),
)
LOCK = "bcd-ansible-lock"
JOIN_SECRET = "bcd-join"  # noqa: S105 - the Secret's name


def base_gpu_nodes(state: dict[str, Any]) -> int:
    """How many GPU nodes the sandbox was brought up with (``add_nodes`` adds to ``gpu_nodes``)."""
    return int(state.get("base_gpu_nodes") or cluster.requested_nodes() or cluster.DEFAULT_NODES)


def wait_until(what: str, done, timeout: float, interval: float = 0.5) -> None:
    """Call ``done()`` until it returns true; ``TimeoutError`` naming ``what`` after ``timeout``
    seconds. ``done`` may raise; its error propagates."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"sandbox: {what} within {timeout:g} s")
        time.sleep(interval)


def gone(read) -> bool:
    """Whether ``read()`` answers 404 (any other error propagates)."""
    from kubernetes.client.rest import ApiException

    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def restore(sdir: Path, admin=None, cp=None, tenant: str | None = None, pool: str | None = None,
            timeout: float = 120.0) -> list[str]:
    """Put back what a test may have left (the module docstring's list); return one line per
    thing changed (empty when the sandbox was as ``up`` made it). ``admin``: the emulator's
    ``Admin`` client; ``cp`` with ``tenant``/``pool``: revoke the pool's live join tokens.
    Raises ``TimeoutError`` when a namespace or node does not go, or a node turn Ready, in ``timeout``."""
    from kubernetes import client

    from sandbox.control_plane.admin import Admin

    done: list[str] = []
    admin = admin or Admin.for_sandbox(sdir)
    # a cleared emulator reads {"outageMode": "hang", "outageRemaining": 0}; anything else is a
    # fault, a zero too (offlineGraceSeconds 0 is no grace at all)
    faults = admin.faults()
    if faults.pop("outageRemaining", 0) or faults != {"outageMode": "hang"}:
        admin.clear_faults()
        done.append("cleared the emulator's faults")
    if cp is not None:
        for tok in cp.list_tokens(tenant, pool):
            if not tok.get("revokedAt"):
                cp.revoke_token(tenant, tok["id"])
                done.append(f"revoked join token {tok['id']}")
    state = cluster.load_state(sdir) or {}
    with cluster.api_client(sdir) as api:
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        done += _nodes(sdir, state, core, admin, timeout)
        done += _cluster_objects(sdir, custom)
        done += _namespaces(core, timeout)
        done += _in_namespaces(core, client.CoordinationV1Api(api))
    return done


def _nodes(sdir: Path, state: dict, core, admin, timeout: float) -> list[str]:
    import datetime as dt

    done = []
    count = base_gpu_nodes(state)
    base = {f"{cluster.GPU_PREFIX}{i}" for i in range(1, count + 1)} | set(cluster.CPU_NODES)
    version = "v" + cluster.kube_version_of(sdir, state)
    extra = []
    for node in core.list_node().items:
        name = node.metadata.name
        if name not in base:
            extra.append(name)
            continue
        want = cluster.node_body(name, name.startswith(cluster.GPU_PREFIX), version)
        labels = node.metadata.labels or {}
        patch: dict[str, Any] = {}
        drop = {k: None for k in labels if k not in want["metadata"]["labels"] and not k.startswith(KEPT_LABEL_PREFIXES)}
        missing = {k: v for k, v in want["metadata"]["labels"].items() if labels.get(k) != v}
        if drop or missing:
            patch.setdefault("metadata", {})["labels"] = {**drop, **missing}
        if (node.metadata.annotations or {}).get(HOLD):
            patch.setdefault("metadata", {})["annotations"] = {HOLD: None}
        # the node lifecycle controller's taints go by themselves once the node is Ready again
        taints = [t for t in node.spec.taints or [] if not t.key.startswith("node.kubernetes.io/")]
        if taints or node.spec.unschedulable:
            keep = [t.to_dict() for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
            patch["spec"] = {"taints": [{k: v for k, v in t.items() if v is not None} for t in keep] or None,
                             "unschedulable": None}
        if patch:
            core.patch_node(name, patch)
            done.append(f"node {name}: put back {', '.join(sorted(k for p in patch.values() for k in p))}")
        # the node is back: its kubelet readies, runs and deletes its pods again
        back = cluster.mark_pods_down(core, name, False)
        if back:
            done.append(f"node {name}: its pods run again ({len(back)})")
        have = node.status.allocatable or {}
        if have != want["status"]["allocatable"]:
            # a merge patch: a resource the body lacks is removed by its null
            core.patch_node_status(name, {"status": {"allocatable": {**dict.fromkeys(have),
                                                                     **want["status"]["allocatable"]}}})
            done.append(f"node {name}: put back its allocatable resources")
    for name in extra:
        core.delete_node(name)
    # and their pods and Leases now, not when the garbage collectors get to them: a Node added
    # again under the same name would otherwise find the old pod bound to it (and joined)
    for name in extra:
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    if extra:
        admin.forget_nodes(extra)
        state["gpu_nodes"] = count
        cluster.save_state(sdir, state)
        done.append(f"deleted the node(s) a test added: {', '.join(sorted(extra))}")
    deadline = time.monotonic() + timeout
    while True:
        nodes = core.list_node().items
        left = [n.metadata.name for n in nodes if n.metadata.name in extra]
        left += [f"pod {p.metadata.namespace}/{p.metadata.name}" for name in extra
                 for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items]
        not_ready = [n.metadata.name for n in nodes if n.metadata.name in base
                     and not any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])]
        if not left and not not_ready:
            break
        if time.monotonic() > deadline:
            now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            raise TimeoutError(f"sandbox baseline ({now}): {', '.join(left)} not gone, "
                               f"{', '.join(not_ready)} not Ready within {timeout:g} s")
        time.sleep(0.5)
    return done


def _cluster_objects(sdir: Path, custom) -> list[str]:
    from kubernetes.client.rest import ApiException

    done, own = [], set()
    for group, version, plural in FOREIGN_KINDS:
        try:
            items = custom.list_cluster_custom_object(group, version, plural)["items"]
        except ApiException as exc:
            if exc.status == 404:  # a kind this API server does not serve
                continue
            raise
        for item in items:
            if (item["metadata"].get("labels") or {}).get(OWN[0]) == OWN[1]:
                own.add((plural, item["metadata"]["name"]))
                continue
            custom.delete_cluster_custom_object(group, version, plural, item["metadata"]["name"])
            done.append(f"deleted {plural} {item['metadata']['name']}")
    policies = [p["metadata"]["name"] for p in custom.list_cluster_custom_object(*POLICY)["items"]]
    # the sandbox's own admission policy (a held Node stays NotReady) and its binding
    if own != {("validatingadmissionpolicies", HOLD_POLICY), ("validatingadmissionpolicybindings", HOLD_POLICY)}:
        cluster.ensure_objects(sdir)
        done.append(f"created the hold policy {HOLD_POLICY} again")
    for name in policies:
        if name != POLICY_NAME:
            custom.delete_cluster_custom_object(*POLICY, name)
            done.append(f"deleted ClusterPolicy {name}")
    if POLICY_NAME not in policies:
        cluster.ensure_objects(sdir)
        done.append(f"created ClusterPolicy {POLICY_NAME} again")
    else:
        status = custom.get_cluster_custom_object_status(*POLICY, POLICY_NAME).get("status") or {}
        if status.get("state") != "ready":
            custom.patch_cluster_custom_object_status(*POLICY, POLICY_NAME,
                                                      {"status": {"state": "ready", "namespace": "gpu-operator"}})
            done.append(f"ClusterPolicy {POLICY_NAME}: status ready again")
    return done


def reset_cluster_policy(sdir: Path, timeout: float = 60.0) -> bool:
    """``cluster-policy`` as the GPU operator's chart creates it (its spec, field manager ``helm``,
    status ready), when bcd configured it (the ``bcd.dev/gpu-stack-previous`` annotation) or its
    spec differs; True when it was reset. Raises ``TimeoutError`` when the old one does not go."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    want = cluster._manifest("cluster-policy.yaml")[0]
    with cluster.api_client(sdir) as api:
        custom = client.CustomObjectsApi(api)
        try:
            got = custom.get_cluster_custom_object(*POLICY, POLICY_NAME)
        except ApiException as exc:
            if exc.status != 404:
                raise
            got = None
        if got is not None:
            managers = {m.get("manager") for m in got["metadata"].get("managedFields") or []
                        if m.get("subresource") != "status"}
            if (got.get("spec") == want.get("spec") and PREVIOUS not in (got["metadata"].get("annotations") or {})
                    and managers <= {"helm"}):
                return False
            custom.delete_cluster_custom_object(*POLICY, POLICY_NAME)
            wait_until(f"ClusterPolicy {POLICY_NAME} did not go",
                       lambda: gone(lambda: custom.get_cluster_custom_object(*POLICY, POLICY_NAME)), timeout, 0.2)
    cluster.ensure_objects(sdir)
    return True


def _namespaces(core, timeout: float) -> list[str]:
    from kubernetes.client.rest import ApiException

    gone = [ns.metadata.name for ns in core.list_namespace().items if ns.metadata.name not in BASE_NAMESPACES]
    for name in gone:
        try:
            core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    wait_until(f"namespace(s) {', '.join(gone)} did not go",
               lambda: not {ns.metadata.name for ns in core.list_namespace().items} & set(gone), timeout)
    return [f"deleted namespace {name}" for name in gone]


def _in_namespaces(core, coordination) -> list[str]:
    from kubernetes.client.rest import ApiException

    done = []
    default = core.read_namespace("default")
    ps = [k for k in default.metadata.labels or {} if k.startswith("pod-security.kubernetes.io/")]
    if ps:
        core.patch_namespace("default", {"metadata": {"labels": dict.fromkeys(ps)}})
        done.append(f"namespace default: removed {', '.join(ps)}")
    for lease in coordination.list_namespaced_lease("default").items:
        coordination.delete_namespaced_lease(lease.metadata.name, "default")
        done.append(f"deleted Lease default/{lease.metadata.name}")
    for cm in core.list_namespaced_config_map("default").items:
        if cm.metadata.name != "kube-root-ca.crt":
            core.delete_namespaced_config_map(cm.metadata.name, "default")
            done.append(f"deleted ConfigMap default/{cm.metadata.name}")
    try:
        core.read_namespace(NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return done
        raise
    for quota in core.list_namespaced_resource_quota(NAMESPACE).items:
        core.delete_namespaced_resource_quota(quota.metadata.name, NAMESPACE)
        done.append(f"deleted ResourceQuota {NAMESPACE}/{quota.metadata.name}")
    for limits in core.list_namespaced_limit_range(NAMESPACE).items:
        core.delete_namespaced_limit_range(limits.metadata.name, NAMESPACE)
        done.append(f"deleted LimitRange {NAMESPACE}/{limits.metadata.name}")
    for kind, read, delete, name in (
            ("Lease", coordination.read_namespaced_lease, coordination.delete_namespaced_lease, LOCK),
            ("Secret", core.read_namespaced_secret, core.delete_namespaced_secret, JOIN_SECRET)):
        try:
            read(name, NAMESPACE, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        delete(name, NAMESPACE)
        done.append(f"deleted {kind} {NAMESPACE}/{name}")
    return done


# -------------------------------------------------------------------------------- bcd's objects

# Managers that write bcd's objects on a cluster adopted by bcd-ansible alone: bcd-ansible, and the
# controllers' status writes (their entries carry subresource "status").
OWNER = "bcd-ansible"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def adoption_drift(sdir: Path, image: str) -> list[str]:
    """What keeps bcd's objects from being as a lone adoption by bcd-ansible leaves them: the
    namespace, the ConfigMap ``bcd-config`` or the DaemonSet ``bcd`` missing, a field manager other
    than bcd-ansible on any of them (status writes aside), a client-side apply's annotation, a
    ``kubectl rollout restart`` annotation, another image, a Secret, ConfigMap or DaemonSet in the
    namespace that is not bcd's. Empty when there is none."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    drift: list[str] = []
    with cluster.api_client(sdir) as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        try:
            objects = {"Namespace": core.read_namespace(NAMESPACE),
                       "ConfigMap": core.read_namespaced_config_map("bcd-config", NAMESPACE),
                       "DaemonSet": apps.read_namespaced_daemon_set("bcd", NAMESPACE)}
        except ApiException as exc:
            if exc.status == 404:
                return [f"bcd's namespace, ConfigMap or DaemonSet is missing ({exc.status} {exc.reason})"]
            raise
        for kind, obj in objects.items():
            foreign = sorted({m.manager for m in obj.metadata.managed_fields or []
                              if m.manager != OWNER and m.subresource != "status"})
            if foreign:
                drift.append(f"{kind}: field manager(s) {', '.join(foreign)}")
            if LAST_APPLIED in (obj.metadata.annotations or {}):
                drift.append(f"{kind}: {LAST_APPLIED}")
        ds = objects["DaemonSet"]
        if RESTARTED_AT in (ds.spec.template.metadata.annotations or {}):
            drift.append(f"DaemonSet: {RESTARTED_AT}")
        images = {c.image for c in ds.spec.template.spec.containers}
        if images != {image}:
            drift.append(f"DaemonSet: image {', '.join(sorted(images))}")
        for kind, items in (("Secret", core.list_namespaced_secret(NAMESPACE).items),
                            ("ConfigMap", core.list_namespaced_config_map(NAMESPACE).items),
                            ("DaemonSet", apps.list_namespaced_daemon_set(NAMESPACE).items)):
            extra = sorted(i.metadata.name for i in items if i.metadata.name not in {"bcd", "bcd-config", "kube-root-ca.crt"})
            if extra:
                drift.append(f"{kind}(s) not bcd's: {', '.join(extra)}")
    return drift


def drop_bcd_labels(sdir: Path) -> list[str]:
    """Remove the ``bcd.dev/*`` labels adoption and the control plane's joiner put on Nodes (a
    cluster not adopted has none); return the Nodes changed."""
    from kubernetes import client

    done = []
    with cluster.api_client(sdir) as api:
        core = client.CoreV1Api(api)
        for node in core.list_node().items:
            bcd = [k for k in node.metadata.labels or {} if k.startswith("bcd.dev/")]
            if bcd:
                core.patch_node(node.metadata.name, {"metadata": {"labels": dict.fromkeys(bcd)}})
                done.append(node.metadata.name)
    return done
