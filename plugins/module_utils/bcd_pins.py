"""Public-key pins and JWKs, as docs/control-plane-api.md (Pins) defines them.

A pin is ``sha256/`` + the standard base64 (with padding, 44 characters) of the SHA-256 digest
of the DER-encoded SubjectPublicKeyInfo of a public key (the HPKP form, RFC 7469). Pins are
trust anchors: they come from the operator, never from the network.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re

PIN_RE = re.compile(r"^sha256/[A-Za-z0-9+/]{43}=$")
# JWK members that carry private key material (RFC 7517/7518): EC and OKP ``d``; RSA ``d``,
# ``p``, ``q``, ``dp``, ``dq``, ``qi``, ``oth``; symmetric ``k``.
PRIVATE_JWK_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")


class PinError(ValueError):
    """A malformed pin or key, or a key that is not the one pinned."""


def is_pin(value: object) -> bool:
    """True when ``value`` is ``sha256/<44 base64 characters>`` decoding to 32 bytes."""
    if not isinstance(value, str) or not PIN_RE.match(value):
        return False
    try:
        return len(base64.b64decode(value[7:], validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def pin_of_spki(spki_der: bytes) -> str:
    """The pin of a DER-encoded SubjectPublicKeyInfo."""
    return "sha256/" + base64.b64encode(hashlib.sha256(spki_der).digest()).decode("ascii")


def _b64url_int(value: str, member: str) -> int:
    if not isinstance(value, str) or not value:
        raise PinError(f"JWK member {member!r} must be a base64url string")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError) as exc:
        raise PinError(f"JWK member {member!r} is not base64url") from exc
    return int.from_bytes(raw, "big")


def load_jwk(value: object) -> dict:
    """Accept a JWK as a mapping or a JSON string; return it as a dict.

    Raises PinError for anything that is not a JSON object, or that carries a private part.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise PinError("is not a JSON object (a public JWK)") from exc
    if not isinstance(value, dict):
        raise PinError("must be a JWK: a mapping or a JSON object")
    private = sorted(m for m in PRIVATE_JWK_MEMBERS if m in value)
    if private:
        raise PinError("has a private part (" + ", ".join(private) + "); give the public key only")
    return dict(value)


def spki_of_jwk(jwk: dict) -> bytes:
    """DER SubjectPublicKeyInfo of a public EC (P-256/P-384/P-521), RSA or OKP (X25519, Ed25519) JWK.

    Raises PinError for an unsupported or malformed key.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa, x25519

    kty = jwk.get("kty")
    try:
        if kty == "EC":
            curves = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}
            curve = curves.get(jwk.get("crv"))
            if curve is None:
                raise PinError(f"EC curve {jwk.get('crv')!r} is not P-256, P-384 or P-521")
            key = ec.EllipticCurvePublicNumbers(
                _b64url_int(jwk.get("x"), "x"), _b64url_int(jwk.get("y"), "y"), curve
            ).public_key()
        elif kty == "RSA":
            key = rsa.RSAPublicNumbers(_b64url_int(jwk.get("e"), "e"), _b64url_int(jwk.get("n"), "n")).public_key()
        elif kty == "OKP":
            crv = jwk.get("crv")
            x = jwk.get("x")
            if not isinstance(x, str):
                raise PinError("JWK member 'x' must be a base64url string")
            raw = base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))
            if crv == "X25519":
                key = x25519.X25519PublicKey.from_public_bytes(raw)
            elif crv == "Ed25519":
                key = ed25519.Ed25519PublicKey.from_public_bytes(raw)
            else:
                raise PinError(f"OKP curve {crv!r} is not X25519 or Ed25519")
        else:
            raise PinError(f"key type {kty!r} is not EC, RSA or OKP")
    except PinError:
        raise
    except (ValueError, TypeError, binascii.Error) as exc:
        raise PinError(f"is not a valid {kty} public key ({exc})") from exc
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def pin_of_jwk(jwk: object) -> str:
    """The pin of a public JWK (mapping or JSON string). Raises PinError (private part, malformed)."""
    return pin_of_spki(spki_of_jwk(load_jwk(jwk)))


def pin_of_pem(pem: bytes) -> str:
    """The pin of a PEM certificate's public key, or of a PEM public key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if b"BEGIN CERTIFICATE" in pem:
        key = x509.load_pem_x509_certificate(pem).public_key()
    else:
        key = serialization.load_pem_public_key(pem)
    return pin_of_spki(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))


class Unreachable(OSError):
    """The gateway could not be reached (or spoke no TLS) from here."""


def unverified_chain(tls) -> list[bytes]:
    """The DER certificates a connected ``ssl.SSLSocket`` was presented (leaf first), unverified.

    Python 3.13 made ``SSLSocket.get_unverified_chain()`` public; it returns DER ``bytes``. From
    3.10 to 3.12 only the underlying ``_sslobj`` has it, returning ``_ssl.Certificate`` objects
    (PEM from their ``public_bytes()``). Either is read; where neither is, or the chain comes back
    empty, the leaf alone (``getpeercert(binary_form=True)``), or ``[]`` when there is none.
    """
    import ssl

    getter = getattr(tls, "get_unverified_chain", None) or getattr(getattr(tls, "_sslobj", None), "get_unverified_chain", None)
    ders = []
    for cert in (getter() if getter else None) or []:
        if isinstance(cert, (bytes, bytearray)):
            ders.append(bytes(cert))
        else:
            ders.append(ssl.PEM_cert_to_DER_cert(cert.public_bytes()))
    if not ders:
        leaf = tls.getpeercert(binary_form=True)
        ders = [leaf] if leaf else []
    return ders


def _presented_chain(host: str, port: int, server_name: str, timeout: float) -> list[bytes]:
    """The DER certificates the TLS server at host:port presents (leaf first), unverified."""
    import socket
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname=server_name) as tls:
            return unverified_chain(tls)
    except (OSError, ssl.SSLError) as exc:
        raise Unreachable(f"{type(exc).__name__}: {exc}") from None


def check_serving_ca(url: str, server_name: str | None, pinned: str, timeout: float = 5.0) -> None:
    """Check that the TLS server at ``url`` (an https URL; SNI ``server_name``, else the URL's
    host) holds a certificate issued under a CA whose public key has the pin ``pinned``.

    Two connections: the first reads the chain the server presents and finds the certificate
    with that SPKI pin (none: PinError naming what was presented); the second verifies the
    server's certificate and name against that certificate alone as trust anchor, so that a
    server presenting the CA's (public) certificate without a certificate it issued fails too.
    Raises :class:`Unreachable` when the server cannot be reached, PinError on a mismatch.
    """
    import socket
    import ssl
    from urllib.parse import urlsplit

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    name = server_name or host
    chain = _presented_chain(host, port, name, timeout)
    presented = []
    anchor = None
    for der in chain:
        cert = x509.load_der_x509_certificate(der)
        spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        pin = pin_of_spki(spki)
        presented.append(f"{cert.subject.rfc4514_string() or '(no subject)'} {pin}")
        if pin == pinned and anchor is None:
            anchor = der
    if anchor is None:
        raise PinError(f"the gateway {host}:{port} presented no certificate with this pin; it presented: "
                       + "; ".join(presented))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=anchor)
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, ctx.wrap_socket(raw, server_hostname=name):
            pass
    except ssl.SSLCertVerificationError as exc:
        raise PinError(f"the gateway {host}:{port} (server name {name}) has no certificate that verifies against the "
                       f"pinned CA: {exc.verify_message or exc}") from None
    except (OSError, ssl.SSLError) as exc:
        raise Unreachable(f"{type(exc).__name__}: {exc}") from None
