#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_gpu_isolation: prove, node by node, that bcd is the only source of GPUs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_gpu_isolation
short_description: Verify GPU isolation on every selected node of a cluster
version_added: 1.0.0
description:
  - bcd may hand out GPUs only where nothing else does (the bcd DaemonSet specification, section GPU isolation).
    This module finds what else could, in the cluster and in the node results read on its GPU
    nodes, and gives every selected node a verdict, C(isolated), C(exposed) or C(unverifiable),
    with each finding naming the file or object and its fix. It changes nothing.
  - "It reads the cluster with the kubernetes client (C(bcd_kubeconfig),
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
  - "Node files come from O(node_results) (the results of M(bcd.kubernetes.bcd_gpu_isolation_node) on
    the hosts of inventory group C(gpu_nodes), over SSH) and from C(bcd_node_roots) (collected roots on
    this host). For a node whose files were not read: with C(bcd_nvidia_toolkit=gpu-operator) the
    ClusterPolicy is the evidence (device plugin off, toolkit env false, CDI on, NRI off) and the
    result says plainly that the node files were not read; with C(packages) or custom paths the node
    is C(unverifiable)."
  - "Node files (the collected roots of C(bcd_node_roots), and in O(node_results)) are judged as
    M(bcd.kubernetes.bcd_gpu_isolation_node) judges them: only the configuration in effect, for the node's
    containerd release family, k3s, RKE2 and CRI-O by their own loading rules (see there)."
  - "Readiness, a second verdict per node (C(ready), C(not-ready), C(unknown)): the handler bcd's
    RuntimeClass names (C(bcd_nvidia_runtime_class); the RuntimeClass's
    C(handler) as the cluster has it, and C(not-ready) when it does not exist) is defined in every
    configuration in effect and runs the NVIDIA container runtime; a CDI specification of kind
    C(nvidia.com/gpu) in C(/etc/cdi) or C(/var/run/cdi) names every device C(GPU-<uuid>) (the bcd DaemonSet specification, section CDI
    specs generated with C(--device-name-strategy=uuid)); with C(bcd_gpu_api=dra),
    C(/var/lib/kubelet/plugins_registry) exists. A node whose files were not read is C(unknown). The
    gate fails on C(not-ready) as on C(exposed) (C(bcd_gpu_isolation_enforce))."
  - "The running runtime: for a node whose O(node_results) item carries C(runtime)
    (module M(bcd.kubernetes.bcd_runtime_info) on the node: the running containerd's C(--config), release,
    C(config dump) and C(crictl info) or start-up log; CRI-O's C(crio status config)), every disagreement with
    the file judge is a finding naming both sides, and the runtime's answer wins - C(runtime-not-restarted)
    (what runs differs from what the files say now; C(unverifiable)), C(runtime-disagrees) (containerd's own
    C(config dump) differs from the file judge's reading; C(unverifiable)), C(runtime-config-path) (the process
    runs with a C(--config) other than C(containerd.service)'s; C(unverifiable)), C(runtime-handler-not-running)
    and C(runtime-handler-not-nvidia) (readiness, C(not-ready)), C(runtime-config-not-mounted) (a C(--config)
    outside C(bcd_container_runtime), naming the files that fix it). Each node's C(source) says where its
    verdict comes from - C(both), C(runtime), C(files) or C(cluster)."
  - "O(scope) is deprecated: O(scope=node) is module M(bcd.kubernetes.bcd_gpu_isolation_node) (it runs on a GPU
    node, in the action group C(bcd_node)) and O(scope=settings) is M(bcd.kubernetes.bcd_gpu_isolation_settings). Both
    still work here, with a deprecation warning, until 2.0.0."
  - Needs the controller's C(kubernetes) and C(pydantic).
options:
  scope:
    description:
      - Deprecated (removed in 2.0.0) - leave it out. C(node) runs M(bcd.kubernetes.bcd_gpu_isolation_node)'s check,
        C(settings) M(bcd.kubernetes.bcd_gpu_isolation_settings)'s, each with a deprecation warning.
    type: str
    choices: [cluster, node, settings]
    default: cluster
  config:
    description:
      - The C(bcd_*) variables, as C(lookup('bcd.kubernetes.bcd_inventory')) returns them. Required for
        the check (and the deprecated O(scope=settings)). Only C(bcd_nvidia_toolkit), C(bcd_container_runtime),
        C(bcd_node_selector), C(bcd_gpu_isolation_enforce), C(bcd_foreign_gpu_resources), C(bcd_node_roots), C(bcd_node_root),
        C(bcd_report_out), C(bcd_kubeconfig) and C(bcd_kube_context) are validated here; an unknown
        C(bcd_*) name is refused.
    type: dict
  root:
    description: Deprecated O(scope=node) only (M(bcd.kubernetes.bcd_gpu_isolation_node)'s O(bcd.kubernetes.bcd_gpu_isolation_node#module:root)).
    type: path
    default: /
  node_name:
    description: Deprecated O(scope=node) only. The name the result carries (the Kubernetes Node's name).
    type: str
    default: node
  runtime_paths:
    description:
      - Deprecated O(scope=node) only. Extra runtime configuration files and directories to read, as
        RV(settings.runtime_paths) gives them (C(bcd_container_runtime)); the known locations are
        always read.
    type: dict
    default: {}
  toolkit_paths:
    description:
      - Deprecated O(scope=node) only. Extra toolkit configuration files and directories, as
        RV(settings.toolkit_paths) gives them (C(bcd_nvidia_toolkit)).
    type: dict
    default: {}
  node_results:
    description:
      - The registered loop results of M(bcd.kubernetes.bcd_gpu_isolation_node) runs on the C(gpu_nodes)
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
      - Relative C(bcd_node_root), C(bcd_node_roots) and C(bcd_report_out) are taken
        relative to this directory (the directory ansible-playbook runs in); default the module's own.
    type: path
  reach_cluster:
    description:
      - Deprecated O(scope=settings) only. With C(bcd_nvidia_toolkit=gpu-operator) (whose ClusterPolicy is
        patched next), read the API server's C(/version) with C(bcd_kubeconfig) and
        C(bcd_kube_context), so that a cluster that cannot be reached fails here naming the
        kubeconfig file(s), the context and its server (3 tries, 2 s apart). Returns C(cluster).
    type: bool
    default: false
  control_plane_nodes:
    description:
      - bcd's own view of the selected Nodes, as module C(bcd_nodes_info) returns it
        (C(nodes.list) matched by Node name - C(name), C(id), C(state), C(conditions)). Each node of the
        table and report then shows its bcd state and conditions (the bcd DaemonSet specification, section GPU isolation and its reaper; for
        example C(ForeignGpuExposure), C(PodResourcesUnavailable), C(KubernetesReleaseStuck)). Shown only
        - the verdicts and the gate are Ansible's own.
    type: list
    elements: dict
  control_plane_error:
    description: Why bcd's view could not be read; every node shows it.
    type: str
  runtime_handler:
    description:
      - Deprecated O(scope=node) only. The runtime handler bcd's pod runs with; without O(scope), the
        RuntimeClass C(bcd_nvidia_runtime_class) names is read.
    type: str
    default: nvidia
  gpu_api:
    description: Deprecated O(scope=node) only (otherwise C(bcd_gpu_api) is read). C(dra) requires the kubelet's plugin registration directory.
    type: str
    choices: [device-plugin, dra]
    default: device-plugin
  enforce:
    description:
      - Deprecated O(scope=node) only (otherwise C(bcd_gpu_isolation_enforce) is read). When false, a node
        that is not C(isolated) gives a warning here; the role's gate fails only when this is true.
    type: bool
    default: true
  cve_waivers:
    description:
      - Deprecated O(scope=node) only (otherwise C(bcd_toolkit_cve_waivers) is read). Each C({node, cve, until, reason})
        moves that node's C(toolkit-cve) finding for C(cve) out of its verdict until the date passes.
    type: list
    elements: dict
    default: []
extends_documentation_fragment:
  - bcd.kubernetes.bcd.api_key_unused
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  platform:
    details: Runs on the controller (with the deprecated O(scope=node), where it is delegated).
  check_mode:
    details: Reads only; runs the same in check mode.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Validate the GPU isolation variables
  bcd.kubernetes.bcd_gpu_isolation_settings:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
  register: settings

- name: Read each GPU node's files (on the node, over SSH)
  bcd.kubernetes.bcd_gpu_isolation_node:
    node_name: "{{ item.node }}"
    runtime_paths: "{{ settings.settings.runtime_paths }}"
    toolkit_paths: "{{ settings.settings.toolkit_paths }}"
  delegate_to: "{{ item.host }}"
  loop: [{node: gpu-node-1, host: gpu-node-1}]
  register: node_reads

- name: Verdict for every selected node of the cluster
  bcd.kubernetes.bcd_gpu_isolation:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    cluster_name: "{{ inventory_hostname }}"
    node_results: "{{ node_reads.results }}"
  register: isolation
"""

RETURN = r"""
cluster:
  description: Deprecated O(scope=settings) with O(reach_cluster). Where the cluster was reached - the kubeconfig file(s), the context and its server.
  returned: when the cluster was reached
  type: str
  sample: kubeconfig /home/ops/.kube/gpu-east.yaml, context gpu-east, server https://10.0.0.1:6443
settings:
  description: Deprecated O(scope=settings). The validated GPU-isolation variables.
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
    - Deprecated O(scope=node). The node's result; paths are as on the node.
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
    toolkit_version:
      description:
        - The NVIDIA Container Toolkit release judged against its known container escapes (C(major.minor.patch)), from
          the toolkit binaries' C(--version) on the node or the file C(nvidia-container-toolkit-version) at a collected
          root; null when unknown (a note says so). An older release than a fix is a C(toolkit-cve) finding.
      type: str
    containerd_config:
      description: The file containerd starts with (the C(--config) of C(containerd.service), else C(/etc/containerd/config.toml)).
      type: str
    ready: {description: "C(ready), C(not-ready) or C(unknown).", type: str}
    readiness: {description: Readiness findings (C(status) C(not-ready) or C(unknown)) as RV(node.findings)., type: list, elements: dict}
nodes:
  description:
    - One entry per node - every Node C(bcd_node_selector) selects (with the deprecated O(scope=node), the node).
  returned: unless O(scope) is settings
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
  description: ClusterPolicy and ResourceSlice findings (also in each node they concern).
  returned: unless O(scope) is node or settings
  type: list
  elements: dict
summary:
  description: Node count per verdict.
  returned: unless O(scope) is settings
  type: dict
passed:
  description: True when every node is C(isolated) and none C(not-ready) (and at least one node was checked).
  returned: unless O(scope) is settings
  type: bool
table:
  description: The per-node table, one line per node, finding and fix.
  returned: unless O(scope) is settings
  type: list
  elements: str
report:
  description:
    - 'What C(bcd_report_out) receives: C({"schema_version", "cluster", "nodes": [{"name", "verdict", "ready", "source", "findings", "readiness",
      "node_files", "notes"}], "summary", "ready_summary", "passed", "enforce", "cluster_findings", "resource_slices", "cluster_policies",
      "active_cluster_policy", "unmatched_node_files", "runtime_handler", "gpu_api"}).'
  returned: unless O(scope) is settings
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_isolation_cluster import (
    CLUSTER_OPTIONS,
    SETTINGS_OPTIONS,
    run_cluster,
    run_settings,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_isolation_node import NODE_OPTIONS, run_node

# scope=node and scope=settings are modules of their own now; they keep working here until 2.0.0
MOVED = {"node": "bcd.kubernetes.bcd_gpu_isolation_node", "settings": "bcd.kubernetes.bcd_gpu_isolation_settings"}


def main() -> None:
    spec = {**NODE_OPTIONS, **SETTINGS_OPTIONS, **CLUSTER_OPTIONS,
            "scope": {"type": "str", "choices": ["cluster", "node", "settings"], "default": "cluster"}}
    spec["config"] = {"type": "dict"}
    # the action group's module_defaults (node-side tasks reset them: no key reaches a node); not used
    spec["api_key"] = {"type": "str", "no_log": True}
    module = AnsibleModule(
        argument_spec=spec,
        required_if=[("scope", "cluster", ("config",)), ("scope", "settings", ("config",))],
        supports_check_mode=True,
    )
    scope = module.params["scope"]
    if scope in MOVED:
        module.deprecate(f"bcd.kubernetes.bcd_gpu_isolation scope={scope} is deprecated: use module {MOVED[scope]} "
                         "(same options, without scope)", version="2.0.0", collection_name="bcd.kubernetes")
    if scope == "node":
        run_node(module)
    elif scope == "settings":
        run_settings(module)
    else:
        run_cluster(module)


if __name__ == "__main__":
    main()
