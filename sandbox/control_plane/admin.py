"""The emulator's admin endpoint (plain HTTP on its own 127.0.0.1 port) and a client for it.

Every request needs ``Authorization: Bearer <admin token>`` (``<dir>/control-plane/admin-token``,
0600). JSON in, JSON out; errors are ``{"error": {"code", "message"}}`` like the API's.

=========  =====================  ===========================================================
Method     Path                   What
=========  =====================  ===========================================================
GET        /healthz               ``{"ok": true, "joiner": bool}``
GET        /faults                the faults (faults.py has the shape), ``outageRemaining``
PUT        /faults                replace the faults with the body
PATCH      /faults                change only the members in the body (null removes one)
DELETE     /faults                no faults
GET        /counters              requests per procedure, responses per status, joins
DELETE     /counters              reset the counters (also ``POST /counters/reset``)
GET        /joins                 the last join attempt of every bcd pod: node, pod, joined,
                                  reason, message, nodeId, at
POST       /nodes/forget          ``{"hostnames": [...]}`` (absent: every node): the control
                                  plane forgets those nodes, as if their hosts' /var/lib/bcd
                                  were wiped; their Node label goes and their pods join again.
                                  Answers ``{"forgotten": [hostname, ...]}``. For tests.
POST       /nodes/allocation      ``{"hostname": "<Node name>", "allocation": "alloc_..." | null}``:
                                  the node holds that allocation (a workload runs on it), or
                                  none; nodes.remove refuses such a node without ``force``.
                                  Answers ``{"hostname", "allocation"}``; 404 if unknown.
POST       /tokens/expire         ``{"id": "jt_..."}``: the token expires now (time passing,
                                  for tests). Answers ``{"id", "expiresAt"}``; 404 if unknown.
POST       /nodes/conditions      ``{"hostname", "type", "status", "reason"?, "message"?}``:
                                  set the condition ``type`` of that node as ``nodes.list``
                                  shows it (bcd's own, such as ``ForeignGpuExposure``;
                                  ``status`` "True", "False" or "Unknown"), or with ``status``
                                  null clear it. Answers ``{"hostname", "changed",
                                  "conditions"}``; 404 if the control plane has no such node.
POST       /pods/backoff          ``{"uid": "<pod uid>", "seconds": 0 to 3600}``: that bcd
                                  pod's failed join is retried only ``seconds`` from now, as a
                                  kubelet's back-off at its 5-minute cap (the sandbox's own
                                  stops at 32 s). Answers ``{"uid", "failures", "seconds"}``;
                                  404 if that pod is not backing off a failed join.
=========  =====================  ===========================================================

The client: ``Admin.for_sandbox(sdir)`` (reads ``state.json`` and the admin token).
"""

from __future__ import annotations

import hmac
import json
import urllib.error
import urllib.request
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sandbox.control_plane.app import rfc3339
from sandbox.control_plane.config import Paths
from sandbox.control_plane.faults import FaultError, Faults


class _NotFound(Exception):
    pass


