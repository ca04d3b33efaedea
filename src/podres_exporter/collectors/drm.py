"""DRM cards from sysfs: AMD (amdgpu) and Intel GPU telemetry.

Only cards of devices the kubelet knows (allocatable or held) are exported, each
labelled with its holder when exactly one container holds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import RenderContext
from podres_exporter.collectors.families import HOLDER_LABELS, PerRow, Table, holder_values
from podres_exporter.join import DrmRow


def _labels(r: DrmRow) -> list[str]:
    c = r.card
    return [c.card, c.pci_address or "", c.driver or "", *holder_values(r.held.single)]


_CARDS: Final[Table[DrmRow]] = Table(
    ("card", "address", "driver", *HOLDER_LABELS),
    _labels,
    (
        PerRow(
            "podres_drm_busy_ratio",
            "Share of time the GPU was busy (amdgpu, 0-1).",
            lambda r: r.card.busy_ratio,
        ),
        PerRow(
            "podres_drm_vram_used_bytes", "VRAM in use (amdgpu).", lambda r: r.card.vram_used_bytes
        ),
        PerRow(
            "podres_drm_vram_total_bytes",
            "VRAM in all (amdgpu).",
            lambda r: r.card.vram_total_bytes,
        ),
        PerRow(
            "podres_drm_frequency_hertz",
            "Actual GPU frequency (Intel).",
            lambda r: r.card.frequency_hz,
        ),
        PerRow("podres_drm_power_watts", "GPU power (hwmon).", lambda r: r.card.power_watts),
        PerRow(
            "podres_drm_temperature_celsius",
            "GPU temperature (hwmon).",
            lambda r: r.card.temperature_celsius,
        ),
        PerRow(
            "podres_drm_energy_joules",
            "GPU energy (hwmon).",
            lambda r: r.card.energy_joules_total,
            counter=True,
        ),
    ),
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
        yield from _CARDS.render(joined.drm)
