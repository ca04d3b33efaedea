"""Kubernetes quantities and name rules, as the kubelet applies them. Pure.

Byte quantities (``64Gi``, ``512M``), CPU quantities in millicores (``1.5``,
``500m``), hugepages resource names (``hugepages-2Mi``), DNS-1123 subdomains,
the name part of a qualified name, and the extended-resource-name check a
device plugin's resource must pass.
"""

from __future__ import annotations

import re
from enum import Enum

__all__ = [
    "BINARY_SUFFIXES",
    "NameProblem",
    "extended_resource_problem",
    "is_dns1123_subdomain",
    "is_hugepages_name",
    "is_qualified_name_part",
    "parse_bytes",
    "parse_millicpu",
]

# --------------------------------------------------------------------------- quantities

# The binary suffixes of a quantity and their sizes, smallest first.
BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
_BINARY = BINARY_SUFFIXES
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
# Longest DNS-1123 subdomain and longest name part of a qualified name (Kubernetes'
# validation package).
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_PART_MAX = 63
# A float CPU quantity is whole milli-CPUs when it is this close to one.
_MILLI_TOLERANCE = 1e-6
_MILLICPU = re.compile(r"\d+m")
_CPU = re.compile(r"\d+(\.\d{1,3})?")


def parse_bytes(value: object) -> int:
    """A Kubernetes memory quantity (``"64Gi"``, ``"512M"``, ``1024``) in bytes."""
    if isinstance(value, bool):
        raise ValueError(f"expected a byte quantity, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative byte quantity, got {value}")
        return value
    if isinstance(value, str):
        m = _QUANTITY.match(value.strip())
        if m:
            number, suffix = m.group(1), m.group(2)
            scale = _BINARY.get(suffix or "", _DECIMAL.get(suffix or "", 1))
            amount = float(number) * scale if "." in number else int(number) * scale
            if amount == int(amount):
                return int(amount)
    raise ValueError(f"expected a byte quantity such as 64Gi or 512Mi, got {value!r}")


def parse_millicpu(value: object) -> int:
    """A Kubernetes CPU quantity (``2``, ``1.5``, ``"500m"``) in millicores."""
    if isinstance(value, bool):
        raise ValueError(f"expected a CPU quantity, got {value!r}")
    if isinstance(value, int | float):
        milli = round(float(value) * 1000)
        if milli < 0 or abs(milli - float(value) * 1000) > _MILLI_TOLERANCE:
            raise ValueError(f"expected a CPU quantity with at most 3 decimals, got {value!r}")
        return milli
    if isinstance(value, str):
        text = value.strip()
        if _MILLICPU.fullmatch(text):
            return int(text[:-1])
        if _CPU.fullmatch(text):
            return parse_millicpu(float(text))
    raise ValueError(f"expected a CPU quantity such as 2, 1.5 or 500m, got {value!r}")


# --------------------------------------------------------------------------- names

_HUGEPAGES = re.compile(r"hugepages-\d+(Ki|Mi|Gi)")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def is_hugepages_name(name: str) -> bool:
    """Whether ``name`` is a hugepages resource (``hugepages-2Mi``, ``hugepages-1Gi``)."""
    return _HUGEPAGES.fullmatch(name) is not None


def is_dns1123_subdomain(text: str) -> bool:
    """Whether ``text`` is a DNS-1123 subdomain: lower-case alphanumeric labels, ``-``
    inside a label, joined by ``.``, at most 253 characters."""
    return len(text) <= DNS1123_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(text) is not None


def is_qualified_name_part(text: str) -> bool:
    """Whether ``text`` is the name part of a qualified name: alphanumerics, ``-``, ``_``
    or ``.``, starting and ending with an alphanumeric, at most 63 characters."""
    return len(text) <= QUALIFIED_NAME_PART_MAX and _QUALIFIED_NAME_PART.fullmatch(text) is not None


class NameProblem(Enum):
    """The rule of the extended-resource-name check a name breaks."""

    NO_DOMAIN = "no domain"
    KUBERNETES_IO = "in the kubernetes.io namespace"
    REQUESTS_PREFIX = "starts with requests."
    SLASHES = "more than one /"
    EMPTY_DOMAIN = "empty domain"
    INVALID_DOMAIN = "invalid domain"
    EMPTY_NAME = "empty name"
    INVALID_NAME = "invalid name"


def extended_resource_problem(name: str) -> NameProblem | None:  # noqa: PLR0911 - one rule each
    """Which rule keeps ``name`` from being an extended resource name a device plugin may
    register, or None when it is one (the kubelet's ``v1helper.IsExtendedResourceName``).

    It must be ``domain/name``, not contain ``kubernetes.io/``, not start with
    ``requests.``; ``requests.<domain>`` must be a DNS-1123 subdomain and the name a
    qualified name part.
    """
    if "/" not in name:
        return NameProblem.NO_DOMAIN
    if "kubernetes.io/" in name:
        return NameProblem.KUBERNETES_IO
    if name.startswith("requests."):
        return NameProblem.REQUESTS_PREFIX
    domain, _, short = name.partition("/")
    if "/" in short:
        return NameProblem.SLASHES
    if not domain:
        return NameProblem.EMPTY_DOMAIN
    if not is_dns1123_subdomain(f"requests.{domain}"):
        return NameProblem.INVALID_DOMAIN
    if not short:
        return NameProblem.EMPTY_NAME
    if not is_qualified_name_part(short):
        return NameProblem.INVALID_NAME
    return None
