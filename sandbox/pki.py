"""The sandbox's one PKI builder, and the cluster's PKI: one CA, serving and client certificates,
ServiceAccount keys.

:func:`new_key`, :func:`issue_ca`, :func:`issue` and :func:`write_private` make every key and
certificate of the sandbox: the cluster's below and the control-plane emulator's
(sandbox.control_plane.pki, which adds the emulator's join keys and secrets).

The cluster's is made once per sandbox under ``<dir>/pki`` (directory 0700, private keys 0600) by :func:`ensure`,
which only creates what is missing, so ``up`` on an existing sandbox keeps its identities.

The certificates follow what kubeadm issues (https://kubernetes.io/docs/setup/best-practices/certificates/)
with the extensions strict TLS clients check (Python's ``ssl.VERIFY_X509_STRICT``, Go's x509):

* ``ca``: self-signed, basicConstraints CA:TRUE (critical), keyUsage keyCertSign + cRLSign +
  digitalSignature (critical), subjectKeyIdentifier and authorityKeyIdentifier.
* ``apiserver``: serverAuth; SANs 127.0.0.1, localhost, kubernetes, kubernetes.default,
  kubernetes.default.svc, kubernetes.default.svc.cluster.local and the first service IP 10.0.0.1.
* ``etcd``: serving and peer certificate of etcd (serverAuth + clientAuth, SANs 127.0.0.1 and
  localhost); ``apiserver-etcd-client`` is the API server's client certificate for etcd.
* client certificates (clientAuth) whose subject is the Kubernetes user and groups:
  ``admin`` (CN=kubernetes-admin, O=system:masters), ``kube-controller-manager``
  (CN=system:kube-controller-manager), ``kube-scheduler`` (CN=system:kube-scheduler) and
  ``kwok`` (CN=system:kwok-controller, bound to a ClusterRole by the cluster set-up).
* ``kube-controller-manager-serving``, ``kube-scheduler-serving``: their health endpoints'
  serving certificates (serverAuth, SANs 127.0.0.1 and localhost).
* ``sa.key`` / ``sa.pub``: the RSA key pair that signs and verifies ServiceAccount tokens.

Every key is RSA 2048. Certificates are valid from one hour ago for ten years (CA) or one year.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

SERVICE_IP = "10.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"

APISERVER_SANS = (
    "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Leaf:
    """A certificate the CA issues: file stem, subject, usages and SANs."""

    name: str
    cn: str
    orgs: tuple[str, ...] = ()
    server: bool = False
    client: bool = False
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()


LEAVES = (
    Leaf("apiserver", "kube-apiserver", server=True, dns=APISERVER_SANS, ips=("127.0.0.1", SERVICE_IP)),
    Leaf("etcd", "etcd", server=True, client=True, dns=("localhost",), ips=("127.0.0.1",)),
    Leaf("apiserver-etcd-client", "kube-apiserver-etcd-client", client=True),
    Leaf("admin", "kubernetes-admin", orgs=("system:masters",), client=True),
    Leaf("kube-controller-manager", "system:kube-controller-manager", client=True),
    Leaf("kube-scheduler", "system:kube-scheduler", client=True),
    Leaf("kwok", "system:kwok-controller", client=True),
    Leaf("kube-controller-manager-serving", "kube-controller-manager", server=True, dns=("localhost",),
         ips=("127.0.0.1",)),
    Leaf("kube-scheduler-serving", "kube-scheduler", server=True, dns=("localhost",), ips=("127.0.0.1",)),
)

KWOK_USER = "system:kwok-controller"


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` created with ``mode`` (never briefly world-readable; atomic rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, mode)
    tmp.replace(path)


def new_key(kind: str = "rsa") -> PrivateKey:
    """A new private key: ``rsa`` (2048 bits, the cluster's) or ``ec`` (P-256, the emulator's)."""
    if kind == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_key(path: Path) -> PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey)
    return key


def name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    """A subject: the organisations (Kubernetes groups), then the common name (the user)."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _usage(*, cert_sign: bool, key_encipherment: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=key_encipherment,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign,
        encipher_only=False, decipher_only=False,
    )


def issue_ca(key: PrivateKey, subject: x509.Name, *, days: int = 3650, path_length: int | None = None) -> x509.Certificate:
    """A self-signed CA: basicConstraints CA:TRUE (critical), keyUsage keyCertSign + cRLSign +
    digitalSignature (critical), SKI and AKI; valid from one hour ago for ``days``."""
    now = datetime.datetime.now(datetime.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    return (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(_usage(cert_sign=True, key_encipherment=False), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )


def issue(ca_cert: x509.Certificate, ca_key: PrivateKey, key: PrivateKey, subject: x509.Name, *,
          server: bool = False, client: bool = False, dns: tuple[str, ...] = (), ips: tuple[str, ...] = (),
          days: int = 365) -> x509.Certificate:
    """A leaf the CA signs for ``key``: basicConstraints CA:FALSE and keyUsage digitalSignature
    (critical; keyEncipherment too for an RSA key), serverAuth / clientAuth, SANs, SKI and AKI."""
    now = datetime.datetime.now(datetime.UTC)
    ekus = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False, key_encipherment=isinstance(key, rsa.RSAPrivateKey)), critical=True)
        .add_extension(x509.ExtendedKeyUsage(ekus), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
    )
    if dns or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ips)]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


# -- the cluster's PKI ----------------------------------------------------------------------------

def _make_ca(pki: Path) -> None:
    key = new_key()
    write_private(pki / "ca.key", key_pem(key), 0o600)
    write_private(pki / "ca.crt", _pem(issue_ca(key, name("bcd-sandbox-ca"))), 0o644)


def _load_ca(pki: Path) -> tuple[x509.Certificate, PrivateKey]:
    return x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes()), load_key(pki / "ca.key")


def _make_leaf(pki: Path, leaf: Leaf, ca_cert: x509.Certificate, ca_key: PrivateKey) -> None:
    key = new_key()
    cert = issue(ca_cert, ca_key, key, name(leaf.cn, leaf.orgs), server=leaf.server, client=leaf.client,
                 dns=leaf.dns, ips=leaf.ips)
    write_private(pki / f"{leaf.name}.key", key_pem(key), 0o600)
    write_private(pki / f"{leaf.name}.crt", _pem(cert), 0o644)


def _make_sa(pki: Path) -> None:
    key = new_key()
    pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    write_private(pki / "sa.key", key_pem(key), 0o600)
    write_private(pki / "sa.pub", pub, 0o644)


def ensure(pki: Path) -> Path:
    """Create whatever of the PKI is missing under ``pki``; return ``pki``.

    A new CA re-issues every leaf, so the files always form one chain.
    """
    pki.mkdir(parents=True, exist_ok=True)
    os.chmod(pki, 0o700)
    fresh_ca = not ((pki / "ca.crt").is_file() and (pki / "ca.key").is_file())
    if fresh_ca:
        _make_ca(pki)
    ca_cert, ca_key = _load_ca(pki)
    for leaf in LEAVES:
        if fresh_ca or not ((pki / f"{leaf.name}.crt").is_file() and (pki / f"{leaf.name}.key").is_file()):
            _make_leaf(pki, leaf, ca_cert, ca_key)
    if not ((pki / "sa.key").is_file() and (pki / "sa.pub").is_file()):
        _make_sa(pki)
    return pki
