"""The kubelet's files read from disk: its configuration (sources/kubeletconfig.py) and its
device-manager checkpoint (sources/devicecheckpoint.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from podres_exporter.core.errors import SourceError
from podres_exporter.sources.devicecheckpoint import device_checkpoint_reader
from podres_exporter.sources.kubeletconfig import (
    MAX_CONFIG_BYTES,
    FileReader,
    kubelet_config_reader,
)


def test_reads_a_yaml_configuration(tmp_path: Path) -> None:
    """The kubeadm-style YAML file, defaults for what it leaves out."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        'cpuManagerPolicy: static\ncpuManagerPolicyOptions:\n  full-pcpus-only: "true"\n'
        'reservedSystemCPUs: "0,1"\ntopologyManagerPolicy: single-numa-node\n'
    )
    labels = kubelet_config_reader(str(path)).read().labels()
    assert labels["cpu_manager_policy"] == "static"
    assert labels["cpu_manager_options"] == "full-pcpus-only=true"
    assert labels["reserved_cpus"] == "0-1"
    assert labels["topology_manager_policy"] == "single-numa-node"
    assert labels["topology_manager_scope"] == "container"
    assert labels["memory_manager_policy"] == "None"


def test_reads_a_json_configuration(tmp_path: Path) -> None:
    """JSON, as some installers write it."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"kind": "KubeletConfiguration", "memoryManagerPolicy": "Static"}))
    assert kubelet_config_reader(str(path)).read().memory_manager_policy == "Static"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read"),
        (b"a: [1\n", "expected"),
        (b"\xff\xfe", "UTF-8"),
        (b"x" * (MAX_CONFIG_BYTES + 1), "larger than"),
        (b"cpuManagerPolicy: [static]\n", "cpuManagerPolicy"),
        (b"[" * 5_000, "nested too deeply"),
    ],
)
def test_an_unusable_file_names_itself_and_the_flag(
    tmp_path: Path, content: bytes | None, problem: str
) -> None:
    """Missing, not YAML, not text, too large, a key of the wrong shape: a SourceError
    naming the file and --kubelet-config."""
    path = tmp_path / "config.yaml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SourceError) as err:
        kubelet_config_reader(str(path)).read()
    assert str(path) in str(err.value)
    assert "--kubelet-config" in str(err.value)
    assert problem in str(err.value)


def test_an_unchanged_file_is_not_decoded_again(tmp_path: Path) -> None:
    """Same inode, size and mtime: the last value, not decoded again; a new file is."""
    path = tmp_path / "f"
    path.write_text("a")
    decoded: list[bytes] = []

    def decode(data: bytes) -> str:
        decoded.append(data)
        return data.decode()

    reader = FileReader(str(path), "--flag", 100, decode)
    assert reader.read() == "a"
    assert reader.read() == "a"
    assert decoded == [b"a"]
    (tmp_path / "g").write_text("bb")
    os.replace(tmp_path / "g", path)
    assert reader.read() == "bb"


def test_reads_the_upstream_checkpoint(tmp_path: Path) -> None:
    """The kubelet's checkpoint JSON: registered devices and allocations by NUMA node."""
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text(
        json.dumps(
            {
                "Data": {
                    "PodDeviceEntries": [
                        {
                            "PodUID": "0a",
                            "ContainerName": "c",
                            "ResourceName": "nvidia.com/gpu",
                            "DeviceIDs": {"1": ["GPU-b"]},
                            "AllocResp": "CgA=",
                        }
                    ],
                    "RegisteredDevices": {"nvidia.com/gpu": ["GPU-a", "GPU-b"]},
                },
                "Checksum": 2874135410,
            }
        )
    )
    cp = device_checkpoint_reader(str(path)).read()
    assert dict(cp.registered) == {"nvidia.com/gpu": ("GPU-a", "GPU-b")}
    assert dict(cp.allocated_numa) == {("nvidia.com/gpu", "GPU-b"): (1,)}


def test_a_torn_checkpoint_names_the_flag(tmp_path: Path) -> None:
    """A half-written file fails to decode: SourceError naming --kubelet-device-checkpoint."""
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text('{"Data": {"Registered')
    with pytest.raises(SourceError, match="--kubelet-device-checkpoint"):
        device_checkpoint_reader(str(path)).read()


def test_a_deeply_nested_checkpoint_names_the_flag(tmp_path: Path) -> None:
    """JSON nested past the interpreter's recursion limit: a SourceError naming the flag."""
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text('{"Data": ' + "[" * 100_000)
    with pytest.raises(SourceError, match=r"nested too deeply.*--kubelet-device-checkpoint"):
        device_checkpoint_reader(str(path)).read()
