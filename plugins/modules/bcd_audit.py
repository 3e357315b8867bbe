#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_audit: check, read-only, everything adoption promised on one cluster."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_audit
version_added: 1.0.0
short_description: Check, read-only, that an adopted cluster still is what adoption left
description:
  - Runs every check of audit.yml on one cluster and returns one result per check and node
    (C({cluster, check, node, ok, message, warning}); C(node) is empty for a cluster-level
    check). Changes nothing and mints nothing; the only writes are server-side dry runs.
  - "C(drift-namespace), C(drift-configmap), C(drift-daemonset) - each rendered object (O(objects))
    against the live one. The pod surface, whoever owns the fields (module_utils C(bcd_surface)) -
    the DaemonSet's whole pod template (volumes, every container and init container, host
    namespaces, the service account token, scheduling, security contexts, template labels and
    annotations) against the render as the API server defaults it (a server-side dry-run update
    of the live DaemonSet with the render, C(dryRun=All)), the ConfigMap's keys and the
    Namespace's Pod Security labels. Each difference names its field path (list items by their
    merge key, e.g. C(spec.template.spec.volumes[host-root])), the live value, the rendered value
    (an env var's literal value is never shown) and the field managers that own it
    (C(metadata.managedFields)); an extra host path (a hostPath volume the render does not have)
    comes first, on the check's first line (the JUnit failure's message) and in RV(host_paths).
    C(kubectl rollout restart)'s C(kubectl.kubernetes.io/restartedAt) template annotation is never
    drift; a path in C(bcd_drift_allowed_paths) (a field the render does not set) passes with a
    note; labels and annotations on the DaemonSet's own metadata that the render does not set are
    a warning."
  - "Then the rest of each object, by a server-side apply dry run with field manager C(bcd-ansible)
    (what rollout.yml would change) - the fields of the render that differ (only what the render
    sets and C(bcd-ansible) owns: what the API server or controllers set, such as the DaemonSet's
    C(deprecated.daemonset.template.generation) annotation or C(metadata.generation), is never
    drift), the image digest on its own line, and the field managers other than C(bcd-ansible)
    that updated the object after bcd-ansible last applied it (a hand edit, a GitOps controller).
    A drift result also holds C(findings) and C(warnings) (C({path, live, rendered, managers,
    allowed, host_path})) and, when it fails on extra host paths, C(host_paths)."
  - "C(clusterpolicy) (with C(bcd_nvidia_toolkit=gpu-operator)) - the ClusterPolicy isolation settings
    gpu_stack sets (device plugin off, toolkit env false, CDI on, NRI plugin off; the bcd DaemonSet specification, section GPU
    isolation), each reverted field naming the field manager that owns it now
    (C(metadata.managedFields)), such as C(helm) after a C(helm upgrade)."
  - "C(gpu-isolation) per selected Node - the verdict of the GPU isolation gate (O(isolation), the
    M(bcd.kubernetes.bcd_gpu_isolation) result doctor.yml prints), leaving out the ClusterPolicy's
    findings, which C(clusterpolicy) reports once."
  - "C(join-tokens) - no unrevoked, unexpired join token whose description names this cluster
    (C(joinTokens.list)); C(join-secret) - no join-token Secret (C(bcd_join_token_secret)) in the
    bcd namespace."
  - "C(reporting) per selected Node - its bcd node C(adopting), C(ready) or C(draining) in
    C(nodes.list), with its conditions."
  - "C(pod) per selected Node - its bcd pod, as the cluster shows it, whatever the control plane
    says (which counts a node C(adopting) for its offline grace after bcd stopped reporting): Ready,
    on the DaemonSet's current pod template (its newest ControllerRevision), no container waiting
    in C(CrashLoopBackOff) (or another reason that does not heal) or terminated with a non-zero
    exit code (C(Error)), none restarted during the audit. A failure names the pod, its state and
    the container's last exit (C(lastState.terminated) - exit code, reason, termination message).
    A Ready pod of an older template under updateStrategy C(OnDelete) passes with a warning (it is
    replaced only when deleted; C(drift-daemonset) reports the strategy). A down Node (NotReady,
    tainted unreachable, or cordoned) whose pod fails is named so, as rollout.yml leaves it behind,
    with what brings it up to date (the Node back, then the next run). A Node with no pod names
    the DaemonSet's latest C(FailedCreate) refusal (a quota, Pod Security, an admission policy) when
    there is one, with its time."
  - "C(pod-security) - namespaces other than bcd's and C(bcd_privileged_namespaces) whose pods may
    run privileged (no C(pod-security.kubernetes.io/enforce) label, or C(privileged)); a failure
    with C(bcd_require_pod_security), else a passing check with a warning, as adopt-cluster.yml does."
