#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_admission: ask the API server whether it admits a pod of bcd's rendered template."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_admission
short_description: Ask the API server whether it admits a pod of bcd's DaemonSet, with a dry-run create
version_added: 1.1.0
description:
  - Creates one pod from the template of the rendered DaemonSet O(daemonset) as a server-side dry
    run (C(dryRun=All)); the API server runs every admission plugin on it - ResourceQuota, LimitRange,
    Pod Security, ValidatingAdmissionPolicies, admission webhooks - and stores nothing
    (U(https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run)). A DaemonSet is
    accepted whatever its pods meet; a refused pod is only a C(FailedCreate) event on it, so this
    is the only way to know before the DaemonSet is applied and before any join token exists.
  - The pod is the one the DaemonSet controller would create - the template's labels, annotations
    and spec, the controller's tolerations and the node affinity that ties it to O(node) (default
    the first Node C(bcd_node_selector) selects), owned by the live DaemonSet when there is one -
    named C(<bcd_name>-admission-probe), in C(bcd_namespace).
  - Fails when the API server refuses it, quoting its reason and naming the fix (raise or remove the
    ResourceQuota, or add one with a C(scopeSelector) for the priority class; label the namespace
    C(pod-security.kubernetes.io/enforce=privileged); exclude the namespace in the policy's binding
    or the webhook's configuration; the LimitRange or C(bcd_resources); ...).
  - A quota refusal while the live DaemonSet has a pod on each of its Nodes, when one pod fewer
    would leave room for the new one (a rollout deletes each pod before its replacement is created),
    is not a failure; RV(admission.note) says so.
  - Does not fail, but warns, when the answer cannot foresee what the DaemonSet controller will meet
    - a webhook with side effects (it refuses every dry run), no permission to create pods here,
    or an answer that usually heals (a quota's usage, the namespace's ServiceAccount not there yet)
    still given after 10 seconds.
  - Runs as the operator, not as the DaemonSet controller - a policy that judges the requesting user,
    or a quota changed afterwards, is seen only when the pods are created (the DaemonSet wait and the
    rollout's health gates read the DaemonSet's C(FailedCreate) events and fail within seconds).
  - A namespace that does not exist yet is not an error; RV(admission.probed) is false.
  - Changes nothing (a dry run), so it runs in check mode as it does otherwise.
options:
  daemonset:
    description: The rendered DaemonSet (the C(DaemonSet) of the C(objects) M(bcd.kubernetes.bcd_manifests) returns).
    type: dict
    required: true
  node:
    description: The Node the pod is for (default the first Node C(bcd_node_selector) selects, by name).
    type: str
  nodes:
    description: The number of selected Nodes, for the fix of a quota refusal (default counted).
    type: int
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.api_key_unused
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Ask the API server whether it admits a pod of the rendered template
  bcd.kubernetes.bcd_admission:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    daemonset: "{{ render.objects | selectattr('kind', 'equalto', 'DaemonSet') | first }}"
"""

RETURN = r"""
admission:
  description: What the API server answered the dry-run create.
  returned: always
  type: dict
  contains:
    probed:
      description: Whether the API server was asked (false when the namespace does not exist yet).
      type: bool
    admitted:
      description: Whether it admitted the pod.
      type: bool
    pod:
      description: The dry-run pod's name (C(<bcd_name>-admission-probe)).
      type: str
    node:
      description: The Node the pod was for.
      type: str
    refusal:
      description:
        - Null, or why it refused - C(kind) (C(quota), C(pod-security), C(admission-policy), C(webhook),
          C(webhook-no-dry-run), C(limit-range), C(priority-class), C(namespace-terminating),
          C(service-account), C(rbac), C(forbidden), C(invalid), C(error)), C(fatal) (false - a warning),
          C(reason) (the API server's words) and C(fix).
      type: dict
    note:
      description: A note on an answer that is not a refusal (the namespace does not exist; a full quota a rollout makes room in).
      type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_admission import (
    describe,
    probe,
    refused_message,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path, selector
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    inventory,
    kube,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": CONFIG_OPTION,
            "api_key": API_KEY_OPTION,  # the action group's module_defaults; not used
            **KUBE_OPTIONS,
            "daemonset": {"type": "dict", "required": True},
            "node": {"type": "str"},
            "nodes": {"type": "int"},
        },
        supports_check_mode=True,
    )
    inv = inventory(module)
    api = kube(module, inv)
    ds = module.params["daemonset"]
    node, nodes = module.params["node"], module.params["nodes"]
    try:
        if node is None or nodes is None:
            names = sorted(n["metadata"]["name"] for n in api.list(
                path("nodes"), {"labelSelector": selector(inv.bcd_node_selector) or None},
                keep=lambda n: {"metadata": {"name": n["metadata"]["name"]}}))
            node = node or next(iter(names), None)
            nodes = nodes if nodes is not None else len(names)
        live = api.get(path("daemonsets", inv.bcd_name, inv.bcd_namespace))
        found = probe(api, ds, node=node, live=live, nodes=nodes, priority_class=inv.bcd_priority_class_name)
    except KubeError as exc:
        module.fail_json(msg=f"asking the API server whether it admits bcd's pod (a dry-run create): {exc}", admission={})
    result = {"changed": False, "admission": found}
    refusal = found["refusal"]
    if refusal and refusal["fatal"]:
        module.fail_json(msg=refused_message(inv.bcd_namespace, found), **result)
    if refusal:
        module.warn(f"could not foresee whether the API server admits bcd's pods: {describe(refusal)}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
