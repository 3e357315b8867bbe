#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_lock: a Lease that keeps two bcd-ansible runs on one cluster apart."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_lock
short_description: Take or release the bcd-ansible lock of a cluster (a coordination.k8s.io Lease)
version_added: 1.0.0
description:
  - One C(coordination.k8s.io/v1) Lease in the bcd namespace (C(<bcd_name>-ansible-lock)) says
    which bcd-ansible run works on the cluster, with its holder (user, host, process and run)
    and expiry (C(renewTime) + C(leaseDurationSeconds)).
  - C(state=present) takes the lock. A lock held by another live run is waited for up to
    O(wait) seconds, then refused naming who holds it and until when. A lock whose expiry has
    passed, or whose holder was a process on this host that no longer runs, is taken over
    safely (an update with the Lease's resourceVersion, so of two runs taking over at once
    exactly one wins).
  - C(state=absent) releases the lock if this run holds it, and only then.
  - The Lease is bookkeeping that lives only while a run works; taking and releasing it is not
    reported as a change.
options:
  config:
    description:
      - The C(bcd_*) variables (C(lookup('bcd.kubernetes.bcd_inventory'))), usually from the action
        group's C(module_defaults). When given, O(namespace), O(name), O(ttl), O(kubeconfig) and
        O(context) default to C(bcd_namespace), C(<bcd_name>-ansible-lock), C(bcd_lock_ttl),
        C(bcd_kubeconfig) and C(bcd_kube_context).
    type: dict
  api_key:
    description: Accepted so that C(module_defaults) of the action group apply; not used.
    type: str
  kubeconfig:
    description: Kubeconfig of the cluster.
    type: path
  context:
    description: Kubeconfig context.
    type: str
  namespace:
    description: The bcd namespace (C(bcd_namespace)); required without O(config).
    type: str
  name:
    description: The Lease's name; required without O(config).
    type: str
  run:
    description: This run's id; with the user, host and process it makes the holder identity.
    type: str
    required: true
  state:
    description: C(present) takes the lock, C(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  ttl:
    description: Seconds the lock lasts without renewal (C(bcd_lock_ttl); 1800 without O(config)).
    type: int
  wait:
    description:
      - Seconds to wait for a lock another live run holds; 0 refuses at once.
      - The action plugin runs the module in slices of at most 25 s and prints, between them, who
        holds the lock, until when, the time waited and the limit (O(wait_set_by) names the
        variable that sets it).
    type: int
    default: 0
  wait_set_by:
    description: The variable that sets O(wait), named in the progress lines of the wait.
    type: str
    default: the wait option
  poll_for:
    description:
      - Internal to the action plugin. Seconds this run waits for the lock before it returns with
        RV(waiting) true; unset, it waits until it has the lock or O(wait) has passed.
    type: float
  elapsed:
    description: Internal to the action plugin. Seconds waited by earlier runs of the same wait.
    type: float
    default: 0
  version:
    description:
      - With C(state=absent), the Lease's C(resourceVersion) as this run last wrote it (RV(version), or
        M(bcd.kubernetes.bcd_rollout)'s C(lease_version)). The Lease is then deleted with that precondition,
        without a read first - it can only match the Lease this run holds. A Lease written since is read and
        released as without O(version) (only if this run holds it); one already gone is released.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: In check mode the Lease is read, never written; a held lock is still reported.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take the cluster's lock
  bcd.kubernetes.bcd_lock:
    namespace: bcd-system
    name: bcd-ansible-lock
    run: "{{ run_id }}"
"""

RETURN = r"""
holder:
  description: The holder identity now (ours after taking it).
  returned: always
  type: str
took_over:
  description: The previous holder whose expired or dead lock was taken over, or null.
  returned: state=present
  type: str
waited:
  description: Seconds spent waiting for another run.
  returned: state=present
  type: float
waiting:
  description: True when this run returned after O(poll_for) seconds with the lock still held by another run.
  returned: state=present
  type: bool
lease:
  description: C(Lease <namespace>/<name>).
  returned: when RV(waiting) is true, or the lock was taken
  type: str
since:
  description: When the other run took the lock (UTC, C(2026-01-31T12:00:00Z)).
  returned: when RV(waiting) is true
  type: str
until:
  description:
    - When the other run's lock expires unless renewed (UTC, C(2026-01-31T12:00:00Z)); once this run
      took the lock, when its own expires (C(bcd_lock_ttl) from now) if it is never released.
  returned: when RV(waiting) is true, or the lock was taken
  type: str
version:
  description: The C(resourceVersion) of the Lease this run wrote, for O(version) when it releases it.
  returned: when the lock was taken
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import Kube, KubeError, api_client
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_lock import (
    acquire,
    holder_identity,
    lock_name,
    release,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import inventory


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": {"type": "dict"},
            "api_key": {"type": "str", "no_log": True},
            "kubeconfig": {"type": "path"},
            "context": {"type": "str"},
            "namespace": {"type": "str"},
            "name": {"type": "str"},
            "run": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "ttl": {"type": "int"},
            "wait": {"type": "int", "default": 0},
            "wait_set_by": {"type": "str", "default": "the wait option"},
            "poll_for": {"type": "float"},
            "elapsed": {"type": "float", "default": 0},
            "version": {"type": "str"},
        },
        required_one_of=[("config", "namespace"), ("config", "name")],
        supports_check_mode=True,
    )
    p = module.params
    if p["config"] is not None:
        inv = inventory(module)
        p["namespace"] = p["namespace"] or inv.bcd_namespace
        p["name"] = p["name"] or lock_name(inv.bcd_name)
        p["ttl"] = p["ttl"] or int(inv.bcd_lock_ttl)
        p["kubeconfig"] = p["kubeconfig"] or inv.bcd_kubeconfig
        p["context"] = p["context"] or inv.bcd_kube_context
    p["ttl"] = p["ttl"] or 1800
    me = holder_identity(p["run"])
    try:
        kube = Kube(api_client(p["kubeconfig"], p["context"]))
    except KubeError as exc:
        module.fail_json(msg=str(exc))
    if p["state"] == "absent":
        result = release(kube, p["namespace"], p["name"], me, module.check_mode, version=p["version"])
    else:
        result = acquire(kube, p["namespace"], p["name"], p["ttl"], me, wait=p["wait"], poll_for=p["poll_for"],
                         elapsed=p["elapsed"], check_mode=module.check_mode, warn=module.warn)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
