"""Kubernetes quantities as a pod spec writes them, in the units admission counts."""

from __future__ import annotations

from decimal import Decimal

import pytest

from podres_exporter.fit.quantity import quantity, resource_amount


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", Decimal(8)),
        (8, Decimal(8)),
        (1.5, Decimal("1.5")),
        ("500m", Decimal("0.5")),
        (".5", Decimal("0.5")),
        ("+2", Decimal(2)),
        ("64Gi", Decimal(64 * 2**30)),
        ("1Ki", Decimal(1024)),
        ("512M", Decimal(512 * 10**6)),
        ("1e3", Decimal(1000)),
        ("2E-3", Decimal("0.002")),
        ("1E", Decimal(10**18)),  # E alone is exa, as in Kubernetes
        ("100u", Decimal("0.0001")),
        (" 4 ", Decimal(4)),
    ],
)
def test_quantity_reads_every_kubernetes_form(text: object, value: Decimal) -> None:
    """Decimal and binary suffixes, exponents, signs and bare numbers parse as Kubernetes does."""
    assert quantity(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "-1", "1.2.3", "5Gb", "1e", "1 Gi", True, None, [1]])
def test_quantity_refuses_what_kubernetes_refuses(bad: object) -> None:
    """Negative numbers, unknown suffixes and non-scalars are refused with what was expected."""
    with pytest.raises(ValueError, match="expected a quantity"):
        quantity(bad)


def test_quantity_refuses_more_than_kubernetes_holds() -> None:
    """A quantity past int64 is refused, not rounded."""
    with pytest.raises(ValueError, match="larger than"):
        quantity("100Ei")


@pytest.mark.parametrize(
    ("resource", "text", "amount"),
    [
        ("cpu", "500m", 500),
        ("cpu", "8", 8000),
        ("cpu", "0.1m", 1),  # rounded up, as MilliValue rounds
        ("cpu", "1e-3", 1),
        ("memory", "64Gi", 64 * 2**30),
        ("memory", "1e3", 1000),
        ("memory", "1500m", 2),  # rounded up to whole bytes
        ("hugepages-1Gi", "4Gi", 4 * 2**30),
        ("nvidia.com/gpu", "4", 4),
        ("nvidia.com/gpu", "2e0", 2),
    ],
)
def test_resource_amount_in_admission_units(resource: str, text: str, amount: int) -> None:
    """CPU in millicores, memory and hugepages in bytes, extended resources in whole units."""
    assert resource_amount(resource, text) == amount


def test_extended_resources_must_be_whole() -> None:
    """Half a GPU is refused, as the API server refuses it."""
    with pytest.raises(ValueError, match="whole number"):
        resource_amount("nvidia.com/gpu", "500m")
