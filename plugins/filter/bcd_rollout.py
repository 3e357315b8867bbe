"""Filters for rollout.yml: the difference between what is applied and the render, readable."""

from __future__ import annotations

import difflib

import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import without_bookkeeping

# Bookkeeping the API server keeps on every object; a difference there is not a change to roll.
_VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")
# The DaemonSet's template generation, which the server moves with the template.
_VOLATILE_ANNOTATIONS = ("deprecated.daemonset.template.generation",)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (config.toml) as literal blocks, so their diff is line by line."""


def _str(dumper, value):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def _dump(obj) -> list[str]:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=True, default_flow_style=False).splitlines() if obj else []


def _strip(obj):
    if not isinstance(obj, dict):
        return obj
    return without_bookkeeping(obj, _VOLATILE_METADATA, _VOLATILE_ANNOTATIONS)


def _template(obj: dict):
    spec = obj.get("spec")
    return spec.get("template") if isinstance(spec, dict) else None


def bcd_apply_diff(results: list, context: int = 2) -> list[dict]:
    """The differences a server-side dry run found, per object, as unified-diff lines.

    ``results``: the per-object results of a kubernetes.core.k8s task run with ``diff: true`` in
    check mode: ``result.results`` of one run with a list ``definition`` (each has ``result``, the
    object as the dry run returned it, and ``diff``, kubernetes.core's before/after of the
    differing fields), or the ``results`` of a looped task (each names its object in ``item``). Differences only in server bookkeeping (managedFields,
    resourceVersion, generation, the DaemonSet's template-generation annotation) are left out.
    Returns ``[{"object": "Kind ns/name", "kind": Kind, "template": bool, "lines": [...]}]``, one
    entry per object that would change; ``template`` is true for a DaemonSet whose pod template
    (``spec.template``) changes, the only change that replaces its pods.
    """
    out = []
    for res in results or []:
        diff = (res or {}).get("diff") or {}
        before, after = _strip(diff.get("before") or {}), _strip(diff.get("after") or {})
        if before == after:
            continue
        item = res.get("item") or res.get("result") or {}
        meta = item.get("metadata") or {}
        name = f"{item.get('kind')} {meta.get('namespace') + '/' if meta.get('namespace') else ''}{meta.get('name')}"
        lines = list(difflib.unified_diff(_dump(before), _dump(after), f"{name} (applied)", f"{name} (rendered)", lineterm="", n=context))
        template = item.get("kind") == "DaemonSet" and _template(before) != _template(after)
        out.append({"object": name, "kind": item.get("kind"), "template": template, "lines": lines})
    return out


class FilterModule:
    def filters(self):
        return {"bcd_apply_diff": bcd_apply_diff}
