#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_manifests: render bcd's Namespace, ConfigMap and DaemonSet."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_manifests
short_description: Render the bcd DaemonSet manifests from the inventory
version_added: 1.0.0
description:
  - Validates every C(bcd_*) variable with the inventory model and renders, in apply order, the
    Namespace (labelled C(pod-security.kubernetes.io/enforce=privileged); only when
    C(bcd_create_namespace)), the ConfigMap (C(config.toml) from the Jinja2 template, and the
    pinned JoinService key when C(bcd_join_encryption_jwk) is set) and the DaemonSet, as the bcd
    DaemonSet specification (sections What you get, Host mounts, Apply, API access, GPU isolation, Generate the manifests
    from TypeScript) describes them. Details the specification leaves open are in C(docs/bcd-contract.yml).
  - The same inputs always render byte-identical output. Only a change of C(config.toml) moves
    the pod annotation C(bcd.dev/config-sha256).
  - Mints no token and touches no cluster. With O(dest), writes the objects to a file, one C(v1)
    C(List) in JSON, or with C(bcd_render_format=yaml) one YAML document per object (keys in
    render order, multi-line strings such as C(config.toml) as literal block scalars).
  - Invalid input fails before anything is written, with one C(INVALID_CONFIG:) line per problem
    naming the variable and the rule.
options:
  template:
    description:
      - Path of the C(config.toml) Jinja2 template (C(templates/config.toml.j2)).
    type: path
    required: true
  required:
    description:
      - Variables this playbook needs beyond the model's own required ones (for example C(bcd_control_plane_url),
        C(bcd_tenant) and C(bcd_pool) to mint a join token); a missing one is INVALID_CONFIG.
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
  reach_cluster:
    description:
      - Choose the cluster (RV(kube)) and read its API server's C(/version) before anything else runs,
        so that a cluster that cannot be reached fails here, naming the kubeconfig file(s), the
        context and its server, instead of in a later task that names none of them. A kubeconfig
        or a context that does not exist is refused, naming the variable and the contexts there.
      - A connection failure is tried 3 times, 2 s apart (each request waits up to 10 s).
    type: bool
    default: false
  new_files:
    description:
      - Variables naming files this playbook will create; each must not exist yet (checked on the host that runs
        the module, before anything is changed).
    type: list
    elements: str
    default: []
  diff_kinds:
    description:
      - Kinds (C(ConfigMap), C(DaemonSet)) the caller knows are absent from the cluster, because
        their namespace does not exist yet, so no server-side dry run can show them. In diff
        mode each rendered object of these kinds is returned as a diff from nothing to the
        object (YAML), and C(changed) is true (they would be created).
    type: list
    elements: str
    default: []
  host:
    description:
      - The inventory host this render is for. The cluster's name (RV(names.cluster)) is
        C(bcd_cluster_name), else this.
    type: str
  run:
    description:
      - This run's id (RV(names.run)). Default a new one, the UTC time and a random number.
    type: str
  dest:
    description:
      - The file to write the render to (mode 0644; the manifests hold no secret), in
        C(bcd_render_format) (C(json), the default, or C(yaml)).
      - A file that already holds exactly this render is left as it is (not changed). A file with
        other content is refused, unless C(bcd_render_force) is true (then it is replaced whole).
      - Default C(bcd_render_out) of O(config), which the C(bcd.kubernetes.bcd_inventory) lookup makes
        absolute against the directory C(ansible-playbook) runs in (a module runs in the playbook's
        directory, so a relative O(dest) would be taken against that one instead).
    type: path
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.api_key_unused
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: In check mode O(dest) is not written; C(changed) says whether it would be.
  diff_mode:
    support: partial
    details: Only for O(diff_kinds).
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Render the manifests
  bcd.kubernetes.bcd_manifests:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    template: "{{ playbook_dir }}/../templates/config.toml.j2"
  register: render

- name: Render them to a file for GitOps
  bcd.kubernetes.bcd_manifests:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    template: "{{ playbook_dir }}/../templates/config.toml.j2"
    dest: /srv/gitops/bcd.json
"""

RETURN = r"""
config:
  description: Every C(bcd_*) variable, validated and normalised (never C(bcd_api_key)).
  returned: success
  type: dict
label_selector:
  description: C(bcd_node_selector) as a Kubernetes label selector; empty selects every node.
  returned: success
  type: str
objects:
  description: The objects in apply order (Namespace when created, ConfigMap, DaemonSet).
  returned: success
  type: list
  elements: dict
namespace:
  description: The Namespace object, or null when C(bcd_create_namespace) is false.
  returned: success
  type: dict
configmap:
  description: The ConfigMap object.
  returned: success
  type: dict
daemonset:
  description: The DaemonSet object.
  returned: success
  type: dict
config_sha256:
  description: SHA-256 (hex) of C(config.toml), as in the pod annotation C(bcd.dev/config-sha256).
  returned: success
  type: str
names:
  description:
    - The names this run derives from the inventory, made here once so that no task builds them again.
  returned: success
  type: dict
  contains:
    cluster:
      description: The cluster's name, C(bcd_cluster_name), else O(host) (null without either).
      type: str
      sample: gpu-east
    run:
      description: This run's id (O(run), else a new one); the join token's description and the lock's holder carry it.
      type: str
      sample: 20261202T001500Z-3735928559
    lock:
      description: The name of the cluster's lock, a Lease in C(bcd_namespace) (M(bcd.kubernetes.bcd_lock)).
      type: str
      sample: bcd-ansible-lock
    started_at:
      description: When this render ran (UTC, ISO 8601), the run's start in its reports.
      type: str
      sample: "2026-12-02T00:15:00Z"
