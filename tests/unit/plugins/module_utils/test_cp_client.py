"""The control-plane client's transport rules, against a real local HTTPS server.

The server here is a few lines of http.server answering scripted statuses, so the client's
retry, backoff, Retry-After, TLS and redirect rules can be driven exactly; the procedures
themselves are tested against the control-plane emulator (sandbox/tests).
"""

from __future__ import annotations

import datetime as dt
import http.server
import ipaddress
import json
import ssl
import threading

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import (
    Client,
    ControlPlaneError,
    trust_forecast,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _ca_and_cert(tmp_path, host="127.0.0.1", days=1, expired=False):
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=2))
          .not_valid_after(now + dt.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.IPAddress(ipaddress.ip_address(host)) if host[0].isdigit() else x509.DNSName(host)
    start, end = (now - dt.timedelta(days=3), now - dt.timedelta(days=1)) if expired else (now - dt.timedelta(hours=1), now + dt.timedelta(days=days))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_file = tmp_path / f"ca-{host}-{expired}.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file = tmp_path / f"cert-{host}-{expired}.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return str(ca_file), str(cert_file)


class Scripted(http.server.BaseHTTPRequestHandler):
    """Answers the next scripted (status, headers, body) per request; records requests."""

    script: list
    seen: list

    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append({"path": self.path, "method": self.command, "auth": self.headers.get("Authorization"), "body": body})
        status, headers, payload = self.script.pop(0) if self.script else (200, {}, {"ok": True})
        data = json.dumps(payload).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer


@pytest.fixture
def server(tmp_path):
    def start(script, host="127.0.0.1", expired=False):
        ca_file, cert_file = _ca_and_cert(tmp_path, host=host, expired=expired)
        handler = type("H", (Scripted,), {"script": list(script), "seen": []})
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert_file)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        return f"https://127.0.0.1:{httpd.server_address[1]}/compute", ca_file, handler.seen

    started = []
    yield start
    for httpd in started:
        httpd.shutdown()


class FakeTime:
    """Time that passes only when the client sleeps: retries are decided exactly, instantly."""

    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s

    def clock(self):
        return self.now


def error(code, status, **headers):
    return (status, headers, {"error": {"code": code, "message": f"{code} from test"}})


def test_calls_rpc_with_bearer_key_under_the_base_path(server):
    url, ca, seen = server([(200, {}, {"id": "p1"})])
    client = Client(url, api_key="k-123", ca_file=ca)
    assert client.get_pool("t", "p1") == {"id": "p1"}
    assert seen[0]["path"] == "/compute/rpc/pools.get" and seen[0]["method"] == "POST"
    assert seen[0]["auth"] == "Bearer k-123"
    assert json.loads(seen[0]["body"]) == {"tenant": "t", "id": "p1"}


def test_discovery_sends_no_key(server):
    url, ca, seen = server([(200, {}, {"site": "s"})])
    Client(url, api_key="k-123", ca_file=ca).discovery()
    assert seen[0]["path"] == "/compute/.well-known/better-compute" and seen[0]["auth"] is None


def test_retries_503_and_429_with_backoff_then_succeeds(server):
    url, ca, seen = server([error("UNAVAILABLE", 503), error("RATE_LIMITED", 429, **{"Retry-After": "7"}),
                            error("UNAVAILABLE", 503), (200, {}, {"id": "p"})])
    t = FakeTime()
    client = Client(url, api_key="k", ca_file=ca, sleep=t.sleep, clock=t.clock)
    assert client.get_pool("t", "p") == {"id": "p"}
    assert len(seen) == 4 and len(t.sleeps) == 3
    assert t.sleeps[1] >= 7, "Retry-After is honoured"
    assert 0 <= t.sleeps[0] <= 0.5 and 0 <= t.sleeps[2] <= 2.0, "full jitter under a doubling cap"


def test_retries_end_within_the_budget(server):
    url, ca, seen = server([error("UNAVAILABLE", 503)] * 1000)
    t = FakeTime()
    client = Client(url, api_key="k", ca_file=ca, retry_budget=60, sleep=t.sleep, clock=t.clock)
    with pytest.raises(ControlPlaneError) as info:
        client.get_pool("t", "p")
    assert info.value.code == "UNAVAILABLE" and "gave up after 60s" in str(info.value)
    assert t.now <= 60 and info.value.attempts == len(seen) > 3


