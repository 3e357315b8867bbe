#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_field_ownership: take over what other field managers set on bcd's objects."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_field_ownership
version_added: 1.0.0
short_description: Take over what other field managers set on bcd's objects, so the apply restores the render
description:
  - Judges each rendered object (bcd's Namespace, ConfigMap and DaemonSet, as
    M(bcd.kubernetes.bcd_manifests) returns them) that exists in the cluster against the render,
    whoever owns the fields (module_utils C(bcd_surface)) - the DaemonSet's whole pod template
    against the render as the API server defaults it (a server-side dry-run update, C(dryRun=All),
    of the live DaemonSet with the render), the ConfigMap's keys, the Namespace's Pod Security
    labels. Each difference (RV(surface)) names its field path, the live and rendered values and the
    field managers that own it; extra host paths come first. C(kubectl rollout restart)'s
    C(kubectl.kubernetes.io/restartedAt) annotation is never one; a path of C(bcd_drift_allowed_paths)
    that the render does not set is left as it is (RV(allowed)); labels and annotations of the
    DaemonSet's own metadata are warnings (RV(metadata_warnings)), never taken over.
  - Takes over the differing fields, and only those, from every other field manager (moves them
    from its field set into the C(bcd-ansible) Apply entry), and, on a ConfigMap or DaemonSet a
    client-side C(kubectl apply) manages (field manager C(kubectl-client-side-apply), or C(kubectl)
    before kubectl 1.18, operation C(Update), or the annotation
    C(kubectl.kubernetes.io/last-applied-configuration)), that manager's whole field set, as
    C(kubectl apply --server-side) migrates an object (C(k8s.io/client-go/util/csaupgrade)). The
    server-side apply that follows (role C(bcd_daemonset), C(apply)) then removes what the render
    leaves out - an extra volume or container, an extra ConfigMap key or Pod Security label, the
    annotation - and sets what it has, so the objects end with exactly the rendered fields.
  - The managedFields are replaced with a JSON patch that first tests the object's
    C(resourceVersion), so an object changed meanwhile is never overwritten (HTTP 422 names it).
  - Before anything changes (O(refuse)), fails - with C(bcd_adopt_foreign_objects=false), naming
    each object and field another manager set and that manager; and when the render's nodeSelector,
    affinity or tolerations differ from the live DaemonSet's and would take bcd off Nodes that run a
    bcd pod now (as the DaemonSet controller decides, with the tolerations it adds), naming those
    Nodes and why, unless C(bcd_allow_node_loss).
  - With O(verify) (after the apply), changes nothing and fails when a difference remains, naming
    the field and the manager that put it back.
  - In check mode changes nothing; with C(--diff) shows, per object, what the apply will remove
    (from a server-side dry run of the render), without the server's bookkeeping.
  - With O(dry_run), also answers what applying each ConfigMap and DaemonSet of O(objects) would change
    (RV(dry_run)) - a server-side dry run of the apply (C(PATCH), C(dryRun=All), field manager O(field_manager),
    forcing conflicts, as the apply does), compared with the object as read here, as C(kubernetes.core.k8s)
    compares them with C(diff=true) - so that rollout.yml's comparison reads each object once. A dry run the
    API server refuses fails the module, quoting the server. Nothing is stored, in check mode or not.
  - Source - Kubernetes, Server-Side Apply, "Upgrading from client-side apply to server-side
    apply" and "Transferring ownership" (https://kubernetes.io/docs/reference/using-api/server-side-apply/).
