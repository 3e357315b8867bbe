# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU isolation on the controller: the GPU-isolation variables (settings), and the verdict for
every selected node of a cluster (the Nodes, ResourceSlices, ClusterPolicies and RuntimeClass the
API server has, with the node results read on the nodes).

Module bcd_gpu_isolation runs the cluster check, bcd_gpu_isolation_settings the settings."""

from __future__ import annotations

import os

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    ISOLATED,
    NOT_READY,
    NodeRootError,
    active_cluster_policy,
    combine,
    finding,
    verify_node_root,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_isolation_node import judge_gate
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import Kube, KubeError, api_client
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_runtime_live import reconcile

# Optional: bcd_gpu_isolation's deprecated scope=node imports this file on a GPU node, where
# pydantic (which the inventory model needs) may not be installed.
try:
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load_some
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import reach
except ImportError as _exc:
    ConfigError = load_some = reach = None
    MODEL_IMPORT_ERROR = str(_exc)
else:
    MODEL_IMPORT_ERROR = None

VARIABLES = (
    "bcd_nvidia_toolkit", "bcd_container_runtime", "bcd_node_selector", "bcd_gpu_isolation_enforce",
    "bcd_node_roots", "bcd_node_root", "bcd_report_out", "bcd_kubeconfig", "bcd_kube_context",
    "bcd_nvidia_runtime_class", "bcd_gpu_api", "bcd_gpu_stack_force_conflicts", "bcd_foreign_gpu_resources",
    "bcd_toolkit_cve_waivers",
)
SLICE_VERSIONS = ("v1", "v1beta2", "v1beta1")

# The options of the settings (bcd_gpu_isolation_settings; bcd_gpu_isolation's deprecated scope=settings).
SETTINGS_OPTIONS = {
    "config": {"type": "dict", "required": True},
    "base_dir": {"type": "path"},
    "reach_cluster": {"type": "bool", "default": False},
}
# The options of the cluster check (bcd_gpu_isolation).
CLUSTER_OPTIONS = {
    "config": {"type": "dict", "required": True},
    "base_dir": {"type": "path"},
    "node_results": {"type": "list", "elements": "dict", "default": []},
    "cluster_name": {"type": "str", "default": "cluster"},
    "control_plane_nodes": {"type": "list", "elements": "dict"},
    "control_plane_error": {"type": "str"},
}


def load_settings(module) -> dict:
    if load_some is None:
        module.fail_json(msg="the GPU-isolation settings need the controller's Python packages (pydantic): "
                             f"{MODEL_IMPORT_ERROR}; install requirements.txt where this module runs")
    try:
        inv = load_some(module.params["config"] or {}, VARIABLES)
    except ConfigError as exc:
        module.fail_json(msg="\n".join(exc.lines), errors=exc.lines)
        raise
    toolkit = inv.bcd_nvidia_toolkit
    runtime = inv.bcd_container_runtime
    base = module.params["base_dir"] or os.getcwd()

    def absolute(p):
        return p if p is None else os.path.normpath(os.path.join(base, os.path.expanduser(p)))

    return {
        "mode": toolkit.preset if toolkit.preset in ("gpu-operator", "packages") else "custom",
        "runtime_paths": {"files": list(runtime.files), "dirs": list(runtime.dirs)},
        "toolkit_paths": {"files": list(toolkit.files), "dirs": list(toolkit.dirs)},
        "node_selector": dict(inv.bcd_node_selector),
        "label_selector": ",".join(f"{k}={v}" for k, v in sorted(inv.bcd_node_selector.items())),
        "enforce": inv.bcd_gpu_isolation_enforce,
        "force_conflicts": inv.bcd_gpu_stack_force_conflicts,
        "report_out": absolute(inv.bcd_report_out),
        "node_root": absolute(inv.bcd_node_root),
        "node_roots": {k: absolute(v) for k, v in inv.bcd_node_roots.items()},
        "kubeconfig": inv.bcd_kubeconfig,
        "kube_context": inv.bcd_kube_context,
        "runtime_class": inv.bcd_nvidia_runtime_class,
        "gpu_api": inv.bcd_gpu_api,
        "foreign_gpu_resources": list(inv.bcd_foreign_gpu_resources),
        "cve_waivers": [w.model_dump(mode="json") for w in inv.bcd_toolkit_cve_waivers],
    }


# --- Kubernetes ------------------------------------------------------------------------------

def _read_cluster(kube: Kube, label_selector: str) -> dict:
    """Nodes (selected), ResourceSlices (the first served of v1, v1beta2, v1beta1) and
    ClusterPolicies, as JSON. Any API error raises KubeError: an error is never "no findings"."""
    nodes = kube.list("/api/v1/nodes", {"labelSelector": label_selector or None})
    groups = kube.request("GET", "/apis") or {}
    served = {g["name"]: {v["version"] for v in g.get("versions") or []} for g in groups.get("groups") or []}
    slice_api = next((v for v in SLICE_VERSIONS if v in served.get("resource.k8s.io", set())), None)
    slices = None
    if slice_api:
        slices = kube.list(f"/apis/resource.k8s.io/{slice_api}/resourceslices")
    policies = None
    if "v1" in served.get("nvidia.com", set()):
        try:
            policies = kube.list("/apis/nvidia.com/v1/clusterpolicies")
        except KubeError as exc:
            if exc.status != 404:  # nvidia.com/v1 without ClusterPolicy: no GPU operator
                raise
    return {"nodes": nodes, "slices": slices, "slice_api": slice_api, "policies": policies}


def _runtime_class(kube: Kube, name: str | None) -> tuple[str | None, list[dict], str]:
    """(the handler bcd's RuntimeClass names, cluster readiness findings, where the handler came
    from). No RuntimeClass setting: no handler. A RuntimeClass the cluster does not have: every
    node is not-ready (the API refuses bcd's pod), judged against the name itself."""
    if not name:
        return None, [], "bcd_nvidia_runtime_class is null: bcd's pod runs without a RuntimeClass"
    try:
        rc = kube.request("GET", f"/apis/node.k8s.io/v1/runtimeclasses/{name}") or {}
    except KubeError as exc:
        if exc.status != 404:
            raise
        return name, [finding(
            NOT_READY, "runtime-class", f"RuntimeClass/{name}",
            f"the RuntimeClass {name!r} (bcd_nvidia_runtime_class) does not exist, so the API server refuses bcd's pod.",
            f"create RuntimeClass {name} with handler nvidia (the GPU operator and nvidia-ctk document it), or set "
            "bcd_nvidia_runtime_class to one that exists",
        )], f"RuntimeClass/{name} does not exist; its name is taken as the handler"
    handler = rc.get("handler") or name
    return handler, [], f"RuntimeClass/{name} (handler {handler!r})"


# --- scopes ------------------------------------------------------------------------------------

_SSH_CONNECTIONS = ("ssh", "paramiko", "paramiko_ssh")


def _node_files(module, settings: dict) -> tuple[dict, list[str]]:
    files: dict[str, dict] = {}
    for r in module.params["node_results"] or []:
        if not isinstance(r, dict):
            continue
        item = r.get(r.get("ansible_loop_var") or "item")
        item = item if isinstance(item, dict) else {}
        node = r.get("node") if isinstance(r.get("node"), dict) else None
        name = (node or {}).get("name") or item.get("node")
        if not name or r.get("skipped"):
            continue
        host = item.get("host") or name
        # the connection the read really went through: a gpu_nodes host under a local connection
        # (an inventory's group_vars) was read on the controller, not over SSH
        conn = str(item.get("connection") or "ssh")
        source = f"over SSH from {host}" if conn.rsplit(".", 1)[-1] in _SSH_CONNECTIONS else f"from {host} (connection {conn})"
        if node and "verdict" in node:
            live = r.get("runtime")
            if isinstance(live, dict):
                # the runtime's own answer on the node (bcd_runtime_info): it wins where it disagrees
                node = reconcile(node, live, settings["runtime_paths"])
            elif r.get("runtime_error"):
                node = {**node, "notes": [*(node.get("notes") or []),
                                          f"runtime: the running runtime could not be asked: {r['runtime_error']}"]}
            files[name] = {"source": source, "result": node}
        else:
            files[name] = {"source": source, "error": r.get("msg") or "the node check did not run"}
    for name, directory in sorted(settings["node_roots"].items()):
        if name in files:
            continue
        try:
            files[name] = {"source": f"from {directory}", "result": verify_node_root(
                directory, settings["runtime_paths"], settings["toolkit_paths"],
            )}
        except NodeRootError as exc:
            files[name] = {"source": f"from {directory}", "error": str(exc)}
    return files, sorted(files)


def _bcd_view(nodes: list[dict], cp_nodes: list[dict] | None, error: str | None) -> None:
    """Attach bcd's own view (bcd_nodes_info' result) to each node entry, in place."""
    if cp_nodes is None and not error:
        return
    by_name = {n.get("name"): n for n in cp_nodes or [] if isinstance(n, dict)}
    for n in nodes:
        if error:
            n["bcd"] = {"error": error}
            continue
        c = by_name.get(n["name"]) or {}
        n["bcd"] = {"id": c.get("id"), "state": c.get("state"), "conditions": list(c.get("conditions") or [])}


OPERATOR_INSTALL_DIR = "/usr/local/nvidia"


def _toolkit_install_dir(settings: dict, policies) -> dict | None:
    """With the gpu-operator preset: where the active ClusterPolicy installs the toolkit
    (``spec.toolkit.installDir``, default /usr/local/nvidia), its configuration directory, and a
    readiness finding when bcd_nvidia_toolkit does not mount that directory into bcd's pod."""
    if settings["mode"] != "gpu-operator":
        return None
    active = active_cluster_policy(policies or [])[0]
    if active is None:
        return None
    toolkit = (active.get("spec") or {}).get("toolkit") or {}
    install = toolkit.get("installDir") or OPERATOR_INSTALL_DIR
    if not isinstance(install, str) or not install.startswith("/"):
        return None
    directory = install.rstrip("/") + "/toolkit/.config"
    findings = []
    if directory not in settings["toolkit_paths"]["dirs"]:
        name = (active.get("metadata") or {}).get("name")
        findings.append(finding(
            NOT_READY, "toolkit-install-dir", f"ClusterPolicy/{name}",
            f"ClusterPolicy/{name} installs the NVIDIA container toolkit under {install} (spec.toolkit.installDir), "
            f"so its configuration is {directory}/nvidia-container-runtime/config.toml, but bcd_nvidia_toolkit mounts "
            f"{', '.join(settings['toolkit_paths']['dirs'] + settings['toolkit_paths']['files'])} into bcd's pod: "
            "bcd's own check on the node would not see it.",
            f"set bcd_nvidia_toolkit: {{preset: gpu-operator, install_dir: {install}}}",
        ))
    return {"dir": directory, "findings": findings}


def _dra_api(kube: Kube, gpu_api: str, slice_api: str | None) -> list[dict]:
    """With ``bcd_gpu_api: dra``, a readiness finding when the API server serves no
    ``resource.k8s.io`` version (Kubernetes 1.32 and 1.33 serve it only when turned on; 1.34 and
    later by default): bcd's DRA driver could publish no ResourceSlice there."""
    if gpu_api != "dra" or slice_api:
        return []
    version = (kube.request("GET", "/version") or {}).get("gitVersion") or "of unknown version"
    return [finding(
        NOT_READY, "dra-api", "resource.k8s.io",
        f"bcd_gpu_api is dra, but this API server (Kubernetes {version}) serves no resource.k8s.io API "
        f"({', '.join(SLICE_VERSIONS)}): bcd's DRA driver could publish no ResourceSlice, and no pod could claim "
        "a GPU through it.",
        "set bcd_gpu_api: device-plugin, or turn DRA on: from Kubernetes 1.34 it is served by default; on 1.32 and "
        "1.33 start the API server with --runtime-config=resource.k8s.io/v1beta1=true (and v1beta2 on 1.33) and "
        "the DynamicResourceAllocation feature gate on every component",
    )]


def run_cluster(module) -> None:
    settings = load_settings(module)
    try:
        kube = Kube(api_client(settings["kubeconfig"], settings["kube_context"]))
        cluster = _read_cluster(kube, settings["label_selector"])
        handler, class_findings, handler_source = _runtime_class(kube, settings["runtime_class"])
        class_findings = [*class_findings, *_dra_api(kube, settings["gpu_api"], cluster["slice_api"])]
    except KubeError as exc:
        module.fail_json(msg=f"GPU isolation check: {exc}")
        return
    install = _toolkit_install_dir(settings, cluster["policies"])
    if install:
        # the collected roots are judged knowing where the operator installs its toolkit
        settings["toolkit_paths"] = {**settings["toolkit_paths"],
                                     "dirs": sorted({*settings["toolkit_paths"]["dirs"], install["dir"]})}
        class_findings = [*class_findings, *install["findings"]]
    files, names = _node_files(module, settings)
    result = combine(
        nodes=cluster["nodes"], slices=cluster["slices"], slice_api=cluster["slice_api"],
        policies=cluster["policies"], mode=settings["mode"], node_files=files,
        handler=handler, gpu_api=settings["gpu_api"], cluster_readiness=class_findings,
        foreign_resources=settings.get("foreign_gpu_resources") or (),
    )
    _bcd_view(result["nodes"], module.params["control_plane_nodes"], module.params["control_plane_error"])
    selected = {n["name"] for n in result["nodes"]}
    unmatched = [n for n in names if n not in selected]
    extra = {
        "bcd_nvidia_toolkit": settings["mode"],
        "label_selector": settings["label_selector"],
        "cluster_findings": result["cluster_findings"],
        "resource_slices": (
            f"resource.k8s.io/{cluster['slice_api']}" if cluster["slice_api"]
            else "not served by this API server (no evidence either way)"
        ),
        "cluster_policies": [(p.get("metadata") or {}).get("name") for p in cluster["policies"] or []],
        "active_cluster_policy": ((active_cluster_policy(cluster["policies"] or [])[0] or {}).get("metadata") or {}).get("name"),
        "unmatched_node_files": unmatched,
        "runtime_handler": handler_source,
        "gpu_api": settings["gpu_api"],
    }
    if not result["nodes"]:
        # a gate that checked no Node proves nothing: a typo in the selector must not pass
        module.fail_json(msg=f"bcd_node_selector {settings['label_selector'] or '(every node)'} selects no Node in this "
                             "cluster: GPU isolation was checked on no node. Fix bcd_node_selector (kubectl get nodes "
                             "--show-labels shows the labels).", changed=False, **extra)
    gate = judge_gate(result["nodes"], module.params["cluster_name"], settings["enforce"], extra,
                      waivers=settings["cve_waivers"])
    if unmatched:
        module.warn("GPU isolation: node files were given for nodes this cluster's selector does not select: "
                    + ", ".join(unmatched))
    if not gate["passed"] and not settings["enforce"] and result["nodes"]:
        bad = [f"{n['name']} ({n['verdict']}, {n['ready']})" for n in result["nodes"]
               if n["verdict"] != ISOLATED or n["ready"] == NOT_READY]
        module.warn("GPU isolation: not isolated: " + ", ".join(bad)
                    + "; bcd_gpu_isolation_enforce is false, so this is only a warning")
    module.exit_json(changed=False, cluster_findings=result["cluster_findings"], **gate)


def run_settings(module) -> None:
    """Validate the GPU-isolation variables and return them normalised; with reach_cluster and the
    gpu-operator preset, fail now when the cluster cannot be reached."""
    settings = load_settings(module)
    kubeconfig, context = settings.pop("kubeconfig"), settings.pop("kube_context")
    result = {"changed": False, "settings": settings}
    if module.params.get("reach_cluster_any_mode"):  # the gate: any mode, but no cluster for one node's folder
        wanted = module.params["reach_cluster"] and settings.get("node_root") is None
    else:
        wanted = module.params["reach_cluster"] and settings["mode"] == "gpu-operator"
    if wanted:
        result.update(reach(module, kubeconfig, context))
    module.exit_json(**result)