def test_each_retry_and_the_end_of_a_retried_call_are_reported_for_progress_lines(server):
    url, ca, _seen = server([error("UNAVAILABLE", 503), error("RATE_LIMITED", 429, **{"Retry-After": "7"}),
                             (200, {}, {"id": "p"})])
    t = FakeTime()
    events = []
    client = Client(url, api_key="k-123", ca_file=ca, retry_budget=90, sleep=t.sleep, clock=t.clock, on_retry=events.append)
    assert client.get_pool("t", "p") == {"id": "p"}
    assert [(e["kind"], e["procedure"], e["attempt"]) for e in events] == [
        ("retry", "pools.get", 1), ("retry", "pools.get", 2), ("ended", "pools.get", 3)]
    assert events[0]["code"] == "UNAVAILABLE" and events[0]["status"] == 503 and events[0]["budget"] == 90
    assert events[1]["delay"] >= 7 and events[1]["waited"] == round(t.sleeps[0], 3)
    assert "code" not in events[2], "answered"
    assert "k-123" not in json.dumps(events)


def test_jitter_varies(server):
    url, ca, _ = server([error("UNAVAILABLE", 503)] * 200)
    delays = []
    for _ in range(2):
        t = FakeTime()
        client = Client(url, api_key="k", ca_file=ca, retry_budget=20, sleep=t.sleep, clock=t.clock)
        with pytest.raises(ControlPlaneError):
            client.get_pool("t", "p")
        delays.append(tuple(t.sleeps))
    assert delays[0] != delays[1]


@pytest.mark.parametrize(("code", "status"), [("INVALID_INPUT", 400), ("UNAUTHORIZED", 401), ("FORBIDDEN", 403),
                                              ("NOT_FOUND", 404), ("CONFLICT", 409), ("INTERNAL", 500)])
def test_does_not_retry_the_rest(server, code, status):
    url, ca, seen = server([error(code, status), (200, {}, {})])
    t = FakeTime()
    with pytest.raises(ControlPlaneError) as info:
        Client(url, api_key="k", ca_file=ca, sleep=t.sleep, clock=t.clock).get_pool("t", "p")
    assert info.value.code == code and info.value.status == status and len(seen) == 1 and not t.sleeps


def test_connection_refused_is_retried_then_reported(server):
    t = FakeTime()
    client = Client("https://127.0.0.1:9/compute", api_key="k", retry_budget=5, sleep=t.sleep, clock=t.clock)
    with pytest.raises(ControlPlaneError) as info:
        client.get_pool("t", "p")
    assert info.value.code == "UNREACHABLE" and info.value.attempts > 1


def test_a_connection_closed_at_the_tls_handshake_is_retried(tmp_path):
    """A server that drops connections during the handshake (restarting, behind a load balancer)
    is unreachable for a while, not untrusted: retried, then answered."""
    import socket

    ca_file, cert_file = _ca_and_cert(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_file)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    dropped = []

    def read_request(tls):
        # the whole request, headers and body: closing with unread bytes resets the connection,
        # which can destroy the answer before the client reads it
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = tls.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(rest) < length:
            chunk = tls.recv(65536)
            if not chunk:
                return
            rest += chunk

    def serve():
        while True:  # until the socket is closed; one failed connection must not stop the server
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            if len(dropped) < 2:
                dropped.append(1)
                conn.close()
                continue
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    read_request(tls)
                    body = b'{"id": "p"}'
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                                b"Connection: close\r\n\r\n%s" % (len(body), body))
            except OSError:
                continue

    threading.Thread(target=serve, daemon=True).start()
    t = FakeTime()
    client = Client(f"https://127.0.0.1:{srv.getsockname()[1]}/compute", api_key="k", ca_file=ca_file, retry_budget=30,
                    sleep=t.sleep, clock=t.clock)
    assert client.get_pool("t", "p") == {"id": "p"}
    assert len(dropped) == 2 and len(t.sleeps) == 2
    srv.close()


def test_http_is_refused_before_any_call():
    with pytest.raises(ControlPlaneError) as info:
        Client("http://127.0.0.1:1/compute", api_key="k")
    assert "https" in str(info.value) and "nothing was sent" in str(info.value)


def test_certificate_from_another_ca_is_refused(server, tmp_path):
    url, _, _ = server([(200, {}, {})])
    (tmp_path / "other").mkdir()
    other_ca, _ = _ca_and_cert(tmp_path / "other", host="127.0.0.1")
    with pytest.raises(ControlPlaneError) as info:
        Client(url, api_key="k", ca_file=other_ca).discovery()
    assert info.value.code == "TLS" and "bcd_control_plane_ca_file" in str(info.value)