options:
  objects:
    description:
      - The rendered objects (Namespace, ConfigMap, DaemonSet).
      - A Namespace's client-side apply fields are never taken over (it is shared), only its Pod Security labels.
    type: list
    elements: dict
    required: true
  field_manager:
    description: Our field manager.
    type: str
    default: bcd-ansible
  refuse:
    description: Refuse as described above (C(bcd_adopt_foreign_objects), node loss); false only judges (add-nodes.yml, which never changes the DaemonSet).
    type: bool
    default: true
  verify:
    description: Read only; fail when any difference from the render remains (after the apply).
    type: bool
    default: false
  dry_run:
    description:
      - Also return RV(dry_run), the differences a server-side dry run of the apply of each ConfigMap and DaemonSet
        finds (after the refusals; not with O(verify)).
    type: bool
    default: false
  apply:
    description:
      - After the refusals and the takeover, also apply each object of O(objects), in their order - server-side apply
        (C(PATCH), field manager O(field_manager), forcing conflicts), as role C(bcd_daemonset)'s C(apply) does with
        C(kubernetes.core.k8s) - one request per object, in this module run (RV(applied)). An apply the API server
        refuses fails the module, naming the object and quoting the server; the objects before it stay applied.
      - In check mode each apply is a server-side dry run (C(dryRun=All)); nothing is stored.
      - Not with O(verify).
    type: bool
    default: false
  annotate_created:
    description:
      - With O(apply), annotations to set (a merge patch, field manager O(field_manager)) on each object that was
        absent when read and that the apply created (RV(created)); not in check mode. adopt-cluster.yml marks a
        Namespace it created with C(bcd.dev/created-by=bcd-ansible), the only kind release-cluster.yml deletes.
    type: dict
    default: {}
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.api_key_unused
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  diff_mode:
    support: full
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take over what other field managers set on bcd's objects
  bcd.kubernetes.bcd_field_ownership:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    objects: "{{ bcd_daemonset_render.objects }}"

- name: Check that the apply restored the render
  bcd.kubernetes.bcd_field_ownership:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    objects: "{{ bcd_daemonset_render.objects }}"
    verify: true
"""

RETURN = r"""
foreign:
  description: The objects with client-side kubectl apply fields, and their managers.
  returned: always
  type: list
  elements: dict
  contains:
    object:
      description: C(Kind namespace/name).
      type: str
    kind:
      description: The object's kind.
      type: str
    managers:
      description: The client-side managers (and C(last-applied-configuration) when only the annotation is there).
      type: list
      elements: str
    removes:
      description: Whether the apply that follows will remove fields (the diff shows which).
      type: bool
