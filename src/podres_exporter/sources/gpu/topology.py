"""How close each pair of whole GPUs is (:data:`~.protocol.GpuTopology`).

For each pair, NVML's common-ancestor level (``nvmlDeviceGetTopologyCommonAncestor``:
INTERNAL 0, SINGLE 10, MULTIPLE 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50; lower is closer),
replaced by minus the number of active NVLinks between them where there are any
(``nvmlDeviceGetNvLinkState`` and ``nvmlDeviceGetNvLinkRemotePciInfo`` per link), so an
NVLink pair is closer than any PCIe path and more links are closer still.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from podres_exporter.sources.gpu.calls import DeviceFailed, LibraryGone, Nvml, text
from podres_exporter.sources.gpu.protocol import GpuTopology
from podres_exporter.sources.gpu.structs import PciInfo, pci_bus_id_from_nvml

__all__ = ["read_topology"]


def read_topology(nvml: Nvml) -> GpuTopology:
    """The distances of the GPUs NVML lists; a pair NVML cannot place is left out."""
    lib = nvml.lib
    gpus: list[tuple[str, Any, str | None]] = []  # (uuid, handle, PCI address)
    for index in range(nvml.get_int(lib.nvmlDeviceGetCount) or 0):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            uuid = text(lib.nvmlDeviceGetUUID(handle))
            pci: PciInfo | None = nvml.get(lib.nvmlDeviceGetPciInfo, handle)
        except (nvml.error, DeviceFailed):
            continue  # a lost GPU has no place in the topology
        gpus.append((uuid, handle, None if pci is None else pci_bus_id_from_nvml(pci.busId)))
    by_address = {address: uuid for uuid, _, address in gpus if address is not None}
    out: dict[tuple[str, str], int] = {}
    for i, (uuid_a, handle_a, _) in enumerate(gpus):
        for uuid_b, handle_b, _ in gpus[i + 1 :]:
            try:
                level = nvml.get_int(lib.nvmlDeviceGetTopologyCommonAncestor, handle_a, handle_b)
            except DeviceFailed:
                continue
            if level is not None:
                out[(uuid_a, uuid_b)] = out[(uuid_b, uuid_a)] = level
    for uuid_a, handle_a, _ in gpus:
        try:
            peers = _nvlink_peers(nvml, handle_a)
        except DeviceFailed:
            continue
        for address, links in peers.items():
            peer = by_address.get(address)
            if peer is not None and peer != uuid_a:
                out[(uuid_a, peer)] = out[(peer, uuid_a)] = -links
    return MappingProxyType(out)


def _nvlink_peers(nvml: Nvml, handle: Any) -> dict[str, int]:
    """PCI address of each NVLink peer -> active links to it (empty without NVLink)."""
    lib = nvml.lib
    peers: dict[str, int] = {}
    for link in range(int(lib.NVML_NVLINK_MAX_LINKS)):
        try:
            if int(lib.nvmlDeviceGetNvLinkState(handle, link)) != lib.NVML_FEATURE_ENABLED:
                continue
            remote: PciInfo = lib.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        except nvml.error as err:
            code = getattr(err, "value", None)
            if code in nvml.codes.library_gone:
                raise LibraryGone(f"nvmlDeviceGetNvLinkState: {err}") from err
            if code in nvml.codes.device_fatal:
                raise DeviceFailed(f"nvmlDeviceGetNvLinkState: {err}") from err
            if code == lib.NVML_ERROR_NOT_SUPPORTED:
                break  # a board without NVLink
            continue  # INVALID_ARGUMENT: no such link on this board
        except nvml.mismatch:
            break
        address = pci_bus_id_from_nvml(remote.busId)
        if address is not None:
            peers[address] = peers.get(address, 0) + 1
    return peers
