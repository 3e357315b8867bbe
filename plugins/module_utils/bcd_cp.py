"""The bcd control-plane client: the one file that knows the API (control-plane-api.md).

Transport: ``POST <base>/rpc/<procedure>`` with a JSON body and ``Authorization: Bearer <API
key>``; discovery is ``GET <base>/.well-known/better-compute`` without auth. https only; the
server certificate is always verified (system trust store, or ``ca_file``).

Errors are :class:`ControlPlaneError` with the API's code (``INVALID_INPUT``, ``UNAUTHORIZED``,
``FORBIDDEN``, ``NOT_FOUND``, ``CONFLICT``, ``RATE_LIMITED``, ``UNAVAILABLE``, ``INTERNAL``) or
one of ours (``TLS``, ``UNREACHABLE``, ``TIMEOUT``, ``BAD_RESPONSE``). 429, 502, 503, 504 and
connection failures are retried with exponential backoff and full jitter, honouring
``Retry-After``, until ``retry_budget`` seconds have passed; then the last error is raised.
Messages never hold the API key or a token.
"""

from __future__ import annotations

import json
import os
import random
import ssl
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

RETRYABLE_STATUS = (429, 502, 503, 504)
# A connection the server (or something on the way) closed during or right after the TLS
# handshake is a connection failure, retried like a refused one; a certificate or protocol the
# client refuses is not.
DROPPED = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)
NODE_STATES_REPORTING = ("adopting", "ready", "draining")

# The collection's version, which lookup('bcd.kubernetes.bcd_inventory') adds to the mapping it
# returns, for the User-Agent; not an inventory variable (the inventory model leaves it out).
VERSION_KEY = "_bcd_collection_version"


def key_stand_in(key: object) -> object:
    """What ``config`` holds in place of an API key that is not a string (never a usable key):
    the empty value of its type, which the inventory model refuses (INVALID_CONFIG) without
    ever being given the key's content."""
    # bool first: a bool is an int too
    return next((t() for t in (bool, int, float, list, dict) if isinstance(key, t)), 0)


def collection_version(start: str | None = None) -> str:
    """The collection's version, read where it lives: galaxy.yml of a checkout, or MANIFEST.json
    of an installed collection, found from this file upwards. ``"unknown"`` when neither is
    there (a module runs from Ansible's zipped payload: its callers pass the version the lookup
    bcd_inventory read on the controller)."""
    here = os.path.dirname(os.path.abspath(start or __file__))
    for _level in range(4):  # plugins/module_utils -> plugins -> the collection's root
        manifest = os.path.join(here, "MANIFEST.json")
        galaxy = os.path.join(here, "galaxy.yml")
        try:
            if os.path.isfile(manifest):
                with open(manifest) as f:
                    return str(json.load(f)["collection_info"]["version"])
            if os.path.isfile(galaxy):
                with open(galaxy) as f:
                    for line in f:
                        if line.startswith("version:"):
                            return line.split(":", 1)[1].strip().strip("'\"")
        except (OSError, ValueError, KeyError):
            break
        here = os.path.dirname(here)
    return "unknown"


def user_agent(version: str | None = None) -> str:
    """``bcd-ansible/<collection version> (+control-plane-api.md)``."""
    return f"bcd-ansible/{version or collection_version()} (+control-plane-api.md)"


class ControlPlaneError(Exception):
    """A failed call. ``code``: the API's error code or ours; ``status``: HTTP status or None."""

    def __init__(self, code: str, message: str, status: int | None = None, procedure: str | None = None,
                 attempts: int = 1):
        self.code = code
        self.message = message
        self.status = status
        self.procedure = procedure
        self.attempts = attempts
        where = f"{procedure}: " if procedure else ""
        tries = f" (after {attempts} attempts)" if attempts > 1 else ""
        super().__init__(f"control plane {where}{code}: {message}{tries}")