def _error(code: str, message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def build_admin_app(token: str, faults: Faults, store, joiner) -> Starlette:
    """The admin app. ``store``: the API's Store (same thread); ``joiner``: JoinSimulator or None."""

    def authorized(request: Request) -> bool:
        scheme, _, value = (request.headers.get("authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode("utf-8", "replace"), token.encode())

    async def body(request: Request):
        raw = await request.body()
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            raise FaultError("the body is not JSON") from None

    def guarded(handler):
        async def wrapped(request: Request) -> JSONResponse:
            if not authorized(request):
                return _error("UNAUTHORIZED", "the admin token is required (Authorization: Bearer <admin token>)", 401)
            try:
                return JSONResponse(await handler(request))
            except FaultError as exc:
                return _error("INVALID_INPUT", str(exc), 400)
            except _NotFound as exc:
                return _error("NOT_FOUND", str(exc), 404)
        return wrapped

    async def healthz(request):
        return {"ok": True, "joiner": joiner is not None}

    async def faults_endpoint(request):
        if request.method == "GET":
            return faults.get()
        if request.method == "PUT":
            return faults.replace(await body(request))
        if request.method == "PATCH":
            return faults.patch(await body(request))
        return faults.clear()

    async def counters(request):
        if request.method in ("DELETE", "POST"):
            faults.reset_counters()
        return faults.counters()

    async def joins(request):
        return {"joins": joiner.joins() if joiner else []}

    async def forget(request):
        doc = await body(request)
        if not isinstance(doc, dict) or set(doc) - {"hostnames"}:
            raise FaultError('the body must be {"hostnames": [...]} or {}')
        hostnames = doc.get("hostnames")
        if hostnames is not None and (not isinstance(hostnames, list) or not all(isinstance(h, str) for h in hostnames)):
            raise FaultError("hostnames: must be a list of Node names")
        gone = store.forget_nodes(hostnames)
        if joiner is not None and gone:
            await run_in_threadpool(joiner.forgotten, gone)
        return {"forgotten": sorted(n["hostname"] for n in gone)}

    async def allocation(request):
        doc = await body(request)
        if (not isinstance(doc, dict) or set(doc) != {"hostname", "allocation"} or not isinstance(doc["hostname"], str)
                or not (doc["allocation"] is None or (isinstance(doc["allocation"], str) and doc["allocation"]))):
            raise FaultError('the body must be {"hostname": "<Node name>", "allocation": "<id>" or null}')
        node = store.set_allocation(doc["hostname"], doc["allocation"])
        if node is None:
            raise _NotFound(f"no node {doc['hostname']!r}")
        return {"hostname": node["hostname"], "allocation": node["allocation"]}

    async def expire(request):
        doc = await body(request)
        if not isinstance(doc, dict) or set(doc) != {"id"} or not isinstance(doc["id"], str):
            raise FaultError('the body must be {"id": "<join token id>"}')
        row = store.expire_token(doc["id"])
        if row is None:
            raise _NotFound(f"no join token {doc['id']!r}")
        return {"id": row["id"], "expiresAt": rfc3339(row["expires_at"])}

    async def node_condition(request):
        doc = await body(request)
        allowed = {"hostname", "type", "status", "reason", "message"}
        if not isinstance(doc, dict) or set(doc) - allowed or not {"hostname", "type", "status"} <= set(doc):
            raise FaultError('the body must be {"hostname", "type", "status", "reason"?, "message"?}')
        for key in ("hostname", "type"):
            if not isinstance(doc[key], str) or not doc[key]:
                raise FaultError(f"{key}: must be a non-empty string")
        if doc["status"] not in (None, "True", "False", "Unknown"):
            raise FaultError('status: must be "True", "False", "Unknown" or null (clear the condition)')
        for key in ("reason", "message"):
            if doc.get(key) is not None and not isinstance(doc[key], str):
                raise FaultError(f"{key}: must be a string")
        condition = None
        if doc["status"] is not None:
            condition = {"type": doc["type"], "status": doc["status"], "reason": doc.get("reason") or "",
                         "message": doc.get("message") or ""}
        node = store.node_by_hostname(doc["hostname"])
        if node is None:
            raise _NotFound(f"no node {doc['hostname']!r} (it has not joined)")
        changed = store.set_condition(doc["hostname"], doc["type"], condition)
        node = store.node_by_hostname(doc["hostname"])
        return {"hostname": doc["hostname"], "changed": changed,
                "conditions": [node["conditions"][k] for k in sorted(node["conditions"])]}

    async def backoff(request):
        doc = await body(request)
        if not isinstance(doc, dict) or set(doc) != {"uid", "seconds"} or not isinstance(doc["uid"], str):
            raise FaultError('the body must be {"uid": "<pod uid>", "seconds": <0 to 3600>}')
        seconds = doc["seconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 3600:
            raise FaultError("seconds: must be a number from 0 to 3600")
        held = joiner.hold_backoff(doc["uid"], float(seconds)) if joiner is not None else None
        if held is None:
            raise _NotFound(f"no pod {doc['uid']!r} is backing off a failed join")
        return held

    async def not_found(request, exc):
        return _error("NOT_FOUND", f"no route {request.method} {request.url.path}", 404)

    return Starlette(routes=[
        Route("/healthz", guarded(healthz), methods=["GET"]),
        Route("/faults", guarded(faults_endpoint), methods=["GET", "PUT", "PATCH", "DELETE"]),
        Route("/counters", guarded(counters), methods=["GET", "DELETE"]),
        Route("/counters/reset", guarded(counters), methods=["POST"]),
        Route("/joins", guarded(joins), methods=["GET"]),
        Route("/nodes/forget", guarded(forget), methods=["POST"]),
        Route("/nodes/allocation", guarded(allocation), methods=["POST"]),
        Route("/tokens/expire", guarded(expire), methods=["POST"]),
        Route("/nodes/conditions", guarded(node_condition), methods=["POST"]),
        Route("/pods/backoff", guarded(backoff), methods=["POST"]),
    ], exception_handlers={404: not_found, 405: not_found})


class AdminError(RuntimeError):
    pass


class Admin:
    """Client of the admin endpoint at ``url`` with bearer ``token``."""

    def __init__(self, url: str, token: str, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout

    @classmethod
    def for_sandbox(cls, sdir: Path) -> Admin:
        paths = Paths(Path(sdir))
        state = paths.read_state()
        if not state:
            raise AdminError(f"no control-plane emulator state at {paths.state_file} (is it running?)")
        return cls(state["admin_url"], (paths.home / "admin-token").read_text().strip())

    def request(self, method: str, path: str, body: object = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={  # noqa: S310 - our loopback URL
            "Authorization": f"Bearer {self._token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - our loopback URL
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise AdminError(f"{method} {path}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from None

    def faults(self) -> dict:
        return self.request("GET", "/faults")

    def set_faults(self, spec: dict) -> dict:
        return self.request("PUT", "/faults", spec)

    def patch_faults(self, spec: dict) -> dict:
        return self.request("PATCH", "/faults", spec)

    def clear_faults(self) -> dict:
        return self.request("DELETE", "/faults")

    def counters(self) -> dict:
        return self.request("GET", "/counters")

    def reset_counters(self) -> dict:
        return self.request("DELETE", "/counters")

    def joins(self) -> list[dict]:
        return self.request("GET", "/joins")["joins"]

    def expire_token(self, token_id: str) -> dict:
        return self.request("POST", "/tokens/expire", {"id": token_id})

    def set_condition(self, hostname: str, ctype: str, status: str | None, reason: str = "", message: str = "") -> dict:
        """Set (``status`` None: clear) condition ``ctype`` of node ``hostname`` as nodes.list shows it."""
        return self.request("POST", "/nodes/conditions", {"hostname": hostname, "type": ctype, "status": status,
                                                          "reason": reason, "message": message})

    def set_allocation(self, hostname: str, allocation: str | None) -> dict:
        return self.request("POST", "/nodes/allocation", {"hostname": hostname, "allocation": allocation})

    def hold_backoff(self, uid: str, seconds: float) -> dict:
        """Retry pod ``uid``'s failed join no sooner than ``seconds`` from now (as a kubelet at its
        5-minute back-off cap would); AdminError (404) when that pod is not backing off."""
        return self.request("POST", "/pods/backoff", {"uid": uid, "seconds": seconds})

    def forget_nodes(self, hostnames: list[str] | None = None) -> list[str]:
        body = {} if hostnames is None else {"hostnames": hostnames}
        return self.request("POST", "/nodes/forget", body)["forgotten"]