options:
  cluster:
    description: The cluster's name (C(bcd_cluster_name) or the inventory host).
    type: str
    required: true
  objects:
    description: The rendered Namespace, ConfigMap and DaemonSet (C(bcd_manifests) result C(objects)).
    type: list
    elements: dict
    required: true
  isolation:
    description: The M(bcd.kubernetes.bcd_gpu_isolation) result (its C(nodes)).
    type: dict
    required: true
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.control_plane
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: Read-only either way.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Audit the cluster
  bcd.kubernetes.bcd_audit:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
    cluster: "{{ bcd_cluster_name | default(inventory_hostname) }}"
    objects: "{{ bcd_daemonset_render.objects }}"
    isolation: "{{ gpu_stack_verify_cluster }}"
  no_log: true
"""

RETURN = r"""
results:
  description: One per check and node, C({cluster, check, node, ok, message, warning}).
  returned: success
  type: list
  elements: dict
table:
  description: The per-node table (a row per Node and per-node check), then each cluster-level check, as lines.
  returned: success
  type: list
  elements: str
started:
  description: Unix time the checks started.
  returned: success
  type: float
host_paths:
  description: One line per extra host path of any cluster object (the path, its volume, where it is mounted, its field managers).
  returned: success
  type: list
  elements: str
failed_checks:
  description: How many results are not ok.
  returned: success
  type: int
"""

import datetime
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_admission import (
    describe,
    events_query,
    latest,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_audit import table
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import (
    NODE_STATES_REPORTING,
    ControlPlaneError,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import cluster_policy_findings
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_health import (
    healthy_text,
    pod_health,
    pod_updated,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    control_plane,
    inventory,
    kube,
    label_selector,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_render import FIELD_MANAGER
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import node_down, pod_side
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_surface import (
    POD_SECURITY_PREFIX,
    SurfaceError,
    defaulted,
    failing,
    host_path_line,
    judge_configmap,
    judge_daemonset,
    judge_namespace,
    line,
    public,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_token import DESCRIPTION_RE

# The ClusterPolicy field each isolation finding is about (where its field manager is looked up).
POLICY_FIELDS = {"operator-device-plugin": ("spec", "devicePlugin", "enabled"), "operator-nri-plugin": ("spec", "cdi", "nriPluginEnabled"),
                 "operator-toolkit-env": ("spec", "toolkit", "env"), "operator-cdi": ("spec", "cdi", "enabled")}
IGNORED = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid", "selfLink")


def _flat(obj, prefix=""):
    """Dotted leaf paths of a JSON value (lists indexed), for a readable diff."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else k))
        return out or {prefix: {}}
    if isinstance(obj, list) and obj and all(isinstance(i, dict) for i in obj):
        out = {}
        for i, v in enumerate(obj):
            key = v.get("name") if isinstance(v.get("name"), str) else i
            out.update(_flat(v, f"{prefix}[{key}]"))
        return out
    return {prefix: obj}


def _comparable(obj: dict) -> dict:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in IGNORED}
    return {**{k: v for k, v in obj.items() if k not in ("metadata", "status")}, "metadata": meta}


def _rendered(obj: dict):
    """Whether a dotted path (``_flat``) is one the render sets: what bcd-ansible renders and owns.

    The dry run also moves what the API server and controllers set on an apply (the DaemonSet's
    ``deprecated.daemonset.template.generation`` annotation and ``generation``, defaulted pod
    fields, a Namespace's ``kubernetes.io/metadata.name`` label and finalizers): none is in the
    render, so none is drift. A list whose items have no name (tolerations) is compared whole:
    an atomic list the apply would replace differs at indexes the render does not have.
    """
    paths = set(_flat(_comparable(obj)))
    paths |= {key[:m.start()] for key in paths for m in re.finditer(r"\[\d+\]", key)}

    def ours(key: str) -> bool:
        return any(key == p or key.startswith((p + ".", p + "[")) for p in paths)

    return ours


