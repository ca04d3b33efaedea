"""Test support for the device plugin: reading the simulated kubelet's device manager
(:class:`~podres_sim.kubelet.devicemanager.SimDeviceManager`) and sysfs trees."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import grpc

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from podres_sim.host import NicPf, NicVf, write_device_tree
from podres_sim.kubelet.devicemanager import (
    CHECKPOINT,
    PluginDevice,
    RegistrationRecord,
    SimDeviceManager,
)


def accepted(kubelet: SimDeviceManager, resource: str | None = None) -> list[RegistrationRecord]:
    """The Register calls the device manager accepted (of ``resource``), in order."""
    return [
        r for r in kubelet.registrations if r.ok and (resource is None or r.resource == resource)
    ]


def advertised(kubelet: SimDeviceManager, resource: str) -> list[PluginDevice] | None:
    """The devices of ``resource``'s open ListAndWatch stream once it has sent a list (an
    empty one too); None while no stream is open or none has been sent on it."""
    if not (kubelet.connected(resource) and kubelet.lists_received(resource)):
        return None
    return list(kubelet.devices(resource))


def plugin_stub(kubelet: SimDeviceManager, resource: str) -> Any:
    """A DevicePlugin stub on the socket of ``resource``'s latest accepted registration."""
    endpoint = accepted(kubelet, resource)[-1].endpoint
    channel = grpc.insecure_channel(f"unix://{kubelet.directory / endpoint}")
    return pb_grpc.DevicePluginStub(channel)


def files(kubelet: SimDeviceManager) -> list[str]:
    """The names in the device-plugins directory, sorted, less the device manager's own
    checkpoint (and the temporary file it is written through): a kubelet keeps one there."""
    return sorted(p.name for p in kubelet.directory.iterdir() if CHECKPOINT not in p.name)


def plugin_flags(
    config: Path, plugin_dir: Path, sysfs: Path, *, log_format: str = "json"
) -> list[str]:
    """The command line of a plugin under test: its resource file, the kubelet's
    device-plugins directory, a sysfs tree, HTTP on any free port, logs in ``log_format``."""
    return [
        "--resources", str(config),
        "--device-plugin-dir", str(plugin_dir),
        "--listen-address", "127.0.0.1:0",
        "--path.sysfs", str(sysfs),
        "--log-format", log_format,
    ]  # fmt: skip


VF_ADDRESSES = ("0000:af:02.0", "0000:af:02.1", "0000:af:02.2", "0000:af:02.3")


def nic(
    *,
    numa: int = 0,
    down: tuple[str, ...] = (),
    vfio: bool = False,
    vfs: tuple[str, ...] = VF_ADDRESSES,
) -> NicPf:
    """An Intel E810 PF at af:00.0 with SR-IOV VFs (netdevs unless ``vfio``)."""
    from podres_sim.host import interface_name

    return NicPf(
        address="0000:af:00.0",
        interface="enp175s0f0",
        numa=numa,
        vfs=tuple(
            NicVf(
                address=a,
                interface=None if vfio else interface_name(a),
                driver="vfio-pci" if vfio else "iavf",
                carrier=a not in down,
                operstate="down" if a in down else "up",
            )
            for a in vfs
        ),
    )


def write_sysfs(
    root: Path,
    *,
    vfio: bool = False,
    down: tuple[str, ...] = (),
    vfs: tuple[str, ...] = VF_ADDRESSES,
) -> Path:
    """A sysfs tree with one NIC and its VFs; vfio VFs get IOMMU groups 40, 41, ..."""
    write_device_tree(root, [nic(vfio=vfio, down=down, vfs=vfs)])
    if vfio:
        groups = root / "kernel" / "iommu_groups"
        for i, address in enumerate(vfs):
            group = groups / str(40 + i)
            group.mkdir(parents=True, exist_ok=True)
            link = root / "devices" / "pci0000:ae" / "0000:ae:01.0" / address / "iommu_group"
            if link.is_symlink():
                link.unlink()
            os.symlink(os.path.relpath(group, link.parent), link)
    return root


def remove_function(root: Path, address: str) -> None:
    """The function leaves sysfs (hot-unplug, or SR-IOV VFs destroyed)."""
    (root / "bus" / "pci" / "devices" / address).unlink()
    shutil.rmtree(root / "devices" / "pci0000:ae" / "0000:ae:01.0" / address)
