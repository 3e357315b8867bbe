#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_preflight: every read-only check before an adoption, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_preflight
short_description: Check the control plane, the selected Nodes, Pod Security and leftovers in one run
version_added: 1.1.0
description:
  - Makes, in one module run and with its independent requests in parallel (one client per
    request), the read-only checks that modules M(bcd.kubernetes.bcd_control_plane),
    M(bcd.kubernetes.bcd_nodes_info) and M(bcd.kubernetes.bcd_pod_security) and a check-mode
    M(bcd.kubernetes.bcd_join_token) (O(cluster), O(run)) make one at a time; each part returns
    what that module returns, and refuses with the same message.
  - The control plane (RV(control_plane)) - the discovery document (C(/.well-known/better-compute)),
    its join key against C(bcd_pins.join_encryption), its join signing key against
    C(bcd_pins.join_signing) when published, the gateway's CA against C(bcd_pins.serving_ca)
    (a TLS connection to C(bcd_gateway_url)), the gateway URL and site against the inventory's;
    the pool (C(pools.get)) and the trust its nodes will land with (the bcd DaemonSet specification, section Render the manifests
    and the join token; Trust).
  - The Nodes C(bcd_node_selector) selects and which of them report to the control plane
    (RV(nodes); C(nodes.list), every page, matched by hostname = Node name); warns about each
    Node whose allocatable CPU or memory is below C(bcd_resources.requests).
  - Each selected Node's bcd pod (RV(nodes.unhealthy); the DaemonSet, its newest
    ControllerRevision and its pods) - a Node is healthy only when its pod is Ready, on the
    DaemonSet's current pod template, with no container crash-looping or exited non-zero, whatever
    the control plane says (it counts a node C(adopting) for its offline grace after bcd stopped
    reporting). And the Nodes a join token is for (RV(nodes.to_join)) - those with no bcd node in
    the pool (or only a C(removed) one); a Node that joined, in any other state, joins again without.
  - The namespaces' Pod Security labels (RV(pod_security); the bcd DaemonSet specification, section Host paths and Pod Security).
  - With O(cluster) and O(run), the join tokens and the join-token Secret an interrupted earlier
    run on this cluster left behind (RV(leftovers)), read only. Not finding out is not a failure
    here (see RV(leftovers.failed) and RV(leftovers.msg)); the clean-up under the lock looks again.
  - With O(cluster_policies), the GPU operator's ClusterPolicies (C(nvidia.com/v1)), for the
    gpu_stack role, which then does not read them again; with O(toolkit_daemonsets) too, the
    DaemonSets of every namespace that label selector selects (the operator's toolkit), likewise.
  - With O(daemonset), whether the API server admits a pod of it (RV(admission)), as
    M(bcd.kubernetes.bcd_admission) asks - a server-side dry-run create (C(dryRun=All)) of one pod of
    the rendered template, for the first selected Node that does not report (else the first selected
    Node), which runs ResourceQuota, LimitRange, Pod Security, ValidatingAdmissionPolicies and
    admission webhooks and stores nothing. The answer is deferred (C(deferred) in RV(admission)) when
    C(bcd_namespace) does not exist yet, or when the refused namespace lacks a label the rendered
    Namespace sets (C(bcd_create_namespace); its apply may change the answer) - the caller asks again
    with M(bcd.kubernetes.bcd_admission) once the Namespace is applied, before any token exists.
  - Fails, in this order, as the separate modules did, with their messages - the control plane (a pin, the gateway
    URL or the site contradicted; discovery or the pool unreadable), the selected Nodes or the
    pool's nodes unreadable, then, only when the selector selects at least one Node (a selector
    that selects none is refused by the caller first), C(bcd_require_pod_security) with an
    open namespace, or the namespaces unreadable, then the API server refusing the dry-run pod
    (O(daemonset); quoting its reason and naming the fix).
  - Changes nothing. Control-plane calls retry as every bcd module's do, within
    C(bcd_control_plane_timeout); the action plugin prints the retries as they happen.
