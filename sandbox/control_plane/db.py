"""The emulator's state in SQLite (``<dir>/control-plane.db``): join tokens and nodes.

No secret is stored: a token is derived from its id (pki.Pki.token_for), the API key lives in
its own 0600 file. Times are Unix seconds (float); the API formats them as RFC 3339 UTC.

Each thread opens its own :class:`Store` (sqlite3 connections are not shared across threads);
WAL mode and a busy timeout let the HTTP server and the join simulator write concurrently.
Spending a use is one conditional UPDATE inside the transaction that records the node, so two
joins can never overspend a token.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS join_tokens (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    pool TEXT NOT NULL,
    hosted TEXT NOT NULL,
    max_uses INTEGER NOT NULL,
    uses INTEGER NOT NULL DEFAULT 0,
    ttl_seconds INTEGER NOT NULL,
    idem_key TEXT NOT NULL,
    description TEXT,
    params TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    revoked_at REAL,
    UNIQUE (tenant, idem_key)
);
CREATE TABLE IF NOT EXISTS nodes (
    id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    pool TEXT NOT NULL,
    site TEXT NOT NULL,
    state TEXT NOT NULL,
    prev_state TEXT,
    trust TEXT NOT NULL,
    token_id TEXT,
    joined_at REAL NOT NULL,
    conditions TEXT NOT NULL DEFAULT '{}',
    allocation TEXT,
    removed_at REAL
);
"""

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_ulid_lock = threading.Lock()
_ulid_last = [0, 0]


def ulid() -> str:
    """A lower-case ULID (26 characters): sortable by creation, monotonic within a millisecond."""
    with _ulid_lock:
        ms = int(time.time() * 1000)
        if ms <= _ulid_last[0]:
            ms = _ulid_last[0]
            rand = _ulid_last[1] + 1
        else:
            rand = secrets.randbits(80)
        _ulid_last[:] = [ms, rand]
    value = (ms << 80) | (rand & ((1 << 80) - 1))
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26)))


