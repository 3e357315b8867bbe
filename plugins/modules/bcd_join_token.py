#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_join_token: mint a hosted join token into its Secret, or revoke it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_join_token
short_description: Mint a hosted join token straight into its Secret, or revoke it and delete the Secret
version_added: 1.0.0
description:
  - C(state=present) mints a multi-use join token with C(hosted=kubernetes) (C(joinTokens.create);
    max uses = O(max_uses) unless C(bcd_token_max_uses); TTL C(bcd_token_ttl); idempotency key
    C(bcd_token_key) or one per cluster and run; a description naming the cluster and the run)
    and writes it only into the Secret C(bcd_join_token_secret) in C(bcd_namespace) (created with
    a plain create or replace, never a client-side apply, so no last-applied annotation holds
    it), and, with C(bcd_join_secret_out), into a new file created 0600 (the bcd DaemonSet specification, section Render the
    manifests and the join token; Apply).
  - The token never leaves this module, it is in no result, log or diff. If the Secret cannot
    be written, the token is revoked before the module fails.
  - C(state=absent) revokes this run's tokens (O(scope=run)) or every earlier run's still
    unrevoked tokens for this cluster (O(scope=stale), found by their description after a run
    that died before it could clean up) and deletes the Secret when bcd-ansible made it
    (the bcd DaemonSet specification, section Revoke the token and delete the Secret).
  - Control-plane calls retry 429, 502, 503, 504 and connection failures with backoff and jitter,
    honouring Retry-After, within C(bcd_control_plane_timeout).
options:
  state:
    description: C(present) mints and writes the Secret; C(absent) revokes and deletes it.
    type: str
    choices: [present, absent]
    default: present
  cluster:
    description: The cluster's name, written into the token's description (C(bcd_cluster_name) or the inventory host).
    type: str
    required: true
  run:
    description: This run's id, written into the token's description.
    type: str
    required: true
  playbook:
    description: The playbook minting the token, for its description.
    type: str
    default: adopt-cluster
  max_uses:
    description:
      - How many nodes the token admits (the selected nodes that do not report yet); C(bcd_token_max_uses) wins when it
        is larger. A C(bcd_token_max_uses) below it is refused before anything is minted, naming the variable.
    type: int
  scope:
    description: With C(state=absent), C(run) revokes this run's tokens, C(stale) other runs' tokens of this cluster.
    type: str
    choices: [run, stale]
    default: run
  delete_secret:
    description: With C(state=absent), also delete the join-token Secret when bcd-ansible made it.
    type: bool
    default: true
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.control_plane
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: Mints nothing, revokes nothing, writes nothing; C(changed) says whether it would.
  diff_mode:
    support: partial
    details: With O(state=absent), the tokens revoked (id and description) and the Secret deleted (its name, never its data).
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Mint the join token into its Secret
  bcd.kubernetes.bcd_join_token:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
    cluster: "{{ bcd_cluster_name | default(inventory_hostname) }}"
    run: "{{ run_id }}"
    max_uses: 3
  no_log: true

- name: Revoke it and delete the Secret
  bcd.kubernetes.bcd_join_token:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
    cluster: "{{ bcd_cluster_name | default(inventory_hostname) }}"
    run: "{{ run_id }}"
    state: absent
  no_log: true
"""

RETURN = r"""
id:
  description: The minted token's id (not a secret).
  returned: state=present, not in check mode
  type: str
max_uses:
  description: How many nodes the token admits.
  returned: state=present
  type: int
expires_at:
  description: When the token stops admitting nodes (RFC 3339).
  returned: state=present, not in check mode
  type: str
secret:
  description: Where the token is, C({namespace, name, key}).
  returned: always
  type: dict
revoked:
  description: Ids of the tokens revoked now.
  returned: state=absent
  type: list
  elements: str
secret_deleted:
  description: Whether the Secret was deleted.
  returned: state=absent
  type: bool
uses:
  description:
    - Per token revoked now, its id and how many nodes joined with it (the control plane's C(uses), read after the
      revocation, so it is final); V(null) when it could not be read. Empty in check mode.
  returned: state=absent
  type: dict
  sample: {"tok-5f2c": 2}
