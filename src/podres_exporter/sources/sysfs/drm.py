"""DRM cards, ``class/drm/card<N>``: the driver, amdgpu's busy percentage and VRAM,
Intel's GT frequency (i915 and xe), and the card's hwmon power, energy and temperature.
Their files are not held open between reads (a GPU's busy text can get shorter)."""

from __future__ import annotations

import os
import re

from podres_exporter.core.telemetry import DrmCardReading
from podres_exporter.sources.sysfs.attributes import (
    AttributeReader,
    device_pci_address,
    link_name,
    numbered,
)
from podres_exporter.sources.sysfs.hwmon import first_int, hwmon_dirs, scaled
from podres_exporter.sources.sysfs.scope import ReadScope

__all__ = ["CARD", "read_cards"]

CARD = re.compile(r"^card(\d+)$")


def read_cards(
    scope: ReadScope, found: dict[str, list[str]] | None = None
) -> tuple[DrmCardReading, ...]:
    """The cards of the PCI functions selected (every card, without a selection);
    ``found`` (when given) gets each PCI function's cards. Read the plain way, with or
    without a cache."""
    root, reader, selection = scope.root, scope.reader, scope.selection
    base = os.path.join(root, "class", "drm")
    out: list[DrmCardReading] = []
    for card in numbered(base, CARD):
        address = device_pci_address(os.path.join(base, card))
        if found is not None and address is not None:
            found.setdefault(address, []).append(card)
        if selection is not None and address not in selection:
            continue
        reading = _read_card(root, reader, card, address)
        if reading is not None:
            out.append(reading)
    return tuple(out)


def _frequency_mhz(reader: AttributeReader, card_dir: str, device_dir: str) -> int | None:
    """Intel GT frequency: i915's ``gt_act_freq_mhz`` (or ``gt_cur_freq_mhz``), else xe's
    ``device/tile0/gt0/freq0/act_freq`` (or ``cur_freq``)."""
    for path in (
        os.path.join(card_dir, "gt_act_freq_mhz"),
        os.path.join(card_dir, "gt_cur_freq_mhz"),
        os.path.join(device_dir, "tile0", "gt0", "freq0", "act_freq"),
        os.path.join(device_dir, "tile0", "gt0", "freq0", "cur_freq"),
    ):
        value = reader.read_int(path)
        if value is not None:
            return value
    return None


def _read_card(
    root: str, reader: AttributeReader, card: str, address: str | None
) -> DrmCardReading | None:
    card_dir = os.path.join(root, "class", "drm", card)
    device_dir = os.path.join(card_dir, "device")
    driver = link_name(os.path.join(device_dir, "driver"))
    busy = reader.read_int(os.path.join(device_dir, "gpu_busy_percent"))
    hwmons = hwmon_dirs(device_dir)
    mhz = _frequency_mhz(reader, card_dir, device_dir)
    reading = DrmCardReading(
        card=card,
        pci_address=address,
        driver=driver,
        busy_ratio=None if busy is None else busy / 100,
        vram_used_bytes=reader.read_int(os.path.join(device_dir, "mem_info_vram_used")),
        vram_total_bytes=reader.read_int(os.path.join(device_dir, "mem_info_vram_total")),
        frequency_hz=None if mhz is None else mhz * 1e6,
        power_watts=scaled(first_int(reader, hwmons, ("power1_average", "power1_input")), 1e6),
        energy_joules_total=scaled(first_int(reader, hwmons, ("energy1_input",)), 1e6),
        temperature_celsius=scaled(first_int(reader, hwmons, ("temp1_input",)), 1000),
    )
    if not os.path.isdir(card_dir):
        return None
    return reading
