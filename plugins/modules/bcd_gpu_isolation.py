#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_gpu_isolation: prove, node by node, that bcd is the only source of GPUs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_gpu_isolation
short_description: Verify GPU isolation on a node root, or on every selected node of a cluster
version_added: 1.0.0
description:
  - bcd may hand out GPUs only where nothing else does (seed 000, section GPU isolation).
    This module finds what else could, and gives every node a verdict, C(isolated), C(exposed)
    or C(unverifiable), with each finding naming the file or object and its fix. It changes
    nothing.
  - "O(scope=node): reads one node's root directory (C(/) on the node itself, over SSH; a folder
    of files collected from a node; a test folder): the container runtime configuration in effect
    (containerd's C(--config) from C(containerd.service) and its drop-ins, else
    C(/etc/containerd/config.toml), and what its C(imports) name, relative ones from the importing
    file's directory and always inside the root; k3s's and
    RKE2's C(config.toml), the template in effect and their C(config.toml.d)/C(config-v3.toml.d);
    CRI-O's C(/etc/crio/crio.conf) and C(crio.conf.d)), every binary key in it (v1 C(plugins.cri) and
    C([plugins.linux] runtime), C(options.BinaryName), C(options.Runtime), C(runtime_engine),
    C(default_runtime), C(runtime_path)), and the OCI hooks of C(/usr/share/containers/oci/hooks.d),
    C(/etc/containers/oci/hooks.d) and CRI-O's C(hooks_dir)."
  - "For each runtime or hook that runs the NVIDIA container toolkit (C(nvidia-container-runtime),
    its C(.cdi) variant included, C(nvidia-container-toolkit), C(nvidia-container-runtime-hook), or
    a wrapper script that runs them) it derives the toolkit C(config.toml) that binary reads: the one a
    wrapper names in C(NVIDIA_CTK_CONFIG_FILE_PATH) or C(XDG_CONFIG_HOME) (or a hook's C(-config)
    argument); else C(<dir>/.config/nvidia-container-runtime/config.toml) for a binary in a
    C(toolkit) directory (the GPU operator's); else C(/etc/nvidia-container-runtime/config.toml).
    That file must exist and set C(accept-nvidia-visible-devices-envvar-when-unprivileged = false)
    (absent or commented out is the default, true). Any known toolkit configuration that accepts the
    variable is exposure too, and so is C(accept-nvidia-visible-devices-as-volume-mounts = true), and
    a containerd runtime that passes C(cdi.k8s.io/*) pod annotations to the NVIDIA runtime. A file that
    does not parse, or no runtime configuration at all, makes the node C(unverifiable), never
    C(isolated)."
  - "O(scope=cluster): reads the cluster with the kubernetes client (C(bcd_kubeconfig),
    C(bcd_kube_context)) and checks every Node C(bcd_node_selector) selects (a selector that selects
    no Node fails, naming it: a gate that checked nothing proves nothing): another device plugin
    (a GPU resource of the Node's allocatable above zero - C(nvidia.com/*), which HAMi's
    C(nvidia.com/gpumem) and C(nvidia.com/gpucores) are too, Volcano's C(volcano.sh/vgpu-*),
    Alibaba's C(aliyun.com/gpu-*), Tencent's C(tencent.com/vcuda-*), and the patterns of
    C(bcd_foreign_gpu_resources)); another GPU DRA driver (a ResourceSlice of
    C(resource.k8s.io) v1, v1beta2 or v1beta1, whichever the API serves, whose driver is not
    C(gpu.bcd.dev) and whose name contains C(gpu), such as C(gpu.nvidia.com), offering devices; it
    concerns its C(spec.nodeName), or every node when it has none; an API without
    C(resource.k8s.io) is no evidence either way; a DRA install of the GPU operator without a
    ClusterPolicy is reported so); and the GPU operator ClusterPolicy the operator acts on (the
    oldest; the others, which it marks C(ignored), are named in a note) (the device
    plugin on, C(spec.devicePlugin.enabled) absent meaning on; the NRI plugin on; the operator's
    toolkit on without C(ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED=false); and, with
    C(bcd_nvidia_toolkit=gpu-operator), CDI off). ClusterPolicy findings apply to every selected node.
    Any other API error fails the module: it is never read as no findings."
  - "Node files in O(scope=cluster) come from O(node_results) (this module's O(scope=node) results from
    the hosts of inventory group C(gpu_nodes), over SSH) and from C(bcd_node_roots) (collected roots on
    this host). For a node whose files were not read: with C(bcd_nvidia_toolkit=gpu-operator) the
    ClusterPolicy is the evidence (device plugin off, toolkit env false, CDI on, NRI off) and the
    result says plainly that the node files were not read; with C(packages) or custom paths the node
    is C(unverifiable)."
  - "Only the configuration in effect is judged (module_utils C(bcd_runtime_config) and
    C(bcd_containerd)): containerd's loader as each release family runs it - 1.7, 2.0-2.2,
    2.3.0-2.3.4 and 2.3.5+/2.4 (imports and Go's globbing, a missing or unparsable file refusing the
    start, version migration, the 1.7 section replace or the 2.x key-by-key merge, the CRI plugin's
    load conditions); proved against those real releases by the collection's differential test. The
    node's release is its containerd's C(--version) (on the node, O(root=/)), or the file
    C(containerd-version) at a collected root holding that output; without it every family is
    judged and the worst verdict counts, with a note. A containerd that would refuse its
    configuration, or whose CRI plugin does not load or is disabled, serves no pod: with no other
    configuration serving CRI the node is C(unverifiable), and C(not-ready) naming containerd's
    reason (disabled - C(unknown)). A C(--config) outside the files C(bcd_container_runtime) mounts
    into bcd's pod is C(not-ready) naming the files to list there."
  - "k3s and RKE2 render C(config-v3.toml.tmpl) in preference to C(config.toml.tmpl) (a version 3
    template is containerd 2.x's) and load the drop-ins of C(config-v3.toml.d) or C(config.toml.d),
    the one of their template's version, through the imports of the config they generate; they take
    C(default-runtime) from C(/etc/rancher/<k3s|rke2>/config.yaml) and C(config.yaml.d/*.yaml).
    CRI-O reads C(crio.conf) then C(crio.conf.d/*) in lexical order, the last value winning, and
    never C(/etc/crio/conf.d). Every file that exists but is not in effect is a note naming it and
    why (RV(node.ignored_files)); where the rules leave more than one candidate, each is judged and
    the worst counts. When no configuration in effect serves CRI, the node is C(unverifiable)."
  - "Readiness, a second verdict per node (C(ready), C(not-ready), C(unknown)): the handler bcd's
    RuntimeClass names (C(bcd_nvidia_runtime_class); in O(scope=cluster) the RuntimeClass's
    C(handler) as the cluster has it, and C(not-ready) when it does not exist) is defined in every
    configuration in effect and runs the NVIDIA container runtime; a CDI specification of kind
    C(nvidia.com/gpu) in C(/etc/cdi) or C(/var/run/cdi) names every device C(GPU-<uuid>) (seed: CDI
    specs generated with C(--device-name-strategy=uuid)); with C(bcd_gpu_api=dra),
    C(/var/lib/kubelet/plugins_registry) exists. A node whose files were not read is C(unknown). The
    gate fails on C(not-ready) as on C(exposed) (C(bcd_gpu_isolation_enforce))."
  - "The running runtime, in O(scope=cluster): for a node whose O(node_results) item carries C(runtime)
    (module M(bcd.kubernetes.bcd_runtime_info) on the node: the running containerd's C(--config), release,
    C(config dump) and C(crictl info) or start-up log; CRI-O's C(crio status config)), every disagreement with
    the file judge is a finding naming both sides, and the runtime's answer wins - C(runtime-not-restarted)
    (what runs differs from what the files say now; C(unverifiable)), C(runtime-disagrees) (containerd's own
    C(config dump) differs from the file judge's reading; C(unverifiable)), C(runtime-config-path) (the process
    runs with a C(--config) other than C(containerd.service)'s; C(unverifiable)), C(runtime-handler-not-running)
    and C(runtime-handler-not-nvidia) (readiness, C(not-ready)), C(runtime-config-not-mounted) (a C(--config)
    outside C(bcd_container_runtime), naming the files that fix it). Each node's C(source) says where its
    verdict comes from - C(both), C(runtime), C(files) or C(cluster)."
  - "O(scope=settings): validates the GPU-isolation variables only and returns them normalised, for
    the role's own tasks."
  - Needs Python 3.11 (C(tomllib)) or the C(tomli) package on a node for O(scope=node); O(scope=cluster)
    and O(scope=settings) need the controller's C(kubernetes) and C(pydantic).
options:
  scope:
    description: What to check (see the description).
    type: str
    choices: [cluster, node, settings]
    default: cluster
  config:
    description:
      - The C(bcd_*) variables, as C(lookup('bcd.kubernetes.bcd_inventory')) returns them. Required for
        O(scope=cluster) and O(scope=settings). Only C(bcd_nvidia_toolkit), C(bcd_container_runtime),
        C(bcd_node_selector), C(bcd_gpu_isolation_enforce), C(bcd_foreign_gpu_resources), C(bcd_node_roots), C(bcd_node_root),
        C(bcd_report_out), C(bcd_kubeconfig) and C(bcd_kube_context) are validated here; an unknown
        C(bcd_*) name is refused.
    type: dict
  root:
    description: O(scope=node) only. The node's root directory as this host sees it.
    type: path
    default: /
  node_name:
    description: O(scope=node) only. The name the result carries (the Kubernetes Node's name).
    type: str
    default: node
  runtime_paths:
    description:
      - O(scope=node) only. Extra runtime configuration files and directories to read, as
        RV(settings.runtime_paths) gives them (C(bcd_container_runtime)); the known locations are
        always read.
    type: dict
    default: {}
  toolkit_paths:
    description:
      - O(scope=node) only. Extra toolkit configuration files and directories, as
        RV(settings.toolkit_paths) gives them (C(bcd_nvidia_toolkit)).
    type: dict
    default: {}
  node_results:
    description:
      - O(scope=cluster) only. The registered loop results of O(scope=node) runs on the C(gpu_nodes)
        hosts; each item's C(item.node) names the Node when the run failed or was unreachable (that
        node is then C(unverifiable), with the error).
      - An item may carry C(runtime), the RV(bcd.kubernetes.bcd_runtime_info#module:runtime) that module returned on
        the same node (or C(runtime_error), why it could not run). The node's verdict then takes the running
        runtime's answer into account (see the description).
    type: list
    elements: dict
    default: []
  cluster_name:
    description: The name the report gives the cluster (the inventory host).
    type: str
    default: cluster
  base_dir:
    description:
      - O(scope=settings) and O(scope=cluster). Relative C(bcd_node_root), C(bcd_node_roots) and C(bcd_report_out) are taken
        relative to this directory (the directory ansible-playbook runs in); default the module's own.
    type: path
  reach_cluster:
    description:
      - O(scope=settings) only. With C(bcd_nvidia_toolkit=gpu-operator) (whose ClusterPolicy is
        patched next), read the API server's C(/version) with C(bcd_kubeconfig) and
        C(bcd_kube_context), so that a cluster that cannot be reached fails here naming the
        kubeconfig file(s), the context and its server (3 tries, 2 s apart). Returns C(cluster).
    type: bool
    default: false
  control_plane_nodes:
    description:
      - O(scope=cluster) only. bcd's own view of the selected Nodes, as module C(bcd_nodes) returns it
        (C(nodes.list) matched by Node name - C(name), C(id), C(state), C(conditions)). Each node of the
        table and report then shows its bcd state and conditions (seed - GPU isolation, The reaper; for
        example C(ForeignGpuExposure), C(PodResourcesUnavailable), C(KubernetesReleaseStuck)). Shown only
        - the verdicts and the gate are Ansible's own.
    type: list
    elements: dict
  control_plane_error:
    description: O(scope=cluster) only. Why bcd's view could not be read; every node shows it.
    type: str
  runtime_handler:
    description:
      - O(scope=node) only. The runtime handler bcd's pod runs with (the RuntimeClass's C(handler));
        empty for none. O(scope=cluster) reads the RuntimeClass C(bcd_nvidia_runtime_class) names.
    type: str
    default: nvidia
  gpu_api:
    description: O(scope=node) only (O(scope=cluster) reads C(bcd_gpu_api)). C(dra) requires the kubelet's plugin registration directory.
    type: str
    choices: [device-plugin, dra]
    default: device-plugin
  enforce:
    description:
      - O(scope=node) only (O(scope=cluster) reads C(bcd_gpu_isolation_enforce)). When false, a node
        that is not C(isolated) gives a warning here; the role's gate fails only when this is true.
    type: bool
    default: true
extends_documentation_fragment:
  - bcd.kubernetes.bcd.api_key_unused
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  platform:
    details: Runs on the controller, or with O(scope=node) on a GPU node.
  check_mode:
    details: Reads only; runs the same in check mode.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Validate the GPU isolation variables
  bcd.kubernetes.bcd_gpu_isolation:
    scope: settings
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
  register: settings

- name: Read a GPU node's files (on the node, over SSH)
  bcd.kubernetes.bcd_gpu_isolation:
    scope: node
    root: /
    node_name: gpu-node-1
    runtime_paths: "{{ settings.settings.runtime_paths }}"
    toolkit_paths: "{{ settings.settings.toolkit_paths }}"
  delegate_to: gpu-node-1

- name: Check a folder of files collected from a node
  bcd.kubernetes.bcd_gpu_isolation:
    scope: node
    root: /srv/collected/gpu-node-1

- name: Verdict for every selected node of the cluster
  bcd.kubernetes.bcd_gpu_isolation:
    scope: cluster
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    cluster_name: "{{ inventory_hostname }}"
  register: isolation
"""

RETURN = r"""
cluster:
  description: O(scope=settings) with O(reach_cluster). Where the cluster was reached - the kubeconfig file(s), the context and its server.
  returned: when the cluster was reached
  type: str
  sample: kubeconfig /home/ops/.kube/gpu-east.yaml, context gpu-east, server https://10.0.0.1:6443
settings:
  description: O(scope=settings). The validated GPU-isolation variables.
  returned: scope is settings
  type: dict
  contains:
    mode:
      description: C(gpu-operator), C(packages) or C(custom) (C(bcd_nvidia_toolkit)).
      type: str
    runtime_paths:
      description: C(bcd_container_runtime) as C({files, dirs}).
      type: dict
    toolkit_paths:
      description: C(bcd_nvidia_toolkit) as C({files, dirs}).
      type: dict
    label_selector:
      description: C(bcd_node_selector) as a label selector (C(k=v,k2=v2)).
      type: str
    enforce:
      description: C(bcd_gpu_isolation_enforce).
      type: bool
    force_conflicts:
      description: C(bcd_gpu_stack_force_conflicts).
      type: bool
    report_out:
      description: C(bcd_report_out), or null.
      type: str
    node_root:
      description: C(bcd_node_root), or null.
      type: str
    node_roots:
      description: C(bcd_node_roots).
      type: dict
node:
  description:
    - O(scope=node). The node's result; paths are as on the node.
  returned: scope is node
  type: dict
  contains:
    name: {description: O(node_name)., type: str}
    root: {description: O(root)., type: str}
    verdict: {description: "C(isolated), C(exposed) or C(unverifiable).", type: str}
    findings:
      description: What lets GPUs out, or what could not be decided.
      type: list
      elements: dict
      contains:
        status: {description: "C(exposed) or C(unverifiable).", type: str}
        check: {description: "A short id, such as C(toolkit-config-missing).", type: str}
        where: {description: "The file (as on the node) or C(Kind/name) of the object.", type: str}
        message: {description: What is wrong., type: str}
        fix: {description: What to change., type: str}
    files_read: {description: 'Every runtime, hook and toolkit file read.', type: list, elements: str}
    runtimes:
      description: Each runtime that runs the NVIDIA toolkit (C(name), C(file), C(key), C(binary), C(toolkit_configs)).
      type: list
      elements: dict
    hooks: {description: Each OCI hook that runs the toolkit., type: list, elements: dict}
    toolkit_configs:
      description: Each toolkit configuration read or required (C(path), C(exists), C(readers), the two keys).
      type: list
      elements: dict
    notes: {description: "Advice that does not change the verdict, and each file not in effect with why.", type: list, elements: str}
    ignored_files:
      description: Each runtime configuration file that exists but is not in effect (C(file), C(why)).
      type: list
      elements: dict
    runtime_configs:
      description:
        - Each configuration in effect (C(runtime), C(rule), C(root), C(files) in load order, C(serves_cri),
          C(default_runtime), C(handlers) name to C({binary, nvidia})); more than one per runtime when the
          loading rules leave it open. A containerd configuration also has C(family) (C(1.7), C(2.0-2.2),
          C(2.3.0-2.3.4), C(2.3.5+)), C(state) (C(serving), C(disabled), C(failed), C(refused)), C(reason)
          and C(where) (the file containerd names when it refuses).
      type: list
      elements: dict
    cdi_specs: {description: "Each CDI specification of kind nvidia.com/gpu (C(path), C(devices), C(by_uuid)).", type: list, elements: dict}
    plugins_registry: {description: Whether /var/lib/kubelet/plugins_registry exists., type: bool}
    containerd_version:
      description: The node's containerd release (C(major.minor.patch)) the configuration was judged for, or null when unknown.
      type: str
    containerd_config:
      description: The file containerd starts with (the C(--config) of C(containerd.service), else C(/etc/containerd/config.toml)).
      type: str
    ready: {description: "C(ready), C(not-ready) or C(unknown).", type: str}
    readiness: {description: Readiness findings (C(status) C(not-ready) or C(unknown)) as RV(node.findings)., type: list, elements: dict}
nodes:
  description:
    - One entry per node (O(scope=cluster) - every Node C(bcd_node_selector) selects; O(scope=node) - the node).
  returned: scope is cluster or node
  type: list
  elements: dict
  contains:
    name: {description: The Node's name., type: str}
    verdict: {description: "C(isolated), C(exposed) or C(unverifiable).", type: str}
    ready: {description: "C(ready), C(not-ready) or C(unknown): can bcd's pod run and hand out GPUs there.", type: str}
    source:
      description:
        - "Where the verdict comes from: C(both) (the running runtime was asked and agrees with the files), C(runtime)
          (they disagree and the runtime's answer decided), C(files) (the runtime was not asked), C(cluster) (the
          node's files were not read)."
      type: str
    findings: {description: As in RV(node.findings)., type: list, elements: dict}
    readiness: {description: As in RV(node.readiness)., type: list, elements: dict}
    bcd:
      description:
        - With O(control_plane_nodes) or O(control_plane_error) - bcd's own view of the node - C(id), C(state)
          and C(conditions) (C([{type, status, reason, message}]) as C(nodes.list) gives them; C(state) null
          when the control plane does not know the node), or C(error).
      type: dict
      returned: when O(control_plane_nodes) or O(control_plane_error) is given
    node_files:
      description: "Where the node files came from: C(over SSH from <host>), C(from <host> (connection <name>)) for a
        C(gpu_nodes) host reached another way (C(local) reads on the controller), C(from <dir>), or C(not read)."
      type: str
    notes: {description: Advice; says so when node files were not read and the ClusterPolicy is the evidence., type: list, elements: str}
cluster_findings:
  description: O(scope=cluster). ClusterPolicy and ResourceSlice findings (also in each node they concern).
  returned: scope is cluster
  type: list
  elements: dict
summary:
  description: Node count per verdict.
  returned: scope is cluster or node
  type: dict
passed:
  description: True when every node is C(isolated) and none C(not-ready) (and at least one node was checked).
  returned: scope is cluster or node
  type: bool
table:
  description: The per-node table, one line per node, finding and fix.
  returned: scope is cluster or node
  type: list
  elements: str
report:
  description:
    - 'What C(bcd_report_out) receives: C({"cluster", "nodes": [{"name", "verdict", "ready", "source", "findings", "readiness",
      "node_files", "notes"}], "summary", "ready_summary", "passed", "enforce", "cluster_findings", "resource_slices", "cluster_policies",
      "active_cluster_policy", "unmatched_node_files", "runtime_handler", "gpu_api"}).'
  returned: scope is cluster or node
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    ISOLATED,
    NOT_READY,
    NodeRootError,
    active_cluster_policy,
    combine,
    containerd_binary,
    finding,
    ready_summary,
    summary,
    table,
    verify_node_root,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import Kube, KubeError, api_client
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_runtime_live import reconcile

# At module scope (mitogen's strategy ships only what the top level imports), but optional: scope=node
# runs on a GPU node, where pydantic (which the inventory model needs) may not be installed.
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
)
SLICE_VERSIONS = ("v1", "v1beta2", "v1beta1")


def _settings(module) -> dict:
    if load_some is None:
        module.fail_json(msg=f"scope={module.params['scope']} needs the controller's Python packages (pydantic): "
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
    }


def _paths(module, name: str) -> dict:
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


def _gate(nodes: list[dict], cluster: str, enforce: bool, extra: dict) -> dict:
    counts = summary(nodes)
    passed = bool(nodes) and all(n["verdict"] == ISOLATED and n.get("ready") != NOT_READY for n in nodes)
    report = {
        "cluster": cluster,
        "passed": passed,
        "enforce": enforce,
        "summary": counts,
        "ready_summary": ready_summary(nodes),
        "nodes": [
            {k: n.get(k) for k in ("name", "verdict", "ready", "source", "findings", "readiness", "node_files", "notes",
                                   "bcd")
             if k != "bcd" or "bcd" in n}
            for n in nodes
        ],
    }
    report.update(extra)
    return {"nodes": report["nodes"], "summary": counts, "passed": passed, "table": table(nodes), "report": report}


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

def _containerd_version(module, root: str) -> str | None:
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


def run_node(module) -> None:
    root = module.params["root"]
    name = module.params["node_name"]
    try:
        result = verify_node_root(root, _paths(module, "runtime_paths"), _paths(module, "toolkit_paths"),
                                  module.params["runtime_handler"] or None, module.params["gpu_api"],
                                  containerd_version=_containerd_version(module, root))
    except NodeRootError as exc:
        module.fail_json(msg=f"bcd_node_root: {exc}")
        return
    node = {"name": name, **result, "root": root}
    entry = {**{k: node[k] for k in ("name", "verdict", "ready", "findings", "readiness", "notes")},
             "node_files": f"from {root}", "source": "files"}
    gate = _gate([entry], None, module.params["enforce"], {"node_root": root})
    if not gate["passed"] and not module.params["enforce"]:
        module.warn(f"GPU isolation: {name} is {entry['verdict']}, {entry['ready']} (bcd_gpu_isolation_enforce is "
                    "false, so this is only a warning)")
    module.exit_json(changed=False, node=node, **gate)


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
    """Attach bcd's own view (bcd_nodes' result) to each node entry, in place."""
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


def run_cluster(module) -> None:
    settings = _settings(module)
    try:
        kube = Kube(api_client(settings["kubeconfig"], settings["kube_context"]))
        cluster = _read_cluster(kube, settings["label_selector"])
        handler, class_findings, handler_source = _runtime_class(kube, settings["runtime_class"])
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
    gate = _gate(result["nodes"], module.params["cluster_name"], settings["enforce"], extra)
    if unmatched:
        module.warn("GPU isolation: node files were given for nodes this cluster's selector does not select: "
                    + ", ".join(unmatched))
    if not gate["passed"] and not settings["enforce"] and result["nodes"]:
        bad = [f"{n['name']} ({n['verdict']}, {n['ready']})" for n in result["nodes"]
               if n["verdict"] != ISOLATED or n["ready"] == NOT_READY]
        module.warn("GPU isolation: not isolated: " + ", ".join(bad)
                    + "; bcd_gpu_isolation_enforce is false, so this is only a warning")
    module.exit_json(changed=False, cluster_findings=result["cluster_findings"], **gate)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "scope": {"type": "str", "choices": ["cluster", "node", "settings"], "default": "cluster"},
            "config": {"type": "dict"},
            # the action group's module_defaults (node-side tasks reset them: no key reaches a node); not used
            "api_key": {"type": "str", "no_log": True},
            "root": {"type": "path", "default": "/"},
            "node_name": {"type": "str", "default": "node"},
            "runtime_paths": {"type": "dict", "default": {}},
            "toolkit_paths": {"type": "dict", "default": {}},
            "node_results": {"type": "list", "elements": "dict", "default": []},
            "cluster_name": {"type": "str", "default": "cluster"},
            "enforce": {"type": "bool", "default": True},
            "base_dir": {"type": "path"},
            "runtime_handler": {"type": "str", "default": "nvidia"},
            "control_plane_nodes": {"type": "list", "elements": "dict"},
            "control_plane_error": {"type": "str"},
            "gpu_api": {"type": "str", "choices": ["device-plugin", "dra"], "default": "device-plugin"},
            "reach_cluster": {"type": "bool", "default": False},
        },
        required_if=[("scope", "cluster", ("config",)), ("scope", "settings", ("config",))],
        supports_check_mode=True,
    )
    scope = module.params["scope"]
    if scope == "node":
        run_node(module)
    elif scope == "settings":
        settings = _settings(module)
        kubeconfig, context = settings.pop("kubeconfig"), settings.pop("kube_context")
        result = {"changed": False, "settings": settings}
        if module.params["reach_cluster"] and settings["mode"] == "gpu-operator":
            result["cluster"] = reach(module, kubeconfig, context)
        module.exit_json(**result)
    else:
        run_cluster(module)


if __name__ == "__main__":
    main()