options:
  gateway_timeout:
    description: Seconds to wait for the gateway's TLS handshake (the C(serving_ca) check).
    type: float
    default: 5
  cluster:
    description:
      - The cluster's name in the token descriptions bcd-ansible writes (C(bcd_cluster_name), else the
        inventory host). With O(run), look for what an interrupted earlier run left behind.
      - 1 to 63 letters, digits, C(_), C(.), C(:) and C(-); another value is reported in RV(leftovers.msg).
    type: str
  run:
    description: This run's id; tokens of other runs of O(cluster) are leftovers. See O(cluster).
    type: str
  cluster_policies:
    description:
      - Also read the GPU operator's ClusterPolicies (RV(cluster_policies)), when C(bcd_nvidia_toolkit)
        is C(gpu-operator); other clusters have none to configure.
    type: bool
    default: false
  toolkit_daemonsets:
    description:
      - With O(cluster_policies) on a C(gpu-operator) cluster, also list the DaemonSets of every namespace
        this label selector selects (RV(toolkit_daemonsets)) - the GPU operator's toolkit DaemonSet, found
        by the gpu_stack role's C(gpu_stack_toolkit_daemonset_selector).
      - Omitted, they are not listed.
    type: str
  daemonset:
    description:
      - The rendered DaemonSet (the C(DaemonSet) of the C(objects) M(bcd.kubernetes.bcd_manifests) returns);
        ask the API server whether it admits a pod of it (RV(admission)).
    type: dict
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.control_plane
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Preflight - the control plane, the selected Nodes, Pod Security, leftovers
  bcd.kubernetes.bcd_preflight:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
    cluster: "{{ bcd_cluster_name | default(inventory_hostname) }}"
    run: "{{ adopt_run }}"
    cluster_policies: true
  register: preflight

- name: Refuse a selector that selects no Node
  ansible.builtin.assert:
    that: preflight.nodes.selected > 0
