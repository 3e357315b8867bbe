"""Kubernetes resource quantities: parse and write them in the API server's canonical form.

Source: k8s.io/apimachinery/pkg/api/resource (quantity.go, ``CanonicalizeBytes``). The API
server stores every quantity canonically (``1000m`` is stored as ``1``, ``1024Mi`` as ``1Gi``),
so rendering the canonical form makes a re-apply of the same inventory a no-op and keeps the
rendered manifests equal to what ``kubectl get -o json`` shows.
"""

from __future__ import annotations

import re
from fractions import Fraction

# <quantity> ::= <signedNumber><suffix>; suffix binarySI | decimalSI | e<signedNumber>
QUANTITY_RE = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {v: k for k, v in _DECIMAL.items()}
_BINARY_SUFFIX = {v: k for k, v in _BINARY.items()}


class QuantityError(ValueError):
    """Raised for a string that is not a Kubernetes quantity."""


def parse(text: str) -> tuple[Fraction, str]:
    """Parse a quantity.

    Returns ``(value, format)`` where value is exact and format is ``BinarySI``, ``DecimalSI``
    or ``DecimalExponent`` (the format the suffix implies, as the API server decides it).
    Raises QuantityError for anything else (empty, spaces, unknown suffix such as ``MB``).
    """
    if not isinstance(text, str):
        text = str(text)
    m = QUANTITY_RE.match(text)
    if not m:
        raise QuantityError(f"{text!r} is not a quantity (such as 100m, 128Mi, 1.5, 2G)")
    num = Fraction(m.group("num"))
    suffix = m.group("suffix") or ""
    if suffix in _BINARY:
        return num * (2 ** _BINARY[suffix]), "BinarySI"
    if suffix[:1] in ("e", "E"):
        return num * Fraction(10) ** int(suffix[1:]), "DecimalExponent"
    return num * Fraction(10) ** _DECIMAL[suffix], "DecimalSI"


def _round_up_nano(value: Fraction) -> Fraction:
    # The API server keeps at most nano precision and rounds up (away from zero for positives).
    scaled = value * 10**9
    if scaled.denominator != 1:
        scaled = Fraction(-((-scaled.numerator) // scaled.denominator))
    return scaled / 10**9


def _decimal_canonical(value: Fraction, fmt: str) -> str:
    # mantissa * 10^exponent with exponent a multiple of 3 and mantissa an integer.
    exponent = -9
    mantissa = int(value * 10**9)
    while mantissa != 0 and mantissa % 1000 == 0 and exponent < 18:
        mantissa //= 1000
        exponent += 3
    if fmt == "DecimalExponent":
        return f"{mantissa}" if exponent == 0 else f"{mantissa}e{exponent}"
    return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"


def canonical(text: str) -> str:
    """Return the API server's canonical spelling of a quantity (``1000m`` -> ``1``).

    Raises QuantityError when ``text`` is not a quantity.
    """
    value, fmt = parse(text)
    value = _round_up_nano(value)
    if value == 0:
        return "0"
    if fmt == "BinarySI":
        if -1024 < value < 1024 or value.denominator != 1:
            fmt = "DecimalSI"
        else:
            mantissa, exponent = int(value), 0
            while mantissa % 1024 == 0 and exponent < 60:
                mantissa //= 1024
                exponent += 10
            return f"{mantissa}{_BINARY_SUFFIX.get(exponent, '')}"
    return _decimal_canonical(value, fmt)


def value(text: str) -> Fraction:
    """The exact value of a quantity, for comparisons (requests must not exceed limits)."""
    return parse(text)[0]
