#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_pod_security: which namespaces let pods mount host paths (read only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: bcd_pod_security
short_description: Check that Pod Security keeps other pods away from bcd's host paths
description:
  - Lists the cluster's namespaces and finds those whose pods may run privileged or mount host
    paths, so they could read C(/var/lib/bcd) and act as the node (the bcd DaemonSet specification, section Host paths and Pod
    Security). A namespace is open when it has no C(pod-security.kubernetes.io/enforce) label
    or enforces C(privileged); C(bcd_namespace) and C(bcd_privileged_namespaces) are allowed.
  - Open namespaces are an Ansible warning, or, with C(bcd_require_pod_security), a failure
    naming them. A cluster-wide default set in the API server's admission configuration is not
    visible through the API, hence a warning rather than a refusal by default.
  - Changes nothing.
version_added: 1.0.0
options:
  api_key:
    description: Accepted so that C(module_defaults) of the action group apply; not used.
    type: str
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
deprecated:
  removed_in: 2.0.0
  why: >-
    M(bcd.kubernetes.bcd_preflight) runs the same Pod Security check in the product
    (RV(bcd.kubernetes.bcd_preflight#module:pod_security)); no playbook or role calls bcd_pod_security.
  alternative: >-
    Use M(bcd.kubernetes.bcd_preflight).
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check Pod Security
  bcd.kubernetes.bcd_pod_security:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
"""

RETURN = r"""
open_namespaces:
  description: The namespaces whose pods may mount host paths, sorted.
  returned: success
  type: list
  elements: str
  sample: [default, ml-team]
namespaces:
  description: The names of every namespace the cluster has.
  returned: success
  type: list
  elements: str
  sample: [bcd-system, default, kube-system]
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
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_preflight import (
    Refusal,
    judge_pod_security,
    list_namespaces,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={"config": CONFIG_OPTION, "api_key": API_KEY_OPTION, **KUBE_OPTIONS},
        supports_check_mode=True,
    )
    inv = inventory(module)
    k = kube(module, inv)
    try:
        namespaces = list_namespaces(k)
    except KubeError as exc:
        module.fail_json(msg=f"Pod Security: cannot list the namespaces: {exc}")
    try:
        result = judge_pod_security(namespaces, inv)
    except Refusal as exc:
        module.fail_json(msg=exc.msg, **exc.extra)
    if result["warning"]:
        module.warn(result["warning"])
    module.exit_json(changed=False, open_namespaces=result["open_namespaces"], namespaces=result["namespaces"])


if __name__ == "__main__":
    main()