"""

import base64
import datetime as dt
import json

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import ControlPlaneError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import Kube, KubeError, path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    control_plane,
    inventory,
    kube,
    write_new_file,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_render import FIELD_MANAGER
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_token import (
    TOKEN_ID_ANNOTATION,
    bad_name,
    delete_secret,
    description,
    find_tokens,
    max_uses_refusal,
    ours,
    secret_path,
)


def secret_manifest(inv, token: str, answer: dict) -> dict:
    s = inv.bcd_join_token_secret
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": s.name,
            "namespace": inv.bcd_namespace,
            "labels": {"app.kubernetes.io/name": "bcd", "app.kubernetes.io/instance": inv.bcd_name,
                       "app.kubernetes.io/managed-by": FIELD_MANAGER},
            "annotations": {TOKEN_ID_ANNOTATION: str(answer.get("id")), "bcd.dev/join-token-expires-at": str(answer.get("expiresAt"))},
        },
        "type": "Opaque",
        "data": {s.key: base64.b64encode(token.encode("utf-8")).decode("ascii")},
    }


def write_secret(kube: Kube, inv, manifest: dict) -> None:
    """Create the Secret, or replace the one bcd-ansible made before; never someone else's."""
    name = f"{inv.bcd_namespace}/{inv.bcd_join_token_secret.name}"
    existing = kube.get(secret_path(inv))
    if existing is None:
        try:
            kube.create(path("secrets", namespace=inv.bcd_namespace), manifest, field_manager=FIELD_MANAGER)
            return
        except KubeError as exc:
            if exc.status != 409:
                raise KubeError(f"creating Secret {name}: {exc}") from None
            existing = kube.get(secret_path(inv))
            if existing is None:
                raise
    if not ours(existing):
        raise KubeError(f"Secret {name} exists and bcd-ansible did not make it (no label app.kubernetes.io/managed-by={FIELD_MANAGER}); "
                        "delete it or set bcd_join_token_secret.name to another name")
    body = json.loads(json.dumps(manifest))
    body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
    kube.replace(secret_path(inv), body, field_manager=FIELD_MANAGER)


def present(module, inv, cp, core) -> None:
    p = module.params
    max_uses = inv.bcd_token_max_uses or p["max_uses"]
    where = {"namespace": inv.bcd_namespace, "name": inv.bcd_join_token_secret.name, "key": inv.bcd_join_token_secret.key}
    if inv.bcd_token_max_uses and p["max_uses"] and inv.bcd_token_max_uses < p["max_uses"]:
        # known before minting: such a token would turn the last nodes away (TokenExhausted)
        module.fail_json(msg=max_uses_refusal(inv.bcd_token_max_uses, p["max_uses"]), secret=where)
    if not max_uses or not 1 <= max_uses <= 10000:
        module.fail_json(msg=f"bcd_token_max_uses: {max_uses!r} is not 1 to 10000 (the nodes to join)", secret=where)
    if module.check_mode:
        module.exit_json(changed=True, max_uses=max_uses, secret=where,
                         msg=f"would mint a token for {max_uses} node(s) into Secret {where['namespace']}/{where['name']}")
    key = inv.bcd_token_key or f"{p['cluster']}-{p['run']}"[:128]
    try:
        answer = cp.create_token(inv.bcd_tenant, inv.bcd_pool, max_uses, inv.bcd_token_ttl, key,
                                 description(p["cluster"], p["run"], p["playbook"]))
    except ControlPlaneError as exc:
        hint = ""
        if exc.code == "CONFLICT" and inv.bcd_token_key:
            hint = (f"; bcd_token_key {inv.bcd_token_key!r} was used before with other parameters (an idempotency key "
                    "retries one request only): unset it or choose a new key")
        module.fail_json(msg=f"minting the join token: {exc}{hint}", secret=where)
    token = answer.get("token")
    if not isinstance(token, str) or not token:
        module.fail_json(msg="minting the join token: the control plane returned no token", secret=where)
    module.no_log_values.add(token)
    module.no_log_values.add(base64.b64encode(token.encode("utf-8")).decode("ascii"))
    manifest = secret_manifest(inv, token, answer)
    try:
        write_secret(core, inv, manifest)
        if inv.bcd_join_secret_out:
            write_new_file(inv.bcd_join_secret_out, (json.dumps(manifest, indent=2) + "\n").encode("utf-8"), 0o600)
    except (KubeError, OSError) as exc:
        cleanup = []
        try:
            cp.revoke_token(inv.bcd_tenant, answer["id"])
            cleanup.append(f"token {answer['id']} revoked")
        except ControlPlaneError as rexc:
            cleanup.append(f"REVOKING token {answer['id']} FAILED ({rexc}); revoke it by hand")
        try:
            deleted, _note = delete_secret(core, inv, False)
            if deleted:
                cleanup.append("Secret deleted")
        except KubeError as dexc:
            cleanup.append(f"deleting the Secret failed ({dexc})")
        what = "bcd_join_secret_out: " if isinstance(exc, OSError) else ""
        module.fail_json(msg=f"{what}writing the join token failed: {exc}; " + ", ".join(cleanup), secret=where)
    module.exit_json(changed=True, id=answer.get("id"), max_uses=answer.get("maxUses", max_uses), uses=answer.get("uses"),
                     expires_at=answer.get("expiresAt"), secret=where, cp_requests=cp.requests)