def _images(obj: dict) -> dict[str, str]:
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {c.get("name"): c.get("image") for c in (pod.get("initContainers") or []) + (pod.get("containers") or [])}


def _when(entry: dict) -> float:
    try:
        return datetime.datetime.fromisoformat(str(entry.get("time")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _surface(core, live: dict, obj: dict, allowed: list[str]) -> tuple[list[dict], list[dict], tuple[str, ...]]:
    """The pod-surface findings and warnings of one object, and the dotted paths (``_flat``) they
    stand for, which the owned-field comparison then leaves out."""
    kind = obj["kind"]
    if kind == "DaemonSet":
        found, warnings = judge_daemonset(live, defaulted(core, live, obj), obj, allowed)
        return found, warnings, ("spec.template",)
    if kind == "ConfigMap":
        return judge_configmap(live, obj, allowed), [], ("data.", "binaryData.")
    return judge_namespace(live, obj, allowed), [], ("metadata.labels." + POD_SECURITY_PREFIX,)


def drift(core, obj: dict, cluster: str, allowed: list[str] | None = None) -> dict:
    kind, meta = obj["kind"], obj["metadata"]
    plural = {"Namespace": "namespaces", "ConfigMap": "configmaps", "DaemonSet": "daemonsets"}[kind]
    where = f"{kind} {meta.get('namespace') + '/' if meta.get('namespace') else ''}{meta['name']}"
    check = f"drift-{kind.lower()}"
    p = path(plural, meta["name"], meta.get("namespace") if kind != "Namespace" else None)
    live = core.get(p)
    if live is None:
        return result(cluster, check, "", False, f"{where} does not exist; adopt-cluster.yml creates it")
    try:
        found, warnings, covered = _surface(core, live, obj, allowed or [])
    except SurfaceError as exc:
        return result(cluster, check, "", False, f"{where}: its pod surface cannot be judged: {exc}")
    dry = core.apply(p, obj, FIELD_MANAGER, dry_run=True)
    before, after = _flat(_comparable(live)), _flat(_comparable(dry))
    ours = _rendered(obj)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and ours(k)
                     and not k.startswith(covered))
    bad, allowed_found = failing(found), [f for f in found if f["allowed"]]
    notes = [f"allowed by bcd_drift_allowed_paths ({f['allowed']}): {line(f)}" for f in allowed_found]
    notes += [f"warning: {line(w)}; on the {kind}'s own metadata, not the pods'" for w in warnings]
    extra = {"findings": [{"object": where, **public(f)} for f in found],
             "warnings": [{"object": where, **public(w)} for w in warnings]}
    if not changed and not bad:
        return result(cluster, check, "", True, "\n".join([f"{where} is as rendered", *notes]), warning=bool(warnings), **extra)
    hosts = {f["volume"]: f for f in bad if f["host_path"]}
    lines = ["; ".join(host_path_line(f) for f in hosts.values())] if hosts else []
    fields = [f["path"] for f in bad if f["host_path"]] + sorted([f["path"] for f in bad if not f["host_path"]] + changed)
    lines.append(f"{where} differs from the render in {', '.join(fields[:8])}{' ...' if len(fields) > 8 else ''}")
    lines += [line(f, FIELD_MANAGER) for f in bad]
    live_images, want_images = _images(live), _images(obj)
    for name in sorted(set(live_images) | set(want_images)):
        if live_images.get(name) != want_images.get(name):
            lines.append(f"image: {live_images.get(name) or '-'} runs, the render has {want_images.get(name) or '-'} (container {name})")
    ours = max((_when(m) for m in live["metadata"].get("managedFields") or [] if m.get("manager") == FIELD_MANAGER), default=0.0)
    others = sorted({m.get("manager") for m in live["metadata"].get("managedFields") or []
                     if m.get("manager") != FIELD_MANAGER and m.get("operation") in ("Update", "Apply") and _when(m) >= ours
                     and m.get("subresource") != "status"})
    if others:
        lines.append(f"changed by field manager(s) {', '.join(others)} after bcd-ansible applied it")
    lines += notes
    if bad:
        lines.append("fix: ansible-playbook rollout.yml (or adopt-cluster.yml) restores the render, taking these fields over "
                     "from their field managers; to keep one, put it into the inventory, or allow its path in "
                     "bcd_drift_allowed_paths (and change it where its manager applies it, or it comes back)")
    else:
        lines.append("fix: ansible-playbook rollout.yml applies the render again (or put the change into the inventory)")
    out = result(cluster, check, "", False, "\n".join(lines), **extra)
    out["host_paths"] = [f"{host_path_line(f)} (in {where})" for f in hosts.values()]
    return out


def _owners(policy: dict, field: tuple[str, ...]) -> list[str]:
    owners = []
    for m in (policy.get("metadata") or {}).get("managedFields") or []:
        tree = m.get("fieldsV1") or {}
        for part in field:
            tree = tree.get(f"f:{part}") if isinstance(tree, dict) else None
            if tree is None:
                break
        if tree is not None:
            owners.append(m.get("manager") or "?")
    return sorted(set(owners))


def clusterpolicy(core, cluster: str) -> dict:
    try:
        policies = core.list("/apis/nvidia.com/v1/clusterpolicies")
    except KubeError as exc:
        if exc.status == 404:
            return result(cluster, "clusterpolicy", "", False, "the cluster has no ClusterPolicy (nvidia.com/v1) while "
                          "bcd_nvidia_toolkit is gpu-operator: is the GPU operator installed?")
        raise
    lines = []
    for policy in policies:
        for f in cluster_policy_findings(policy, True):
            field = POLICY_FIELDS.get(f["check"])
            owners = _owners(policy, field) if field else []
            who = f" (set by field manager {', '.join(owners)})" if owners else ""
            lines.append(f"{f['where']}: {'.'.join(field) if field else f['check']} reverted{who}: {f['message']} Fix: {f['fix']}")
    if not policies:
        return result(cluster, "clusterpolicy", "", False, "no ClusterPolicy (nvidia.com/v1) while bcd_nvidia_toolkit is gpu-operator")
    if lines:
        lines.append("a helm upgrade or GitOps sync with other values undoes gpu_stack: keep its values in the chart's values")
        return result(cluster, "clusterpolicy", "", False, "\n".join(lines))
    names = ", ".join(p["metadata"]["name"] for p in policies)
    return result(cluster, "clusterpolicy", "", True, f"ClusterPolicy {names}: device plugin off, toolkit env false, CDI on, NRI plugin off")


def result(cluster: str, check: str, node: str, ok: bool, message: str, warning: bool = False, **extra) -> dict:
    return {"cluster": cluster, "check": check, "node": node, "ok": ok, "message": message, "warning": warning, **extra}


def pod_checks(core, inv, cluster: str, selected: list[str], since: str, nodes: dict | None = None) -> list[dict]:
    """Check ``pod`` for each selected Node: its bcd pod healthy (module_utils/bcd_health.py),
    whatever the control plane says. ``nodes``: the selected Nodes by name, as the API returns
    them; a down one (NotReady, unreachable, cordoned: module_utils/bcd_rollout.py ``node_down``)
    is named so, as a rollout leaves it behind, with what brings its pod up to date."""
    ds, revision, by_node = pod_side(core, inv.bcd_namespace, inv.bcd_name)
    where = f"DaemonSet {inv.bcd_namespace}/{inv.bcd_name}"
    on_delete = ((ds or {}).get("spec") or {}).get("updateStrategy", {}).get("type") == "OnDelete"
    out = []
    refusal = None
    if ds is not None and any(by_node.get(name) is None for name in selected):
        # a Node without its pod: the API server may be refusing the pods (quota, Pod Security,
        # admission policy), which only the DaemonSet's FailedCreate events say
        events = core.list(path("events", namespace=inv.bcd_namespace), events_query(ds["metadata"]["uid"]))
        refusal = latest(events, ds["metadata"]["uid"], inv.bcd_namespace, len(selected), inv.bcd_priority_class_name)
    for name in selected:
        pod = by_node.get(name)
        why = pod_health(pod, ds, revision, since)
        if why is None:
            out.append(result(cluster, "pod", name, True, f"{name}: {healthy_text(pod)}"))
            continue
        if pod is not None and on_delete and pod_health(pod, since=since) is None:
            # an older template with updateStrategy OnDelete stays until its pod is deleted (the
            # drift-daemonset check reports the strategy): a note, not a failure of the pod
            out.append(result(cluster, "pod", name, True, f"{name}: {healthy_text(pod)}; {why} (updateStrategy OnDelete: "
                              "replaced only when deleted; rollout.yml rolls it)", warning=True))
            continue
        down = node_down((nodes or {}).get(name)) if nodes is not None else None
        if down:
            # the Node is why: a rollout left it behind, and its pod follows once it is back
            out.append(result(cluster, "pod", name, False,
                              f"{name}: {down}: {why}; a rollout leaves a down Node behind; fix: bring the Node back "
                              "(start its kubelet, or uncordon it), then the DaemonSet controller replaces its pod and "
                              "the next rollout.yml or audit.yml checks it"))
            continue
        if pod is None and refusal is not None:
            fix = (f"the API server refuses {where}'s pods (its latest FailedCreate event, {refusal['count']}x, last at "
                   f"{refusal['at']}): {describe(refusal)}")
        elif pod is None:
            fix = (f"{where} does not exist: adopt-cluster.yml creates it" if ds is None else
                   f"{where} has no pod there (the Node does not match its selector, a taint it does not tolerate, or "
                   "not scheduled yet); adopt-cluster.yml waits for it and says why")
        elif ds is not None and not pod_updated(pod, ds, revision):
            fix = "the last rollout did not complete: rollout.yml (or adopt-cluster.yml) completes it"
        elif "bcd join exited" in why:
            fix = "the control plane refused the node's join (its reason above); fix that, then adopt-cluster.yml joins it"
        else:
            fix = (f"kubectl -n {inv.bcd_namespace} logs {pod['metadata']['name']} -c bcd --previous shows why; fix "
                   "the cause on the Node, then adopt-cluster.yml waits for the pod and fails naming it while it stays so")
        out.append(result(cluster, "pod", name, False, f"{name}: {why}; fix: {fix}"))
    return out


def run(module, inv, cp, core) -> list[dict]:
    p = module.params
    cluster = p["cluster"]
    since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = [drift(core, obj, cluster, list(inv.bcd_drift_allowed_paths)) for obj in p["objects"]
           if obj.get("kind") in ("Namespace", "ConfigMap", "DaemonSet")]
    if inv.bcd_nvidia_toolkit.preset == "gpu-operator":
        out.append(clusterpolicy(core, cluster))

    # Token hygiene.
    now = time.time()
    live = []
    for tok in cp.list_tokens(inv.bcd_tenant, inv.bcd_pool):
        m = DESCRIPTION_RE.match(tok.get("description") or "")
        expires = _when({"time": tok.get("expiresAt")})
        if m and m["cluster"] == cluster and not tok.get("revokedAt") and expires > now:
            live.append(f"{tok['id']} (run {m['run']}, expires {tok.get('expiresAt')})")
    out.append(result(cluster, "join-tokens", "", not live,
                      f"unrevoked join token(s) of this cluster: {', '.join(live)}; the next adopt-cluster.yml revokes them, "
                      "or revoke them now (joinTokens.revoke)" if live else "no unrevoked join token of this cluster"))
    secret = inv.bcd_join_token_secret
    found = core.get(path("secrets", secret.name, inv.bcd_namespace))
    token_id = ((found or {}).get("metadata") or {}).get("annotations", {}).get("bcd.dev/join-token-id")
    out.append(result(cluster, "join-secret", "", found is None,
                      f"join-token Secret {inv.bcd_namespace}/{secret.name} left behind (token {token_id or '?'}); the next "
                      "adopt-cluster.yml deletes it, or delete it now" if found else
                      f"no join-token Secret {inv.bcd_namespace}/{secret.name}"))

    # Every selected node reporting, with bcd's conditions, and its bcd pod healthy; GPU isolation per node.
    listed = {n["metadata"]["name"]: n for n in core.list(path("nodes"), {"labelSelector": label_selector(inv) or None})}
    selected = sorted(listed)
    out.extend(pod_checks(core, inv, cluster, selected, since, listed))
    cp_nodes = {n.get("hostname"): n for n in cp.list_nodes(inv.bcd_tenant, inv.bcd_pool) if n.get("state") != "removed"}
    verdicts = {n["name"]: n for n in (p["isolation"].get("nodes") or [])}
    for name in selected:
        n = cp_nodes.get(name)
        conds = "; ".join(f"{c.get('type')}={c.get('status')} ({c.get('reason')}: {c.get('message')})" for c in (n or {}).get("conditions") or [])
        if n is None:
            out.append(result(cluster, "reporting", name, False, f"{name} is not a node of pool {inv.bcd_pool}: it never joined or "
                              "was removed; adopt-cluster.yml (or add-nodes.yml) joins it"))
        else:
            ok = n.get("state") in NODE_STATES_REPORTING
            out.append(result(cluster, "reporting", name, ok, f"{name} is {n['id']}, {n.get('state')}, {n.get('trust')}"
                              + (f"; conditions: {conds}" if conds else "")
                              + ("" if ok else "; its bcd pod is not Running and Ready or cannot reach the control plane")))
        v = verdicts.get(name)
        if v is None:
            out.append(result(cluster, "gpu-isolation", name, False, f"{name}: no GPU isolation verdict"))
            continue
        own = [f for f in v.get("findings") or [] if not str(f.get("where", "")).startswith("ClusterPolicy/")]
        if not own:
            note = " (ClusterPolicy findings: see check clusterpolicy)" if v.get("verdict") != "isolated" else ""
            out.append(result(cluster, "gpu-isolation", name, True, f"{name}: isolated{note}; node files {v.get('node_files', '-')}"))
        else:
            out.append(result(cluster, "gpu-isolation", name, False, f"{name}: {v.get('verdict')}: " + "; ".join(
                f"{f.get('where')}: {f.get('message')} Fix: {f.get('fix')}" for f in own)))

    # Pod Security of the other namespaces.
    allowed = {inv.bcd_namespace, *inv.bcd_privileged_namespaces}
    open_ns = sorted(ns["metadata"]["name"] for ns in core.list(path("namespaces"))
                     if ns["metadata"]["name"] not in allowed
                     and ((ns["metadata"].get("labels") or {}).get("pod-security.kubernetes.io/enforce") in (None, "privileged")))
    if open_ns:
        msg = (f"Pod Security lets pods in {', '.join(open_ns)} run privileged or mount host paths (no "
               "pod-security.kubernetes.io/enforce label, or privileged): label them baseline or restricted, or list them "
               "in bcd_privileged_namespaces")
        # a warning when it passes; with bcd_require_pod_security a failure, nothing else
        out.append(result(cluster, "pod-security", "", not inv.bcd_require_pod_security, msg,
                          warning=not inv.bcd_require_pod_security))
    else:
        out.append(result(cluster, "pod-security", "", True, "every other namespace enforces baseline or restricted"))
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={"config": CONFIG_OPTION, "api_key": API_KEY_OPTION, **KUBE_OPTIONS,
                       "cluster": {"type": "str", "required": True},
                       "objects": {"type": "list", "elements": "dict", "required": True},
                       "isolation": {"type": "dict", "required": True}},
        supports_check_mode=True,
    )
    inv = inventory(module, ("bcd_control_plane_url", "bcd_tenant", "bcd_pool"))
    cp = control_plane(module, inv)
    core = kube(module, inv)
    started = time.time()
    try:
        results = run(module, inv, cp, core)
    except (KubeError, ControlPlaneError) as exc:
        module.fail_json(msg=f"audit of cluster {module.params['cluster']} could not run: {exc}")
    # extra host paths first, in the run's closing lines too (audit.yml)
    host_paths = [h for r in results for h in r.get("host_paths") or []]
    module.exit_json(changed=False, started=started, results=results, table=table(results), host_paths=host_paths,
                     failed_checks=sum(1 for r in results if not r["ok"]))


if __name__ == "__main__":
    main()
