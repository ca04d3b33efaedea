"""Network interfaces from sysfs (SR-IOV functions): link state and traffic counters.

Only interfaces of devices the kubelet knows (allocatable or held) are exported,
each labelled with its holder when exactly one container holds it.
"""

from __future__ import annotations

from typing import Final

from podres_exporter.collectors.base import PartCollector, joined_rows
from podres_exporter.collectors.families import HOLDER_LABELS, Table, holder_values, per_row
from podres_exporter.core.join import NetRow


def _speed(r: NetRow) -> int | None:
    """The link speed in bytes per second (sysfs gives Mbit/s)."""
    return r.net.speed_mbps * 125_000 if r.net.speed_mbps is not None else None


_NET: Final[Table[NetRow]] = Table(
    ("interface", "address", *HOLDER_LABELS),
    lambda r: [r.net.interface, r.net.pci_address or "", *holder_values(r.held.single)],
    (
        per_row(
            "podres_net_up",
            "1 when the interface's operstate is up.",
            lambda r: r.net.operstate == "up",
        ),
        per_row("podres_net_carrier", "1 when the link has carrier.", lambda r: r.net.carrier),
        per_row("podres_net_speed_bytes", "Link speed in bytes per second.", _speed),
        per_row(
            "podres_net_receive_bytes",
            "Bytes received (kernel statistics).",
            lambda r: r.net.rx_bytes,
            counter=True,
        ),
        per_row(
            "podres_net_receive_packets",
            "Packets received (kernel statistics).",
            lambda r: r.net.rx_packets,
            counter=True,
        ),
        per_row(
            "podres_net_receive_errors",
            "Errors received (kernel statistics).",
            lambda r: r.net.rx_errors,
            counter=True,
        ),
        per_row(
            "podres_net_receive_drops",
            "Dropped received (kernel statistics).",
            lambda r: r.net.rx_dropped,
            counter=True,
        ),
        per_row(
            "podres_net_transmit_bytes",
            "Bytes transmitted (kernel statistics).",
            lambda r: r.net.tx_bytes,
            counter=True,
        ),
        per_row(
            "podres_net_transmit_packets",
            "Packets transmitted (kernel statistics).",
            lambda r: r.net.tx_packets,
            counter=True,
        ),
        per_row(
            "podres_net_transmit_errors",
            "Errors transmitted (kernel statistics).",
            lambda r: r.net.tx_errors,
            counter=True,
        ),
        per_row(
            "podres_net_transmit_drops",
            "Dropped transmitted (kernel statistics).",
            lambda r: r.net.tx_dropped,
            counter=True,
        ),
    ),
)


COLLECTOR: Final = PartCollector(
    "net",
    "traffic counters and link state of the kubelet's network functions (SR-IOV)",
    joined_rows("net"),
    _NET.render,
    needs=frozenset({"sysfs"}),
)
