#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_gpu_isolation_node: judge one GPU node's files - is bcd the only source of GPUs there."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_gpu_isolation_node
short_description: Verify GPU isolation and readiness from one node's files
version_added: 1.1.0
description:
  - bcd may hand out GPUs only where nothing else does (the bcd DaemonSet specification, section GPU isolation).
    This module finds, in one node's files, what else could, and gives the node a verdict, C(isolated), C(exposed)
    or C(unverifiable), with each finding naming the file or object and its fix. It changes
    nothing.
  - "It reads one node's root directory (C(/) on the node itself, over SSH; a folder
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
    CRI-O reads C(crio.conf) then every file below C(crio.conf.d) (sorted, any name, subdirectories
    too), the last value winning and a later runtime table replacing that handler whole, and never
    C(/etc/crio/conf.d); it refuses to start on a default runtime that is not defined or not valid,
    and drops any other handler it finds invalid (a binary missing, judged on a node's root). Every
    file that exists but is not in effect is a note naming it and why (RV(node.ignored_files));
    where the rules leave more than one candidate, each is judged and the worst counts. When no
    configuration in effect serves CRI, the node is C(unverifiable)."
  - "Readiness, a second verdict (C(ready), C(not-ready), C(unknown)): the handler O(runtime_handler) (the
    C(handler) of bcd's RuntimeClass) is defined in every configuration in effect and runs the NVIDIA container
    runtime; a CDI specification of kind C(nvidia.com/gpu) in C(/etc/cdi) or C(/var/run/cdi) names every device
    C(GPU-<uuid>) (the bcd DaemonSet specification, section GPU isolation: CDI specs generated with
    C(--device-name-strategy=uuid)); with O(gpu_api=dra),
    C(/var/lib/kubelet/plugins_registry) exists."
  - "This module judges one node. M(bcd.kubernetes.bcd_gpu_isolation) on the controller takes its results
    (O(bcd.kubernetes.bcd_gpu_isolation#module:node_results)), adds what the cluster says (device plugins, DRA
    drivers, the GPU operator's ClusterPolicy, the RuntimeClass) and the running runtime's answer
    (M(bcd.kubernetes.bcd_runtime_info)), and gives every selected node its verdict."
  - It is in the action group C(bcd_node) (it runs on a GPU node), so the cluster-side defaults of
    C(group/bcd.kubernetes.bcd) never reach it.
  - Needs Python 3.11 (C(tomllib)) or the C(tomli) package where it runs; nothing else beyond ansible-core.
  - Replaces O(bcd.kubernetes.bcd_gpu_isolation#module:scope=node), deprecated.
options:
  root:
    description: The node's root directory as this host sees it (C(/) on the node itself; a folder of collected files).
    type: path
    default: /
  node_name:
    description: The name the result carries (the Kubernetes Node's name).
    type: str
    default: node
  runtime_paths:
    description:
      - Extra runtime configuration files and directories to read, as
        RV(bcd.kubernetes.bcd_gpu_isolation_settings#module:settings.runtime_paths) gives them (C(bcd_container_runtime));
        the known locations are always read.
    type: dict
    default: {}
  toolkit_paths:
    description:
      - Extra toolkit configuration files and directories, as
        RV(bcd.kubernetes.bcd_gpu_isolation_settings#module:settings.toolkit_paths) gives them (C(bcd_nvidia_toolkit)).
    type: dict
    default: {}
  runtime_handler:
    description: The runtime handler bcd's pod runs with (the RuntimeClass's C(handler)); empty for none.
    type: str
    default: nvidia
  gpu_api:
    description: C(bcd_gpu_api). C(dra) requires the kubelet's plugin registration directory.
    type: str
    choices: [device-plugin, dra]
    default: device-plugin
  enforce:
    description:
      - C(bcd_gpu_isolation_enforce). When false, a node that is not C(isolated) gives a warning here; the role's
        gate fails only when this is true. This module never fails on a verdict.
    type: bool
    default: true
  cve_waivers:
    description:
      - C(bcd_toolkit_cve_waivers), as M(bcd.kubernetes.bcd_gpu_isolation_settings) validated them. Each
        C({node, cve, until, reason}) (C(node) a Node name or C(*), C(until) an ISO date, inclusive) moves that
        node's C(toolkit-cve) finding for C(cve) to RV(nodes[].waived) until the date passes; after it, the finding
        stays and says its waiver expired.
    type: list
    elements: dict
    default: []
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes.node
  - bcd.kubernetes.attributes
attributes:
  platform:
    details: Runs on a GPU node (over SSH), or on the controller for a folder of files collected from a node.
  check_mode:
    details: Reads only; runs the same in check mode.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Validate the GPU isolation variables (on the controller)
  bcd.kubernetes.bcd_gpu_isolation_settings:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
  register: settings

- name: Read a GPU node's files (on the node, over SSH)
  bcd.kubernetes.bcd_gpu_isolation_node:
    root: /
    node_name: gpu-node-1
    runtime_paths: "{{ settings.settings.runtime_paths }}"
    toolkit_paths: "{{ settings.settings.toolkit_paths }}"
  delegate_to: gpu-node-1
  register: node_read

- name: Check a folder of files collected from a node
  bcd.kubernetes.bcd_gpu_isolation_node:
    root: /srv/collected/gpu-node-1
    node_name: gpu-node-1
"""

RETURN = r"""
node:
  description:
    - The node's result; paths are as on the node.
  returned: always
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
    - One entry, the node's (the same shape as M(bcd.kubernetes.bcd_gpu_isolation)'s, for the same table and report).
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: The Node's name., type: str}
    verdict: {description: "C(isolated), C(exposed) or C(unverifiable).", type: str}
    ready: {description: "C(ready), C(not-ready) or C(unknown): can bcd's pod run and hand out GPUs there.", type: str}
    source:
      description: C(files) - the node's files decided (the running runtime is compared on the controller, by M(bcd.kubernetes.bcd_gpu_isolation)).
      type: str
    findings: {description: As in RV(node.findings)., type: list, elements: dict}
    waived:
      description: The C(toolkit-cve) findings a waiver of O(cve_waivers) covers today, each with its C(waiver); absent when none.
      type: list
      elements: dict
    readiness: {description: As in RV(node.readiness)., type: list, elements: dict}
    node_files:
      description: C(from <root>).
      type: str
    notes: {description: Advice that does not change the verdict., type: list, elements: str}
summary:
  description: Node count per verdict (one node).
  returned: always
  type: dict
passed:
  description: True when the node is C(isolated) and not C(not-ready).
  returned: always
  type: bool
table:
  description: The node's table - a line for the node, then one per finding and fix.
  returned: always
  type: list
  elements: str
report:
  description:
    - 'What C(bcd_report_out) receives for a node root (C(bcd_node_root)): C({"schema_version": 1, "cluster": null, "nodes": [{"name", "verdict",
      "ready", "source", "findings", "readiness", "node_files", "notes"}], "summary", "ready_summary", "passed", "enforce",
      "node_root"}).'
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_isolation_node import NODE_OPTIONS, run_node


def main() -> None:
    module = AnsibleModule(argument_spec=dict(NODE_OPTIONS), supports_check_mode=True)
    run_node(module)


if __name__ == "__main__":
    main()
