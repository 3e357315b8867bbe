# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU isolation on one node: judge a node root's files and give the node's verdict and gate.

Runs where module bcd_gpu_isolation_node runs - on a GPU node over SSH, or on the controller for
a folder of collected files - so it imports nothing that needs the controller's packages
(pydantic, kubernetes). The judge itself is module_utils bcd_gpu_isolation."""

from __future__ import annotations

import datetime
import os

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    ISOLATED,
    NOT_READY,
    PATH_DIRS,
    NodeRootError,
    apply_waivers,
    containerd_binary,
    ready_summary,
    summary,
    table,
    verify_node_root,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_report import REPORT_SCHEMA_VERSION

# The options of a node check (bcd_gpu_isolation_node; bcd_gpu_isolation's deprecated scope=node).
NODE_OPTIONS = {
    "root": {"type": "path", "default": "/"},
    "node_name": {"type": "str", "default": "node"},
    "runtime_paths": {"type": "dict", "default": {}},
    "toolkit_paths": {"type": "dict", "default": {}},
    "runtime_handler": {"type": "str", "default": "nvidia"},
    "gpu_api": {"type": "str", "choices": ["device-plugin", "dra"], "default": "device-plugin"},
    "enforce": {"type": "bool", "default": True},
    "cve_waivers": {"type": "list", "elements": "dict", "default": []},
}


def paths_param(module, name: str) -> dict:
    value = module.params[name] or {}
    out = {"files": [], "dirs": []}
    for key in out:
        items = value.get(key) or []
        if not isinstance(items, list) or not all(isinstance(p, str) and p.startswith("/") for p in items):
            module.fail_json(msg=f"INVALID_CONFIG: {name}.{key}: must be a list of absolute paths")
        out[key] = items
    extra = sorted(set(value) - {"files", "dirs", "preset"})
    if extra:
        module.fail_json(msg=f"INVALID_CONFIG: {name}: unknown key {extra[0]!r} (expected files, dirs)")
    return out


def judge_gate(nodes: list[dict], cluster: str, enforce: bool, extra: dict, waivers: list[dict] | None = None) -> dict:
    """The gate over ``nodes`` (each ``name``, ``verdict``, ``ready``, ``findings``...) after the
    operator's ``waivers`` (bcd_toolkit_cve_waivers, judged on today's date in UTC)."""
    # one date for everyone: the controller's and each node's local dates may differ
    apply_waivers(nodes, waivers, datetime.datetime.now(datetime.timezone.utc).date().isoformat())  # noqa: UP017 - nodes may run Python < 3.11
    counts = summary(nodes)
    passed = bool(nodes) and all(n["verdict"] == ISOLATED and n.get("ready") != NOT_READY for n in nodes)
    report = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "cluster": cluster,
        "passed": passed,
        "enforce": enforce,
        "summary": counts,
        "ready_summary": ready_summary(nodes),
        "nodes": [
            {k: n.get(k) for k in ("name", "verdict", "ready", "source", "findings", "readiness", "node_files", "notes",
                                   "bcd", "waived")
             if k not in ("bcd", "waived") or k in n}
            for n in nodes
        ],
    }
    report.update(extra)
    return {"nodes": report["nodes"], "summary": counts, "passed": passed, "table": table(nodes), "report": report}


def containerd_version(module, root: str) -> str | None:
    """On the node itself (root /): what its containerd binary says it is (``--version``)."""
    if os.path.realpath(root) != "/":
        return None
    try:
        binary = containerd_binary("/")
    except (NodeRootError, OSError):
        return None
    if not binary:
        return None
    rc, out, _err = module.run_command([binary, "--version"])
    return out if rc == 0 and out.strip() else None


def toolkit_version(module, root: str, binaries: list[str]) -> str | None:
    """On the node itself (root /): what ``binaries`` (the toolkit binaries its runtimes and hooks
    run) say they are (``--version``), and ``nvidia-container-cli --version`` (libnvidia-container,
    versioned apart); None when none answers."""
    if os.path.realpath(root) != "/":
        return None
    binaries = [*binaries, *(f"{d}/nvidia-container-cli" for d in PATH_DIRS)]
    outputs, seen = [], set()
    for binary in binaries:
        if not binary or not binary.startswith("/") or binary in seen or not os.path.isfile(binary):
            continue
        seen.add(binary)
        rc, out, _err = module.run_command([binary, "--version"])
        if rc == 0 and out.strip():
            outputs.append(out)
        if binary.endswith("/nvidia-container-cli"):
            break
    return "\n".join(outputs) or None


def run_node(module) -> None:
    root = module.params["root"]
    name = module.params["node_name"]
    args = (root, paths_param(module, "runtime_paths"), paths_param(module, "toolkit_paths"),
            module.params["runtime_handler"] or None, module.params["gpu_api"])
    try:
        # the toolkit binaries to ask are the ones the judge finds the runtimes and hooks run
        result = verify_node_root(*args, containerd_version=containerd_version(module, root),
                                  toolkit_version=lambda binaries: toolkit_version(module, root, binaries))
    except NodeRootError as exc:
        module.fail_json(msg=f"bcd_node_root: {exc}")
        return
    node = {"name": name, **result, "root": root}
    entry = {**{k: node[k] for k in ("name", "verdict", "ready", "findings", "readiness", "notes")},
             "node_files": f"from {root}", "source": "files"}
    gate = judge_gate([entry], None, module.params["enforce"], {"node_root": root},
                      waivers=[{**w, "until": str(w.get("until"))} for w in module.params["cve_waivers"] or []])
    if not gate["passed"] and not module.params["enforce"]:
        module.warn(f"GPU isolation: {name} is {entry['verdict']}, {entry['ready']} (bcd_gpu_isolation_enforce is "
                    "false, so this is only a warning)")
    module.exit_json(changed=False, node=node, **gate)
