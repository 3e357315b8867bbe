#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_config: validate the bcd_* variables before anything else runs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_config
short_description: Validate the bcd_* inventory variables with the inventory model
version_added: 1.0.0
description:
  - Validates every C(bcd_*) variable with the one
    inventory model (C(plugins/module_utils/bcd_model.py)) and returns the normalised values.
  - Refuses what the bcd DaemonSet specification refuses (an image not pinned by digest, URLs that are not https,
    malformed pins, names, label keys and values, resource quantities, unknown presets, host
    paths the Host mounts section rules out, a TTL outside 1 minute to 24 hours, a JWK with a
    private part) and unknown C(bcd_*) variables, with one C(INVALID_CONFIG:) line per problem
    that names the variable path and the rule. Changes nothing, calls nothing.
options:
  required:
    description:
      - Variables this playbook needs beyond the model's own required ones (for example
        C(bcd_control_plane_url), C(bcd_tenant) and C(bcd_pool) to mint a join token).
    type: list
    elements: str
    default: []
  existing_files:
    description:
      - Variables naming files this playbook reads, which must exist (C(bcd_kubeconfig) for a
        playbook that reaches the cluster); a missing one is INVALID_CONFIG, before anything runs.
    type: list
    elements: str
    default: []
  new_files:
    description:
      - Variables naming files this playbook will create; each must not exist yet (checked on
        the host that runs the module, before anything is changed).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.api_key_unused
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
deprecated:
  removed_in: 2.0.0
  why: >-
    M(bcd.kubernetes.bcd_manifests) does its work in the product - it validates the same inventory, takes the same
    O(bcd.kubernetes.bcd_manifests#module:required), O(bcd.kubernetes.bcd_manifests#module:existing_files) and
    O(bcd.kubernetes.bcd_manifests#module:new_files), and returns the same
    RV(bcd.kubernetes.bcd_manifests#module:config) - and no playbook or role calls bcd_config.
  alternative: >-
    Use M(bcd.kubernetes.bcd_manifests) (without O(bcd.kubernetes.bcd_manifests#module:dest) it writes nothing).
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Validate the inventory
  bcd.kubernetes.bcd_config:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    required: [bcd_control_plane_url, bcd_tenant, bcd_pool]
  register: bcd
"""

RETURN = r"""
config:
  description:
    - Every C(bcd_*) variable, validated and normalised (defaults filled in, presets expanded,
      quantities in canonical form, durations in seconds). Never holds C(bcd_api_key).
  returned: success
  type: dict
label_selector:
  description: C(bcd_node_selector) as a Kubernetes label selector (C(k=v,k2=v2)); empty selects every node.
  returned: success
  type: str
configmap_name:
  description: The ConfigMap's name (C(<bcd_name>-config)).
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    inventory,
    label_selector,
    refuse_existing,
    refuse_missing,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": CONFIG_OPTION,
            "api_key": API_KEY_OPTION,  # the action group's module_defaults; not used
            "required": {"type": "list", "elements": "str", "default": []},
            "new_files": {"type": "list", "elements": "str", "default": []},
            "existing_files": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    inv = inventory(module, tuple(module.params["required"]))
    refuse_existing(module, inv, module.params["new_files"])
    refuse_missing(module, inv, module.params["existing_files"])
    module.exit_json(
        changed=False,
        config=inv.public(),
        label_selector=label_selector(inv),
        configmap_name=inv.configmap_name,
    )


if __name__ == "__main__":
    main()
