#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_release_nodes: the cluster's nodes leave the control plane, lose bcd's labels, or bcd's objects go."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_release_nodes
version_added: 1.0.0
short_description: Remove a released cluster's nodes from the control plane
description:
  - Tells the control plane that the cluster's nodes leave (C(nodes.remove) for each,
    control-plane-api.md). The cluster's nodes are the pool's nodes (C(nodes.list), every
    page) whose id is the C(bcd.dev/node-id) label of one of the cluster's Nodes, or whose
    C(hostname) is one of its Node names (a DaemonSet node's hostname is its Node name). Every Node
    counts, not only those C(bcd_node_selector) selects now.
  - Before removing any, a node that holds an allocation stops the module (it fails naming each
    such node and its allocation, and removes none) unless C(bcd_release_force) is true. A node
    already C(removed) is left as it is (a second run changes nothing).
  - Control-plane calls retry 429, 502, 503, 504 and connection failures within
    C(bcd_control_plane_timeout); through the action plugin of the same name, each retry is printed
    when it happens.
  - "O(step) is deprecated: the Nodes' labels are M(bcd.kubernetes.bcd_release_labels)'s, bcd's objects
    M(bcd.kubernetes.bcd_release_objects)'s. O(step=labels) and O(step=objects) still work here, with a
    deprecation warning, until 2.0.0."
options:
  step:
    description:
      - Deprecated (removed in 2.0.0) - leave it out. C(control_plane), the default, is this module's operation;
        C(labels) runs M(bcd.kubernetes.bcd_release_labels)'s, C(objects) M(bcd.kubernetes.bcd_release_objects)'s,
        each with a deprecation warning.
    type: str
    choices: [control_plane, labels, objects]
    default: control_plane
  objects:
    description: Deprecated O(step=objects) only; see M(bcd.kubernetes.bcd_release_objects).
    type: list
    elements: dict
    default: []
  wait:
    description: Deprecated O(step=objects) only; see M(bcd.kubernetes.bcd_release_objects).
    type: bool
    default: false
  wait_timeout:
    description: Deprecated O(step=objects) only; see M(bcd.kubernetes.bcd_release_objects).
    type: int
    default: 300
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.control_plane
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details:
      - Removes nothing; RV(removed) says what would go.
  diff_mode:
    support: full
    details:
      - The control-plane nodes' states, before and after.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Tell the control plane the cluster's nodes leave
  bcd.kubernetes.bcd_release_nodes:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
  register: released_nodes

- name: Say which nodes left
  ansible.builtin.debug:
    msg: "{{ released_nodes.removed | map(attribute='name') | join(', ') }}"
"""

RETURN = r"""
removed:
  description: The nodes removed now (or that would be, in check mode), C({name, id}).
  returned: O(step) is control_plane
  type: list
  elements: dict
already_removed:
  description: The cluster's nodes the control plane lists as removed already, C({name, id}).
  returned: O(step) is control_plane
  type: list
  elements: dict
held:
  description: The cluster's nodes that hold an allocation, C({name, id, allocation}).
  returned: O(step) is control_plane
  type: list
  elements: dict
labels:
  description: Deprecated O(step=labels); see M(bcd.kubernetes.bcd_release_labels).
  returned: O(step) is labels
  type: list
  elements: dict
deleted:
  description: Deprecated O(step=objects); see M(bcd.kubernetes.bcd_release_objects).
  returned: O(step) is objects
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    control_plane,
    inventory,
    kube,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_release import (
    OBJECTS_OPTIONS,
    delete_objects,
    remove_labels,
    remove_nodes,
)

# step=labels and step=objects are modules of their own now; they keep working here until 2.0.0
MOVED = {"labels": "bcd.kubernetes.bcd_release_labels", "objects": "bcd.kubernetes.bcd_release_objects"}


def main() -> None:
    module = AnsibleModule(
        argument_spec={"config": CONFIG_OPTION, "api_key": API_KEY_OPTION, **KUBE_OPTIONS, **OBJECTS_OPTIONS,
                       "step": {"type": "str", "choices": ["control_plane", "labels", "objects"], "default": "control_plane"}},
        supports_check_mode=True,
    )
    step = module.params["step"]
    if step in MOVED:
        module.deprecate(f"bcd.kubernetes.bcd_release_nodes step={step} is deprecated: use module {MOVED[step]} "
                         "(same options, without step)", version="2.0.0", collection_name="bcd.kubernetes")
    inv = inventory(module, ("bcd_control_plane_url", "bcd_tenant", "bcd_pool") if step == "control_plane" else ())
    core = kube(module, inv)
    try:
        if step == "control_plane":
            remove_nodes(module, inv, control_plane(module, inv), core)
        elif step == "objects":
            delete_objects(module, core)
        else:
            remove_labels(module, core)
    except KubeError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
