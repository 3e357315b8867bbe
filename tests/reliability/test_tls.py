"""TLS, end to end through adopt-cluster.yml: a control plane whose certificate comes from another
CA, has expired, or names another host is refused; so is the emulator's own certificate when no
CA file is given (the system trust store does not hold its CA); http:// is refused before any
call.

One run of adopt-cluster.yml with one inventory host (cluster) per case, in parallel. Each bad
control plane is a TLS proxy to the emulator presenting the certificate of its case, so it would
answer as the emulator does if its certificate were accepted; one more host goes through a proxy
with a good certificate and must get past the control plane (it then stops, on purpose, at a node
selector that selects no Node). The proxies count TLS handshakes and the bytes they pass on: a
refused certificate passes nothing. The http:// host points at a listener that counts
connections. The client's rules themselves are tested in tests/unit/plugins/module_utils/test_cp_client.py.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import yaml

from tests.reliability.harness import INVENTORY_IMAGE, Listener, Proxy, first_failure, json_results
from tests.unit.plugins.module_utils.test_cp_client import _ca_and_cert

pytestmark = pytest.mark.sandbox


def test_bad_certificates_and_http_are_refused_before_any_call(ready, runner, tmp_path, reliability):
    world = ready
    reliability.describe("TLS", "another CA, expired, another host name, no CA file (system store), http://; "
                         "one run, one cluster per case, through adopt-cluster.yml")
    v = world.vars
    cp = urlsplit(v["bcd_control_plane_url"])
    upstream = (cp.hostname, cp.port)

    def certs(name: str, **kw) -> tuple[str, str]:
        """(CA file, certificate and key file) from a CA of its own, made for this case."""
        (tmp_path / name).mkdir()
        return _ca_and_cert(tmp_path / name, **kw)

    trusted_ca, _ = certs("trusted")
    _, other_cert = certs("other")  # signed by a CA the client does not trust
    expired_ca, expired_cert = certs("expired", expired=True)
    wrong_ca, wrong_cert = certs("other-host", host="other.example.com")
    good_ca, good_cert = certs("good")

    proxies = {
        "tls-other-ca": (Proxy(upstream, other_cert, v["bcd_control_plane_ca_file"]), trusted_ca),
        "tls-expired": (Proxy(upstream, expired_cert, v["bcd_control_plane_ca_file"]), expired_ca),
        "tls-other-host": (Proxy(upstream, wrong_cert, v["bcd_control_plane_ca_file"]), wrong_ca),
        "tls-good": (Proxy(upstream, good_cert, v["bcd_control_plane_ca_file"]), good_ca),
    }
    plain = Listener()
    hosts = {name: {"bcd_control_plane_url": f"https://127.0.0.1:{p.port}{cp.path}", "bcd_control_plane_ca_file": ca}
             for name, (p, ca) in proxies.items()}
    hosts["tls-good"]["bcd_node_selector"] = {"bcd-reliability/no-such-label": "x"}
    hosts["tls-system-store"] = {"bcd_control_plane_url": v["bcd_control_plane_url"]}
    hosts["http"] = {"bcd_control_plane_url": f"http://127.0.0.1:{plain.port}{cp.path}",
                     "bcd_control_plane_ca_file": v["bcd_control_plane_ca_file"]}
    common = {k: v[k] for k in ("bcd_gateway_url", "bcd_site_id", "bcd_pins", "bcd_tenant", "bcd_pool", "bcd_api_key")}
    common.update(ansible_connection="local", ansible_python_interpreter="{{ ansible_playbook_python }}",
                  bcd_kubeconfig=str(world.sandbox.kubeconfig),
                  bcd_image=INVENTORY_IMAGE,  # the running image: an image change would be refused first
                  bcd_node_selector={"nvidia.com/gpu.present": "true"})
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"clusters": {"hosts": hosts, "vars": common}}))
    tokens_before = len(world.tokens())
    try:
        run = runner.run("adopt-cluster.yml", "-i", str(inventory), env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    finally:
        for p, _ in proxies.values():
            p.close()
        plain.close()
    assert run.returncode != 0
    assert "Traceback" not in run.output
    results = json_results(run)
    failed = {host: first_failure(results[host]) for host in hosts}
    expect = {
        "tls-other-ca": "unable to get local issuer certificate",
        "tls-expired": "certificate has expired",
        "tls-other-host": "mismatch, certificate is not valid for '127.0.0.1'",
        # the emulator sends its CA in the chain, so OpenSSL may name that instead of the missing issuer
        "tls-system-store": ("unable to get local issuer certificate", "self-signed certificate in certificate chain"),
    }
    for host, words in expect.items():
        task, msg = failed[host]
        words = (words,) if isinstance(words, str) else words
        assert "TLS" in msg and any(w in msg for w in words), (host, task, msg)
        assert "bcd_control_plane_ca_file" in msg, msg
    task, msg = failed["http"]
    assert msg.startswith("INVALID_CONFIG: bcd_control_plane_url:") and "must be an https:// URL" in msg, msg
    task, msg = failed["tls-good"]
    assert "selects no Node" in msg, (task, msg)

    for host in ("tls-other-ca", "tls-expired", "tls-other-host"):
        proxy = proxies[host][0]
        assert proxy.handshakes == 0 and proxy.bytes_up == 0, (host, proxy.handshakes, proxy.bytes_up)
        assert proxy.connections >= 1, host  # the client came, and left at the handshake
    good_proxy = proxies["tls-good"][0]
    assert good_proxy.handshakes >= 1 and good_proxy.bytes_up > 0
    assert plain.connections == 0, "http:// must be refused before any connection"
    assert len(world.tokens()) == tokens_before, "no token was minted"

    reliability.runs = len(hosts)
    reliability.unit = "clusters in one run"
    reliability.result = ("each bad certificate refused at the handshake, naming why (expired, another host, unknown "
                          "issuer) and bcd_control_plane_ca_file; http:// refused as INVALID_CONFIG; no byte reached the "
                          "control plane from them; the good proxy got through")
    reliability.figures.update({
        "handshakes refused": {h: len(proxies[h][0].handshake_failures) for h in ("tls-other-ca", "tls-expired", "tls-other-host")},
        "http connections": plain.connections, "good-proxy bytes": good_proxy.bytes_up,
    })
