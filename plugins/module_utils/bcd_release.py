# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Releasing a cluster, one operation each: its nodes leave the control plane (bcd_release_nodes),
bcd's labels leave its Nodes (bcd_release_labels), bcd's objects are deleted (bcd_release_objects).
Each exits the module with its result, a diff of what goes, and nothing changed in check mode."""

from __future__ import annotations

import time

import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import ControlPlaneError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path

# The options of the object deletion (bcd_release_objects; bcd_release_nodes' deprecated step=objects).
OBJECTS_OPTIONS = {
    "objects": {"type": "list", "elements": "dict", "default": []},
    "wait": {"type": "bool", "default": False},
    "wait_timeout": {"type": "int", "default": 300},
}

LABEL_PREFIX = "bcd.dev/"
PLURALS = {"DaemonSet": "daemonsets", "ConfigMap": "configmaps", "Namespace": "namespaces"}
# What the API server keeps on every object: not what goes, so not in the diff.
BOOKKEEPING = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink")
NODE_ID_LABEL = "bcd.dev/node-id"


def _labels(node: dict) -> dict:
    return (node.get("metadata") or {}).get("labels") or {}


def remove_nodes(module, inv, cp, core) -> None:
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


def remove_labels(module, core) -> None:
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


def delete_objects(module, core) -> None:
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
