"""Resource quantities, parsed as `k8s.io/apimachinery/pkg/api/resource` parses them.

Scenarios:
- plain and fractional numbers, decimal-SI suffixes (`m`, `k`, `M`, `G`, `E` = exa, `n`, `u`),
  binary-SI suffixes (`Ki`, `Mi`, `Gi`), decimal exponents (`1e3`, `1E-2`);
- cpu is counted in millicores and memory in units, both rounded up (`0.5m` cpu is 1m);
- JSON numbers are accepted as the API server accepts them;
- malformed quantities are rejected with the text in the message;
- a negative request is rejected.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from preemptctl.preemption.errors import QuantityError
from preemptctl.preemption.quantity import parse_quantity, to_milli_value, to_value
from preemptctl.preemption.resources import resource_amount


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        ("128Mi", 128 * 2**20),
        ("1G", 10**9),
        ("1e3", 1000),
        ("1E-2", Fraction(1, 100)),
        ("500k", 500_000),
        ("1E", 10**18),
        ("2Ei", 2 * 2**60),
        ("1Ki", 1024),
        ("250u", Fraction(250, 10**6)),
        ("5n", Fraction(5, 10**9)),
        (".5", Fraction(1, 2)),
        ("3.", 3),
        ("+2", 2),
        ("0", 0),
    ],
)
def test_quantity_strings_have_their_kubernetes_value(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


def test_cpu_is_counted_in_millicores() -> None:
    assert resource_amount("cpu", "1.5") == 1500
    assert resource_amount("cpu", "100m") == 100


def test_half_a_millicore_rounds_up_to_one_millicore() -> None:
    assert resource_amount("cpu", "0.5m") == 1
    assert to_milli_value(parse_quantity("0.5m")) == 1


def test_fractional_bytes_round_up() -> None:
    assert resource_amount("memory", "1.5") == 2
    assert to_value(parse_quantity("0.1")) == 1


def test_memory_with_a_binary_suffix_is_counted_in_bytes() -> None:
    assert resource_amount("memory", "128Mi") == 134_217_728


def test_json_numbers_are_quantities() -> None:
    assert parse_quantity(2) == 2
    assert parse_quantity(0.25) == Fraction(1, 4)
    assert resource_amount("cpu", 2) == 2000


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "abc",
        "5x",
        "1.5e",
        "Mi",
        "1 Gi",
        "1.2.3",
        "--1",
        "1KiB",
        "1mi",
        "e3",
        "0x10",
        "1e3.5",
    ],
)
def test_malformed_quantities_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError, match="malformed quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, float("nan"), float("inf"), [1]])
def test_values_that_are_not_quantities_are_rejected(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]


def test_a_negative_request_is_rejected() -> None:
    with pytest.raises(QuantityError, match=r"negative request '-100m' \(cpu\)"):
        resource_amount("cpu", "-100m")
