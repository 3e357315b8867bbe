#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_rollout_info: read the fleet's health and plan a staged rollout, read-only."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_rollout_info
short_description: Read the fleet's health and the previous render, and plan a staged rollout of bcd's DaemonSet
version_added: 1.1.0
description:
  - The read half of rollout.yml (the bcd DaemonSet specification, section Upgrades), and of adopt-cluster.yml when it changes the pod
    template of a DaemonSet whose pods run; M(bcd.kubernetes.bcd_rollout) does the writes. Changes nothing,
    writes no Lease, mints no token.
  - Reads the DaemonSet, its ControllerRevisions and pods, the selected Nodes and the pool's nodes
    (C(nodes.list)) and says, per selected Node, whether it is healthy (a bcd pod, Ready, on the DaemonSet's
    newest revision, and a bcd node that reports) and whether the previous rollout is complete (every pod on
    the newest revision).
  - Returns the previous render (the ConfigMap and DaemonSet as they are, reduced to the fields their field
    managers set) for a rollback, the planned stages, and a refusal (RV(refuse)) when nodes are unhealthy,
    the previous rollout is incomplete or more selected Nodes are down than C(bcd_rollout_max_down) allows (unless
    C(bcd_rollout_force)), or the DaemonSet does not exist.
  - A selected Node that is down - NotReady (its Ready condition not C(True)), cordoned (C(spec.unschedulable)) or
    tainted C(node.kubernetes.io/unreachable) - is neither unhealthy nor incomplete - the plan leaves it behind
    (not in RV(to_roll)), and names it, why and what happens to it (RV(down), its row's outcome C(left behind) and why).
    C(bcd_rollout_max_down) (a count or a percentage of the selected Nodes rounded up; default 10%) is how many
    may be down; more refuse, naming them and the variable. Before this, any NotReady Node refused the rollout.
    The POD column of a Node that is not Ready says C(unknown (Node NotReady)).
  - The plan names each stage's size - C(bcd_rollout_canary) nodes first, then batches of
    C(bcd_rollout_max_unavailable) (a count or a percentage of the selected Nodes rounded up) - and the Nodes
    still to roll (RV(to_roll)). The canary's Nodes are named (the first in natural order); a batch's are
    picked by the DaemonSet controller as M(bcd.kubernetes.bcd_rollout) rolls it.
  - Only the selected Nodes roll. A C(bcd_node_selector) that selects no Node is refused (whatever
    C(bcd_rollout_force) says), naming the pods it would delete. A Node that runs a bcd pod and that the
    selector no longer selects loses bcd (its pod is deleted once the new template is applied). The plan's
    headline names each such Node, and says how many selected Nodes roll, in which stages, and how many stay;
    the table lists the same Nodes.
  - A plan whose first stage rolls every node to roll, on more than one node (no canary left), is refused
    unless C(bcd_rollout_all_at_once), since a failure there hits the whole fleet at once; with one selected
    Node it is a warning.
  - To take the cluster's lock and read under it in one module run, use M(bcd.kubernetes.bcd_rollout) with
    C(state=locked) (a write, the lock Lease).
  - Returns a machine-readable RV(summary) and a printed RV(table); never a secret.
options:
  changes:
    description: Whether the render differs from what is applied (the dry run's answer); without changes only
      the pods not on the newest revision are to roll.
    type: bool
    default: true
  template_changes:
    description:
      - Whether the DaemonSet's pod template differs from what is applied (the dry run's answer, and fields other
        field managers set there that the apply takes over). Only a new pod template replaces pods.
      - With O(changes) but not O(template_changes) (a change to the ConfigMap or to the DaemonSet's own fields
        alone - the kubelet updates the mounted ConfigMap files in place), only the pods not on the newest revision
        are to roll (normally none), and the headline says that the pod template does not change.
    type: bool
    default: true
  joining:
    description:
      - The selected Nodes whose bcd node does not report yet and that this run joins (adopt-cluster.yml mints
        a token for them first); their pod not being Ready, or no bcd node reporting for them, does not refuse
        the rollout. The gate still waits for each of them to report once its pod is replaced.
    type: list
    elements: str
  run:
    description: This run's id (the lock holder's C(run=)), for the summary.
    type: str
  cluster:
    description: The cluster's name in the summary (C(bcd_cluster_name) or the inventory host).
    type: str
  started_at:
    description: When the run started (RFC 3339), for the summary.
    type: str
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.control_plane
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: Read-only either way.
seealso:
  - module: bcd.kubernetes.bcd_rollout
  - module: bcd.kubernetes.bcd_lock
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the fleet's health, the previous render and the plan
  bcd.kubernetes.bcd_rollout_info:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
  register: rollout_status

- name: Refuse an unhealthy fleet
  ansible.builtin.fail:
    msg: "{{ rollout_status.refuse }}"
  when: rollout_status.refuse is not none
"""

RETURN = r"""
summary:
  description:
    - The machine-readable report. C(result) is one of C(unchanged) (already on the render and healthy, with
      O(changes=false)), C(planned), C(refused); C(from)/C(to) the image and digest; C(stages) the planned
      stages (C(name), C(size), the canary's C(nodes), C(outcome) C(planned)); C(to_roll) the Nodes to roll;
      C(nodes) one row per Node (C(outcome) C(will roll) for those to roll, C(left behind) and why for a down Node);
      C(unhealthy), C(incomplete) and C(down) (C([{node, why}])); C(losing) (the Nodes that run a bcd pod and that C(bcd_node_selector) no longer selects)
      and C(staying) (the selected Nodes that do not roll); timings in RFC 3339 and seconds.
  returned: always
  type: dict
table:
  description: The printed report, one line each.
  returned: always
  type: list
  elements: str
refuse:
  description: Why the rollout may not start (naming the Nodes), or null.
  returned: always
  type: str
previous:
  description: The ConfigMap and DaemonSet as they are, reduced to what their field managers set (for a rollback).
  returned: always
  type: list
  elements: dict
plan:
  description:
    - The stages, C([{name, size}]) (C(canary), C(batch 1), ...), in order; the canary's with its C(nodes). The
      DaemonSet controller picks each batch's Nodes among RV(to_roll).
  returned: always
  type: list
  elements: dict
to_roll:
  description: The selected Nodes whose pods the rollout replaces (natural order; no down Node).
  returned: always
  type: list
  elements: str
down:
  description: C([{node, why}]) for each selected Node that is down (NotReady, cordoned, tainted unreachable), which
    the rollout leaves behind.
  returned: always
  type: list
  elements: dict
healthy:
  description: Whether every selected Node is healthy and the previous rollout complete.
  returned: always
  type: bool
revision:
  description: The hash of the DaemonSet's newest ControllerRevision (its pods' C(controller-revision-hash)), or null.
  returned: always
  type: str
image:
  description: The image of the DaemonSet's C(bcd) container as applied now, or null.
  returned: always
  type: str
selected:
  description: How many Nodes C(bcd_node_selector) selects.
  returned: always
  type: int
versions:
  description: The C(resourceVersion) of the DaemonSet and of the ConfigMap as read, by kind (null when absent; left out
    when the read stopped before reading it).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import control_plane, inventory, kube
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout_engine import READ_OPTIONS, Rollout


def main() -> None:
    module = AnsibleModule(
        argument_spec=READ_OPTIONS,
        supports_check_mode=True,
    )
    inv = inventory(module, ("bcd_control_plane_url", "bcd_tenant", "bcd_pool"))
    rollout = Rollout(module, inv, kube(module, inv), control_plane(module, inv))
    rollout.guarded("bcd_rollout_info", rollout.status)


if __name__ == "__main__":
    main()
