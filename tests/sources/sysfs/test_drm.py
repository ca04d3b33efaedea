"""DRM cards (``sources/sysfs/drm.py``): amdgpu busy and VRAM, Intel GT frequency (i915
and xe), and the hwmon power, energy and temperature of a card."""

from __future__ import annotations

import os
import re
from pathlib import Path

from podres_exporter.sources.sysfs import read_devices
from podres_sim.host import AmdGpu, IntelGpu, write_device_tree
from tests.sources.sysfs.support import AMD, I915, SYS, pci_of


def test_amdgpu_card(tree: Path) -> None:
    """amdgpu: busy percent as a ratio, VRAM, hwmon power W and temperature °C."""
    devices = read_devices(tree)
    assert [c.card for c in devices.drm] == ["card0", "card1", "card2"]
    amd = devices.drm[0]
    assert (amd.pci_address, amd.driver) == (AMD, "amdgpu")
    assert amd.busy_ratio == 0.37
    assert (amd.vram_used_bytes, amd.vram_total_bytes) == (8 * 2**30, 64 * 2**30)
    assert amd.power_watts == 123.456
    assert amd.temperature_celsius == 45.0
    assert (amd.energy_joules_total, amd.frequency_hz) == (None, None)
    pci = pci_of(devices, AMD)
    assert pci.drm_cards == ("card0",)
    assert (pci.power_watts, pci.temperature_celsius) == (123.456, 45.0)


def test_amdgpu_power_input(tmp_path: Path) -> None:
    """Newer amdgpu exposes power1_input instead of power1_average: read the same."""
    write_device_tree(tmp_path, [AmdGpu(AMD, power_file="power1_input", power_watts=300.5)])
    assert read_devices(tmp_path).drm[0].power_watts == 300.5


def test_intel_cards(tree: Path) -> None:
    """i915: gt_act_freq_mhz in Hz, energy µJ in J; xe: tile0/gt0/freq0/act_freq, hwmon power."""
    by_card = {c.card: c for c in read_devices(tree).drm}
    i915 = by_card["card1"]
    assert (i915.driver, i915.pci_address) == ("i915", I915)
    assert i915.frequency_hz == 1450e6
    assert i915.energy_joules_total == 12.5
    assert (i915.busy_ratio, i915.vram_total_bytes, i915.power_watts) == (None, None, None)
    xe = by_card["card2"]
    assert (xe.driver, xe.frequency_hz, xe.power_watts) == ("xe", 900e6, 80.25)
    assert (xe.temperature_celsius, xe.energy_joules_total) == (61.0, None)


def test_intel_current_frequency_when_no_actual(tmp_path: Path) -> None:
    """Without gt_act_freq_mhz the requested (current) frequency is reported."""
    write_device_tree(tmp_path, [IntelGpu(I915, act_freq_mhz=None, cur_freq_mhz=800)])
    assert read_devices(tmp_path).drm[0].frequency_hz == 800e6


# -------------------------------------------------------------------- this machine


def test_real_sys_cards_exist() -> None:
    """On this machine's /sys: DRM cards are the ones sysfs lists."""
    devices = read_devices(SYS)
    drm = SYS / "class/drm"
    cards = {c for c in (os.listdir(drm) if drm.is_dir() else []) if re.fullmatch(r"card\d+", c)}
    assert {c.card for c in devices.drm} == cards