"""

RETURN = r"""
control_plane:
  description: What M(bcd.kubernetes.bcd_control_plane) returns (without O(bcd.kubernetes.bcd_control_plane#module:nodes)).
  returned: success
  type: dict
  contains:
    discovery:
      description: The gateway URL and TLS server name, the site and the join key's pin (no trust is taken from it).
      type: dict
      sample: {gateway_url: "https://gw.example:8443", gateway_name: gw.example, site: site-1, join_key_pin: "sha256/..."}
    pool:
      description: The pool (C(pools.get)).
      type: dict
    trust:
      description: The trust hosted-token nodes will land with (platform, tenant-controlled or tenant-owned).
      type: str
    warnings_text:
      description: The warnings issued (tenant-controlled nodes add no capacity; a pin that could not be checked).
      type: list
      elements: str
    pins_checked:
      description: The pins checked (C(join_encryption), C(join_signing), C(serving_ca)).
      type: list
      elements: str
nodes:
  description: What M(bcd.kubernetes.bcd_nodes_info) returns without O(bcd.kubernetes.bcd_nodes_info#module:wait).
  returned: success
  type: dict
  contains:
    nodes:
      description: One entry per selected Node, sorted by name - C(name), C(id), C(state), C(trust), C(reporting), C(conditions).
      type: list
      elements: dict
    selected:
      description: How many Nodes the selector selects.
      type: int
    reporting:
      description: How many of them report (their bcd node is adopting, ready or draining).
      type: int
    missing:
      description: The names of the selected Nodes that do not report.
      type: list
      elements: str
    to_join:
      description:
        - The names of the selected Nodes with no bcd node in the pool, or only one that left it (C(removed)) -
          those a join token is for. A Node that joined (adopting, ready, draining, offline) keeps its identity.
      type: list
      elements: str
    unhealthy:
      description:
        - C([{node, pod, why}]) for each selected Node whose bcd pod is not healthy - no pod, not Ready, an older
          pod template than the DaemonSet's, a container crash-looping or exited non-zero (its last exit quoted);
          C(pod) is null when there is none.
      type: list
      elements: dict
    failing:
      description: Node name -> why, for those of RV(nodes.unhealthy) whose pod fails in a way waiting does not heal.
      type: dict
    cluster:
      description: Where the cluster was reached - the kubeconfig file(s), the context and its server.
      type: str
pod_security:
  description: What M(bcd.kubernetes.bcd_pod_security) returns.
  returned: success
  type: dict
  contains:
    open_namespaces:
      description: The namespaces whose pods may mount host paths, sorted.
      type: list
      elements: str
    namespaces:
      description: The names of every namespace the cluster has, sorted.
      type: list
      elements: str
leftovers:
  description:
    - With O(cluster) and O(run), what a check-mode M(bcd.kubernetes.bcd_join_token) with
      C(state=absent), C(scope=stale) returns - what an interrupted earlier run left behind.
      Never a token value.
  returned: O(cluster) and O(run) given
  type: dict
  contains:
    failed:
      description: Whether it could not be found out (RV(leftovers.msg) says why).
      type: bool
    msg:
      description: Why it could not be found out.
      type: str
      returned: when failed
    revoked:
      description: Ids of the live join tokens other runs of O(cluster) minted (the clean-up revokes them).
      type: list
      elements: str
    secret_deleted:
      description: Whether the join-token Secret bcd-ansible made is there (the clean-up deletes it).
      type: bool
    stale:
      description: Those tokens - C(id), C(description), C(createdAt).
      type: list
      elements: dict
    lock:
      description:
        - The cluster's lock (the Lease C(<bcd_name>-ansible-lock) of M(bcd.kubernetes.bcd_lock)) when an
          earlier run left it behind - expired, or held by an C(ansible-playbook) process on this host that
          no longer runs - with C(lease), C(holder), C(until) (its expiry, UTC) and C(why). Taking the lock
          takes such a Lease over at once. Null when there is none, its holder may still run, or it could
          not be read.
      type: dict
cluster_policies:
  description:
    - With O(cluster_policies) and C(bcd_nvidia_toolkit) C(gpu-operator), the ClusterPolicies (C(nvidia.com/v1)) without C(metadata.managedFields);
      empty when the cluster has none or no such kind. Null when they could not be read (the
      gpu_stack role then reads them itself and fails there, naming the reason).
  returned: O(cluster_policies) and C(bcd_nvidia_toolkit) C(gpu-operator)
  type: list
  elements: dict
toolkit_daemonsets:
  description:
    - With O(toolkit_daemonsets) and RV(cluster_policies), the DaemonSets that selector selects, in every namespace.
      Null when they could not be listed (the gpu_stack role then lists them itself).
  returned: O(toolkit_daemonsets) and RV(cluster_policies) returned
  type: dict
  contains:
    selector:
      description: The label selector, O(toolkit_daemonsets) as given.
      type: str
    resources:
      description: The DaemonSets as C(kubernetes.core.k8s_info) returns them in its C(resources), without C(metadata.managedFields).
      type: list
      elements: dict
admission:
  description:
    - With O(daemonset), what M(bcd.kubernetes.bcd_admission) returns as C(admission) (C(probed),
      C(admitted), C(pod), C(node), C(refusal), C(note)), and C(deferred) - whether the caller asks
      again once the Namespace is applied. Not returned when no Node is selected.
  returned: O(daemonset) given and a Node selected
  type: dict
requests:
  description: How many requests the run made - C(control_plane), C(kubernetes).
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_admission import (
    describe,
    probe,
    refused_message,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import ControlPlaneError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_health import failing_pods, unhealthy_pods
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import (
    KubeError,
    path,
    selector,
    slim_node,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_lock import left_lock, lock_name
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    control_plane,
    inventory,
    kube,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_preflight import (
    Refusal,
    by_hostname,
    control_plane_calls,
    gather,
    judge_control_plane,
    judge_pod_security,
    list_namespaces,
    node_rows,
    short_of_requests,
    to_join,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_render import namespace as rendered_namespace
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import pod_side
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_token import leftovers

CLUSTER_POLICIES = "/apis/nvidia.com/v1/clusterpolicies"


def without_managed_fields(obj: dict) -> dict:
    """``obj`` (a ClusterPolicy, a DaemonSet) without its managedFields (what k8s_info would
    return, minus the noise)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def read_policies(k) -> list[dict] | None:
    """The ClusterPolicies; [] when the kind does not exist (no GPU operator: 404)."""
    try:
        return [without_managed_fields(p) for p in k.list(CLUSTER_POLICIES)]
    except KubeError as exc:
        if exc.status == 404:
            return []
        raise


def judge_nodes(out, inv) -> dict:
    """The selected Nodes and which of them report: bcd_nodes_info' result, with each Node's bcd pod
    judged (bcd_nodes_info O(pods)). Raises Refusal."""
    try:
        k8s_nodes = {n["metadata"]["name"]: n for n in out.take("k8s_nodes")}
    except KubeError as exc:
        raise Refusal(f"listing the selected Nodes: {exc}") from None
    try:
        known = by_hostname(out.take("cp_nodes"), set(k8s_nodes))
    except ControlPlaneError as exc:
        raise Refusal(f"listing the pool's nodes: {exc}") from None
    try:
        ds, revision, by_node = out.take("pods")
    except KubeError as exc:
        raise Refusal(f"listing the bcd pods: {exc}") from None
    rows = node_rows(k8s_nodes, known)
    missing = [r["name"] for r in rows if not r["reporting"]]
    unhealthy = unhealthy_pods(sorted(k8s_nodes), by_node, ds, revision)
    for u in unhealthy:
        row = next(r for r in rows if r["name"] == u["node"])
        if row["reporting"]:
            # a Node whose pod is not healthy is not, whatever the control plane says (its offline grace)
            row["why"] = f"reports for now, but {u['why']}"
    return {"nodes": rows, "selected": len(rows), "reporting": len(rows) - len(missing), "missing": missing,
            "to_join": to_join(rows), "unhealthy": unhealthy, "failing": failing_pods(sorted(k8s_nodes), by_node),
            "refused": {}, "polls": 1, "join_timeout": inv.bcd_join_timeout,
            "warnings_text": short_of_requests(inv, k8s_nodes)}


def admission(api, inv, daemonset: dict, nodes: dict, live: dict | None, namespaces: list[dict]) -> dict:
    """Whether the API server admits a pod of ``daemonset`` (bcd_admission's ``admission``), with
    ``deferred``: asked again once the Namespace is applied (it does not exist, or it refused and
    the rendered Namespace sets a label it lacks). Raises Refusal on a refusal that stands."""
    missing = nodes["missing"]
    node = missing[0] if missing else next((r["name"] for r in nodes["nodes"]), None)
    try:
        found = probe(api, daemonset, node=node, live=live, nodes=nodes["selected"], priority_class=inv.bcd_priority_class_name)
    except KubeError as exc:
        raise Refusal(f"asking the API server whether it admits bcd's pod (a dry-run create): {exc}") from None
    labels = next(((ns.get("metadata") or {}).get("labels") or {} for ns in namespaces
                   if (ns.get("metadata") or {}).get("name") == inv.bcd_namespace), {})
    want = rendered_namespace(inv)["metadata"]["labels"]
    pending = inv.bcd_create_namespace and any(labels.get(key) != v for key, v in want.items())
    found["deferred"] = not found["probed"] or bool(found["refusal"] and pending)
    if found["refusal"] and found["refusal"]["fatal"] and not found["deferred"]:
        raise Refusal(refused_message(inv.bcd_namespace, found), admission=found)
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": CONFIG_OPTION,
            "api_key": API_KEY_OPTION,
            **KUBE_OPTIONS,
            "gateway_timeout": {"type": "float", "default": 5},
            "cluster": {"type": "str"},
            "run": {"type": "str"},
            "cluster_policies": {"type": "bool", "default": False},
            "toolkit_daemonsets": {"type": "str"},
            "daemonset": {"type": "dict"},
        },
        required_together=[("cluster", "run")],
        supports_check_mode=True,
    )
    p = module.params
    inv = inventory(module, ("bcd_control_plane_url", "bcd_tenant", "bcd_pool"))
    # Each request gets its own client (made here, so a bad kubeconfig or CA file fails before
    # any thread starts): neither client counts its requests under a lock.
    cps = [control_plane(module, inv) for _client in range(4 if p["cluster"] else 3)]
    # only a GPU operator cluster has ClusterPolicies to configure (bcd_nvidia_toolkit gpu-operator)
    p["cluster_policies"] = p["cluster_policies"] and inv.bcd_nvidia_toolkit.preset == "gpu-operator"
    toolkit = p["toolkit_daemonsets"] if p["cluster_policies"] else None
    kubes = [kube(module, inv) for _client in range(3 + 2 * bool(p["cluster"]) + bool(p["cluster_policies"]) + bool(p["daemonset"])
                                                    + (toolkit is not None))]
    free_cps, free_kubes = list(cps), list(kubes)
    calls = control_plane_calls(free_cps.pop, inv, p["gateway_timeout"], nodes=True)
    k_nodes, k_ns = free_kubes.pop(), free_kubes.pop()
    calls["k8s_nodes"] = lambda: k_nodes.list(path("nodes"), {"labelSelector": selector(inv.bcd_node_selector) or None},
                                              keep=slim_node)
    calls["namespaces"] = lambda: list_namespaces(k_ns)
    k_pods = free_kubes.pop()
    calls["pods"] = lambda: pod_side(k_pods, inv.bcd_namespace, inv.bcd_name)
    if p["cluster"]:
        cp_left, k_left, k_lock = free_cps.pop(), free_kubes.pop(), free_kubes.pop()
        calls["leftovers"] = lambda: leftovers(cp_left, k_left, inv, p["cluster"], p["run"])
        calls["left_lock"] = lambda: left_lock(k_lock, inv.bcd_namespace, lock_name(inv.bcd_name))
    if p["cluster_policies"]:
        k_pol = free_kubes.pop()
        calls["cluster_policies"] = lambda: read_policies(k_pol)
    if toolkit is not None:
        k_tk = free_kubes.pop()
        calls["toolkit_daemonsets"] = lambda: [without_managed_fields(d) for d in
                                               k_tk.list(path("daemonsets"), {"labelSelector": toolkit or None})]
    if p["daemonset"]:
        k_ds = free_kubes.pop()
        calls["daemonset"] = lambda: k_ds.get(path("daemonsets", inv.bcd_name, inv.bcd_namespace))
    out = gather(calls)

    def fail(exc: Refusal) -> None:
        module.fail_json(msg=exc.msg, **exc.extra)

    try:
        cp_result = judge_control_plane(out, inv)
    except Refusal as exc:
        fail(exc)
    try:
        nodes = judge_nodes(out, inv)
    except Refusal as exc:
        fail(exc)
    nodes["cluster"] = k_nodes.source
    pod_security = None
    if nodes["selected"]:
        try:
            namespaces = out.take("namespaces")
        except KubeError as exc:
            fail(Refusal(f"Pod Security: cannot list the namespaces: {exc}"))
        try:
            pod_security = judge_pod_security(namespaces, inv)
        except Refusal as exc:
            fail(exc)
    asked = None
    if nodes["selected"] and p["daemonset"]:
        try:
            # after the reads: the pod is for a Node they found (their clients are free again)
            asked = admission(k_ds, inv, p["daemonset"], nodes, out.take("daemonset"), namespaces)
        except KubeError as exc:
            fail(Refusal(f"reading DaemonSet {inv.bcd_namespace}/{inv.bcd_name}: {exc}"))
        except Refusal as exc:
            fail(exc)
    # the warnings in the order the separate modules gave them
    for warning in cp_result["warnings_text"] + nodes.pop("warnings_text") + [(pod_security or {}).get("warning")]:
        if warning:
            module.warn(warning)
    if asked and asked["refusal"] and not asked["deferred"]:
        module.warn(f"could not foresee whether the API server admits bcd's pods: {describe(asked['refusal'])}")
    result = {"changed": False, "control_plane": cp_result, "nodes": nodes}
    if pod_security is not None:
        result["pod_security"] = {"open_namespaces": pod_security["open_namespaces"], "namespaces": pod_security["namespaces"]}
    else:
        # no Node selected: the caller refuses that first; the namespaces are still returned when read
        try:
            names = sorted((ns.get("metadata") or {}).get("name") for ns in out.take("namespaces"))
        except KubeError:
            names = []
        result["pod_security"] = {"open_namespaces": [], "namespaces": names}
    if p["cluster"]:
        found = out.take("leftovers")
        note = found.pop("note", None)
        if note:
            module.warn(note)
        try:
            found["lock"] = out.take("left_lock")
        except KubeError:
            found["lock"] = None  # not a failure here: taking the lock reads it again
        result["leftovers"] = found
    if p["cluster_policies"]:
        try:
            result["cluster_policies"] = out.take("cluster_policies")
        except KubeError:
            result["cluster_policies"] = None
    if toolkit is not None:
        try:
            result["toolkit_daemonsets"] = {"selector": toolkit, "resources": out.take("toolkit_daemonsets")}
        except KubeError:
            result["toolkit_daemonsets"] = None
    if asked is not None:
        result["admission"] = asked
    result["requests"] = {"control_plane": sum(c.requests for c in cps), "kubernetes": sum(k.requests for k in kubes)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
