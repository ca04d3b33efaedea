"""PCI functions, network interfaces, InfiniBand ports and DRM cards, from sysfs.

Only devices the kubelet knows (allocatable or held) are exported, each labelled
with its holder when exactly one container holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import InfoMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import HOLDER_LABELS, RenderContext, family, holder_values
from podres_exporter.join import DrmRow, IbRow, NetRow, PciRow


def _stat(name: str) -> Callable[[NetRow], int | None]:
    """The kernel statistic ``name`` of a row's interface."""
    return lambda r: getattr(r.net, name)


def _words(counter: str) -> Callable[[IbRow], int | None]:
    """An InfiniBand data counter, which counts 4-byte words, in bytes."""
    return lambda r: r.port.counters[counter] * 4 if counter in r.port.counters else None


def _numa(n: int | None) -> str:
    return "none" if n is None else str(n)


class PciCollector:
    """``podres_pci_*``."""

    name = "pci"
    default_enabled = True
    description = "PCI link, AER errors, temperature and power of the kubelet's PCI devices"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        joined = ctx.view.joined
        if joined is None:
            return
        rows = joined.pci
        labels = ("address", *HOLDER_LABELS)

        def lv(r: PciRow) -> list[str]:
            return [r.pci.address, *holder_values(r.held.single)]

        info = InfoMetricFamily(
            "podres_pci",
            "One series per PCI function the kubelet knows: ids, driver, NUMA node, SR-IOV PF.",
            labels=["address", "vendor", "device", "class", "driver", "numa_node", "physfn"],
        )
        for r in rows:
            p = r.pci
            info.add_metric(
                [
                    p.address,
                    p.vendor_id,
                    p.device_id,
                    p.class_id,
                    p.driver or "",
                    _numa(p.numa_node),
                    p.physfn or "",
                ],
                {},
            )
        yield info
        yield family(
            "podres_pci_link_speed_transfers_per_second",
            "Current PCIe link speed (16 GT/s = 1.6e10).",
            labels,
            rows,
            lv,
            lambda r: r.pci.link_speed_gts * 1e9 if r.pci.link_speed_gts is not None else None,
        )
        yield family(
            "podres_pci_link_width_lanes",
            "Current PCIe link width.",
            labels,
            rows,
            lv,
            lambda r: r.pci.link_width,
        )
        yield family(
            "podres_pci_max_link_width_lanes",
            "Maximum PCIe link width (a lower current width means a degraded link).",
            labels,
            rows,
            lv,
            lambda r: r.pci.max_link_width,
        )
        yield family(
            "podres_pci_temperature_celsius",
            "Device temperature (hwmon).",
            labels,
            rows,
            lv,
            lambda r: r.pci.temperature_celsius,
        )
        yield family(
            "podres_pci_power_watts",
            "Device power (hwmon).",
            labels,
            rows,
            lv,
            lambda r: r.pci.power_watts,
        )
        aer = [
            (r, severity, name, n)
            for r in rows
            for severity, counts in (
                ("correctable", r.pci.aer_correctable),
                ("nonfatal", r.pci.aer_nonfatal),
                ("fatal", r.pci.aer_fatal),
            )
            for name, n in sorted(counts.items())
            if not name.startswith("TOTAL_")
        ]
        yield family(
            "podres_pci_aer_errors",
            "PCIe AER errors by severity and error name.",
            [*labels, "severity", "error"],
            aer,
            lambda e: [*lv(e[0]), e[1], e[2]],
            lambda e: e[3],
            counter=True,
        )


class NetCollector:
    """``podres_net_*``."""

    name = "net"
    default_enabled = True
    description = "traffic counters and link state of the kubelet's network functions (SR-IOV)"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        joined = ctx.view.joined
        if joined is None:
            return
        rows = joined.net
        labels = ("interface", "address", *HOLDER_LABELS)

        def lv(r: NetRow) -> list[str]:
            return [r.net.interface, r.net.pci_address or "", *holder_values(r.held.single)]

        yield family(
            "podres_net_up",
            "1 when the interface's operstate is up.",
            labels,
            rows,
            lv,
            lambda r: r.net.operstate == "up",
        )
        yield family(
            "podres_net_carrier",
            "1 when the link has carrier.",
            labels,
            rows,
            lv,
            lambda r: r.net.carrier,
        )
        yield family(
            "podres_net_speed_bytes",
            "Link speed in bytes per second.",
            labels,
            rows,
            lv,
            lambda r: r.net.speed_mbps * 125_000 if r.net.speed_mbps is not None else None,
        )
        for direction, prefix in (("receive", "rx"), ("transmit", "tx")):
            for what in ("bytes", "packets", "errors", "dropped"):
                field = f"{prefix}_{what}"
                unit = "drops" if what == "dropped" else what
                yield family(
                    f"podres_net_{direction}_{unit}",
                    f"{what.capitalize()} {'received' if prefix == 'rx' else 'transmitted'} "
                    "(kernel statistics).",
                    labels,
                    rows,
                    lv,
                    _stat(field),
                    counter=True,
                )