cluster:
  description: Where the cluster was reached - the kubeconfig file(s), the context and its server.
  returned: when O(reach_cluster) is true
  type: str
  sample: kubeconfig /home/ops/.kube/gpu-east.yaml, context gpu-east, server https://10.0.0.1:6443
kube:
  description:
    - The cluster every later task of the run is given (C(bcd_kubeconfig), C(bcd_kube_context)), chosen once as
      kubernetes.core chooses it - C(bcd_kubeconfig) and C(bcd_kube_context), else C(K8S_AUTH_KUBECONFIG) and
      C(K8S_AUTH_CONTEXT), else C(KUBECONFIG), else C(~/.kube/config) and its current context - and which of
      these chose each. C(kubeconfig) and C(context) are null for the in-cluster service account.
  returned: when the cluster was reached
  type: dict
  sample: {kubeconfig: /home/ops/.kube/config, context: gpu-east, server: "https://10.0.0.1:6443",
           kubeconfig_from: KUBECONFIG, context_from: K8S_AUTH_CONTEXT}
dest:
  description: The file written (or that would be, in check mode), absolute.
  returned: when O(dest) or C(bcd_render_out) is set
  type: str
format:
  description: The format of O(dest), C(json) or C(yaml) (C(bcd_render_format)).
  returned: when O(dest) is set
  type: str
"""

import datetime
import secrets

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_lock import lock_name
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    inventory,
    label_selector,
    reach,
    refuse_existing,
    refuse_missing,
    replace_file,
    write_new_file,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_render import (
    CONFIG_HASH_ANNOTATION,
    as_list,
    dumps,
    dumps_yaml,
    render,
)


def names(inv, host: str | None, run: str | None) -> dict:
    """The names a run derives from the inventory: the cluster's, this run's id, the lock's."""
    now = datetime.datetime.now(datetime.UTC)
    return {
        "cluster": inv.bcd_cluster_name or host or None,
        "run": run or f"{now:%Y%m%dT%H%M%SZ}-{secrets.randbelow(2**32)}",
        "lock": lock_name(inv.bcd_name),
        "started_at": f"{now:%Y-%m-%dT%H:%M:%SZ}",
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": CONFIG_OPTION,
            # accepted so that the action group's module_defaults apply; this module calls no control plane
            "api_key": API_KEY_OPTION,
            "host": {"type": "str"},
            "run": {"type": "str"},
            "template": {"type": "path", "required": True},
            "dest": {"type": "path"},
            "required": {"type": "list", "elements": "str", "default": []},
            "new_files": {"type": "list", "elements": "str", "default": []},
            "existing_files": {"type": "list", "elements": "str", "default": []},
            "diff_kinds": {"type": "list", "elements": "str", "default": []},
            "reach_cluster": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    inv = inventory(module, tuple(module.params["required"]))
    refuse_existing(module, inv, module.params["new_files"])
    refuse_missing(module, inv, module.params["existing_files"])
    reached = reach(module, inv.bcd_kubeconfig, inv.bcd_kube_context) if module.params["reach_cluster"] else None
    try:
        with open(module.params["template"], encoding="utf-8") as handle:
            template_text = handle.read()
    except OSError as exc:
        module.fail_json(msg=f"cannot read the config.toml template {module.params['template']}: {exc.strerror}")
    try:
        objects = render(inv, template_text)
    except Exception as exc:  # noqa: BLE001 - a template error must not become a traceback
        module.fail_json(msg=f"rendering config.toml failed: {type(exc).__name__}: {exc}")
    by_kind = {o["kind"]: o for o in objects}
    ds = by_kind["DaemonSet"]
    result = {
        "changed": False,
        "config": inv.public(),
        "label_selector": label_selector(inv),
        "configmap_name": inv.configmap_name,
        "objects": objects,
        "namespace": by_kind.get("Namespace"),
        "configmap": by_kind["ConfigMap"],
        "daemonset": ds,
        "config_sha256": ds["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION],
        "names": names(inv, module.params["host"], module.params["run"]),
    }
    if reached:
        result.update(reached)
    preview = [o for o in objects if o["kind"] in module.params["diff_kinds"]]
    if preview:
        result["changed"] = True
        if module._diff:
            result["diff"] = [{
                "before": "", "before_header": f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']} (absent)",
                "after": dumps_yaml([o]), "after_header": f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']} (would be created)",
            } for o in preview]
    dest = module.params["dest"] or inv.bcd_render_out
    if dest:
        if inv.bcd_render_format == "yaml":
            data = dumps_yaml(objects).encode("utf-8")
        else:
            data = dumps(as_list(objects)).encode("utf-8")
        result["dest"] = dest
        result["format"] = inv.bcd_render_format
        try:
            with open(dest, "rb") as existing:
                same = existing.read() == data
        except FileNotFoundError:
            same = None
        except OSError as exc:
            module.fail_json(msg=f"bcd_render_out: cannot read {dest}: {exc.strerror}", dest=dest)
        if same is False and not inv.bcd_render_force:
            module.fail_json(msg=f"bcd_render_out: {dest} exists with other content; give a new file, or set "
                                 "bcd_render_force: true to replace it", dest=dest)
        if not same:
            result["changed"] = True
            if not module.check_mode:
                try:
                    if same is None:
                        write_new_file(dest, data, 0o644)
                    else:
                        replace_file(dest, data, 0o644)
                except FileExistsError:
                    module.fail_json(msg=f"bcd_render_out: {dest} appeared while rendering; give a new file", dest=dest)
                except OSError as exc:
                    module.fail_json(msg=f"bcd_render_out: cannot write {dest}: {exc.strerror}", dest=dest)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
