#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_release_nodes: the cluster's nodes leave the control plane, lose bcd's labels, or bcd's objects go."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_release_nodes
version_added: 1.0.0
short_description: Remove a released cluster's nodes from the control plane, bcd's labels from its Nodes, or bcd's objects
description:
  - O(step=control_plane) tells the control plane that the cluster's nodes leave (C(nodes.remove)
    for each, control-plane-api.md). The cluster's nodes are the pool's nodes (C(nodes.list), every
    page) whose id is the C(bcd.dev/node-id) label of one of the cluster's Nodes, or whose
    C(hostname) is one of its Node names (a DaemonSet node's hostname is its Node name). Every Node
    counts, not only those C(bcd_node_selector) selects now.
  - Before removing any, a node that holds an allocation stops the module (it fails naming each
    such node and its allocation, and removes none) unless C(bcd_release_force) is true. A node
    already C(removed) is left as it is (a second run changes nothing).
  - O(step=labels) removes every C(bcd.dev/*) label from every Node (a JSON merge patch setting
    them to null), and nothing else.
  - O(step=objects) deletes the objects O(objects) names (bcd's DaemonSet, with foreground
    propagation so its pods go first, its ConfigMap, the Namespace adoption created), each that
    exists; with O(wait), waits up to O(wait_timeout) seconds until each is gone. In check mode
    each deletion is a server-side dry run (C(dryRun=All)), so a deletion the API server would
    refuse fails in check mode too.
  - Control-plane calls retry 429, 502, 503, 504 and connection failures within
    C(bcd_control_plane_timeout).
options:
  step:
    description:
      - C(control_plane) removes the nodes from the control plane; C(labels) removes the Nodes'
        bcd.dev/* labels; C(objects) deletes O(objects).
    type: str
    choices: [control_plane, labels, objects]
    required: true
  objects:
    description:
      - With O(step=objects), the objects to delete, in order, C({kind, name, namespace}); C(kind) is
        C(DaemonSet), C(ConfigMap) or C(Namespace) (C(namespace) is left out for a Namespace).
    type: list
    elements: dict
    default: []
  wait:
    description: With O(step=objects), wait until each deleted object is gone (a Namespace's finalizers have run).
    type: bool
    default: false
  wait_timeout:
    description: With O(wait), how long to wait, in seconds, before failing and naming what is left.
    type: int
    default: 300
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.control_plane
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details:
      - Removes, patches and deletes nothing (deletions are server-side dry runs).
      - RV(removed), RV(labels) and RV(deleted) say what would go.
  diff_mode:
    support: full
    details:
      - The Nodes' bcd.dev/* labels and the control-plane nodes' states, before and after.
      - Each object deleted, its YAML without the server's bookkeeping.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Tell the control plane the cluster's nodes leave
  bcd.kubernetes.bcd_release_nodes:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
    step: control_plane
  no_log: true

- name: Remove the bcd.dev/* labels
  bcd.kubernetes.bcd_release_nodes:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    step: labels

- name: Delete the Namespace adoption created, and wait until it is gone
  bcd.kubernetes.bcd_release_nodes:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    step: objects
    objects:
      - {kind: Namespace, name: bcd-system}
    wait: true
"""

RETURN = r"""
removed:
  description: With O(step=control_plane), the nodes removed now (or that would be), C({name, id}).
  returned: step=control_plane
  type: list
  elements: dict
already_removed:
  description: The cluster's nodes the control plane lists as removed already, C({name, id}).
  returned: step=control_plane
  type: list
  elements: dict
held:
  description: The cluster's nodes that hold an allocation, C({name, id, allocation}).
  returned: step=control_plane
  type: list
  elements: dict
labels:
  description: With O(step=labels), each Node that had bcd.dev/* labels and their keys, C({name, keys}).
  returned: step=labels
  type: list
  elements: dict
deleted:
  description: With O(step=objects), each object deleted now (or that would be), C({kind, name, namespace}).
  returned: step=objects
  type: list
  elements: dict
"""

import time

import yaml
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import ControlPlaneError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    control_plane,
    inventory,
    kube,
)

LABEL_PREFIX = "bcd.dev/"
PLURALS = {"DaemonSet": "daemonsets", "ConfigMap": "configmaps", "Namespace": "namespaces"}
# What the API server keeps on every object: not what goes, so not in the diff.
BOOKKEEPING = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink")
NODE_ID_LABEL = "bcd.dev/node-id"


def _labels(node: dict) -> dict:
    return (node.get("metadata") or {}).get("labels") or {}


def control_plane_step(module, inv, cp, core) -> None:
    nodes = core.list(path("nodes"))
    names = {n["metadata"]["name"] for n in nodes}
    ids = {_labels(n)[NODE_ID_LABEL]: n["metadata"]["name"] for n in nodes if _labels(n).get(NODE_ID_LABEL)}
    try:
        ours = [n for n in cp.list_nodes(inv.bcd_tenant, inv.bcd_pool) if n.get("id") in ids or n.get("hostname") in names]
    except ControlPlaneError as exc:
        module.fail_json(msg=f"listing the pool's nodes: {exc}")

    def view(n: dict) -> dict:
        return {"name": ids.get(n["id"], n.get("hostname")), "id": n["id"]}

    leaving = sorted((n for n in ours if n.get("state") != "removed"), key=lambda n: n.get("hostname") or "")
    already = [view(n) for n in ours if n.get("state") == "removed"]
    held = [{**view(n), "allocation": n["allocation"]} for n in leaving if n.get("allocation")]
    result = {"removed": [], "already_removed": already, "held": held}
    if held and not inv.bcd_release_force:
        module.fail_json(msg="nodes hold allocations, so none was removed from the control plane: "
                         + ", ".join(f"{h['name']} ({h['id']}) holds {h['allocation']}" for h in held)
                         + "; end those allocations (drain the nodes), or set bcd_release_force: true to remove them anyway "
                           "(their workloads lose the nodes)", changed=False, **result)
    failures = []
    for n in leaving:
        if not module.check_mode:
            try:
                cp.remove_node(inv.bcd_tenant, n["id"], force=inv.bcd_release_force)
            except ControlPlaneError as exc:
                failures.append(f"{view(n)['name']} ({n['id']}): {exc}")
                continue
        result["removed"].append(view(n))
    result["diff"] = {"before": "".join(f"{v['name']} {v['id']}: {n.get('state')}\n" for n, v in ((n, view(n)) for n in leaving)),
                      "after": "".join(f"{v['name']} {v['id']}: removed\n" for v in result["removed"])}
    if failures:
        module.fail_json(msg="removing nodes from the control plane failed: " + "; ".join(failures), changed=bool(result["removed"]), **result)
    module.exit_json(changed=bool(result["removed"]), **result)


def labels_step(module, core) -> None:
    found = []
    for node in core.list(path("nodes")):
        keys = sorted(k for k in _labels(node) if k.startswith(LABEL_PREFIX))
        if keys:
            found.append({"name": node["metadata"]["name"], "keys": keys, "labels": {k: _labels(node)[k] for k in keys}})
    if not module.check_mode:
        for item in found:
            try:
                core.patch(path("nodes", item["name"]), {"metadata": {"labels": dict.fromkeys(item["keys"])}}, kind="merge")
            except KubeError as exc:
                module.fail_json(msg=f"removing the bcd.dev/* labels of Node {item['name']}: {exc}")
    diff = {"before": "".join(f"{i['name']}: {k}={v}\n" for i in found for k, v in i["labels"].items()), "after": ""}
    module.exit_json(changed=bool(found), labels=[{"name": i["name"], "keys": i["keys"]} for i in found], diff=diff)


def _shown(obj: dict) -> str:
    """The YAML of an object that goes, without the server's bookkeeping and status."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in BOOKKEEPING}
    return yaml.safe_dump({**{k: v for k, v in obj.items() if k not in ("metadata", "status")}, "metadata": meta},
                          sort_keys=False, default_flow_style=False)


def objects_step(module, core) -> None:
    p = module.params
    deleted, going, before = [], [], []
    for ref in p["objects"]:
        kind, name, ns = ref.get("kind"), ref.get("name"), ref.get("namespace")
        if kind not in PLURALS or not name:
            module.fail_json(msg=f"objects: {ref!r}: kind must be one of {', '.join(PLURALS)} and name set")
        where = f"{kind} {ns + '/' if ns and kind != 'Namespace' else ''}{name}"
        obj_path = path(PLURALS[kind], name, ns if kind != "Namespace" else None)
        live = core.get(obj_path)
        if live is None:
            continue
        if (live.get("metadata") or {}).get("deletionTimestamp"):
            going.append({"kind": kind, "name": name, "namespace": ns if kind != "Namespace" else None})
            continue  # being deleted already (an earlier run): waited for, not deleted again
        # the DaemonSet's pods go before it does (its ConfigMap is deleted after them)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground" if kind == "DaemonSet" else "Background"}
        if module.check_mode:
            # in the body: the API server reads a DELETE's options from its body when it has one,
            # and ignores the query then
            body["dryRun"] = ["All"]
        try:
            core.request("DELETE", obj_path, None, body)
        except KubeError as exc:
            if exc.status != 404:
                module.fail_json(msg=f"deleting {where}: {exc}", deleted=deleted)
        deleted.append({"kind": kind, "name": name, "namespace": ns if kind != "Namespace" else None})
        before.append(f"# {where}\n{_shown(live)}")
    if p["wait"] and deleted + going and not module.check_mode:
        deadline = time.monotonic() + p["wait_timeout"]
        left = deleted + going
        while left:
            left = [d for d in left if core.get(path(PLURALS[d["kind"]], d["name"], d["namespace"])) is not None]
            if left and time.monotonic() >= deadline:
                module.fail_json(msg=f"still there after {p['wait_timeout']} s: " + ", ".join(f"{d['kind']} {d['name']}" for d in left)
                                 + " (a finalizer that does not finish: kubectl get it -o yaml names it)", changed=True, deleted=deleted)
            if left:
                time.sleep(2)
    module.exit_json(changed=bool(deleted), deleted=deleted, diff={"before": "".join(before), "after": ""})


def main() -> None:
    module = AnsibleModule(
        argument_spec={"config": CONFIG_OPTION, "api_key": API_KEY_OPTION, **KUBE_OPTIONS,
                       "step": {"type": "str", "choices": ["control_plane", "labels", "objects"], "required": True},
                       "objects": {"type": "list", "elements": "dict", "default": []},
                       "wait": {"type": "bool", "default": False},
                       "wait_timeout": {"type": "int", "default": 300}},
        supports_check_mode=True,
    )
    step = module.params["step"]
    inv = inventory(module, ("bcd_control_plane_url", "bcd_tenant", "bcd_pool") if step == "control_plane" else ())
    core = kube(module, inv)
    try:
        if step == "control_plane":
            control_plane_step(module, inv, control_plane(module, inv), core)
        elif step == "objects":
            objects_step(module, core)
        else:
            labels_step(module, core)
    except KubeError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
