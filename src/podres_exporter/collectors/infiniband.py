"""InfiniBand / RDMA ports from sysfs: state, data counters and every other counter.

Only ports of devices the kubelet knows (allocatable or held) are exported, each
labelled with its holder when exactly one container holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Final

from podres_exporter.collectors.base import PartCollector, joined_rows
from podres_exporter.collectors.families import (
    HOLDER_LABELS,
    Breakdown,
    Info,
    Table,
    holder_values,
    per_row,
)
from podres_exporter.core.join import IbRow

_INFO_LABELS = ("hca", "port", "address", "port_state", "rate")
# Exported in bytes as the receive and transmit families, not among the other counters.
_DATA_COUNTERS = ("port_rcv_data", "port_xmit_data")


def _identity(r: IbRow) -> list[str]:
    p = r.port
    return [p.device, str(p.port), p.pci_address or "", p.state, p.rate]


def _words(counter: str) -> Callable[[IbRow], int | None]:
    """An InfiniBand data counter, which counts 4-byte words, in bytes."""
    return lambda r: r.port.counters[counter] * 4 if counter in r.port.counters else None


def _other_counters(rows: Sequence[IbRow]) -> Iterator[tuple[IbRow, tuple[str], int]]:
    """Every counter of each port but the data counters, by file name."""
    for r in rows:
        for name, n in sorted(r.port.counters.items()):
            if name not in _DATA_COUNTERS:
                yield r, (name,), n


_PORTS: Final[Table[IbRow]] = Table(
    ("hca", "port", *HOLDER_LABELS),
    lambda r: [r.port.device, str(r.port.port), *holder_values(r.held.single)],
    (
        Info(
            "podres_infiniband_port",
            "One series per port: PCI address, state and rate.",
            _INFO_LABELS,
            _identity,
        ),
        per_row(
            "podres_infiniband_port_active",
            "1 when the port state is ACTIVE.",
            lambda r: r.port.state == "ACTIVE",
        ),
        per_row(
            "podres_infiniband_port_receive_bytes",
            "Data received.",
            _words("port_rcv_data"),
            counter=True,
        ),
        per_row(
            "podres_infiniband_port_transmit_bytes",
            "Data transmitted.",
            _words("port_xmit_data"),
            counter=True,
        ),
        Breakdown(
            "podres_infiniband_port_counter",
            "Every other integer counter of the port (counters/ and hw_counters/), by file name.",
            ("counter",),
            _other_counters,
            counter=True,
        ),
    ),
)


COLLECTOR: Final = PartCollector(
    "infiniband",
    "InfiniBand / RDMA port state and counters of the kubelet's HCAs",
    joined_rows("infiniband"),
    _PORTS.render,
    needs=frozenset({"sysfs"}),
)