surface:
  description: Each difference from the render that is not allowed, extra host paths first.
  returned: always
  type: list
  elements: dict
  contains:
    object:
      description: C(Kind namespace/name).
      type: str
    kind:
      description: The object's kind.
      type: str
    path:
      description: The field path, list items by their merge key (C(spec.template.spec.volumes[host-root])).
      type: str
    live:
      description: The live value, compact JSON (C((absent)) when missing; an env var's literal value is not shown).
      type: str
    rendered:
      description: The rendered value, as the live one.
      type: str
    managers:
      description: The field managers that own the live field (none when it was removed).
      type: list
      elements: str
    host_path:
      description: The host path an extra or changed hostPath volume mounts, else null.
      type: str
allowed:
  description: The differences C(bcd_drift_allowed_paths) allows, as RV(surface), with C(allowed) the entry that allows each.
  returned: always
  type: list
  elements: dict
metadata_warnings:
  description: Labels and annotations on the DaemonSet's own metadata that the render does not set, as RV(surface).
  returned: always
  type: list
  elements: dict
surface_kinds:
  description: The kinds with a difference in RV(surface).
  returned: always
  type: list
  elements: str
template_drift:
  description: Whether the DaemonSet's pod template differs from the render (a restore replaces its pods).
  returned: always
  type: bool
restore:
  description: Whether fields another manager set are taken over (the caller checks again after the apply, O(verify)).
  returned: always
  type: bool
node_loss:
  description: The Nodes that run a bcd pod now and that the render's template would leave, C({node, pod, why}).
  returned: always
  type: list
  elements: dict
lines:
  description: RV(surface), RV(allowed) and RV(metadata_warnings) as printable lines.
  returned: always
  type: list
  elements: str
versions:
  description:
    - The C(resourceVersion) of the ConfigMap and of the DaemonSet of O(objects) as read, by kind (null when absent;
      a kind not in O(objects) is left out).
  returned: always
  type: dict
dry_run:
  description:
    - With O(dry_run), one entry per ConfigMap and DaemonSet of O(objects), in their order, shaped as the results of
      C(kubernetes.core.k8s) with C(diff=true) - C(result) (the object's kind, name and namespace), C(changed),
      and C(diff) with C(before) and C(after), the fields that differ between the object as read and as the dry
      run returned it, without the server's bookkeeping (managedFields, uid, resourceVersion, generation,
      creation and deletion timestamps, the template-generation annotation, status); the filter
      C(bcd.kubernetes.bcd_apply_diff) reads them.
  returned: with O(dry_run)
  type: list
  elements: dict
stands:
  description:
    - Whether this judgement holds for as long as the objects of RV(versions) keep their C(resourceVersion) - nothing
      to take over (RV(restore) false) and the render's nodeSelector, affinity and tolerations are the live
      DaemonSet's (else RV(node_loss) depends on the pods and Nodes at the time). rollout.yml then skips taking over
      under the lock when the fleet read there (M(bcd.kubernetes.bcd_rollout) C(state=locked)) finds the same
      RV(versions) - the module would read the same objects and change nothing.
  returned: always
  type: bool
applied:
  description:
    - With O(apply), one entry per object of O(objects), in their order - C(result) (the object's kind, name and
      namespace) and C(changed), whether the object as the API server stored it differs from the object as read
      (without the server's bookkeeping, as RV(dry_run) compares them).
  returned: with O(apply)
  type: list
  elements: dict
created:
  description: With O(apply), the objects (C(Kind namespace/name)) that were absent when read and that the apply created.
  returned: with O(apply)
  type: list
  elements: str
"""

import datetime as dt

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import (
    KubeError,
    path,
    resource_version,
    selector,
    slim_pod,
    without_bookkeeping,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    inventory,
    kube,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_ownership import (
    CLIENT_SIDE_MANAGERS,
    LAST_APPLIED,
    clean,
    client_side_entries,
    has_last_applied,
    prune,
    removed_after_takeover,
    upgraded_managed_fields,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_surface import (
    SurfaceError,
    defaulted,
    failing,
    foreign,
    host_path_line,
    judge_configmap,
    judge_daemonset,
    judge_namespace,
    line,
    node_loss,
    public,
    scheduling,
    slim_node_taints,
    take_over,
    unfit,
)

# kubernetes.core's own comparison (list items by their merge key), so that RV(dry_run) is the diff its
# k8s module returns for the same dry run (a dependency of this collection, galaxy.yml)
from ansible_collections.kubernetes.core.plugins.module_utils.apply import recursive_diff

PLURAL = {"ConfigMap": "configmaps", "DaemonSet": "daemonsets", "Namespace": "namespaces"}
# The server's bookkeeping, hidden from RV(dry_run) as the role's bcd_daemonset_hidden_fields hides it
HIDDEN_METADATA = ("managedFields", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp")
HIDDEN_ANNOTATIONS = ("deprecated.daemonset.template.generation",)


def _name(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace') + '/' if meta.get('namespace') else ''}{meta['name']}"


def _judge(api, obj: dict, current: dict, allowed: list[str]) -> tuple[list[dict], list[dict], dict | None]:
    """The object's pod-surface findings, its metadata warnings, and (a DaemonSet) the render as
    the API server defaults it."""
    if obj["kind"] == "DaemonSet":
        want = defaulted(api, current, obj)
        found, warnings = judge_daemonset(current, want, obj, allowed)
        return found, warnings, want
    if obj["kind"] == "ConfigMap":
        return judge_configmap(current, obj, allowed), [], None
    return judge_namespace(current, obj, allowed), [], None


def _node_loss(api, current: dict, want: dict) -> list[dict]:
    """The Nodes that run a pod of the live DaemonSet and that ``want``'s template would leave
    (read only when the scheduling fields change)."""
    live_t, want_t = (current.get("spec") or {}).get("template"), (want.get("spec") or {}).get("template")
    if scheduling(live_t) == scheduling(want_t):
        return []
    labels = ((current.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    pods = api.list(path("pods", namespace=current["metadata"]["namespace"]), {"labelSelector": selector(labels) or None},
                    keep=slim_pod)
    nodes = {n["metadata"]["name"]: n for n in api.list(path("nodes"), keep=slim_node_taints)}
    want_t = (want.get("spec") or {}).get("template") or {}
    if all(unfit(want_t, n) for n in nodes.values()):
        # a render no Node fits: the preflight refuses it by its more precise name ("selects no Node")
        return []
    return node_loss(current, want, pods, nodes)


def _hide(obj: dict) -> dict:
    """``obj`` without the server's bookkeeping (the role's bcd_daemonset_hidden_fields)."""
    return without_bookkeeping(obj, HIDDEN_METADATA, HIDDEN_ANNOTATIONS)


def _dry_run_result(current: dict | None, dry: dict) -> dict:
    """What kubernetes.core.k8s returns for one object of a server-side dry-run apply with
    ``diff: true``: the fields that differ between the object as read (``current``; none when
    absent) and as the dry run returned it (kubernetes.core's ``recursive_diff``), the
    bookkeeping hidden; ``result`` names the object."""
    meta = dry.get("metadata") or {}
    named = {"apiVersion": dry.get("apiVersion"), "kind": dry.get("kind"),
             "metadata": {k: meta[k] for k in ("name", "namespace") if k in meta}}
    found = recursive_diff(current or {}, dry)
    if not found:
        return {"result": named, "changed": False, "diff": {}}
    before, after = _hide(found[0]), _hide(found[1])
    return {"result": named, "changed": before != after, "diff": {"before": before, "after": after}}


def _lines(found: list[dict], manager: str) -> list[str]:
    out = []
    for f in found:
        for s in f["surface"]:
            out.append(f"{f['object']}: {host_path_line(s) + ' - ' if s['host_path'] else ''}{line(s, manager)}")
        for s in f["allowed"]:
            out.append(f"{f['object']}: allowed by bcd_drift_allowed_paths ({s['allowed']}), left as it is: {line(s)}")
        for w in f["warnings"]:
            out.append(f"{f['object']}: warning, on its own metadata (not the pods'): {line(w)}")
    return out


def _where(obj: dict) -> str:
    meta = obj["metadata"]
    return path(PLURAL[obj["kind"]], meta["name"], meta.get("namespace") if obj["kind"] != "Namespace" else None)


def _apply(module: AnsibleModule, api, manager: str, read: dict[str, dict | None], result: dict) -> None:
    """Server-side apply each object of O(objects) in order (a dry run in check mode), annotate
    those it created (O(annotate_created)); fills RV(applied) and RV(created) in ``result``. One
    request per object: the takeover before it is what kubernetes.core's apply would not do."""
    took_over = result["changed"]  # fields other managers set were taken over just before
    result["applied"], result["created"] = [], []
    done_names: list[str] = []
    for obj in module.params["objects"]:
        where = _where(obj)
        try:
            stored = api.apply(where, obj, manager, dry_run=module.check_mode)
        except KubeError as exc:
            module.fail_json(msg=f"applying {_name(obj)} (server-side apply, field manager {manager}): {exc}; "
                             + (f"applied before it: {', '.join(done_names)}" if done_names else "nothing was applied")
                             + (" (the fields other field managers set were taken over first; run again to apply)"
                                if took_over else ""), **result)
        done_names.append(_name(obj))
        done = _dry_run_result(read.get(where), stored or {})
        result["applied"].append({"result": done["result"], "changed": done["changed"]})
        result["changed"] = result["changed"] or done["changed"]
        if read.get(where) is not None or module.check_mode:
            continue
        result["created"].append(_name(obj))
        if module.params["annotate_created"]:
            patch = {"metadata": {"annotations": {str(k): str(v) for k, v in module.params["annotate_created"].items()}}}
            try:
                api.patch(where, patch, kind="merge", field_manager=manager)
            except KubeError as exc:
                module.fail_json(msg=f"annotating {_name(obj)}, which this run created: {exc}", **result)


def main() -> None:
    module = AnsibleModule(
        argument_spec={"config": CONFIG_OPTION, "api_key": API_KEY_OPTION, **KUBE_OPTIONS,
                       "objects": {"type": "list", "elements": "dict", "required": True},
                       "field_manager": {"type": "str", "default": "bcd-ansible"},
                       "refuse": {"type": "bool", "default": True},
                       "verify": {"type": "bool", "default": False},
                       "dry_run": {"type": "bool", "default": False},
                       "apply": {"type": "bool", "default": False},
                       "annotate_created": {"type": "dict", "default": {}}},
        mutually_exclusive=[("verify", "apply")],
        supports_check_mode=True,
    )
    inv = inventory(module)
    api = kube(module, inv)
    manager = module.params["field_manager"]
    allowed = list(inv.bcd_drift_allowed_paths)
    verify = module.params["verify"]
    found = []
    read: dict[str, dict | None] = {}  # where -> the object as read (None: absent), for the dry runs
    versions: dict[str, str | None] = {}
    scheduling_differs = False
    for obj in module.params["objects"]:
        if obj.get("kind") not in PLURAL:
            module.fail_json(msg=f"{obj.get('kind')}: not a kind bcd_field_ownership handles ({', '.join(PLURAL)})")
        where = _where(obj)
        try:
            current = api.get(where)
            read[where] = current
            if obj["kind"] != "Namespace":
                versions[obj["kind"]] = resource_version(current)
            if current is None:
                continue
            surface, warnings, want = _judge(api, obj, current, allowed)
            if want is not None:
                scheduling_differs = scheduling_differs or (scheduling((current.get("spec") or {}).get("template"))
                                                            != scheduling((want.get("spec") or {}).get("template")))
            loss = (_node_loss(api, current, want) if want is not None and module.params["refuse"] and not verify
                    else [])
        except (KubeError, SurfaceError) as exc:
            module.fail_json(msg=f"reading {_name(obj)}: {exc}")
        # a Namespace is shared: only its Pod Security labels are taken over, never a client-side apply's set
        client = obj["kind"] != "Namespace" and bool(client_side_entries(current) or has_last_applied(current))
        managers = (sorted({e["manager"] for e in client_side_entries(current)}) or [LAST_APPLIED]) if client else []
        found.append({"object": _name(obj), "kind": obj["kind"], "managers": managers, "current": current, "path": where,
                      "render": obj, "surface": failing(surface), "allowed": [s for s in surface if s["allowed"]],
                      "warnings": warnings, "loss": loss})

    result = {
        "changed": False,
        "foreign": [{k: f[k] for k in ("object", "kind", "managers")} for f in found if f["managers"]],
        "surface": [{"object": f["object"], "kind": f["kind"], **public(s)} for f in found for s in f["surface"]],
        "allowed": [{"object": f["object"], "kind": f["kind"], **public(s)} for f in found for s in f["allowed"]],
        "metadata_warnings": [{"object": f["object"], "kind": f["kind"], **public(s)} for f in found for s in f["warnings"]],
        "node_loss": [loss for f in found for loss in f["loss"]],
        "lines": _lines(found, manager),
        "versions": versions,
    }
    result["surface_kinds"] = sorted({s["kind"] for s in result["surface"]})
    # something another manager owns is taken over: the run checks again after applying
    result["restore"] = any(f["managers"] or foreign(f["surface"], manager) for f in found)
    result["stands"] = not result["restore"] and not scheduling_differs
    result["template_drift"] = any(s["kind"] == "DaemonSet" and s["path"].startswith("spec.template") for s in result["surface"])

    if verify:
        if result["surface"]:
            module.fail_json(msg="the render could not be restored: " + "; ".join(f"{s['object']}: {line(s)}" for s in result["surface"])
                             + ". Another field manager put these back after bcd-ansible applied the render (a GitOps "
                             "controller, an operator): change them where that manager applies them, or allow their paths "
                             "in bcd_drift_allowed_paths", **result)
        module.exit_json(**result)

    refusals = []
    if module.params["refuse"] and not inv.bcd_adopt_foreign_objects:
        for f in found:
            if f["managers"]:
                refusals.append(f"{f['object']}: fields managed by {', '.join(f['managers'])} (a client-side kubectl apply)")
            for s in foreign(f["surface"], manager):
                if not set(s["managers"]) <= set(CLIENT_SIDE_MANAGERS) | {manager}:
                    refusals.append(f"{f['object']}: {s['path']} set by field manager(s) "
                                    f"{', '.join(m for m in s['managers'] if m != manager)} (live {s['live']}, rendered {s['rendered']})")
        if refusals:
            refusals = ["bcd_adopt_foreign_objects is false and objects bcd-ansible would apply are managed by another "
                        "field manager; nothing was changed: " + "; ".join(refusals) + ". Set bcd_adopt_foreign_objects: "
                        "true to take them over (what the render does not have is then removed), or delete them."]
    if result["node_loss"] and module.params["refuse"] and not inv.bcd_allow_node_loss:
        nodes = "; ".join(f"{x['node']} (pod {x['pod']}: {x['why']})" for x in result["node_loss"])
        who = sorted({m for f in found for s in f["surface"] if s["path"].startswith(
            ("spec.template.spec.nodeSelector", "spec.template.spec.affinity", "spec.template.spec.tolerations"))
            for m in s["managers"]})
        refusals.append(f"the render's nodeSelector, affinity or tolerations would take bcd off {len(result['node_loss'])} "
                        f"Node(s) that run a bcd pod now: {nodes}"
                        + (f" (the live ones were set by field manager(s) {', '.join(who)})" if who else "")
                        + ". Nothing was changed. release-cluster.yml is the way to take bcd off Nodes; to do it with this "
                        "run on purpose, set bcd_allow_node_loss: true (-e bcd_allow_node_loss=true).")
    if refusals:
        module.fail_json(msg=" ".join(refusals), **result)

    diffs = []
    dry_runs: dict[str, dict] = {}  # where -> the server-side dry run of the render's apply
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for f in found:
        current = f["current"]
        entries = upgraded_managed_fields(current, manager, now) if f["managers"] else current["metadata"].get("managedFields") or []
        moves = [s["steps"] for s in foreign(f["surface"], manager)]
        sources: list[str] = []
        if moves:
            entries, sources = take_over({**current, "metadata": {**current["metadata"], "managedFields": entries}}, moves,
                                         manager, now)
        if not f["managers"] and not sources:
            continue
        try:
            dry = api.apply(f["path"], f["render"], manager, dry_run=True)
        except KubeError as exc:
            module.fail_json(msg=f"dry run of the apply of {f['object']}: {exc}", **result)
        dry_runs[f["path"]] = dry
        removed = removed_after_takeover(entries, dry, manager)
        for out in result["foreign"]:
            if out["object"] == f["object"]:
                out["removes"] = bool(removed)
        who = sorted(set(f["managers"]) | set(sources))
        diffs.append({"before": clean(current), "after": clean(prune(dry, removed)),
                      "before_header": f"{f['object']} (fields of {', '.join(who)})",
                      "after_header": f"{f['object']} (after bcd-ansible takes them over and applies the render)"})
        if not module.check_mode:
            patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": current["metadata"]["resourceVersion"]},
                     {"op": "replace", "path": "/metadata/managedFields", "value": entries}]
            try:
                api.patch(f["path"], patch, kind="json", field_manager=manager)
            except KubeError as exc:
                module.fail_json(msg=f"taking over the fields of {f['object']} (changed meanwhile? run again): {exc}", **result)
        result["changed"] = True
    if module.params["dry_run"]:
        result["dry_run"] = []
        for obj in module.params["objects"]:
            if obj["kind"] not in ("ConfigMap", "DaemonSet"):
                continue
            where = _where(obj)
            dry = dry_runs.get(where)
            if dry is None:
                try:
                    dry = api.apply(where, obj, manager, dry_run=True)
                except KubeError as exc:
                    module.fail_json(msg=f"server-side dry run of the apply of {_name(obj)} (nothing changed): {exc}", **result)
            result["dry_run"].append(_dry_run_result(read.get(where), dry or {}))
    if module.params["apply"]:
        _apply(module, api, manager, read, result)
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
