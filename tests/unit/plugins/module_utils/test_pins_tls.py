"""The serving-CA pin check (bcd_pins.check_serving_ca) against a real local TLS server that
presents a generated chain (leaf, intermediate, root), on the Python these tests run under.

Python's ``ssl`` hands out the presented chain differently by version: 3.13 has a public
``SSLSocket.get_unverified_chain()`` returning DER bytes; 3.10 to 3.12 only the underlying
``_sslobj`` has it, returning certificate objects. Run these under 3.11, 3.12 and 3.13."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import sys
import threading

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_pins import (
    PinError,
    Unreachable,
    _presented_chain,
    check_serving_ca,
    pin_of_spki,
    unverified_chain,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NAME = "gw.bcd.test"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str, key, issuer_name: x509.Name, issuer_key, now) -> x509.Certificate:
    return (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(issuer_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
            .sign(issuer_key, hashes.SHA256()))


def _pin(cert: x509.Certificate) -> str:
    return pin_of_spki(cert.public_key().public_bytes(serialization.Encoding.DER,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A root CA, an intermediate it signed, a leaf for NAME and 127.0.0.1 the intermediate
    signed; the server's PEM file (leaf, intermediate, root, key)."""
    now = dt.datetime.now(dt.UTC)
    root_key, inter_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    root = _ca("bcd test root", root_key, _name("bcd test root"), root_key, now)
    inter = _ca("bcd test intermediate", inter_key, root.subject, root_key, now)
    leaf = (x509.CertificateBuilder().subject_name(_name(NAME)).issuer_name(inter.subject)
            .public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(inter_key.public_key()), critical=False)
            .sign(inter_key, hashes.SHA256()))
    pem = tmp_path_factory.mktemp("tls") / "server.pem"
    pem.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (leaf, inter, root))
                    + leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    return {"root": root, "intermediate": inter, "leaf": leaf, "pem": str(pem)}


@pytest.fixture(scope="module")
def server(chain):
    """A TLS server on 127.0.0.1 that completes each handshake and closes; its port."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(chain["pem"])
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _addr = listener.accept()
            except OSError:
                return
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()


def test_this_pythons_ssl_has_the_chain_where_expected():
    assert hasattr(ssl.SSLSocket, "get_unverified_chain") is (sys.version_info >= (3, 13))


def test_the_presented_chain_is_der_bytes_leaf_first(chain, server):
    ders = _presented_chain("127.0.0.1", server, NAME, 5.0)
    want = [chain[k].public_bytes(serialization.Encoding.DER) for k in ("leaf", "intermediate", "root")]
    assert all(type(d) is bytes for d in ders)
    assert ders == want


def test_the_pinned_root_is_found_and_verifies_the_server(chain, server):
    check_serving_ca(f"https://127.0.0.1:{server}/", NAME, _pin(chain["root"]))
    check_serving_ca(f"https://127.0.0.1:{server}/", None, _pin(chain["root"]))  # the URL's host, in the SAN


def test_a_pin_the_server_does_not_present_names_what_it_presents(chain, server):
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    pin = pin_of_spki(other.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(PinError) as err:
        check_serving_ca(f"https://127.0.0.1:{server}/", NAME, pin)
    said = str(err.value)
    assert "presented no certificate with this pin" in said
    assert f"CN={NAME} {_pin(chain['leaf'])}" in said and f"CN=bcd test root {_pin(chain['root'])}" in said


def test_the_pinned_root_does_not_vouch_for_another_name(chain, server):
    with pytest.raises(PinError, match="has no certificate that verifies against the pinned CA"):
        check_serving_ca(f"https://127.0.0.1:{server}/", "other.bcd.test", _pin(chain["root"]))


def test_no_server_is_unreachable():
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(Unreachable):
        _presented_chain("127.0.0.1", port, NAME, 2.0)


class _Cert:
    """What ``_sslobj.get_unverified_chain()`` returns up to Python 3.12: PEM from public_bytes()."""

    def __init__(self, der: bytes):
        self.der = der

    def public_bytes(self) -> str:
        return ssl.DER_cert_to_PEM_cert(self.der)


class _Sock:
    def __init__(self, public=None, sslobj=None, leaf=b"leaf-der"):
        if public is not None:
            self.get_unverified_chain = lambda: public
        if sslobj is not None:
            self._sslobj = type("SSLObj", (), {"get_unverified_chain": staticmethod(lambda: sslobj)})()
        self.leaf = leaf

    def getpeercert(self, binary_form=False):
        return self.leaf


def test_every_shape_of_the_chain_is_read_as_der(chain):
    ders = [chain[k].public_bytes(serialization.Encoding.DER) for k in ("leaf", "intermediate")]
    assert unverified_chain(_Sock(public=list(ders))) == ders  # 3.13
    assert unverified_chain(_Sock(sslobj=[_Cert(d) for d in ders])) == ders  # 3.10 to 3.12
    assert unverified_chain(_Sock(sslobj=[])) == [b"leaf-der"]  # an empty chain: the leaf
    assert unverified_chain(_Sock()) == [b"leaf-der"]  # neither method
    assert unverified_chain(_Sock(leaf=None)) == []
