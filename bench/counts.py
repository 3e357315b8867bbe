"""Counting requests: Kubernetes API requests from the API server's audit log, control-plane
requests from the emulator's counters.

The sandbox's audit log (``SANDBOX_AUDIT=1``: ``<dir>/logs/audit.log``, JSON lines, metadata
level, node lease renewals left out) has one event per request and stage; with the stage
RequestReceived omitted, a request is the set of events with one ``auditID``. The playbooks,
their modules, kubectl and the floor scripts all act as the sandbox's admin user; the
control-plane emulator's join simulator uses the same kubeconfig but its own User-Agent
(``sandbox.control_plane.join.USER_AGENT``), so its requests are left out.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from sandbox.control_plane.join import USER_AGENT as EMULATOR_USER_AGENT

ADMIN_USER = "kubernetes-admin"


class AuditLog:
    """The audit log at ``path``, read from a byte offset (:meth:`mark`) to its end."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def mark(self) -> int:
        """The current end of the log (an offset for :meth:`requests`)."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def events(self, since: int):
        """Every event written after offset ``since``."""
        with open(self.path, "rb") as handle:
            handle.seek(since)
            for line in handle:
                if not line.endswith(b"\n"):
                    break  # an event still being written: not ours (the command has ended)
                try:
                    yield json.loads(line)
                except ValueError:
                    continue

    def requests(self, since: int, user: str = ADMIN_USER, exclude_agents: tuple[str, ...] = (EMULATOR_USER_AGENT,)) -> dict:
        """Requests made by ``user`` after ``since``, but for those with an excluded User-Agent.

        Returns ``{"total": n, "by_agent": {agent: n}, "by_verb": {verb: n}}``; the agent is
        its first word (``kubectl/v1.36.3``, ``OpenAPI-Generator/37.0.2/python``).
        """
        seen: dict[str, tuple[str, str]] = {}
        for event in self.events(since):
            if (event.get("user") or {}).get("username") != user:
                continue
            agent = event.get("userAgent") or "-"
            if agent.startswith(exclude_agents):
                continue
            seen.setdefault(event.get("auditID"), (agent.split(" ")[0], event.get("verb") or "-"))
        return {"total": len(seen), "by_agent": dict(Counter(a for a, _ in seen.values())),
                "by_verb": dict(Counter(v for _, v in seen.values()))}


def cp_requests(counters: dict) -> dict:
    """The emulator's counters (``Admin.counters()``) reduced to ``{"total", "by_procedure"}``.

    The emulator counts every API request it served (discovery included), not the joins its
    simulator makes on bcd's behalf."""
    by = dict(counters.get("requests") or {})
    return {"total": sum(by.values()), "by_procedure": by}
