"""PCI functions from sysfs: identity, link, AER errors, temperature and power.

Only functions the kubelet knows (allocatable or held) are exported, each labelled
with its holder when exactly one container holds it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from podres_exporter.collectors.base import PartCollector, joined_rows
from podres_exporter.collectors.families import (
    HOLDER_LABELS,
    Breakdown,
    Info,
    Table,
    holder_values,
    numa_value,
    per_row,
)
from podres_exporter.core.join import PciRow

_INFO_LABELS = (
    "address",
    "pci_vendor",
    "pci_device",
    "pci_class",
    "driver",
    "numa_node",
    "physfn",
)


def _identity(r: PciRow) -> list[str]:
    p = r.pci
    return [
        p.address,
        p.vendor_id,
        p.device_id,
        p.class_id,
        p.driver or "",
        numa_value(p.numa_node),
        p.physfn or "",
    ]


def _transfers(gts: float | None) -> float | None:
    """A link speed in transfers per second (sysfs gives GT/s)."""
    return gts * 1e9 if gts is not None else None


def _aer(rows: Sequence[PciRow]) -> Iterator[tuple[PciRow, tuple[str, str], int]]:
    """Each AER error counter by severity and name; the kernel's TOTAL_* sums left out."""
    for r in rows:
        for severity, counts in (
            ("correctable", r.pci.aer_correctable),
            ("nonfatal", r.pci.aer_nonfatal),
            ("fatal", r.pci.aer_fatal),
        ):
            for name, n in sorted(counts.items()):
                if not name.startswith("TOTAL_"):
                    yield r, (severity, name), n


_PCI: Final[Table[PciRow]] = Table(
    ("address", *HOLDER_LABELS),
    lambda r: [r.pci.address, *holder_values(r.held.single)],
    (
        Info(
            "podres_pci",
            "One series per PCI function the kubelet knows: ids, driver, NUMA node, SR-IOV PF.",
            _INFO_LABELS,
            _identity,
        ),
        per_row(
            "podres_pci_link_speed_transfers_per_second",
            "Current PCIe link speed (16 GT/s = 1.6e10).",
            lambda r: _transfers(r.pci.link_speed_gts),
        ),
        per_row(
            "podres_pci_max_link_speed_transfers_per_second",
            "Maximum PCIe link speed (a lower current speed means a degraded link).",
            lambda r: _transfers(r.pci.max_link_speed_gts),
        ),
        per_row(
            "podres_pci_link_width_lanes", "Current PCIe link width.", lambda r: r.pci.link_width
        ),
        per_row(
            "podres_pci_max_link_width_lanes",
            "Maximum PCIe link width (a lower current width means a degraded link).",
            lambda r: r.pci.max_link_width,
        ),
        per_row(
            "podres_pci_temperature_celsius",
            "Device temperature (hwmon).",
            lambda r: r.pci.temperature_celsius,
        ),
        per_row("podres_pci_power_watts", "Device power (hwmon).", lambda r: r.pci.power_watts),
        Breakdown(
            "podres_pci_aer_errors",
            "PCIe AER errors by severity and error name.",
            ("severity", "error"),
            _aer,
            counter=True,
        ),
    ),
)


COLLECTOR: Final = PartCollector(
    "pci",
    "PCI link, AER errors, temperature and power of the kubelet's PCI devices",
    joined_rows("pci"),
    _PCI.render,
    needs=frozenset({"sysfs"}),
)
