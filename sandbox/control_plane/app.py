"""The emulator's HTTPS API: control-plane-api.md, every procedure with its bounds and errors.

Routes, under the base path ``/compute`` (so clients must keep the base path of
``bcd_control_plane_url``):

* ``GET <base>/.well-known/better-compute``: discovery, no auth.
* ``POST <base>/rpc/<procedure>``: ``Authorization: Bearer <API key>``, a JSON object body.
* ``POST /v1/join`` and ``POST /v1/report`` at the gateway URL (the same listener, no base path):
  the node side, what bcd itself calls (``gateway.py``).

Errors are ``{"error": {"code", "message"}}`` with the doc's statuses: INVALID_INPUT 400 (a body
that is not a JSON object, an unknown field, a wrong type, a value out of bounds, a bad cursor),
UNAUTHORIZED 401 (no or a wrong API key), FORBIDDEN 403 (a tenant the key does not act for),
NOT_FOUND 404 (no such procedure, pool, token, node or route), CONFLICT 409 (an idempotency key
reused with other parameters, or nodes.remove of a node holding an allocation without force), RATE_LIMITED 429 and UNAVAILABLE 503 (fault injection, with
Retry-After), INTERNAL 500. Checks run in that order: route, auth, body, fields, tenant, objects.

The access log has method, path, status and duration: never a header or a body.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import hmac
import json
import logging
import time
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sandbox.control_plane.config import BASE_PATH, Seed
from sandbox.control_plane.db import KeyConflict, Store
from sandbox.control_plane.faults import ERROR_STATUSES, Faults
from sandbox.control_plane.pki import Pki

log = logging.getLogger("bcd.cp")
access_log = logging.getLogger("bcd.cp.access")

STATUS = {"INVALID_INPUT": 400, "UNAUTHORIZED": 401, "FORBIDDEN": 403, "NOT_FOUND": 404, "CONFLICT": 409,
          "RATE_LIMITED": 429, "UNAVAILABLE": 503, "INTERNAL": 500}
MAX_BODY = 64 * 1024
WELL_KNOWN = "/.well-known/better-compute"
# The node side (gateway.py), at the gateway URL's root, and their counter names.
NODE_PATHS = {"/v1/join": "node.join", "/v1/report": "node.report"}


class ApiError(Exception):
    def __init__(self, code: str, message: str):
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


def error_response(code: str, message: str, status: int | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status or STATUS[code],
                        headers=headers)


def rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- validation -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    kind: str                      # "str", "int" or "bool"
    required: bool = True
    lo: int = 1                    # str: min length; int: min value
    hi: int = 128                  # str: max length; int: max value
    choices: tuple[str, ...] = ()


ID = Field("str")
OPT_ID = Field("str", required=False)
CURSOR = Field("str", required=False, lo=1, hi=1024)
LIMIT = Field("int", required=False, lo=1, hi=500)

SPECS: dict[str, dict[str, Field]] = {
    "joinTokens.create": {
        "tenant": ID, "pool": ID, "hosted": Field("str", choices=("kubernetes",)),
        "maxUses": Field("int", lo=1, hi=10000), "ttlSeconds": Field("int", lo=60, hi=86400),
        "key": Field("str", lo=1, hi=128), "description": Field("str", required=False, lo=0, hi=256),
    },
    "joinTokens.get": {"tenant": ID, "id": ID},
    "joinTokens.list": {"tenant": ID, "pool": OPT_ID, "cursor": CURSOR, "limit": LIMIT},
    "joinTokens.revoke": {"tenant": ID, "id": ID},
    "nodes.list": {"tenant": ID, "pool": OPT_ID, "cursor": CURSOR, "limit": LIMIT},
    "nodes.remove": {"tenant": ID, "id": ID, "force": Field("bool", required=False)},
    "pools.get": {"tenant": ID, "id": ID},
}


def check_body(procedure: str, body: object) -> dict:
    """The body's fields, checked against the procedure's spec (optional nulls dropped)."""
    if not isinstance(body, dict):
        raise ApiError("INVALID_INPUT", "the body must be a JSON object")
    spec = SPECS[procedure]
    problems = []
    unknown = sorted(set(body) - set(spec))
    if unknown:
        problems.append(f"unknown field(s) {', '.join(unknown)} (known: {', '.join(spec)})")
    out = {}
    for name, field in spec.items():
        value = body.get(name)
        if value is None:
            if field.required:
                problems.append(f"{name}: is required")
            continue
        if field.kind == "bool":
            if not isinstance(value, bool):
                problems.append(f"{name}: must be true or false")
            else:
                out[name] = value
        elif field.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(f"{name}: must be an integer from {field.lo} to {field.hi}")
            elif not field.lo <= value <= field.hi:
                problems.append(f"{name}: must be from {field.lo} to {field.hi}, not {value}")
            else:
                out[name] = value
        else:
            if not isinstance(value, str):
                problems.append(f"{name}: must be a string")
            elif field.choices and value not in field.choices:
                problems.append(f"{name}: must be {' or '.join(json.dumps(c) for c in field.choices)}")
            elif not field.lo <= len(value) <= field.hi:
                problems.append(f"{name}: must be {field.lo} to {field.hi} characters long, not {len(value)}")
            else:
                out[name] = value
    if problems:
        raise ApiError("INVALID_INPUT", "; ".join(problems))
    return out


def encode_cursor(procedure: str, key: str) -> str:
    raw = json.dumps({"p": procedure, "k": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(procedure: str, cursor: str) -> str:
    try:
        doc = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(doc, dict) and doc.get("p") == procedure and isinstance(doc.get("k"), str):
            return doc["k"]
    except (ValueError, binascii.Error):
        pass
    raise ApiError("INVALID_INPUT", f"cursor: is not a cursor {procedure} returned")


# -- the API --------------------------------------------------------------------------------------


class Api:
    """The procedures, over one Store, for the seed's tenant and pool."""

    def __init__(self, store: Store, pki: Pki, seed: Seed, gateway_url: str, node_side=None):
        self.store = store
        self.pki = pki
        self.seed = seed
        self.gateway_url = gateway_url
        self.node_side = node_side  # gateway.NodeSide: the node side's endpoints, when served

    def discovery(self) -> dict:
        doc = {"gateway": {"url": self.gateway_url, "name": self.seed.gateway_name}, "site": self.seed.site_id,
               "joinKey": self.pki.join_key()}
        if self.seed.publish_join_signing_key:
            doc["joinSigningKey"] = self.pki.join_signing_key()
        return doc

    def authorized(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(value.strip().encode("utf-8", "replace"), self.pki.api_key.encode())

    def _tenant(self, body: dict) -> None:
        if body["tenant"] != self.seed.tenant:
            raise ApiError("FORBIDDEN", f"the API key does not act for tenant {body['tenant']!r}")

    def _pool(self, pool: str | None) -> None:
        if pool is not None and pool != self.seed.pool_id:
            raise ApiError("NOT_FOUND", f"tenant {self.seed.tenant!r} has no pool {pool!r}")

    def _token(self, body: dict) -> dict:
        row = self.store.token(body["id"])
        if row is None or row["tenant"] != body["tenant"]:
            raise ApiError("NOT_FOUND", f"no join token {body['id']!r}")
        return row

    @staticmethod
    def _token_view(row: dict, listing: bool = False) -> dict:
        view = {"id": row["id"], "pool": row["pool"], "hosted": row["hosted"], "maxUses": row["max_uses"],
                "uses": row["uses"], "expiresAt": rfc3339(row["expires_at"]), "revokedAt": rfc3339(row["revoked_at"])}
        if listing:
            view["description"] = row["description"]
            view["createdAt"] = rfc3339(row["created_at"])
        return view

    def call(self, procedure: str, body: dict) -> dict:
        body = check_body(procedure, body)
        self._tenant(body)
        return getattr(self, "p_" + procedure.replace(".", "_"))(body)

    def p_joinTokens_create(self, b: dict) -> dict:
        self._pool(b["pool"])
        try:
            row, _ = self.store.create_token(b["tenant"], b["pool"], b["hosted"], b["maxUses"], b["ttlSeconds"],
                                             b["key"], b.get("description"))
        except KeyConflict as exc:
            raise ApiError("CONFLICT", f"key {b['key']!r} was used for join token {exc.existing['id']} with other "
                                       f"parameters ({', '.join(exc.differs)} differ)") from None
        return {"id": row["id"], "token": self.pki.token_for(row["id"]), "hosted": row["hosted"],
                "maxUses": row["max_uses"], "uses": row["uses"], "expiresAt": rfc3339(row["expires_at"])}

    def p_joinTokens_get(self, b: dict) -> dict:
        return self._token_view(self._token(b))

    def p_joinTokens_revoke(self, b: dict) -> dict:
        self._token(b)
        row = self.store.revoke_token(b["tenant"], b["id"])
        return {"id": row["id"], "revokedAt": rfc3339(row["revoked_at"])}

    def p_joinTokens_list(self, b: dict) -> dict:
        self._pool(b.get("pool"))
        limit = b.get("limit", 100)
        before = decode_cursor("joinTokens.list", b["cursor"]) if "cursor" in b else None
        rows = self.store.list_tokens(b["tenant"], b.get("pool"), before, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return {"items": [self._token_view(r, listing=True) for r in rows],
                "nextCursor": encode_cursor("joinTokens.list", rows[-1]["id"]) if more else None}

    def p_nodes_list(self, b: dict) -> dict:
        self._pool(b.get("pool"))
        limit = b.get("limit", 100)
        after = decode_cursor("nodes.list", b["cursor"]) if "cursor" in b else None
        rows = self.store.list_nodes(b["tenant"], b.get("pool"), after, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return {"items": [node_view(r) for r in rows],
                "nextCursor": encode_cursor("nodes.list", rows[-1]["id"]) if more else None}

    def p_nodes_remove(self, b: dict) -> dict:
        node, why = self.store.remove_node(b["tenant"], b["id"], b.get("force", False))
        if why == "NotFound":
            raise ApiError("NOT_FOUND", f"no node {b['id']!r}")
        if why == "Allocated":
            raise ApiError("CONFLICT", f"node {node['id']} ({node['hostname']}) holds allocation {node['allocation']}: "
                                       "end it first, or remove with force (its workload loses the node)")
        return {"id": node["id"], "state": node["state"], "removedAt": rfc3339(node["removed_at"])}

    def p_pools_get(self, b: dict) -> dict:
        if b["id"] != self.seed.pool_id:
            raise ApiError("NOT_FOUND", f"tenant {self.seed.tenant!r} has no pool {b['id']!r}")
        return self.seed.pool_document()


def node_view(row: dict) -> dict:
    return {"id": row["id"], "hostname": row["hostname"], "pool": row["pool"], "site": row["site"],
            "state": row["state"], "trust": row["trust"], "joinedAt": rfc3339(row["joined_at"]),
            "conditions": [row["conditions"][k] for k in sorted(row["conditions"])],
            "allocation": row.get("allocation"), "removedAt": rfc3339(row.get("removed_at"))}


def build_app(api: Api) -> Starlette:
    """The Starlette app of the API (wrap it with :class:`Edge` for faults, counters and the log)."""

    async def discovery(request: Request) -> JSONResponse:
        return JSONResponse(api.discovery())

    async def rpc(request: Request) -> JSONResponse:
        procedure = request.path_params["procedure"]
        if request.method != "POST":
            return error_response("INVALID_INPUT", "procedures are called with POST")
        if not api.authorized(request.headers.get("authorization")):
            return error_response("UNAUTHORIZED", "a valid API key is required (Authorization: Bearer <API key>)",
                                  headers={"WWW-Authenticate": 'Bearer realm="bcd"'})
        if procedure not in SPECS:
            return error_response("NOT_FOUND", f"no procedure {procedure!r}")
        body, refused = await _json_body(request)
        if refused is not None:
            return refused
        try:
            return JSONResponse(api.call(procedure, body))
        except ApiError as exc:
            return error_response(exc.code, exc.message)
        except Exception:
            log.exception("%s failed", procedure)
            return error_response("INTERNAL", "internal error")

    async def node_endpoint(request: Request) -> JSONResponse:
        from sandbox.control_plane.gateway import GatewayError

        body, refused = await _json_body(request)
        if refused is not None:
            return refused
        try:
            if request.url.path == "/v1/join":
                return JSONResponse(api.node_side.join(body))
            return JSONResponse(api.node_side.report(request.headers.get("authorization"), body))
        except GatewayError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        except Exception:
            log.exception("%s failed", request.url.path)
            return error_response("INTERNAL", "internal error")

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return error_response("NOT_FOUND", f"no route {request.url.path}")

    async def internal(request: Request, exc: Exception) -> JSONResponse:
        return error_response("INTERNAL", "internal error")

    return Starlette(
        routes=[
            Route(BASE_PATH + WELL_KNOWN, discovery, methods=["GET"]),
            Route(BASE_PATH + "/rpc/{procedure}", rpc, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
            *([Route(p, node_endpoint, methods=["POST"]) for p in NODE_PATHS] if api.node_side is not None else []),
        ],
        exception_handlers={404: not_found, 405: not_found, 500: internal},
    )


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


async def _json_body(request: Request) -> tuple[object, JSONResponse | None]:
    """(the request's JSON body, None), or (None, the INVALID_INPUT answer) for a body over
    MAX_BODY bytes or one that is not JSON (NaN and Infinity included)."""
    raw = await request.body()
    if len(raw) > MAX_BODY:
        return None, error_response("INVALID_INPUT", f"the body is over {MAX_BODY} bytes")
    try:
        return json.loads(raw or b"null", parse_constant=_no_constant), None
    except (ValueError, UnicodeDecodeError):
        return None, error_response("INVALID_INPUT", "the body is not JSON")


def procedure_of(path: str) -> str:
    """The counter name of a request path: the procedure, ``discovery`` or ``other``."""
    if path == BASE_PATH + WELL_KNOWN:
        return "discovery"
    if path in NODE_PATHS:
        return NODE_PATHS[path]
    prefix = BASE_PATH + "/rpc/"
    if path.startswith(prefix) and path[len(prefix):] in SPECS:
        return path[len(prefix):]
    return "other"


class Edge:
    """ASGI wrapper: counts each request, applies faults (outage, latency, errors) and logs it."""

    def __init__(self, app, faults: Faults):
        self.app = app
        self.faults = faults

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        procedure = procedure_of(scope["path"])
        self.faults.count_request(procedure)
        t0 = time.monotonic()
        remaining, _ = self.faults.outage()
        while remaining > 0:  # hang: hold the request, unanswered, until the outage ends
            await asyncio.sleep(min(remaining, 0.25))
            remaining, _ = self.faults.outage()
        latency, status, retry_after = self.faults.decide(procedure)
        if latency:
            await asyncio.sleep(latency)
        if status is not None:
            headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
            code = ERROR_STATUSES[status]
            response = error_response(code, f"injected fault: {code}", status=status, headers=headers)
            await response(scope, receive, send)
            self._done(scope, procedure, status, t0, faulted=True)
            return
        seen = {"status": 500}

        async def send_status(message):
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self._done(scope, procedure, seen["status"], t0)

    def _done(self, scope, procedure: str, status: int, t0: float, faulted: bool = False) -> None:
        self.faults.count_response(procedure, status, faulted)
        ms = (time.monotonic() - t0) * 1000
        access_log.info("%s %s %d %.1fms%s", scope["method"], scope["path"], status, ms,
                        " (injected)" if faulted else "")


