#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_control_plane: preflight against the bcd control plane."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_control_plane
short_description: Check the bcd control plane before anything changes
version_added: 1.0.0
description:
  - Reaches the control plane at C(bcd_control_plane_url) (https only; the server certificate
    is verified against the system trust store or C(bcd_control_plane_ca_file)).
  - Fetches the discovery document (C(/.well-known/better-compute)) and refuses a join key that
    has a private part or whose pin is not C(bcd_pins.join_encryption), and a gateway URL or site
    that is not the inventory's (the bcd DaemonSet specification, section Render the manifests and the join token; the pins come
    only from the operator, never from the network).
  - Checks every pin that can be checked from here, before any token exists -
    C(bcd_pins.join_signing) against the discovery document's optional C(joinSigningKey) (absent,
    it says it could not be checked); C(bcd_pins.serving_ca) by opening a TLS connection to
    C(bcd_gateway_url) (server name C(bcd_gateway_server_name), else the URL's host) and finding
    a certificate with that SPKI pin in the chain the gateway presents, then verifying the
    gateway's certificate against that one alone. A mismatch is refused, naming the pin and what
    the gateway presented; a gateway this controller cannot reach is one line of warning (nodes
    may reach networks the controller cannot), and the run goes on.
  - Reads the pool (C(pools.get)) and forecasts the trust the nodes will land with (the bcd
    DaemonSet specification, section Trust); C(tenant-controlled) nodes add no capacity, which it returns as a warning.
  - Lists the nodes of the pool (C(nodes.list), every page) and returns those that report.
  - Changes nothing. Retryable failures (429, 502, 503, 504, connection errors) are retried
    with backoff and jitter, honouring Retry-After, within C(bcd_control_plane_timeout).
options:
  gateway_timeout:
    description: Seconds to wait for the gateway's TLS handshake (the C(serving_ca) check).
    type: float
    default: 5
  nodes:
    description:
      - Kubernetes Node names whose bcd nodes to look up (hostname = Node name). Omit to
        list no nodes.
    type: list
    elements: str
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.control_plane
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
deprecated:
  removed_in: 2.0.0
  why: >-
    M(bcd.kubernetes.bcd_preflight) runs the same control-plane checks in the product
    (RV(bcd.kubernetes.bcd_preflight#module:control_plane)), in the same run as the cluster's; no playbook or role
    calls bcd_control_plane.
  alternative: >-
    Use M(bcd.kubernetes.bcd_preflight).
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Preflight the control plane
  bcd.kubernetes.bcd_control_plane:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
    nodes: "{{ selected_nodes }}"
  no_log: false
"""

RETURN = r"""
discovery:
  description: What the control plane says of itself (no trust is taken from it).
  returned: success
  type: dict
  contains:
    gateway_url:
      description: The gateway URL.
      type: str
    gateway_name:
      description: The gateway's TLS server name.
      type: str
    site:
      description: The site id.
      type: str
    join_key_pin:
      description: The pin of the discovered join key (equal to bcd_pins.join_encryption).
      type: str
pool:
  description: The pool (C(pools.get)).
  returned: success
  type: dict
trust:
  description: The trust hosted-token nodes will land with (platform, tenant-controlled or tenant-owned).
  returned: success
  type: str
warnings_text:
  description: Warnings for the operator (tenant-controlled nodes add no capacity; a pin that could not be checked), also returned as Ansible warnings.
  returned: success
  type: list
  elements: str
pins_checked:
  description: The pins checked against what the control plane and the gateway present (C(join_encryption), C(join_signing), C(serving_ca)).
  returned: success
  type: list
  elements: str
reporting:
  description: Node name -> {id, state, trust} for the asked nodes that report (adopting, ready or draining).
  returned: success
  type: dict
known:
  description: Node name -> {id, state, trust, conditions} for every asked node the control plane knows.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    control_plane,
    inventory,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_preflight import (
    Refusal,
    control_plane_calls,
    gather,
    judge_control_plane,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={"config": CONFIG_OPTION, "api_key": API_KEY_OPTION, "nodes": {"type": "list", "elements": "str"},
                       "gateway_timeout": {"type": "float", "default": 5}},
        supports_check_mode=True,
    )
    inv = inventory(module, ("bcd_control_plane_url", "bcd_tenant", "bcd_pool"))
    # one client per request: the requests run in parallel (module_utils/bcd_preflight.py)
    clients = [control_plane(module, inv)]

    def new_client():
        clients.append(control_plane(module, inv))
        return clients[-1]

    wanted = set(module.params["nodes"] or [])
    out = gather(control_plane_calls(new_client, inv, module.params["gateway_timeout"], nodes=bool(wanted)))
    try:
        result = judge_control_plane(out, inv, wanted)
    except Refusal as exc:
        module.fail_json(msg=exc.msg, **exc.extra)
    for warning in result["warnings_text"]:
        module.warn(warning)  # a real Ansible warning: [WARNING] on the console, counted by AWX
    module.exit_json(changed=False, cp_requests=sum(c.requests for c in clients), **result)


if __name__ == "__main__":
    main()
