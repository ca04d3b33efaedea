"""The exporter's own build: ``podres_build_info``."""

from __future__ import annotations

from typing import Final

from podres_exporter.collectors.base import PartCollector
from podres_exporter.collectors.families import info

COLLECTOR: Final = PartCollector(
    "build",
    "the exporter's own version",
    lambda ctx: ctx.version,
    lambda version: [
        info("podres_build", "The exporter's version.", ["version"], [version], lambda v: [v])
    ],
)
