"""Join tokens and their Secret as bcd-ansible names them: which tokens a run minted (by the
description it gives them), where the Secret is, whether bcd-ansible made it, and what an
interrupted earlier run left behind.

Used by module bcd_join_token (mint, revoke) and by module bcd_preflight (the read-only look for
an earlier run's leftovers). A token value is never read here: tokens are listed by id and
description only, and the Secret's data is not looked at.
"""

from __future__ import annotations

import re

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import ControlPlaneError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_render import FIELD_MANAGER

DESCRIPTION_RE = re.compile(r"^bcd-ansible cluster=(?P<cluster>\S+) run=(?P<run>\S+)")
# what the options cluster and run of bcd_join_token (and bcd_preflight) accept
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")


def max_uses_refusal(max_uses: int, to_join: int) -> str:
    """The refusal of a ``bcd_token_max_uses`` below the number of nodes to join."""
    return (f"bcd_token_max_uses is {max_uses}, below the {to_join} node(s) to join: the token would turn the last "
            f"{to_join - max_uses} away (TokenExhausted). No token was minted. Set bcd_token_max_uses to at least "
            f"{to_join}, or unset it (the default is the number of nodes to join).")


def description(cluster: str, run: str, playbook: str) -> str:
    return f"bcd-ansible cluster={cluster} run={run} playbook={playbook}"[:256]


def bad_name(option: str, value: str) -> str | None:
    """The error for an option ``cluster`` or ``run`` that is not a valid name, or None."""
    if NAME_RE.fullmatch(value or ""):
        return None
    return f"{option}: {value!r} must be 1 to 63 letters, digits, '_', '.', ':' and '-'"


def secret_path(inv) -> str:
    return path("secrets", inv.bcd_join_token_secret.name, inv.bcd_namespace)


def secret_where(inv) -> dict:
    """Where the token is: ``{namespace, name, key}``."""
    return {"namespace": inv.bcd_namespace, "name": inv.bcd_join_token_secret.name, "key": inv.bcd_join_token_secret.key}


def ours(secret: dict | None) -> bool:
    labels = ((secret or {}).get("metadata") or {}).get("labels") or {}
    return labels.get("app.kubernetes.io/managed-by") == FIELD_MANAGER


# the Secret's annotation naming the token it holds (a token is never read to know which it is)
TOKEN_ID_ANNOTATION = "bcd.dev/join-token-id"  # noqa: S105 - an annotation name
_UNREAD = object()


def delete_secret(kube, inv, check: bool = False, secret=_UNREAD, token_id: str | None = None) -> tuple[bool, str | None]:
    """Delete the join-token Secret when bcd-ansible made it: ``(deleted, note)``, the note
    saying why a Secret there was left in place. The one delete of that Secret, for
    bcd_join_token and for the clean-up of an interrupted run (callback left_behind).

    ``secret``: the Secret as the caller has just read it (None: not there), else it is read.
    ``token_id``: delete it only when it holds that token or names none (its token-id annotation).
    ``check``: say what would be deleted, delete nothing. Raises KubeError."""
    if secret is _UNREAD:
        secret = kube.get(secret_path(inv))
    name = f"{inv.bcd_namespace}/{inv.bcd_join_token_secret.name}"
    if secret is None:
        return False, None
    if not ours(secret):
        return False, f"Secret {name} was not made by bcd-ansible; left in place"
    annotated = ((secret.get("metadata") or {}).get("annotations") or {}).get(TOKEN_ID_ANNOTATION)
    if token_id and annotated not in (None, token_id):
        return False, f"Secret {name} holds join token {annotated}, not {token_id}; left in place"
    if not check:
        kube.delete(secret_path(inv))
    return True, None


def find_tokens(cp, inv, cluster: str, run: str, scope: str) -> list[dict]:
    """The live (unrevoked) tokens of ``cluster`` that bcd-ansible minted: this run's
    (``scope`` ``run``) or every other run's (``scope`` ``stale``). Raises ControlPlaneError."""
    found = []
    for tok in cp.list_tokens(inv.bcd_tenant, inv.bcd_pool):
        m = DESCRIPTION_RE.match(tok.get("description") or "")
        if not m or m["cluster"] != cluster or tok.get("revokedAt"):
            continue
        if (scope == "run") == (m["run"] == run):
            found.append(tok)
    return found


def leftovers(cp, core, inv, cluster: str, run: str) -> dict:
    """What an interrupted earlier run on ``cluster`` left behind, read only: the shape
    ``bcd_join_token state=absent scope=stale`` returns in check mode (``revoked``: ids of the
    live tokens other runs minted; ``secret_deleted``: whether the join-token Secret bcd-ansible
    made is there; ``stale``; ``note``, a warning for a Secret of that name bcd-ansible did not
    make), with ``failed`` and ``msg`` when it could not find out. Never raises."""
    where = secret_where(inv)
    for option, value in (("cluster", cluster), ("run", run)):
        error = bad_name(option, value)
        if error:
            return {"failed": True, "msg": error, "revoked": [], "secret_deleted": False, "secret": where, "stale": []}
    failures, found = [], []
    try:
        found = find_tokens(cp, inv, cluster, run, "stale")
    except ControlPlaneError as exc:
        failures.append(f"listing tokens: {exc}")
    secret_there, note = False, None
    try:
        secret = core.get(secret_path(inv))
        if secret is not None:
            if ours(secret):
                secret_there = True
            else:
                note = f"Secret {where['namespace']}/{where['name']} was not made by bcd-ansible; left in place"
    except KubeError as exc:
        failures.append(str(exc))
    out = {"failed": bool(failures), "revoked": [t["id"] for t in found], "secret_deleted": secret_there, "secret": where,
           "stale": [{"id": t["id"], "description": t.get("description"), "createdAt": t.get("createdAt")} for t in found],
           "note": note}
    if failures:
        out["msg"] = "cleaning up the join token failed: " + "; ".join(failures)
    return out
