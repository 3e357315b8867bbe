#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_release_objects: delete bcd's DaemonSet, ConfigMap or Namespace, showing what goes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_release_objects
version_added: 1.1.0
short_description: Delete bcd's DaemonSet, ConfigMap or Namespace, with a diff of what goes
description:
  - Deletes the objects O(objects) names, in order, each that exists - bcd's DaemonSet with foreground
    propagation (its pods go before it does), its ConfigMap, the Namespace adoption created. An object
    that is gone already is skipped; one being deleted already (an earlier run) is waited for, not deleted
    again. With O(wait), waits up to O(wait_timeout) seconds until each is gone (a Namespace's finalizers
    have run), else fails naming what is left.
  - "Why not C(kubernetes.core.k8s) with C(state: absent): it shows no diff of a deletion, and
    release-cluster.yml's C(--check --diff) shows every object that goes (its YAML without the server's
    bookkeeping). In check mode each deletion is a server-side dry run (C(dryRun=All)), so a deletion the API
    server would refuse fails in check mode too."
  - Replaces O(bcd.kubernetes.bcd_release_nodes#module:step=objects), deprecated.
options:
  objects:
    description:
      - The objects to delete, in order, C({kind, name, namespace}); C(kind) is C(DaemonSet), C(ConfigMap) or
        C(Namespace) (C(namespace) is left out for a Namespace). An entry of another kind, or without a name,
        fails the module there (the entries before it are deleted).
    type: list
    elements: dict
    default: []
  wait:
    description: Wait until each deleted object is gone (a Namespace's finalizers have run).
    type: bool
    default: false
  wait_timeout:
    description: With O(wait), how long to wait, in seconds, before failing and naming what is left.
    type: int
    default: 300
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.api_key_unused
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: Deletes nothing (each deletion is a server-side dry run); RV(deleted) says what would go.
  diff_mode:
    support: full
    details: Each object deleted, its YAML without the server's bookkeeping (C(managedFields), C(resourceVersion), ...) and status.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Delete bcd's DaemonSet (its pods first)
  bcd.kubernetes.bcd_release_objects:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    objects:
      - {kind: DaemonSet, namespace: bcd-system, name: bcd}

- name: Delete the Namespace adoption created, and wait until it is gone
  bcd.kubernetes.bcd_release_objects:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    objects:
      - {kind: Namespace, name: bcd-system}
    wait: true
    wait_timeout: 300
"""

RETURN = r"""
deleted:
  description: Each object deleted now (or that would be, in check mode), C({kind, name, namespace}).
  returned: always
  type: list
  elements: dict
  sample: [{kind: DaemonSet, name: bcd, namespace: bcd-system}]
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
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_release import (
    OBJECTS_OPTIONS,
    delete_objects,
)


def main() -> None:
    module = AnsibleModule(argument_spec={"config": CONFIG_OPTION, "api_key": API_KEY_OPTION, **KUBE_OPTIONS, **OBJECTS_OPTIONS},
                           supports_check_mode=True)
    core = kube(module, inventory(module))
    try:
        delete_objects(module, core)
    except KubeError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
