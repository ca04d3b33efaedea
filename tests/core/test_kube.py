"""Kubernetes quantities and name rules."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from podres_exporter.core.kube import (
    NameProblem,
    extended_resource_problem,
    is_dns1123_subdomain,
    is_hugepages_name,
    is_qualified_name_part,
    parse_bytes,
    parse_millicpu,
)

SCALES = {
    "": 1,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}

LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
DOMAIN = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
NAME_PART = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?", fullmatch=True)


# --------------------------------------------------------------------------- quantities


@given(st.integers(0, 10**6), st.sampled_from(sorted(SCALES)))
def test_byte_suffixes_scale(number: int, suffix: str) -> None:
    """Every binary and decimal suffix multiplies by its power of 1024 or 1000."""
    assert parse_bytes(f"{number}{suffix}") == number * SCALES[suffix]


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("64Gi", 64 * 2**30),
        ("512M", 512 * 10**6),
        ("1.5Gi", 3 * 2**29),
        ("0.5k", 500),
        (" 8Mi\n", 8 * 2**20),
        ("007", 7),
        (4096, 4096),
        (0, 0),
    ],
)
def test_byte_quantities(value: object, size: int) -> None:
    """Decimals are fine when they come to whole bytes; ints are bytes; spaces around go."""
    assert parse_bytes(value) == size


@pytest.mark.parametrize(
    "value",
    ["1 Gi", "Gi", "", "1.1", "0.5", "1e3", "-1", "1K", "1KiB", "1gi", "1.Gi", -5, True, 2.0],
)
def test_not_byte_quantities(value: object) -> None:
    """Inner spaces, fractional bytes, exponents, negatives, K, bools and floats are refused."""
    with pytest.raises(ValueError, match="byte quantity"):
        parse_bytes(value)


@pytest.mark.parametrize(
    ("value", "milli"),
    [
        (2, 2000),
        (1.5, 1500),
        (0, 0),
        ("500m", 500),
        ("0.25", 250),
        ("3", 3000),
        (" 0.001 ", 1),
        (0.001, 1),
    ],
)
def test_cpu_quantities(value: object, milli: int) -> None:
    """Cores as numbers or strings, or millicores with m."""
    assert parse_millicpu(value) == milli


@pytest.mark.parametrize(
    "value", ["x", "-1", -1, True, "0.0001", 0.0001, "1.5m", "m", "", "1 m", None, -0.5]
)
def test_not_cpu_quantities(value: object) -> None:
    """Negatives, bools, more than three decimals and fractional millicores are refused."""
    with pytest.raises(ValueError, match="CPU quantity"):
        parse_millicpu(value)


@given(st.integers(0, 10**7))
def test_cpu_forms_agree(milli: int) -> None:
    """``Nm``, the decimal string and the float of the same amount are the same millicores."""
    decimal = f"{milli // 1000}.{milli % 1000:03d}"
    assert parse_millicpu(f"{milli}m") == parse_millicpu(decimal) == milli
    assert parse_millicpu(milli / 1000) == milli


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("hugepages-2Mi", True),
        ("hugepages-1Gi", True),
        ("hugepages-64Ki", True),
        ("hugepages-2M", False),
        ("hugepages-1Ti", False),
        ("hugepages-", False),
        ("hugepages-2Mi\n", False),
        ("xhugepages-2Mi", False),
        ("memory", False),
    ],
)
def test_hugepages_names(name: str, ok: bool) -> None:
    """hugepages-<whole number><Ki|Mi|Gi> and nothing else."""
    assert is_hugepages_name(name) is ok


@given(DOMAIN)
def test_generated_subdomains_are_subdomains(domain: str) -> None:
    """Lower-case labels joined by dots are subdomains; upper case or an empty label is not."""
    assert is_dns1123_subdomain(domain)
    assert not is_dns1123_subdomain(domain.upper()) or domain.upper() == domain
    assert not is_dns1123_subdomain(f"{domain}..x")
    assert not is_dns1123_subdomain(f"{domain}.")


def test_subdomain_edges() -> None:
    """Labels neither start nor end with '-'; 253 characters at most; no '_'."""
    assert is_dns1123_subdomain("a-b.c")
    assert not is_dns1123_subdomain("")
    assert not is_dns1123_subdomain("-a.b")
    assert not is_dns1123_subdomain("a-.b")
    assert not is_dns1123_subdomain("a_b.c")
    longest = ".".join(["a" * 63] * 3) + "." + "a" * 61
    assert len(longest) == 253 and is_dns1123_subdomain(longest)
    assert not is_dns1123_subdomain(longest + "a")


def test_qualified_name_part_edges() -> None:
    """Alphanumeric at both ends, '-', '_' and '.' inside, 63 characters at most."""
    for good in ("a", "A", "a.b_c-D", "0", "x" * 63):
        assert is_qualified_name_part(good), good
    for bad in ("", "-a", "a-", "_a", "a.", "a/b", "a b", "x" * 64, "a\n"):
        assert not is_qualified_name_part(bad), bad


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("gpu", NameProblem.NO_DOMAIN),
        ("kubernetes.io/gpu", NameProblem.KUBERNETES_IO),
        ("foo.kubernetes.io/gpu", NameProblem.KUBERNETES_IO),
        ("example.com/kubernetes.io/x", NameProblem.KUBERNETES_IO),
        ("requests.example.com/gpu", NameProblem.REQUESTS_PREFIX),
        ("example.com/a/b", NameProblem.SLASHES),
        ("/gpu", NameProblem.EMPTY_DOMAIN),
        ("Example.com/gpu", NameProblem.INVALID_DOMAIN),
        ("exa_mple.com/gpu", NameProblem.INVALID_DOMAIN),
        ("example..com/gpu", NameProblem.INVALID_DOMAIN),
        ("a" * 245 + "/gpu", NameProblem.INVALID_DOMAIN),
        ("example.com/", NameProblem.EMPTY_NAME),
        ("example.com/-gpu", NameProblem.INVALID_NAME),
        ("example.com/" + "g" * 64, NameProblem.INVALID_NAME),
    ],
)
def test_extended_resource_name_rules(name: str, problem: NameProblem) -> None:
    """Each rule of the kubelet's check, in the kubelet's order."""
    assert extended_resource_problem(name) is problem


@pytest.mark.parametrize(
    "name",
    [
        "example.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "intel.com/sriov_netdevice",
        "a.b/C.d_e-f",
        "a" * 244 + "/gpu",
        "example.com/" + "g" * 63,
        "kubernetes.io.example.com/gpu",
    ],
)
def test_extended_resource_names(name: str) -> None:
    """Real plugins' names, and names at the length limits, pass."""
    assert extended_resource_problem(name) is None


@given(DOMAIN, NAME_PART)
def test_domain_slash_name_passes(domain: str, short: str) -> None:
    """A subdomain, a '/', a qualified name part: an extended resource name, unless the
    domain is reserved or too long with ``requests.``."""
    assume(not domain.startswith("requests.") and not domain.endswith("kubernetes.io"))
    assert extended_resource_problem(f"{domain}/{short}") is None
    assert extended_resource_problem(f"{domain}/{short}/x") is NameProblem.SLASHES
    assert extended_resource_problem(f"{domain}.kubernetes.io/{short}") is (
        NameProblem.KUBERNETES_IO
    )


@given(st.text(alphabet="aZ0-._/\n k", max_size=16))
def test_an_accepted_name_is_domain_slash_name(name: str) -> None:
    """Whatever passes has one '/', a subdomain before it and a name part after it."""
    if extended_resource_problem(name) is None:
        domain, short = name.split("/")
        assert is_dns1123_subdomain(domain) and is_qualified_name_part(short)
