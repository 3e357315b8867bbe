"""Taking over fields that ``kubectl apply`` (client-side) manages, as ``kubectl apply --server-side`` does.

An object created or last changed by a client-side ``kubectl apply`` has its fields owned by the
field manager ``kubectl-client-side-apply`` (``kubectl`` before kubectl 1.18), operation
``Update``, and carries the annotation ``kubectl.kubernetes.io/last-applied-configuration``.
A server-side apply under our own field manager leaves every field that manager owns in place,
so a volume or key that our render does not have would stay for ever. ``kubectl apply
--server-side`` migrates such an object by moving the client-side manager's field set into its
own manager's entry (k8s.io/client-go/util/csaupgrade); our next server-side apply then removes
what the render leaves out, the annotation included. These helpers do the same, and predict
what the apply will remove (for ``--check --diff``).

Field sets are ``fieldsV1`` tries: https://kubernetes.io/docs/reference/using-api/server-side-apply/
"""

from __future__ import annotations

import copy
import json

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import merge_fields

CLIENT_SIDE_MANAGERS = ("kubectl-client-side-apply", "kubectl")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# What the server sets on every write: left out of diffs.
BOOKKEEPING = ("managedFields", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
               "selfLink")


def client_side_entries(obj: dict) -> list[dict]:
    """The managedFields entries of client-side ``kubectl apply`` (operation Update, not a subresource)."""
    return [e for e in (obj.get("metadata") or {}).get("managedFields") or []
            if e.get("manager") in CLIENT_SIDE_MANAGERS and e.get("operation") == "Update" and not e.get("subresource")]


def has_last_applied(obj: dict) -> bool:
    return LAST_APPLIED in ((obj.get("metadata") or {}).get("annotations") or {})


def client_side_fields(obj: dict) -> dict:
    """The union of the client-side managers' field sets, and the last-applied annotation."""
    fields: dict = {}
    for entry in client_side_entries(obj):
        fields = merge_fields(fields, entry.get("fieldsV1") or {})
    if has_last_applied(obj):
        fields = merge_fields(fields, {"f:metadata": {"f:annotations": {f"f:{LAST_APPLIED}": {}}}})
    return fields


def subtract_fields(a: dict, b: dict) -> dict:
    """The fields of trie ``a`` that trie ``b`` does not hold."""
    out = {}
    for key, sub in a.items():
        if key not in b:
            out[key] = copy.deepcopy(sub)
            continue
        if sub and b[key] is not None:
            rest = subtract_fields(sub, b[key])
            if rest:
                out[key] = rest
    return out


def _matches(item: object, key: str, index: int) -> bool:
    if key.startswith("k:"):
        ident = json.loads(key[2:])
        return isinstance(item, dict) and all(item.get(k) == v for k, v in ident.items())
    if key.startswith("v:"):
        return item == json.loads(key[2:])
    if key.startswith("i:") and key[2:].isdigit():
        return int(key[2:]) == index
    return False


def prune(value: object, fields: dict) -> object:
    """``value`` without the fields of trie ``fields`` (what a server-side apply removes when our
    manager alone owns them and the applied configuration leaves them out). A map or list item
    whose own node (``.``) is in the trie goes whole."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        for key, sub in fields.items():
            if not key.startswith("f:") or key[2:] not in value:
                continue
            name = key[2:]
            if not sub or "." in sub:
                del value[name]
            else:
                value[name] = prune(value[name], sub)
        return value
    if isinstance(value, list):
        out = []
        for index, item in enumerate(value):
            key = next((k for k in fields if k != "." and _matches(item, k, index)), None)
            if key is None:
                out.append(item)
            elif fields[key] and "." not in fields[key]:
                out.append(prune(item, fields[key]))
        return out
    return value


def removed_after_takeover(entries: list[dict], applied: dict, manager: str) -> dict:
    """The fields our server-side apply will remove once ``entries`` (managedFields after a
    takeover) are the object's: those our Apply entry then holds that our applied configuration
    (our entry in ``applied``, the server's dry-run answer to our apply) leaves out and no other
    manager owns."""
    def ours(e: dict) -> bool:
        return e.get("manager") == manager and e.get("operation") == "Apply" and not e.get("subresource")

    held, others, applied_ours = {}, {}, {}
    for entry in entries:
        if ours(entry):
            held = merge_fields(held, entry.get("fieldsV1") or {})
        elif not entry.get("subresource"):
            others = merge_fields(others, entry.get("fieldsV1") or {})
    for entry in (applied.get("metadata") or {}).get("managedFields") or []:
        if ours(entry):
            applied_ours = merge_fields(applied_ours, entry.get("fieldsV1") or {})
    return subtract_fields(subtract_fields(held, applied_ours), others)


def upgraded_managed_fields(obj: dict, manager: str, now: str) -> list[dict]:
    """``obj``'s managedFields with the client-side managers' entries folded into ``manager``'s
    Apply entry (created when there is none), as csaupgrade does."""
    moved = client_side_fields(obj)
    entries = [copy.deepcopy(e) for e in (obj.get("metadata") or {}).get("managedFields") or []
               if e not in client_side_entries(obj)]
    for entry in entries:
        if entry.get("manager") == manager and entry.get("operation") == "Apply" and not entry.get("subresource"):
            entry["fieldsV1"] = merge_fields(entry.get("fieldsV1") or {}, moved)
            return entries
    entries.append({"manager": manager, "operation": "Apply", "apiVersion": obj.get("apiVersion"), "time": now,
                    "fieldsType": "FieldsV1", "fieldsV1": moved})
    return entries


def clean(obj: dict) -> dict:
    """``obj`` without the server's bookkeeping and status, for a diff."""
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.get("metadata") or {}
    for key in BOOKKEEPING:
        meta.pop(key, None)
    return out
