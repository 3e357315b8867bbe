"""The node side of the emulator: what bcd itself calls at the gateway (control-plane-api.md,
"The node side"), for bcd running on real nodes (the kind test bed's stand-in image).

* ``POST <gateway>/v1/join``: the join token authenticates (no API key). The body names the node
  (``hostname``, the Kubernetes Node name) and carries the parts of the node's ``config.toml``
  that must match this control plane (site, gateway URL, pins, ``join.hosted`` and
  ``join.server``): a mismatch is refused before any token use is spent. Then one use of the
  token is spent exactly as the join simulator spends it (``Store.spend_and_join``); a node the
  control plane already knows gets its identity back without spending. The answer is the node
  document (a JSON text), signed with the JoinService signing key (ES256, base64url r || s), the
  signing key's public JWK, and the node's credential.
* ``POST <gateway>/v1/report``: ``Authorization: Bearer <node credential>``; the node reports that
  it runs. A node that reports again after ``offline`` gets its previous state back; a node
  without a report for ``offline_grace_seconds`` turns ``offline`` (:meth:`NodeSide.sweep`).

Refusals answer 403 with ``{"error": {"code": "FORBIDDEN", "reason": R, "message": M}}``, R one of
the join simulator's reasons (``ConfigMismatch``, ``TokenInvalid``, ``TokenRevoked``,
``TokenExpired``, ``TokenExhausted``, ``Refused``), and set the node condition ``JoinRefused`` on
a node the control plane knows, as the simulator does. The token and the credential are never
logged.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from sandbox.control_plane.config import Seed
from sandbox.control_plane.db import Store
from sandbox.control_plane.faults import Faults
from sandbox.control_plane.join import MAX_TOKEN, Refusal, config_problems
from sandbox.control_plane.pki import Pki

log = logging.getLogger("bcd.cp.gateway")


class NodeReports:
    """When each node that reports by itself (a real bcd) last reported, by hostname (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last: dict[str, float] = {}

    def seen(self, hostname: str, now: float | None = None) -> None:
        with self.lock:
            self.last[hostname] = time.monotonic() if now is None else now

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return dict(self.last)

    def forget(self, hostnames) -> None:
        with self.lock:
            for h in hostnames:
                self.last.pop(h, None)


class GatewayError(Exception):
    def __init__(self, status: int, code: str, message: str, reason: str | None = None):
        self.status, self.code, self.message, self.reason = status, code, message, reason
        super().__init__(f"{code}: {message}")

    def body(self) -> dict:
        err = {"code": self.code, "message": self.message}
        if self.reason:
            err["reason"] = self.reason
        return {"error": err}


def _rfc3339(t: float | None) -> str | None:
    from sandbox.control_plane.app import rfc3339

    return rfc3339(t)


class NodeSide:
    """The gateway's join and report endpoints over the emulator's Store."""

    def __init__(self, store: Store, pki: Pki, seed: Seed, faults: Faults, control_plane_url: str, gateway_url: str,
                 reports: NodeReports):
        self.store = store
        self.pki = pki
        self.seed = seed
        self.faults = faults
        self.control_plane_url = control_plane_url.rstrip("/")
        self.gateway_url = gateway_url.rstrip("/")
        self.reports = reports

    def join(self, body: object) -> dict:
        if not isinstance(body, dict):
            raise GatewayError(400, "INVALID_INPUT", "the body must be a JSON object")
        token, hostname, config = body.get("token"), body.get("hostname"), body.get("config")
        if not isinstance(hostname, str) or not 1 <= len(hostname) <= 253:
            raise GatewayError(400, "INVALID_INPUT", "hostname: must be the Node's name (1 to 253 characters)")
        if not isinstance(token, str) or not token:
            raise GatewayError(400, "INVALID_INPUT", "token: is required")
        if not isinstance(config, dict):
            raise GatewayError(400, "INVALID_INPUT", "config: must be the node's config.toml as an object")
        try:
            node, rejoined = self._join(token, hostname, config)
        except Refusal as refusal:
            self.faults.count_join("refused", refusal.reason)
            log.info("join of %s (bcd on the node) refused: %s", hostname, refusal)
            if self.store.set_condition(hostname, "JoinRefused", {
                    "type": "JoinRefused", "status": "True", "reason": refusal.reason, "message": refusal.message}):
                log.info("node %s: condition JoinRefused %s", hostname, refusal.reason)
            raise GatewayError(403, "FORBIDDEN", refusal.message, refusal.reason) from None
        self.faults.count_join("rejoined" if rejoined else "joined")
        self.store.set_condition(hostname, "JoinRefused", None)
        self.reports.seen(hostname)
        how = "joined before; no token spent" if rejoined else f"spent one use of {node['token_id']}"
        log.info("%s (bcd on the node): joined as %s (%s); %s", hostname, node["id"], node["trust"], how)
        doc = json.dumps({"id": node["id"], "hostname": node["hostname"], "pool": node["pool"], "site": node["site"],
                          "state": node["state"], "trust": node["trust"], "joinedAt": _rfc3339(node["joined_at"])},
                         separators=(",", ":"), sort_keys=True)
        return {"nodeDocument": doc, "signature": self.pki.sign(doc.encode()),
                "signingKey": self.pki.join_signing_key(), "credential": self.pki.credential_for(node["id"]),
                "rejoined": rejoined}

    def _join(self, token: str, hostname: str, config: dict) -> tuple[dict, bool]:
        reason = self.faults.join_refusal(hostname)
        if reason is not None:
            raise Refusal("Refused", reason)
        problems = config_problems(config, self.pki, self.seed, self.gateway_url, self.control_plane_url)
        if problems:
            raise Refusal("ConfigMismatch", "config.toml: " + "; ".join(problems))
        if len(token) > MAX_TOKEN:
            raise Refusal("TokenInvalid", "the token is over 4 KiB")
        token_id = self.pki.token_id_of(token.strip())
        if token_id is None:
            raise Refusal("TokenInvalid", "the token file holds no join token this control plane issued")
        known = self.store.node_by_hostname(hostname)
        rejoined = bool(known and known["state"] != "removed")
        node, why = self.store.spend_and_join(token_id, hostname, self.seed.site_id, self.seed.hosted_trust())
        if node is None:
            row = self.store.token(token_id) or {}
            detail = {
                "TokenUnknown": "the control plane has no such token",
                "TokenRevoked": f"join token {token_id} was revoked",
                "TokenExpired": f"join token {token_id} expired",
                "TokenExhausted": f"join token {token_id} has no use left ({row.get('uses')} of {row.get('max_uses')} spent)",
            }[why]
            raise Refusal("TokenInvalid" if why == "TokenUnknown" else why, detail)
        return node, rejoined

    def report(self, authorization: str | None, body: object) -> dict:
        scheme, _, value = (authorization or "").partition(" ")
        node_id = self.pki.node_of_credential(value.strip()) if scheme.lower() == "bearer" else None
        if node_id is None:
            raise GatewayError(401, "UNAUTHORIZED", "a node credential from bcd join is required "
                                                   "(Authorization: Bearer <credential>)")
        if not isinstance(body, dict) or body.get("id") != node_id:
            raise GatewayError(400, "INVALID_INPUT", "id: must be the id of the credential's node")
        node = self.store.node(node_id)
        if node is None or node["state"] == "removed":
            raise GatewayError(404, "NOT_FOUND", f"node {node_id} is {'removed' if node else 'unknown'}: join again "
                                                 "with a new token", "NodeRemoved")
        host = node["hostname"]
        self.reports.seen(host)
        if node["state"] == "offline" and self.store.set_offline(host, False):
            log.info("node %s (%s) reports again", host, node_id)
        if "Reporting" in node["conditions"]:
            self.store.set_condition(host, "Reporting", None)
        node = self.store.node(node_id) or node
        return {"id": node_id, "state": node["state"], "trust": node["trust"]}

    def sweep(self, now: float | None = None) -> None:
        """Turn ``offline`` (condition ``Reporting`` "False") each node that reports by itself and
        has not for ``offline_grace_seconds`` (or the fault ``offlineGraceSeconds``); the server calls
        this every second."""
        now = time.monotonic() if now is None else now
        grace = self.faults.offline_grace(self.seed.offline_grace_seconds)
        for host, last in self.reports.snapshot().items():
            if now - last < grace:
                continue
            node = self.store.node_by_hostname(host)
            if node is None or node["state"] in ("removed", "offline"):
                continue
            self.store.set_offline(host, True)
            self.store.set_condition(host, "Reporting", {
                "type": "Reporting", "status": "False", "reason": "NoReport",
                "message": f"bcd on {host} has not reported for {grace:g}s"})
            log.info("node %s (%s) is offline: no report from bcd", host, node["id"])
