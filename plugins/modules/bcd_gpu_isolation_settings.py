#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_gpu_isolation_settings: validate the GPU-isolation variables and return them normalised."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_gpu_isolation_settings
short_description: Validate the GPU-isolation variables and return them normalised
version_added: 1.1.0
description:
  - Validates the GPU-isolation variables of O(config) with the inventory model (C(bcd_nvidia_toolkit),
    C(bcd_container_runtime), C(bcd_node_selector), C(bcd_gpu_isolation_enforce), C(bcd_foreign_gpu_resources),
    C(bcd_node_roots), C(bcd_node_root), C(bcd_report_out), C(bcd_kubeconfig), C(bcd_kube_context),
    C(bcd_nvidia_runtime_class), C(bcd_gpu_api), C(bcd_gpu_stack_force_conflicts)) and returns them as the
    gpu_stack role's tasks and M(bcd.kubernetes.bcd_gpu_isolation_node) take them (RV(settings)). A variable that
    breaks its rule fails the module naming it and the rule (C(INVALID_CONFIG)); the other C(bcd_*) variables are
    not validated here, but an unknown C(bcd_*) name is refused.
  - With O(reach_cluster) and C(bcd_nvidia_toolkit=gpu-operator) (whose ClusterPolicy is patched next), it reads
    the API server's C(/version) with C(bcd_kubeconfig) and C(bcd_kube_context), so that a cluster that cannot be
    reached fails here naming the kubeconfig file(s), the context and its server (3 tries, 2 s apart).
  - Replaces O(bcd.kubernetes.bcd_gpu_isolation#module:scope=settings), deprecated.
options:
  config:
    description:
      - The C(bcd_*) variables, as C(lookup('bcd.kubernetes.bcd_inventory')) returns them.
    type: dict
    required: true
  base_dir:
    description:
      - Relative C(bcd_node_root), C(bcd_node_roots) and C(bcd_report_out) are taken relative to this directory
        (the directory ansible-playbook runs in); default the module's own.
    type: path
  reach_cluster:
    description:
      - With C(bcd_nvidia_toolkit=gpu-operator), read the API server's C(/version) and fail when the cluster
        cannot be reached. Returns RV(cluster) and RV(kube).
    type: bool
    default: false
  reach_cluster_any_mode:
    description:
      - With O(reach_cluster), reach the cluster whatever C(bcd_nvidia_toolkit) is (the gate reads the cluster in
        every mode), and not at all when C(bcd_node_root) is set (one node's folder, no cluster).
    type: bool
    default: false
extends_documentation_fragment:
  - bcd.kubernetes.bcd.api_key_unused
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: Reads only; runs the same in check mode.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Validate the GPU isolation variables; fail now if the cluster cannot be reached
  bcd.kubernetes.bcd_gpu_isolation_settings:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    base_dir: "{{ lookup('ansible.builtin.env', 'PWD') }}"
    reach_cluster: true
  register: gpu_settings

- name: Read a GPU node's files with those settings
  bcd.kubernetes.bcd_gpu_isolation_node:
    node_name: gpu-node-1
    runtime_paths: "{{ gpu_settings.settings.runtime_paths }}"
    toolkit_paths: "{{ gpu_settings.settings.toolkit_paths }}"
  delegate_to: gpu-node-1
"""

RETURN = r"""
cluster:
  description:
    - With O(reach_cluster) and C(bcd_nvidia_toolkit=gpu-operator) (or O(reach_cluster_any_mode)).
    - Where the cluster was reached - the kubeconfig file(s), the context and its server.
  returned: when the cluster was reached
  type: str
  sample: kubeconfig /home/ops/.kube/gpu-east.yaml, context gpu-east, server https://10.0.0.1:6443
kube:
  description:
    - The cluster every later task of the run is given (C(bcd_kubeconfig), C(bcd_kube_context)), chosen once as
      kubernetes.core chooses it - C(bcd_kubeconfig) and C(bcd_kube_context), else C(K8S_AUTH_KUBECONFIG) and
      C(K8S_AUTH_CONTEXT), else C(KUBECONFIG), else C(~/.kube/config) and its current context - and which of
      these chose each. C(kubeconfig) and C(context) are null for the in-cluster service account.
  returned: when the cluster was reached
  type: dict
  sample: {kubeconfig: /home/ops/.kube/config, context: gpu-east, server: "https://10.0.0.1:6443",
           kubeconfig_from: KUBECONFIG, context_from: K8S_AUTH_CONTEXT}
settings:
  description: The validated GPU-isolation variables, relative paths made absolute.
  returned: always
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
    node_selector:
      description: C(bcd_node_selector).
      type: dict
    runtime_class:
      description: C(bcd_nvidia_runtime_class), or null.
      type: str
    gpu_api:
      description: C(bcd_gpu_api).
      type: str
    foreign_gpu_resources:
      description: C(bcd_foreign_gpu_resources).
      type: list
      elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_isolation_cluster import (
    SETTINGS_OPTIONS,
    run_settings,
)


def main() -> None:
    # the action group's module_defaults set api_key for every member; not used
    module = AnsibleModule(argument_spec=dict(SETTINGS_OPTIONS, api_key={"type": "str", "no_log": True},
                                              reach_cluster_any_mode={"type": "bool", "default": False}),
                           supports_check_mode=True)
    run_settings(module)


if __name__ == "__main__":
    main()
