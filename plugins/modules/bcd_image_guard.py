#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_image_guard: refuse (or warn) when the live DaemonSet runs another image."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_image_guard
version_added: 1.1.0
short_description: Read bcd's live DaemonSet and refuse (or warn) when it runs another image than the render
description:
  - The inventory is the source of truth for C(bcd_image), and only rollout.yml changes the image of a running
    DaemonSet (the bcd DaemonSet specification, section Upgrades - in stages, each behind a health gate, rolled back on failure). So when the live
    DaemonSet runs another image in its C(bcd) container than the render, adopt-cluster.yml refuses before anything
    changes (O(mode=refuse)) rather than roll every pod at once, and add-nodes.yml, which never changes the
    DaemonSet, says so in an Ansible warning (O(mode=warn)). Either message names both images and the way out.
  - Reads the DaemonSet the render names (one C(GET)) and returns it as C(kubernetes.core.k8s_info) does
    (RV(resources)), so that the play reads it once for the guard and for what it judges next.
  - A DaemonSet that does not exist, or whose C(bcd) container has no image, is not refused.
  - Changes nothing.
options:
  objects:
    description: The rendered objects, as M(bcd.kubernetes.bcd_manifests) returns them; the guard reads their DaemonSet.
    type: list
    elements: dict
    required: true
  mode:
    description: Fail (C(refuse)) or warn (C(warn)) when the images differ.
    type: str
    choices: [refuse, warn]
    default: refuse
  under_lock:
    description: The read is under the cluster's lock (the refusal then says another run changed the DaemonSet).
    type: bool
    default: false
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.api_key_unused
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: Read-only either way.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Refuse to roll the image of a running DaemonSet
  bcd.kubernetes.bcd_image_guard:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    objects: "{{ bcd_daemonset_render.objects }}"
  register: live
"""

RETURN = r"""
resources:
  description: The live DaemonSet as the API server returned it, in a list (empty when it does not exist).
  returned: always
  type: list
  elements: dict
live_image:
  description: The image of the live DaemonSet's C(bcd) container; null when there is none.
  returned: always
  type: str
  sample: registry.example/bcd@sha256:0123...
inventory_image:
  description: The image of the rendered DaemonSet's C(bcd) container (C(bcd_image)).
  returned: always
  type: str
differs:
  description: Whether the live DaemonSet runs another image (a refusal with O(mode=refuse), else a warning).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    inventory,
    kube,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import container_image


def message(ns: str, name: str, live: str, inventory_image: str, mode: str, under_lock: bool) -> str:
    """The refusal (``mode`` refuse) or the warning, naming both images and what to do."""
    where = f"DaemonSet {ns}/{name}"
    if mode == "warn":
        return (f"{where} runs {live}, but bcd_image in the inventory is {inventory_image}. New nodes join with the "
                f"running image; the inventory is the source of truth for bcd_image: set it to the running image, or roll "
                f"to it with rollout.yml.")
    return (f"{where} runs {live}, but bcd_image in the inventory is {inventory_image}. adopt-cluster.yml never changes "
            f"the image of a running DaemonSet (it would replace every pod without a canary or health gate): the "
            f"inventory is the source of truth for bcd_image, and image changes go through rollout.yml. To keep the "
            f"running image, set bcd_image to {live} in the inventory; to run {inventory_image}, run rollout.yml. "
            f"Nothing was changed and no token minted"
            + (" (read under the lock of the cluster: another run changed the DaemonSet since this run first read it)"
               if under_lock else "") + ".")


def main() -> None:
    module = AnsibleModule(
        argument_spec={"config": CONFIG_OPTION, "api_key": API_KEY_OPTION, **KUBE_OPTIONS,
                       "objects": {"type": "list", "elements": "dict", "required": True},
                       "mode": {"type": "str", "choices": ["refuse", "warn"], "default": "refuse"},
                       "under_lock": {"type": "bool", "default": False}},
        supports_check_mode=True,
    )
    rendered = next((o for o in module.params["objects"] if o.get("kind") == "DaemonSet"), None)
    if rendered is None or not container_image(rendered):
        module.fail_json(msg="bcd_image_guard: objects holds no DaemonSet with a container named bcd (pass the render's objects)")
    meta = rendered["metadata"]
    inv = inventory(module)
    api = kube(module, inv)
    try:
        live = api.get(path("daemonsets", meta["name"], meta["namespace"]))
    except KubeError as exc:
        module.fail_json(msg=f"reading DaemonSet {meta['namespace']}/{meta['name']}: {exc}")
    live_image, inventory_image = container_image(live or {}) or None, container_image(rendered)
    result = {"changed": False, "resources": [live] if live else [], "live_image": live_image,
              "inventory_image": inventory_image, "differs": bool(live_image) and live_image != inventory_image}
    if result["differs"]:
        msg = message(meta["namespace"], meta["name"], live_image, inventory_image, module.params["mode"],
                      module.params["under_lock"])
        if module.params["mode"] == "refuse":
            module.fail_json(msg=msg, **result)
        module.warn(msg)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
