"""DRM cards from sysfs: AMD (amdgpu) and Intel GPU telemetry.

Only cards of devices the kubelet knows (allocatable or held) are exported, each
labelled with its holder when exactly one container holds it.
"""

from __future__ import annotations

from typing import Final

from podres_exporter.collectors.base import PartCollector, joined_rows
from podres_exporter.collectors.families import HOLDER_LABELS, Table, holder_values, per_row
from podres_exporter.core.join import DrmRow


def _labels(r: DrmRow) -> list[str]:
    c = r.card
    return [c.card, c.pci_address or "", c.driver or "", *holder_values(r.held.single)]


_CARDS: Final[Table[DrmRow]] = Table(
    ("card", "address", "driver", *HOLDER_LABELS),
    _labels,
    (
        per_row(
            "podres_drm_busy_ratio",
            "Share of time the GPU was busy (amdgpu, 0-1).",
            lambda r: r.card.busy_ratio,
        ),
        per_row(
            "podres_drm_vram_used_bytes", "VRAM in use (amdgpu).", lambda r: r.card.vram_used_bytes
        ),
        per_row(
            "podres_drm_vram_total_bytes",
            "VRAM in all (amdgpu).",
            lambda r: r.card.vram_total_bytes,
        ),
        per_row(
            "podres_drm_frequency_hertz",
            "Actual GPU frequency (Intel).",
            lambda r: r.card.frequency_hz,
        ),
        per_row("podres_drm_power_watts", "GPU power (hwmon).", lambda r: r.card.power_watts),
        per_row(
            "podres_drm_temperature_celsius",
            "GPU temperature (hwmon).",
            lambda r: r.card.temperature_celsius,
        ),
        per_row(
            "podres_drm_energy_joules",
            "GPU energy (hwmon).",
            lambda r: r.card.energy_joules_total,
            counter=True,
        ),
    ),
)


COLLECTOR: Final = PartCollector(
    "drm",
    "AMD (amdgpu) and Intel GPU telemetry from DRM cards",
    joined_rows("drm"),
    _CARDS.render,
    needs=frozenset({"sysfs"}),
)
