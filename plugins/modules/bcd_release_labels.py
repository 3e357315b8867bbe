#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_release_labels: remove bcd's bcd.dev/* labels from every Node of a released cluster."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_release_labels
version_added: 1.1.0
short_description: Remove bcd's bcd.dev/* labels from every Node of a cluster
description:
  - Removes every C(bcd.dev/*) label from every Node of the cluster (a JSON merge patch per Node setting
    them to null), and nothing else - not only from the Nodes C(bcd_node_selector) selects now. A Node
    without such labels is left as it is, so a second run changes nothing.
  - Release-cluster.yml runs it once bcd's DaemonSet is gone and the nodes have left the control plane
    (M(bcd.kubernetes.bcd_release_nodes)).
  - Replaces O(bcd.kubernetes.bcd_release_nodes#module:step=labels), deprecated.
options: {}
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.api_key_unused
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: Patches nothing; RV(labels) says what would go.
  diff_mode:
    support: full
    details: Each Node's bcd.dev/* labels and their values, before (none after).
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Remove the bcd.dev/* labels from the Nodes
  bcd.kubernetes.bcd_release_labels:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
  register: released_labels
"""

RETURN = r"""
labels:
  description: Each Node that had bcd.dev/* labels and their keys, C({name, keys}) - removed now, or that would be in check mode.
  returned: always
  type: list
  elements: dict
  sample: [{name: gpu-node-1, keys: [bcd.dev/node-id]}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    inventory,
    kube,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_release import remove_labels


def main() -> None:
    module = AnsibleModule(argument_spec={"config": CONFIG_OPTION, "api_key": API_KEY_OPTION, **KUBE_OPTIONS}, supports_check_mode=True)
    core = kube(module, inventory(module))
    try:
        remove_labels(module, core)
    except KubeError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