class Store:
    """One SQLite connection to ``path`` (create the schema when missing)."""

    def __init__(self, path: Path):
        new = not path.exists()
        self.conn = sqlite3.connect(str(path), isolation_level=None, timeout=10.0, check_same_thread=False)
        if new:
            os.chmod(path, 0o600)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA busy_timeout=10000")
        self.conn.executescript(SCHEMA)
        # A database an older emulator made lacks the columns nodes.remove added.
        have = {r["name"] for r in self.conn.execute("PRAGMA table_info(nodes)")}
        for column in ("allocation TEXT", "removed_at REAL"):
            if column.split()[0] not in have:
                self.conn.execute(f"ALTER TABLE nodes ADD COLUMN {column}")

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def tx(self):
        """A write transaction (BEGIN IMMEDIATE ... COMMIT, ROLLBACK on error)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # -- join tokens ---------------------------------------------------------------------------

    def token(self, token_id: str) -> dict | None:
        row = self.conn.execute("SELECT * FROM join_tokens WHERE id = ?", (token_id,)).fetchone()
        return dict(row) if row else None

    def create_token(self, tenant: str, pool: str, hosted: str, max_uses: int, ttl_seconds: int, key: str,
                     description: str | None) -> tuple[dict, bool]:
        """The token of idempotency ``key``: (row, created). Raises ``KeyConflict`` when ``key``
        was used with other parameters."""
        params = json.dumps({"pool": pool, "hosted": hosted, "maxUses": max_uses, "ttlSeconds": ttl_seconds,
                             "description": description}, sort_keys=True)
        with self.tx() as conn:
            row = conn.execute("SELECT * FROM join_tokens WHERE tenant = ? AND idem_key = ?", (tenant, key)).fetchone()
            if row:
                if row["params"] != params:
                    raise KeyConflict(dict(row), json.loads(params))
                return dict(row), False
            now = time.time()
            token_id = "jt_" + ulid()
            conn.execute(
                "INSERT INTO join_tokens (id, tenant, pool, hosted, max_uses, uses, ttl_seconds, idem_key, description,"
                " params, created_at, expires_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?)",
                (token_id, tenant, pool, hosted, max_uses, ttl_seconds, key, description, params, now, now + ttl_seconds),
            )
            return dict(conn.execute("SELECT * FROM join_tokens WHERE id = ?", (token_id,)).fetchone()), True

    def revoke_token(self, tenant: str, token_id: str) -> dict | None:
        """Revoke (first revocation time wins); None when no such token of ``tenant``."""
        with self.tx() as conn:
            conn.execute("UPDATE join_tokens SET revoked_at = ? WHERE id = ? AND tenant = ? AND revoked_at IS NULL",
                         (time.time(), token_id, tenant))
            row = conn.execute("SELECT * FROM join_tokens WHERE id = ? AND tenant = ?", (token_id, tenant)).fetchone()
            return dict(row) if row else None

    def expire_token(self, token_id: str) -> dict | None:
        """Make the token expire now (a test hook standing in for time passing); None when unknown."""
        with self.tx() as conn:
            conn.execute("UPDATE join_tokens SET expires_at = MIN(expires_at, ?) WHERE id = ?", (time.time(), token_id))
            row = conn.execute("SELECT * FROM join_tokens WHERE id = ?", (token_id,)).fetchone()
            return dict(row) if row else None

    def list_tokens(self, tenant: str, pool: str | None, before: str | None, limit: int) -> list[dict]:
        """Newest first (ids are ULIDs), ids < ``before``; at most ``limit`` rows."""
        sql = "SELECT * FROM join_tokens WHERE tenant = ?"
        args: list = [tenant]
        if pool is not None:
            sql += " AND pool = ?"
            args.append(pool)
        if before is not None:
            sql += " AND id < ?"
            args.append(before)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(limit)
        return [dict(r) for r in self.conn.execute(sql, args)]

    # -- nodes ---------------------------------------------------------------------------------

    def node_by_hostname(self, hostname: str) -> dict | None:
        row = self.conn.execute("SELECT * FROM nodes WHERE hostname = ?", (hostname,)).fetchone()
        return _node(row) if row else None

    def nodes(self) -> list[dict]:
        return [_node(r) for r in self.conn.execute("SELECT * FROM nodes ORDER BY id")]

    def list_nodes(self, tenant: str, pool: str | None, after: str | None, limit: int) -> list[dict]:
        """Oldest first (ids are ULIDs), ids > ``after``; at most ``limit`` rows."""
        sql = "SELECT * FROM nodes WHERE tenant = ?"
        args: list = [tenant]
        if pool is not None:
            sql += " AND pool = ?"
            args.append(pool)
        if after is not None:
            sql += " AND id > ?"
            args.append(after)
        sql += " ORDER BY id LIMIT ?"
        args.append(limit)
        return [_node(r) for r in self.conn.execute(sql, args)]

    def spend_and_join(self, token_id: str, hostname: str, site: str, trust: str) -> tuple[dict | None, str | None]:
        """Spend one use of ``token_id`` and record ``hostname`` as an ``adopting`` node, atomically.

        Returns (node, None), or (None, reason) with reason ``TokenUnknown``, ``TokenRevoked``,
        ``TokenExpired`` or ``TokenExhausted``. A hostname already known returns (node, None)
        without spending; one that was removed (nodes.remove) joins anew, with a new id.
        """
        with self.tx() as conn:
            known = conn.execute("SELECT * FROM nodes WHERE hostname = ?", (hostname,)).fetchone()
            if known and known["state"] != "removed":
                return _node(known), None
            row = conn.execute("SELECT * FROM join_tokens WHERE id = ?", (token_id,)).fetchone()
            now = time.time()
            if row is None:
                return None, "TokenUnknown"
            if row["revoked_at"] is not None:
                return None, "TokenRevoked"
            if row["expires_at"] <= now:
                return None, "TokenExpired"
            cur = conn.execute(
                "UPDATE join_tokens SET uses = uses + 1 WHERE id = ? AND uses < max_uses AND revoked_at IS NULL"
                " AND expires_at > ?", (token_id, now))
            if cur.rowcount != 1:
                return None, "TokenExhausted"
            if known:
                conn.execute("DELETE FROM nodes WHERE id = ?", (known["id"],))
            node_id = "node_" + ulid()
            conn.execute(
                "INSERT INTO nodes (id, hostname, tenant, pool, site, state, trust, token_id, joined_at, conditions)"
                " VALUES (?, ?, ?, ?, ?, 'adopting', ?, ?, ?, '{}')",
                (node_id, hostname, row["tenant"], row["pool"], site, trust, token_id, now),
            )
            return _node(conn.execute("SELECT * FROM nodes WHERE id = ?", (node_id,)).fetchone()), None

    def set_condition(self, hostname: str, ctype: str, condition: dict | None) -> bool:
        """Set (or with None, clear) condition ``ctype`` of the node ``hostname``; True when it changed."""
        with self.tx() as conn:
            row = conn.execute("SELECT conditions FROM nodes WHERE hostname = ?", (hostname,)).fetchone()
            if row is None:
                return False
            conds = json.loads(row["conditions"])
            before = conds.get(ctype)
            if condition is None:
                conds.pop(ctype, None)
            else:
                conds[ctype] = condition
            if before == conds.get(ctype):
                return False
            conn.execute("UPDATE nodes SET conditions = ? WHERE hostname = ?", (json.dumps(conds, sort_keys=True), hostname))
            return True

    def set_offline(self, hostname: str, offline: bool) -> bool:
        """Mark the node offline (remembering its state) or back to the state it had; True on change."""
        with self.tx() as conn:
            row = conn.execute("SELECT state, prev_state FROM nodes WHERE hostname = ?", (hostname,)).fetchone()
            if row is None or row["state"] == "removed":
                return False
            if offline and row["state"] != "offline":
                conn.execute("UPDATE nodes SET prev_state = state, state = 'offline' WHERE hostname = ?", (hostname,))
                return True
            if not offline and row["state"] == "offline":
                conn.execute("UPDATE nodes SET state = COALESCE(prev_state, 'adopting'), prev_state = NULL"
                             " WHERE hostname = ?", (hostname,))
                return True
            return False

    def node(self, node_id: str) -> dict | None:
        row = self.conn.execute("SELECT * FROM nodes WHERE id = ?", (node_id,)).fetchone()
        return _node(row) if row else None

    def remove_node(self, tenant: str, node_id: str, force: bool) -> tuple[dict | None, str | None]:
        """nodes.remove: (node, None) once removed (again: the first removal stands), or (node or
        None, reason) with reason ``NotFound`` or ``Allocated`` (it holds an allocation, no ``force``)."""
        with self.tx() as conn:
            row = conn.execute("SELECT * FROM nodes WHERE id = ? AND tenant = ?", (node_id, tenant)).fetchone()
            if row is None:
                return None, "NotFound"
            if row["state"] == "removed":
                return _node(row), None
            if row["allocation"] and not force:
                return _node(row), "Allocated"
            conn.execute("UPDATE nodes SET state = 'removed', prev_state = NULL, allocation = NULL, removed_at = ?"
                         " WHERE id = ?", (time.time(), node_id))
            return _node(conn.execute("SELECT * FROM nodes WHERE id = ?", (node_id,)).fetchone()), None

    def set_allocation(self, hostname: str, allocation: str | None) -> dict | None:
        """Give the node ``hostname`` an allocation (a test hook: a workload holds it), or none; None when unknown."""
        with self.tx() as conn:
            conn.execute("UPDATE nodes SET allocation = ? WHERE hostname = ?", (allocation, hostname))
            row = conn.execute("SELECT * FROM nodes WHERE hostname = ?", (hostname,)).fetchone()
            return _node(row) if row else None

    def forget_nodes(self, hostnames: list[str] | None) -> list[dict]:
        """Delete the nodes ``hostnames`` (all with None); return what was deleted."""
        with self.tx() as conn:
            if hostnames is None:
                rows = conn.execute("SELECT * FROM nodes").fetchall()
            else:
                marks = ",".join("?" * len(hostnames))
                rows = conn.execute(f"SELECT * FROM nodes WHERE hostname IN ({marks})", hostnames).fetchall()  # noqa: S608 - placeholders only
            for row in rows:
                conn.execute("DELETE FROM nodes WHERE id = ?", (row["id"],))
            return [_node(r) for r in rows]


class KeyConflict(Exception):
    """joinTokens.create with an idempotency key already used with other parameters."""

    def __init__(self, existing: dict, requested: dict):
        self.existing = existing
        old = json.loads(existing["params"])
        self.differs = sorted(k for k in requested if requested[k] != old.get(k))
        super().__init__("idempotency key reused with other parameters")


def _node(row) -> dict:
    node = dict(row)
    node["conditions"] = json.loads(node["conditions"] or "{}")
    return node