class InfinibandCollector:
    """``podres_infiniband_*``."""

    name = "infiniband"
    default_enabled = True
    description = "InfiniBand / RDMA port state and counters of the kubelet's HCAs"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        joined = ctx.view.joined
        if joined is None:
            return
        rows = joined.infiniband
        labels = ("device", "port", *HOLDER_LABELS)

        def lv(r: IbRow) -> list[str]:
            return [r.port.device, str(r.port.port), *holder_values(r.held.single)]

        info = InfoMetricFamily(
            "podres_infiniband_port",
            "One series per port: PCI address, state and rate.",
            labels=["device", "port", "address", "state", "rate"],
        )
        for r in rows:
            p = r.port
            info.add_metric([p.device, str(p.port), p.pci_address or "", p.state, p.rate], {})
        yield info
        yield family(
            "podres_infiniband_port_active",
            "1 when the port state is ACTIVE.",
            labels,
            rows,
            lv,
            lambda r: r.port.state == "ACTIVE",
        )
        # port_*_data counts 4-byte words.
        for name, counter, doc in (
            ("podres_infiniband_port_receive_bytes", "port_rcv_data", "Data received."),
            ("podres_infiniband_port_transmit_bytes", "port_xmit_data", "Data transmitted."),
        ):
            yield family(
                name,
                doc,
                labels,
                rows,
                lv,
                _words(counter),
                counter=True,
            )
        counters = [
            (r, name, n)
            for r in rows
            for name, n in sorted(r.port.counters.items())
            if name not in ("port_rcv_data", "port_xmit_data")
        ]
        yield family(
            "podres_infiniband_port_counter",
            "Every other integer counter of the port (counters/ and hw_counters/), by file name.",
            [*labels, "counter"],
            counters,
            lambda e: [*lv(e[0]), e[1]],
            lambda e: e[2],
            counter=True,
        )


class DrmCollector:
    """``podres_drm_*``."""

    name = "drm"
    default_enabled = True
    description = "AMD (amdgpu) and Intel GPU telemetry from DRM cards"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        joined = ctx.view.joined
        if joined is None:
            return
        rows = joined.drm
        labels = ("card", "address", "driver", *HOLDER_LABELS)

        def lv(r: DrmRow) -> list[str]:
            c = r.card
            return [c.card, c.pci_address or "", c.driver or "", *holder_values(r.held.single)]

        for name, doc, get in (
            (
                "podres_drm_busy_ratio",
                "Share of time the GPU was busy (amdgpu, 0-1).",
                lambda r: r.card.busy_ratio,
            ),
            (
                "podres_drm_vram_used_bytes",
                "VRAM in use (amdgpu).",
                lambda r: r.card.vram_used_bytes,
            ),
            (
                "podres_drm_vram_total_bytes",
                "VRAM in all (amdgpu).",
                lambda r: r.card.vram_total_bytes,
            ),
            (
                "podres_drm_frequency_hertz",
                "Actual GPU frequency (Intel).",
                lambda r: r.card.frequency_hz,
            ),
            ("podres_drm_power_watts", "GPU power (hwmon).", lambda r: r.card.power_watts),
            (
                "podres_drm_temperature_celsius",
                "GPU temperature (hwmon).",
                lambda r: r.card.temperature_celsius,
            ),
        ):
            yield family(name, doc, labels, rows, lv, get)
        yield family(
            "podres_drm_energy_joules",
            "GPU energy (hwmon).",
            labels,
            rows,
            lv,
            lambda r: r.card.energy_joules_total,
            counter=True,
        )
