"""The DRM collector: AMD and Intel GPU telemetry from DRM cards."""

from __future__ import annotations

from podres_exporter.collectors import drm
from podres_exporter.core.join import Joined
from tests.collectors.support import DRM_ROWS, exposition, node_view

EXPECTED = """\
# HELP podres_drm_busy_ratio Share of time the GPU was busy (amdgpu, 0-1).
# TYPE podres_drm_busy_ratio gauge
podres_drm_busy_ratio{address="0000:c3:00.0",card="card1",container="app",driver="amdgpu",namespace="web",pod="serve"} 0.75
# HELP podres_drm_vram_used_bytes VRAM in use (amdgpu).
# TYPE podres_drm_vram_used_bytes gauge
podres_drm_vram_used_bytes{address="0000:c3:00.0",card="card1",container="app",driver="amdgpu",namespace="web",pod="serve"} 2e+09
# HELP podres_drm_vram_total_bytes VRAM in all (amdgpu).
# TYPE podres_drm_vram_total_bytes gauge
podres_drm_vram_total_bytes{address="0000:c3:00.0",card="card1",container="app",driver="amdgpu",namespace="web",pod="serve"} 6.4e+10
# HELP podres_drm_frequency_hertz Actual GPU frequency (Intel).
# TYPE podres_drm_frequency_hertz gauge
podres_drm_frequency_hertz{address="0000:00:02.0",card="card0",container="",driver="i915",namespace="",pod=""} 1.3e+09
# HELP podres_drm_power_watts GPU power (hwmon).
# TYPE podres_drm_power_watts gauge
podres_drm_power_watts{address="0000:c3:00.0",card="card1",container="app",driver="amdgpu",namespace="web",pod="serve"} 300.0
# HELP podres_drm_temperature_celsius GPU temperature (hwmon).
# TYPE podres_drm_temperature_celsius gauge
podres_drm_temperature_celsius{address="0000:c3:00.0",card="card1",container="app",driver="amdgpu",namespace="web",pod="serve"} 70.0
# HELP podres_drm_energy_joules_total GPU energy (hwmon).
# TYPE podres_drm_energy_joules_total counter
podres_drm_energy_joules_total{address="0000:00:02.0",card="card0",container="",driver="i915",namespace="",pod=""} 1500.25
"""


def test_drm_collector_exact_text() -> None:
    """A free Intel card (frequency, energy) and a held AMD card (busy, VRAM, power, heat)."""
    assert exposition(drm.COLLECTOR, node_view(joined=Joined(drm=DRM_ROWS))) == EXPECTED
