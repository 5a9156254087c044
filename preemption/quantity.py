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
    number = Fraction(match["number"])
    if match["binary"]:
        value = number * _BINARY_SUFFIXES[match["binary"]]
    elif match["exponent"]:
        value = number * Fraction(10) ** int(match["exponent"][1:])
    else:
        value = number * _DECIMAL_SUFFIXES[match["decimal"] or ""]
    if len(_value_cache) < _CACHE_LIMIT:
        _value_cache[text] = value
    return value


def to_value(quantity: Fraction) -> int:
    """`Quantity.Value()`: the integer value, rounded up."""
    return math.ceil(quantity)


def to_milli_value(quantity: Fraction) -> int:
    """`Quantity.MilliValue()`: the value in thousandths, rounded up (cpu is counted this way)."""
    return math.ceil(quantity * 1000)
