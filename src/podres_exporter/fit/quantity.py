"""Kubernetes resource quantities as a pod spec writes them, in the units admission counts.

The grammar of ``k8s.io/apimachinery/pkg/api/resource/quantity.go``: a decimal number
(``8``, ``1.5``, ``.5``, ``+2``) and one suffix, binary (``Ki`` ... ``Ei``), decimal
(``n``, ``u``, ``m``, ``k``, ``M``, ``G``, ``T``, ``P``, ``E``) or an exponent
(``1e3``, ``2E-3``). CPU becomes millicores and memory or hugepages bytes, each rounded
up as ``Quantity.MilliValue`` and ``Quantity.Value`` round; every other (extended)
resource must be a whole number, as the API server's validation requires
(``pkg/apis/core/validation``: ``ValidateResourceQuantityValue`` and
``validateExtendedResourceName``: "must be an integer").
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

__all__ = ["quantity", "resource_amount"]

_SUFFIX = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip
_QUANTITY = re.compile(
    r"(?P<number>[+]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?\d{1,3}))?"
)
# The largest quantity taken: 2**63 of the smallest unit, as Kubernetes' int64 values.
_MAX = Decimal(2**63 - 1)


def quantity(value: object) -> Decimal:
    """A Kubernetes quantity (a string, an int or a float as YAML gives it) as a Decimal;
    ValueError saying what was expected otherwise (negative quantities included)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a quantity such as 8, 500m or 64Gi, got {value!r}")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float) and math.isfinite(value):
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise ValueError(f"expected a quantity such as 8, 500m or 64Gi, got {value!r}")
    m = _QUANTITY.fullmatch(text)
    if not m:
        raise ValueError(f"expected a quantity such as 8, 500m or 64Gi, got {value!r}")
    try:
        number = Decimal(m["number"])
        if m["exp"] is not None:
            amount = number.scaleb(int(m["exp"]))
        else:
            amount = number * _SUFFIX[m["suffix"] or ""]
    except InvalidOperation:
        raise ValueError(f"expected a quantity such as 8, 500m or 64Gi, got {value!r}") from None
    if amount > _MAX:
        raise ValueError(f"{value!r} is larger than any quantity Kubernetes holds")
    return amount


def resource_amount(resource: str, value: object) -> int:
    """``value`` of ``resource`` in the unit admission counts: millicores for ``cpu``,
    bytes for ``memory``, ``ephemeral-storage`` and ``hugepages-*``, whole units for any
    other resource (ValueError when it is not whole)."""
    amount = quantity(value)
    if resource == "cpu":
        return math.ceil(amount * 1000)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return math.ceil(amount)
    if amount != amount.to_integral_value():
        raise ValueError(f"{resource} must be a whole number, got {value!r}")
    return int(amount)
