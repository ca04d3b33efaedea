"""The exporter's own build and node: ``podres_build_info`` and ``podres_node_info``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, RenderContext
from podres_exporter.collectors.families import info

BUILD_LABELS = ("version", "revision", "python_version")


def _facts(ctx: RenderContext) -> tuple[str, str, str, str]:
    return (ctx.version, ctx.revision, ctx.python_version, ctx.node)


def _families(facts: tuple[str, str, str, str]) -> Iterator[Metric]:
    yield info(
        "podres_build",
        "The exporter's version, the git commit it was built from (unknown when not known) "
        "and the Python version it runs on.",
        BUILD_LABELS,
        [facts[:3]],
        list,
    )
    yield info(
        "podres_node",
        "The name of the node the exporter runs on (--node-name, else NODE_NAME, else the "
        "host name): join on job and instance to give any series its node.",
        ["node"],
        [facts[3]],
        lambda node: [node],
    )


COLLECTOR: Final = PartCollector(
    "build",
    "the exporter's own version and its node's name",
    _facts,
    _families,
)
