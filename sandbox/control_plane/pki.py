"""The emulator's PKI and secrets, made at first start under ``<sandbox dir>/control-plane/``.

Its keys and certificates are made by the sandbox's one PKI builder (sandbox.pki); this module
adds what only the emulator has: the join keys as JWKs, pins, derived tokens and credentials.

Every file is created 0600 in a 0700 directory, and only when missing, so a restart keeps every
identity (and the tokens minted under the token secret stay valid):

* ``ca.pem`` / ``ca.key``: the serving CA (EC P-256, self-signed, basicConstraints CA:TRUE
  pathlen 0, keyUsage keyCertSign + cRLSign + digitalSignature, SKI and AKI). It signs the
  emulator's server certificate and is also the gateway's serving CA: the sandbox's gateway URL
  points at the emulator's own TLS listener, so the pin can be checked against what it presents.
* ``server.pem`` / ``server.key``: the server certificate (SANs ``localhost``, ``127.0.0.1`` and
  each address the emulator also listens on, such as the kind network's gateway address, so pods
  on real nodes verify it; EKU serverAuth, keyUsage digitalSignature, SKI and AKI), so Python's
  strict verification passes. It is issued again when an address is missing from it.
  ``server-chain.pem`` (written at each start) is it followed by ``ca.pem``: the listener presents
  both, as a gateway presents its chain, so the serving CA's pin can be checked against it.
* ``join-signing.key``, ``join-encryption.key``: the JoinService signing and encryption keys
  (EC P-256). Discovery's ``joinKey`` is the public encryption key as a JWK, and its
  ``joinSigningKey`` the public signing key (unless the seed's ``publish_join_signing_key`` is false).
* ``token-secret``: 32 random bytes; a join token is ``bcdjt_<id>.<HMAC-SHA256(secret, id)>``,
  so no token is stored and a replayed ``joinTokens.create`` gives the same token back. A joined
  node's credential (what ``bcd node`` reports with) is ``bcdnc_<node id>.<HMAC-SHA256(secret,
  "node:" + id)>``, derived the same way.
* ``api-key``: the tenant's API key (``bcdk_`` + 43 url-safe characters); ``admin-token``: the
  bearer token of the admin endpoint.

Pins are as control-plane-api.md (Pins) defines them: ``sha256/`` + standard base64 of the
SHA-256 of the DER SubjectPublicKeyInfo.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sandbox.pki import issue, issue_ca, key_pem, load_key, name, new_key, write_private

TOKEN_PREFIX = "bcdjt_"  # noqa: S105 - a prefix, not a secret
CREDENTIAL_PREFIX = "bcdnc_"


def write_secret_file(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data``, mode 0600 from the first byte on (atomic rename)."""
    write_private(path, data, 0o600)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def spki_der(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def pin(public_key) -> str:
    """``sha256/<base64 of SHA-256 of the DER SPKI>`` (44 base64 characters with padding)."""
    return "sha256/" + base64.b64encode(hashlib.sha256(spki_der(public_key)).digest()).decode("ascii")


def public_jwk(public_key: ec.EllipticCurvePublicKey, use: str) -> dict:
    """The public P-256 key as a JWK with ``kid`` (its RFC 7638 thumbprint) and ``use``."""
    numbers = public_key.public_numbers()
    x = _b64url(numbers.x.to_bytes(32, "big"))
    y = _b64url(numbers.y.to_bytes(32, "big"))
    thumb = json.dumps({"crv": "P-256", "kty": "EC", "x": x, "y": y}, separators=(",", ":"), sort_keys=True)
    kid = _b64url(hashlib.sha256(thumb.encode("ascii")).digest())
    return {"kty": "EC", "crv": "P-256", "x": x, "y": y, "kid": kid, "use": use}


def _new_key() -> ec.EllipticCurvePrivateKey:
    key = new_key("ec")
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def _ca(key) -> x509.Certificate:
    """The serving CA: may sign the server certificate only (pathlen 0)."""
    return issue_ca(key, name("bcd sandbox control-plane serving CA", ("bcd-ansible sandbox",)), path_length=0)


def _server(key, ca_cert: x509.Certificate, ca_key, extra_ips: tuple[str, ...] = ()) -> x509.Certificate:
    return issue(ca_cert, ca_key, key, name("localhost"), server=True, dns=("localhost",),
                 ips=("127.0.0.1", *extra_ips), days=825)


@dataclass
class Pki:
    """The emulator's keys and secrets, loaded from (or first made in) ``directory``."""

    directory: Path
    ca_cert: x509.Certificate
    signing_key: ec.EllipticCurvePrivateKey
    encryption_key: ec.EllipticCurvePrivateKey
    token_secret: bytes
    api_key: str
    admin_token: str

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server_cert_file(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key_file(self) -> Path:
        return self.directory / "server.key"

    def pins(self) -> dict:
        """``{serving_ca, join_signing, join_encryption}``, each ``sha256/<base64>``."""
        return {
            "serving_ca": pin(self.ca_cert.public_key()),
            "join_signing": pin(self.signing_key.public_key()),
            "join_encryption": pin(self.encryption_key.public_key()),
        }

    @property
    def server_chain_file(self) -> Path:
        """The server certificate followed by the serving CA's: the chain the listener presents."""
        return self.directory / "server-chain.pem"

    def join_signing_key(self) -> dict:
        """Discovery's ``joinSigningKey``: the public signing key as a JWK, ``use`` "sig"."""
        return public_jwk(self.signing_key.public_key(), "sig")

    def join_key(self) -> dict:
        """Discovery's ``joinKey``: the public encryption key as a JWK, ``use`` "enc"."""
        return public_jwk(self.encryption_key.public_key(), "enc")

    def token_for(self, token_id: str) -> str:
        """The secret join token of ``token_id`` (derived, never stored)."""
        mac = hmac.new(self.token_secret, token_id.encode("ascii"), hashlib.sha256).digest()
        return f"{TOKEN_PREFIX}{token_id}.{_b64url(mac)}"

    def token_id_of(self, token: str) -> str | None:
        """The id a presented token names, when its MAC is right; else None."""
        if not token.startswith(TOKEN_PREFIX) or "." not in token:
            return None
        token_id = token[len(TOKEN_PREFIX):].rsplit(".", 1)[0]
        try:
            token_id.encode("ascii")
        except UnicodeEncodeError:
            return None
        return token_id if hmac.compare_digest(self.token_for(token_id), token) else None

    def credential_for(self, node_id: str) -> str:
        """The secret credential of joined node ``node_id`` (derived, never stored)."""
        mac = hmac.new(self.token_secret, b"node:" + node_id.encode("ascii"), hashlib.sha256).digest()
        return f"{CREDENTIAL_PREFIX}{node_id}.{_b64url(mac)}"

    def node_of_credential(self, credential: str) -> str | None:
        """The node id a presented credential names, when its MAC is right; else None."""
        if not credential.startswith(CREDENTIAL_PREFIX) or "." not in credential:
            return None
        node_id = credential[len(CREDENTIAL_PREFIX):].rsplit(".", 1)[0]
        try:
            node_id.encode("ascii")
        except UnicodeEncodeError:
            return None
        return node_id if hmac.compare_digest(self.credential_for(node_id), credential) else None

    def sign(self, data: bytes) -> str:
        """ES256 signature of ``data`` by the JoinService signing key: base64url of r || s (JWS)."""
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        r, s = decode_dss_signature(self.signing_key.sign(data, ec.ECDSA(hashes.SHA256())))
        return _b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def _server_ips(path: Path) -> set[str]:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return set()
    return {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}


def ensure(directory: Path, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Load the PKI from ``directory``, making whatever is missing (keys 0600, dir 0700); the
    server certificate is issued again when one of ``extra_ips`` is not among its SANs."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)

    def key_file(name: str):
        path = directory / name
        if not path.exists():
            write_secret_file(path, key_pem(_new_key()))
        return load_key(path)

    ca_key = key_file("ca.key")
    ca_path = directory / "ca.pem"
    if not ca_path.exists():
        write_secret_file(ca_path, _ca(ca_key).public_bytes(serialization.Encoding.PEM))
        (directory / "server.pem").unlink(missing_ok=True)
    ca_cert = x509.load_pem_x509_certificate(ca_path.read_bytes())
    server_key = key_file("server.key")
    server_path = directory / "server.pem"
    if not server_path.exists() or not set(extra_ips) <= _server_ips(server_path):
        cert = _server(server_key, ca_cert, ca_key, tuple(sorted(_server_ips(server_path) | set(extra_ips))))
        write_secret_file(server_path, cert.public_bytes(serialization.Encoding.PEM))

    write_secret_file(directory / "server-chain.pem", server_path.read_bytes() + ca_path.read_bytes())

    def random_file(name: str, make) -> bytes:
        path = directory / name
        if not path.exists():
            write_secret_file(path, make())
        return path.read_bytes()

    token_secret = random_file("token-secret", lambda: secrets.token_bytes(32))
    api_key = random_file("api-key", lambda: ("bcdk_" + secrets.token_urlsafe(32)).encode("ascii")).decode().strip()
    admin_token = random_file("admin-token", lambda: secrets.token_urlsafe(32).encode("ascii")).decode().strip()
    return Pki(
        directory=directory,
        ca_cert=ca_cert,
        signing_key=key_file("join-signing.key"),
        encryption_key=key_file("join-encryption.key"),
        token_secret=token_secret,
        api_key=api_key,
        admin_token=admin_token,
    )
