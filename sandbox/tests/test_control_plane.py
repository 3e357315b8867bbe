"""Contract tests of the control-plane emulator against control-plane-api.md.

Each test talks to a running emulator process (``python -m sandbox.control_plane serve``, started
by ``sandbox.control_plane.service.start`` in a directory of its own, without a cluster) over
HTTPS, verified with the CA it generated: every procedure, bound and error code, the PKI and
pins, the inventory file, fault injection, restarts, and that no secret reaches its log.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from sandbox.control_plane import service
from sandbox.control_plane.admin import Admin, AdminError

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parents[2]
PROCEDURES = ("joinTokens.create", "joinTokens.get", "joinTokens.list", "joinTokens.revoke", "nodes.list", "pools.get")
CODES = {400: "INVALID_INPUT", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND", 409: "CONFLICT",
         429: "RATE_LIMITED", 500: "INTERNAL", 503: "UNAVAILABLE"}


class Emulator:
    """A running emulator in ``sdir``: its URL, CA, API key, tenant and pool, and an admin client."""

    def __init__(self, sdir: Path):
        self.sdir = sdir
        self.vars = yaml.safe_load((sdir / "control-plane.yml").read_text())
        self.url = self.vars["bcd_control_plane_url"]
        self.ca = self.vars["bcd_control_plane_ca_file"]
        self.key = self.vars["bcd_api_key"]
        self.tenant = self.vars["bcd_tenant"]
        self.pool = self.vars["bcd_pool"]
        self.admin = Admin.for_sandbox(sdir)
        self.ctx = ssl.create_default_context(cafile=self.ca)
        self.ctx.verify_flags |= ssl.VERIFY_X509_STRICT

    def request(self, method: str, path: str, body: object = None, raw: bytes | None = None,
                auth: str | None = "default", timeout: float = 10.0, url: str | None = None):
        """(status, JSON answer or None, headers)."""
        headers = {"Content-Type": "application/json"}
        if auth == "default":
            auth = f"Bearer {self.key}"
        if auth is not None:
            headers["Authorization"] = auth
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request((url or self.url) + path, data=data, method=method, headers=headers)  # noqa: S310 - https
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as resp:  # noqa: S310 - https
                return resp.status, json.loads(resp.read()), resp.headers
        except urllib.error.HTTPError as exc:
            text = exc.read()
            return exc.code, (json.loads(text) if text else None), exc.headers

    def call(self, procedure: str, body: object, **kw):
        return self.request("POST", f"/rpc/{procedure}", body, **kw)

    def ok(self, procedure: str, body: dict) -> dict:
        status, doc, _ = self.call(procedure, body)
        assert status == 200, (procedure, status, doc)
        return doc

    def error(self, procedure: str, body: object, status: int, **kw) -> str:
        got, doc, _ = self.call(procedure, body, **kw)
        assert got == status, (procedure, body, got, doc)
        assert set(doc) == {"error"} and set(doc["error"]) == {"code", "message"}, doc
        assert doc["error"]["code"] == CODES[status], doc
        assert isinstance(doc["error"]["message"], str) and doc["error"]["message"]
        return doc["error"]["message"]

    def create(self, key: str, **kw) -> dict:
        body = {"tenant": self.tenant, "pool": self.pool, "hosted": "kubernetes", "maxUses": 3, "ttlSeconds": 3600,
                "key": key, **kw}
        return self.ok("joinTokens.create", body)


def _pin(public_key) -> str:
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256/" + base64.b64encode(hashlib.sha256(der).digest()).decode()


@pytest.fixture(scope="module")
def cp(tmp_path_factory):
    sdir = tmp_path_factory.mktemp("cp")
    service.start(sdir, None)
    try:
        yield Emulator(sdir)
    finally:
        service.stop(sdir)


@pytest.fixture(autouse=True)
def _no_faults(request):
    yield
    if "cp" in request.fixturenames:
        request.getfixturevalue("cp").admin.clear_faults()


def uniq(prefix: str = "k") -> str:
    return f"{prefix}-{time.time_ns()}"


# -- the files it writes -------------------------------------------------------------------------


def test_inventory_file_has_the_variables_and_is_private(cp):
    path = cp.sdir / "control-plane.yml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert set(cp.vars) == {"bcd_control_plane_url", "bcd_control_plane_ca_file", "bcd_gateway_url", "bcd_site_id",
                            "bcd_pins", "bcd_tenant", "bcd_pool", "bcd_api_key"}
    assert cp.url.startswith("https://127.0.0.1:") and cp.url.endswith("/compute")
    assert set(cp.vars["bcd_pins"]) == {"serving_ca", "join_signing", "join_encryption"}
    # The inventory model accepts every variable as it is.
    from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_model
    inv = bcd_model.load({**cp.vars, "bcd_image": "registry.example.com/bcd@sha256:" + "0" * 64})
    assert inv.bcd_pins.serving_ca == cp.vars["bcd_pins"]["serving_ca"]


def test_pki_files_are_private(cp):
    home = cp.sdir / "control-plane"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for name in ("ca.pem", "ca.key", "server.pem", "server.key", "join-signing.key", "join-encryption.key",
                 "token-secret", "api-key", "admin-token", "state.json"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE((cp.sdir / "control-plane.db").stat().st_mode) == 0o600


def test_pki_show_prints_the_three_pins_of_the_real_keys(cp):
    out = subprocess.run([sys.executable, "-m", "sandbox.control_plane", "--dir", str(cp.sdir), "pki", "show"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    pins = yaml.safe_load(out)
    assert pins == cp.vars["bcd_pins"]
    for value in pins.values():
        assert value.startswith("sha256/") and len(value) == 51 and value.endswith("=")
        assert len(base64.b64decode(value[7:], validate=True)) == 32
    home = cp.sdir / "control-plane"
    ca = x509.load_pem_x509_certificate((home / "ca.pem").read_bytes())
    assert pins["serving_ca"] == _pin(ca.public_key())
    signing = serialization.load_pem_private_key((home / "join-signing.key").read_bytes(), None)
    encryption = serialization.load_pem_private_key((home / "join-encryption.key").read_bytes(), None)
    assert pins["join_signing"] == _pin(signing.public_key())
    assert pins["join_encryption"] == _pin(encryption.public_key())
    assert len(set(pins.values())) == 3


# -- TLS --------------------------------------------------------------------------------------------


def test_tls_verifies_strictly_with_its_ca_only(cp):
    status, _, _ = cp.request("GET", "/.well-known/better-compute", auth=None)
    assert status == 200
    port = cp.url.split(":")[2].split("/")[0]
    status, _, _ = cp.request("GET", "/.well-known/better-compute", auth=None, url=f"https://localhost:{port}/compute")
    assert status == 200
    with pytest.raises(urllib.error.URLError) as info:
        urllib.request.urlopen(cp.url + "/.well-known/better-compute", timeout=5,  # noqa: S310 - https
                               context=ssl.create_default_context())
    assert isinstance(info.value.reason, ssl.SSLCertVerificationError)
    home = cp.sdir / "control-plane"
    ca = x509.load_pem_x509_certificate((home / "ca.pem").read_bytes())
    server = x509.load_pem_x509_certificate((home / "server.pem").read_bytes())
    server.verify_directly_issued_by(ca)
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


# -- discovery ----------------------------------------------------------------------------------


def test_discovery_needs_no_auth_and_carries_a_pinned_public_join_key(cp):
    status, doc, _ = cp.request("GET", "/.well-known/better-compute", auth=None)
    assert status == 200
    assert set(doc) == {"gateway", "site", "joinKey", "joinSigningKey"}
    assert doc["gateway"] == {"url": cp.vars["bcd_gateway_url"], "name": "localhost"}
    assert doc["site"] == cp.vars["bcd_site_id"]
    jwk = doc["joinKey"]
    assert set(jwk) == {"kty", "crv", "x", "y", "kid", "use"}
    assert jwk["kty"] == "EC" and jwk["crv"] == "P-256" and jwk["use"] == "enc" and jwk["kid"]
    # its pin, computed from the JWK alone, is the inventory's join-encryption pin
    from cryptography.hazmat.primitives.asymmetric import ec

    def num(v):
        return int.from_bytes(base64.urlsafe_b64decode(v + "=" * (-len(v) % 4)), "big")

    key = ec.EllipticCurvePublicNumbers(num(jwk["x"]), num(jwk["y"]), ec.SECP256R1()).public_key()
    assert _pin(key) == cp.vars["bcd_pins"]["join_encryption"]
    # the signing key is public too, for signing use, and pinned by the join-signing pin
    sig = doc["joinSigningKey"]
    assert set(sig) == {"kty", "crv", "x", "y", "kid", "use"} and sig["use"] == "sig"
    signing = ec.EllipticCurvePublicNumbers(num(sig["x"]), num(sig["y"]), ec.SECP256R1()).public_key()
    assert _pin(signing) == cp.vars["bcd_pins"]["join_signing"]


def test_routes_live_under_the_base_path_only(cp):
    root = cp.url.rsplit("/compute", 1)[0]
    status, doc, _ = cp.request("GET", "/.well-known/better-compute", auth=None, url=root)
    assert status == 404 and doc["error"]["code"] == "NOT_FOUND"
    status, doc, _ = cp.request("POST", "/rpc/pools.get", {"tenant": cp.tenant, "id": cp.pool}, url=root)
    assert status == 404 and doc["error"]["code"] == "NOT_FOUND"


# -- auth and request shape -------------------------------------------------------------------


@pytest.mark.parametrize("procedure", PROCEDURES)
@pytest.mark.parametrize("auth", [None, "Bearer wrong-key", "Basic abc", "Bearer", "{key}"])
def test_every_procedure_needs_the_bearer_api_key(cp, procedure, auth):
    if auth == "{key}":
        auth = cp.key  # the key without the Bearer scheme
    status, doc, headers = cp.call(procedure, {"tenant": cp.tenant}, auth=auth)
    assert status == 401 and doc == {"error": {"code": "UNAUTHORIZED", "message": doc["error"]["message"]}}
    assert headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert cp.key not in json.dumps(doc)


def test_unknown_procedure_and_wrong_method(cp):
    assert "nodes.delete" in cp.error("nodes.delete", {"tenant": cp.tenant}, 404)
    status, doc, _ = cp.request("GET", "/rpc/pools.get")
    assert status == 400 and doc["error"]["code"] == "INVALID_INPUT"


@pytest.mark.parametrize("procedure", PROCEDURES)
@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]", b'"text"', b"null", b"{\"tenant\": NaN}"])
def test_body_must_be_a_json_object(cp, procedure, raw):
    status, doc, _ = cp.call(procedure, None, raw=raw)
    assert status == 400 and doc["error"]["code"] == "INVALID_INPUT", (raw, doc)


@pytest.mark.parametrize("procedure", PROCEDURES)
def test_unknown_fields_and_missing_tenant_are_invalid(cp, procedure):
    assert "unknown field" in cp.error(procedure, {"tenant": cp.tenant, "bogus": 1}, 400)
    assert "tenant: is required" in cp.error(procedure, {}, 400)
    assert "tenant" in cp.error(procedure, {"tenant": 7}, 400)


@pytest.mark.parametrize("procedure,extra", [
    ("joinTokens.create", {"pool": "P", "hosted": "kubernetes", "maxUses": 1, "ttlSeconds": 60, "key": "k"}),
    ("joinTokens.get", {"id": "jt_x"}),
    ("joinTokens.list", {}),
    ("joinTokens.revoke", {"id": "jt_x"}),
    ("nodes.list", {}),
    ("pools.get", {"id": "P"}),
])
def test_another_tenant_is_forbidden(cp, procedure, extra):
    body = {"tenant": "someone-else", **extra}
    if "pool" in body:
        body["pool"] = cp.pool
    if procedure == "pools.get":
        body["id"] = cp.pool
    assert "someone-else" in cp.error(procedure, body, 403)


# -- joinTokens.create --------------------------------------------------------------------------


def _create_body(cp, **kw) -> dict:
    return {"tenant": cp.tenant, "pool": cp.pool, "hosted": "kubernetes", "maxUses": 3, "ttlSeconds": 3600,
            "key": uniq(), **kw}


def test_create_returns_a_token_with_its_bounds(cp):
    before = time.time()
    doc = cp.create(uniq(), maxUses=5, ttlSeconds=600, description="cluster a, run 1")
    assert set(doc) == {"id", "token", "hosted", "maxUses", "uses", "expiresAt"}
    assert doc["hosted"] == "kubernetes" and doc["maxUses"] == 5 and doc["uses"] == 0
    assert isinstance(doc["token"], str) and 0 < len(doc["token"]) <= 4096 and doc["id"] not in ("", doc["token"])
    expires = _ts(doc["expiresAt"])
    assert before + 600 - 2 <= expires <= time.time() + 600 + 2


def _ts(value: str) -> float:
    import datetime

    assert value.endswith("Z")
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("field,good,bad", [
    ("maxUses", [1, 10000], [0, 10001, -1, "3", 2.5, True, None]),
    ("ttlSeconds", [60, 86400], [59, 86401, 0, "3600", 60.0, False, None]),
    ("key", ["a", "k" * 128], ["", "k" * 129, 5, None]),
    ("hosted", ["kubernetes"], ["vps", "", "Kubernetes", None, 1]),
    ("description", ["", "d" * 256], ["d" * 257, 3, ["a"]]),
    ("pool", [], ["", "p" * 129, 1, None]),
])
def test_create_bounds(cp, field, good, bad):
    for value in good:
        cp.ok("joinTokens.create", _create_body(cp, **{field: value}))
    for value in bad:
        msg = cp.error("joinTokens.create", _create_body(cp, **{field: value}), 400)
        assert field in msg, (value, msg)


def test_create_in_an_unknown_pool_is_not_found(cp):
    assert "pool_nope" in cp.error("joinTokens.create", _create_body(cp, pool="pool_nope"), 404)


def test_create_is_idempotent_by_key(cp):
    key = uniq()
    first = cp.create(key, description="d")
    again = cp.create(key, description="d")
    assert again["id"] == first["id"] and again["token"] == first["token"]
    other = cp.create(uniq(), description="d")
    assert other["id"] != first["id"] and other["token"] != first["token"]
    listed = [t for t in cp.ok("joinTokens.list", {"tenant": cp.tenant, "limit": 500})["items"] if t["id"] == first["id"]]
    assert len(listed) == 1


@pytest.mark.parametrize("change", [{"maxUses": 4}, {"ttlSeconds": 7200}, {"description": "other"}, {"description": None}])
def test_same_key_other_parameters_is_conflict(cp, change):
    key = uniq()
    first = cp.create(key, description="d")
    body = _create_body(cp, key=key, description="d")
    body.update(change)
    if body["description"] is None:
        del body["description"]
    assert first["id"] in cp.error("joinTokens.create", body, 409)
    assert cp.create(key, description="d")["id"] == first["id"]


# -- joinTokens.get / revoke / list -------------------------------------------------------------


def test_get_and_revoke(cp):
    doc = cp.create(uniq(), maxUses=2)
    got = cp.ok("joinTokens.get", {"tenant": cp.tenant, "id": doc["id"]})
    assert {k: got[k] for k in ("id", "hosted", "maxUses", "uses", "expiresAt", "revokedAt")} == {
        "id": doc["id"], "hosted": "kubernetes", "maxUses": 2, "uses": 0, "expiresAt": doc["expiresAt"], "revokedAt": None}
    assert "token" not in got
    first = cp.ok("joinTokens.revoke", {"tenant": cp.tenant, "id": doc["id"]})
    assert set(first) == {"id", "revokedAt"} and first["id"] == doc["id"] and first["revokedAt"]
    time.sleep(0.01)
    second = cp.ok("joinTokens.revoke", {"tenant": cp.tenant, "id": doc["id"]})
    assert second == first
    assert cp.ok("joinTokens.get", {"tenant": cp.tenant, "id": doc["id"]})["revokedAt"] == first["revokedAt"]


@pytest.mark.parametrize("procedure", ["joinTokens.get", "joinTokens.revoke"])
def test_unknown_token_is_not_found(cp, procedure):
    assert "jt_nope" in cp.error(procedure, {"tenant": cp.tenant, "id": "jt_nope"}, 404)
    cp.error(procedure, {"tenant": cp.tenant, "id": ""}, 400)
    cp.error(procedure, {"tenant": cp.tenant}, 400)


def test_list_is_newest_first_with_description_and_no_secret(cp):
    made = [cp.create(uniq(), description=f"run {i}") for i in range(3)]
    page = cp.ok("joinTokens.list", {"tenant": cp.tenant, "limit": 3})
    assert [t["id"] for t in page["items"]] == [m["id"] for m in reversed(made)]
    for item, m in zip(page["items"], reversed(made), strict=True):
        assert set(item) >= {"id", "hosted", "maxUses", "uses", "expiresAt", "revokedAt", "description", "createdAt"}
        assert "token" not in item and m["token"] not in json.dumps(item)
        assert item["description"] == f"run {made.index(m)}"
        assert _ts(item["createdAt"]) <= _ts(item["expiresAt"])
    times = [_ts(t["createdAt"]) for t in page["items"]]
    assert times == sorted(times, reverse=True)


def test_list_pages_with_a_cursor_through_every_token(cp):
    for _ in range(3):
        cp.create(uniq())
    everything = cp.ok("joinTokens.list", {"tenant": cp.tenant, "limit": 500})
    assert everything["nextCursor"] is None
    ids, cursor, pages = [], None, 0
    while True:
        body = {"tenant": cp.tenant, "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = cp.ok("joinTokens.list", body)
        assert len(page["items"]) <= 2
        ids += [t["id"] for t in page["items"]]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert ids == [t["id"] for t in everything["items"]]
    assert pages == (len(ids) + 1) // 2
    default = cp.ok("joinTokens.list", {"tenant": cp.tenant})
    assert len(default["items"]) == min(100, len(ids))
    # an explicit null cursor and pool mean "none"
    assert cp.ok("joinTokens.list", {"tenant": cp.tenant, "cursor": None, "pool": None, "limit": 500}) == everything
    assert cp.ok("joinTokens.list", {"tenant": cp.tenant, "pool": cp.pool, "limit": 500}) == everything


@pytest.mark.parametrize("procedure", ["joinTokens.list", "nodes.list"])
def test_list_bounds_and_cursor(cp, procedure):
    for limit in (1, 500):
        cp.ok(procedure, {"tenant": cp.tenant, "limit": limit})
    for limit in (0, 501, -1, "10", 1.5, True):
        assert "limit" in cp.error(procedure, {"tenant": cp.tenant, "limit": limit}, 400)
    for cursor in ("garbage", "", 5, base64.urlsafe_b64encode(b'{"p":"other","k":"x"}').decode()):
        assert "cursor" in cp.error(procedure, {"tenant": cp.tenant, "cursor": cursor}, 400)
    assert "pool_nope" in cp.error(procedure, {"tenant": cp.tenant, "pool": "pool_nope"}, 404)


def test_a_cursor_of_one_list_is_refused_by_the_other(cp):
    for _ in range(2):
        cp.create(uniq())
    cursor = cp.ok("joinTokens.list", {"tenant": cp.tenant, "limit": 1})["nextCursor"]
    assert cursor
    cp.error("nodes.list", {"tenant": cp.tenant, "cursor": cursor}, 400)


# -- nodes.list and pools.get -------------------------------------------------------------------


def test_nodes_list_without_a_cluster_is_empty(cp):
    assert cp.ok("nodes.list", {"tenant": cp.tenant}) == {"items": [], "nextCursor": None}
    assert cp.ok("nodes.list", {"tenant": cp.tenant, "pool": cp.pool, "limit": 1}) == {"items": [], "nextCursor": None}


def test_pools_get(cp):
    doc = cp.ok("pools.get", {"tenant": cp.tenant, "id": cp.pool})
    assert doc == {"id": cp.pool, "owner": cp.tenant, "site": {"id": cp.vars["bcd_site_id"], "kind": "platform"},
                   "policy": {"kubernetes": {"platformOperated": False}}}
    assert "pool_nope" in cp.error("pools.get", {"tenant": cp.tenant, "id": "pool_nope"}, 404)
    cp.error("pools.get", {"tenant": cp.tenant}, 400)


# -- faults -------------------------------------------------------------------------------------


def test_admin_needs_its_token(cp):
    admin_url = json.loads((cp.sdir / "control-plane" / "state.json").read_text())["admin_url"]
    with pytest.raises(AdminError, match="401"):
        Admin(admin_url, "wrong").faults()
    with pytest.raises(AdminError, match="401"):
        Admin(admin_url, cp.key).counters()
    with pytest.raises(AdminError, match="400"):
        cp.admin.set_faults({"errorRate": 2})
    with pytest.raises(AdminError, match="400"):
        cp.admin.set_faults({"bogus": 1})


@pytest.mark.parametrize("status,code", [(503, "UNAVAILABLE"), (429, "RATE_LIMITED")])
def test_injected_errors_on_named_procedures_carry_retry_after(cp, status, code):
    cp.admin.set_faults({"errorRate": 1, "errorStatus": status, "retryAfter": 2, "procedures": ["pools.get"]})
    got, doc, headers = cp.call("pools.get", {"tenant": cp.tenant, "id": cp.pool})
    assert got == status and doc["error"]["code"] == code and headers["Retry-After"] == "2"
    cp.ok("nodes.list", {"tenant": cp.tenant})  # another procedure is untouched
    cp.admin.set_faults({"errorRate": 1, "errorStatus": 429})
    got, _, headers = cp.call("nodes.list", {"tenant": cp.tenant})
    assert got == 429 and headers["Retry-After"] == "1"  # 429 always has a Retry-After
    status_, _, _ = cp.request("GET", "/.well-known/better-compute", auth=None)
    assert status_ == 429  # no procedure list: discovery too


def test_error_count_fails_the_next_n_requests_then_recovers(cp):
    cp.admin.set_faults({"errorCount": 2, "procedures": ["joinTokens.create"]})
    key = uniq()
    assert cp.call("joinTokens.create", _create_body(cp, key=key))[0] == 503
    assert cp.call("joinTokens.create", _create_body(cp, key=key))[0] == 503
    doc = cp.create(key)
    assert cp.create(key)["id"] == doc["id"]
    assert cp.admin.faults()["errorCount"] == 0


def test_a_share_of_requests_fails(cp):
    cp.admin.set_faults({"errorRate": 0.5, "procedures": ["pools.get"]})
    statuses = [cp.call("pools.get", {"tenant": cp.tenant, "id": cp.pool})[0] for _ in range(40)]
    assert set(statuses) == {200, 503}


def test_latency_is_added(cp):
    cp.admin.set_faults({"latencySeconds": 0.4, "procedures": ["pools.get"]})
    t0 = time.monotonic()
    cp.ok("pools.get", {"tenant": cp.tenant, "id": cp.pool})
    assert time.monotonic() - t0 >= 0.4


def test_outage_hang_holds_requests_until_it_ends(cp):
    cp.admin.set_faults({"outageSeconds": 2.0, "outageMode": "hang"})
    with pytest.raises((TimeoutError, urllib.error.URLError, socket.timeout)):
        cp.request("GET", "/.well-known/better-compute", auth=None, timeout=0.5)
    assert 0 < cp.admin.faults()["outageRemaining"] <= 2.0
    status, _, _ = cp.request("GET", "/.well-known/better-compute", auth=None, timeout=10)  # answered once it ends
    assert status == 200
    assert cp.admin.faults()["outageRemaining"] == 0


def test_outage_reset_closes_connections(cp):
    cp.admin.set_faults({"outageSeconds": 30, "outageMode": "reset"})
    with pytest.raises((ConnectionError, urllib.error.URLError, ssl.SSLError, OSError)) as info:
        cp.request("GET", "/.well-known/better-compute", auth=None, timeout=5)
    assert not isinstance(info.value, urllib.error.HTTPError)
    cp.admin.clear_faults()
    assert cp.request("GET", "/.well-known/better-compute", auth=None)[0] == 200


def test_counters_count_requests_per_procedure_and_reset(cp):
    cp.admin.reset_counters()
    cp.ok("pools.get", {"tenant": cp.tenant, "id": cp.pool})
    cp.ok("pools.get", {"tenant": cp.tenant, "id": cp.pool})
    cp.error("nodes.list", {"tenant": cp.tenant, "limit": 0}, 400)
    cp.request("GET", "/.well-known/better-compute", auth=None)
    counters = cp.admin.counters()
    assert counters["requests"] == {"pools.get": 2, "nodes.list": 1, "discovery": 1}
    assert counters["responses"]["nodes.list"] == {"400": 1}
    assert counters["total"] == 4
    assert cp.admin.reset_counters()["total"] == 0


def test_faults_set_at_start_from_the_environment(tmp_path):
    env = {"BCD_CP_FAULTS": json.dumps({"errorRate": 1, "errorStatus": 503, "procedures": ["pools.get"]})}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        service.start(tmp_path, None)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        em = Emulator(tmp_path)
        assert em.call("pools.get", {"tenant": em.tenant, "id": em.pool})[0] == 503
        assert em.admin.faults()["procedures"] == ["pools.get"]
    finally:
        service.stop(tmp_path)


def test_cli_sets_and_shows_faults(cp):
    run = [sys.executable, "-m", "sandbox.control_plane", "--dir", str(cp.sdir)]
    out = subprocess.run([*run, "faults", "set", "errorRate=0.25", "procedures=pools.get,nodes.list", "retryAfter=3"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert json.loads(out)["procedures"] == ["pools.get", "nodes.list"]
    shown = json.loads(subprocess.run([*run, "faults", "show"], capture_output=True, text=True, check=True, cwd=ROOT).stdout)
    assert shown["errorRate"] == 0.25 and shown["retryAfter"] == 3
    subprocess.run([*run, "faults", "clear"], capture_output=True, check=True, cwd=ROOT)
    assert "errorRate" not in cp.admin.faults()


# -- restarts and seeds -------------------------------------------------------------------------


def test_restart_keeps_tokens_urls_and_keys(cp):
    key = uniq()
    doc = cp.create(key, maxUses=7, description="before restart")
    revoked = cp.create(uniq())
    cp.ok("joinTokens.revoke", {"tenant": cp.tenant, "id": revoked["id"]})
    before = cp.ok("joinTokens.list", {"tenant": cp.tenant, "limit": 500})
    pid = service.status(cp.sdir)["pid"]
    service.restart(cp.sdir)
    assert service.status(cp.sdir)["pid"] != pid
    assert yaml.safe_load((cp.sdir / "control-plane.yml").read_text()) == cp.vars
    assert cp.ok("joinTokens.list", {"tenant": cp.tenant, "limit": 500}) == before
    again = cp.create(key, maxUses=7, description="before restart")
    assert again["id"] == doc["id"] and again["token"] == doc["token"]


def test_seed_decides_the_pool_policy(tmp_path):
    seed = tmp_path / "seed.yml"
    seed.write_text(yaml.safe_dump({
        "root_tenant": "root", "tenant": "acme", "site": {"id": "site_x", "kind": "custom", "owner": "acme"},
        "pool": {"id": "pool_x", "platformOperated": True}}))
    os.environ["BCD_CP_SEED"] = str(seed)
    try:
        service.start(tmp_path / "sb", None)
    finally:
        del os.environ["BCD_CP_SEED"]
    try:
        em = Emulator(tmp_path / "sb")
        assert (em.tenant, em.pool, em.vars["bcd_site_id"]) == ("acme", "pool_x", "site_x")
        assert em.ok("pools.get", {"tenant": "acme", "id": "pool_x"}) == {
            "id": "pool_x", "owner": "acme", "site": {"id": "site_x", "kind": "custom"},
            "policy": {"kubernetes": {"platformOperated": True}}}
        em.error("pools.get", {"tenant": "root", "id": "pool_x"}, 403)
    finally:
        service.stop(tmp_path / "sb")


def test_a_bad_seed_fails_start_with_a_clear_message(tmp_path):
    seed = tmp_path / "seed.yml"
    seed.write_text("tenant: root\nsite: {id: s, kind: weird}\npool: {id: p}\n")
    os.environ["BCD_CP_SEED"] = str(seed)
    try:
        out = subprocess.run([sys.executable, "-m", "sandbox.control_plane", "--dir", str(tmp_path / "sb"), "serve"],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
    finally:
        del os.environ["BCD_CP_SEED"]
    assert out.returncode == 1
    assert "site.kind: must be one of platform, custom" in out.stderr
    assert "Traceback" not in out.stderr


# -- secrets stay out of the log ----------------------------------------------------------------


def test_no_secret_in_the_log(cp):
    tokens = [cp.create(uniq())["token"] for _ in range(2)]
    cp.call("pools.get", {"tenant": cp.tenant, "id": cp.pool}, auth="Bearer not-the-key-but-secret-looking")
    log = (cp.sdir / "logs" / "control-plane.log").read_text()
    assert "POST /compute/rpc/joinTokens.create 200" in log
    assert cp.key not in log
    for token in tokens:
        assert token not in log and token.split(".")[-1] not in log
    assert "not-the-key-but-secret-looking" not in log
    assert "Bearer" not in log and "authorization" not in log.lower()
    assert (cp.sdir / "control-plane" / "token-secret").read_bytes().hex() not in log