class Client:
    """A control-plane client for one base URL.

    ``base_url``: https URL, may carry a base path. ``api_key``: bearer key, else
    ``$BETTER_COMPUTE_API_KEY``. ``ca_file``: PEM bundle to verify the server with, else the
    system trust store. ``timeout``: seconds per request. ``retry_budget``: seconds a call may
    spend retrying retryable failures. ``sleep``/``clock`` are injectable for tests. ``on_retry``:
    called with a dict for each retry and when a retried call ends (:meth:`_report`), for
    progress lines. ``version``: the collection's version for the User-Agent (else read from
    galaxy.yml or MANIFEST.json).
    """

    def __init__(self, base_url: str, api_key: str | None = None, ca_file: str | None = None,
                 timeout: float = 30.0, retry_budget: float = 120.0, sleep=time.sleep, clock=time.monotonic,
                 on_retry=None, version: str | None = None):
        parts = urlsplit(base_url or "")
        if parts.scheme != "https" or not parts.hostname:
            raise ControlPlaneError("INVALID_INPUT", f"bcd_control_plane_url {base_url!r} must be an https:// URL; nothing was sent")
        self.base = base_url.rstrip("/")
        self._key = api_key or os.environ.get("BETTER_COMPUTE_API_KEY") or None
        self.timeout = timeout
        self.retry_budget = retry_budget
        self._sleep = sleep
        self._clock = clock
        self.on_retry = on_retry
        self.user_agent = user_agent(version)
        self.requests = 0
        ctx = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = True
        ctx.verify_mode = ssl.CERT_REQUIRED
        self._ctx = ctx
        # No redirects: the bearer key must never follow one to another origin or to http.
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx), _NoRedirect())

    # -- transport ------------------------------------------------------------------------

    def _once(self, method: str, path: str, body: dict | None, auth: bool, procedure: str) -> dict:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if auth:
            if not self._key:
                raise ControlPlaneError("UNAUTHORIZED", "no API key: set bcd_api_key (vaulted) or BETTER_COMPUTE_API_KEY", procedure=procedure)
            headers["Authorization"] = "Bearer " + self._key
        req = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)  # noqa: S310 - https checked in __init__
        self.requests += 1
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read() or b""
            code, message = "INTERNAL", f"HTTP {exc.code}"
            try:
                err = json.loads(raw)["error"]
                code, message = str(err["code"]), str(err.get("message", ""))
            except (ValueError, KeyError, TypeError):
                code = {400: "INVALID_INPUT", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND", 409: "CONFLICT",
                        429: "RATE_LIMITED", 503: "UNAVAILABLE"}.get(exc.code, code)
            error = ControlPlaneError(code, message, status=exc.code, procedure=procedure)
            error.retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            raise error from None
        except ssl.SSLCertVerificationError as exc:
            raise ControlPlaneError("TLS", f"the server's certificate is not trusted ({exc.verify_message}); "
                                    "set bcd_control_plane_ca_file to the CA that signed it", procedure=procedure) from None
        except DROPPED as exc:
            raise ControlPlaneError("UNREACHABLE", f"{urlsplit(self.base).netloc} closed the connection ({exc.reason or exc})",
                                    procedure=procedure) from None
        except ssl.SSLError as exc:
            raise ControlPlaneError("TLS", f"TLS handshake failed ({exc.reason})", procedure=procedure) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise ControlPlaneError("TLS", f"the server's certificate is not trusted ({reason.verify_message}); "
                                        "set bcd_control_plane_ca_file to the CA that signed it", procedure=procedure) from None
            if isinstance(reason, DROPPED):
                raise ControlPlaneError("UNREACHABLE", f"{urlsplit(self.base).netloc} closed the connection "
                                        f"({reason.reason or reason})", procedure=procedure) from None
            if isinstance(reason, ssl.SSLError):
                raise ControlPlaneError("TLS", f"TLS handshake failed ({reason.reason})", procedure=procedure) from None
            raise ControlPlaneError("UNREACHABLE", f"cannot reach {urlsplit(self.base).netloc}: {reason}", procedure=procedure) from None
        except TimeoutError:
            raise ControlPlaneError("UNREACHABLE", f"no answer from {urlsplit(self.base).netloc} within {self.timeout:g}s", procedure=procedure) from None
        except (ConnectionError, OSError) as exc:
            raise ControlPlaneError("UNREACHABLE", f"cannot reach {urlsplit(self.base).netloc}: {exc}", procedure=procedure) from None
        try:
            doc = json.loads(raw)
        except ValueError:
            raise ControlPlaneError("BAD_RESPONSE", "the answer is not JSON", procedure=procedure) from None
        if not isinstance(doc, dict):
            raise ControlPlaneError("BAD_RESPONSE", "the answer is not a JSON object", procedure=procedure)
        return doc

    def _call(self, method: str, path: str, body: dict | None, auth: bool, procedure: str) -> dict:
        started = self._clock()
        deadline = started + self.retry_budget
        attempt = 0
        backoff = 0.5
        while True:
            attempt += 1
            try:
                answer = self._once(method, path, body, auth, procedure)
            except ControlPlaneError as exc:
                retryable = exc.code == "UNREACHABLE" or exc.status in RETRYABLE_STATUS
                if not retryable:
                    exc.attempts = attempt
                    if attempt > 1:
                        self._report("ended", procedure, attempt, started, exc)
                    raise
                # full jitter, never less than what the server asked for
                delay = random.uniform(0, backoff)  # noqa: S311 - jitter, not crypto
                retry_after = getattr(exc, "retry_after", None)
                if retry_after is not None:
                    delay = max(delay, retry_after)
                if self._clock() + delay > deadline:
                    self._report("ended", procedure, attempt, started, exc)
                    raise ControlPlaneError(exc.code, f"{exc.message}; gave up after {self.retry_budget:g}s of retries",
                                            status=exc.status, procedure=procedure, attempts=attempt) from None
                self._report("retry", procedure, attempt, started, exc, delay)
                self._sleep(delay)
                backoff = min(backoff * 2, 30.0)
                continue
            if attempt > 1:
                self._report("ended", procedure, attempt, started)
            return answer

    def _report(self, kind: str, procedure: str, attempt: int, started: float, exc: ControlPlaneError | None = None,
                delay: float = 0.0) -> None:
        """Tell ``on_retry`` (a progress reporter) about a retry: ``kind`` ``retry`` (attempt
        ``attempt`` failed with ``exc``; the next in ``delay`` s) or ``ended`` (the call was
        answered, or failed for good, at attempt ``attempt``). ``waited``: seconds since the call
        began; ``budget``: the retry budget. Holds the error's code and message, never a secret."""
        if not self.on_retry:
            return
        event = {"kind": kind, "procedure": procedure, "attempt": attempt, "waited": round(self._clock() - started, 3),
                 "delay": round(delay, 3), "budget": self.retry_budget, "request_timeout": self.timeout}
        if exc is not None:
            event.update(code=exc.code, status=exc.status, message=exc.message)
        try:
            self.on_retry(event)
        except Exception:  # noqa: BLE001, S110 - progress is best effort; the call goes on
            pass

    def call(self, procedure: str, body: dict) -> dict:
        """``POST <base>/rpc/<procedure>`` with ``body``; returns the answer object."""
        return self._call("POST", f"/rpc/{procedure}", body, True, procedure)

    # -- procedures -----------------------------------------------------------------------

    def discovery(self) -> dict:
        """``GET /.well-known/better-compute`` (no auth): gateway {url, name}, site, joinKey (a JWK)."""
        return self._call("GET", "/.well-known/better-compute", None, False, "discovery")

    def create_token(self, tenant: str, pool: str, max_uses: int, ttl_seconds: int, key: str, description: str) -> dict:
        """joinTokens.create (hosted kubernetes). The answer holds the secret ``token``: keep it out of results."""
        return self.call("joinTokens.create", {"tenant": tenant, "pool": pool, "hosted": "kubernetes", "maxUses": max_uses,
                                               "ttlSeconds": ttl_seconds, "key": key, "description": description})

    def get_token(self, tenant: str, token_id: str) -> dict:
        return self.call("joinTokens.get", {"tenant": tenant, "id": token_id})

    def revoke_token(self, tenant: str, token_id: str) -> dict:
        """joinTokens.revoke; revoking a revoked token succeeds with the first revokedAt."""
        return self.call("joinTokens.revoke", {"tenant": tenant, "id": token_id})

    def list_tokens(self, tenant: str, pool: str | None = None, limit: int = 100):
        """Every token (newest first), following nextCursor. Items carry no secret."""
        yield from self._pages("joinTokens.list", tenant, pool, limit)

    def list_nodes(self, tenant: str, pool: str | None = None, limit: int = 500):
        """Every node, following nextCursor, ``limit`` (1..500) per page."""
        yield from self._pages("nodes.list", tenant, pool, limit)

    def remove_node(self, tenant: str, node_id: str, force: bool = False) -> dict:
        """nodes.remove (idempotent): ``{id, state: "removed", removedAt}``; CONFLICT when the node
        holds an allocation and not ``force``."""
        return self.call("nodes.remove", {"tenant": tenant, "id": node_id, "force": force})

    def get_pool(self, tenant: str, pool: str) -> dict:
        return self.call("pools.get", {"tenant": tenant, "id": pool})

    def _pages(self, procedure: str, tenant: str, pool: str | None, limit: int):
        cursor = None
        seen = set()
        while True:
            body = {"tenant": tenant, "limit": limit}
            if pool:
                body["pool"] = pool
            if cursor:
                body["cursor"] = cursor
            page = self.call(procedure, body)
            items = page.get("items")
            if not isinstance(items, list):
                raise ControlPlaneError("BAD_RESPONSE", "items is not a list", procedure=procedure)
            yield from items
            cursor = page.get("nextCursor")
            if not cursor:
                return
            if cursor in seen:
                raise ControlPlaneError("BAD_RESPONSE", "nextCursor repeats", procedure=procedure)
            seen.add(cursor)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the 3xx status


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


def trust_forecast(pool: dict) -> str:
    """The trust a node joining ``pool`` with a hosted token will land with (the bcd DaemonSet specification, section Trust).

    ``tenant-owned`` on a tenant's own ``custom`` site; ``platform`` only when
    ``policy.kubernetes.platformOperated`` is true on a site that is not ``custom`` (the control
    plane also requires the platform to own the pool, which it decides); else ``tenant-controlled``.
    """
    site_kind = ((pool.get("site") or {}).get("kind") or "").lower()
    if site_kind == "custom":
        return "tenant-owned"
    operated = (((pool.get("policy") or {}).get("kubernetes") or {}).get("platformOperated")) is True
    return "platform" if operated else "tenant-controlled"
