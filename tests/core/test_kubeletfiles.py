"""The kubelet's configuration and device checkpoint as data (core/kubeletfiles.py)."""

from __future__ import annotations

import pytest

from podres_exporter.core.kubeletfiles import device_checkpoint, kubelet_config


def test_absent_keys_take_the_kubelets_defaults() -> None:
    """An empty configuration is the kubelet's defaults (upstream defaults.go); the labels
    leave the empty ones empty."""
    assert kubelet_config(None).labels() == {
        "topology_manager_policy": "none",
        "topology_manager_scope": "container",
        "topology_manager_options": "",
        "cpu_manager_policy": "none",
        "cpu_manager_options": "",
        "memory_manager_policy": "None",
        "reserved_cpus": "",
    }


def test_values_are_kept_as_the_kubelet_spells_them() -> None:
    """Policies verbatim, options sorted key=value (booleans as Go spells them), CPUs as
    a compact CPU list."""
    config = kubelet_config(
        {
            "kind": "KubeletConfiguration",
            "topologyManagerPolicy": "single-numa-node",
            "topologyManagerScope": "pod",
            "topologyManagerPolicyOptions": {"prefer-closest-numa-nodes": "true"},
            "cpuManagerPolicy": "static",
            "cpuManagerPolicyOptions": {"full-pcpus-only": True, "align-by-socket": "false"},
            "memoryManagerPolicy": "Static",
            "reservedSystemCPUs": "3,0,2",
        }
    )
    labels = config.labels()
    assert labels["topology_manager_policy"] == "single-numa-node"
    assert labels["topology_manager_options"] == "prefer-closest-numa-nodes=true"
    assert labels["cpu_manager_options"] == "align-by-socket=false,full-pcpus-only=true"
    assert labels["memory_manager_policy"] == "Static"
    assert labels["reserved_cpus"] == "0,2-3"


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ([], "KubeletConfiguration"),
        ({"kind": "Pod"}, "'kind'"),
        ({"cpuManagerPolicy": 3}, "'cpuManagerPolicy'"),
        ({"reservedSystemCPUs": "0-x"}, "'reservedSystemCPUs'"),
        ({"cpuManagerPolicyOptions": ["full-pcpus-only"]}, "'cpuManagerPolicyOptions'"),
    ],
)
def test_a_key_of_the_wrong_shape_is_named(data: object, names: str) -> None:
    """ValueError naming the key at fault."""
    with pytest.raises(ValueError, match=names):
        kubelet_config(data)


def test_the_checkpoint_gives_every_registered_device_and_the_allocations_numa() -> None:
    """RegisteredDevices per resource; DeviceIDs keyed by NUMA node, -1 for no topology,
    a device under two keys on both nodes."""
    cp = device_checkpoint(
        {
            "Data": {
                "PodDeviceEntries": [
                    {"PodUID": "u", "ContainerName": "c", "ResourceName": "r/gpu",
                     "DeviceIDs": {"0": ["g0", "g9"], "1": ["g9"]}, "AllocResp": "eA=="},
                    {"PodUID": "u", "ContainerName": "c", "ResourceName": "r/kvm",
                     "DeviceIDs": {"-1": ["k0"]}, "AllocResp": ""},
                ],
                "RegisteredDevices": {"r/gpu": ["g1", "g0", "g9"], "r/kvm": ["k0"]},
            },
            "Checksum": 1,
        }
    )  # fmt: skip
    assert dict(cp.registered) == {"r/gpu": ("g0", "g1", "g9"), "r/kvm": ("k0",)}
    assert dict(cp.allocated_numa) == {
        ("r/gpu", "g0"): (0,),
        ("r/gpu", "g9"): (0, 1),
        ("r/kvm", "k0"): None,
    }


def test_a_checkpoint_before_numa_was_recorded_places_nothing() -> None:
    """A plain list of ids (kubelets before 1.20) is read, with no placement."""
    cp = device_checkpoint(
        {"Data": {"PodDeviceEntries": [{"ResourceName": "r/x", "DeviceIDs": ["a"]}],
                  "RegisteredDevices": {"r/x": ["a"]}}}
    )  # fmt: skip
    assert dict(cp.allocated_numa) == {}
    assert dict(cp.registered) == {"r/x": ("a",)}


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({}, "'Data'"),
        ({"Data": {"RegisteredDevices": []}}, "RegisteredDevices"),
        ({"Data": {"RegisteredDevices": {"r/x": "a"}}}, "RegisteredDevices"),
        ({"Data": {"PodDeviceEntries": [{"ResourceName": "r/x", "DeviceIDs": {"z": []}}]}},
         r"PodDeviceEntries\[0\].DeviceIDs"),
    ],
)  # fmt: skip
def test_a_checkpoint_of_the_wrong_shape_is_named(data: object, names: str) -> None:
    """ValueError naming the part at fault."""
    with pytest.raises(ValueError, match=names):
        device_checkpoint(data)
