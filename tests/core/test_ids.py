"""Device-id resolution: every id shape of the plugins in the wild, in one table."""

from __future__ import annotations

import pytest

from podres_exporter.core.ids import (
    Kind,
    Resolved,
    is_gpu_resource,
    normalize_pci,
    replica_id,
    resolve,
    split_replica,
)

U = "8a7f3c1e-0b2d-4e5f-9a8b-7c6d5e4f3a2b"
V = "3c1e8a7f-4e5f-0b2d-7c6d-9a8b5e4f3a2b"

CASES = [
    # resource, device id, expected
    ("nvidia.com/gpu", f"GPU-{U}", Resolved(Kind.GPU, f"GPU-{U}")),
    ("nvidia.com/gpu", f"GPU-{U.upper()}", Resolved(Kind.GPU, f"GPU-{U}")),
    ("nvidia.com/gpu", f"GPU-{U}::3", Resolved(Kind.GPU, f"GPU-{U}", replica=3)),
    ("nvidia.com/gpu.shared", f"GPU-{U}::0", Resolved(Kind.GPU, f"GPU-{U}", replica=0)),
    ("nvidia.com/mig-1g.10gb", f"MIG-{V}", Resolved(Kind.MIG, f"MIG-{V}")),
    ("nvidia.com/gpu", f"MIG-{V}::1", Resolved(Kind.MIG, f"MIG-{V}", replica=1)),
    (
        "nvidia.com/mig-3g.40gb",
        f"MIG-GPU-{U}/2/0",
        Resolved(
            Kind.MIG, f"GPU-{U}/gi2/ci0", parent_uuid=f"GPU-{U}", gpu_instance=2, compute_instance=0
        ),
    ),
    ("nvidia.com/gpu", "nvidia0", Resolved(Kind.GPU_INDEX, "nvidia0", gpu_index=0)),
    (
        "nvidia.com/gpu",
        "nvidia3/vgpu2",
        Resolved(Kind.GPU_INDEX, "nvidia3", replica=2, gpu_index=3),
    ),
    (
        "nvidia.com/gpu",
        "nvidia1/gi4",
        Resolved(Kind.MIG_INDEX, "nvidia1/gi4", gpu_index=1, gpu_instance=4),
    ),
    ("amd.com/gpu", "0000:19:00.0", Resolved(Kind.PCI, "0000:19:00.0")),
    ("intel.com/sriov_netdevice", "0000:AF:06.1", Resolved(Kind.PCI, "0000:af:06.1")),
    ("example.com/vf", "af:06.1", Resolved(Kind.PCI, "0000:af:06.1")),
    ("example.com/vf", "0000:af:06.1::2", Resolved(Kind.PCI, "0000:af:06.1", replica=2)),
    ("gpu.intel.com/i915", "card0-1", Resolved(Kind.DRM, "card0", replica=1)),
    ("gpu.intel.com/xe", "card1", Resolved(Kind.DRM, "card1")),
    # Shapes that only mean something for GPU resources stay unknown elsewhere.
    ("example.com/widget", "nvidia0", Resolved(Kind.UNKNOWN, "nvidia0")),
    ("example.com/widget", "card0-1", Resolved(Kind.UNKNOWN, "card0-1")),
    ("devices.kubevirt.io/kvm", "kvm-7", Resolved(Kind.UNKNOWN, "kvm-7")),
    ("nvidia.com/gpu", "GPU-not-a-uuid", Resolved(Kind.UNKNOWN, "GPU-not-a-uuid")),
    ("nvidia.com/gpu", "", Resolved(Kind.UNKNOWN, "")),
    ("nvidia.com/gpu", "::3", Resolved(Kind.UNKNOWN, "::3")),
]


@pytest.mark.parametrize(("resource", "device_id", "expected"), CASES)
def test_resolve(resource: str, device_id: str, expected: Resolved) -> None:
    """Each id shape resolves to its kind, canonical key, replica and location."""
    assert resolve(resource, device_id) == expected


def test_gpu_resources_are_configurable() -> None:
    """With a custom pattern list, GKE-style ids of another resource resolve as GPUs."""
    assert resolve("example.com/gpu", "nvidia2").kind is Kind.UNKNOWN
    assert resolve("example.com/gpu", "nvidia2", ["example.com/*"]).kind is Kind.GPU_INDEX
    assert is_gpu_resource("nvidia.com/gpu.shared")
    assert is_gpu_resource("gpu.intel.com/xe")
    assert not is_gpu_resource("amd.com/fpga")


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("00000000:17:00.0", "0000:17:00.0"),
        ("AF:06.1", "0000:af:06.1"),
        ("0001:3b:00.7", "0001:3b:00.7"),
        ("0000:AF:02.1", "0000:af:02.1"),
        (" af:02.1\n", "0000:af:02.1"),
        ("10000:00:00.0", "10000:00:00.0"),
        ("0000:af:06.8", None),
        ("17:00", None),
        ("GPU-f38b2ffc", None),
    ],
)
def test_normalize_pci(raw: str, norm: str | None) -> None:
    """NVML's 8-digit domains, VMD's 5-digit ones and short forms normalise to lower case;
    function numbers above 7 are not PCI."""
    assert normalize_pci(raw) == norm


@pytest.mark.parametrize(
    ("device_id", "parts"),
    [
        (f"GPU-{U}::3", (f"GPU-{U}", 3)),
        (f"GPU-{U}", (f"GPU-{U}", None)),
        ("nvidia1/vgpu2", ("nvidia1/vgpu2", None)),  # a GKE share is a shape, not a suffix
        ("kvm-7::0", ("kvm-7", 0)),  # any id shape may be shared
        ("a::b::12", ("a::b", 12)),
        ("::3", ("::3", None)),
        ("GPU-x::", ("GPU-x::", None)),
    ],
)
def test_split_replica(device_id: str, parts: tuple[str, int | None]) -> None:
    """The ``::n`` suffix comes off whatever the id's shape; nothing else does."""
    assert split_replica(device_id) == parts


@pytest.mark.parametrize("base", [f"GPU-{U}", f"MIG-{V}", "0000:af:02.0", "kvm-7", "a::b"])
@pytest.mark.parametrize("replica", [0, 3, 1023])
def test_replica_id_is_what_split_replica_takes_apart(base: str, replica: int) -> None:
    """``<id>::n`` is built in one place and parsed in another: they agree."""
    made = replica_id(base, replica)
    assert made == f"{base}::{replica}"
    assert split_replica(made) == (base, replica)


def test_a_replica_id_resolves_to_its_device() -> None:
    assert resolve("nvidia.com/gpu", replica_id(f"GPU-{U}", 2)) == Resolved(
        Kind.GPU, f"GPU-{U}", replica=2
    )