def test_system_trust_store_refuses_a_private_ca(server):
    url, _, _ = server([(200, {}, {})])
    with pytest.raises(ControlPlaneError) as info:
        Client(url, api_key="k").discovery()
    assert info.value.code == "TLS"


def test_expired_certificate_is_refused(server):
    url, ca, _ = server([(200, {}, {})], expired=True)
    with pytest.raises(ControlPlaneError) as info:
        Client(url, api_key="k", ca_file=ca).discovery()
    assert info.value.code == "TLS" and "expired" in str(info.value)


def test_certificate_for_another_host_is_refused(server):
    url, ca, _ = server([(200, {}, {})], host="compute.example.com")
    with pytest.raises(ControlPlaneError) as info:
        Client(url, api_key="k", ca_file=ca).discovery()
    assert info.value.code == "TLS"


def test_redirects_are_not_followed(server):
    url, ca, seen = server([(302, {"Location": "http://127.0.0.1:1/steal"}, {})])
    with pytest.raises(ControlPlaneError):
        Client(url, api_key="k", ca_file=ca).get_pool("t", "p")
    assert len(seen) == 1


def test_pages_follow_next_cursor(server):
    url, ca, seen = server([(200, {}, {"items": [{"id": 1}], "nextCursor": "c1"}),
                            (200, {}, {"items": [{"id": 2}], "nextCursor": None})])
    items = list(Client(url, api_key="k", ca_file=ca).list_nodes("t", "p", limit=500))
    assert items == [{"id": 1}, {"id": 2}]
    assert [json.loads(s["body"]).get("cursor") for s in seen] == [None, "c1"]
    assert all(json.loads(s["body"])["limit"] == 500 for s in seen)


def test_error_messages_never_hold_the_key(server):
    url, ca, _ = server([error("UNAUTHORIZED", 401)])
    with pytest.raises(ControlPlaneError) as info:
        Client(url, api_key="sk-very-secret", ca_file=ca).get_pool("t", "p")
    assert "sk-very-secret" not in str(info.value)


@pytest.mark.parametrize(("pool", "trust"), [
    ({"site": {"kind": "platform"}, "policy": {"kubernetes": {"platformOperated": True}}}, "platform"),
    ({"site": {"kind": "platform"}, "policy": {"kubernetes": {"platformOperated": False}}}, "tenant-controlled"),
    ({"site": {"kind": "platform"}, "policy": {}}, "tenant-controlled"),
    ({"site": {"kind": "custom"}, "policy": {"kubernetes": {"platformOperated": True}}}, "tenant-owned"),
])
def test_trust_forecast(pool, trust):
    assert trust_forecast(pool) == trust


def test_user_agent_carries_the_version_of_galaxy_yml():
    import yaml
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import collection_version

    from tests.helpers import ROOT

    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert collection_version() == version
    assert Client("https://cp.example.com").user_agent == f"bcd-ansible/{version} (+control-plane-api.md)"
    # a module runs from a zip without galaxy.yml: the version the lookup read is passed in
    assert Client("https://cp.example.com", version="7.1.0").user_agent.startswith("bcd-ansible/7.1.0 ")


def test_an_installed_collection_reads_its_version_from_manifest_json(tmp_path):
    import json

    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import collection_version

    utils = tmp_path / "ansible_collections" / "bcd" / "kubernetes" / "plugins" / "module_utils"
    utils.mkdir(parents=True)
    (utils.parents[1] / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": "2.3.4"}}))
    assert collection_version(str(utils / "bcd_cp.py")) == "2.3.4"
    assert collection_version(str(tmp_path / "elsewhere" / "x.py")) == "unknown"


def test_the_inventory_lookup_passes_the_version_and_the_model_ignores_it(tmp_path):
    import yaml
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import VERSION_KEY, load

    from tests.helpers import ROOT, base_vars, run_playbook

    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.debug": {"msg": "version={{ lookup('bcd.kubernetes.bcd_inventory')['" + VERSION_KEY + "'] }}"}}]}]))
    run = run_playbook(str(play), "-i", "localhost,", "-c", "local")
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"version={version}" in run.stdout
    load({**base_vars(), VERSION_KEY: version})  # not refused as a stray variable
