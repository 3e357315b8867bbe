#!/usr/bin/python
"""Ansible module bcd_daemonset_wait: wait for bcd's DaemonSet to roll out, saying how far it is."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_daemonset_wait
short_description: Wait for bcd's DaemonSet to roll out as kubectl rollout status does, with progress
description:
  - Waits until the DaemonSet controller has seen the DaemonSet's latest generation and
    C(updatedNumberScheduled) and C(numberAvailable) equal C(desiredNumberScheduled), as
    C(kubectl rollout status) does (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_rollout/kubectl_rollout_status/).
  - Through the action plugin of the same name, prints a progress line (pods updated and
    available of desired, the time waited, the limit and the variable that sets it) when the
    counts change and at least every 25 seconds, so a long wait is never silent; fails at the
    limit with the counts.
  - Read-only.
options:
  timeout:
    description: Seconds to wait (default C(bcd_rollout_timeout), else 120 + 2 per node of O(nodes)).
    type: int
  nodes:
    description: The number of selected Nodes (for the default timeout).
    type: int
    default: 1
  poll_for:
    description: Internal to the action plugin. Seconds this run polls (every second) before it returns; 0 polls once.
    type: float
    default: 0
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.cluster
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - bcd-ansible developers
"""

EXAMPLES = r"""
- name: Wait for the DaemonSet's rollout
  bcd.kubernetes.bcd_daemonset_wait:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    nodes: 3
"""

RETURN = r"""
found:
  description: Whether the DaemonSet exists.
  returned: success
  type: bool
done:
  description: Whether it rolled out.
  returned: success
  type: bool
desired:
  description: C(status.desiredNumberScheduled).
  returned: success
  type: int
updated:
  description: C(status.updatedNumberScheduled).
  returned: success
  type: int
available:
  description: C(status.numberAvailable).
  returned: success
  type: int
timeout:
  description: The wait's limit in seconds.
  returned: success
  type: int
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    CONFIG_OPTION,
    KUBE_OPTIONS,
    inventory,
    kube,
)


def state(ds: dict | None) -> dict:
    if ds is None:
        return {"found": False, "done": False, "desired": 0, "updated": 0, "available": 0}
    st = ds.get("status") or {}
    desired = int(st.get("desiredNumberScheduled") or 0)
    updated = int(st.get("updatedNumberScheduled") or 0)
    available = int(st.get("numberAvailable") or 0)
    seen = int(st.get("observedGeneration") or 0) >= int(ds["metadata"].get("generation") or 0)
    return {"found": True, "done": seen and updated >= desired and available >= desired,
            "desired": desired, "updated": updated, "available": available}


def main() -> None:
    module = AnsibleModule(
        argument_spec={"config": CONFIG_OPTION, **KUBE_OPTIONS, "timeout": {"type": "int"},
                       "nodes": {"type": "int", "default": 1}, "poll_for": {"type": "float", "default": 0}},
        supports_check_mode=True,
    )
    inv = inventory(module)
    api = kube(module, inv)
    limit = module.params["timeout"] or inv.bcd_rollout_timeout or (120 + 2 * module.params["nodes"])
    started = time.monotonic()
    first = None
    while True:
        try:
            now = state(api.get(path("daemonsets", inv.bcd_name, inv.bcd_namespace)))
        except KubeError as exc:
            module.fail_json(msg=f"reading DaemonSet {inv.bcd_namespace}/{inv.bcd_name}: {exc}")
        first = first or now
        if now["done"] or time.monotonic() - started + 1 > module.params["poll_for"] or now != first:
            break
        time.sleep(1)
    module.exit_json(changed=False, timeout=limit, **now)


if __name__ == "__main__":
    main()
