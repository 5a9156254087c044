"""Kubernetes resource quantities, parsed exactly as `k8s.io/apimachinery/pkg/api/resource` does.

A quantity is a signed decimal number followed by a binary-SI suffix (`Ki`..`Ei`), a
decimal-SI suffix (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal exponent
(`e3`, `E-2`). Arithmetic is exact (fractions), and rounding follows `Quantity.Value()`
and `Quantity.MilliValue()`: both round up, so `0.5m` cpu is 1 millicore and `1.5` bytes
is 2 bytes, as the scheduler counts them.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from preemptctl.preemption.errors import QuantityError

_BINARY_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL_SUFFIXES = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exponent>[eE][+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))"
)

# Bounds that keep hostile input cheap. The scheduler counts in int64, so a larger value can
# only overflow there; an exponent far beyond that is rejected before it is computed (1e100000000
# would otherwise build a hundred-million-digit number). Values below a nano-unit round up to
# one nano-unit, as upstream's parser rounds them, however small the exponent.
MAX_VALUE = 2**63 - 1
_MAX_DIGITS = 64
_MAX_EXPONENT = 40
_NANO = Fraction(1, 10**9)

# Quantities repeat endlessly across a cluster ("100m", "128Mi"); parsing each string once
# keeps building a 150,000-pod view cheap. Bounded so hostile input cannot grow it forever.
_CACHE_LIMIT = 65_536
_value_cache: dict[str, Fraction] = {}


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity string (JSON numbers are accepted as the API server does)."""
    if isinstance(text, bool):
        raise QuantityError(f"malformed quantity {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"malformed quantity {text!r}")
        return Fraction(str(text))
    if not isinstance(text, str):
        raise QuantityError(f"malformed quantity {text!r}")
    cached = _value_cache.get(text)
    if cached is not None:
        return cached
    match = _QUANTITY.fullmatch(text)  # upstream trims nothing: " 1" is malformed
    if match is None:
        raise QuantityError(f"malformed quantity {text!r}")
    if len(match["number"]) > _MAX_DIGITS:
        raise QuantityError(f"quantity {text[:40]!r}... has more than {_MAX_DIGITS} digits")
    number = Fraction(match["number"])
    if match["binary"]:
        # upstream caps binary-SI quantities at the largest int64
        value = number * _BINARY_SUFFIXES[match["binary"]]
        value = max(min(value, Fraction(MAX_VALUE)), Fraction(-MAX_VALUE))
    elif match["exponent"]:
        value = _scaled(number, match["exponent"][1:], text)
    else:
        value = number * _DECIMAL_SUFFIXES[match["decimal"] or ""]
    if abs(value) > MAX_VALUE:
        raise QuantityError(f"quantity {text!r} is out of range (at most {MAX_VALUE})")
    if len(_value_cache) < _CACHE_LIMIT:
        _value_cache[text] = value
    return value


def _scaled(number: Fraction, exponent_text: str, text: str) -> Fraction:
    """`number` times ten to the exponent, without computing absurd powers."""
    if len(exponent_text.lstrip("+-").lstrip("0")) > 10:
        raise QuantityError(f"quantity {text!r} has an exponent out of range")
    exponent = int(exponent_text)
    if not number:
        return number
    if exponent > _MAX_EXPONENT:
        raise QuantityError(f"quantity {text!r} is out of range (at most {MAX_VALUE})")
    if exponent < -_MAX_EXPONENT:
        return _NANO if number > 0 else -_NANO
    return number * Fraction(10) ** exponent


def to_value(quantity: Fraction) -> int:
    """`Quantity.Value()`: the integer value, rounded up."""
    return math.ceil(quantity)


def to_milli_value(quantity: Fraction) -> int:
    """`Quantity.MilliValue()`: the value in thousandths, rounded up (cpu is counted this way)."""
    return math.ceil(quantity * 1000)
