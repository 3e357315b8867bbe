#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_field_ownership: take over what client-side kubectl apply manages on bcd's objects."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_field_ownership
version_added: 1.0.0
short_description: Take over the fields a client-side kubectl apply manages on bcd's objects
description:
  - For each rendered object (bcd's ConfigMap and DaemonSet, as M(bcd.kubernetes.bcd_manifests) returns them)
    that exists in the cluster with fields managed by a client-side C(kubectl apply) (field
    manager C(kubectl-client-side-apply), or C(kubectl) before kubectl 1.18, operation C(Update))
    or with the annotation C(kubectl.kubernetes.io/last-applied-configuration), moves that
    manager's field set into the C(bcd-ansible) manager's entry, as C(kubectl apply --server-side)
    migrates an object (C(k8s.io/client-go/util/csaupgrade)). The server-side apply that follows
    (role C(bcd_daemonset), C(apply)) then removes what the render leaves out - an extra volume,
    an extra ConfigMap key, the annotation - so the objects end with exactly the rendered fields.
  - The managedFields are replaced with a JSON patch that first tests the object's
    C(resourceVersion), so an object changed meanwhile is never overwritten (HTTP 422 names it).
  - With C(bcd_adopt_foreign_objects=false), fails before changing anything, naming each such
    object and its client-side manager.
  - In check mode changes nothing; with C(--diff) shows, per object, what the apply will remove
    (from a server-side dry run of the render), without the server's bookkeeping.
  - Source - Kubernetes, Server-Side Apply, "Upgrading from client-side apply to server-side
    apply" (https://kubernetes.io/docs/reference/using-api/server-side-apply/).
options:
  objects:
    description: The rendered objects (ConfigMap, DaemonSet; a Namespace is accepted too).
    type: list
    elements: dict
    required: true
  field_manager:
    description: Our field manager.
    type: str
    default: bcd-ansible
extends_documentation_fragment:
  - bcd.kubernetes.bcd
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
- name: Take over what a client-side kubectl apply left on bcd's objects
  bcd.kubernetes.bcd_field_ownership:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    objects: "{{ bcd_daemonset_render.objects | selectattr('kind', 'in', ['ConfigMap', 'DaemonSet']) | list }}"
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
"""

import datetime as dt

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    CONFIG_OPTION,
    KUBE_OPTIONS,
    inventory,
    kube,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_ownership import (
    LAST_APPLIED,
    clean,
    client_side_entries,
    has_last_applied,
    prune,
    removed_by_apply,
    upgraded_managed_fields,
)

PLURAL = {"ConfigMap": "configmaps", "DaemonSet": "daemonsets", "Namespace": "namespaces"}


def _name(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace') + '/' if meta.get('namespace') else ''}{meta['name']}"


def main() -> None:
    module = AnsibleModule(
        argument_spec={"config": CONFIG_OPTION, **KUBE_OPTIONS,
                       "objects": {"type": "list", "elements": "dict", "required": True},
                       "field_manager": {"type": "str", "default": "bcd-ansible"}},
        supports_check_mode=True,
    )
    inv = inventory(module)
    api = kube(module, inv)
    manager = module.params["field_manager"]
    found = []
    for obj in module.params["objects"]:
        if obj.get("kind") not in PLURAL:
            module.fail_json(msg=f"{obj.get('kind')}: not a kind bcd_field_ownership handles ({', '.join(PLURAL)})")
        meta = obj["metadata"]
        where = path(PLURAL[obj["kind"]], meta["name"], meta.get("namespace"))
        try:
            current = api.get(where)
        except KubeError as exc:
            module.fail_json(msg=f"reading {_name(obj)}: {exc}")
        if current is None or not (client_side_entries(current) or has_last_applied(current)):
            continue
        managers = sorted({e["manager"] for e in client_side_entries(current)}) or [LAST_APPLIED]
        found.append({"object": _name(obj), "kind": obj["kind"], "managers": managers, "current": current, "path": where,
                      "render": obj})
    result = {"changed": False, "foreign": [{k: f[k] for k in ("object", "kind", "managers")} for f in found]}
    if found and not inv.bcd_adopt_foreign_objects:
        lines = [f"{f['object']}: fields managed by {', '.join(f['managers'])} (a client-side kubectl apply)" for f in found]
        module.fail_json(msg="bcd_adopt_foreign_objects is false and objects bcd-ansible would apply are managed by another "
                             "field manager; nothing was changed: " + "; ".join(lines) + ". Set bcd_adopt_foreign_objects: "
                             "true to take them over (what the render does not have is then removed), or delete them.",
                         **result)
    diffs = []
    for f, out in zip(found, result["foreign"], strict=True):
        try:
            dry = api.request("PATCH", f["path"], {"fieldManager": manager, "force": "true", "dryRun": "All"},
                              f["render"], content_type="application/apply-patch+yaml")
        except KubeError as exc:
            module.fail_json(msg=f"dry run of the apply of {f['object']}: {exc}", **result)
        removed = removed_by_apply(f["current"], dry, manager)
        out["removes"] = bool(removed)
        diffs.append({"before": clean(f["current"]), "after": clean(prune(dry, removed)),
                      "before_header": f"{f['object']} (fields of {', '.join(f['managers'])})",
                      "after_header": f"{f['object']} (after bcd-ansible takes them over and applies the render)"})
        if not module.check_mode:
            now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": f["current"]["metadata"]["resourceVersion"]},
                     {"op": "replace", "path": "/metadata/managedFields",
                      "value": upgraded_managed_fields(f["current"], manager, now)}]
            try:
                api.request("PATCH", f["path"], {"fieldManager": manager}, patch, content_type="application/json-patch+json")
            except KubeError as exc:
                module.fail_json(msg=f"taking over the fields of {f['object']} (changed meanwhile? run again): {exc}", **result)
        result["changed"] = True
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