def usable(tok: dict) -> str:
    """What a token that could not be revoked still allows: its uses left and its time left."""
    try:
        left = int(tok.get("maxUses")) - int(tok.get("uses") or 0)
        uses = f"{left} of {tok.get('maxUses')} use(s) left"
    except (TypeError, ValueError):
        uses = "its uses left unknown"
    expires = tok.get("expiresAt")
    try:
        at = dt.datetime.fromisoformat(str(expires).replace("Z", "+00:00"))
        minutes = max(0, int((at - dt.datetime.now(dt.UTC)).total_seconds() // 60))
        until = f"until {expires} ({minutes // 60} h {minutes % 60} min left)"
    except ValueError:
        until = f"until {expires or 'its TTL (bcd_token_ttl)'}"
    return f"it stays usable to join a node: {uses}, {until}, when it lapses"


def absent(module, inv, cp, core) -> None:
    p = module.params
    where = {"namespace": inv.bcd_namespace, "name": inv.bcd_join_token_secret.name, "key": inv.bcd_join_token_secret.key}
    revoked, failures, found = [], [], []
    uses: dict = {}
    try:
        found = find_tokens(cp, inv, p["cluster"], p["run"], p["scope"])
    except ControlPlaneError as exc:
        failures.append(f"listing tokens: {exc}")
    for tok in found:
        if module.check_mode:
            revoked.append(tok["id"])
            continue
        try:
            cp.revoke_token(inv.bcd_tenant, tok["id"])
            revoked.append(tok["id"])
        except ControlPlaneError as exc:
            failures.append(f"revoking token {tok['id']}: {exc}; {usable(tok)}")
            continue
        # read once revoked, so no node can spend a use after the count: the control plane's own
        # record of how many nodes joined with it
        try:
            uses[tok["id"]] = int(cp.get_token(inv.bcd_tenant, tok["id"]).get("uses") or 0)
        except (ControlPlaneError, AttributeError, TypeError, ValueError):  # an answer not shaped as documented
            uses[tok["id"]] = None
    secret_deleted, note = False, None
    if p["delete_secret"]:
        try:
            secret_deleted, note = delete_secret(core, inv, module.check_mode)
        except KubeError as exc:
            failures.append(str(exc))
    # the diff names what goes, never a token value (the Secret's data is not read into it)
    described = {t["id"]: t.get("description") or "" for t in found}
    diff = {"before": "".join(f"join token {i} ({described[i]}): live\n" for i in revoked)
            + (f"Secret {where['namespace']}/{where['name']} (holds the join token under key {where['key']})\n" if secret_deleted else ""),
            "after": "".join(f"join token {i} ({described[i]}): revoked\n" for i in revoked)}
    result = {"changed": bool(revoked or secret_deleted), "revoked": revoked, "secret_deleted": secret_deleted, "secret": where,
              "uses": uses, "diff": diff,
              "stale": [{"id": t["id"], "description": t.get("description"), "createdAt": t.get("createdAt")} for t in found]
              if p["scope"] == "stale" else [], "cp_requests": cp.requests}
    if note:
        module.warn(note)
    if failures:
        module.fail_json(msg="cleaning up the join token failed: " + "; ".join(failures), **result)
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": CONFIG_OPTION,
            "api_key": API_KEY_OPTION,
            **KUBE_OPTIONS,
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "cluster": {"type": "str", "required": True},
            "run": {"type": "str", "required": True},
            "playbook": {"type": "str", "default": "adopt-cluster"},
            "max_uses": {"type": "int"},
            "scope": {"type": "str", "choices": ["run", "stale"], "default": "run"},
            "delete_secret": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    inv = inventory(module, ("bcd_control_plane_url", "bcd_tenant", "bcd_pool"))
    for opt in ("cluster", "run"):
        error = bad_name(opt, module.params[opt])
        if error:
            module.fail_json(msg=error)
    cp = control_plane(module, inv)
    core = kube(module, inv)
    try:
        if module.params["state"] == "present":
            present(module, inv, cp, core)
        else:
            absent(module, inv, cp, core)
    except KubeError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
