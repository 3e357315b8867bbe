"""Filters for bcd-ansible's reports and for the GPU operator's ClusterPolicy."""

from __future__ import annotations

import ast
import json
import re

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import stale_joins

# The GPU operator's toolkit env entries gpu_stack sets to "false" (NVIDIA container toolkit:
# accept-nvidia-visible-devices-envvar-when-unprivileged and -as-volume-mounts).
TOOLKIT_ENV_FALSE = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"
TOOLKIT_ENV_FALSE_WHEN_SET = "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS"
GO_FALSE = ("0", "f", "F", "false", "FALSE", "False")


def bcd_report_row(node: dict, width: int = 20, id_width: int = 31) -> str:
    """One line of the per-node report: Node, bcd node id, state, trust, and why it does not report
    (or why a node that reports will not for long: its current pod's join was refused).

    ``node``: an item of the bcd_nodes_info module's ``nodes`` result; ``width`` and ``id_width``: the
    widths (characters) of the Node and bcd node columns, the longest of each in the report.
    """
    line = (f"{node.get('name')!s:<{width}}  {node.get('id') or '-':<{id_width}}  {node.get('state') or '-':<9}  "
            f"{node.get('trust') or '-'}")
    if node.get("why"):
        line += f"   <- {node['why']}"
    return line


def bcd_toolkit_env(env: list | None) -> list:
    """``spec.toolkit.env`` of a ClusterPolicy with the toolkit taking devices by CDI only.

    The same list when it already holds exactly one ``ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED``
    entry "false" and no ``ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS`` that is not false; else
    the other entries in their order, a volume-mounts entry (when there was one) "false", and the
    envvar entry "false" last. An absent volume-mounts entry stays absent (the toolkit's default is false).
    """
    env = [e for e in (env or []) if isinstance(e, dict)]
    envvar = [e.get("value") for e in env if e.get("name") == TOOLKIT_ENV_FALSE]
    volume = [e.get("value") for e in env if e.get("name") == TOOLKIT_ENV_FALSE_WHEN_SET]
    if envvar == ["false"] and all(str(v) in GO_FALSE for v in volume):
        return env
    out = [e for e in env if e.get("name") not in (TOOLKIT_ENV_FALSE, TOOLKIT_ENV_FALSE_WHEN_SET)]
    if volume:
        out.append({"name": TOOLKIT_ENV_FALSE_WHEN_SET, "value": "false"})
    return [*out, {"name": TOOLKIT_ENV_FALSE, "value": "false"}]


_CONFLICTS = re.compile(r'conflicts? with "(?P<manager>[^"]+)"(?: using (?P<api>\S+?))?(?::|\s*$)')


def _api_status(text: str) -> dict | None:
    """The API server's Status object a kubernetes.core message carries (``Failed to apply object:
    b'{"kind":"Status",...}'``: the response body's bytes as Python prints them), or None."""
    m = re.search(r"""b(['"])\{.*\}\1""", text, re.S)
    try:
        body = ast.literal_eval(m.group(0)).decode() if m else text[text.index("{"):text.rindex("}") + 1]
        status = json.loads(body)
    except (ValueError, SyntaxError, UnicodeDecodeError):
        return None
    return status if isinstance(status, dict) else None


def _add(out: list[dict], manager: str, fields: list[str]) -> None:
    entry = next((c for c in out if c["manager"] == manager), None)
    if entry is None:
        entry = {"manager": manager, "fields": []}
        out.append(entry)
    entry["fields"].extend(f for f in fields if f not in entry["fields"])


def bcd_apply_conflicts(message: str | None, as_text: bool = False) -> list[dict] | str:
    """The field managers and fields of a server-side apply conflict (HTTP 409), from the API
    server's answer: ``[{"manager": "helm", "fields": [".spec.devicePlugin.enabled"]}]``, each
    manager and field once, in the API server's order; ``[]`` when the message is no apply conflict.

    ``message``: a kubernetes.core failure (``Failed to apply object: b'{...}'``) or the Status
    message alone (``Apply failed with 2 conflicts: conflicts with "helm" using nvidia.com/v1:
    - .spec.devicePlugin.enabled ...``). The Status's ``details.causes`` (reason
    ``FieldManagerConflict``, one per field) answer when present; else its message is read.
    ``as_text``: one string instead, ``helm (.spec.devicePlugin.enabled, .spec.cdi.enabled);
    <manager> (...)``, empty when none."""
    text = message or ""
    status = _api_status(text)
    out: list[dict] = []
    if status is not None:
        for cause in (status.get("details") or {}).get("causes") or []:
            m = _CONFLICTS.search(str(cause.get("message") or ""))
            if cause.get("reason") == "FieldManagerConflict" and m and cause.get("field"):
                _add(out, m["manager"], [str(cause["field"])])
        text = str(status.get("message") or "")
    if not out:
        current = None
        for line in re.split(r"\n|(?=conflicts? with \")", text.replace("\\n", "\n").replace('\\"', '"')):
            m = _CONFLICTS.search(line)
            if m:
                _add(out, m["manager"], re.findall(r"(\.[A-Za-z0-9_.\[\]=\\-]+)", line[m.end():]))
                current = m["manager"]
                continue
            field = re.match(r"\s*-\s*(\.\S+)", line)
            if field and current is not None:
                _add(out, current, [field.group(1).rstrip("',\"}")])
    if as_text:
        return "; ".join(f"{c['manager']} ({', '.join(c['fields'])})" for c in out)
    return out


def bcd_stale_joins(pods: list | None, since: str) -> list:
    """bcd's pods whose ``bcd join`` failed before ``since`` and that do not run (module_utils
    bcd_kube.stale_joins, which the DaemonSet wait's judgement shares), as
    ``{name, namespace, uid}``: the pods to restart before the wait."""
    return [{"name": p["metadata"]["name"], "namespace": p["metadata"].get("namespace"), "uid": p["metadata"]["uid"]}
            for p in stale_joins(list(pods or []), str(since))]


def bcd_reporting_unhealthy(unhealthy: list | None, missing: list | None) -> list:
    """The rows of ``unhealthy`` (``{node, why}``, the selected Nodes whose bcd pod is not healthy)
    whose node is not in ``missing`` (the Node names that do not report): the nodes that report to
    the control plane with a bcd pod that is not healthy, in their order.

    A set, not Jinja's ``rejectattr('node', 'in', missing)``: that searched the list once a row,
    125 s of an adoption at 5,000 Nodes."""
    gone = set(missing or [])
    return [row for row in (unhealthy or []) if row.get("node") not in gone]


class FilterModule:
    def filters(self):
        return {"bcd_report_row": bcd_report_row, "bcd_toolkit_env": bcd_toolkit_env,
                "bcd_apply_conflicts": bcd_apply_conflicts, "bcd_stale_joins": bcd_stale_joins,
                "bcd_reporting_unhealthy": bcd_reporting_unhealthy}
